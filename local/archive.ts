/**
 * The change-log archive on one machine: one interface, two stores (a folder, or an S3 API such
 * as s3rver), and the copier that stands in for Kinesis Data Firehose (change log → archive).
 *
 * Objects use Firehose's layout: `<prefix>YYYY/MM/DD/HH/<name>-YYYY-MM-DD-HH-MM-SS-<id>`, UTC,
 * newline-delimited records (Firehose with a newline delimiter appended to each record). The
 * object id is derived from the shard and the sequence numbers it holds, so a batch copied again
 * after a crash overwrites the same object instead of duplicating it.
 */
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand, CreateBucketCommand, HeadBucketCommand, type S3Client } from '@aws-sdk/client-s3';
import type { KinesisStreamEvent } from 'aws-lambda';
import { LocalConfigError } from './errors.ts';
import { PayloadRefError, type PayloadStore } from '../lambda/core/payload-store.ts';
import { MARKER_FOLDER, OTHER_FOLDER, markerKey, parseMarker, tableFolder, type ArchiveLayout } from '../lambda/core/replay.ts';
import { compareSequenceNumbers } from '../lambda/core/apply-plan.ts';

/** Where archived change-log objects are kept. */
export interface Archive {
  /** Stores an object (replacing one with the same key). Durable when it resolves. */
  put(key: string, body: string | Buffer): Promise<void>;
  get(key: string): Promise<Buffer>;
  /** Every key under a prefix, sorted. */
  list(prefix?: string): Promise<string[]>;
  /** Human-readable location (`folder <path>` or `s3://bucket/prefix`). */
  readonly location: string;
}

const KEY_RE = /^[A-Za-z0-9!_.*'()\-/]+$/;

function checkKey(key: string): void {
  if (!KEY_RE.test(key) || key.startsWith('/') || key.split('/').some((p) => p === '' || p === '.' || p === '..')) {
    throw new LocalConfigError(`archive key ${JSON.stringify(key)} is not a safe relative object key`);
  }
}

/** An archive in a local folder: keys are relative paths; writes go through a temp file and a rename. */
export class FolderArchive implements Archive {
  constructor(readonly root: string) {}

  get location(): string {
    return `folder ${this.root}`;
  }

  async put(key: string, body: string | Buffer): Promise<void> {
    checkKey(key);
    const file = path.join(this.root, key);
    await fs.mkdir(path.dirname(file), { recursive: true });
    const tmp = `${file}.tmp-${process.pid}`;
    const handle = await fs.open(tmp, 'w');
    try {
      await handle.writeFile(body);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.rename(tmp, file);
  }

  async get(key: string): Promise<Buffer> {
    checkKey(key);
    return fs.readFile(path.join(this.root, key));
  }

  async list(prefix = ''): Promise<string[]> {
    const out: string[] = [];
    const walk = async (dir: string, rel: string): Promise<void> => {
      let entries;
      try {
        entries = await fs.readdir(dir, { withFileTypes: true });
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
        throw err;
      }
      for (const e of entries) {
        const r = rel ? `${rel}/${e.name}` : e.name;
        if (e.isDirectory()) await walk(path.join(dir, e.name), r);
        else if (!e.name.includes('.tmp-') && r.startsWith(prefix)) out.push(r);
      }
    };
    await walk(this.root, '');
    return out.sort();
  }
}

/** An archive in an S3 bucket (real S3, or s3rver locally: path-style, checksums only when required). */
export class S3Archive implements Archive {
  constructor(
    private readonly s3: S3Client,
    readonly bucket: string,
    readonly prefix = '',
  ) {}

  get location(): string {
    return `s3://${this.bucket}/${this.prefix}`;
  }

  /** Creates the bucket if it does not exist. */
  async ensureBucket(): Promise<void> {
    try {
      await this.s3.send(new HeadBucketCommand({ Bucket: this.bucket }));
    } catch {
      await this.s3.send(new CreateBucketCommand({ Bucket: this.bucket }));
    }
  }

  async put(key: string, body: string | Buffer): Promise<void> {
    checkKey(key);
    await this.s3.send(new PutObjectCommand({ Bucket: this.bucket, Key: this.prefix + key, Body: typeof body === 'string' ? Buffer.from(body) : body }));
  }

  async get(key: string): Promise<Buffer> {
    checkKey(key);
    const out = await this.s3.send(new GetObjectCommand({ Bucket: this.bucket, Key: this.prefix + key }));
    return Buffer.from(await out.Body!.transformToByteArray());
  }

  async list(prefix = ''): Promise<string[]> {
    const keys: string[] = [];
    let token: string | undefined;
    do {
      const out = await this.s3.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: this.prefix + prefix, ContinuationToken: token }));
      for (const o of out.Contents ?? []) if (o.Key) keys.push(o.Key.slice(this.prefix.length));
      token = out.IsTruncated ? out.NextContinuationToken : undefined;
    } while (token);
    return keys.sort();
  }
}

/**
 * The payload store (dead letters' whole records, events stored out of line; docs/large-records.md)
 * through the archive interface: a folder or s3rver locally, under `payloads/`. References are
 * `archive:<key>`.
 */
