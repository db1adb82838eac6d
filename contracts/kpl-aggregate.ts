/**
 * The Kinesis Producer Library's aggregated record format (docs/architecture.md, "5.1 The change
 * event"): many user records in one Kinesis record, the format Firehose and the KCL de-aggregate.
 * In contracts/ because both the handlers and the package's exported reader (lib/change-log-records.ts) use it.
 *
 * Layout: the magic bytes F3 89 9A C2, then the protobuf message
 *   AggregatedRecord { repeated string partition_key_table = 1; repeated string explicit_hash_key_table = 2; repeated Record records = 3; }
 *   Record { required uint64 partition_key_index = 1; optional uint64 explicit_hash_key_index = 2; required bytes data = 3; repeated Tag tags = 4; }
 *   Tag { required string key = 1; optional string value = 2; }
 * then the 16-byte MD5 of the protobuf bytes. A record without the magic is a plain single record
 * (a change event's JSON starts with `{`). Hand-written protobuf: varints and length-delimited
 * fields only; unknown fields are skipped by wire type, as protobuf readers do.
 */
import { createHash } from 'node:crypto';

export const KPL_MAGIC = Buffer.from([0xf3, 0x89, 0x9a, 0xc2]);
const DIGEST_BYTES = 16;

/** One user record of an aggregate. */
export interface UserRecord {
  partitionKey: string;
  /** The explicit hash key the record was written with, if any. */
  explicitHashKey?: string;
  data: Buffer;
}

/** An aggregate as decoded: its user records in order. */
export interface DecodedAggregate {
  records: UserRecord[];
}

/** Bytes that start with the magic but are not a whole, intact aggregate. Nothing of it is used. */
export class AggregateFormatError extends Error {
  readonly code = 'INVALID_AGGREGATE';
  constructor(
    readonly where: string,
    readonly reason: string,
  ) {
    super(`${where}: not a valid KPL aggregated record: ${reason}`);
    this.name = 'AggregateFormatError';
  }
}

/** Whether a Kinesis record's data is a KPL aggregate (starts with the magic bytes). */
export function isAggregate(data: Uint8Array): boolean {
  return data.length >= 4 && data[0] === 0xf3 && data[1] === 0x89 && data[2] === 0x9a && data[3] === 0xc2;
}

function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

class Writer {
  readonly buf: Buffer;
  at = 0;
  constructor(size: number) {
    this.buf = Buffer.allocUnsafe(size);
  }
  varint(n: number): void {
    while (n >= 0x80) {
      this.buf[this.at++] = (n & 0x7f) | 0x80;
      n = Math.floor(n / 128);
    }
    this.buf[this.at++] = n;
  }
  bytes(field: number, b: Uint8Array): void {
    this.varint((field << 3) | 2);
    this.varint(b.length);
    this.buf.set(b, this.at);
    this.at += b.length;
  }
}

/** The bytes of a length-delimited field: tag, length, body. */
function fieldSize(field: number, length: number): number {
  return varintSize((field << 3) | 2) + varintSize(length) + length;
}

/**
 * The size in bytes one more user record adds to an aggregate, given the indexes of its keys (a
 * new key adds its table entry too: `newKeyBytes`). The producer bounds aggregates with it.
 */
export function userRecordSize(dataBytes: number, partitionKeyIndex: number, explicitHashKeyIndex: number | null): number {
  let inner = 1 + varintSize(partitionKeyIndex) + fieldSize(3, dataBytes);
  if (explicitHashKeyIndex !== null) inner += 1 + varintSize(explicitHashKeyIndex);
  return fieldSize(3, inner);
}

/** The bytes a new partition-key (or explicit-hash-key) table entry adds. */
export function keyTableEntrySize(key: string): number {
  return fieldSize(1, Buffer.byteLength(key, 'utf8'));
}

/** The fixed bytes around the protobuf message: magic and MD5. */
export const AGGREGATE_OVERHEAD = KPL_MAGIC.length + DIGEST_BYTES;

