/**
 * Per-event transforms (invariant 6, docs/transforms.md): column renaming, type coercion to a
 * declared sink type and tenant stamping, declared per table in the table configuration
 * (`transforms`, contracts/table-config.ts). Pure and deterministic: the same change and the same
 * transforms give the same output, whichever path the change came by.
 *
 * Where they run. Every capture path reaches the change log through the normalizer
 * (lambda/core/capture/normalize.ts): DMS records, slot-capture records, snapshot-worker chunk rows and
 * polled rows are all raw records it decodes. The normalizer calls `transformChange` on every
 * decoded change and `transformColumns` on every shape it registers, right after the column rules
 * (`applyColumnRulesToColumns`, lambda/core/tables/masking.ts), so the change log, the schema registry and
 * every sink see the transformed event. A replayed raw record (a DMS task resumed from its
 * checkpoint, a raw-stream retry) is transformed with the transforms registered for its position
 * (the schema version in effect there records them), so it gives the same event it gave the
 * first time.
 *
 * Order, per change: 1. coerce (keyed by source column name), 2. rename, 3. stamp the tenant
 * column into the `after` image. A value that does not coerce is a `TransformError`
 * (`TRANSFORM_COERCION_FAILED`, naming table, column, value and type): the normalizer dead-letters
 * the raw record with that reason; it is never dropped and never passed on uncoerced.
 */
import { CdcError } from '../shared/errors.ts';
import type { JsonValue, Row } from '../shared/event.ts';
import type { DecodedChange } from '../capture/decoded.ts';
import type { TableTransforms } from '../../../contracts/table-config.ts';

export type { TableTransforms, TenantStamp } from '../../../contracts/table-config.ts';

/** No transforms: the identity. */
export const NO_TRANSFORMS: TableTransforms = Object.freeze({});

/** A transform that cannot be applied to a change. `code` is `TRANSFORM_COERCION_FAILED` or `TRANSFORM_CONFLICT`. */
export class TransformError extends CdcError {
  constructor(
    code: 'TRANSFORM_COERCION_FAILED' | 'TRANSFORM_CONFLICT',
    readonly table: string,
    readonly column: string,
    message: string,
  ) {
    super(code, `${table}.${column}: ${message}`);
  }
}

/** Where a change comes from: what a tenant value may be derived from. */
export interface TransformContext {
  source: string;
  /** `schema.table` */
  table: string;
}

const NUMERIC_RE = /^numeric\((\d+),(\d+)\)$/;

/** True when `type` is a sink type a column may be coerced to (docs/transforms.md). */
export { isCoerceType } from '../../../contracts/table-config.ts';

/** True when the transforms change nothing. */
export function isIdentity(t: TableTransforms | undefined): boolean {
  return t === undefined || (Object.keys(t.rename ?? {}).length === 0 && Object.keys(t.coerce ?? {}).length === 0 && t.tenant === undefined);
}

/** A canonical text of the transforms (keys sorted), for comparing two declarations and for audit entries. */
export function transformsText(t: TableTransforms | undefined): string {
  if (isIdentity(t)) return '{}';
  const sorted = (r: Record<string, string> | undefined) =>
    r && Object.keys(r).length > 0
      ? Object.fromEntries(
          Object.keys(r)
            .sort()
            .map((k) => [k, r[k]!]),
        )
      : undefined;
  return JSON.stringify({
    coerce: sorted(t!.coerce),
    rename: sorted(t!.rename),
    tenant: t!.tenant ? { column: t!.tenant.column, value: t!.tenant.value } : undefined,
  });
}

/** True when both declarations transform every change the same way. */
export function sameTransforms(a: TableTransforms | undefined, b: TableTransforms | undefined): boolean {
  return transformsText(a) === transformsText(b);
}

/**
 * The tenant value for a change: the declared value with `{source}`, `{schema}`, `{table}` and
 * `{tableId}` (`schema.table`) replaced; a value without placeholders is a constant.
 */
export function tenantValue(template: string, ctx: TransformContext): string {
  const [schema, table] = ctx.table.split('.') as [string, string];
  return template.replace(/\{(source|schema|table|tableId)\}/g, (_, k: string) =>
    k === 'source' ? ctx.source : k === 'schema' ? schema : k === 'table' ? table : ctx.table,
  );
}

function shown(v: JsonValue): string {
  const t = JSON.stringify(v);
  return t.length > 80 ? `${t.slice(0, 77)}...` : t;
}

const INT64_MIN = -(2n ** 63n);
const INT64_MAX = 2n ** 63n - 1n;

