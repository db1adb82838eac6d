/**
 * The archive copier function (lambda/handlers/archive-copier.ts, docs/rebuild.md "Archive
 * layout") run in process on real parts: change-log records read back from kinesalite, and the
 * archive in s3rver through `S3Archive` (lambda/adapters/archive-s3.ts), the adapter the function
 * deploys with. The test stands in for Lambda's event source mapping: per shard it hands batches
 * of random sizes to one of several handler instances (execution environments, each with its own
 * memory of the markers it wrote), advances the checkpoint only on a response without batch item
 * failures, retries a failed batch (halved, as bisect does, or whole), and sometimes loses a
 * successful response (a timeout after the objects were stored), so the same batch is copied again.
 * The archive fails a random share of its requests.
 *
 * Randomized over seeds (`CDC_PROPERTY_SEED`): `CDC_ARCHIVE_COPIER_MEMORY_RUNS` runs (default 300)
 * over an in-memory archive with S3's listing semantics (a stand-in written here: s3rver takes
 * about a second per run), and `CDC_ARCHIVE_COPIER_RUNS` runs (default 4) over s3rver. Each run
 * checks: every marker names as its predecessor exactly the highest sequence number archived
 * before it (whichever environment archived it), so the chain proves continuity; the metrics count
 * the records stored and the failed batches. The s3rver runs also check: the replay
 * reader over the same S3 archive finds the history complete and reads each table's events, from
 * the archive and then the stream, equal to what the stream holds from where the copier started;
 * a marker removed from the middle is a named hole; every request was a put, get or list under
 * the copier's prefix, every put named the archive's KMS key (request shapes captured with an AWS
 * SDK middleware).
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { createRequire } from 'node:module';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { DeleteObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { PutRecordsCommand, type _Record as KinesisRecord, type KinesisClient } from '@aws-sdk/client-kinesis';
import { NodeHttpHandler } from '@smithy/node-http-handler';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { S3Archive } from '../../lambda/adapters/archive-s3.ts';
import { toKinesisStreamEvent } from '../../lambda/adapters/kinesis-event.ts';
import { ReplayReader } from '../../lambda/adapters/replay-reader.ts';
import { compareSequenceNumbers } from '../../lambda/core/sink/apply-plan.ts';
import type { Archive } from '../../lambda/core/rebuild/archive.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { parseMarker, ReplayHoleError, type BatchMarker } from '../../lambda/core/rebuild/replay.ts';
import { createArchiveCopierHandler } from '../../lambda/handlers/archive-copier.ts';
import { MetricName } from '../../contracts/metrics.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { createStream, readShards } from '../helpers/kinesis-read.ts';

const RUNS = Number(process.env.CDC_ARCHIVE_COPIER_RUNS ?? 4);
const MEMORY_RUNS = Number(process.env.CDC_ARCHIVE_COPIER_MEMORY_RUNS ?? 300);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const BUCKET = 'cdc-archive';
const KMS = 'arn:aws:kms:us-east-1:000000000000:key/0b1c2d3e-4f50-6172-8394-a5b6c7d8e9f0';
const SOURCE = 'app';
const TABLES = ['public.a', 'public.b', 'public.c'];
const STREAM = 'change-log';
const FAR: string = 'f'.repeat(24);

interface S3rverInstance {
  run(): Promise<{ port: number }>;
  close(): Promise<void>;
}
type S3rverCtor = new (opts: Record<string, unknown>) => S3rverInstance;

let server: S3rverInstance;
let s3: S3Client;
let dir: string;
let kin: Kinesalite;
let kinesis: KinesisClient;
let streamArn: string;
let shards: Map<string, KinesisRecord[]>;
/** Every S3 request while capturing: command name and input. */
const requests: Array<{ command: string; input: Record<string, unknown> }> = [];
let capturing = false;

