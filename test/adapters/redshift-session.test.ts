/**
 * One Redshift session over a pool (lambda/adapters/redshift-session.ts; docs/deploy.md, §11): a
 * transaction's statements share one connection; an SQL error keeps it; a connection that dies
 * below SQL is dropped and the next statement runs on a new one. Against embedded PostgreSQL.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pooledSession } from '../../lambda/adapters/redshift-session.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';

describe('pooledSession', () => {
  let cluster: PostgresCluster;
  let pool: pg.Pool;

  beforeAll(async () => {
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('rss');
    pool = new pg.Pool({ connectionString: cluster.url('rss'), max: 2 });
  }, 120_000);

  afterAll(async () => {
    await pool?.end();
    await cluster?.stop();
  });

  it('keeps one connection across statements and SQL errors, and replaces one that died', async () => {
    pool.on('error', () => undefined);
    const s = pooledSession(pool);
    const pid = async (): Promise<number> => Number((await s.query('SELECT pg_backend_pid() AS pid')).rows[0]!.pid);
    const first = await pid();
    await s.query('BEGIN');
    await s.query('CREATE TEMP TABLE t (x int)');
    await s.query('INSERT INTO t VALUES (1)');
    expect((await s.query('SELECT COUNT(*) AS n FROM t')).rows[0]!.n).toBe('1');
    await s.query('COMMIT');
    await expect(s.query('SELEKT 1')).rejects.toMatchObject({ code: '42601' });
    expect(await pid()).toBe(first);
    // The server ends the connection while it is idle (57P01): the session drops it on the error it reports, or on the
    // statement that meets it, whichever comes first; the next statement runs on a new connection.
    const other = await pool.connect();
    await other.query('SELECT pg_terminate_backend($1)', [first]);
    for (let i = 0; i < 500 && (await other.query('SELECT 1 FROM pg_stat_activity WHERE pid = $1', [first])).rowCount! > 0; i++)
      await new Promise((r) => setTimeout(r, 10));
    other.release();
    const second = (await pid().catch(() => null)) ?? (await pid());
    expect(second).not.toBe(first);
    expect(await pid()).toBe(second);
    // The server ends it during a statement: that statement fails, the next runs on a new connection.
    await expect(s.query('SELECT pg_terminate_backend(pg_backend_pid())')).rejects.toThrow();
    const third = await pid();
    expect(third).not.toBe(second);
    expect(await pid()).toBe(third);
    s.release();
    expect(pool.totalCount - pool.idleCount).toBe(0);
  }, 60_000);
});
