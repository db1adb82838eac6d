/**
 * Compiles `CapturedTable`s into DMS table mappings, the handlers' `CDC_TABLE_CONFIG`, and checks
 * them. Pure functions; the construct supplies the path for error messages.
 *
 * Rules, in order (rule ids are sequential, rule names say what they do):
 * 1. one `selection` / `include` per captured table, then one for the heartbeat table;
 * 2. per excluded column, a `remove-column` transformation: the column never leaves DMS;
 * 3. per masked column, a `change-data-type` to `wstring(4000)` followed (higher rule id, as DMS
 *    requires) by a `data-masking-hash-mask`: the SHA-256 hash is 64 characters, wider than many
 *    masked columns, and the wide-string type keeps non-ASCII text intact before hashing.
 */
import { HEARTBEAT_KEY_COLUMN, HEARTBEAT_TABLE } from '../../contracts/env.ts';
import { checkTransforms, findRuleConflict, isTablePattern, type ColumnRulesDocument, type TableConfig, type TableRule } from '../../contracts/table-config.ts';
import type * as contract from '../../contracts/table-config.ts';
import { CaptureMode, DeleteMode, type CapturedTable } from '../captured-table.ts';
import { PLAIN_IDENT } from './validate.ts';

/** Length masked columns are widened to before hashing (values longer than this are refused by DMS). */
export const MASK_WIDEN_LENGTH = 4000;

/** One DMS table-mapping rule (the subset of fields this library emits). */
export interface DmsRule {
  'rule-type': 'selection' | 'transformation';
  'rule-id': string;
  'rule-name': string;
  'object-locator': { 'schema-name': string; 'table-name': string; 'column-name'?: string };
  'rule-action': string;
  'rule-target'?: 'column';
  'data-type'?: { type: string; length: number };
}

/** The `CDC_TABLE_CONFIG` value of each `DeleteMode` (checked by the compiler against contracts/table-config.ts). */
const DELETE_MODE_VALUE: Record<DeleteMode, contract.DeleteMode> = { [DeleteMode.SOFT]: 'soft', [DeleteMode.HARD]: 'hard' };

/** Returns the first problem with the captured tables, or undefined. Lower-case, no period. */
export function findTableProblem(tables: readonly CapturedTable[], heartbeatSchema: string): string | undefined {
  if (tables.length === 0) return 'tables must not be empty; capture at least one table';
  if (!PLAIN_IDENT.test(heartbeatSchema)) return `heartbeatSchema must be a plain identifier (${PLAIN_IDENT.source}), got ${JSON.stringify(heartbeatSchema)}`;
  const seen = new Set<string>();
  for (const t of tables) {
    const parts = t.tableId.split('.');
    if (t.pattern !== undefined) {
      if (!isTablePattern(t.pattern))
        return `table pattern ${JSON.stringify(t.pattern)} must be 'schemaGlob.tableGlob' with plain identifier characters and * (e.g. 'public.*')`;
      const bad = t.excludeTables.find((x) => !isTablePattern(x));
      if (bad !== undefined) return `table pattern ${t.pattern}: exclude ${JSON.stringify(bad)} must be a 'schema.table' pattern`;
    } else if (parts.length !== 2 || !parts.every((p) => PLAIN_IDENT.test(p))) {
      return `table id ${JSON.stringify(t.tableId)} must be 'schema.table' with plain identifiers (${PLAIN_IDENT.source})`;
    }
    if (seen.has(t.tableId)) return `table ${t.tableId} is captured twice`;
    seen.add(t.tableId);
    if (t.pattern === undefined && t.tableId === `${heartbeatSchema}.${HEARTBEAT_TABLE}`) {
      return `table ${t.tableId} is the platform's heartbeat table; it is captured automatically and cannot be declared`;
    }
    for (const [what, cols] of [
      ['mask', t.mask],
      ['exclude', t.exclude],
      ['primaryKey', t.primaryKey],
    ] as const) {
      for (const c of cols) {
        if (!PLAIN_IDENT.test(c)) return `table ${t.tableId}: ${what} column ${JSON.stringify(c)} must be a plain identifier (${PLAIN_IDENT.source})`;
      }
      const dup = cols.find((c, i) => cols.indexOf(c) !== i);
      if (dup !== undefined) return `table ${t.tableId}: ${what} lists column ${dup} twice`;
    }
    if (t.primaryKey.length === 0) return `table ${t.tableId}: primaryKey must name at least one column`;
    if (t.transforms !== undefined) {
      const r = checkTransforms(t.transforms, t, 'transforms');
      if ('problem' in r) return `table ${t.tableId}: ${r.field}: ${r.problem}`;
    }
    if (t.capture === CaptureMode.POLL) {
      if (t.pollColumn === undefined)
        return `table ${t.tableId}: a polled table needs pollColumn, its modified-at (timestamp) or transaction-id (xid8) column (docs/polling.md)`;
      if (!PLAIN_IDENT.test(t.pollColumn))
        return `table ${t.tableId}: pollColumn ${JSON.stringify(t.pollColumn)} must be a plain identifier (${PLAIN_IDENT.source})`;
      if (t.mask.includes(t.pollColumn) || t.exclude.includes(t.pollColumn))
        return `table ${t.tableId}: the poll column ${t.pollColumn} cannot be masked or excluded`;
    } else if (t.pollColumn !== undefined) return `table ${t.tableId}: pollColumn is only for capture: CaptureMode.POLL`;
    const both = t.mask.find((c) => t.exclude.includes(c));
    if (both !== undefined) return `table ${t.tableId}: column ${both} is both masked and excluded; choose one`;
    for (const k of t.primaryKey) {
      if (t.mask.includes(k)) return `table ${t.tableId}: key column ${k} cannot be masked (keys identify rows in every sink)`;
      if (t.exclude.includes(k)) return `table ${t.tableId}: key column ${k} cannot be excluded (keys identify rows in every sink)`;
    }
  }
  // Rules and declared tables must mean on DMS what they mean in the runtime (contracts/table-config.ts).
  const declared = [
    ...tables.filter((t) => t.pattern === undefined).map((t) => ({ table: t.tableId })),
    { table: `${heartbeatSchema}.${HEARTBEAT_TABLE}`, columns: [HEARTBEAT_KEY_COLUMN, 'beat_at'] },
  ];
  return findRuleConflict(declared, tableRuleEntries(tables));
}

