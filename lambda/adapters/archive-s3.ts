/**
 * The change-log archive in an S3 bucket (the archive interface of lambda/core/rebuild/archive.ts): on
 * AWS the ChangeLog's archive bucket, under one prefix (docs/rebuild.md, "Archive layout");
 * locally s3rver (path-style addressing, checksums only when required). Objects are encrypted
 * with the bucket's KMS key, or with `kmsKeyId` when one is given (`aws:kms` and the key named
 * on every put). Keys are checked (`checkArchiveKey`) before any request.
 */
import { CreateBucketCommand, GetObjectCommand, HeadBucketCommand, ListObjectsV2Command, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { checkArchiveKey, type Archive } from '../core/rebuild/archive.ts';

export class S3Archive implements Archive {
  constructor(
    private readonly s3: S3Client,
    readonly bucket: string,
    readonly prefix = '',
    /** KMS key for server-side encryption of puts; omitted: the bucket's default encryption. */
    private readonly kmsKeyId?: string,
  ) {}

  get location(): string {
    return `s3://${this.bucket}/${this.prefix}`;
  }

  /** Creates the bucket if it does not exist (local stand-ins; on AWS the ChangeLog owns the bucket). */
  async ensureBucket(): Promise<void> {
    try {
      await this.s3.send(new HeadBucketCommand({ Bucket: this.bucket }));
    } catch {
      await this.s3.send(new CreateBucketCommand({ Bucket: this.bucket }));
    }
  }

  async put(key: string, body: string | Buffer): Promise<void> {
    checkArchiveKey(key);
    await this.s3.send(
      new PutObjectCommand({
        Bucket: this.bucket,
        Key: this.prefix + key,
        Body: typeof body === 'string' ? Buffer.from(body) : body,
        ...(this.kmsKeyId ? { ServerSideEncryption: 'aws:kms', SSEKMSKeyId: this.kmsKeyId } : {}),
      }),
    );
  }

  async get(key: string): Promise<Buffer> {
    checkArchiveKey(key);
    const out = await this.s3.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }));
    return Buffer.from(await out.Body!.transformToByteArray());
  }

  async list(prefix = '', startAfter?: string): Promise<string[]> {
    const keys: string[] = [];
    let token: string | undefined;
    do {
      const out = await this.s3.send(
        new ListObjectsV2Command({
          Bucket: this.bucket,
          Prefix: this.prefix + prefix,
          ContinuationToken: token,
          // StartAfter is ignored by S3 once a continuation token is sent; sent on the first page only.
          ...(startAfter !== undefined && token === undefined ? { StartAfter: this.prefix + startAfter } : {}),
        }),
      );
      for (const o of out.Contents ?? []) if (o.Key) keys.push(o.Key.slice(this.prefix.length));
      token = out.IsTruncated ? out.NextContinuationToken : undefined;
    } while (token);
    return keys.sort();
  }
}
