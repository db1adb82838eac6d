/**
 * Continuity of a source's history (docs/architecture.md §2, invariant 3, and docs/architecture.md §5.2; docs/failures.md): pure decisions
 * that tell "the same history, moved on" from "a different or rewound history", so that a
 * failover, a restore or a re-created slot is a loud, named stop with a re-snapshot, never
 * positions of a new history compared with the old one's as if they were one order.
 *
 * - **Identity**: a source is its PostgreSQL `system_identifier` plus its WAL `timeline`. A
 *   different system identifier is another cluster (a restore into a new cluster, a logical
 *   copy, the wrong endpoint); a different timeline is a promotion or point-in-time recovery.
 *   Either way LSNs before and after do not belong to one order.
 * - **Slot resume**: the capture's slot may be found exactly at its checkpoint, or exactly where
 *   the capture last recorded having moved it (`acked`: a crash between recording the checkpoint
 *   and moving the slot; those transactions were published already, so it moves on). Anywhere
 *   else it was moved by someone else (ahead) or the source was rewound under it (behind:
 *   restored to an earlier point). One case stays ambiguous: a restore to exactly the last acked
 *   position while one published round was not yet acked; a point-in-time recovery also changes
 *   the timeline, which the identity check catches.
 * - **Heartbeat sequence** (DMS path): each beat carries the next number of its source; a beat
 *   that skips numbers means changes were lost between the source and the normalizer, one that
 *   goes back means the history was rewound or replayed from another copy.
 */
import { isPolledRecord } from '../shared/position-space.ts';
import { CdcError } from '../shared/errors.ts';
import { HEARTBEAT_KEY_COLUMN } from '../../../contracts/env.ts';
import type { ControlPlane } from '../shared/control-plane.ts';

/** Who a source is: its cluster and its timeline. */
export interface SourceIdentity {
  /** `pg_control_system().system_identifier`, decimal text (a 64-bit number). */
  systemIdentifier: string;
  /** The WAL timeline (`pg_control_checkpoint().timeline_id`). */
  timeline: number;
}

/** The history of a source is not continuous: the affected tables need a re-snapshot. */
export class DiscontinuityError extends CdcError {
  constructor(
    readonly problem: DiscontinuityProblem,
    message: string,
  ) {
    super('SOURCE_DISCONTINUITY', message);
  }
}

export type DiscontinuityProblem = 'identity-changed' | 'timeline-changed' | 'slot-restored' | 'slot-ahead' | 'heartbeat-missed' | 'heartbeat-regressed';

/** Text form stored in the control plane: `<system identifier>/<timeline>`. */
export function formatIdentity(id: SourceIdentity): string {
  return `${id.systemIdentifier}/${id.timeline}`;
}

/** Parses `formatIdentity`'s text; throws naming what is wrong. */
export function parseIdentity(text: string, where: string): SourceIdentity {
  const m = /^([0-9]{1,20})\/([0-9]{1,10})$/.exec(text);
  if (!m) throw new CdcError('INVALID_IDENTITY', `${where}: expected '<system identifier>/<timeline>', got ${JSON.stringify(text)}`);
  return { systemIdentifier: m[1]!, timeline: Number(m[2]) };
}

/**
 * Compares the identity recorded for a source with the one seen now. Returns null when they are
 * the same source on the same timeline, else the problem with a message that says what happened.
 */
export function identityProblem(recorded: SourceIdentity, seen: SourceIdentity): { problem: 'identity-changed' | 'timeline-changed'; message: string } | null {
  if (recorded.systemIdentifier !== seen.systemIdentifier) {
    return {
      problem: 'identity-changed',
      message: `the source's system identifier changed from ${recorded.systemIdentifier} to ${seen.systemIdentifier}: this is another PostgreSQL cluster (a restore into a new cluster, a copy, or the wrong endpoint), whose positions do not continue the captured history`,
    };
  }
  if (recorded.timeline !== seen.timeline) {
    return {
      problem: 'timeline-changed',
      message: `the source moved from timeline ${recorded.timeline} to ${seen.timeline} (a failover or a point-in-time recovery): positions of the new timeline are not ordered with the old one's`,
    };
  }
  return null;
}

export type SlotResume =
  { action: 'resume' } | { action: 'advance'; to: string } | { action: 'stop'; problem: 'slot-restored' | 'slot-ahead'; message: string };

