/**
 * Rebuild of one table of a warehouse sink from the log (docs/rebuild.md):
 *
 * 1. drop what an earlier rebuild left (shadow, retired objects): a crashed rebuild never touched
 *    the live table, so a rerun starts clean;
 * 2. check the history: the archive's chain and, from the table's beginning, that no shard's
 *    oldest objects expired (refused with `HISTORY_INCOMPLETE` otherwise);
 * 3. replay the table's events (the archive first, then the stream; `ReplayReader`) into shadow
 *    objects through the live apply code, `PgWarehouse.applyTable` with `target` = the shadow,
 *    in position order and in batches, throttled to a duty cycle so live apply keeps its lag;
 * 4. rehearsal: catch up, diff shadow against live twice (a key must differ at both, positions at
 *    or below the live position, so rows in flight are not reported), keep the diff, drop the
 *    shadow. Swap: in one transaction lock the live table against writers, catch the shadow up to
 *    the live position, rename, repoint the view, commit; then diff the retired table against
 *    the new one (both frozen), keep the diff, drop the retired objects, and raise the sink's
 *    high-water mark to the position the table was rebuilt to. Each diff compares mirrors, so the
 *    deltas of both sides are merged first (`PgWarehouse.merge`, which keeps what the view shows;
 *    docs/warehouse-apply.md): a change still in a delta is no difference;
 * 5. record the run (duration, counts, diff summary) in the control plane with its audit entry.
 */
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { PgWarehouse, type PgWarehouseOptions } from '../lambda/adapters/warehouse-pg.ts';
import { PgRebuildTarget, type DiffResult } from '../lambda/adapters/warehouse-rebuild-pg.ts';
import type { ControlPlane, RebuildRun, SchemaVersion } from '../lambda/core/control-plane.ts';
import { CdcError } from '../lambda/core/errors.ts';
import type { ChangeEvent } from '../lambda/core/event.ts';
import { POSITION_ZERO, type Position } from '../lambda/core/position.ts';
import { checkFromPosition, decideRebuildState, throttleSleepMs, type DiffRow, type RebuildRefusal } from '../lambda/core/rebuild.ts';
import { ReplayHoleError, type ReplayRange } from '../lambda/core/replay.ts';
import { warehouseTable, type WarehouseTable } from '../lambda/core/warehouse-sql.ts';
import { checkEventColumns } from '../lambda/core/warehouse-apply.ts';
import type { HistoryCheck, ReplayReader, ReplayStats } from './replay.ts';

/** The highest position there is: "everything the log holds now". */
const POSITION_MAX: Position = 'f'.repeat(24);
const SAMPLES = 20;

export interface RebuildRequest {
  source: string;
  table: string;
  sink: string;
  /** Replay from this position (inclusive). @default the beginning of the history */
  from?: Position;
  /** Build and diff, do not swap. */
  rehearse: boolean;
  /** Who asked (audit). */
  actor: string;
}

export interface RebuildDeps {
  control: ControlPlane;
  /** The sink's warehouse. */
  pool: pg.Pool;
  reader: ReplayReader;
  warehouse?: PgWarehouseOptions;
  /** Events per shadow apply. @default 1000 */
  batchSize?: number;
  /** Share of wall time the bulk replay may apply (the rest it sleeps). @default 0.5 */
  duty?: number;
  now?: () => Date;
  /** Crash injection for tests: called before each step with its name; a throw aborts the rebuild there. */
  step?: (name: string) => void | Promise<void>;
}

/** What a rebuild did. */
export interface RebuildReport {
  run: RebuildRun;
  stats: ReplayStats;
  /** Where the diff is kept (`schema.table`). */
  diffTable: string;
  diff: DiffRow[];
  /** Events skipped because they are not valid against the registry (they were dead letters live). */
  skipped: number;
  /** Time spent applying into the shadow (ms), and throttle sleep (ms). */
  applyMs: number;
  sleptMs: number;
}

/** A rebuild could not complete; the live table is untouched. */
export class RebuildFailedError extends CdcError {
  constructor(source: string, table: string, why: string, swapped = false) {
    super(
      'REBUILD_FAILED',
      swapped
        ? `the rebuild of ${source}/${table} swapped the rebuilt table in, then failed (its diff or the cleanup of the retired table is missing; a rerun cleans up): ${why}`
        : `the rebuild of ${source}/${table} did not complete (the live table is untouched): ${why}`,
    );
  }
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

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const maxPos = (a: Position | null, b: Position | null): Position | null => (a === null ? b : b === null ? a : a > b ? a : b);

export class Rebuilder {
  private readonly now: () => Date;

  constructor(private readonly deps: RebuildDeps) {
    this.now = deps.now ?? (() => new Date());
  }

