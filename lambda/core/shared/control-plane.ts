/**
 * The control plane as the runtime sees it (docs/architecture.md §5.3): a port. The DynamoDB adapter
 * (lambda/adapters/control-plane-dynamodb.ts) implements it; core logic only knows this interface.
 *
 * Every state change commits together with its audit entry. Reads that decide are strongly consistent.
 */
import type { Position } from './position.ts';
import type { PositionSpace } from './position-space.ts';
import type { SnapshotChunkRecord, SnapshotState } from '../snapshot/snapshot-state.ts';
import type { ReconcileVerdict } from '../reconcile/reconcile-verdict.ts';

export type TableState = 'active' | 'paused' | 'needs-resnapshot' | 'degraded';
/** How a sink applies deletes; defined once for constructs and runtime in contracts/table-config.ts. */
export type { DeleteMode } from '../../../contracts/table-config.ts';
import type { DeleteMode } from '../../../contracts/table-config.ts';
import type { CaptureMode, TableTransforms } from '../../../contracts/table-config.ts';
/** What the source supplies as the before image of an update: nothing, the key, or the full row. */
export type PreImage = 'none' | 'key' | 'full';

export interface ColumnDef {
  name: string;
  /** Source type name where known (`integer`, `text`, `INT32`, …); null when the capture did not say. */
  type: string | null;
  nullable: boolean;
}

export interface SchemaVersion {
  source: string;
  table: string;
  version: number;
  columns: ColumnDef[];
  /** Primary-key column names, in key order. */
  key: string[];
  /** First position read with this version. */
  effectivePosition: Position;
  registeredAt: string;
  /** The per-event transforms its events were shaped with, from `effectivePosition` on (docs/transforms.md). Absent: none. */
  transforms?: TableTransforms;
}

export interface TableRecord {
  source: string;
  table: string;
  state: TableState;
  currentVersion: number;
  deleteMode: DeleteMode;
  preImage: PreImage;
  /** Why the table is not active (named error code and message), if it is not. */
  stateReason: string | null;
  updatedAt: string;
  /** How the table is captured (docs/polling.md): `poll` means its deletes are not observable. Absent: `log`. */
  capture?: CaptureMode;
  /**
   * Where the table's positions come from (docs/architecture.md §5.2, lambda/core/shared/position-space.ts),
   * recorded when the table is registered. Absent (a record from before spaces were recorded):
   * `wal` for a log-captured table; a polled table's is then told by its poll column.
   */
  positionSpace?: PositionSpace;
}

export interface SinkTableProgress {
  sink: string;
  source: string;
  table: string;
  /** Highest position this sink has durably applied for the table (high-water mark), or null. */
  appliedPosition: Position | null;
  /** First position the sink held back because the table was paused; a resume replays from here. */
  heldFrom: Position | null;
  /** When this sink first held the table (since the last release), or null. */
  heldAt?: string | null;
  /** How many times the sink recorded a hold: the resume replay releases only if it did not change meanwhile. */
  holdCount?: number;
  /** Set by an operator resume: the sink replays its held range and then releases it (docs/operations.md). */
  releaseRequested?: string | null;
  /** When the last replay released the hold, or null. */
  releasedAt?: string | null;
  /**
   * Per change-log shard, the sequence number of the first event the sink held (the lowest, as a
   * decimal string), since the last release. The resume replay replays each held shard from here
   * (from its trim horizon when `parallelBatches`) and leaves shards without a hold to their live consumer (docs/operations.md, "How a resume
   * replays"). Absent for a hold recorded without shard information: the replay then falls back
   * to every shard from `heldFrom`.
   */
  heldFromShards?: Record<string, string> | null;
  /**
   * Set when a consumer that runs several batches of one shard at once (a sink's
   * `parallelizationFactor` above 1) recorded this hold, since the last release: another lane of a
   * held shard may still be behind its first held event, so the resume replay replays each held
   * shard from its trim horizon (docs/operations.md, "How a resume replays").
   */
  parallelBatches?: boolean;
  /**
   * Per change-log shard, the last sequence number up to which a resume replay of this hold has
   * applied the table's events (`noteReplayProgress`), since the last release: every event of the
   * table on that shard up to it is applied, so a later pass starts after it (docs/operations.md,
   * "How a resume replays").
   */
  replayedThrough?: Record<string, string> | null;
}

