/**
 * `awaitTransactionsVisible` (local/catalog.ts): the capture reads column types from the catalog
 * only once the batch's transactions are visible to a new snapshot, so a catalog read made while
 * a decoded transaction is not yet visible does not see the catalog from before it (real PostgreSQL).
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { awaitTransactionsVisible } from '../../local/catalog.ts';
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
});