class Flaky extends Error {}

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-archive-copier-'));
  const S3rver = createRequire(import.meta.url)('s3rver') as S3rverCtor;
  server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory: dir, resetOnClose: true });
  const [{ port }, k] = await Promise.all([server.run(), startKinesalite()]);
  kin = k;
  s3 = new S3Client({
    endpoint: `http://127.0.0.1:${port}`,
    forcePathStyle: true,
    region: 'us-east-1',
    credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
    requestHandler: new NodeHttpHandler(),
  });
  s3.middlewareStack.add(
    (next, context) => async (args) => {
      if (capturing) requests.push({ command: context.commandName ?? '?', input: args.input as Record<string, unknown> });
      return next(args);
    },
    { step: 'initialize', name: 'captureRequests' },
  );
  await new S3Archive(s3, BUCKET).ensureBucket();
  kinesis = kinesisClient(kin.endpoint);
  streamArn = await createStream(kinesis, STREAM, 3);
  // A history of three tables, and a few records that are not change events (kept under _other).
  const rand = seededRandom(12345);
  const events: string[] = [];
  let lsn = 0x1000n;
  for (let i = 0; i < 240; i++) {
    lsn += BigInt(1 + Math.floor(rand() * 5));
    const table = TABLES[Math.floor(rand() * TABLES.length)]!;
    const id = 1 + Math.floor(rand() * 20);
    const e: ChangeEvent = {
      v: ENVELOPE_VERSION,
      source: SOURCE,
      table,
      op: 'update',
      key: { id },
      after: { id, v: `v${i}` },
      before: null,
      missing: [],
      position: makePosition(lsn, 0),
      commitTs: '2026-12-01T10:00:00.000Z',
      txId: String(i),
      schemaVersion: 1,
      capture: 'slot',
      synthetic: false,
    };
    events.push(i % 37 === 5 ? `not json ${i}` : JSON.stringify(e));
  }
  for (let i = 0; i < events.length; i += 100) {
    await kinesis.send(
      new PutRecordsCommand({
        StreamName: STREAM,
        Records: events.slice(i, i + 100).map((d, j) => ({ PartitionKey: `k${(i + j) % 17}`, Data: Buffer.from(d) })),
      }),
    );
  }
  shards = await readShards(kinesis, STREAM);
}, 120_000);

afterAll(async () => {
  s3?.destroy();
  kinesis?.destroy();
  await server?.close();
  await kin?.stop();
  await rm(dir, { recursive: true, force: true });
});

/** An archive that fails a share of its requests before sending them (an S3 outage, throttling). */
function flaky(inner: Archive, rand: () => number, p: number): Archive {
  const maybe = (what: string): void => {
    if (rand() < p) throw new Flaky(`injected ${what} failure`);
  };
  return {
    location: inner.location,
    put: async (k, b) => (maybe('put'), inner.put(k, b)),
    get: async (k) => (maybe('get'), inner.get(k)),
    list: async (p2, after) => (maybe('list'), inner.list(p2, after)),
  };
}

/** Metrics that keep what they would publish. */
function recordingMetrics(): { metrics: Metrics; sums: Map<string, number> } {
  const metrics = new Metrics({ namespace: 'CdcPlatform', serviceName: 'cdc-archive-copier' });
  const sums = new Map<string, number>();
  vi.spyOn(metrics, 'publishStoredMetrics').mockImplementation(() => {
    const out = metrics.serializeMetrics() as unknown as Record<string, unknown>;
    for (const name of Object.values(MetricName)) if (typeof out[name] === 'number') sums.set(name, (sums.get(name) ?? 0) + (out[name] as number));
    metrics.clearMetrics();
    return metrics;
  });
  return { metrics, sums };
}

const text = (r: KinesisRecord): string => Buffer.from(r.Data!).toString('utf8');

/** An archive in memory with S3's listing semantics (sorted keys, prefix, start-after): for many seeds where s3rver would be too slow. */
class MemoryArchive implements Archive {
  readonly location = 'memory';
  private readonly objects = new Map<string, Buffer>();
  async put(key: string, body: string | Buffer): Promise<void> {
    this.objects.set(key, Buffer.from(body));
  }
  async get(key: string): Promise<Buffer> {
    const b = this.objects.get(key);
    if (!b) throw new Error(`NoSuchKey ${key}`);
    return b;
  }
  async list(prefix = '', startAfter?: string): Promise<string[]> {
    return [...this.objects.keys()].filter((k) => k.startsWith(prefix) && (startAfter === undefined || k > startAfter)).sort();
  }
}

/**
 * One run of the event source mapping stand-in over `archive` (see the module comment); checks
 * the metrics and that every marker's predecessor is exactly the highest sequence number archived
 * before it. Returns where each shard's copy started and stopped.
 */
