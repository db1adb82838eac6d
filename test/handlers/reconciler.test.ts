/**
 * The reconciler handler (lambda/handlers/reconciler.ts) over a real embedded PostgreSQL source
 * and warehouse copy (warehouse layout from lambda/core/warehouse/warehouse-sql.ts), with the in-memory
 * control plane (a collaborator): a tier's tables are reconciled, verdicts stored, and the run's
 * EMF metrics say how many tables diverged and how many captured tables lack a decided verdict
 * within their tier's period (coverage).
 */
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { prepareReconcileSession } from '../../lambda/adapters/reconcile-pg.ts';
import { createReconciler } from '../../lambda/handlers/reconciler.ts';
import { createMirrorSql, createSchemaSql, createViewSql, mirrorLayout, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

let cluster: PostgresCluster;
let src: pg.Client;
let wh: pg.Client;
const T = warehouseTable('shop', 'public.items');

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  await cluster.createDatabase('hsrc');
  await cluster.createDatabase('hwh');
  src = new pg.Client({ connectionString: cluster.url('hsrc') });
  wh = new pg.Client({ connectionString: cluster.url('hwh') });
  await src.connect();
  await wh.connect();
  await prepareReconcileSession(src);
  await prepareReconcileSession(wh);
  await src.query(
    "CREATE TABLE public.items (id int PRIMARY KEY, v text); INSERT INTO public.items SELECT g, 'v' || g FROM generate_series(1, 500) g; CREATE TABLE public.other (id int PRIMARY KEY)",
  );
  await wh.query(createSchemaSql(T));
  await wh.query(createMirrorSql(T, [{ name: 'id', type: 'bigint' }], [{ name: 'v', type: 'varchar(65535)' }]));
  await wh.query(
    createViewSql(
      T,
      mirrorLayout([{ name: 'id', type: 'bigint' }], [{ name: 'v', type: 'varchar(65535)' }]).map((c) => c.name),
    ),
  );
  // The sink's stable point: the source's heartbeat row as the warehouse holds it (here: a beat ahead of every read).
  await wh.query(
    `CREATE TABLE ${T.schema}.cdc_heartbeat (source_id varchar(65535) PRIMARY KEY, beat_at timestamptz); INSERT INTO ${T.schema}.cdc_heartbeat VALUES ('shop', now() + interval '1 hour')`,
  );
  await wh.query(
    `INSERT INTO ${T.schema}.${T.mirror} (id, v, _cdc_position, _cdc_deleted, _cdc_deleted_at, _cdc_applied_at) SELECT g, 'v' || g, lpad(to_hex(g), 24, '0'), false, NULL, now() FROM generate_series(1, 500) g`,
  );
}, 120_000);

afterAll(async () => {
  await src?.end();
  await wh?.end();
  await cluster?.stop();
});

/** The EMF lines printed, merged per dimension set (Powertools' single metrics print one line per metric). */
function emfLines(spy: { mock: { calls: unknown[][] } }): Array<Record<string, unknown>> {
  const lines = spy.mock.calls
    .map((c) => String(c[0]))
    .flatMap((t: string) => t.split('\n'))
    .filter((l: string) => l.startsWith('{') && l.includes('"_aws"'))
    .map((l: string) => JSON.parse(l) as Record<string, unknown>);
  const merged = new Map<string, Record<string, unknown>>();
  for (const l of lines) {
    const dims = JSON.stringify(
      ((l._aws as { CloudWatchMetrics: Array<{ Dimensions: string[][] }> }).CloudWatchMetrics[0]!.Dimensions[0] ?? []).map((d) => [d, l[d]]),
    );
    merged.set(dims, { ...(merged.get(dims) ?? {}), ...l });
  }
  return [...merged.values()];
}

describe('reconciler handler', () => {
  it('reconciles its tier, stores verdicts, and publishes divergence and coverage', async () => {
    const controlPlane = new MemoryControlPlane();
    const run = createReconciler({
      source: 'shop',
      sink: 'warehouse',
      tables: [
        { table: 'public.items', deleteMode: 'soft', mask: [], exclude: [] },
        { table: 'public.other', deleteMode: 'soft', mask: [], exclude: [] },
        { table: 'public.cdc_heartbeat', deleteMode: 'soft', mask: [], exclude: [] },
      ],
      tiers: [
        { name: 'hot', periodMs: 3_600_000, tables: ['public.items'] },
        { name: 'daily', periodMs: 86_400_000, tables: ['*'] },
      ],
      controlPlane,
      sourceClient: async () => src,
      warehouseClient: async () => wh,
      budget: { writeLatencyPct: 10, cpuPct: 5 },
      settleMs: 10,
      metrics: new Metrics({ namespace: 'CdcPlatform', serviceName: 'cdc-reconciler' }),
      logger: new Logger({ serviceName: 'cdc-reconciler', logLevel: 'ERROR' }),
    });
    const spy = vi.spyOn(process.stdout, 'write').mockImplementation(() => true);
    try {
      const first = await run({ tier: 'hot' });
      expect(first.verdicts).toEqual([{ table: 'public.items', verdict: 'MATCH', reason: expect.stringContaining('500 of 500') }]);
      // public.other (tier daily) has no verdict yet: one gap; the heartbeat table is not a captured table.
      expect(first.coverageGaps).toBe(1);
      let emf = emfLines(spy);
      const runMetrics = emf.find((l) => 'ReconcileCoverageGaps' in l)!;
      expect(runMetrics).toMatchObject({ Sink: 'warehouse', ReconcileDivergedTables: 0, ReconcileCoverageGaps: 1, ReconcileInconclusiveTables: 0 });
      expect(emf.find((l) => 'ReconcileRowsChecked' in l)).toMatchObject({
        Sink: 'warehouse',
        Source: 'shop',
        Table: 'public.items',
        ReconcileRowsChecked: 500,
      });
      expect((await controlPlane.getReconcileVerdict('warehouse', 'shop', 'public.items'))?.verdict).toBe('MATCH');

      const daily = await run({ tier: 'daily' });
      expect(daily.verdicts.map((v) => [v.table, v.verdict])).toEqual([['public.other', 'MATCH']]);
      expect(daily.coverageGaps).toBe(0);

      spy.mockClear();
      await wh.query(`UPDATE ${T.schema}.${T.mirror} SET v = 'bad' WHERE id = 250`);
      const diverged = await run({ tier: 'hot' });
      expect(diverged.verdicts[0]).toMatchObject({ table: 'public.items', verdict: 'DIVERGED' });
      emf = emfLines(spy);
      expect(emf.find((l) => 'ReconcileDivergedTables' in l)).toMatchObject({ ReconcileDivergedTables: 1, ReconcileDivergedKeys: 1 });
      const stored = await controlPlane.getReconcileVerdict('warehouse', 'shop', 'public.items');
      expect(stored?.sampleKeys).toEqual([{ key: { id: '250' }, kind: 'different', column: 'v' }]);
      // A DIVERGED verdict is decided: the table stays covered.
      expect(diverged.coverageGaps).toBe(0);
      await expect(run({ tier: 'weekly' })).rejects.toThrow(/no reconciliation tier 'weekly' \(tiers: hot, daily\)/);
    } finally {
      spy.mockRestore();
      await wh.query(`UPDATE ${T.schema}.${T.mirror} SET v = 'v250' WHERE id = 250`);
    }
  }, 60_000);
});
