/**
 * Two appliers making a new table's warehouse objects from DIFFERENT schema versions
 * (docs/warehouse-apply.md, "Objects made from the catalog they run against"). On AWS two shards'
 * appliers, locally two pollers, each with their own `PgWarehouse`, can be the first to apply a
 * table; one's batch may carry only version 1, the other's version 2 with a column added (`body`).
 *
 * The interleaving: B reads the catalog (nothing there), then A makes the objects from version 1
 * and commits, then B runs its DDL. When B planned it from that read (before the DDL was planned
 * under the changelog's lock), `CREATE TABLE IF NOT EXISTS` of B's changelog (with `body`) did
 * nothing, and B's `CREATE OR REPLACE VIEW` of the pending changes named `c.body`, which A's
 * changelog lacks: 42703 "column c.body does not exist", an
 * error about the table that held it for the sink (seen once in CI in `cdc local`, on the demo's
 * `public.documents`). The other order (A from version 2, B from version 1) made B's view with
 * fewer columns than A's: 42P16 "cannot drop columns from view", held too.
 *
 * Deterministic: B's connection runs A's whole apply right after its first catalog read returns.
 * Then, randomized over seeds (printed): four appliers with version 1 or versions 1 and 2 at
 * random race a new table at the same moment; every apply succeeds and the view holds every row.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import { guardPoolClients } from '../../lambda/adapters/pg-pool.ts';
import type { SchemaVersion } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { catalogSql, qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { seededRandom } from '../fixtures/pagila-like.ts';

const ROUNDS = Number(process.env.CDC_SHAPE_RACE_ROUNDS ?? 12);
const at = new Date(0).toISOString();

const COLUMNS_V1 = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'title', type: 'text', nullable: true },
];
const COLUMNS_V2 = [...COLUMNS_V1, { name: 'body', type: 'text', nullable: true }];

const version = (sourceId: string, table: string, v: 1 | 2): SchemaVersion => ({
  source: sourceId,
  table,
  version: v,
  key: ['id'],
  effectivePosition: '0'.repeat(24),
  registeredAt: at,
  columns: v === 1 ? COLUMNS_V1 : COLUMNS_V2,
});

/** The schema versions a batch of version `v` events carries (version 2's batch may hold version 1 events too). */
const schemasUpTo = (sourceId: string, table: string, v: 1 | 2): Map<number, SchemaVersion> =>
  new Map(
    v === 1
      ? [[1, version(sourceId, table, 1)]]
      : [
          [1, version(sourceId, table, 1)],
          [2, version(sourceId, table, 2)],
        ],
  );

const insert = (sourceId: string, table: string, id: number, v: 1 | 2, lsn: bigint): ChangeEvent => ({
  v: ENVELOPE_VERSION,
  source: sourceId,
  table,
  op: 'insert',
  key: { id },
  after: v === 1 ? { id, title: `t${id}` } : { id, title: `t${id}`, body: `b${id}` },
  before: null,
  missing: [],
  position: makePosition(lsn, 0),
  commitTs: at,
  txId: null,
  schemaVersion: v,
  capture: 'slot',
  synthetic: false,
});

/** A pool whose connections run `hook` once, right after the first catalog read of the sink's shape returns. */
function pausedAfterShapeRead(url: string, hook: () => Promise<void>): pg.Pool {
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  const shapeRead = catalogSql(warehouseTable('x', 'public.x')).text;
  let armed = true;
  pool.on('connect', (client) => {
    const query = client.query.bind(client) as (...args: unknown[]) => Promise<unknown>;
    (client as unknown as { query: (...args: unknown[]) => unknown }).query = (...args: unknown[]) => {
      if (!armed || args[0] !== shapeRead) return query(...args);
      armed = false;
      return query(...args).then(async (res) => {
        await hook();
        return res;
      });
    };
  });
  return pool;
}

