/**
 * Blast radius of one table (docs/operations.md): one table's mirror is altered to reject every
 * write (a CHECK constraint); batches that mix it with a neighbour table of the same source and
 * shard keep being acknowledged, the neighbour converges, the broken table is held for the sink
 * with an audit entry, and after the fix `resume` replays the held range so it converges too.
 * Real parts: the applier's Lambda handler, the pg adapter, embedded PostgreSQL; the resume goes
 * through the operator core and the sink's replay (in-memory control plane, a collaborator double).
 * And a resume of a sink with two batches of one shard at once (below, `LANES_TABLE`).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { toKinesisStreamEvent } from '../../lambda/adapters/kinesis-event.ts';
import type { LogRecord } from '../../lambda/adapters/change-log-reader.ts';
import { registerTables } from '../helpers/registered-applier.ts';
import { createWarehouseApplier } from '../../lambda/handlers/warehouse-applier.ts';
import { createHeldRangeReplayer, type ReplayDeps } from '../../lambda/core/sink/held-range-replay.ts';
import { failuresPerTable } from '../../lambda/core/sink/batch-failures.ts';
import type { ColumnDef } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { Operator, stateOnlySnapshots } from '../../lambda/core/operator/operator.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

const SOURCE = 'blast';
const COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'status', type: 'text', nullable: true },
];

/** The sink's resume replay over a log kept in memory (the whole log each pass: the replay leaves alone what it does not ask for). */
function replayerOver(cp: MemoryControlPlane, applier: ReplayDeps['applier'], log: readonly LogRecord[]) {
  return createHeldRangeReplayer({
    controlPlane: cp,
    sinkId: 'warehouse',
    applier,
    readLog: async function* () {
      yield log.slice();
    },
  });
}

describe('failuresPerTable', () => {
  it("fails a failed table's records from its first failed one, and nothing of other tables", () => {
    const recs = [
      { sequenceNumber: '10', table: 'a' },
      { sequenceNumber: '11', table: 'b' },
      { sequenceNumber: '12', table: 'a' },
      { sequenceNumber: '13', table: 'b' },
      { sequenceNumber: '14', table: 'a' },
    ];
    expect(failuresPerTable(recs, new Set(['12']))).toEqual(['12', '14']);
    expect(failuresPerTable(recs, new Set(['14', '11']))).toEqual(['11', '13', '14']);
    expect(failuresPerTable(recs, new Set())).toEqual([]);
    // A failed record of no table (its dead letter could not be stored) fails everything after it.
    expect(failuresPerTable([...recs.slice(0, 2), { sequenceNumber: '12', table: null }, ...recs.slice(3)], new Set(['12']))).toEqual(['12', '13', '14']);
  });
});

/**
 * A resume with several batches of one shard at once (a sink's `parallelizationFactor` above 1;
 * docs/operations.md, "How a resume replays"): one lane holds a paused table while another lane of
 * the same shard is still behind with an older event of a key whose newer event carries no value
 * for a column (an unchanged TOAST value). The replay must apply that older event before the newer
 * one, or the column keeps the value from before both. The control plane's `parallelBatches` is held
 * to the DynamoDB adapter's in test/adapters/control-plane-dynamodb/sink-progress.test.ts.
 */
const LANES_SOURCE = 'lanes';
const LANES_TABLE = 'public.items';
const SHARD = 'shardId-000000000000';
const LANES_COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'a', type: 'text', nullable: true },
  { name: 'b', type: 'text', nullable: true },
];

