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
import { CdcError } from '../shared/errors.ts';
import { DELETE_MODES, findRuleConflict, isTablePattern, matchesTablePattern, type TableConfig, type TableRule } from '../../../contracts/table-config.ts';
import type { DeleteMode } from '../shared/control-plane.ts';
import { NO_COLUMN_RULES, type ColumnRules } from './masking.ts';
import { describeValue as describe } from '../shared/json-shape.ts';
import { PLAIN_IDENT } from '../../../contracts/identifiers.ts';
import { checkTransforms, CAPTURE_MODES, type CaptureMode, type TableTransforms } from '../../../contracts/table-config.ts';
import { NO_TRANSFORMS } from './transforms.ts';
import { tableNameRefusal } from '../warehouse/warehouse-names.ts';

/** One entry of `CDC_TABLE_CONFIG`: the shape the constructs write, defined once in contracts/table-config.ts. */
export type { TableConfig, TableRule } from '../../../contracts/table-config.ts';

/** A table configuration that cannot be used. `field` names the entry and field (`CDC_TABLE_CONFIG[2].mask[0]`). */
export class TableConfigError extends CdcError {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super('INVALID_TABLE_CONFIG', `${field}: ${message}`);
  }
}

/** `schema.table`: two non-empty names without `.`; what else a name may hold is `tableNameRefusal`'s (docs/onboarding.md, "Names"). */
const TABLE_ID = /^[^.]+\.[^.]+$/;
const FIELDS = new Set(['table', 'key', 'deleteMode', 'mask', 'exclude', 'snapshot', 'transforms', 'capture', 'pollColumn', 'acknowledgeLateRules']);

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
export function validateTableConfig(value: unknown, origin = 'CDC_TABLE_CONFIG', skip: (entry: unknown) => boolean = () => false): TableConfig[] {
  if (!Array.isArray(value)) throw new TableConfigError(origin, `expected a JSON array of table settings, got ${describe(value)}`);
  const seen = new Map<string, number>();
  return value.flatMap((entry, i): TableConfig[] => {
    if (skip(entry)) return [];
    const at = `${origin}[${i}]`;
    if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) throw new TableConfigError(at, `expected an object, got ${describe(entry)}`);
    const e = entry as Record<string, unknown>;
    for (const f of Object.keys(e)) {
      if (!FIELDS.has(f)) throw new TableConfigError(`${at}.${f}`, `unknown field (known: ${[...FIELDS].join(', ')})`);
    }
    if (typeof e.table !== 'string' || !TABLE_ID.test(e.table)) throw new TableConfigError(`${at}.table`, `expected 'schema.table', got ${describe(e.table)}`);
    const named = tableNameRefusal(e.table);
    if (named !== null) throw new TableConfigError(`${at}.table`, `${named}; rename the table or leave it out`);
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
      if (typeof e.capture !== 'string' || !(CAPTURE_MODES as readonly string[]).includes(e.capture))
        throw new TableConfigError(`${at}.capture`, `expected 'log' or 'poll', got ${describe(e.capture)}`);
      config.capture = e.capture as CaptureMode;
    }
    if (e.pollColumn !== undefined) {
      if (typeof e.pollColumn !== 'string' || !PLAIN_IDENT.test(e.pollColumn))
        throw new TableConfigError(`${at}.pollColumn`, `expected a column name, got ${describe(e.pollColumn)}`);
      if (config.capture !== 'poll') throw new TableConfigError(`${at}.pollColumn`, "only a table with capture 'poll' is read by a poll column");
      if (mask.includes(e.pollColumn) || exclude.includes(e.pollColumn))
        throw new TableConfigError(
          `${at}.pollColumn`,
          `the poll column ${JSON.stringify(e.pollColumn)} cannot be masked or excluded (the poller orders by it)`,
        );
      config.pollColumn = e.pollColumn;
    }
    if (config.capture === 'poll' && config.pollColumn === undefined) {
      throw new TableConfigError(
        `${at}.pollColumn`,
        "a table with capture 'poll' needs its modified-at (timestamp) or transaction-id (xid8) column (docs/polling.md)",
      );
    }
    if (e.acknowledgeLateRules !== undefined) config.acknowledgeLateRules = acknowledgement(e.acknowledgeLateRules, `${at}.acknowledgeLateRules`);
    return [config];
  });
}

/**
 * Validates a table's `transforms` (docs/transforms.md) against its column rules, with the one
 * definition the constructs use too (`checkTransforms`, contracts/table-config.ts).
 */