  /**
   * Whether the rebuild may run: the table's state and the sink's hold, and whether the history
   * it needs is complete. Returns the refusal, or null and the archive's listing (reused by `run`).
   */
  async check(r: Pick<RebuildRequest, 'source' | 'table' | 'sink' | 'from'>): Promise<{ refusal: RebuildRefusal } | { refusal: null; history: HistoryCheck }> {
    if (r.from !== undefined) {
      const bad = checkFromPosition(r.from);
      if (bad) return { refusal: bad };
    }
    const t = await this.deps.control.getTable(r.source, r.table);
    if (!t) return { refusal: { code: 'HISTORY_INCOMPLETE', reason: `${r.source}/${r.table} is not registered`, hint: 'cdc status lists the registered tables' } };
    const progress = await this.deps.control.getSinkProgress(r.sink, r.source, r.table);
    if (!progress) return { refusal: { code: 'NO_SINK_PROGRESS', reason: `sink ${r.sink} has applied nothing of ${r.source}/${r.table}`, hint: 'name the sink that serves the table with --sink (cdc status lists them)' } };
    const state = decideRebuildState(t.state, progress.heldFrom, r.table);
    if (state) return { refusal: state };
    let history: HistoryCheck;
    try {
      history = await this.deps.reader.checkHistory(r.source, r.table);
    } catch (err) {
      if (err instanceof ReplayHoleError) return { refusal: { code: 'HISTORY_INCOMPLETE', reason: err.message, hint: `the history cannot be replayed: cdc resnapshot ${r.table} rebuilds the table from the source instead` } };
      throw err;
    }
    if ((r.from ?? POSITION_ZERO) === POSITION_ZERO && history.gaps.length > 0) {
      return { refusal: { code: 'HISTORY_INCOMPLETE', reason: history.gaps.join('; '), hint: `rebuild from a later position with --from (one the archive still holds), or cdc resnapshot ${r.table}` } };
    }
    return { refusal: null, history };
  }

