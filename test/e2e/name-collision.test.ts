/**
 * Tables named like another table's warehouse objects (`t` and `t_mirror`, `t_delta`,
 * `t_changelog`) through the whole slot path (capture, normalizer, applier) into embedded
 * PostgreSQL: each arrives in its own objects, in either order of first apply, none held
 * (docs/architecture.md §5.4, "Names"). Under the old layout `<table>_mirror` the second was held
 * forever ("t_mirror" is not a view). And names as applications write them (docs/onboarding.md,
 * "Names"): `"Orders"` beside `orders`, spaces, quotes and non-ASCII letters, through the slot path
 * and through a bounded `cdc local` whose rule's catalog scan registers them.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import type { TableConfig } from '../../lambda/core/tables/table-config.ts';
import { qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { slotPipeline } from './slot-pipeline.ts';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { SearchStandIn } from '../../local/search-standin.ts';
import { pgSourceSide, pgWarehouseSide, prepareReconcileSession } from '../../lambda/adapters/reconcile-pg.ts';
import { searchSinkSide } from '../../lambda/adapters/reconcile-search.ts';
import { OpenSearchIndex, searchClient } from '../../lambda/adapters/search-opensearch.ts';
import { createSearchApplier } from '../../lambda/handlers/search-applier.ts';
import { reconcileTables, type ReconcileVerdict } from '../../lambda/core/reconcile/reconcile.ts';
import { FixedPacer } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import { searchNames } from '../../lambda/core/search/search-plan.ts';
import type { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { resetLocalState } from '../../local/stack.ts';
import { until } from '../local/helpers.ts';
import { expectVerdict, stateDirDiagnostics } from '../helpers/verdict-diagnostics.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'cdc.js');

let cluster: PostgresCluster;
let standin: SearchStandIn;
let index: OpenSearchIndex;
beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  cluster = await startPostgres({ fast: true });
  standin = new SearchStandIn();
  index = new OpenSearchIndex(searchClient({ node: await standin.start() }));
}, 120_000);
afterAll(async () => {
  index?.client.close();
  await standin?.stop();
  await cluster?.stop();
});

/** Reconciles one table of a slot pipeline through `reconcileTables` (docs/reconcile.md). */
async function reconcile(
  sourceId: string,
  controlPlane: MemoryControlPlane,
  table: string,
  key: string,
  sink: 'warehouse' | 'search',
): Promise<ReconcileVerdict> {
  const src = new pg.Client({ connectionString: cluster.url(sourceId) });
  const wh = new pg.Client({ connectionString: cluster.url(`${sourceId}_dw`) });
  await src.connect();
  await wh.connect();
  try {
    await prepareReconcileSession(src);
    await prepareReconcileSession(wh);
    const [v] = await reconcileTables({
      controlPlane,
      source: sourceId,
      sink,
      pacer: new FixedPacer(100),
      settleMs: 0,
      sleep: async () => undefined,
      tables: [{ table, key: [key], rules: { mask: [], exclude: [] } }],
      sides: async (t) => ({
        source: pgSourceSide(src, t.table, t.key, []),
        sink:
          sink === 'warehouse'
            ? pgWarehouseSide(wh, sourceId, t.table, t.key, { stablePoint: false })
            : searchSinkSide(index, { prefix: 'cdc', source: sourceId, table: t.table, key: t.key, label: sink, stablePoint: false }),
      }),
    });
    return v!;
  } finally {
    await src.end();
    await wh.end();
  }
}

const TABLES = ['t', 't_mirror', 't_delta', 't_changelog'];

