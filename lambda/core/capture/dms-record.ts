/**
 * Renders a row change of the local slot capture as the record AWS DMS puts on the Kinesis raw
 * stream for a PostgreSQL source, with the task settings the constructs give a `CdcSource`
 * (docs/local.md, "DMS records"): JSON message format, `IncludeTransactionDetails`,
 * `IncludeNullAndEmpty`, a before image under `before-image`, partition key type `schema-table`.
 * The normalizer then reads the local capture's changes with the DMS decoder (dms-decoder.ts),
 * the code every AWS deployment runs.
 *
 * ```json
 * { "data": { "id": 45, "name": "Jane" },
 *   "before-image": { "id": 46 },
 *   "metadata": { "timestamp": "2026-11-29T13:05:21.190012Z", "record-type": "data", "operation": "update",
 *     "partition-key-type": "schema-table", "schema-name": "public", "table-name": "foo",
 *     "transaction-id": 754, "transaction-record-id": 0, "prev-transaction-id": 753, "prev-transaction-record-id": 2,
 *     "commit-timestamp": "2026-11-29T13:05:21.188736Z", "stream-position": "00000000/01752928.2.00000000/01752928" } }
 * ```
 *
 * - `data`: insert and update: the delivered columns of the new row (an unchanged TOAST value is
 *   left out, absent meaning "not delivered", unless the old image holds it); delete: the old
 *   image the source supplied (the key, or the whole row under `REPLICA IDENTITY FULL`) and every
 *   other column of the table as null, as `IncludeNullAndEmpty` writes a delete.
 * - `before-image`: updates only: the old image the source supplied (the old key when the key
 *   changed, the whole old row under `REPLICA IDENTITY FULL`), `{}` when it supplied none.
 * - `metadata.stream-position`: the transaction's commit LSN as DMS prints it (8 + 8 hex digits),
 *   twice, around a middle part whose meaning AWS does not document (the capture writes `2`, the
 *   value most real records show); the decoder reads the first part (docs/positions.md).
 * - `metadata.transaction-record-id`: the change's index in its transaction, so the decoded
 *   position is exactly the slot path's `makePosition(commitLsn, index)`. (Real DMS numbers a
 *   transaction's records from 1; the decoder reads either.)
 * - `metadata.prev-transaction-id` / `prev-transaction-record-id`: the last record of the
 *   previous transaction the capture published, when there is one.
 *
 * Values are the slot capture's JSON values unchanged (docs/exact-numbers.md): an integer within
 * 2^53 a number, a `numeric` or a larger `int8` its exact decimal text, `json`/`jsonb` their text.
 * Pure: the caller passes the time the message is built.
 */
import { InvalidRecordError } from '../shared/errors.ts';
import type { JsonValue, Row } from '../shared/event.ts';
import { parseLsn } from '../shared/position.ts';
import { DMS_BEFORE_IMAGE_FIELD } from './dms-decoder.ts';
import type { SlotColumn, SlotRecord } from './slot-record.ts';

/** The middle part of the stream positions the capture writes (AWS does not document it). */
export const DMS_STREAM_POSITION_MIDDLE = '2';

/** The previous transaction's last record, as `prev-transaction-*` names it. */
export interface DmsPrevious {
  transactionId: number;
  recordId: number;
}

/**
 * The fields of a row change a DMS record is written from: a slot record's, or the same fields of a
 * change the capture writes without making its slot record (local/capture-transcode.ts).
 */
export type DmsSource = Pick<SlotRecord, 'xid' | 'commitLsn' | 'commitTs' | 'index' | 'table' | 'op' | 'columns' | 'oldKey' | 'unchanged' | 'capture'>;

