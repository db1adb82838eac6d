/**
 * The local capture's continuity checks on start (lambda/core/capture/continuity.ts decides; this module
 * reads the source and the control plane): the source is still the cluster and timeline recorded
 * when capture began, and the slot is exactly at the checkpoint or where the capture last moved it.
 *
 * Kept in the control plane with the capture checkpoint (same consumer `capture:<source>`):
 * - shard `<slot>#acked`: where the capture last moved the slot, written after each move;
 * - consumer `source-identity:<source>`, shard `identity`: `<system identifier>/<timeline>`.
 */
import type pg from 'pg';
import type { AuditEntry, ControlPlane } from '../lambda/core/shared/control-plane.ts';
import { formatIdentity, identityProblem, parseIdentity, slotResume } from '../lambda/core/capture/continuity.ts';
import { compareLsn } from './slot.ts';
import { readSourceIdentity } from '../lambda/adapters/source-facts-pg.ts';

/** The control-plane shard holding where the capture last moved the slot. */
export function ackedShard(slot: string): string {
  return `${slot}#acked`;
}

/** Records that the slot was moved to `lsn` (after the move). */
export async function recordAcked(ctx: Pick<ContinuityContext, 'controlPlane' | 'checkpointName' | 'slot'>, lsn: string): Promise<void> {
  await ctx.controlPlane.putCheckpoint(ctx.checkpointName, ackedShard(ctx.slot), lsn);
}

/** Where a source's identity is recorded (consumer, shard). */
export function identityCheckpoint(sourceId: string): [string, string] {
  return [`source-identity:${sourceId}`, 'identity'];
}

export interface ContinuityContext {
  source: string;
  /** The capture checkpoint's consumer name (`capture:<source>`). */
  checkpointName: string;
  slot: string;
  controlPlane: ControlPlane;
  audit: (action: string, table: string | null, detail: Record<string, unknown>) => AuditEntry;
}

export type ContinuityOutcome = { stop: { problem: string; message: string; detail: Record<string, unknown> } } | { advanceTo: string | null };

/**
 * Checks the source's identity against the recorded one (recording it the first time). Returns
 * the problem to stop with, or null.
 */
export async function checkIdentity(client: Pick<pg.ClientBase, 'query'>, ctx: ContinuityContext): Promise<ContinuityOutcome | null> {
  const seen = await readSourceIdentity(client);
  if (!seen) return null;
  const [consumer, shard] = identityCheckpoint(ctx.source);
  const text = await ctx.controlPlane.getCheckpoint(consumer, shard);
  if (text === null) {
    await ctx.controlPlane.putCheckpoint(consumer, shard, formatIdentity(seen));
    await ctx.controlPlane.appendAudit(ctx.audit('source-identity-recorded', null, { systemIdentifier: seen.systemIdentifier, timeline: seen.timeline }));
    return null;
  }
  const recorded = parseIdentity(text, `${consumer}/${shard}`);
  const p = identityProblem(recorded, seen);
  return p ? { stop: { problem: p.problem, message: p.message, detail: { recorded: formatIdentity(recorded), seen: formatIdentity(seen) } } } : null;
}

/** Decides what to do with the slot found at `slotLsn`: resume, advance exactly from where it was last moved, or stop. */
export async function checkSlotResume(ctx: ContinuityContext, slotLsn: string, checkpoint: string): Promise<ContinuityOutcome> {
  const acked = await ctx.controlPlane.getCheckpoint(ctx.checkpointName, ackedShard(ctx.slot));
  const d = slotResume(slotLsn, checkpoint, acked, compareLsn);
  if (d.action === 'stop')
    return {
      stop: {
        problem: d.problem,
        message: `replication slot ${JSON.stringify(ctx.slot)} of source ${ctx.source}: ${d.message}`,
        detail: { slotLsn, checkpoint, acked },
      },
    };
  return { advanceTo: d.action === 'advance' ? d.to : null };
}
