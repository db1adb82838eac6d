/**
 * The PostgreSQL merge over a large base (docs/warehouse-apply.md, "What a merge costs"):
 * `PgWarehouse.merge` lets the planner use nested loops when the base is large against the delta
 * (`mergeMayUseNestedLoops`) and appends to the changelog with `ON CONFLICT DO NOTHING`. Plans and
 * that clause change what a merge costs, never what it leaves: randomized in real PostgreSQL, two
 * table sets of the same shape (made by the live apply code) get the same large base (mirror rows,
 * their changelog events and, in hard mode, remembered deletions; analysed) and then rounds of the
 * same random delta rows (inserts, updates, snapshots and deletes of base keys and new ones, at
 * positions below and above the base's; several keys at one position; events the changelog holds
 * already, delivered again; the same event twice in one delta or in two). One set is merged by
 * `PgWarehouse.merge` (which must take the nested loops), the other by the portable merge
 * (`mergeSql` without `engine`: the changelog's anti-join, what Redshift runs) with nested loops
 * off, and every row of their mirrors, changelogs, deleted-keys tables and deltas is compared
 * after every round, in three shapes: soft, soft with a deleted-keys table, hard. Besides, the
 * decision itself: off for a small or never-analysed base. And the merges an apply runs first
 * (`PgWarehouse.applyTable`: a full apply's merge of the pending delta, an update that lacks a
 * column; the merge before a schema change, an insert of a version that adds a column) decide the
 * same way (`TableApplyResult.merged`) and leave what the portable merge followed by the same
 * apply leaves.
 *
 * Runs and seed: `CDC_PROPERTY_RUNS` (default 60, over the three shapes) and `CDC_PROPERTY_SEED`
 * (default random); both are printed so a failure can be replayed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import type { TableBatch } from '../../lambda/core/warehouse/warehouse-port.ts';
import { qualified, type WarehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { watermarkToEndSql } from '../../lambda/core/warehouse/watermark-sql.ts';
import { mergeMayUseNestedLoops, NESTED_LOOP_BASE_FACTOR } from '../../lambda/core/warehouse/merge-nested-loops.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import {
  appendDelta,
  baseTables,
  portableMerge,
  DELTA_COLUMNS,
  dumpTables,
  insertRows,
  KEY,
  makeTableSets,
  resetTables,
  schemaOf,
  SHAPES,
  TABLE,
  ts,
  type Shape,
} from '../helpers/merge-table-sets.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 60);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
/** Base keys: k1 below `BASE_K1`, k2 'a' or 'b'; in hard mode the keys from `GONE_K1` on are remembered deletions (every base table the merge writes large against a delta). */
const BASE_K1 = 600;
const GONE_K1 = 300;

