/**
 * `CatalogAhead` (local/catalog-ahead.ts), on real PostgreSQL: the catalog read a streamed batch
 * starts before its parse is the batch's read only when it asked exactly what the batch asks (the
 * same tables, the same transactions), and like any `columnTypesOnceVisible` read it sees an
 * `ALTER … TYPE` of a transaction that ends while it waits. The next batch's read, started with
 * it, is kept for the next batch. Otherwise the batch reads again.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { CatalogAhead } from '../../local/catalog-ahead.ts';
import { columnTypesOf } from '../../local/catalog.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';

let cluster: PostgresCluster;
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
});

afterAll(async () => {
  await cluster?.stop();
});

describe('CatalogAhead', () => {
  it('uses the read started ahead only for the same tables and transactions, and that read waits for them', async () => {
    const a = new pg.Client({ connectionString: cluster.url('postgres') });
    const b = new pg.Client({ connectionString: cluster.url('postgres') });
    await a.connect();
    await b.connect();
    try {
      await a.query(`CREATE TABLE t1 (id int PRIMARY KEY, v varchar(5)); CREATE TABLE t2 (id int PRIMARY KEY, n numeric(6,2))`);
      let queries = 0;
      const counted = { query: ((...args: Parameters<pg.Client['query']>) => (queries++, b.query(...args))) as pg.Client['query'] };
      const xidOf = async (c: pg.Client): Promise<number> => Number(BigInt((await c.query('SELECT txid_current()::text AS x')).rows[0].x) & 0xffff_ffffn);
      const ahead = new CatalogAhead();

      // Before the first batch there is nothing to read ahead.
      ahead.start(counted, [1]);
      expect(queries).toBe(0);
      const done = await xidOf(a);
      const first = await ahead.read(counted, ['public.t1'], [done]);
      expect(queries).toBe(1);
      expect(first).toEqual(await columnTypesOf(b, ['public.t1']));

      // Read ahead while the batch's transaction, which alters a type, is still running: the read waits for it.
      await a.query('BEGIN');
      await a.query('ALTER TABLE t1 ALTER COLUMN v TYPE varchar(9)');
      const open = await xidOf(a);
      ahead.start(counted, [done, open]);
      await sleep(100);
      // Still running: the read ahead polls (local/catalog.ts, `columnTypesOnceVisible`).
      expect(queries).toBeGreaterThan(2);
      await a.query('COMMIT');
      await sleep(100);
      let before = queries;
      const second = await ahead.read(counted, ['public.t1'], [done, open]);
      expect(queries).toBe(before);
      expect(second.get('public.t1')?.get('v')).toEqual({ base: 'character varying', full: 'character varying(9)' });

      // Another table in the batch: the read ahead is dropped and the batch reads its own tables.
      ahead.start(counted, [open]);
      await sleep(50);
      before = queries;
      const third = await ahead.read(counted, ['public.t1', 'public.t2'], [open]);
      expect(queries).toBe(before + 1);
      expect(third).toEqual(await columnTypesOf(b, ['public.t1', 'public.t2']));

      // Other transactions than those read ahead for: read again.
      ahead.start(counted, [open, done]);
      await sleep(50);
      before = queries;
      await ahead.read(counted, ['public.t2', 'public.t1'], [open]);
      expect(queries).toBe(before + 1);
      // The same tables in another order, the same transactions: the read ahead.
      ahead.start(counted, [open]);
      await sleep(50);
      before = queries;
      await ahead.read(counted, ['public.t1', 'public.t2'], [open]);
      expect(queries).toBe(before);

      // The next batch's read, started with this one's, is kept through this batch's read and is the next batch's.
      ahead.start(counted, [open], [done]);
      await sleep(50);
      before = queries;
      await ahead.read(counted, ['public.t1', 'public.t2'], [open]);
      ahead.start(counted, [done], null);
      const next = await ahead.read(counted, ['public.t2', 'public.t1'], [done]);
      expect(queries).toBe(before);
      expect(next).toEqual(await columnTypesOf(b, ['public.t1', 'public.t2']));
      // A batch of other tables than the one before: the next read, made for those, is dropped and read again.
      before = queries;
      ahead.start(counted, [open], [done]);
      await sleep(50);
      expect(queries).toBe(before + 2);
      await ahead.read(counted, ['public.t1'], [open]);
      expect(queries).toBe(before + 3);
      ahead.start(counted, [done], null);
      await sleep(50);
      expect(queries).toBe(before + 4);
      await ahead.read(counted, ['public.t1'], [done]);
      expect(queries).toBe(before + 4);
    } finally {
      await a.end();
      await b.end();
    }
  });
});
