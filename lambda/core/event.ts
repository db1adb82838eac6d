/**
 * The change event: one record of the change log (docs/architecture.md §5.1).
 *
 * JSON, one event per Kinesis record, partition key = source + table + primary key
 * (`partitionKeyOf`). Producers: the normalizer (from DMS or slot records) and, later, the
 * snapshot worker. Consumers: every sink applier. Validation names the field that is wrong.
 */
import { LOWER_IDENT } from '../../contracts/identifiers.ts';
import { InvalidRecordError } from './errors.ts';
import { assertPosition, type Position } from './position.ts';
import { describeValue as describe, isPlainObject } from './json-shape.ts';

export const ENVELOPE_VERSION = 1;

export type ChangeOp = 'insert' | 'update' | 'delete' | 'snapshot' | 'truncate';
export const CHANGE_OPS: readonly ChangeOp[] = ['insert', 'update', 'delete', 'snapshot', 'truncate'];

export type CaptureMethod = 'dms' | 'slot' | 'poll' | 'snapshot';
export const CAPTURE_METHODS: readonly CaptureMethod[] = ['dms', 'slot', 'poll', 'snapshot'];

export type JsonScalar = string | number | boolean | null;
export type JsonValue = JsonScalar | JsonValue[] | { [k: string]: JsonValue };
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
}

/** A source (or sink) id: `LOWER_IDENT` of contracts/identifiers.ts, the rule the constructs apply too. */
export function isSourceId(value: unknown): value is string {
  return typeof value === 'string' && LOWER_IDENT.test(value);
}


function assertRow(v: unknown, field: string): Row {
  if (!isPlainObject(v)) throw new InvalidRecordError(field, `expected an object of column values, got ${describe(v)}`);
  return v as Row;
}


/**
 * Checks that `value` is a well-formed change event and returns it typed. Throws
 * `InvalidRecordError` naming the first field that is wrong. Does not check identifiers against
 * the registry (the applier does that with the registry in hand).
 */
export function validateChangeEvent(value: unknown): ChangeEvent {
  if (!isPlainObject(value)) throw new InvalidRecordError('event', `expected a JSON object, got ${describe(value)}`);
  const e = value;
  if (e.v !== ENVELOPE_VERSION) throw new InvalidRecordError('v', `unsupported envelope version ${describe(e.v)} (this reader knows ${ENVELOPE_VERSION})`);
  if (!isSourceId(e.source)) throw new InvalidRecordError('source', `expected a lower-case identifier, got ${describe(e.source)}`);
  if (typeof e.table !== 'string' || !/^[^.]+\.[^.]+$/.test(e.table)) throw new InvalidRecordError('table', `expected 'schema.table', got ${describe(e.table)}`);
  if (typeof e.op !== 'string' || !(CHANGE_OPS as readonly string[]).includes(e.op)) throw new InvalidRecordError('op', `expected one of ${CHANGE_OPS.join(', ')}, got ${describe(e.op)}`);
  const op = e.op as ChangeOp;
  const key = assertRow(e.key, 'key');
  if (op !== 'truncate' && Object.keys(key).length === 0) throw new InvalidRecordError('key', 'a row change needs at least one primary-key column');
  for (const [k, kv] of Object.entries(key)) {
    if (kv === null || typeof kv === 'object') throw new InvalidRecordError(`key.${k}`, `primary-key values must be strings, numbers or booleans, got ${describe(kv)}`);
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
  if (typeof e.commitTs !== 'string' || Number.isNaN(Date.parse(e.commitTs))) throw new InvalidRecordError('commitTs', `expected an ISO-8601 timestamp, got ${describe(e.commitTs)}`);
  const txId = e.txId === undefined || e.txId === null ? null : e.txId;
  if (txId !== null && typeof txId !== 'string') throw new InvalidRecordError('txId', `expected a string or null, got ${describe(txId)}`);
  if (typeof e.schemaVersion !== 'number' || !Number.isInteger(e.schemaVersion) || e.schemaVersion < 1) throw new InvalidRecordError('schemaVersion', `expected a positive integer, got ${describe(e.schemaVersion)}`);
  if (typeof e.capture !== 'string' || !(CAPTURE_METHODS as readonly string[]).includes(e.capture)) throw new InvalidRecordError('capture', `expected one of ${CAPTURE_METHODS.join(', ')}, got ${describe(e.capture)}`);
  const synthetic = e.synthetic === undefined ? false : e.synthetic;
  if (typeof synthetic !== 'boolean') throw new InvalidRecordError('synthetic', `expected a boolean, got ${describe(synthetic)}`);
  return {
    v: ENVELOPE_VERSION,
    source: e.source,
    table: e.table,
    op,
    key,
    after,
    before,
    missing: missing as string[],
    position,
    commitTs: e.commitTs,
    txId,
    schemaVersion: e.schemaVersion,
    capture: e.capture as CaptureMethod,
    synthetic,
  };
}

/** Stable text of a primary key: columns in name order, values JSON-encoded. Used for partition keys and grouping. */
export function keyText(key: Row): string {
  return JSON.stringify(Object.keys(key).sort().map((k) => [k, key[k]]));
}

/** Kinesis partition key of an event: source + table + primary key (hashed to stay under 256 chars). */
export function partitionKeyOf(event: Pick<ChangeEvent, 'source' | 'table' | 'key'>, hash: (s: string) => string): string {
  const pk = `${event.source}/${event.table}/${keyText(event.key)}`;
  return pk.length <= 256 ? pk : `${event.source}/${hash(pk)}`;
}
