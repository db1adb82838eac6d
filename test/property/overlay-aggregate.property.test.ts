/**
 * Property: `overlayAggregateSql` (lambda/core/warehouse/warehouse-sql.ts), the second form of the
 * base+delta view's definition that the reconciler counts and checksums with, always equals the
 * view itself (`createOverlayViewSql`), on a real embedded PostgreSQL.
 *
 * 1. Random states. Each run draws a state of the base (live rows and tombstones in soft mode,
 *    none in hard mode), the deleted-keys table, the truncations table and the delta (several rows
 *    per key, rows older and newer than the base's, keys only in the delta, deletes, the same event
 *    delivered twice, ties on the position), under each of the four guard sets the view can have
 *    (deleted keys yes/no × truncations yes/no), with a composite key whose text part has
 *    upper/lower case and non-ASCII values. Then `SELECT count(*), sum(hash) FROM view WHERE range`
 *    and the second form agree: for the whole table and for random key ranges (one-sided, two-sided,
 *    empty), with the row hash the reconciler uses (every visible column, NULLs included).
 *    `CDC_OVERLAY_RUNS` (default 400) runs, seed `CDC_PROPERTY_SEED`; both printed.
 * 2. At every moment. A writer appends to the delta and merges it with the applier's own merge
 *    (`lockDeltaSql` + `mergeSql`, one transaction), each change keeping the view's row count
 *    constant (a delete of one shown key and an insert of a new one in one transaction, updates),
 *    while a reader evaluates the second form again and again: it must read that constant every
 *    time (it is one statement, so its three terms see one snapshot: a merge is seen wholly or not
 *    at all, as by a reader of the view).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import {
  CHANGELOG_CDC_COLUMNS,
  createChangelogSql,
  createDeletedKeysSql,
  createPendingViewSql,
  createWatermarkSql,
  createMirrorSql,
  createOverlayViewSql,
  createSchemaSql,
  createTruncationsSql,
  lockDeltaSql,
  mergeSql,
  mirrorLayout,
  overlayAggregateSql,
  qualified,
  warehouseTable,
  type OverlayGuards,
  type WarehouseTable,
} from '../../lambda/core/warehouse/warehouse-sql.ts';
import { pendingBoundsSql } from '../../lambda/core/warehouse/watermark-sql.ts';
import { seededRandom } from '../../local/seeded-random.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const RUNS = Number(process.env.CDC_OVERLAY_RUNS ?? 400);

const KEY = [
  { name: 'k1', type: 'bigint' },
  { name: 'k2', type: 'varchar(65535)' },
];
const DATA = [
  { name: 'v', type: 'bigint' },
  { name: 't', type: 'varchar(65535)' },
  { name: 'n', type: 'numeric(38,2)' },
];
const KEY_NAMES = KEY.map((k) => k.name);
const MIRROR_COLUMNS = mirrorLayout(KEY, DATA).map((c) => c.name);
/** The order the test's mirror rows list their values in (the INSERT names the columns). */
const ROW_COLUMNS = [...KEY, ...DATA].map((c) => c.name).concat(['_cdc_position', '_cdc_deleted', '_cdc_deleted_at', '_cdc_applied_at']);
const DELTA_COLUMNS = [...CHANGELOG_CDC_COLUMNS, ...KEY, ...DATA];
const CHANGELOG_COLUMNS = DELTA_COLUMNS.map((c) => c.name);
/** The reconciler's kind of row hash (lambda/adapters/reconcile-pg.ts, `pg-typed`) over every column the view shows. */
const HASH =
  '(COALESCE(hashint8extended(k1, 0), -1) # COALESCE(hashtextextended(CAST(k2 AS text), 1), -2) # COALESCE(hashint8extended(v, 2), -3) # ' +
  'COALESCE(hashtextextended(CAST(t AS text), 3), -4) # COALESCE(hash_numeric_extended(n, 4), -5) # COALESCE(hashtextextended(CAST(_cdc_position AS text), 5), -6) # ' +
  'COALESCE(timestamptz_hash_extended(_cdc_applied_at, 6), -7))';
const K1 = [1, 2, 3, 4];
const K2 = ['a', 'B', 'b', 'aa', 'é', 'Z'];
const OPS = ['insert', 'update', 'snapshot', 'delete'] as const;
const GUARDS: OverlayGuards[] = [
  { deletedKeys: false, truncations: false },
  { deletedKeys: true, truncations: false },
  { deletedKeys: false, truncations: true },
  { deletedKeys: true, truncations: true },
];

