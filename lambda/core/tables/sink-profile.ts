/**
 * What the sinks a table joins can hold, for the checks that register it (`cdc doctor`, the
 * catalog scan of a capture rule: docs/onboarding.md, "Names"; docs/types.md, "What is refused,
 * and where"). A table is refused there, by name, for what one of its sinks cannot hold, never
 * row by row later:
 * - a column type the warehouse cannot hold exactly: on a PostgreSQL warehouse none of the
 *   numeric types (native unbounded `numeric` holds `numeric(p,s)` of any precision and scale);
 *   on Redshift, and when the engine is not known, `numeric(p,s)` with p > 38 or a scale outside
 *   0..p (`sinkTypeRefusal`);
 * - a column a search sink cannot hold as a field (`searchFieldRefusal`);
 * - a table whose name folds into another's: Redshift folds quoted names to lower case (and so
 *   does a warehouse whose engine is not known), a search sink's index names are lower case; of
 *   such twins the table registered first is carried and every other is refused
 *   (`nameTwinRefusals`). The applier refuses the same tables in the same order when one reaches
 *   it another way (lambda/core/shared/name-folding.ts).
 */
import { searchFieldRefusal, searchNamePart } from '../../../contracts/search-index-names.ts';
import { postgresDialect } from '../warehouse/postgres-dialect.ts';
import { tableNameRefusal } from '../warehouse/warehouse-names.ts';
import { sinkTypeRefusal, warehouseTable } from '../warehouse/warehouse-sql.ts';
import { foldedName } from '../shared/name-folding.ts';

/** The warehouse engine a table is registered for: `any` when not known (the limits of every engine apply). */
export type WarehouseKind = 'postgres' | 'redshift' | 'any';
export const WAREHOUSE_KINDS: readonly WarehouseKind[] = ['postgres', 'redshift', 'any'];

export interface SinkProfile {
  /** The warehouse sink's engine, or null without one. */
  warehouse: WarehouseKind | null;
  /** Whether a search sink serves the table. */
  search: boolean;
}

/** The profile when the sinks are not known: what every warehouse holds, no search sink (it serves only tables named to it). */
export const UNKNOWN_SINKS: SinkProfile = { warehouse: 'any', search: false };

/** Why the profile's warehouse cannot hold a column of `declaredType` exactly, or null. */
export function warehouseTypeRefusal(profile: SinkProfile, declaredType: string | null): string | null {
  if (profile.warehouse === null || declaredType === null) return null;
  if (profile.warehouse === 'postgres') {
    const choice = postgresDialect.columnType(declaredType);
    return 'refused' in choice ? `a PostgreSQL warehouse refuses it: ${choice.refused}` : null;
  }
  const why = sinkTypeRefusal(declaredType);
  return why === null
    ? null
    : profile.warehouse === 'redshift'
      ? `Redshift: ${why}`
      : `${why} (the warehouse's engine is not known; a PostgreSQL warehouse carries it)`;
}

/** Why the profile's search sink cannot hold a column named `name`, or null. */
export function searchColumnRefusal(profile: SinkProfile, name: string): string | null {
  return profile.search ? searchFieldRefusal(name) : null;
}

/** One table that cannot be carried beside another whose name it folds into. */
export interface NameTwin {
  /** The table carried (registered first). */
  first: string;
  /** Where the two names would be one. */
  sink: 'warehouse' | 'search';
  reason: string;
}

/** The names a table's objects fold into in each sink of the profile that folds names. */
function foldedKeys(profile: SinkProfile, sourceId: string, table: string): Array<{ sink: 'warehouse' | 'search'; key: string }> {
  const out: Array<{ sink: 'warehouse' | 'search'; key: string }> = [];
  if (profile.warehouse === 'redshift' || profile.warehouse === 'any') out.push({ sink: 'warehouse', key: foldedName(warehouseTable(sourceId, table)) });
  if (profile.search) {
    const [schema, name] = table.split('.') as [string, string];
    out.push({ sink: 'search', key: `${searchNamePart(schema)}.${searchNamePart(name)}` });
  }
  return out;
}

/**
 * The tables of `ordered` (registration order: the table registered first first) refused because
 * their name folds into that of a table before them in a sink of the profile. Tables whose name
 * cannot be carried at all are left to `tableNameRefusal`.
 */
export function nameTwinRefusals(profile: SinkProfile, sourceId: string, ordered: readonly string[]): Map<string, NameTwin> {
  const firstOf = new Map<string, string>();
  const out = new Map<string, NameTwin>();
  for (const table of ordered) {
    if (tableNameRefusal(table) !== null || out.has(table)) continue;
    for (const { sink, key } of foldedKeys(profile, sourceId, table)) {
      const first = firstOf.get(`${sink}\u0000${key}`);
      if (first === undefined) {
        firstOf.set(`${sink}\u0000${key}`, table);
        continue;
      }
      if (first === table || out.has(table)) continue;
      const where =
        sink === 'search'
          ? 'search index names are lower case'
          : profile.warehouse === 'redshift'
            ? 'Redshift folds quoted names to lower case'
            : "a warehouse may fold quoted names to lower case (Redshift does; the warehouse's engine is not known)";
      out.set(table, {
        first,
        sink,
        reason: `${table} and ${first} (registered first) would be one table in the ${sink}: ${where}`,
      });
    }
  }
  return out;
}

/**
 * Registration order of `tables`: tables already registered in the order they were (`registeredAt`),
 * then declared tables, then the rest, each group by table id in code-point order (so `"Orders"`
 * before `orders`), the order the applier decides by too.
 */
export function registrationOrder(tables: Iterable<string>, registeredAt: ReadonlyMap<string, string>, declared: ReadonlySet<string>): string[] {
  const rank = (t: string): [number, string] => (registeredAt.has(t) ? [0, registeredAt.get(t)!] : declared.has(t) ? [1, ''] : [2, '']);
  return [...new Set(tables)].sort((a, b) => {
    const [ra, wa] = rank(a);
    const [rb, wb] = rank(b);
    if (ra !== rb) return ra - rb;
    if (wa !== wb) return wa < wb ? -1 : 1;
    return a < b ? -1 : a > b ? 1 : 0;
  });
}
