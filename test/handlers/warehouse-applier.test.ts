/**
 * The warehouse applier end to end on real components: the Lambda handler (Powertools batch
 * shape) → the pg adapter → embedded PostgreSQL, with the in-memory control plane (a collaborator
 * double; see its doc) and, in the last block, the real DynamoDB adapter on DynamoDB Local.
 * Metrics are read from the Embedded Metric Format lines the handler writes to stdout (CloudWatch
 * itself has no local stand-in).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import type { KinesisStreamEvent } from 'aws-lambda';
import { freePort, startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { toKinesisStreamEvent } from '../../lambda/adapters/kinesis-event.ts';
import { copyStageLoader, type PgWarehouseOptions } from '../../lambda/adapters/warehouse-pg.ts';
import { mergePolicyFromEnvironment } from '../../lambda/runtime/merge-policy.ts';
import { createWarehouseApplier, type ChangeRecord, type MergePolicy, type WarehouseApplier } from '../../lambda/handlers/warehouse-applier.ts';
import type { ColumnDef, ControlPlane, DeleteMode, TableState } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { TABLE_RECORD_MAX_AGE_MS } from '../../lambda/core/shared/kept-table-records.ts';
import { POLLED_TABLE_COMMENT, qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { EnvName, HEARTBEAT_TABLE } from '../../contracts/env.ts';
import { METRICS_NAMESPACE, MetricName } from '../../contracts/metrics.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { captureEmf } from '../helpers/emf.ts';

const SINK = 'warehouse';
const STREAM_ARN = 'arn:aws:kinesis:us-east-1:000000000000:stream/changes';
const RAW = { getTypeParser: () => (v: string) => v } as unknown as pg.CustomTypesConfig;

const pos = (n: number, i = 0): string => makePosition(BigInt(n) * 0x100n, i);

const ORDERS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'status', type: 'text', nullable: true },
  { name: 'amount', type: 'numeric(12,2)', nullable: true },
  { name: 'note', type: 'text', nullable: true },
];

function ev(sourceId: string, table: string, op: ChangeEvent['op'], n: number, key: Row, after: Row | null, extra: Partial<ChangeEvent> = {}): ChangeEvent {
  return {
    v: ENVELOPE_VERSION,
    source: sourceId,
    table,
    op,
    key,
    after,
    before: op === 'delete' ? { ...key } : null,
    missing: [],
    position: pos(n),
    commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString(),
    txId: String(1000 + n),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
    ...extra,
  };
}

let seqBase = 49590338271490256608559692538361571095921575989136588898n;
/** A Lambda Kinesis event for the given payloads (events or raw text), with increasing sequence numbers. */
function kinesisEvent(payloads: readonly (ChangeEvent | string)[]): KinesisStreamEvent {
  return toKinesisStreamEvent(
    payloads.map((p) => ({ SequenceNumber: String((seqBase += 1000n)), PartitionKey: 'pk', Data: Buffer.from(typeof p === 'string' ? p : JSON.stringify(p)) })),
    { streamArn: STREAM_ARN, shardId: 'shardId-000000000000' },
  );
}

async function register(
  cp: ControlPlane,
  sourceId: string,
  table: string,
  columns: ColumnDef[],
  key: string[],
  o: { mode?: DeleteMode; state?: TableState } = {},
): Promise<void> {
  const at = new Date().toISOString();
  const ok = await cp.registerTable(
    { source: sourceId, table, state: o.state ?? 'active', currentVersion: 1, deleteMode: o.mode ?? 'soft', preImage: 'key', stateReason: null, updatedAt: at },
    { source: sourceId, table, version: 1, columns, key, effectivePosition: pos(0), registeredAt: at },
    { at, actor: 'test', action: 'register-table', source: sourceId, table, outcome: 'done', detail: {} },
  );
  if (!ok) throw new Error(`${sourceId}/${table} already registered`);
}

describe('the merge policy from the environment (WarehouseSink props mergeMaxRows, mergeMaxAge, mergeOnSchedule)', () => {
  const names = ['CDC_MERGE_MAX_ROWS', 'CDC_MERGE_MAX_AGE_MS', 'CDC_MERGE_ON_SCHEDULE'] as const;
  const saved = Object.fromEntries(names.map((n) => [n, process.env[n]]));
  afterEach(() => {
    for (const n of names) {
      if (saved[n] === undefined) delete process.env[n];
      else process.env[n] = saved[n];
    }
  });

  it('unset: the defaults (inline merges); mergeOnSchedule leaves merges to the schedule; a bad value is refused by name', () => {
    for (const n of names) delete process.env[n];
    expect(mergePolicyFromEnvironment()).toEqual({ maxRows: 50_000, maxAgeMs: 60_000, inline: true });
    process.env.CDC_MERGE_ON_SCHEDULE = 'true';
    process.env.CDC_MERGE_MAX_ROWS = '200000';
    expect(mergePolicyFromEnvironment()).toEqual({ maxRows: 200_000, maxAgeMs: 60_000, inline: false });
    process.env.CDC_MERGE_ON_SCHEDULE = 'false';
    expect(mergePolicyFromEnvironment().inline).toBe(true);
    process.env.CDC_MERGE_ON_SCHEDULE = 'yes';
    expect(() => mergePolicyFromEnvironment()).toThrow(/CDC_MERGE_ON_SCHEDULE must be true or false, got "yes"/);
  });
});