/** One DMS data record (the metadata in the order AWS documents it). */
export interface DmsDataRecord {
  data: Row;
  'before-image'?: Row;
  metadata: {
    timestamp: string;
    'record-type': 'data';
    operation: 'insert' | 'update' | 'delete';
    'partition-key-type': 'schema-table';
    'schema-name': string;
    'table-name': string;
    'transaction-id': number;
    'transaction-record-id': number;
    'prev-transaction-id'?: number;
    'prev-transaction-record-id'?: number;
    'commit-timestamp': string;
    'stream-position': string;
  };
}

export interface DmsRenderContext {
  /** When the message is built (ISO-8601); rendered with microseconds as DMS does. */
  now: Date;
  /** The table's columns in table order (excluded ones left out), for the nulls of a delete; null when unknown. */
  columns: readonly string[] | null;
  /** The previous transaction's last record, or null for the first one. */
  previous: DmsPrevious | null;
  /**
   * The name DMS gives the change's table: the leaf partition that holds the row for a change of a
   * partitioned table (docs/partitioned-tables.md). @default the record's table
   */
  table?: string;
}

/** A PostgreSQL LSN as DMS prints it in a stream position: `00000002/7C007178`. */
export function dmsLsn(lsn: string): string {
  const v = parseLsn(lsn, 'commitLsn');
  const hex = (n: bigint): string => n.toString(16).toUpperCase().padStart(8, '0');
  return `${hex(v >> 32n)}/${hex(v & 0xffffffffn)}`;
}

/** `2026-11-29T13:05:21.188Z` → `2026-11-29T13:05:21.188000Z` (DMS writes microseconds). */
export function dmsTimestamp(d: Date): string {
  // A batch stamps every record with the same time: its text is made once.
  const t = d.getTime();
  if (t !== stamped.at) {
    stamped.at = t;
    stamped.text = `${d.toISOString().slice(0, 23)}000Z`;
  }
  return stamped.text;
}

const stamped = { at: Number.NaN, text: '' };

function rowOf(columns: readonly SlotColumn[]): Row {
  const row: Row = {};
  for (const c of columns) row[c.name] = c.value;
  return row;
}

/**
 * The DMS record of one slot record (`insert`, `update` or `delete`). Throws `InvalidRecordError`
 * for a `truncate` or a `snapshot` row: DMS delivers neither as a change record (docs/truncate.md,
 * docs/local.md).
 */
export function dmsRecordOf(r: SlotRecord, ctx: DmsRenderContext): DmsDataRecord {
  if (r.op !== 'insert' && r.op !== 'update' && r.op !== 'delete') {
    throw new InvalidRecordError('op', `DMS writes no change record for a ${r.op} (docs/local.md, "DMS records")`);
  }
  if (r.capture === 'poll') throw new InvalidRecordError('capture', 'a polled row is no DMS record (docs/polling.md)');
  const table = ctx.table ?? r.table;
  const dot = table.indexOf('.');
  const txId = Number(r.xid);
  if (!Number.isSafeInteger(txId)) throw new InvalidRecordError('xid', `expected a transaction id DMS writes as a number, got ${JSON.stringify(r.xid)}`);
  const { old, data } = rowImages(r, ctx);
  const record: DmsDataRecord = {
    data,
    ...(r.op === 'update' ? { [DMS_BEFORE_IMAGE_FIELD]: old ?? {} } : {}),
    metadata: {
      timestamp: dmsTimestamp(ctx.now),
      'record-type': 'data',
      operation: r.op,
      'partition-key-type': 'schema-table',
      'schema-name': table.slice(0, dot),
      'table-name': table.slice(dot + 1),
      'transaction-id': txId,
      'transaction-record-id': r.index,
      ...(ctx.previous !== null ? { 'prev-transaction-id': ctx.previous.transactionId, 'prev-transaction-record-id': ctx.previous.recordId } : {}),
      'commit-timestamp': r.commitTs,
      'stream-position': streamPosition(dmsLsn(r.commitLsn)),
    },
  };
  return record;
}

