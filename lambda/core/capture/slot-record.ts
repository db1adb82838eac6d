/**
 * The raw record format of the built-in slot capture (the local stand-in for DMS).
 *
 * The slot capture reads a logical replication slot (plugin `test_decoding`), groups the output
 * into committed transactions (`logical-text.ts` parses the text) and publishes one JSON record
 * per row change to the raw stream, exactly where DMS would publish its records on AWS. The
 * normalizer (and `cdc decode`) read these records with `slot-decoder.ts`.
 *
 * ```json
 * { "format": "cdc-slot/1", "source": "orders", "xid": "754",
 *   "commitLsn": "0/1752928", "commitTs": "2026-11-29T13:05:21.188736Z", "index": 0,
 *   "table": "public.t1", "op": "update", "key": ["id"],
 *   "columns": [{ "name": "id", "type": "integer", "value": 2 }, { "name": "v", "type": "text", "value": "z" }],
 *   "oldKey": [{ "name": "id", "type": "integer", "value": 1 }],
 *   "unchanged": ["big"] }
 * ```
 *
 * Fields:
 * - `format`: always `cdc-slot/1` (this is how a reader tells slot records from DMS records).
 * - `source`: source id of the capturing `CdcSource`.
 * - `xid`: source transaction id, as text.
 * - `commitLsn`: commit LSN of the transaction in PostgreSQL's text form (`X/Y`). Together with
 *   `index` it is the record's position (`makePosition(commitLsn, index)`).
 * - `commitTs`: commit time, ISO-8601 in UTC.
 * - `index`: index of the record within its transaction, from 0.
 * - `table`: `schema.table` as named in the source (unquoted; neither part may contain a dot); for
 *   a change of a partition, the root of its partitioned table (docs/partitioned-tables.md).
 * - `op`: `insert`, `update`, `delete` or `truncate`; `snapshot` for a row the snapshot worker
 *   read (lambda/core/snapshot/snapshot.ts, docs/snapshot.md): the whole row in `columns`, no `oldKey`,
 *   `xid` `"0"` (a chunk read has no transaction of its own), `commitLsn` + `index` the position
 *   the stitching algorithm assigned, `commitTs` the time of the read. A `truncate` with `xid`
 *   `"0"` is the sweep that closes a re-snapshot (docs/snapshot.md, "Re-snapshot").
 * - `key`: primary-key column names in key order (empty only for `truncate`).
 * - `columns`: the new tuple's delivered columns in table order (insert, update); `null` for
 *   delete and truncate.
 * - `oldKey`: the old key (or the whole old row under `REPLICA IDENTITY FULL`) for updates that
 *   changed the replica identity and for deletes; otherwise `null`.
 * - `unchanged`: columns whose value was not delivered because it is an unchanged TOAST value
 *   (they are absent from `columns`; absent is not null).
 * - `unchangedTypes` (optional): the source type of some or all `unchanged` columns (as
 *   `columns[].type`), so that a table first seen through such an update is registered with the
 *   type of its TOAST column, not as unknown (docs/schema-drift.md, "First sight of a table").
 * - `capture` (optional): `"poll"` for a row the poller read (lambda/core/capture/poll.ts,
 *   docs/polling.md): op `update`, the whole row, no `oldKey`, `xid` `"0"`, `commitLsn` + `index`
 *   the position its poll column gives, `commitTs` the poll column's time (or the read time).
 *
 * **Packed snapshot records.** The snapshot worker publishes the rows of a chunk packed: one
 * record carries many rows of one chunk of one table, the columns' names and types once and the
 * rows as arrays of values (docs/snapshot.md, "Packed records"). A record with a `rows` field is
 * packed; every other record is the per-row form above, which stays readable.
 *
 * ```json
 * { "format": "cdc-slot/1", "source": "orders", "xid": "0",
 *   "commitLsn": "0/17528FF", "commitTs": "2026-11-29T13:05:21.188736Z", "index": 4294967295,
 *   "table": "public.t1", "op": "snapshot", "key": ["id"],
 *   "columns": [{ "name": "id", "type": "integer" }, { "name": "v", "type": "text" }],
 *   "rows": [[1, "a"], [2, null]] }
 * ```
 *
 * - `format` … `key`: as in a per-row record, shared by every row (all rows of a chunk have the
 *   chunk's position, `snapshotPosition(L0)`); `op` is always `snapshot`.
 * - `columns`: the delivered columns in table order, `{name, type}` without values (masked and
 *   excluded columns exactly as in a per-row record: a masked column has type `text`, an excluded
 *   one is absent). Every key column is among them.
 * - `rows`: at least one row; each an array of one JSON value per entry of `columns`, in that
 *   order (the values a per-row record's `columns[].value` would hold; a key value is a string,
 *   number or boolean, never null).
 * - no `oldKey`, `unchanged`, `unchangedTypes` or `capture` field.
 *
 * Row `i` of a packed record means exactly the per-row record with the same shared fields and
 * `columns[j].value = rows[i][j]`, `oldKey: null`, `unchanged: []` (`packedRowRecord`): the
 * decoder and the normalizer read it that way, so a packed chunk decodes to the same change
 * events, row for row and in row order, as the per-row records of the same chunk.
 */