/**
 * What to do with the capture slot found at `slotLsn` on start, given the checkpoint and the
 * position the capture last recorded having moved the slot to (`acked`, null when unknown).
 * `compare` orders two LSNs.
 */
export function slotResume(slotLsn: string, checkpoint: string, acked: string | null, compare: (a: string, b: string) => number): SlotResume {
  const c = compare(slotLsn, checkpoint);
  if (c === 0) return { action: 'resume' };
  if (c > 0) {
    return {
      action: 'stop',
      problem: 'slot-ahead',
      message: `the replication slot was acknowledged up to ${slotLsn}, past the capture's checkpoint ${checkpoint}: another consumer took changes this capture never published`,
    };
  }
  if (acked !== null && compare(slotLsn, acked) === 0) return { action: 'advance', to: checkpoint };
  return {
    action: 'stop',
    problem: 'slot-restored',
    message:
      `the replication slot is at ${slotLsn}, behind the capture's checkpoint ${checkpoint}${acked !== null ? ` and not where the capture last moved it (${acked})` : ''}: ` +
      'the source was restored to an earlier point (or the slot re-created), so changes the capture published are no longer in its history and new ones would reuse their positions',
  };
}

export type BeatVerdict = { ok: true; advance: boolean } | { ok: false; problem: 'heartbeat-missed' | 'heartbeat-regressed'; message: string };

/** One heartbeat as the normalizer reads it: its sequence number and the source's clock at the beat. */
export interface Beat {
  seq: number;
  /** `beat_at`, ISO-8601. */
  beatAt: string;
}

/**
 * Checks a heartbeat against the last one accepted for the source (null: none yet). Delivery is
 * at least once, so a replayed beat (a number already seen, with its original, older beat time)
 * is fine and does not move the state (`advance: false`). The next number moves it on. A number
 * that skips ahead means beats, and the changes between them, were lost; a lower number with a
 * newer beat time means the source's history was rewound (restored) or another copy writes.
 */
export function checkBeatSequence(last: Beat | null, seen: Beat): BeatVerdict {
  if (!Number.isSafeInteger(seen.seq) || seen.seq < 1)
    return { ok: false, problem: 'heartbeat-regressed', message: `heartbeat sequence ${JSON.stringify(seen.seq)} is not a positive integer` };
  if (last === null) return { ok: true, advance: true };
  if (seen.seq === last.seq + 1) return { ok: true, advance: true };
  if (seen.seq > last.seq + 1) {
    return {
      ok: false,
      problem: 'heartbeat-missed',
      message: `heartbeats ${last.seq + 1}${seen.seq - 1 > last.seq + 1 ? `…${seen.seq - 1}` : ''} never arrived (last ${last.seq}, now ${seen.seq}): changes between them may be lost`,
    };
  }
  if (Date.parse(seen.beatAt) > Date.parse(last.beatAt)) {
    return {
      ok: false,
      problem: 'heartbeat-regressed',
      message: `heartbeat ${seen.seq} was written at ${seen.beatAt}, after heartbeat ${last.seq} (${last.beatAt}): the source's history was rewound (a restore) or another copy is writing`,
    };
  }
  return { ok: true, advance: false };
}

/** The heartbeat table's columns that carry continuity (lambda/handlers/heartbeat-writer.ts writes them). */
export const HEARTBEAT_SEQ_COLUMN = 'seq';
export const HEARTBEAT_SYSTEM_IDENTIFIER_COLUMN = 'system_identifier';
export const HEARTBEAT_TIMELINE_COLUMN = 'timeline';

/** Where the normalizer keeps the last accepted heartbeat of a source (consumer, shard). */
export function lastBeatCheckpoint(sourceId: string): [string, string] {
  return [`heartbeat:${sourceId}`, 'last'];
}

interface StoredBeat extends Beat {
  systemIdentifier: string | null;
  timeline: number | null;
}

export interface HeartbeatContinuityDeps {
  source: string;
  controlPlane: ControlPlane;
  now: () => Date;
  actor: string;
  /** Counts a discontinuity (metric `SourceDiscontinuities`). */
  count: () => void;
  /** Logs the named error at error level. */
  log: (error: DiscontinuityError, extra: Record<string, unknown>) => void;
}

