/**
 * Column types from the source's catalog for a table's first registration (docs/schema-drift.md,
 * "First sight of a table"). A DMS data record carries no types; a table first seen through one
 * would be registered with unknown types, its sink columns made text, and the real types, learned
 * later from a table definition or a snapshot, could no longer be applied in any sink (a column's
 * type cannot change in place: `SinkTypeConflictError`, `SEARCH_MAPPING_CONFLICT`).
 *
 * So the function that already reads the source (the snapshot worker, with its own `SELECT`
 * identity in the VPC) publishes each captured table's catalog types (`format_type(atttypid,
 * atttypmod)`, primary key) to the control plane while the table is not registered yet; the
 * normalizer, which never connects to the source, registers a table first seen through a
 * type-less record with those types, and until they are there it does not register it at all:
 * the record fails as an infrastructure failure and is retried (never published untyped, never
 * dead-lettered).
 *
 * Storage: one checkpoint item per table under `catalogConsumerId(source)`, value the JSON of
 * `CatalogTypes`. Pure: no I/O of its own.
 */
import { catalogConsumerId } from '../../../contracts/control-plane-keys.ts';
import type { ControlPlane } from './control-plane.ts';
import { CdcError } from './errors.ts';
import type { ObservedShape } from '../tables/schema-evolution.ts';

/** A table's columns as the source's catalog has them. */
export interface CatalogTypes {
  /** `schema.table` */
  table: string;
  /** Columns in table order, type with its modifiers (`character varying(20)`, `numeric(12,2)`). */
  columns: { name: string; type: string }[];
  /** Primary-key columns in key order (empty when the table has none). */
  key: string[];
}

/** The catalog of the source, as far as the publisher needs it: null when the table does not exist. */
export type DescribeTable = (table: string) => Promise<CatalogTypes | null>;

/** A table first seen through a record without types, whose catalog types are not published (yet, or not for every column the record names). */
export class TableTypesPendingError extends CdcError {
  constructor(
    readonly sourceId: string,
    readonly table: string,
    detail: string,
  ) {
    super(
      'TABLE_TYPES_PENDING',
      `${sourceId}/${table} is seen for the first time through a record without column types, and ${detail}; ` +
        'the record is retried until the snapshot worker has published the table\'s catalog types (docs/schema-drift.md, "First sight of a table")',
    );
  }
}

/** Reads the published catalog types of a table (null when none are published). */
export async function readCatalogTypes(controlPlane: ControlPlane, sourceId: string, table: string): Promise<CatalogTypes | null> {
  const text = await controlPlane.getCheckpoint(catalogConsumerId(sourceId), table);
  if (text === null) return null;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new CdcError('INVALID_STATE', `catalog types of ${sourceId}/${table} in the control plane are not JSON: ${(e as Error).message}`);
  }
  const c = v as CatalogTypes;
  if (
    !c ||
    c.table !== table ||
    !Array.isArray(c.columns) ||
    !c.columns.every((x) => typeof x?.name === 'string' && typeof x?.type === 'string') ||
    !Array.isArray(c.key)
  ) {
    throw new CdcError(
      'INVALID_STATE',
      `catalog types of ${sourceId}/${table} in the control plane are not {table, columns: [{name, type}], key}: ${text.slice(0, 200)}`,
    );
  }
  return c;
}

/**
 * Publishes the catalog types of every table of `tables` that is not registered yet (and whose
 * published types differ from the catalog's). Returns the tables written. A table the catalog
 * does not have is skipped.
 */
export async function publishCatalogTypes(controlPlane: ControlPlane, sourceId: string, tables: readonly string[], describe: DescribeTable): Promise<string[]> {
  const registered = new Set((await controlPlane.listTables(sourceId)).map((t) => t.table));
  const written: string[] = [];
  for (const table of new Set(tables)) {
    if (registered.has(table)) continue;
    const types = await describe(table);
    if (types === null) continue;
    const text = JSON.stringify({ table, columns: types.columns.map((c) => ({ name: c.name, type: c.type })), key: [...types.key] } satisfies CatalogTypes);
    if ((await controlPlane.getCheckpoint(catalogConsumerId(sourceId), table)) === text) continue;
    await controlPlane.putCheckpoint(catalogConsumerId(sourceId), table, text);
    written.push(table);
  }
  return written;
}

/**
 * The observation with every unknown type taken from the catalog. Null when the record names a
 * column the catalog read does not have (read before the column was added): the caller waits
 * for a newer read rather than register that column untyped.
 */
export function withCatalogTypes(observed: ObservedShape, catalog: CatalogTypes): { shape: ObservedShape; missing: string[] } {
  const types = new Map(catalog.columns.map((c) => [c.name, c.type]));
  const missing = observed.columns.filter((c) => c.type === null && !types.has(c.name)).map((c) => c.name);
  return {
    shape: { ...observed, columns: observed.columns.map((c) => (c.type === null && types.has(c.name) ? { ...c, type: types.get(c.name)! } : c)) },
    missing,
  };
}