/**
 * A table pattern in DMS wildcard syntax: `*` becomes `%`, and `_` (a single-character wildcard
 * in DMS) becomes `[_]`, a literal underscore.
 */
export function dmsPattern(part: string): string {
  return part.replace(/_/g, '[_]').replace(/\*/g, '%');
}

function locator(schema: string, table: string, column?: string): DmsRule['object-locator'] {
  return column === undefined ? { 'schema-name': schema, 'table-name': table } : { 'schema-name': schema, 'table-name': table, 'column-name': column };
}

/**
 * The column rules of one declared table or capture rule, named and located as `name` and `at` say:
 * each excluded column removed, each masked column widened to a string and then hash-masked.
 */
function addColumnRules(
  add: (rule: Omit<DmsRule, 'rule-id'>) => void,
  t: CapturedTable,
  name: (action: 'exclude' | 'widen' | 'mask', column: string) => string,
  at: (column: string) => DmsRule['object-locator'],
): void {
  const rule = (action: 'exclude' | 'widen' | 'mask', c: string) =>
    ({ 'rule-type': 'transformation', 'rule-name': name(action, c), 'rule-target': 'column', 'object-locator': at(c) }) as const;
  for (const c of t.exclude) add({ ...rule('exclude', c), 'rule-action': 'remove-column' });
  for (const c of t.mask) {
    add({ ...rule('widen', c), 'rule-action': 'change-data-type', 'data-type': { type: 'wstring', length: MASK_WIDEN_LENGTH } });
    add({ ...rule('mask', c), 'rule-action': 'data-masking-hash-mask' });
  }
}