export interface AuditEntry {
  at: string;
  /** Who did it: a handler name (`normalizer`, `applier:<sink>`) or an operator id. */
  actor: string;
  action: string;
  source: string | null;
  table: string | null;
  /** Whether the action was carried out (refused operator actions are audited too). */
  outcome: 'done' | 'refused';
  detail: Record<string, unknown>;
}

/**
 * The most of a dead letter's record text that is kept, in UTF-8 bytes, so a dead letter fits one
 * DynamoDB item (400 KB) with its reason. Every path that writes dead letters cuts here.
 */
export const DEAD_LETTER_RECORD_MAX_BYTES = 300 * 1024;

/** Cuts `text` to at most `maxBytes` UTF-8 bytes without splitting a character. */
export function cutUtf8(text: string, maxBytes: number): { text: string; cut: boolean } {
  const bytes = Buffer.from(text, 'utf8');
  if (bytes.length <= maxBytes) return { text, cut: false };
  // A cut inside a multi-byte character decodes to U+FFFD: drop it.
  return {
    text: bytes
      .subarray(0, maxBytes)
      .toString('utf8')
      .replace(/\uFFFD+$/, ''),
    cut: true,
  };
}

/** A record that could not be decoded or applied, kept with its reason (invariant 12). */
export interface DeadLetter {
  at: string;
  /** `normalizer` or the sink id. */
  stage: string;
  source: string | null;
  table: string | null;
  /** Named error code (`INVALID_RECORD`, `UNSAFE_IDENTIFIER`, …) and message. */
  code: string;
  reason: string;
  /** Where the record was read (stream name + shard + sequence number, or a file line). */
  origin: string;
  /**
   * The record as received, whole. A store may keep a large one out of line (`recordRef`) and
   * reads it back whole; `truncated` is set only when a store could not keep it whole.
   */
  record: string;
  truncated: boolean;
  /** Where the whole record is kept when it was too large for the store's item (docs/large-records.md). */
  recordRef?: string;
}