/**
 * Coerces one value to a declared sink type, or throws `TransformError` naming why. null stays
 * null. Never rounds, truncates or guesses: a value that does not denote exactly one value of the
 * type is refused. Exact numbers stay exact (an integer beyond 2^53 and every numeric as decimal
 * text, docs/exact-numbers.md).
 */
export function coerceValue(value: JsonValue, type: string, table: string, column: string): JsonValue {
  if (value === null) return null;
  const fail = (why: string): never => {
    throw new TransformError('TRANSFORM_COERCION_FAILED', table, column, `value ${shown(value)} does not coerce to ${type}: ${why}`);
  };
  if (type === 'text') {
    if (typeof value === 'string') return value;
    if (typeof value === 'number' || typeof value === 'boolean') return String(value);
    return JSON.stringify(value);
  }
  if (typeof value === 'object') return fail('a JSON array or object is not a scalar');
  switch (type) {
    case 'bigint': {
      const text =
        typeof value === 'number'
          ? Number.isInteger(value)
            ? String(value)
            : fail('not an integer')
          : typeof value === 'string'
            ? value.trim()
            : fail('a boolean is not an integer');
      if (!/^[-+]?\d+$/.test(text)) fail('not an integer');
      const n = BigInt(text);
      if (n < INT64_MIN || n > INT64_MAX) fail('outside the 64-bit range');
      return n >= BigInt(Number.MIN_SAFE_INTEGER) && n <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(n) : n.toString();
    }
    case 'double precision': {
      if (typeof value === 'boolean') return fail('a boolean is not a number');
      const n = typeof value === 'number' ? value : value.trim() === '' ? Number.NaN : Number(value.trim());
      if (!Number.isFinite(n)) fail('not a finite number');
      // An integral double beyond 2^53 travels as its text (events refuse such JSON numbers,
      // docs/exact-numbers.md), and so does -0 (JSON writes it `0`).
      if (Object.is(n, -0)) return '-0';
      return Number.isInteger(n) && !Number.isSafeInteger(n) ? String(n) : n;
    }
    case 'boolean': {
      if (typeof value === 'boolean') return value;
      if (typeof value === 'number') return value === 1 ? true : value === 0 ? false : fail('only 1 and 0 are booleans');
      const t = value.trim().toLowerCase();
      if (['t', 'true', 'y', 'yes', 'on', '1'].includes(t)) return true;
      if (['f', 'false', 'n', 'no', 'off', '0'].includes(t)) return false;
      return fail('not one of true/false, t/f, yes/no, on/off, 1/0');
    }
    case 'date': {
      if (typeof value !== 'string') return fail('expected a date as text (YYYY-MM-DD)');
      const m = /^(\d{4})-(\d{2})-(\d{2})$/.exec(value.trim());
      if (!m) return fail('expected YYYY-MM-DD');
      const d = new Date(Date.UTC(Number(m[1]), Number(m[2]) - 1, Number(m[3])));
      if (d.getUTCFullYear() !== Number(m[1]) || d.getUTCMonth() !== Number(m[2]) - 1 || d.getUTCDate() !== Number(m[3])) fail('not a calendar date');
      return value.trim();
    }
    case 'timestamptz': {
      if (typeof value !== 'string') return fail('expected a timestamp with a time zone as text');
      const t = value.trim();
      const m = /^(\d{4})-(\d{2})-(\d{2})[ T](\d{2}):(\d{2})(?::(\d{2})(?:\.\d{1,6})?)?(Z|[+-]\d{2}(?::?\d{2})?)$/.exec(t);
      if (!m) return fail('expected an ISO-8601 timestamp with a time zone (2026-01-31 10:00:00+00)');
      if (Number(m[2]) < 1 || Number(m[2]) > 12 || Number(m[3]) < 1 || Number(m[3]) > 31 || Number(m[4]) > 23 || Number(m[5]) > 59 || Number(m[6] ?? '0') > 59)
        fail('a field is out of range');
      return t;
    }
    default: {
      const m = NUMERIC_RE.exec(type);
      if (!m) throw new CdcError('INVALID_ARGUMENT', `${table}.${column}: ${type} is not a coercion type`);
      const p = Number(m[1]);
      const s = Number(m[2]);
      if (typeof value === 'boolean') return fail('a boolean is not a number');
      const text = typeof value === 'number' ? (Number.isFinite(value) ? exactNumberText(value) : fail('not finite')) : value.trim();
      const d = /^([-+]?)(\d+)(?:\.(\d+))?$/.exec(text);
      if (!d) return fail('not a decimal number');
      const int = d[2]!.replace(/^0+(?=\d)/, '');
      const frac = (d[3] ?? '').replace(/0+$/, '');
      if (frac.length > s) fail(`more than ${s} fraction digits (the platform does not round)`);
      if ((int === '0' ? 0 : int.length) > p - s) fail(`more than ${p - s} integer digits`);
      const sign = d[1] === '-' && (/[1-9]/.test(int) || /[1-9]/.test(frac)) ? '-' : '';
      return s === 0 ? `${sign}${int}` : `${sign}${int}.${frac.padEnd(s, '0')}`;
    }
  }
}

