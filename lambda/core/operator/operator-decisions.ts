/**
 * Operator actions, the pure part (docs/operations.md): given what the action read from the
 * control plane, accept it (with the state change to commit) or refuse it with a named reason
 * and what to do about it. No I/O here; lambda/core/operator/operator.ts reads, decides with these
 * functions and commits through the control-plane port.
 */
import { isPolledRecord } from '../shared/position-space.ts';
import { compareSequenceNumbers } from '../sink/apply-plan.ts';
import { kinesisSequenceOf } from '../../../contracts/change-log-record.ts';
import type { SinkTableProgress, TableRecord, TableState } from '../shared/control-plane.ts';

/** What the operator function and the CLI are configured with. */
export interface OperatorSettings {
  /** How long the change log keeps a record (the ChangeLog's retention; kinesalite's locally), in ms. */
  changeLogRetentionMs: number;
  /** Per source id: the longest pause its declared slot/WAL budget allows, in ms (absent: no budget declared). */
  pauseBudgetMs?: Readonly<Record<string, number>>;
}

/** Where a snapshot of a table stands (the snapshot worker's view; see `SnapshotScheduler`). */
export interface SnapshotStatus {
  state: 'queued' | 'running' | 'done' | 'failed';
  /** Progress, when the worker reports it. */
  chunksDone?: number;
  chunksTotal?: number | null;
  rows?: number;
  eta?: string | null;
  detail?: string | null;
}

/**
 * The snapshot worker's entry point as the operator sees it. The worker itself is another
 * component (docs/architecture.md §2, invariant 9); until it is wired, `unavailableSnapshots` answers.
 */
export interface SnapshotScheduler {
  /** The latest snapshot of the table, or null if none was ever requested. */
  status(sourceId: string, table: string): Promise<SnapshotStatus | null>;
  /** Whether the source's snapshot budget allows another snapshot now. */
  budget(sourceId: string): Promise<{ allowed: boolean; reason: string | null }>;
  /** Starts or queues a snapshot of the table. */
  request(sourceId: string, table: string, request: { reason: string; requestedBy: string; at: string }): Promise<void>;
}

/** A refusal: a named code, the reason, and what the operator can do. */
export interface Refusal {
  code: string;
  reason: string;
  hint: string;
}

export type Decision<T> = { accept: true; change: T } | { accept: false; refusal: Refusal };

/** The state change an accepted action commits. */
export interface StateChange {
  state: TableState;
  stateReason: string | null;
}

/** The `stateReason` prefix of a table paused by an operator (a breaking schema change uses `SCHEMA_BREAKING:`). */
export const OPERATOR_PAUSE = 'OPERATOR_PAUSE';
export const SCHEMA_BREAKING = 'SCHEMA_BREAKING';

const refuse = (code: string, reason: string, hint: string): { accept: false; refusal: Refusal } => ({ accept: false, refusal: { code, reason, hint } });

/** `3600000` → `1h`, `90000` → `1m30s`: for reasons people read. */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms)) return String(ms);
  const neg = ms < 0;
  let s = Math.round(Math.abs(ms) / 1000);
  const parts: string[] = [];
  for (const [unit, size] of [
    ['d', 86_400],
    ['h', 3_600],
    ['m', 60],
  ] as const) {
    if (s >= size) {
      parts.push(`${Math.floor(s / size)}${unit}`);
      s %= size;
    }
  }
  if (s > 0 || parts.length === 0) parts.push(`${s}s`);
  return (neg ? '-' : '') + parts.join('');
}

/** Parses `90s`, `10m`, `2h`, `400d`, `1500ms` (or combinations like `1h30m`) into ms; null if it is not one. */
export function parseDurationText(text: string): number | null {
  const t = text.trim();
  if (!/^(\d+(\.\d+)?(ms|s|m|h|d))+$/.test(t)) return null;
  let total = 0;
  for (const m of t.matchAll(/(\d+(?:\.\d+)?)(ms|s|m|h|d)/g)) {
    const n = Number(m[1]);
    total += n * { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] as 'ms' | 's' | 'm' | 'h' | 'd'];
  }
  return total > 0 ? total : null;
}