export interface ControlPlane {
  getTable(sourceId: string, table: string): Promise<TableRecord | null>;
  listTables(sourceId?: string): Promise<TableRecord[]>;
  getSchemaVersion(sourceId: string, table: string, version: number): Promise<SchemaVersion | null>;
  listSchemaVersions(sourceId: string, table: string): Promise<SchemaVersion[]>;
  /**
   * Registers a table on first sight together with its first schema version, atomically and
   * with an audit entry. Returns false (and changes nothing) if the table already exists.
   */
  registerTable(table: TableRecord, schema: SchemaVersion, audit: AuditEntry): Promise<boolean>;
  /**
   * Adds schema version `schema.version` and makes it current, conditional on the table's
   * current version being `schema.version - 1`. Returns false if another writer got there first.
   */
  addSchemaVersion(schema: SchemaVersion, audit: AuditEntry): Promise<boolean>;
  /** Changes a table's state with its audit entry in one transaction. */
  setTableState(sourceId: string, table: string, state: TableState, reason: string | null, audit: AuditEntry): Promise<void>;
  getSinkProgress(sink: string, sourceId: string, table: string): Promise<SinkTableProgress | null>;
  /** Raises the applied high-water mark (never lowers it). */
  advanceSinkProgress(sink: string, sourceId: string, table: string, appliedPosition: Position): Promise<void>;
  /**
   * Records the first held position, keeping the lowest one ever recorded until cleared, and —
   * when `shards` is given (change-log shard id → first held sequence number) — the lowest held
   * sequence number per shard, all in one atomic change with the hold count's increment;
   * `parallelBatches` (the holder runs several batches of one shard at once) sets the hold's
   * `parallelBatches` until the release.
   */
  holdSinkTable(
    sink: string,
    sourceId: string,
    table: string,
    fromPosition: Position,
    shards?: Readonly<Record<string, string>>,
    parallelBatches?: boolean,
  ): Promise<void>;
  /**
   * Records how far a resume replay of the current hold has applied the table's events, per
   * change-log shard (`SinkTableProgress.replayedThrough`, replaced whole); false when the table is
   * not held (the release came first), and nothing is written.
   */
  noteReplayProgress(sink: string, sourceId: string, table: string, through: Readonly<Record<string, string>>): Promise<boolean>;
  /** Clears the held position (on resume), with its audit entry. */
  releaseSinkTable(sink: string, sourceId: string, table: string, audit: AuditEntry): Promise<void>;
  /** Consumer checkpoints of the local event-source poller (one per consumer and shard). */
  getCheckpoint(consumer: string, shardId: string): Promise<string | null>;
  putCheckpoint(consumer: string, shardId: string, sequenceNumber: string): Promise<void>;
  appendAudit(entry: AuditEntry): Promise<void>;
  /** Stores a dead letter. A table that gets one is marked `degraded` if it was `active` (with an audit entry). */
  putDeadLetter(letter: DeadLetter): Promise<void>;
  listDeadLetters(stage?: string): Promise<DeadLetter[]>;
  /**
   * The audit log in time order, optionally one source's or table's, and only the entries at or
   * after `since` (ISO 8601): the log is ordered by time, so a store reads only that part of it.
   */
  listAudit(sourceId?: string, table?: string, since?: string): Promise<AuditEntry[]>;
  // ---- Operator actions (docs/operations.md) ----
  /** Every sink's progress for every table (operator status), or one sink's (its resume replay). */
  listSinkProgress(sink?: string): Promise<SinkTableProgress[]>;
  /**
   * Commits an operator action on one table: its new state, the release requests of its held
   * sinks and its audit entry, in one transaction, conditional on the table (state and
   * updatedAt) and each sink's held position being what the action read. Returns false (and
   * changes nothing) when any of them changed meanwhile.
   */
  commitTableAction(action: TableAction): Promise<boolean>;
  /**
   * Ends a sink's resume replay: clears its held position, conditional on the held position and
   * the hold count being the ones the replay read, with its audit entry. Returns false if the
   * sink held again meanwhile (the replay then goes again).
   */
  completeSinkRelease(sink: string, sourceId: string, table: string, expected: { heldFrom: Position; holdCount: number }, audit: AuditEntry): Promise<boolean>;
  /** Clears a release request that has nothing left to replay (conditional on no hold being recorded). */
  clearReleaseRequest(sink: string, sourceId: string, table: string): Promise<boolean>;
  // ---- Snapshots (docs/snapshot.md) ----
  /** A table's current snapshot run (docs/snapshot.md), or null. */
  getSnapshot(sourceId: string, table: string): Promise<SnapshotState | null>;
  listSnapshots(sourceId: string): Promise<SnapshotState[]>;
  /**
   * Writes a snapshot state if the stored one has version `expectedVersion` (null: none stored),
   * with `audit` in the same transaction when given. Returns false (and changes nothing) if
   * another writer got there first: two requests or two workers cannot both win.
   */
  putSnapshot(state: SnapshotState, expectedVersion: number | null, audit: AuditEntry | null): Promise<boolean>;
  /** Records a completed chunk and the state after it in one transaction, conditional like `putSnapshot`. */
  completeSnapshotChunk(chunk: SnapshotChunkRecord, state: SnapshotState, expectedVersion: number): Promise<boolean>;
  /** The completed chunks of one run, in chunk order. */
  listSnapshotChunks(sourceId: string, table: string, run: string): Promise<SnapshotChunkRecord[]>;
  // ---- Reconciliation (docs/reconcile.md) ----
  /**
   * Stores a table's latest verdict for one sink, replacing the previous one; it carries the
   * ranges it covered and the cursor the next run starts at.
   */
  putReconcileVerdict(verdict: ReconcileVerdict): Promise<void>;
  getReconcileVerdict(sink: string, sourceId: string, table: string): Promise<ReconcileVerdict | null>;
  /** The latest verdict of every table, of one sink or of all, ordered by sink, source, table. */
  listReconcileVerdicts(sink?: string): Promise<ReconcileVerdict[]>;
  // ---- Rebuilds (docs/rebuild.md) ----
  /** Records a rebuild run (rehearsal or swap: its duration, counts and diff summary) with its audit entry, in one transaction. */
  recordRebuild(run: RebuildRun, audit: AuditEntry): Promise<void>;
  /** One sink's rebuild runs, oldest first (of one table when given). */
  listRebuilds(sink: string, sourceId?: string, table?: string): Promise<RebuildRun[]>;
  /**
   * Claims the sink's one rebuild slot for `claim` (docs/rebuild.md, "One at a time"), with its
   * audit entry, in one transaction: succeeds when no rebuild of the sink is under way, the last
   * one finished, or its runner has not reported since `staleBefore`. Returns null when claimed,
   * else the rebuild that holds the slot.
   */
  claimRebuild(claim: ActiveRebuild, staleBefore: string, audit: AuditEntry): Promise<ActiveRebuild | null>;
  /** The sink's rebuild under way (or the last one, `finished`), null when there never was one. */
  getActiveRebuild(sink: string): Promise<ActiveRebuild | null>;
  /** Stores the rebuild's checkpoint and heartbeat; false when the slot is no longer `id`'s (taken over, or finished). */
  checkpointRebuild(sink: string, id: string, checkpoint: RebuildCheckpoint, at: string): Promise<boolean>;
  /** Marks the rebuild `id` finished, freeing the sink's slot (no-op when the slot is another's). */
  releaseRebuild(sink: string, id: string, at: string): Promise<void>;
}