let cluster: PostgresCluster;
let db: pg.Client;

const tableOf = (g: OverlayGuards): WarehouseTable => warehouseTable('prop', `g${g.deletedKeys ? 'k' : ''}${g.truncations ? 't' : ''}x.t`);
const pos = (p: number): string => p.toString(16).padStart(24, '0');

async function createLayout(c: pg.Client, t: WarehouseTable, g: OverlayGuards): Promise<void> {
  await c.query(createSchemaSql(t));
  await c.query(createMirrorSql(t, KEY, DATA));
  await c.query(createChangelogSql(t, KEY, DATA));
  // The delta is the view of the changelog's rows above the watermark (docs/warehouse-apply.md, "Objects per captured table").
  for (const sql of createWatermarkSql(t)) await c.query(sql);
  await c.query(createPendingViewSql(t, CHANGELOG_COLUMNS));
  if (g.deletedKeys) await c.query(createDeletedKeysSql(t, KEY));
  if (g.truncations) await c.query(createTruncationsSql(t));
  await c.query(createOverlayViewSql(t, MIRROR_COLUMNS, KEY_NAMES, g));
}

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  await cluster.createDatabase('overlay');
  db = new pg.Client({ connectionString: cluster.url('overlay') });
  await db.connect();
  for (const g of GUARDS) await createLayout(db, tableOf(g), g);
}, 120_000);

afterAll(async () => {
  await db?.end();
  await cluster?.stop();
});

type Values = [number | null, string | null, string | null];

/** Inserts rows (`columns`, values as parameters) in one statement. */
async function insert(c: pg.Client, table: string, columns: readonly string[], rows: unknown[][]): Promise<void> {
  if (rows.length === 0) return;
  const values: unknown[] = [];
  const tuples = rows.map((r) => `(${r.map((v) => (values.push(v), `$${values.length}`)).join(', ')})`);
  // An event delivered again is skipped, as the applier's append skips it (the first delivery stays).
  await c.query(`INSERT INTO ${table} (${columns.map((n) => `"${n}"`).join(', ')}) VALUES ${tuples.join(', ')} ON CONFLICT DO NOTHING`, values);
}

/** Draws one random state of the four tables (see the module comment, 1). */
async function randomState(t: WarehouseTable, g: OverlayGuards, hard: boolean, random: () => number): Promise<string> {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const values = (): Values => [
    random() < 0.2 ? null : Math.floor(random() * 5),
    random() < 0.2 ? null : pick(['x', 'y', "it's", 'é']),
    random() < 0.2 ? null : pick(['1.50', '2', '-3.25']),
  ];
  const stamp = (): string => `2026-01-0${1 + Math.floor(random() * 3)}T00:00:00Z`;
  const maxPos = 2 + Math.floor(random() * 40);
  const keys = K1.flatMap((a) => K2.map((b) => [a, b] as const));
  const tables = [t.mirror, t.changelog, ...(g.deletedKeys ? [t.deletedKeys] : []), ...(g.truncations ? [t.truncations] : [])];
  await db.query(tables.map((n) => `DELETE FROM ${qualified(t.schema, n)}`).join('; '));
  const inBase = random();
  const tombstones = hard ? 0 : random() * 0.5;
  const base = keys
    .filter(() => random() < inBase)
    .map(([a, b]) => {
      const deleted = random() < tombstones;
      return [a, b, ...values(), pos(1 + Math.floor(random() * maxPos)), deleted, deleted ? stamp() : null, stamp()];
    });
  await insert(db, qualified(t.schema, t.mirror), ROW_COLUMNS, base);
  let deletedKeys = 0;
  if (g.deletedKeys) {
    const baseKeys = new Set(base.map((r) => `${r[0]}|${r[1]}`));
    // Hard mode remembers keys the base no longer has; a state may hold any key (the form must not care).
    const dk = keys
      .filter(([a, b]) => (hard ? !baseKeys.has(`${a}|${b}`) : true) && random() < 0.25)
      .map(([a, b]) => [a, b, pos(1 + Math.floor(random() * maxPos)), stamp(), stamp()]);
    await insert(db, qualified(t.schema, t.deletedKeys), [...KEY_NAMES, '_cdc_position', '_cdc_deleted_at', '_cdc_applied_at'], dk);
    deletedKeys = dk.length;
  }
  let truncations = 0;
  if (g.truncations) {
    const at = [...new Set(Array.from({ length: Math.floor(random() * 3) }, () => 1 + Math.floor(random() * maxPos)))];
    await insert(
      db,
      qualified(t.schema, t.truncations),
      ['_cdc_position', '_cdc_commit_ts', '_cdc_tx_id', '_cdc_schema_version', '_cdc_applied_at'],
      at.map((p) => [pos(p), stamp(), null, 1, stamp()]),
    );
    truncations = at.length;
  }
  // The delta: an event is its (key, position); delivered again it is the same row (maybe applied at another time).
  const events = new Map<string, unknown[]>();
  const delta: unknown[][] = [];
  const n = random() < 0.15 ? 0 : Math.floor(random() * 40);
  for (let i = 0; i < n; i++) {
    // Mostly keys the base may hold; some only ever in the delta.
    const [a, b] = random() < 0.15 ? ([5 + Math.floor(random() * 2), pick(K2)] as const) : pick(keys);
    const p = 1 + Math.floor(random() * maxPos);
    const id = `${a}|${b}|${p}`;
    const first = events.get(id);
    let e: unknown[];
    if (!first) {
      const op = pick(OPS);
      const v = op === 'delete' && random() < 0.5 ? ([null, null, null] as Values) : values();
      e = [pos(p), op, stamp(), 1, null, false, null, stamp(), a, b, ...v];
      events.set(id, e);
    } else {
      // Delivered again: the same row, applied at the same or another time.
      e = [...first.slice(0, 7), random() < 0.5 ? first[7] : stamp(), ...first.slice(8)];
    }
    delta.push(e);
  }
  await insert(db, qualified(t.schema, t.changelog), CHANGELOG_COLUMNS, delta);
  return `base ${base.length} (${base.filter((r) => r[6]).length} tombstones), delta ${delta.length}, deleted keys ${deletedKeys}, truncations ${truncations}`;
}

