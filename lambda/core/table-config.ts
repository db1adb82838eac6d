/**
 * Captured-table settings: what the constructs pass to the handlers in the environment variable
 * `CDC_TABLE_CONFIG` (`EnvName.TABLE_CONFIG`), a JSON array with one entry per captured table:
 *
 * ```json
 * [{ "table": "public.customers", "key": ["id"], "deleteMode": "soft", "mask": ["email"], "exclude": ["ssn"] }]
 * ```
 *
 * - `table`: `schema.table` as named in the source.
 * - `key`: primary-key columns, in key order, when declared (DMS records do not name the key);
 *   absent, null or `[]` means not declared.
 * - `deleteMode`: `soft` (default, invariant 7) or `hard`.
 * - `mask`, `exclude`: column rules applied at capture (`masking.ts`); default empty.
 *
 * The parser refuses, naming the array index and field: a malformed entry, an unknown field (a
 * misspelt `mask` must not silently switch masking off), a table listed twice, a column that is
 * both masked and excluded, and a key column that is masked or excluded.
 */
import { CdcError } from './errors.ts';
import { DELETE_MODES, type TableConfig } from '../../contracts/table-config.ts';
import type { DeleteMode } from './control-plane.ts';
import { NO_COLUMN_RULES, type ColumnRules } from './masking.ts';
import { describeValue as describe, isPlainObject } from './json-shape.ts';
import { PLAIN_IDENT } from '../../contracts/identifiers.ts';
import { TABLE_CAPTURE_MODES, type TableCaptureMode, type TableTransforms } from '../../contracts/table-config.ts';
import { isCoerceType, NO_TRANSFORMS } from './transforms.ts';

/** One entry of `CDC_TABLE_CONFIG`: the shape the constructs write, defined once in contracts/table-config.ts. */
export type { TableConfig } from '../../contracts/table-config.ts';

/** A table configuration that cannot be used. `field` names the entry and field (`CDC_TABLE_CONFIG[2].mask[0]`). */
export class TableConfigError extends CdcError {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super('INVALID_TABLE_CONFIG', `${field}: ${message}`);
  }
}

const TABLE_ID = /^[^.\s]+\.[^.\s]+$/;
const FIELDS = new Set(['table', 'key', 'deleteMode', 'mask', 'exclude', 'snapshot', 'transforms', 'capture', 'pollColumn']);
const TRANSFORM_FIELDS = new Set(['coerce', 'rename', 'tenant']);


function columnList(v: unknown, field: string): string[] {
  if (!Array.isArray(v)) throw new TableConfigError(field, `expected an array of column names, got ${describe(v)}`);
  v.forEach((c, i) => {
    if (typeof c !== 'string' || c === '') throw new TableConfigError(`${field}[${i}]`, `expected a column name, got ${describe(c)}`);
  });
  const dup = v.find((c, i) => v.indexOf(c) !== i);
  if (dup !== undefined) throw new TableConfigError(field, `column ${JSON.stringify(dup)} is listed twice`);
  return [...(v as string[])];
}

/** Refuses a key column that is masked or excluded (keys are never masked: they identify rows in every sink). */
export function checkKeyAgainstRules(table: string, key: readonly string[], rules: ColumnRules, field = 'key'): void {
  for (const k of key) {
    if (rules.mask.includes(k)) throw new TableConfigError(field, `key column ${JSON.stringify(k)} of ${table} cannot be masked`);
    if (rules.exclude.includes(k)) throw new TableConfigError(field, `key column ${JSON.stringify(k)} of ${table} cannot be excluded`);
  }
}