/** The rebuild under way of one sink (at most one per sink; docs/rebuild.md). */
export interface ActiveRebuild {
  id: string;
  sink: string;
  source: string;
  table: string;
  mode: 'rehearsal' | 'swap';
  /** The replay's start position (inclusive), as requested; null: the beginning. */
  from: Position | null;
  actor: string;
  startedAt: string;
  /** `running` until the runner records the run and frees the slot. */
  state: 'running' | 'finished';
  /** The runner's last report; a claim older than the stale time may be taken over. */
  heartbeatAt: string;
  /** Where the runner got to; null before its first batch. */
  checkpoint: RebuildCheckpoint | null;
}

/** What a resumed rebuild needs to go on where the last invocation stopped (docs/rebuild.md, "On AWS: where it runs"). */
export interface RebuildCheckpoint {
  /** `replay`: applying into the shadow; `swapping`: the swap transaction was started (it may or may not have committed). */
  phase: 'replay' | 'swapping';
  /** Every event at or below this position is in the shadow (null: none yet). */
  appliedThrough: Position | null;
  /** The bulk is replayed sorted: a streamed replay found a shard out of position order (lambda/core/rebuild/replay-order.ts). */
  sorted?: boolean;
  events: number;
  applyMs: number;
  sleptMs: number;
  skipped: number;
  /** Invocations so far. */
  slices: number;
}

/** One rebuild of one table of one sink (docs/rebuild.md): what a rehearsal measures, what a swap did. */
export interface RebuildRun {
  /** Unique id (also in the diff table's `_cdc_rebuild` column). */
  id: string;
  sink: string;
  source: string;
  table: string;
  /** `rehearsal` builds and diffs without swapping; `swap` replaces the live table. */
  mode: 'rehearsal' | 'swap';
  outcome: 'done' | 'failed';
  startedAt: string;
  finishedAt: string;
  /** Wall time of the whole rebuild (ms), the number a rehearsal exists to measure. */
  durationMs: number;
  /** The history replayed: from (inclusive) and the position the shadow was caught up to. */
  from: Position;
  caughtUpTo: Position | null;
  /** Events replayed into the shadow, and how many came from the archive and the stream. */
  events: number;
  archiveRecords: number;
  streamRecords: number;
  /** Differing keys between live and shadow by kind, and up to 20 sample keys (JSON text). */
  diff: { missing: number; extra: number; changed: number; samples: string[] };
  /** Why it failed, when it did. */
  error: string | null;
}

/** An operator action's change to one table (see `ControlPlane.commitTableAction`). */
export interface TableAction {
  source: string;
  table: string;
  /** The table as the action read it. */
  expected: { state: TableState; updatedAt: string };
  next: { state: TableState; stateReason: string | null; updatedAt: string };
  /** Sinks whose hold a resume releases: each is marked `releaseRequested` (conditional on `heldFrom`). */
  releaseSinks?: Array<{ sink: string; heldFrom: Position | null }>;
  audit: AuditEntry;
}