export function archivePayloadStore(archive: Archive, prefix = 'payloads/'): PayloadStore {
  return {
    async put(key, body) {
      await archive.put(prefix + key, body);
      return `archive:${prefix}${key}`;
    },
    async get(ref) {
      if (!ref.startsWith(`archive:${prefix}`)) throw new PayloadRefError(ref, `is not an archive:${prefix} reference`);
      return archive.get(ref.slice('archive:'.length));
    },
  };
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

export interface ArchiveCopierOptions {
  archive: Archive;
  /** Key prefix, like Firehose's S3 prefix. @default 'change-log/' */
  prefix?: string;
  /** Object name part, like Firehose's delivery stream name. @default 'change-log' */
  name?: string;
  /**
   * `batch`: one object per batch (Firehose's default layout). `by-table`: one object per table
   * of the batch plus a batch marker written last (lambda/core/replay.ts; docs/rebuild.md), so a
   * per-table replay reads only its table's objects and can prove no batch is missing.
   * @default 'batch'
   */
  layout?: ArchiveLayout;
}

const SAFE_PART = /^[A-Za-z0-9_.]+$/;

/** The by-table folder a record goes to: its table's, or `_other` when it names none (not JSON, no source or table). */
function folderOf(text: string): string {
  try {
    const v = JSON.parse(text) as { source?: unknown; table?: unknown };
    if (typeof v.source === 'string' && typeof v.table === 'string' && SAFE_PART.test(v.source) && SAFE_PART.test(v.table)) return tableFolder(v.source, v.table);
  } catch {
    // not JSON: kept under _other
  }
  return OTHER_FOLDER;
}

/**
 * The Firehose stand-in as a stream handler: writes each batch of change-log records as one
 * newline-delimited object (records in shard order) and returns only when it is stored, so the
 * poller checkpoints after the object is durable. Run it under its own poller (consumer
 * `archive`) with a batching window to get Firehose-like buffering.
 */
export function createArchiveCopier(options: ArchiveCopierOptions): (event: KinesisStreamEvent) => Promise<{ batchItemFailures: [] }> {
  const prefix = options.prefix ?? 'change-log/';
  const name = options.name ?? 'change-log';
  const layout = options.layout ?? 'batch';
  /** Per shard: the last sequence number archived by this copier (by-table layout's chain). */
  const last = new Map<string, string | null>();
  /** The last batch archived before `firstSeq` in the shard, from the markers (after a restart), or null. */
  const previous = async (shardId: string, firstSeq: string): Promise<string | null> => {
    const known = last.get(shardId);
    if (known !== undefined && (known === null || compareSequenceNumbers(known, firstSeq) < 0)) return known;
    let prev: string | null = null;
    for (const k of await options.archive.list(`${prefix}${MARKER_FOLDER}${shardId}/`)) {
      const m = parseMarker(k.slice(prefix.length));
      // The last batch that ended before this one starts (a batch copied again with more records overlaps; it does not count).
      if (m && compareSequenceNumbers(m.lastSeq, firstSeq) < 0 && (prev === null || compareSequenceNumbers(m.lastSeq, prev) > 0)) prev = m.lastSeq;
    }
    return prev;
  };
  return async (event) => {
    const records = event.Records;
    if (records.length === 0) return { batchItemFailures: [] };
    const first = records[0]!;
    const lastRecord = records[records.length - 1]!;
    const shardId = first.eventID.split(':')[0] ?? 'shard';
    const at = new Date(first.kinesis.approximateArrivalTimestamp * 1000);
    const texts = records.map((r) => Buffer.from(r.kinesis.data, 'base64').toString('utf8'));
    const firstSeq = first.kinesis.sequenceNumber;
    const lastSeq = lastRecord.kinesis.sequenceNumber;
    if (layout === 'batch') {
      await options.archive.put(archiveKey(prefix, name, at, shardId, firstSeq, lastSeq), texts.map((t) => `${t}\n`).join(''));
      return { batchItemFailures: [] };
    }
    const groups = new Map<string, string[]>();
    for (const t of texts) {
      const f = folderOf(t);
      const g = groups.get(f);
      if (g) g.push(`${t}\n`);
      else groups.set(f, [`${t}\n`]);
    }
    const prev = await previous(shardId, firstSeq);
    // Table objects first, the marker last: a marker proves its batch's table objects are stored.
    await Promise.all([...groups].map(([folder, lines]) => options.archive.put(archiveKey(`${prefix}${folder}`, name, at, shardId, firstSeq, lastSeq), lines.join(''))));
    const tables = Object.fromEntries([...groups].map(([folder, lines]) => [folder, lines.length]));
    await options.archive.put(`${prefix}${markerKey(shardId, firstSeq, lastSeq, prev)}`, JSON.stringify({ shard: shardId, firstSeq, lastSeq, prevSeq: prev, records: records.length, tables }));
    last.set(shardId, lastSeq);
    return { batchItemFailures: [] };
  };
}
