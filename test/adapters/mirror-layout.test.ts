/**
 * The mirror's column layout (docs/warehouse-apply.md, "The mirror's columns"; docs/performance-log.md, "Reconciliation: the tombstone flag first in the mirror"):
 * - a mirror the applier makes has the tombstone flag `_cdc_deleted` as its FIRST column (so a
 *   live-row count reads one fixed-offset attribute per row), the view shows the same columns in
 *   the same order as before;
 * - a mirror made by an earlier version (every platform column after the data) keeps working
 *   unchanged: the applier writes it (append, merge, soft and hard deletes) without rewriting it,
 *   and its view, its mirror rows and the reconciler's count (the view's second form) are the same
 *   as the new layout's after every step of the same random history.
 *
 * Randomized in real PostgreSQL: per run, a random history (inserts, updates, snapshot rows, deletes
 * over a few keys; several batches, merges at random points, a row removed from the mirror behind
 * the platform's back) applied to four table sets: new and earlier layout, soft and hard delete
 * mode. After every step each set's view is compared with a model of the history, and each pair's
 * mirrors (by column name), views and counts with each other.
 *
 * Runs and seed: `CDC_PROPERTY_RUNS` (default 40) and `CDC_PROPERTY_SEED` (default random), printed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import type { DeleteMode, SchemaVersion } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import {
  CdcColumn,
  MIRROR_FILLFACTOR,
  overlayAggregateSql,
  qualified,
  warehouseTable,
  type WarehouseTable,
} from '../../lambda/core/warehouse/warehouse-sql.ts';
import { seededRandom } from '../../local/seeded-random.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 40);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const TABLE = 'public.t';
const RAW = { getTypeParser: () => (v: string) => v } as unknown as pg.CustomTypesConfig;
const KEYS = [1, 2, 3, 4, 5, 6];
const MIRROR_COLUMNS = ['k', 'v', 'n', CdcColumn.POSITION, CdcColumn.DELETED, CdcColumn.DELETED_AT, CdcColumn.APPLIED_AT];
const VIEW_COLUMNS = ['k', 'v', 'n', CdcColumn.POSITION, CdcColumn.APPLIED_AT];

/** The mirror as versions before docs/performance-log.md, "Reconciliation: the tombstone flag first in the mirror" made it: every platform column after the data. */
const earlierMirrorSql = (t: WarehouseTable): string =>
  `CREATE SCHEMA IF NOT EXISTS "${t.schema}"; CREATE TABLE ${qualified(t.schema, t.mirror)} ("k" bigint NOT NULL, "v" varchar(65535), "n" bigint, ` +
  `"_cdc_position" varchar(24) NOT NULL, "_cdc_deleted" boolean NOT NULL, "_cdc_deleted_at" timestamptz, "_cdc_applied_at" timestamptz NOT NULL, PRIMARY KEY ("k"))`;
const EARLIER_ORDER = ['k', 'v', 'n', '_cdc_position', '_cdc_deleted', '_cdc_deleted_at', '_cdc_applied_at'];

