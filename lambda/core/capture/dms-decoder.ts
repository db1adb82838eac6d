/**
 * Decodes AWS DMS records (Kinesis target, JSON message format, PostgreSQL source) into canonical
 * changes. Record shape: research notes on DMS §1 (`data` + `metadata`, `control` for control
 * records, the before image under `before-image`).
 *
 * Position. A change's position is `makePosition(lsn, transaction-record-id)` where `lsn` is the
 * first `.`-separated part of `metadata.stream-position` (`00000002/7C007178.3.00000002/7C007178`
 * → `00000002/7C007178`). AWS does not document the parts of a PostgreSQL stream position; we
 * treat the first one as the commit position of the transaction (DMS emits transactions in
 * commit order) and the transaction record id as the order within it. The task must set
 * `IncludeTransactionDetails`, otherwise change records carry no position and are refused. The
 * normalizer checks this assumption on every record (`POSITION_REGRESSION`, docs/positions.md).
 *
 * Numbers. The record must be parsed with `parseJsonExact` (lambda/core/shared/json-exact.ts), not
 * `JSON.parse`: an `int8` beyond 2^53 or a numeric then arrives here as its exact decimal text
 * (docs/exact-numbers.md). Table definitions keep a column's length, precision and scale in its
 * type (`WSTRING(20)`, `NUMERIC(12,2)`; docs/schema-drift.md).
 *
 * Full load. `load` records carry no transaction details. They decode to op `snapshot` at
 * `POSITION_ZERO`, which orders before every captured change: a load row applies only where the
 * key has no captured change yet, and duplicates of a load row are idempotent. Their commit time
 * is `commit-timestamp` when present, else `metadata.timestamp` (when DMS built the message).
 *
 * Keys. DMS data records do not say which columns form the primary key. The decoder takes them
 * from `ctx.keyColumns(table)` (table configuration or schema registry), otherwise from the
 * column names of a non-empty before image (with `ColumnFilter: pk-only` that is the key),
 * otherwise it throws `KeyUnknownError`. The result's `keyColumns` are the columns the changes
 * were keyed on.
 *
 * Ops.
 * - `insert`: `after` = `data`.
 * - `update`: `after` = `data`; `before` = the before image if non-empty, else null. When the
 *   before image holds the key and its key values differ from `data`'s, the primary key changed:
 *   a `delete` of the old key (`before` = the before image) and an `insert` of the new key
 *   (`before` = the before image), both at the record's position (different keys). Columns
 *   absent from `data` were not delivered: when `ctx.columns(table)` is known they are listed in
 *   `missing`.
 * - `delete`: key from `data`; `after` = null; `before` = the key values only (the other
 *   columns of a DMS delete arrive as nulls, which are not values).
 * - control records (`create-table`, `drop-table`, `rename-table`, `add-column`, `drop-column`,
 *   `rename-column`, `column-type-change`, `change-columns`) decode to `DecodedControl`, with
 *   columns and key when the record carries a `table-def`.
 * - Partitions: DMS names a change of a partitioned table by the leaf partition holding the row;
 *   with `ctx.rootOf` it decodes as a change of the root (an `UPDATE` that moved a row between
 *   partitions arrives as a delete from one and an insert into the other, both of the root); a
 *   control record of a partition is `ignored` (the root's is the one that counts).
 * - DMS's own tables (name starting with `awsdms_`, such as `awsdms_apply_exceptions`) and
 *   control records without a table name (task-level) are `ignored`. A data record without a
 *   table name is malformed and refused.
 * - Any other `record-type` or `operation` is refused with `UnknownOperationError` naming it;
 *   structural problems throw `InvalidRecordError` naming the field.
 */
import { CdcError, InvalidRecordError, UnknownOperationError } from '../shared/errors.ts';
import { ENVELOPE_VERSION, type JsonValue, type Row } from '../shared/event.ts';
import type { ColumnDef } from '../shared/control-plane.ts';
import type { DecodeResult, DecodedChange } from './decoded.ts';
import { makePosition, POSITION_ZERO, type Position } from '../shared/position.ts';
import { describeValue as describe, isPlainObject } from '../shared/json-shape.ts';

