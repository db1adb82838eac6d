/**
 * When two copies of one column value are the same value (docs/reconcile.md, "How values
 * compare"): the one comparison of reconciliation (warehouse and search), the local verdict and
 * the tests. Pure: no I/O.
 *
 * Values are texts: PostgreSQL's output text of the column (the source, the warehouse), or a
 * search document's field as `documentValueText` writes it. How two texts compare is decided by
 * the column's type, never by what the texts look like (`compareClassOf`):
 *
 * - `decimal` (integers, `numeric`/`decimal`, DMS `INT*`/`NUMERIC`): by exact decimal value,
 *   digit by digit, with no bound on digits or exponent (`12.50` = `12.5`, `1e400` ≠ `1e401`,
 *   `9007199254740993` ≠ `9007199254740992`). `NaN`, `Infinity` and `-Infinity` equal only
 *   themselves (PostgreSQL's numeric orders NaN equal to NaN). `-0` = `0`: a PostgreSQL numeric
 *   has no negative zero.
 * - `float` (`real`, `double precision`, DMS `REAL4`/`REAL8`): as `decimal`, except that the sign
 *   of zero is part of the value: `-0` ≠ `0`. PostgreSQL's `=` calls them equal, but they are two
 *   values (their text, `1/x`), and the platform carries `-0` exactly (docs/exact-numbers.md): a
 *   sink holding `0` for a source `-0` is wrong, and is reported.
 * - `jsonb`: by the value jsonb stores: objects as key sets (a duplicate key's last value wins,
 *   member order and whitespace are not kept), arrays in order, strings by their characters (after
 *   JSON escapes), numbers by exact decimal value (`1.0` = `1`, as jsonb's `=` says; no doubles).
 * - `json`: `json` keeps its text, so its structure is kept whole: members in order, duplicates
 *   kept; only whitespace between tokens (which JSON calls insignificant), string escapes and a
 *   number's spelling (`1.0` = `1`, exactly) do not count.
 * - `boolean`: by truth value (`t` = `true`: PostgreSQL writes `t`, a search document `true`).
 * - `text` (everything else, and every column whose type is not known): byte for byte, so
 *   `00501` ≠ `501`, `[1,2]` ≠ `[1, 2]` and `1.0` ≠ `1` in a text column.
 *
 * NULL equals only NULL (`''` ≠ NULL) in every class. A text that is not of its class (`abc` in
 * a numeric column, malformed JSON in a json column) equals only the same text.
 */
import { decimalIdentity, jsonStructure } from './json-exact.ts';

/** How a column's values compare (see the module comment). */
export type CompareClass = 'decimal' | 'float' | 'json' | 'jsonb' | 'boolean' | 'text';

const DECIMAL_TYPE = /^(smallint|integer|bigint|int|int[1248]|uint[1248]|int16|int32|int64|oid|(small|big)?serial[248]?|numeric|decimal)(\s*\(.*\))?$/;
const FLOAT_TYPE = /^(real|float[48]?|real[48]|double precision|double|float\s*\(\d+\))$/;

/**
 * The comparison class of a column type: a PostgreSQL type as the capture registers it
 * (`format_type`, `numeric(12,2)`), a DMS type (`INT8`, `NUMERIC(12,2)`, `REAL8`), or null
 * (unknown: `text`). Arrays, domains, enums, `money`, dates and times compare as `text`.
 */
export function compareClassOf(type: string | null | undefined): CompareClass {
  const t = (type ?? '').trim().toLowerCase().replace(/"/g, '').replace(/\s+/g, ' ');
  if (t === '' || t.endsWith('[]')) return 'text';
  if (DECIMAL_TYPE.test(t)) return 'decimal';
  if (FLOAT_TYPE.test(t)) return 'float';
  if (t === 'jsonb') return 'jsonb';
  if (t === 'json') return 'json';
  if (t === 'boolean' || t === 'bool') return 'boolean';
  return 'text';
}

const SPECIAL = new Set(['NaN', 'Infinity', '-Infinity']);

function sameNumber(a: string, b: string, signedZero: boolean): boolean {
  if (SPECIAL.has(a) || SPECIAL.has(b)) return false; // equal texts were caught before
  const x = decimalIdentity(a, signedZero);
  return x !== null && x === decimalIdentity(b, signedZero);
}

function truth(v: string): boolean | null {
  return v === 't' || v === 'true' ? true : v === 'f' || v === 'false' ? false : null;
}

/** Whether two texts of a column of class `cls` are the same value (see the module comment). */
export function sameValue(cls: CompareClass, a: string | null, b: string | null): boolean {
  if (a === b) return true;
  if (a === null || b === null) return false;
  switch (cls) {
    case 'decimal':
      return sameNumber(a, b, false);
    case 'float':
      return sameNumber(a, b, true);
    case 'json':
    case 'jsonb': {
      const x = jsonStructure(a, cls === 'jsonb');
      return x !== null && x === jsonStructure(b, cls === 'jsonb');
    }
    case 'boolean': {
      const x = truth(a);
      return x !== null && x === truth(b);
    }
    case 'text':
      return false;
  }
}

/**
 * The comparison class of each column: from its registered type (the schema registry), else
 * from `fallback` (the source catalog's type, for a column the registry does not type), else
 * `text`. A masked column compares its masked text: `text`.
 */
export function compareClasses(
  columns: readonly string[],
  registered: Readonly<Record<string, string | null>> | undefined,
  fallback: Readonly<Record<string, string>> | undefined,
  masked: readonly string[] = [],
): Record<string, CompareClass> {
  const out: Record<string, CompareClass> = {};
  for (const c of columns) out[c] = masked.includes(c) ? 'text' : compareClassOf(registered?.[c] ?? fallback?.[c] ?? null);
  return out;
}
