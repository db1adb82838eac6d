/**
 * A captured table as the cluster has it (docs/warehouse-apply.md, "Redshift: schema changes"): the
 * rows of `existingColumnsSql` read back into a `RedshiftTable`, typed as the dialect types a column
 * (`redshiftColumn`), so `evolveSql` compares it with the table a schema version wants. Pure.
 */
import { RESERVED_PREFIX } from './warehouse-sql.ts';
import { evolveSql, RedshiftTypeChangeError, type RedshiftTable } from './redshift-sql.ts';
import { REDSHIFT_MAX_SUPER_BYTES, REDSHIFT_MAX_VARBYTE_BYTES, type RedshiftColumn } from './redshift-types.ts';

/** One row of `existingColumnsSql`. */
export interface CatalogColumn {
  table_name: unknown;
  column_name: unknown;
  data_type: unknown;
  character_maximum_length: unknown;
  numeric_precision: unknown;
  numeric_scale: unknown;
}

const count = (v: unknown): number | undefined => (v === null || v === undefined ? undefined : Number(v));

/** Catalog type names (`data_type`) of the types the dialect makes, and the dialect's name of each. */
const FIXED: Record<string, Omit<RedshiftColumn, 'name'>> = {
  bigint: { type: 'bigint', kind: 'integer' },
  'double precision': { type: 'double precision', kind: 'float' },
  boolean: { type: 'boolean', kind: 'boolean' },
  date: { type: 'date', kind: 'date' },
  'timestamp with time zone': { type: 'timestamptz', kind: 'timestamp' },
  'timestamp without time zone': { type: 'timestamp', kind: 'timestamp' },
  'time with time zone': { type: 'timetz', kind: 'time' },
  'time without time zone': { type: 'time', kind: 'time' },
  super: { type: 'super', kind: 'super', maxBytes: REDSHIFT_MAX_SUPER_BYTES },
};

/** The column a catalog row describes, typed as the dialect types it; null when it is no type the dialect makes. */
export function catalogColumn(row: CatalogColumn): RedshiftColumn | null {
  const name = String(row.column_name);
  const dataType = String(row.data_type).toLowerCase();
  const length = count(row.character_maximum_length);
  if (dataType === 'character varying' && length !== undefined) return { name, type: `varchar(${length})`, kind: 'varchar', maxBytes: length };
  if (dataType === 'varbyte' || dataType === 'varbinary' || dataType === 'binary varying') {
    const n = length ?? REDSHIFT_MAX_VARBYTE_BYTES;
    return { name, type: `varbyte(${n})`, kind: 'varbyte', maxBytes: n };
  }
  if (dataType === 'numeric') {
    const scale = count(row.numeric_scale) ?? 0;
    return { name, type: `numeric(${count(row.numeric_precision) ?? 38},${scale})`, kind: 'numeric', scale };
  }
  const fixed = FIXED[dataType];
  return fixed === undefined ? null : { name, ...fixed };
}

const describe = (row: CatalogColumn): string =>
  `${String(row.data_type)}${row.character_maximum_length != null ? `(${String(row.character_maximum_length)})` : ''}`;

/**
 * The table `want` names as the cluster has it, or null when its changelog does not exist; `hard` when it has
 * hard mode's remembered deletions. Its columns
 * are the changelog's key and data columns (the platform's own left out), each at the narrower of its
 * changelog and base types (a widening interrupted between the two is made again); the key is `want`'s
 * key columns the cluster has. A column `want` needs whose type the dialect does not make cannot be
 * evolved: `RedshiftTypeChangeError`, the table is held.
 */
export function existingTable(want: RedshiftTable, rows: readonly CatalogColumn[]): RedshiftTable | null {
  const { t } = want;
  const of = (table: string): CatalogColumn[] => rows.filter((r) => String(r.table_name) === table.toLowerCase());
  // The platform's own columns (`_cdc_…`; source columns may not take the prefix) are the dialect's, never evolved.
  const changelog = of(t.changelog).filter((r) => !String(r.column_name).startsWith(RESERVED_PREFIX));
  if (changelog.length === 0) return null;
  const base = new Map(of(t.mirror).map((r) => [String(r.column_name), catalogColumn(r)]));
  const wanted = new Map([...want.key, ...want.data].map((c) => [c.name.toLowerCase(), c]));
  const columns: RedshiftColumn[] = [];
  for (const row of changelog) {
    const c = catalogColumn(row);
    const w = wanted.get(String(row.column_name));
    if (c === null) {
      if (w !== undefined) throw new RedshiftTypeChangeError(t.tableId, w.name, describe(row), w.type);
      continue;
    }
    const b = base.get(c.name);
    const narrower = b && b.kind === 'varchar' && c.kind === 'varchar' && (b.maxBytes ?? 0) < (c.maxBytes ?? 0) ? b : c;
    columns.push({ ...narrower, name: w?.name ?? c.name });
  }
  const keyNames = new Set(want.key.map((k) => k.name));
  // Hard mode: the table has its remembered deletions (made with it, or when a version first loaded it in hard mode).
  const hard = of(t.deletedKeys).length > 0;
  const table: RedshiftTable = { t, key: columns.filter((c) => keyNames.has(c.name)), data: columns.filter((c) => !keyNames.has(c.name)), hard };
  // Made before truncates were loaded: evolving adds the guard (docs/truncate.md).
  if (of(t.truncations).length === 0) table.lacksTruncations = true;
  // Made before key changes were held: evolving adds the handover table (docs/primary-key-changes.md, "On Redshift").
  if (of(t.handover).length === 0) table.lacksHandover = true;
  return table;
}

/** Whether `evolveSql(have, want)` would change the table, or refuses to (a type it cannot change). */
export function needsEvolving(have: RedshiftTable, want: RedshiftTable): boolean {
  try {
    const plan = evolveSql(have, want);
    return plan.transactional.length + plan.widen.length > 0;
  } catch {
    return true;
  }
}

/**
 * The table as the cluster has it once `evolveSql(have, want)` ran: `have`'s columns, widened where `want`'s
 * hold more bytes, then `want`'s added ones (a column `want` lacks stays). A later batch of either version
 * compares with it, so an older version's batch does not make the newer one evolve again.
 */
export function evolvedTable(have: RedshiftTable, want: RedshiftTable): RedshiftTable {
  const wanted = new Map([...want.key, ...want.data].map((c) => [c.name.toLowerCase(), c]));
  const had = new Set([...have.key, ...have.data].map((c) => c.name.toLowerCase()));
  const widened = (c: RedshiftColumn): RedshiftColumn => {
    const w = wanted.get(c.name.toLowerCase());
    return w !== undefined && w.kind === 'varchar' && c.kind === 'varchar' && (w.maxBytes ?? 0) > (c.maxBytes ?? 0) ? w : c;
  };
  return { ...want, data: [...have.data.map(widened), ...want.data.filter((c) => !had.has(c.name.toLowerCase()))] };
}