import { InvalidRecordError } from '../shared/errors.ts';
import { isSourceId, type JsonValue } from '../shared/event.ts';
import { parseLsn } from '../shared/position.ts';
import { describeValue as describe, isPlainObject } from '../shared/json-shape.ts';

export const SLOT_RECORD_FORMAT = 'cdc-slot/1';

export type SlotOp = 'insert' | 'update' | 'delete' | 'truncate' | 'snapshot';
export const SLOT_OPS: readonly SlotOp[] = ['insert', 'update', 'delete', 'truncate', 'snapshot'];

/**
 * One column of a tuple: name, source type name and JSON value. The type is PostgreSQL's
 * `format_type` with the modifier (`character varying(20)`, `numeric(12,2)`) where the capture
 * could read it from the catalog, else as test_decoding prints it; `text` for a masked column
 * (docs/schema-drift.md, docs/masking.md).
 */
export interface SlotColumn {
  name: string;
  type: string;
  value: JsonValue;
}

/** One raw record of the slot capture (see the module comment for the meaning of each field). */
export interface SlotRecord {
  format: typeof SLOT_RECORD_FORMAT;
  source: string;
  xid: string;
  commitLsn: string;
  commitTs: string;
  index: number;
  table: string;
  op: SlotOp;
  key: string[];
  columns: SlotColumn[] | null;
  oldKey: SlotColumn[] | null;
  unchanged: string[];
  /** Types of `unchanged` columns, by name (see the module comment). */
  unchangedTypes?: Record<string, string>;
  /** `poll` for a polled row (see the module comment); absent for the slot capture and snapshots. */
  capture?: 'poll';
}

/** A record's table: `schema.table`, neither part empty nor holding a dot. */
export const TABLE_ID = /^[^.]+\.[^.]+$/;

function isJsonValue(v: unknown): v is JsonValue {
  if (v === null || typeof v === 'string' || typeof v === 'boolean') return true;
  if (typeof v === 'number') return Number.isFinite(v);
  if (Array.isArray(v)) return v.every(isJsonValue);
  if (isPlainObject(v)) return Object.values(v).every(isJsonValue);
  return false;
}

function names(v: unknown, field: string, allowEmpty: boolean): string[] {
  if (!Array.isArray(v)) throw new InvalidRecordError(field, `expected an array of column names, got ${describe(v)}`);
  for (let i = 0; i < v.length; i++) {
    const n: unknown = v[i];
    if (typeof n !== 'string' || n === '') throw new InvalidRecordError(`${field}[${i}]`, `expected a column name, got ${describe(n)}`);
  }
  if (!allowEmpty && v.length === 0) throw new InvalidRecordError(field, 'expected at least one column name');
  if (v.length > 1 && new Set(v).size !== v.length) throw new InvalidRecordError(field, 'a column is named twice');
  return v as string[];
}

function tuple(v: unknown, field: string): SlotColumn[] | null {
  if (v === null || v === undefined) return null;
  if (!Array.isArray(v)) throw new InvalidRecordError(field, `expected an array of columns or null, got ${describe(v)}`);
  const seen = new Set<string>();
  return v.map((c, i) => {
    const at = `${field}[${i}]`;
    if (!isPlainObject(c)) throw new InvalidRecordError(at, `expected {name, type, value}, got ${describe(c)}`);
    if (typeof c.name !== 'string' || c.name === '') throw new InvalidRecordError(`${at}.name`, `expected a column name, got ${describe(c.name)}`);
    if (seen.has(c.name)) throw new InvalidRecordError(`${at}.name`, `column ${JSON.stringify(c.name)} appears twice`);
    seen.add(c.name);
    if (typeof c.type !== 'string' || c.type === '') throw new InvalidRecordError(`${at}.type`, `expected a type name, got ${describe(c.type)}`);
    if (!('value' in c) || !isJsonValue(c.value)) throw new InvalidRecordError(`${at}.value`, `expected a JSON value, got ${describe(c.value)}`);
    return { name: c.name, type: c.type, value: c.value };
  });
}

