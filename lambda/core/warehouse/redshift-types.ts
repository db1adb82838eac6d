/**
 * The Redshift dialect's types and the values Redshift cannot hold (docs/warehouse-apply.md,
 * "Redshift: types and values it cannot hold"). Pure.
 *
 * Each source column gets a Redshift type and a value kind (`RedshiftColumn`); each value is
 * checked against the limit of its kind before it is written to a staged object, and a value
 * that does not fit meets the column's declared policy (`ValuePolicy`):
 * - `refuse-row` (the default): the event is not loaded; it is a dead letter with a
 *   `RedshiftValueRefusedError` naming the table, the column, the reason and the position. The
 *   other events of the table load as usual: one value never stalls a table.
 * - `null-with-marker`: the value is written as NULL and the row's marker column `_cdc_unheld`
 *   names the column and the reason (`payload:too-long`), so a consumer can tell a NULL the
 *   source had from one the warehouse could not hold.
 * Nothing is ever coerced silently (no truncation, no rounding, no clamping of dates).
 */
import { CdcError } from '../shared/errors.ts';
import type { JsonValue } from '../shared/event.ts';

/** Redshift's largest VARCHAR, in bytes (UTF-8), not characters. */
export const REDSHIFT_MAX_VARCHAR_BYTES = 65_535;
/** Redshift's largest VARBYTE, in bytes. */
export const REDSHIFT_MAX_VARBYTE_BYTES = 1_024_000;
/** The largest JSON value COPY takes into a SUPER column (Redshift's 4 MB JSON object limit, in bytes of its text). */
export const REDSHIFT_MAX_SUPER_BYTES = 4 * 1024 * 1024;
/** The largest row COPY loads, in bytes of its text. */
export const REDSHIFT_MAX_ROW_BYTES = 4 * 1024 * 1024;
/** Redshift's largest numeric precision. */
export const REDSHIFT_MAX_NUMERIC_DIGITS = 38;
/** The first year Redshift's DATE and TIMESTAMP hold: 4713 BC (astronomical year -4712). */
export const REDSHIFT_MIN_YEAR_BC = 4713;

/** What the checks and the encoding do with a column's values. */
export type ValueKind = 'integer' | 'float' | 'numeric' | 'boolean' | 'date' | 'timestamp' | 'time' | 'varchar' | 'super' | 'varbyte';

/** Why a value cannot be held (the marker's words). */
export type UnheldReason = 'too-long' | 'row-too-long' | 'nan' | 'infinity' | 'date-out-of-range' | 'numeric-overflow' | 'not-hex';

/** Every reason a marker can name. */
export const UNHELD_REASONS: readonly UnheldReason[] = ['too-long', 'row-too-long', 'nan', 'infinity', 'date-out-of-range', 'numeric-overflow', 'not-hex'];

/** What happens to a value Redshift cannot hold. */
export type ValuePolicy = 'refuse-row' | 'null-with-marker';
export const VALUE_POLICIES: readonly ValuePolicy[] = ['refuse-row', 'null-with-marker'];

/** A sink column of the Redshift dialect. */
export interface RedshiftColumn {
  name: string;
  /** The Redshift type (`varchar(65535)`, `super`, `numeric(38,2)`, …). */
  type: string;
  kind: ValueKind;
  /** For `varchar`, `varbyte` and `super`: the most bytes a value may take. */
  maxBytes?: number;
  /** For `numeric`: the scale (digits after the point); integer digits are 38 − scale. */
  scale?: number;
}

/** The marker column: which values of the row were not held, and why (`col:reason,col:reason`). NULL when every value was held. */
export const UNHELD_COLUMN = '_cdc_unheld';

const INTEGER =
  /^(smallint|int2|integer|int|int4|bigint|int8|smallserial|serial2|serial|serial4|bigserial|serial8|int1|int16|int32|int64|uint1|uint2|uint4|byte)$/;
const FLOAT = /^(real|float4|double precision|float8|float|real4|real8|double|float\(\d+\))$/;

/**
 * The Redshift type of a source type name (PostgreSQL's or DMS's):
 * integers → `bigint` (absorbs widening, since Redshift cannot change a column's type except a
 * VARCHAR's length); floats → `double precision`; `numeric(p,s)`, p ≤ 38 → `numeric(38,s)`;
 * boolean, date, timestamp, timestamptz, time, timetz as themselves; json, jsonb and arrays →
 * `super`; bytea → `varbyte(1024000)`; `varchar(n)` and `char(n)` → `varchar(min(4n, 65535))` (a
 * character is up to 4 bytes); every other type (text, uuid, unbounded numeric, interval, enums,
 * …) → `varchar(65535)`, its text.
 */
