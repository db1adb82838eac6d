/** The archive interface on an S3 API (s3rver), with the archive copier writing to it. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRequire } from 'node:module';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { S3Client } from '@aws-sdk/client-s3';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { S3Archive } from '../../lambda/adapters/archive-s3.ts';
import { createArchiveCopier } from '../../lambda/core/rebuild/archive.ts';
import { toKinesisStreamEvent } from '../../lambda/adapters/kinesis-event.ts';

interface S3rverInstance {
  run(): Promise<{ port: number }>;
  close(): Promise<void>;
}
type S3rverCtor = new (opts: Record<string, unknown>) => S3rverInstance;

let server: S3rverInstance;
let s3: S3Client;
let dir: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-s3rver-'));
  const S3rver = createRequire(import.meta.url)('s3rver') as S3rverCtor;
  server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: dir, resetOnClose: true });
  const { port } = await server.run();
  // s3rver needs path-style addressing and stores checksum framing unless checksums are only sent when required.
  s3 = new S3Client({
    endpoint: `http://127.0.0.1:${port}`,
    forcePathStyle: true,
    region: 'us-east-1',
    credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    requestHandler: new NodeHttpHandler(),
  });
});

afterAll(async () => {
  s3?.destroy();
  await server?.close();
  await rm(dir, { recursive: true, force: true });
});

describe('S3 archive', () => {
  it('stores, lists (flat prefixes) and reads objects, and the copier writes batches to it', async () => {
    const archive = new S3Archive(s3, 'cdc-archive', 'local/');
    await archive.ensureBucket();
    await archive.ensureBucket(); // idempotent
    expect(archive.location).toBe('s3://cdc-archive/local/');
    await archive.put('a/1', 'one\n');
    const copy = createArchiveCopier({ archive });
    await copy(
      toKinesisStreamEvent(
        [{ SequenceNumber: '7', PartitionKey: 'k', Data: Buffer.from('{"e":1}'), ApproximateArrivalTimestamp: new Date(Date.UTC(2026, 4, 6, 7, 8, 9)) }],
        {
          streamArn: 'arn:aws:kinesis:us-east-1:000000000000:stream/cdc-change-log',
          shardId: 'shardId-000000000001',
        },
      ),
    );
    expect(await archive.list()).toEqual(['a/1', 'change-log/2026/05/06/07/change-log-2026-05-06-07-08-09-shardId-000000000001-7-7']);
    expect(await archive.list('change-log/')).toHaveLength(1);
    expect((await archive.get('change-log/2026/05/06/07/change-log-2026-05-06-07-08-09-shardId-000000000001-7-7')).toString()).toBe('{"e":1}\n');
    expect((await archive.get('a/1')).toString()).toBe('one\n');
  });
});