/** The fields every slot record has, per-row or packed: format, source, xid, commitLsn, commitTs, index, table. */
function checkSharedFields(
  r: Record<string, unknown>,
): asserts r is Record<string, unknown> & { source: string; xid: string; commitLsn: string; commitTs: string; index: number; table: string } {
  if (r.format !== SLOT_RECORD_FORMAT) throw new InvalidRecordError('format', `expected ${JSON.stringify(SLOT_RECORD_FORMAT)}, got ${describe(r.format)}`);
  if (!isSourceId(r.source)) throw new InvalidRecordError('source', `expected a lower-case identifier, got ${describe(r.source)}`);
  if (typeof r.xid !== 'string' || !/^[0-9]+$/.test(r.xid))
    throw new InvalidRecordError('xid', `expected a transaction id as decimal text, got ${describe(r.xid)}`);
  if (typeof r.commitLsn !== 'string') throw new InvalidRecordError('commitLsn', `expected an LSN like '0/1752928', got ${describe(r.commitLsn)}`);
  parseLsn(r.commitLsn, 'commitLsn');
  if (typeof r.commitTs !== 'string' || Number.isNaN(Date.parse(r.commitTs)))
    throw new InvalidRecordError('commitTs', `expected an ISO-8601 timestamp, got ${describe(r.commitTs)}`);
  if (typeof r.index !== 'number' || !Number.isInteger(r.index) || r.index < 0 || r.index > 0xffffffff) {
    throw new InvalidRecordError('index', `expected the record's index within its transaction (an integer from 0), got ${describe(r.index)}`);
  }
  if (typeof r.table !== 'string' || !TABLE_ID.test(r.table)) throw new InvalidRecordError('table', `expected 'schema.table', got ${describe(r.table)}`);
}

/**
 * Checks that `value` is a well-formed slot record and returns it typed. Throws
 * `InvalidRecordError` naming the first field that is wrong (`commitLsn`, `columns[2].type`, …).
 */
export function validateSlotRecord(value: unknown): SlotRecord {
  if (!isPlainObject(value)) throw new InvalidRecordError('record', `expected a JSON object, got ${describe(value)}`);
  const r = value;
  checkSharedFields(r);
  if ('rows' in r) throw new InvalidRecordError('rows', 'a packed snapshot record (one with rows) is read with validatePackedSnapshotRecord, not as one row');
  if (typeof r.op !== 'string' || !(SLOT_OPS as readonly string[]).includes(r.op)) {
    throw new InvalidRecordError('op', `expected one of ${SLOT_OPS.join(', ')}, got ${describe(r.op)}`);
  }
  const op = r.op as SlotOp;
  const key = names(r.key, 'key', op === 'truncate');
  const columns = tuple(r.columns, 'columns');
  const oldKey = tuple(r.oldKey, 'oldKey');
  const unchanged = names(r.unchanged ?? [], 'unchanged', true);
  if ((op === 'insert' || op === 'update' || op === 'snapshot') && columns === null) throw new InvalidRecordError('columns', `an ${op} carries the new tuple`);
  if ((op === 'delete' || op === 'truncate') && columns !== null) throw new InvalidRecordError('columns', `a ${op} carries no new tuple`);
  if (op === 'delete' && oldKey === null) throw new InvalidRecordError('oldKey', 'a delete carries the old key (the table has no replica identity?)');
  if ((op === 'insert' || op === 'truncate' || op === 'snapshot') && oldKey !== null) throw new InvalidRecordError('oldKey', `an ${op} carries no old key`);
  if (op !== 'update' && unchanged.length > 0) throw new InvalidRecordError('unchanged', `only an update can leave columns undelivered, not a ${op}`);
  for (const u of unchanged) {
    if (columns?.some((c) => c.name === u)) throw new InvalidRecordError('unchanged', `column ${JSON.stringify(u)} is both delivered and unchanged`);
  }
  const unchangedTypes = r.unchangedTypes === undefined ? undefined : typesOfUnchanged(r.unchangedTypes, unchanged);
  if (r.capture !== undefined) {
    if (r.capture !== 'poll') throw new InvalidRecordError('capture', `expected "poll" or no capture field, got ${describe(r.capture)}`);
    if (op !== 'update' || oldKey !== null || unchanged.length > 0)
      throw new InvalidRecordError('capture', 'a polled row is an update with the whole row and no old key');
  }
  return {
    ...(r.capture === 'poll' ? { capture: 'poll' as const } : {}),
    format: SLOT_RECORD_FORMAT,
    source: r.source,
    xid: r.xid,
    commitLsn: r.commitLsn,
    commitTs: r.commitTs,
    index: r.index,
    table: r.table,
    op,
    key,
    columns,
    oldKey,
    unchanged,
    ...(unchangedTypes !== undefined ? { unchangedTypes } : {}),
  };
}