describe('warehouse applier on embedded PostgreSQL', () => {
  let cluster: PostgresCluster;
  let pool: pg.Pool;

  beforeAll(async () => {
    process.env.POWERTOOLS_METRICS_DISABLED = 'false';
    delete process.env.POWERTOOLS_DEV;
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('wh');
    pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 4 });
    pool.on('error', () => undefined);
  });

  afterAll(async () => {
    await pool?.end();
    await cluster?.stop();
  });

  afterEach(() => {
    vi.restoreAllMocks();
  });

  const rows = async (sql: string): Promise<Record<string, string | null>[]> =>
    (await pool.query({ text: sql, types: RAW })).rows as Record<string, string | null>[];
  const names = (sourceId: string, table: string) => {
    const t = warehouseTable(sourceId, table);
    return {
      view: qualified(t.schema, t.view),
      mirror: qualified(t.schema, t.mirror),
      changelog: qualified(t.schema, t.changelog),
      deletedKeys: qualified(t.schema, t.deletedKeys),
      t,
    };
  };

  /** These tests look at the base tables (mirror, changelog) right after a batch: the merge runs after every append (`maxRows: 0`); the deferred merge has its own tests below. */
  function applier(cp: ControlPlane, warehouse?: PgWarehouseOptions, merge: Partial<MergePolicy> = { maxRows: 0 }): WarehouseApplier {
    return createWarehouseApplier({
      controlPlane: cp,
      pool,
      sinkId: SINK,
      metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: 'test' }),
      logger: new Logger({ logLevel: 'SILENT' }),
      warehouse,
      merge,
    });
  }

  let recordSeq = 0;
  const records = (events: ChangeEvent[]): ChangeRecord[] =>
    events.map((e) => ({ sequenceNumber: String(++recordSeq), origin: `test/shard-0/${recordSeq}`, text: JSON.stringify(e) }));

  it('append-first: a batch is visible in the view before any merge; the merge runs at the row threshold and leaves the view as it was', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'lazy', 'public.orders', ORDERS, ['id']);
    const a = applier(cp, undefined, { maxRows: 5, maxAgeMs: 3_600_000 });
    const n = names('lazy', 'public.orders');
    const full = (k: number, status: string) => ({ id: k, status, amount: '1.00', note: null });
    const first = await a.applyRecords(
      records([
        ev('lazy', 'public.orders', 'insert', 1, { id: 1 }, full(1, 'new')),
        ev('lazy', 'public.orders', 'insert', 2, { id: 2 }, full(2, 'new')),
        ev('lazy', 'public.orders', 'delete', 3, { id: 2 }, null),
      ]),
    );
    expect(first.failed).toEqual([]);
    expect(await rows(`SELECT id, status FROM ${n.view} ORDER BY id`)).toEqual([{ id: '1', status: 'new' }]);
    expect(await rows(`SELECT id FROM ${n.mirror}`)).toEqual([]);
    expect(await rows(`SELECT count(*) AS n FROM ${qualified(n.t.schema, n.t.delta)}`)).toEqual([{ n: '3' }]);
    // A late older event in the delta never wins over a newer one.
    await a.applyRecords(
      records([
        ev('lazy', 'public.orders', 'update', 4, { id: 1 }, full(1, 'paid')),
        ev('lazy', 'public.orders', 'insert', 2, { id: 2 }, full(2, 'stale'), { position: pos(2, 1) }),
      ]),
    );
    const view = await rows(`SELECT id, status, _cdc_position FROM ${n.view} ORDER BY id`);
    expect(view).toEqual([{ id: '1', status: 'paid', _cdc_position: pos(4) }]);
    expect(await rows(`SELECT count(*) AS n FROM ${n.mirror}`)).toEqual([{ n: '2' }]); // 5 rows appended by this process: merged
    expect(await rows(`SELECT count(*) AS n FROM ${qualified(n.t.schema, n.t.delta)}`)).toEqual([{ n: '0' }]);
    expect(await rows(`SELECT id, status, _cdc_position FROM ${n.view} ORDER BY id`)).toEqual(view);
    expect(await rows(`SELECT id, _cdc_deleted, _cdc_position FROM ${n.mirror} ORDER BY id`)).toEqual([
      { id: '1', _cdc_deleted: 'f', _cdc_position: pos(4) },
      { id: '2', _cdc_deleted: 't', _cdc_position: pos(3) },
    ]);
    expect(await rows(`SELECT _cdc_position, _cdc_op FROM ${n.changelog} ORDER BY 1`)).toEqual([
      { _cdc_position: pos(1), _cdc_op: 'insert' },
      { _cdc_position: pos(2), _cdc_op: 'insert' },
      { _cdc_position: pos(2, 1), _cdc_op: 'insert' },
      { _cdc_position: pos(3), _cdc_op: 'delete' },
      { _cdc_position: pos(4), _cdc_op: 'update' },
    ]);
    // Below the threshold nothing merges; the schedule's mergeDue with force does.
    await a.applyRecords(records([ev('lazy', 'public.orders', 'insert', 5, { id: 3 }, full(3, 'new'))]));
    expect(await rows(`SELECT count(*) AS n FROM ${qualified(n.t.schema, n.t.delta)}`)).toEqual([{ n: '1' }]);
    expect(await a.mergeDue()).toEqual([]);
    expect(await a.mergeDue({ force: true })).toEqual([expect.objectContaining({ source: 'lazy', table: 'public.orders', rows: 1 })]);
    expect(await rows(`SELECT id, status FROM ${n.mirror} WHERE NOT _cdc_deleted ORDER BY id`)).toEqual([
      { id: '1', status: 'paid' },
      { id: '3', status: 'new' },
    ]);
  });

  it('a delta at twice its row threshold is merged with appends stopped; below that, appends go on (docs/warehouse-apply.md)', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'pressure', 'public.orders', ORDERS, ['id']);
    const a = applier(cp, undefined, { maxRows: 2, maxAgeMs: 3_600_000, inline: false });
    const seen: Array<{ rows: number; options: unknown }> = [];
    const merge = a.warehouse.merge.bind(a.warehouse);
    a.warehouse.merge = async (target, options) => {
      const r = await merge(target, options);
      seen.push({ rows: r.rows, options });
      return r;
    };
    const full = (k: number) => ({ id: k, status: 'new', amount: '1.00', note: null });
    let p = 10;
    const append = (n: number) =>
      a.applyRecords(records(Array.from({ length: n }, (_, i) => ev('pressure', 'public.orders', 'insert', ++p, { id: i }, full(i)))));
    await append(3); // due (≥ 2), not twice the threshold
    const emf = captureEmf();
    expect((await a.mergeDue()).map((m) => [m.rows, m.appendsStopped])).toEqual([[3, false]]);
    await append(4); // twice the threshold
    expect((await a.mergeDue()).map((m) => [m.rows, m.appendsStopped])).toEqual([[4, true]]);
    expect(seen).toEqual([
      { rows: 3, options: undefined },
      { rows: 4, options: { stopAppends: true } },
    ]);
    // The merges' metrics: rows merged per call, and the merge that stopped appends.
    expect(emf.metric(MetricName.DELTA_ROWS_MERGED).map((m) => m.value)).toEqual([3, 4]);
    expect(emf.metric(MetricName.MERGES_STOPPING_APPENDS)).toEqual([{ value: 1, dims: { Sink: SINK }, dimNames: ['Sink'] }]);
    expect(emf.metric(MetricName.MERGE_ERRORS)).toEqual([]);
  });

  it('a merge that fails changes nothing, is returned with its error and counted in MergeErrors (inline and scheduled), and succeeds on the next try', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'failing', 'public.orders', ORDERS, ['id']);
    const a = applier(cp, undefined, { maxRows: 2, maxAgeMs: 3_600_000 });
    const n = names('failing', 'public.orders');
    const merge = a.warehouse.merge.bind(a.warehouse);
    let broken = true;
    a.warehouse.merge = async (target, options) => {
      if (broken) throw new Error('warehouse said no');
      return merge(target, options);
    };
    const emf = captureEmf();
    const full = (k: number) => ({ id: k, status: 'new', amount: '1.00', note: null });
    const out = await a.applyRecords(
      records([ev('failing', 'public.orders', 'insert', 1, { id: 1 }, full(1)), ev('failing', 'public.orders', 'insert', 2, { id: 2 }, full(2))]),
    );
    expect(out.failed).toEqual([]); // the batch is applied; only its inline merge failed
    expect(emf.metric(MetricName.MERGE_ERRORS), 'the inline merge failed').toHaveLength(1);
    expect(await rows(`SELECT id FROM ${n.view} ORDER BY id`)).toEqual([{ id: '1' }, { id: '2' }]);
    expect((await a.mergeDue()).map((m) => m.error)).toEqual(['Error: warehouse said no']);
    expect(emf.metric(MetricName.MERGE_ERRORS)).toEqual([
      { value: 1, dims: { Sink: SINK }, dimNames: ['Sink'] },
      { value: 1, dims: { Sink: SINK }, dimNames: ['Sink'] },
    ]);
    expect(await rows(`SELECT count(*) AS n FROM ${qualified(n.t.schema, n.t.delta)}`)).toEqual([{ n: '2' }]);
    broken = false;
    expect((await a.mergeDue()).map((m) => [m.rows, m.error])).toEqual([[2, undefined]]);
    expect(emf.metric(MetricName.DELTA_ROWS_MERGED).map((m) => m.value)).toEqual([2]);
    expect(await rows(`SELECT id FROM ${n.view} ORDER BY id`)).toEqual([{ id: '1' }, { id: '2' }]);
  });

  it('applies a batch through the Lambda handler into changelog, mirror and view, then advances the high-water mark', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'shop', 'public.orders', ORDERS, ['id']);
    const emf = captureEmf();
    const res = await applier(cp).handler(
      kinesisEvent([
        ev('shop', 'public.orders', 'insert', 1, { id: 1 }, { id: 1, status: 'new', amount: '10.50', note: 'fragile' }),
        ev('shop', 'public.orders', 'insert', 2, { id: 2 }, { id: 2, status: 'new', amount: null, note: null }),
        ev('shop', 'public.orders', 'update', 3, { id: 1 }, { id: 1, status: 'paid', amount: '10.50' }, { missing: ['note'] }),
        ev('shop', 'public.orders', 'delete', 4, { id: 2 }, null),
      ]),
    );
    expect(res.batchItemFailures).toEqual([]);
    const n = names('shop', 'public.orders');
    expect(await rows(`SELECT id, status, amount, note, _cdc_position FROM ${n.view}`)).toEqual([
      { id: '1', status: 'paid', amount: '10.50', note: 'fragile', _cdc_position: pos(3) },
    ]);
    expect(await rows(`SELECT id, _cdc_deleted, _cdc_deleted_at, _cdc_position FROM ${n.mirror} ORDER BY id`)).toEqual([
      { id: '1', _cdc_deleted: 'f', _cdc_deleted_at: null, _cdc_position: pos(3) },
      { id: '2', _cdc_deleted: 't', _cdc_deleted_at: '2026-01-01 00:00:04+00', _cdc_position: pos(4) },
    ]);
    expect(
      await rows(`SELECT _cdc_position, _cdc_op, _cdc_schema_version, _cdc_tx_id, _cdc_missing, id, status, note FROM ${n.changelog} ORDER BY _cdc_position`),
    ).toEqual([
      { _cdc_position: pos(1), _cdc_op: 'insert', _cdc_schema_version: '1', _cdc_tx_id: '1001', _cdc_missing: null, id: '1', status: 'new', note: 'fragile' },
      { _cdc_position: pos(2), _cdc_op: 'insert', _cdc_schema_version: '1', _cdc_tx_id: '1002', _cdc_missing: null, id: '2', status: 'new', note: null },
      { _cdc_position: pos(3), _cdc_op: 'update', _cdc_schema_version: '1', _cdc_tx_id: '1003', _cdc_missing: '["note"]', id: '1', status: 'paid', note: null },
      { _cdc_position: pos(4), _cdc_op: 'delete', _cdc_schema_version: '1', _cdc_tx_id: '1004', _cdc_missing: null, id: '2', status: null, note: null },
    ]);
    expect(await cp.getSinkProgress(SINK, 'shop', 'public.orders')).toMatchObject({ appliedPosition: pos(4), heldFrom: null });
    expect(emf.metric(MetricName.EVENTS_APPLIED)).toEqual([{ value: 4, dims: { Sink: SINK, Source: 'shop' }, dimNames: ['Sink', 'Source'] }]);
    expect(emf.lines[0]!._aws.CloudWatchMetrics[0]!.Namespace).toBe(METRICS_NAMESPACE);
  });

  it('a polled table says on its view and mirror that its deletes are not observable (a catalog comment, kept when the view changes); a log-captured table has none', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'legacy', 'public.accounts', ORDERS, ['id']);
    await register(cp, 'legacy', 'public.orders', ORDERS, ['id']);
    const polled = (n: number, after: Row, extra: Partial<ChangeEvent> = {}) =>
      ev('legacy', 'public.accounts', 'update', n, { id: after.id! }, after, { capture: 'poll', txId: null, ...extra });
    const res = await applier(cp).handler(
      kinesisEvent([
        polled(1, { id: 1, status: 'new', amount: '1.00', note: null }),
        ev('legacy', 'public.orders', 'insert', 2, { id: 1 }, { id: 1, status: 'new', amount: null, note: null }),
      ]),
    );
    expect(res.batchItemFailures).toEqual([]);
    const comment = async (name: string): Promise<string | null> =>
      (await pool.query<{ c: string | null }>("SELECT obj_description($1::regclass, 'pg_class') AS c", [name])).rows[0]!.c;
    const accounts = names('legacy', 'public.accounts');
    expect(await comment(accounts.view)).toBe(POLLED_TABLE_COMMENT);
    expect(await comment(accounts.mirror)).toBe(POLLED_TABLE_COMMENT);
    expect(POLLED_TABLE_COMMENT).toContain('deletes not observable');
    expect(await comment(names('legacy', 'public.orders').view)).toBeNull();
    expect(await comment(names('legacy', 'public.orders').mirror)).toBeNull();

    // A new column re-creates the view (CREATE OR REPLACE VIEW): the comment stays, in a fresh applier too.
    await cp.addSchemaVersion(
      {
        source: 'legacy',
        table: 'public.accounts',
        version: 2,
        columns: [...ORDERS, { name: 'region', type: 'text', nullable: true }],
        key: ['id'],
        effectivePosition: pos(3),
        registeredAt: new Date().toISOString(),
      },
      { at: new Date().toISOString(), actor: 'test', action: 'add-schema-version', source: 'legacy', table: 'public.accounts', outcome: 'done', detail: {} },
    );
    expect(
      (await applier(cp).handler(kinesisEvent([polled(3, { id: 2, status: 'new', amount: '2.00', note: null, region: 'eu' }, { schemaVersion: 2 })])))
        .batchItemFailures,
    ).toEqual([]);
    expect(await rows(`SELECT id, region FROM ${accounts.view} ORDER BY id`)).toEqual([
      { id: '1', region: null },
      { id: '2', region: 'eu' },
    ]);
    expect(await comment(accounts.view)).toBe(POLLED_TABLE_COMMENT);
  });

  it('an unreachable warehouse is an infrastructure failure: its records are reported for retry, never dead-lettered; bad input in the same batch is', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'shop', 'public.orders', ORDERS, ['id']);
    // Nothing listens on this port: connecting fails as when the warehouse is down.
    const down = new pg.Pool({ host: '127.0.0.1', port: await freePort(), user: 'postgres', database: 'wh', connectionTimeoutMillis: 2000 });
    down.on('error', () => undefined);
    try {
      const a = createWarehouseApplier({
        controlPlane: cp,
        pool: down,
        sinkId: SINK,
        metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: 'test' }),
        logger: new Logger({ logLevel: 'SILENT' }),
      });
      const event = kinesisEvent([
        'not json at all',
        ev('shop', 'public.orders', 'insert', 1, { id: 1 }, { id: 1, status: 'new', amount: '1.00', note: null }),
        ev('shop', 'public.orders', 'insert', 2, { id: 2 }, { id: 2, status: 'new', amount: '2.00', note: null }),
      ]);
      const res = await a.handler(event);
      // The two good records are failed for a retry (the mapping has no retry limit); the bad one is done.
      expect(res.batchItemFailures.map((f) => f.itemIdentifier)).toEqual(event.Records.slice(1).map((r) => r.kinesis.sequenceNumber));
      const letters = await cp.listDeadLetters(SINK);
      expect(letters.map((l) => l.code)).toEqual(['INVALID_RECORD']);
      expect(await cp.getSinkProgress(SINK, 'shop', 'public.orders')).toBeNull();
    } finally {
      await down.end();
    }
  });

  it('appliers of two shards creating the same warehouse schema at once both apply (the DDL race is retried)', async () => {
    for (let round = 0; round < 4; round++) {
      const sourceId = `race${round}`;
      const cp = new MemoryControlPlane();
      await register(cp, sourceId, 'public.a', ORDERS, ['id']);
      await register(cp, sourceId, 'public.b', ORDERS, ['id']);
      // Two appliers = two Lambda environments (one per shard), each with its own shape cache.
      const [ra, rb] = await Promise.all([
        applier(cp).handler(kinesisEvent([ev(sourceId, 'public.a', 'insert', 1, { id: 1 }, { id: 1, status: 'a', amount: null, note: null })])),
        applier(cp).handler(kinesisEvent([ev(sourceId, 'public.b', 'insert', 2, { id: 1 }, { id: 1, status: 'b', amount: null, note: null })])),
      ]);
      expect([ra.batchItemFailures, rb.batchItemFailures]).toEqual([[], []]);
      expect(await rows(`SELECT status FROM ${names(sourceId, 'public.a').view}`)).toEqual([{ status: 'a' }]);
      expect(await rows(`SELECT status FROM ${names(sourceId, 'public.b').view}`)).toEqual([{ status: 'b' }]);
    }
  });

  it('refuses table and column names shaped like SQL injection with a named error, dead-letters them, and still applies the other tables', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'inj', 'public.orders', ORDERS, ['id']);
    await register(cp, 'inj', 'public.other', [{ name: 'k', type: 'text', nullable: false }], ['k']);
    const emf = captureEmf();
    const badTable = 'public.orders"; DROP TABLE inj_public; --';
    const event = kinesisEvent([
      ev('inj', 'public.other', 'insert', 1, { k: 'a' }, { k: 'a' }),
      ev('inj', badTable, 'insert', 2, { id: 9 }, { id: 9 }),
      ev('inj', 'public.orders', 'insert', 3, { id: 1 }, { id: 1, 'status" = NULL; DROP TABLE x; --': 'x' }),
      ev('inj', 'public.orders', 'insert', 4, { id: 2 }, { id: 2, status: "'); DROP TABLE inj_public.orders_mirror; --" }),
      ev('inj', 'public.ghost', 'insert', 5, { id: 1 }, { id: 1 }),
      ev('inj', 'public.other', 'insert', 6, { k: 'b' }, { k: 'b' }),
    ]);
    const res = await applier(cp).handler(event);
    expect(res.batchItemFailures).toEqual([]);
    const letters = await cp.listDeadLetters(SINK);
    expect(letters.map((l) => [l.table, l.code])).toEqual([
      [badTable, 'UNSAFE_IDENTIFIER'],
      ['public.orders', 'UNSAFE_IDENTIFIER'],
      ['public.ghost', 'UNSAFE_IDENTIFIER'],
    ]);
    expect(letters[0]!.reason).toMatch(/^UnsafeIdentifierError: refused identifier/);
    expect(letters[1]!.reason).toContain('status\\" = NULL; DROP TABLE x; --');
    expect(letters[0]!.origin).toBe(`changes/shardId-000000000000/${event.Records[1]!.kinesis.sequenceNumber}`);
    expect(JSON.parse(letters[0]!.record)).toMatchObject({ table: badTable });
    // The other table applied; the injection-shaped VALUE is just a value (a parameter).
    expect(await rows(`SELECT k FROM ${names('inj', 'public.other').view} ORDER BY k`)).toEqual([{ k: 'a' }, { k: 'b' }]);
    expect(await rows(`SELECT id, status FROM ${names('inj', 'public.orders').view}`)).toEqual([
      { id: '2', status: "'); DROP TABLE inj_public.orders_mirror; --" },
    ]);
    expect((await cp.getTable('inj', 'public.orders'))!.state).toBe('degraded');
    expect(emf.metric(MetricName.DEAD_LETTERS)).toEqual([{ value: 3, dims: { Stage: SINK, Source: 'inj' }, dimNames: ['Stage', 'Source'] }]);
  });

  it('sends malformed records, unknown schema versions, wrong keys and a truncate that names a key to the dead letters with named errors', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'bad', 'public.orders', ORDERS, ['id']);
    const res = await applier(cp).handler(
      kinesisEvent([
        'not json',
        JSON.stringify({ ...ev('bad', 'public.orders', 'insert', 1, { id: 1 }, { id: 1 }), position: 'nope' }),
        ev('bad', 'public.orders', 'insert', 2, { id: 1 }, { id: 1 }, { schemaVersion: 7 }),
        ev('bad', 'public.orders', 'insert', 3, { status: 'x' }, { status: 'x' }),
        ev('bad', 'public.orders', 'truncate', 4, { id: 1 }, null),
        ev('bad', 'public.orders', 'insert', 5, { id: 5 }, { id: 5, status: 'ok' }),
      ]),
    );
    expect(res.batchItemFailures).toEqual([]);
    const letters = await cp.listDeadLetters(SINK);
    expect(letters.map((l) => l.code)).toEqual(['INVALID_RECORD', 'INVALID_RECORD', 'INVALID_RECORD', 'INVALID_RECORD', 'INVALID_RECORD']);
    expect(letters.map((l) => l.reason)).toEqual([
      expect.stringContaining('event: not JSON'),
      expect.stringContaining('position: expected 24 lower-case hex digits'),
      expect.stringContaining('schemaVersion: version 7 of bad/public.orders is not registered'),
      expect.stringContaining('key: expected the primary key (id) of public.orders schema version 1, got (status)'),
      expect.stringContaining('key: a truncate of public.orders carries no key and no before image'),
    ]);
    expect(letters[0]!).toMatchObject({ source: null, table: null, record: 'not json' });
    expect(await rows(`SELECT id FROM ${names('bad', 'public.orders').view}`)).toEqual([{ id: '5' }]);
  });

  it('holds the events of a paused table at the first position and keeps holding until the hold is released', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'hold', 'public.orders', ORDERS, ['id'], { state: 'paused' });
    await register(cp, 'hold', 'public.other', [{ name: 'k', type: 'text', nullable: false }], ['k']);
    const a = applier(cp);
    const emf = captureEmf();
    const firstEvent = kinesisEvent([
      ev('hold', 'public.orders', 'insert', 5, { id: 1 }, { id: 1 }),
      ev('hold', 'public.other', 'insert', 6, { k: 'a' }, { k: 'a' }),
      ev('hold', 'public.orders', 'insert', 3, { id: 2 }, { id: 2 }),
      ev('hold', 'public.orders', 'update', 7, { id: 1 }, { id: 1, status: 'x' }),
    ]);
    const first = await a.handler(firstEvent);
    expect(first.batchItemFailures).toEqual([]);
    // The hold records the shard's first held sequence number (the resume replay starts there: docs/operations.md).
    expect(await cp.getSinkProgress(SINK, 'hold', 'public.orders')).toMatchObject({
      heldFrom: pos(3),
      appliedPosition: null,
      heldFromShards: { 'shardId-000000000000': firstEvent.Records[0]!.kinesis.sequenceNumber },
    });
    expect(emf.metric(MetricName.EVENTS_HELD)).toEqual([{ value: 3, dims: { Sink: SINK, Source: 'hold' }, dimNames: ['Sink', 'Source'] }]);
    expect(await rows(`SELECT k FROM ${names('hold', 'public.other').view}`)).toEqual([{ k: 'a' }]);
    expect(
      await rows(
        `SELECT count(*) AS n FROM information_schema.tables WHERE table_schema = 'hold_public' AND (table_name = 'orders' OR table_name LIKE '\\_cdc\\_%\\_orders')`,
      ),
    ).toEqual([{ n: '0' }]);

    // Resumed in the control plane, but this sink's hold is not released yet: newer events must
    // not overtake the held ones (the replay from the hold would then be dropped as stale).
    await cp.setTableState('hold', 'public.orders', 'active', null, {
      at: new Date().toISOString(),
      actor: 'test',
      action: 'resume',
      source: 'hold',
      table: 'public.orders',
      outcome: 'done',
      detail: {},
    });
    await a.handler(
      kinesisEvent([ev('hold', 'public.orders', 'insert', 9, { id: 3 }, { id: 3 }), ev('hold', 'public.orders', 'insert', 1, { id: 4 }, { id: 4 })]),
    );
    expect(await cp.getSinkProgress(SINK, 'hold', 'public.orders')).toMatchObject({ heldFrom: pos(1) });

    // The resume replay bypasses this sink's hold (not a table pause) and applies the held range,
    // once the resume took effect: within the table records' bound (docs/architecture.md, "Table records kept for at most a second").
    await new Promise((r) => setTimeout(r, TABLE_RECORD_MAX_AGE_MS));
    const toRecords = (e: KinesisStreamEvent) =>
      e.Records.map((r) => ({ sequenceNumber: r.kinesis.sequenceNumber, origin: 'replay', text: Buffer.from(r.kinesis.data, 'base64').toString('utf8') }));
    const replayed = await a.applyRecords(toRecords(kinesisEvent([ev('hold', 'public.orders', 'insert', 3, { id: 2 }, { id: 2 })])), { replayHeld: true });
    expect(replayed).toMatchObject({ failed: [], applied: 1, held: 0 });
    expect(await rows(`SELECT id FROM ${names('hold', 'public.orders').view} ORDER BY id`)).toEqual([{ id: '2' }]);

    await cp.releaseSinkTable(SINK, 'hold', 'public.orders', {
      at: new Date().toISOString(),
      actor: 'test',
      action: 'release',
      source: 'hold',
      table: 'public.orders',
      outcome: 'done',
      detail: {},
    });
    const replay = await a.handler(
      kinesisEvent([ev('hold', 'public.orders', 'insert', 1, { id: 4 }, { id: 4 }), ev('hold', 'public.orders', 'insert', 3, { id: 2 }, { id: 2 })]),
    );
    expect(replay.batchItemFailures).toEqual([]);
    const paused = await register(cp, 'hold', 'public.paused', ORDERS, ['id'], { state: 'paused' }).then(() =>
      a.applyRecords(toRecords(kinesisEvent([ev('hold', 'public.paused', 'insert', 2, { id: 1 }, { id: 1 })])), { replayHeld: true }),
    );
    expect(paused).toMatchObject({ applied: 0, held: 1 });
    expect(await rows(`SELECT id FROM ${names('hold', 'public.orders').view} ORDER BY id`)).toEqual([{ id: '2' }, { id: '4' }]);
  });

  it('turns a compatible added column into ALTER TABLE … ADD COLUMN before the batch applies', async () => {
    const cp = new MemoryControlPlane();
    const cols = ORDERS.slice(0, 2);
    await register(cp, 'ddl', 'public.orders', cols, ['id']);
    const a = applier(cp);
    await a.handler(kinesisEvent([ev('ddl', 'public.orders', 'insert', 1, { id: 1 }, { id: 1, status: 'a' })]));
    const at = new Date().toISOString();
    await cp.addSchemaVersion(
      {
        source: 'ddl',
        table: 'public.orders',
        version: 2,
        columns: [...cols, { name: 'shipped_at', type: 'timestamp with time zone', nullable: true }],
        key: ['id'],
        effectivePosition: pos(2),
        registeredAt: at,
      },
      { at, actor: 'test', action: 'add-schema-version', source: 'ddl', table: 'public.orders', outcome: 'done', detail: {} },
    );
    const res = await a.handler(
      kinesisEvent([
        ev('ddl', 'public.orders', 'insert', 2, { id: 2 }, { id: 2, status: 'b', shipped_at: '2026-01-02T03:04:05Z' }, { schemaVersion: 2 }),
        ev('ddl', 'public.orders', 'update', 3, { id: 1 }, { id: 1, status: 'c' }, { schemaVersion: 1 }),
      ]),
    );
    expect(res.batchItemFailures).toEqual([]);
    const n = names('ddl', 'public.orders');
    const columns = async (table: string) =>
      (
        await rows(
          `SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'ddl_public' AND table_name = '${table}' ORDER BY ordinal_position`,
        )
      ).map((r) => `${r.column_name}:${r.data_type}`);
    expect(await columns('_cdc_mirror_orders')).toEqual([
      '_cdc_deleted:boolean',
      'id:bigint',
      'status:text',
      '_cdc_position:character varying',
      '_cdc_deleted_at:timestamp with time zone',
      '_cdc_applied_at:timestamp with time zone',
      'shipped_at:timestamp with time zone',
    ]);
    expect(await columns('orders')).toEqual([
      'id:bigint',
      'status:text',
      '_cdc_position:character varying',
      '_cdc_applied_at:timestamp with time zone',
      'shipped_at:timestamp with time zone',
    ]);
    expect(await columns('_cdc_changelog_orders')).toContain('shipped_at:timestamp with time zone');
    expect(await rows(`SELECT id, status, shipped_at FROM ${n.view} ORDER BY id`)).toEqual([
      { id: '1', status: 'c', shipped_at: null },
      { id: '2', status: 'b', shipped_at: '2026-01-02 03:04:05+00' },
    ]);
  });

  it('append-first: a schema change merges the delta first, in the DDL transaction', async () => {
    const cp = new MemoryControlPlane();
    const cols = ORDERS.slice(0, 2);
    await register(cp, 'ddl2', 'public.orders', cols, ['id']);
    const a = applier(cp, undefined, { maxRows: 1_000, maxAgeMs: 3_600_000 });
    await a.handler(kinesisEvent([ev('ddl2', 'public.orders', 'insert', 1, { id: 1 }, { id: 1, status: 'a' })]));
    const n = names('ddl2', 'public.orders');
    const delta = qualified(n.t.schema, n.t.delta);
    expect(await rows(`SELECT id FROM ${delta}`)).toEqual([{ id: '1' }]);
    const at = new Date().toISOString();
    await cp.addSchemaVersion(
      {
        source: 'ddl2',
        table: 'public.orders',
        version: 2,
        columns: [...cols, { name: 'shipped_at', type: 'timestamp with time zone', nullable: true }],
        key: ['id'],
        effectivePosition: pos(2),
        registeredAt: at,
      },
      { at, actor: 'test', action: 'add-schema-version', source: 'ddl2', table: 'public.orders', outcome: 'done', detail: {} },
    );
    const res = await a.handler(
      kinesisEvent([ev('ddl2', 'public.orders', 'insert', 2, { id: 2 }, { id: 2, status: 'b', shipped_at: '2026-01-02T03:04:05Z' }, { schemaVersion: 2 })]),
    );
    expect(res.batchItemFailures).toEqual([]);
    // The row appended before the change is in the base now; the new batch is in the delta, with the new column.
    expect(await rows(`SELECT id, status FROM ${n.mirror}`)).toEqual([{ id: '1', status: 'a' }]);
    expect(await rows(`SELECT id, shipped_at FROM ${delta}`)).toEqual([{ id: '2', shipped_at: '2026-01-02 03:04:05+00' }]);
    expect(await rows(`SELECT id, status, shipped_at FROM ${n.view} ORDER BY id`)).toEqual([
      { id: '1', status: 'a', shipped_at: null },
      { id: '2', status: 'b', shipped_at: '2026-01-02 03:04:05+00' },
    ]);
  });

  it('holds the table when a new schema version needs a column type the warehouse column cannot take', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'conflict', 'public.orders', ORDERS, ['id']);
    const a = applier(cp);
    await a.handler(kinesisEvent([ev('conflict', 'public.orders', 'insert', 1, { id: 1 }, { id: 1, amount: '1.25' })]));
    const at = new Date().toISOString();
    const widened = ORDERS.map((c) => (c.name === 'amount' ? { ...c, type: 'numeric(14,4)' } : c));
    await cp.addSchemaVersion(
      { source: 'conflict', table: 'public.orders', version: 2, columns: widened, key: ['id'], effectivePosition: pos(2), registeredAt: at },
      { at, actor: 'test', action: 'add', source: 'conflict', table: 'public.orders', outcome: 'done', detail: {} },
    );
    const res = await a.handler(kinesisEvent([ev('conflict', 'public.orders', 'update', 2, { id: 1 }, { id: 1, amount: '1.2345' }, { schemaVersion: 2 })]));
    expect(res.batchItemFailures).toEqual([]);
    expect(await cp.getSinkProgress(SINK, 'conflict', 'public.orders')).toMatchObject({ heldFrom: pos(2), appliedPosition: pos(1) });
    expect(await rows(`SELECT amount FROM ${names('conflict', 'public.orders').view}`)).toEqual([{ amount: '1.25' }]);
  });

  for (const mode of ['soft', 'hard'] as const) {
    it(`${mode} delete: a late older event does not resurrect the row, a newer insert does`, async () => {
      const cp = new MemoryControlPlane();
      const sourceId = `res${mode}`;
      await register(cp, sourceId, 'public.orders', ORDERS, ['id'], { mode });
      const a = applier(cp);
      const n = names(sourceId, 'public.orders');
      await a.handler(
        kinesisEvent([
          ev(sourceId, 'public.orders', 'insert', 1, { id: 1 }, { id: 1, status: 'new' }),
          ev(sourceId, 'public.orders', 'delete', 3, { id: 1 }, null),
        ]),
      );
      await a.handler(kinesisEvent([ev(sourceId, 'public.orders', 'update', 2, { id: 1 }, { id: 1, status: 'late', amount: null, note: null })]));
      expect(await rows(`SELECT id FROM ${n.view}`)).toEqual([]);
      if (mode === 'hard') {
        expect(await rows(`SELECT id FROM ${n.mirror}`)).toEqual([]);
        expect(await rows(`SELECT id, _cdc_position FROM ${n.deletedKeys}`)).toEqual([{ id: '1', _cdc_position: pos(3) }]);
      } else {
        expect(await rows(`SELECT id, status, _cdc_deleted, _cdc_position FROM ${n.mirror}`)).toEqual([
          { id: '1', status: 'new', _cdc_deleted: 't', _cdc_position: pos(3) },
        ]);
      }
      expect(await rows(`SELECT _cdc_op FROM ${n.changelog} ORDER BY _cdc_position`)).toEqual([
        { _cdc_op: 'insert' },
        { _cdc_op: 'update' },
        { _cdc_op: 'delete' },
      ]);
      await a.handler(kinesisEvent([ev(sourceId, 'public.orders', 'insert', 4, { id: 1 }, { id: 1, status: 'back' })]));
      expect(await rows(`SELECT id, status, note FROM ${n.view}`)).toEqual([{ id: '1', status: 'back', note: null }]);
      if (mode === 'hard') expect(await rows(`SELECT id FROM ${n.deletedKeys}`)).toEqual([]);
    });
  }

  it('turns heartbeat events into EndToEndLag per sink and source, once per heartbeat', async () => {
    const cp = new MemoryControlPlane();
    const table = `public.${HEARTBEAT_TABLE}`;
    await register(
      cp,
      'beat',
      table,
      [
        { name: 'source_id', type: 'text', nullable: false },
        { name: 'beat_at', type: 'timestamptz', nullable: false },
      ],
      ['source_id'],
    );
    const a = applier(cp);
    const committed = new Date(Date.now() - 4_000).toISOString();
    const beat = ev('beat', table, 'update', 1, { source_id: 'beat' }, { source_id: 'beat', beat_at: committed }, { commitTs: committed });
    const emf = captureEmf();
    const before = Date.now();
    await a.handler(kinesisEvent([beat]));
    const after = Date.now();
    const lag = emf.metric(MetricName.END_TO_END_LAG);
    expect(lag).toHaveLength(1);
    expect(lag[0]!.dims).toEqual({ Sink: SINK, Source: 'beat' });
    expect(lag[0]!.dimNames).toEqual(['Sink', 'Source']);
    expect(lag[0]!.value).toBeGreaterThanOrEqual(before - Date.parse(committed));
    expect(lag[0]!.value).toBeLessThanOrEqual(after - Date.parse(committed));
    const unit = emf.lines.find((l) => MetricName.END_TO_END_LAG in l)!._aws.CloudWatchMetrics[0]!.Metrics[0]!.Unit;
    expect(unit).toBe('Milliseconds');
    const stored = await pool.query({
      text: `SELECT source_id, beat_at = CAST($1 AS timestamptz) AS same FROM ${names('beat', table).view}`,
      values: [committed],
    });
    expect(stored.rows).toEqual([{ source_id: 'beat', same: true }]);
    // A redelivered heartbeat was already committed: it is no new lag sample.
    await a.handler(kinesisEvent([beat]));
    expect(emf.metric(MetricName.END_TO_END_LAG)).toHaveLength(1);
  });

  it('fails a table whose transaction fails (a transient error), from its first failed record on; other tables apply and are not failed; redelivery succeeds', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'down', 'public.orders', ORDERS, ['id']);
    await register(cp, 'down', 'public.other', [{ name: 'k', type: 'text', nullable: false }], ['k']);
    const a = applier(cp);
    await a.handler(
      kinesisEvent([ev('down', 'public.orders', 'insert', 1, { id: 1 }, { id: 1 }), ev('down', 'public.other', 'insert', 2, { k: 'a' }, { k: 'a' })]),
    );
    const n = names('down', 'public.orders');
    // A transient error on this table only (SQLSTATE 57014, as a statement timeout gives).
    await pool.query(
      `CREATE FUNCTION down_public.cancel_write() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'canceling statement due to statement timeout' USING ERRCODE = '57014'; END $$`,
    );
    await pool.query(`CREATE TRIGGER cancel_write BEFORE INSERT OR UPDATE ON ${n.mirror} FOR EACH ROW EXECUTE FUNCTION down_public.cancel_write()`);
    const emf = captureEmf();
    const event = kinesisEvent([
      ev('down', 'public.other', 'insert', 3, { k: 'b' }, { k: 'b' }),
      ev('down', 'public.orders', 'update', 4, { id: 1 }, { id: 1, status: 'x' }),
      ev('down', 'public.other', 'insert', 5, { k: 'c' }, { k: 'c' }),
      ev('down', 'public.orders', 'insert', 6, { id: 2 }, { id: 2, status: 'y' }),
    ]);
    const res = await a.handler(event);
    const seqs = event.Records.map((r) => r.kinesis.sequenceNumber);
    expect(res.batchItemFailures).toEqual([seqs[1], seqs[3]].map((s) => ({ itemIdentifier: s })));
    expect(await rows(`SELECT k FROM ${names('down', 'public.other').view} ORDER BY k`)).toEqual([{ k: 'a' }, { k: 'b' }, { k: 'c' }]);
    expect(await rows(`SELECT _cdc_position FROM ${n.changelog} ORDER BY 1`)).toEqual([{ _cdc_position: pos(1) }]);
    expect((await cp.getSinkProgress(SINK, 'down', 'public.orders'))!.appliedPosition).toBe(pos(1));
    expect(emf.metric(MetricName.APPLY_ERRORS)).toEqual([{ value: 1, dims: { Sink: SINK }, dimNames: ['Sink'] }]);

    await pool.query(`DROP TRIGGER cancel_write ON ${n.mirror}`);
    const retry = await a.handler({ Records: event.Records.slice(1) });
    expect(retry.batchItemFailures).toEqual([]);
    expect(await rows(`SELECT id, status FROM ${n.view} ORDER BY id`)).toEqual([
      { id: '1', status: 'x' },
      { id: '2', status: 'y' },
    ]);
    expect(await rows(`SELECT k FROM ${names('down', 'public.other').view} ORDER BY k`)).toEqual([{ k: 'a' }, { k: 'b' }, { k: 'c' }]);
  });

  it('isolates a value the warehouse refuses: that event is a dead letter, the rest of the table applies', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'val', 'public.orders', ORDERS, ['id']);
    const res = await applier(cp).handler(
      kinesisEvent([
        ev('val', 'public.orders', 'insert', 1, { id: 1 }, { id: 1, amount: '2.50' }),
        ev('val', 'public.orders', 'insert', 2, { id: 2 }, { id: 2, amount: 'lots' }),
        ev('val', 'public.orders', 'update', 3, { id: 1 }, { id: 1, status: 'paid' }),
      ]),
    );
    expect(res.batchItemFailures).toEqual([]);
    const letters = await cp.listDeadLetters(SINK);
    expect(letters.map((l) => [l.code, JSON.parse(l.record).position])).toEqual([['VALUE_REJECTED', pos(2)]]);
    expect(letters[0]!.reason).toMatch(/SQLSTATE 22P02.*numeric.*lots/);
    expect(await rows(`SELECT id, status, amount FROM ${names('val', 'public.orders').view}`)).toEqual([{ id: '1', status: 'paid', amount: '2.50' }]);
  });

  it('takes an undelivered column of a primary-key change from the old key', async () => {
    const cp = new MemoryControlPlane();
    await register(cp, 'pkc', 'public.orders', ORDERS, ['id']);
    const a = applier(cp);
    const n = names('pkc', 'public.orders');
    await a.handler(
      kinesisEvent([
        ev('pkc', 'public.orders', 'insert', 1, { id: 1 }, { id: 1, status: 'a', note: 'big' }),
        ev('pkc', 'public.orders', 'insert', 2, { id: 3 }, { id: 3, status: 'c', note: 'big3' }),
      ]),
    );
    // Same batch: the old key's delete and the new key's insert.
    await a.handler(
      kinesisEvent([
        ev('pkc', 'public.orders', 'insert', 5, { id: 2 }, { id: 2, status: 'moved', amount: null }, { before: { id: 1 }, missing: ['note'] }),
        ev('pkc', 'public.orders', 'delete', 5, { id: 1 }, null, { before: { id: 1 } }),
      ]),
    );
    // Separate batches: the old key's tombstone at that position is read.
    await a.handler(kinesisEvent([ev('pkc', 'public.orders', 'delete', 6, { id: 3 }, null)]));
    await a.handler(
      kinesisEvent([ev('pkc', 'public.orders', 'insert', 6, { id: 4 }, { id: 4, status: 'moved', amount: null }, { before: { id: 3 }, missing: ['note'] })]),
    );
    expect(await rows(`SELECT id, status, note FROM ${n.view} ORDER BY id`)).toEqual([
      { id: '2', status: 'moved', note: 'big' },
      { id: '4', status: 'moved', note: 'big3' },
    ]);
    expect(await rows(`SELECT _cdc_missing, note FROM ${n.changelog} WHERE id IN (2, 4)`)).toEqual([
      { _cdc_missing: '["note"]', note: null },
      { _cdc_missing: '["note"]', note: null },
    ]);
  });

  it('gives the same tables with the Redshift stage lifecycle and with the COPY loader', async () => {
    const batches = (sourceId: string): ChangeEvent[][] => [
      [
        ev(sourceId, 'public.orders', 'insert', 1, { id: 1 }, { id: 1, status: 'a\tb\\c\nd', amount: '1.00', note: null }),
        ev(sourceId, 'public.orders', 'insert', 2, { id: 2 }, { id: 2, status: 'é', amount: null, note: 'n' }),
      ],
      [
        ev(sourceId, 'public.orders', 'update', 3, { id: 1 }, { id: 1, status: 'z' }, { missing: ['note'] }),
        ev(sourceId, 'public.orders', 'delete', 4, { id: 2 }, null),
        ev(sourceId, 'public.orders', 'insert', 1, { id: 1 }, { id: 1 }),
      ],
    ];
    const variants: [string, PgWarehouseOptions][] = [
      ['lcsession', { stages: 'session' }],
      ['lctransaction', { stages: 'transaction' }],
      ['lccopy', { loader: copyStageLoader }],
    ];
    const results: unknown[] = [];
    for (const [sourceId, options] of variants) {
      const cp = new MemoryControlPlane();
      await register(cp, sourceId, 'public.orders', ORDERS, ['id']);
      const a = applier(cp, options);
      for (const b of batches(sourceId)) expect((await a.handler(kinesisEvent(b))).batchItemFailures).toEqual([]);
      const n = names(sourceId, 'public.orders');
      results.push({
        mirror: await rows(`SELECT id, status, amount, note, _cdc_position, _cdc_deleted FROM ${n.mirror} ORDER BY id`),
        changelog: await rows(`SELECT _cdc_position, _cdc_op, id, status, amount, note, _cdc_missing FROM ${n.changelog} ORDER BY 1, 3`),
      });
    }
    expect(results[1]).toEqual(results[0]);
    expect(results[2]).toEqual(results[0]);
    expect(results[0]).toMatchObject({
      mirror: [
        { id: '1', status: 'z', note: null },
        { id: '2', _cdc_deleted: 't' },
      ],
    });
  });

  describe('with the DynamoDB control plane on DynamoDB Local', () => {
    let ddb: DynamoDbLocal;
    beforeAll(async () => {
      ddb = await startDynamoDbLocal();
    });
    afterAll(async () => {
      await ddb?.stop();
    });

    it('advances the high-water mark, holds paused tables and keeps dead letters in the control table', async () => {
      const client = dynamoDbClient(ddb.endpoint);
      await createControlTable(client, 'control');
      const cp = new DynamoDbControlPlane(client, 'control');
      await register(cp, 'ddb', 'public.orders', ORDERS, ['id'], { mode: 'hard' });
      await register(cp, 'ddb', 'public.paused', [{ name: 'k', type: 'text', nullable: false }], ['k'], { state: 'paused' });
      const res = await applier(cp).handler(
        kinesisEvent([
          ev('ddb', 'public.orders', 'insert', 1, { id: 1 }, { id: 1, status: 'a' }),
          ev('ddb', 'public.paused', 'insert', 2, { k: 'x' }, { k: 'x' }),
          ev('ddb', 'public.orders', 'insert', 3, { id: 2 }, { id: 2, 'no such column': 1 }),
          ev('ddb', 'public.orders', 'delete', 4, { id: 1 }, null),
          ev('ddb', 'public.orders', 'insert', 5, { id: 3 }, { id: 3, status: 'c' }),
        ]),
      );
      expect(res.batchItemFailures).toEqual([]);
      expect(await cp.getSinkProgress(SINK, 'ddb', 'public.orders')).toMatchObject({ appliedPosition: pos(5), heldFrom: null });
      expect(await cp.getSinkProgress(SINK, 'ddb', 'public.paused')).toMatchObject({ heldFrom: pos(2), appliedPosition: null });
      const letters = await cp.listDeadLetters(SINK);
      expect(letters.map((l) => [l.code, l.table])).toEqual([['UNSAFE_IDENTIFIER', 'public.orders']]);
      expect((await cp.getTable('ddb', 'public.orders'))!.state).toBe('degraded');
      const n = names('ddb', 'public.orders');
      expect(await rows(`SELECT id, status FROM ${n.view}`)).toEqual([{ id: '3', status: 'c' }]);
      expect(await rows(`SELECT id, _cdc_position FROM ${n.deletedKeys}`)).toEqual([{ id: '1', _cdc_position: pos(4) }]);
    });
  });
});

describe('warehouse applier handler configuration', () => {
  it('refuses to start without its settings, naming the missing one', async () => {
    const saved = { ...process.env };
    try {
      delete process.env[EnvName.CONTROL_TABLE];
      process.env[EnvName.SINK_ID] = SINK;
      const { handler } = await import('../../lambda/handlers/warehouse-applier.ts');
      await expect(handler(kinesisEvent([]), { functionName: 'f', awsRequestId: 'r' } as never)).rejects.toThrow(/CDC_CONTROL_TABLE is not set/);
    } finally {
      process.env = saved;
    }
  });
});
