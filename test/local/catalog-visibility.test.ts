/**
 * `awaitTransactionsVisible` (local/catalog.ts): the capture reads column types from the catalog
 * only once the batch's transactions are visible to a new snapshot, so a catalog read made while
 * a decoded transaction is not yet visible does not see the catalog from before it (real PostgreSQL).
 * `columnTypesOnceVisible` does both in one statement: the types of an `ALTER … TYPE` in a
 * transaction that ends while it waits, and `columnTypesOf`'s types otherwise.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { awaitTransactionsVisible, columnTypesOf, columnTypesOnceVisible } from '../../local/catalog.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';

let cluster: PostgresCluster;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
});

afterAll(async () => {
  await cluster?.stop();
});

describe('awaitTransactionsVisible', () => {
  it('returns at once for committed transactions, waits for one still running until it ends, and gives up after its bound', async () => {
    const a = new pg.Client({ connectionString: cluster.url('postgres') });
    const b = new pg.Client({ connectionString: cluster.url('postgres') });
    await a.connect();
    await b.connect();
    try {
      const xidOf = async (c: pg.Client): Promise<number> => Number(BigInt((await c.query('SELECT txid_current()::text AS x')).rows[0].x) & 0xffff_ffffn);
      const done = await xidOf(a); // its own implicit transaction, committed
      let t0 = Date.now();
      await awaitTransactionsVisible(b, [done], 5_000);
      expect(Date.now() - t0).toBeLessThan(1_000);

      await a.query('BEGIN');
      const open = await xidOf(a);
      // Still running: waits for the whole bound.
      t0 = Date.now();
      await awaitTransactionsVisible(b, [done, open], 300);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(300);
      // Ends while waited for: returns soon after the commit, well before the bound.
      t0 = Date.now();
      const waiting = awaitTransactionsVisible(b, [open], 10_000);
      await new Promise((r) => setTimeout(r, 100));
      await a.query('COMMIT');
      await waiting;
      expect(Date.now() - t0).toBeLessThan(5_000);
      // A transaction id the server has not handed out yet (at or after the snapshot's xmax) is not visible either.
      t0 = Date.now();
      await awaitTransactionsVisible(b, [open + 1000], 200);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(200);
    } finally {
      await a.end();
      await b.end();
    }
  });

  it('columnTypesOnceVisible: reads the types after the transactions ended, in one statement when they already have, as columnTypesOf reads them', async () => {
    const a = new pg.Client({ connectionString: cluster.url('postgres') });
    const b = new pg.Client({ connectionString: cluster.url('postgres') });
    await a.connect();
    await b.connect();
    try {
      await a.query('DROP TABLE IF EXISTS vis_t; CREATE TABLE vis_t (id bigint PRIMARY KEY, v numeric(8,1), "Odd ""Name""" character varying(5), gone text)');
      await a.query('ALTER TABLE vis_t DROP COLUMN gone');
      const xidOf = async (c: pg.Client): Promise<number> => Number(BigInt((await c.query('SELECT txid_current()::text AS x')).rows[0].x) & 0xffff_ffffn);
      const done = await xidOf(a);
      const flat = (m: Map<string, Map<string, { base: string; full: string }>>) => [...m].map(([t, cols]) => [t, [...cols]]);
      // Nothing running: the same types as columnTypesOf, columns in table order, dropped ones left out, tables that do not exist absent.
      let t0 = Date.now();
      const now = await columnTypesOnceVisible(b, ['public.vis_t', 'public.nope'], [done], 5_000);
      expect(Date.now() - t0).toBeLessThan(1_000);
      expect(flat(now)).toEqual(flat(await columnTypesOf(b, ['public.vis_t', 'public.nope'])));
      expect(flat(now)).toEqual([
        [
          'public.vis_t',
          [
            ['id', { base: 'bigint', full: 'bigint' }],
            ['v', { base: 'numeric', full: 'numeric(8,1)' }],
            ['Odd "Name"', { base: 'character varying', full: 'character varying(5)' }],
          ],
        ],
      ]);
      expect((await columnTypesOnceVisible(b, [], [done])).size).toBe(0);
      // A transaction that changes a type and ends while waited for: the types after it.
      await a.query('BEGIN');
      await a.query('ALTER TABLE vis_t ALTER COLUMN v TYPE numeric(12,2)');
      const open = await xidOf(a);
      t0 = Date.now();
      const waiting = columnTypesOnceVisible(b, ['public.vis_t'], [done, open], 10_000);
      await new Promise((r) => setTimeout(r, 150));
      await a.query('COMMIT');
      const after = await waiting;
      expect(Date.now() - t0).toBeGreaterThanOrEqual(150);
      expect(after.get('public.vis_t')!.get('v')).toEqual({ base: 'numeric', full: 'numeric(12,2)' });
      // Still running past the bound: gives up and reads the catalog as it is (the type before).
      await a.query('BEGIN');
      await a.query('ALTER TABLE vis_t ALTER COLUMN v TYPE numeric(14,3)');
      const still = await xidOf(a);
      t0 = Date.now();
      const gaveUp = await columnTypesOnceVisible(b, ['public.vis_t'], [still], 300);
      expect(Date.now() - t0).toBeGreaterThanOrEqual(300);
      expect(gaveUp.get('public.vis_t')!.get('v')).toEqual({ base: 'numeric', full: 'numeric(12,2)' });
      await a.query('ROLLBACK');
    } finally {
      await a.end();
      await b.end();
    }
  });
});