export function validateTransforms(v: unknown, rules: ColumnRules, field: string): TableTransforms {
  const r = checkTransforms(v, rules, field);
  if ('problem' in r) throw new TableConfigError(r.field, r.problem);
  return r.transforms;
}

function acknowledgement(v: unknown, field: string): string {
  if (typeof v !== 'string' || v.trim() === '')
    throw new TableConfigError(field, `expected a non-empty text saying who acknowledges and why, got ${describe(v)}`);
  return v;
}

const RULE_FIELDS = new Set(['match', 'excludeTables', 'key', 'deleteMode', 'mask', 'exclude', 'snapshot']);

function patternList(v: unknown, field: string): string[] {
  if (!Array.isArray(v)) throw new TableConfigError(field, `expected an array of 'schema.table' patterns, got ${describe(v)}`);
  v.forEach((p, i) => {
    if (typeof p !== 'string' || !isTablePattern(p))
      throw new TableConfigError(`${field}[${i}]`, `expected a 'schema.table' pattern (* for any run of characters), got ${describe(p)}`);
  });
  return [...(v as string[])];
}

/** Validates capture-by-pattern rules (`CDC_TABLE_RULES`, docs/onboarding.md). */
export function validateTableRules(value: unknown, origin = 'CDC_TABLE_RULES'): TableRule[] {
  if (!Array.isArray(value)) throw new TableConfigError(origin, `expected a JSON array of table rules, got ${describe(value)}`);
  return value.map((entry, i) => validateRule(entry, `${origin}[${i}]`));
}

function validateRule(entry: unknown, at: string): TableRule {
  if (typeof entry !== 'object' || entry === null || Array.isArray(entry)) throw new TableConfigError(at, `expected an object, got ${describe(entry)}`);
  const e = entry as Record<string, unknown>;
  for (const f of Object.keys(e)) {
    if (!RULE_FIELDS.has(f)) throw new TableConfigError(`${at}.${f}`, `unknown field of a table rule (known: ${[...RULE_FIELDS].join(', ')})`);
  }
  if (typeof e.match !== 'string' || !isTablePattern(e.match))
    throw new TableConfigError(`${at}.match`, `expected a 'schema.table' pattern such as 'public.*', got ${describe(e.match)}`);
  const deleteMode = e.deleteMode ?? 'soft';
  if (typeof deleteMode !== 'string' || !(DELETE_MODES as readonly string[]).includes(deleteMode))
    throw new TableConfigError(`${at}.deleteMode`, `expected 'soft' or 'hard', got ${describe(deleteMode)}`);
  const mask = e.mask === undefined ? [] : columnList(e.mask, `${at}.mask`);
  const exclude = e.exclude === undefined ? [] : columnList(e.exclude, `${at}.exclude`);
  const both = mask.find((m) => exclude.includes(m));
  if (both !== undefined) throw new TableConfigError(`${at}.exclude`, `column ${JSON.stringify(both)} is both masked and excluded; choose one`);
  const rule: TableRule = {
    match: e.match,
    excludeTables: e.excludeTables === undefined ? [] : patternList(e.excludeTables, `${at}.excludeTables`),
    deleteMode: deleteMode as DeleteMode,
    mask,
    exclude,
  };
  if (e.key !== undefined && e.key !== null) {
    const key = columnList(e.key, `${at}.key`);
    checkKeyAgainstRules(e.match, key, rule, `${at}.key`);
    if (key.length > 0) rule.key = key;
  }
  if (e.snapshot !== undefined) {
    if (typeof e.snapshot !== 'boolean') throw new TableConfigError(`${at}.snapshot`, `expected true or false, got ${describe(e.snapshot)}`);
    rule.snapshot = e.snapshot;
  }
  return rule;
}

/**
 * A `cdc local --table-config` file: entries with `table` are tables, entries with `match` are
 * rules. Refuses what `findRuleConflict` refuses (the same check the constructs make at synth).
 */
export function validateTableSettings(
  value: unknown,
  origin: string,
  heartbeat?: { table: string; columns: readonly string[] },
): { tables: TableConfig[]; rules: TableRule[] } {
  if (!Array.isArray(value)) throw new TableConfigError(origin, `expected a JSON array of table settings, got ${describe(value)}`);
  const isRule = (entry: unknown): boolean => typeof entry === 'object' && entry !== null && !Array.isArray(entry) && 'match' in entry;
  const tables = validateTableConfig(value, origin, isRule);
  const rules = value.flatMap((entry, i) => (isRule(entry) ? [validateRule(entry, `${origin}[${i}]`)] : []));
  const conflict = findRuleConflict([...tables.map((t) => ({ table: t.table })), ...(heartbeat ? [heartbeat] : [])], rules);
  if (conflict) throw new TableConfigError(origin, conflict);
  return { tables, rules };
}