/** A sink's held range, if any. */
const held = (sinks: readonly SinkTableProgress[]): SinkTableProgress[] => sinks.filter((s) => s.heldFrom !== null);

/** How long the oldest held event of the table still stays in the change log (ms), or null when nothing is held. */
export function retentionHeadroomMs(sinks: readonly SinkTableProgress[], now: Date, settings: OperatorSettings): number | null {
  let least: number | null = null;
  for (const s of held(sinks)) {
    const since = s.heldAt ? Date.parse(s.heldAt) : now.getTime();
    const left = settings.changeLogRetentionMs - (now.getTime() - since);
    if (least === null || left < least) least = left;
  }
  return least;
}

export function decidePause(input: {
  table: TableRecord;
  sinks: readonly SinkTableProgress[];
  durationMs: number;
  reason: string;
  actor: string;
  now: Date;
  settings: OperatorSettings;
  snapshot: SnapshotStatus | null;
}): Decision<StateChange & { until: string }> {
  const { table, durationMs, settings, now } = input;
  const id = `${table.source}/${table.table}`;
  if (table.state === 'paused')
    return refuse(
      'ALREADY_PAUSED',
      `${id} is already paused (${table.stateReason ?? 'no reason recorded'})`,
      `resume it first (cdc resume ${table.table}), then pause it again`,
    );
  if (table.state === 'needs-resnapshot')
    return refuse(
      'NEEDS_RESNAPSHOT',
      `${id} needs a re-snapshot (${table.stateReason ?? 'no reason recorded'}); pausing it holds nothing`,
      `re-snapshot it (cdc resnapshot ${table.table})`,
    );
  if (input.snapshot && (input.snapshot.state === 'running' || input.snapshot.state === 'queued')) {
    return refuse(
      'SNAPSHOT_RUNNING',
      `a snapshot of ${id} is ${input.snapshot.state}; a pause would hold its rows behind it`,
      'wait until the snapshot is done (cdc status shows its progress), then pause',
    );
  }
  // Already held events count too: the oldest one must still be in the log when the pause ends.
  const headroom = retentionHeadroomMs(input.sinks, now, settings) ?? settings.changeLogRetentionMs;
  if (durationMs >= headroom) {
    return refuse(
      'PAUSE_OUTLIVES_RETENTION',
      `a pause of ${formatDuration(durationMs)} would outlive the change log's retention (${formatDuration(settings.changeLogRetentionMs)}${headroom < settings.changeLogRetentionMs ? `, of which ${formatDuration(headroom)} is left for the oldest held event` : ''}): the held events would be gone before the resume`,
      `pause for less than ${formatDuration(headroom)}, or raise the change log's retention first`,
    );
  }
  const budget = settings.pauseBudgetMs?.[table.source];
  if (budget !== undefined && durationMs > budget) {
    return refuse(
      'PAUSE_EXCEEDS_SOURCE_BUDGET',
      `a pause of ${formatDuration(durationMs)} exceeds source ${table.source}'s declared budget of ${formatDuration(budget)}`,
      `pause for at most ${formatDuration(budget)}, or raise the source's budget first`,
    );
  }
  const until = new Date(now.getTime() + durationMs).toISOString();
  return { accept: true, change: { state: 'paused', stateReason: `${OPERATOR_PAUSE}: ${input.reason} (by ${input.actor}, until ${until})`, until } };
}

/**
 * A polled table marked `needs-resnapshot` by a discontinuity of the log (a heartbeat gap, a lost
 * or replaced slot; marked so before polled tables were left alone): its positions and continuity
 * are its poll cursor's (docs/architecture.md §5.2), its history is intact in the change log, so
 * a resume (replaying what the sinks held) is enough.
 */
function markedByLogGap(table: TableRecord): boolean {
  return isPolledRecord(table) && /^(SOURCE_DISCONTINUITY|HISTORY_GAP):/.test(table.stateReason ?? '');
}

