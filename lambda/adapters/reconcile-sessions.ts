/**
 * The sessions of a reconcile run (lambda/core/reconcile/reconcile-run.ts) over PostgreSQL and
 * OpenSearch: the source's catalog for keys the configuration does not declare, and each table's
 * two sides: the source (lambda/adapters/reconcile-pg.ts) and a warehouse sink (the same) or a
 * search sink (lambda/adapters/reconcile-search.ts), with a polled table's stable point
 * (docs/polling.md).
 */
import pg from 'pg';
import { pollPoint } from '../core/capture/poll-stable-point.ts';
import type { ReconcileSessions } from '../core/reconcile/reconcile-run.ts';
import type { ReconcileSide } from '../core/reconcile/reconcile.ts';
import { DEFAULT_INDEX_PREFIX } from '../core/search/search-plan.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { ConfigurationError } from '../core/shared/errors.ts';
import { pgPollStablePoint } from './poll-stable-point-pg.ts';
import { pgSourceSide, pgWarehouseSide, prepareReconcileSession } from './reconcile-pg.ts';
import { searchSinkSide } from './reconcile-search.ts';
import type { OpenSearchIndex } from './search-opensearch.ts';
import { PRIMARY_KEY_COLUMNS_SQL } from './source-facts-pg.ts';

export interface ReconcileSessionsOptions {
  source: string;
  sink: string;
  controlPlane: ControlPlane;
  heartbeatSchema?: string;
  /** The source session (opened once per execution environment). */
  sourceClient: () => Promise<pg.ClientBase>;
  /** A warehouse sink's session; absent for a search sink. */
  warehouseClient?: () => Promise<pg.ClientBase>;
  /** A search sink's index adapter and prefix (instead of `warehouseClient`). */
  search?: { index: OpenSearchIndex; prefix?: string };
}

/** Opens the source and sink sessions and gives the run its catalog and sides over them. */
export async function openReconcileSessions(d: ReconcileSessionsOptions): Promise<ReconcileSessions> {
  const src = await d.sourceClient();
  const wh = d.warehouseClient ? await d.warehouseClient() : null;
  if (!wh && !d.search) throw new ConfigurationError('the reconciler needs a warehouse sink or a search sink');
  return {
    async primaryKey(tableId) {
      const [schema, table] = tableId.split('.');
      const res = await src.query(PRIMARY_KEY_COLUMNS_SQL, [schema, table]);
      return res.rows.map((r) => String(r.name));
    },
    sides: async (t, config) => ({
      // A polled table's changes arrive through its poll cursor, not the log: re-checks wait for that (docs/polling.md).
      ...(await pollPoint(config, (c) =>
        pgPollStablePoint({ client: src, controlPlane: d.controlPlane, source: d.source, sink: d.sink, table: c.table, pollColumn: c.pollColumn! }),
      )),
      source: pgSourceSide(src, t.table, t.key, t.rules.mask) as ReconcileSide,
      sink: wh
        ? pgWarehouseSide(wh, d.source, t.table, t.key, { label: d.sink, ...(d.heartbeatSchema ? { heartbeatSchema: d.heartbeatSchema } : {}) })
        : searchSinkSide(d.search!.index, {
            prefix: d.search!.prefix ?? DEFAULT_INDEX_PREFIX,
            source: d.source,
            table: t.table,
            key: t.key,
            label: d.sink,
            ...(d.heartbeatSchema ? { heartbeatSchema: d.heartbeatSchema } : {}),
          }),
    }),
  };
}

/** The source session of the reconciler, opened on first use and prepared for reconcile reads (then kept). */
export function lazySourceSession(primary: pg.ClientConfig): () => Promise<pg.Client> {
  let srcClient: pg.Client | null = null;
  return async (): Promise<pg.Client> => {
    if (!srcClient) {
      const c = new pg.Client(primary);
      await c.connect();
      await prepareReconcileSession(c);
      srcClient = c;
    }
    return srcClient;
  };
}

/** A warehouse session from the pool, checked out on first use and prepared for reconcile reads (then kept). */
export function lazyWarehouseSession(pool: pg.Pool): () => Promise<pg.PoolClient> {
  let whClient: pg.PoolClient | null = null;
  return async (): Promise<pg.PoolClient> => {
    if (!whClient) {
      const c = await pool.connect();
      await prepareReconcileSession(c);
      whClient = c;
    }
    return whClient;
  };
}