/** A random key range as a condition on (k1, k2) with parameters, as the reconciler writes one (text in "C" order). */
function randomRange(random: () => number): { where: string | undefined; values: unknown[] } {
  const row = '(k1, k2 COLLATE "C")';
  const key = (): [number, string] => [Math.floor(random() * 7), ['', 'B', 'a', 'b', 'é', 'zz'][Math.floor(random() * 6)]!];
  const parts: string[] = [];
  const values: unknown[] = [];
  if (random() < 0.7) {
    values.push(...key());
    parts.push(`${row} > ($${values.length - 1}, $${values.length})`);
  }
  if (random() < 0.7) {
    values.push(...key());
    parts.push(`${row} <= ($${values.length - 1}, $${values.length})`);
  }
  return { where: parts.length ? parts.join(' AND ') : undefined, values };
}

describe('overlayAggregateSql: the second form of the base+delta view', () => {
  it(`equals count(*) and the exact row-hash sum of the view over random states (seed ${SEED}, ${RUNS} runs)`, async () => {
    console.log(`overlay aggregate property: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED} CDC_OVERLAY_RUNS=${RUNS})`);
    const random = seededRandom(SEED);
    let nonEmpty = 0;
    for (let r = 0; r < RUNS; r++) {
      const g = GUARDS[r % GUARDS.length]!;
      const hard = random() < 0.5;
      const t = tableOf(g);
      const state = await randomState(t, g, hard, random);
      const view = qualified(t.schema, t.view);
      for (let q = 0; q < 4; q++) {
        const { where, values } = q === 0 ? { where: undefined, values: [] } : randomRange(random);
        const expected = (
          await db.query(`SELECT count(*) AS n, CAST(COALESCE(sum(${HASH}), 0) AS text) AS s FROM ${view}${where ? ` WHERE ${where}` : ''}`, values)
        ).rows[0];
        const got = (
          await db.query(
            `SELECT n, CAST(s AS text) AS s FROM (${overlayAggregateSql(t, MIRROR_COLUMNS, KEY_NAMES, g, { sum: HASH, ...(where ? { where } : {}) })}) a`,
            values,
          )
        ).rows[0];
        const context = `run ${r} (seed ${SEED}, ${hard ? 'hard' : 'soft'}, guards ${JSON.stringify(g)}, ${state}, range ${where ?? 'all'} ${JSON.stringify(values)})`;
        expect({ n: Number(got.n), s: got.s }, context).toEqual({ n: Number(expected.n), s: expected.s });
        if (q === 0) {
          const count = (await db.query(overlayAggregateSql(t, MIRROR_COLUMNS, KEY_NAMES, g))).rows[0];
          expect(Number(count.n), context).toBe(Number(expected.n));
          if (Number(expected.n) > 0) nonEmpty++;
        }
      }
    }
    // The states are not degenerate: most views show rows.
    expect(nonEmpty).toBeGreaterThan(RUNS / 2);
  }, 240_000);

  it('reads one snapshot: while appends and merges run, every evaluation sees the view as before or after each one', async () => {
    const g: OverlayGuards = { deletedKeys: false, truncations: true };
    const t = warehouseTable('prop', 'live.t');
    await createLayout(db, t, g);
    const random = seededRandom(SEED);
    const N = 200;
    let p = 1;
    const stamp = '2026-01-01T00:00:00Z';
    await insert(
      db,
      qualified(t.schema, t.mirror),
      ROW_COLUMNS,
      Array.from({ length: N }, (_, i) => [i, 'k', i, 'x', '1.00', pos(p++), false, null, stamp]),
    );
    const shown = new Set(Array.from({ length: N }, (_, i) => i));
    let next = N;
    const writer = new pg.Client({ connectionString: cluster.url('overlay') });
    const reader = new pg.Client({ connectionString: cluster.url('overlay') });
    await Promise.all([writer.connect(), reader.connect()]);
    const countSql = overlayAggregateSql(t, MIRROR_COLUMNS, KEY_NAMES, g);
    let reads = 0;
    let merges = 0;
    let stop = false;
    try {
      const readLoop = (async () => {
        while (!stop) {
          const n = Number((await reader.query(countSql)).rows[0].n);
          expect(n, `read ${reads}`).toBe(N);
          reads++;
        }
      })();
      readLoop.catch(() => undefined); // awaited below; a failed read is reported from there
      const deltaRow = (op: string, k: number): unknown[] => [
        pos(p++),
        op,
        stamp,
        1,
        null,
        false,
        null,
        stamp,
        k,
        'k',
        op === 'delete' ? null : Math.floor(random() * 100),
        'y',
        '2.00',
      ];
      for (let i = 0; i < 300; i++) {
        if (random() < 0.15) {
          // The applier's merge: lock the delta, fold it into the base, append the changelog, empty the delta: one transaction.
          await writer.query('BEGIN');
          await writer.query(lockDeltaSql(t, 'postgres'));
          const b = (await writer.query<{ from: string; to: string }>(pendingBoundsSql(t))).rows[0]!;
          for (const sql of mergeSql(t, {
            key: KEY_NAMES,
            mirrorColumns: MIRROR_COLUMNS,
            changelogColumns: CHANGELOG_COLUMNS,
            hard: false,
            ...g,
            pending: { from: String(b.from), to: String(b.to) },
          }))
            await writer.query(sql);
          await writer.query('COMMIT');
          merges++;
          continue;
        }
        // One append, keeping the view's row count: a shown key deleted and a new key inserted, or updates.
        const keys = [...shown];
        const rows: unknown[][] = [];
        if (random() < 0.5) {
          const gone = keys[Math.floor(random() * keys.length)]!;
          shown.delete(gone);
          rows.push(deltaRow('delete', gone));
          const fresh = random() < 0.3 && gone !== undefined ? gone : next++; // a deleted key may come back
          shown.add(fresh);
          rows.push(deltaRow('insert', fresh));
        } else {
          for (let u = 0; u < 1 + Math.floor(random() * 5); u++) rows.push(deltaRow('update', keys[Math.floor(random() * keys.length)]!));
        }
        await writer.query('BEGIN');
        await insert(writer, qualified(t.schema, t.changelog), CHANGELOG_COLUMNS, rows);
        await writer.query('COMMIT');
      }
      stop = true;
      await readLoop;
      const view = Number((await db.query(`SELECT count(*) AS n FROM ${qualified(t.schema, t.view)}`)).rows[0].n);
      expect(view).toBe(N);
      console.log(`overlay aggregate under appends and merges: ${reads} reads, ${merges} merges, all ${N}`);
      expect(merges).toBeGreaterThan(10);
      expect(reads).toBeGreaterThan(10);
    } finally {
      stop = true;
      await Promise.all([writer.end(), reader.end()]);
    }
  }, 120_000);
});
