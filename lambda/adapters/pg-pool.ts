/**
 * A `pg.Pool` whose checked-out connections cannot crash the process.
 *
 * node-postgres removes the pool's own error listener from a connection while it is checked out.
 * A connection the server ends between two queries of the holder (the warehouse is restarted, a
 * failover, `pg_terminate_backend`) then emits `error` with no listener, and Node ends the
 * process with an uncaught exception: the holder's next query would have failed and been retried,
 * but never runs. `guardPoolClients` gives every connection of the pool a listener of its own for
 * its whole life, so the error is reported to `onError` and the holder's next query rejects
 * ("not queryable"), which the adapters treat as a failed attempt and release the connection
 * destroyed (docs/local.md, "Outages delay, they never skip"). A pool with no `error` listener of
 * its own gets one too (an idle connection's error is re-emitted on the pool).
 *
 * Idempotent per pool; call it before the pool's first connection (connections opened earlier
 * are not covered).
 */
import type pg from 'pg';

const guarded = new WeakSet<pg.Pool>();

export function guardPoolClients(pool: pg.Pool, onError: (err: Error) => void = () => undefined): pg.Pool {
  if (guarded.has(pool)) return pool;
  guarded.add(pool);
  if (pool.listenerCount('error') === 0) pool.on('error', onError);
  pool.on('connect', (client) => {
    client.on('error', onError);
  });
  return pool;
}
