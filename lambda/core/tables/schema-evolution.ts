/**
 * Schema evolution: compares what a record says about its table with the registered schema
 * version and classifies the difference (invariant 8).
 *
 * - `same`: nothing new; the event is read with the current version.
 * - `compatible`: a new table; new nullable column(s); a widened type that every sink applies
 *   without a column-type change (smallint → integer → bigint, numeric(p,s) → numeric(q ≥ p,s)
 *   with q ≤ 38, varchar(n) → varchar(m ≥ n) or text, char(n) → char(m ≥ n), real → double
 *   precision, timestamp(p) → timestamp(q ≥ p)); a type or key learned where it was unknown; a
 *   nullability change of an existing column. A new version is registered and propagates by
 *   itself.
 *
 *   A widening is compatible only when the warehouse keeps the column's type
 *   (`sinkType(from) === sinkType(to)`, lambda/core/warehouse/warehouse-sql.ts): Redshift cannot change a
 *   column's type (except VARCHAR length), so a widening the warehouse would have to apply with
 *   ALTER COLUMN TYPE (integer → numeric, a larger numeric scale, numeric(p,s) → unbounded
 *   numeric, anything beyond 38 digits) is classified breaking here, and the table pauses
 *   instead of being held by every warehouse with `SinkTypeConflictError` (docs/schema-drift.md).
 * - `breaking`: a dropped or renamed column, a narrowed or otherwise changed type, a primary-key
 *   change, a new NOT NULL column (existing rows got a value the stream never carried), a
 *   dropped or renamed table. The table pauses until an operator decides.
 *
 * What an observation can prove depends on where it came from. A DMS data record omits columns
 * it did not deliver, so an absent column is NOT a drop (`complete: false`; DMS reports drops as
 * control records). A slot-capture insert or update names every column (delivered, or listed as
 * not delivered), and a control record with a table definition lists the whole table: there an
 * absent column is a drop (`complete: true`). An unknown type or nullability (null) is no
 * information and never a change.
 *
 * Pure: no I/O. The normalizer turns records into observations and registers the result.
 */
import type { ColumnDef, SchemaVersion } from '../shared/control-plane.ts';
import { sinkType, sinkTypeRefusal } from '../warehouse/warehouse-sql.ts';

/** A column as a record shows it. `type` and `nullable` are null when the record does not say. */
export interface ObservedColumn {
  name: string;
  type: string | null;
  nullable: boolean | null;
}

/** What one record (or control record) says about its table. */
export interface ObservedShape {
  /** Columns the record names (delivered and not-delivered ones), in table order where known. */
  columns: ObservedColumn[];
  /** Primary-key columns in key order, or null when the record does not say. */
  key: string[] | null;
  /** True when `columns` is the whole table, so that a registered column absent from it was dropped. */
  complete: boolean;
}

export type SchemaChange =
  | { kind: 'new-table' }
  | { kind: 'add-column'; column: string; type: string | null }
  | { kind: 'widen-type'; column: string; from: string; to: string }
  | { kind: 'learn-type'; column: string; type: string }
  | { kind: 'change-nullability'; column: string; nullable: boolean }
  | { kind: 'learn-key'; key: string[] }
  | { kind: 'add-not-null-column'; column: string; type: string | null }
  | { kind: 'drop-column'; column: string }
  | { kind: 'rename-column'; from: string; to: string }
  | { kind: 'change-type'; column: string; from: string; to: string }
  | { kind: 'change-key'; from: string[]; to: string[] }
  | { kind: 'drop-table' }
  | { kind: 'rename-table' }
  | { kind: 'unclassified'; operation: string };

export type ClassificationKind = 'same' | 'compatible' | 'breaking';

export interface Classification {
  kind: ClassificationKind;
  /** Every difference found (empty for `same`). */
  changes: SchemaChange[];
  /** One line for people: what changed and, when breaking, why it is. */
  reason: string;
  /** The table's columns after the change (the current ones when `same`). */
  columns: ColumnDef[];
  /** The table's primary key after the change (empty while unknown). */
  key: string[];
}

const BREAKING_KINDS = new Set<SchemaChange['kind']>([
  'add-not-null-column',
  'drop-column',
  'rename-column',
  'change-type',
  'change-key',
  'drop-table',
  'rename-table',
  'unclassified',
]);

/** Whether one change is breaking (pauses the table). */
export function isBreaking(change: SchemaChange): boolean {
  return BREAKING_KINDS.has(change.kind);
}

// ---------------------------------------------------------------------------------------------
// Types