describe('merge over a large base: nested loops and ON CONFLICT leave what the portable merge leaves (randomized, embedded PostgreSQL)', () => {
  let cluster: PostgresCluster;
  let pool: pg.Pool;

  beforeAll(async () => {
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('wh');
    pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 4 });
    pool.on('error', () => undefined);
    console.log(`merge-plans: ${RUNS} runs, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
  });

  afterAll(async () => {
    await pool?.end();
    await cluster?.stop();
  });

  it('lets nested loops in only when every base table the merge writes is estimated at NESTED_LOOP_BASE_FACTOR times the delta', () => {
    expect(mergeMayUseNestedLoops(100, [NESTED_LOOP_BASE_FACTOR * 100])).toBe(true);
    expect(mergeMayUseNestedLoops(100, [NESTED_LOOP_BASE_FACTOR * 100 - 1])).toBe(false);
    expect(mergeMayUseNestedLoops(100, [1e9, null])).toBe(false); // never analysed
    expect(mergeMayUseNestedLoops(100, [1e9, 10])).toBe(false); // a small deleted-keys table the merge writes
    expect(mergeMayUseNestedLoops(0, [1e9])).toBe(false);
    expect(mergeMayUseNestedLoops(10, [])).toBe(false);
  });

  it(`leaves the same mirror, changelog, deleted keys and delta as the portable merge with nested loops off, in every delete mode (${RUNS} runs)`, async () => {
    const rand = seededRandom(SEED);
    const started = Date.now();
    const stats = { merges: 0, rows: 0, redelivered: 0, emptyMerges: 0 };
    const warehouse = new PgWarehouse(pool);
    const { dump, append, fillBase, randomDelta, referenceMerge } = mergeHarness(pool, rand, stats);

    // Per shape, two sources (two warehouse schemas) whose tables the live apply code makes.
    const sets = new Map<string, { idx: WarehouseTable; ref: WarehouseTable; shape: Shape }>();
    for (const [i, shape] of SHAPES.entries()) {
      const [idx, ref] = await makeTableSets(warehouse, [`idx${i}`, `ref${i}`], shape);
      sets.set(shape.name, { idx: idx!, ref: ref!, shape });
    }

    for (let run = 0; run < RUNS; run++) {
      const { idx, ref, shape } = sets.get(SHAPES[run % SHAPES.length]!.name)!;
      const where = `run ${run} (${shape.name}), seed ${SEED}`;
      await fillBase(idx, shape);
      await fillBase(ref, shape);
      expect(await dump(idx, shape), `${where}: the same base`).toEqual(await dump(ref, shape));
      const rounds = 1 + Math.floor(rand() * 3);
      for (let round = 0; round < rounds; round++) {
        const rows = randomDelta(round);
        stats.rows += rows.length;
        await append(idx, rows);
        await append(ref, rows);
        const r = await warehouse.merge({ source: idx.schema, table: TABLE, deleteMode: shape.mode, key: KEY, target: idx });
        // A delta of events the changelog holds already appends nothing: nothing to merge, no plan to pick.
        expect(
          r.nestedLoops,
          `${where}, round ${round}: ${rows.length} delta rows (${r.rows} new) over a base of ${2 * BASE_K1} keys take the nested loops`,
        ).toBe(r.rows > 0);
        if (r.rows === 0) stats.emptyMerges++;
        await referenceMerge(ref, shape);
        expect(await dump(idx, shape), `${where}, round ${round}: merge with nested loops and ON CONFLICT vs the portable merge`).toEqual(
          await dump(ref, shape),
        );
        stats.merges++;
      }
    }
    // A small base (the same tables emptied, analysed) keeps hash joins.
    const { idx, shape } = sets.get('soft')!;
    await resetTables(pool, idx, shape);
    await pool.query(`ANALYZE ${qualified(idx.schema, idx.mirror)}`);
    await append(idx, randomDelta(0));
    expect((await warehouse.merge({ source: idx.schema, table: TABLE, deleteMode: 'soft', key: KEY, target: idx })).nestedLoops).toBe(false);
    console.log(
      `merge-plans: ${RUNS} runs in ${((Date.now() - started) / 1000).toFixed(1)} s: ${stats.merges} merges compared, ${stats.rows} delta rows, ${stats.redelivered} events the changelog held delivered again, ${stats.emptyMerges} merges with nothing new; seed ${SEED}`,
    );
  }, 600_000);

  it(`decides the same for the merges an apply runs first (a full apply, a schema change), and they leave what the portable merge leaves (${Math.max(6, Math.ceil(RUNS / 10))} runs)`, async () => {
    const runs = Math.max(6, Math.ceil(RUNS / 10));
    const rand = seededRandom(SEED + 1);
    const stats = { rows: 0, redelivered: 0 };
    const warehouse = new PgWarehouse(pool);
    const { dump, append, fillBase, randomDelta, referenceMerge } = mergeHarness(pool, rand, stats);
    const sets = new Map<string, { idx: WarehouseTable; ref: WarehouseTable; shape: Shape; added: string[] }>();
    for (const [i, shape] of SHAPES.entries()) {
      const [idx, ref] = await makeTableSets(warehouse, [`fidx${i}`, `fref${i}`], shape);
      sets.set(shape.name, { idx: idx!, ref: ref!, shape, added: [] });
    }
    /** The batch: an update that lacks `v1` (a full apply), or an insert of the next schema version, which adds a column (a schema change). */
    const batchFor = (t: WarehouseTable, shape: Shape, added: readonly string[], kind: 'full apply' | 'schema change', run: number): TableBatch => {
      const sourceId = t.source;
      const version = added.length + 1;
      const schemas = new Map(Array.from({ length: version }, (_, v) => [v + 1, schemaOf(sourceId, v + 1, added.slice(0, v))] as const));
      const base = {
        v: ENVELOPE_VERSION,
        source: sourceId,
        table: TABLE,
        before: null,
        position: makePosition(5000n + BigInt(run), 0),
        commitTs: ts(7),
        txId: null,
        schemaVersion: version,
        capture: 'slot',
        synthetic: false,
      } as const;
      const event: ChangeEvent =
        kind === 'full apply'
          ? {
              ...base,
              op: 'update',
              key: { k1: 1, k2: 'a' },
              after: { k1: 1, k2: 'a', v2: run, ...Object.fromEntries(added.map((c) => [c, 'y'])) },
              missing: ['v1'],
            }
          : {
              ...base,
              op: 'insert',
              key: { k1: 7000 + run, k2: 'a' },
              after: { k1: 7000 + run, k2: 'a', v1: 'n', v2: run, ...Object.fromEntries(added.map((c) => [c, 'z'])) },
              missing: [],
            };
      return { source: sourceId, table: TABLE, deleteMode: shape.mode, schemas, events: [event], appliedAt: new Date(Date.UTC(2026, 0, 2)), target: t };
    };
    for (let run = 0; run < runs; run++) {
      const set = sets.get(SHAPES[run % SHAPES.length]!.name)!;
      const { idx, ref, shape } = set;
      const kind = Math.floor(run / SHAPES.length) % 2 === 0 ? 'full apply' : 'schema change';
      const where = `run ${run} (${shape.name}, ${kind}), seed ${SEED + 1}`;
      await fillBase(idx, shape);
      await fillBase(ref, shape);
      const rows = randomDelta(0);
      stats.rows += rows.length;
      await append(idx, rows);
      await append(ref, rows);
      const pendingRows = Number((await pool.query(`SELECT count(*) AS n FROM ${qualified(idx.schema, idx.delta)}`)).rows[0].n);
      const added = kind === 'schema change' ? [...set.added, `v${3 + set.added.length}`] : set.added;
      const r = await warehouse.applyTable(batchFor(idx, shape, added, kind, run));
      expect(r.mode, where).toBe(kind === 'full apply' ? 'apply' : 'append');
      // The delta holds each appended event once (a redelivered one, or one the changelog holds, is skipped at the append).
      // A delta of events the changelog held already appended nothing: no merge comes first.
      expect(r.merged, `${where}: the delta of ${pendingRows} rows merged first, with nested loops over a base of ${2 * BASE_K1} keys`).toEqual(
        pendingRows > 0 ? { rows: pendingRows, nestedLoops: true } : undefined,
      );
      await referenceMerge(ref, shape);
      const rr = await warehouse.applyTable(batchFor(ref, shape, added, kind, run));
      expect(rr.merged, `${where}: the reference's delta was merged already`).toBeUndefined();
      expect(await dump(idx, shape), `${where}: the apply's merge vs the portable merge`).toEqual(await dump(ref, shape));
      set.added = added;
    }
    // A small base keeps hash joins here too.
    const { idx, shape, added } = sets.get('soft')!;
    await resetTables(pool, idx, shape);
    await pool.query(`ANALYZE ${qualified(idx.schema, idx.mirror)}`);
    const rows = randomDelta(0);
    await append(idx, rows);
    const pendingRows = Number((await pool.query(`SELECT count(*) AS n FROM ${qualified(idx.schema, idx.delta)}`)).rows[0].n);
    expect((await warehouse.applyTable(batchFor(idx, shape, added, 'full apply', runs))).merged).toEqual({ rows: pendingRows, nestedLoops: false });
    console.log(`merge-plans (an apply's first merge): ${runs} runs, ${stats.rows} delta rows; seed ${SEED + 1}`);
  }, 600_000);
});

