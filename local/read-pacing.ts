/**
 * When a local poller's shard reader reads next (docs/local.md, "Reads paced by put notices").
 *
 * With the stream's puts noticed (`PollerOptions.watchPuts`), a notice names the shards it put to
 * and the last sequence number it put on each. A reader whose last record is at or past every
 * sequence number noticed on its shard, and whose last read reached the shard's end, has nothing
 * known to read: it waits for the next notice for its shard, and polls every `maxIdleMs`
 * meanwhile (for puts that were not noticed). Anything else (a noticed record not read yet, a
 * read that stopped at its limit, a notice that did not say where it put) reads again at once.
 * Without notices a reader reads again at once after records and polls every `idleMs` after an
 * empty read. Only when reads happen changes: what a read returns, and the caught-up rule (an
 * empty read, local/shard-tips.ts), do not.
 */
export interface ReadPacingOptions {
  /** Wait after an empty read without notices, in ms. */
  idleMs: number;
  /** Wait between reads of a shard with nothing known to read, with notices, in ms. */
  maxIdleMs: number;
  /** Whether the stream's puts are noticed (`watchPuts`). */
  notices: boolean;
}

/** Sequence numbers are decimal strings of up to 128 bits: compared as integers, never as text. */
function seqBefore(a: string, b: string): boolean {
  return BigInt(a) < BigInt(b);
}

export class ReadPacer {
  /** The highest sequence number a notice said was put on the shard (null: none noticed). */
  private putUpTo: string | null = null;
  /** A notice that did not say where it put came since the last read started. */
  private unplaced = false;

  constructor(private readonly o: ReadPacingOptions) {}

  /** Records were put on the shard, the last at `sequenceNumber` (null: the notice did not say). */
  notice(sequenceNumber: string | null): void {
    if (sequenceNumber === null) this.unplaced = true;
    else if (this.putUpTo === null || seqBefore(this.putUpTo, sequenceNumber)) this.putUpTo = sequenceNumber;
  }

  /** A read starts: it looks at whatever was put before. */
  beforeRead(): void {
    this.unplaced = false;
  }

  /**
   * After a read that returned `found` records: how long to wait before the next read (0: at
   * once). `atEnd`: the read reached the shard's end as it was when the read started; `lastRead`:
   * the reader's last record now (null: none).
   */
  afterRead(found: number, atEnd: boolean, lastRead: string | null): number {
    if (!this.o.notices) return found > 0 ? 0 : this.o.idleMs;
    if (!atEnd || this.unplaced) return 0;
    if (this.putUpTo !== null && (lastRead === null || seqBefore(lastRead, this.putUpTo))) return 0;
    return Math.max(this.o.idleMs, this.o.maxIdleMs);
  }
}
