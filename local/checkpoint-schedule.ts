/**
 * When a local poller writes a shard's checkpoint (docs/local.md, "Checkpoints written at most once
 * a second"). On AWS the event source mapping keeps its own checkpoint; locally every write is a
 * control-plane request, so a poller may write a shard's acknowledged position only every
 * `intervalMs` (or every `everyBatches` batches) instead of after every batch. What a checkpoint
 * guarantees stays: only an acknowledged position is ever written, per shard in order, so after a
 * crash the shard resumes at or before the first record not yet handled (records acknowledged
 * since the last write are delivered again; the handlers are idempotent).
 *
 * Pure bookkeeping, no I/O: the poller asks what to write and when, writes it, and says so.
 */

/** What is acknowledged and not written yet, for one shard. */
interface Pending {
  /** The last acknowledged sequence number. */
  seq: string;
  /** When the oldest acknowledgment not written yet was made (epoch ms). */
  since: number;
  /** Batches acknowledged since the last write. */
  batches: number;
  /** Someone needs it written now (a caught-up check). */
  asked: boolean;
}

export interface CheckpointScheduleOptions {
  /** Longest time an acknowledged position waits before it is written, in ms; 0 writes after every batch. */
  intervalMs: number;
  /** Most batches acknowledged before their position is written, whatever the time. */
  everyBatches: number;
  now?: () => number;
}

export class CheckpointSchedule {
  private readonly pending = new Map<string, Pending>();
  private readonly now: () => number;

  constructor(private readonly o: CheckpointScheduleOptions) {
    if (!Number.isFinite(o.intervalMs) || o.intervalMs < 0) throw new RangeError(`checkpoint interval must be a number of ms >= 0, got ${o.intervalMs}`);
    if (!Number.isInteger(o.everyBatches) || o.everyBatches < 1) throw new RangeError(`checkpoint batches must be an integer >= 1, got ${o.everyBatches}`);
    this.now = o.now ?? Date.now;
  }

  /** The handler acknowledged a batch up to `seq` (after every earlier one of the shard). Returns whether its position is to be written now. */
  acknowledged(shardId: string, seq: string): boolean {
    const p = this.pending.get(shardId);
    if (p) {
      p.seq = seq;
      p.batches++;
    } else this.pending.set(shardId, { seq, since: this.now(), batches: 1, asked: false });
    return this.due(shardId) !== null;
  }

  /** The position to write now: the shard's last acknowledged one when it is due (or whenever one is pending, with `force`), else null. */
  due(shardId: string, force = false): string | null {
    const p = this.pending.get(shardId);
    if (!p) return null;
    if (force || p.asked || p.batches >= this.o.everyBatches || this.now() - p.since >= this.o.intervalMs) return p.seq;
    return null;
  }

  /** Milliseconds until the shard's pending position is due (0: now), or null when nothing is pending. */
  dueIn(shardId: string): number | null {
    const p = this.pending.get(shardId);
    if (!p) return null;
    if (p.asked || p.batches >= this.o.everyBatches) return 0;
    return Math.max(0, p.since + this.o.intervalMs - this.now());
  }

  /** `seq` was written: nothing is pending unless a later batch was acknowledged meanwhile. */
  written(shardId: string, seq: string): void {
    if (this.pending.get(shardId)?.seq === seq) this.pending.delete(shardId);
  }

  /** Asks for the shard's pending position to be written at once. Returns whether one is pending. */
  ask(shardId: string): boolean {
    const p = this.pending.get(shardId);
    if (p) p.asked = true;
    return p !== undefined;
  }

  /** Forgets the shard's pending position (its end is written instead). */
  drop(shardId: string): void {
    this.pending.delete(shardId);
  }
}
