/**
 * The column rules as the slot capture applies them to a decoded tuple (docs/architecture.md §2,
 * invariant 4): the capture (local/capture.ts) and its dead letters (local/capture-poison.ts) both
 * use them, so a change put aside carries what the change log would have carried.
 */
import { applyColumnRules, applyColumnRulesToColumns, type ColumnRules } from '../lambda/core/tables/masking.ts';
import type { SlotColumn } from '../lambda/core/capture/slot-record.ts';
import type { Row } from '../lambda/core/shared/event.ts';
import type { CatalogType } from './catalog.ts';

/**
 * Applies a table's column rules to a tuple, keeping column order; excluded columns disappear,
 * masked columns carry the hash and the masked type (`applyColumnRulesToColumns`), so the
 * registry and every sink see a text column, as on the DMS path. `types` holds the catalog's
 * full type names (with modifiers) of the table's columns, where known.
 */
export function ruled(columns: SlotColumn[] | null, rules: ColumnRules, types: ReadonlyMap<string, CatalogType> | undefined): SlotColumn[] | null {
  if (columns === null) return null;
  // A new column object only where the catalog adds a modifier (fewer objects per change: docs/performance-log.md, "3. Capture").
  let typed = columns;
  if (types) {
    for (let i = 0; i < columns.length; i++) {
      const c = columns[i]!;
      const type = fullType(c, types.get(c.name));
      if (type === c.type) continue;
      if (typed === columns) typed = columns.slice();
      typed[i] = { name: c.name, type, value: c.value };
    }
  }
  if (rules.mask.length === 0 && rules.exclude.length === 0) return typed;
  const row: Row = {};
  for (const c of typed) row[c.name] = c.value;
  const out = applyColumnRules(row, rules);
  return applyColumnRulesToColumns(typed, rules).map((c) => ({ name: c.name, type: c.type, value: out[c.name]! }));
}

/**
 * The type name of a column with its modifier (`character varying(20)`, `numeric(12,2)`): the
 * catalog's, when the base type the catalog has now is the one test_decoding printed for the
 * change (test_decoding prints no modifiers); otherwise the printed one (the column changed type
 * after this change was written, and the catalog no longer describes it).
 */
export function fullType(c: SlotColumn, catalog: CatalogType | undefined): string {
  return catalog !== undefined && catalog.base === c.type ? catalog.full : c.type;
}
