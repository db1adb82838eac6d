/**
 * The rebuild of one table of a warehouse sink from the log (docs/rebuild.md), over the ports of
 * lambda/core/rebuild/rebuild-ports.ts: whether it may run (`check`), claiming the sink's rebuild
 * slot (`begin`), its slices (`slice`, lambda/core/rebuild/rebuild-slice.ts), a whole rebuild in
 * one process (`run`, `cdc rebuild`) and recording a rebuild that failed (`abandon`).
 */
import type { RebuildCheckpoint, RebuildRun } from '../shared/control-plane.ts';
import { CdcError } from '../shared/errors.ts';
import { POSITION_ZERO } from '../shared/position.ts';
import {
  checkFromPosition,
  claimRebuildSlot,
  decideRebuildSlot,
  decideRebuildState,
  newRebuildId,
  REBUILD_STALE_AFTER_MS,
  type RebuildRefusal,
} from './rebuild.ts';
import type { RebuildPorts, RebuildReport, RebuildRequest } from './rebuild-ports.ts';
import { RebuildFailedError, rebuildSlice, recordRun, runRecord } from './rebuild-slice.ts';
import { ReplayHoleError, type HistoryCheck } from './replay.ts';

/** A rebuild was refused after its check (another rebuild claimed the sink's slot in between). */
export class RebuildRefusedError extends CdcError {
  constructor(readonly refusal: RebuildRefusal) {
    super(refusal.code, `${refusal.reason} (${refusal.hint})`);
  }
}

export class RebuildWorkflow {
  private readonly now: () => Date;

  constructor(private readonly ports: RebuildPorts) {
    this.now = ports.now;
  }

  /**
   * Whether the rebuild may run: the table's state and the sink's hold, no other rebuild of the
   * sink under way, and whether the history it needs is complete. Returns the refusal, or null
   * and the archive's listing (reused by `run`).
   */
  async check(r: Pick<RebuildRequest, 'source' | 'table' | 'sink' | 'from'>): Promise<{ refusal: RebuildRefusal } | { refusal: null; history: HistoryCheck }> {
    if (r.from !== undefined) {
      const bad = checkFromPosition(r.from);
      if (bad) return { refusal: bad };
    }
    const t = await this.ports.controlPlane.getTable(r.source, r.table);
    if (!t)
      return { refusal: { code: 'HISTORY_INCOMPLETE', reason: `${r.source}/${r.table} is not registered`, hint: 'cdc status lists the registered tables' } };
    const progress = await this.ports.controlPlane.getSinkProgress(r.sink, r.source, r.table);
    if (!progress)
      return {
        refusal: {
          code: 'NO_SINK_PROGRESS',
          reason: `sink ${r.sink} has applied nothing of ${r.source}/${r.table}`,
          hint: 'name the sink that serves the table with --sink (cdc status lists them)',
        },
      };
    const state = decideRebuildState(t.state, progress.heldFrom, r.table);
    if (state) return { refusal: state };
    const running = decideRebuildSlot(await this.ports.controlPlane.getActiveRebuild(r.sink), this.now(), this.staleAfterMs);
    if (running) return { refusal: running };
    let history: HistoryCheck;
    try {
      history = await this.ports.replay.checkHistory(r.source, r.table);
    } catch (err) {
      if (err instanceof ReplayHoleError)
        return {
          refusal: {
            code: 'HISTORY_INCOMPLETE',
            reason: err.message,
            hint: `the history cannot be replayed: cdc resnapshot ${r.table} rebuilds the table from the source instead`,
          },
        };
      throw err;
    }
    if (history.unplaced.length > 0) {
      return {
        refusal: {
          code: 'HISTORY_INCOMPLETE',
          reason: `${history.unplaced.length} archive object(s) (${history.unplaced.slice(0, 2).join(', ')}${history.unplaced.length > 2 ? ', …' : ''}) name no shard and sequence numbers, so their records cannot be placed in the history and no hole between them and the stream can be ruled out`,
          hint: 'the archive must be written in the by-table layout with batch markers, or the batch layout with shard and sequence numbers in the names (docs/rebuild.md, "Archive layout"); or cdc resnapshot the table',
        },
      };
    }
    if ((r.from ?? POSITION_ZERO) === POSITION_ZERO && history.gaps.length > 0) {
      return {
        refusal: {
          code: 'HISTORY_INCOMPLETE',
          reason: history.gaps.join('; '),
          hint: `rebuild from a later position with --from (one the archive still holds), or cdc resnapshot ${r.table}`,
        },
      };
    }
    return { refusal: null, history };
  }