/** Validates an already parsed configuration. `origin` prefixes field names in errors. */
export function validateTableConfig(value: unknown, origin = 'CDC_TABLE_CONFIG'): TableConfig[] {
  if (!Array.isArray(value)) throw new TableConfigError(origin, `expected a JSON array of table settings, got ${describe(value)}`);
  const seen = new Map<string, number>();
  return value.map((entry, i): TableConfig => {
    const at = `${origin}[${i}]`;
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) throw new TableConfigError(at, `expected an object, got ${describe(entry)}`);
    const e = entry as Record<string, unknown>;
    for (const f of Object.keys(e)) {
      if (!FIELDS.has(f)) throw new TableConfigError(`${at}.${f}`, `unknown field (known: ${[...FIELDS].join(', ')})`);
    }
    if (typeof e.table !== 'string' || !TABLE_ID.test(e.table)) throw new TableConfigError(`${at}.table`, `expected 'schema.table', got ${describe(e.table)}`);
    const earlier = seen.get(e.table);
    if (earlier !== undefined) throw new TableConfigError(`${at}.table`, `${e.table} is configured twice (also at index ${earlier})`);
    seen.set(e.table, i);
    const deleteMode = e.deleteMode ?? 'soft';
    if (typeof deleteMode !== 'string' || !(DELETE_MODES as readonly string[]).includes(deleteMode)) {
      throw new TableConfigError(`${at}.deleteMode`, `expected 'soft' or 'hard', got ${describe(deleteMode)}`);
    }
    const mask = e.mask === undefined ? [] : columnList(e.mask, `${at}.mask`);
    const exclude = e.exclude === undefined ? [] : columnList(e.exclude, `${at}.exclude`);
    const both = mask.find((m) => exclude.includes(m));
    if (both !== undefined) throw new TableConfigError(`${at}.exclude`, `column ${JSON.stringify(both)} is both masked and excluded; choose one`);
    const config: TableConfig = { table: e.table, deleteMode: deleteMode as DeleteMode, mask, exclude };
    if (e.key !== undefined && e.key !== null) {
      const key = columnList(e.key, `${at}.key`);
      checkKeyAgainstRules(e.table, key, config, `${at}.key`);
      if (key.length > 0) config.key = key; // [] = not declared
    }
    if (e.snapshot !== undefined) {
      if (typeof e.snapshot !== 'boolean') throw new TableConfigError(`${at}.snapshot`, `expected true or false, got ${describe(e.snapshot)}`);
      config.snapshot = e.snapshot;
    }
    if (e.transforms !== undefined) config.transforms = validateTransforms(e.transforms, config, `${at}.transforms`);
    if (e.capture !== undefined) {
      if (typeof e.capture !== 'string' || !(TABLE_CAPTURE_MODES as readonly string[]).includes(e.capture)) throw new TableConfigError(`${at}.capture`, `expected 'log' or 'poll', got ${describe(e.capture)}`);
      config.capture = e.capture as TableCaptureMode;
    }
    if (e.pollColumn !== undefined) {
      if (typeof e.pollColumn !== 'string' || !PLAIN_IDENT.test(e.pollColumn)) throw new TableConfigError(`${at}.pollColumn`, `expected a column name, got ${describe(e.pollColumn)}`);
      if (config.capture !== 'poll') throw new TableConfigError(`${at}.pollColumn`, "only a table with capture 'poll' is read by a poll column");
      if (mask.includes(e.pollColumn) || exclude.includes(e.pollColumn)) throw new TableConfigError(`${at}.pollColumn`, `the poll column ${JSON.stringify(e.pollColumn)} cannot be masked or excluded (the poller orders by it)`);
      config.pollColumn = e.pollColumn;
    }
    if (config.capture === 'poll' && config.pollColumn === undefined) {
      throw new TableConfigError(`${at}.pollColumn`, "a table with capture 'poll' needs its monotonic modified-at or version column (docs/polling.md)");
    }
    return config;
  });
}

function nameMap(v: unknown, field: string, valueOk: (x: string) => boolean, expected: string): Record<string, string> {
  if (!isPlainObject(v)) throw new TableConfigError(field, `expected an object of column → ${expected}, got ${describe(v)}`);
  const out: Record<string, string> = {};
  for (const [k, x] of Object.entries(v)) {
    if (typeof x !== 'string' || !valueOk(x)) throw new TableConfigError(`${field}.${k}`, `expected ${expected}, got ${describe(x)}`);
    out[k] = x;
  }
  return out;
}

/**
 * Validates a table's `transforms` (docs/transforms.md) against its column rules: an excluded
 * column cannot be coerced or renamed (it never arrives), a masked column can only be coerced to
 * `text` (it is a hash), two columns cannot be renamed to one name, and the tenant column cannot
 * be a rename target.
 */
