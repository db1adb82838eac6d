/**
 * Warehouse names that cannot collide (docs/architecture.md §5.4, "Names"), through the real
 * warehouse applier into embedded PostgreSQL: tables named like another table's platform objects,
 * source/schema pairs that the old `<source>_<schema>` joined into one schema, and the move of a
 * deployment's objects of the old layout (docs/warehouse-apply.md, "Layout before injective names").
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { createWarehouseApplier, type WarehouseApplier } from '../../lambda/handlers/warehouse-applier.ts';
import type { PgWarehouseOptions } from '../../lambda/adapters/warehouse-pg.ts';
import type { ColumnDef, ControlPlane } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { legacyPartNames, LEGACY_SUFFIXES } from '../../lambda/core/warehouse/warehouse-names.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { toDeltaTableLayout } from '../helpers/delta-table-layout.ts';

const SINK = 'wh';
const COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'v', type: 'text', nullable: true },
];

let cluster: PostgresCluster;
let n = 0;
beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  cluster = await startPostgres({ fast: true });
}, 120_000);
afterAll(async () => cluster?.stop());

/** A fresh warehouse database, a control plane, and appliers made on demand (each a new process's: no cached shapes). */
async function stand() {
  const db = `names${++n}`;
  await cluster.createDatabase(db);
  const pool = new pg.Pool({ connectionString: cluster.url(db), max: 3 });
  pool.on('error', () => undefined);
  const cp = new MemoryControlPlane();
  let seq = 0;
  let p = 0;
  const applier = (warehouse: PgWarehouseOptions = {}): WarehouseApplier =>
    createWarehouseApplier({
      controlPlane: cp,
      pool,
      sinkId: SINK,
      metrics: new Metrics({ namespace: 'test' }),
      logger: new Logger({ logLevel: 'SILENT' }),
      merge: { maxRows: 1_000_000 },
      warehouse,
    });
  const register = async (sourceId: string, table: string, registeredAt = new Date()) => {
    const at = registeredAt.toISOString();
    await cp.registerTable(
      { source: sourceId, table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
      { source: sourceId, table, version: 1, columns: COLUMNS, key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: at },
      { at, actor: 'test', action: 'register-table', source: sourceId, table, outcome: 'done', detail: {} },
    );
  };
  const ev = (sourceId: string, table: string, key: Row, after: Row): ChangeEvent => {
    p++;
    return {
      v: ENVELOPE_VERSION,
      source: sourceId,
      table,
      op: 'insert',
      key,
      after,
      before: null,
      missing: [],
      position: makePosition(BigInt(p) * 0x100n, 0),
      commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, p)).toISOString(),
      txId: String(p),
      schemaVersion: 1,
      capture: 'slot',
      synthetic: false,
    };
  };
  const apply = async (a: WarehouseApplier, events: ChangeEvent[]) =>
    a.applyRecords(events.map((e) => ({ sequenceNumber: String(++seq), origin: `log/shard-0/${seq}`, text: JSON.stringify(e) })));
  const rows = async (sql: string) => (await pool.query(sql)).rows as Record<string, unknown>[];
  const view = async (sourceId: string, table: string) =>
    rows(`SELECT id::int AS id, v FROM ${qualified(warehouseTable(sourceId, table).schema, warehouseTable(sourceId, table).view)} ORDER BY id`);
  const relations = async (schema: string) =>
    (
      await rows(
        `SELECT c.relname || '(' || c.relkind::text || ')' AS r FROM pg_class c JOIN pg_namespace s ON s.oid = c.relnamespace WHERE s.nspname = '${schema}' AND c.relkind IN ('r', 'v') ORDER BY 1`,
      )
    ).map((r) => String(r.r));
  return { cp, pool, applier, register, ev, apply, rows, view, relations };
}

type Stand = Awaited<ReturnType<typeof stand>>;

