/**
 * `guardPoolClients` (lambda/adapters/pg-pool.ts): a connection the server ends while it is checked
 * out of the pool, between two queries of its holder, must not end the process (an uncaught
 * `error` event: what a CI run of test/e2e/warehouse-outage.test.ts hit when the warehouse stopped).
 * Real embedded PostgreSQL; the server side ends the connection with `pg_terminate_backend`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { guardPoolClients } from '../../lambda/adapters/pg-pool.ts';
import { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import { PgRebuildTarget } from '../../lambda/adapters/warehouse-rebuild-pg.ts';
import { warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';

let cluster: PostgresCluster;
let admin: pg.Client;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  await cluster.createDatabase('wh');
  admin = new pg.Client({ connectionString: cluster.url('wh') });
  await admin.connect();
}, 120_000);

afterAll(async () => {
  await admin?.end();
  await cluster?.stop();
});

const terminate = async (pid: number): Promise<void> => {
  await admin.query('SELECT pg_terminate_backend($1)', [pid]);
};

describe('guardPoolClients', () => {
  it('a checked-out connection ended by the server reports to onError, its next query rejects, and the pool goes on', async () => {
    const pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 1 });
    const seen: Error[] = [];
    guardPoolClients(pool, (e) => seen.push(e));
    try {
      const client = await pool.connect();
      const pid = (await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      // Between two queries of the holder: no query is active when the server's FATAL arrives.
      await terminate(pid);
      await expect.poll(() => seen.length, { timeout: 5_000 }).toBeGreaterThan(0);
      expect((seen[0] as { code?: string }).code).toBe('57P01'); // admin_shutdown: terminating connection due to administrator command
      await expect(client.query('SELECT 1')).rejects.toThrow();
      client.release(true);
      // The pool opens a new connection for the next holder.
      expect((await pool.query<{ n: number }>('SELECT 1 AS n')).rows[0]!.n).toBe(1);
    } finally {
      await pool.end();
    }
  });

  it('an idle connection ended by the server is reported once, and a pool without an error listener gets one', async () => {
    const pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 1 });
    const seen: Error[] = [];
    guardPoolClients(pool, (e) => seen.push(e));
    guardPoolClients(pool, (e) => seen.push(e)); // idempotent: no second listener
    expect(pool.listenerCount('error')).toBe(1);
    expect(pool.listenerCount('connect')).toBe(1);
    try {
      const pid = (await pool.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
      await terminate(pid);
      await expect.poll(() => pool.idleCount, { timeout: 5_000 }).toBe(0);
      expect(seen.length).toBeGreaterThan(0);
      expect((await pool.query<{ n: number }>('SELECT 1 AS n')).rows[0]!.n).toBe(1);
    } finally {
      await pool.end();
    }
  });

  it('without the guard a checked-out connection has no error listener (the hazard the guard removes)', async () => {
    const pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 1 });
    pool.on('error', () => undefined);
    try {
      const client = await pool.connect();
      expect(client.listenerCount('error')).toBe(0);
      client.release();
    } finally {
      await pool.end();
    }
  });

  it('the warehouse adapters guard the pool they are given', async () => {
    for (const make of [(p: pg.Pool) => new PgWarehouse(p), (p: pg.Pool) => new PgRebuildTarget(p, warehouseTable('s', 'public.t'))]) {
      const pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 1 });
      pool.on('error', () => undefined);
      make(pool);
      try {
        const client = await pool.connect();
        expect(client.listenerCount('error')).toBe(1);
        client.release();
      } finally {
        await pool.end();
      }
    }
  });
});
