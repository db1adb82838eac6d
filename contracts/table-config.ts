/**
 * The captured-table settings the constructs write into `CDC_TABLE_CONFIG` (`EnvName.TABLE_CONFIG`)
 * and the handlers parse (lambda/core/table-config.ts): one definition of the shape and of the
 * delete modes for both sides. Dependency-free on purpose.
 */

/** How sinks apply deletes (invariant 7, docs/architecture.md §2): the values of `DeleteMode` in lib/ and lambda/core/. */
export const DELETE_MODES = ['soft', 'hard'] as const;
/** One of `DELETE_MODES`. */
export type DeleteModeValue = (typeof DELETE_MODES)[number];

/** One entry of `CDC_TABLE_CONFIG`. */
export interface TableConfig {
  /** `schema.table` as named in the source. */
  table: string;
  /** Primary-key columns in key order, when declared (DMS records do not name the key). */
  key?: string[];
  deleteMode: DeleteModeValue;
  /** Columns that enter the log only as a hash. */
  mask: string[];
  /** Columns that never enter the log. */
  exclude: string[];
  /** Snapshot the table's existing rows when it is first captured (docs/snapshot.md). @default true */
  snapshot?: boolean;
  /** Per-event transforms (docs/transforms.md). @default none */
  transforms?: TableTransforms;
  /** How the table is captured: from the source's log, or by polling `pollColumn` (docs/polling.md). @default 'log' */
  capture?: TableCaptureMode;
  /** The monotonic modified-at (timestamp) or version (integer) column a polled table is read by. Required with `capture: 'poll'`. */
  pollColumn?: string;
}

/** How a table is captured: `log` (logical decoding / DMS) or `poll` (docs/polling.md). */
export const TABLE_CAPTURE_MODES = ['log', 'poll'] as const;
/** One of `TABLE_CAPTURE_MODES`. */
export type TableCaptureMode = (typeof TABLE_CAPTURE_MODES)[number];

/** A tenant column stamped into every row image (docs/transforms.md). */
export interface TenantStamp {
  /** The column written into every `after` image (text). */
  column: string;
  /** A constant, or a template with `{source}`, `{schema}`, `{table}`, `{tableId}`. */
  value: string;
}

/** Per-event transforms of one table (docs/transforms.md): applied in this order. */
export interface TableTransforms {
  /** Source column → sink type (`text`, `bigint`, `double precision`, `boolean`, `date`, `timestamptz`, `numeric(p,s)`). */
  coerce?: Record<string, string>;
  /** Source column → the name it has in the change log and every sink. */
  rename?: Record<string, string>;
  tenant?: TenantStamp;
}

const NUMERIC_COERCE = /^numeric\((\d+),(\d+)\)$/;
const PLAIN_COLUMN = /^[A-Za-z_][A-Za-z0-9_$]{0,62}$/;

/** True when `type` is a sink type a column may be coerced to (docs/transforms.md). */
export function isCoerceType(type: string): boolean {
  if (['text', 'bigint', 'double precision', 'boolean', 'date', 'timestamptz'].includes(type)) return true;
  const m = NUMERIC_COERCE.exec(type);
  return m !== null && Number(m[1]) >= 1 && Number(m[1]) <= 38 && Number(m[2]) <= Number(m[1]);
}

const isObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const shown = (v: unknown): string => (v === undefined ? 'undefined' : typeof v === 'string' ? JSON.stringify(v) : Array.isArray(v) ? 'an array' : v === null ? 'null' : typeof v === 'object' ? 'an object' : String(v));

/**
 * Checks one table's `transforms` against its column rules (the one definition for the constructs
 * and the handlers): known fields only; coercion to a sink type; an excluded column cannot be
 * coerced or renamed (it never arrives); a masked column can only be coerced to `text` (it is a
 * hash); rename targets are plain column names, each used once; the tenant column is a plain name
 * that is not a rename target, and its value a constant or a template with `{source}`, `{schema}`,
 * `{table}`, `{tableId}`. Returns the transforms, or the field and the problem.
 */
