/**
 * One read of a stream for all its local consumers (docs/local.md, "One read of the change log for
 * every consumer"). Each consumer's poller keeps its own position, batches and checkpoints
 * (docs/local.md, "Semantics of the poller (Lambda's Kinesis event source mapping)"); what it
 * shares is the GetRecords: per shard a window of the records read last, bounded in records and
 * bytes, from which every consumer takes what follows its own last record.
 *
 * - A consumer at the window's end asks for more: one shared GetRecords runs (a consumer asking
 *   while it runs waits for it instead of reading again), and its records are appended.
 * - The window drops its oldest records when it is over its bounds, whoever still needs them: a
 *   slow or stalled consumer never holds the others back nor grows memory. A consumer whose last
 *   record is before the window (fallen behind, or starting from an older checkpoint) reads on its
 *   own from its position, with its own iterator, until it reaches the window and joins it again.
 * - A consumer ahead of the window's end (a newer checkpoint than the others) moves the window to
 *   its own position; the others are then behind it and read on their own until they reach it.
 * - Reading on its own is always correct (AFTER_SEQUENCE_NUMBER from the consumer's position): any
 *   position the window cannot place is read that way.
 */
import { GetRecordsCommand, GetShardIteratorCommand, type KinesisClient, type _Record, type GetShardIteratorCommandInput } from '@aws-sdk/client-kinesis';

/** What one read gave a consumer. */
export interface ShardRead {
  /** The records after the consumer's last record, in order (at most the limit asked for). */
  records: _Record[];
  /** How far behind the shard's tip these records are, in ms (Lambda's IteratorAge). */
  millisBehind: number;
  /** With no records: when the read that found nothing after the consumer's last record started (epoch ms). */
  emptyReadAt: number | null;
  /** The read reached the shard's end as it was when the read started: nothing put before then follows these records (local/read-pacing.ts). */
  atEnd: boolean;
}

/** A consumer's reader of one shard: where it is, and the next records after it. */
export interface ShardCursor {
  /** Sequence number of the last record this cursor returned (or of the position it started after; null: the shard's start). */
  readonly lastRead: string | null;
  /** The shard is closed and this cursor returned its last record. */
  readonly ended: boolean;
  /** Gets the shard's iterator where the cursor starts (errors surface here, as a GetShardIterator's would). */
  open(): Promise<void>;
  /** Up to `limit` records after `lastRead`. Throws what GetRecords throws (an expired iterator is renewed). */
  read(limit: number): Promise<ShardRead>;
}

/** Sequence numbers are decimal strings of up to 128 bits: compared as integers, never as text. */
function seqAfter(a: string, b: string): boolean {
  return BigInt(a) > BigInt(b);
}

function recordBytes(r: _Record): number {
  return (r.Data?.length ?? 0) + (r.PartitionKey?.length ?? 0) + 100;
}

/** A consumer reading a shard with its own iterator: what every poller did before the fan-out. */
export class KinesisCursor implements ShardCursor {
  private it: string | undefined;
  private opened = false;
  ended = false;

  constructor(
    private readonly kinesis: KinesisClient,
    private readonly streamName: string,
    private readonly shardId: string,
    public lastRead: string | null,
    private readonly startingPosition: 'TRIM_HORIZON' | 'LATEST' = 'TRIM_HORIZON',
    private readonly onRead?: () => void,
  ) {}

  async open(): Promise<void> {
    this.it = await this.iterator();
    this.opened = true;
  }

  private async iterator(): Promise<string | undefined> {
    const input: GetShardIteratorCommandInput = this.lastRead
      ? { StreamName: this.streamName, ShardId: this.shardId, ShardIteratorType: 'AFTER_SEQUENCE_NUMBER', StartingSequenceNumber: this.lastRead }
      : { StreamName: this.streamName, ShardId: this.shardId, ShardIteratorType: this.startingPosition };
    return (await this.kinesis.send(new GetShardIteratorCommand(input))).ShardIterator;
  }

  async read(limit: number): Promise<ShardRead> {
    if (!this.opened) await this.open();
    if (!this.it) {
      this.ended = true;
      return { records: [], millisBehind: 0, emptyReadAt: Date.now(), atEnd: true };
    }
    const startedAt = Date.now();
    let out;
    try {
      this.onRead?.();
      out = await this.kinesis.send(new GetRecordsCommand({ ShardIterator: this.it, Limit: limit }));
    } catch (err) {
      // An iterator expires after 5 minutes unused: the next read starts after the last record read.
      if ((err as { name?: string }).name === 'ExpiredIteratorException') this.it = await this.iterator();
      throw err;
    }
    this.it = out.NextShardIterator;
    const records = out.Records ?? [];
    if (records.length > 0) this.lastRead = records[records.length - 1]!.SequenceNumber!;
    // A closed shard's last read: no iterator follows.
    this.ended = !this.it;
    // kinesalite returns every record up to the limit: fewer means the read reached the shard's end.
    const atEnd = records.length < limit && (out.MillisBehindLatest ?? 0) === 0;
    return { records, millisBehind: out.MillisBehindLatest ?? 0, emptyReadAt: records.length === 0 ? startedAt : null, atEnd };
  }
}