async function copyRun(rand: () => number, archive: Archive, where: string) {
  const failing = flaky(archive, rand, rand() * 0.2);
  const { metrics, sums } = recordingMetrics();
  const logger = new Logger({ serviceName: 'cdc-archive-copier', logLevel: 'SILENT' });
  const envs = Array.from({ length: 1 + Math.floor(rand() * 3) }, () => createArchiveCopierHandler({ archive: failing, metrics, logger }));
  // Per shard: the copier starts at a random record (deployed on a stream that already had records) and stops at another (at most 24 later).
  const plan = [...shards].map(([shardId, records]) => {
    const from = Math.floor(rand() * (records.length + 1) * 0.5);
    const upTo = from + Math.floor(rand() * (Math.min(records.length - from, 24) + 1));
    return { shardId, records, from, upTo, at: from, size: 0 };
  });
  let failures = 0;
  let stored = 0;
  for (let guard = 0; guard < 10_000; guard++) {
    const open = plan.filter((p) => p.at < p.upTo);
    if (open.length === 0) break;
    const p = open[Math.floor(rand() * open.length)]!;
    const size = p.size > 0 ? p.size : 1 + Math.floor(rand() * 8);
    const batch = p.records.slice(p.at, Math.min(p.upTo, p.at + size));
    const event = toKinesisStreamEvent(batch, { streamArn, shardId: p.shardId });
    const handler = envs[Math.floor(rand() * envs.length)]!;
    const response = await handler(event);
    if (response.batchItemFailures.length > 0) {
      expect(response.batchItemFailures, where).toEqual([{ itemIdentifier: batch[0]!.SequenceNumber }]);
      failures++;
      // Bisect halves the failed batch; otherwise the same batch again.
      p.size = rand() < 0.5 ? Math.max(1, Math.ceil(batch.length / 2)) : batch.length;
      continue;
    }
    stored += batch.length;
    p.size = 0;
    // A response lost after the objects were stored: the same batch is delivered again.
    if (rand() < 0.1) continue;
    p.at += batch.length;
  }
  expect(
    plan.every((p) => p.at >= p.upTo),
    where,
  ).toBe(true);
  expect(sums.get(MetricName.ARCHIVE_RECORDS) ?? 0, where).toBe(stored);
  expect(sums.get(MetricName.ARCHIVE_COPY_ERRORS) ?? 0, where).toBe(failures);

  // The chain: each marker's predecessor is exactly the highest sequence number archived before it.
  const markers = (await archive.list('change-log/batches/')).map((k) => parseMarker(k.slice('change-log/'.length)));
  expect(
    markers.every((m) => m !== null),
    where,
  ).toBe(true);
  const parsed = markers as BatchMarker[];
  for (const m of parsed) {
    let expected: string | null = null;
    for (const o of parsed)
      if (o.shard === m.shard && compareSequenceNumbers(o.lastSeq, m.firstSeq) < 0 && (expected === null || compareSequenceNumbers(o.lastSeq, expected) > 0))
        expected = o.lastSeq;
    expect(m.prevSeq, `${where}: marker ${m.key}`).toBe(expected);
  }
  for (const p of plan) {
    const mine = parsed.filter((m) => m.shard === p.shardId);
    if (p.upTo > p.from)
      expect(
        mine.some((m) => m.lastSeq === p.records[p.upTo - 1]!.SequenceNumber),
        where,
      ).toBe(true);
    else expect(mine, where).toEqual([]);
  }
  return { plan, markers: parsed };
}

