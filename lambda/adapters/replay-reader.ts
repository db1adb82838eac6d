/**
 * The replay reader (docs/rebuild.md): one table's change events from a position onward, from
 * the archive first (through the one archive interface: a folder or S3) and then from the
 * change-log stream, in position order, each event once, up to a target position. Decisions
 * (layouts, continuity, merge) are in lambda/core/rebuild/replay.ts; this module only reads.
 *
 * What it reads for table T of source S:
 * - by-table layout: the keys of `tables/S/T/`, `tables/_other/` and `batches/` (names only),
 *   then the objects of `tables/S/T/` and `tables/_other/`; other tables' objects are never read;
 * - batch layout (archives written before the by-table layout, and Firehose's default): every
 *   object, filtered to T;
 * - the stream: per shard from the archive's last archived record of that shard
 *   (`AT_SEQUENCE_NUMBER`, which also proves there is no hole between them), or from the trim
 *   horizon when nothing of the shard is archived.
 * Objects written by Firehose are gzip: a body that starts with gzip's magic bytes is unzipped.
 *
 * Integrity (docs/rebuild.md, "Archive integrity"): every by-table object is checked against the
 * SHA-256 its batch's marker recorded before any of its records is used (the marker's body is read
 * once per batch the table has objects in); a mismatch stops the replay with
 * `ArchiveObjectTamperedError` naming the object. Objects no marker with digests covers (batch
 * layout, markers written before digests were recorded, an object of a batch whose marker was
 * never stored) are read unverified and counted (`ReplayStats.unverifiedObjects`).
 */
import { getHeapStatistics } from 'node:v8';
import { gunzipSync } from 'node:zlib';
import type { KinesisClient } from '@aws-sdk/client-kinesis';
import { readShard, shardsInOrder, type LogRecord } from './change-log-reader.ts';
import { compareSequenceNumbers } from '../core/sink/apply-plan.ts';
import { kinesisSequenceOf } from '../../contracts/change-log-record.ts';
import { CdcError } from '../core/shared/errors.ts';
import { validateChangeEvent, type ChangeEvent } from '../core/shared/event.ts';
import { isClaimCheck, resolveClaim, validateClaimCheck, type PayloadStore } from '../core/shared/payload-store.ts';
import {
  MARKER_FOLDER,
  OTHER_FOLDER,
  checkMarkerChain,
  checkStreamJunction,
  emptyReplayStats,
  historyGaps,
  mergeReplay,
  parseArchivedObject,
  parseMarker,
  tableFolder,
  type ArchivedObject,
  type HistoryCheck,
  type ReplayRange,
  type ReplayStats,
} from '../core/rebuild/replay.ts';
import type { Archive } from '../core/rebuild/archive.ts';
import { ReplayOrder } from '../core/rebuild/replay-order.ts';
import { markerDigests, verifyArchiveObject } from '../core/rebuild/archive-digest.ts';
import { utf8Lines } from '../core/shared/utf8.ts';

export type { HistoryCheck, ReplayStats } from '../core/rebuild/replay.ts';

export interface ReplayReaderOptions {
  archive: Archive;
  /** The archive copier's key prefix. @default 'change-log/' */
  prefix?: string;
  kinesis: KinesisClient;
  /** The change-log stream. */
  stream: string;
  /** Where events stored out of line are read back (claim checks; docs/large-records.md). */
  payloads?: PayloadStore;
  /**
   * How many bytes of events (their JSON) one read may hold: the replay keeps the range's events
   * in memory to order them, and a read over it stops with `ReplayTooLargeError` instead of
   * running the process out of memory. @default `defaultReplayBudget()`
   */
  maxHeldBytes?: number;
}

/**
 * Share of the heap a replay's events may take. A parsed event takes about as much heap as its
 * JSON (0.95× measured, 100,000 events of the bench's history); the rest is for the apply's
 * batches and their COPY text, the sort and the deduplication.
 */
export const REPLAY_HEAP_SHARE = 0.4;

/** The default `maxHeldBytes`: `REPLAY_HEAP_SHARE` of this process's heap limit. */
export function defaultReplayBudget(): number {
  return Math.floor(getHeapStatistics().heap_size_limit * REPLAY_HEAP_SHARE);
}

