/**
 * The merge into an empty base (`mergeIntoEmptySql`, taken by `PgWarehouse.merge` with
 * `freshBase` when the base holds no row; docs/rebuild.md, docs/warehouse-apply.md) leaves exactly
 * what the general merge (`mergeSql`) leaves. Randomized over deltas in real PostgreSQL: two table
 * sets of the same shape (made by the live apply code) get the same random delta rows (a
 * composite key; inserts, updates, snapshots and deletes; primary-key changes, i.e. several keys
 * at one position; the same event delivered twice, in one append or a later one; rows in random
 * order), one is merged with `freshBase`, the other with the general merge, and every row of
 * their mirrors, changelogs, deleted-keys tables and deltas is compared, in three shapes: soft
 * delete mode, soft with a deleted-keys table (a table that was hard once), hard mode. Besides:
 * - a base that holds anything (a mirror, changelog, deleted-keys or truncation row) must take
 *   the general merge (`fast` false), and a second delta merged onto the first one's result too;
 * - a fast merge that crashes after a random statement changes nothing (the delta is still
 *   there, the base still empty) and the next merge completes it.
 *
 * Runs and seed: `CDC_PROPERTY_RUNS` (default 300, over the three shapes) and
 * `CDC_PROPERTY_SEED` (default random); both are printed so a failure can be replayed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { qualified, type WarehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { crashingPool } from '../helpers/crashing-pool.ts';
import { appendDelta, baseTables, dumpTables, KEY, makeTableSets, resetTables, SHAPES, TABLE, ts, type Shape } from '../helpers/merge-table-sets.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 300);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);

describe('merge into an empty base = the general merge (randomized, embedded PostgreSQL)', () => {
  let cluster: PostgresCluster;
  let pool: pg.Pool;

  beforeAll(async () => {
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('wh');
    pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 4 });
    pool.on('error', () => undefined);
    console.log(`merge-empty-base: ${RUNS} runs, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
  });

  afterAll(async () => {
    await pool?.end();
    await cluster?.stop();
  });

  it(`leaves the same mirror, changelog, deleted keys and delta in every delete mode; a non-empty base takes the general merge; a crash changes nothing (${RUNS} runs)`, async () => {
    const rand = seededRandom(SEED);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const crash = crashingPool(pool, 'the merge');
    const started = Date.now();
    const stats = { fast: 0, general: 0, folded: 0, crashed: 0, secondMerges: 0, rows: 0 };

    // Per shape, two sources (two warehouse schemas) whose tables the live apply code makes.
    const sets = new Map<string, { fast: WarehouseTable; general: WarehouseTable; warehouse: PgWarehouse; shape: Shape }>();
    for (const [i, shape] of SHAPES.entries()) {
      const warehouse = new PgWarehouse(crash.pool);
      const [fast, general] = await makeTableSets(warehouse, [`fast${i}`, `gen${i}`], shape);
      sets.set(shape.name, { fast: fast!, general: general!, warehouse, shape });
    }
    const reset = (t: WarehouseTable, shape: Shape): Promise<void> => resetTables(pool, t, shape);
    const dump = (t: WarehouseTable, shape: Shape): Promise<Record<string, unknown>> => dumpTables(pool, t, shape);
    const append = (t: WarehouseTable, rows: (string | null)[][]): Promise<void> => appendDelta(pool, t, rows);

    /** A random delta: distinct events (position + key unique), some delivered twice, in random order. */
    const randomDelta = (positionBase: number): (string | null)[][] => {
      const n = Math.floor(rand() * 30);
      const events = new Map<string, (string | null)[]>();
      const positions = 1 + Math.floor(rand() * 12);
      for (let i = 0; i < n; i++) {
        const k1 = Math.floor(rand() * 4);
        const k2 = pick(['a', 'b']);
        const p = makePosition(BigInt(positionBase + Math.floor(rand() * positions)), 0);
        const id = `${p}|${k1}|${k2}`;
        if (events.has(id)) continue;
        const op = pick(['insert', 'update', 'snapshot', 'delete', 'delete']);
        // A delete's data columns are NULL as the append writes them; sometimes values anyway (the merge must not read them).
        const data =
          op === 'delete' && rand() < 0.7
            ? [null, null]
            : [rand() < 0.2 ? null : pick(['x', 'y', 'z', '']), rand() < 0.2 ? null : String(Math.floor(rand() * 100))];
        const appliedAt = ts(Math.floor(rand() * 4) * 1000);
        events.set(id, [
          p,
          op,
          ts(Math.floor(rand() * 1e6)),
          '1',
          rand() < 0.5 ? null : `tx${Math.floor(rand() * 5)}`,
          rand() < 0.1 ? 'true' : 'false',
          null,
          appliedAt,
          String(k1),
          k2,
          ...data,
        ]);
      }
      const rows = [...events.values()];
      // Redeliveries: the same event again, in the same append (same applied-at) or a later one.
      for (const r of [...rows])
        if (rand() < 0.25)
          rows.push(
            rand() < 0.5 ? [...r] : [...r.slice(0, 7), ts(Date.parse(r[7]!) - Date.UTC(2026, 0, 1) + 1000 * (1 + Math.floor(rand() * 3))), ...r.slice(8)],
          );
      for (let i = rows.length - 1; i > 0; i--) {
        const j = Math.floor(rand() * (i + 1));
        [rows[i], rows[j]] = [rows[j]!, rows[i]!];
      }
      return rows;
    };

    for (let run = 0; run < RUNS; run++) {
      const { fast, general, warehouse, shape } = sets.get(SHAPES[run % SHAPES.length]!.name)!;
      const where = `run ${run} (${shape.name}), seed ${SEED}`;
      await reset(fast, shape);
      await reset(general, shape);
      // Sometimes the base is not empty: one row in one of its tables (the same in both sets).
      const seedBase = rand() < 0.2 ? pick(baseTables(fast, shape)) : null;
      if (seedBase !== null) {
        for (const t of [fast, general]) {
          const name = { [fast.mirror]: t.mirror, [fast.changelog]: t.changelog, [fast.truncations]: t.truncations, [fast.deletedKeys]: t.deletedKeys }[
            seedBase
          ]!;
          const tbl = qualified(t.schema, name);
          if (name === t.mirror)
            await pool.query(`INSERT INTO ${tbl} (k1, k2, v1, v2, _cdc_position, _cdc_deleted, _cdc_applied_at) VALUES (1, 'a', 'base', 7, $1, false, $2)`, [
              makePosition(50n, 0),
              ts(0),
            ]);
          else if (name === t.changelog)
            await pool.query(
              `INSERT INTO ${tbl} (_cdc_position, _cdc_op, _cdc_commit_ts, _cdc_schema_version, _cdc_synthetic, _cdc_applied_at, k1, k2, v1, v2) VALUES ($1, 'insert', $2, 1, false, $2, 1, 'a', 'base', 7)`,
              [makePosition(50n, 0), ts(0)],
            );
          else if (name === t.truncations)
            await pool.query(`INSERT INTO ${tbl} (_cdc_position, _cdc_commit_ts, _cdc_schema_version, _cdc_applied_at) VALUES ($1, $2, 1, $2)`, [
              makePosition(3n, 0),
              ts(0),
            ]);
          else await pool.query(`INSERT INTO ${tbl} (k1, k2, _cdc_position, _cdc_applied_at) VALUES (2, 'b', $1, $2)`, [makePosition(50n, 0), ts(0)]);
        }
      }
      const rows = randomDelta(1);
      stats.rows += rows.length;
      await append(fast, rows);
      await append(general, rows);
      const target = (t: WarehouseTable) => ({ source: t.schema, table: TABLE, deleteMode: shape.mode, key: KEY, target: t });

      // A fast merge that crashes after a random statement leaves the tables as they were.
      if (rows.length > 0 && rand() < 0.25) {
        const before = await dump(fast, shape);
        crash.crashAfter(1 + Math.floor(rand() * 8));
        const err = await warehouse.merge(target(fast), { freshBase: true }).then(
          () => null,
          (e: unknown) => e,
        );
        if (crash.fired()) {
          expect(String(err), where).toMatch(/injected crash/);
          expect(await dump(fast, shape), `${where}: a merge that crashed changed the tables`).toEqual(before);
          stats.crashed++;
        }
      }
      const a = await warehouse.merge(target(fast), { freshBase: true });
      await warehouse.merge(target(general));
      // A row seeded into the changelog is an unmerged change like the delta's (above the watermark): the base stays empty.
      const seededChange = seedBase === fast.changelog;
      const expectFast = (rows.length > 0 || seededChange) && (seedBase === null || seededChange);
      expect(a.fast ?? false, `${where}: fast path taken (base ${seedBase ?? 'empty'}, ${rows.length} delta rows)`).toBe(expectFast);
      if (seededChange) {
        stats.folded++;
      } else if (expectFast) stats.fast++;
      else stats.general++;
      expect(await dump(fast, shape), `${where}: fast vs general merge (base ${seedBase ?? 'empty'})`).toEqual(await dump(general, shape));

      // Sometimes a second delta onto the first one's result: the base holds rows now, so the general merge.
      if (rand() < 0.3) {
        const more = randomDelta(4);
        await append(fast, more);
        await append(general, more);
        const b = await warehouse.merge(target(fast), { freshBase: true });
        await warehouse.merge(target(general));
        // The first merge left rows in the base unless it had nothing to merge onto an empty one.
        expect(b.fast ?? false, `${where}: second merge (first delta ${rows.length} rows, base ${seedBase ?? 'empty'})`).toBe(
          more.length > 0 && rows.length === 0 && !seededChange && seedBase === null,
        );
        expect(await dump(fast, shape), `${where}: second merge`).toEqual(await dump(general, shape));
        stats.secondMerges++;
      }
    }
    console.log(
      `merge-empty-base: ${RUNS} runs in ${((Date.now() - started) / 1000).toFixed(1)} s: ${stats.fast} fast merges compared with the general merge, ${stats.general} that had to be general, ${stats.folded} with a change seeded into the changelog, ${stats.secondMerges} second merges, ${stats.crashed} crashed fast merges, ${stats.rows} delta rows; seed ${SEED}`,
    );
  }, 600_000);
});
