/**
 * A resume with several batches of one shard at once (a sink's `parallelizationFactor` above 1;
 * docs/operations.md, "How a resume replays"): one lane holds a paused table while another lane of
 * the same shard is still behind with an older event of a key whose newer event carries no value
 * for a column (an unchanged TOAST value). The replay must apply that older event before the newer
 * one, or the column keeps the value from before both. Real parts: the warehouse applier's Lambda
 * handler, the pg adapter, embedded PostgreSQL, the operator core and the sink's resume replay; the
 * control plane is the in-memory double (its `parallelBatches` is held to the DynamoDB adapter's in
 * test/adapters/control-plane-dynamodb/sink-progress.test.ts).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { toKinesisStreamEvent } from '../../lambda/adapters/kinesis-event.ts';
import type { LogRecord } from '../../lambda/adapters/change-log-reader.ts';
import { createWarehouseApplier } from '../../lambda/handlers/warehouse-applier.ts';
import { createHeldRangeReplayer } from '../../lambda/core/sink/held-range-replay.ts';
import type { ColumnDef } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { Operator, stateOnlySnapshots } from '../../lambda/core/operator/operator.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

const SOURCE = 'lanes';
const TABLE = 'public.items';
const SHARD = 'shardId-000000000000';
const COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'a', type: 'text', nullable: true },
  { name: 'b', type: 'text', nullable: true },
];

describe('resume of a sink with two batches of one shard at once, on embedded PostgreSQL', () => {
  let cluster: PostgresCluster;
  let pool: pg.Pool;

  beforeAll(async () => {
    process.env.POWERTOOLS_METRICS_DISABLED = 'true';
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('wh1');
    await cluster.createDatabase('wh2');
  }, 120_000);
  afterAll(async () => {
    await pool?.end();
    await cluster?.stop();
  });

  /**
   * The history, one shard in stream order, lane A (key 1) and lane B (key 2):
   * 1 k1 insert (A), 2 k2 insert (B), 3 a record of the table that does not validate (A),
   * 4 k2 sets a = 'a1' (B, not yet delivered when the table is held), the operator pauses the table,
   * 5 k1 update (A: held), 6 k2 sets b = 'b2' without `a` (B), the operator resumes, the replay runs,
   * then lane B delivers 4 and 6. Returns the view's rows, the dead letters and the table's state.
   */
  async function run(database: string, parallelizationFactor: number) {
    pool = new pg.Pool({ connectionString: cluster.url(database), max: 4 });
    pool.on('error', () => undefined);
    const cp = new MemoryControlPlane();
    const at = new Date(Date.now() - 60_000).toISOString();
    await cp.registerTable(
      { source: SOURCE, table: TABLE, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
      { source: SOURCE, table: TABLE, version: 1, columns: COLUMNS, key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: at },
      { at, actor: 'test', action: 'register-table', source: SOURCE, table: TABLE, outcome: 'done', detail: {} },
    );
    const applier = createWarehouseApplier({
      controlPlane: cp,
      pool,
      sinkId: 'warehouse',
      metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: 'test' }),
      logger: new Logger({ logLevel: 'SILENT' }),
      parallelizationFactor,
    });
    const log: LogRecord[] = [];
    const records = new Map<number, { SequenceNumber: string; PartitionKey: string; Data: Buffer }>();
    const put = (n: number, text: string, key: number) => {
      const seq = String(49590338271490256608559692538361571095921575989136588898n + BigInt(n) * 1000n);
      records.set(n, { SequenceNumber: seq, PartitionKey: `${TABLE}/${key}`, Data: Buffer.from(text) });
      log.push({ shardId: SHARD, sequenceNumber: seq, arrivedAt: null, text });
    };
    const event = (n: number, op: 'insert' | 'update', id: number, after: Record<string, unknown>, missing: string[] = [], schemaVersion = 1): string =>
      JSON.stringify({
        v: ENVELOPE_VERSION,
        source: SOURCE,
        table: TABLE,
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
    expect(await op.pause('oncall', { table: TABLE, durationMs: 3_600_000, reason: 'maintenance' })).toMatchObject({ outcome: 'done' });
    await new Promise((r) => setTimeout(r, 1_100)); // the applier reads a table's record again after at most a second (docs/architecture.md, "Table records kept for at most a second")
    put(5, event(5, 'update', 1, { a: 'a5', b: 'b5' }), 1);
    put(6, event(6, 'update', 2, { b: 'b2' }, ['a']), 2);
    await deliver(5); // lane A: held
    const hold = await cp.getSinkProgress('warehouse', SOURCE, TABLE);
    expect(hold?.heldFromShards).toEqual({ [SHARD]: records.get(5)!.SequenceNumber });
    expect(hold?.parallelBatches ?? false).toBe(parallelizationFactor > 1);

    expect(await op.resume('oncall', { table: TABLE })).toMatchObject({ outcome: 'done' });
    const replayer = createHeldRangeReplayer({
      controlPlane: cp,
      sinkId: 'warehouse',
      applier,
      readLog: async function* () {
        yield log.slice();
      },
    });
    expect(await replayer.replayPending()).toEqual([expect.objectContaining({ table: TABLE, released: true })]);
    await deliver(4, 6); // lane B catches up: duplicates of what the replay applied
    await applier.mergeDue({ force: true });
    const t = warehouseTable(SOURCE, TABLE);
    const rows = (await pool.query(`SELECT id::int AS id, a, b FROM ${qualified(t.schema, t.view)} ORDER BY id`)).rows as Array<{
      id: number;
      a: string;
      b: string;
    }>;
    const letters = (await cp.listDeadLetters('warehouse')).map((l) => l.origin);
    const state = (await cp.getTable(SOURCE, TABLE))!.state;
    await pool.end();
    pool = undefined as unknown as pg.Pool;
    return { rows, letters, state };
  }

  it('replays the held shard from its trim horizon: the lagging lane’s older event applies before the newer one', async () => {
    const { rows, letters } = await run('wh1', 2);
    expect(rows).toEqual([
      { id: 1, a: 'a5', b: 'b5' },
      { id: 2, a: 'a1', b: 'b2' },
    ]);
    // The record that did not validate was dead-lettered once, by its live lane; the replay's catch-up did not again.
    expect(letters).toHaveLength(1);
  }, 120_000);

  it('without the lanes said in the hold, the same history keeps the stale column (what the flag mends)', async () => {
    const { rows } = await run('wh2', 1);
    expect(rows.find((r) => r.id === 2)).toEqual({ id: 2, a: 'a0', b: 'b2' });
  }, 120_000);
});
