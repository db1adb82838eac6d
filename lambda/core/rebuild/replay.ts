/**
 * The replay reader's decisions (docs/rebuild.md): pure, no I/O. The reader itself
 * (`lambda/adapters/replay-reader.ts`) lists and reads the archive through the one archive interface and then the
 * change-log stream; this module names the archive's objects, checks that the archive and the
 * stream together hold an unbroken history, and merges what they hold into one position-ordered,
 * deduplicated sequence of one table's events.
 *
 * Archive layouts (both readable; docs/rebuild.md, "Archive layout"):
 * - `batch` (Firehose's default, and what every archive written before the by-table layout
 *   holds): `<prefix>YYYY/MM/DD/HH/<name>-YYYY-MM-DD-HH-MM-SS-<shard>-<firstSeq>-<lastSeq>`, every
 *   table of a batch in one object. A per-table replay must read every such object.
 * - `by-table`: the batch's records of each table in their own object under
 *   `<prefix>tables/<source>/<schema.table>/YYYY/MM/DD/HH/<same name>`, records that name no
 *   table under `<prefix>tables/_other/…`, and, written last, one batch marker per batch:
 *   `<prefix>batches/<shard>/<firstSeq>-<lastSeq>-<prevSeq|origin>` (sequence numbers padded to
 *   `SEQ_WIDTH` digits so that key order is sequence order). A per-table replay lists only its
 *   table's folder and the markers' keys (names only, no bodies).
 *
 * Continuity (a hole is a named error, never skipped):
 * - Within the archive, per shard: each marker names the last sequence number of the batch the
 *   copier archived before it (`prevSeq`), or `origin` for the first batch of a shard it ever saw.
 *   Sorted by first sequence number, every marker's `prevSeq` must be at or below the highest
 *   sequence number covered so far; a larger one means a batch in between is missing. A shard
 *   whose first marker does not start at `origin` lost its oldest objects (expired by the
 *   archive's lifecycle rule): history before its first archived record is not complete.
 * - Between the archive and the stream, per shard: the stream must still hold the archive's last
 *   record of the shard (read `AT_SEQUENCE_NUMBER`). If the first record the stream returns is a
 *   later one, whatever lay between was trimmed before it was archived: a hole.
 */
import { CdcError } from '../shared/errors.ts';
import type { ChangeEvent } from '../shared/event.ts';
import { compareSequenceNumbers, distinctEvents } from '../sink/apply-plan.ts';
import type { Position } from '../shared/position.ts';

/** Sequence numbers in marker keys are left-padded to this many digits (Kinesis uses up to 128 bits: 39 digits). */
export const SEQ_WIDTH = 40;
/** The `prevSeq` of the first batch of a shard the copier ever archived. */
export const ORIGIN = 'origin';

/** The history needed is not complete: a piece of it is neither in the archive nor in the stream. */
export class ReplayHoleError extends CdcError {
  constructor(
    readonly shard: string,
    /** The highest sequence number held before the hole (null: nothing before it). */
    readonly after: string | null,
    /** The first sequence number held after it (null: unknown). */
    readonly before: string | null,
    why: string,
  ) {
    super('REPLAY_HOLE', `history hole in shard ${shard}${after ? ` after sequence number ${after}` : ''}${before ? ` before ${before}` : ''}: ${why}`);
  }
}

export type ArchiveLayout = 'batch' | 'by-table';

/** A data object of the archive, as its key names it. */
export interface ArchivedObject {
  key: string;
  layout: ArchiveLayout;
  shard: string;
  firstSeq: string;
  lastSeq: string;
}

/** A batch marker of the by-table layout, as its key names it. */
export interface BatchMarker {
  key: string;
  shard: string;
  firstSeq: string;
  lastSeq: string;
  /** Last sequence number of the batch archived before this one in the shard, or null for `origin`. */
  prevSeq: string | null;
}

const NAME_TAIL = /-(\d{4})-(\d{2})-(\d{2})-(\d{2})-(\d{2})-(\d{2})-(.+)-(\d+)-(\d+)$/;
const LEGACY = /^\d{4}\/\d{2}\/\d{2}\/\d{2}\/[^/]+$/;
const TABLE_OBJECT = /^tables\/(?:_other|[^/]+\/[^/]+)\/\d{4}\/\d{2}\/\d{2}\/\d{2}\/[^/]+$/;
const MARKER = /^batches\/([^/]+)\/(\d+)-(\d+)-(\d+|origin)$/;