describe('appliers making a new table from different schema versions (embedded PostgreSQL)', () => {
  let cluster: PostgresCluster;
  const pools: pg.Pool[] = [];
  let reader: pg.Pool | undefined;
  /** Every pool's connections keep an error listener, so the server's stop at the end cannot crash the run. */
  const pool = (p: pg.Pool): pg.Pool => (pools.push(guardPoolClients(p)), p);

  beforeAll(async () => {
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('wh');
  }, 120_000);

  afterAll(async () => {
    for (const p of pools) await p.end();
    await cluster?.stop();
  });

  const viewRows = async (sourceId: string, table: string): Promise<{ id: number; title: string | null; body: string | null }[]> => {
    const t = warehouseTable(sourceId, table);
    reader ??= pool(new pg.Pool({ connectionString: cluster.url('wh'), max: 1 }));
    const res = await reader.query(`SELECT * FROM ${qualified(t.schema, t.view)} ORDER BY id`);
    return res.rows.map((r: Record<string, unknown>) => ({
      id: Number(r.id),
      title: (r.title as string | null) ?? null,
      body: (r.body as string | null) ?? null,
    }));
  };

  /** B reads the catalog (no objects), A applies its batch from `a` and commits, then B goes on with its batch from `b`. */
  async function interleave(sourceId: string, table: string, a: 1 | 2, b: 1 | 2): Promise<void> {
    const writerA = new PgWarehouse(pool(new pg.Pool({ connectionString: cluster.url('wh'), max: 2 })));
    let aDone = false;
    const writerB = new PgWarehouse(
      pool(
        pausedAfterShapeRead(cluster.url('wh'), async () => {
          await writerA.applyTable({
            source: sourceId,
            table,
            deleteMode: 'soft',
            schemas: schemasUpTo(sourceId, table, a),
            events: [insert(sourceId, table, 1, a, 0x100n)],
            appliedAt: new Date(),
          });
          aDone = true;
        }),
      ),
    );
    await writerB.applyTable({
      source: sourceId,
      table,
      deleteMode: 'soft',
      schemas: schemasUpTo(sourceId, table, b),
      events: [insert(sourceId, table, 2, b, 0x200n)],
      appliedAt: new Date(),
    });
    expect(aDone, 'A applied between B’s catalog read and its DDL').toBe(true);
    // Each writer's next batch (its cached shape) still applies: version 2 events through both.
    await writerA.applyTable({
      source: sourceId,
      table,
      deleteMode: 'soft',
      schemas: schemasUpTo(sourceId, table, 2),
      events: [insert(sourceId, table, 3, 2, 0x300n)],
      appliedAt: new Date(),
    });
    await writerB.applyTable({
      source: sourceId,
      table,
      deleteMode: 'soft',
      schemas: schemasUpTo(sourceId, table, 2),
      events: [insert(sourceId, table, 4, 2, 0x400n)],
      appliedAt: new Date(),
    });
  }

  it('version 1 made first, version 2 planned from the read before it: B adds body instead of naming c.body that is not there (was 42703)', async () => {
    await interleave('shapes', 'public.documents', 1, 2);
    expect(await viewRows('shapes', 'public.documents')).toEqual([
      { id: 1, title: 't1', body: null },
      { id: 2, title: 't2', body: 'b2' },
      { id: 3, title: 't3', body: 'b3' },
      { id: 4, title: 't4', body: 'b4' },
    ]);
  });

  it('version 2 made first, version 1 planned from the read before it: B keeps the views that show body (was 42P16)', async () => {
    await interleave('shapes', 'public.notes', 2, 1);
    expect(await viewRows('shapes', 'public.notes')).toEqual([
      { id: 1, title: 't1', body: 'b1' },
      { id: 2, title: 't2', body: null },
      { id: 3, title: 't3', body: 'b3' },
      { id: 4, title: 't4', body: 'b4' },
    ]);
  });

  it('four appliers with version 1 or versions 1 and 2 at random make a new table at once: every apply succeeds, the view holds every row', async () => {
    const seed = Number(process.env.CDC_SHAPE_RACE_SEED ?? Date.now() % 1_000_000);
    console.log(`first-apply-shapes: seed ${seed}, ${ROUNDS} rounds (CDC_SHAPE_RACE_SEED, CDC_SHAPE_RACE_ROUNDS)`);
    const rand = seededRandom(seed);
    const racers = [0, 1, 2, 3].map(() => pool(new pg.Pool({ connectionString: cluster.url('wh'), max: 2 })));
    for (let round = 0; round < ROUNDS; round++) {
      const sourceId = `race${round}`;
      const table = 'public.documents';
      const versions = racers.map(() => (rand() < 0.5 ? 1 : 2) as 1 | 2);
      const results = await Promise.allSettled(
        racers.map((p, i) =>
          new PgWarehouse(p).applyTable({
            source: sourceId,
            table,
            deleteMode: 'soft',
            schemas: schemasUpTo(sourceId, table, versions[i]!),
            events: [insert(sourceId, table, i + 1, versions[i]!, 0x1000n + BigInt(i))],
            appliedAt: new Date(),
          }),
        ),
      );
      const failed = results.flatMap((r) => (r.status === 'rejected' ? [`${(r.reason as { code?: string }).code ?? ''} ${String(r.reason)}`] : []));
      expect(failed, `seed ${seed} round ${round} versions ${versions.join(',')}`).toEqual([]);
      const rows = await viewRows(sourceId, table);
      expect(
        rows.map((r) => [r.id, r.body]),
        `seed ${seed} round ${round}`,
      ).toEqual(versions.map((v, i) => [i + 1, v === 2 ? `b${i + 1}` : null]));
    }
  }, 300_000);
});
