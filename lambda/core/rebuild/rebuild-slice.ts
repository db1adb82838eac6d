/**
 * One slice of a rebuild (docs/rebuild.md, "On AWS: where it runs"), over the ports of
 * lambda/core/rebuild/rebuild-ports.ts: goes on from the checkpoint in the control plane, replays
 * the table's history into the shadow through the live apply code, and catches up, swaps (or
 * rehearses), diffs and records the run once the history is in. The steps are those of
 * docs/rebuild.md; `RebuildWorkflow` (rebuild-workflow.ts) runs slices to the end.
 */
import { CdcError } from '../shared/errors.ts';
import type { ControlPlane, RebuildCheckpoint, RebuildRun, SchemaVersion } from '../shared/control-plane.ts';
import type { ChangeEvent, Row } from '../shared/event.ts';
import { POSITION_ZERO, type Position } from '../shared/position.ts';
import { checkEventColumns } from '../warehouse/warehouse-apply.ts';
import { warehouseTable, type WarehouseTable } from '../warehouse/warehouse-sql.ts';
import { throttleSleepMs, type DiffResult } from './rebuild.ts';
import type { RebuildPorts, RebuildReport, RebuildRequest } from './rebuild-ports.ts';
import { emptyReplayStats, type HistoryCheck, type ReplayRange, type ReplayStats } from './replay.ts';
import { ReplayOrderError } from './replay-order.ts';

/** The highest position there is: "everything the log holds now". */
const POSITION_MAX: Position = 'f'.repeat(24);
const SAMPLES = 20;