/** A replay would hold more events than its budget: stopped before the process runs out of memory (docs/rebuild.md, "Limits"). */
export class ReplayTooLargeError extends CdcError {
  constructor(range: ReplayRange, events: number, bytes: number, budget: number) {
    const mb = (n: number): string => `${(n / 1048576).toFixed(0)} MB`;
    super(
      'REPLAY_TOO_LARGE',
      `the replay of ${range.source}/${range.table} from ${range.from} holds ${events} events (${mb(bytes)} of JSON) and has not reached its end, over what this process may hold (${mb(budget)}): ` +
        'rebuild from a later position with --from (one after a snapshot of the table, which the archive still holds), or give the rebuild more memory',
    );
  }
}

/** The batch an object or marker belongs to: shard and its first and last sequence numbers. */
function batchId(b: { shard: string; firstSeq: string; lastSeq: string }): string {
  return `${b.shard}/${b.firstSeq}/${b.lastSeq}`;
}

/** The table folder of a by-table object key (relative to the prefix). */
function folderOfKey(key: string): string {
  if (key.startsWith(OTHER_FOLDER)) return OTHER_FOLDER;
  const [tables, sourceId, table] = key.split('/');
  return `${tables}/${sourceId}/${table}/`;
}

/** Archive objects fetched ahead of the one being parsed. */
const PREFETCH_OBJECTS = 4;
/** The streamed replay's objects fetched ahead per shard (it reads the shards in turns). */
const PREFETCH_PER_SHARD = 2;

/** What a replay returns besides its events: its stats, and where each shard of the stream ended (a catch-up's start). */
export interface ReplayResult {
  stats: ReplayStats;
  resume: Map<string, string | null>;
}

/**
 * The highest archived sequence number per shard (where the stream part starts): markers prove the
 * by-table layout's; batch-layout objects name theirs (counted in `stats.legacyObjects`).
 */
function archivedThrough(h: HistoryCheck, stats: ReplayStats): Map<string, string> {
  const archivedLast = new Map<string, string>();
  for (const [shard, c] of h.coverage) archivedLast.set(shard, c.lastSeq);
  for (const obj of h.objects) {
    if (obj.layout !== 'batch') continue;
    stats.legacyObjects++;
    const had = archivedLast.get(obj.shard);
    if (had === undefined || compareSequenceNumbers(obj.lastSeq, had) > 0) archivedLast.set(obj.shard, obj.lastSeq);
  }
  return archivedLast;
}

/** The object's non-empty lines (gzip unzipped), decoded piecewise (`utf8Lines`: a whole object at once decodes many times slower). */
function parseLines(body: Buffer): string[] {
  return utf8Lines(body.length > 2 && body[0] === 0x1f && body[1] === 0x8b ? gunzipSync(body) : body);
}

export class ReplayReader {
  private readonly prefix: string;
  private readonly budget: number;

  constructor(private readonly o: ReplayReaderOptions) {
    this.prefix = o.prefix ?? 'change-log/';
    this.budget = o.maxHeldBytes ?? defaultReplayBudget();
  }

  /** Lists what the archive holds for the table and checks its chain (throws `ReplayHoleError`). */
  async checkHistory(sourceId: string, table: string): Promise<HistoryCheck> {
    const rel = (k: string): string => k.slice(this.prefix.length);
    const [mine, other, markers, years] = await Promise.all([
      this.o.archive.list(this.prefix + tableFolder(sourceId, table)),
      this.o.archive.list(this.prefix + OTHER_FOLDER),
      this.o.archive.list(this.prefix + MARKER_FOLDER),
      // Batch-layout objects live under year folders (2xxx/…).
      this.o.archive.list(`${this.prefix}2`),
    ]);
    const objects: ArchivedObject[] = [];
    const unplaced: string[] = [];
    for (const k of [...mine, ...other, ...years]) {
      const obj = parseArchivedObject(rel(k));
      if (obj) objects.push(obj);
      else unplaced.push(k);
    }
    const parsed = markers.map((k) => parseMarker(rel(k))).filter((m) => m !== null);
    const coverage = checkMarkerChain(parsed);
    const byBatch = new Map(parsed.map((m) => [batchId(m), m.key]));
    return {
      coverage,
      gaps: historyGaps(coverage),
      objects,
      keysListed: mine.length + other.length + markers.length + years.length,
      unplaced,
      markers: byBatch,
    };
  }