  private get staleAfterMs(): number {
    return this.ports.staleAfterMs ?? REBUILD_STALE_AFTER_MS;
  }

  /**
   * Claims the sink's rebuild slot for a new rebuild (audited as `rebuild-started`). Returns its
   * id, or the refusal when another rebuild of the sink is under way (`REBUILD_RUNNING`).
   */
  async begin(r: RebuildRequest, id = newRebuildId(this.now())): Promise<{ id: string } | { refusal: RebuildRefusal }> {
    return claimRebuildSlot(this.ports.controlPlane, r, id, this.now(), this.staleAfterMs);
  }

  /** Runs a rebuild that `check` allowed, to the end, in this process (`cdc rebuild`). Throws `RebuildFailedError` (recorded; live untouched unless it says so) or a refusal's `RebuildRefusedError`. */
  async run(r: RebuildRequest, history: HistoryCheck): Promise<RebuildReport> {
    const begun = await this.begin(r);
    if ('refusal' in begun) throw new RebuildRefusedError(begun.refusal);
    let h: HistoryCheck | undefined = history;
    try {
      for (;;) {
        const out = await this.slice(r, begun.id, { history: h });
        h = undefined;
        if (out.done) return out.report;
      }
    } catch (err) {
      const swapped = err instanceof RebuildFailedError ? err.swapped : false;
      await this.abandon(r, begun.id, err instanceof Error ? err.message : String(err)).catch(() => undefined);
      if (err instanceof CdcError) throw err;
      throw new RebuildFailedError(r.source, r.table, err instanceof Error ? err.message : String(err), swapped);
    }
  }

  /**
   * Records the rebuild `id` as failed (with its audit entry) and frees the sink's slot: after an
   * error in `run`, or on AWS when the state machine gives up on a slice (docs/rebuild.md).
   */
  async abandon(r: RebuildRequest, id: string, error: string): Promise<RebuildRun> {
    const { controlPlane: cp } = this.ports;
    const claim = await cp.getActiveRebuild(r.sink);
    const mine = claim && claim.id === id ? claim : null;
    const finished = this.now();
    const started = mine ? new Date(mine.startedAt) : finished;
    const c = mine?.checkpoint ?? null;
    const failed = runRecord(
      id,
      r,
      started,
      finished,
      r.from ?? POSITION_ZERO,
      c?.appliedThrough ?? null,
      c?.events ?? 0,
      undefined,
      { rows: [], missing: 0, extra: 0, changed: 0 },
      error,
    );
    const already = (await cp.listRebuilds(r.sink, r.source, r.table)).some((x) => x.id === id);
    if (!already) {
      await recordRun(cp, r, failed, { result: 'failed', error, id });
    }
    await cp.releaseRebuild(r.sink, id, finished.toISOString());
    return failed;
  }

  /**
   * One slice of the rebuild `id` (docs/rebuild.md, "On AWS: where it runs"): goes on from the checkpoint
   * in the control plane, applies into the shadow and checkpoints after every batch, and returns
   * `done: false` when `timeLeftMs` falls below the margin (the caller invokes it again); else
   * catches up, swaps (or rehearses), diffs, records the run and frees the slot. An error is
   * thrown as is and leaves the checkpoint: a retry of the slice goes on from it (what the shadow
   * holds beyond it is applied again, which changes nothing: invariant 2).
   */
  async slice(
    r: RebuildRequest,
    id: string,
    opts: { history?: HistoryCheck; timeLeftMs?: () => number; marginMs?: number } = {},
  ): Promise<{ done: true; report: RebuildReport } | { done: false; checkpoint: RebuildCheckpoint }> {
    return rebuildSlice(this.ports, r, id, opts);
  }
}
