/**
 * A table's snapshot run and its completed chunks as the control plane keeps them
 * (docs/architecture.md §5.3). Types only, so the control-plane port
 * (lambda/core/shared/control-plane.ts) can name them without importing the snapshot workflow.
 */
import type { Position } from '../shared/position.ts';
import type { PositionSpace } from '../shared/position-space.ts';

/** A keyset cursor: the primary-key values of the last row read, as PostgreSQL printed them (text), in key order. */
export type KeyCursor = string[];

/** Why a snapshot runs. */
export type SnapshotReason = 'initial' | 'added' | 'resnapshot' | 'bootstrap';
/** `requested` waits for a worker; `running` has one; `done` finished; `failed` stopped with `error`. */
export type SnapshotStatus = 'requested' | 'running' | 'done' | 'failed';
/** What the pacer is doing to the reads (see snapshot-pacer.ts). */
export type ThrottleState = 'full-speed' | 'slowed' | 'paused' | 'fenced' | 'idle';

/** One table's snapshot, as the control plane keeps it (docs/architecture.md §5.3). `version` guards every write. */
export interface SnapshotState {
  source: string;
  table: string;
  /** Id of this run (a new request starts a new run). */
  run: string;
  reason: SnapshotReason;
  status: SnapshotStatus;
  requestedBy: string;
  requestedAt: string;
  startedAt: string | null;
  finishedAt: string | null;
  updatedAt: string;
  /** Cursor after the last completed chunk (null: start of the table). */
  cursor: KeyCursor | null;
  chunksDone: number;
  rowsDone: number;
  /** Estimated rows of the table (planner statistics at start), at least `rowsDone`. */
  estimatedRows: number;
  /** Rows per second over the recent chunks, and the estimated seconds left (null: not known yet). */
  rowsPerSecond: number;
  etaSeconds: number | null;
  throttle: ThrottleState;
  chunkSize: number;
  /**
   * Low watermark of the first chunk: the run's epoch start. For a run in a poll space
   * (`positionSpace`), the poll watermark taken before its first chunk (lambda/core/capture/poll-snapshot.ts).
   */
  firstLowWatermark: string | null;
  /** The position space of the run's watermark (docs/architecture.md §5.2). Absent: `wal`. */
  positionSpace?: PositionSpace;
  /** Where the last chunk was read (`replica`: a read replica) and, there, the replica's replay lag, ms. @default primary */
  readFrom?: 'primary' | 'replica';
  replicaLagMs?: number | null;
  /** The worker that holds the run and until when (epoch ms); another worker may take over after. */
  owner: string | null;
  leaseUntil: number;
  error: string | null;
  /** Optimistic-concurrency counter: every write is conditional on the stored value. */
  version: number;
}

/** One completed chunk (published to the raw stream in full before it is recorded). */
export interface SnapshotChunkRecord {
  source: string;
  table: string;
  run: string;
  /** 0-based chunk number within the run. */
  index: number;
  /** Key range: strictly after `startAfter` (null: the start), up to and including `endKey`. */
  startAfter: KeyCursor | null;
  endKey: KeyCursor | null;
  rows: number;
  lowWatermark: string;
  fenceXid: string;
  position: Position;
  readAt: string;
  readMs: number;
  fenceWaitMs: number;
  fromReplica: boolean;
  /** On a replica, its replay position and lag when the chunk was read (see `ChunkRead`). */
  replayLsn?: string | null;
  replicaLagMs?: number | null;
  status: 'published';
  completedAt: string;
}