describe('one broken table on embedded PostgreSQL', () => {
  let cluster: PostgresCluster;
  let pool: pg.Pool;

  beforeAll(async () => {
    process.env.POWERTOOLS_METRICS_DISABLED = 'true';
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('wh');
    pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 4 });
    pool.on('error', () => undefined);
  }, 120_000);
  afterAll(async () => {
    await pool?.end();
    await cluster?.stop();
  });

  it('keeps its neighbours flowing, holds it (audited), and a resume after the fix brings it level', async () => {
    const cp = new MemoryControlPlane();
    const at = new Date(Date.now() - 60_000).toISOString();
    for (const table of ['public.good', 'public.bad']) {
      await cp.registerTable(
        { source: SOURCE, table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
        { source: SOURCE, table, version: 1, columns: COLUMNS, key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: at },
        { at, actor: 'test', action: 'register-table', source: SOURCE, table, outcome: 'done', detail: {} },
      );
    }
    const applier = createWarehouseApplier({
      controlPlane: cp,
      pool,
      sinkId: 'warehouse',
      metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: 'test' }),
      logger: new Logger({ logLevel: 'SILENT' }),
    });
    let n = 0;
    let seq = 49590338271490256608559692538361571095921575989136588898n;
    const log: LogRecord[] = [];
    const expected = new Map<string, Map<number, string>>([
      ['public.good', new Map()],
      ['public.bad', new Map()],
    ]);
    const event = (table: string, id: number, status: string): ChangeEvent => {
      n++;
      expected.get(table)!.set(id, status);
      return {
        v: ENVELOPE_VERSION,
        source: SOURCE,
        table,
        op: 'update',
        key: { id },
        after: { id, status },
        before: null,
        missing: [],
        position: makePosition(BigInt(n) * 0x100n, 0),
        commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString(),
        txId: String(n),
        schemaVersion: 1,
        capture: 'slot',
        synthetic: false,
      };
    };
    const send = async (events: ChangeEvent[]) => {
      const records = events.map((e) => ({
        SequenceNumber: String((seq += 1000n)),
        PartitionKey: `${e.table}/${String(e.key.id)}`,
        Data: Buffer.from(JSON.stringify(e)),
      }));
      for (const r of records) log.push({ shardId: 'shardId-000000000000', sequenceNumber: r.SequenceNumber, arrivedAt: null, text: r.Data.toString('utf8') });
      return applier.handler(
        toKinesisStreamEvent(records, { streamArn: 'arn:aws:kinesis:us-east-1:000000000000:stream/changes', shardId: 'shardId-000000000000' }),
      );
    };
    const view = async (table: string) => {
      const t = warehouseTable(SOURCE, table);
      const r = await pool.query(`SELECT id::int AS id, status FROM ${qualified(t.schema, t.view)} ORDER BY id`);
      return new Map(r.rows.map((x: { id: number; status: string }) => [x.id, x.status]));
    };

    const first: ChangeEvent[] = [];
    for (let id = 1; id <= 5; id++) first.push(event('public.good', id, 'v0'), event('public.bad', id, 'v0'));
    expect((await send(first)).batchItemFailures).toEqual([]);
    const before = new Map(expected.get('public.bad'));

    // Break one table: every write to it fails with SQLSTATE 23514 from now on. The critical path
    // writes its changelog (docs/warehouse-apply.md), so that is where the constraint goes.
    const bad = warehouseTable(SOURCE, 'public.bad');
    await pool.query(`ALTER TABLE ${qualified(bad.schema, bad.changelog)} ADD CONSTRAINT reject_all CHECK (false) NOT VALID`);

    let firstHeld: string | null = null;
    for (let round = 1; round <= 6; round++) {
      const batch: ChangeEvent[] = [];
      for (let id = 1; id <= 5; id++)
        batch.push(
          event(id % 2 === 0 ? 'public.bad' : 'public.good', id, `r${round}`),
          event(id % 2 === 0 ? 'public.good' : 'public.bad', id + (round % 3), `r${round}b`),
        );
      firstHeld ??= batch
        .filter((e) => e.table === 'public.bad')
        .map((e) => e.position)
        .sort()[0]!;
      const res = await send(batch);
      expect(res.batchItemFailures, `round ${round}`).toEqual([]);
    }
    expect(await view('public.good')).toEqual(expected.get('public.good'));
    expect(await view('public.bad')).toEqual(before);
    const held = await cp.getSinkProgress('warehouse', SOURCE, 'public.bad');
    expect(held?.heldFrom).toBe(firstHeld);
    const holds = (await cp.listAudit(SOURCE, 'public.bad')).filter((a) => a.action === 'hold-table');
    expect(holds).toEqual([
      expect.objectContaining({ actor: 'applier:warehouse', detail: expect.objectContaining({ sqlState: '23514', heldFrom: firstHeld }) }),
    ]);
    expect((await cp.getSinkProgress('warehouse', SOURCE, 'public.good'))?.heldFrom).toBeNull();

    // Fix the table, resume it: the sink replays the held range, then applies live again.
    await pool.query(`ALTER TABLE ${qualified(bad.schema, bad.changelog)} DROP CONSTRAINT reject_all`);
    const op = new Operator({ controlPlane: cp, settings: { changeLogRetentionMs: 86_400_000 }, snapshots: stateOnlySnapshots });
    expect(await op.resume('oncall', { table: 'public.bad' })).toMatchObject({ outcome: 'done' });
    const replayer = replayerOver(cp, applier, log);
    expect(await replayer.replayPending()).toEqual([expect.objectContaining({ table: 'public.bad', released: true })]);
    expect(await view('public.bad')).toEqual(expected.get('public.bad'));
    const live = [event('public.bad', 1, 'live'), event('public.good', 1, 'live')];
    expect((await send(live)).batchItemFailures).toEqual([]);
    expect(await view('public.bad')).toEqual(expected.get('public.bad'));
    expect(await view('public.good')).toEqual(expected.get('public.good'));
  }, 120_000);

  /**
   * The history, one shard in stream order, lane A (key 1) and lane B (key 2):
   * 1 k1 insert (A), 2 k2 insert (B), 3 a record of the table that does not validate (A),
   * 4 k2 sets a = 'a1' (B, not yet delivered when the table is held), the operator pauses the table,
   * 5 k1 update (A: held), 6 k2 sets b = 'b2' without `a` (B), the operator resumes, the replay runs,
   * then lane B delivers 4 and 6. Returns the view's rows and the dead letters' origins.
   */
  async function run(database: string, parallelizationFactor: number) {
    await cluster.createDatabase(database);
    const lanesPool = new pg.Pool({ connectionString: cluster.url(database), max: 4 });
    lanesPool.on('error', () => undefined);
    const cp = new MemoryControlPlane();
    await registerTables(cp, LANES_SOURCE, [LANES_TABLE], LANES_COLUMNS, 'soft', new Date(Date.now() - 60_000).toISOString());
    const applier = createWarehouseApplier({
      controlPlane: cp,
      pool: lanesPool,
      sinkId: 'warehouse',
      metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: 'test' }),
      logger: new Logger({ logLevel: 'SILENT' }),
      parallelizationFactor,
    });
    const log: LogRecord[] = [];
    const records = new Map<number, { SequenceNumber: string; PartitionKey: string; Data: Buffer }>();
    const put = (n: number, text: string, key: number) => {
      const seq = String(49590338271490256608559692538361571095921575989136588898n + BigInt(n) * 1000n);
      records.set(n, { SequenceNumber: seq, PartitionKey: `${LANES_TABLE}/${key}`, Data: Buffer.from(text) });
      log.push({ shardId: SHARD, sequenceNumber: seq, arrivedAt: null, text });
    };
    const event = (n: number, op: 'insert' | 'update', id: number, after: Record<string, unknown>, missing: string[] = [], schemaVersion = 1): string =>
      JSON.stringify({
        v: ENVELOPE_VERSION,
        source: LANES_SOURCE,
        table: LANES_TABLE,
        op,
        key: { id },
        after: { id, ...after },
        before: null,
        missing,
        position: makePosition(BigInt(n) * 0x100n, 0),
        commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString(),
        txId: String(n),
        schemaVersion,
        capture: 'slot',
        synthetic: false,
      } satisfies ChangeEvent);
    const deliver = async (...ns: number[]) => {
      const res = await applier.handler(
        toKinesisStreamEvent(
          ns.map((n) => records.get(n)!),
          { streamArn: 'arn:aws:kinesis:us-east-1:000000000000:stream/changes', shardId: SHARD },
        ),
      );
      expect(res.batchItemFailures).toEqual([]);
    };
    const op = new Operator({ controlPlane: cp, settings: { changeLogRetentionMs: 86_400_000 }, snapshots: stateOnlySnapshots });

    put(1, event(1, 'insert', 1, { a: 'a0', b: 'b0' }), 1);
    put(2, event(2, 'insert', 2, { a: 'a0', b: 'b0' }), 2);
    put(3, event(3, 'update', 1, { a: 'x', b: 'x' }, [], 99), 1); // schema version 99 is not registered: a dead letter
    put(4, event(4, 'update', 2, { a: 'a1', b: 'b0' }), 2);
    await deliver(1, 3); // lane A
    await deliver(2); // lane B; record 4 is not delivered yet
    expect(await op.pause('oncall', { table: LANES_TABLE, durationMs: 3_600_000, reason: 'maintenance' })).toMatchObject({ outcome: 'done' });
    await new Promise((r) => setTimeout(r, 1_100)); // the applier reads a table's record again after at most a second (docs/architecture.md, "Table records kept for at most a second")
    put(5, event(5, 'update', 1, { a: 'a5', b: 'b5' }), 1);
    put(6, event(6, 'update', 2, { b: 'b2' }, ['a']), 2);
    await deliver(5); // lane A: held
    const hold = await cp.getSinkProgress('warehouse', LANES_SOURCE, LANES_TABLE);
    expect(hold?.heldFromShards).toEqual({ [SHARD]: records.get(5)!.SequenceNumber });
    expect(hold?.parallelBatches ?? false).toBe(parallelizationFactor > 1);

    expect(await op.resume('oncall', { table: LANES_TABLE })).toMatchObject({ outcome: 'done' });
    const replayer = replayerOver(cp, applier, log);
    expect(await replayer.replayPending()).toEqual([expect.objectContaining({ table: LANES_TABLE, released: true })]);
    await deliver(4, 6); // lane B catches up: duplicates of what the replay applied
    await applier.mergeDue({ force: true });
    const t = warehouseTable(LANES_SOURCE, LANES_TABLE);
    const rows = (await lanesPool.query(`SELECT id::int AS id, a, b FROM ${qualified(t.schema, t.view)} ORDER BY id`)).rows as Array<{
      id: number;
      a: string;
      b: string;
    }>;
    const letters = (await cp.listDeadLetters('warehouse')).map((l) => l.origin);
    await lanesPool.end();
    return { rows, letters };
  }

  it('replays the held shard from its trim horizon: the lagging lane’s older event applies before the newer one', async () => {
    const { rows, letters } = await run('lanes2', 2);
    expect(rows).toEqual([
      { id: 1, a: 'a5', b: 'b5' },
      { id: 2, a: 'a1', b: 'b2' },
    ]);
    // The record that did not validate was dead-lettered once, by its live lane; the replay's catch-up did not again.
    expect(letters).toHaveLength(1);
  }, 120_000);

  it('without the lanes said in the hold, the same history keeps the stale column (what the flag mends)', async () => {
    const { rows } = await run('lanes1', 1);
    expect(rows.find((r) => r.id === 2)).toEqual({ id: 2, a: 'a0', b: 'b2' });
  }, 120_000);
});