function intOf(v: unknown): number | null {
  const n = typeof v === 'number' ? v : typeof v === 'string' && /^[0-9]+$/.test(v) ? Number(v) : NaN;
  return Number.isSafeInteger(n) ? n : null;
}

/**
 * The normalizer's gap check on the heartbeat (both capture paths; the only one the DMS path has):
 * for a heartbeat event, compares its sequence number, the source's system identifier and its
 * timeline with the last accepted beat. On a missed or regressed beat or a changed identity or
 * timeline, every registered table of the source is marked `needs-resnapshot` (with its audit
 * entry; sinks then hold its events), the named `DiscontinuityError` is logged and counted, and
 * the error returned. Beats without a sequence number (a heartbeat table not migrated yet) are
 * not checked. Returns null when history is continuous.
 */
export async function checkHeartbeatContinuity(d: HeartbeatContinuityDeps, after: Record<string, unknown> | null): Promise<DiscontinuityError | null> {
  // The heartbeat table may hold rows of other sources reading the same database: only this source's count.
  if (!after || after[HEARTBEAT_KEY_COLUMN] !== d.source) return null;
  const seq = intOf(after[HEARTBEAT_SEQ_COLUMN]);
  const beatAtRaw = after.beat_at;
  if (seq === null || typeof beatAtRaw !== 'string' || Number.isNaN(Date.parse(beatAtRaw))) return null;
  const sysid = after[HEARTBEAT_SYSTEM_IDENTIFIER_COLUMN];
  const seen: StoredBeat = {
    seq,
    beatAt: beatAtRaw,
    systemIdentifier: typeof sysid === 'string' && sysid !== '' ? sysid : null,
    timeline: intOf(after[HEARTBEAT_TIMELINE_COLUMN]),
  };
  const [consumer, shard] = lastBeatCheckpoint(d.source);
  const text = await d.controlPlane.getCheckpoint(consumer, shard);
  const last = text === null ? null : (JSON.parse(text) as StoredBeat);
  let problem: { problem: DiscontinuityProblem; message: string } | null = null;
  if (last && last.systemIdentifier && seen.systemIdentifier && last.timeline !== null && seen.timeline !== null) {
    problem = identityProblem(
      { systemIdentifier: last.systemIdentifier, timeline: last.timeline },
      { systemIdentifier: seen.systemIdentifier, timeline: seen.timeline },
    );
  }
  let advance = true;
  if (!problem) {
    const v = checkBeatSequence(last, seen);
    if (!v.ok) problem = v;
    else advance = v.advance;
  }
  if (advance) await d.controlPlane.putCheckpoint(consumer, shard, JSON.stringify(seen));
  if (!problem) return null;
  const error = new DiscontinuityError(
    problem.problem,
    `source ${d.source}: ${problem.message}. Every log-captured table of the source needs a re-snapshot; polled tables are not affected (docs/failures.md)`,
  );
  await markSourceForResnapshot(d.controlPlane, {
    source: d.source,
    actor: d.actor,
    at: d.now().toISOString(),
    code: error.code,
    problem: problem.problem,
    message: problem.message,
    detail: { last, seen },
  });
  d.count();
  d.log(error, { problem: problem.problem, last, seen });
  return error;
}

/**
 * Marks every registered table of a source `needs-resnapshot`, each with its audit entry (sinks
 * then hold its events, warehouse-applier). Tables already marked are left as they are. Returns
 * how many tables were marked. A polled table is not touched: its positions and its continuity are
 * its poll cursor's, not the log's (docs/architecture.md §5.2, docs/failures.md).
 */
export async function markSourceForResnapshot(
  controlPlane: ControlPlane,
  o: { source: string; actor: string; at: string; code: string; problem: string; message: string; detail: Record<string, unknown> },
): Promise<number> {
  const reason = `${o.code}: ${o.problem}: ${o.message}`.slice(0, 1024);
  let marked = 0;
  for (const t of await controlPlane.listTables(o.source)) {
    if (t.state === 'needs-resnapshot' || isPolledRecord(t)) continue;
    await controlPlane.setTableState(o.source, t.table, 'needs-resnapshot', reason, {
      at: o.at,
      actor: o.actor,
      action: 'needs-resnapshot',
      source: o.source,
      table: t.table,
      outcome: 'done',
      detail: { from: t.state, to: 'needs-resnapshot', problem: o.problem, ...o.detail },
    });
    marked++;
  }
  return marked;
}