/** The DMS table mappings (`{ rules: [...] }`) for the tables plus the heartbeat table. */
export function compileTableMappings(tables: readonly CapturedTable[], heartbeatSchema: string): { rules: DmsRule[] } {
  const rules: DmsRule[] = [];
  const add = (rule: Omit<DmsRule, 'rule-id'>): void => {
    const { 'rule-type': ruleType, ...rest } = rule;
    rules.push({ 'rule-type': ruleType, 'rule-id': String(rules.length + 1), ...rest });
  };
  const nameOf = (...parts: string[]): string => parts.join('-');
  // A polled table is not read by DMS (docs/polling.md): no rules for it at all.
  tables = tables.filter((t) => t.capture !== CaptureMode.POLL);
  const declared = tables.filter((t) => t.pattern === undefined);
  const patterns = tables.filter((t) => t.pattern !== undefined);
  for (const t of declared) {
    add({
      'rule-type': 'selection',
      'rule-name': nameOf('include', t.schemaName, t.tableName),
      'object-locator': locator(t.schemaName, t.tableName),
      'rule-action': 'include',
    });
  }
  // Capture by pattern (docs/onboarding.md): an include by wildcard, then each exclusion explicitly.
  const dmsLocator = (p: string, column?: string) => {
    const [schema, table] = p.split('.') as [string, string];
    return locator(dmsPattern(schema), dmsPattern(table), column);
  };
  const ruleName = (...parts: string[]) => nameOf(...parts).replace(/\*/g, 'any');
  for (const t of patterns) {
    add({ 'rule-type': 'selection', 'rule-name': ruleName('include-pattern', t.pattern!), 'object-locator': dmsLocator(t.pattern!), 'rule-action': 'include' });
    for (const x of t.excludeTables)
      add({ 'rule-type': 'selection', 'rule-name': ruleName('exclude-pattern', x), 'object-locator': dmsLocator(x), 'rule-action': 'exclude' });
  }
  add({
    'rule-type': 'selection',
    'rule-name': nameOf('include', heartbeatSchema, HEARTBEAT_TABLE),
    'object-locator': locator(heartbeatSchema, HEARTBEAT_TABLE),
    'rule-action': 'include',
  });
  for (const t of patterns) {
    addColumnRules(
      add,
      t,
      (action, c) => ruleName(action, t.pattern!, c),
      (c) => dmsLocator(t.pattern!, c),
    );
  }
  for (const t of declared) {
    addColumnRules(
      add,
      t,
      (action, c) => nameOf(action, t.schemaName, t.tableName, c),
      (c) => locator(t.schemaName, t.tableName, c),
    );
  }
  return { rules };
}

/**
 * `CDC_TABLE_CONFIG` entries, in declaration order. With `heartbeatSchema`, the heartbeat table is
 * appended with its key, so the normalizer never has to guess it (DMS records do not name keys).
 */
export function tableConfigEntries(tables: readonly CapturedTable[], heartbeatSchema?: string): TableConfig[] {
  const entries: TableConfig[] = tables
    .filter((t) => t.pattern === undefined)
    .map((t) => ({
      table: t.tableId,
      key: [...t.primaryKey],
      deleteMode: DELETE_MODE_VALUE[t.deletes],
      mask: [...t.mask],
      exclude: [...t.exclude],
      ...(t.snapshot ? {} : { snapshot: false }),
      ...(t.transforms ? { transforms: JSON.parse(JSON.stringify(t.transforms)) as TableConfig['transforms'] } : {}),
      ...(t.capture === CaptureMode.POLL ? { capture: 'poll' as const, pollColumn: t.pollColumn! } : {}),
    }));
  if (heartbeatSchema !== undefined) {
    entries.push({ table: `${heartbeatSchema}.${HEARTBEAT_TABLE}`, key: [HEARTBEAT_KEY_COLUMN], deleteMode: 'soft', mask: [], exclude: [] });
  }
  return entries;
}

/** `CDC_TABLE_RULES` entries: the capture rules made with `CapturedTable.matching`, in declaration order. */
export function tableRuleEntries(tables: readonly CapturedTable[]): TableRule[] {
  return tables
    .filter((t) => t.pattern !== undefined)
    .map((t) => ({
      match: t.pattern!,
      excludeTables: [...t.excludeTables],
      key: [...t.primaryKey],
      deleteMode: DELETE_MODE_VALUE[t.deletes],
      mask: [...t.mask],
      exclude: [...t.exclude],
      ...(t.snapshot ? {} : { snapshot: false }),
    }));
}

/**
 * The `ColumnRules` property of the `Custom::CdcColumnRules` resource: every declared table's and
 * rule's masks and exclusions with their acknowledgements, so an update sees the previous ones
 * (docs/masking.md, "Adding a rule to a live table").
 */
export function columnRulesDocument(tables: readonly CapturedTable[]): ColumnRulesDocument {
  const ack = (t: CapturedTable) => (t.acknowledgeLateRules !== undefined ? { acknowledgeLateRules: t.acknowledgeLateRules } : {});
  return {
    tables: tables.filter((t) => t.pattern === undefined).map((t) => ({ table: t.tableId, mask: [...t.mask], exclude: [...t.exclude], ...ack(t) })),
    rules: tables
      .filter((t) => t.pattern !== undefined)
      .map((t) => ({ match: t.pattern!, excludeTables: [...t.excludeTables], mask: [...t.mask], exclude: [...t.exclude], ...ack(t) })),
  };
}
