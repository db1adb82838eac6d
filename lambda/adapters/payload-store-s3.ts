/**
 * The payload store on S3 (docs/large-records.md): objects under one prefix of one bucket,
 * encrypted with the bucket's KMS key (`aws:kms`, and the key id when one is given), references
 * `s3://<bucket>/<key>`. `get` refuses a reference to another bucket or outside the prefix, so a
 * claim check read from the log can only make the applier read this store.
 */
import { GetObjectCommand, PutObjectCommand, type S3Client } from '@aws-sdk/client-s3';
import { PayloadRefError, type PayloadStore } from '../core/shared/payload-store.ts';

export class S3PayloadStore implements PayloadStore {
  constructor(
    private readonly s3: S3Client,
    readonly bucket: string,
    readonly prefix = '',
    /** KMS key for server-side encryption; omitted: the bucket's default encryption. */
    private readonly kmsKeyId?: string,
  ) {}

  async put(key: string, body: Buffer): Promise<string> {
    const Key = this.prefix + key;
    await this.s3.send(
      new PutObjectCommand({ Bucket: this.bucket, Key, Body: body, ...(this.kmsKeyId ? { ServerSideEncryption: 'aws:kms', SSEKMSKeyId: this.kmsKeyId } : {}) }),
    );
    return `s3://${this.bucket}/${Key}`;
  }

  async get(ref: string): Promise<Buffer> {
    const m = /^s3:\/\/([^/]+)\/(.+)$/.exec(ref);
    if (!m) throw new PayloadRefError(ref, 'is not an s3:// reference');
    if (m[1] !== this.bucket) throw new PayloadRefError(ref, `is not in this store's bucket ${this.bucket}`);
    if (!m[2]!.startsWith(this.prefix) || m[2]!.split('/').includes('..'))
      throw new PayloadRefError(ref, `is not under this store's prefix ${JSON.stringify(this.prefix)}`);
    const out = await this.s3.send(new GetObjectCommand({ Bucket: this.bucket, Key: m[2]! }));
    return Buffer.from(await out.Body!.transformToByteArray());
  }
}