/** What a decoder may ask about the tables of the source. */
export interface DecodeContext {
  /** Source id the records came from. */
  source: string;
  /** Primary-key columns of a table (`schema.table`) when configured or registered, else null. */
  keyColumns(table: string): string[] | null;
  /** All columns of a table when known (registry), else null. Used to tell undelivered columns. */
  columns?(table: string): string[] | null;
  /**
   * The partitioned table whose changes a table's are: DMS reports each change of a partitioned
   * table under the name of the leaf partition that holds the row (docs/partitioned-tables.md);
   * the root for a partition, null for a table that is no partition. @default none: every table is its own
   */
  rootOf?(table: string): string | null;
}

/** The primary key of a table is not known, so its changes cannot be keyed. */
export class KeyUnknownError extends CdcError {
  constructor(readonly table: string) {
    super(
      'KEY_UNKNOWN',
      `primary key of ${table} is unknown: DMS records do not name key columns. Declare it (the captured table's 'key' setting, or 'cdc decode --key ${table}=col1,col2') or enable a pk-only before image on the DMS task`,
    );
  }
}

/**
 * A before image that lacks a declared key column: the declared key is not the table's primary
 * key (DMS puts the real key columns in a pk-only before image). Keying changes on the wrong
 * columns would merge different rows silently, so the record is refused instead.
 */
export class KeyMismatchError extends CdcError {
  constructor(
    readonly table: string,
    declared: readonly string[],
    before: readonly string[],
  ) {
    super(
      'KEY_MISMATCH',
      `declared primary key of ${table} is (${declared.join(', ')}) but the DMS before image carries (${before.join(', ')}): fix the captured table's key setting, then re-snapshot the table`,
    );
  }
}

/** The field DMS writes the before image to (`BeforeImageSettings.FieldName`, set by the constructs). */
export const DMS_BEFORE_IMAGE_FIELD = 'before-image';

export const DMS_DATA_OPERATIONS = ['load', 'insert', 'update', 'delete'] as const;
export const DMS_CONTROL_OPERATIONS = [
  'create-table',
  'drop-table',
  'rename-table',
  'change-columns',
  'add-column',
  'drop-column',
  'rename-column',
  'column-type-change',
] as const;

/** Prefix of the tables DMS creates for itself (`awsdms_apply_exceptions`, `awsdms_ddl_audit`, …). */
export const DMS_OWN_TABLE_PREFIX = 'awsdms_';

function optionalString(meta: Record<string, unknown>, field: string): string {
  const v = meta[field];
  if (v === undefined || v === null) return '';
  if (typeof v !== 'string') throw new InvalidRecordError(`metadata.${field}`, `expected a string, got ${describe(v)}`);
  return v;
}

/** The last timestamp text that passed `timestamp`: the records of one transaction share theirs, so most are checked by one comparison. */
let passedTimestamp = '';

function timestamp(meta: Record<string, unknown>, field: string): string {
  const v = meta[field];
  if (v === passedTimestamp && v !== '') return v;
  if (typeof v !== 'string' || Number.isNaN(Date.parse(v)))
    throw new InvalidRecordError(`metadata.${field}`, `expected an ISO-8601 timestamp, got ${describe(v)}`);
  passedTimestamp = v;
  return v;
}

/**
 * The last stream position read and its commit LSN as a position's first 16 hex digits: the
 * records of one transaction share their stream position, so its LSN is parsed once per
 * transaction (docs/performance-log.md, "71. The normalizer's work per DMS record, and the cores' bound on the end-to-end line").
 */
let lastStreamPosition = '';
let lastLsnHex = '';