/** A change's DMS data row: a delete's is its old image with the table's other columns null; an unchanged TOAST value taken from the old image. */
function dataRow(r: DmsSource, old: Row | null, ctx: DmsRenderContext): Row {
  if (r.op === 'delete') {
    const data: Row = { ...old! };
    for (const c of ctx.columns ?? []) if (!(c in data)) data[c] = null;
    return data;
  }
  const data = rowOf(r.columns!);
  // An unchanged TOAST value is the old one: under REPLICA IDENTITY FULL the old image holds it.
  for (const u of r.unchanged) if (old !== null && u in old) data[u] = old[u] as JsonValue;
  return data;
}

/** A change's DMS row images: the old key's row, and the data (`dataRow`). */
function rowImages(r: DmsSource, ctx: DmsRenderContext): { old: Row | null; data: Row } {
  const old = r.oldKey === null ? null : rowOf(r.oldKey);
  return { old, data: dataRow(r, old, ctx) };
}

function streamPosition(lsn: string): string {
  return `${lsn}.${DMS_STREAM_POSITION_MIDDLE}.${lsn}`;
}

/**
 * The JSON text of `dmsRecordOf(r, ctx)`: exactly `JSON.stringify(dmsRecordOf(r, ctx))` (a
 * randomized test holds them equal), made with less work per record. The row images are the same
 * objects, written by `JSON.stringify` (a delete's data without its object: `deleteDataText`); the
 * metadata is written from three texts made once per batch (the time), once per transaction and
 * table (names, ids, commit time, stream position) and reused while consecutive records share
 * them, with only the operation and the record id written per record (docs/performance-log.md,
 * "35. The slot capture's work per change").
 */
export function dmsRecordText(r: DmsSource, ctx: DmsRenderContext): string {
  if (r.op !== 'insert' && r.op !== 'update' && r.op !== 'delete') {
    throw new InvalidRecordError('op', `DMS writes no change record for a ${r.op} (docs/local.md, "DMS records")`);
  }
  if (r.capture === 'poll') throw new InvalidRecordError('capture', 'a polled row is no DMS record (docs/polling.md)');
  const m = metadataTexts(r, ctx);
  // Few pieces joined per record: the text between the data and the record id is made once per operation while the metadata stays (docs/performance-log.md, "47. The slot capture: DMS records written from the parsed change").
  const lead = leadOf(m, r.op);
  const deleted = r.op === 'delete' ? deleteDataText(r.oldKey, ctx.columns) : null;
  if (deleted !== null) return `{"data":${deleted}${lead}${r.index}${m.end}`;
  const old = r.oldKey === null ? null : rowOf(r.oldKey);
  const data = JSON.stringify(dataRow(r, old, ctx));
  const before = r.op !== 'update' ? '' : old === null ? NO_BEFORE_IMAGE : `,"${DMS_BEFORE_IMAGE_FIELD}":${JSON.stringify(old)}`;
  return `{"data":${data}${before}${lead}${r.index}${m.end}`;
}

/**
 * A delete's data as `JSON.stringify` writes `dataRow`'s object (the old image, then every other
 * column of the table as null), written from the columns without the object: the object, copied
 * from the old image's and grown a name at a time, cost about 4 µs per delete, the text 0.3 µs
 * (docs/performance-log.md, "50. The slot capture: less optimizing compilation per start"). Null
 * where an object would write it otherwise or a value needs one (`tupleText`): then the object is
 * made.
 */
function deleteDataText(old: readonly SlotColumn[] | null, columns: readonly string[] | null): string | null {
  if (old === null) return null;
  const text = tupleText(old, columns);
  return text === null ? null : `${text}}`;
}

/**
 * `{"a":1,"b":"x"` (the closing brace left to the caller) for the columns, then `,"c":null` for
 * each of `nulls` not among them, as `JSON.stringify` writes such an object; null where `nameText`
 * refuses a name, a name is twice among the columns or a value is no JSON value (`undefined`, a
 * `bigint`).
 */
