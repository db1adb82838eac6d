/**
 * The PostgreSQL sides of reconciliation (lambda/adapters/reconcile-pg.ts) on a real embedded
 * PostgreSQL: a source table with a composite key (integer, text), a masked and an excluded
 * column and typed values, and a warehouse copy in the warehouse's own layout and types
 * (lambda/core/warehouse/warehouse-sql.ts: integers as bigint, numeric(p,s) as numeric(38,s), text as
 * varchar, a mirror with tombstones behind the view).
 *
 * - The SQL form of the mask equals the masking module's `maskValue`, value by value.
 * - A faithful copy matches on summaries alone (no row is read: the two sides hash alike across
 *   the type mapping and the mask).
 * - Randomized corruptions of the copy (changed value, deleted row, row the source never had,
 *   soft-deleted row) are found exactly, key by key. Runs: `CDC_RECONCILE_PG_RUNS` (default 25),
 *   seed `CDC_PROPERTY_SEED`; both printed.
 * - A table written by the sink's own apply code (`PgWarehouse`: changes appended to the delta,
 *   merged later; docs/warehouse-apply.md) is compared through its base+delta view: changes still
 *   in the delta count, before and after a merge.
 * - That view is counted and summarised through its second form (`overlayAggregateSql`) only
 *   while it is exactly the applier's view: a changed view is read through the view, a view
 *   changed between two reads is verified again.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { maskSql, pgSourceSide, pgWarehouseSide, prepareReconcileSession } from '../../lambda/adapters/reconcile-pg.ts';
import { maskValue } from '../../lambda/core/tables/masking.ts';
import { reconcileTable } from '../../lambda/core/reconcile/reconcile.ts';
import { rowHash } from '../../lambda/core/reconcile/reconcile-rows.ts';
import { FixedPacer } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import {
  createMirrorSql,
  createOverlayViewSql,
  createSchemaSql,
  createViewSql,
  mirrorLayout,
  sinkType,
  warehouseTable,
} from '../../lambda/core/warehouse/warehouse-sql.ts';
import { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import type { SchemaVersion } from '../../lambda/core/shared/control-plane.ts';
import { seededRandom } from '../../local/demo.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const RUNS = Number(process.env.CDC_RECONCILE_PG_RUNS ?? 25);

let cluster: PostgresCluster;
let src: pg.Client;
let wh: pg.Client;

const SOURCE_COLUMNS: Array<[string, string]> = [
  ['region', 'integer'],
  ['code', 'text'],
  ['amount', 'numeric(12,2)'],
  ['at', 'timestamp with time zone'],
  ['email', 'text'],
  ['ssn', 'text'],
  ['note', 'text'],
];
const KEY = ['region', 'code'];
const RULES = { mask: ['email'], exclude: ['ssn'] };
/** The warehouse columns of the copy: the key, then the data the rules let through (masked ones as text). */
const KEY_COLS = SOURCE_COLUMNS.filter(([n]) => KEY.includes(n)).map(([name, t]) => ({ name, type: sinkType(t) }));
const DATA_COLS = SOURCE_COLUMNS.filter(([n]) => !KEY.includes(n) && !RULES.exclude.includes(n)).map(([name, t]) => ({
  name,
  type: RULES.mask.includes(name) ? 'varchar(65535)' : sinkType(t),
}));
const T = warehouseTable('app', 'public.items');

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

