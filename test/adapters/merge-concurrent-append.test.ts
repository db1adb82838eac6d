/**
 * Merges do not stop appends (docs/warehouse-apply.md, "Merges do not stop appends"): on
 * PostgreSQL a deferred merge (`PgWarehouse.merge`) reads one snapshot and locks the delta in a
 * mode that conflicts with other merges and with a full apply, but not with an append. In real
 * PostgreSQL:
 * - a merge held in the middle of its transaction (another session holds a SHARE lock on the
 *   mirror, so the merge's first write waits) does not hold up an append: the append commits and
 *   is visible in the view while the merge waits; the merge then moves exactly what it saw, the
 *   appended rows stay in the delta, and nothing is lost from the changelog;
 * - a full apply (a truncate) still waits for the merge, and so does an append when the merge was
 *   asked to stop appends (a delta that outgrew its merges); the results are right;
 * - randomized: per run a history of full-image inserts and updates and deletes over a few keys,
 *   with batches delivered again, appended one batch at a time by one writer while a second
 *   writer (another pool: another process) merges the same table in a loop; after each append the
 *   view must equal the model of the history so far, whatever the merges did meanwhile; at the end
 *   the delta is merged and the mirror, the deleted keys (hard mode) and the changelog (every
 *   delivered event once) are checked. Soft and hard delete modes. A merge that deleted rows it
 *   did not merge (a statement reading a newer snapshot) fails the changelog check.
 *
 * Runs and seed: `CDC_PROPERTY_RUNS` (default 30 per mode) and `CDC_PROPERTY_SEED` (default random), printed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import type { DeleteMode, SchemaVersion } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { qualified, warehouseTable, type WarehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { seededRandom } from '../../local/seeded-random.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 30);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const TABLE = 'public.t';
const RAW = { getTypeParser: () => (v: string) => v } as unknown as pg.CustomTypesConfig;
const at = new Date(0).toISOString();

const version = (sourceId: string): SchemaVersion => ({
  source: sourceId,
  table: TABLE,
  version: 1,
  key: ['k'],
  effectivePosition: '0'.repeat(24),
  registeredAt: at,
  columns: [
    { name: 'k', type: 'integer', nullable: false },
    { name: 'v', type: 'text', nullable: true },
  ],
});
const event = (sourceId: string, op: ChangeEvent['op'], k: number, v: string | null, position: string): ChangeEvent => ({
  v: ENVELOPE_VERSION,
  source: sourceId,
  table: TABLE,
  op,
  key: { k },
  after: op === 'delete' ? null : { k, v },
  before: null,
  missing: [],
  position,
  commitTs: at,
  txId: null,
  schemaVersion: 1,
  capture: 'slot',
  synthetic: false,
});

describe('merges do not stop appends (embedded PostgreSQL)', () => {
  let cluster: PostgresCluster;
  let pool: pg.Pool;
  let lsn = 0x1000n;
  const next = (): string => makePosition((lsn += 8n), 0);

  beforeAll(async () => {
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('wh');
    pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 4 });
    pool.on('error', () => undefined);
    console.log(`merge-concurrent-append: ${RUNS} runs per mode, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
  }, 120_000);

  afterAll(async () => {
    await pool?.end();
    await cluster?.stop();
  });

  const apply = (w: PgWarehouse, sourceId: string, mode: DeleteMode, events: ChangeEvent[]) =>
    w.applyTable({ source: sourceId, table: TABLE, deleteMode: mode, schemas: new Map([[1, version(sourceId)]]), events, appliedAt: new Date() });
  const rows = async (t: WarehouseTable, name: string, cols: string): Promise<string[]> =>
    (await pool.query({ text: `SELECT ${cols} FROM ${qualified(t.schema, name)} ORDER BY 1, 2`, types: RAW })).rows.map((r) => JSON.stringify(r));
  const viewOf = (t: WarehouseTable) => rows(t, t.view, '"k", "v", "_cdc_position"');
  /** Whether a session of this database waits for a lock on `relation` (by name). */
  const waitsOn = async (relation: string): Promise<boolean> =>
    (await pool.query('SELECT 1 FROM pg_locks l JOIN pg_class c ON c.oid = l.relation WHERE NOT l.granted AND c.relname = $1', [relation])).rows.length > 0;
  const until = async (what: string, f: () => Promise<boolean>, ms = 20_000): Promise<void> => {
    const end = Date.now() + ms;
    while (!(await f())) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 10));
    }
  };

  /**
   * Applies `first` (appended) to a new table set of `source`, then holds a merge midway (another
   * session holds a SHARE lock on the mirror, so the merge's first write waits) while `during` runs,
   * then lets it finish. The merge is the writer's own (`own`) or another process's, and may be asked
   * to stop appends. Returns the merge's rows.
   */
  async function heldMerge(
    sourceId: string,
    first: ChangeEvent[],
    o: { own?: boolean; stopAppends?: boolean },
    during: (writer: PgWarehouse, t: WarehouseTable) => Promise<void>,
  ): Promise<number> {
    const t = warehouseTable(sourceId, TABLE);
    const writer = new PgWarehouse(pool);
    const otherPool = new pg.Pool({ connectionString: cluster.url('wh'), max: 1 });
    const merger = o.own ? writer : new PgWarehouse(otherPool);
    expect((await apply(writer, sourceId, 'soft', first)).mode).toBe('append');
    const blocker = await pool.connect();
    try {
      await blocker.query(`BEGIN; LOCK TABLE ${qualified(t.schema, t.mirror)} IN SHARE MODE`);
      const merging = merger.merge({ source: sourceId, table: TABLE, deleteMode: 'soft', key: ['k'] }, o.stopAppends ? { stopAppends: true } : {});
      merging.catch(() => undefined); // awaited below
      await until('the merge waiting on the mirror', () => waitsOn(t.mirror));
      // `during` returns once it has checked what it checks while the merge is held (what it starts
      // that must wait for the merge, it keeps and awaits afterwards).
      await during(writer, t);
      await blocker.query('COMMIT');
      return (await merging).rows;
    } finally {
      await blocker.query('ROLLBACK').catch(() => undefined);
      blocker.release();
      await otherPool.end();
    }
  }

  it('an append commits while a merge is held midway; the merge moves exactly what it saw', async () => {
    const source = 'held';
    const t = warehouseTable(source, TABLE);
    const first = [event(source, 'insert', 1, 'a', next()), event(source, 'insert', 2, 'b', next())];
    const second = [event(source, 'update', 1, 'a2', next()), event(source, 'delete', 2, null, next()), event(source, 'insert', 3, 'c', next())];
    let writer: PgWarehouse | null = null;
    const merged = await heldMerge(source, first, { own: true }, async (w) => {
      writer = w; // the same process appends while its own merge runs
      const appended = await Promise.race([apply(w, source, 'soft', second), new Promise<'waited'>((r) => setTimeout(() => r('waited'), 10_000))]);
      expect(appended, 'the append did not wait for the merge').not.toBe('waited');
      expect(await viewOf(t), 'the append is visible while the merge waits').toEqual([
        JSON.stringify({ k: '1', v: 'a2', _cdc_position: second[0]!.position }),
        JSON.stringify({ k: '3', v: 'c', _cdc_position: second[2]!.position }),
      ]);
      expect(await waitsOn(t.mirror), 'the merge is still waiting').toBe(true);
    });
    const w = writer!;
    expect(merged, 'the merge moved the rows it saw').toBe(2);
    // The process's own count of unmerged rows keeps what it appended during its merge.
    expect(w.pendingOf(source, TABLE).rows, 'pending after the merge').toBe(3);
    // The appended rows stay in the delta (above the watermark), over the merged base; the changelog holds every event once.
    expect((await rows(t, t.delta, '"_cdc_position", "k"')).length).toBe(3);
    expect(await rows(t, t.changelog, '"_cdc_position", "k"')).toEqual(
      [...first, ...second].map((e) => JSON.stringify({ _cdc_position: e.position, k: String(e.key.k) })),
    );
    const view = await viewOf(t);
    expect(view).toHaveLength(2);
    expect((await w.merge({ source, table: TABLE, deleteMode: 'soft', key: ['k'] })).rows).toBe(3);
    expect(w.pendingOf(source, TABLE).rows, 'pending after the second merge').toBe(0);
    expect(await viewOf(t), 'the view across the second merge').toEqual(view);
    expect(await rows(t, t.changelog, '"_cdc_position", "k"')).toEqual(
      [...first, ...second].map((e) => JSON.stringify({ _cdc_position: e.position, k: String(e.key.k) })),
    );
  }, 120_000);

  it('a merge asked to stop appends (a delta that outgrew its merges) holds them until it commits', async () => {
    const source = 'stopped';
    const t = warehouseTable(source, TABLE);
    let appending: Promise<{ mode: string }> | null = null;
    const merged = await heldMerge(source, [event(source, 'insert', 1, 'a', next())], { stopAppends: true }, async (w) => {
      appending = apply(w, source, 'soft', [event(source, 'update', 1, 'b', next())]);
      appending.catch(() => undefined);
      await until('the append waiting on the changelog', () => waitsOn(t.changelog));
    });
    expect(merged).toBe(1);
    expect((await appending!).mode).toBe('append');
    expect(await viewOf(t)).toEqual([JSON.stringify({ k: '1', v: 'b', _cdc_position: makePosition(lsn, 0) })]);
  }, 120_000);

  it('a full apply (a truncate) still waits for a merge, and the result is right', async () => {
    const source = 'fullwait';
    const t = warehouseTable(source, TABLE);
    let applying: Promise<{ mode: string }> | null = null;
    await heldMerge(source, [event(source, 'insert', 1, 'a', next())], {}, async (w) => {
      const truncate: ChangeEvent = { ...event(source, 'truncate', 0, null, next()), key: {}, after: null };
      applying = apply(w, source, 'soft', [truncate, event(source, 'insert', 2, 'b', next())]);
      applying.catch(() => undefined);
      await until('the full apply waiting on the changelog', () => waitsOn(t.changelog));
    });
    expect((await applying!).mode).toBe('apply');
    expect(await viewOf(t)).toEqual([JSON.stringify({ k: '2', v: 'b', _cdc_position: makePosition(lsn, 0) })]);
  }, 120_000);

  for (const mode of ['soft', 'hard'] as const) {
    it(`${mode} delete: appends while another process merges in a loop; the view is right after every append (${RUNS} runs)`, async () => {
      const rand = seededRandom(SEED + (mode === 'hard' ? 1 : 0));
      const sourceId = `loop${mode}`;
      const t = warehouseTable(sourceId, TABLE);
      const writer = new PgWarehouse(pool);
      const mergerPool = new pg.Pool({ connectionString: cluster.url('wh'), max: 1 });
      const merger = new PgWarehouse(mergerPool);
      await apply(writer, sourceId, mode, [event(sourceId, 'insert', 0, 'seed', next())]);
      const stats = { appends: 0, merges: 0, merged: 0, overlapped: 0 };
      try {
        for (let run = 0; run < RUNS; run++) {
          const where = `${mode}, run ${run}, seed ${SEED}`;
          await pool.query(
            [t.mirror, t.changelog, t.delta, t.truncations, ...(mode === 'hard' ? [t.deletedKeys] : [])]
              .map((x) => `DELETE FROM ${qualified(t.schema, x)}`)
              .join('; '),
          );
          const model = new Map<number, { v: string | null; position: string } | null>();
          const delivered = new Map<string, ChangeEvent>();
          const batches: ChangeEvent[][] = [];
          let stop = false;
          let merging = false;
          const loop = (async () => {
            while (!stop) {
              merging = true;
              const r = await merger.merge({ source: sourceId, table: TABLE, deleteMode: mode, key: ['k'] });
              merging = false;
              stats.merges++;
              stats.merged += r.rows;
              await new Promise((res) => setTimeout(res, Math.floor(rand() * 4)));
            }
          })();
          try {
            const steps = 4 + Math.floor(rand() * 8);
            for (let step = 0; step < steps; step++) {
              let batch: ChangeEvent[];
              if (batches.length > 0 && rand() < 0.2) {
                batch = batches[Math.floor(rand() * batches.length)]!; // delivered again (older positions)
              } else {
                batch = Array.from({ length: 1 + Math.floor(rand() * 40) }, () => {
                  const k = 1 + Math.floor(rand() * 8);
                  const op = rand() < 0.25 ? 'delete' : rand() < 0.4 ? 'insert' : 'update';
                  return event(sourceId, op, k, op === 'delete' ? null : String(Math.floor(rand() * 1000)), next());
                });
                batches.push(batch);
                for (const e of batch) model.set(e.key.k as number, e.op === 'delete' ? null : { v: e.after!.v as string, position: e.position });
              }
              if (merging) stats.overlapped++;
              const r = await apply(writer, sourceId, mode, batch);
              expect(r.mode, where).toBe('append');
              stats.appends++;
              for (const e of batch) delivered.set(`${e.position}|${String(e.key.k)}`, e);
              const expected = [...model.entries()]
                .filter(([, v]) => v !== null)
                .sort((a, b) => a[0] - b[0])
                .map(([k, v]) => JSON.stringify({ k: String(k), v: v!.v, _cdc_position: v!.position }));
              expect(await viewOf(t), `view after step ${step}, ${where}`).toEqual(expected);
            }
          } finally {
            stop = true;
            await loop;
          }
          await merger.merge({ source: sourceId, table: TABLE, deleteMode: mode, key: ['k'] });
          expect(await rows(t, t.delta, '"_cdc_position", "k"'), `delta after the last merge, ${where}`).toEqual([]);
          const live = [...model.entries()].filter(([, v]) => v !== null).sort((a, b) => a[0] - b[0]);
          expect(await viewOf(t), `view after the last merge, ${where}`).toEqual(
            live.map(([k, v]) => JSON.stringify({ k: String(k), v: v!.v, _cdc_position: v!.position })),
          );
          const mirror = await rows(t, t.mirror, '"k", "_cdc_position", "_cdc_deleted"');
          const gone = [...model.entries()].filter(([, v]) => v === null).map(([k]) => k);
          if (mode === 'soft') {
            expect(mirror.length, `mirror rows (live and tombstones), ${where}`).toBe(model.size);
          } else {
            expect(mirror.length, `mirror rows (live only), ${where}`).toBe(live.length);
            expect(
              (await rows(t, t.deletedKeys, '"k", "_cdc_position"')).map((r) => Number((JSON.parse(r) as { k: string }).k)).sort((a, b) => a - b),
              `deleted keys, ${where}`,
            ).toEqual(gone.sort((a, b) => a - b));
          }
          const changelog = await rows(t, t.changelog, '"_cdc_position", "k"');
          const want = [...delivered.values()].map((e) => JSON.stringify({ _cdc_position: e.position, k: String(e.key.k) })).sort();
          expect(changelog.slice().sort(), `changelog: every delivered event once, ${where}`).toEqual(want);
        }
      } finally {
        await mergerPool.end();
      }
      console.log(
        `merge-concurrent-append (${mode}): ${RUNS} runs, ${stats.appends} appends (${stats.overlapped} begun during a merge), ${stats.merges} merges of ${stats.merged} rows, seed ${SEED}`,
      );
      expect(stats.overlapped, 'appends that began while a merge ran').toBeGreaterThan(0);
    }, 600_000);
  }
});