/** How a table id resolves against declared tables and rules. */
export type TableResolution =
  | { kind: 'declared'; config: TableConfig }
  | { kind: 'rule'; config: TableConfig; rule: TableRule }
  | { kind: 'excluded'; rule: TableRule; by: string }
  | { kind: 'unmatched' };

/** The configuration a rule gives a table it matches. */
export function ruleConfig(rule: TableRule, table: string): TableConfig {
  return {
    table,
    deleteMode: rule.deleteMode,
    mask: [...rule.mask],
    exclude: [...rule.exclude],
    ...(rule.key ? { key: [...rule.key] } : {}),
    ...(rule.snapshot === false ? { snapshot: false } : {}),
  };
}

/** Resolves a table against rules alone: the first rule whose pattern matches decides (excluded or captured). */
export function resolveByRules(rules: readonly TableRule[], table: string): TableResolution {
  for (const rule of rules) {
    if (!matchesTablePattern(rule.match, table)) continue;
    const by = rule.excludeTables.find((p) => matchesTablePattern(p, table));
    if (by !== undefined) return { kind: 'excluded', rule, by };
    return { kind: 'rule', config: ruleConfig(rule, table), rule };
  }
  return { kind: 'unmatched' };
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

/** Parses `CDC_TABLE_RULES`; unset means no rules (a source declared table by table). */
export function parseTableRules(text: string | undefined, origin = 'CDC_TABLE_RULES'): TableRule[] {
  if (text === undefined || text.trim() === '') return [];
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (e) {
    throw new TableConfigError(origin, `not valid JSON: ${(e as Error).message}`);
  }
  return validateTableRules(value, origin);
}

/**
 * Lookups over a validated configuration. A declared table (or one `add`ed when discovered,
 * docs/onboarding.md) has its own settings; any other table gets the settings of the first rule
 * that matches it (`resolveByRules`); a table neither declares nor matches has no key, no rules
 * and soft deletes. `has` and `tables` list only declared and added tables: what is captured now.
 */
export class TableConfigIndex {
  private readonly byTable: Map<string, TableConfig>;

  constructor(
    readonly configs: readonly TableConfig[],
    readonly rules: readonly TableRule[] = [],
  ) {
    this.byTable = new Map(configs.map((c) => [c.table, c]));
  }

  get(table: string): TableConfig | undefined {
    const own = this.byTable.get(table);
    if (own) return own;
    const r = resolveByRules(this.rules, table);
    return r.kind === 'rule' ? r.config : undefined;
  }

  has(table: string): boolean {
    return this.byTable.has(table);
  }

  tables(): string[] {
    return [...this.byTable.keys()];
  }

  /** Every captured table's settings (declared and added). */
  list(): TableConfig[] {
    return [...this.byTable.values()];
  }

  /** Starts capturing a discovered table with these settings (docs/onboarding.md). */
  add(config: TableConfig): void {
    this.byTable.set(config.table, config);
  }

  /** Stops capturing a table (dropped from the source). */
  remove(table: string): void {
    this.byTable.delete(table);
  }

  /** Declared primary-key columns, or null when the configuration does not declare them. */
  keyColumns(table: string): string[] | null {
    const key = this.get(table)?.key;
    return key ? [...key] : null;
  }

  columnRules(table: string): ColumnRules {
    const c = this.get(table);
    return c ? { mask: c.mask, exclude: c.exclude } : NO_COLUMN_RULES;
  }

  deleteMode(table: string): DeleteMode {
    return this.get(table)?.deleteMode ?? 'soft';
  }

  /** The table's per-event transforms (docs/transforms.md); none when not configured. */
  transforms(table: string): TableTransforms {
    return this.byTable.get(table)?.transforms ?? NO_TRANSFORMS;
  }

  /** How the table is captured (docs/polling.md): `log` unless configured `poll`. */
  captureMode(table: string): CaptureMode {
    return this.byTable.get(table)?.capture ?? 'log';
  }

  /** The polled tables. */
  polled(): TableConfig[] {
    return this.configs.filter((c) => c.capture === 'poll');
  }
}