export function decideResume(input: {
  table: TableRecord;
  sinks: readonly SinkTableProgress[];
  acceptSchema: boolean;
  now: Date;
  settings: OperatorSettings;
}): Decision<StateChange & { release: SinkTableProgress[]; acceptedVersion: number | null }> {
  const { table, settings, now } = input;
  const id = `${table.source}/${table.table}`;
  const holds = held(input.sinks);
  if (table.state === 'needs-resnapshot' && !markedByLogGap(table)) {
    return refuse(
      'NEEDS_RESNAPSHOT',
      `${id} needs a re-snapshot (${table.stateReason ?? 'no reason recorded'}); its history cannot be replayed`,
      `re-snapshot it (cdc resnapshot ${table.table})`,
    );
  }
  if (table.state === 'active' && holds.length === 0) {
    return refuse('NOTHING_TO_RESUME', `${id} is active and no sink holds it`, 'nothing to do');
  }
  const breaking = table.state === 'paused' && (table.stateReason ?? '').startsWith(SCHEMA_BREAKING);
  if (breaking && !input.acceptSchema) {
    return refuse(
      'SCHEMA_DECISION_NEEDED',
      `${id} was paused by a breaking schema change (${table.stateReason}); resuming continues with schema version ${table.currentVersion}`,
      `decide: continue with version ${table.currentVersion} (cdc resume ${table.table} --accept-schema; docs/operations.md says what each sink keeps of a dropped or renamed column), or re-snapshot the table (cdc resnapshot ${table.table})`,
    );
  }
  const headroom = retentionHeadroomMs(holds, now, settings);
  if (headroom !== null && headroom <= 0) {
    return refuse(
      'HELD_RANGE_BEYOND_RETENTION',
      `the oldest held event of ${id} was held ${formatDuration(settings.changeLogRetentionMs - headroom)} ago, longer than the change log's retention (${formatDuration(settings.changeLogRetentionMs)}): part of the held range is gone from the log`,
      `re-snapshot the table (cdc resnapshot ${table.table}); replaying from the archive is not available yet`,
    );
  }
  return { accept: true, change: { state: 'active', stateReason: null, release: holds, acceptedVersion: breaking ? table.currentVersion : null } };
}

export function decideResnapshot(input: {
  table: TableRecord;
  snapshot: SnapshotStatus | null;
  budget: { allowed: boolean; reason: string | null };
}): Decision<StateChange> {
  const { table } = input;
  const id = `${table.source}/${table.table}`;
  if (input.snapshot && (input.snapshot.state === 'running' || input.snapshot.state === 'queued')) {
    return refuse('SNAPSHOT_RUNNING', `a snapshot of ${id} is already ${input.snapshot.state}`, 'wait for it (cdc status shows its progress)');
  }
  if (!input.budget.allowed) {
    return refuse(
      'SNAPSHOT_BUDGET',
      `source ${table.source}'s snapshot budget does not allow another snapshot now: ${input.budget.reason ?? 'no reason given'}`,
      'wait for running snapshots of the source to finish, or raise its budget',
    );
  }
  return { accept: true, change: { state: 'needs-resnapshot', stateReason: `RESNAPSHOT_REQUESTED: by an operator` } };
}

/**
 * The change-log shard a record came from, from its origin (`<stream>/<shard>/<sequence>`, as the
 * appliers name a record on AWS and locally), or null for an origin of another shape (a replayed
 * record, `replay/<shard>/<sequence>`, is never held).
 */
export function shardOfOrigin(origin: string): string | null {
  const parts = origin.split('/');
  if (parts.length < 3 || parts[0] === 'replay') return null;
  return parts[parts.length - 2]!;
}

function lowerSequence(a: string, b: string): string {
  return compareSequenceNumbers(a, b) <= 0 ? a : b;
}

/**
 * The first held sequence number per change-log shard of a held batch (docs/operations.md, "How a
 * resume replays"): what `ControlPlane.holdSinkTable` records next to the held position.
 */
