/**
 * One Redshift session over a `pg` pool (the wire protocol; docs/deploy.md, §11): the loader and the
 * applier's schema work need their statements on ONE connection (a transaction is several
 * statements). The connection is taken from the pool on first use and kept; one that fails below
 * SQL (no SQLSTATE: the socket, TLS, a timeout), that the server ended (SQLSTATE class 08 or 57), or
 * that reports an error while idle, is dropped, and the next statement takes a new one.
 */
import type pg from 'pg';
import type { RedshiftSession } from './redshift-loader.ts';

/** A session that can give its connection back (tests, shutdown). */
export interface PooledSession extends RedshiftSession {
  release(): void;
}

/** No SQLSTATE (the socket, TLS, a timeout), or class 08 (connection exception) or 57 (the server ended the session). */
function connectionGone(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code)) return true;
  return code.startsWith('08') || code.startsWith('57');
}

export function pooledSession(pool: pg.Pool): PooledSession {
  let held: { client: pg.PoolClient; released: boolean } | undefined;
  const drop = (h: { client: pg.PoolClient; released: boolean }, err?: Error): void => {
    if (held === h) held = undefined;
    if (h.released) return;
    h.released = true;
    h.client.release(err);
  };
  const take = async (): Promise<{ client: pg.PoolClient; released: boolean }> => {
    if (held) return held;
    const h = { client: await pool.connect(), released: false };
    // An error while idle (the server closed it): this connection is done.
    h.client.on('error', (err) => drop(h, err));
    held = h;
    return h;
  };
  return {
    async query(sql) {
      const h = await take();
      try {
        return await h.client.query(sql);
      } catch (err) {
        if (connectionGone(err)) drop(h, err as Error);
        throw err;
      }
    },
    release() {
      if (held) drop(held);
    },
  };
}
