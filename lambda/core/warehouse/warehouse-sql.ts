/**
 * Warehouse layout and SQL text for the warehouse applier (docs/architecture.md §5.4). Pure: builds names, types
 * and statements; the pg adapter (`lambda/adapters/warehouse-pg.ts`) runs them.
 *
 * Layout per captured table (source id `s`, source table `sch.tbl`), in the warehouse schema
 * `s_sch` (e.g. `demo_public`; each `_` of `s` written `$`), named as lambda/core/warehouse/warehouse-names.ts
 * derives them (docs/architecture.md §5.4, "Names"):
 * - `_cdc_changelog_tbl`: where a batch lands (docs/warehouse-apply.md, "Objects per captured table"), append-only,
 *   one row per delivered event (deduplicated on position + key), with its append order `_cdc_seq`
 *   (the watermark `_cdc_watermark_tbl` says up to which order the mirror has absorbed it; the view
 *   `_cdc_delta_tbl` is the rest):
 *   `_cdc_position`, `_cdc_op`, `_cdc_commit_ts`, `_cdc_schema_version`, `_cdc_tx_id`,
 *   `_cdc_synthetic`, `_cdc_missing` (JSON array of the columns that were not delivered, or
 *   NULL), `_cdc_applied_at`, then the key columns and the data columns as typed columns. Typed
 *   columns rather than one JSON text column: the history can be queried like the table itself,
 *   Redshift's 64 KB VARCHAR limit applies per column instead of to the whole row image, and
 *   absent-versus-null stays exact through `_cdc_missing` (a delivered NULL is a NULL with the
 *   column not listed there). The before image is not copied: the change log and its archive
 *   keep it (invariant 1), and a primary-key change shows in the changelog as the delete of the
 *   old key and the insert of the new one at the same position.
 * - `_cdc_mirror_tbl`: one row per key: `_cdc_deleted` (first, see `MIRROR_LEADING_COLUMNS`), key and
 *   data columns, `_cdc_position`, `_cdc_deleted_at`, `_cdc_applied_at`. A soft delete keeps the
 *   row as a tombstone with its last values. Mirrors made before have `_cdc_deleted` after
 *   `_cdc_position`; nothing depends on the order.
 * - view `tbl`: the mirror without tombstones and without the `_cdc_deleted*` columns.
 * - `_cdc_deleted_keys_tbl` (hard-delete mode): key, `_cdc_position`, `_cdc_deleted_at`,
 *   `_cdc_applied_at` of keys whose mirror row was deleted, so a late older event cannot
 *   resurrect the row (invariant 7). Once it exists it guards inserts in either mode.
 * - `_cdc_truncations_tbl`: one row per captured TRUNCATE of the table (`_cdc_position`,
 *   `_cdc_commit_ts`, `_cdc_tx_id`, `_cdc_schema_version`, `_cdc_applied_at`), made on the
 *   first truncate. It is the table-level position guard: once it exists, a mirror write applies
 *   only if its position is above both the key's stored position and every truncate's position
 *   (so a late older event can never resurrect a truncated row), and it is the record of the
 *   truncates (the changelog holds row events, which have a key; a truncate has none). A
 *   truncate at position P tombstones every live mirror row below P (soft mode: at P, with
 *   `_cdc_deleted_at` = the truncate's commit time) or removes them (hard mode; deleted-keys
 *   entries below P are dropped too, the truncate guards them). See docs/truncate.md.
 *
 * Only SQL that PostgreSQL and Amazon Redshift both accept: no `ON CONFLICT`, no `MERGE`, no
 * `DISTINCT ON`, no `RETURNING`, no `ON COMMIT` clauses, no `VALUES` lists in `FROM`, no
 * `IF NOT EXISTS` on `ADD COLUMN`, no `::` casts, no clock functions (times are parameters).
 * Stage tables are session temp tables made with `CREATE TEMP TABLE … AS SELECT … WHERE 1 = 0`.
 * The PostgreSQL-only statements are the occasional TRUNCATE of `clearStagesSql` (used by the
 * PostgreSQL stage lifecycle; see `lambda/adapters/warehouse-pg.ts`), those of a fresh shadow's
 * append (`lockDeltaForAppendSql`, `insertNewValuesSql`'s `ON CONFLICT DO NOTHING`), which the
 * adapter uses on PostgreSQL only (docs/warehouse-apply.md, "A rebuild's shadow"), the merge's
 * changelog append with `engine: 'postgres'` (`ON CONFLICT DO NOTHING`) and the planner's
 * estimates a merge looks at (lambda/core/warehouse/merge-nested-loops.ts). PRIMARY KEY constraints are declared on every
 * table: PostgreSQL enforces them and uses their indexes; Redshift accepts them as planner hints.
 *
 * Identifiers are always checked (`assertPlainIdentifier`, and the applier checks them against the
 * registry first) and double-quoted; values are always parameters (`$n`).
 */
import { UnsafeIdentifierError } from '../shared/errors.ts';
import { assertCarriedIdentifier, assertPlainIdentifier, quoteIdent, splitTableId } from '../shared/identifiers.ts';
import { POLL_DELETES_INVISIBLE } from '../capture/poll.ts';
import { assertCarriedTableName, fnv1a, platformName, warehouseSchemaName } from './warehouse-names.ts';

/** Source columns may not use this prefix: the platform's own columns do. */
export const RESERVED_PREFIX = '_cdc_';
/** The text type both warehouses accept for any text (Redshift's VARCHAR maximum, in bytes). */
export const TEXT_TYPE = 'varchar(65535)';
/** Bind parameters per statement are kept at or below this (PostgreSQL allows 65,535; stay well inside both). */
export const MAX_PARAMETERS = 32_767;
/** Rows per multi-row INSERT statement, at most. */
export const MAX_ROWS_PER_STATEMENT = 1_000;

/** The platform's own columns. */
export const CdcColumn = {
  POSITION: '_cdc_position',
  OP: '_cdc_op',
  COMMIT_TS: '_cdc_commit_ts',
  SCHEMA_VERSION: '_cdc_schema_version',
  TX_ID: '_cdc_tx_id',
  SYNTHETIC: '_cdc_synthetic',
  MISSING: '_cdc_missing',
  APPLIED_AT: '_cdc_applied_at',
  DELETED: '_cdc_deleted',
  DELETED_AT: '_cdc_deleted_at',
  /** Changelog and watermark: the append order (an identity, assigned as rows are appended; docs/warehouse-apply.md, "Objects per captured table"). */
  SEQ: '_cdc_seq',
  /** Stage only: which column set an UPDATE writes for the row. */
  SET: '_cdc_set',
  /** Event stage only: index of the event in the applier's batch. */
  IDX: '_cdc_idx',
  /** Handover table: `donor` or `event`, the key (as `keyText`), the column and its value as text. */
  KIND: '_cdc_kind',
  KEY: '_cdc_key',
  COLUMN: '_cdc_column',
  VALUE: '_cdc_value',
} as const;

/** The two session temp tables one table's apply stages into (names from `stageNames`). */
export interface StageNames {
  /** Events of the batch, shaped like the changelog plus `_cdc_idx`. */
  events: string;
  /** One collapsed write per key, shaped like the mirror plus `_cdc_set`. */
  writes: string;
}

/**
 * Stage table names for a table and the sink's current columns: a new shape (an added column)
 * gets new stage tables, so a stage created earlier in the session never has stale columns.
 */
export function stageNames(t: WarehouseTable, mirrorColumns: readonly string[], changelogColumns: readonly string[]): StageNames {
  const h = fnv1a(JSON.stringify([t.schema, t.view, mirrorColumns, changelogColumns]));
  return { events: `cdc_events_${h}`, writes: `cdc_writes_${h}` };
}

/** A sink column: name and warehouse type (one of the strings `sinkType` returns). */
export interface SinkColumn {
  name: string;
  type: string;
}

/** The warehouse objects of one captured table (unquoted names). */
export interface WarehouseTable {
  source: string;
  /** Source table id `schema.table`. */
  tableId: string;
  schema: string;
  changelog: string;
  mirror: string;
  deletedKeys: string;
  /** Per-table truncate positions (the table-level guard). */
  truncations: string;
  /** Primary-key changes in flight: handed-over values and held events (see `createHandoverSql`). */
  handover: string;
  /** The unmerged changes: a view of the changelog's rows above the watermark (see `createPendingViewSql`). */
  delta: string;
  /** One row: the append order (`_cdc_seq`) up to which the base has absorbed the changelog. */
  watermark: string;
  /** The index of the changelog's append order (PostgreSQL). */
  appendOrder: string;
  view: string;
}

/** The platform tables of the view `view` (`_cdc_<kind>_<view>`, lambda/core/warehouse/warehouse-names.ts). */
export function platformTables(
  view: string,
): Pick<WarehouseTable, 'changelog' | 'mirror' | 'deletedKeys' | 'truncations' | 'handover' | 'delta' | 'watermark' | 'appendOrder'> {
  return {
    changelog: platformName('changelog', view),
    mirror: platformName('mirror', view),
    deletedKeys: platformName('deletedKeys', view),
    truncations: platformName('truncations', view),
    handover: platformName('handover', view),
    delta: platformName('delta', view),
    watermark: platformName('watermark', view),
    appendOrder: platformName('appendOrder', view),
  };
}

/** Where a table's warehouse objects live, when not in the default place. */
export interface WarehouseTableOptions {
  /**
   * The warehouse schema to put them in (e.g. a shadow schema a rebuild replays into).
   * @default `warehouseSchemaName(source, schema)` (lambda/core/warehouse/warehouse-names.ts)
   */
  schema?: string;
}

/**
 * The warehouse objects for source `source` and table id `schema.table`. Throws
 * `UnsafeIdentifierError` when a part is not a plain identifier.
 */
