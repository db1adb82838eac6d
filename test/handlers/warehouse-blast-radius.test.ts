/**
 * Blast radius of one table (docs/operations.md): one table's mirror is altered to reject every
 * write (a CHECK constraint); batches that mix it with a neighbour table of the same source and
 * shard keep being acknowledged, the neighbour converges, the broken table is held for the sink
 * with an audit entry, and after the fix `resume` replays the held range so it converges too.
 * Real parts: the applier's Lambda handler, the pg adapter, embedded PostgreSQL; the resume goes
 * through the operator core and the sink's replay (in-memory control plane, a collaborator double).
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
    const replayer = createHeldRangeReplayer({
      controlPlane: cp,
      sinkId: 'warehouse',
      applier,
      readLog: async function* () {
        yield log.slice();
      },
    });
    expect(await replayer.replayPending()).toEqual([expect.objectContaining({ table: 'public.bad', released: true })]);
    expect(await view('public.bad')).toEqual(expected.get('public.bad'));
    const live = [event('public.bad', 1, 'live'), event('public.good', 1, 'live')];
    expect((await send(live)).batchItemFailures).toEqual([]);
    expect(await view('public.bad')).toEqual(expected.get('public.bad'));
    expect(await view('public.good')).toEqual(expected.get('public.good'));
  }, 120_000);
});