/** Fills the source with n rows and copies them faithfully into the warehouse mirror (plus tombstones of keys the source no longer has). */
async function fill(n: number, random: () => number): Promise<void> {
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

const run = (leafRows: number, chunk: number) =>
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

describe('reconcile-pg', () => {
  it("hashes masked columns in SQL exactly as the masking module's maskValue", async () => {
    const samples = ['', 'a', 'user@example.com', 'é ü 漢字 🎉', "quote ' and \\ backslash", '12.50', 'x'.repeat(5000)];
    for (const s of samples) {
      const r = await src.query(`SELECT ${maskSql('CAST($1 AS text)')} AS m`, [s]);
      expect(r.rows[0].m, s.slice(0, 20)).toBe(maskValue(s));
    }
    const n = await src.query(`SELECT ${maskSql('CAST(NULL AS text)')} AS m`);
    expect(n.rows[0].m).toBe(maskValue(null));
  });

  it('hashes a row in SQL exactly as the in-memory side does (quotes, backslashes, NULL, unicode)', async () => {
    const values = ['plain', "it's", 'back\\slash', "both ' and \\", 'é 漢字 🎉', '', null];
    const sql = values.map((_, i) => `quote_nullable(CAST($${i + 1} AS text))`).join(` || ',' || `);
    const r = await src.query(`SELECT CAST(CAST('x' || substr(md5(${sql}), 1, 15) AS bit(60)) AS bigint) AS h`, values);
    expect(BigInt(r.rows[0].h)).toBe(rowHash(values));
  });

  it('a faithful copy matches on summaries alone, across the warehouse types and the mask', async () => {
    await fill(3000, seededRandom(1));
    const v = await run(64, 500);
    expect(v.verdict, v.reason).toBe('MATCH');
    expect(v.cost.leafRows).toBe(0);
    expect(v.cost.bisections).toBe(0);
    expect(v.columns).toEqual(['region', 'code', 'amount', 'at', 'email', 'note']);
    expect([v.sourceRows, v.sinkRows, v.fullCoverage]).toEqual([3000, 3000, true]);
    // Two PostgreSQL sides hash with PostgreSQL's typed hashes (integer vs bigint, numeric(12,2) vs numeric(38,2), text vs varchar, NULLs).
    expect(v.cost.hashScheme).toBe('pg-typed');
  });

  it('counts on a session of its own alongside the walk, and not at all when the estimate says the walk covers the table', async () => {
    await fill(2000, seededRandom(7));
    // The planner's estimate: the row count after ANALYZE; a view (the sink) has none.
    await src.query('ANALYZE public.items');
    expect(await pgSourceSide(src, 'public.items', KEY, RULES.mask).estimateRows()).toBe(2000);
    expect(await pgWarehouseSide(wh, 'app', 'public.items', KEY).estimateRows()).toBeNull();
    const seen: string[] = [];
    const counting = (c: pg.Client, label: string) =>
      ({ query: (sql: string, values?: unknown[]) => (seen.push(`${label}: ${sql}`), c.query(sql, values)) }) as unknown as pg.Client;
    const [srcCount, whCount] = [new pg.Client({ connectionString: cluster.url('rsrc') }), new pg.Client({ connectionString: cluster.url('rwh') })];
    await Promise.all([srcCount.connect(), whCount.connect()]);
    try {
      const reconcile = (rowsPerRun: number) =>
        reconcileTable({
          sink: 'warehouse',
          source: 'app',
          table: 'public.items',
          key: KEY,
          rules: RULES,
          cursor: null,
          rowsPerRun,
          pacer: new FixedPacer(300),
          settleMs: 0,
          sleep: async () => undefined,
          sourceSide: pgSourceSide(src, 'public.items', KEY, RULES.mask, { countClient: counting(srcCount, 'source') }),
          sinkSide: pgWarehouseSide(wh, 'app', 'public.items', KEY, { stablePoint: false, countClient: counting(whCount, 'warehouse') }),
        });
      // The whole table fits the run: no count(*), the counts are the walk's.
      let v = await reconcile(5000);
      expect(v).toMatchObject({ verdict: 'MATCH', fullCoverage: true, sourceRows: 2000, sinkRows: 2000 });
      expect(seen).toEqual([]);
      // A partial run: each side counts once, on its count session.
      v = await reconcile(600);
      expect(v).toMatchObject({ verdict: 'MATCH', fullCoverage: false, coveredRows: 600, sourceRows: 2000, sinkRows: 2000 });
      // (The warehouse side first looks, on the same session, whether its view is the base+delta one: it is not.)
      const counts = seen.filter((q) => q.includes('count(*)'));
      expect(counts).toHaveLength(2);
      expect(counts[0]).toMatch(/^source: .*SELECT count\(\*\) AS n FROM "public"\."items"/);
      expect(counts[1]).toMatch(/^warehouse: .*SELECT count\(\*\) AS n FROM "app_public"\."items"/);
      // A row the sink lacks outside the checked ranges: the whole-table counts keep it from MATCH.
      const last = (await src.query('SELECT region, code FROM public.items ORDER BY region DESC, code COLLATE "C" DESC LIMIT 1')).rows[0];
      await wh.query(`DELETE FROM ${T.schema}.${T.mirror} WHERE region = $1 AND code = $2`, [last.region, last.code]);
      v = await reconcile(600);
      expect(v).toMatchObject({ verdict: 'INCONCLUSIVE', sourceRows: 2000, sinkRows: 1999 });
      // A count that fails leaves its session usable (its transaction is rolled back).
      await expect(pgSourceSide(srcCount, 'public.no_such_table', ['id'], []).countAll()).rejects.toThrow(/no_such_table/);
      expect((await srcCount.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
      expect(await pgSourceSide(srcCount, 'public.items', KEY, []).countAll()).toBe(2000);
    } finally {
      await Promise.all([srcCount.end(), whCount.end()]);
    }
  });

  it('a faithful copy matches on summaries alone under md5-text too (a sink that can only hash text)', async () => {
    await fill(1200, seededRandom(3));
    const textOnly = pgWarehouseSide(wh, 'app', 'public.items', KEY, { stablePoint: false });
    Object.defineProperty(textOnly, 'hashSchemes', { value: ['md5-text'] });
    const v = await reconcileTable({
      sink: 'warehouse',
      source: 'app',
      table: 'public.items',
      key: KEY,
      rules: RULES,
      cursor: null,
      pacer: new FixedPacer(300),
      settleMs: 0,
      sleep: async () => undefined,
      sourceSide: pgSourceSide(src, 'public.items', KEY, RULES.mask),
      sinkSide: textOnly,
    });
    expect(v.verdict, v.reason).toBe('MATCH');
    expect(v.cost.hashScheme).toBe('md5-text');
    expect([v.cost.leafRows, v.cost.bisections]).toEqual([0, 0]);
  });

  it('pg-typed: a changed number and a value turned NULL are found', async () => {
    await fill(50, seededRandom(4));
    await wh.query(
      `UPDATE ${T.schema}.${T.mirror} SET note = NULL WHERE region = 1 AND note IS NOT NULL AND code = (SELECT min(code) FROM ${T.schema}.${T.mirror} WHERE region = 1 AND note IS NOT NULL)`,
    );
    await wh.query(
      `UPDATE ${T.schema}.${T.mirror} SET amount = amount + 0.01 WHERE region = 2 AND code = (SELECT min(code) FROM ${T.schema}.${T.mirror} WHERE region = 2)`,
    );
    const v = await run(4, 20);
    expect(v.cost.hashScheme).toBe('pg-typed');
    expect(v.verdict).toBe('DIVERGED');
    expect(v.sampleKeys.map((k) => [k.key.region, k.kind, k.column]).sort()).toEqual([
      ['1', 'different', 'note'],
      ['2', 'different', 'amount'],
    ]);
  });

  it('a uuid primary key: ranges and bisection work (no collation on a uuid), and a changed row is found', async () => {
    // The source's uuid key orders by its bytes; the warehouse keeps it as its sink type (text), ordered byte-wise ("C").
    const U = warehouseTable('uuidapp', 'public.tokens');
    await src.query('DROP TABLE IF EXISTS public.tokens; CREATE TABLE public.tokens (id uuid PRIMARY KEY, n int)');
    await src.query('INSERT INTO public.tokens SELECT md5(g::text)::uuid, g FROM generate_series(1, 400) g');
    const keyCols = [{ name: 'id', type: sinkType('uuid') }];
    const data = [{ name: 'n', type: sinkType('integer') }];
    await wh.query(`DROP SCHEMA IF EXISTS ${U.schema} CASCADE`);
    await wh.query(createSchemaSql(U));
    await wh.query(createMirrorSql(U, keyCols, data));
    await wh.query(
      createViewSql(
        U,
        mirrorLayout(keyCols, data).map((c) => c.name),
      ),
    );
    const rows = (await src.query<{ id: string; n: number }>('SELECT id::text AS id, n FROM public.tokens')).rows;
    await wh.query(
      `INSERT INTO ${U.schema}.${U.mirror} (id, n, _cdc_position, _cdc_deleted, _cdc_deleted_at, _cdc_applied_at) SELECT x.id, x.n, 'p', false, NULL, now() FROM json_to_recordset($1) AS x(id text, n int)`,
      [JSON.stringify(rows)],
    );
    const runUuid = () =>
      reconcileTable({
        sink: 'warehouse',
        source: 'uuidapp',
        table: 'public.tokens',
        key: ['id'],
        rules: { mask: [], exclude: [] },
        cursor: null,
        leafRows: 4,
        pacer: new FixedPacer(50),
        settleMs: 0,
        sleep: async () => undefined,
        sourceSide: pgSourceSide(src, 'public.tokens', ['id'], []),
        sinkSide: pgWarehouseSide(wh, 'uuidapp', 'public.tokens', ['id'], { stablePoint: false }),
      });
    const same = await runUuid();
    expect(same.verdict, same.reason).toBe('MATCH');
    expect(same.fullCoverage).toBe(true);
    const victim = (await src.query<{ id: string }>('SELECT id::text AS id FROM public.tokens WHERE n = 200')).rows[0]!.id;
    await wh.query(`UPDATE ${U.schema}.${U.mirror} SET n = -1 WHERE id = $1`, [victim]);
    const v = await runUuid();
    expect(v.verdict, v.reason).toBe('DIVERGED');
    expect(v.sampleKeys.map((k) => [k.key.id, k.kind, k.column])).toEqual([[victim, 'different', 'n']]);
  });

  it(`summarizeFirst equals its definition (summary of the range up to the limit-th key, that key) for one-column keys of every order class and a composite key (seed ${SEED})`, async () => {
    // The one-column forms read the last key as the rows' max (no window); the composite one numbers rows.
    const rand = seededRandom(SEED);
    const kinds: Array<{ type: string; value: (g: string) => string }> = [
      { type: 'bigint', value: (g) => `${g} * 7 - 3000` },
      { type: 'numeric(12,2)', value: (g) => `${g} / 8.0 - 100` },
      { type: 'text', value: (g) => `(ARRAY['a', 'B', 'é', 'Z', 'ab', ''])[${g} % 6 + 1] || ${g}` },
      { type: 'character varying(40)', value: (g) => `(ARRAY['x', 'X', 'ß'])[${g} % 3 + 1] || ${g}` },
      { type: 'timestamp with time zone', value: (g) => `timestamptz '2026-01-01 00:00:00+00' + ${g} * interval '37 minutes'` },
      { type: 'date', value: (g) => `date '2000-01-01' + ${g}` },
      { type: 'uuid', value: (g) => `md5(${g}::text)::uuid` },
    ];
    // Text keys under a linguistic collation where the server has one (ICU): the side must still order them byte-wise.
    const icu = (await src.query("SELECT 1 FROM pg_collation WHERE collname = 'und-x-icu'")).rows.length > 0;
    for (const [i, kind] of kinds.entries()) {
      const table = `public.sf${i}`;
      const collate = icu && /^(text|character)/.test(kind.type) ? ' COLLATE "und-x-icu"' : '';
      await src.query(`DROP TABLE IF EXISTS ${table}; CREATE TABLE ${table} (k ${kind.type}${collate} PRIMARY KEY, v int, w text)`);
      await src.query(
        `INSERT INTO ${table} SELECT ${kind.value('g')}, g, CASE WHEN g % 5 = 0 THEN NULL ELSE 'w' || g END FROM generate_series(1, 300) g ON CONFLICT DO NOTHING`,
      );
      const side = pgSourceSide(src, table, ['k'], []);
      await side.shape();
      side.useColumns(['k', 'v', 'w'], { scheme: 'pg-typed', classes: { k: 'text', v: 'int', w: 'text' } });
      const keys = (
        await src.query<{ k: string }>(
          `SELECT CAST(k AS text) AS k FROM ${table} ORDER BY k${['text', 'character varying(40)'].includes(kind.type) ? ' COLLATE "C"' : ''}`,
        )
      ).rows.map((r) => r.k);
      for (let round = 0; round < 12; round++) {
        const from = Math.floor(rand() * (keys.length + 1)) - 1; // -1: from the start
        const range = {
          after: from < 0 ? null : [keys[from]!],
          upTo: rand() < 0.3 ? [keys[Math.min(keys.length - 1, from + 1 + Math.floor(rand() * 200))]!] : null,
        };
        const limit = 1 + Math.floor(rand() * 120);
        const where = `${kind.type} ${JSON.stringify(range)} limit ${limit}`;
        const got = await side.summarizeFirst(range, limit);
        const last = await side.keyAt(range, limit - 1);
        expect(got.last, where).toEqual(last);
        expect(got.summary, where).toEqual(await side.summarize({ after: range.after, upTo: last ?? range.upTo }));
      }
    }
    // A composite key (the window form).
    const side = pgSourceSide(src, 'public.items', KEY, RULES.mask);
    await fill(120, seededRandom(SEED));
    await side.shape();
    side.useColumns(['region', 'code', 'amount'], { scheme: 'pg-typed', classes: { region: 'int', code: 'text', amount: 'numeric' } });
    for (const limit of [1, 7, 50, 500]) {
      const got = await side.summarizeFirst({ after: ['3', 'c'], upTo: null }, limit);
      const last = await side.keyAt({ after: ['3', 'c'], upTo: null }, limit - 1);
      expect(got.last).toEqual(last);
      expect(got.summary).toEqual(await side.summarize({ after: ['3', 'c'], upTo: last }));
    }
  });

  it('refuses an excluded column present in the warehouse', async () => {
    await fill(10, seededRandom(2));
    await wh.query(`ALTER TABLE ${T.schema}.${T.mirror} ADD COLUMN ssn varchar(65535)`);
    try {
      // The view does not show it; the mirror does, and the sink side reads the view: add it there too.
      await wh.query(
        `CREATE OR REPLACE VIEW ${T.schema}.${T.view} AS SELECT region, code, amount, at, email, note, _cdc_position, _cdc_applied_at, ssn FROM ${T.schema}.${T.mirror} WHERE NOT _cdc_deleted`,
      );
      const v = await run(64, 500);
      expect(v.verdict).toBe('DIVERGED');
      expect(v.problems).toEqual(['excluded column ssn is present in warehouse']);
    } finally {
      await wh.query(`DROP VIEW ${T.schema}.${T.view}`);
      await wh.query(`ALTER TABLE ${T.schema}.${T.mirror} DROP COLUMN ssn`);
      await wh.query(
        createViewSql(
          T,
          mirrorLayout(KEY_COLS, DATA_COLS).map((c) => c.name),
        ),
      );
    }
  });

  it(`finds exactly the corrupted keys (seed ${SEED}, ${RUNS} runs)`, async () => {
    console.log(`reconcile-pg corruption property: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED})`);
    const random = seededRandom(SEED);
    for (let r = 0; r < RUNS; r++) {
      const n = 1 + Math.floor(random() * 1500);
      await fill(n, random);
      const keys = (await src.query('SELECT region, code FROM public.items')).rows as Array<{ region: number; code: string }>;
      const expected = new Map<string, string>();
      const changes = Math.floor(random() * 6);
      for (let c = 0; c < changes; c++) {
        const kind = ['different', 'missing', 'extra', 'tombstone'][Math.floor(random() * 4)]!;
        const k = keys[Math.floor(random() * keys.length)]!;
        const id = JSON.stringify([String(k.region), k.code]);
        if (kind === 'extra') {
          const code = `zz${r}-${c}`;
          const region = Math.floor(random() * 13);
          await wh.query(
            `INSERT INTO ${T.schema}.${T.mirror} (region, code, amount, at, email, note, _cdc_position, _cdc_deleted, _cdc_deleted_at, _cdc_applied_at) VALUES ($1, $2, 1, now(), NULL, NULL, 'p', false, NULL, now())`,
            [region, code],
          );
          expected.set(JSON.stringify([String(region), code]), 'extra');
          continue;
        }
        if (expected.has(id)) continue;
        if (kind === 'different') await wh.query(`UPDATE ${T.schema}.${T.mirror} SET note = 'corrupted' WHERE region = $1 AND code = $2`, [k.region, k.code]);
        else if (kind === 'missing') await wh.query(`DELETE FROM ${T.schema}.${T.mirror} WHERE region = $1 AND code = $2`, [k.region, k.code]);
        else await wh.query(`UPDATE ${T.schema}.${T.mirror} SET _cdc_deleted = true WHERE region = $1 AND code = $2`, [k.region, k.code]);
        expected.set(id, kind === 'tombstone' ? 'missing' : kind);
      }
      const v = await run(1 + Math.floor(random() * 200), 50 + Math.floor(random() * 800));
      const found = new Map(v.sampleKeys.map((s) => [JSON.stringify([s.key.region, s.key.code]), s.kind]));
      expect(found, `run ${r} (n ${n})`).toEqual(expected);
      expect(v.verdict).toBe(expected.size ? 'DIVERGED' : 'MATCH');
    }
  }, 240_000);
  it('compares through the base+delta view: changes the sink has not merged yet count, before and after the merge', async () => {
    const table = 'public.dl';
    const D = warehouseTable('app', table);
    await src.query("CREATE TABLE public.dl (id int PRIMARY KEY, v text); INSERT INTO public.dl SELECT g, 'v' || g FROM generate_series(1, 300) g");
    const pool = new pg.Pool({ connectionString: cluster.url('rwh'), max: 2 });
    try {
      const sink = new PgWarehouse(pool);
      const at = new Date().toISOString();
      const version: SchemaVersion = {
        source: 'app',
        table,
        version: 1,
        columns: [
          { name: 'id', type: 'integer', nullable: false },
          { name: 'v', type: 'text', nullable: true },
        ],
        key: ['id'],
        effectivePosition: '0'.repeat(24),
        registeredAt: at,
      };
      let lsn = 0x1000n;
      const event = (op: 'insert' | 'update' | 'delete', id: number, v: string | null): ChangeEvent => ({
        v: ENVELOPE_VERSION,
        source: 'app',
        table,
        op,
        key: { id },
        after: op === 'delete' ? null : { id, v },
        before: null,
        missing: [],
        position: makePosition((lsn += 8n), 0),
        commitTs: at,
        txId: String(lsn),
        schemaVersion: 1,
        capture: 'slot',
        synthetic: false,
      });
      const apply = (events: ChangeEvent[]) =>
        sink.applyTable({ source: 'app', table, deleteMode: 'soft', schemas: new Map([[1, version]]), events, appliedAt: new Date() });
      const reconcile = () =>
        reconcileTable({
          sink: 'warehouse',
          source: 'app',
          table,
          key: ['id'],
          rules: { mask: [], exclude: [] },
          cursor: null,
          leafRows: 16,
          pacer: new FixedPacer(100),
          settleMs: 0,
          sleep: async () => undefined,
          maxSampleKeys: 100,
          sourceSide: pgSourceSide(src, table, ['id'], []),
          sinkSide: pgWarehouseSide(wh, 'app', table, ['id'], { stablePoint: false }),
        });
      const deltaRows = async () => Number((await wh.query(`SELECT count(*)::int AS n FROM ${D.schema}.${D.delta}`)).rows[0].n);
      const mirrorRows = async () => Number((await wh.query(`SELECT count(*)::int AS n FROM ${D.schema}.${D.mirror}`)).rows[0].n);

      // Everything in the delta, nothing in the base: MATCH.
      expect((await apply(Array.from({ length: 300 }, (_, i) => event('insert', i + 1, `v${i + 1}`)))).mode).toBe('append');
      expect([await deltaRows(), await mirrorRows()]).toEqual([300, 0]);
      let v = await reconcile();
      expect(v.verdict, v.reason).toBe('MATCH');
      expect([v.sourceRows, v.sinkRows]).toEqual([300, 300]);

      // Merged, then newer changes in the delta over older rows in the base (updates, a delete): MATCH.
      await sink.merge({ source: 'app', table, deleteMode: 'soft', key: ['id'] });
      await src.query("UPDATE public.dl SET v = 'new' || id WHERE id <= 10; DELETE FROM public.dl WHERE id = 20");
      await apply([...Array.from({ length: 10 }, (_, i) => event('update', i + 1, `new${i + 1}`)), event('delete', 20, null)]);
      expect([await deltaRows(), await mirrorRows()]).toEqual([11, 300]);
      v = await reconcile();
      expect(v.verdict, v.reason).toBe('MATCH');
      expect(v.sinkRows).toBe(299);

      // A source change the sink has not applied: found through the view, and the same after a merge.
      await src.query("UPDATE public.dl SET v = 'unapplied' WHERE id = 5");
      v = await reconcile();
      expect(v.verdict).toBe('DIVERGED');
      expect(v.sampleKeys.map((k) => [k.key.id, k.kind])).toEqual([['5', 'different']]);
      await sink.merge({ source: 'app', table, deleteMode: 'soft', key: ['id'] });
      expect(await deltaRows()).toBe(0);
      v = await reconcile();
      expect(v.sampleKeys.map((k) => [k.key.id, k.kind])).toEqual([['5', 'different']]);
    } finally {
      await pool.end();
    }
  });

  it("counts and summarises the applier's base+delta view through its second form, and reads through the view when it is not exactly the applier's", async () => {
    const table = 'public.ov';
    const D = warehouseTable('app', table);
    await src.query("CREATE TABLE public.ov (id int PRIMARY KEY, v text); INSERT INTO public.ov SELECT g, 'v' || g FROM generate_series(1, 500) g");
    const pool = new pg.Pool({ connectionString: cluster.url('rwh'), max: 2 });
    const whCount = new pg.Client({ connectionString: cluster.url('rwh') });
    await whCount.connect();
    try {
      const sink = new PgWarehouse(pool);
      const at = new Date().toISOString();
      const version: SchemaVersion = {
        source: 'app',
        table,
        version: 1,
        columns: [
          { name: 'id', type: 'integer', nullable: false },
          { name: 'v', type: 'text', nullable: true },
        ],
        key: ['id'],
        effectivePosition: '0'.repeat(24),
        registeredAt: at,
      };
      let lsn = 0x1000n;
      const event = (op: 'insert' | 'update' | 'delete', id: number, v: string | null): ChangeEvent => ({
        v: ENVELOPE_VERSION,
        source: 'app',
        table,
        op,
        key: { id },
        after: op === 'delete' ? null : { id, v },
        before: null,
        missing: [],
        position: makePosition((lsn += 8n), 0),
        commitTs: at,
        txId: String(lsn),
        schemaVersion: 1,
        capture: 'slot',
        synthetic: false,
      });
      const apply = (events: ChangeEvent[]) =>
        sink.applyTable({ source: 'app', table, deleteMode: 'soft', schemas: new Map([[1, version]]), events, appliedAt: new Date() });
      await apply(Array.from({ length: 500 }, (_, i) => event('insert', i + 1, `v${i + 1}`)));
      await sink.merge({ source: 'app', table, deleteMode: 'soft', key: ['id'] });
      // Unmerged changes over the base: updates, deletes, inserts of new keys, a deleted key back.
      await src.query(
        "UPDATE public.ov SET v = 'u' || id WHERE id % 7 = 0; DELETE FROM public.ov WHERE id % 11 = 0; INSERT INTO public.ov SELECT g, 'n' || g FROM generate_series(501, 540) g; INSERT INTO public.ov VALUES (11, 'back')",
      );
      const changes = [
        ...Array.from({ length: 71 }, (_, i) => event('update', (i + 1) * 7, `u${(i + 1) * 7}`)),
        ...Array.from({ length: 45 }, (_, i) => event('delete', (i + 1) * 11, null)),
        ...Array.from({ length: 40 }, (_, i) => event('insert', 501 + i, `n${501 + i}`)),
        event('insert', 11, 'back'),
      ];
      // A key deleted after its update (77 = 7 * 11) holds both in the delta: the newest wins.
      expect((await apply(changes)).mode).toBe('append');
      await wh.query(`ANALYZE ${D.schema}.${D.mirror}`); // the base's planner estimate, as autovacuum keeps it
      const expected = Number((await src.query('SELECT count(*)::int AS n FROM public.ov')).rows[0].n);
      const view = `${D.schema}.${D.view}`;
      expect(Number((await wh.query(`SELECT count(*)::int AS n FROM ${view}`)).rows[0].n)).toBe(expected);

      const seen: string[] = [];
      const spy = (c: pg.Client) => ({ query: (sql: string, values?: unknown[]) => (seen.push(sql), c.query(sql, values)) }) as unknown as pg.Client;
      const reconcile = (rowsPerRun: number) =>
        reconcileTable({
          sink: 'warehouse',
          source: 'app',
          table,
          key: ['id'],
          rules: { mask: [], exclude: [] },
          cursor: null,
          rowsPerRun,
          leafRows: 16,
          pacer: new FixedPacer(60),
          settleMs: 0,
          sleep: async () => undefined,
          maxSampleKeys: 100,
          sourceSide: pgSourceSide(src, table, ['id'], []),
          sinkSide: pgWarehouseSide(spy(wh), 'app', table, ['id'], { stablePoint: false, countClient: spy(whCount), overlaySummaryMinRows: 0 }),
        });
      const throughForm = (sql: string) => sql.includes('_cdc_newest') && sql.includes('CROSS JOIN');
      const throughView = (sql: string) => new RegExp(`(count\\(\\*\\)|sum\\().* FROM "app_public"\\."ov"`).test(sql);

      // A partial run (its count) and a whole one (its summaries only): verified once per run, the
      // count through the form, and the summaries too once the verification is done (before, through the view).
      for (const rowsPerRun of [200, 10_000]) {
        seen.length = 0;
        const v = await reconcile(rowsPerRun);
        expect(v.verdict, v.reason).toBe('MATCH');
        expect([v.sourceRows, v.sinkRows]).toEqual([expected, expected]);
        expect(seen.filter((q) => q.includes('CREATE TEMP VIEW'))).toHaveLength(1);
        if (rowsPerRun === 200) expect(seen.filter((q) => throughForm(q) && !q.includes('hashint8extended'))).toHaveLength(1); // the count (no row hash)
        expect(seen.filter((q) => q.includes('count(*) AS n FROM "app_public"."ov"'))).toEqual([]);
      }

      // A base below OVERLAY_SUMMARY_MIN_ROWS (by default): a whole run (no count: the source's estimate says the walk covers it) summarises through the view and verifies nothing.
      await src.query('ANALYZE public.ov');
      seen.length = 0;
      const small = await reconcileTable({
        sink: 'warehouse',
        source: 'app',
        table,
        key: ['id'],
        rules: { mask: [], exclude: [] },
        cursor: null,
        leafRows: 16,
        pacer: new FixedPacer(60),
        settleMs: 0,
        sleep: async () => undefined,
        sourceSide: pgSourceSide(src, table, ['id'], []),
        sinkSide: pgWarehouseSide(spy(wh), 'app', table, ['id'], { stablePoint: false }),
      });
      expect(small.verdict, small.reason).toBe('MATCH');
      expect(seen.filter(throughForm)).toEqual([]);
      expect(seen.filter((q) => q.includes('CREATE TEMP VIEW'))).toEqual([]);

      // The form finds what the view shows: a base row changed behind the platform's back, and a delta row.
      await wh.query(`UPDATE ${D.schema}.${D.mirror} SET v = 'corrupt' WHERE id = 3`);
      await wh.query(`UPDATE ${D.schema}.${D.delta} SET v = 'corrupt' WHERE id = 505`);
      let v = await reconcile(10_000);
      expect(v.verdict).toBe('DIVERGED');
      expect(v.sampleKeys.map((k) => [k.key.id, k.kind, k.column]).sort()).toEqual([
        ['3', 'different', 'v'],
        ['505', 'different', 'v'],
      ]);
      await wh.query(`UPDATE ${D.schema}.${D.mirror} SET v = 'v3' WHERE id = 3`);
      await wh.query(`UPDATE ${D.schema}.${D.delta} SET v = 'n505' WHERE id = 505`);

      // A view that is not exactly the applier's (here: the same rows, written differently) is read through the view.
      const cols = (
        await wh.query(
          `SELECT attname FROM pg_attribute WHERE attrelid = '${D.schema}.${D.mirror}'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
        )
      ).rows.map((r) => String(r.attname));
      const has = async (name: string) => (await wh.query('SELECT to_regclass($1) AS r', [`${D.schema}.${name}`])).rows[0].r !== null;
      const applierView = createOverlayViewSql(D, cols, ['id'], { deletedKeys: await has(D.deletedKeys), truncations: await has(D.truncations) });
      await wh.query(applierView.replace(' UNION ALL ', ' AND true UNION ALL '));
      seen.length = 0;
      v = await reconcile(200);
      expect(v.verdict, v.reason).toBe('MATCH');
      expect(v.sinkRows).toBe(expected);
      // The count through the form runs beside the check (one statement) and is not taken: nothing else reads the form.
      expect(seen.filter((q) => throughForm(q) && q.includes('hashint8extended'))).toEqual([]);
      expect(seen.filter(throughForm).length).toBeLessThanOrEqual(1);
      expect(seen.filter(throughView).length).toBeGreaterThan(4);
      // The same with a view that shows FEWER rows than the form counts (id 1 hidden): the sink's
      // count is the view's, so a count through the form taken before the check failed would be caught here.
      await wh.query(applierView.replace(' UNION ALL ', ` AND m."v" <> 'v1' UNION ALL `));
      seen.length = 0;
      v = await reconcile(200);
      expect(v.verdict, v.reason).toBe('DIVERGED');
      expect([v.sourceRows, v.sinkRows]).toEqual([expected, expected - 1]);
      expect(seen.filter((q) => throughForm(q) && q.includes('hashint8extended'))).toEqual([]);
      await wh.query(applierView.replace(' UNION ALL ', ' AND true UNION ALL '));

      // A view replaced between two reads of one side: the read that finds it changed verifies again, and the side reads through the view from then on.
      await wh.query(applierView);
      seen.length = 0;
      const side = pgWarehouseSide(spy(wh), 'app', table, ['id'], { stablePoint: false, overlaySummaryMinRows: 0 });
      await side.shape();
      side.useColumns(['id', 'v'], { scheme: 'pg-typed', classes: { id: 'int', v: 'text' } });
      expect(await side.countAll()).toBe(expected);
      const first = await side.summarize({ after: ['100'], upTo: ['400'] });
      expect(seen.filter(throughForm)).toHaveLength(2);
      await wh.query(applierView.replace(' UNION ALL ', ' AND true UNION ALL '));
      seen.length = 0;
      expect(await side.countAll()).toBe(expected);
      expect(await side.summarize({ after: ['100'], upTo: ['400'] })).toEqual(first);
      expect(seen.filter((q) => q.includes('CREATE TEMP VIEW'))).toHaveLength(1); // verified again once; from then on through the view
      expect(seen.filter(throughView)).toHaveLength(2);
      await wh.query(applierView);
      // The probe left nothing behind, and the sessions are usable.
      expect((await wh.query("SELECT count(*)::int AS n FROM pg_class WHERE relname = '_cdc_reconcile_overlay_probe'")).rows[0].n).toBe(0);

      // A warehouse role that may not make temporary views: the probe fails whole, the side reads through the view, the session stays usable.
      await wh.query(
        'CREATE ROLE reconciler_no_temp LOGIN; REVOKE TEMPORARY ON DATABASE rwh FROM PUBLIC; GRANT USAGE ON SCHEMA app_public TO reconciler_no_temp; GRANT SELECT ON ALL TABLES IN SCHEMA app_public TO reconciler_no_temp',
      );
      const noTemp = new pg.Client({ connectionString: cluster.url('rwh').replace('postgres@', 'reconciler_no_temp@') });
      try {
        await noTemp.connect();
        seen.length = 0;
        const limited = pgWarehouseSide(spy(noTemp), 'app', table, ['id'], { stablePoint: false, overlaySummaryMinRows: 0 });
        await limited.shape();
        limited.useColumns(['id', 'v'], { scheme: 'pg-typed', classes: { id: 'int', v: 'text' } });
        expect(await limited.countAll()).toBe(expected);
        expect(await limited.summarize({ after: ['100'], upTo: ['400'] })).toEqual(first);
        expect(seen.filter((q) => q.includes('CREATE TEMP VIEW'))).toHaveLength(1);
        // At most the count beside the check went through the form (not taken: the count and the summary were read through the view).
        expect(seen.filter((q) => throughForm(q) && q.includes('hashint8extended'))).toEqual([]);
        expect(seen.filter(throughForm).length).toBeLessThanOrEqual(1);
        expect(seen.filter(throughView)).toHaveLength(2);
        expect((await noTemp.query('SELECT 1 AS one')).rows).toEqual([{ one: 1 }]);
      } finally {
        await noTemp.end();
        await wh.query('GRANT TEMPORARY ON DATABASE rwh TO PUBLIC; DROP OWNED BY reconciler_no_temp; DROP ROLE reconciler_no_temp');
      }
    } finally {
      await whCount.end();
      await pool.end();
    }
  });

  it('reads the second form with a composite key whose text part holds quotes, backslashes and non-ASCII (values inlined as literals)', async () => {
    const table = 'public.ck';
    const codes = ['plain', "it's", 'back\\slash', "both ' and \\", 'é', 'Z', "''", '\\'];
    await src.query('CREATE TABLE public.ck (id int, code text, v text, PRIMARY KEY (id, code))');
    const pool = new pg.Pool({ connectionString: cluster.url('rwh'), max: 2 });
    try {
      const sink = new PgWarehouse(pool);
      const at = new Date().toISOString();
      const version: SchemaVersion = {
        source: 'app',
        table,
        version: 1,
        columns: [
          { name: 'id', type: 'integer', nullable: false },
          { name: 'code', type: 'text', nullable: false },
          { name: 'v', type: 'text', nullable: true },
        ],
        key: ['id', 'code'],
        effectivePosition: '0'.repeat(24),
        registeredAt: at,
      };
      let lsn = 0x1000n;
      const event = (op: 'insert' | 'update', id: number, code: string, v: string): ChangeEvent => ({
        v: ENVELOPE_VERSION,
        source: 'app',
        table,
        op,
        key: { id, code },
        after: { id, code, v },
        before: null,
        missing: [],
        position: makePosition((lsn += 8n), 0),
        commitTs: at,
        txId: String(lsn),
        schemaVersion: 1,
        capture: 'slot',
        synthetic: false,
      });
      const apply = (events: ChangeEvent[]) =>
        sink.applyTable({ source: 'app', table, deleteMode: 'soft', schemas: new Map([[1, version]]), events, appliedAt: new Date() });
      const all = Array.from({ length: 40 }, (_, i) => codes.map((c) => [i, c] as const)).flat();
      for (const [id, code] of all) await src.query('INSERT INTO public.ck VALUES ($1, $2, $3)', [id, code, `v${id}${code}`]);
      await apply(all.map(([id, code]) => event('insert', id, code, `v${id}${code}`)));
      await sink.merge({ source: 'app', table, deleteMode: 'soft', key: ['id', 'code'] });
      await src.query("UPDATE public.ck SET v = 'u' || v WHERE id % 3 = 0");
      await apply(all.filter(([id]) => id % 3 === 0).map(([id, code]) => event('update', id, code, `uv${id}${code}`)));
      const D = warehouseTable('app', table);
      await wh.query(`ANALYZE ${D.schema}.${D.mirror}`);
      const seen: string[] = [];
      const spy = { query: (sql: string, values?: unknown[]) => (seen.push(sql), wh.query(sql, values)) } as unknown as pg.Client;
      const reconcile = () =>
        reconcileTable({
          sink: 'warehouse',
          source: 'app',
          table,
          key: ['id', 'code'],
          rules: { mask: [], exclude: [] },
          cursor: null,
          rowsPerRun: 1000,
          leafRows: 4,
          pacer: new FixedPacer(7),
          settleMs: 0,
          sleep: async () => undefined,
          maxSampleKeys: 100,
          sourceSide: pgSourceSide(src, table, ['id', 'code'], []),
          sinkSide: pgWarehouseSide(spy, 'app', table, ['id', 'code'], { stablePoint: false, overlaySummaryMinRows: 0 }),
        });
      let v = await reconcile();
      expect(v.verdict, v.reason).toBe('MATCH');
      // Segments of 7 rows: most of them cut between text keys with quotes and backslashes, summarised through the form.
      expect(seen.filter((q) => q.includes('_cdc_newest') && q.includes("E'")).length).toBeGreaterThan(10);
      // A value changed behind the platform's back in the base, under a key with a quote and one with a backslash: found by bisection through the form.
      await wh.query(`UPDATE ${D.schema}.${D.mirror} SET v = 'corrupt' WHERE (id = 7 AND code = $1) OR (id = 8 AND code = $2)`, ["it's", 'back\\slash']);
      v = await reconcile();
      expect(v.verdict).toBe('DIVERGED');
      expect(v.sampleKeys.map((k) => [k.key.id, k.key.code, k.kind]).sort()).toEqual([
        ['7', "it's", 'different'],
        ['8', 'back\\slash', 'different'],
      ]);
    } finally {
      await pool.end();
    }
  });
});