export interface FanoutOptions {
  kinesis: KinesisClient;
  streamName: string;
  /** Most records a shard's window holds. @default 20000 */
  maxRecords?: number;
  /** Most bytes (data and keys) a shard's window holds. @default 64 MiB */
  maxBytes?: number;
  /** Records per shared GetRecords (Kinesis allows up to 10,000; at most `maxRecords`). @default the smaller of 10000 and maxRecords */
  readLimit?: number;
}

/** Counters of a fan-out, for the benchmark and the status. */
export interface FanoutStats {
  /** GetRecords calls made for the window. */
  sharedReads: number;
  /** GetRecords calls consumers made on their own (behind the window). */
  ownReads: number;
  /** Records handed to consumers from the window. */
  servedFromWindow: number;
  /** Records dropped from a window while over its bounds. */
  dropped: number;
}

/** What one shared read did: when it started, how many records it appended. */
interface SharedRead {
  startedAt: number;
  found: number;
}

/** The window of one shard. */
class ShardWindow {
  /** Sequence number just before the first record held (null: the shard's start). */
  base: string | null;
  readonly records: _Record[] = [];
  /** Position of `records[0]` among all records the window ever held; `index` maps a sequence number to its position. */
  first = 0;
  readonly index = new Map<string, number>();
  bytes = 0;
  private it: string | undefined | null = null;
  ended = false;
  /** The shared read running now. */
  reading: Promise<SharedRead> | null = null;
  /** Start of the last shared read that found nothing after the window's end. */
  emptyReadAt: number | null = null;
  /** The last shared read reached the shard's end (fewer records than it asked for): nothing followed the window's end when it started. */
  atEnd = false;
  millisBehind = 0;

  constructor(
    private readonly fan: StreamFanout,
    readonly shardId: string,
    base: string | null,
  ) {
    this.base = base;
  }

  /** Sequence number of the last record held, or the base. */
  get end(): string | null {
    return this.records.length > 0 ? this.records[this.records.length - 1]!.SequenceNumber! : this.base;
  }

  /** Where a consumer whose last record is `after` is: at `pos` inside, at the end, behind or ahead of the window. */
  place(after: string | null): { at: 'inside'; pos: number } | { at: 'end' } | { at: 'behind' } | { at: 'ahead' } {
    const end = this.end;
    if (after === end) return { at: 'end' };
    if (after === this.base) return { at: 'inside', pos: 0 };
    const found = after === null ? undefined : this.index.get(after);
    if (found !== undefined) return { at: 'inside', pos: found - this.first + 1 };
    if (after !== null && (end === null || seqAfter(after, end))) return { at: 'ahead' };
    return { at: 'behind' };
  }

  /** Starts the window over after `after` (nothing held). */
  rebase(after: string | null): void {
    this.base = after;
    this.records.length = 0;
    this.index.clear();
    this.bytes = 0;
    this.it = null;
    this.ended = false;
    this.emptyReadAt = null;
    this.atEnd = false;
  }

  /** One shared read (a caller while one runs waits for it). */
  readMore(): Promise<SharedRead> {
    this.reading ??= this.readOnce().finally(() => {
      this.reading = null;
    });
    return this.reading;
  }

  private async readOnce(): Promise<SharedRead> {
    const { kinesis, streamName, readLimit } = this.fan.o;
    if (this.it === null) {
      const end = this.end;
      const input: GetShardIteratorCommandInput = end
        ? { StreamName: streamName, ShardId: this.shardId, ShardIteratorType: 'AFTER_SEQUENCE_NUMBER', StartingSequenceNumber: end }
        : { StreamName: streamName, ShardId: this.shardId, ShardIteratorType: 'TRIM_HORIZON' };
      this.it = (await kinesis.send(new GetShardIteratorCommand(input))).ShardIterator;
    }
    if (this.it === undefined) {
      this.ended = true;
      return { startedAt: Date.now(), found: 0 };
    }
    const startedAt = Date.now();
    let out;
    try {
      this.fan.stats.sharedReads++;
      out = await kinesis.send(new GetRecordsCommand({ ShardIterator: this.it, Limit: readLimit }));
    } catch (err) {
      if ((err as { name?: string }).name === 'ExpiredIteratorException') this.it = null;
      throw err;
    }
    this.it = out.NextShardIterator;
    this.millisBehind = out.MillisBehindLatest ?? 0;
    const got = out.Records ?? [];
    this.atEnd = got.length < readLimit && this.millisBehind === 0;
    if (got.length === 0) {
      this.emptyReadAt = startedAt;
      if (this.it === undefined) this.ended = true;
      return { startedAt, found: 0 };
    }
    const keepFrom = this.first + this.records.length;
    for (const r of got) {
      this.index.set(r.SequenceNumber!, this.first + this.records.length);
      this.records.push(r);
      this.bytes += recordBytes(r);
    }
    this.emptyReadAt = null;
    this.trim(keepFrom);
    return { startedAt, found: got.length };
  }