/**
 * Encodes user records as one KPL aggregate, in order. Keys are interned in the partition-key and
 * explicit-hash-key tables in the order first seen (what the KPL does).
 */
export function encodeAggregate(records: ReadonlyArray<{ partitionKey: string; explicitHashKey?: string; data: Uint8Array }>): Buffer {
  const pks = new KeyTable(1);
  const ehks = new KeyTable(2);
  const idx: Array<[number, number | null]> = [];
  let size = 0;
  for (const r of records) {
    const p = pks.indexOf(r.partitionKey);
    const e = r.explicitHashKey === undefined ? null : ehks.indexOf(r.explicitHashKey);
    idx.push([p, e]);
    size += userRecordSize(r.data.length, p, e);
  }
  size += pks.size + ehks.size;
  const w = new Writer(KPL_MAGIC.length + size + DIGEST_BYTES);
  w.buf.set(KPL_MAGIC, 0);
  w.at = KPL_MAGIC.length;
  for (const b of pks.bytes) w.bytes(1, b);
  for (const b of ehks.bytes) w.bytes(2, b);
  for (let i = 0; i < records.length; i++) {
    const r = records[i]!;
    const [p, e] = idx[i]!;
    let inner = 1 + varintSize(p) + fieldSize(3, r.data.length);
    if (e !== null) inner += 1 + varintSize(e);
    w.varint((3 << 3) | 2);
    w.varint(inner);
    w.varint((1 << 3) | 0);
    w.varint(p);
    if (e !== null) {
      w.varint((2 << 3) | 0);
      w.varint(e);
    }
    w.bytes(3, r.data);
  }
  const digest = createHash('md5').update(w.buf.subarray(KPL_MAGIC.length, w.at)).digest();
  w.buf.set(digest, w.at);
  return w.buf;
}

/** One of an aggregate's key tables (field 1: partition keys, field 2: explicit hash keys): each key once, in the order first seen. */
class KeyTable {
  readonly bytes: Buffer[] = [];
  /** Bytes of the table's fields in the message. */
  size = 0;
  private readonly index = new Map<string, number>();

  constructor(private readonly field: number) {}

  /** The key's index in the table, added when first seen. */
  indexOf(key: string): number {
    let i = this.index.get(key);
    if (i === undefined) {
      i = this.bytes.length;
      this.index.set(key, i);
      const b = Buffer.from(key, 'utf8');
      this.bytes.push(b);
      this.size += fieldSize(this.field, b.length);
    }
    return i;
  }
}

class Reader {
  at: number;
  constructor(
    readonly buf: Buffer,
    start: number,
    readonly end: number,
    readonly where: string,
  ) {
    this.at = start;
  }
  varint(what: string): number {
    let n = 0;
    let scale = 1;
    for (let i = 0; i < 10; i++) {
      if (this.at >= this.end) throw new AggregateFormatError(this.where, `truncated inside ${what} (a varint runs past the end)`);
      const b = this.buf[this.at++]!;
      n += (b & 0x7f) * scale;
      if (b < 0x80) {
        if (n > Number.MAX_SAFE_INTEGER) throw new AggregateFormatError(this.where, `${what} is ${n}, too large`);
        return n;
      }
      scale *= 128;
    }
    throw new AggregateFormatError(this.where, `${what}: a varint longer than 10 bytes`);
  }
  slice(what: string): Buffer {
    const n = this.varint(`the length of ${what}`);
    if (this.at + n > this.end) throw new AggregateFormatError(this.where, `truncated: ${what} declares ${n} bytes, ${this.end - this.at} remain`);
    const b = this.buf.subarray(this.at, this.at + n);
    this.at += n;
    return b;
  }
  skip(wire: number, what: string): void {
    if (wire === 0) this.varint(what);
    else if (wire === 2) this.slice(what);
    else if (wire === 1 || wire === 5) {
      const n = wire === 1 ? 8 : 4;
      if (this.at + n > this.end) throw new AggregateFormatError(this.where, `truncated inside ${what}`);
      this.at += n;
    } else throw new AggregateFormatError(this.where, `${what} has wire type ${wire}, which protobuf does not define here`);
  }
}