type TypeInfo =
  | { family: 'int'; bytes: number }
  | { family: 'numeric'; precision: number | null; scale: number }
  | { family: 'float'; bytes: 4 | 8 }
  | { family: 'string'; length: number | null }
  | { family: 'char'; length: number }
  | { family: 'temporal'; name: string; precision: number }
  | { family: 'other'; name: string };

/** Decimal digits an integer of this many bytes can need. */
const INT_DIGITS: Record<number, number> = { 1: 3, 2: 5, 4: 10, 8: 19 };

const INT_BYTES: Record<string, number> = {
  int1: 1, // DMS INT1 (bytes)
  smallint: 2,
  int2: 2,
  int16: 2,
  smallserial: 2,
  serial2: 2,
  integer: 4,
  int: 4,
  int4: 4,
  int32: 4,
  serial: 4,
  serial4: 4,
  bigint: 8,
  int8: 8,
  int64: 8,
  bigserial: 8,
  serial8: 8,
};

const SYNONYMS: Record<string, string> = {
  bool: 'boolean',
  timestamp: 'timestamp without time zone',
  timestamptz: 'timestamp with time zone',
  time: 'time without time zone',
  timetz: 'time with time zone',
  datetime: 'timestamp without time zone',
};

/** Lower-cases and collapses whitespace, so `Character  Varying(20)` reads like `character varying(20)`. */
function normalizeTypeName(type: string): string {
  return type
    .trim()
    .toLowerCase()
    .replace(/\s+/g, ' ')
    .replace(/\s*\(\s*/g, '(')
    .replace(/\s*,\s*/g, ',')
    .replace(/\s*\)/g, ')');
}

function typeInfo(type: string): TypeInfo {
  const t = normalizeTypeName(type);
  if (t in INT_BYTES) return { family: 'int', bytes: INT_BYTES[t]! };
  let m = /^(?:numeric|decimal)(?:\((\d+)(?:,(-?\d+))?\))?$/.exec(t);
  if (m) return { family: 'numeric', precision: m[1] === undefined ? null : Number(m[1]), scale: m[2] === undefined ? 0 : Number(m[2]) };
  if (t === 'real' || t === 'float4' || t === 'real4') return { family: 'float', bytes: 4 };
  if (t === 'double precision' || t === 'float8' || t === 'real8' || t === 'float' || t === 'double') return { family: 'float', bytes: 8 };
  m = /^float\((\d+)\)$/.exec(t);
  if (m) return { family: 'float', bytes: Number(m[1]) <= 24 ? 4 : 8 };
  if (t === 'text' || t === 'varchar' || t === 'character varying' || t === 'string' || t === 'wstring' || t === 'clob' || t === 'nclob') {
    return { family: 'string', length: null };
  }
  // DMS control records give string lengths separately; the decoder writes them as STRING(n).
  m = /^(?:varchar|character varying|string|wstring)\((\d+)\)$/.exec(t);
  if (m) return { family: 'string', length: Number(m[1]) };
  if (t === 'char' || t === 'character') return { family: 'char', length: 1 };
  m = /^(?:char|character|bpchar)\((\d+)\)$/.exec(t);
  if (m) return { family: 'char', length: Number(m[1]) };
  // Fractional-second precision: `timestamp(3) with time zone`; no modifier means 6.
  m = /^(timestamp|time)(?:\((\d)\))?( with(?:out)? time zone)?$/.exec(t);
  if (m) return { family: 'temporal', name: `${m[1]}${m[3] ?? ' without time zone'}`, precision: m[2] === undefined ? 6 : Number(m[2]) };
  const synonym = SYNONYMS[t];
  if (synonym !== undefined && synonym !== t) return typeInfo(synonym);
  return { family: 'other', name: t };
}

function sameType(a: TypeInfo, b: TypeInfo): boolean {
  return JSON.stringify(a) === JSON.stringify(b);
}

/** A type name as a DMS table definition gives it (`WSTRING(20)`, `NCLOB`, `DATETIME`): upper case, no PostgreSQL spelling. */
const DMS_NAME = /^[A-Z][A-Z0-9]*(?:\(\d+(?:,-?\d+)?\))?$/;

/** PostgreSQL types DMS reports as a string, with the length it gives them (null: any or none). */
const DMS_STRING_TYPES: Record<string, number | null> = {
  uuid: null,
  interval: 128,
  inet: 50,
  cidr: 50,
  macaddr: 18,
  macaddr8: null,
  point: 255,
  line: 255,
  lseg: 255,
  box: 255,
  circle: 255,
  int4range: 255,
  int8range: 255,
  numrange: 255,
  tsrange: 255,
  tstzrange: 255,
  daterange: 255,
};
/** PostgreSQL types DMS reports as a character large object (CLOB or NCLOB). */
const DMS_CLOB_TYPES = new Set(['json', 'jsonb', 'hstore', 'tsvector', 'tsquery', 'xml', 'path', 'polygon', 'text']);