/** A rebuild could not complete; the live table is untouched. */
export class RebuildFailedError extends CdcError {
  constructor(
    sourceId: string,
    table: string,
    why: string,
    readonly swapped = false,
  ) {
    super(
      'REBUILD_FAILED',
      swapped
        ? `the rebuild of ${sourceId}/${table} swapped the rebuilt table in, then failed (its diff or the cleanup of the retired table is missing; a rerun cleans up): ${why}`
        : `the rebuild of ${sourceId}/${table} did not complete (the live table is untouched): ${why}`,
    );
  }
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const maxPos = (a: Position | null, b: Position | null): Position | null => (a === null ? b : b === null ? a : a > b ? a : b);

/**
 * One slice of the rebuild `id` (docs/rebuild.md, "On AWS: where it runs"): goes on from the checkpoint
 * in the control plane, applies into the shadow and checkpoints after every batch, and returns
 * `done: false` when `timeLeftMs` falls below the margin (the caller invokes it again); else
 * catches up, swaps (or rehearses), diffs, records the run and frees the slot. An error is
 * thrown as is and leaves the checkpoint: a retry of the slice goes on from it (what the shadow
 * holds beyond it is applied again, which changes nothing: invariant 2).
 */
export async function rebuildSlice(
  ports: RebuildPorts,
  r: RebuildRequest,
  id: string,
  opts: { history?: HistoryCheck; timeLeftMs?: () => number; marginMs?: number } = {},
): Promise<{ done: true; report: RebuildReport } | { done: false; checkpoint: RebuildCheckpoint }> {
  const { controlPlane: cp } = ports;
  const claim = await cp.getActiveRebuild(r.sink);
  if (!claim || claim.id !== id || claim.state !== 'running') {
    throw new RebuildFailedError(
      r.source,
      r.table,
      `rebuild ${id} no longer holds the rebuild slot of sink ${r.sink} (${claim ? `it is ${claim.state === 'finished' ? 'finished' : `held by ${claim.id}`}` : 'there is none'})`,
    );
  }
  const started = new Date(claim.startedAt);
  const live = warehouseTable(r.source, r.table);
  const target = ports.target(live);
  const warehouse = ports.warehouse();
  const from = r.from ?? POSITION_ZERO;
  const range: ReplayRange = { source: r.source, table: r.table, from, to: POSITION_MAX };
  const step = async (name: string): Promise<void> => ports.step?.(name);
  const timeLeft = opts.timeLeftMs ?? (() => Number.POSITIVE_INFINITY);
  const margin = opts.marginMs ?? 0;
  const schemas = new Map<number, SchemaVersion>();
  const rec = await cp.getTable(r.source, r.table);
  if (!rec) throw new RebuildFailedError(r.source, r.table, 'the table is not registered');
  const current = await cp.getSchemaVersion(r.source, r.table, rec.currentVersion);
  if (!current) throw new RebuildFailedError(r.source, r.table, `schema version ${rec.currentVersion} is not registered`);
  /** Merges the deltas of table sets into their mirrors (the diff compares mirrors). */
  const mergeDeltas = async (...sets: WarehouseTable[]): Promise<void> => {
    for (const t of sets) await warehouse.merge({ source: r.source, table: r.table, deleteMode: rec.deleteMode, key: current.key, target: t });
  };
  /**
   * Merges the shadow's delta (the rebuilt table's, after the swap) into its base. The base is
   * usually still empty (every event so far was appended): the merge checks that under its lock
   * and then takes the merge into an empty base (`PgWarehouse.merge`'s `freshBase`, which leaves
   * what the general merge would); when a full apply (a truncate, a primary-key handover) wrote
   * the base already, it is the general merge.
   */
  const mergeRebuilt = async (t: WarehouseTable): Promise<void> => {
    await warehouse.merge({ source: r.source, table: r.table, deleteMode: rec.deleteMode, key: current.key, target: t }, { freshBase: true });
  };
  const c: RebuildCheckpoint = {
    ...(claim.checkpoint ?? { phase: 'replay', appliedThrough: null, events: 0, applyMs: 0, sleptMs: 0, skipped: 0, slices: 0 }),
  };
  c.slices++;
  const first = claim.checkpoint === null;
  /**
   * What this slice handed to the shadow, so an event read again (the catch-up's stream reads may
   * repeat one) is not applied twice: the events' positions and keys (not the events: an applied
   * event's rows are garbage once its batch is in), the highest position among them, and their
   * ids, made only when an event at or below that position comes (an event above it cannot be one
   * of them; the bulk, read in position order and deduplicated, makes none).
   */
  const applied = { positions: [] as Position[], keys: [] as Row[], highest: null as Position | null, ids: null as Set<string> | null };
  const eventKey = (position: Position, key: Row): string => `${position}|${JSON.stringify(key)}`;
  const appliedAlready = (e: ChangeEvent): boolean => {
    if (applied.highest === null || e.position > applied.highest) return false;
    if (applied.ids === null) {
      applied.ids = new Set();
      for (const [i, p] of applied.positions.entries()) applied.ids.add(eventKey(p, applied.keys[i]!));
    }
    return applied.ids.has(eventKey(e.position, e.key));
  };
  const batchSize = ports.batchSize ?? 1000;
  const duty = ports.duty ?? 0.5;
  const save = async (): Promise<void> => {
    if (!(await cp.checkpointRebuild(r.sink, id, c, ports.now().toISOString())))
      throw new RebuildFailedError(r.source, r.table, `rebuild ${id} lost the rebuild slot of sink ${r.sink} (another rebuild took it over as stale)`);
  };

  /**
   * Applies events not applied yet into the shadow through the live apply code; false when the
   * slice should stop (time). `freshShadow`: the bulk of the history, before the shadow's merge — the
   * apply's fresh-shadow option (`TableBatch.freshShadow`): while the shadow is unfolded, appends
   * land in its changelog and the merge computes its base once (docs/rebuild.md, step 4).
   */
  const applyToShadow = async (
    input: readonly ChangeEvent[] | AsyncIterable<readonly ChangeEvent[]>,
    throttle: boolean,
    mayYield: boolean,
    freshShadow = false,
  ): Promise<boolean> => {
    // Admitted events not yet in a batch.
    const fresh: ChangeEvent[] = [];
    const admit = async (list: readonly ChangeEvent[]): Promise<void> => {
      for (const e of list) {
        // Below the checkpoint: in the shadow already. At it: applied again, harmlessly (invariant 2).
        if (c.appliedThrough !== null && e.position < c.appliedThrough) continue;
        if (appliedAlready(e)) continue;
        let schema = schemas.get(e.schemaVersion);
        if (!schema) {
          const v = await cp.getSchemaVersion(r.source, r.table, e.schemaVersion);
          if (!v) {
            c.skipped++;
            continue;
          }
          schemas.set(v.version, (schema = v));
        }
        try {
          checkEventColumns(e, schema);
        } catch (err) {
          if (!(err instanceof CdcError)) throw err;
          c.skipped++;
          continue;
        }
        fresh.push(e);
        applied.positions.push(e.position);
        applied.keys.push(e.key);
        applied.ids?.add(eventKey(e.position, e.key));
        if (applied.highest === null || e.position > applied.highest) applied.highest = e.position;
      }
    };
    // Unthrottled (duty 1), up to two batches are in flight: the next is started while the one
    // before it finishes (its Node work, the plan and the COPY text, overlaps that batch's COPY in
    // the warehouse), and the streamed replay parses the next archive objects meanwhile, waiting
    // for the older batch only when a third is ready. The applies are the live code's on
    // their own connections, as concurrent appliers of one table are live (docs/warehouse-apply.md);
    // they finish, and are checkpointed, in order. A batch that commits before the one ahead of it
    // fails is applied again by the retry (invariant 2).
    // A throttled rebuild applies one batch at a time: its duty is the share of wall time one apply runs.
    const overlap = duty >= 1;
    const flight: Array<{ chunk: ChangeEvent[]; done: Promise<void>; t0: number }> = [];
    let lastEnd = 0;
    let launched = 0;
    const start = (chunk: ChangeEvent[]): { chunk: ChangeEvent[]; done: Promise<void>; t0: number } => {
      const versions = new Map([...new Set(chunk.map((e) => e.schemaVersion))].map((v) => [v, schemas.get(v)!]));
      const t0 = Date.now();
      const done = warehouse
        .applyTable({
          source: r.source,
          table: r.table,
          deleteMode: rec.deleteMode,
          schemas: versions,
          events: chunk,
          appliedAt: ports.now(),
          target: target.shadow,
          freshShadow,
        })
        .then(() => undefined);
      done.catch(() => undefined); // awaited in order by finish(); a failure meanwhile must not go unhandled
      return { chunk, done, t0 };
    };
    /** Waits for a batch (and so for every one before it), counts it and checkpoints; returns its apply time. */
    const finish = async (b: { chunk: ChangeEvent[]; done: Promise<void>; t0: number }): Promise<number> => {
      await b.done;
      const end = Date.now();
      const busy = end - Math.max(b.t0, lastEnd);
      lastEnd = end;
      c.applyMs += busy;
      c.events += b.chunk.length;
      for (const e of b.chunk) c.appliedThrough = maxPos(c.appliedThrough, e.position);
      await save();
      // Between two batches of the bulk (the shadow unfolded, a batch after it perhaps in flight).
      if (freshShadow) await step('apply-batch');
      return busy;
    };
    /** Starts the next batch; false when the slice should stop (time). `more`: events may follow it. */
    const launch = async (more: boolean): Promise<boolean> => {
      const first = launched++ === 0;
      // The first batch alone: it makes the shadow's tables (DDL).
      if (overlap && !first) {
        if (flight.length >= 2) await finish(flight.shift()!);
        // What is in a batch is not held here any more (a streamed replay's events are then held by their batch only).
        flight.push(start(fresh.splice(0, batchSize)));
      } else {
        const busy = await finish(start(fresh.splice(0, batchSize)));
        if (throttle) {
          const rest = throttleSleepMs(busy, duty);
          if (rest > 0) {
            c.sleptMs += rest;
            await sleep(rest);
          }
        }
      }
      if (mayYield && more && timeLeft() < margin) {
        while (flight.length > 0) await finish(flight.shift()!);
        return false;
      }
      return true;
    };
    const streaming = !Array.isArray(input);
    try {
      for await (const chunk of streaming ? (input as AsyncIterable<readonly ChangeEvent[]>) : [input as readonly ChangeEvent[]]) {
        await admit(chunk);
        while (fresh.length >= batchSize) if (!(await launch(streaming || batchSize < fresh.length))) return false;
      }
      while (fresh.length > 0) if (!(await launch(batchSize < fresh.length))) return false;
      while (flight.length > 0) await finish(flight.shift()!);
    } catch (err) {
      // The replay or a batch failed: the batches in flight settle before the error goes on (a fallback drops the shadow next).
      for (const b of flight) await b.done.catch(() => undefined);
      throw err;
    }
    return true;
  };

  /**
   * The bulk of the history into the shadow: streamed (the replay's parse overlaps the applies)
   * when the replay can, else read whole first. A streamed order that cannot hold
   * (`ReplayOrderError`) starts the shadow again from nothing with the sorted replay: what was
   * applied and checkpointed so far may lack an earlier event. The checkpoint remembers it, so the
   * rebuild's later slices replay sorted too. Null when the slice should stop (time).
   */
  const applyBulk = async (): Promise<{ stats: ReplayStats; resume: Map<string, string | null> } | null> => {
    const stream = c.sorted ? undefined : ports.replay.stream?.(range, opts.history);
    if (stream) {
      const got: { result: { stats: ReplayStats; resume: Map<string, string | null> } | null } = { result: null };
      try {
        if (
          !(await applyToShadow(
            streamed(stream, got, () => step('apply')),
            true,
            true,
            true,
          ))
        )
          return null;
        return got.result!;
      } catch (err) {
        if (!(err instanceof ReplayOrderError)) throw err;
        warehouse.forgetShapes();
        await target.dropLeftovers();
        Object.assign(c, { appliedThrough: null, events: 0, skipped: 0, sorted: true });
        Object.assign(applied, { positions: [], keys: [], highest: null, ids: null });
        await save();
      }
    }
    const read = await ports.replay.read(range, opts.history);
    await step('apply');
    return (await applyToShadow(read.events, true, true, true)) ? read : null;
  };

  let stats: ReplayStats | undefined;
  let diff: DiffResult = { rows: [], missing: 0, extra: 0, changed: 0 };
  let caughtUpTo: Position | null = null;
  let diffTable = '';
  let swapped = false;
  let keptAlready = false;
  try {
    if (first) {
      warehouse.forgetShapes(); // the shadow's objects are dropped and made again
      await step('drop-leftovers');
      await target.dropLeftovers();
    }
    if (c.phase === 'swapping' && !(await target.shadowExists())) {
      // The swap committed in an earlier slice that stopped before it finished: finish from the retired table.
      swapped = true;
      const p = await target.retiredPosition();
      caughtUpTo = maxPos(c.appliedThrough, p);
      await step('diff');
      // No retired table: the earlier slice kept the diff and dropped it; only the record is missing.
      if (p !== null) {
        await mergeDeltas(target.retired);
        await mergeRebuilt(target.live);
        diff = await target.diff(p, undefined, target.retired, target.live);
      } else keptAlready = true;
    } else {
      if (!first && c.events > 0 && !(await target.shadowExists()))
        throw new RebuildFailedError(
          r.source,
          r.table,
          `the shadow ${live.schema}.${target.shadow.mirror} of rebuild ${id} is gone (dropped by someone else?): start the rebuild again`,
        );
      await step('replay');
      // The bulk with the fresh-shadow option: it leaves what the live path (append, then the merge
      // below) leaves (test/adapters/fresh-shadow.test.ts).
      const read = await applyBulk();
      if (read === null) return { done: false, checkpoint: c };
      stats = read.stats;
      let resume = read.resume;
      if (timeLeft() < margin) return { done: false, checkpoint: c };
      // The bulk of the history into the shadow's base now, before the swap: the live table's
      // appliers never wait for it (after the swap its lock would hold them), and the swap
      // hands readers a merged table.
      await step('merge-shadow');
      await mergeRebuilt(target.shadow);
      await step('catch-up');
      const more = await ports.replay.readStream(range, resume);
      resume = more.resume;
      await applyToShadow(more.events, true, false);
      if (r.rehearse) {
        await step('diff');
        await mergeDeltas(target.live);
        await mergeRebuilt(target.shadow);
        const p1 = await target.livePosition();
        const firstDiff = await target.diff(p1 ?? POSITION_ZERO);
        const again = await ports.replay.readStream(range, resume);
        await applyToShadow(again.events, false, false);
        await mergeDeltas(target.live);
        await mergeRebuilt(target.shadow);
        const p2 = await target.livePosition();
        const second = await target.diff(p2 ?? POSITION_ZERO);
        // A key that differs at both points is diverged; one that differed once was in flight.
        const once = new Set(firstDiff.rows.map((d) => `${d.kind}|${JSON.stringify(d.key)}`));
        const rows = second.rows.filter((d) => once.has(`${d.kind}|${JSON.stringify(d.key)}`));
        diff = {
          rows,
          missing: rows.filter((d) => d.kind === 'missing').length,
          extra: rows.filter((d) => d.kind === 'extra').length,
          changed: rows.filter((d) => d.kind === 'changed').length,
        };
        caughtUpTo = maxPos(c.appliedThrough, p2);
        diffTable = await target.keepDiff(id, diff);
        await step('drop-shadow');
        await target.dropLeftovers();
      } else {
        c.phase = 'swapping';
        await save();
        await step('swap');
        const p = await target.swap(async () => {
          const last = await ports.replay.readStream(range, resume);
          await applyToShadow(last.events, false, false);
          await step('swap-renames');
        });
        swapped = true;
        caughtUpTo = maxPos(c.appliedThrough, p);
        warehouse.forgetShapes(); // the live names are the rebuilt objects now
        await step('diff');
        // Both sides are frozen now: the retired table as it was at the swap, the new one at the same position.
        await mergeDeltas(target.retired);
        await mergeRebuilt(target.live);
        diff = await target.diff(p ?? POSITION_ZERO, undefined, target.retired, target.live);
      }
    }
    if (!r.rehearse) {
      if (!keptAlready) diffTable = await target.keepDiff(id, diff);
      await target.dropRetired();
      if (caughtUpTo !== null) await cp.advanceSinkProgress(r.sink, r.source, r.table, caughtUpTo);
    }
  } catch (err) {
    if (swapped && !(err instanceof RebuildFailedError))
      throw new RebuildFailedError(r.source, r.table, err instanceof Error ? err.message : String(err), true);
    throw err;
  }
  const finished = ports.now();
  const run = runRecord(id, r, started, finished, from, caughtUpTo, c.events, stats, diff, null);
  await recordRun(cp, r, run, {
    id,
    durationMs: run.durationMs,
    events: run.events,
    slices: c.slices,
    diff: { missing: diff.missing, extra: diff.extra, changed: diff.changed },
    diffTable,
    caughtUpTo,
  });
  await cp.releaseRebuild(r.sink, id, finished.toISOString());
  return {
    done: true,
    report: { run, stats: stats ?? emptyReplayStats(), diffTable, diff: diff.rows, skipped: c.skipped, applyMs: c.applyMs, sleptMs: c.sleptMs },
  };
}

/** Stores a finished run with its audit entry (docs/rebuild.md, "What it does"): `detail` follows the sink and the mode. */
export function recordRun(cp: Pick<ControlPlane, 'recordRebuild'>, r: RebuildRequest, run: RebuildRun, detail: Record<string, unknown>): Promise<void> {
  return cp.recordRebuild(run, {
    at: run.finishedAt,
    actor: r.actor,
    action: 'rebuild',
    source: r.source,
    table: r.table,
    outcome: 'done',
    detail: { sink: r.sink, mode: run.mode, ...detail },
  });
}

export function runRecord(
  id: string,
  r: RebuildRequest,
  started: Date,
  finished: Date,
  from: Position,
  caughtUpTo: Position | null,
  events: number,
  stats: ReplayStats | undefined,
  diff: DiffResult,
  error: string | null,
): RebuildRun {
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
    diff: {
      missing: diff.missing,
      extra: diff.extra,
      changed: diff.changed,
      samples: diff.rows.slice(0, SAMPLES).map((d) => `${d.kind} ${JSON.stringify(d.key)}`),
    },
    error,
  };
}

/**
 * A streamed replay's chunks, with `first` called before the first is handed on (or at the end
 * when there is none) and the replay's return value kept in `got`; the replay is closed when its
 * reader stops early.
 */
async function* streamed<R>(gen: AsyncGenerator<ChangeEvent[], R>, got: { result: R | null }, first: () => Promise<void>): AsyncGenerator<ChangeEvent[]> {
  let started = false;
  let ended = false;
  try {
    let n = await gen.next();
    for (; !n.done; n = await gen.next()) {
      if (!started) await first();
      started = true;
      yield n.value;
    }
    ended = true;
    got.result = n.value;
    if (!started) await first();
  } finally {
    if (!ended) await gen.return(null as R);
  }
}
