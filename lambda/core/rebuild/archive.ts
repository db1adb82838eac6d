/**
 * The change-log archive (docs/rebuild.md, "Archive layout"): the one archive interface (a port:
 * an S3 bucket on AWS, lambda/adapters/archive-s3.ts; a folder or s3rver locally,
 * local/archive.ts), its key rules, and the archive copier that writes batches of change-log
 * records into it. No I/O here but through the port.
 *
 * Objects use Firehose's naming: `<prefix>YYYY/MM/DD/HH/<name>-YYYY-MM-DD-HH-MM-SS-<id>`, UTC,
 * newline-delimited records. The id is derived from the shard and the sequence numbers the object
 * holds, so a batch copied again after a crash overwrites the same object instead of duplicating it.
 */
import type { KinesisStreamEvent } from 'aws-lambda';
import { compareSequenceNumbers } from '../sink/apply-plan.ts';
import { archiveDigest } from './archive-digest.ts';
import { CdcError } from '../shared/errors.ts';
import { unpackChangeLogRecord } from '../../../contracts/change-log-record.ts';
import { MARKER_FOLDER, OTHER_FOLDER, markerKey, parseMarker, tableFolder, type ArchiveLayout, type BatchMarker } from './replay.ts';

/** Where archived change-log objects are kept. */
export interface Archive {
  /** Stores an object (replacing one with the same key). Durable when it resolves. */
  put(key: string, body: string | Buffer): Promise<void>;
  get(key: string): Promise<Buffer>;
  /** Every key under a prefix, sorted; with `startAfter`, only the keys after it. */
  list(prefix?: string, startAfter?: string): Promise<string[]>;
  /** Human-readable location (`folder <path>` or `s3://bucket/prefix`). */
  readonly location: string;
}

/** An archive key that is not a safe relative object key (it could escape a folder archive, or is not one S3 keeps as written). */
export class ArchiveKeyError extends CdcError {
  constructor(readonly key: string) {
    super(
      'INVALID_ARCHIVE_KEY',
      `archive key ${JSON.stringify(key)} is not a safe relative object key (letters, digits and !_.*'()-/ only, no empty, '.' or '..' segment, no leading '/')`,
    );
  }
}

