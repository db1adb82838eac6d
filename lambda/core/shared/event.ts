/**
 * The change event: one record of the change log (docs/architecture.md §5.1).
 *
 * JSON, one event per Kinesis record, partition key = source + table + primary key
 * (`partitionKeyOf`). Producers: the normalizer (from DMS or slot records) and, later, the
 * snapshot worker. Consumers: every sink applier. Validation names the field that is wrong.
 */
import { LOWER_IDENT } from '../../../contracts/identifiers.ts';
import { InvalidRecordError } from './errors.ts';
import { assertPosition, type Position } from './position.ts';
import { describeValue as describe, isPlainObject, type JsonValue } from './json-shape.ts';
import { keyValueText } from './json-exact.ts';

export const ENVELOPE_VERSION = 1;

export type ChangeOp = 'insert' | 'update' | 'delete' | 'snapshot' | 'truncate';
export const CHANGE_OPS: readonly ChangeOp[] = ['insert', 'update', 'delete', 'snapshot', 'truncate'];

export type CaptureMethod = 'dms' | 'slot' | 'poll' | 'snapshot';
export const CAPTURE_METHODS: readonly CaptureMethod[] = ['dms', 'slot', 'poll', 'snapshot'];

export type { JsonScalar, JsonValue } from './json-shape.ts';
/** Column name → value. A column that is not a key of the object was not delivered. */
export type Row = Record<string, JsonValue>;

export interface ChangeEvent {
  /** Envelope version (`ENVELOPE_VERSION`). */
  v: number;
  /** Source id: the `CdcSource` it came from (lower-case identifier). */
  source: string;
  /** Table id `schema.table` as named in the source. */
  table: string;
  op: ChangeOp;
  /** Primary-key columns and values (empty for `truncate`). */
  key: Row;
  /** Row image after the change; `null` for delete and truncate. Holds only delivered columns. */
  after: Row | null;
  /** Row image before the change where captured (often key-only); `null` when not captured. */
  before: Row | null;
  /** Columns that exist but were not delivered (an unchanged TOAST value): never written to a sink. */
  missing: string[];
  /** Canonical position (see position.ts). */
  position: Position;
  /** Source commit time, ISO-8601. */
  commitTs: string;
  /** Source transaction id, as text; `null` when not known (snapshot rows). */
  txId: string | null;
  /** Schema version of the table this event was read with (registered in the control plane). */
  schemaVersion: number;
  capture: CaptureMethod;
  /** True for platform-generated events (cascade deletes), false for captured ones. */
  synthetic: boolean;
  /**
   * On the `delete` half of a primary-key change whose `insert` half lists `missing` columns
   * (an unchanged TOAST value under the default replica identity): those columns. The two halves
   * have different partition keys, so they may be applied in either order; a sink keeps the old
   * row's values of these columns until the new key's insert takes them (docs/primary-key-changes.md).
   * Absent (or empty) on every other event.
   */
  handover?: string[];
}

/** A source (or sink) id: `LOWER_IDENT` of contracts/identifiers.ts, the rule the constructs apply too. */
export function isSourceId(value: unknown): value is string {
  return typeof value === 'string' && LOWER_IDENT.test(value);
}

function assertRow(v: unknown, field: string): Row {
  if (!isPlainObject(v)) throw new InvalidRecordError(field, `expected an object of column values, got ${describe(v)}`);
  for (const c in v) {
    if (!Object.hasOwn(v, c)) continue;
    const cv = v[c];
    if (typeof cv !== 'number') continue;
    // An integer beyond 2^53 as a number has lost digits already (docs/exact-numbers.md).
    if (Number.isInteger(cv) && !Number.isSafeInteger(cv)) {
      throw new InvalidRecordError(`${field}.${c}`, `integer ${cv} is beyond 2^53 and cannot be exact as a JSON number: carry it as its decimal text`);
    }
    // JSON writes -0 as `0`: the sign would be lost on the way (docs/exact-numbers.md).
    if (Object.is(cv, -0)) throw new InvalidRecordError(`${field}.${c}`, `-0 as a JSON number is written 0 and loses its sign: carry it as its text '-0'`);
  }
  return v as Row;
}

/**
 * The last source id, table id and commit time that passed their checks: the events of a batch
 * mostly repeat them (one table, one transaction), and a text that passed once passes again, so
 * the check is one string comparison then (the appliers validate every event on the critical
 * path; docs/performance-log.md, "Warehouse apply: less Node work per event on the append path").
 */
