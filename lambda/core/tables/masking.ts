/**
 * Column rules applied at capture (invariant 4): a column declared `exclude` never enters the log,
 * a column declared `mask` enters it only as a deterministic hash. Every capture path that
 * the platform runs itself (the local slot capture, before it publishes; the snapshot worker)
 * calls `applyColumnRules`, so the same value gives the same output on each of them and
 * reconciliation can compare masked values. On AWS, DMS applies the rules itself (the task's
 * `remove-column` and `data-masking-hash-mask` table mappings), so the normalizer never masks:
 * masking an already-masked value again would hash it twice. It does remove excluded columns
 * again (idempotent), in case a rule did not take effect. Whether DMS's hash text is
 * byte-identical to this one (lower-case hex SHA-256 of the value's text) is not documented by
 * AWS; reconciling masked columns across a DMS source and a local capture assumes it is.
 *
 * A masked value is the lower-case hex SHA-256 of the value's text: strings as they are, numbers
 * via `String()`, booleans as `true`/`false`, arrays and objects via `JSON.stringify`; null stays
 * null (a null carries nothing to hide, and masking it would invent a value). The hash is not
 * keyed: a low-entropy value (a short code, a phone number) can be recovered by hashing
 * candidates, so `exclude` is the rule for values that must not be recoverable at all.
 *
 * Paths must deliver a value in the same text to hash the same: numbers as numbers or as their
 * decimal text (`5` and `"5"` both hash `"5"`), JSON columns as the source's text, dates and
 * times in ISO form (the local capture's session uses `DateStyle = ISO`).
 *
 * Types. A masked column holds a 64-character hash whatever its source type, so it is registered
 * and delivered as `MASKED_COLUMN_TYPE` (text) on every path: `applyColumnRulesToColumns`
 * decides the registered columns of a table under its rules, and every path calls it (the local
 * capture for the types of its records, the normalizer for every observed shape, so DMS records
 * and snapshot rows register the same type; DMS itself widens masked columns to a string with a
 * `change-data-type` rule, see lib/private/table-mappings.ts). An `int` or `date` column that
 * is masked is therefore a text column in every sink (docs/masking.md).
 */
import { createHash } from 'node:crypto';
import { InvalidRecordError } from '../shared/errors.ts';
import type { JsonValue, Row } from '../shared/event.ts';
import type { DecodedChange } from '../capture/decoded.ts';

/** The rules of one table: columns to mask and columns to leave out. */
export interface ColumnRules {
  mask: readonly string[];
  exclude: readonly string[];
}

export const NO_COLUMN_RULES: ColumnRules = Object.freeze({ mask: Object.freeze([]), exclude: Object.freeze([]) });

/** The type every masked column is registered and delivered with, on every path. */
export const MASKED_COLUMN_TYPE = 'text';

/**
 * The columns of a table as they exist downstream under its rules: excluded columns removed,
 * masked columns typed `MASKED_COLUMN_TYPE`, the rest unchanged (order kept). Idempotent, so a
 * path that sees already-ruled columns (DMS records) gets the same result. The input is not changed.
 */
export function applyColumnRulesToColumns<C extends { name: string; type: string | null }>(columns: readonly C[], rules: ColumnRules): C[] {
  if (rules.mask.length === 0 && rules.exclude.length === 0) return [...columns];
  return columns.filter((c) => !rules.exclude.includes(c.name)).map((c) => (rules.mask.includes(c.name) ? { ...c, type: MASKED_COLUMN_TYPE } : c));
}

/** The text a value is hashed from (see the module comment). */
function maskText(value: Exclude<JsonValue, null>): string {
  if (typeof value === 'string') return value;
  if (typeof value === 'number' || typeof value === 'boolean') return String(value);
  return JSON.stringify(value);
}

/** Masks one value: lower-case hex SHA-256 of its text; null stays null. */
export function maskValue(value: JsonValue): string | null {
  if (value === null) return null;
  return createHash('sha256').update(maskText(value), 'utf8').digest('hex');
}

/**
 * Returns a new row with excluded columns absent and masked columns replaced by `maskValue`.
 * Columns the row does not hold stay absent (absent is not null). The input is not changed.
 */
export function applyColumnRules(row: Row, rules: ColumnRules): Row {
  if (rules.mask.length === 0 && rules.exclude.length === 0) return { ...row };
  const out: Row = {};
  for (const [name, value] of Object.entries(row)) {
    if (rules.exclude.includes(name)) continue;
    out[name] = rules.mask.includes(name) ? maskValue(value) : value;
  }
  return out;
}

/**
 * Applies the rules to every image of a decoded change (`after`, `before`) and drops excluded
 * columns from `missing`. A rule on a primary-key column is refused (`InvalidRecordError` naming
 * the column): keys are never masked or excluded, the table configuration refuses it up front.
 */
export function applyColumnRulesToChange<T extends Pick<DecodedChange, 'table' | 'key' | 'after' | 'before' | 'missing'>>(change: T, rules: ColumnRules): T {
  if (rules.mask.length === 0 && rules.exclude.length === 0) return change;
  for (const k of Object.keys(change.key)) {
    if (rules.mask.includes(k) || rules.exclude.includes(k)) {
      throw new InvalidRecordError(`key.${k}`, `primary-key column of ${change.table} is declared mask or exclude; keys are never masked`);
    }
  }
  return {
    ...change,
    after: change.after === null ? null : applyColumnRules(change.after, rules),
    before: change.before === null ? null : applyColumnRules(change.before, rules),
    missing: change.missing.filter((m) => !rules.exclude.includes(m)),
  };
}
