/**
 * The PostgreSQL reconciliation sides' tests (test/adapters/reconcile-pg*.test.ts) share one
 * embedded PostgreSQL per file: a source database with `public.items` (a composite key, a masked
 * and an excluded column) and a warehouse database with its copy in the warehouse layout.
 * `useReconcileDatabases` registers the hooks; `cluster`, `src` and `wh` are live bindings.
 */
import { afterAll, beforeAll } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../../local/postgres.ts';
import { pgSourceSide, pgWarehouseSide, prepareReconcileSession } from '../../../lambda/adapters/reconcile-pg.ts';
import { maskValue } from '../../../lambda/core/tables/masking.ts';
import { reconcileTable } from '../../../lambda/core/reconcile/reconcile.ts';
import { FixedPacer } from '../../../lambda/core/snapshot/snapshot-pacer.ts';
import { createMirrorSql, createSchemaSql, createViewSql, mirrorLayout, sinkType, warehouseTable } from '../../../lambda/core/warehouse/warehouse-sql.ts';

export let cluster: PostgresCluster;
export let src: pg.Client;
export let wh: pg.Client;

export const SOURCE_COLUMNS: Array<[string, string]> = [
  ['region', 'integer'],
  ['code', 'text'],
  ['amount', 'numeric(12,2)'],
  ['at', 'timestamp with time zone'],
  ['email', 'text'],
  ['ssn', 'text'],
  ['note', 'text'],
];
export const KEY = ['region', 'code'];
export const RULES = { mask: ['email'], exclude: ['ssn'] };
/** The warehouse columns of the copy: the key, then the data the rules let through (masked ones as text). */
export const KEY_COLS = SOURCE_COLUMNS.filter(([n]) => KEY.includes(n)).map(([name, t]) => ({ name, type: sinkType(t) }));
export const DATA_COLS = SOURCE_COLUMNS.filter(([n]) => !KEY.includes(n) && !RULES.exclude.includes(n)).map(([name, t]) => ({
  name,
  type: RULES.mask.includes(name) ? 'varchar(65535)' : sinkType(t),
}));
export const T = warehouseTable('app', 'public.items');

export function useReconcileDatabases(): void {
  beforeAll(async () => {
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('rsrc');
    await cluster.createDatabase('rwh');
    src = new pg.Client({ connectionString: cluster.url('rsrc') });
    wh = new pg.Client({ connectionString: cluster.url('rwh') });
    await src.connect();
    await wh.connect();
    await prepareReconcileSession(src);
    await prepareReconcileSession(wh);
    await src.query(`CREATE TABLE public.items (${SOURCE_COLUMNS.map(([n, t]) => `${n} ${t}`).join(', ')}, PRIMARY KEY (region, code))`);
    const keyCols = KEY_COLS;
    const data = DATA_COLS;
    await wh.query(createSchemaSql(T));
    await wh.query(createMirrorSql(T, keyCols, data));
    await wh.query(
      createViewSql(
        T,
        mirrorLayout(keyCols, data).map((c) => c.name),
      ),
    );
  }, 120_000);

  afterAll(async () => {
    await src?.end();
    await wh?.end();
    await cluster?.stop();
  });
}

/** Fills the source with n rows and copies them faithfully into the warehouse mirror (plus tombstones of keys the source no longer has). */
export async function fill(n: number, random: () => number): Promise<void> {
  await src.query('TRUNCATE public.items');
  await wh.query(`TRUNCATE ${T.schema}.${T.mirror}`);
  await src.query(
    `INSERT INTO public.items SELECT g % 13, 'c' || lpad((g / 13)::text, 5, '0') || CASE WHEN g % 3 = 0 THEN 'é' ELSE '' END, round((g * 7.31)::numeric, 2),
            timestamptz '2026-01-01 00:00:00+00' + g * interval '17 minutes', 'user' || g || '@example.com', 'ssn' || g, CASE WHEN g % 4 = 0 THEN NULL ELSE 'n|' || g END
       FROM generate_series(1, $1) g`,
    [n],
  );
  const rows = (await src.query('SELECT region, code, amount::text AS amount, at, email, note FROM public.items')).rows;
  for (let i = 0; i < rows.length; i += 1000) {
    const part = rows.slice(i, i + 1000);
    const values: unknown[] = [];
    const tuples = part.map((r) => {
      const base = values.length;
      values.push(r.region, r.code, r.amount, r.at, maskValue(r.email), r.note, `p${String(i).padStart(23, '0')}`);
      return `($${base + 1}, $${base + 2}, $${base + 3}, $${base + 4}, $${base + 5}, $${base + 6}, $${base + 7}, false, NULL, now())`;
    });
    if (tuples.length)
      await wh.query(
        `INSERT INTO ${T.schema}.${T.mirror} (region, code, amount, at, email, note, _cdc_position, _cdc_deleted, _cdc_deleted_at, _cdc_applied_at) VALUES ${tuples.join(', ')}`,
        values,
      );
  }
  // Tombstones of keys the source deleted: hidden by the view, never divergence.
  const tomb = Math.floor(random() * 5);
  for (let i = 0; i < tomb; i++) {
    await wh.query(
      `INSERT INTO ${T.schema}.${T.mirror} (region, code, amount, at, email, note, _cdc_position, _cdc_deleted, _cdc_deleted_at, _cdc_applied_at) VALUES ($1, $2, 1, now(), NULL, NULL, 'p', true, now(), now())`,
      [99, `gone${i}`],
    );
  }
}

export const run = (leafRows: number, chunk: number) =>
  reconcileTable({
    sink: 'warehouse',
    source: 'app',
    table: 'public.items',
    key: KEY,
    rules: RULES,
    cursor: null,
    leafRows,
    pacer: new FixedPacer(chunk),
    settleMs: 0,
    sleep: async () => undefined,
    maxSampleKeys: 1000,
    sourceSide: pgSourceSide(src, 'public.items', KEY, RULES.mask),
    sinkSide: pgWarehouseSide(wh, 'app', 'public.items', KEY, { stablePoint: false }), // no pipeline here: no heartbeat
  });