/**
 * Whether `dms`, a type of a DMS table definition, is what DMS reports for the PostgreSQL type
 * `pg` (the catalog's or a snapshot's name), following the AWS DMS User Guide's "Source data
 * types for PostgreSQL" table (docs/schema-drift.md, "PostgreSQL's names against DMS's"). DMS's
 * names are coarser: `char(n)` and `varchar(n)` are both `WSTRING(n)`, `timestamp` and
 * `timestamp with time zone` both `DATETIME`, `uuid` a `STRING`, `json` an `NCLOB`. So a DMS
 * table definition that follows a registration from the catalog is no change of type; a change
 * DMS's names cannot show (`timestamp` to `timestamptz`) is one it cannot report either.
 */
function dmsReportsAs(pg: string, dms: string): boolean {
  if (!DMS_NAME.test(dms.trim()) || !/[a-z]/.test(pg)) return false;
  const d = normalizeTypeName(dms);
  const m = /^([a-z0-9]+)(?:\((\d+)(?:,(-?\d+))?\))?$/.exec(d);
  if (!m) return false;
  const base = m[1]!;
  const len = m[2] === undefined ? null : Number(m[2]);
  const scale = m[3] === undefined ? null : Number(m[3]);
  const isString = base === 'string' || base === 'wstring';
  const t = normalizeTypeName(pg);
  const bare = t.replace(/\(.*\)$/, '');
  // Arrays, composites and hstore are NCLOB; the CLOB types too (DMS 3.x writes either).
  if (t.endsWith('[]') || DMS_CLOB_TYPES.has(t)) return base === 'nclob' || base === 'clob';
  const info = typeInfo(t);
  if (info.family === 'char') return isString && (len === null || len === info.length);
  if (info.family === 'temporal')
    return info.name === 'timestamp with time zone' ? base === 'datetime' : info.name === 'time with time zone' && base === 'time';
  if (info.family === 'numeric') {
    if (info.precision === null) return base === 'numeric' && (len === null || (len === 28 && scale === 6)); // DMS's default for an unbounded numeric
    return info.precision >= 39 && isString;
  }
  if (t === 'bytea') return base === 'blob' || base === 'bytes';
  if (t === 'boolean' || t === 'bool') return base === 'boolean' || ((isString || base === 'char') && len === 5);
  if (t === 'money') return base === 'numeric' && len === 38 && scale === 4;
  if (bare === 'bit' || bare === 'bit varying' || bare === 'varbit') return isString;
  if (t in DMS_STRING_TYPES) return isString && (len === null || DMS_STRING_TYPES[t] === null || len === DMS_STRING_TYPES[t]);
  // A type the catalog names that none of the above is: an enum is a STRING(64) to DMS.
  return info.family === 'other' && isString && len === 64;
}

/** True when every value of `from` is represented exactly, and unchanged, by `to`. */
function widens(from: TypeInfo, to: TypeInfo): boolean {
  if (from.family === 'int') {
    if (to.family === 'int') return to.bytes >= from.bytes;
    if (to.family === 'numeric') return to.precision === null || to.precision - to.scale >= (INT_DIGITS[from.bytes] ?? Infinity);
    return false;
  }
  if (from.family === 'numeric' && to.family === 'numeric') {
    if (to.precision === null) return true;
    if (from.precision === null) return false;
    return to.scale >= from.scale && to.precision - to.scale >= from.precision - from.scale;
  }
  if (from.family === 'float' && to.family === 'float') return to.bytes >= from.bytes;
  if (from.family === 'string' && to.family === 'string') return to.length === null || (from.length !== null && to.length >= from.length);
  if (from.family === 'char' && to.family === 'char') return to.length >= from.length;
  if (from.family === 'temporal' && to.family === 'temporal') return from.name === to.name && to.precision >= from.precision;
  return false;
}

/** The warehouse type of a source type, or null when the warehouse refuses it. */
function warehouseType(type: string): string | null {
  return sinkTypeRefusal(type) === null ? sinkType(type) : null;
}

/**
 * Compares two type names: `same` (equal or synonyms), `widened` (every old value fits the new
 * type unchanged, and every sink keeps the column's type) or `changed`.
 */