const unpad = (s: string): string => s.replace(/^0+(?=\d)/, '');
export const padSeq = (s: string): string => s.padStart(SEQ_WIDTH, '0');

/** The folder of one table's objects in the by-table layout (relative to the archive prefix). */
export function tableFolder(sourceId: string, table: string): string {
  return `tables/${sourceId}/${table}/`;
}
/** The folder of records that name no table (not JSON, or no source and table). */
export const OTHER_FOLDER = 'tables/_other/';
export const MARKER_FOLDER = 'batches/';

/** Parses a data object's key (relative to the archive prefix); null for keys that are not data objects of either layout. */
export function parseArchivedObject(key: string): ArchivedObject | null {
  const layout: ArchiveLayout | null = LEGACY.test(key) ? 'batch' : TABLE_OBJECT.test(key) ? 'by-table' : null;
  if (!layout) return null;
  const m = NAME_TAIL.exec(key);
  if (!m) return null;
  return { key, layout, shard: m[7]!, firstSeq: m[8]!, lastSeq: m[9]! };
}

/** The marker key of a batch (relative to the archive prefix). */
export function markerKey(shard: string, firstSeq: string, lastSeq: string, prevSeq: string | null): string {
  return `${MARKER_FOLDER}${shard}/${padSeq(firstSeq)}-${padSeq(lastSeq)}-${prevSeq === null ? ORIGIN : padSeq(prevSeq)}`;
}

export function parseMarker(key: string): BatchMarker | null {
  const m = MARKER.exec(key);
  if (!m) return null;
  return { key, shard: m[1]!, firstSeq: unpad(m[2]!), lastSeq: unpad(m[3]!), prevSeq: m[4] === ORIGIN ? null : unpad(m[4]!) };
}

/** What the archive holds of one shard, as its markers prove. */
export interface ShardCoverage {
  shard: string;
  /** True when the shard's first archived batch is the first the copier ever saw (nothing expired before it). */
  fromOrigin: boolean;
  firstSeq: string;
  /** The highest sequence number archived. */
  lastSeq: string;
  batches: number;
}

/**
 * Checks the markers' chain per shard and returns what each shard's archive covers. Throws
 * `ReplayHoleError` at the first missing batch.
 */
export function checkMarkerChain(markers: readonly BatchMarker[]): Map<string, ShardCoverage> {
  const byShard = new Map<string, BatchMarker[]>();
  for (const m of markers) {
    const list = byShard.get(m.shard);
    if (list) list.push(m);
    else byShard.set(m.shard, [m]);
  }
  const out = new Map<string, ShardCoverage>();
  for (const [shard, list] of byShard) {
    list.sort((a, b) => compareSequenceNumbers(a.firstSeq, b.firstSeq) || compareSequenceNumbers(a.lastSeq, b.lastSeq));
    const first = list[0]!;
    let covered = first.lastSeq;
    for (const m of list.slice(1)) {
      if (m.prevSeq === null && m.firstSeq === first.firstSeq) {
        // The first batch copied again (after a crash, maybe with more records).
        if (compareSequenceNumbers(m.lastSeq, covered) > 0) covered = m.lastSeq;
        continue;
      }
      if (m.prevSeq === null) {
        // A copier that found no marker of the shard started again from the origin: only valid if nothing was archived before.
        throw new ReplayHoleError(
          shard,
          covered,
          m.firstSeq,
          `batch ${m.key} says it is the shard's first, but batches up to ${covered} were archived before it (the archive's markers were lost or written by another stream)`,
        );
      }
      if (compareSequenceNumbers(m.prevSeq, covered) > 0) {
        throw new ReplayHoleError(
          shard,
          covered,
          m.firstSeq,
          `the batch archived before ${m.key} ended at ${m.prevSeq}, but the archive holds nothing between ${covered} and it (an archive object is missing)`,
        );
      }
      if (compareSequenceNumbers(m.lastSeq, covered) > 0) covered = m.lastSeq;
    }
    out.set(shard, { shard, fromOrigin: first.prevSeq === null, firstSeq: first.firstSeq, lastSeq: covered, batches: list.length });
  }
  return out;
}

/**
 * Checks the junction between a shard's archive (its last archived sequence number) and the
 * stream: `firstInStream` is the first record the stream returned when asked for the record AT
 * `archivedLast` (null: the shard returned nothing). Throws `ReplayHoleError` when that record
 * is gone from the stream.
 */