export function warehouseTable(sourceId: string, tableId: string, options: WarehouseTableOptions = {}): WarehouseTable {
  assertPlainIdentifier(sourceId, 'source id');
  const { schema, table } = splitTableId(tableId);
  return {
    source: sourceId,
    tableId,
    schema: options.schema !== undefined ? assertCarriedIdentifier(options.schema, 'warehouse schema', true) : warehouseSchemaName(sourceId, schema),
    ...platformTables(assertCarriedTableName(table, tableId)),
    view: table,
  };
}

/** Checks a source column name for use in the warehouse: plain identifier, not a platform column. */
export function assertSourceColumn(name: string, tableId: string): string {
  assertCarriedIdentifier(name, `column name of ${tableId}`);
  if (name.toLowerCase().startsWith(RESERVED_PREFIX)) {
    throw new UnsafeIdentifierError(name, `column names starting with ${RESERVED_PREFIX} are reserved for the platform (table ${tableId})`);
  }
  return name;
}

/** `"schema"."name"` */
export function qualified(schema: string, name: string): string {
  return `${quoteIdent(schema)}.${quoteIdent(name)}`;
}

/** Integer type names, PostgreSQL's and DMS's: one sink column type absorbs them all (both dialects). */
export const INTEGER_TYPES: ReadonlySet<string> = new Set([
  'smallint',
  'int2',
  'integer',
  'int',
  'int4',
  'bigint',
  'int8',
  'smallserial',
  'serial2',
  'serial',
  'serial4',
  'bigserial',
  'serial8',
  // DMS type names
  'int1',
  'int16',
  'int32',
  'int64',
  'uint1',
  'uint2',
  'uint4',
  'byte',
]);
/** Floating-point type names, PostgreSQL's and DMS's. */
export const FLOAT_TYPES: ReadonlySet<string> = new Set(['real', 'float4', 'double precision', 'float8', 'float', 'real4', 'real8', 'double']);
const BOOLEAN_TYPES = new Set(['boolean', 'bool']);
const TIMESTAMP_TYPES = new Set(['timestamp', 'timestamp without time zone', 'datetime']);
const TIMESTAMPTZ_TYPES = new Set(['timestamptz', 'timestamp with time zone']);

/**
 * Maps a source type name (PostgreSQL's, as test_decoding prints it, or DMS's) to a type that
 * PostgreSQL and Redshift both accept. Chosen so that every change the schema registry calls
 * compatible (widening, invariant 8) needs no column-type change on the sink, which Redshift
 * cannot do except for VARCHAR length:
 * - any integer type → `bigint` (absorbs smallint → integer → bigint);
 * - real / double precision → `double precision`;
 * - `numeric(p,s)` with p ≤ 38 → `numeric(38,s)` (absorbs precision widening; a wider scale is a
 *   type conflict the applier refuses loudly instead of rounding); unbounded `numeric`, p > 38,
 *   `money` → `varchar(65535)` (lossless);
 * - boolean → `boolean`; date → `date`; timestamp → `timestamp`; timestamptz → `timestamptz`;
 *   DMS `DATETIME` → `timestamp` (as DMS's own Redshift target does);
 * - everything else (text, varchar(n), char(n), uuid, json, jsonb, bytea, time, interval,
 *   arrays, enums, unknown) → `varchar(65535)` on Redshift (its largest, 64 KB in bytes: a longer
 *   value is refused by the warehouse), `text` on PostgreSQL (`engine: 'postgres'`), which holds
 *   the source's text of any length. The full table is in docs/types.md.
 */
export function sinkType(sourceType: string | null, engine: WarehouseEngine = 'redshift'): string {
  const portable = portableSinkType(sourceType);
  return portable === TEXT_TYPE && engine === 'postgres' ? POSTGRES_TEXT_TYPE : portable;
}

/**
 * The text type of a PostgreSQL warehouse: `text`, unbounded (up to PostgreSQL's own 1 GB per
 * value), where Redshift's is `varchar(65535)` (docs/types.md). The value is the source's text
 * either way, so a column made as `varchar(65535)` before keeps taking every value.
 */
export const POSTGRES_TEXT_TYPE = 'text';

/** Whether a warehouse column of type `have` takes any value as text (either engine's text type). */
export function isSinkTextType(have: string): boolean {
  return have === TEXT_TYPE || have === POSTGRES_TEXT_TYPE;
}

