/**
 * Decodes a raw record of the built-in slot capture (`slot-record.ts`) into canonical changes.
 *
 * - Position: `makePosition(commitLsn, index)`: commit order first, then order within the transaction.
 * - insert: `after` = the delivered columns, `before` = null.
 * - update: `after` = the delivered columns; columns listed in `unchanged` (unchanged TOAST
 *   values) are absent from `after` and listed in `missing` (absent is not null), except when
 *   the old image holds them (`REPLICA IDENTITY FULL`): an unchanged value is the old value, so
 *   it is taken from there;
 *   `before` = `oldKey` as a row when the capture supplied it, else null. When `oldKey` holds
 *   every primary-key column and its key values differ from the new tuple's, the primary key
 *   changed: the record decodes to a `delete` of the old key (`before` = the old image)
 *   followed by an `insert` of the new key (`before` = the old image), both at the record's
 *   position (they concern different keys). An old image without all key columns (a replica
 *   identity index other than the primary key) cannot show a key change and is kept as `before`.
 *   Caveat: a key change under the default replica identity that leaves a TOAST value unchanged
 *   yields an `insert` with that column in `missing`: the value exists only under the old key.
 * - delete: the key is read from `oldKey`; `before` = `oldKey` as a row (the key, or the whole
 *   old row under `REPLICA IDENTITY FULL`; test_decoding leaves out null columns of old images).
 * - truncate: op `truncate`, empty key, no images.
 *
 * `columns` in the result is the table's column list (name and type; nullability is not carried
 * by test_decoding and is reported as `true`) only when the record delivered every column: for
 * inserts and for updates without unchanged columns. Otherwise it is `null` (no information,
 * not "no columns"). `keyColumns` is the record's primary key.
 */
import { InvalidRecordError } from '../shared/errors.ts';
import { ENVELOPE_VERSION, type Row } from '../shared/event.ts';
import type { ColumnDef } from '../shared/control-plane.ts';
import type { DecodeResult, DecodedChange } from './decoded.ts';
import { makePosition } from '../shared/position.ts';
import {
  isPackedSlotRecord,
  packedRowRecord,
  validatePackedHeader,
  validateSlotRecord,
  type PackedSnapshotRecord,
  type SlotColumn,
  type SlotRecord,
} from './slot-record.ts';

function toRow(columns: readonly SlotColumn[]): Row {
  const row: Row = {};
  for (const c of columns) row[c.name] = c.value;
  return row;
}

/** The key of a tuple: every key column must be present with a non-null scalar value. */
function keyOf(columns: readonly SlotColumn[], key: readonly string[], field: string): Row {
  const out: Row = {};
  for (const k of key) {
    const col = columns.find((c) => c.name === k);
    if (!col) throw new InvalidRecordError(field, `primary-key column ${JSON.stringify(k)} is not in the tuple`);
    if (col.value === null || typeof col.value === 'object') {
      throw new InvalidRecordError(`${field}.${k}`, `primary-key value must be a string, number or boolean, got ${col.value === null ? 'null' : 'an object'}`);
    }
    out[k] = col.value;
  }
  return out;
}

function sameKey(a: Row, b: Row): boolean {
  return Object.keys(a).every((k) => JSON.stringify(a[k]) === JSON.stringify(b[k]));
}

/**
 * Decodes one slot-capture record. Throws `InvalidRecordError` naming the field for a malformed
 * record. A packed snapshot record (slot-record.ts) decodes to one `snapshot` change per row, in
 * row order: each row exactly as the per-row record it stands for (`packedRowRecord`) decodes.
 */
export function decodeSlotRecord(record: unknown): DecodeResult {
  if (isPackedSlotRecord(record)) return decodePacked(validatePackedHeader(record));
  return decodeValid(validateSlotRecord(record));
}