function tupleText(columns: readonly SlotColumn[], nulls: readonly string[] | null): string | null {
  const n = columns.length;
  if (n > 64) return null;
  let text = '{';
  for (let i = 0; i < n; i++) {
    const c = columns[i]!;
    const name = nameText(c.name);
    if (name === null) return null;
    for (let j = 0; j < i; j++) if (columns[j]!.name === c.name) return null;
    const v = c.value;
    let value: string;
    if (v === null) value = 'null';
    else if (typeof v === 'string' || typeof v === 'object') value = JSON.stringify(v);
    else if (typeof v === 'number') value = Number.isFinite(v) ? `${v}` : 'null';
    else if (typeof v === 'boolean') value = v ? 'true' : 'false';
    else return null;
    text += i === 0 ? `${name}${value}` : `,${name}${value}`;
  }
  if (nulls !== null) {
    let first = n === 0;
    for (let k = 0; k < nulls.length; k++) {
      const c = nulls[k]!;
      let found = false;
      for (let i = 0; i < n && !found; i++) found = columns[i]!.name === c;
      for (let j = 0; j < k && !found; j++) found = nulls[j] === c;
      if (found) continue;
      const name = nameText(c);
      if (name === null) return null;
      text += first ? `${name}null` : `,${name}null`;
      first = false;
    }
  }
  return text;
}

/**
 * `"name":` for a name an object keeps in insertion order as an own property: not an array index
 * (an object writes those first; any name starting with a digit is left to the object) and not a
 * name its prototype has (`__proto__` is no property, `constructor` is already `in` it); null
 * otherwise. Kept per name (the parser's names repeat).
 */
function nameText(name: string): string | null {
  const known = names.get(name);
  if (known !== undefined) return known;
  const first = name.charCodeAt(0);
  const text = (first >= 0x30 && first <= 0x39) || name in Object.prototype ? null : `${JSON.stringify(name)}:`;
  if (names.size >= 4096) names.clear();
  names.set(name, text);
  return text;
}

const names = new Map<string, string | null>();

/** An update's `before-image` when the source supplied no old image. */
const NO_BEFORE_IMAGE = `,"${DMS_BEFORE_IMAGE_FIELD}":{}`;

/** The text from after the data (and before image) to the record id: `,"metadata":{…"operation":"<op>",…"transaction-record-id":`. */
function leadOf(m: typeof written, op: 'insert' | 'update' | 'delete'): string {
  const lead = m.leads[op];
  if (lead !== '') return lead;
  return (m.leads[op] = `,"metadata":${m.head}${op}${m.middle}`);
}

/** The metadata texts of the last record written (`dmsRecordText`), with what they were made of. */
const written = {
  timestamp: '',
  table: '',
  xid: '',
  commitTs: '',
  commitLsn: '',
  prev: false,
  prevTx: Number.NaN,
  prevRecord: Number.NaN,
  head: '',
  middle: '',
  tail: '',
  /** `tail` and the record's closing brace. */
  end: '',
  /** Per operation, the text `leadOf` makes from `head` and `middle` ('' until made). */
  leads: { insert: '', update: '', delete: '' },
};

