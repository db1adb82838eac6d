/**
 * Snapshot: onboarding rows that existed before capture started (docs/snapshot.md). Pure logic:
 * chunk planning by keyset pagination, the position a chunk row gets (the stitching rule),
 * snapshot records with the same column rules as the stream path, the snapshot's control-plane
 * records, and progress (rows, rate, ETA).
 *
 * Stitching in one paragraph (the argument is in docs/snapshot.md): before each chunk the reader
 * takes a *low watermark* L0 (`pg_current_wal_insert_lsn()`), then assigns itself a transaction
 * id X (`pg_current_xact_id()`), commits, and waits until no transaction with an id ≤ X is still
 * running (`pg_snapshot_xmin(pg_current_snapshot()) > X`); only then does it read the chunk in a
 * fresh REPEATABLE READ snapshot S. Every transaction whose commit record lies before L0 in the
 * WAL had its id before X and has therefore finished: it is visible to S. Every transaction not
 * visible to S has a commit record after L0. A chunk row gets the position just below L0
 * (`snapshotPosition`), so it sorts after every change before L0 (all visible to the read) and
 * loses to every change after L0 (which includes every change the read did not see); the sinks'
 * position guard (invariant 2) does the rest, whatever the order records arrive in and whatever
 * shard they travel on. No watermark has to travel through the stream, so the method works the
 * same on the local slot capture and on DMS.
 */
import { CdcError } from '../shared/errors.ts';
import { partitionKeyOf, type JsonValue, type Row } from '../shared/event.ts';
import { quoteIdent, splitTableId } from '../shared/identifiers.ts';
import { applyColumnRules, applyColumnRulesToColumns, maskValue, type ColumnRules } from '../tables/masking.ts';
import { formatLsn, makePosition, parseLsn, type Position } from '../shared/position.ts';
import {
  buildSlotRecord,
  SLOT_RECORD_FORMAT,
  type PackedColumn,
  type PackedSnapshotRecord,
  type SlotColumn,
  type SlotOp,
  type SlotRecord,
} from '../capture/slot-record.ts';
import { unquotedLiteralValue } from '../capture/logical-text.ts';
import type { KeyCursor, SnapshotReason, SnapshotState, SnapshotChunkRecord } from './snapshot-state.ts';
export type { KeyCursor, SnapshotReason, SnapshotStatus, ThrottleState, SnapshotState, SnapshotChunkRecord } from './snapshot-state.ts';

// ---------------------------------------------------------------------------------------------
// Errors

/** A chunk could not be read because older transactions kept running past the fence timeout. */
export class SnapshotFenceTimeoutError extends CdcError {
  constructor(
    readonly table: string,
    readonly oldestXid: string | null,
    waitedMs: number,
  ) {
    super(
      'SNAPSHOT_FENCE_TIMEOUT',
      `${table}: a chunk waited ${Math.round(waitedMs / 1000)} s for transactions older than its fence to finish (oldest still running: ${oldestXid ?? 'unknown'}); ` +
        'the chunk was not read and will be retried. Find long-running transactions in pg_stat_activity (backend_xid) and end them, or raise the fence timeout.',
    );
  }
}

/** A snapshot request that is refused (another one is running, the table is unknown, …). */
export class SnapshotRefusedError extends CdcError {
  constructor(
    readonly table: string,
    reason: string,
  ) {
    super('SNAPSHOT_REFUSED', `${table}: ${reason}`);
  }
}

/** A bootstrap from a trusted copy is refused: the log does not reach back to the copy's position. */
export class BootstrapGapError extends CdcError {
  constructor(
    readonly table: string,
    readonly copyPosition: string,
    readonly logStart: string,
  ) {
    super(
      'BOOTSTRAP_GAP',
      `${table}: the copy represents the source at ${copyPosition}, but the change log starts at ${logStart}; changes between them exist in neither the copy nor the log. ` +
        'Take a newer copy (at or after the log start) or snapshot the table instead.',
    );
  }
}