export function compareTypes(from: string, to: string): 'same' | 'widened' | 'changed' {
  // The common case, checked once per column of every record: a type is the same as itself (what follows would say so too).
  if (from === to) return 'same';
  // A DMS string registered from a table definition read without its length (before lengths
  // were kept): the length is learned, not narrowed, and the warehouse column is text either way.
  if (/^\s*w?string\s*$/i.test(from) && /^\s*w?string\s*\(\s*\d+\s*\)\s*$/i.test(to)) return 'widened';
  const a = typeInfo(from);
  const b = typeInfo(to);
  if (sameType(a, b)) return 'same';
  if (dmsReportsAs(from, to) || dmsReportsAs(to, from)) return 'same';
  if (!widens(a, b)) return 'changed';
  const sinkFrom = warehouseType(from);
  return sinkFrom !== null && sinkFrom === warehouseType(to) ? 'widened' : 'changed';
}

// ---------------------------------------------------------------------------------------------
// Classification

function describeChange(c: SchemaChange): string {
  switch (c.kind) {
    case 'new-table':
      return 'new table';
    case 'add-column':
      return `new nullable column ${c.column}${c.type ? ` (${c.type})` : ''}`;
    case 'widen-type':
      return `column ${c.column} widened from ${c.from} to ${c.to}`;
    case 'learn-type':
      return `type of column ${c.column} is now known (${c.type})`;
    case 'change-nullability':
      return `column ${c.column} is now ${c.nullable ? 'nullable' : 'NOT NULL'}`;
    case 'learn-key':
      return `primary key is now known (${c.key.join(', ')})`;
    case 'add-not-null-column':
      return `new NOT NULL column ${c.column}${c.type ? ` (${c.type})` : ''}: existing rows hold a value the change stream never carried`;
    case 'drop-column':
      return `column ${c.column} was dropped`;
    case 'rename-column':
      return `column ${c.from} was dropped or renamed (to ${c.to}?)`;
    case 'change-type':
      return `column ${c.column} changed type from ${c.from} to ${c.to}, which is not a widening`;
    case 'change-key':
      return `primary key changed from (${c.from.join(', ')}) to (${c.to.join(', ')})`;
    case 'drop-table':
      return 'table was dropped at the source';
    case 'rename-table':
      return 'table was renamed at the source (its changes now arrive under the new name)';
    case 'unclassified':
      return `the source reported '${c.operation}' without the table definition needed to classify it`;
  }
}

function summarize(changes: SchemaChange[]): { kind: ClassificationKind; reason: string } {
  if (changes.length === 0) return { kind: 'same', reason: 'no change' };
  const breaking = changes.filter(isBreaking);
  if (breaking.length > 0) return { kind: 'breaking', reason: breaking.map(describeChange).join('; ') };
  return { kind: 'compatible', reason: changes.map(describeChange).join('; ') };
}

function registeredColumn(o: ObservedColumn): ColumnDef {
  // Unknown nullability is registered as nullable: the sinks keep every column nullable anyway.
  return { name: o.name, type: o.type, nullable: o.nullable ?? true };
}

function sameList(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((x, i) => x === b[i]);
}

function checkShape(observed: ObservedShape): void {
  const names = new Set<string>();
  for (const c of observed.columns) {
    if (names.has(c.name)) throw new Error(`observed shape names column ${JSON.stringify(c.name)} twice`);
    names.add(c.name);
  }
}

/**
 * Classifies what `observed` says about a table against its current schema version (null: the
 * table is not registered yet). Returns the kind, every change, a reason for people, and the
 * columns and key a new version would hold.
 */
