/**
 * When the streaming capture writes its checkpoint (docs/local.md, "The capture's checkpoint
 * written at most once a second"). Each checkpoint is two control-plane writes (the checkpoint,
 * then where the slot was moved: local/capture-continuity.ts) and a wait for the slot to show the
 * move, so the capture writes the position of its last published batch when it is a second old or
 * 100 batches were published since the last write, instead of after every batch. The slot never
 * moves ahead of a written checkpoint, so a crash re-reads what was published since (the records
 * are published again: delivery is at least once) and never skips.
 *
 * Bookkeeping only, no I/O: the capture says what it published, asks what to write, writes it,
 * moves the slot and adds the batches to its stats once the slot shows the move.
 */
import { CheckpointSchedule } from './checkpoint-schedule.ts';

/** Published batches whose position is not written yet, as one. */
export interface UnwrittenBatches {
  /** Commit LSN of the last published transaction. */
  lsn: string;
  transactions: number;
  records: number;
  /** Commit time of the last published transaction. */
  commitTs: string | null;
  /** The latest time (epoch ms) for which everything committed before it is among these batches or written (0: none). */
  caughtAt: number;
}

/** The one schedule key: the capture has one position. */
const SLOT = 'slot';

export class CaptureCheckpoints {
  private readonly schedule: CheckpointSchedule;
  private unwritten: UnwrittenBatches | null = null;

  /** `intervalMs` 0 writes after every batch (the SQL peek must: it reads from where the slot is). */
  constructor(intervalMs: number, everyBatches: number) {
    this.schedule = new CheckpointSchedule({ intervalMs, everyBatches });
  }

  /** A batch up to `lsn` was published. Returns whether its position is to be written now. */
  published(lsn: string, transactions: number, records: number, commitTs: string | null): boolean {
    const u = this.unwritten ?? { lsn, transactions: 0, records: 0, commitTs: null, caughtAt: 0 };
    this.unwritten = { ...u, lsn, transactions: u.transactions + transactions, records: u.records + records, commitTs };
    return this.schedule.acknowledged(SLOT, lsn);
  }

  /** Whether a published position is due to be written (its time or batch count is up, or a caught-up question asked for it). */
  due(): boolean {
    return this.schedule.due(SLOT) !== null;
  }

  /** The published batches to write now (whether due or not), forgotten here: after a failed write the stream is opened again at the written checkpoint and reads them again. */
  take(): UnwrittenBatches | null {
    const u = this.unwritten;
    if (u === null) return null;
    this.schedule.drop(SLOT);
    this.unwritten = null;
    return u;
  }

  /**
   * Everything committed before `at` is published. Returns whether it is also written (nothing
   * waits): then the capture is caught up since `at` once its last move is settled; else it is
   * once the waiting batches are written and the slot moved.
   */
  reached(at: number): boolean {
    if (this.unwritten === null) return true;
    this.unwritten.caughtAt = Math.max(this.unwritten.caughtAt, at);
    return false;
  }

  /** A caught-up question for `time`: if the batches waiting would answer it, they are written at once. */
  ask(time: number): void {
    if (this.unwritten !== null && this.unwritten.caughtAt >= time) this.schedule.ask(SLOT);
  }

  /** What the stream published since the written checkpoint is to be read again. */
  drop(): void {
    this.take();
  }

  /** The batches are acknowledged (the slot moved past them): the capture's stats count them. */
  count(stats: { transactions: number; records: number; lastCommitLsn: string | null; lastCommitTs: string | null }, batches: UnwrittenBatches): void {
    stats.transactions += batches.transactions;
    stats.records += batches.records;
    stats.lastCommitLsn = batches.lsn;
    stats.lastCommitTs = batches.commitTs;
  }
}
