/**
 * What a table's warehouse objects look like (`SinkShape`, read from the catalog) and the DDL that
 * brings them to the shape a batch needs (`planDdl`), for `PgWarehouse` (lambda/adapters/warehouse-pg.ts).
 */
import type pg from 'pg';
import { CdcError } from '../core/shared/errors.ts';
import { quoteIdent } from '../core/shared/identifiers.ts';
import type { WarehouseDialect } from '../core/warehouse/dialect.ts';
import type { TableBatch } from '../core/warehouse/warehouse-port.ts';
import {
  CdcColumn,
  CHANGELOG_CDC_COLUMNS,
  addColumnSql,
  catalogSql,
  catalogType,
  commentPolledSql,
  createAppendOrderIndexSql,
  createChangelogSql,
  createDeletedKeysSql,
  createHandoverSql,
  createMirrorSql,
  createOverlayViewSql,
  createPendingViewSql,
  createSchemaSql,
  createTruncationsSql,
  createWatermarkSql,
  isSinkTextType,
  mirrorLayout,
  qualified,
  sinkType,
  sinkTypeRefusal,
  TEXT_TYPE,
  type CatalogColumn,
  type SinkColumn,
  type WarehouseEngine,
  type WarehouseTable,
} from '../core/warehouse/warehouse-sql.ts';

/** A sink column already has a type that the table's schema version cannot be written into without a type change (which Redshift cannot do). */
export class SinkTypeConflictError extends CdcError {
  constructor(
    readonly table: string,
    readonly column: string,
    readonly sinkColumnType: string,
    readonly wantedType: string,
    code = 'SINK_TYPE_CONFLICT',
    message?: string,
  ) {
    super(
      code,
      message ??
        `column ${column} of ${table} is ${sinkColumnType} in the warehouse but schema version needs ${wantedType}; ` +
          'change the warehouse column (or rebuild the table into a shadow and swap), then release the held table',
    );
  }
}

/**
 * A column whose source type the warehouse cannot carry faithfully (`sinkTypeRefusal`, e.g.
 * `numeric(50,2)` beyond Redshift's 38 digits): refused when the sink table is made, never
 * coerced. A kind of type conflict, so the applier holds the table the same way.
 */
export class UnsupportedSinkTypeError extends SinkTypeConflictError {
  constructor(table: string, column: string, sourceType: string, reason: string) {
    super(
      table,
      column,
      'none',
      sourceType,
      'SINK_TYPE_UNSUPPORTED',
      `column ${column} of ${table} has source type ${sourceType}, which the warehouse cannot carry faithfully (${reason}); ` +
        'refused rather than coerced: exclude the column, or change its source type to one the warehouse carries, then release the held table',
    );
  }
}

/** What the sink's tables look like (columns in table order). */
export interface SinkShape {
  mirror: string[];
  mirrorTypes: Map<string, string>;
  changelog: string[];
  /** Columns of the delta view (empty: none yet; with `seq` false, a delta TABLE of the layout before one write per event). */
  delta: string[];
  /** The changelog has its append order (`_cdc_seq`): the layout of one write per event. */
  seq: boolean;
  /** The watermark table exists. */
  watermark: boolean;
  deletedKeys: boolean;
  truncations: boolean;
  handover: boolean;
  view: boolean;
}

export function sameShape(a: SinkShape, b: SinkShape): boolean {
  const eq = (x: readonly string[], y: readonly string[]) => x.length === y.length && x.every((v, i) => v === y[i]);
  return (
    eq(a.mirror, b.mirror) &&
    eq(a.changelog, b.changelog) &&
    eq(a.delta, b.delta) &&
    a.seq === b.seq &&
    a.watermark === b.watermark &&
    a.deletedKeys === b.deletedKeys &&
    a.truncations === b.truncations &&
    a.handover === b.handover
  );
}

/**
 * The warehouse column type of a source column: the dialect's (PostgreSQL: native types,
 * lambda/core/warehouse/postgres-dialect.ts), or without one the portable mapping (`sinkType`, which
 * refuses what Redshift cannot carry). A key column is never `json` (no equality): its text.
 */
export function columnTypeOf(
  dialect: WarehouseDialect | null,
  engine: WarehouseEngine,
  table: string,
  name: string,
  sourceType: string | null,
  isKey: boolean,
): string {
  if (dialect === null) {
    const refusal = sinkTypeRefusal(sourceType);
    if (refusal !== null) throw new UnsupportedSinkTypeError(table, name, sourceType!, refusal);
    return sinkType(sourceType, engine);
  }
  const choice = dialect.columnType(sourceType);
  if ('refused' in choice) throw new UnsupportedSinkTypeError(table, name, sourceType ?? 'unknown', choice.refused);
  return isKey && choice.type === 'json' ? (dialect.columnType(null) as { type: string }).type : choice.type;
}