/**
 * Decodes a KPL aggregate (data that starts with the magic). Refuses, with `AggregateFormatError`
 * naming `where` and what is wrong, a checksum that does not match or a truncated or malformed message.
 */
export function decodeAggregate(data: Uint8Array, where: string): DecodedAggregate {
  const buf = Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength);
  if (!isAggregate(buf)) throw new AggregateFormatError(where, 'it does not start with the magic bytes F3 89 9A C2');
  if (buf.length < AGGREGATE_OVERHEAD) throw new AggregateFormatError(where, `truncated: ${buf.length} bytes, fewer than the magic and the 16-byte MD5`);
  const end = buf.length - DIGEST_BYTES;
  const digest = createHash('md5').update(buf.subarray(KPL_MAGIC.length, end)).digest();
  if (!digest.equals(buf.subarray(end))) throw new AggregateFormatError(where, 'the MD5 checksum does not match the message (corrupt or truncated)');
  const r = new Reader(buf, KPL_MAGIC.length, end, where);
  const pks: string[] = [];
  const ehks: string[] = [];
  const raw: Array<{ p: number; e: number | null; data: Buffer; at: number }> = [];
  while (r.at < end) {
    const tag = r.varint('a field tag');
    const field = Math.floor(tag / 8);
    const wire = tag & 7;
    if (field === 1 && wire === 2) pks.push(r.slice('a partition key').toString('utf8'));
    else if (field === 2 && wire === 2) ehks.push(r.slice('an explicit hash key').toString('utf8'));
    else if (field === 3 && wire === 2) {
      const body = r.slice(`record ${raw.length}`);
      const inner = new Reader(buf, body.byteOffset - buf.byteOffset, body.byteOffset - buf.byteOffset + body.length, where);
      let p: number | null = null;
      let e: number | null = null;
      let d: Buffer | null = null;
      while (inner.at < inner.end) {
        const t = inner.varint(`a field tag of record ${raw.length}`);
        const f = Math.floor(t / 8);
        const w = t & 7;
        if (f === 1 && w === 0) p = inner.varint(`record ${raw.length}'s partition_key_index`);
        else if (f === 2 && w === 0) e = inner.varint(`record ${raw.length}'s explicit_hash_key_index`);
        else if (f === 3 && w === 2) d = inner.slice(`record ${raw.length}'s data`);
        else inner.skip(w, `field ${f} of record ${raw.length}`);
      }
      if (p === null) throw new AggregateFormatError(where, `record ${raw.length} has no partition_key_index (required)`);
      if (d === null) throw new AggregateFormatError(where, `record ${raw.length} has no data (required)`);
      raw.push({ p, e, data: d, at: raw.length });
    } else r.skip(wire, `field ${field} of the aggregate`);
  }
  const records = raw.map(({ p, e, data: d, at }): UserRecord => {
    const partitionKey = pks[p];
    if (partitionKey === undefined) throw new AggregateFormatError(where, `record ${at}'s partition_key_index ${p} is outside the table of ${pks.length} keys`);
    if (e === null) return { partitionKey, data: d };
    const explicitHashKey = ehks[e];
    if (explicitHashKey === undefined)
      throw new AggregateFormatError(where, `record ${at}'s explicit_hash_key_index ${e} is outside the table of ${ehks.length} keys`);
    return { partitionKey, explicitHashKey, data: d };
  });
  return { records };
}

/** The user records' data of a Kinesis record: the aggregate's records in order, or the record itself when it is plain. */
export function deaggregate(data: Uint8Array, where: string): Buffer[] {
  if (!isAggregate(data)) return [Buffer.isBuffer(data) ? data : Buffer.from(data.buffer, data.byteOffset, data.byteLength)];
  return decodeAggregate(data, where).records.map((r) => r.data);
}