function portableSinkType(sourceType: string | null): string {
  if (sourceType === null) return TEXT_TYPE;
  const t = sourceType.trim().toLowerCase().replace(/"/g, '').replace(/\s+/g, ' ');
  if (t.endsWith('[]')) return TEXT_TYPE;
  if (INTEGER_TYPES.has(t)) return 'bigint';
  if (FLOAT_TYPES.has(t) || /^float\(\d+\)$/.test(t)) return 'double precision';
  if (BOOLEAN_TYPES.has(t)) return 'boolean';
  if (t === 'date') return 'date';
  const ts = /^timestamp(?:\(\d+\))?( with(?:out)? time zone)?$/.exec(t);
  if (ts) return ts[1] === ' with time zone' ? 'timestamptz' : 'timestamp';
  if (TIMESTAMP_TYPES.has(t)) return 'timestamp';
  if (TIMESTAMPTZ_TYPES.has(t) || /^timestamptz\(\d+\)$/.test(t)) return 'timestamptz';
  const num = /^(?:numeric|decimal)\((\d+)(?:,\s*(\d+))?\)$/.exec(t);
  if (num) {
    const p = Number(num[1]);
    const s = Number(num[2] ?? '0');
    if (p >= 1 && p <= 38 && s >= 0 && s <= p) return `numeric(38,${s})`;
    return TEXT_TYPE;
  }
  return TEXT_TYPE;
}

/** Redshift's largest numeric precision (and the precision the warehouse's numeric columns get). */
export const MAX_NUMERIC_PRECISION = 38;

/**
 * Why the warehouse cannot carry a source type faithfully, or null when it can. The applier
 * refuses such a column by name (`UnsupportedSinkTypeError`) instead of coercing it
 * (docs/exact-numbers.md):
 * - `numeric(p,s)` with p > 38 (Redshift's limit): the declared precision asks for a number
 *   column that no portable warehouse type can hold;
 * - `numeric(p,s)` with a negative scale or a scale larger than p (PostgreSQL 15+).
 * Unbounded `numeric` is carried as its exact decimal text in a `varchar(65535)` column.
 */
export function sinkTypeRefusal(sourceType: string | null): string | null {
  if (sourceType === null) return null;
  const t = sourceType.trim().toLowerCase().replace(/"/g, '').replace(/\s+/g, ' ');
  const num = /^(?:numeric|decimal)\((\d+)(?:,\s*(-?\d+))?\)$/.exec(t);
  if (!num) return null;
  const p = Number(num[1]);
  const s = Number(num[2] ?? '0');
  if (p > MAX_NUMERIC_PRECISION) return `precision ${p} is beyond the warehouse's ${MAX_NUMERIC_PRECISION} digits`;
  if (s < 0 || s > p) return `scale ${s} is outside 0..${p}, which the warehouse's numeric type cannot express`;
  return null;
}

/** A column as `information_schema.columns` describes it. */
export interface CatalogColumn {
  table_name: string;
  column_name: string;
  data_type: string;
  character_maximum_length: string | number | null;
  numeric_precision: string | number | null;
  numeric_scale: string | number | null;
  /** The element type's name with a leading `_` for an array (`_int8`); read for `ARRAY` columns. */
  udt_name?: string | null;
}

/** The array types a warehouse column may have, by the catalog's `udt_name`, as `catalogType` spells them. */
const ARRAY_TYPES: Readonly<Record<string, string>> = {
  _int8: 'bigint[]',
  _float8: 'double precision[]',
  _bool: 'boolean[]',
  _date: 'date[]',
  _timestamp: 'timestamp[]',
  _numeric: 'numeric[]',
  _json: 'json[]',
  _jsonb: 'jsonb[]',
  _bytea: 'bytea[]',
  _uuid: 'uuid[]',
  _text: 'text[]',
};

/** The type string `sinkType` would produce for a column as the catalog describes it (for conflict checks). */
export function catalogType(c: CatalogColumn): string {
  const t = c.data_type.toLowerCase();
  switch (t) {
    case 'bigint':
    case 'integer':
    case 'smallint':
    case 'boolean':
    case 'date':
    case 'double precision':
    case 'real':
      return t;
    case 'timestamp without time zone':
      return 'timestamp';
    case 'timestamp with time zone':
      return 'timestamptz';
    case 'numeric':
      return c.numeric_precision === null ? 'numeric' : `numeric(${Number(c.numeric_precision)},${Number(c.numeric_scale ?? 0)})`;
    case 'character varying':
      return c.character_maximum_length === null ? 'varchar' : `varchar(${Number(c.character_maximum_length)})`;
    case 'array':
      return ARRAY_TYPES[c.udt_name ?? ''] ?? `array ${c.udt_name ?? ''}`;
    default:
      return t;
  }
}

/** Reads the columns of the table's warehouse objects (one round trip; works on both warehouses). */
export function catalogSql(t: WarehouseTable): { text: string; values: string[] } {
  return {
    text:
      'SELECT table_name, column_name, data_type, character_maximum_length, numeric_precision, numeric_scale, udt_name ' +
      'FROM information_schema.columns WHERE table_schema = $1 AND table_name IN ($2, $3, $4, $5, $6, $7, $8, $9) ORDER BY table_name, ordinal_position',
    values: [t.schema, t.changelog, t.mirror, t.deletedKeys, t.view, t.truncations, t.handover, t.delta, t.watermark],
  };
}

/**
 * `catalogSql` with its values inlined as literals, for a multi-statement round trip (schema and
 * table names are carried identifiers without `\\`, checked by `warehouseTable`; `'` is doubled).
 */
export function catalogLiteralSql(t: WarehouseTable): string {
  const q = catalogSql(t);
  return q.text.replace(/\$(\d+)/g, (_, d: string) => `'${assertCarriedIdentifier(q.values[Number(d) - 1]!, 'warehouse name', true).replaceAll("'", "''")}'`);
}

const cols = (names: readonly string[], prefix = ''): string => names.map((n) => prefix + quoteIdent(n)).join(', ');
const defs = (columns: readonly SinkColumn[], notNull = false): string[] => columns.map((c) => `${quoteIdent(c.name)} ${c.type}${notNull ? ' NOT NULL' : ''}`);

export function createSchemaSql(t: WarehouseTable): string {
  return `CREATE SCHEMA IF NOT EXISTS ${quoteIdent(t.schema)}`;
}

/** The changelog's platform columns, in table order. */
export const CHANGELOG_CDC_COLUMNS: readonly SinkColumn[] = [
  { name: CdcColumn.POSITION, type: 'varchar(24) NOT NULL' },
  { name: CdcColumn.OP, type: 'varchar(8) NOT NULL' },
  { name: CdcColumn.COMMIT_TS, type: 'timestamptz NOT NULL' },
  { name: CdcColumn.SCHEMA_VERSION, type: 'integer NOT NULL' },
  { name: CdcColumn.TX_ID, type: 'varchar(256)' },
  { name: CdcColumn.SYNTHETIC, type: 'boolean NOT NULL' },
  { name: CdcColumn.MISSING, type: TEXT_TYPE },
  { name: CdcColumn.APPLIED_AT, type: 'timestamptz NOT NULL' },
];

/**
 * The mirror's platform columns that come BEFORE the key and the data columns: the tombstone flag.
 * As the first column it sits at a fixed offset in every row, so reading it (the view's and the
 * reconciler's `WHERE NOT _cdc_deleted`, a count of live rows) does not decode the data columns
 * first, which after them it must (docs/performance-log.md, "Reconciliation: the tombstone flag first in the mirror"). The view does not show it, so the
 * view's columns are the same as with the earlier layout.
 */
export const MIRROR_LEADING_COLUMNS: readonly SinkColumn[] = [{ name: CdcColumn.DELETED, type: 'boolean NOT NULL' }];

/** The mirror's platform columns after the data columns. */
export const MIRROR_TRAILING_COLUMNS: readonly SinkColumn[] = [
  { name: CdcColumn.POSITION, type: 'varchar(24) NOT NULL' },
  { name: CdcColumn.DELETED_AT, type: 'timestamptz' },
  { name: CdcColumn.APPLIED_AT, type: 'timestamptz NOT NULL' },
];

/** Every platform column of the mirror (`MIRROR_LEADING_COLUMNS` then `MIRROR_TRAILING_COLUMNS`). */
export const MIRROR_CDC_COLUMNS: readonly SinkColumn[] = [...MIRROR_LEADING_COLUMNS, ...MIRROR_TRAILING_COLUMNS];

/**
 * The columns of a mirror `createMirrorSql` makes, in table order: the leading platform columns,
 * the key, the data, the trailing platform columns. Mirrors made by earlier versions have every
 * platform column after the data; everything that writes or reads a mirror names its columns (or
 * takes them in the order the catalog lists them), so both layouts work.
 */
export function mirrorLayout(key: readonly SinkColumn[], data: readonly SinkColumn[]): SinkColumn[] {
  return [...MIRROR_LEADING_COLUMNS, ...key, ...data, ...MIRROR_TRAILING_COLUMNS];
}

/**
 * The changelog: every delivered event once (primary key position + key), and the append order
 * `_cdc_seq` (an identity the engine assigns as rows are appended: PostgreSQL's
 * `GENERATED BY DEFAULT AS IDENTITY`, Redshift's `IDENTITY(1,1)`), which the watermark compares.
 */
export function createChangelogSql(t: WarehouseTable, key: readonly SinkColumn[], data: readonly SinkColumn[], engine: WarehouseEngine = 'postgres'): string {
  const seq = `${quoteIdent(CdcColumn.SEQ)} ${engine === 'redshift' ? 'bigint IDENTITY(1,1)' : 'bigint GENERATED BY DEFAULT AS IDENTITY'}`;
  const body = [
    ...defs(CHANGELOG_CDC_COLUMNS),
    ...defs(key, true),
    ...defs(data),
    seq,
    `PRIMARY KEY (${cols([CdcColumn.POSITION, ...key.map((k) => k.name)])})`,
  ];
  return `CREATE TABLE IF NOT EXISTS ${qualified(t.schema, t.changelog)} (${body.join(', ')})`;
}

/** PostgreSQL: the index of the changelog's append order, by which the view and the merge find the rows above the watermark. */
export function createAppendOrderIndexSql(t: WarehouseTable): string {
  return `CREATE INDEX IF NOT EXISTS ${quoteIdent(t.appendOrder)} ON ${qualified(t.schema, t.changelog)} (${quoteIdent(CdcColumn.SEQ)})`;
}

/** The watermark table (one row, `_cdc_seq` = 0: nothing absorbed yet). */
export function createWatermarkSql(t: WarehouseTable): string[] {
  const w = qualified(t.schema, t.watermark);
  return [
    `CREATE TABLE IF NOT EXISTS ${w} (${quoteIdent(CdcColumn.SEQ)} bigint NOT NULL)`,
    `INSERT INTO ${w} (${quoteIdent(CdcColumn.SEQ)}) SELECT 0 WHERE NOT EXISTS (SELECT 1 FROM ${w})`,
  ];
}

/**
 * The unmerged changes, named `_cdc_delta_<table>`: a view of the changelog's rows above the
 * watermark, with the changelog's columns but the append order (`changelogColumns`, in the
 * changelog's order, so an added column comes last and `CREATE OR REPLACE VIEW` takes it). Not a
 * table: each event is written once, into the changelog (docs/warehouse-apply.md, "Objects per captured table").
 */
export function createPendingViewSql(t: WarehouseTable, changelogColumns: readonly string[]): string {
  const seq = quoteIdent(CdcColumn.SEQ);
  return (
    `CREATE OR REPLACE VIEW ${qualified(t.schema, t.delta)} AS SELECT ${cols(changelogColumns, 'c.')} FROM ${qualified(t.schema, t.changelog)} c ` +
    `WHERE c.${seq} > (SELECT w.${seq} FROM ${qualified(t.schema, t.watermark)} w)`
  );
}

/** The changelog's rows a merge absorbs: append order above `bounds.from` and at most `bounds.to` (decimal integers). */
export function pendingRelationSql(t: WarehouseTable, bounds: PendingBounds): string {
  for (const v of [bounds.from, bounds.to]) if (!/^\d{1,19}$/.test(v)) throw new RangeError(`not an append order: ${v}`);
  const seq = quoteIdent(CdcColumn.SEQ);
  return `(SELECT * FROM ${qualified(t.schema, t.changelog)} c WHERE c.${seq} > ${bounds.from} AND c.${seq} <= ${bounds.to})`;
}

/** The append orders a merge absorbs: above `from` (the watermark) up to `to` (every row at or below it is committed). */
export interface PendingBounds {
  from: string;
  to: string;
}

/**
 * The move of a table from the layout before one write per event (a delta TABLE the appends went
 * to, a changelog without append order; docs/warehouse-apply.md, "The layout before one write
 * per event") to this one, in one transaction, PostgreSQL: with appends and merges kept out, the
 * changelog gets its append order (0 for every row it holds: all of them are in the base), the
 * watermark starts at 0, the delta's distinct events the changelog lacks (the first delivery of
 * each) are appended to the changelog (they get orders above 0: unmerged, as they were), the
 * delta table is dropped and the views are made again over the new layout. Rows, positions and
 * history are kept; the view shows the same rows before and after.
 */
export function migrateDeltaTableSql(
  t: WarehouseTable,
  o: { key: readonly string[]; changelogColumns: readonly string[]; mirrorColumns: readonly string[]; guards: OverlayGuards },
): string[] {
  const q = quoteIdent;
  const seq = q(CdcColumn.SEQ);
  const pos = q(CdcColumn.POSITION);
  const cl = qualified(t.schema, t.changelog);
  return [
    `LOCK TABLE ${qualified(t.schema, t.delta)}, ${cl} IN EXCLUSIVE MODE`,
    `ALTER TABLE ${cl} ADD COLUMN ${seq} bigint NOT NULL DEFAULT 0`,
    `ALTER TABLE ${cl} ALTER COLUMN ${seq} DROP DEFAULT`,
    `ALTER TABLE ${cl} ALTER COLUMN ${seq} ADD GENERATED BY DEFAULT AS IDENTITY`,
    ...createWatermarkSql(t),
    `INSERT INTO ${cl} (${cols(o.changelogColumns)}) SELECT ${cols(o.changelogColumns, 'e.')} FROM (SELECT d.*, row_number() OVER (PARTITION BY d.${pos}, ${cols(o.key, 'd.')} ORDER BY d.${q(CdcColumn.APPLIED_AT)}) AS ${q(RANK)} ` +
      `FROM ${qualified(t.schema, t.delta)} d) e WHERE e.${q(RANK)} = 1 ORDER BY e.${pos} ON CONFLICT DO NOTHING`,
    createAppendOrderIndexSql(t),
    `DROP VIEW IF EXISTS ${qualified(t.schema, t.view)}`,
    `DROP TABLE ${qualified(t.schema, t.delta)}`,
    createPendingViewSql(t, o.changelogColumns),
    createOverlayViewSql(t, o.mirrorColumns, o.key, o.guards),
  ];
}

/** Moves the watermark to `to` (never down). */
export function moveWatermarkSql(t: WarehouseTable, to: string): string {
  if (!/^\d{1,19}$/.test(to)) throw new RangeError(`not an append order: ${to}`);
  const seq = quoteIdent(CdcColumn.SEQ);
  return `UPDATE ${qualified(t.schema, t.watermark)} SET ${seq} = ${to} WHERE ${seq} < ${to}`;
}

/**
 * PostgreSQL: the mirror's fillfactor. A merge updates most of the rows it touches and never a
 * key column, so with room left on the page the new row version stays there (a HOT update: no
 * new entry in the primary key's index) (docs/warehouse-apply.md, "What a merge costs").
 */
export const MIRROR_FILLFACTOR = 70;

/** The mirror, in the order of `mirrorLayout`; `engine` 'postgres': made with `MIRROR_FILLFACTOR`, otherwise (Redshift, the portable form) no storage parameter. */
export function createMirrorSql(t: WarehouseTable, key: readonly SinkColumn[], data: readonly SinkColumn[], engine?: WarehouseEngine): string {
  const body = [
    ...defs(MIRROR_LEADING_COLUMNS),
    ...defs(key, true),
    ...defs(data),
    ...defs(MIRROR_TRAILING_COLUMNS),
    `PRIMARY KEY (${cols(key.map((k) => k.name))})`,
  ];
  return `CREATE TABLE IF NOT EXISTS ${qualified(t.schema, t.mirror)} (${body.join(', ')})${engine === 'postgres' ? ` WITH (fillfactor = ${MIRROR_FILLFACTOR})` : ''}`;
}

export function createDeletedKeysSql(t: WarehouseTable, key: readonly SinkColumn[]): string {
  const body = [
    ...defs(key, true),
    `${quoteIdent(CdcColumn.POSITION)} varchar(24) NOT NULL`,
    `${quoteIdent(CdcColumn.DELETED_AT)} timestamptz`,
    `${quoteIdent(CdcColumn.APPLIED_AT)} timestamptz NOT NULL`,
    `PRIMARY KEY (${cols(key.map((k) => k.name))})`,
  ];
  return `CREATE TABLE IF NOT EXISTS ${qualified(t.schema, t.deletedKeys)} (${body.join(', ')})`;
}

export function createTruncationsSql(t: WarehouseTable): string {
  const body = [
    `${quoteIdent(CdcColumn.POSITION)} varchar(24) NOT NULL`,
    `${quoteIdent(CdcColumn.COMMIT_TS)} timestamptz NOT NULL`,
    `${quoteIdent(CdcColumn.TX_ID)} varchar(256)`,
    `${quoteIdent(CdcColumn.SCHEMA_VERSION)} integer NOT NULL`,
    `${quoteIdent(CdcColumn.APPLIED_AT)} timestamptz NOT NULL`,
    `PRIMARY KEY (${quoteIdent(CdcColumn.POSITION)})`,
  ];
  return `CREATE TABLE IF NOT EXISTS ${qualified(t.schema, t.truncations)} (${body.join(', ')})`;
}

/**
 * `_cdc_handover_tbl`: primary-key changes in flight whose insert lacks columns (an unchanged TOAST
 * value), one row per value: `donor` rows hold the old key's values of those columns just
 * before the change (`_cdc_key` = the old key as `keyText`, `_cdc_position`, `_cdc_column`,
 * `_cdc_value` as text, NULL for NULL); `event` rows hold the events of a new key that wait for
 * them (`_cdc_column` '' carries the event's envelope as JSON, the others its delivered values).
 * Rows live only until the insert is applied, so the table stays small; it has no PRIMARY KEY
 * because a key text can exceed what a PostgreSQL index entry holds. Every apply that touches it
 * holds `lockHandoverSql` and rewrites it whole (see docs/primary-key-changes.md).
 */
export function createHandoverSql(t: WarehouseTable): string {
  const body = [
    `${quoteIdent(CdcColumn.KIND)} varchar(8) NOT NULL`,
    `${quoteIdent(CdcColumn.KEY)} ${TEXT_TYPE} NOT NULL`,
    `${quoteIdent(CdcColumn.POSITION)} varchar(24) NOT NULL`,
    `${quoteIdent(CdcColumn.COLUMN)} varchar(256) NOT NULL`,
    `${quoteIdent(CdcColumn.VALUE)} ${TEXT_TYPE}`,
    `${quoteIdent(CdcColumn.APPLIED_AT)} timestamptz NOT NULL`,
  ];
  return `CREATE TABLE IF NOT EXISTS ${qualified(t.schema, t.handover)} (${body.join(', ')})`;
}

/** The handover table's columns, in table order (for `insertValuesSql`). */
export const HANDOVER_COLUMNS: readonly string[] = [CdcColumn.KIND, CdcColumn.KEY, CdcColumn.POSITION, CdcColumn.COLUMN, CdcColumn.VALUE, CdcColumn.APPLIED_AT];

/** Serialises the applies of one table that touch handovers (whichever shard they run on). */
export function lockHandoverSql(t: WarehouseTable): string {
  return `LOCK TABLE ${qualified(t.schema, t.handover)}`;
}

export function countHandoverSql(t: WarehouseTable): string {
  return `SELECT COUNT(*) AS n FROM ${qualified(t.schema, t.handover)}`;
}

export function readHandoverSql(t: WarehouseTable): string {
  return `SELECT ${cols(HANDOVER_COLUMNS.slice(0, 5))} FROM ${qualified(t.schema, t.handover)}`;
}

/** Positions among `$1…$count` at which the changelog holds an insert (the insert half of a primary-key change at that position). */
export function partnerInsertsSql(t: WarehouseTable, count: number): string {
  const ps = Array.from({ length: count }, (_, i) => `$${i + 1}`).join(', ');
  return `SELECT DISTINCT ${quoteIdent(CdcColumn.POSITION)} FROM ${qualified(t.schema, t.changelog)} WHERE ${quoteIdent(CdcColumn.POSITION)} IN (${ps}) AND ${quoteIdent(CdcColumn.OP)} IN ('insert', 'snapshot')`;
}

export function clearHandoverSql(t: WarehouseTable): string {
  return `DELETE FROM ${qualified(t.schema, t.handover)}`;
}

/**
 * Takes the table lock a truncate needs: appliers of other shards write the same table's mirror
 * concurrently, and a truncate must see (and empty) everything committed before it while no row
 * write slips in between reading the guard and writing. `LOCK TABLE` without a mode takes
 * ACCESS EXCLUSIVE on PostgreSQL and is the only mode Redshift has. Row applies read the mirror
 * (which takes a lock that conflicts) before they read the truncate guard.
 */
export function lockMirrorSql(t: WarehouseTable): string {
  return `LOCK TABLE ${qualified(t.schema, t.mirror)}`;
}

/** The highest truncate position stored (`_cdc_position`, NULL when none). */
export function storedTruncationSql(t: WarehouseTable): string {
  return `SELECT MAX(${quoteIdent(CdcColumn.POSITION)}) AS ${quoteIdent(CdcColumn.POSITION)} FROM ${qualified(t.schema, t.truncations)}`;
}

/**
 * Records one truncate unless it is recorded already. Parameters: `$1` position, `$2` commit
 * time, `$3` transaction id, `$4` schema version, `$5` applied-at.
 */
export function recordTruncationSql(t: WarehouseTable): string {
  const tr = qualified(t.schema, t.truncations);
  const pos = quoteIdent(CdcColumn.POSITION);
  const names = [CdcColumn.POSITION, CdcColumn.COMMIT_TS, CdcColumn.TX_ID, CdcColumn.SCHEMA_VERSION, CdcColumn.APPLIED_AT];
  return (
    `INSERT INTO ${tr} (${cols(names)}) SELECT CAST($1 AS varchar(24)), CAST($2 AS timestamptz), CAST($3 AS varchar(256)), CAST($4 AS integer), CAST($5 AS timestamptz) ` +
    `WHERE NOT EXISTS (SELECT 1 FROM ${tr} x WHERE x.${pos} = CAST($1 AS varchar(24)))`
  );
}

/**
 * Empties the mirror at a truncate's position: every live row below it becomes a tombstone at
 * that position (soft mode), or is removed with the deleted-keys entries below it (hard mode).
 * Rows above it (later events another shard applied first) stay. Parameters: `$1` position,
 * `$2` commit time (soft mode: the deleted-at), `$3` applied-at.
 */
export function truncateMirrorSql(t: WarehouseTable, o: { hard: boolean; deletedKeys: boolean }): string[] {
  const mirror = qualified(t.schema, t.mirror);
  const q = quoteIdent;
  const pos = q(CdcColumn.POSITION);
  const p = 'CAST($1 AS varchar(24))';
  if (!o.hard) {
    return [
      `UPDATE ${mirror} SET ${q(CdcColumn.DELETED)} = true, ${q(CdcColumn.DELETED_AT)} = CAST($2 AS timestamptz), ${pos} = ${p}, ${q(CdcColumn.APPLIED_AT)} = CAST($3 AS timestamptz) ` +
        `WHERE ${pos} < ${p} AND NOT ${q(CdcColumn.DELETED)}`,
    ];
  }
  const out = [`DELETE FROM ${mirror} WHERE ${pos} < ${p}`];
  if (o.deletedKeys) out.push(`DELETE FROM ${qualified(t.schema, t.deletedKeys)} WHERE ${pos} < ${p}`);
  return out;
}

/**
 * The view named after the table: the mirror's columns in the mirror's physical order, minus the
 * tombstone columns, without tombstones. Keeping the mirror's order means an added column is
 * appended at the end, which `CREATE OR REPLACE VIEW` allows on PostgreSQL.
 */
export function createViewSql(t: WarehouseTable, mirrorColumns: readonly string[]): string {
  const visible = mirrorColumns.filter((c) => c !== CdcColumn.DELETED && c !== CdcColumn.DELETED_AT);
  return `CREATE OR REPLACE VIEW ${qualified(t.schema, t.view)} AS SELECT ${cols(visible)} FROM ${qualified(t.schema, t.mirror)} WHERE NOT ${quoteIdent(CdcColumn.DELETED)}`;
}

/**
 * What the sink says on a polled table's view and mirror (docs/polling.md, "What the platform says
 * about deletes"): a table property consumers read from the catalog
 * (`obj_description('schema.table'::regclass)` on PostgreSQL, `pg_description` on Redshift).
 */
export const POLLED_TABLE_COMMENT = `cdc: capture poll; ${POLL_DELETES_INVISIBLE}. A row deleted in the source stays here (docs/polling.md)`;

/** `COMMENT ON` the view and the mirror of a polled table (Redshift and PostgreSQL both take them). */
export function commentPolledSql(t: WarehouseTable, on: 'view' | 'mirror'): string {
  const literal = `'${POLLED_TABLE_COMMENT.replace(/'/g, "''")}'`;
  return on === 'view' ? `COMMENT ON VIEW ${qualified(t.schema, t.view)} IS ${literal}` : `COMMENT ON TABLE ${qualified(t.schema, t.mirror)} IS ${literal}`;
}

/** One column per statement (Redshift adds one column per ALTER TABLE). */
export function addColumnSql(schema: string, table: string, column: SinkColumn): string {
  return `ALTER TABLE ${qualified(schema, table)} ADD COLUMN ${quoteIdent(column.name)} ${column.type}`;
}

/** Rows per INSERT statement for a row of `columnCount` parameters. */
export function rowsPerStatement(columnCount: number): number {
  return Math.max(1, Math.min(MAX_ROWS_PER_STATEMENT, Math.floor(MAX_PARAMETERS / Math.max(1, columnCount))));
}

/** `INSERT INTO <table> (cols) VALUES ($1, …), (…)` for `rowCount` rows. `table` is already quoted. */
export function insertValuesSql(table: string, columns: readonly string[], rowCount: number): string {
  const n = columns.length;
  if (n * rowCount > MAX_PARAMETERS) throw new RangeError(`${n * rowCount} parameters in one statement (limit ${MAX_PARAMETERS})`);
  const rows: string[] = [];
  for (let r = 0; r < rowCount; r++) {
    const ps: string[] = [];
    for (let c = 1; c <= n; c++) ps.push(`$${r * n + c}`);
    rows.push(`(${ps.join(', ')})`);
  }
  return `INSERT INTO ${table} (${cols(columns)}) VALUES ${rows.join(', ')}`;
}

/** PostgreSQL: `insertValuesSql` that skips the rows whose primary key the table holds already (`ON CONFLICT DO NOTHING`). */
export function insertNewValuesSql(table: string, columns: readonly string[], rowCount: number): string {
  return `${insertValuesSql(table, columns, rowCount)} ON CONFLICT DO NOTHING`;
}

const keyMatch = (key: readonly string[], left: string, right: string): string =>
  key.map((k) => `${left}.${quoteIdent(k)} = ${right}.${quoteIdent(k)}`).join(' AND ');

/** Creates both stage tables (session temp tables) from the sink tables' current shape. */
export function createStagesSql(t: WarehouseTable, stages: StageNames): string {
  return (
    `CREATE TEMP TABLE ${quoteIdent(stages.events)} AS SELECT c.*, CAST(0 AS integer) AS ${quoteIdent(CdcColumn.IDX)} FROM ${qualified(t.schema, t.changelog)} c WHERE 1 = 0; ` +
    `CREATE TEMP TABLE ${quoteIdent(stages.writes)} AS SELECT m.*, CAST(0 AS integer) AS ${quoteIdent(CdcColumn.SET)} FROM ${qualified(t.schema, t.mirror)} m WHERE 1 = 0`
  );
}

/**
 * Empties both stage tables inside the apply transaction, before COMMIT (the PostgreSQL session
 * stage lifecycle). Usually with DELETE, which is cheap. But autovacuum never visits temp tables,
 * so deleted rows pile up: every scan of the stage reads them, and the planner, sizing an
 * unanalysed table by its pages, expects far more rows than a batch has (and may then prefer a
 * hash join that reads the whole mirror). So with `truncate` (the adapter asks for it once about
 * `STAGE_TRUNCATE_ROWS` rows have passed through the stage) it is TRUNCATE, which gives the temp
 * tables fresh storage: transactional on PostgreSQL, but costly (new files), hence not every time.
 * PostgreSQL only: on Redshift TRUNCATE commits the transaction; its lifecycle drops the stages.
 */
export function clearStagesSql(stages: StageNames, truncate: boolean): string {
  if (truncate) return `TRUNCATE ${quoteIdent(stages.events)}, ${quoteIdent(stages.writes)}`;
  return `DELETE FROM ${quoteIdent(stages.events)}; DELETE FROM ${quoteIdent(stages.writes)}`;
}

/** Rows through a session stage after which it is truncated rather than deleted from (see `clearStagesSql`). */
export const STAGE_TRUNCATE_ROWS = 1_000;

export function dropStagesSql(stages: StageNames): string {
  return `DROP TABLE ${quoteIdent(stages.events)}; DROP TABLE ${quoteIdent(stages.writes)}`;
}

/** Appends the staged events that the changelog does not hold yet (dedupe on position + key). */
export function appendChangelogSql(t: WarehouseTable, key: readonly string[], changelogColumns: readonly string[], stages: StageNames): string {
  const cl = qualified(t.schema, t.changelog);
  return (
    `INSERT INTO ${cl} (${cols(changelogColumns)}) SELECT ${cols(changelogColumns, 'e.')} FROM ${quoteIdent(stages.events)} e ` +
    `WHERE NOT EXISTS (SELECT 1 FROM ${cl} c WHERE c.${quoteIdent(CdcColumn.POSITION)} = e.${quoteIdent(CdcColumn.POSITION)} AND ${keyMatch(key, 'c', 'e')})`
  );
}

/**
 * What the sink holds for the staged events' keys: `(_cdc_idx, _cdc_position, _cdc_deleted)`
 * from the mirror and, with `deletedKeys`, from the deleted-keys table (as deleted).
 */
export function storedStateSql(t: WarehouseTable, key: readonly string[], deletedKeys: boolean, stages: StageNames): string {
  const [idx, pos, del] = [CdcColumn.IDX, CdcColumn.POSITION, CdcColumn.DELETED].map(quoteIdent) as [string, string, string];
  let sql = `SELECT e.${idx}, m.${pos}, m.${del} FROM ${quoteIdent(stages.events)} e JOIN ${qualified(t.schema, t.mirror)} m ON ${keyMatch(key, 'm', 'e')}`;
  if (deletedKeys) {
    sql += ` UNION ALL SELECT e.${idx}, d.${pos}, true FROM ${quoteIdent(stages.events)} e JOIN ${qualified(t.schema, t.deletedKeys)} d ON ${keyMatch(key, 'd', 'e')}`;
  }
  return sql;
}

/**
 * Full mirror rows of `count` keys given as parameters (key values in key order per row), each
 * tagged with its index: `SELECT 0 AS _cdc_idx, m.* … WHERE key = ($1…) UNION ALL …`.
 */
export function mirrorRowsSql(t: WarehouseTable, key: readonly string[], count: number): string {
  const parts: string[] = [];
  for (let i = 0; i < count; i++) {
    const cond = key.map((k, j) => `m.${quoteIdent(k)} = $${i * key.length + j + 1}`).join(' AND ');
    parts.push(`SELECT ${i} AS ${quoteIdent(CdcColumn.IDX)}, m.* FROM ${qualified(t.schema, t.mirror)} m WHERE ${cond}`);
  }
  return parts.join(' UNION ALL ');
}

/** A column set that one UPDATE writes: `id` as staged in `_cdc_set`, and the data columns it sets. */
export interface UpdateSet {
  id: number;
  columns: readonly string[];
}

export interface ApplyStageOptions {
  stages: StageNames;
  key: readonly string[];
  /** Mirror columns, in table order, excluding nothing (key, data and platform columns). */
  mirrorColumns: readonly string[];
  sets: readonly UpdateSet[];
  /** Hard-delete mode: tombstones delete the mirror row and are remembered in the deleted-keys table. */
  hard: boolean;
  /** The deleted-keys table exists (always true in hard mode): inserts are guarded by it. */
  deletedKeys: boolean;
  /** The truncations table exists: every write is guarded by it (a write at or below a truncate changes nothing). */
  truncations?: boolean;
  /**
   * One `UPDATE` for every column set (each data column takes the stage's value for the sets that
   * have it and keeps its own for the others) instead of one per set: one join of the stage with
   * the base instead of one per set. The merge's two sets (every column; none) use it.
   */
  oneUpdate?: boolean;
}

/**
 * The statements that apply the mirror stage (one row per key, collapsed to its highest
 * position), in order. Each write is guarded by position, so a stored row with an equal or
 * higher position is never changed (invariant 2):
 * 1. one `UPDATE … FROM stage` per column set, where the stored position is lower;
 * 2. `INSERT … SELECT` of keys the mirror does not have (and, with a deleted-keys table, that are
 *    not remembered as deleted at an equal or higher position);
 * 3. hard mode: tombstones delete the mirror row and are recorded in the deleted-keys table; a
 *    live write removes the key's older deleted-keys entry.
 */
export function applyStageSql(t: WarehouseTable, o: ApplyStageOptions): string[] {
  const mirror = qualified(t.schema, t.mirror);
  const mirrorRef = quoteIdent(t.mirror);
  const dk = qualified(t.schema, t.deletedKeys);
  const dkRef = quoteIdent(t.deletedKeys);
  const stage = `${quoteIdent(o.stages.writes)} stg`;
  const q = quoteIdent;
  const pos = q(CdcColumn.POSITION);
  const del = q(CdcColumn.DELETED);
  const always = [CdcColumn.POSITION, CdcColumn.DELETED, CdcColumn.DELETED_AT, CdcColumn.APPLIED_AT];
  const liveOnly = o.hard ? ` AND NOT stg.${del}` : '';
  // The table-level guard: nothing at or below a truncate's position is written.
  const trGuard = o.truncations ? ` AND NOT EXISTS (SELECT 1 FROM ${qualified(t.schema, t.truncations)} x WHERE x.${pos} >= stg.${pos})` : '';
  const out: string[] = [];
  if (o.oneUpdate && o.sets.length > 1) {
    const columns = [...new Set(o.sets.flatMap((s) => s.columns))];
    const assign = [
      ...columns.map((c) => {
        const ids = o.sets.filter((s) => s.columns.includes(c)).map((s) => s.id);
        return ids.length === o.sets.length
          ? `${q(c)} = stg.${q(c)}`
          : `${q(c)} = CASE WHEN stg.${q(CdcColumn.SET)} IN (${ids.join(', ')}) THEN stg.${q(c)} ELSE ${mirrorRef}.${q(c)} END`;
      }),
      ...always.map((c) => `${q(c)} = stg.${q(c)}`),
    ].join(', ');
    out.push(
      `UPDATE ${mirror} SET ${assign} FROM ${stage} WHERE ${keyMatch(o.key, mirrorRef, 'stg')} AND ${mirrorRef}.${pos} < stg.${pos}${liveOnly}${trGuard}`,
    );
  }
  for (const set of o.oneUpdate && o.sets.length > 1 ? [] : o.sets) {
    const assign = [...set.columns, ...always].map((c) => `${q(c)} = stg.${q(c)}`).join(', ');
    out.push(
      `UPDATE ${mirror} SET ${assign} FROM ${stage} WHERE ${keyMatch(o.key, mirrorRef, 'stg')} AND ${mirrorRef}.${pos} < stg.${pos} AND stg.${q(CdcColumn.SET)} = ${set.id}${liveOnly}${trGuard}`,
    );
  }
  const dkGuard = o.deletedKeys ? ` AND NOT EXISTS (SELECT 1 FROM ${dk} d WHERE ${keyMatch(o.key, 'd', 'stg')} AND d.${pos} >= stg.${pos})` : '';
  out.push(
    `INSERT INTO ${mirror} (${cols(o.mirrorColumns)}) SELECT ${cols(o.mirrorColumns, 'stg.')} FROM ${stage} ` +
      `WHERE NOT EXISTS (SELECT 1 FROM ${mirror} m WHERE ${keyMatch(o.key, 'm', 'stg')})${dkGuard}${liveOnly}${trGuard}`,
  );
  if (o.deletedKeys) {
    out.push(`DELETE FROM ${dk} USING ${stage} WHERE ${keyMatch(o.key, dkRef, 'stg')} AND NOT stg.${del} AND ${dkRef}.${pos} < stg.${pos}`);
  }
  if (o.hard) {
    const dkCols = [...o.key, CdcColumn.POSITION, CdcColumn.DELETED_AT, CdcColumn.APPLIED_AT];
    out.push(`DELETE FROM ${mirror} USING ${stage} WHERE ${keyMatch(o.key, mirrorRef, 'stg')} AND stg.${del} AND ${mirrorRef}.${pos} < stg.${pos}${trGuard}`);
    out.push(
      `UPDATE ${dk} SET ${[CdcColumn.POSITION, CdcColumn.DELETED_AT, CdcColumn.APPLIED_AT].map((c) => `${q(c)} = stg.${q(c)}`).join(', ')} FROM ${stage} ` +
        `WHERE ${keyMatch(o.key, dkRef, 'stg')} AND stg.${del} AND ${dkRef}.${pos} < stg.${pos}`,
    );
    out.push(
      `INSERT INTO ${dk} (${cols(dkCols)}) SELECT ${cols(dkCols, 'stg.')} FROM ${stage} WHERE stg.${del} ` +
        `AND NOT EXISTS (SELECT 1 FROM ${dk} d WHERE ${keyMatch(o.key, 'd', 'stg')}) ` +
        `AND NOT EXISTS (SELECT 1 FROM ${mirror} m WHERE ${keyMatch(o.key, 'm', 'stg')} AND m.${pos} >= stg.${pos})${trGuard}`,
    );
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Append-first apply: the delta, the base+delta view and the merge (docs/warehouse-apply.md).

/**
 * The delta TABLE of the layout before one write per event (docs/warehouse-apply.md, "The layout
 * before one write per event"): shaped like the changelog, no key. Made only by tests of the
 * migration, which moves its rows into the changelog (`migrateDeltaTableSql`).
 */
export function createDeltaSql(t: WarehouseTable, columns: readonly SinkColumn[]): string {
  return `CREATE TABLE IF NOT EXISTS ${qualified(t.schema, t.delta)} (${defs(columns).join(', ')})`;
}

/** What the base+delta view and the merge guard against: the optional tables that exist. */
export interface OverlayGuards {
  /** The deleted-keys table exists: a delta row at or below a remembered deletion is hidden (invariant 7). */
  deletedKeys: boolean;
  /** The truncations table exists: a delta row at or below a truncate is hidden (docs/truncate.md). */
  truncations: boolean;
}

/** The rows of `from` (a relation shaped like the changelog: the delta view by default) ranked newest first per key. */
const rankedDelta = (t: WarehouseTable, key: readonly string[], select: string, where: string, from: string = qualified(t.schema, t.delta)): string =>
  `SELECT ${select}, row_number() OVER (PARTITION BY ${cols(key, 'd.')} ORDER BY d.${quoteIdent(CdcColumn.POSITION)} DESC, d.${quoteIdent(CdcColumn.APPLIED_AT)}) AS ${quoteIdent(RANK)} FROM ${from} d${where}`;

// Ties (the same event delivered twice before a merge) go to the first delivery, in the view and
// in the merge alike, as the changelog keeps the first delivery: the view does not change at a merge.

/** Column of the ranked delta subqueries: 1 for a key's newest row. */
const RANK = '_cdc_rank';

/**
 * The view consumers query, named after the table, over the merged base (the mirror) and the
 * unmerged delta. Per key the newest of (base row, delta rows) by position wins; a key whose
 * winner is a delete (a tombstone or a delta delete) is not shown:
 * 1. base rows that are live and that no delta row of the key with a higher position supersedes;
 * 2. the newest delta row of each key when it is not a delete, and the base (or the deleted-keys
 *    table) holds nothing for the key at an equal or higher position, and no truncate is at or
 *    above it.
 * Columns: the mirror's, in the mirror's physical order, minus the tombstone columns (as the view
 * over the mirror alone had), so an added column appends at the end. Only `UNION ALL`,
 * `NOT EXISTS` and `row_number()`: SQL PostgreSQL and Redshift both accept.
 */
export function createOverlayViewSql(t: WarehouseTable, mirrorColumns: readonly string[], key: readonly string[], guards: OverlayGuards): string {
  const visible = mirrorColumns.filter((c) => c !== CdcColumn.DELETED && c !== CdcColumn.DELETED_AT);
  const q = quoteIdent;
  const pos = q(CdcColumn.POSITION);
  const mirror = qualified(t.schema, t.mirror);
  const delta = qualified(t.schema, t.delta);
  const trGuard = guards.truncations ? ` WHERE NOT EXISTS (SELECT 1 FROM ${qualified(t.schema, t.truncations)} x WHERE x.${pos} >= d.${pos})` : '';
  const base =
    `SELECT ${cols(visible, 'm.')} FROM ${mirror} m WHERE NOT m.${q(CdcColumn.DELETED)} ` +
    `AND NOT EXISTS (SELECT 1 FROM ${delta} d WHERE ${keyMatch(key, 'd', 'm')} AND d.${pos} > m.${pos})`;
  const dkGuard = guards.deletedKeys
    ? ` AND NOT EXISTS (SELECT 1 FROM ${qualified(t.schema, t.deletedKeys)} k WHERE ${keyMatch(key, 'k', 'l')} AND k.${pos} >= l.${pos})`
    : '';
  const fresh =
    `SELECT ${cols(visible, 'l.')} FROM (${rankedDelta(t, key, `${cols(visible, 'd.')}, d.${q(CdcColumn.OP)}`, trGuard)}) l ` +
    `WHERE l.${q(RANK)} = 1 AND l.${q(CdcColumn.OP)} <> 'delete' ` +
    `AND NOT EXISTS (SELECT 1 FROM ${mirror} m WHERE ${keyMatch(key, 'm', 'l')} AND m.${pos} >= l.${pos})${dkGuard}`;
  return `CREATE OR REPLACE VIEW ${qualified(t.schema, t.view)} AS ${base} UNION ALL ${fresh}`;
}

/** Columns of `overlayAggregateSql`'s subqueries (the platform's prefix: no source column has it). */
const NEWEST = '_cdc_newest';
const PASSES = '_cdc_passes';
const SUPERSEDED = '_cdc_superseded';
const SHOWN = '_cdc_shown';
const SIGN = '_cdc_sign';

/** What `overlayAggregateSql` computes over the view's rows. */
export interface OverlayAggregateOptions {
  /**
   * An expression over the view's columns (unqualified names) whose exact sum is returned as `s`
   * (`COALESCE(SUM(expr), 0)`). @default none: only the row count `n`
   */
  sum?: string;
  /**
   * A condition on the KEY columns only (unqualified names), selecting the view's rows to
   * aggregate (a key range). It is applied to every term, also to the delta's keys before they are
   * grouped, so it may name nothing but key columns. @default every row
   */
  where?: string;
}

/**
 * The second form of the view's definition (`createOverlayViewSql`), for additive aggregates (a
 * row count, an exact sum): the view's rows are the base's live rows, minus those a newer delta
 * row of their key supersedes, plus the delta's visible rows, and those three sets nest (the
 * superseded rows are base live rows), so
 *
 *     agg(view) = agg(live base rows) − agg(live base rows superseded) + agg(visible delta rows)
 *
 * The first term is one plain scan of the base (no join at all). The other two come from the
 * delta's side, in one pass over it and one probe of the base (and of the deleted keys) per delta
 * key, by primary key: per key, the newest position over all its delta rows (a base row is
 * superseded exactly when some delta row of its key is newer, that is when the newest one is),
 * and its newest row among those no truncate is at or above, ranked as the view ranks them (the
 * row the view's second branch may show, under the same guards). That replaces an anti join of
 * every base row against the delta. One statement: PostgreSQL reads the terms in one snapshot,
 * so a merge or an append (each one transaction) is seen wholly or not at all, as by a reader of
 * the view. Returns one row: `n` (and `s` with `sum`). Exactness is proven against the view over
 * random base/delta/guard states (test/property/overlay-aggregate.property.test.ts); only SQL
 * PostgreSQL and Redshift both accept (window functions, `WITH`, `LEFT JOIN`, `UNION ALL`, `CASE`,
 * `CROSS JOIN` of one-row subqueries). The probes are index lookups only if the engine does not
 * hash-join the delta's keys with the whole base instead: the PostgreSQL reader turns hash and
 * merge joins off for the statement (lambda/adapters/reconcile-pg.ts).
 */
export function overlayAggregateSql(
  t: WarehouseTable,
  mirrorColumns: readonly string[],
  key: readonly string[],
  guards: OverlayGuards,
  o: OverlayAggregateOptions = {},
): string {
  const visible = mirrorColumns.filter((c) => c !== CdcColumn.DELETED && c !== CdcColumn.DELETED_AT);
  const q = quoteIdent;
  const pos = q(CdcColumn.POSITION);
  const mirror = qualified(t.schema, t.mirror);
  const delta = qualified(t.schema, t.delta);
  const where = o.where ? ` WHERE ${o.where}` : '';
  const live = `SELECT ${cols(visible, 'm.')} FROM ${mirror} m WHERE NOT m.${q(CdcColumn.DELETED)}`;
  // The view's truncation guard on a delta row, "no truncate at or above it", as a comparison with
  // the highest truncate (read once): the same for every position, NULL included.
  const passes = guards.truncations
    ? `CASE WHEN d.${pos} IS NULL OR (SELECT MAX(x.${pos}) FROM ${qualified(t.schema, t.truncations)} x) IS NULL OR (SELECT MAX(x.${pos}) FROM ${qualified(t.schema, t.truncations)} x) < d.${pos} THEN 1 ELSE 0 END`
    : '1';
  // One row per delta key, in one pass over the delta: its newest position over all its rows (what
  // supersedes a base row), and its newest row among those the guard lets through, ranked as the
  // view ranks them (position, then the first delivery), which is the row the view may show.
  const perKey =
    `SELECT * FROM (SELECT ${cols(visible, 'd.')}, d.${q(CdcColumn.OP)}, ${passes} AS ${q(PASSES)}, MAX(d.${pos}) OVER (PARTITION BY ${cols(key, 'd.')}) AS ${q(NEWEST)}, ` +
    `row_number() OVER (PARTITION BY ${cols(key, 'd.')} ORDER BY ${passes} DESC, d.${pos} DESC, d.${q(CdcColumn.APPLIED_AT)}) AS ${q(RANK)} FROM ${delta} d) y${where}`;
  // Each such key probes the base (and the deleted keys) once, by key.
  const dkJoin = guards.deletedKeys ? ` LEFT JOIN ${qualified(t.schema, t.deletedKeys)} k ON ${keyMatch(key, 'k', 'l')}` : '';
  const dkGuard = guards.deletedKeys ? ` AND NOT COALESCE(k.${pos} >= l.${pos}, false)` : '';
  const slot = (i: number): string => q(`_cdc_v${i}`);
  const probe =
    `SELECT ${visible.map((c, i) => `m.${q(c)} AS ${q(`_cdc_m${i}`)}, l.${q(c)} AS ${slot(i)}`).join(', ')}, ` +
    `CASE WHEN m.${pos} IS NOT NULL AND NOT m.${q(CdcColumn.DELETED)} AND m.${pos} < l.${q(NEWEST)} THEN 1 ELSE 0 END AS ${q(SUPERSEDED)}, ` +
    `CASE WHEN l.${q(PASSES)} = 1 AND l.${q(CdcColumn.OP)} <> 'delete' AND NOT COALESCE(m.${pos} >= l.${pos}, false)${dkGuard} THEN 1 ELSE 0 END AS ${q(SHOWN)} ` +
    `FROM (${perKey}) l LEFT JOIN ${mirror} m ON ${keyMatch(key, 'm', 'l')}${dkJoin} WHERE l.${q(RANK)} = 1`;
  // The superseded base rows (sign -1) and the delta's visible rows (+1), shaped like the view's.
  const signed =
    `SELECT -1 AS ${q(SIGN)}, ${visible.map((c, i) => `p.${q(`_cdc_m${i}`)} AS ${q(c)}`).join(', ')} FROM p WHERE p.${q(SUPERSEDED)} = 1 UNION ALL ` +
    `SELECT 1 AS ${q(SIGN)}, ${visible.map((c, i) => `p.${slot(i)} AS ${q(c)}`).join(', ')} FROM p WHERE p.${q(SHOWN)} = 1`;
  const sign = `r.${q(SIGN)}`;
  const base = `(SELECT COUNT(*) AS n${o.sum ? `, COALESCE(SUM(${o.sum}), 0) AS s` : ''} FROM (${live}) r${where}) b`;
  const delta2 =
    `(WITH p AS (${probe}) SELECT COALESCE(SUM(${sign}), 0) AS n` +
    `${o.sum ? `, COALESCE(SUM(CASE WHEN ${sign} > 0 THEN ${o.sum} END), 0) - COALESCE(SUM(CASE WHEN ${sign} < 0 THEN ${o.sum} END), 0) AS s` : ''} FROM (${signed}) r) c`;
  return `SELECT b.n + c.n AS n${o.sum ? ', b.s + c.s AS s' : ''} FROM ${base} CROSS JOIN ${delta2}`;
}

/** Session temp table one merge collapses the delta into (shaped like the mirror plus `_cdc_set`). */
export function mergeStageName(t: WarehouseTable, mirrorColumns: readonly string[]): string {
  return `cdc_merge_${fnv1a(JSON.stringify([t.schema, t.view, mirrorColumns]))}`;
}

/** The engines the warehouse SQL runs on. They differ only where a statement says so. */
export type WarehouseEngine = 'postgres' | 'redshift';

/**
 * Freezes the delta for a merge (or an apply that merges first): appends wait until COMMIT, the
 * view can still be read (PostgreSQL's EXCLUSIVE mode conflicts with the ROW EXCLUSIVE lock of
 * COPY and INSERT, not with SELECT's). Self-conflicting, so merges of one table are serialised.
 * Redshift has one lock mode; `LOCK` takes it.
 */
export function lockDeltaSql(t: WarehouseTable, engine: WarehouseEngine): string {
  return engine === 'redshift' ? `LOCK ${qualified(t.schema, t.changelog)}` : `LOCK TABLE ${qualified(t.schema, t.changelog)} IN EXCLUSIVE MODE`;
}

/**
 * Opens a deferred merge's transaction (`PgWarehouse.merge`; docs/warehouse-apply.md, "Merges do
 * not stop appends"). PostgreSQL: `REPEATABLE READ`, then `SHARE UPDATE EXCLUSIVE` on the delta.
 * That mode is self-conflicting (merges of one table are serialised) and conflicts with the
 * `EXCLUSIVE` lock of a full apply or a schema change, but not with the `ROW EXCLUSIVE` lock of an
 * append, so appends go on while a merge runs. Every statement of the merge reads the one
 * snapshot taken after the lock (its first query), so it merges, copies to the changelog and
 * deletes exactly the delta rows committed before it; rows appended meanwhile stay in the delta
 * for the next merge, and the view overlays them on the merged base as it would have on the old
 * one (the position guard decides either way). Redshift: `lockDeltaSql` (appends wait).
 */
export function beginMergeSql(t: WarehouseTable, engine: WarehouseEngine): string {
  return engine === 'redshift'
    ? `BEGIN; ${lockDeltaSql(t, engine)}`
    : `BEGIN ISOLATION LEVEL REPEATABLE READ; LOCK TABLE ${qualified(t.schema, t.changelog)} IN SHARE UPDATE EXCLUSIVE MODE`;
}

/**
 * PostgreSQL: the lock an append takes on the delta (ROW EXCLUSIVE, as its COPY would), taken
 * first by a fresh shadow's append (`TableBatch.freshShadow`) before it looks whether the shadow is
 * unfolded: appends do not wait for each other, and a fold (under `lockDeltaSql`, which conflicts
 * with it) waits for the appends that looked before it and is seen by those that look after.
 */
export function lockDeltaForAppendSql(t: WarehouseTable): string {
  return `LOCK TABLE ${qualified(t.schema, t.changelog)} IN ROW EXCLUSIVE MODE`;
}

export interface MergeSqlOptions extends OverlayGuards {
  key: readonly string[];
  /** Mirror columns in table order (key, data and platform columns). */
  mirrorColumns: readonly string[];
  /** Changelog columns (the delta has the same ones). */
  changelogColumns: readonly string[];
  /** Hard-delete mode. */
  hard: boolean;
  /** The changelog rows the merge absorbs (append order above the watermark, up to a committed bound), and the watermark's new place. */
  pending: PendingBounds;
  /**
   * `postgres`: the merge appends the delta's events to the changelog with `ON CONFLICT DO NOTHING`
   * on its primary key instead of an anti-join against the whole changelog, whose cost grows with
   * the table's history (docs/warehouse-apply.md, "What a merge costs"). @default the portable form
   */
  engine?: WarehouseEngine;
}

/**
 * The merge's writes: the newest delta row per key as a mirror row plus `_cdc_set` (0: every data
 * column; 1: a delete with no live delta row above the base, only the platform columns count). A
 * delete takes the values of the key's newest live delta row below it (`v`) that is above the
 * base (`aboveBase`; off when the base is known to be empty, where it holds for every row and
 * only the live rows of keys with a delete are ranked).
 * `deletes` false: only the keys whose newest row is not a delete, without `_cdc_set`.
 */
export function mergeWritesSelect(
  t: WarehouseTable,
  o: MergeSqlOptions,
  aboveBase: boolean,
  deletes = true,
  from: string = pendingRelationSql(t, o.pending),
): string {
  const q = quoteIdent;
  const pos = q(CdcColumn.POSITION);
  const op = q(CdcColumn.OP);
  const mirror = qualified(t.schema, t.mirror);
  const isDelete = `l.${op} = 'delete'`;
  const exprs = o.mirrorColumns.map((c) => {
    if (o.key.includes(c)) return `l.${q(c)}`;
    switch (c) {
      case CdcColumn.POSITION:
        return `l.${pos}`;
      case CdcColumn.DELETED:
        return `CASE WHEN ${isDelete} THEN true ELSE false END AS ${q(c)}`;
      case CdcColumn.DELETED_AT:
        return `CASE WHEN ${isDelete} THEN l.${q(CdcColumn.COMMIT_TS)} END AS ${q(c)}`;
      case CdcColumn.APPLIED_AT:
        return `l.${q(c)}`;
      default:
        return deletes ? `CASE WHEN ${isDelete} THEN v.${q(c)} ELSE l.${q(c)} END AS ${q(c)}` : `l.${q(c)}`;
    }
  });
  // Only the keys whose newest row is live (a hard-mode mirror keeps no tombstone): no values to borrow.
  if (!deletes) return `SELECT ${exprs.join(', ')} FROM (${rankedDelta(t, o.key, 'd.*', '', from)}) l WHERE l.${q(RANK)} = 1 AND NOT ${isDelete}`;
  // Only a live row below a delete of its key can lend its values (to the key's newest row, when that is a
  // delete), so only those are ranked and looked up in the base: in the benchmark's history 2,410 rows of
  // 54,166 (docs/performance-log.md, "36. Where a batch's time goes; a merge that ranks what it lends").
  // Into an empty base every row is above it.
  const lendsTo = ` AND EXISTS (SELECT 1 FROM ${from} x WHERE ${keyMatch(o.key, 'x', 'd')} AND x.${op} = 'delete' AND x.${pos} > d.${pos})`;
  const baseGuard = aboveBase ? `${lendsTo} AND NOT EXISTS (SELECT 1 FROM ${mirror} m WHERE ${keyMatch(o.key, 'm', 'd')} AND m.${pos} >= d.${pos})` : lendsTo;
  const live =
    `SELECT d.*, row_number() OVER (PARTITION BY ${cols(o.key, 'd.')} ORDER BY d.${pos} DESC, d.${q(CdcColumn.APPLIED_AT)}) AS ${q(RANK)} FROM ${from} d ` +
    `WHERE d.${op} <> 'delete'${baseGuard}`;
  return (
    `SELECT ${exprs.join(', ')}, CASE WHEN ${isDelete} AND v.${pos} IS NULL THEN 1 ELSE 0 END AS ${q(CdcColumn.SET)} ` +
    `FROM (${rankedDelta(t, o.key, 'd.*', '', from)}) l LEFT JOIN (${live}) v ON ${keyMatch(o.key, 'v', 'l')} AND v.${q(RANK)} = 1 AND ${isDelete} AND v.${pos} < l.${pos} ` +
    `WHERE l.${q(RANK)} = 1`
  );
}

/**
 * The merge: absorbs the changelog's rows between the watermark and a bound below which every row
 * is committed (`o.pending`) into the base, in a few set-based statements, in ONE transaction with
 * the watermark's move (docs/warehouse-apply.md, "The merge"), so the view shows the same rows
 * before and after it, and a merge that fails midway changes nothing:
 * 1. `CREATE TEMP TABLE <stage> AS` the newest pending row per key as a mirror write (`_cdc_set` 0:
 *    every data column; a delete is a tombstone with the values of the key's newest live pending
 *    row above the base, or, with none, `_cdc_set` 1: only the platform columns, so it keeps the
 *    base's values);
 * 2. the same guarded writes as a batch apply (`applyStageSql`: position guard per key, the
 *    deleted-keys and truncation guards, hard-mode removal and remembered deletions);
 * 3. the watermark moves to the bound (`moveWatermarkSql`) and the stage is dropped.
 * Nothing is written to the changelog: the append wrote each event there once.
 */
export function mergeSql(t: WarehouseTable, o: MergeSqlOptions): string[] {
  const q = quoteIdent;
  const stage = mergeStageName(t, o.mirrorColumns);
  const data = o.mirrorColumns.filter((c) => !o.key.includes(c) && !c.startsWith(RESERVED_PREFIX));
  const out = [
    `CREATE TEMP TABLE ${q(stage)} AS ${mergeWritesSelect(t, o, true)}`,
    ...applyStageSql(t, {
      stages: { events: stage, writes: stage },
      key: o.key,
      mirrorColumns: o.mirrorColumns,
      sets: [
        { id: 0, columns: data },
        { id: 1, columns: [] },
      ],
      hard: o.hard,
      deletedKeys: o.deletedKeys,
      truncations: o.truncations,
      oneUpdate: true,
    }),
  ];
  out.push(moveWatermarkSql(t, o.pending.to));
  out.push(`DROP TABLE ${q(stage)}`);
  return out;
}

/**
 * Whether the base holds anything the merge reads (one row per table that is not empty): the
 * mirror, the changelog and, when they exist, the deleted keys and the truncations. No row back
 * means the base is empty and `mergeIntoEmptySql` leaves what `mergeSql` would. Portable: `LIMIT`
 * in a derived table, `UNION ALL`.
 */
export function baseRowsSql(t: WarehouseTable, guards: OverlayGuards): string {
  return nonEmptyTablesSql(t, [t.mirror, ...(guards.deletedKeys ? [t.deletedKeys] : []), ...(guards.truncations ? [t.truncations] : [])]);
}

/** One row (`_cdc_kind` = the table's name) per table of `names` (tables of `t`'s schema) that holds any row. Portable: `LIMIT` in a derived table, `UNION ALL`. */
export function nonEmptyTablesSql(t: WarehouseTable, names: readonly string[]): string {
  const one = (name: string): string =>
    `SELECT '${name}' AS ${quoteIdent(CdcColumn.KIND)} FROM (SELECT 1 AS x FROM ${qualified(t.schema, name)} LIMIT 1) ${quoteIdent(`b_${name}`)}`;
  return names.map(one).join(' UNION ALL ');
}

/**
 * The merge into an EMPTY base (a rebuild's fresh shadow, docs/rebuild.md): what `mergeSql` leaves
 * when mirror, changelog, deleted keys and truncations hold no row (`baseRowsSql` returns none,
 * checked under the delta's lock), in fewer, cheaper statements. With nothing stored, every guard
 * of the general merge holds for every row (no stored position, no remembered deletion, no
 * truncate, no changelog row to skip) and its `UPDATE`s and `DELETE`s find nothing, so:
 * 1. the mirror gets the newest delta row per key as the general merge's stage would hold it (a
 *    delete a tombstone with the values of the key's newest live delta row below it, or NULLs;
 *    hard mode: only the keys whose newest row is live);
 * 2. hard mode: the deleted keys get the keys whose newest row is a delete (position, commit time,
 *    applied-at);
 * 3. the changelog gets the delta's distinct events (by position + key, the first delivery);
 * 4. the delta is emptied.
 * No temp table, no anti-joins. Same portable subset as `mergeSql` (`row_number()`, no
 * `DISTINCT ON`). The randomized test test/adapters/merge-empty-base.test.ts compares it with
 * `mergeSql` over random deltas in both delete modes.
 */
export function mergeIntoEmptySql(t: WarehouseTable, o: MergeSqlOptions): string[] {
  return [...foldIntoEmptySql(t, o), moveWatermarkSql(t, o.pending.to)];
}

/** `mergeIntoEmptySql` without the watermark's move: the changelog rows of `o.pending` into the empty base. */
export function foldIntoEmptySql(t: WarehouseTable, o: MergeSqlOptions): string[] {
  return intoEmptyBaseSql(t, o, pendingRelationSql(t, o.pending));
}

/** Steps 1 and 2 of `mergeIntoEmptySql`: the newest row per key of `from` (a relation shaped like the changelog) into the empty mirror, and in hard mode the deleted keys. */
function intoEmptyBaseSql(t: WarehouseTable, o: MergeSqlOptions, from: string): string[] {
  const q = quoteIdent;
  const pos = q(CdcColumn.POSITION);
  const out = [
    `INSERT INTO ${qualified(t.schema, t.mirror)} (${cols(o.mirrorColumns)}) SELECT ${cols(o.mirrorColumns, 'w.')} FROM (${mergeWritesSelect(t, o, false, !o.hard, from)}) w`,
  ];
  if (o.hard) {
    const dkCols = [...o.key, CdcColumn.POSITION, CdcColumn.DELETED_AT, CdcColumn.APPLIED_AT];
    out.push(
      `INSERT INTO ${qualified(t.schema, t.deletedKeys)} (${cols(dkCols)}) SELECT ${cols(o.key, 'l.')}, l.${pos}, l.${q(CdcColumn.COMMIT_TS)}, l.${q(CdcColumn.APPLIED_AT)} ` +
        `FROM (${rankedDelta(t, o.key, 'd.*', '', from)}) l WHERE l.${q(RANK)} = 1 AND l.${q(CdcColumn.OP)} = 'delete'`,
    );
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// CSV for Redshift's load path (lambda/core/warehouse/redshift-load.ts; docs/warehouse-apply.md, "Redshift: the load").

/** A value as a CSV field for Redshift's `COPY … CSV` (an unquoted empty field is NULL, `""` an empty string; see `copyManifestSql` in lambda/core/warehouse/redshift-sql.ts). */
export function csvField(v: string | null): string {
  if (v === null) return '';
  return `"${v.replace(/"/g, '""')}"`;
}

/** The CSV body of rows (one line per row; quoted fields may hold newlines, which CSV mode allows). */
export function csvBody(rows: readonly (readonly (string | null)[])[]): string {
  let out = '';
  for (const r of rows) out += `${r.map(csvField).join(',')}\n`;
  return out;
}
