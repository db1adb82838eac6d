/**
 * Starting a table from a trusted copy instead of a snapshot (docs/snapshot.md, "Bootstrap
 * from a trusted copy"): the overlap check against the change log and the `done` run with reason `bootstrap`.
 */
import type { AuditEntry, ControlPlane } from '../shared/control-plane.ts';
import { parseLsn, type Position } from '../shared/position.ts';
import { BootstrapGapError, newSnapshotState, snapshotPending, snapshotPosition, SnapshotRefusedError, type SnapshotState } from './snapshot.ts';

export interface BootstrapInput {
  source: string;
  table: string;
  /** The source position the copy represents (`X/Y`): every change committed before it is in the copy, none after. */
  copyLsn: string;
  /** The earliest commit LSN the change log holds for the source (`X/Y`): where capture started. */
  logStartLsn: string;
  actor: string;
  now?: Date;
}

/**
 * Starts a table from a trusted copy already loaded into the sink (docs/architecture.md, "Capture methods") instead of a
 * snapshot, if the change log holds everything after the copy's position (overlap proven:
 * `logStart ≤ copy`); otherwise throws `BootstrapGapError` and changes nothing (the refusal is
 * audited). On success the table's run is recorded `done` with reason `bootstrap` (so no first
 * snapshot is requested for it) and the position to stamp the copy's rows with is returned
 * (`_cdc_position` in the warehouse mirror): the same rule as a chunk row, so every change after
 * the copy wins over it and every change before it loses. A run that is requested or running
 * is refused (`SnapshotRefusedError`).
 */
export async function bootstrapFromCopy(controlPlane: ControlPlane, input: BootstrapInput): Promise<{ state: SnapshotState; copyPosition: Position }> {
  const now = input.now ?? new Date();
  const copy = parseLsn(input.copyLsn, 'copyLsn');
  const start = parseLsn(input.logStartLsn, 'logStartLsn');
  const audit = (outcome: 'done' | 'refused', detail: Record<string, unknown>): AuditEntry => ({
    at: now.toISOString(),
    actor: input.actor,
    action: 'bootstrap-from-copy',
    source: input.source,
    table: input.table,
    outcome,
    detail: { copyLsn: input.copyLsn, logStartLsn: input.logStartLsn, ...detail },
  });
  if (start > copy) {
    const err = new BootstrapGapError(input.table, input.copyLsn, input.logStartLsn);
    await controlPlane.appendAudit(audit('refused', { refusal: err.message }));
    throw err;
  }
  const previous = await controlPlane.getSnapshot(input.source, input.table);
  if (snapshotPending(previous)) {
    const reason = `a snapshot (run ${previous!.run}) is ${previous!.status}; wait for it or let it finish`;
    await controlPlane.appendAudit(audit('refused', { refusal: reason }));
    throw new SnapshotRefusedError(input.table, reason);
  }
  const at = now.toISOString();
  const state: SnapshotState = {
    ...newSnapshotState(input.source, input.table, 'bootstrap', input.actor, now, previous),
    status: 'done',
    startedAt: at,
    finishedAt: at,
    firstLowWatermark: input.copyLsn,
    etaSeconds: 0,
  };
  if (!(await controlPlane.putSnapshot(state, previous?.version ?? null, audit('done', { run: state.run })))) {
    throw new SnapshotRefusedError(input.table, 'another request for this table was written at the same time');
  }
  return { state, copyPosition: snapshotPosition(input.copyLsn) };
}