async function noHolds(s: Stand, sourceId: string, tables: readonly string[]): Promise<void> {
  for (const t of tables) expect((await (s.cp as ControlPlane).getSinkProgress(SINK, sourceId, t))?.heldFrom ?? null, `${t} held`).toBeNull();
}

describe('warehouse names that cannot collide', () => {
  const TABLES = ['public.t', 'public.t_mirror', 'public.t_delta', 'public.t_changelog'];
  for (const order of [TABLES, [...TABLES].reverse()]) {
    it(`tables t, t_mirror, t_delta and t_changelog each arrive in their own objects (first: ${order[0]})`, async () => {
      const s = await stand();
      for (const t of order) await s.register('demo', t);
      const a = s.applier();
      for (const [i, t] of order.entries()) {
        const out = await s.apply(a, [
          s.ev('demo', t, { id: i + 1 }, { id: i + 1, v: `from ${t}` }),
          s.ev('demo', t, { id: 100 }, { id: 100, v: `shared key, ${t}` }),
        ]);
        expect(out.failed).toEqual([]);
      }
      await noHolds(s, 'demo', order);
      for (const [i, t] of order.entries())
        expect(await s.view('demo', t), t).toEqual([
          { id: i + 1, v: `from ${t}` },
          { id: 100, v: `shared key, ${t}` },
        ]);
      const rels = await s.relations('demo_public');
      for (const t of order) {
        const w = warehouseTable('demo', t);
        expect(rels).toContain(`${w.view}(v)`);
        for (const part of [w.mirror, w.changelog, w.truncations, w.watermark]) expect(rels).toContain(`${part}(r)`);
        expect(rels).toContain(`${w.delta}(v)`);
      }
      await s.pool.end();
    }, 60_000);
  }

  it('source a schema b_c and source a_b schema c each arrive in their own schema', async () => {
    const s = await stand();
    await s.register('a', 'b_c.orders');
    await s.register('a_b', 'c.orders');
    const a = s.applier();
    await s.apply(a, [s.ev('a', 'b_c.orders', { id: 1 }, { id: 1, v: 'a / b_c' })]);
    await s.apply(a, [s.ev('a_b', 'c.orders', { id: 1 }, { id: 1, v: 'a_b / c' })]);
    await noHolds(s, 'a', ['b_c.orders']);
    await noHolds(s, 'a_b', ['c.orders']);
    expect(await s.view('a', 'b_c.orders')).toEqual([{ id: 1, v: 'a / b_c' }]);
    expect(await s.view('a_b', 'c.orders')).toEqual([{ id: 1, v: 'a_b / c' }]);
    expect((await s.rows(`SELECT v FROM "a$b_c".orders`)).map((r) => r.v)).toEqual(['a_b / c']);
    expect((await s.rows(`SELECT v FROM a_b_c.orders`)).map((r) => r.v)).toEqual(['a / b_c']);
    await s.pool.end();
  }, 60_000);
});

/** Turns `table`'s objects into the old layout's: `_cdc_<kind>_<t>` renamed back to `<t>_<kind>` (the view follows them by reference), in `into` if given. */
async function toLegacy(s: Stand, sourceId: string, table: string, into?: string): Promise<void> {
  const w = warehouseTable(sourceId, table);
  // That layout had a delta table and no watermark (docs/warehouse-apply.md, "The layout before one write per event").
  await toDeltaTableLayout(s.pool, w, ['id'], false);
  const old = legacyPartNames(w.view);
  for (const [part] of LEGACY_SUFFIXES) {
    const exists = (await s.rows(`SELECT to_regclass('${w.schema}.${w[part]}') AS r`))[0]!.r;
    if (exists === null) continue;
    await s.pool.query(`ALTER TABLE ${qualified(w.schema, w[part])} RENAME TO ${old[part]}`);
    if (into !== undefined) await s.pool.query(`ALTER TABLE ${qualified(w.schema, old[part])} SET SCHEMA "${into}"`);
  }
  if (into !== undefined) await s.pool.query(`ALTER VIEW ${qualified(w.schema, w.view)} SET SCHEMA "${into}"`);
}

