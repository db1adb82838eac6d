/**
 * The decode context a normalizer batch hands the decoders (decode.ts): what it knows of each
 * table (configured key, registered schema versions, catalog-published key, partition tree), with
 * every table it does not know yet noted, so the batch loads it and decodes the record again.
 * Built once per batch; the batch clears `misses` before each decode.
 */
import type { SchemaVersion, TableRecord } from '../shared/control-plane.ts';
import type { TableConfigIndex } from '../tables/table-config.ts';
import type { PartitionTree } from '../tables/partitions.ts';
import type { DecodeContext } from './decode.ts';

/** A table's registry as the batch holds it. */
export interface Registry {
  table: TableRecord | null;
  /** Sorted by version. */
  versions: SchemaVersion[];
}

/** What a batch knows, read at each call (the batch replaces its tree and fills its maps as it goes). */
export interface BatchKnowledge {
  source: string;
  tables: TableConfigIndex;
  /** Whether the normalizer reads the catalog's published types (and so its keys) for unregistered tables. */
  readsCatalog: boolean;
  tree: () => PartitionTree;
  cache: ReadonlyMap<string, Registry>;
  catalogKeys: ReadonlyMap<string, string[] | null>;
}

/** The context; tables it could not answer for are added to `misses`. */
export function batchDecodeContext(k: BatchKnowledge, misses: Set<string>): DecodeContext {
  return {
    source: k.source,
    rootOf: (table) => k.tree().rootOf.get(table) ?? null,
    keyColumns: (table) => {
      const configured = k.tables.keyColumns(table);
      if (configured) return configured;
      const reg = k.cache.get(table);
      if (!reg) {
        misses.add(table);
        return null;
      }
      const key = reg.versions.at(-1)?.key ?? [];
      if (key.length > 0) return [...key];
      // A table not registered yet: the key the catalog published with its types (a DMS insert names none).
      if (!k.catalogKeys.has(table) && k.readsCatalog && reg.versions.length === 0 && k.tables.get(table) !== undefined) {
        misses.add(table);
        return null;
      }
      const published = k.catalogKeys.get(table) ?? null;
      return published !== null && published.length > 0 ? [...published] : null;
    },
    columns: (table) => {
      const reg = k.cache.get(table);
      if (!reg) {
        misses.add(table);
        return null;
      }
      return reg.versions.at(-1)?.columns.map((c) => c.name) ?? null;
    },
  };
}