export function validateTransforms(v: unknown, rules: ColumnRules, field: string): TableTransforms {
  if (!isPlainObject(v)) throw new TableConfigError(field, `expected an object with coerce, rename and tenant, got ${describe(v)}`);
  for (const f of Object.keys(v)) if (!TRANSFORM_FIELDS.has(f)) throw new TableConfigError(`${field}.${f}`, `unknown field (known: ${[...TRANSFORM_FIELDS].join(', ')})`);
  const out: TableTransforms = {};
  if (v.coerce !== undefined) {
    const coerce = nameMap(v.coerce, `${field}.coerce`, isCoerceType, "a sink type (text, bigint, double precision, boolean, date, timestamptz, numeric(p,s) with p ≤ 38)");
    for (const [c, type] of Object.entries(coerce)) {
      if (rules.exclude.includes(c)) throw new TableConfigError(`${field}.coerce.${c}`, 'the column is excluded; it never arrives to be coerced');
      if (rules.mask.includes(c) && type !== 'text') throw new TableConfigError(`${field}.coerce.${c}`, `the column is masked (a 64-character hash, docs/masking.md) and can only be text, not ${type}`);
    }
    if (Object.keys(coerce).length > 0) out.coerce = coerce;
  }
  if (v.rename !== undefined) {
    const rename = nameMap(v.rename, `${field}.rename`, (x) => PLAIN_IDENT.test(x), 'a plain column name');
    const targets = new Map<string, string>();
    for (const [from, to] of Object.entries(rename)) {
      if (rules.exclude.includes(from)) throw new TableConfigError(`${field}.rename.${from}`, 'the column is excluded; it never arrives to be renamed');
      const other = targets.get(to);
      if (other !== undefined) throw new TableConfigError(`${field}.rename.${from}`, `${JSON.stringify(other)} is renamed to ${JSON.stringify(to)} as well`);
      targets.set(to, from);
    }
    if (Object.keys(rename).length > 0) out.rename = rename;
  }
  if (v.tenant !== undefined) {
    const t = v.tenant;
    if (!isPlainObject(t)) throw new TableConfigError(`${field}.tenant`, `expected { column, value }, got ${describe(t)}`);
    for (const f of Object.keys(t)) if (f !== 'column' && f !== 'value') throw new TableConfigError(`${field}.tenant.${f}`, 'unknown field (known: column, value)');
    if (typeof t.column !== 'string' || !PLAIN_IDENT.test(t.column)) throw new TableConfigError(`${field}.tenant.column`, `expected a plain column name, got ${describe(t.column)}`);
    if (typeof t.value !== 'string' || t.value === '') throw new TableConfigError(`${field}.tenant.value`, `expected a constant or a template with {source}, {schema}, {table}, {tableId}, got ${describe(t.value)}`);
    const unknown = /\{(?!source\}|schema\}|table\}|tableId\})[^}]*\}/.exec(t.value);
    if (unknown) throw new TableConfigError(`${field}.tenant.value`, `unknown placeholder ${unknown[0]} (known: {source}, {schema}, {table}, {tableId})`);
    if (out.rename && Object.values(out.rename).includes(t.column)) throw new TableConfigError(`${field}.tenant.column`, `${JSON.stringify(t.column)} is also a rename target`);
    out.tenant = { column: t.column, value: t.value };
  }
  return out;
}

/** Parses the JSON text of `CDC_TABLE_CONFIG`. An unset variable is an error: masking must never be off by accident. */
export function parseTableConfig(text: string | undefined, origin = 'CDC_TABLE_CONFIG'): TableConfig[] {
  if (text === undefined || text.trim() === '') throw new TableConfigError(origin, 'not set (expected a JSON array of table settings; [] for none)');
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new TableConfigError(origin, `not valid JSON: ${(e as Error).message}`);
  }
  return validateTableConfig(value, origin);
}

/** Lookups over a validated configuration. A table that is not configured has no key, no rules and soft deletes. */
export class TableConfigIndex {
  private readonly byTable: ReadonlyMap<string, TableConfig>;

  constructor(readonly configs: readonly TableConfig[]) {
    this.byTable = new Map(configs.map((c) => [c.table, c]));
  }

  get(table: string): TableConfig | undefined {
    return this.byTable.get(table);
  }

  has(table: string): boolean {
    return this.byTable.has(table);
  }

  tables(): string[] {
    return [...this.byTable.keys()];
  }

  /** Declared primary-key columns, or null when the configuration does not declare them. */
  keyColumns(table: string): string[] | null {
    const key = this.byTable.get(table)?.key;
    return key ? [...key] : null;
  }

  columnRules(table: string): ColumnRules {
    const c = this.byTable.get(table);
    return c ? { mask: c.mask, exclude: c.exclude } : NO_COLUMN_RULES;
  }

  deleteMode(table: string): DeleteMode {
    return this.byTable.get(table)?.deleteMode ?? 'soft';
  }

  /** The table's per-event transforms (docs/transforms.md); none when not configured. */
  transforms(table: string): TableTransforms {
    return this.byTable.get(table)?.transforms ?? NO_TRANSFORMS;
  }

  /** How the table is captured (docs/polling.md): `log` unless configured `poll`. */
  captureMode(table: string): TableCaptureMode {
    return this.byTable.get(table)?.capture ?? 'log';
  }

  /** The polled tables. */
  polled(): TableConfig[] {
    return this.configs.filter((c) => c.capture === 'poll');
  }
}
