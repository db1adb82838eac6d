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
 * The base+delta view: reconcile-pg/overlay.test.ts.
 */
import { describe, expect, it } from 'vitest';
import pg from 'pg';
import { maskSql, pgSourceSide, pgWarehouseSide } from '../../lambda/adapters/reconcile-pg.ts';
import { maskValue } from '../../lambda/core/tables/masking.ts';
import { reconcileTable } from '../../lambda/core/reconcile/reconcile.ts';
import { rowHash } from '../../lambda/core/reconcile/reconcile-rows.ts';
import { FixedPacer } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import { createMirrorSql, createSchemaSql, createViewSql, mirrorLayout, sinkType, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { cluster, src, wh, KEY, RULES, KEY_COLS, DATA_COLS, T, fill, run, useReconcileDatabases } from './reconcile-pg/fixture.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const RUNS = Number(process.env.CDC_RECONCILE_PG_RUNS ?? 25);

useReconcileDatabases();

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
});
