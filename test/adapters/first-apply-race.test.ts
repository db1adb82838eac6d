/**
 * Two appliers making the same table's warehouse objects at once (docs/operations.md, "Blast
 * radius of one table"): on AWS two shards' appliers, locally two pollers, can each be the first
 * to apply a new table. PostgreSQL then fails the loser's `CREATE … IF NOT EXISTS` with one of
 * several SQLSTATEs (23505 on a catalog index, 42P07, 42710 "type … already exists"); each is a
 * lost race, re-planned, never an error about the table that holds it for the sink. Before 42710
 * was known as one, a lost race held the table (a CI run of `cdc local` showed it:
 * `type "_cdc_changelog_items" already exists`, 93 of 120 rows never applied).
 *
 * Against embedded PostgreSQL, per round a new table: four PgWarehouse instances on four pools apply
 * their own keys of it at the same moment; both must succeed and the view must hold both.
 * Rounds: `CDC_RACE_ROUNDS` (default 40), printed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import { persistentTableErrorCode } from '../../lambda/adapters/warehouse-pg-errors.ts';
import type { SchemaVersion } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';

const ROUNDS = Number(process.env.CDC_RACE_ROUNDS ?? 40);
const at = new Date(0).toISOString();

const version = (sourceId: string, table: string): SchemaVersion => ({
  source: sourceId,
  table,
  version: 1,
  key: ['k'],
  effectivePosition: '0'.repeat(24),
  registeredAt: at,
  columns: [
    { name: 'k', type: 'integer', nullable: false },
    { name: 'v', type: 'text', nullable: true },
  ],
});

const insert = (sourceId: string, table: string, k: number, position: string): ChangeEvent => ({
  v: ENVELOPE_VERSION,
  source: sourceId,
  table,
  op: 'insert',
  key: { k },
  after: { k, v: `v${k}` },
  before: null,
  missing: [],
  position,
  commitTs: at,
  txId: null,
  schemaVersion: 1,
  capture: 'slot',
  synthetic: false,
});

describe('two appliers making a new table at once (embedded PostgreSQL)', () => {
  let cluster: PostgresCluster;
  let pools: pg.Pool[];

  beforeAll(async () => {
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('wh');
    pools = [0, 1, 2, 3].map(() => {
      const p = new pg.Pool({ connectionString: cluster.url('wh'), max: 2 });
      p.on('error', () => undefined);
      return p;
    });
  }, 120_000);

  afterAll(async () => {
    for (const p of pools ?? []) await p.end();
    await cluster?.stop();
  });

  it('a lost CREATE race (42710, 42P07, 23505) is re-planned, never a hold', () => {
    for (const code of ['42710', '42P07', '23505', '42P06', '42701']) expect(persistentTableErrorCode({ code }), code).toBeNull();
    // An error about the table that a retry will not fix still holds it.
    expect(persistentTableErrorCode({ code: '42501' })).toBe('42501');
  });

  it('both appliers succeed and the view holds both keys, round after round', async () => {
    console.log(`first-apply-race: ${ROUNDS} rounds (CDC_RACE_ROUNDS)`);
    for (let round = 0; round < ROUNDS; round++) {
      const sourceId = `race${round}`;
      const table = `public.t${round}`;
      const schemas = new Map([[1, version(sourceId, table)]]);
      const writers = pools.map((p) => new PgWarehouse(p));
      const results = await Promise.allSettled(
        writers.map((w, i) =>
          w.applyTable({
            source: sourceId,
            table,
            deleteMode: 'soft',
            schemas,
            events: [insert(sourceId, table, i + 1, makePosition(0x1000n + BigInt(round * 16 + i), 0))],
            appliedAt: new Date(),
          }),
        ),
      );
      const failed = results.flatMap((r) => (r.status === 'rejected' ? [String((r.reason as { code?: string }).code ?? '') + ' ' + String(r.reason)] : []));
      expect(failed, `round ${round}`).toEqual([]);
      const t = warehouseTable(sourceId, table);
      const rows = await pools[0]!.query(`SELECT k FROM ${qualified(t.schema, t.view)} ORDER BY k`);
      expect(
        rows.rows.map((r: { k: number }) => Number(r.k)),
        `round ${round}`,
      ).toEqual([1, 2, 3, 4]);
    }
  }, 300_000);
});