export function classifySchema(current: SchemaVersion | null, observed: ObservedShape): Classification {
  checkShape(observed);
  if (current === null) {
    return {
      kind: 'compatible',
      changes: [{ kind: 'new-table' }],
      reason: 'new table',
      columns: observed.columns.map(registeredColumn),
      key: observed.key ?? [],
    };
  }

  const changes: SchemaChange[] = [];
  const observedByName = new Map(observed.columns.map((c) => [c.name, c]));
  const currentByName = new Map(current.columns.map((c) => [c.name, c]));

  // Changes to columns both sides know.
  const merged = new Map<string, ColumnDef>();
  for (const col of current.columns) {
    const seen = observedByName.get(col.name);
    if (!seen) {
      merged.set(col.name, col);
      continue;
    }
    let type = col.type;
    if (seen.type !== null) {
      if (col.type === null) {
        changes.push({ kind: 'learn-type', column: col.name, type: seen.type });
        type = seen.type;
      } else {
        const cmp = compareTypes(col.type, seen.type);
        if (cmp === 'widened') {
          changes.push({ kind: 'widen-type', column: col.name, from: col.type, to: seen.type });
          type = seen.type;
        } else if (cmp === 'changed') {
          changes.push({ kind: 'change-type', column: col.name, from: col.type, to: seen.type });
          type = seen.type;
        }
      }
    }
    let nullable = col.nullable;
    if (seen.nullable !== null && seen.nullable !== col.nullable) {
      changes.push({ kind: 'change-nullability', column: col.name, nullable: seen.nullable });
      nullable = seen.nullable;
    }
    merged.set(col.name, { name: col.name, type, nullable });
  }

  // New columns.
  const added = observed.columns.filter((c) => !currentByName.has(c.name));
  // Dropped columns: only an observation of the whole table can show one.
  const dropped = observed.complete ? current.columns.filter((c) => !observedByName.has(c.name)) : [];

  // A partial observation (a DMS data record) cannot show a drop, but a record that names a new
  // column while lacking a registered one is what a rename looks like from the data: a column
  // that disappears from the image as another appears. That is never let through as a new
  // nullable column (docs/schema-drift.md).
  const vanished = observed.complete ? [] : current.columns.filter((c) => !observedByName.has(c.name));
  if (dropped.length === 1 && added.length === 1) {
    changes.push({ kind: 'rename-column', from: dropped[0]!.name, to: added[0]!.name });
  } else if (vanished.length > 0 && added.length > 0) {
    for (const a of added) changes.push({ kind: 'rename-column', from: vanished.map((v) => v.name).join(' or '), to: a.name });
  } else {
    for (const d of dropped) changes.push({ kind: 'drop-column', column: d.name });
    for (const a of added) {
      changes.push(a.nullable === false ? { kind: 'add-not-null-column', column: a.name, type: a.type } : { kind: 'add-column', column: a.name, type: a.type });
    }
  }

  // Key.
  let key = current.key;
  if (observed.key !== null && observed.key.length > 0 && !sameList(observed.key, current.key)) {
    if (current.key.length === 0) changes.push({ kind: 'learn-key', key: [...observed.key] });
    else changes.push({ kind: 'change-key', from: [...current.key], to: [...observed.key] });
    key = [...observed.key];
  }

  const { kind, reason } = summarize(changes);
  if (kind === 'same') return { kind, changes, reason, columns: current.columns.map((c) => ({ ...c })), key: [...current.key] };

  let columns: ColumnDef[];
  if (observed.complete) {
    // The observation is the whole table, in table order.
    columns = observed.columns.map((o) => merged.get(o.name) ?? registeredColumn(o));
  } else {
    columns = [...current.columns.map((c) => merged.get(c.name)!), ...added.map(registeredColumn)];
  }
  return { kind, changes, reason, columns, key: [...key] };
}

/** What a control record (a DDL or table definition the capture reported) says. */
export interface ObservedControl {
  /** `create-table`, `drop-table`, `rename-table`, `add-column`, `drop-column`, `rename-column`, `column-type-change`, `change-columns`. */
  operation: string;
  /** The table definition after the operation, when the record carried one. */
  columns: ObservedColumn[] | null;
  key: string[] | null;
}

/**
 * Classifies a control record against the current version. A table definition is compared like
 * a complete observation. Without one: `create-table` and `add-column` are `same` (the new
 * columns show up in the data records and are classified there), a dropped or renamed table is
 * breaking, and a column drop, rename or type change is breaking because it cannot be shown to
 * be compatible. An unknown operation is breaking too (never guessed).
 */
export function classifyControl(current: SchemaVersion | null, control: ObservedControl): Classification {
  const unchanged = (): Classification => ({
    kind: 'same',
    changes: [],
    reason: 'no change',
    columns: current ? current.columns.map((c) => ({ ...c })) : [],
    key: current ? [...current.key] : [],
  });
  const breakingWith = (change: SchemaChange): Classification => ({
    kind: 'breaking',
    changes: [change],
    reason: describeChange(change),
    columns: current ? current.columns.map((c) => ({ ...c })) : [],
    key: current ? [...current.key] : [],
  });
  if (control.operation === 'drop-table') return current ? breakingWith({ kind: 'drop-table' }) : unchanged();
  if (control.operation === 'rename-table') return current ? breakingWith({ kind: 'rename-table' }) : unchanged();
  if (control.columns !== null) return classifySchema(current, { columns: control.columns, key: control.key, complete: true });
  if (control.operation === 'create-table' || control.operation === 'add-column') return unchanged();
  // A column drop, rename or type change (or an operation this reader does not know) without a
  // definition cannot be shown to be compatible.
  return current ? breakingWith({ kind: 'unclassified', operation: control.operation }) : unchanged();
}