  /** Drops the oldest records while over the bounds, keeping at least the ones read last (from position `keepFrom`). */
  private trim(keepFrom: number): void {
    const { maxRecords, maxBytes } = this.fan.o;
    let drop = 0;
    let bytes = this.bytes;
    while (this.first + drop < keepFrom && (this.records.length - drop > maxRecords || bytes > maxBytes)) {
      bytes -= recordBytes(this.records[drop]!);
      drop++;
    }
    if (drop === 0) return;
    const dropped = this.records.splice(0, drop);
    for (const r of dropped) this.index.delete(r.SequenceNumber!);
    this.base = dropped[dropped.length - 1]!.SequenceNumber!;
    this.first += drop;
    this.bytes = bytes;
    this.fan.stats.dropped += drop;
  }
}

/** The shared reads of one stream: `cursor()` gives each consumer's poller its reader of a shard. */
export class StreamFanout {
  readonly o: Required<FanoutOptions>;
  readonly stats: FanoutStats = { sharedReads: 0, ownReads: 0, servedFromWindow: 0, dropped: 0 };
  private readonly windows = new Map<string, ShardWindow>();

  constructor(options: FanoutOptions) {
    this.o = {
      kinesis: options.kinesis,
      streamName: options.streamName,
      maxRecords: options.maxRecords ?? 20_000,
      maxBytes: options.maxBytes ?? 64 * 1024 * 1024,
      readLimit: options.readLimit ?? Math.min(10_000, options.maxRecords ?? 20_000),
    };
    for (const [name, v] of [
      ['maxRecords', this.o.maxRecords],
      ['readLimit', this.o.readLimit],
    ] as const)
      if (!Number.isInteger(v) || v < 1) throw new RangeError(`StreamFanout ${name} must be a positive integer, got ${v}`);
    if (this.o.readLimit > Math.min(10_000, this.o.maxRecords))
      throw new RangeError(
        `StreamFanout readLimit must be at most 10000 (GetRecords' limit) and at most maxRecords (${this.o.maxRecords}), got ${this.o.readLimit}`,
      );
  }

  /** A reader of `shardId` for one consumer, starting after `after` (null: the shard's start, TRIM_HORIZON). */
  cursor(shardId: string, after: string | null): ShardCursor {
    let w = this.windows.get(shardId);
    if (!w) this.windows.set(shardId, (w = new ShardWindow(this, shardId, after)));
    return new FanoutCursor(this, w, after);
  }

  /** Records a window holds now, over all shards (bounded by `maxRecords` per shard). */
  held(): number {
    let n = 0;
    for (const w of this.windows.values()) n += w.records.length;
    return n;
  }
}

class FanoutCursor implements ShardCursor {
  private own: KinesisCursor | null = null;
  ended = false;

  constructor(
    private readonly fan: StreamFanout,
    private readonly w: ShardWindow,
    public lastRead: string | null,
  ) {}

  async open(): Promise<void> {
    // The window's iterator is taken on its first read; a consumer behind it opens its own then.
  }

  async read(limit: number): Promise<ShardRead> {
    for (;;) {
      const w = this.w;
      const place = w.place(this.lastRead);
      if (place.at === 'inside') {
        this.own = null;
        const records = w.records.slice(place.pos, place.pos + limit);
        this.lastRead = records[records.length - 1]!.SequenceNumber!;
        this.fan.stats.servedFromWindow += records.length;
        const last = records[records.length - 1]!;
        const toEnd = place.pos + records.length === w.records.length;
        const age = last.ApproximateArrivalTimestamp ? Date.now() - last.ApproximateArrivalTimestamp.getTime() : 0;
        return { records, millisBehind: toEnd ? w.millisBehind : Math.max(w.millisBehind, age), emptyReadAt: null, atEnd: toEnd && w.atEnd };
      }
      if (place.at === 'end') {
        this.own = null;
        if (w.ended) {
          this.ended = true;
          return { records: [], millisBehind: 0, emptyReadAt: w.emptyReadAt ?? Date.now(), atEnd: true };
        }
        const shared = await w.readMore();
        // Nothing new: that read (started while this consumer's last record was the window's end, or joined) found nothing after it.
        if (shared.found === 0 && !w.ended && w.place(this.lastRead).at === 'end')
          return { records: [], millisBehind: 0, emptyReadAt: shared.startedAt, atEnd: true };
        continue;
      }
      if (place.at === 'ahead' && !w.reading) {
        w.rebase(this.lastRead);
        continue;
      }
      if (place.at === 'ahead') {
        await w.reading!.catch(() => undefined);
        continue;
      }
      return this.readOwn(limit);
    }
  }

  /** Behind the window: reads on its own from its position until it reaches the window. */
  private async readOwn(limit: number): Promise<ShardRead> {
    this.own ??= new KinesisCursor(this.fan.o.kinesis, this.fan.o.streamName, this.w.shardId, this.lastRead, 'TRIM_HORIZON', () => this.fan.stats.ownReads++);
    const out = await this.own.read(limit);
    this.lastRead = this.own.lastRead;
    this.ended = this.own.ended;
    return out;
  }
}