/** Checks `unchangedTypes`: an object naming only `unchanged` columns, each with a non-empty type name. */
function typesOfUnchanged(v: unknown, unchanged: readonly string[]): Record<string, string> {
  if (!isPlainObject(v)) throw new InvalidRecordError('unchangedTypes', `expected an object of type names by column, got ${describe(v)}`);
  for (const [name, type] of Object.entries(v)) {
    if (!unchanged.includes(name)) throw new InvalidRecordError(`unchangedTypes.${name}`, `column ${JSON.stringify(name)} is not listed in unchanged`);
    if (typeof type !== 'string' || type === '') throw new InvalidRecordError(`unchangedTypes.${name}`, `expected a type name, got ${describe(type)}`);
  }
  return v as Record<string, string>;
}

/** The transaction a record belongs to, as the capture knows it from the `COMMIT` line. */
export interface SlotTransaction {
  source: string;
  xid: string;
  /** Commit LSN (`X/Y`): the LSN the slot reports for the transaction's `COMMIT`. */
  commitLsn: string;
  /** Commit time, ISO-8601. */
  commitTs: string;
}

/** One row change as the capture parsed it (shape of `TestDecodingChange` from logical-text.ts). */
export interface SlotChange {
  /** `schema.table` */
  table: string;
  op: SlotOp;
  columns: SlotColumn[] | null;
  oldKey: SlotColumn[] | null;
  unchanged: string[];
  /** Types of `unchanged` columns, by name, where the capture knows them. */
  unchangedTypes?: Record<string, string>;
}

/**
 * The record-level rules of a slot record that typed inputs do not already guarantee: the table
 * id, which images each op carries, key and `unchanged` names (non-empty, no duplicates, an
 * unchanged column not also delivered), column names unique and types non-empty. It reads the
 * record without copying it. `validateSlotRecord` applies the same rules to untrusted input (plus
 * the type of every field and value); the capture and the snapshot worker, whose inputs are typed,
 * build records with `buildSlotRecord`, which applies only these, so a record is validated in full
 * once, by its reader (docs/performance-log.md, "3. Capture").
 */
function checkShape(r: SlotRecord): void {
  if (!TABLE_ID.test(r.table)) throw new InvalidRecordError('table', `expected 'schema.table', got ${describe(r.table)}`);
  const op = r.op;
  if (!(SLOT_OPS as readonly string[]).includes(op)) throw new InvalidRecordError('op', `expected one of ${SLOT_OPS.join(', ')}, got ${describe(op)}`);
  names(r.key, 'key', op === 'truncate');
  if (r.columns !== null) checkTuple(r.columns, 'columns');
  if (r.oldKey !== null) checkTuple(r.oldKey, 'oldKey');
  names(r.unchanged, 'unchanged', true);
  if ((op === 'insert' || op === 'update' || op === 'snapshot') && r.columns === null)
    throw new InvalidRecordError('columns', `an ${op} carries the new tuple`);
  if ((op === 'delete' || op === 'truncate') && r.columns !== null) throw new InvalidRecordError('columns', `a ${op} carries no new tuple`);
  if (op === 'delete' && r.oldKey === null) throw new InvalidRecordError('oldKey', 'a delete carries the old key (the table has no replica identity?)');
  if ((op === 'insert' || op === 'truncate' || op === 'snapshot') && r.oldKey !== null) throw new InvalidRecordError('oldKey', `an ${op} carries no old key`);
  if (op !== 'update' && r.unchanged.length > 0) throw new InvalidRecordError('unchanged', `only an update can leave columns undelivered, not a ${op}`);
  for (const u of r.unchanged) {
    if (r.columns?.some((c) => c.name === u)) throw new InvalidRecordError('unchanged', `column ${JSON.stringify(u)} is both delivered and unchanged`);
  }
  if (r.unchangedTypes !== undefined) typesOfUnchanged(r.unchangedTypes, r.unchanged);
}

