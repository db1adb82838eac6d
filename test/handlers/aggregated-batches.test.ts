/**
 * The change log's consumers on aggregated records (docs/architecture.md, "5.1 The change event"):
 * events published by the producer with aggregation to a multi-shard kinesalite stream (a shard split
 * in the middle, so some aggregates land on a shard they were not meant for), read back shard by
 * shard and handed as Lambda Kinesis batches of random sizes (seed printed) to
 * - the warehouse applier on embedded PostgreSQL: the view ends as the events say, nothing failed or dead-lettered;
 * - the archive copier: the archive's table objects hold one event per line, every event, none from a misplaced aggregate.
 * And the partial-batch response when an event inside an aggregate fails: its whole aggregate (and
 * every later record) is reported by its Kinesis sequence number, and the retry re-applies it whole.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import os from 'node:os';
import path from 'node:path';
import { mkdtemp, rm } from 'node:fs/promises';
import { randomUUID } from 'node:crypto';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { ListShardsCommand, SplitShardCommand, type _Record as KinesisRecord, type KinesisClient } from '@aws-sdk/client-kinesis';
import type { KinesisStreamEvent } from 'aws-lambda';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { FolderArchive } from '../../local/archive.ts';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { KinesisChangeLog, sha256Hex } from '../../lambda/adapters/change-log-kinesis.ts';
import { hashKeyOf } from '../../lambda/core/shared/change-log-aggregates.ts';
import { toKinesisStreamEvent } from '../../lambda/adapters/kinesis-event.ts';
import { createWarehouseApplier, type WarehouseApplier } from '../../lambda/handlers/warehouse-applier.ts';
import { createArchiveCopierHandler } from '../../lambda/handlers/archive-copier.ts';
import { changeRecordsOf } from '../../lambda/runtime/sink-batch.ts';
import { AGGREGATE_KEY_PREFIX, aggregateShardOf } from '../../contracts/change-log-record.ts';
import { encodeAggregate, isAggregate } from '../../contracts/kpl-aggregate.ts';
import type { ColumnDef, ControlPlane } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, partitionKeyOf, type ChangeEvent, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { METRICS_NAMESPACE, MetricName } from '../../contracts/metrics.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { captureEmf } from '../helpers/emf.ts';
import { createStream, readShards } from '../helpers/kinesis-read.ts';
import { rng } from '../helpers/rng.ts';

const SEED = Number(process.env.CDC_TEST_SEED ?? Date.now() % 1_000_000);
const SEEDS = 3;
const SINK = 'warehouse';
const RAW = { getTypeParser: () => (v: string) => v } as unknown as pg.CustomTypesConfig;
const ORDERS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'status', type: 'text', nullable: true },
];

let cluster: PostgresCluster;
let pool: pg.Pool;
let kin: Kinesalite;
let kinesis: KinesisClient;

beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  [cluster, kin] = await Promise.all([startPostgres({ fast: true }), startKinesalite()]);
  await cluster.createDatabase('wh');
  pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 4 });
  pool.on('error', () => undefined);
  kinesis = kinesisClient(kin.endpoint);
}, 120_000);

afterAll(async () => {
  kinesis?.destroy();
  await pool?.end();
  await Promise.all([cluster?.stop(), kin?.stop()]);
});

const pos = (n: number): string => makePosition(BigInt(n) * 0x100n, 0);

function ev(sourceId: string, table: string, op: ChangeEvent['op'], n: number, key: Row, after: Row | null): ChangeEvent {
  return {
    v: ENVELOPE_VERSION,
    source: sourceId,
    table,
    op,
    key,
    after,
    before: null,
    missing: [],
    position: pos(n),
    commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, n % 60)).toISOString(),
    txId: String(1000 + n),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  };
}

async function register(cp: ControlPlane, sourceId: string, table: string, columns: ColumnDef[], key: string[]): Promise<void> {
  const at = new Date().toISOString();
  await cp.registerTable(
    { source: sourceId, table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
    { source: sourceId, table, version: 1, columns, key, effectivePosition: pos(0), registeredAt: at },
    { at, actor: 'test', action: 'register-table', source: sourceId, table, outcome: 'done', detail: {} },
  );
}

function applier(cp: ControlPlane): WarehouseApplier {
  return createWarehouseApplier({
    controlPlane: cp,
    pool,
    sinkId: SINK,
    metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: 'test' }),
    logger: new Logger({ logLevel: 'SILENT' }),
    merge: { maxRows: 0 },
  });
}

const rows = async (sql: string): Promise<Record<string, string | null>[]> =>
  (await pool.query({ text: sql, types: RAW })).rows as Record<string, string | null>[];

/**
 * Publishes `events` with aggregation to a new stream of `shards` shards, splitting every shard after
 * the first third; returns the stream's records per shard (parents first) and its ARN.
 */