/** The decimal text of a finite JS number without exponent notation (for numeric coercion). */
function exactNumberText(n: number): string {
  const t = String(n);
  if (!/e/i.test(t)) return t;
  // Exponent form: expand exactly from the shortest round-trip digits.
  const [mant, expText] = t.toLowerCase().split('e') as [string, string];
  const exp = Number(expText);
  const neg = mant.startsWith('-');
  const [i, f = ''] = mant.replace('-', '').split('.') as [string, string?];
  const digits = i + f;
  const point = i.length + exp;
  const body =
    point <= 0
      ? `0.${'0'.repeat(-point)}${digits}`
      : point >= digits.length
        ? digits + '0'.repeat(point - digits.length)
        : `${digits.slice(0, point)}.${digits.slice(point)}`;
  return (neg ? '-' : '') + body;
}

function transformRow(row: Row, t: TableTransforms, table: string): Row {
  const out: Row = {};
  for (const [name, value] of Object.entries(row)) {
    const type = t.coerce?.[name];
    const v = type === undefined ? value : coerceValue(value, type, table, name);
    const to = t.rename?.[name] ?? name;
    if (to in out)
      throw new TransformError('TRANSFORM_CONFLICT', table, to, `two columns would be named ${JSON.stringify(to)} after renaming; rename one of them as well`);
    out[to] = v;
  }
  return out;
}

/**
 * Applies the transforms to one decoded change: coerce and rename every image (`key`, `after`,
 * `before`) and `missing`, then stamp the tenant column into `after`. The input is not changed.
 * Throws `TransformError` for a value that does not coerce or a column-name conflict.
 */
export function transformChange<T extends Pick<DecodedChange, 'source' | 'table' | 'key' | 'after' | 'before' | 'missing'>>(
  change: T,
  t: TableTransforms | undefined,
): T {
  if (t === undefined || isIdentity(t)) return change;
  const table = change.table;
  const after = change.after === null ? null : transformRow(change.after, t, table);
  if (after !== null && t.tenant) {
    if (t.tenant.column in after)
      throw new TransformError(
        'TRANSFORM_CONFLICT',
        table,
        t.tenant.column,
        'the tenant column already exists in the row; declare another tenant column or rename the source column',
      );
    after[t.tenant.column] = tenantValue(t.tenant.value, change);
  }
  return {
    ...change,
    key: transformRow(change.key, t, table),
    after,
    before: change.before === null ? null : transformRow(change.before, t, table),
    missing: change.missing.map((m) => t.rename?.[m] ?? m),
  };
}

/**
 * The columns of a table as the transforms shape them: coerced columns get their declared type,
 * renamed ones their new name (order kept), and the tenant column is added last as text. Call it
 * on what `applyColumnRulesToColumns` returned, so a masked column is text before it is renamed.
 * Idempotent for the tenant column (not added twice). The input is not changed.
 */
export function transformColumns<C extends { name: string; type: string | null }>(
  columns: readonly C[],
  t: TableTransforms | undefined,
  tenantColumn: (name: string) => C,
): C[] {
  if (t === undefined || isIdentity(t)) return [...columns];
  const out = columns.map((c) => {
    const type = t.coerce?.[c.name];
    const name = t.rename?.[c.name] ?? c.name;
    return type === undefined && name === c.name ? c : { ...c, name, ...(type === undefined ? {} : { type }) };
  });
  if (t.tenant && !out.some((c) => c.name === t.tenant!.column)) out.push(tenantColumn(t.tenant.column));
  return out;
}

/** Key column names after renaming. */
export function transformKeyColumns(key: readonly string[], t: TableTransforms | undefined): string[] {
  return key.map((k) => t?.rename?.[k] ?? k);
}

/** The one line logged and audited when a table's transforms change (docs/transforms.md). */
export function transformChangeNotice(table: string, from: TableTransforms | undefined, to: TableTransforms | undefined, position: string): string {
  return (
    `the transforms of ${table} changed from ${transformsText(from)} to ${transformsText(to)}, effective at position ${position}: ` +
    'events from that position on carry the new shape; rows already in the sinks (and events before it in the change log) keep the old one. ' +
    'Re-snapshot the table to reshape its current rows, and run `cdc rebuild` for each sink to drop the old shape.'
  );
}