export function checkTransforms(v: unknown, rules: { mask: readonly string[]; exclude: readonly string[] }, field: string): { transforms: TableTransforms } | { field: string; problem: string } {
  const bad = (f: string, problem: string) => ({ field: f, problem });
  if (!isObject(v)) return bad(field, `expected an object with coerce, rename and tenant, got ${shown(v)}`);
  for (const f of Object.keys(v)) if (!['coerce', 'rename', 'tenant'].includes(f)) return bad(`${field}.${f}`, 'unknown field (known: coerce, rename, tenant)');
  const out: TableTransforms = {};
  if (v.coerce !== undefined) {
    if (!isObject(v.coerce)) return bad(`${field}.coerce`, `expected an object of column → sink type, got ${shown(v.coerce)}`);
    const coerce: Record<string, string> = {};
    for (const [c, type] of Object.entries(v.coerce)) {
      if (typeof type !== 'string' || !isCoerceType(type)) return bad(`${field}.coerce.${c}`, `expected a sink type (text, bigint, double precision, boolean, date, timestamptz, numeric(p,s) with p ≤ 38), got ${shown(type)}`);
      if (rules.exclude.includes(c)) return bad(`${field}.coerce.${c}`, 'the column is excluded; it never arrives to be coerced');
      if (rules.mask.includes(c) && type !== 'text') return bad(`${field}.coerce.${c}`, `the column is masked (a 64-character hash, docs/masking.md) and can only be text, not ${type}`);
      coerce[c] = type;
    }
    if (Object.keys(coerce).length > 0) out.coerce = coerce;
  }
  if (v.rename !== undefined) {
    if (!isObject(v.rename)) return bad(`${field}.rename`, `expected an object of column → new name, got ${shown(v.rename)}`);
    const rename: Record<string, string> = {};
    const targets = new Map<string, string>();
    for (const [from, to] of Object.entries(v.rename)) {
      if (typeof to !== 'string' || !PLAIN_COLUMN.test(to)) return bad(`${field}.rename.${from}`, `expected a plain column name, got ${shown(to)}`);
      if (rules.exclude.includes(from)) return bad(`${field}.rename.${from}`, 'the column is excluded; it never arrives to be renamed');
      const other = targets.get(to);
      if (other !== undefined) return bad(`${field}.rename.${from}`, `${JSON.stringify(other)} is renamed to ${JSON.stringify(to)} as well`);
      targets.set(to, from);
      rename[from] = to;
    }
    if (Object.keys(rename).length > 0) out.rename = rename;
  }
  if (v.tenant !== undefined) {
    const t = v.tenant;
    if (!isObject(t)) return bad(`${field}.tenant`, `expected { column, value }, got ${shown(t)}`);
    for (const f of Object.keys(t)) if (f !== 'column' && f !== 'value') return bad(`${field}.tenant.${f}`, 'unknown field (known: column, value)');
    if (typeof t.column !== 'string' || !PLAIN_COLUMN.test(t.column)) return bad(`${field}.tenant.column`, `expected a plain column name, got ${shown(t.column)}`);
    if (typeof t.value !== 'string' || t.value === '') return bad(`${field}.tenant.value`, `expected a constant or a template with {source}, {schema}, {table}, {tableId}, got ${shown(t.value)}`);
    const unknown = /\{(?!source\}|schema\}|table\}|tableId\})[^}]*\}/.exec(t.value);
    if (unknown) return bad(`${field}.tenant.value`, `unknown placeholder ${unknown[0]} (known: {source}, {schema}, {table}, {tableId})`);
    if (out.rename && Object.values(out.rename).includes(t.column)) return bad(`${field}.tenant.column`, `${JSON.stringify(t.column)} is also a rename target`);
    out.tenant = { column: t.column, value: t.value };
  }
  return { transforms: out };
}
