/**
 * Warehouses that fold quoted identifiers to lower case (Amazon Redshift, unless
 * `enable_case_sensitive_identifier` is on) cannot keep `"Orders"` and `orders` apart: both
 * would be the relation `orders`, and one table would be served through the other's objects
 * (docs/architecture.md §5.4, "Names"; docs/onboarding.md, "Names"). On such a sink the table
 * registered second is refused by name, with its reason; the first is applied as always.
 * Pure over the control-plane port.
 */
import type { ControlPlane } from './control-plane.ts';
import { CdcError } from './errors.ts';
import type { WarehouseTable } from '../warehouse/warehouse-sql.ts';

/** What a folding warehouse would call `t`'s view (its schema and its platform tables fold with it). */
export function foldedName(t: Pick<WarehouseTable, 'schema' | 'view'>): string {
  return `${t.schema.toLowerCase()}.${t.view.toLowerCase()}`;
}

/** A table whose warehouse names fold into those of a table registered before it. */
export class FoldedNameError extends CdcError {
  constructor(
    readonly sourceId: string,
    readonly table: string,
    readonly first: string,
    /** What folds the names. */
    folds = 'its warehouse folds quoted names to lower case',
  ) {
    super(
      'NAME_FOLDS',
      `${sourceId}/${table} is refused by this sink: ${folds}, so ${table} and ${first} (registered first) would be one table (${first} is applied, ${table} never through it); ` +
        `leave ${table} out of the capture (a rule's excludeTables) or rename one of the two at the source (docs/onboarding.md, "Names")`,
    );
  }
}

/**
 * The table of `source` registered before `table` whose warehouse names fold into the same
 * (`targetOf` gives a table's names), or null. Registration order: the first schema version's
 * `registeredAt`, then the table id (so two appliers decide alike).
 */
export async function foldsInto(
  cp: Pick<ControlPlane, 'listTables' | 'getSchemaVersion'>,
  sourceId: string,
  table: string,
  targetOf: (sourceId: string, table: string) => WarehouseTable,
): Promise<string | null> {
  return foldsIntoBy(cp, sourceId, table, (s, t) => foldedName(targetOf(s, t)));
}

/**
 * `foldsInto` for any sink: `foldedOf` gives the name a table's objects fold into (throws for a
 * table the sink cannot name; such a table is refused on its own).
 */
export async function foldsIntoBy(
  cp: Pick<ControlPlane, 'listTables' | 'getSchemaVersion'>,
  sourceId: string,
  table: string,
  foldedOf: (sourceId: string, table: string) => string,
): Promise<string | null> {
  const mine = foldedOf(sourceId, table);
  const others = (await cp.listTables(sourceId)).map((r) => r.table).filter((t) => t !== table && sameFolded(foldedOf, sourceId, t, mine));
  if (others.length === 0) return null;
  const registered = async (t: string) => (await cp.getSchemaVersion(sourceId, t, 1))?.registeredAt ?? '';
  const at = await registered(table);
  let first: { table: string; at: string } | null = null;
  for (const t of others) {
    const when = await registered(t);
    const earlier = when < at || (when === at && t < table);
    if (earlier && (first === null || when < first.at || (when === first.at && t < first.table))) first = { table: t, at: when };
  }
  return first?.table ?? null;
}

function sameFolded(foldedOf: (sourceId: string, table: string) => string, sourceId: string, table: string, folded: string): boolean {
  try {
    return foldedOf(sourceId, table) === folded;
  } catch {
    return false; // a table the sink cannot name is refused on its own
  }
}
