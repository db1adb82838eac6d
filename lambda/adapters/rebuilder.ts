/**
 * Rebuild of one table of a warehouse sink from the log (docs/rebuild.md):
 *
 * 1. drop what an earlier rebuild left (shadow, retired objects): a crashed rebuild never touched
 *    the live table, so a rerun starts clean;
 * 2. check the history: the archive's chain and, from the table's beginning, that no shard's
 *    oldest objects expired (refused with `HISTORY_INCOMPLETE` otherwise);
 * 3. replay the table's events (the archive first, then the stream; `ReplayReader`) into shadow
 *    objects through the live apply code, `PgWarehouse.applyTable` with `target` = the shadow,
 *    in position order and in batches, throttled to a duty cycle so live apply keeps its lag; the
 *    bulk with the apply's fresh-shadow option (its appends land in the shadow's changelog), then
 *    the shadow's base is computed once (`PgWarehouse.merge` with `freshBase`, step `merge-shadow`);
 * 4. rehearsal: catch up, diff shadow against live twice (a key must differ at both, positions at
 *    or below the live position, so rows in flight are not reported), keep the diff, drop the
 *    shadow. Swap: in one transaction lock the live table against writers, catch the shadow up to
 *    the live position, rename, repoint the view, commit; then diff the retired table against
 *    the new one (both frozen), keep the diff, drop the retired objects, and raise the sink's
 *    high-water mark to the position the table was rebuilt to. Each diff compares mirrors, so the
 *    deltas of both sides are merged first (`PgWarehouse.merge`, which keeps what the view shows;
 *    docs/warehouse-apply.md): a change still in a delta is no difference;
 * 5. record the run (duration, counts, diff summary) in the control plane with its audit entry.
 *
 * The steps are the workflow of lambda/core/rebuild/ (`RebuildWorkflow`, `rebuildSlice`); this
 * module gives it its ports over PostgreSQL: the replay reader, `PgWarehouse` and `PgRebuildTarget`.
 */
import type pg from 'pg';
import { guardPoolClients } from './pg-pool.ts';
import { PgWarehouse, type PgWarehouseOptions } from './warehouse-pg.ts';
import { PgRebuildTarget } from './warehouse-rebuild-pg.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { RebuildWorkflow } from '../core/rebuild/rebuild-workflow.ts';
import type { ReplayReader } from './replay-reader.ts';

export type { RebuildReport, RebuildRequest } from '../core/rebuild/rebuild-ports.ts';
export { RebuildFailedError } from '../core/rebuild/rebuild-slice.ts';
export { RebuildRefusedError } from '../core/rebuild/rebuild-workflow.ts';

export interface RebuildDeps {
  controlPlane: ControlPlane;
  /** The sink's warehouse. */
  pool: pg.Pool;
  reader: ReplayReader;
  warehouse?: PgWarehouseOptions;
  /** Events per shadow apply. @default 1000 */
  batchSize?: number;
  /** Share of wall time the bulk replay may apply (the rest it sleeps). @default 0.5 */
  duty?: number;
  now?: () => Date;
  /** How long a claimed rebuild slot may go without a report before it may be taken over. @default REBUILD_STALE_AFTER_MS (30 minutes) */
  staleAfterMs?: number;
  /** Crash injection for tests: called before each step with its name; a throw aborts the rebuild there. */
  step?: (name: string) => void | Promise<void>;
}

/**
 * One `PgWarehouse` per pool: it remembers the session stage tables of the pool's connections
 * (lambda/adapters/warehouse-pg.ts), so two instances on one pool would make the same ones twice.
 */
const warehouses = new WeakMap<pg.Pool, PgWarehouse>();
function warehouseFor(pool: pg.Pool, options: PgWarehouseOptions | undefined): PgWarehouse {
  let w = warehouses.get(pool);
  if (!w) warehouses.set(pool, (w = new PgWarehouse(pool, options)));
  return w;
}

/** The rebuild over a sink's warehouse pool (see the module comment). */
export class Rebuilder extends RebuildWorkflow {
  constructor(deps: RebuildDeps) {
    guardPoolClients(deps.pool);
    super({
      controlPlane: deps.controlPlane,
      replay: deps.reader,
      warehouse: () => warehouseFor(deps.pool, deps.warehouse),
      target: (live) => new PgRebuildTarget(deps.pool, live),
      ...(deps.batchSize !== undefined ? { batchSize: deps.batchSize } : {}),
      ...(deps.duty !== undefined ? { duty: deps.duty } : {}),
      now: deps.now ?? (() => new Date()),
      ...(deps.staleAfterMs !== undefined ? { staleAfterMs: deps.staleAfterMs } : {}),
      ...(deps.step ? { step: deps.step } : {}),
    });
  }
}