function positionOf(meta: Record<string, unknown>): Position {
  const sp = meta['stream-position'];
  if (typeof sp !== 'string' || sp === '') {
    throw new InvalidRecordError(
      'metadata.stream-position',
      `expected a PostgreSQL stream position like '00000002/7C007178.3.00000002/7C007178' (the task needs IncludeTransactionDetails), got ${describe(sp)}`,
    );
  }
  const rid = meta['transaction-record-id'];
  if (typeof rid !== 'number' || !Number.isInteger(rid) || rid < 0 || rid > 0xffffffff) {
    throw new InvalidRecordError('metadata.transaction-record-id', `expected a non-negative integer, got ${describe(rid)}`);
  }
  // The same text as the record before: the same LSN, and `makePosition`'s checks passed for it (the index is checked above).
  if (sp === lastStreamPosition) return lastLsnHex + rid.toString(16).padStart(8, '0');
  try {
    const position = makePosition(sp.split('.')[0]!, rid);
    lastStreamPosition = sp;
    lastLsnHex = position.slice(0, 16);
    return position;
  } catch (e) {
    if (e instanceof InvalidRecordError)
      throw new InvalidRecordError('metadata.stream-position', `cannot read an LSN from ${JSON.stringify(sp)}: ${e.message}`);
    throw e;
  }
}

function isKeyValue(v: JsonValue | undefined): v is string | number | boolean {
  return typeof v === 'string' || typeof v === 'number' || typeof v === 'boolean';
}

function keyFrom(row: Row, keyColumns: readonly string[], field: string): Row {
  const key: Row = {};
  for (const k of keyColumns) {
    const v = row[k];
    if (!isKeyValue(v)) {
      throw new InvalidRecordError(
        `${field}.${k}`,
        v === undefined ? 'primary-key column is missing' : `primary-key value must be a string, number or boolean, got ${describe(v)}`,
      );
    }
    key[k] = v;
  }
  return key;
}

function rowOf(v: unknown, field: string): Row {
  if (!isPlainObject(v)) throw new InvalidRecordError(field, `expected an object of column values, got ${describe(v)}`);
  return v as Row;
}

/**
 * A DMS column type with its length or precision and scale, as the registry compares them
 * (docs/schema-drift.md): `{"type":"WSTRING","length":20}` → `WSTRING(20)`,
 * `{"type":"NUMERIC","precision":12,"scale":2}` → `NUMERIC(12,2)`; other types as they are.
 */
function typeWithModifier(c: Record<string, unknown>): string | null {
  const type = c.type as string | undefined;
  if (type === undefined) return null;
  const t = type.toUpperCase();
  if ((t === 'STRING' || t === 'WSTRING') && typeof c.length === 'number' && c.length > 0) return `${type}(${c.length})`;
  if (t === 'NUMERIC' && typeof c.precision === 'number' && c.precision > 0) return `${type}(${c.precision},${typeof c.scale === 'number' ? c.scale : 0})`;
  return type;
}

function tableDef(control: Record<string, unknown>): { columns: ColumnDef[]; key: string[] | null } | null {
  const def = control['table-def'];
  if (def === undefined || def === null) return null;
  if (!isPlainObject(def)) throw new InvalidRecordError('control.table-def', `expected an object, got ${describe(def)}`);
  if (!isPlainObject(def.columns))
    throw new InvalidRecordError('control.table-def.columns', `expected an object of column definitions, got ${describe(def.columns)}`);
  const columns: ColumnDef[] = Object.entries(def.columns).map(([name, c]) => {
    const at = `control.table-def.columns.${name}`;
    if (!isPlainObject(c)) throw new InvalidRecordError(at, `expected {type, nullable}, got ${describe(c)}`);
    if (c.type !== undefined && typeof c.type !== 'string') throw new InvalidRecordError(`${at}.type`, `expected a type name, got ${describe(c.type)}`);
    if (c.nullable !== undefined && typeof c.nullable !== 'boolean')
      throw new InvalidRecordError(`${at}.nullable`, `expected a boolean, got ${describe(c.nullable)}`);
    for (const f of ['length', 'precision', 'scale'] as const) {
      const v = c[f];
      if (v !== undefined && v !== null && (typeof v !== 'number' || !Number.isInteger(v)))
        throw new InvalidRecordError(`${at}.${f}`, `expected an integer, got ${describe(v)}`);
    }
    return { name, type: typeWithModifier(c), nullable: (c.nullable as boolean | undefined) ?? true };
  });
  let key: string[] | null = null;
  const pk = def['primary-key'];
  if (pk !== undefined && pk !== null) {
    if (!Array.isArray(pk) || pk.some((k) => typeof k !== 'string' || !columns.some((c) => c.name === k))) {
      throw new InvalidRecordError('control.table-def.primary-key', `expected an array of names of defined columns, got ${JSON.stringify(pk)}`);
    }
    key = pk.length > 0 ? (pk as string[]) : null;
  }
  return { columns, key };
}