/** Key and data columns the batch needs: union over its schema versions, type from the newest version that has the column. */
export function wantedColumns(batch: TableBatch, engine: WarehouseEngine, dialect: WarehouseDialect | null): { key: SinkColumn[]; data: SinkColumn[] } {
  const versions = [...batch.schemas.values()].sort((a, b) => a.version - b.version);
  const newest = versions[versions.length - 1];
  if (!newest) throw new CdcError('INVALID_ARGUMENT', `no schema version for ${batch.source}/${batch.table}`);
  const types = new Map<string, string>();
  const order: string[] = [];
  const where = `${batch.source}/${batch.table}`;
  for (const v of versions) {
    for (const c of v.columns) {
      if (!types.has(c.name)) order.push(c.name);
      types.set(c.name, columnTypeOf(dialect, engine, where, c.name, c.type, newest.key.includes(c.name)));
    }
  }
  const key = newest.key.map((k) => ({ name: k, type: types.get(k) ?? columnTypeOf(dialect, engine, where, k, null, true) }));
  const data = order.filter((c) => !newest.key.includes(c)).map((c) => ({ name: c, type: types.get(c)! }));
  return { key, data };
}

export async function readShape(client: pg.ClientBase, t: WarehouseTable): Promise<SinkShape> {
  const q = catalogSql(t);
  const res = await client.query<CatalogColumn>(q.text, q.values);
  return shapeOf(t, res.rows);
}

export function shapeOf(t: WarehouseTable, rows: readonly CatalogColumn[]): SinkShape {
  const shape: SinkShape = {
    mirror: [],
    mirrorTypes: new Map(),
    changelog: [],
    delta: [],
    seq: false,
    watermark: false,
    deletedKeys: false,
    truncations: false,
    handover: false,
    view: false,
  };
  for (const r of rows) {
    if (r.table_name === t.delta) shape.delta.push(r.column_name);
    else if (r.table_name === t.changelog && r.column_name === CdcColumn.SEQ) shape.seq = true;
    else if (r.table_name === t.watermark) shape.watermark = true;
    else if (r.table_name === t.mirror) {
      shape.mirror.push(r.column_name);
      shape.mirrorTypes.set(r.column_name, catalogType(r));
    } else if (r.table_name === t.changelog) shape.changelog.push(r.column_name);
    else if (r.table_name === t.deletedKeys) shape.deletedKeys = true;
    else if (r.table_name === t.truncations) shape.truncations = true;
    else if (r.table_name === t.handover) shape.handover = true;
    else if (r.table_name === t.view) shape.view = true;
  }
  return shape;
}

/** What a batch needs of its table's objects besides its columns: the guards of its delete mode and events, the polled mark. */
export interface DdlWants {
  hard: boolean;
  truncate: boolean;
  handover: boolean;
  polled?: boolean;
}

/** DDL statements and the shape after them (`planDdl`). */
export interface DdlPlan {
  statements: string[];
  shape: SinkShape;
  /** It adds a column to an existing mirror or changelog (a schema change: the delta is merged first). */
  addsColumns: boolean;
}

/**
 * The DDL that brings the sink from `known` to the wanted shape, and the shape after it. Throws
 * SinkTypeConflictError. Run only from a `known` read in the DDL's own transaction under the
 * changelog's lock (docs/warehouse-apply.md, "Objects made from the catalog they run against"): its
 * `CREATE … IF NOT EXISTS` does nothing for an object another applier made since, and its views
 * name the columns `known` lists.
 */