function decodePacked(p: PackedSnapshotRecord): DecodeResult {
  const changes: DecodedChange[] = [];
  let first: DecodeResult | null = null;
  for (let i = 0; i < p.rows.length; i++) {
    const one = decodeValid(packedRowRecord(p, i));
    if (one.kind !== 'changes') throw new InvalidRecordError(`rows[${i}]`, `decoded to ${one.kind}`);
    first ??= one;
    changes.push(...one.changes);
  }
  return { ...(first as Extract<DecodeResult, { kind: 'changes' }>), changes };
}

function decodeValid(r: SlotRecord): DecodeResult {
  const position = makePosition(r.commitLsn, r.index);
  // The snapshot worker's records: its rows, and the sweep that closes a re-snapshot (a truncate with xid 0; docs/snapshot.md).
  const fromSnapshot = r.op === 'snapshot' || (r.op === 'truncate' && r.xid === '0');
  const base = {
    v: ENVELOPE_VERSION,
    source: r.source,
    table: r.table,
    position,
    commitTs: r.commitTs,
    txId: fromSnapshot || r.capture === 'poll' ? null : r.xid,
    capture: fromSnapshot ? ('snapshot' as const) : r.capture === 'poll' ? ('poll' as const) : ('slot' as const),
    synthetic: false,
  };
  const change = (fields: Pick<DecodedChange, 'op' | 'key' | 'after' | 'before' | 'missing'>): DecodedChange => ({
    v: base.v,
    source: base.source,
    table: base.table,
    op: fields.op,
    key: fields.key,
    after: fields.after,
    before: fields.before,
    missing: fields.missing,
    position: base.position,
    commitTs: base.commitTs,
    txId: base.txId,
    capture: base.capture,
    synthetic: base.synthetic,
  });

  if (r.op === 'truncate') {
    return { kind: 'changes', changes: [change({ op: 'truncate', key: {}, after: null, before: null, missing: [] })], columns: null, keyColumns: null };
  }

  const complete = r.columns !== null && r.unchanged.length === 0;
  const columns: ColumnDef[] | null = complete ? r.columns!.map((c) => ({ name: c.name, type: c.type, nullable: true })) : null;
  // A partial image still shows the types of what it carries: a table first seen through a
  // delete or a TOAST update must not be registered with unknown types (the sinks would create
  // the columns as text and then hold the table when the real type arrives).
  const types: Record<string, string> = {};
  for (const c of [...(r.oldKey ?? []), ...(r.columns ?? [])]) if (c.type) types[c.name] = c.type;
  for (const [name, type] of Object.entries(r.unchangedTypes ?? {})) types[name] ??= type;
  const result = (changes: DecodedChange[]): DecodeResult => ({
    kind: 'changes',
    changes,
    columns,
    keyColumns: [...r.key],
    ...(columns === null ? { types } : {}),
  });

  if (r.op === 'delete') {
    const oldKey = r.oldKey!;
    return result([change({ op: 'delete', key: keyOf(oldKey, r.key, 'oldKey'), after: null, before: toRow(oldKey), missing: [] })]);
  }

  const after = toRow(r.columns!);
  const key = keyOf(r.columns!, r.key, 'columns');
  if (r.op === 'insert' || r.op === 'snapshot') {
    return result([change({ op: r.op, key, after, before: null, missing: [] })]);
  }

  // update
  const before = r.oldKey === null ? null : toRow(r.oldKey);
  // An unchanged TOAST value equals the old value: under REPLICA IDENTITY FULL the old image
  // carries it (PostgreSQL flattens it into the WAL record), so it is delivered after all.
  const missing: string[] = [];
  for (const u of r.unchanged) {
    if (before !== null && u in before) after[u] = before[u]!;
    else missing.push(u);
  }
  const oldHasKey = r.oldKey !== null && r.key.every((k) => r.oldKey!.some((c) => c.name === k));
  if (oldHasKey) {
    const oldKey = keyOf(r.oldKey!, r.key, 'oldKey');
    if (!sameKey(oldKey, key)) {
      return result([change({ op: 'delete', key: oldKey, after: null, before, missing: [] }), change({ op: 'insert', key, after, before, missing })]);
    }
  }
  return result([change({ op: 'update', key, after, before, missing })]);
}