/** The randomized harness both tests share: the base, random deltas and the reference merge, over `pool`. */
function mergeHarness(pool: pg.Pool, rand: () => number, stats: { rows: number; redelivered: number }) {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
  const columnsOf = async (t: WarehouseTable, name: string): Promise<string[]> =>
    (
      await pool.query<{ attname: string }>(
        `SELECT attname FROM pg_attribute WHERE attrelid = '${qualified(t.schema, name)}'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
      )
    ).rows.map((r) => r.attname);
  const dump = (t: WarehouseTable, shape: Shape): Promise<Record<string, unknown>> => dumpTables(pool, t, shape);
  const append = (t: WarehouseTable, rows: (string | null)[][]): Promise<void> => appendDelta(pool, t, rows);
  const basePosition = (k1: number): string => makePosition(BigInt(40 + (k1 % 20)), k1 % 3);

  /** The base: every base key live in the mirror at its position, with its event in the changelog; hard mode: remembered deletions. */
  const fillBase = async (t: WarehouseTable, shape: Shape): Promise<void> => {
    await resetTables(pool, t, shape);
    const live = shape.mode === 'hard' ? GONE_K1 : BASE_K1;
    const mirrorRows: (string | null)[][] = [];
    const changelogRows: (string | null)[][] = [];
    const goneRows: (string | null)[][] = [];
    for (let k1 = 0; k1 < BASE_K1; k1++) {
      for (const k2 of ['a', 'b']) {
        const gone = k1 >= live || (shape.mode === 'soft' && k1 % 17 === 0);
        const p = basePosition(k1);
        if (shape.mode === 'hard' && gone) {
          goneRows.push([String(k1), k2, p, ts(5), ts(0)]);
        } else {
          mirrorRows.push([gone ? 'true' : 'false', String(k1), k2, gone ? null : `base${k1}`, gone ? null : String(k1), p, gone ? ts(5) : null, ts(0)]);
        }
        changelogRows.push([
          p,
          gone ? 'delete' : 'insert',
          ts(5),
          '1',
          null,
          'false',
          null,
          ts(0),
          String(k1),
          k2,
          gone ? null : `base${k1}`,
          gone ? null : String(k1),
        ]);
      }
    }
    if (shape.mode === 'soft' && shape.madeHard) {
      // Remembered deletions from the time the table was hard: keys the mirror does not hold.
      for (let k1 = BASE_K1; k1 < BASE_K1 + GONE_K1; k1++) {
        for (const k2 of ['a', 'b']) {
          goneRows.push([String(k1), k2, basePosition(k1), ts(5), ts(0)]);
          changelogRows.push([basePosition(k1), 'delete', ts(5), '1', null, 'false', null, ts(0), String(k1), k2, null, null]);
        }
      }
    }
    await insertRows(pool, t, t.mirror, ['_cdc_deleted', 'k1', 'k2', 'v1', 'v2', '_cdc_position', '_cdc_deleted_at', '_cdc_applied_at'], mirrorRows);
    await insertRows(pool, t, t.changelog, DELTA_COLUMNS, changelogRows);
    // The history is in the base: the watermark covers it (docs/warehouse-apply.md, "Objects per captured table").
    await pool.query(watermarkToEndSql(t));
    if (goneRows.length > 0) await insertRows(pool, t, t.deletedKeys, ['k1', 'k2', '_cdc_position', '_cdc_deleted_at', '_cdc_applied_at'], goneRows);
    await pool.query(
      baseTables(t, shape)
        .map((x) => `ANALYZE ${qualified(t.schema, x)}`)
        .join('; '),
    );
  };

  /** A random delta: base keys and new ones, below and above the base's positions; some events the changelog holds, again; some delivered twice. */
  const randomDelta = (round: number): (string | null)[][] => {
    const n = 1 + Math.floor(rand() * 40);
    const events = new Map<string, (string | null)[]>();
    for (let i = 0; i < n; i++) {
      const k1 = rand() < 0.8 ? Math.floor(rand() * (BASE_K1 + GONE_K1)) : 5000 + Math.floor(rand() * 5);
      const k2 = pick(['a', 'b']);
      if (k1 < BASE_K1 && rand() < 0.15) {
        // An event the changelog holds already, delivered again (its stored row is kept).
        const p = basePosition(k1);
        events.set(`${p}|${k1}|${k2}`, [p, 'insert', ts(5), '1', null, 'false', null, ts(9000), String(k1), k2, 'again', '0']);
        stats.redelivered++;
        continue;
      }
      const p = makePosition(BigInt(30 + round * 10 + Math.floor(rand() * 30)), Math.floor(rand() * 2));
      const id = `${p}|${k1}|${k2}`;
      if (events.has(id)) continue;
      const op = pick(['insert', 'update', 'snapshot', 'delete']);
      const data =
        op === 'delete' && rand() < 0.7 ? [null, null] : [rand() < 0.2 ? null : pick(['x', 'y', '']), rand() < 0.2 ? null : String(Math.floor(rand() * 100))];
      events.set(id, [
        p,
        op,
        ts(Math.floor(rand() * 1e6)),
        '1',
        rand() < 0.5 ? null : `tx${Math.floor(rand() * 5)}`,
        rand() < 0.1 ? 'true' : 'false',
        null,
        ts(1000 * (1 + Math.floor(rand() * 4))),
        String(k1),
        k2,
        ...data,
      ]);
    }
    const rows = [...events.values()];
    for (const r of [...rows])
      if (rand() < 0.2) rows.push(rand() < 0.5 ? [...r] : [...r.slice(0, 7), ts(Date.parse(r[7]!) - Date.UTC(2026, 0, 1) + 1000), ...r.slice(8)]);
    for (let i = rows.length - 1; i > 0; i--) {
      const j = Math.floor(rand() * (i + 1));
      [rows[i], rows[j]] = [rows[j]!, rows[i]!];
    }
    return rows;
  };

  /** The reference: the portable merge (the changelog's anti-join), nested loops off, in one transaction. */
  const referenceMerge = async (t: WarehouseTable, shape: Shape): Promise<void> => {
    const o = {
      key: KEY,
      mirrorColumns: await columnsOf(t, t.mirror),
      changelogColumns: await columnsOf(t, t.changelog),
      hard: shape.mode === 'hard',
      deletedKeys: shape.madeHard,
      truncations: true,
    };
    const c = await pool.connect();
    try {
      await portableMerge(c, t, o, 'SET LOCAL enable_nestloop = off; ');
    } finally {
      c.release();
    }
  };
  return { dump, append, fillBase, randomDelta, referenceMerge };
}