export function planDdl(
  t: WarehouseTable,
  known: SinkShape,
  key: SinkColumn[],
  data: SinkColumn[],
  wants: DdlWants,
  accepts: (have: string, want: string) => boolean = (have, want) => have === want || isSinkTextType(have),
  engine: WarehouseEngine = 'postgres',
): DdlPlan {
  const { hard, truncate } = wants;
  const statements: string[] = [];
  const shape: SinkShape = {
    ...known,
    mirror: [...known.mirror],
    mirrorTypes: new Map(known.mirrorTypes),
    changelog: [...known.changelog],
    delta: [...known.delta],
  };
  if (shape.changelog.length > 0 && !shape.seq)
    throw new CdcError('INVALID_STATE', `the changelog of ${t.tableId} has no append order: its layout was not migrated (migrateDeltaTable)`);
  let addsColumns = false;
  const creating =
    shape.mirror.length === 0 ||
    shape.changelog.length === 0 ||
    !shape.watermark ||
    (hard && !shape.deletedKeys) ||
    (truncate && !shape.truncations) ||
    (wants.handover && !shape.handover);
  if (creating) statements.push(createSchemaSql(t));
  let pendingViewNeeded = shape.delta.length === 0;
  if (shape.changelog.length === 0) {
    statements.push(createChangelogSql(t, key, data, engine));
    if (engine === 'postgres') statements.push(createAppendOrderIndexSql(t));
    shape.changelog = [...CHANGELOG_NAMES, ...key.map((c) => c.name), ...data.map((c) => c.name)];
    shape.seq = true;
    pendingViewNeeded = true;
  }
  if (!shape.watermark) {
    statements.push(...createWatermarkSql(t));
    shape.watermark = true;
  }
  let viewNeeded = !shape.view;
  if (shape.mirror.length === 0) {
    statements.push(createMirrorSql(t, key, data, engine));
    // A polled table's deletes are not observable: the sink says so on the table (docs/polling.md).
    if (wants.polled) statements.push(commentPolledSql(t, 'mirror'));
    shape.mirror = mirrorLayout(key, data).map((c) => c.name);
    for (const c of [...key, ...data]) shape.mirrorTypes.set(c.name, c.type);
    viewNeeded = true;
  }
  for (const k of key) {
    if (!shape.mirror.includes(k.name)) throw new SinkTypeConflictError(t.tableId, k.name, 'missing', `${k.type} (primary-key column)`);
  }
  for (const c of [...key, ...data]) {
    const have = shape.mirrorTypes.get(c.name);
    // A text column takes every value unchanged: one made while the column's type was unknown
    // keeps being written as text when the type is learned (a compatible change; the values were
    // already text). Any other difference would round or refuse values: held (docs/schema-drift.md).
    if (have !== undefined && !accepts(have, c.type)) throw new SinkTypeConflictError(t.tableId, c.name, have, c.type);
  }
  // PostgreSQL: a column an earlier version made as `varchar(65535)` (Redshift's text) refuses a value
  // over 64 KB that PostgreSQL's `text` takes; it is widened to `text` (no rewrite: the two are
  // binary-compatible), with the views that read it made again (docs/warehouse-apply.md, "Dialects").
  const narrow = engine === 'postgres' && shape.seq ? [...key, ...data].filter((c) => shape.mirrorTypes.get(c.name) === TEXT_TYPE) : [];
  if (narrow.length > 0) {
    statements.push(`DROP VIEW IF EXISTS ${qualified(t.schema, t.view)}`, `DROP VIEW IF EXISTS ${qualified(t.schema, t.delta)}`);
    for (const c of narrow) {
      statements.push(`ALTER TABLE ${qualified(t.schema, t.mirror)} ALTER COLUMN ${quoteIdent(c.name)} TYPE text`);
      if (shape.changelog.includes(c.name)) statements.push(`ALTER TABLE ${qualified(t.schema, t.changelog)} ALTER COLUMN ${quoteIdent(c.name)} TYPE text`);
      if (shape.deletedKeys && key.some((k) => k.name === c.name))
        statements.push(`ALTER TABLE ${qualified(t.schema, t.deletedKeys)} ALTER COLUMN ${quoteIdent(c.name)} TYPE text`);
      shape.mirrorTypes.set(c.name, 'text');
    }
    pendingViewNeeded = true;
    viewNeeded = true;
  }
  for (const c of data) {
    if (!shape.mirror.includes(c.name)) {
      statements.push(addColumnSql(t.schema, t.mirror, c));
      shape.mirror.push(c.name);
      shape.mirrorTypes.set(c.name, c.type);
      viewNeeded = true;
      addsColumns = true;
    }
    if (!shape.changelog.includes(c.name)) {
      statements.push(addColumnSql(t.schema, t.changelog, c));
      shape.changelog.push(c.name);
      addsColumns = true;
      pendingViewNeeded = true;
    }
  }
  if (pendingViewNeeded || shape.delta.length !== shape.changelog.length) {
    statements.push(createPendingViewSql(t, shape.changelog));
    shape.delta = [...shape.changelog];
    viewNeeded = true;
  }
  if (hard && !shape.deletedKeys) {
    statements.push(createDeletedKeysSql(t, key));
    shape.deletedKeys = true;
    viewNeeded = true;
  }
  if (truncate && !shape.truncations) {
    statements.push(createTruncationsSql(t));
    shape.truncations = true;
    viewNeeded = true;
  }
  if (wants.handover && !shape.handover) {
    statements.push(createHandoverSql(t));
    shape.handover = true;
  }
  if (viewNeeded) {
    statements.push(
      createOverlayViewSql(
        t,
        shape.mirror,
        key.map((k) => k.name),
        { deletedKeys: shape.deletedKeys, truncations: shape.truncations },
      ),
    );
    // Set again with every view it (re)creates: a table created before it was polled gets it then too.
    if (wants.polled) statements.push(commentPolledSql(t, 'view'));
    shape.view = true;
  }
  return { statements, shape, addsColumns };
}

const CHANGELOG_NAMES = CHANGELOG_CDC_COLUMNS.map((c) => c.name);
