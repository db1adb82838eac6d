/**
 * When a local stream consumer has caught up with one shard (docs/local.md, "Semantics of the poller (Lambda's Kinesis event source mapping)"): a read
 * that started at time T and found nothing new reached the shard's end as it was at T, so every
 * record put before T is at or before the last record read then. The consumer is caught up since T
 * once it has acknowledged that record. A read that came back empty while a batch was still with
 * the handler counts as soon as the handler acknowledges the batch: with a steady trickle of
 * records (heartbeats), a read that finds nothing *and* nothing in flight may never happen.
 */

/** Sequence numbers are decimal strings of up to 128 bits: compared as integers, never as text. */
function seqAtOrBefore(a: string, b: string): boolean {
  return BigInt(a) <= BigInt(b);
}

export class ShardTips {
  /** Start of the latest tip read whose records are all acknowledged (0: none). */
  private caughtUpAt = 0;
  /** Tip reads waiting for their last record to be acknowledged, by increasing `upTo`. */
  private readonly waiting: { at: number; upTo: string }[] = [];
  private acked: string | null;

  /** `acknowledged`: the shard's checkpoint when its run starts (null: nothing acknowledged yet). */
  constructor(acknowledged: string | null) {
    this.acked = acknowledged;
  }

  /** A read that started at `at` found nothing after `upTo` (the last record read so far; null: none yet). */
  tipRead(at: number, upTo: string | null): void {
    if (upTo === null || (this.acked !== null && seqAtOrBefore(upTo, this.acked))) {
      this.caughtUpAt = Math.max(this.caughtUpAt, at);
      return;
    }
    const last = this.waiting[this.waiting.length - 1];
    if (last && last.upTo === upTo) last.at = Math.max(last.at, at);
    else this.waiting.push({ at, upTo });
  }

  /** The handler acknowledged every record up to `seq`. */
  acknowledged(seq: string): void {
    if (this.acked === null || !seqAtOrBefore(seq, this.acked)) this.acked = seq;
    while (this.waiting.length > 0 && seqAtOrBefore(this.waiting[0]!.upTo, this.acked)) {
      this.caughtUpAt = Math.max(this.caughtUpAt, this.waiting.shift()!.at);
    }
  }

  /** Whether every record put on the shard before `time` has been acknowledged (as far as tip reads tell). */
  caughtUpSince(time: number): boolean {
    return this.caughtUpAt >= time;
  }
}