  /**
   * Reads the range (see the module comment). Throws `ReplayHoleError` when the archive and the
   * stream do not join up.
   */
  async read(range: ReplayRange, history?: HistoryCheck): Promise<{ events: ChangeEvent[]; stats: ReplayStats; resume: Map<string, string | null> }> {
    const h = history ?? (await this.checkHistory(range.source, range.table));
    const stats: ReplayStats = emptyReplayStats(h.keysListed);
    const fromArchive: ChangeEvent[] = [];
    const held = { events: 0, bytes: 0 };
    const archivedLast = archivedThrough(h, stats);
    // Marker bodies, read once per batch (their digests), as promises so that prefetched objects share them.
    const digestsOf = new Map<string, Promise<ReadonlyMap<string, string> | null>>();
    // Objects are fetched a few ahead of the one being parsed (reading overlaps parsing; S3 GETs
    // are latency-bound), and handled strictly in listing order: memory holds at most the window.
    const ahead = new Map<number, Promise<Buffer>>();
    let next = 0;
    for (let i = 0; i < h.objects.length; i++) {
      for (; next < Math.min(h.objects.length, i + PREFETCH_OBJECTS); next++) ahead.set(next, this.fetch(h.objects[next]!));
      const body = ahead.get(i)!;
      ahead.delete(i);
      for (const e of await this.readObject(range, h, i, body, digestsOf, stats, held)) fromArchive.push(e);
    }
    const start = new Map<string, string | null>();
    for (const shard of await shardsInOrder(this.o.kinesis, this.o.stream)) start.set(shard.ShardId!, archivedLast.get(shard.ShardId!) ?? null);
    const tail = await this.readStream(range, start, stats, held);
    const events = mergeReplay([fromArchive, tail.events], range);
    stats.events = events.length;
    return { events, stats, resume: tail.resume };
  }

  /**
   * The same events as `read`, in the same order, handed over in chunks while the archive is
   * still being read, so that a rebuild applies the first while the next objects are parsed
   * (docs/rebuild.md, "What it does", step 3). Each shard's objects are read in sequence order,
   * the shard whose events reach least far first (`ReplayOrder`); its next objects are fetched
   * ahead. Throws what `read` throws, and `ReplayOrderError` when a shard's events are not in
   * position order (its caller then uses `read`). Returns the stats and where the stream ended.
   */
  async *stream(range: ReplayRange, history?: HistoryCheck): AsyncGenerator<ChangeEvent[], ReplayResult> {
    const h = history ?? (await this.checkHistory(range.source, range.table));
    const stats: ReplayStats = emptyReplayStats(h.keysListed);
    const archivedLast = archivedThrough(h, stats);
    const digestsOf = new Map<string, Promise<ReadonlyMap<string, string> | null>>();
    const held = { events: 0, bytes: 0 };
    // Objects of `_other` hold no event of any table: checked and counted first, outside the order.
    const others = h.objects.flatMap((o, i) => (o.key.startsWith(OTHER_FOLDER) ? [i] : []));
    for (const i of others) await this.readObject(range, h, i, this.fetch(h.objects[i]!), digestsOf, stats, held);
    const queues = new Map<string, number[]>();
    for (const [i, o] of h.objects.entries()) {
      if (o.key.startsWith(OTHER_FOLDER)) continue;
      const q = queues.get(o.shard);
      if (q) q.push(i);
      else queues.set(o.shard, [i]);
    }
    const bySeq = (a: number, b: number): number =>
      compareSequenceNumbers(h.objects[a]!.firstSeq, h.objects[b]!.firstSeq) || compareSequenceNumbers(h.objects[a]!.lastSeq, h.objects[b]!.lastSeq) || a - b;
    for (const q of queues.values()) q.sort(bySeq);
    const shards = await shardsInOrder(this.o.kinesis, this.o.stream);
    const order = new ReplayOrder(
      range,
      [...queues].flatMap(([shard, q]) => q.map(() => shard)),
      shards.map((s) => s.ShardId!),
    );
    const ahead = new Map<number, Promise<Buffer>>();
    let emitted = 0;
    for (let shard = order.nextShard(); shard !== null; shard = order.nextShard()) {
      // Every shard's next objects are on their way: which shard comes next depends on what this one holds.
      for (const q of queues.values()) for (const i of q.slice(0, PREFETCH_PER_SHARD)) if (!ahead.has(i)) ahead.set(i, this.fetch(h.objects[i]!));
      const i = queues.get(shard)!.shift()!;
      const body = ahead.get(i)!;
      ahead.delete(i);
      order.add(shard, i, await this.readObject(range, h, i, body, digestsOf, stats, held));
      const ready = order.take();
      emitted += ready.length;
      if (ready.length > 0) yield ready;
    }
    const start = new Map<string, string | null>();
    for (const shard of shards) start.set(shard.ShardId!, archivedLast.get(shard.ShardId!) ?? null);
    const tail = await this.readStream(range, start, stats, held);
    const rest = order.finish(tail.events);
    stats.events = emitted + rest.length;
    if (rest.length > 0) yield rest;
    return { stats, resume: tail.resume };
  }