describe('a deployment of the layout before injective names', () => {
  it("moves a table's old objects to their names at its next apply, rows kept, the view made again", async () => {
    const s = await stand();
    await s.register('demo', 'public.t');
    await s.apply(s.applier(), [s.ev('demo', 'public.t', { id: 1 }, { id: 1, v: 'before' }), s.ev('demo', 'public.t', { id: 2 }, { id: 2, v: 'before' })]);
    await toLegacy(s, 'demo', 'public.t');
    expect(await s.relations('demo_public')).toEqual(['t(v)', 't_changelog(r)', 't_delta(r)', 't_mirror(r)', 't_truncations(r)']);
    const out = await s.apply(s.applier(), [
      s.ev('demo', 'public.t', { id: 2 }, { id: 2, v: 'after' }),
      s.ev('demo', 'public.t', { id: 3 }, { id: 3, v: 'after' }),
    ]);
    expect(out.failed).toEqual([]);
    await noHolds(s, 'demo', ['public.t']);
    expect(await s.view('demo', 'public.t')).toEqual([
      { id: 1, v: 'before' },
      { id: 2, v: 'after' },
      { id: 3, v: 'after' },
    ]);
    expect(await s.relations('demo_public')).toEqual([
      '_cdc_changelog_t(r)',
      '_cdc_delta_t(v)',
      '_cdc_mirror_t(r)',
      '_cdc_truncations_t(r)',
      '_cdc_watermark_t(r)',
      't(v)',
    ]);
    // Every event is kept once (the first two moved with the delta table into the changelog).
    expect((await s.rows('SELECT count(*)::int AS n FROM demo_public._cdc_changelog_t'))[0]!.n).toBe(4);
    await s.pool.end();
  }, 60_000);

  it("frees a table name held by another table's old object (t_mirror, the old mirror of t) and keeps t whole", async () => {
    const s = await stand();
    await s.register('demo', 'public.t');
    await s.apply(s.applier(), [s.ev('demo', 'public.t', { id: 1 }, { id: 1, v: 't' })]);
    await toLegacy(s, 'demo', 'public.t');
    await s.register('demo', 'public.t_mirror');
    const out = await s.apply(s.applier(), [s.ev('demo', 'public.t_mirror', { id: 7 }, { id: 7, v: 't_mirror' })]);
    expect(out.failed).toEqual([]);
    await noHolds(s, 'demo', ['public.t', 'public.t_mirror']);
    expect(await s.view('demo', 'public.t_mirror')).toEqual([{ id: 7, v: 't_mirror' }]);
    expect(await s.view('demo', 'public.t')).toEqual([{ id: 1, v: 't' }]);
    await s.apply(s.applier(), [s.ev('demo', 'public.t', { id: 2 }, { id: 2, v: 't again' })]);
    expect(await s.view('demo', 'public.t')).toEqual([
      { id: 1, v: 't' },
      { id: 2, v: 't again' },
    ]);
    await s.pool.end();
  }, 60_000);

  it('holds a table whose old objects are in the schema its source no longer maps to, naming the statements; running them lets it arrive', async () => {
    const s = await stand();
    // The old layout put source a_b's schema c into a_b_c: made here from source a, schema b_c (the same name then).
    await s.register('a', 'b_c.orders');
    await s.apply(s.applier(), [s.ev('a', 'b_c.orders', { id: 1 }, { id: 1, v: 'old' })]);
    await toLegacy(s, 'a', 'b_c.orders');
    await s.register('a_b', 'c.orders');
    const out = await s.apply(s.applier(), [s.ev('a_b', 'c.orders', { id: 2 }, { id: 2, v: 'new' })]);
    expect(out.failed).toEqual([]);
    const held = await s.cp.getSinkProgress(SINK, 'a_b', 'c.orders');
    expect(held?.heldFrom).not.toBeNull();
    const audit = (await s.cp.listAudit('a_b', 'c.orders')).find((e) => e.action === 'hold-table');
    const reason = String(audit?.detail.reason);
    expect(reason).toMatch(/old layout.*a_b_c.*now a\$b_c/);
    const sql = /move them in one transaction: (BEGIN; .*; COMMIT);/.exec(reason)?.[1];
    expect(sql).toContain('SET SCHEMA "a$b_c"');
    await s.pool.query(sql!);
    await s.cp.releaseSinkTable(SINK, 'a_b', 'c.orders', {
      at: new Date().toISOString(),
      actor: 'test',
      action: 'resume',
      source: 'a_b',
      table: 'c.orders',
      outcome: 'done',
      detail: {},
    });
    const again = await s.apply(s.applier(), [s.ev('a_b', 'c.orders', { id: 2 }, { id: 2, v: 'new' })]);
    expect(again.failed).toEqual([]);
    await noHolds(s, 'a_b', ['c.orders']);
    expect(await s.view('a_b', 'c.orders')).toEqual([
      { id: 1, v: 'old' },
      { id: 2, v: 'new' },
    ]);
    expect(await s.relations('a_b_c')).toEqual([]);
    await s.pool.end();
  }, 60_000);
});

