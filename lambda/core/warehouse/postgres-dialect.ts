/**
 * The PostgreSQL dialect of the warehouse (the `WarehouseDialect` port, lambda/core/warehouse/dialect.ts;
 * docs/warehouse-apply.md, "Dialects"). Pure.
 *
 * Native types, no size limit below PostgreSQL's own (1 GB per value): a value travels as
 * PostgreSQL's text of it (docs/types.md), and every type chosen here reads that text back as the
 * same value, so the view's output text equals the source's:
 * - integers → `bigint` (absorbs smallint → integer → bigint without a column change);
 * - `real`, `double precision` → `double precision`; `boolean`, `date`, `timestamp`, `timestamptz` as they are;
 * - `numeric(p,s)` with p ≤ 38 and 0 ≤ s ≤ p → `numeric(38,s)` (as columns made before; precision
 *   widening needs no change); any other `numeric` (unbounded, p > 38, a negative scale) →
 *   `numeric`, unbounded, which holds each of those values exactly (and `NaN`, `±Infinity`);
 * - `json` → `json` (the source's text kept: duplicate keys, key order, spelling), `jsonb` → `jsonb`,
 *   `bytea` → `bytea`, `uuid` → `uuid`;
 * - one-dimensional or multi-dimensional arrays of the types above (not `timestamptz`, whose text
 *   depends on the session's time zone) → the array of the element's type;
 * - everything else (text, varchar, char, enums, domains, composites, ranges, geometric, network,
 *   extensions' types, unknown) → `text`.
 * A column made as text (or as `varchar(65535)` by earlier versions) takes every value; a type
 * change the registry calls compatible (widening) needs no column change.
 */
import type { ColumnTypeChoice, ValueVerdict, WarehouseDialect } from './dialect.ts';
import { beginMergeSql, createOverlayViewSql, FLOAT_TYPES, INTEGER_TYPES, isSinkTextType, mergeSql } from './warehouse-sql.ts';

/** PostgreSQL's text type: unbounded. */
export const PG_TEXT = 'text';

const INTEGER = INTEGER_TYPES;
const FLOAT = FLOAT_TYPES;
const SAME = new Map<string, string>([
  ['boolean', 'boolean'],
  ['bool', 'boolean'],
  ['date', 'date'],
  ['json', 'json'],
  ['jsonb', 'jsonb'],
  ['bytea', 'bytea'],
  ['uuid', 'uuid'],
  ['datetime', 'timestamp'],
  ['text', 'text'],
  ['character varying', 'text'],
  ['varchar', 'text'],
]);

/** A source type name in one spelling: lower case, no quotes, single spaces, no typmod on text types. */
function normal(sourceType: string): string {
  return sourceType.trim().toLowerCase().replace(/"/g, '').replace(/\s+/g, ' ');
}

/** The native element or scalar type of `t` (normalised), or null when it is carried as text. */
function scalarType(t: string, inArray: boolean): string | null {
  if (INTEGER.has(t)) return 'bigint';
  if (FLOAT.has(t) || /^float\(\d+\)$/.test(t)) return 'double precision';
  const same = SAME.get(t.replace(/\(\d+\)$/, ''));
  if (same) return same;
  const ts = /^timestamp(?:\(\d+\))?( with(?:out)? time zone)?$/.exec(t);
  if (ts) return ts[1] === ' with time zone' ? (inArray ? null : 'timestamptz') : 'timestamp';
  if (/^timestamptz(?:\(\d+\))?$/.test(t)) return inArray ? null : 'timestamptz';
  if (t === 'numeric' || t === 'decimal') return 'numeric';
  const num = /^(?:numeric|decimal)\((\d+)(?:,\s*(-?\d+))?\)$/.exec(t);
  if (num) {
    const p = Number(num[1]);
    const s = Number(num[2] ?? '0');
    // An array column has no typmod in the catalog: its numeric elements are unbounded.
    return !inArray && p >= 1 && p <= 38 && s >= 0 && s <= p ? `numeric(38,${s})` : 'numeric';
  }
  return null;
}

/** The PostgreSQL warehouse's column type of a source type (see the module comment). */
export function postgresColumnType(sourceType: string | null): string {
  if (sourceType === null) return PG_TEXT;
  const t = normal(sourceType);
  const dims = /^(.*?)((?:\[\d*\])+)$/.exec(t);
  if (dims) {
    const elem = scalarType(dims[1]!.trim(), true);
    return elem === null ? PG_TEXT : `${elem}[]`;
  }
  return scalarType(t, false) ?? PG_TEXT;
}

/** Whether a column of type `have` takes the values of a column of type `want` unchanged. */
export function postgresAccepts(have: string, want: string): boolean {
  return have === want || isSinkTextType(have);
}

export const postgresDialect: WarehouseDialect = {
  engine: 'postgres',
  foldsIdentifiers: false,
  landing: 'copy-stdin',
  columnType: (sourceType): ColumnTypeChoice => ({ type: postgresColumnType(sourceType) }),
  accepts: postgresAccepts,
  // Every type above holds every value of its source type (text of any length up to 1 GB, NaN and ±Infinity in numeric and double precision).
  valueVerdict: (): ValueVerdict => ({ keep: true }),
  beginMergeSql: (t) => beginMergeSql(t, 'postgres'),
  mergeSql: (t, o) => mergeSql(t, { ...o, engine: 'postgres' }),
  viewSql: createOverlayViewSql,
};