  /** Runs a rebuild that `check` allowed. Throws `RebuildFailedError` (live untouched) or `ReplayHoleError`. */
  async run(r: RebuildRequest, history: HistoryCheck): Promise<RebuildReport> {
    const { control: cp } = this.deps;
    const started = this.now();
    const id = `${started.toISOString().replace(/[-:.]/g, '')}-${randomUUID().slice(0, 8)}`;
    const live = warehouseTable(r.source, r.table);
    const target = new PgRebuildTarget(this.deps.pool, live);
    const warehouse = warehouseFor(this.deps.pool, this.deps.warehouse);
    warehouse.forgetShapes(); // the shadow's objects were dropped and are made again
    const from = r.from ?? POSITION_ZERO;
    const range: ReplayRange = { source: r.source, table: r.table, from, to: POSITION_MAX };
    const step = async (name: string): Promise<void> => this.deps.step?.(name);
    const schemas = new Map<number, SchemaVersion>();
    const rec = await cp.getTable(r.source, r.table);
    if (!rec) throw new RebuildFailedError(r.source, r.table, 'the table is not registered');
    const current = await cp.getSchemaVersion(r.source, r.table, rec.currentVersion);
    if (!current) throw new RebuildFailedError(r.source, r.table, `schema version ${rec.currentVersion} is not registered`);
    /** Merges the deltas of table sets into their mirrors (the diff compares mirrors). */
    const mergeDeltas = async (...sets: WarehouseTable[]): Promise<void> => {
      for (const t of sets) await warehouse.merge({ source: r.source, table: r.table, deleteMode: rec.deleteMode, key: current.key, target: t });
    };
    const applied = new Set<string>();
    let skipped = 0;
    let applyMs = 0;
    let sleptMs = 0;
    let events = 0;
    let shadowTo: Position | null = null;
    const batchSize = this.deps.batchSize ?? 1000;
    const duty = this.deps.duty ?? 0.5;

    /** Applies events not applied yet into the shadow, through the live apply code. */
    const applyToShadow = async (list: readonly ChangeEvent[], throttle: boolean): Promise<void> => {
      const fresh: ChangeEvent[] = [];
      for (const e of list) {
        const k = `${e.position}|${JSON.stringify(e.key)}`;
        if (applied.has(k)) continue;
        let schema = schemas.get(e.schemaVersion);
        if (!schema) {
          const v = await cp.getSchemaVersion(r.source, r.table, e.schemaVersion);
          if (!v) {
            skipped++;
            continue;
          }
          schemas.set(v.version, (schema = v));
        }
        try {
          checkEventColumns(e, schema);
        } catch (err) {
          if (!(err instanceof CdcError)) throw err;
          skipped++;
          continue;
        }
        applied.add(k);
        fresh.push(e);
      }
      for (let i = 0; i < fresh.length; i += batchSize) {
        const chunk = fresh.slice(i, i + batchSize);
        const versions = new Map([...new Set(chunk.map((e) => e.schemaVersion))].map((v) => [v, schemas.get(v)!]));
        const t0 = Date.now();
        await warehouse.applyTable({ source: r.source, table: r.table, deleteMode: rec.deleteMode, schemas: versions, events: chunk, appliedAt: this.now(), target: target.shadow });
        const busy = Date.now() - t0;
        applyMs += busy;
        events += chunk.length;
        for (const e of chunk) shadowTo = maxPos(shadowTo, e.position);
        if (throttle) {
          const rest = throttleSleepMs(busy, duty);
          if (rest > 0) {
            sleptMs += rest;
            await sleep(rest);
          }
        }
      }
    };

    let stats: ReplayStats | undefined;
    let diff: DiffResult = { rows: [], missing: 0, extra: 0, changed: 0 };
    let caughtUpTo: Position | null = null;
    let diffTable = '';
    let swapped = false;
    try {
      await step('drop-leftovers');
      await target.dropLeftovers();
      await step('replay');
      const read = await this.deps.reader.read(range, history);
      stats = read.stats;
      let resume = read.resume;
      await step('apply');
      await applyToShadow(read.events, true);
      await step('catch-up');
      const more = await this.deps.reader.readStream(range, resume);
      resume = more.resume;
      await applyToShadow(more.events, true);
      if (r.rehearse) {
        await step('diff');
        await mergeDeltas(target.live, target.shadow);
        const p1 = await target.livePosition();
        const first = await target.diff(p1 ?? POSITION_ZERO);
        const again = await this.deps.reader.readStream(range, resume);
        await applyToShadow(again.events, false);
        await mergeDeltas(target.live, target.shadow);
        const p2 = await target.livePosition();
        const second = await target.diff(p2 ?? POSITION_ZERO);
        // A key that differs at both points is diverged; one that differed once was in flight.
        const once = new Set(first.rows.map((d) => `${d.kind}|${JSON.stringify(d.key)}`));
        const rows = second.rows.filter((d) => once.has(`${d.kind}|${JSON.stringify(d.key)}`));
        diff = { rows, missing: rows.filter((d) => d.kind === 'missing').length, extra: rows.filter((d) => d.kind === 'extra').length, changed: rows.filter((d) => d.kind === 'changed').length };
        caughtUpTo = maxPos(shadowTo, p2);
        diffTable = await target.keepDiff(id, diff);
        await step('drop-shadow');
        await target.dropLeftovers();
      } else {
        await step('swap');
        const p = await target.swap(async () => {
          const last = await this.deps.reader.readStream(range, resume);
          await applyToShadow(last.events, false);
          await step('swap-renames');
        });
        swapped = true;
        caughtUpTo = maxPos(shadowTo, p);
        warehouse.forgetShapes(); // the live names are the rebuilt objects now
        await step('diff');
        // Both sides are frozen now: the retired table as it was at the swap, the new one at the same position.
        await mergeDeltas(target.retired, target.live);
        diff = await target.diff(p ?? POSITION_ZERO, undefined, target.retired, target.live);
        diffTable = await target.keepDiff(id, diff);
        await target.dropRetired();
        if (caughtUpTo !== null) await cp.advanceSinkProgress(r.sink, r.source, r.table, caughtUpTo);
      }
    } catch (err) {
      const finished = this.now();
      const failed: RebuildRun = this.runRecord(id, r, started, finished, from, caughtUpTo, events, stats, diff, err instanceof Error ? err.message : String(err));
      await cp
        .recordRebuild(failed, { at: finished.toISOString(), actor: r.actor, action: 'rebuild', source: r.source, table: r.table, outcome: 'done', detail: { sink: r.sink, mode: failed.mode, result: 'failed', error: failed.error, id } })
        .catch(() => undefined);
      if (err instanceof CdcError) throw err;
      throw new RebuildFailedError(r.source, r.table, err instanceof Error ? err.message : String(err), swapped);
    }
    const finished = this.now();
    const run = this.runRecord(id, r, started, finished, from, caughtUpTo, events, stats, diff, null);
    await cp.recordRebuild(run, {
      at: finished.toISOString(),
      actor: r.actor,
      action: 'rebuild',
      source: r.source,
      table: r.table,
      outcome: 'done',
      detail: { sink: r.sink, mode: run.mode, id, durationMs: run.durationMs, events: run.events, diff: { missing: diff.missing, extra: diff.extra, changed: diff.changed }, diffTable, caughtUpTo },
    });
    return { run, stats: stats!, diffTable, diff: diff.rows, skipped, applyMs, sleptMs };
  }

  private runRecord(id: string, r: RebuildRequest, started: Date, finished: Date, from: Position, caughtUpTo: Position | null, events: number, stats: ReplayStats | undefined, diff: DiffResult, error: string | null): RebuildRun {
    return {
      id,
      sink: r.sink,
      source: r.source,
      table: r.table,
      mode: r.rehearse ? 'rehearsal' : 'swap',
      outcome: error === null ? 'done' : 'failed',
      startedAt: started.toISOString(),
      finishedAt: finished.toISOString(),
      durationMs: finished.getTime() - started.getTime(),
      from,
      caughtUpTo,
      events,
      archiveRecords: stats?.archiveRecords ?? 0,
      streamRecords: stats?.streamRecords ?? 0,
      diff: { missing: diff.missing, extra: diff.extra, changed: diff.changed, samples: diff.rows.slice(0, SAMPLES).map((d) => `${d.kind} ${JSON.stringify(d.key)}`) },
      error,
    };
  }
}