  /** A body's GET, started now (awaited later, in order: a failure meanwhile must not go unhandled). */
  private fetch(obj: ArchivedObject): Promise<Buffer> {
    const p = this.o.archive.get(this.prefix + obj.key);
    p.catch(() => undefined);
    return p;
  }

  /** One object's events of the table, in line order, checked against its digest first and counted in `stats` and `held`. */
  private async readObject(
    range: ReplayRange,
    h: HistoryCheck,
    i: number,
    pending: Promise<Buffer>,
    digestsOf: Map<string, Promise<ReadonlyMap<string, string> | null>>,
    stats: ReplayStats,
    held: { events: number; bytes: number },
  ): Promise<ChangeEvent[]> {
    const body = await pending;
    stats.objectsRead++;
    stats.bytesRead += body.length;
    if (await this.verify(h.objects[i]!, body, h.markers, digestsOf, stats)) stats.verifiedObjects++;
    else stats.unverifiedObjects++;
    const out: ChangeEvent[] = [];
    for (const line of parseLines(body)) {
      stats.archiveRecords++;
      let e = this.event(line, range);
      let bytes = line.length;
      if (e instanceof Promise) ({ event: e, bytes } = await e);
      if (e === 'invalid') stats.invalid++;
      else if (e) {
        out.push(e);
        held.events++;
        held.bytes = this.hold(held.bytes, bytes, held.events, range);
      }
    }
    return out;
  }

  /**
   * The stream part: per shard from `start` (a sequence number the stream must still hold: the
   * junction is checked; null: the trim horizon) to the shard's tip. Returns the range's events
   * and where each shard ended (the next call's `start`, for a catch-up).
   */
  async readStream(
    range: ReplayRange,
    start: ReadonlyMap<string, string | null>,
    stats?: ReplayStats,
    before: { events: number; bytes: number } = { events: 0, bytes: 0 },
  ): Promise<{ events: ChangeEvent[]; resume: Map<string, string | null> }> {
    const out: ChangeEvent[] = [];
    let held = before.bytes;
    const resume = new Map<string, string | null>();
    for (const shard of await shardsInOrder(this.o.kinesis, this.o.stream)) {
      const id = shard.ShardId!;
      const at = start.get(id) ?? null;
      let first = true;
      let n = 0;
      let lastSeen = at;
      const closed = shard.SequenceNumberRange?.EndingSequenceNumber !== undefined;
      let pages: AsyncIterable<LogRecord[]> = readShard(this.o.kinesis, this.o.stream, id, at);
      if (at !== null) pages = junctionSafe(pages, () => checkStreamJunction(id, at, null, closed));
      for await (const page of pages) {
        for (const r of page) {
          // The archive holds whole Kinesis records: an aggregate's events are compared by the aggregate's sequence number.
          const seq = kinesisSequenceOf(r.sequenceNumber);
          if (first && at !== null) checkStreamJunction(id, at, seq, closed);
          first = false;
          lastSeen = seq;
          if (r.otherShard !== undefined || (at !== null && compareSequenceNumbers(seq, at) <= 0)) continue;
          n++;
          let e = this.event(r.text, range);
          let bytes = r.text.length;
          if (e instanceof Promise) ({ event: e, bytes } = await e);
          if (e === 'invalid') {
            if (stats) stats.invalid++;
          } else if (e) {
            out.push(e);
            held = this.hold(held, bytes, before.events + out.length, range);
          }
        }
      }
      if (first && at !== null) checkStreamJunction(id, at, null, closed);
      resume.set(id, lastSeen);
      if (stats) {
        stats.streamRecords += n;
        stats.shards.push({ shard: id, archivedThrough: at, streamRecords: n });
      }
    }
    return { events: mergeReplay([out], range), resume };
  }