describe('mirror layout: the tombstone flag first; mirrors of the earlier layout keep working (randomized, embedded PostgreSQL)', () => {
  let cluster: PostgresCluster;
  let pool: pg.Pool;

  beforeAll(async () => {
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('wh');
    pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 2 });
    pool.on('error', () => undefined);
    console.log(`mirror-layout: ${RUNS} runs, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
  }, 120_000);

  afterAll(async () => {
    await pool?.end();
    await cluster?.stop();
  });

  it(`new and earlier layouts hold the same rows after every step of random histories, soft and hard (${RUNS} runs)`, async () => {
    const rand = seededRandom(SEED);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const warehouse = new PgWarehouse(pool);
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
        { name: 'n', type: 'integer', nullable: true },
      ],
    });
    type Set = { source: string; t: WarehouseTable; mode: DeleteMode; earlier: boolean };
    const sets: Set[] = [
      { source: 'newsoft', mode: 'soft', earlier: false },
      { source: 'oldsoft', mode: 'soft', earlier: true },
      { source: 'newhard', mode: 'hard', earlier: false },
      { source: 'oldhard', mode: 'hard', earlier: true },
    ].map((s) => ({ ...s, mode: s.mode as DeleteMode, t: warehouseTable(s.source, TABLE) }));
    let lsn = 0x1000n;
    const event = (sourceId: string, op: ChangeEvent['op'], k: number, v: string | null, n: number | null, position: string): ChangeEvent => ({
      v: ENVELOPE_VERSION,
      source: sourceId,
      table: TABLE,
      op,
      key: { k },
      after: op === 'delete' ? null : { k, v, n },
      before: null,
      missing: [],
      position,
      commitTs: at,
      txId: null,
      schemaVersion: 1,
      capture: 'slot',
      synthetic: false,
    });
    const apply = async (
      s: Set,
      events: { op: ChangeEvent['op']; k: number; v: string | null; n: number | null; position: string }[],
      appliedAt: Date,
    ): Promise<void> => {
      await warehouse.applyTable({
        source: s.source,
        table: TABLE,
        deleteMode: s.mode,
        schemas: new Map([[1, version(s.source)]]),
        events: events.map((e) => event(s.source, e.op, e.k, e.v, e.n, e.position)),
        appliedAt,
      });
    };
    const columnsOf = async (t: WarehouseTable, name: string): Promise<string[]> =>
      (
        await pool.query<{ n: string }>(
          'SELECT a.attname AS n FROM pg_attribute a WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum',
          [qualified(t.schema, name)],
        )
      ).rows.map((r) => r.n);
    const viewRows = async (t: WarehouseTable): Promise<{ fields: string[]; rows: string[] }> => {
      const res = await pool.query({ text: `SELECT * FROM ${qualified(t.schema, t.view)} ORDER BY "k"`, types: RAW });
      return { fields: res.fields.map((f) => f.name), rows: res.rows.map((r) => JSON.stringify(r)) };
    };
    const mirrorRows = async (t: WarehouseTable): Promise<string[]> =>
      (
        await pool.query({ text: `SELECT ${MIRROR_COLUMNS.map((c) => `"${c}"`).join(', ')} FROM ${qualified(t.schema, t.mirror)} ORDER BY "k"`, types: RAW })
      ).rows.map((r) => JSON.stringify(r));
    const formCount = async (t: WarehouseTable, hard: boolean): Promise<number> => {
      const sql = overlayAggregateSql(t, await columnsOf(t, t.mirror), ['k'], { deletedKeys: hard, truncations: true });
      return Number((await pool.query<{ n: string }>(sql)).rows[0]!.n);
    };

    // The tables: the earlier layout's mirrors made by hand first, then the applier makes the rest (and the new mirrors).
    for (const s of sets) if (s.earlier) await pool.query(earlierMirrorSql(s.t));
    for (const s of sets) await apply(s, [{ op: 'insert', k: 0, v: 'seed', n: 0, position: makePosition((lsn += 8n), 0) }], new Date(0));
    for (const s of sets) {
      const cols = await columnsOf(s.t, s.t.mirror);
      if (s.earlier) expect(cols, s.source).toEqual(EARLIER_ORDER);
      else {
        // The property the live-row count relies on: the tombstone flag is attribute 1.
        expect(cols[0], s.source).toBe(CdcColumn.DELETED);
        expect(cols, s.source).toEqual(['_cdc_deleted', 'k', 'v', 'n', '_cdc_position', '_cdc_deleted_at', '_cdc_applied_at']);
      }
      expect((await viewRows(s.t)).fields, s.source).toEqual(VIEW_COLUMNS);
      // New mirrors leave room for HOT updates; earlier ones are left as they are (docs/warehouse-apply.md, "What a merge costs").
      const options = (
        await pool.query<{ o: string[] | null }>('SELECT reloptions AS o FROM pg_class WHERE oid = to_regclass($1)', [qualified(s.t.schema, s.t.mirror)])
      ).rows[0]!.o;
      expect(options, s.source).toEqual(s.earlier ? null : [`fillfactor=${MIRROR_FILLFACTOR}`]);
    }

    const stats = { steps: 0, merges: 0, behindBack: 0, events: 0 };
    for (let run = 0; run < RUNS; run++) {
      const where = `run ${run}, seed ${SEED}`;
      for (const s of sets) {
        await pool.query(
          [s.t.mirror, s.t.changelog, s.t.delta, s.t.truncations, ...(s.mode === 'hard' ? [s.t.deletedKeys] : [])]
            .map((x) => `DELETE FROM ${qualified(s.t.schema, x)}`)
            .join('; '),
        );
      }
      // The model: what the view must show per key after the history so far (positions only grow).
      const model = new Map<number, { v: string | null; n: number | null; position: string; appliedAt: string } | null>();
      // Keys whose row was removed from the base behind the platform's back (and not written since).
      const gone = new Set<number>();
      const steps = 2 + Math.floor(rand() * 4);
      for (let step = 0; step < steps; step++) {
        const appliedAt = new Date(Date.UTC(2026, 0, 1) + run * 1000 + step);
        const events = Array.from({ length: 1 + Math.floor(rand() * 12) }, () => {
          const op = pick(['insert', 'update', 'snapshot', 'delete'] as const);
          return {
            op,
            k: pick(KEYS),
            v: rand() < 0.2 ? null : pick(['a', 'b', '', 'é']),
            n: rand() < 0.2 ? null : Math.floor(rand() * 100),
            position: makePosition((lsn += 8n), 0),
          };
        });
        for (const s of sets) await apply(s, events, appliedAt);
        for (const e of events) {
          model.set(e.k, e.op === 'delete' ? null : { v: e.v, n: e.n, position: e.position, appliedAt: appliedAt.toISOString() });
          gone.delete(e.k);
        }
        stats.events += events.length;
        if (rand() < 0.4) {
          for (const s of sets) await warehouse.merge({ source: s.source, table: TABLE, deleteMode: s.mode, key: ['k'] });
          stats.merges++;
        }
        if (rand() < 0.15) {
          // A live base row with no unmerged change, removed behind the platform's back: the view and the count must show it gone, in both layouts.
          const t0 = sets[0]!.t;
          const live = (
            await pool.query<{ k: string }>(
              `SELECT m."k" FROM ${qualified(t0.schema, t0.mirror)} m WHERE NOT m."_cdc_deleted" AND NOT EXISTS (SELECT 1 FROM ${qualified(t0.schema, t0.delta)} d WHERE d."k" = m."k") ORDER BY m."k" LIMIT 1`,
            )
          ).rows[0];
          if (live) {
            for (const s of sets) await pool.query(`DELETE FROM ${qualified(s.t.schema, s.t.mirror)} WHERE "k" = $1`, [Number(live.k)]);
            gone.add(Number(live.k));
            stats.behindBack++;
          }
        }
        stats.steps++;
        // What the view must show: the model, without the keys removed behind the platform's back.
        const views = await Promise.all(sets.map((s) => viewRows(s.t)));
        for (const [i, s] of sets.entries()) {
          expect(views[i]!.fields, `${where}, ${s.source}`).toEqual(VIEW_COLUMNS);
          const shown = new Map(views[i]!.rows.map((r) => JSON.parse(r) as Record<string, string | null>).map((r) => [Number(r.k), r]));
          for (const k of KEYS) {
            const want = gone.has(k) ? null : (model.get(k) ?? null);
            const got = shown.get(k) ?? null;
            if (want === null) expect(got, `${where}, ${s.source}, key ${k}`).toBeNull();
            else
              expect(
                got === null ? null : { v: got.v, n: got.n === null ? null : Number(got.n), position: got._cdc_position },
                `${where}, ${s.source}, key ${k}`,
              ).toEqual({ v: want.v, n: want.n, position: want.position });
          }
          expect(await formCount(s.t, s.mode === 'hard'), `${where}, ${s.source}: the view's second form counts the view`).toBe(views[i]!.rows.length);
        }
        // Each layout pair: the same view rows and the same mirror rows (by column name).
        for (const [a, b] of [
          [0, 1],
          [2, 3],
        ] as const) {
          expect(views[b]!.rows, `${where}: ${sets[b]!.source} view = ${sets[a]!.source} view`).toEqual(views[a]!.rows);
          expect(await mirrorRows(sets[b]!.t), `${where}: ${sets[b]!.source} mirror = ${sets[a]!.source} mirror`).toEqual(await mirrorRows(sets[a]!.t));
        }
      }
    }
    // Nothing rewrote the earlier mirrors.
    for (const s of sets) if (s.earlier) expect(await columnsOf(s.t, s.t.mirror)).toEqual(EARLIER_ORDER);
    console.log(
      `mirror-layout: ${stats.steps} steps, ${stats.events} events, ${stats.merges} merges, ${stats.behindBack} rows removed behind the platform's back`,
    );
    expect(stats.merges).toBeGreaterThan(0);
  }, 600_000);
});