/** The table cannot be snapshotted as configured (no primary key, unsupported key type, …). */
export class SnapshotTableError extends CdcError {
  constructor(
    readonly table: string,
    reason: string,
  ) {
    super('SNAPSHOT_TABLE_UNSUPPORTED', `${table}: ${reason}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Table shape and chunk planning

/** One column as the chunk reader sees it: name, type as test_decoding prints it (`format_type(oid, NULL)`), type oid. */
export interface SnapshotColumn {
  name: string;
  type: string;
  typeOid: number;
  /**
   * The type with its modifiers (`format_type(oid, typmod)`: `character varying(40)`), as the
   * capture registers it (docs/schema-drift.md); the records carry this one. @default type
   */
  fullType?: string;
}

export interface SnapshotTableShape {
  /** `schema.table` */
  table: string;
  /** Columns in table order. */
  columns: SnapshotColumn[];
  /** Primary-key columns in key order. */
  key: string[];
}

/**
 * The chunk query: the next `limit` rows in primary-key order strictly after `startAfter`
 * (keyset pagination, composite keys as a row comparison, which the primary-key index serves).
 * Key values are parameters in their printed text, so they round-trip exactly through the
 * column's input function (numerics, timestamps, text under any collation: `>` and `ORDER BY`
 * use the same collation).
 */
export function chunkQuery(shape: SnapshotTableShape, startAfter: KeyCursor | null, limit: number): { text: string; values: string[] } {
  return { text: chunkSelect(shape, startAfter, limit, (i) => `$${i + 1}`), values: startAfter ?? [] };
}

function chunkSelect(shape: SnapshotTableShape, startAfter: KeyCursor | null, limit: number, param: (i: number) => string): string {
  if (shape.key.length === 0) throw new SnapshotTableError(shape.table, 'has no primary key; a snapshot reads in primary-key order');
  if (!Number.isInteger(limit) || limit < 1) throw new CdcError('INVALID_ARGUMENT', `chunk limit must be a positive integer, got ${limit}`);
  if (startAfter !== null && startAfter.length !== shape.key.length) {
    throw new CdcError('INVALID_ARGUMENT', `${shape.table}: cursor has ${startAfter.length} values, the key has ${shape.key.length} columns`);
  }
  const { schema, table } = splitTableId(shape.table);
  const cols = shape.columns.map((c) => quoteIdent(c.name)).join(', ');
  const key = shape.key.map(quoteIdent);
  const keyTuple = key.length === 1 ? key[0]! : `(${key.join(', ')})`;
  let where = '';
  if (startAfter !== null) {
    const params = shape.key.map((_, i) => param(i));
    where = ` WHERE ${keyTuple} > ${params.length === 1 ? params[0]! : `(${params.join(', ')})`}`;
  }
  return `SELECT ${cols} FROM ${quoteIdent(schema)}.${quoteIdent(table)}${where} ORDER BY ${key.join(', ')} LIMIT ${limit}`;
}

/** A key value as a string literal that reads the same whatever `standard_conforming_strings` is (`E'…'`, quotes and backslashes doubled). */
function keyLiteral(text: string): string {
  return `E'${text.replaceAll('\\', '\\\\').replaceAll("'", "''")}'`;
}

/**
 * The chunk query as one `COPY (…) TO STDOUT` statement (text format): the same keyset query as
 * `chunkQuery`, with the cursor's key values inlined as string literals (COPY takes no
 * parameters; an untyped literal resolves to the key column's type and goes through its input
 * function, exactly like a text parameter). The reader streams the chunk this way: the server
 * writes each value's output text once and the client splits lines instead of decoding one
 * protocol message per row (docs/snapshot.md, "Speed").
 */
export function chunkCopyQuery(shape: SnapshotTableShape, startAfter: KeyCursor | null, limit: number): string {
  return `COPY (${chunkSelect(shape, startAfter, limit, (i) => keyLiteral(startAfter![i]!))}) TO STDOUT`;
}

const COPY_ESCAPES: Record<string, string> = { b: '\b', f: '\f', n: '\n', r: '\r', t: '\t', v: '\v' };

/**
 * Undoes COPY's text-format escaping of one field: `\\b \\f \\n \\r \\t \\v`, and a backslash before
 * any other character stands for that character (`\\\\`). COPY TO never writes octal or hex
 * escapes (PostgreSQL's COPY documentation, "Text Format").
 */
function copyUnescape(field: string): string {
  return field.replace(/\\(.)/gs, (_, ch: string) => COPY_ESCAPES[ch] ?? ch);
}

/**
 * Parses `COPY … TO STDOUT` text-format output (rows end with a newline, fields separated by
 * tabs, `\N` for null, backslash escapes) into rows of `columns` values, each the type's output
 * text or null: the same values a text-mode SELECT returns. Throws naming the row when a row has
 * another number of fields.
 */
export function parseCopyText(text: string, columns: number, what = 'COPY output'): (string | null)[][] {
  if (text === '') return [];
  if (!text.endsWith('\n')) throw new CdcError('INVALID_ARGUMENT', `${what}: does not end with a newline (truncated?)`);
  const lines = text.split('\n');
  lines.pop();
  const out: (string | null)[][] = new Array(lines.length);
  for (let i = 0; i < lines.length; i++) {
    const fields: (string | null)[] = lines[i]!.split('\t');
    if (fields.length !== columns) throw new CdcError('INVALID_ARGUMENT', `${what}: row ${i + 1} has ${fields.length} fields, expected ${columns}`);
    for (let j = 0; j < fields.length; j++) {
      const f = fields[j] as string;
      if (f === '\\N') fields[j] = null;
      else if (f.includes('\\')) fields[j] = copyUnescape(f);
    }
    out[i] = fields;
  }
  return out;
}

/**
 * A chunk read whose rows are `text`, COPY text-format output of `columns` fields per row:
 * `copyText` is the text and `rows` is parsed from it (`parseCopyText`, errors named `what`)
 * the first time it is read, then kept. Throws now if the text is not whole lines.
 */
export function copyChunkRead(read: Omit<ChunkRead, 'rows' | 'copyText'>, text: string, columns: number, what: string): ChunkRead {
  if (text !== '' && !text.endsWith('\n')) throw new CdcError('INVALID_ARGUMENT', `${what}: does not end with a newline (truncated?)`);
  let rows: (string | null)[][] | null = null;
  return {
    ...read,
    copyText: text,
    get rows() {
      return (rows ??= parseCopyText(text, columns, what));
    },
  };
}

/** How many rows a chunk read holds (counted in its COPY text when it has one, without parsing it). */
export function chunkRowCount(read: Pick<ChunkRead, 'rows' | 'copyText'>): number {
  const text = read.copyText;
  if (text === undefined) return read.rows.length;
  let n = 0;
  for (let at = text.indexOf('\n'); at >= 0; at = text.indexOf('\n', at + 1)) n++;
  return n;
}

/** `cursorAfter` of a chunk read (from the last line of its COPY text when it has one, without parsing the rest). */
export function chunkEndKey(shape: SnapshotTableShape, read: Pick<ChunkRead, 'rows' | 'copyText'>): KeyCursor | null {
  const text = read.copyText;
  if (text === undefined) return cursorAfter(shape, read.rows);
  if (text === '') return null;
  // The newline before the last line's own (none when the text is one line: a lone "\n" is one
  // row whose single column is the empty string, and lastIndexOf(…, -1) would find that newline).
  const start = text.length < 2 ? 0 : text.lastIndexOf('\n', text.length - 2) + 1;
  return cursorAfter(shape, parseCopyText(text.slice(start), shape.columns.length, `${shape.table} chunk (last row)`));
}

/** The cursor after a chunk: the key of its last row (null for an empty chunk: nothing moved). */
export function cursorAfter(shape: SnapshotTableShape, rows: readonly (string | null)[][]): KeyCursor | null {
  const last = rows[rows.length - 1];
  if (!last) return null;
  return shape.key.map((k) => {
    const i = shape.columns.findIndex((c) => c.name === k);
    const v = last[i];
    if (v === null || v === undefined) throw new SnapshotTableError(shape.table, `primary-key column ${k} is null in a chunk row`);
    return v;
  });
}

// ---------------------------------------------------------------------------------------------
// Positions

/**
 * The position of every row of a chunk whose low watermark is `lowWatermark` (`X/Y`): the
 * highest position whose commit LSN is below the watermark. A change whose commit record starts
 * at or after the watermark has a commit LSN ≥ the watermark (whether a capture reports the
 * start or the end of the commit record), so it compares greater and wins over the chunk row.
 */
export function snapshotPosition(lowWatermark: string): Position {
  const l0 = parseLsn(lowWatermark, 'lowWatermark');
  return l0 === 0n ? makePosition(0n, 0) : makePosition(l0 - 1n, 0xffffffff);
}

/**
 * The position of a re-snapshot's sweep (docs/snapshot.md, "Re-snapshot"): just below the
 * position of the run's first chunk rows (`snapshotPosition(firstLowWatermark)`), so it sorts
 * above every change committed before the run's first low watermark and below every row and
 * change the run or the stream delivers after it.
 */
export function sweepPosition(firstLowWatermark: string): Position {
  const l0 = parseLsn(firstLowWatermark, 'firstLowWatermark');
  if (l0 === 0n) throw new CdcError('INVALID_ARGUMENT', 'a sweep needs a low watermark above 0/0');
  return makePosition(l0 - 1n, 0xfffffffe);
}

/**
 * The record that closes a re-snapshot: a `truncate` of the table at `sweepPosition`, with xid
 * `"0"` like every record the snapshot worker writes (the decoder marks it `capture: "snapshot"`).
 * The sinks already apply a truncate by position (docs/truncate.md): every key they hold below
 * the sweep becomes a tombstone (or is removed in hard-delete mode), and nothing below it writes
 * again. Every key the re-snapshot read, and every change after its first low watermark, is
 * above the sweep and stays. What goes is exactly what the sink still holds from before the
 * run and the source no longer has: keys deleted while history was lost.
 */
export function sweepRecord(sourceId: string, table: string, firstLowWatermark: string, at: string): SlotRecord {
  const position = sweepPosition(firstLowWatermark);
  const commitLsn = formatLsn(BigInt(`0x${position.slice(0, 16)}`));
  const index = Number.parseInt(position.slice(16), 16);
  return buildSlotRecord(
    { source: sourceId, xid: '0', commitLsn, commitTs: at },
    index,
    { table, op: 'truncate', columns: null, oldKey: null, unchanged: [] },
    [],
  );
}

// ---------------------------------------------------------------------------------------------
// Rows to records

const UNQUOTED = new Set([20, 21, 23, 26, 700, 701, 1700]); // int8, int2, int4, oid, float4, float8, numeric
const BOOL = 16;

/**
 * Turns a row as PostgreSQL printed it (each value its type's output text, or null) into the
 * columns the slot capture would have published for the same row. The value of a type that
 * test_decoding prints quoted is its text, unchanged (the capture's parser undoes exactly the
 * quoting), a boolean is `t`/`f`, a bit string its bits; the types it prints unquoted (integers,
 * floats, numeric) are converted by the capture's own conversion (`unquotedLiteralValue`). So a value, and the hash of a masked one, is the same on both paths by
 * construction (`test/local/snapshot.test.ts` compares the two paths on a real PostgreSQL).
 */
export function rowToColumns(shape: SnapshotTableShape, texts: readonly (string | null)[]): SlotColumn[] {
  if (texts.length !== shape.columns.length)
    throw new CdcError('INVALID_ARGUMENT', `${shape.table}: row has ${texts.length} values for ${shape.columns.length} columns`);
  const out: SlotColumn[] = new Array(shape.columns.length);
  for (let i = 0; i < shape.columns.length; i++) {
    const c = shape.columns[i]!;
    out[i] = { name: c.name, type: c.fullType ?? c.type, value: columnValue(shape, c, texts[i]!) };
  }
  return out;
}

/** One value as the slot capture publishes it (see `rowToColumns`, the one conversion both record forms use). */
function columnValue(shape: SnapshotTableShape, c: SnapshotColumn, text: string | null): JsonValue {
  return text === null ? null : valueConverter(shape, c)(text);
}

/** The conversion of one column's non-null output text into its value (see `rowToColumns`). */
function valueConverter(shape: SnapshotTableShape, c: SnapshotColumn): (text: string) => JsonValue {
  // The capture's own conversion of an unquoted test_decoding literal, by the type name test_decoding prints.
  if (UNQUOTED.has(c.typeOid)) {
    const fail = (reason: string) => badValue(shape, c, reason);
    return (text) => unquotedLiteralValue(text, c.type, fail);
  }
  if (c.typeOid === BOOL) return (text) => text === 't';
  return (text) => text;
}

function badValue(shape: SnapshotTableShape, column: SnapshotColumn, reason: string): never {
  throw new SnapshotTableError(shape.table, `column ${column.name} (${column.type}): ${reason}`);
}

/**
 * Applies a table's column rules to a tuple, keeping column order: excluded columns disappear,
 * masked columns carry the hash and the masked type (`applyColumnRulesToColumns`), as on the
 * capture path, so both register the same schema.
 */
export function ruleColumns(columns: SlotColumn[], rules: ColumnRules): SlotColumn[] {
  if (rules.mask.length === 0 && rules.exclude.length === 0) return columns;
  const row: Row = {};
  for (const c of columns) row[c.name] = c.value;
  const out = applyColumnRules(row, rules);
  return applyColumnRulesToColumns(columns, rules).map((c) => ({ ...c, value: out[c.name]! }));
}

/** What one chunk read returned (see `SnapshotReader.readChunk`). */
export interface ChunkRead {
  /** Low watermark `X/Y`, taken before the fence. */
  lowWatermark: string;
  /** The fence's transaction id (decimal text). */
  fenceXid: string;
  /** Rows in key order; each value the type's output text, or null. */
  rows: (string | null)[][];
  /**
   * The same rows as `COPY … TO STDOUT` text-format output, when the reader streamed them that way (the Postgres
   * reader does, `copyChunkRead`): the worker then counts, keys and packs the rows from this text directly
   * (`chunkRowCount`, `chunkEndKey`, `packChunkRecords`), and `rows` is only parsed from it if something reads it.
   */
  copyText?: string;
  /** When the chunk's snapshot was taken (ISO-8601, from the source). */
  readAt: string;
  /** Time spent waiting for older transactions, and reading, ms; and of the read, in round trips (the same at any chunk size; the pacer leaves it out, `rowsTimeMs`; @default 0). */
  fenceWaitMs: number;
  readMs: number;
  roundTripMs?: number;
  /** True when the rows were read from a read replica. */
  fromReplica: boolean;
  /**
   * On a replica: how far it had replayed when the chunk's snapshot was taken (`X/Y`, at or past
   * the low watermark: the fence waited for that) and its replay lag as PostgreSQL estimates it
   * (`now() − pg_last_xact_replay_timestamp()`, ms; it grows while the primary is idle). Null on
   * the primary. @default null
   */
  replayLsn?: string | null;
  replicaLagMs?: number | null;
}

/**
 * The raw records of a chunk in the per-row form (format `cdc-slot/1`, op `snapshot`, one record
 * per row), masked and excluded with the table's column rules, all at the chunk's position. The
 * worker publishes the packed form (`packChunkRecords`); this one is what earlier versions
 * published (still read) and the reference the packed form is checked against. The normalizer turns them into change
 * events with `op: "snapshot"`, `capture: "snapshot"` and the table's current schema version.
 */
export function chunkRecords(
  sourceId: string,
  shape: SnapshotTableShape,
  read: Pick<ChunkRead, 'lowWatermark' | 'rows' | 'readAt'>,
  rules: ColumnRules,
): SlotRecord[] {
  for (const k of shape.key) {
    if (rules.mask.includes(k) || rules.exclude.includes(k))
      throw new SnapshotTableError(shape.table, `primary-key column ${k} is declared mask or exclude; keys are never masked`);
  }
  const position = snapshotPosition(read.lowWatermark);
  const commitLsn = formatLsn(BigInt(`0x${position.slice(0, 16)}`));
  const index = Number.parseInt(position.slice(16), 16);
  const tx = { source: sourceId, xid: '0', commitLsn, commitTs: read.readAt };
  if (read.rows.length === 0) return [];
  // The first record is built and validated like every capture record (`buildSlotRecord`); the
  // others share its fields and differ only in values, which `rowToColumns` produces as JSON by
  // construction, so they are built directly (validating each one cost more than reading it).
  const first = buildSlotRecord(
    tx,
    index,
    { table: shape.table, op: 'snapshot', columns: ruleColumns(rowToColumns(shape, read.rows[0]!), rules), oldKey: null, unchanged: [] },
    shape.key,
  );
  const out: SlotRecord[] = new Array(read.rows.length);
  out[0] = first;
  for (let i = 1; i < read.rows.length; i++) {
    out[i] = {
      format: first.format,
      source: first.source,
      xid: first.xid,
      commitLsn: first.commitLsn,
      commitTs: first.commitTs,
      index: first.index,
      table: first.table,
      op: 'snapshot',
      key: first.key,
      columns: ruleColumns(rowToColumns(shape, read.rows[i]!), rules),
      oldKey: null,
      unchanged: [],
    };
  }
  return out;
}

/**
 * The JSON text of each record of a chunk, byte for byte what `JSON.stringify(record)` gives
 * (the records' field order is fixed by `chunkRecords`), built from a per-chunk template: the
 * fields every record of the chunk shares, and per column its name and type, are encoded once;
 * per record only the values are. A record that does not fit the template (other columns, or
 * other shared fields) is encoded by `JSON.stringify` itself. Encoding every record whole was
 * the largest cost of a snapshot read (docs/performance-log.md, "6. Snapshot").
 */
export function encodeChunkRecords(records: readonly SlotRecord[]): string[] {
  const first = records[0];
  if (!first || first.columns === null) return records.map((r) => JSON.stringify(r));
  const head = JSON.stringify({
    format: first.format,
    source: first.source,
    xid: first.xid,
    commitLsn: first.commitLsn,
    commitTs: first.commitTs,
    index: first.index,
    table: first.table,
    op: first.op,
    key: first.key,
  }).slice(0, -1);
  const columnHeads = first.columns.map((c, i) => `${i === 0 ? '' : ','}${JSON.stringify({ name: c.name, type: c.type }).slice(0, -1)},"value":`);
  const tail = `],"oldKey":null,"unchanged":[]}`;
  const fits = (r: SlotRecord): boolean =>
    r.columns !== null &&
    r.columns.length === first.columns!.length &&
    r.oldKey === null &&
    r.unchanged.length === 0 &&
    r.key === first.key &&
    r.format === first.format &&
    r.source === first.source &&
    r.xid === first.xid &&
    r.commitLsn === first.commitLsn &&
    r.commitTs === first.commitTs &&
    r.index === first.index &&
    r.table === first.table &&
    r.op === first.op &&
    r.columns.every((c, i) => c.name === first.columns![i]!.name && c.type === first.columns![i]!.type && Object.keys(c).length === 3);
  return records.map((r) => {
    if (!fits(r)) return JSON.stringify(r);
    let out = `${head},"columns":[`;
    const cols = r.columns!;
    for (let i = 0; i < cols.length; i++) out += `${columnHeads[i]}${JSON.stringify(cols[i]!.value)}}`;
    return out + tail;
  });
}

/**
 * The raw-stream partition key of a per-row snapshot record: source + table + key, like every
 * record (which shard a snapshot row travels on does not matter: positions order it, not arrival).
 */
export function snapshotPartitionKey(r: SlotRecord, hash: (s: string) => string): string {
  return partitionKeyOf({ source: r.source, table: r.table, key: snapshotRawRecord(r).key }, hash);
}

/**
 * The most bytes of one packed record's JSON: 256 KiB. Well under Kinesis's 1 MiB per record
 * (data + partition key) and its 1 MiB/s write limit per shard (a record of 256 KiB leaves a
 * shard three quarters of its second; consecutive records of a chunk have other partition keys,
 * so they spread over shards); 20 such records fill one PutRecords call (5 MiB, 500 records);
 * the normalizer's Lambda receives a record base64-encoded (~342 KiB) within its 6 MB batch
 * payload; and it amortises the shared fields (a few hundred bytes) over thousands of rows.
 * docs/snapshot.md, "Packed records".
 */
export const PACKED_RECORD_BUDGET = 256 * 1024;

/**
 * A record the snapshot worker publishes: its JSON text (exactly what goes to the raw stream),
 * what it is of, and the key its partition key is made of (a packed record: its first row's).
 */
export interface SnapshotRawRecord {
  data: string;
  source: string;
  table: string;
  op: SlotOp;
  /** Rows it carries (a packed record; 0 for the sweep). */
  rows: number;
  key: Row;
}

/** A per-row record (the sweep) as the worker publishes it. */
export function snapshotRawRecord(r: SlotRecord): SnapshotRawRecord {
  const key: Row = {};
  for (const k of r.key) {
    const c = r.columns?.find((x) => x.name === k);
    if (c) key[k] = c.value;
  }
  return { data: JSON.stringify(r), source: r.source, table: r.table, op: r.op, rows: r.columns === null ? 0 : 1, key };
}

/**
 * The packed records of a chunk (slot-record.ts, "Packed snapshot records"), as JSON text
 * exactly `JSON.stringify` of a `PackedSnapshotRecord`: the rows in key order, each as the array
 * of its values after the table's column rules, with the same conversion (`rowToColumns`'s) and
 * the same masking (`maskValue`) as a per-row record of `chunkRecords`, so a masked value is
 * byte-identical on every path. Records are cut so that each one's UTF-8 JSON stays within
 * `budget` bytes (a single row larger than that travels alone). The shared fields and the
 * columns are encoded once per record; per row only its values are, and no row is kept as an
 * object (building and keeping them was most of the cost, docs/performance-log.md, "Snapshot read with packed records").
 *
 * A read with `copyText` is packed from that text in one pass (`packCopyRows`: each field
 * unescaped and JSON-encoded together, no per-row arrays; docs/performance-log.md, "Snapshot read packed straight from the COPY text"); otherwise
 * from `rows` (`packParsedRows`). Both give the same records, byte for byte
 * (`test/core/snapshot/snapshot-copy-pack.test.ts`).
 */
export function packChunkRecords(
  sourceId: string,
  shape: SnapshotTableShape,
  read: Pick<ChunkRead, 'lowWatermark' | 'rows' | 'readAt' | 'copyText'>,
  rules: ColumnRules,
  budget: number = PACKED_RECORD_BUDGET,
): SnapshotRawRecord[] {
  const steps = packChunkSteps(sourceId, shape, read, rules, budget);
  for (;;) {
    const step = steps.next();
    if (step.done) return step.value;
  }
}

/** How many rows of COPY text `packChunkSteps` packs between two pauses. */
export const PACK_ROWS_PER_STEP = 1000;

/**
 * `packChunkRecords` in steps: the generator pauses (yields) after every `rowsPerStep` rows of a
 * read with `copyText` and returns the records when done. The worker lets the next chunk's read
 * make progress in each pause (its fence round trips and its COPY stream), so the source's COPY
 * and Node's packing overlap instead of taking turns (docs/performance-log.md, "Snapshot read packed straight from the COPY text"). The records are
 * the same as `packChunkRecords` gives.
 */
export function* packChunkSteps(
  sourceId: string,
  shape: SnapshotTableShape,
  read: Pick<ChunkRead, 'lowWatermark' | 'rows' | 'readAt' | 'copyText'>,
  rules: ColumnRules,
  budget: number = PACKED_RECORD_BUDGET,
  rowsPerStep: number = PACK_ROWS_PER_STEP,
): Generator<void, SnapshotRawRecord[], void> {
  if (!Number.isInteger(rowsPerStep) || rowsPerStep < 1) throw new CdcError('INVALID_ARGUMENT', `rows per step must be a positive integer, got ${rowsPerStep}`);
  for (const k of shape.key) {
    if (rules.mask.includes(k) || rules.exclude.includes(k))
      throw new SnapshotTableError(shape.table, `primary-key column ${k} is declared mask or exclude; keys are never masked`);
  }
  if (read.copyText !== undefined)
    return read.copyText === '' ? [] : yield* packCopyRows(packPlan(sourceId, shape, read, rules), read.copyText, budget, rowsPerStep);
  if (read.rows.length === 0) return [];
  return packParsedRows(packPlan(sourceId, shape, read, rules), read.rows, budget);
}

/** What packing a chunk needs besides its rows: the records' head, and per column whether and how it is published. */
interface PackPlan {
  source: string;
  shape: SnapshotTableShape;
  /** The JSON text of a record up to its first row: `{…,"rows":[`. */
  head: string;
  /** Its UTF-8 bytes plus the closing `]}`. */
  headBytes: number;
  /** Per source column in table order: its value conversion (the mask after it), or null when it is excluded. */
  convert: (((text: string) => JsonValue) | null)[];
  /** Per source column: whether it is masked. */
  masked: boolean[];
  /** The source column index of each key column, in key order. */
  keyAt: number[];
}

/** The shared part of both packers. */
function packPlan(sourceId: string, shape: SnapshotTableShape, read: Pick<ChunkRead, 'lowWatermark' | 'readAt'>, rules: ColumnRules): PackPlan {
  const position = snapshotPosition(read.lowWatermark);
  const commitLsn = formatLsn(BigInt(`0x${position.slice(0, 16)}`));
  const index = Number.parseInt(position.slice(16), 16);
  // Which source columns are published, in table order, each with its conversion (and the mask after it).
  const convert = shape.columns.map((column) => {
    if (rules.exclude.includes(column.name)) return null;
    const value = valueConverter(shape, column);
    return rules.mask.includes(column.name) ? (text: string) => maskValue(value(text)) : value;
  });
  const masked = shape.columns.map((c) => !rules.exclude.includes(c.name) && rules.mask.includes(c.name));
  const columns: PackedColumn[] = applyColumnRulesToColumns(
    shape.columns.map((c) => ({ name: c.name, type: c.fullType ?? c.type })),
    rules,
  );
  const keyAt = shape.key.map((k) => shape.columns.findIndex((c) => c.name === k));
  // The shared fields go through the record-level rules like every capture record (buildSlotRecord).
  buildSlotRecord(
    { source: sourceId, xid: '0', commitLsn, commitTs: read.readAt },
    index,
    { table: shape.table, op: 'snapshot', columns: columns.map((c) => ({ ...c, value: null })), oldKey: null, unchanged: [] },
    shape.key,
  );
  const shared: Omit<PackedSnapshotRecord, 'rows'> = {
    format: SLOT_RECORD_FORMAT,
    source: sourceId,
    xid: '0',
    commitLsn,
    commitTs: read.readAt,
    index,
    table: shape.table,
    op: 'snapshot',
    key: [...shape.key],
    columns,
  };
  const head = `${JSON.stringify(shared).slice(0, -1)},"rows":[`;
  return { source: sourceId, shape, head, headBytes: Buffer.byteLength(head, 'utf8') + 2, convert, masked, keyAt };
}

/**
 * Collects row texts into records of at most `budget` bytes (a row larger than that alone):
 * `add(text, bytes, key)` takes a row's JSON text, its UTF-8 bytes and a function giving its
 * key (called only for the first row of a record: the record's partition key).
 */
function recordCutter(plan: PackPlan, budget: number): { add: (text: string, bytes: number, key: () => Row) => void; done: () => SnapshotRawRecord[] } {
  const out: SnapshotRawRecord[] = [];
  let texts: string[] = [];
  let key: Row = {};
  let bytes = plan.headBytes;
  const cut = () => {
    out.push({ data: `${plan.head}${texts.join(',')}]}`, source: plan.source, table: plan.shape.table, op: 'snapshot', rows: texts.length, key });
    texts = [];
    bytes = plan.headBytes;
  };
  return {
    add(text, size, keyOf) {
      // A comma before every row but the first of a record.
      if (texts.length > 0 && bytes + 1 + size > budget) cut();
      if (texts.length === 0) key = keyOf();
      bytes += (texts.length > 0 ? 1 : 0) + size;
      texts.push(text);
    },
    done() {
      if (texts.length > 0) cut();
      return out;
    },
  };
}

/** A row's key (key column name → value) from its output texts, by the columns' conversions. */
function rowKey(plan: PackPlan, texts: readonly (string | null)[]): Row {
  const key: Row = {};
  plan.shape.key.forEach((k, i) => {
    const t = texts[plan.keyAt[i]!]!;
    key[k] = t === null ? null : plan.convert[plan.keyAt[i]!]!(t);
  });
  return key;
}

/** `packChunkRecords` from parsed rows: each row's values converted, then `JSON.stringify` of their array. */
function packParsedRows(plan: PackPlan, rows: readonly (readonly (string | null)[])[], budget: number): SnapshotRawRecord[] {
  const { shape, convert } = plan;
  const records = recordCutter(plan, budget);
  const width = shape.columns.length;
  for (const row of rows) {
    if (row.length !== width) throw new CdcError('INVALID_ARGUMENT', `${shape.table}: row has ${row.length} values for ${width} columns`);
    const values: JsonValue[] = [];
    for (let j = 0; j < width; j++) {
      const f = convert[j];
      if (f === null) continue;
      const t = row[j]!;
      // A null stays null, masked or not (maskValue(null) is null).
      values.push(t === null ? null : f!(t));
    }
    const text = JSON.stringify(values);
    records.add(text, Buffer.byteLength(text, 'utf8'), () => rowKey(plan, row));
  }
  return records.done();
}

/** A whole integer as PostgreSQL prints it whose JSON number is the same text (≤ 15 digits: a safe integer; no `-0`, no leading zero). */
const JSON_SAME_INTEGER = /^(?:0|-?[1-9][0-9]{0,14})$/;
/** A decimal as PostgreSQL prints a numeric, which `unquotedLiteralValue` returns as it is. */
const PLAIN_DECIMAL = /^-?[0-9]+(?:\.[0-9]+)?$/;
/** A character that JSON.stringify would escape (or a surrogate, which it may), or a COPY escape. */
const NOT_PLAIN_JSON = /["\\\u0000-\u001f\ud800-\udfff]/;

/**
 * Per source column, the JSON text of one non-null COPY field (still COPY-escaped), exactly
 * `JSON.stringify` of the value `packParsedRows` gives for the unescaped field: a shortcut where
 * the text is provably the same, else the reference conversion and `JSON.stringify` of it.
 */
function fieldEncoder(plan: PackPlan, j: number): ((field: string) => string) | null {
  const convert = plan.convert[j]!;
  if (convert === null) return null;
  const column = plan.shape.columns[j]!;
  const reference = (field: string): string => JSON.stringify(convert(field.includes('\\') ? copyUnescape(field) : field));
  // A masked value is a lower-case hex hash: a JSON string needing no escapes.
  if (plan.masked[j]) return (field) => `"${convert(field.includes('\\') ? copyUnescape(field) : field) as string}"`;
  // A boolean: only the field `t` unescapes to `t`.
  if (column.typeOid === BOOL) return (field) => (field === 't' ? 'true' : 'false');
  if (UNQUOTED.has(column.typeOid)) {
    if (column.type === 'smallint' || column.type === 'integer' || column.type === 'oid' || column.type === 'bigint')
      return (field) => (JSON_SAME_INTEGER.test(field) ? field : reference(field));
    // A numeric is its text (`unquotedLiteralValue`); a plain decimal needs no JSON escape.
    if (column.type === 'numeric') return (field) => (PLAIN_DECIMAL.test(field) ? `"${field}"` : reference(field));
    return reference;
  }
  // A type the capture passes through as text: a field with nothing to unescape or escape is its own JSON string.
  return (field) => (NOT_PLAIN_JSON.test(field) ? reference(field) : `"${field}"`);
}

/**
 * `packChunkRecords` from COPY text-format output, in one pass over the text: lines and fields
 * found by `indexOf`, each field's JSON written from its COPY text (`fieldEncoder`), the row's
 * JSON array built as one string, no per-row arrays or values. Same records as `packParsedRows`
 * of `parseCopyText(text)`, and the same errors for a row with another number of fields.
 */
function* packCopyRows(plan: PackPlan, text: string, budget: number, rowsPerStep: number): Generator<void, SnapshotRawRecord[], void> {
  const { shape } = plan;
  const what = `${shape.table} chunk`;
  if (!text.endsWith('\n')) throw new CdcError('INVALID_ARGUMENT', `${what}: does not end with a newline (truncated?)`);
  const width = shape.columns.length;
  const encoders = shape.columns.map((_, j) => fieldEncoder(plan, j));
  // JSON escapes and hashes are ASCII: the JSON of an ASCII chunk has as many bytes as characters.
  const ascii = Buffer.byteLength(text, 'utf8') === text.length;
  const records = recordCutter(plan, budget);
  let row = 0;
  try {
    for (let start = 0; start < text.length; row++) {
      const end = text.indexOf('\n', start);
      let json = '[';
      let first = true;
      let at = start;
      let fields = 0;
      for (;;) {
        let tab = text.indexOf('\t', at);
        if (tab < 0 || tab > end) tab = end;
        if (fields < width) {
          const encode = encoders[fields];
          if (encode !== null) {
            const field = text.slice(at, tab);
            json += `${first ? '' : ','}${field === '\\N' ? 'null' : encode!(field)}`;
            first = false;
          }
        }
        fields++;
        if (tab === end) break;
        at = tab + 1;
      }
      if (fields !== width) throw new CdcError('INVALID_ARGUMENT', `${what}: row ${row + 1} has ${fields} fields, expected ${width}`);
      json += ']';
      const lineStart = start;
      records.add(json, ascii ? json.length : Buffer.byteLength(json, 'utf8'), () =>
        rowKey(plan, parseCopyText(text.slice(lineStart, end + 1), width, what)[0]!),
      );
      start = end + 1;
      if ((row + 1) % rowsPerStep === 0 && start < text.length) yield;
    }
  } catch (e) {
    // The reference parses the whole chunk before converting a value: a row with another number
    // of fields anywhere is the error it reports first, so it is the one reported here too.
    parseCopyText(text, width, what);
    throw e;
  }
  return records.done();
}

/** The publishers' form of the worker's records (both `cdc local` and the Lambda send these): partition key (source + table + key), JSON text, a label for errors. */
export function snapshotStreamRecords(
  records: readonly SnapshotRawRecord[],
  hash: (s: string) => string,
): { partitionKey: string; data: string; label: string }[] {
  return records.map((r) => ({
    partitionKey: partitionKeyOf({ source: r.source, table: r.table, key: r.key }, hash),
    data: r.data,
    label: `${r.source}/${r.table}@snapshot`,
  }));
}

// ---------------------------------------------------------------------------------------------
// Control-plane records

/** A new requested run. */
export function newSnapshotState(
  sourceId: string,
  table: string,
  reason: SnapshotReason,
  by: string,
  now: Date,
  previous: SnapshotState | null,
): SnapshotState {
  const at = now.toISOString();
  return {
    source: sourceId,
    table,
    run: at.replace(/[-:.]/g, ''),
    reason,
    status: 'requested',
    requestedBy: by,
    requestedAt: at,
    startedAt: null,
    finishedAt: null,
    updatedAt: at,
    cursor: null,
    chunksDone: 0,
    rowsDone: 0,
    estimatedRows: 0,
    rowsPerSecond: 0,
    etaSeconds: null,
    throttle: 'idle',
    chunkSize: 0,
    firstLowWatermark: null,
    owner: null,
    leaseUntil: 0,
    error: null,
    version: (previous?.version ?? 0) + 1,
  };
}

/** Whether a run is still to do (requested, or running with any owner). */
export function snapshotPending(s: SnapshotState | null): boolean {
  return s !== null && (s.status === 'requested' || s.status === 'running');
}

/** Smoothing of the rate: the weight of the newest chunk (an exponentially weighted moving average). */
const RATE_WEIGHT = 0.3;

/**
 * The state after one completed chunk: cursor, counts, rate (EWMA over chunks, counting the time
 * since the previous update so pauses slow the rate), ETA from the estimate.
 */
export function afterChunk(s: SnapshotState, chunk: SnapshotChunkRecord, elapsedMs: number, now: Date, leaseMs: number): SnapshotState {
  const rowsDone = s.rowsDone + chunk.rows;
  const estimatedRows = Math.max(s.estimatedRows, rowsDone);
  const instant = elapsedMs > 0 ? (chunk.rows * 1000) / elapsedMs : 0;
  const rowsPerSecond = s.chunksDone === 0 ? instant : RATE_WEIGHT * instant + (1 - RATE_WEIGHT) * s.rowsPerSecond;
  const left = estimatedRows - rowsDone;
  return {
    ...s,
    cursor: chunk.endKey ?? s.cursor,
    chunksDone: s.chunksDone + 1,
    rowsDone,
    estimatedRows,
    rowsPerSecond,
    etaSeconds: rowsPerSecond > 0 ? left / rowsPerSecond : null,
    firstLowWatermark: s.firstLowWatermark ?? chunk.lowWatermark,
    updatedAt: now.toISOString(),
    leaseUntil: now.getTime() + leaseMs,
    version: s.version + 1,
  };
}

/** Formats an ETA for people: `42 s`, `3 min 10 s`, `2 h 05 min`, or `unknown`. */
export function formatEta(seconds: number | null): string {
  if (seconds === null || !Number.isFinite(seconds)) return 'unknown';
  const s = Math.max(0, Math.round(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${String(s % 60).padStart(2, '0')} s`;
  return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, '0')} min`;
}