  /**
   * Checks a by-table object against the digest its batch marker recorded (throws
   * `ArchiveObjectTamperedError`); false when there is nothing to check it against.
   */
  private async verify(
    obj: ArchivedObject,
    body: Buffer,
    markers: ReadonlyMap<string, string>,
    digestsOf: Map<string, Promise<ReadonlyMap<string, string> | null>>,
    stats: ReplayStats,
  ): Promise<boolean> {
    if (obj.layout !== 'by-table') return false;
    const marker = markers.get(batchId(obj));
    if (marker === undefined) return false;
    let digests = digestsOf.get(marker);
    if (!digests) {
      digests = this.o.archive.get(this.prefix + marker).then((b) => markerDigests(this.prefix + marker, b.toString('utf8')));
      digestsOf.set(marker, digests);
      stats.markersRead++;
    }
    const recorded = await digests;
    if (recorded === null) return false;
    verifyArchiveObject(this.prefix + obj.key, folderOfKey(obj.key), body, this.prefix + marker, recorded);
    return true;
  }

  /** What the read holds after one more event of `bytes`; throws `ReplayTooLargeError` over the budget. */
  private hold(held: number, bytes: number, events: number, range: ReplayRange): number {
    const now = held + bytes;
    if (now > this.budget) throw new ReplayTooLargeError(range, events, now, this.budget);
    return now;
  }

  /**
   * The line's event if it belongs to the range's table (null if another table's, 'invalid' if not
   * an event). Synchronous for an event stored in line (the replay's per-line cost: no promise per
   * line); a promise only for a claim check, which is read back from the payload store, with the
   * size of the event it read (what the replay then holds).
   */
  private event(line: string, range: ReplayRange): ChangeEvent | null | 'invalid' | Promise<{ event: ChangeEvent | 'invalid'; bytes: number }> {
    let parsed: unknown;
    try {
      parsed = JSON.parse(line);
    } catch {
      return 'invalid';
    }
    const about = parsed as { source?: unknown; table?: unknown };
    if (about === null || typeof about !== 'object' || about.source !== range.source || about.table !== range.table) return null;
    if (isClaimCheck(parsed)) {
      // An event stored out of line: read back whole; a store that cannot give it stops the replay (never skipped).
      const claim = validateClaimCheck(parsed);
      const payloads = this.o.payloads;
      if (!payloads)
        throw new CdcError('PAYLOAD_STORE_MISSING', `the replay of ${range.source}/${range.table} needs the payload store to read ${claim.claim.ref}`);
      return resolveClaim(payloads, claim).then((text) => ({ event: validated(JSON.parse(text)), bytes: text.length }));
    }
    return validated(parsed);
  }
}

/** The change event `parsed` is, or 'invalid' when it is not one. */
function validated(parsed: unknown): ChangeEvent | 'invalid' {
  try {
    return validateChangeEvent(parsed);
  } catch (err) {
    if (err instanceof CdcError) return 'invalid';
    throw err;
  }
}

/**
 * A stream that refuses the start sequence number (`InvalidArgumentException`: it is not a
 * record of this shard, e.g. the stream was re-created) no longer holds the archive's last
 * record: `onMissing` names the hole.
 */
async function* junctionSafe(pages: AsyncIterable<LogRecord[]>, onMissing: () => void): AsyncGenerator<LogRecord[]> {
  const it = pages[Symbol.asyncIterator]();
  let first: IteratorResult<LogRecord[]>;
  try {
    first = await it.next();
  } catch (err) {
    if ((err as { name?: unknown }).name === 'InvalidArgumentException') onMissing();
    throw err;
  }
  if (first.done) return;
  yield first.value;
  for (let r = await it.next(); !r.done; r = await it.next()) yield r.value;
}