describe('source tables named like warehouse objects', () => {
  for (const order of [TABLES, [...TABLES].reverse()]) {
    it(`${order.join(', ')} all arrive, each in its own objects`, async () => {
      const tables: TableConfig[] = order.map((t) => ({ table: `public.${t}`, deleteMode: 'soft', mask: [], exclude: [] }));
      const p = await slotPipeline(cluster, TABLES.map((t) => `CREATE TABLE ${t} (id int PRIMARY KEY, v text)`).join('; '), tables, 'coll');
      try {
        await p.src.query(TABLES.map((t, i) => `INSERT INTO ${t} VALUES (${i + 1}, 'from ${t}'), (100, 'shared key, ${t}')`).join('; '));
        const events = await p.drain();
        for (const t of order) {
          const out = await p.apply(events.filter((e) => e.table === `public.${t}`));
          expect(out.held, `public.${t} held`).toBe(0);
          expect((await p.controlPlane.getSinkProgress('wh', p.id, `public.${t}`))?.heldFrom ?? null, `public.${t} held`).toBeNull();
        }
        for (const [i, t] of TABLES.entries()) {
          const w = warehouseTable(p.id, `public.${t}`);
          expect(await p.rows(`SELECT id::int AS id, v FROM ${qualified(w.schema, w.view)} ORDER BY id`), t).toEqual([
            { id: i + 1, v: `from ${t}` },
            { id: 100, v: `shared key, ${t}` },
          ]);
        }
      } finally {
        await p.close();
      }
    }, 120_000);
  }
});

describe('names as applications write them (issue 28, names)', () => {
  it('"Orders" ("OrderId", "CustomerName", "Total with tax") and orders arrive in a PostgreSQL warehouse as two tables and reconcile; the search sink indexes the first and holds its twin', async () => {
    const tables: TableConfig[] = ['public.Orders', 'public.orders'].map((table) => ({ table, deleteMode: 'soft', mask: [], exclude: [] }));
    const p = await slotPipeline(
      cluster,
      'CREATE TABLE "Orders" ("OrderId" int PRIMARY KEY, "CustomerName" text, "Total with tax" numeric(12,2)); CREATE TABLE orders (id int PRIMARY KEY, note text)',
      tables,
      'case',
    );
    try {
      await p.src.query(
        `INSERT INTO "Orders" VALUES (1, 'Ada ''the "first"''', 10.50), (2, 'Bob', 3.00), (3, 'Zoë', 7.25); INSERT INTO orders VALUES (1, 'lower-case twin')`,
      );
      await p.src.query(`UPDATE "Orders" SET "Total with tax" = 11.00, "CustomerName" = 'Ada' WHERE "OrderId" = 1; DELETE FROM "Orders" WHERE "OrderId" = 2`);
      const events = await p.drain();
      for (const t of ['public.Orders', 'public.orders']) {
        const out = await p.apply(events.filter((e) => e.table === t));
        expect(out.held, `${t} held`).toBe(0);
      }
      const upper = warehouseTable(p.id, 'public.Orders');
      const lower = warehouseTable(p.id, 'public.orders');
      expect(
        await p.rows(
          `SELECT "OrderId"::int AS id, "CustomerName" AS name, "Total with tax"::text AS total FROM ${qualified(upper.schema, upper.view)} ORDER BY 1`,
        ),
      ).toEqual([
        { id: 1, name: 'Ada', total: '11.00' },
        { id: 3, name: 'Zoë', total: '7.25' },
      ]);
      expect(await p.rows(`SELECT id::int AS id, note FROM ${qualified(lower.schema, lower.view)}`)).toEqual([{ id: 1, note: 'lower-case twin' }]);
      const rels = (
        await p.rows(
          `SELECT c.relname::text AS r FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = '${upper.schema}' AND c.relkind = 'v' ORDER BY 1`,
        )
      ).map((r) => r.r);
      // The views readers query, and each table's delta view (the changelog above its watermark: docs/warehouse-apply.md, "The view").
      expect(rels).toEqual(['Orders', '_cdc_delta_Orders', '_cdc_delta_orders', 'orders']);
      // Reconciled row by row against the source (the reconciler's SQL quotes every name): both tables MATCH.
      for (const [t, key] of [
        ['public.Orders', 'OrderId'],
        ['public.orders', 'id'],
      ] as const)
        expect((await reconcile(p.id, p.controlPlane, t, key, 'warehouse')).verdict, t).toBe('MATCH');
      // The search sink: "Orders" (registered first) is indexed under its lower-case name and reconciles; its twin, one index
      // name with it, is held by name for that sink alone (docs/search.md, "Index names"), never written into it.
      const search = createSearchApplier({
        controlPlane: p.controlPlane,
        search: index,
        sinkId: 'search',
        metrics: new Metrics({ namespace: 'test' }),
        logger: new Logger({ logLevel: 'CRITICAL' }),
      });
      const out = await search.applyRecords(events.map((e, i) => ({ sequenceNumber: String(i + 1), origin: `log/${i + 1}`, text: JSON.stringify(e) })));
      expect(out).toMatchObject({ failed: [], deadLettered: 0 });
      const names = searchNames('cdc', p.id, 'public.Orders');
      expect(names.alias).toBe(`cdc.${p.id}.public.orders`);
      const docs: unknown[] = [];
      for await (const d of index.listDocuments(names)) docs.push(d.values);
      expect(docs).toEqual(
        expect.arrayContaining([
          { OrderId: 1, CustomerName: 'Ada', 'Total with tax': '11.00' },
          { OrderId: 3, CustomerName: 'Zoë', 'Total with tax': '7.25' },
        ]),
      );
      expect(docs).toHaveLength(2);
      expect((await reconcile(p.id, p.controlPlane, 'public.Orders', 'OrderId', 'search')).verdict).toBe('MATCH');
      expect((await p.controlPlane.getSinkProgress('search', p.id, 'public.orders'))?.heldFrom).not.toBeNull();
      expect((await p.controlPlane.getSinkProgress('wh', p.id, 'public.orders'))?.heldFrom ?? null).toBeNull();
    } finally {
      await p.close();
    }
  }, 120_000);
});

