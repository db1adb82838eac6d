/**
 * Finding and moving a table's warehouse objects of the layout before injective names
 * (docs/warehouse-apply.md, "Layout before injective names"; docs/architecture.md §5.4, "Names").
 * Pure: the SQL that lists the candidates, and the decision over what it found. The pg adapter
 * runs them before a table's first apply in a process.
 *
 * The old layout named a table's platform tables `<table>_<kind>` in the schema
 * `<source>_<schema>`. A base table with such a name is the old layout's (every platform table
 * of the new layout starts with `_cdc_`, and a view is a view). Two cases are moved:
 * - the table's own old objects, in the schema it still has (a source id without `_`): renamed
 *   to their new names; the apply then makes the view again over them;
 * - the table's view name held by another table's old object (`t_mirror` is the old mirror of
 *   `t`): that table's old objects are renamed the same way first, so the name is free.
 * Both in the one transaction the adapter runs. Old objects in a schema the table no longer has
 * (a source id with `_`: `a_b_c` is now `a$b_c`) are not moved: which source they belong to
 * cannot be told from the warehouse (the old layout gave source `a` schema `b_c` the same
 * schema), so the table is held with the statements that move them, to run if they are its own.
 */
import { CdcError } from '../shared/errors.ts';
import { quoteIdent, splitTableId } from '../shared/identifiers.ts';
import { qualified, type WarehouseTable } from './warehouse-sql.ts';
import { LEGACY_SUFFIXES, legacyPartNames, legacySchemaName, platformName } from './warehouse-names.ts';

/** A relation found in the warehouse: schema, name, and whether it is a base table (else a view). */
export interface FoundRelation {
  schema: string;
  name: string;
  base: boolean;
}

/** Old objects that cannot be moved by the applier: the table is held until an operator moves them. */
export class LegacyLayoutError extends CdcError {
  constructor(
    readonly table: string,
    readonly statements: readonly string[],
    message: string,
  ) {
    super('LEGACY_WAREHOUSE_LAYOUT', message);
  }
}

/** Tables whose old objects could hold the view name `view`: `t` for `t_mirror`, `t_delta`, … */
function holders(view: string): string[] {
  return LEGACY_SUFFIXES.filter(([, suffix]) => view.length > suffix.length && view.endsWith(suffix)).map(([, suffix]) => view.slice(0, -suffix.length));
}

/** Lists the relations `planLegacyMigration` needs (information_schema: both warehouses). */
export function legacyProbeSql(t: WarehouseTable): { text: string; values: string[] } {
  const { schema, table } = splitTableId(t.tableId);
  const schemas = [...new Set([t.schema, legacySchemaName(t.source, schema)])];
  const names = [...new Set([t.view, t.mirror, ...[table, ...holders(t.view)].flatMap((o) => Object.values(legacyPartNames(o)))])];
  const s = schemas.map((_, i) => `$${i + 1}`).join(', ');
  const n = names.map((_, i) => `$${schemas.length + i + 1}`).join(', ');
  return {
    text: `SELECT table_schema, table_name, table_type FROM information_schema.tables WHERE table_schema IN (${s}) AND table_name IN (${n})`,
    values: [...schemas, ...names],
  };
}

/** The rows of `legacyProbeSql` as relations. */
export function foundRelations(rows: ReadonlyArray<{ table_schema: string; table_name: string; table_type: string }>): FoundRelation[] {
  return rows.map((r) => ({ schema: r.table_schema, name: r.table_name, base: r.table_type === 'BASE TABLE' }));
}

/** The renames of `owner`'s old base tables in `schema` to their new names (same schema). */
function renames(schema: string, owner: string, found: readonly FoundRelation[]): string[] {
  const old = legacyPartNames(owner);
  return LEGACY_SUFFIXES.filter(([part]) => found.some((r) => r.schema === schema && r.name === old[part] && r.base)).map(
    ([part]) => `ALTER TABLE ${qualified(schema, old[part])} RENAME TO ${quoteIdent(platformName(part, owner))}`,
  );
}

/**
 * The renames to run, in one transaction, before `t` is applied (empty: nothing to move; `own`:
 * whether `t`'s own objects move, so its view is to be made again). Throws `LegacyLayoutError`
 * when old objects sit in a schema the table no longer has, or when its view name is held by a
 * base table that is no old object.
 */
export function planLegacyMigration(t: WarehouseTable, found: readonly FoundRelation[]): { statements: string[]; own: boolean } {
  const has = (schema: string, name: string) => found.find((r) => r.schema === schema && r.name === name);
  if (has(t.schema, t.mirror)) return { statements: [], own: false }; // already in the new layout
  const { schema: sourceSchema, table } = splitTableId(t.tableId);
  const statements: string[] = [];
  if (has(t.schema, t.view)?.base) {
    // Another table's old object holds this view's name: that table's objects move first.
    const moved = holders(t.view).flatMap((o) => renames(t.schema, o, found));
    if (!moved.some((s) => s.startsWith(`ALTER TABLE ${qualified(t.schema, t.view)} `))) {
      throw new LegacyLayoutError(
        t.tableId,
        [],
        `the warehouse schema ${t.schema} already has a table ${t.view} that is neither the view of ${t.tableId} nor an object of the old layout; ` +
          `rename or drop that table (or leave ${t.tableId} out of the capture), then cdc resume ${t.tableId}`,
      );
    }
    statements.push(...moved);
  }
  const oldSchema = legacySchemaName(t.source, sourceSchema);
  const old = legacyPartNames(table);
  if (!has(oldSchema, old.mirror)?.base) return { statements, own: false };
  if (oldSchema === t.schema) return { statements: [...statements, ...renames(t.schema, table, found)], own: true };
  const move = LEGACY_SUFFIXES.filter(([part]) => has(oldSchema, old[part])?.base).flatMap(([part]) => [
    `ALTER TABLE ${qualified(oldSchema, old[part])} SET SCHEMA ${quoteIdent(t.schema)}`,
    `ALTER TABLE ${qualified(t.schema, old[part])} RENAME TO ${quoteIdent(t[part])}`,
  ]);
  const all = [`CREATE SCHEMA IF NOT EXISTS ${quoteIdent(t.schema)}`, ...move, ...(has(oldSchema, table) ? [`DROP VIEW ${qualified(oldSchema, table)}`] : [])];
  throw new LegacyLayoutError(
    t.tableId,
    all,
    `warehouse objects of the old layout for ${t.tableId} are in schema ${oldSchema}, but source ${t.source}'s schema ${sourceSchema} is now ${t.schema} ` +
      `(the old layout could give two sources' schemas the name ${oldSchema}; docs/warehouse-apply.md, "Layout before injective names"). ` +
      `If they are this table's, move them in one transaction: BEGIN; ${all.join('; ')}; COMMIT; then cdc resume ${t.tableId}. ` +
      `If they are another source's, leave them and re-snapshot ${t.tableId} instead`,
  );
}