const NONE_YET: unique symbol = Symbol('none yet'); // no parsed JSON value is a symbol
let passedSource: string | typeof NONE_YET = NONE_YET;
let passedTable: string | typeof NONE_YET = NONE_YET;
let passedCommitTs: string | typeof NONE_YET = NONE_YET;

/** Throws `InvalidRecordError` unless `v` is a schema version: a positive integer. */
export function assertSchemaVersion(v: unknown): asserts v is number {
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 1) throw new InvalidRecordError('schemaVersion', `expected a positive integer, got ${describe(v)}`);
}

/**
 * Checks that `value` is a well-formed change event and returns it typed. Throws
 * `InvalidRecordError` naming the first field that is wrong. Does not check identifiers against
 * the registry (the applier does that with the registry in hand).
 */
export function validateChangeEvent(value: unknown): ChangeEvent {
  if (!isPlainObject(value)) throw new InvalidRecordError('event', `expected a JSON object, got ${describe(value)}`);
  return checkedEvent(value, value.schemaVersion);
}

/**
 * `validateChangeEvent` of a decoded change, with `schemaVersion` as its version: what
 * `validateChangeEvent({ ...change, schemaVersion })` returns, without the copy. The event is a
 * new object, the caller's to stamp: the normalizer checks a change's shape before it knows the
 * version.
 */
export function validateDecodedChange(change: Omit<ChangeEvent, 'schemaVersion'>, schemaVersion: number): ChangeEvent {
  return checkedEvent(change as unknown as Record<string, unknown>, schemaVersion);
}

function checkedEvent(e: Record<string, unknown>, schemaVersion: unknown): ChangeEvent {
  if (e.v !== ENVELOPE_VERSION) throw new InvalidRecordError('v', `unsupported envelope version ${describe(e.v)} (this reader knows ${ENVELOPE_VERSION})`);
  if (e.source !== passedSource) {
    if (!isSourceId(e.source)) throw new InvalidRecordError('source', `expected a lower-case identifier, got ${describe(e.source)}`);
    passedSource = e.source;
  }
  if (e.table !== passedTable) {
    if (typeof e.table !== 'string' || !/^[^.]+\.[^.]+$/.test(e.table))
      throw new InvalidRecordError('table', `expected 'schema.table', got ${describe(e.table)}`);
    passedTable = e.table;
  }
  if (typeof e.op !== 'string' || !(CHANGE_OPS as readonly string[]).includes(e.op))
    throw new InvalidRecordError('op', `expected one of ${CHANGE_OPS.join(', ')}, got ${describe(e.op)}`);
  const op = e.op as ChangeOp;
  const key = assertRow(e.key, 'key');
  if (op !== 'truncate' && Object.keys(key).length === 0) throw new InvalidRecordError('key', 'a row change needs at least one primary-key column');
  for (const k in key) {
    if (!Object.hasOwn(key, k)) continue;
    const kv = key[k];
    if (kv === null || typeof kv === 'object')
      throw new InvalidRecordError(`key.${k}`, `primary-key values must be strings, numbers or booleans, got ${describe(kv)}`);
  }
  const after = e.after === null || e.after === undefined ? null : assertRow(e.after, 'after');
  if ((op === 'insert' || op === 'update' || op === 'snapshot') && after === null) throw new InvalidRecordError('after', `a ${op} needs an after image`);
  if ((op === 'delete' || op === 'truncate') && after !== null) throw new InvalidRecordError('after', `a ${op} has no after image`);
  const before = e.before === null || e.before === undefined ? null : assertRow(e.before, 'before');
  const missing = e.missing === undefined ? [] : e.missing;
  if (!Array.isArray(missing) || missing.some((m) => typeof m !== 'string')) throw new InvalidRecordError('missing', 'expected an array of column names');
  if (after) {
    for (const m of missing as string[]) {
      if (m in after) throw new InvalidRecordError(`missing.${m}`, 'a column cannot be both delivered and missing');
    }
  }
  const position = assertPosition(e.position, 'position');
  if (e.commitTs !== passedCommitTs) {
    if (typeof e.commitTs !== 'string' || Number.isNaN(Date.parse(e.commitTs)))
      throw new InvalidRecordError('commitTs', `expected an ISO-8601 timestamp, got ${describe(e.commitTs)}`);
    passedCommitTs = e.commitTs;
  }
  const txId = e.txId === undefined || e.txId === null ? null : e.txId;
  if (txId !== null && typeof txId !== 'string') throw new InvalidRecordError('txId', `expected a string or null, got ${describe(txId)}`);
  assertSchemaVersion(schemaVersion);
  if (typeof e.capture !== 'string' || !(CAPTURE_METHODS as readonly string[]).includes(e.capture))
    throw new InvalidRecordError('capture', `expected one of ${CAPTURE_METHODS.join(', ')}, got ${describe(e.capture)}`);
  const synthetic = e.synthetic === undefined ? false : e.synthetic;
  if (typeof synthetic !== 'boolean') throw new InvalidRecordError('synthetic', `expected a boolean, got ${describe(synthetic)}`);
  const handover = e.handover === undefined || e.handover === null ? [] : e.handover;
  if (!Array.isArray(handover) || handover.some((m) => typeof m !== 'string')) throw new InvalidRecordError('handover', 'expected an array of column names');
  if (handover.length > 0 && op !== 'delete')
    throw new InvalidRecordError('handover', `only the delete half of a primary-key change hands columns over, not a ${op}`);
  const event: ChangeEvent = {
    v: ENVELOPE_VERSION,
    // Checked above (or equal to a text that passed the same check).
    source: e.source as string,
    table: e.table as string,
    op,
    key,
    after,
    before,
    missing: missing as string[],
    position,
    commitTs: e.commitTs as string,
    txId,
    schemaVersion,
    capture: e.capture as CaptureMethod,
    synthetic,
  };
  if (handover.length > 0) event.handover = [...(handover as string[])];
  return event;
}