export function checkStreamJunction(shard: string, archivedLast: string, firstInStream: string | null, shardClosed: boolean): void {
  if (firstInStream === null) {
    // An open shard that returns nothing at the archived record has trimmed it and everything after (nothing newer arrived);
    // a closed shard that returns nothing has been trimmed entirely.
    throw new ReplayHoleError(
      shard,
      archivedLast,
      null,
      `the stream no longer holds the archive's last record of the shard${shardClosed ? ' (the shard is closed and trimmed)' : ''}, so records after it may have been trimmed before they were archived`,
    );
  }
  if (firstInStream !== archivedLast) {
    throw new ReplayHoleError(
      shard,
      archivedLast,
      firstInStream,
      "the stream no longer holds the archive's last record of the shard: records between it and the stream's oldest were trimmed before they were archived",
    );
  }
}

/** A replay's range: events of `source`/`table` with `from <= position <= to`. */
export interface ReplayRange {
  source: string;
  table: string;
  /** Inclusive lower bound. */
  from: Position;
  /** Inclusive upper bound (the target position). */
  to: Position;
}

/** True when the event belongs to the range. */
export function inRange(e: ChangeEvent, r: ReplayRange): boolean {
  return e.source === r.source && e.table === r.table && e.position >= r.from && e.position <= r.to;
}

/**
 * Merges what the archive and the stream supplied into one sequence: the range's events only,
 * each (position, key) once, in position order.
 */
export function mergeReplay(parts: ReadonlyArray<readonly ChangeEvent[]>, range: ReplayRange): ChangeEvent[] {
  const all: ChangeEvent[] = [];
  for (const p of parts) for (const e of p) if (inRange(e, range)) all.push(e);
  return distinctEvents(all);
}

/**
 * Whether the archive's markers prove the history complete from each shard's first record
 * (needed when the replay starts at the table's beginning). Returns why not (empty: complete).
 */
export function historyGaps(coverage: ReadonlyMap<string, ShardCoverage>): string[] {
  const gaps: string[] = [];
  for (const [shard, c] of coverage) {
    if (!c.fromOrigin)
      gaps.push(
        `the archive of shard ${shard} starts at sequence number ${c.firstSeq}, not at the shard's first record: its oldest objects expired (archive retention)`,
      );
  }
  return gaps;
}

/** What a replay read, for the report and the bench. */
export interface ReplayStats {
  /** Archive objects read (GET) and their bytes. */
  objectsRead: number;
  bytesRead: number;
  /** Archive keys listed (names only). */
  keysListed: number;
  /** Batch-layout objects read whole because the archive predates the by-table layout. */
  legacyObjects: number;
  /** By-table objects checked against the digest their batch marker recorded. */
  verifiedObjects: number;
  /** Objects read without a recorded digest to check them against (see the module comment). */
  unverifiedObjects: number;
  /** Batch markers read (GET) for their digests: one per batch the table has objects in. */
  markersRead: number;
  /** Records read from the archive and from the stream, and the table's events among them. */
  archiveRecords: number;
  streamRecords: number;
  /** Events of the range after deduplication. */
  events: number;
  /** Lines that are not valid change events (already dead letters when they were live): skipped. */
  invalid: number;
  /** Per shard, where the stream was read from: the archive's last record, or the trim horizon. */
  shards: Array<{ shard: string; archivedThrough: string | null; streamRecords: number }>;
}

/** A replay that has read nothing yet (`keysListed`: the names its history check listed). */
export function emptyReplayStats(keysListed = 0): ReplayStats {
  return {
    objectsRead: 0,
    bytesRead: 0,
    keysListed,
    legacyObjects: 0,
    verifiedObjects: 0,
    unverifiedObjects: 0,
    markersRead: 0,
    archiveRecords: 0,
    streamRecords: 0,
    events: 0,
    invalid: 0,
    shards: [],
  };
}

/** What the archive proves about the table's history (before any object is read). */
export interface HistoryCheck {
  coverage: Map<string, ShardCoverage>;
  /** Why the history from the table's beginning is not complete (empty: it is). */
  gaps: string[];
  /** Data objects of the table (by-table and `_other`) and the batch-layout objects. */
  objects: ArchivedObject[];
  keysListed: number;
  /**
   * Objects in the data folders whose names place them in neither layout (no shard and sequence
   * numbers: Kinesis Data Firehose's own object names). Their records cannot be placed in the
   * history, so a rebuild is refused while there are any (docs/rebuild.md, "On AWS").
   */
  unplaced: string[];
  /** Marker keys (relative to the prefix) by batch (`batchId`): where each by-table object's digest is recorded. */
  markers: ReadonlyMap<string, string>;
}