describe('a warehouse that folds quoted names to lower case (Redshift; PostgreSQL with foldsNames stands in)', () => {
  it('refuses the second of "Orders" and orders by name, and never serves it through the first', async () => {
    const s = await stand();
    await s.register('demo', 'public.orders', new Date(Date.UTC(2026, 0, 2)));
    await s.register('demo', 'public.Orders', new Date(Date.UTC(2026, 0, 1)));
    const a = s.applier({ foldsNames: true });
    // The second registered arrives first: still refused, and the first is not blocked by it.
    const second = await s.apply(a, [s.ev('demo', 'public.orders', { id: 1 }, { id: 1, v: 'lower' })]);
    expect(second.failed).toEqual([]);
    const first = await s.apply(a, [s.ev('demo', 'public.Orders', { id: 2 }, { id: 2, v: 'upper' })]);
    expect(first.failed).toEqual([]);
    await noHolds(s, 'demo', ['public.Orders']);
    expect((await s.cp.getSinkProgress(SINK, 'demo', 'public.orders'))?.heldFrom).not.toBeNull();
    const audit = (await s.cp.listAudit('demo', 'public.orders')).find((e) => e.action === 'hold-table');
    expect(audit?.detail.sqlState).toBe('NAME_FOLDS');
    expect(String(audit?.detail.reason)).toMatch(
      /demo\/public\.orders is refused by this sink: .*public\.orders and public\.Orders \(registered first\) would be one table/,
    );
    expect(await s.view('demo', 'public.Orders')).toEqual([{ id: 2, v: 'upper' }]);
    expect(await s.relations('demo_public')).not.toContain('orders(v)');
    // A fresh process decides the same (registration order, not arrival order).
    await s.apply(s.applier({ foldsNames: true }), [s.ev('demo', 'public.Orders', { id: 3 }, { id: 3, v: 'upper' })]);
    expect(await s.view('demo', 'public.Orders')).toEqual([
      { id: 2, v: 'upper' },
      { id: 3, v: 'upper' },
    ]);
    // Without folding (PostgreSQL) both are carried.
    const t = await stand();
    await t.register('demo', 'public.orders');
    await t.register('demo', 'public.Orders');
    await t.apply(t.applier(), [
      t.ev('demo', 'public.orders', { id: 1 }, { id: 1, v: 'lower' }),
      t.ev('demo', 'public.Orders', { id: 2 }, { id: 2, v: 'upper' }),
    ]);
    await noHolds(t, 'demo', ['public.orders', 'public.Orders']);
    expect(await t.view('demo', 'public.orders')).toEqual([{ id: 1, v: 'lower' }]);
    expect(await t.view('demo', 'public.Orders')).toEqual([{ id: 2, v: 'upper' }]);
    await s.pool.end();
    await t.pool.end();
  }, 60_000);
});
