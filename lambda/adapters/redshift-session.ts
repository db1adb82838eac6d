/**
 * One Redshift session over a `pg` pool (the wire protocol; docs/deploy.md, §11): the loader and the
 * applier's schema work need their statements on ONE connection (a transaction is several
 * statements). The connection is taken from the pool on first use and kept; one that fails below
 * SQL (no SQLSTATE: the socket, TLS, a timeout) is dropped, and the next statement takes a new one.
 */
import type pg from 'pg';
import type { RedshiftSession } from './redshift-loader.ts';

export function pooledSession(pool: pg.Pool): RedshiftSession {
  let client: pg.PoolClient | undefined;
  return {
    async query(sql) {
      const c = (client ??= await pool.connect());
      try {
        return await c.query(sql);
      } catch (err) {
        if (typeof (err as { code?: unknown }).code !== 'string') {
          client = undefined;
          c.release(err as Error);
        }
        throw err;
      }
    },
  };
}