/** The metadata's text around the operation and the record id, as `JSON.stringify` writes `dmsRecordOf`'s metadata. */
function metadataTexts(r: DmsSource, ctx: DmsRenderContext): typeof written {
  const timestamp = dmsTimestamp(ctx.now);
  const table = ctx.table ?? r.table;
  const prevTx = ctx.previous?.transactionId ?? Number.NaN;
  const prevRecord = ctx.previous?.recordId ?? Number.NaN;
  const w = written;
  if (timestamp !== w.timestamp) {
    w.timestamp = timestamp;
    w.head = `{"timestamp":${JSON.stringify(timestamp)},"record-type":"data","operation":"`;
    clearLeads(w);
  }
  if (table !== w.table || r.xid !== w.xid) {
    const txId = Number(r.xid);
    if (!Number.isSafeInteger(txId)) throw new InvalidRecordError('xid', `expected a transaction id DMS writes as a number, got ${JSON.stringify(r.xid)}`);
    const dot = table.indexOf('.');
    w.middle =
      `","partition-key-type":"schema-table","schema-name":${JSON.stringify(table.slice(0, dot))},"table-name":${JSON.stringify(table.slice(dot + 1))},` +
      `"transaction-id":${JSON.stringify(txId)},"transaction-record-id":`;
    w.table = table;
    w.xid = r.xid;
    clearLeads(w);
  }
  const prev = ctx.previous !== null;
  if (r.commitTs !== w.commitTs || r.commitLsn !== w.commitLsn || prev !== w.prev || !sameNumber(prevTx, w.prevTx) || !sameNumber(prevRecord, w.prevRecord)) {
    const prevText = prev ? `,"prev-transaction-id":${JSON.stringify(prevTx)},"prev-transaction-record-id":${JSON.stringify(prevRecord)}` : '';
    w.tail = `${prevText},"commit-timestamp":${JSON.stringify(r.commitTs)},"stream-position":${JSON.stringify(streamPosition(dmsLsn(r.commitLsn)))}}`;
    w.end = `${w.tail}}`;
    w.commitTs = r.commitTs;
    w.commitLsn = r.commitLsn;
    w.prev = prev;
    w.prevTx = prevTx;
    w.prevRecord = prevRecord;
  }
  return w;
}

function clearLeads(w: typeof written): void {
  w.leads.insert = '';
  w.leads.update = '';
  w.leads.delete = '';
}

/** Equal numbers, NaN equal to NaN (no previous record). */
function sameNumber(a: number, b: number): boolean {
  return a === b || (Number.isNaN(a) && Number.isNaN(b));
}

/** Whether DMS writes a change record for this slot record (not for a truncate, a snapshot row or a polled row). */
export function dmsExpresses(r: Pick<SlotRecord, 'op' | 'capture'>): boolean {
  return (r.op === 'insert' || r.op === 'update' || r.op === 'delete') && r.capture !== 'poll';
}

/** One DMS control record with a table definition (`IncludeControlDetails`). */
export interface DmsControlRecord {
  control: { 'table-def': { columns: Record<string, { type: string; nullable: boolean }>; 'primary-key': string[] } };
  metadata: {
    timestamp: string;
    'record-type': 'control';
    operation: 'create-table' | 'change-columns';
    'partition-key-type': 'task-id';
    'partition-key-value': string;
    'schema-name': string;
    'table-name': string;
  };
}

/**
 * The control record DMS sends when a table's definition is first seen (`create-table`) or
 * changed (`change-columns`), from a row image that names every column (docs/local.md, "DMS
 * records"). The columns keep the source's type names with their modifiers (`character
 * varying(20)`, `numeric(12,2)`), where DMS writes its own coarser names (`WSTRING`, `NUMERIC`
 * with `length`, `precision`, `scale`); nullability is not known from a row image and is written
 * `true`.
 */
export function dmsTableDefOf(
  table: string,
  columns: readonly { name: string; type: string }[],
  key: readonly string[],
  operation: 'create-table' | 'change-columns',
  ctx: { now: Date; taskId: string },
): DmsControlRecord {
  const dot = table.indexOf('.');
  const defs: Record<string, { type: string; nullable: boolean }> = {};
  for (const c of columns) defs[c.name] = { type: c.type, nullable: true };
  return {
    control: { 'table-def': { columns: defs, 'primary-key': [...key] } },
    metadata: {
      timestamp: dmsTimestamp(ctx.now),
      'record-type': 'control',
      operation,
      'partition-key-type': 'task-id',
      'partition-key-value': ctx.taskId,
      'schema-name': table.slice(0, dot),
      'table-name': table.slice(dot + 1),
    },
  };
}