describe('archive copier function (kinesalite records; s3rver, and an in-memory archive for many seeds)', () => {
  it(`stores whole batches with an exact marker chain across execution environments, retries and bisects (in memory, ${MEMORY_RUNS} runs)`, async () => {
    console.log(
      `archive copier property (memory): seed ${SEED}, ${MEMORY_RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED}, CDC_ARCHIVE_COPIER_MEMORY_RUNS=${MEMORY_RUNS})`,
    );
    const seeds = seededRandom(SEED ^ 0x2545f491);
    for (let run = 0; run < MEMORY_RUNS; run++) {
      const seed = Math.floor(seeds() * 0x7fffffff);
      await copyRun(seededRandom(seed), new MemoryArchive(), `memory run ${run} seed ${seed}`);
    }
  }, 300_000);

  it(`on S3 (s3rver): the same, with the request shapes, and the replay reader reads the archive back (${RUNS} runs)`, async () => {
    console.log(`archive copier property (s3rver): seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED}, CDC_ARCHIVE_COPIER_RUNS=${RUNS})`);
    const seeds = seededRandom(SEED);
    let holes = 0;
    for (let run = 0; run < RUNS; run++) {
      const seed = Math.floor(seeds() * 0x7fffffff);
      const where = `run ${run} seed ${seed}`;
      const archive = new S3Archive(s3, BUCKET, `r${run}/`, KMS);
      capturing = true;
      requests.length = 0;
      const { plan, markers } = await copyRun(seededRandom(seed), archive, where);
      capturing = false;

      // Request shapes: only puts, gets and lists, under the run's copier prefix; every put names the key.
      expect(requests.length, where).toBeGreaterThan(0);
      for (const r of requests) {
        expect(['PutObjectCommand', 'GetObjectCommand', 'ListObjectsV2Command'], `${where}: ${r.command}`).toContain(r.command);
        expect(r.input.Bucket, where).toBe(BUCKET);
        const key = String(r.input.Key ?? r.input.Prefix);
        expect(key.startsWith(`r${run}/change-log/`), `${where}: ${key}`).toBe(true);
        if (r.command === 'PutObjectCommand') expect([r.input.ServerSideEncryption, r.input.SSEKMSKeyId], where).toEqual(['aws:kms', KMS]);
      }

      // The replay reader over the same archive and the stream: complete, each table's events from where the copier started.
      const reader = new ReplayReader({ archive, kinesis, stream: STREAM });
      for (const table of TABLES) {
        const history = await reader.checkHistory(SOURCE, table);
        expect(history.unplaced, where).toEqual([]);
        expect(history.gaps, where).toEqual([]);
        const got = await reader.read({ source: SOURCE, table, from: '0'.repeat(24), to: FAR }, history);
        const expected = plan
          .flatMap((p) => p.records.slice(p.upTo > p.from ? p.from : 0))
          .map(text)
          .filter((t) => t.startsWith('{'))
          .map((t) => JSON.parse(t) as ChangeEvent)
          .filter((e) => e.table === table)
          .sort((x, y) => (x.position < y.position ? -1 : x.position > y.position ? 1 : 0));
        expect(
          got.events.map((e) => `${e.position}:${e.after?.v}`),
          `${where}: ${table}`,
        ).toEqual(expected.map((e) => `${e.position}:${e.after?.v}`));
      }

      // A marker removed from the middle of the chain (not a shard's first, one that no other marker's range covers, and that a later marker names) is a named hole.
      const victim = markers.find(
        (v) =>
          v.prevSeq !== null &&
          markers.some((m) => m.prevSeq === v.lastSeq) &&
          !markers.some(
            (o) =>
              o.shard === v.shard &&
              (o.firstSeq !== v.firstSeq || o.lastSeq !== v.lastSeq) &&
              compareSequenceNumbers(o.firstSeq, v.lastSeq) <= 0 &&
              compareSequenceNumbers(v.lastSeq, o.lastSeq) <= 0,
          ),
      );
      if (victim) {
        await s3.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: `r${run}/change-log/${victim.key}` }));
        await expect(reader.checkHistory(SOURCE, TABLES[0]!), where).rejects.toThrow(ReplayHoleError);
        holes++;
      }
    }
    expect(holes).toBeGreaterThan(0);
  }, 300_000);

  it('a batch of two shards, or out of order, is refused whole and stores nothing', async () => {
    const archive = new S3Archive(s3, BUCKET, 'bad/', KMS);
    const logger = new Logger({ serviceName: 'cdc-archive-copier', logLevel: 'SILENT' });
    const { metrics, sums } = recordingMetrics();
    const handler = createArchiveCopierHandler({ archive, metrics, logger });
    const [[a, ra], [b, rb]] = [...shards] as Array<[string, KinesisRecord[]]> as [[string, KinesisRecord[]], [string, KinesisRecord[]]];
    const mixed = {
      Records: [
        ...toKinesisStreamEvent(ra!.slice(0, 2), { streamArn, shardId: a! }).Records,
        ...toKinesisStreamEvent(rb!.slice(0, 1), { streamArn, shardId: b! }).Records,
      ],
    };
    expect(await handler(mixed)).toEqual({ batchItemFailures: [{ itemIdentifier: ra![0]!.SequenceNumber }] });
    const reversed = toKinesisStreamEvent([ra![1]!, ra![0]!], { streamArn, shardId: a! });
    expect(await handler(reversed)).toEqual({ batchItemFailures: [{ itemIdentifier: ra![1]!.SequenceNumber }] });
    expect(await archive.list()).toEqual([]);
    expect(sums.get(MetricName.ARCHIVE_COPY_ERRORS)).toBe(2);
    expect(await handler({ Records: [] })).toEqual({ batchItemFailures: [] });
  });
});