/**
 * A typed tuple's names and types: non-empty, no name twice (the first repeat named). Compares
 * names pairwise for the few columns of a usual row, without a set per tuple
 * (docs/performance-log.md, "35. The slot capture's work per change").
 */
function checkTuple(cols: readonly SlotColumn[], field: string): void {
  const seen = cols.length > 16 ? new Set<string>() : null;
  for (let i = 0; i < cols.length; i++) {
    const c = cols[i]!;
    if (c.name === '') throw new InvalidRecordError(`${field}[${i}].name`, `expected a column name, got ${describe(c.name)}`);
    if (seen !== null ? seen.has(c.name) : namedBefore(cols, i))
      throw new InvalidRecordError(`${field}[${i}].name`, `column ${JSON.stringify(c.name)} appears twice`);
    seen?.add(c.name);
    if (c.type === '') throw new InvalidRecordError(`${field}[${i}].type`, `expected a type name, got ${describe(c.type)}`);
  }
}

/** Whether a column before `i` has the name of column `i`. */
function namedBefore(cols: readonly { name: string }[], i: number): boolean {
  const name = cols[i]!.name;
  for (let j = 0; j < i; j++) if (cols[j]!.name === name) return true;
  return false;
}

/**
 * Builds a slot record from the transaction it belongs to, the record's index in that
 * transaction, the parsed change and the table's primary-key columns. Used by the slot capture
 * and the snapshot worker; throws `InvalidRecordError` naming the field if the result would break
 * a record-level rule (`checkShape`). The change's column arrays are used as they are, not copied.
 */
export function buildSlotRecord(tx: SlotTransaction, index: number, change: SlotChange, key: readonly string[]): SlotRecord {
  const record: SlotRecord = {
    format: SLOT_RECORD_FORMAT,
    source: tx.source,
    xid: tx.xid,
    commitLsn: tx.commitLsn,
    commitTs: tx.commitTs,
    index,
    table: change.table,
    op: change.op,
    key: change.op === 'truncate' ? [] : [...key],
    columns: change.columns,
    oldKey: change.oldKey,
    unchanged: change.unchanged,
  };
  if (change.unchangedTypes !== undefined && Object.keys(change.unchangedTypes).length > 0) record.unchangedTypes = change.unchangedTypes;
  checkShape(record);
  return record;
}

// ---------------------------------------------------------------------------------------------
// Packed snapshot records (see the module comment)

/** A column of a packed snapshot record: name and source type, no value (the values are in `rows`). */
export interface PackedColumn {
  name: string;
  type: string;
}

/** One packed snapshot record: many rows of one chunk of one table (see the module comment). */
export interface PackedSnapshotRecord extends Pick<SlotRecord, 'format' | 'source' | 'xid' | 'commitLsn' | 'commitTs' | 'index' | 'table' | 'key'> {
  op: 'snapshot';
  columns: PackedColumn[];
  rows: JsonValue[][];
}

/** Whether a raw record (already parsed) is in the packed form: a slot record with a `rows` field. */
export function isPackedSlotRecord(value: unknown): boolean {
  return isPlainObject(value) && value.format === SLOT_RECORD_FORMAT && 'rows' in value;
}

const NOT_IN_PACKED = ['oldKey', 'unchanged', 'unchangedTypes', 'capture'] as const;

/**
 * Checks everything of a packed record except the rows' contents: the shared fields, the
 * columns, and that `rows` is a non-empty array. Returns the record typed with `rows` unchecked;
 * `validatePackedSnapshotRecord` checks the rows too, and `packedRowRecord` reads one row.
 */