async function publishAggregated(
  events: readonly ChangeEvent[],
  shards: number,
  r: () => number,
): Promise<{ arn: string; byShard: Map<string, KinesisRecord[]>; misplaced: number; ranges: Map<string, { start: bigint; end: bigint }> }> {
  const stream = `agg-${randomUUID()}`;
  const arn = await createStream(kinesis, stream, shards);
  const log = new KinesisChangeLog(kinesis, stream, {
    aggregate: true,
    aggregateLimits: { maxBytes: 1_500 + Math.floor(r() * 6_000), maxEvents: 4 + Math.floor(r() * 40) },
  });
  const third = Math.floor(events.length / 3);
  for (let i = 0; i < third; i += 60) await log.publish(events.slice(i, Math.min(i + 60, third)));
  for (const sh of ((await kinesis.send(new ListShardsCommand({ StreamName: stream }))).Shards ?? []).filter(
    (s) => !s.SequenceNumberRange?.EndingSequenceNumber,
  )) {
    const start = BigInt(sh.HashKeyRange!.StartingHashKey!);
    const end = BigInt(sh.HashKeyRange!.EndingHashKey!);
    await kinesis.send(
      new SplitShardCommand({ StreamName: stream, ShardToSplit: sh.ShardId!, NewStartingHashKey: (start + (end - start) / 2n + 1n).toString() }),
    );
  }
  for (let i = third; i < events.length; i += 60) await log.publish(events.slice(i, i + 60));
  const byShard = await readShards(kinesis, stream);
  let misplaced = 0;
  for (const [id, recs] of byShard) for (const x of recs) if (isAggregate(Buffer.from(x.Data!)) && aggregateShardOf(x.PartitionKey) !== id) misplaced++;
  const ranges = new Map(
    ((await kinesis.send(new ListShardsCommand({ StreamName: stream }))).Shards ?? []).map((x) => [
      x.ShardId!,
      { start: BigInt(x.HashKeyRange!.StartingHashKey!), end: BigInt(x.HashKeyRange!.EndingHashKey!) },
    ]),
  );
  return { arn, byShard, misplaced, ranges };
}

/** One shard's records as Lambda batches of random sizes. */
function batchesOf(arn: string, shardId: string, records: readonly KinesisRecord[], r: () => number): KinesisStreamEvent[] {
  const out: KinesisStreamEvent[] = [];
  for (let i = 0; i < records.length;) {
    const n = 1 + Math.floor(r() * 12);
    out.push(toKinesisStreamEvent(records.slice(i, i + n), { streamArn: arn, shardId }));
    i += n;
  }
  return out;
}

/** Shards parents first (kinesalite lists them in creation order: parents before their children). */
const inOrder = (byShard: Map<string, KinesisRecord[]>): Array<[string, KinesisRecord[]]> => [...byShard].sort((a, b) => (a[0] < b[0] ? -1 : 1));

