/** Test helper: a `pg.Pool` that can be made to fail right after a chosen statement, as if the process died there. */
import type pg from 'pg';

/**
 * A pool whose next `crashAfter(k)` makes the k-th statement sent through it throw after it ran
 * (`injected crash after a statement of <what>`); what follows (a ROLLBACK) passes. A COPY stream
 * (a submittable) passes as it is: only statements count. `fired()` says whether it threw, and
 * disarms it.
 */
export function crashingPool(inner: pg.Pool, what: string): { pool: pg.Pool; crashAfter(k: number): void; fired(): boolean } {
  let left = 0;
  let fired = false;
  const clients = new WeakMap<pg.PoolClient, pg.PoolClient>();
  const wrap = (c: pg.PoolClient): pg.PoolClient => {
    let w = clients.get(c);
    if (!w) {
      w = new Proxy(c, {
        get(target, prop, receiver) {
          if (prop !== 'query') return Reflect.get(target, prop, receiver) as unknown;
          const query = target.query as (...a: unknown[]) => unknown;
          return (...args: unknown[]) => {
            if (typeof (args[0] as { submit?: unknown } | null)?.submit === 'function') return query.apply(target, args);
            return counted(query.apply(target, args) as Promise<unknown>);
          };
          async function counted(p: Promise<unknown>): Promise<unknown> {
            const out = await p;
            if (left > 0 && --left === 0) {
              fired = true;
              throw new Error(`injected crash after a statement of ${what}`);
            }
            return out;
          }
        },
      });
      clients.set(c, w);
    }
    return w;
  };
  const pool = new Proxy(inner, {
    get(target, prop, receiver) {
      if (prop === 'connect') return async () => wrap(await target.connect());
      return Reflect.get(target, prop, receiver) as unknown;
    },
  });
  return {
    pool,
    crashAfter(k) {
      left = k;
      fired = false;
    },
    fired() {
      const f = fired;
      left = 0;
      return f;
    },
  };
}