export function heldShardsOf(records: ReadonlyArray<{ origin: string; sequenceNumber: string }>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const r of records) {
    const shard = shardOfOrigin(r.origin);
    if (shard === null) continue;
    out[shard] = out[shard] === undefined ? r.sequenceNumber : lowerSequence(out[shard], r.sequenceNumber);
  }
  return out;
}

/** Merges a hold's shards into the recorded ones, keeping the lowest sequence number per shard. */
export function mergeHeldShards(
  recorded: Readonly<Record<string, string>> | null | undefined,
  incoming: Readonly<Record<string, string>>,
): Record<string, string> {
  const out: Record<string, string> = { ...(recorded ?? {}) };
  for (const [shard, seq] of Object.entries(incoming)) out[shard] = out[shard] === undefined ? seq : lowerSequence(out[shard], seq);
  return out;
}

/**
 * Whether the resume replay applies a change-log record of a held table, and how (docs/operations.md,
 * "How a resume replays"): `'held'` for a record of the held range, `'catch-up'` for an earlier
 * record the replay applies only so that no lane is left behind, null for one it leaves alone.
 *
 * With per-shard holds, a record is in the held range when its shard held an event at or before it:
 * a shard whose live consumer held nothing still has every unapplied event of the table ahead of
 * that consumer, which applies (or holds) them in order, so replaying them ahead of it could apply
 * a key's newer event before an older one the consumer has not reached (and the older would then
 * lose to the position guard: a skipped event). When the hold was recorded by a consumer running
 * several batches of one shard at once (`parallelBatches`), another lane of a held shard may still
 * be behind that shard's first held event, so every earlier record of a held shard is replayed
 * too (`'catch-up'`): each key's events then apply in order from the shard's trim horizon, the ones
 * already applied dropped as duplicates (invariant 2). Without shard information (a hold recorded
 * by an older applier) every record at or after the held position is in the held range. A record
 * at or below its shard's `replayedThrough` is left alone: an earlier pass applied it and every
 * event of the table before it on that shard.
 */
export function replaysRecord(
  hold: Pick<SinkTableProgress, 'heldFrom' | 'heldFromShards' | 'parallelBatches' | 'replayedThrough'>,
  shardId: string,
  sequenceNumber: string,
  position: string,
): 'held' | 'catch-up' | null {
  if (hold.heldFrom === null) return null;
  const through = hold.replayedThrough?.[shardId];
  if (through !== undefined && compareSequenceNumbers(sequenceNumber, through) <= 0) return null;
  const shards = hold.heldFromShards;
  if (shards === undefined || shards === null || Object.keys(shards).length === 0) return position >= hold.heldFrom ? 'held' : null;
  const first = shards[shardId];
  if (first === undefined) return null;
  if (lowerSequence(first, sequenceNumber) === first) return 'held';
  return hold.parallelBatches === true ? 'catch-up' : null;
}

/**
 * Where the resume replay reads the change log for a hold (docs/operations.md, "How a resume
 * replays"): per shard it replays, the Kinesis sequence number to read from (that record first) or
 * null for the shard's trim horizon — after an earlier pass's `replayedThrough`, else the shard's
 * first held record, else (`parallelBatches`) the trim horizon. Shards that held nothing are not
 * read. Null: every shard from its trim horizon (a hold recorded without shard information).
 */
export function replayStarts(
  hold: Pick<SinkTableProgress, 'heldFrom' | 'heldFromShards' | 'parallelBatches' | 'replayedThrough'>,
): Map<string, string | null> | null {
  const out = new Map<string, string | null>();
  if (hold.heldFrom === null) return out;
  const shards = hold.heldFromShards;
  if (shards === undefined || shards === null || Object.keys(shards).length === 0) return null;
  for (const [shard, first] of Object.entries(shards)) {
    const through = hold.replayedThrough?.[shard];
    out.set(shard, through !== undefined ? kinesisSequenceOf(through) : hold.parallelBatches === true ? null : kinesisSequenceOf(first));
  }
  return out;
}