describe(`consumers of an aggregated change log (seed ${SEED}, ${SEEDS} seeds)`, () => {
  it('the warehouse applier applies every event of every aggregate, skips misplaced aggregates, and ends as the events say', async () => {
    console.log(`aggregated batches: seed ${SEED}, seeds ${SEEDS}`);
    for (let s = 0; s < SEEDS; s++) {
      const r = rng(SEED + s);
      const sourceId = `agg${s}`;
      const cp = new MemoryControlPlane();
      await register(cp, sourceId, 'public.orders', ORDERS, ['id']);
      const keys = 5 + Math.floor(r() * 40);
      const state = new Map<number, string>();
      const events: ChangeEvent[] = [];
      for (let n = 1; n <= 200 + Math.floor(r() * 300); n++) {
        const id = 1 + Math.floor(r() * keys);
        const status = `s${n}`;
        events.push(ev(sourceId, 'public.orders', state.has(id) ? 'update' : 'insert', n, { id }, { id, status }));
        state.set(id, status);
      }
      const { arn, byShard, misplaced, ranges } = await publishAggregated(events, 2 + Math.floor(r() * 2), r);
      expect(misplaced, `seed ${SEED + s}: a misplaced aggregate is on the stream`).toBeGreaterThan(0);
      // This test reads the handler's metrics: a Metrics built with them enabled (the file disables them).
      process.env.POWERTOOLS_METRICS_DISABLED = 'false';
      const a = applier(cp);
      const emf = captureEmf();
      let skipped = 0;
      for (const [shardId, records] of inOrder(byShard)) {
        for (const batch of batchesOf(arn, shardId, records, r)) {
          // What the handler hands the apply: each event from the shard its key hashes to (misplaced aggregates skipped).
          const read = changeRecordsOf(batch.Records, { warn: () => undefined, error: () => undefined });
          skipped += read.skipped;
          const range = ranges.get(shardId)!;
          for (const rec of read.records) {
            const h = hashKeyOf(partitionKeyOf(JSON.parse(rec.text) as ChangeEvent, sha256Hex));
            expect(h >= range.start && h <= range.end, `${rec.origin}`).toBe(true);
          }
          expect((await a.handler(batch)).batchItemFailures, `seed ${SEED + s}`).toEqual([]);
        }
      }
      expect(skipped).toBe(misplaced);
      // The handler counts what it skipped: MisplacedAggregatesSkipped, dimension Sink only.
      const counted = emf.metric(MetricName.MISPLACED_AGGREGATES_SKIPPED);
      vi.restoreAllMocks();
      process.env.POWERTOOLS_METRICS_DISABLED = 'true';
      expect(
        counted.reduce((n, m) => n + m.value, 0),
        `seed ${SEED + s}`,
      ).toBe(misplaced);
      for (const m of counted) expect(m.dims).toEqual({ Sink: SINK });
      const t = warehouseTable(sourceId, 'public.orders');
      const got = await rows(`SELECT id, status FROM ${qualified(t.schema, t.view)} ORDER BY id`);
      expect(got, `seed ${SEED + s}`).toEqual([...state].sort((x, y) => x[0] - y[0]).map(([id, status]) => ({ id: String(id), status })));
      expect(await cp.listDeadLetters(SINK)).toEqual([]);
    }
  });

  it('the archive copier writes one event per line, every event, none of a misplaced aggregate', async () => {
    for (let s = 0; s < SEEDS; s++) {
      const r = rng(SEED + 50 + s);
      const events = Array.from({ length: 150 + Math.floor(r() * 200) }, (_, n) => {
        const id = 1 + Math.floor(r() * 30);
        return ev('arc', r() < 0.5 ? 'public.a' : 'public.b', 'update', n + 1, { id }, { id, v: `v${n}` });
      });
      const { arn, byShard, misplaced, ranges } = await publishAggregated(events, 2, r);
      expect(misplaced).toBeGreaterThan(0);
      const dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-agg-archive-'));
      try {
        const archive = new FolderArchive(dir);
        const copy = createArchiveCopierHandler({ archive, logger: new Logger({ logLevel: 'SILENT' }) });
        for (const [shardId, records] of inOrder(byShard))
          for (const batch of batchesOf(arn, shardId, records, r)) expect((await copy(batch)).batchItemFailures).toEqual([]);
        const parsed: ChangeEvent[] = [];
        for (const key of await archive.list('change-log/tables/')) {
          const shard = /-(shardId-\d+)-/.exec(key)![1]!;
          const range = ranges.get(shard)!;
          for (const line of (await archive.get(key)).toString('utf8').split('\n')) {
            if (line === '') continue;
            const e = JSON.parse(line) as ChangeEvent;
            // Archived from the shard its key hashes to: nothing of an aggregate meant for another shard.
            const h = hashKeyOf(partitionKeyOf(e, sha256Hex));
            expect(h >= range.start && h <= range.end, `${e.position} archived from ${shard}`).toBe(true);
            parsed.push(e);
          }
        }
        // Every event is there (re-sent units after a misplaced one in the same call may be there twice), each line one event.
        expect(new Set(parsed.map((e) => e.position))).toEqual(new Set(events.map((e) => e.position)));
        for (const e of parsed) expect(e.v).toBe(ENVELOPE_VERSION);
        expect(await archive.list('change-log/tables/_other/')).toEqual([]);
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    }
  });

  it('an event that fails inside an aggregate fails its whole aggregate (and every later record); the retry re-applies it whole', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'down', 'public.orders', ORDERS, ['id']);
    await register(cp, 'down', 'public.other', [{ name: 'k', type: 'text', nullable: false }], ['k']);
    const a = applier(cp);
    const arn = 'arn:aws:kinesis:us-east-1:000000000000:stream/changes';
    const shardId = 'shardId-000000000000';
    const plain = (seq: string, e: ChangeEvent): KinesisRecord => ({ SequenceNumber: seq, PartitionKey: 'pk', Data: Buffer.from(JSON.stringify(e)) });
    const aggregate = (seq: string, es: ChangeEvent[]): KinesisRecord => ({
      SequenceNumber: seq,
      PartitionKey: `${AGGREGATE_KEY_PREFIX}${shardId}`,
      Data: encodeAggregate(es.map((e) => ({ partitionKey: 'pk', data: Buffer.from(JSON.stringify(e)) }))),
    });
    const first = await a.handler(
      toKinesisStreamEvent(
        [
          plain('100', ev('down', 'public.orders', 'insert', 1, { id: 1 }, { id: 1 })),
          plain('101', ev('down', 'public.other', 'insert', 2, { k: 'a' }, { k: 'a' })),
        ],
        {
          streamArn: arn,
          shardId,
        },
      ),
    );
    expect(first.batchItemFailures).toEqual([]);
    const orders = warehouseTable('down', 'public.orders');
    await pool.query(
      `CREATE FUNCTION down_public.cancel_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'canceling statement due to statement timeout' USING ERRCODE = '57014'; END $$`,
    );
    await pool.query(
      `CREATE TRIGGER cancel_write BEFORE INSERT OR UPDATE ON ${qualified(orders.schema, orders.changelog)} FOR EACH ROW EXECUTE FUNCTION down_public.cancel_write()`,
    );
    const records = [
      plain('200', ev('down', 'public.other', 'insert', 3, { k: 'b' }, { k: 'b' })),
      aggregate('300', [
        ev('down', 'public.other', 'insert', 4, { k: 'c' }, { k: 'c' }),
        ev('down', 'public.orders', 'update', 5, { id: 1 }, { id: 1, status: 'x' }),
        ev('down', 'public.other', 'insert', 6, { k: 'd' }, { k: 'd' }),
      ]),
      plain('400', ev('down', 'public.orders', 'insert', 7, { id: 2 }, { id: 2, status: 'y' })),
      aggregate('500', [ev('down', 'public.other', 'insert', 8, { k: 'e' }, { k: 'e' }), ev('down', 'public.other', 'insert', 9, { k: 'f' }, { k: 'f' })]),
    ];
    const res = await a.handler(toKinesisStreamEvent(records, { streamArn: arn, shardId }));
    // Reported by Kinesis sequence number: the aggregate holding the failed event and every later record of its table's failure on.
    expect(res.batchItemFailures).toEqual([{ itemIdentifier: '300' }, { itemIdentifier: '400' }]);
    const other = warehouseTable('down', 'public.other');
    expect(await rows(`SELECT k FROM ${qualified(other.schema, other.view)} ORDER BY k`)).toEqual(['a', 'b', 'c', 'd', 'e', 'f'].map((k) => ({ k })));
    await pool.query(`DROP TRIGGER cancel_write ON ${qualified(orders.schema, orders.changelog)}`);
    // Lambda retries from the lowest reported sequence number: the aggregate again, whole.
    const retry = await a.handler(toKinesisStreamEvent(records.slice(1), { streamArn: arn, shardId }));
    expect(retry.batchItemFailures).toEqual([]);
    expect(await rows(`SELECT id, status FROM ${qualified(orders.schema, orders.view)} ORDER BY id`)).toEqual([
      { id: '1', status: 'x' },
      { id: '2', status: 'y' },
    ]);
    expect(await rows(`SELECT k FROM ${qualified(other.schema, other.view)} ORDER BY k`)).toEqual(['a', 'b', 'c', 'd', 'e', 'f'].map((k) => ({ k })));
    expect(await cp.listDeadLetters(SINK)).toEqual([]);
  });

  it('a bad event inside an aggregate is its own dead letter (its text, its sub-record origin); a corrupt aggregate is one dead letter of its whole data', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'dl', 'public.orders', ORDERS, ['id']);
    const a = applier(cp);
    const arn = 'arn:aws:kinesis:us-east-1:000000000000:stream/changes';
    const shardId = 'shardId-000000000000';
    const good = ev('dl', 'public.orders', 'insert', 1, { id: 1 }, { id: 1, status: 'a' });
    const bad = JSON.stringify({ ...ev('dl', 'public.orders', 'insert', 2, { id: 2 }, { id: 2 }), schemaVersion: 9 });
    const later = ev('dl', 'public.orders', 'update', 3, { id: 1 }, { id: 1, status: 'b' });
    const data = encodeAggregate([JSON.stringify(good), bad, JSON.stringify(later)].map((t) => ({ partitionKey: 'pk', data: Buffer.from(t) })));
    const corrupt = Buffer.from(data);
    corrupt[corrupt.length - 1] = corrupt[corrupt.length - 1]! ^ 0xff;
    const res = await a.handler(
      toKinesisStreamEvent(
        [
          { SequenceNumber: '700', PartitionKey: `${AGGREGATE_KEY_PREFIX}${shardId}`, Data: data },
          { SequenceNumber: '800', PartitionKey: `${AGGREGATE_KEY_PREFIX}${shardId}`, Data: corrupt },
        ],
        { streamArn: arn, shardId },
      ),
    );
    expect(res.batchItemFailures).toEqual([]);
    const t = warehouseTable('dl', 'public.orders');
    expect(await rows(`SELECT id, status FROM ${qualified(t.schema, t.view)} ORDER BY id`)).toEqual([{ id: '1', status: 'b' }]);
    const letters = (await cp.listDeadLetters(SINK)).map((d) => ({ origin: d.origin, record: d.record, table: d.table }));
    expect(letters.sort((x, y) => (x.origin < y.origin ? -1 : 1))).toEqual([
      { origin: `changes/${shardId}/700.1`, record: bad, table: 'public.orders' },
      { origin: `changes/${shardId}/800`, record: corrupt.toString('base64'), table: null },
    ]);
  });
});