describe('cdc local carries names as applications write them (issue 28, names)', () => {
  it('"Orders", orders, spaces, quotes and non-ASCII arrive from a rule through cdc local into a PostgreSQL warehouse, row by row; "a.b" is refused by name', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-e2e-names-'));
    await cluster.createDatabase('names_app');
    await cluster.createDatabase('names_dw');
    const app = new pg.Client({ connectionString: cluster.url('names_app') });
    await app.connect();
    try {
      await app.query(`
        CREATE TABLE "Orders" ("OrderId" int PRIMARY KEY, "CustomerName" text, "Total with tax" numeric(12,2));
        CREATE TABLE orders (id int PRIMARY KEY, note text);
        CREATE SCHEMA "Sales Dept";
        CREATE TABLE "Sales Dept"."Zoë ""quoted""" ("Id" int PRIMARY KEY, "Total with tax" numeric(50,2), "naïve col" text);
        CREATE TABLE "a.b" (id int PRIMARY KEY);
        INSERT INTO "Orders" VALUES (1, 'Ada ''the "first"''', 10.50), (2, 'Bob', 3.00);
        INSERT INTO orders VALUES (1, 'lower-case twin');
        INSERT INTO "Sales Dept"."Zoë ""quoted""" VALUES (1, 123456789012345678901234567890123456789012345678.25, 'ünïcödé');`);
      const state = path.join(dir, 'state');
      const child = spawn(
        process.execPath,
        [
          CLI,
          'local',
          '--source',
          cluster.url('names_app'),
          '--tables',
          '*.*',
          '--warehouse',
          cluster.url('names_dw'),
          '--source-id',
          'names',
          '--no-search',
          '--state-dir',
          state,
          '--duration',
          '20s',
        ],
        { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
      await until('cdc local to start', () => /cdc local: (started|resumed) in/.test(out), 240_000);
      await app.query(`
        INSERT INTO "Orders" VALUES (3, 'Zoë', 7.25);
        UPDATE "Orders" SET "Total with tax" = 11.00, "CustomerName" = 'Ada' WHERE "OrderId" = 1;
        DELETE FROM "Orders" WHERE "OrderId" = 2;
        INSERT INTO orders VALUES (2, 'second');
        UPDATE "Sales Dept"."Zoë ""quoted""" SET "Total with tax" = -0.01, "naïve col" = 'a "quoted" value' WHERE "Id" = 1;
        INSERT INTO "Sales Dept"."Zoë ""quoted""" VALUES (2, NULL, NULL);`);
      const code = await exited;
      await expectVerdict(out, 'verdict: MATCH', () => stateDirDiagnostics(state, { source: 'names', warehouseUrl: cluster.url('names_dw') }));
      expect(code, out).toBe(0);
      for (const t of ['public.Orders', 'public.orders', 'Sales Dept.Zoë "quoted"']) expect(out).toContain(`ok   ${t}:`);
      // The one name that cannot be carried is refused by name, with the reason and the fix, in the pre-flight: never skipped silently.
      expect(out).toMatch(
        /pre-flight WARN table_rule \(public\.a\.b\): matches rule \*\.\* but is not captured \(ineligible\): table_name: .*holding '\.' are not carried.*fix: rename/,
      );
      const dw = new pg.Client({ connectionString: cluster.url('names_dw') });
      await dw.connect();
      try {
        const view = (table: string) => {
          const w = warehouseTable('names', table);
          return qualified(w.schema, w.view);
        };
        expect(
          (await dw.query(`SELECT "OrderId"::int AS id, "CustomerName" AS name, "Total with tax"::text AS total FROM ${view('public.Orders')} ORDER BY 1`))
            .rows,
        ).toEqual([
          { id: 1, name: 'Ada', total: '11.00' },
          { id: 3, name: 'Zoë', total: '7.25' },
        ]);
        expect((await dw.query(`SELECT id::int AS id, note FROM ${view('public.orders')} ORDER BY 1`)).rows).toEqual([
          { id: 1, note: 'lower-case twin' },
          { id: 2, note: 'second' },
        ]);
        expect(
          (await dw.query(`SELECT "Id"::int AS id, "Total with tax"::text AS total, "naïve col" AS c FROM ${view('Sales Dept.Zoë "quoted"')} ORDER BY 1`)).rows,
        ).toEqual([
          { id: 1, total: '-0.01', c: 'a "quoted" value' },
          { id: 2, total: null, c: null },
        ]);
      } finally {
        await dw.end();
      }
    } finally {
      await app.query("SELECT pg_drop_replication_slot('cdc_names')").catch(() => undefined);
      await app.end();
      await resetLocalState(path.join(dir, 'state')).catch(() => undefined);
      await rm(dir, { recursive: true, force: true });
    }
  }, 400_000);

  it('with --warehouse-engine redshift, the second of "Orders" and orders is refused by name in the pre-flight, before anything starts', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-e2e-names-rs-'));
    await cluster.createDatabase('names_rs');
    const app = new pg.Client({ connectionString: cluster.url('names_rs') });
    await app.connect();
    try {
      await app.query(`CREATE TABLE "Orders" ("OrderId" int PRIMARY KEY, "CustomerName" text); CREATE TABLE orders (id int PRIMARY KEY, note text);`);
      const child = spawn(
        process.execPath,
        [
          CLI,
          'local',
          '--source',
          cluster.url('names_rs'),
          '--tables',
          'public.Orders,public.orders',
          '--warehouse-engine',
          'redshift',
          '--no-search',
          '--state-dir',
          path.join(dir, 'state'),
          '--duration',
          '5s',
        ],
        { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
      );
      let out = '';
      child.stdout.on('data', (d: Buffer) => (out += d.toString()));
      child.stderr.on('data', (d: Buffer) => (out += d.toString()));
      const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
      // Redshift folds names to lower case: orders would land in "Orders"' tables. Named, with the first and the fix, before anything starts
      // (a pre-flight check that fails is exit 1, as in cdc doctor: docs/operations.md, "Exit codes").
      expect(code, out).toBe(1);
      expect(out).toMatch(
        /public\.orders and public\.Orders \(registered first\) would be one table in the warehouse: Redshift folds quoted names to lower case/,
      );
      expect(out).toMatch(/Fix: leave public\.orders out of the capture/);
      expect(out).not.toMatch(/cdc local: (started|resumed) in/);
    } finally {
      await app.end();
      await rm(dir, { recursive: true, force: true });
    }
  }, 240_000);
});