/**
 * Marks the delete half of each primary-key change among one record's changes with the columns
 * its insert half did not deliver (`handover`), so a sink can keep the old row's values for the
 * insert, which may be applied first or later on another shard. Pure; returns new objects.
 */
export function linkKeyChanges<T extends Pick<ChangeEvent, 'op' | 'key' | 'before' | 'missing' | 'position' | 'handover'>>(changes: readonly T[]): T[] {
  return changes.map((d) => {
    if (d.op !== 'delete') return d;
    const k = keyText(d.key);
    const ins = changes.find(
      (i) =>
        (i.op === 'insert' || i.op === 'snapshot') &&
        i.position === d.position &&
        i.missing.length > 0 &&
        i.before !== null &&
        keyText(pick(i.before, Object.keys(d.key))) === k &&
        keyText(i.key) !== k,
    );
    return ins ? { ...d, handover: [...ins.missing] } : d;
  });
}

function pick(row: Row, columns: readonly string[]): Row {
  const out: Row = {};
  for (const c of columns) if (c in row) out[c] = row[c]!;
  return out;
}

/**
 * Stable text of a primary key: columns in name order, each value by its text as the sinks
 * receive it (`keyValueText`: `5` and `"5"` are the same key, as they are in SQL), JSON-encoded.
 * Used for partition keys and grouping. Distinct exact values always give distinct texts
 * (docs/exact-numbers.md).
 */
export function keyText(key: Row): string {
  const names = Object.keys(key);
  // One column (most keys): the same text, without the arrays.
  if (names.length === 1) return `[[${JSON.stringify(names[0])},${keyCellJson(key[names[0]!])}]]`;
  return JSON.stringify(names.sort().map((k) => [k, keyCell(key[k])]));
}

/** A key value as `keyText` writes it: scalars by their text, null and JSON documents as they are. */
const keyCell = (v: Row[string] | undefined): JsonValue | undefined => (v === null || typeof v === 'object' || v === undefined ? v : keyValueText(v));

/** `keyCell(v)` as JSON inside an array (where `undefined` is written `null`). */
const keyCellJson = (v: Row[string] | undefined): string => (v === undefined ? 'null' : JSON.stringify(keyCell(v)));

/** Kinesis partition key of an event: source + table + primary key (hashed to stay under 256 chars). */
export function partitionKeyOf(event: Pick<ChangeEvent, 'source' | 'table' | 'key'>, hash: (s: string) => string): string {
  const pk = `${event.source}/${event.table}/${keyText(event.key)}`;
  return pk.length <= 256 ? pk : `${event.source}/${hash(pk)}`;
}