export function validatePackedHeader(value: unknown): PackedSnapshotRecord {
  if (!isPlainObject(value)) throw new InvalidRecordError('record', `expected a JSON object, got ${describe(value)}`);
  const r = value;
  checkSharedFields(r);
  if (r.op !== 'snapshot')
    throw new InvalidRecordError('op', `a packed record (one with rows) is a snapshot chunk: expected "snapshot", got ${describe(r.op)}`);
  for (const f of NOT_IN_PACKED) if (f in r) throw new InvalidRecordError(f, `a packed snapshot record carries no ${f}`);
  const key = names(r.key, 'key', false);
  if (!Array.isArray(r.columns)) throw new InvalidRecordError('columns', `expected an array of {name, type}, got ${describe(r.columns)}`);
  const seen = new Set<string>();
  const columns: PackedColumn[] = r.columns.map((c, i) => {
    const at = `columns[${i}]`;
    if (!isPlainObject(c)) throw new InvalidRecordError(at, `expected {name, type}, got ${describe(c)}`);
    if (typeof c.name !== 'string' || c.name === '') throw new InvalidRecordError(`${at}.name`, `expected a column name, got ${describe(c.name)}`);
    if (seen.has(c.name)) throw new InvalidRecordError(`${at}.name`, `column ${JSON.stringify(c.name)} appears twice`);
    seen.add(c.name);
    if (typeof c.type !== 'string' || c.type === '') throw new InvalidRecordError(`${at}.type`, `expected a type name, got ${describe(c.type)}`);
    if ('value' in c) throw new InvalidRecordError(`${at}.value`, 'a packed record carries the values in rows, not in columns');
    return { name: c.name, type: c.type };
  });
  for (const k of key) if (!seen.has(k)) throw new InvalidRecordError('key', `primary-key column ${JSON.stringify(k)} is not in columns`);
  if (!Array.isArray(r.rows)) throw new InvalidRecordError('rows', `expected an array of rows, got ${describe(r.rows)}`);
  if (r.rows.length === 0) throw new InvalidRecordError('rows', 'expected at least one row');
  return {
    format: SLOT_RECORD_FORMAT,
    source: r.source,
    xid: r.xid,
    commitLsn: r.commitLsn,
    commitTs: r.commitTs,
    index: r.index,
    table: r.table,
    op: 'snapshot',
    key,
    columns,
    rows: r.rows as JsonValue[][],
  };
}

/**
 * Row `i` of a packed record (its header checked by `validatePackedHeader`) as the per-row record
 * it means (see the module comment). Throws `InvalidRecordError` naming the row and, for a bad
 * value, the column (`rows[3][1]`, "column "v" …"): a row that is not an array of one value per
 * column, a value that is not JSON, a key value that is null or not a scalar.
 */
export function packedRowRecord(r: PackedSnapshotRecord, i: number): SlotRecord {
  const row: unknown = r.rows[i];
  const at = `rows[${i}]`;
  if (!Array.isArray(row)) throw new InvalidRecordError(at, `expected an array of ${r.columns.length} values, got ${describe(row)}`);
  if (row.length !== r.columns.length) throw new InvalidRecordError(at, `has ${row.length} values for ${r.columns.length} columns`);
  const columns: SlotColumn[] = new Array(row.length);
  for (let j = 0; j < row.length; j++) {
    const c = r.columns[j]!;
    const v: unknown = row[j];
    if (!isJsonValue(v)) throw new InvalidRecordError(`${at}[${j}]`, `column ${JSON.stringify(c.name)}: expected a JSON value, got ${describe(v)}`);
    columns[j] = { name: c.name, type: c.type, value: v };
  }
  for (const k of r.key) {
    const j = r.columns.findIndex((c) => c.name === k);
    const v = row[j] as JsonValue;
    if (v === null || typeof v === 'object')
      throw new InvalidRecordError(`${at}[${j}]`, `primary-key column ${JSON.stringify(k)}: expected a string, number or boolean, got ${describe(v)}`);
  }
  return {
    format: r.format,
    source: r.source,
    xid: r.xid,
    commitLsn: r.commitLsn,
    commitTs: r.commitTs,
    index: r.index,
    table: r.table,
    op: 'snapshot',
    key: r.key,
    columns,
    oldKey: null,
    unchanged: [],
  };
}

/**
 * Checks that `value` is a well-formed packed snapshot record, rows included, and returns it
 * typed. Throws `InvalidRecordError` naming the first field that is wrong (`columns[1].type`,
 * `rows[3]`, `rows[3][1]` with the column's name).
 */
export function validatePackedSnapshotRecord(value: unknown): PackedSnapshotRecord {
  const r = validatePackedHeader(value);
  for (let i = 0; i < r.rows.length; i++) packedRowRecord(r, i);
  return r;
}

/** A packed record holding only row `i` of `r` (the text a dead letter of that row keeps: it loses nothing and decodes alone). */
export function packedRecordOfRow(r: PackedSnapshotRecord, i: number): PackedSnapshotRecord {
  return { ...r, rows: [r.rows[i]!] };
}