/**
 * Decodes one DMS record (already parsed from JSON). Returns the changes it stands for, a
 * control result, or `ignored`; throws `InvalidRecordError`, `UnknownOperationError` or
 * `KeyUnknownError`, each naming what was wrong.
 */
export function decodeDmsRecord(record: unknown, ctx: DecodeContext): DecodeResult {
  if (!isPlainObject(record)) throw new InvalidRecordError('record', `expected a JSON object, got ${describe(record)}`);
  const meta = record.metadata;
  if (!isPlainObject(meta)) throw new InvalidRecordError('metadata', `expected an object, got ${describe(meta)}`);
  const recordType = meta['record-type'];
  if (typeof recordType !== 'string') throw new InvalidRecordError('metadata.record-type', `expected 'data' or 'control', got ${describe(recordType)}`);
  const operation = meta.operation;
  if (typeof operation !== 'string' || operation === '')
    throw new InvalidRecordError('metadata.operation', `expected an operation name, got ${describe(operation)}`);
  const schemaName = optionalString(meta, 'schema-name');
  const tableName = optionalString(meta, 'table-name');

  if (recordType === 'control') {
    if (!(DMS_CONTROL_OPERATIONS as readonly string[]).includes(operation))
      throw new UnknownOperationError(operation, 'metadata.operation of a control record');
    if (tableName === '') return { kind: 'ignored', reason: `task-level control record (${operation}) without a table name` };
    if (tableName.startsWith(DMS_OWN_TABLE_PREFIX))
      return { kind: 'ignored', reason: `${operation} of DMS's own table ${schemaName ? `${schemaName}.` : ''}${tableName}` };
    if (schemaName === '') throw new InvalidRecordError('metadata.schema-name', `expected the schema of table ${JSON.stringify(tableName)}, got nothing`);
    const root = ctx.rootOf?.(`${schemaName}.${tableName}`) ?? null;
    // A partition's definition is its root's (a column added to the root is added to every partition): the root's own record is the one that counts.
    if (root !== null) return { kind: 'ignored', reason: `${operation} of ${schemaName}.${tableName}, a partition of ${root}` };
    const control = record.control ?? {};
    if (!isPlainObject(control)) throw new InvalidRecordError('control', `expected an object, got ${describe(control)}`);
    const def = tableDef(control);
    return {
      kind: 'control',
      source: ctx.source,
      table: `${schemaName}.${tableName}`,
      operation,
      columns: def?.columns ?? null,
      key: def?.key ?? null,
      position: null,
    };
  }
  if (recordType !== 'data') throw new UnknownOperationError(recordType, 'metadata.record-type');
  if (!(DMS_DATA_OPERATIONS as readonly string[]).includes(operation)) throw new UnknownOperationError(operation, 'metadata.operation of a data record');
  if (tableName.startsWith(DMS_OWN_TABLE_PREFIX))
    return { kind: 'ignored', reason: `${operation} on DMS's own table ${schemaName ? `${schemaName}.` : ''}${tableName}` };
  if (tableName === '') throw new InvalidRecordError('metadata.table-name', 'a data record names its table');
  if (schemaName === '') throw new InvalidRecordError('metadata.schema-name', `expected the schema of table ${JSON.stringify(tableName)}, got nothing`);
  if (tableName.includes('.') || schemaName.includes('.'))
    throw new InvalidRecordError('metadata.table-name', `a table id is 'schema.table' and neither part may contain a dot: ${schemaName}.${tableName}`);
  // A change of a partition is a change of its root (docs/partitioned-tables.md).
  const table = ctx.rootOf?.(`${schemaName}.${tableName}`) ?? `${schemaName}.${tableName}`;
  const data = rowOf(record.data, 'data');

  const rawBefore = record[DMS_BEFORE_IMAGE_FIELD];
  const beforeImage = rawBefore === undefined || rawBefore === null ? null : rowOf(rawBefore, DMS_BEFORE_IMAGE_FIELD);
  const before = beforeImage !== null && Object.keys(beforeImage).length > 0 ? beforeImage : null;

  const keyColumns = ctx.keyColumns(table) ?? (before !== null ? Object.keys(before) : null);
  if (keyColumns === null || keyColumns.length === 0) throw new KeyUnknownError(table);
  // A non-empty before image always holds the key (pk-only) or every column (all).
  if (before !== null && !keyColumns.every((k) => k in before)) throw new KeyMismatchError(table, keyColumns, Object.keys(before));

  const isLoad = operation === 'load';
  const position = isLoad ? POSITION_ZERO : positionOf(meta);
  const commitTs = isLoad && meta['commit-timestamp'] === undefined ? timestamp(meta, 'timestamp') : timestamp(meta, 'commit-timestamp');
  const txIdRaw = meta['transaction-id'];
  if (txIdRaw !== undefined && txIdRaw !== null && typeof txIdRaw !== 'number' && typeof txIdRaw !== 'string') {
    throw new InvalidRecordError('metadata.transaction-id', `expected a number or string, got ${describe(txIdRaw)}`);
  }
  const txId = txIdRaw === undefined || txIdRaw === null ? null : String(txIdRaw);

  const at: ChangeAt = { source: ctx.source, table, position, commitTs, txId };
  switch (operation) {
    case 'load':
      return changesOf(keyColumns, [changeAt(at, 'snapshot', keyFrom(data, keyColumns, 'data'), { ...data }, null, [])]);
    case 'insert':
      return changesOf(keyColumns, [changeAt(at, 'insert', keyFrom(data, keyColumns, 'data'), { ...data }, null, [])]);
    case 'delete': {
      const key = keyFrom(data, keyColumns, 'data');
      return changesOf(keyColumns, [changeAt(at, 'delete', key, null, { ...key }, [])]);
    }
    case 'update': {
      const key = keyFrom(data, keyColumns, 'data');
      const known = ctx.columns?.(table) ?? null;
      const missing = known === null ? [] : known.filter((c) => !(c in data));
      const after = { ...data };
      if (before !== null) {
        const oldKey = keyFrom(before, keyColumns, DMS_BEFORE_IMAGE_FIELD);
        if (keyColumns.some((k) => JSON.stringify(oldKey[k]) !== JSON.stringify(key[k]))) {
          return changesOf(keyColumns, [changeAt(at, 'delete', oldKey, null, { ...before }, []), changeAt(at, 'insert', key, after, { ...before }, missing)]);
        }
      }
      return changesOf(keyColumns, [changeAt(at, 'update', key, after, before === null ? null : { ...before }, missing)]);
    }
    default:
      throw new UnknownOperationError(operation, 'metadata.operation of a data record');
  }
}

/** What every change of one DMS data record shares. */
interface ChangeAt {
  source: string;
  table: string;
  position: Position;
  commitTs: string;
  txId: string | null;
}

/** One change of a DMS data record (module functions, not closures made per record: docs/performance-log.md, "71. The normalizer's work per DMS record, and the cores' bound on the end-to-end line"). */
function changeAt(at: ChangeAt, op: DecodedChange['op'], key: Row, after: Row | null, before: Row | null, missing: string[]): DecodedChange {
  return {
    v: ENVELOPE_VERSION,
    source: at.source,
    table: at.table,
    op,
    key,
    after,
    before,
    missing,
    position: at.position,
    commitTs: at.commitTs,
    txId: at.txId,
    capture: 'dms',
    synthetic: false,
  };
}

function changesOf(keyColumns: readonly string[], changes: DecodedChange[]): DecodeResult {
  return { kind: 'changes', changes, columns: null, keyColumns: [...keyColumns] };
}