export function redshiftColumn(name: string, sourceType: string | null): RedshiftColumn {
  const t = (sourceType ?? 'text').trim().toLowerCase().replace(/"/g, '').replace(/\s+/g, ' ');
  const text = (maxBytes: number): RedshiftColumn => ({ name, type: `varchar(${maxBytes})`, kind: 'varchar', maxBytes });
  if (t.endsWith('[]') || t === 'json' || t === 'jsonb') return { name, type: 'super', kind: 'super', maxBytes: REDSHIFT_MAX_SUPER_BYTES };
  if (t === 'bytea') return { name, type: `varbyte(${REDSHIFT_MAX_VARBYTE_BYTES})`, kind: 'varbyte', maxBytes: REDSHIFT_MAX_VARBYTE_BYTES };
  if (INTEGER.test(t)) return { name, type: 'bigint', kind: 'integer' };
  if (FLOAT.test(t)) return { name, type: 'double precision', kind: 'float' };
  if (t === 'boolean' || t === 'bool') return { name, type: 'boolean', kind: 'boolean' };
  if (t === 'date') return { name, type: 'date', kind: 'date' };
  if (/^(timestamptz|timestamp(\(\d\))? with time zone|timestamptz\(\d\))$/.test(t)) return { name, type: 'timestamptz', kind: 'timestamp' };
  if (/^(timestamp(\(\d\))?( without time zone)?|datetime)$/.test(t)) return { name, type: 'timestamp', kind: 'timestamp' };
  if (/^(timetz|time(\(\d\))? with time zone)$/.test(t)) return { name, type: 'timetz', kind: 'time' };
  if (/^time(\(\d\))?( without time zone)?$/.test(t)) return { name, type: 'time', kind: 'time' };
  const num = /^(?:numeric|decimal)\((\d+)(?:,\s*(\d+))?\)$/.exec(t);
  if (num && Number(num[1]) <= REDSHIFT_MAX_NUMERIC_DIGITS && Number(num[2] ?? 0) <= Number(num[1])) {
    const scale = Number(num[2] ?? 0);
    return { name, type: `numeric(${REDSHIFT_MAX_NUMERIC_DIGITS},${scale})`, kind: 'numeric', scale };
  }
  const chars = /^(?:varchar|character varying|char|character|bpchar)\((\d+)\)$/.exec(t);
  if (chars) return text(Math.min(REDSHIFT_MAX_VARCHAR_BYTES, Math.max(1, 4 * Number(chars[1]))));
  return text(REDSHIFT_MAX_VARCHAR_BYTES);
}

/** A value a column's policy refuses: the event is a dead letter, the table goes on. */
export class RedshiftValueRefusedError extends CdcError {
  constructor(
    readonly table: string,
    readonly column: string,
    readonly reason: UnheldReason,
    readonly detail: string,
  ) {
    super(
      'REDSHIFT_VALUE_REFUSED',
      `${table}.${column}: Redshift cannot hold this value (${reason}: ${detail}); the column's policy is 'refuse-row', so the event is a dead letter and the table goes on ` +
        `(set the column's policy to 'null-with-marker' to load it as NULL with the reason in ${UNHELD_COLUMN}; docs/warehouse-apply.md, "Redshift: types and values it cannot hold")`,
    );
  }
}

/** A value that does not have the shape its column's kind needs (not a limit: a malformed event). */
export class RedshiftValueShapeError extends CdcError {
  constructor(table: string, column: string, what: string) {
    super('REDSHIFT_VALUE_SHAPE', `${table}.${column}: ${what}`);
  }
}

const utf8Bytes = (s: string): number => Buffer.byteLength(s, 'utf8');

/** Why `text` (a date or timestamp as PostgreSQL prints it) is before 4713 BC or infinite, or null. */
function dateRefusal(text: string): { reason: UnheldReason; detail: string } | null {
  const t = text.trim().toLowerCase();
  if (t === 'infinity' || t === '-infinity' || t === '+infinity') return { reason: 'infinity', detail: `${text} has no Redshift date or timestamp` };
  const m = /^(\d+)-(\d\d)-(\d\d)/.exec(t);
  if (m && t.endsWith(' bc')) {
    const [y, mo, d] = [Number(m[1]), Number(m[2]), Number(m[3])];
    // Redshift starts at 4713-11-24 BC (Julian day 0), as PostgreSQL does.
    if (y > REDSHIFT_MIN_YEAR_BC || (y === REDSHIFT_MIN_YEAR_BC && (mo < 11 || (mo === 11 && d < 24))))
      return { reason: 'date-out-of-range', detail: `${text} is before 4713-11-24 BC` };
  }
  return null;
}

/** Why a numeric's decimal text does not fit `numeric(38, scale)` without rounding, or null. */
function numericRefusal(text: string, scale: number): { reason: UnheldReason; detail: string } | null {
  const t = text.trim();
  if (/^nan$/i.test(t)) return { reason: 'nan', detail: 'NaN has no Redshift numeric' };
  if (/^[+-]?infinity$/i.test(t)) return { reason: 'infinity', detail: `${t} has no Redshift numeric` };
  const m = /^[+-]?(\d*)(?:\.(\d*))?$/.exec(t);
  if (!m) return null;
  const intDigits = (m[1] ?? '').replace(/^0+/, '').length;
  const fracDigits = (m[2] ?? '').replace(/0+$/, '').length;
  if (intDigits > REDSHIFT_MAX_NUMERIC_DIGITS - scale)
    return { reason: 'numeric-overflow', detail: `${intDigits} integer digits, numeric(38,${scale}) holds ${REDSHIFT_MAX_NUMERIC_DIGITS - scale}` };
  if (fracDigits > scale)
    return { reason: 'numeric-overflow', detail: `${fracDigits} digits after the point, numeric(38,${scale}) holds ${scale} (it would round)` };
  return null;
}

/**
 * The value as the text a staged CSV field holds (before CSV quoting), or why Redshift cannot
 * hold it. JSON numbers stay exact: integers and decimals are written as JSON wrote them.
 */
export function redshiftText(c: RedshiftColumn, table: string, v: JsonValue): { text: string } | { reason: UnheldReason; detail: string } {
  if (v === null) throw new RedshiftValueShapeError(table, c.name, 'null has no text (callers write NULL as an empty unquoted field)');
  switch (c.kind) {
    case 'integer':
    case 'boolean':
      return { text: String(v) };
    case 'float': {
      const t = String(v);
      if (/^nan$/i.test(t)) return { reason: 'nan', detail: 'NaN has no Redshift double precision' };
      if (/^[+-]?inf(inity)?$/i.test(t)) return { reason: 'infinity', detail: `${t} has no Redshift double precision` };
      return { text: t };
    }
    case 'numeric': {
      const t = String(v);
      return numericRefusal(t, c.scale ?? 0) ?? { text: t };
    }
    case 'date':
    case 'timestamp': {
      const t = String(v);
      return dateRefusal(t) ?? { text: t };
    }
    case 'super': {
      // A json/jsonb value arrives as its JSON text (a string); an array as a JSON array.
      const t = typeof v === 'string' ? v : JSON.stringify(v);
      const n = utf8Bytes(t);
      return n > (c.maxBytes ?? REDSHIFT_MAX_SUPER_BYTES) ? { reason: 'too-long', detail: `${n} bytes of JSON, SUPER takes ${c.maxBytes}` } : { text: t };
    }
    case 'varbyte': {
      // bytea arrives as PostgreSQL's hex text (`\x…`); COPY's CSV takes VARBYTE as plain hex.
      const t = String(v);
      if (!/^\\x([0-9a-fA-F]{2})*$/.test(t)) return { reason: 'not-hex', detail: 'a bytea value is carried as \\x followed by hex digits' };
      const bytes = (t.length - 2) / 2;
      return bytes > (c.maxBytes ?? REDSHIFT_MAX_VARBYTE_BYTES)
        ? { reason: 'too-long', detail: `${bytes} bytes, VARBYTE takes ${c.maxBytes}` }
        : { text: t.slice(2).toLowerCase() };
    }
    case 'time':
    case 'varchar': {
      const t = typeof v === 'string' ? v : JSON.stringify(v);
      const n = utf8Bytes(t);
      return c.maxBytes !== undefined && n > c.maxBytes
        ? { reason: 'too-long', detail: `${n} bytes in UTF-8, ${c.type} holds ${c.maxBytes} bytes` }
        : { text: t };
    }
  }
}

/**
 * The entries (`col:reason`) of a stored row's marker text (`_cdc_unheld`) that name one of `columns`, by column:
 * what a value taken from that row (a partial update's absent column, a key change's missing one) carries with
 * its NULL. An entry is matched whole, so a column whose name holds `,` or `:` is found too.
 */
export function unheldEntries(text: string | null, columns: Iterable<string>): Map<string, string> {
  const found = new Map<string, string>();
  if (text === null || text === '') return found;
  const all = `,${text},`;
  for (const c of columns)
    for (const reason of UNHELD_REASONS)
      if (all.includes(`,${c}:${reason},`)) {
        found.set(c, `${c}:${reason}`);
        break;
      }
  return found;
}

/** One row's values as staged text, with the marker of what was not held. */
export interface StagedValues {
  /** `values[i]` is the text of `columns[i]`, or null for NULL. */
  values: (string | null)[];
  /** `col:reason,…` or null when every value was held. */
  unheld: string | null;
}

/**
 * The staged text of a row's values under the columns' policies (`policyOf(column)`): a value
 * Redshift cannot hold throws `RedshiftValueRefusedError` when its policy is `refuse-row`, and is
 * NULL plus a marker entry when it is `null-with-marker`. An absent value is NULL.
 */
export function stageValues(
  table: string,
  columns: readonly RedshiftColumn[],
  row: Readonly<Record<string, JsonValue>>,
  policyOf: (column: string) => ValuePolicy,
): StagedValues {
  const values: (string | null)[] = [];
  const marks: string[] = [];
  for (const c of columns) {
    const v = Object.hasOwn(row, c.name) ? row[c.name]! : null;
    if (v === null) {
      values.push(null);
      continue;
    }
    const r = redshiftText(c, table, v);
    if ('text' in r) {
      values.push(r.text);
      continue;
    }
    if (policyOf(c.name) === 'refuse-row') throw new RedshiftValueRefusedError(table, c.name, r.reason, r.detail);
    values.push(null);
    marks.push(`${c.name}:${r.reason}`);
  }
  return { values, unheld: marks.length > 0 ? marks.join(',') : null };
}
