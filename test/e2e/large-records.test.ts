/**
 * Nothing truncated, nothing refused for size (docs/large-records.md), against the real
 * stand-ins: DynamoDB Local (control plane), s3rver (the S3 payload store, as on AWS) and a
 * folder (the archive interface, as `cdc local`), kinesalite (the change log) and embedded
 * PostgreSQL (the warehouse).
 * - A dead letter over what one DynamoDB item holds is kept whole in the payload store and read
 *   back whole; the item points at it. Without a payload store it is cut and says so.
 * - An event over Kinesis's 1 MiB record limit is stored out of line and the change log carries
 *   its claim check; the applier resolves it and the warehouse gets every value. A claim check
 *   whose payload was tampered with, or that points outside the store, is a dead letter.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRequire } from 'node:module';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { CreateBucketCommand, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import type { KinesisClient } from '@aws-sdk/client-kinesis';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startDynamoDbLocal, QUICK_START_JVM_OPTIONS, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { FolderArchive, archivePayloadStore } from '../../local/archive.ts';
import { dynamoDbClient, kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { KinesisChangeLog, MAX_RECORD_BYTES } from '../../lambda/adapters/change-log-kinesis.ts';
import { S3PayloadStore } from '../../lambda/adapters/payload-store-s3.ts';
import { Normalizer } from '../../lambda/core/capture/normalize.ts';
import { TableConfigIndex } from '../../lambda/core/tables/table-config.ts';
import { buildSlotRecord } from '../../lambda/core/capture/slot-record.ts';
import type { DeadLetter } from '../../lambda/core/shared/control-plane.ts';
import { createWarehouseApplier } from '../../lambda/handlers/warehouse-applier.ts';
import { createStream, readShards } from '../helpers/kinesis-read.ts';

interface S3rverInstance {
  run(): Promise<{ port: number }>;
  close(): Promise<void>;
}
type S3rverCtor = new (opts: Record<string, unknown>) => S3rverInstance;

let server: S3rverInstance;
let s3: S3Client;
let dir: string;
let ddb: DynamoDbLocal;
let kin: Kinesalite;
let cluster: PostgresCluster;
let dynamo: DynamoDBClient;
let kinesis: KinesisClient;

beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-large-'));
  const S3rver = createRequire(import.meta.url)('s3rver') as S3rverCtor;
  server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: path.join(dir, 's3'), resetOnClose: true });
  const [{ port }, d, k, c] = await Promise.all([
    server.run(),
    startDynamoDbLocal({ jvmOptions: QUICK_START_JVM_OPTIONS }),
    startKinesalite(),
    startPostgres({ fast: true }),
  ]);
  [ddb, kin, cluster] = [d, k, c];
  s3 = new S3Client({
    endpoint: `http://127.0.0.1:${port}`,
    forcePathStyle: true,
    region: 'us-east-1',
    credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    requestHandler: new NodeHttpHandler(),
  });
  await s3.send(new CreateBucketCommand({ Bucket: 'payloads' }));
  dynamo = dynamoDbClient(ddb.endpoint);
  kinesis = kinesisClient(kin.endpoint);
  await createControlTable(dynamo, 'control');
}, 180_000);

afterAll(async () => {
  s3?.destroy();
  dynamo?.destroy();
  kinesis?.destroy();
  await Promise.all([server?.close(), ddb?.stop(), kin?.stop(), cluster?.stop()]);
  await rm(dir, { recursive: true, force: true });
});

const letter = (record: string, stage: string): DeadLetter => ({
  at: new Date().toISOString(),
  stage,
  source: null,
  table: null,
  code: 'INVALID_RECORD',
  reason: 'test',
  origin: 'raw/shard-0/1',
  record,
  truncated: false,
});
// 1.5 MiB of text with multi-byte characters, so a byte cut would show.
const BIG = 'é€ab'.repeat(200_000);

describe('dead letters keep the whole record', () => {
  it('in S3 (s3rver) and in the archive folder: stored out of line, listed back whole', async () => {
    const stores = { s3: new S3PayloadStore(s3, 'payloads', 'dl/'), folder: archivePayloadStore(new FolderArchive(path.join(dir, 'archive'))) };
    for (const [name, store] of Object.entries(stores)) {
      const cp = new DynamoDbControlPlane(dynamo, 'control', store);
      await cp.putDeadLetter(letter(BIG, `big-${name}`));
      await cp.putDeadLetter(letter('small', `big-${name}`));
      const [big, small] = await cp.listDeadLetters(`big-${name}`);
      expect(big!.record.length, name).toBe(BIG.length);
      expect(big!.record === BIG, name).toBe(true);
      expect(big!.truncated).toBe(false);
      expect(big!.recordRef).toMatch(name === 's3' ? /^s3:\/\/payloads\/dl\/dead-letters\// : /^archive:payloads\/dead-letters\//);
      expect(small).toMatchObject({ record: 'small', truncated: false });
      expect(small!.recordRef).toBeUndefined();
      // A reader without the payload store sees the preview and knows it is one.
      const [preview] = await new DynamoDbControlPlane(dynamo, 'control').listDeadLetters(`big-${name}`);
      expect(preview).toMatchObject({ truncated: true, recordRef: big!.recordRef });
    }
  }, 60_000);

  it('without a payload store the record is cut to fit one item, and says so', async () => {
    const cp = new DynamoDbControlPlane(dynamo, 'control');
    await cp.putDeadLetter(letter(BIG, 'no-store'));
    const [l] = await cp.listDeadLetters('no-store');
    expect(l!.truncated).toBe(true);
    expect(Buffer.byteLength(l!.record)).toBeLessThanOrEqual(300 * 1024);
  }, 60_000);
});

describe('an event over the record limit travels as a claim check', () => {
  it('is stored out of line, published as a claim check, and applied whole; a tampered or foreign claim is a dead letter', async () => {
    const store = new S3PayloadStore(s3, 'payloads', 'events/');
    const cp = new DynamoDbControlPlane(dynamo, 'control', store);
    await createStream(kinesis, 'big-log', 2);
    const changeLog = new KinesisChangeLog(kinesis, 'big-log');
    const tables = new TableConfigIndex([{ table: 'public.wide', deleteMode: 'soft', mask: [], exclude: [] }]);
    const quiet = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
    const normalizer = new Normalizer({
      source: 'big',
      tables,
      controlPlane: cp,
      changeLog,
      metrics: { count: () => undefined, milliseconds: () => undefined },
      logger: quiet,
      payloads: store,
    });
    // 20 columns of 60,000 characters: 1.2 MB as one event, every column within the warehouse's 64 KB.
    const cols = Array.from({ length: 20 }, (_, i) => ({ name: `c${i}`, type: 'text', value: String.fromCharCode(97 + i).repeat(60_000) }));
    const tx = { source: 'big', xid: '9', commitLsn: '0/16B3748', commitTs: '2026-12-01T10:00:00.000Z' };
    const raw = buildSlotRecord(
      tx,
      0,
      { table: 'public.wide', op: 'insert', columns: [{ name: 'id', type: 'integer', value: 1 }, ...cols], oldKey: null, unchanged: [] },
      ['id'],
    );
    const batch = normalizer.startBatch();
    expect(await batch.add({ text: JSON.stringify(raw), origin: 'raw/shard-0/1' })).toBe('buffered');
    await batch.flush();
    expect(await cp.listDeadLetters('normalizer')).toEqual([]);
    const published = [...(await readShards(kinesis, 'big-log')).values()].flat();
    expect(published).toHaveLength(1);
    const claimText = Buffer.from(published[0]!.Data!).toString('utf8');
    expect(Buffer.byteLength(claimText)).toBeLessThan(MAX_RECORD_BYTES);
    const claim = JSON.parse(claimText) as { claim: { ref: string; bytes: number } };
    expect(claim.claim.bytes).toBeGreaterThan(MAX_RECORD_BYTES);
    expect(claim.claim.ref).toMatch(/^s3:\/\/payloads\/events\/claims\/big\/public.wide\//);

    await cluster.createDatabase('bigdw');
    const pool = new pg.Pool({ connectionString: cluster.url('bigdw'), max: 2 });
    pool.on('error', () => undefined);
    try {
      const applier = createWarehouseApplier({
        controlPlane: cp,
        pool,
        sinkId: 'wh',
        metrics: new Metrics({ namespace: 'test' }),
        logger: new Logger({ logLevel: 'ERROR' }),
        payloads: store,
      });
      const out = await applier.applyRecords([{ sequenceNumber: '1', origin: 'big-log/shard-0/1', text: claimText }]);
      expect(out.failed).toEqual([]);
      expect(await cp.listDeadLetters('wh')).toEqual([]);
      const row = (await pool.query('SELECT id::int AS id, length(c0) AS l0, length(c19) AS l19, c7 = repeat($1, 60000) AS same FROM big_public.wide', ['h']))
        .rows;
      expect(row).toEqual([{ id: 1, l0: 60_000, l19: 60_000, same: true }]);

      // Tampered payload, and a claim check pointing outside the store: dead letters with named errors, nothing applied.
      const key = claim.claim.ref.slice('s3://payloads/'.length);
      await s3.send(new PutObjectCommand({ Bucket: 'payloads', Key: key, Body: Buffer.from('{}') }));
      const foreign = JSON.stringify({ ...claim, claim: { ...claim.claim, ref: 's3://someone-elses/x' } });
      const bad = await applier.applyRecords([
        { sequenceNumber: '2', origin: 'big-log/shard-0/2', text: claimText },
        { sequenceNumber: '3', origin: 'big-log/shard-0/3', text: foreign },
      ]);
      expect(bad.failed).toEqual([]);
      expect((await cp.listDeadLetters('wh')).map((l) => l.code)).toEqual(['PAYLOAD_MISMATCH', 'PAYLOAD_REF']);
    } finally {
      await pool.end();
    }
  }, 120_000);
});
