/**
 * The apply's fresh-shadow option (`TableBatch.freshShadow`; docs/warehouse-apply.md, "A fresh
 * shadow") leaves exactly what the live path leaves. Randomized over histories in real
 * PostgreSQL: the same deliveries of a random history (test/helpers/histories.ts: inserts,
 * updates with and without the TOAST column, deletes, primary-key changes with and without it,
 * truncates; duplicates, replays and redeliveries; one table, with a one-column or a composite
 * key) are applied
 * - to one table set by the live path: `applyTable` (appends to the delta, full applies that merge
 *   it first), then the general merge;
 * - to another by the fresh-shadow path, as a rebuild does: `applyTable` with `freshShadow` (the
 *   appends land in the changelog while the shadow is unfolded; a full apply folds it first), then
 *   `merge` with `freshBase` (which folds an unfolded shadow), then sometimes a few more
 *   deliveries (a rebuild's catch-up, after the fold: to the delta) and a merge again;
 * and every row of their mirrors, changelogs, deleted-keys, truncations, handover tables and
 * deltas is compared, in both delete modes. Besides, on the fresh side:
 * - an apply that crashes after a random statement (or after its COMMIT) is applied again, as the
 *   rebuild's retry does (the same events, the same applied-at): an event already in the
 *   changelog is kept as first delivered (the load falls back from the primary-key violation);
 * - every fresh run reports which path folded the changelog (the merge, or a full apply).
 *
 * Runs and seed: `CDC_PROPERTY_RUNS` (default 200, over the two delete modes and the two model
 * tables) and `CDC_PROPERTY_SEED` (default random); both are printed so a failure can be replayed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import type { DeleteMode, SchemaVersion } from '../../lambda/core/shared/control-plane.ts';
import type { ChangeEvent } from '../../lambda/core/shared/event.ts';
import { qualified, warehouseTable, type WarehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { deliveries, historyArb, MODEL_TABLES, schemaColumns, simulate, type ModelTable } from '../helpers/histories.ts';
import { seededRandom } from '../../local/demo.ts';
import { crashingPool } from '../helpers/crashing-pool.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 200);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const RAW = { getTypeParser: () => (v: string) => v } as unknown as pg.CustomTypesConfig;

describe('fresh-shadow apply = the live apply and merge (randomized histories, embedded PostgreSQL)', () => {
  let cluster: PostgresCluster;
  let pool: pg.Pool;

  beforeAll(async () => {
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('wh');
    pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 4 });
    pool.on('error', () => undefined);
    console.log(`fresh-shadow: ${RUNS} runs, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
  });

  afterAll(async () => {
    await pool?.end();
    await cluster?.stop();
  });

  it(`leaves the same changelog, mirror, deleted keys, truncations, handover and delta as the live path, crashes and retries included (${RUNS} runs)`, async () => {
    const rand = seededRandom(SEED);
    const crash = crashingPool(pool, 'the apply');
    const started = Date.now();
    const stats = { runs: 0, events: 0, foldedByMerge: 0, foldedByApply: 0, neverUnfolded: 0, crashed: 0, crashedAfterCommit: 0, catchUps: 0 };
    const at = new Date(0).toISOString();
    const schemaOf = (t: ModelTable): SchemaVersion => ({ source: 'src', table: t.table, version: 1, columns: schemaColumns(t), key: t.key, effectivePosition: '0'.repeat(24), registeredAt: at });

    // Per delete mode and model table, two table sets (fresh, live) that the live apply code makes
    // with every optional table (deleted keys in hard mode, truncations, handover); each run starts them empty.
    const sets = new Map<string, { fresh: WarehouseTable; live: WarehouseTable; warehouse: PgWarehouse }>();
    const modes: DeleteMode[] = ['soft', 'hard'];
    for (const mode of modes) {
      const warehouse = new PgWarehouse(crash.pool);
      for (const t of MODEL_TABLES) {
        const pair = { fresh: warehouseTable(`fresh${mode}`, t.table), live: warehouseTable(`live${mode}`, t.table), warehouse };
        const tbl = MODEL_TABLES.indexOf(t);
        const pkc = { t: 'pk' as const, tbl, k: 2, k2: 3, vals: [1, 'x', null], change: [true, false, true], keepB: true };
        const made = simulate({ twoTables: true, absentColumns: true, transactions: [[{ t: 'insert', tbl, k: 2, vals: [1, 'x', null], omitNulls: false }], [pkc], [{ t: 'delete', tbl, k: 3 }], [{ t: 'truncate', tbl }]], choices: [] }, 'src');
        for (const target of [pair.fresh, pair.live]) {
          for (const e of made.events.filter((x) => x.table === t.table)) {
            await warehouse.applyTable({ source: 'src', table: t.table, deleteMode: mode, schemas: new Map([[1, schemaOf(t)]]), events: [e], appliedAt: new Date(0), target });
          }
        }
        sets.set(`${mode}|${t.table}`, pair);
      }
    }
    const tablesOf = (t: WarehouseTable, mode: DeleteMode): string[] => [t.mirror, t.changelog, t.delta, t.truncations, t.handover, ...(mode === 'hard' ? [t.deletedKeys] : [])];
    const reset = async (t: WarehouseTable, mode: DeleteMode): Promise<void> => {
      await pool.query(tablesOf(t, mode).map((x) => `DELETE FROM ${qualified(t.schema, x)}`).join('; '));
    };
    const dump = async (t: WarehouseTable, mode: DeleteMode): Promise<Record<string, string[]>> => {
      const out: Record<string, string[]> = {};
      for (const x of tablesOf(t, mode)) {
        const res = await pool.query({ text: `SELECT * FROM ${qualified(t.schema, x)}`, types: RAW });
        out[x.slice(t.view.length)] = res.rows.map((r) => JSON.stringify(r)).sort();
      }
      return out;
    };
    const count = async (t: WarehouseTable, name: string): Promise<number> => Number((await pool.query<{ n: string }>(`SELECT COUNT(*) AS n FROM ${qualified(t.schema, name)}`)).rows[0]!.n);

    for (let run = 0; run < RUNS; run++) {
      const mode = modes[run % 2]!;
      const model = MODEL_TABLES[Math.floor(run / 2) % 2]!;
      const { fresh, live, warehouse } = sets.get(`${mode}|${model.table}`)!;
      const where = `run ${run} (${mode}, ${model.table}), seed ${SEED}`;
      const [h] = fc.sample(historyArb, { seed: (SEED + run) | 0, numRuns: 1 });
      const events = simulate({ ...h!, twoTables: true }, 'src').events.filter((e) => e.table === model.table);
      const batches = deliveries(events, h!).flatMap((d) => (d.redeliver ? [d.events, d.events] : [d.events]));
      // Some deliveries after the fold: a rebuild's catch-up (the shadow is folded; they go to its delta).
      const cut = rand() < 0.3 ? Math.floor(rand() * (batches.length + 1)) : batches.length;
      await reset(fresh, mode);
      await reset(live, mode);
      stats.runs++;
      stats.events += events.length;
      const schemas = new Map([[1, schemaOf(model)]]);
      const apply = (target: WarehouseTable, list: readonly ChangeEvent[], appliedAt: Date, freshShadow: boolean) =>
        warehouse.applyTable({ source: 'src', table: model.table, deleteMode: mode, schemas, events: list, appliedAt, target, freshShadow });
      let foldedByApply = false;
      let sawUnfolded = false;
      for (const [i, list] of batches.entries()) {
        const appliedAt = new Date(Date.UTC(2026, 0, 1) + i * 1000);
        const bulk = i < cut;
        // The rebuild merges its shadow at the cut (step merge-shadow), whichever path the bulk took:
        // the live side merges at the same point. (A tombstone's values are those of the key's newest
        // live row the merge sees below it, so they depend on when merges run: an older insert
        // delivered after a merge no longer lends its values, on either path.)
        if (i === cut) await warehouse.merge({ source: 'src', table: model.table, deleteMode: mode, key: model.key, target: live });
        await apply(live, list, appliedAt, false);
        if (bulk) {
          const wasUnfolded = (await count(fresh, fresh.changelog)) > 0 && (await count(fresh, fresh.mirror)) === 0;
          // A crash after a random statement of the apply (its COMMIT included), then the retry.
          if (rand() < 0.15) {
            crash.crashAfter(1 + Math.floor(rand() * 6));
            const err = await apply(fresh, list, appliedAt, true).then(() => null, (e: unknown) => e);
            if (crash.fired()) {
              expect(String(err), where).toMatch(/injected crash/);
              stats.crashed++;
            } else if (err !== null) throw err;
          }
          const res = await apply(fresh, list, appliedAt, true);
          if (wasUnfolded && res.mode === 'apply') foldedByApply = true;
          if ((await count(fresh, fresh.changelog)) > 0 && (await count(fresh, fresh.mirror)) === 0 && (await count(fresh, fresh.delta)) === 0) sawUnfolded = true;
        } else {
          if (i === cut) {
            const m = await warehouse.merge({ source: 'src', table: model.table, deleteMode: mode, key: model.key, target: fresh }, { freshBase: true });
            if (m.folded) stats.foldedByMerge++;
            stats.catchUps++;
          }
          await apply(fresh, list, appliedAt, false);
        }
      }
      const m = await warehouse.merge({ source: 'src', table: model.table, deleteMode: mode, key: model.key, target: fresh }, { freshBase: true });
      if (m.folded) stats.foldedByMerge++;
      if (foldedByApply) stats.foldedByApply++;
      if (!sawUnfolded) stats.neverUnfolded++;
      await warehouse.merge({ source: 'src', table: model.table, deleteMode: mode, key: model.key, target: live });
      expect(await dump(fresh, mode), `${where}: fresh-shadow path vs live path (${batches.length} deliveries, catch-up from ${cut})`).toEqual(await dump(live, mode));
    }
    console.log(
      `fresh-shadow: ${stats.runs} histories (${stats.events} events) in ${((Date.now() - started) / 1000).toFixed(1)} s equal to the live path: ${stats.foldedByMerge} folded by the merge, ${stats.foldedByApply} by a full apply, ${stats.neverUnfolded} never unfolded; ${stats.crashed} crashed applies retried, ${stats.catchUps} with a catch-up after the fold; seed ${SEED}`,
    );
    // The runs must exercise the fresh path: most histories leave the shadow unfolded at some point.
    expect(stats.foldedByMerge, 'no run folded an unfolded shadow in the merge').toBeGreaterThan(0);
  }, 900_000);
});