const KEY_RE = /^[A-Za-z0-9!_.*'()\-/]+$/;

/** Throws `ArchiveKeyError` unless `key` is a safe relative object key (both archive stores check every key). */
export function checkArchiveKey(key: string): void {
  if (!KEY_RE.test(key) || key.startsWith('/') || key.split('/').some((p) => p === '' || p === '.' || p === '..')) throw new ArchiveKeyError(key);
}

function pad(n: number, w = 2): string {
  return String(n).padStart(w, '0');
}

/**
 * The archive key of a batch, in Firehose's layout. `firstSeq`/`lastSeq` make it unique and
 * stable for the same records.
 */
export function archiveKey(prefix: string, name: string, at: Date, shardId: string, firstSeq: string, lastSeq: string): string {
  const y = at.getUTCFullYear();
  const mo = pad(at.getUTCMonth() + 1);
  const d = pad(at.getUTCDate());
  const h = pad(at.getUTCHours());
  const stamp = `${y}-${mo}-${d}-${h}-${pad(at.getUTCMinutes())}-${pad(at.getUTCSeconds())}`;
  return `${prefix}${y}/${mo}/${d}/${h}/${name}-${stamp}-${shardId}-${firstSeq}-${lastSeq}`;
}

/** Per shard, the marker of the last batch the copier archived (relative to the copier's prefix): a hint, not the record. */
export const HEAD_FOLDER = 'heads/';

export interface ArchiveCopierOptions {
  archive: Archive;
  /** Key prefix, like Firehose's S3 prefix. @default 'change-log/' */
  prefix?: string;
  /** Object name part, like Firehose's delivery stream name. @default 'change-log' */
  name?: string;
  /**
   * `batch`: one object per batch (Firehose's default layout). `by-table`: one object per table
   * of the batch plus a batch marker written last (lambda/core/rebuild/replay.ts; docs/rebuild.md), so a
   * per-table replay reads only its table's objects and can prove no batch is missing.
   * @default 'batch'
   */
  layout?: ArchiveLayout;
  /**
   * Whether this copier is the only writer of its shards' batch markers, one batch after the
   * other (the local poller). Then the marker it wrote last is the previous batch's, and after a
   * restart it lists the shard's markers once. False on Lambda, where the batches of one shard
   * go to whichever execution environment is free: before each batch it lists the markers
   * written after the last one it knows of (another environment may have archived batches since),
   * and it keeps a per-shard head (`heads/<shard>`, the last marker's key) so that a new
   * environment does not list every marker the shard ever had.
   * @default true
   */
  soleWriter?: boolean;
}

/** What one copied batch wrote. */
export interface ArchiveCopyResult {
  /** Always empty: the copier stores the whole batch or throws (the caller retries the whole batch). */
  batchItemFailures: [];
  shard: string | null;
  records: number;
  /** Data objects written (not counting the batch marker and the head). */
  objects: number;
}

const SAFE_PART = /^[A-Za-z0-9_.]+$/;

/** The by-table folder a record goes to: its table's, or `_other` when it names none (not JSON, no source or table). */
function folderOf(text: string): string {
  try {
    const v = JSON.parse(text) as { source?: unknown; table?: unknown };
    if (typeof v.source === 'string' && typeof v.table === 'string' && SAFE_PART.test(v.source) && SAFE_PART.test(v.table))
      return tableFolder(v.source, v.table);
  } catch {
    // not JSON: kept under _other
  }
  return OTHER_FOLDER;
}

/**
 * The archive copier as a stream handler: writes each batch of change-log records (one shard's,
 * in shard order) and returns only when every object is stored, so the event source checkpoints
 * after the objects are durable; any failure is thrown and nothing of the batch counts as copied
 * (a retry writes the same keys again). The by-table layout writes the batch's table objects
 * first and its marker last: a marker proves its batch's objects are stored. Run it under one
 * poller per consumer (local) or as the archive copier function (lambda/handlers/archive-copier.ts).
 */
export function createArchiveCopier(options: ArchiveCopierOptions): (event: KinesisStreamEvent) => Promise<ArchiveCopyResult> {
  const prefix = options.prefix ?? 'change-log/';
  const name = options.name ?? 'change-log';
  const layout = options.layout ?? 'batch';
  const soleWriter = options.soleWriter ?? true;
  const archive = options.archive;
  /** Per shard: the marker of the last batch archived (or learned of) by this copier; null: none before. */
  const last = new Map<string, BatchMarker | null>();
  const markerFolder = (shard: string): string => `${prefix}${MARKER_FOLDER}${shard}/`;
  const headKey = (shard: string): string => `${prefix}${HEAD_FOLDER}${shard}`;
  const parseKey = (k: string): BatchMarker | null => (k.startsWith(prefix) ? parseMarker(k.slice(prefix.length)) : null);

  /** The shard's head (the last marker written when it was stored), or null when there is none or it is unreadable. */
  const readHead = async (shard: string): Promise<BatchMarker | null> => {
    const key = headKey(shard);
    if (!(await archive.list(key)).includes(key)) return null;
    return parseKey((await archive.get(key)).toString('utf8').trim());
  };

  /** The last sequence number archived before `firstSeq` in the shard (the new marker's `previous`), or null. */
  const previous = async (shard: string, firstSeq: string): Promise<string | null> => {
    const known = last.get(shard);
    if (soleWriter && known !== undefined && (known === null || compareSequenceNumbers(known.lastSeq, firstSeq) < 0)) return known?.lastSeq ?? null;
    const hint = soleWriter ? null : (known ?? (await readHead(shard)));
    const candidates: BatchMarker[] = hint ? [hint] : [];
    for (const k of await archive.list(markerFolder(shard), hint?.key ? prefix + hint.key : undefined)) {
      const m = parseKey(k);
      if (m) candidates.push(m);
    }
    let prev: string | null = null;
    let sameStart: BatchMarker | null = null;
    for (const m of candidates) {
      // The last batch that ended before this one starts (a batch copied again with more records overlaps; it does not count).
      if (compareSequenceNumbers(m.lastSeq, firstSeq) < 0) {
        if (prev === null || compareSequenceNumbers(m.lastSeq, prev) > 0) prev = m.lastSeq;
      } else if (m.firstSeq === firstSeq) sameStart = m;
    }
    if (prev !== null || !hint) return prev;
    // This batch starts at or before the hint: copied again after its marker was stored (the same start has the same predecessor), or the hint says nothing about what came before.
    if (sameStart) return sameStart.prevSeq;
    let before: string | null = null;
    for (const k of await archive.list(markerFolder(shard))) {
      const m = parseKey(k);
      if (m && compareSequenceNumbers(m.lastSeq, firstSeq) < 0 && (before === null || compareSequenceNumbers(m.lastSeq, before) > 0)) before = m.lastSeq;
    }
    return before;
  };

  return async (event) => {
    const records = event.Records ?? [];
    if (records.length === 0) return { batchItemFailures: [], shard: null, records: 0, objects: 0 };
    const first = records[0]!;
    const lastRecord = records[records.length - 1]!;
    const shardId = first.eventID.split(':')[0] ?? 'shard';
    for (const [i, r] of records.entries()) {
      const s = r.eventID?.split(':')[0];
      if (s !== shardId)
        throw new CdcError(
          'INVALID_ARCHIVE_BATCH',
          `Records[${i}].eventID ${JSON.stringify(r.eventID)} is not of shard ${shardId}: an archive batch must hold one shard's records in order`,
        );
      if (i > 0 && compareSequenceNumbers(records[i - 1]!.kinesis.sequenceNumber, r.kinesis.sequenceNumber) >= 0) {
        throw new CdcError(
          'INVALID_ARCHIVE_BATCH',
          `Records[${i}].kinesis.sequenceNumber ${r.kinesis.sequenceNumber} does not follow ${records[i - 1]!.kinesis.sequenceNumber}: an archive batch must be in shard order`,
        );
      }
    }
    const at = new Date(first.kinesis.approximateArrivalTimestamp * 1000);
    // One event per line: an aggregate's events each on their own (contracts/change-log-record.ts); an
    // aggregate put for another shard is skipped (its events were put again on theirs); a corrupt one is kept whole, as base64.
    const texts: string[] = [];
    for (const r of records) {
      const u = unpackChangeLogRecord(Buffer.from(r.kinesis.data, 'base64'), r.kinesis.partitionKey, shardId, `${shardId}/${r.kinesis.sequenceNumber}`);
      if (u.kind === 'events') texts.push(...u.texts);
      else if (u.kind === 'invalid') texts.push(r.kinesis.data);
    }
    const firstSeq = first.kinesis.sequenceNumber;
    const lastSeq = lastRecord.kinesis.sequenceNumber;
    if (layout === 'batch') {
      await archive.put(archiveKey(prefix, name, at, shardId, firstSeq, lastSeq), texts.map((t) => `${t}\n`).join(''));
      return { batchItemFailures: [], shard: shardId, records: records.length, objects: 1 };
    }
    const groups = new Map<string, string[]>();
    for (const t of texts) {
      const f = folderOf(t);
      const g = groups.get(f);
      if (g) g.push(`${t}\n`);
      else groups.set(f, [`${t}\n`]);
    }
    const prev = await previous(shardId, firstSeq);
    // Table objects first, the marker last: a marker proves its batch's table objects are stored,
    // and records their SHA-256, which a replay checks every object against (lambda/core/rebuild/archive-digest.ts).
    const bodies = [...groups].map(([folder, lines]) => [folder, lines.join('')] as const);
    await Promise.all(bodies.map(([folder, body]) => archive.put(archiveKey(`${prefix}${folder}`, name, at, shardId, firstSeq, lastSeq), body)));
    const tables = Object.fromEntries([...groups].map(([folder, lines]) => [folder, lines.length]));
    const digests = Object.fromEntries(bodies.map(([folder, body]) => [folder, archiveDigest(body)]));
    const marker = markerKey(shardId, firstSeq, lastSeq, prev);
    await archive.put(`${prefix}${marker}`, JSON.stringify({ shard: shardId, firstSeq, lastSeq, prevSeq: prev, records: records.length, tables, digests }));
    const written = parseMarker(marker)!;
    // The head only saves listing; a stale one (a crash before this put) is corrected by the listing after it.
    if (!soleWriter) await archive.put(headKey(shardId), `${prefix}${marker}`);
    last.set(shardId, written);
    return { batchItemFailures: [], shard: shardId, records: records.length, objects: groups.size };
  };
}
