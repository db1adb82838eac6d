/**
 * The Redshift dialect's statements (docs/warehouse-apply.md, "Redshift"). Pure: names and SQL text.
 *
 * Layout per captured table (names from `warehouseTable`, folded to lower case):
 * - `_cdc_changelog_<t>`: the append target. Every delivered event, one row each, loaded by
 *   `COPY … FROM 's3://…/manifest' MANIFEST` (`copyManifestSql`); `_cdc_load` is the load that
 *   brought it (from the loads ledger). Redelivered events are rows again; the merge and the view
 *   rank them away.
 * - `_cdc_mirror_<t>`: the base, one row per key (soft mode keeps tombstones).
 * - `_cdc_deleted_keys_<t>` (hard mode): the position of each key's merged delete, so a late
 *   older event never resurrects it.
 * - `_cdc_truncations_<t>`: one row per loaded truncate (`insertTruncationsSql`, in the load's
 *   transaction); nothing at or below the newest shows or is merged (docs/truncate.md, "On Redshift").
 * - `_cdc_watermarks` (per schema): per table, the last load the base has absorbed.
 * - view `<t>`: the base overlaid with the newest changelog row per key above the watermark,
 *   deletes hidden, rows at or below the newest truncate hidden (`createViewSql`).
 * And one loads ledger per warehouse (`createLedgerSql`): one row per committed load, written in
 * the load's own transaction, so a load retried after a crash between its COMMIT and the
 * checkpoint is recognised and not loaded twice.
 *
 * The merge (`mergeSql`) is `CREATE TEMP TABLE` of the newest changelog row per key above the
 * watermark and above the base (deduplicated: one row per key, so each target row matches at
 * most one source row, as Redshift's MERGE requires), then one `MERGE` (soft mode), or the
 * hard-mode deletes and one `MERGE` of the live rows, then the watermark's move.
 *
 * Redshift-only constraints kept here: MERGE with one WHEN MATCHED and one WHEN NOT MATCHED
 * clause and no extra conditions, its source a table (the stage); no `ON CONFLICT`, no
 * `RETURNING`, no `DISTINCT ON`, no `::` casts, no array or jsonb operators, no `COPY FROM
 * STDIN`. Identifiers are folded to lower case here, as Redshift folds them (quoted or not, unless
 * `enable_case_sensitive_identifier` is on), and two names of one table that fold together are
 * refused (`FoldedColumnError`).
 */
import { CdcError, UnsafeIdentifierError } from '../shared/errors.ts';
import { quoteIdent } from '../shared/identifiers.ts';
import { UNHELD_COLUMN, type RedshiftColumn } from './redshift-types.ts';
import { CdcColumn, CHANGELOG_CDC_COLUMNS, type WarehouseTable } from './warehouse-sql.ts';

/** Two columns of one table that Redshift would fold into one name. */
export class FoldedColumnError extends CdcError {
  constructor(table: string, a: string, b: string) {
    super(
      'NAME_FOLDS',
      `${table}: columns ${a} and ${b} are one column in Redshift, which folds names to lower case; rename one at the source (docs/onboarding.md, "Names")`,
    );
  }
}

/** A name as Redshift stores it: lower case, quoted. */
export function rsIdent(name: string): string {
  return quoteIdent(name.toLowerCase());
}

/** `"schema"."name"`, folded. */
export function rsQualified(schema: string, name: string): string {
  return `${rsIdent(schema)}.${rsIdent(name)}`;
}

/** Throws `FoldedColumnError` when two of `names` fold into one. */
export function assertFoldsApart(table: string, names: readonly string[]): void {
  const seen = new Map<string, string>();
  for (const n of names) {
    const f = n.toLowerCase();
    const other = seen.get(f);
    if (other !== undefined) throw new FoldedColumnError(table, other, n);
    seen.set(f, n);
  }
}

/** The load that brought a changelog row (the ledger's `load_id`). */
export const LOAD_COLUMN = '_cdc_load';
/** Stage and view only: a row's rank among its key's rows. */
/** The rank column of the statements' `row_number()` picks. */
export const RANK = '_cdc_rank';
export const WATERMARKS_TABLE = '_cdc_watermarks';
export const LEDGER_TABLE = '_cdc_loads';

/** One captured table in the Redshift dialect: its objects, key and data columns. */
export interface RedshiftTable {
  t: WarehouseTable;
  key: readonly RedshiftColumn[];
  data: readonly RedshiftColumn[];
  hard: boolean;
  /** Read from the cluster only (`existingTable`): a table made before truncates were loaded, without `_cdc_truncations_<t>`; evolving makes it. */
  lacksTruncations?: boolean;
  /** Read from the cluster only: a table made before key changes were held, without `_cdc_handover_<t>`; evolving makes it. */
  lacksHandover?: boolean;
}

/** One truncate of a table as the loader writes it into `_cdc_truncations_<t>` (docs/truncate.md, "In the warehouse"). */
export interface TruncationRow {
  position: string;
  commitTs: string;
  txId: string | null;
  schemaVersion: number;
  appliedAt: string;
}

const list = (names: readonly string[], prefix = ''): string => names.map((n) => prefix + rsIdent(n)).join(', ');
const keyMatch = (key: readonly RedshiftColumn[], l: string, r: string): string =>
  key.map((k) => `${l}.${rsIdent(k.name)} = ${r}.${rsIdent(k.name)}`).join(' AND ');
const defs = (cs: readonly RedshiftColumn[], notNull = false): string[] => cs.map((c) => `${rsIdent(c.name)} ${c.type}${notNull ? ' NOT NULL' : ''}`);

/** The changelog's platform columns, in table order (then the key, then the data). */
export const RS_CHANGELOG_CDC: readonly { name: string; type: string }[] = [
  { name: LOAD_COLUMN, type: 'bigint NOT NULL' },
  // The event's own columns as every dialect's changelog has them; Redshift keeps the unheld columns instead of the missing ones.
  ...CHANGELOG_CDC_COLUMNS.filter((c) => c.name !== CdcColumn.MISSING && c.name !== CdcColumn.APPLIED_AT),
  { name: UNHELD_COLUMN, type: 'varchar(65535)' },
  { name: CdcColumn.APPLIED_AT, type: 'timestamptz NOT NULL' },
];

/** The changelog's columns in table order (the staged objects' field order). */
export function changelogColumns(r: RedshiftTable): string[] {
  return [...RS_CHANGELOG_CDC.map((c) => c.name), ...r.key.map((c) => c.name), ...r.data.map((c) => c.name)];
}

/** The mirror's columns in table order. */
export function mirrorColumns(r: RedshiftTable): string[] {
  return [
    CdcColumn.DELETED,
    ...r.key.map((c) => c.name),
    ...r.data.map((c) => c.name),
    CdcColumn.POSITION,
    CdcColumn.DELETED_AT,
    UNHELD_COLUMN,
    CdcColumn.APPLIED_AT,
  ];
}

/** The view's columns: key, data, position, marker, applied-at. */
export function viewColumns(r: RedshiftTable): string[] {
  return [...r.key.map((c) => c.name), ...r.data.map((c) => c.name), CdcColumn.POSITION, UNHELD_COLUMN, CdcColumn.APPLIED_AT];
}

export function createSchemaSql(schema: string): string {
  return `CREATE SCHEMA IF NOT EXISTS ${rsIdent(schema)}`;
}

/** The loads ledger: one row per committed load (`load_id` ascending in commit order: loads commit one at a time). */
export function createLedgerSql(schema: string): string {
  return (
    `CREATE TABLE IF NOT EXISTS ${rsQualified(schema, LEDGER_TABLE)} (load_id bigint NOT NULL, load_key varchar(1024) NOT NULL, ` +
    `objects integer NOT NULL, events bigint NOT NULL, loaded_at timestamptz NOT NULL, PRIMARY KEY (load_id))`
  );
}

/** The next load id (in the load's transaction; loads are serialised by the loader, and by Redshift's serializable isolation). */
export function nextLoadIdSql(schema: string): string {
  return `SELECT COALESCE(MAX(load_id), 0) + 1 AS load_id FROM ${rsQualified(schema, LEDGER_TABLE)}`;
}

/** Whether a load is committed already (`load_key` is the load's manifest key). */
export function loadDoneSql(schema: string, loadKey: string): string {
  return `SELECT load_id FROM ${rsQualified(schema, LEDGER_TABLE)} WHERE load_key = ${rsLiteral(loadKey)}`;
}

export function recordLoadSql(schema: string, o: { loadId: number; loadKey: string; objects: number; events: number; at: Date }): string {
  return (
    `INSERT INTO ${rsQualified(schema, LEDGER_TABLE)} (load_id, load_key, objects, events, loaded_at) VALUES ` +
    `(${rsInt(o.loadId)}, ${rsLiteral(o.loadKey)}, ${rsInt(o.objects)}, ${rsInt(o.events)}, CAST(${rsLiteral(o.at.toISOString())} AS timestamptz))`
  );
}

/** The highest committed load (the merge's cut). */
export function lastLoadSql(schema: string): string {
  return `SELECT COALESCE(MAX(load_id), 0) AS load_id FROM ${rsQualified(schema, LEDGER_TABLE)}`;
}

/**
 * The columns the cluster has for `r`'s changelog, base and (hard mode) remembered deletions, from `SVV_COLUMNS` (Redshift's catalog view of
 * table columns; `character_maximum_length` of a VARCHAR is its declared size, in bytes): what a process that
 * first sees a table evolves from (docs/warehouse-apply.md, "Redshift: schema changes"). No rows: no table.
 */
export function existingColumnsSql(r: RedshiftTable): string {
  const { t } = r;
  return (
    `SELECT table_name, column_name, data_type, character_maximum_length, numeric_precision, numeric_scale FROM svv_columns ` +
    `WHERE table_schema = ${rsLiteral(t.schema.toLowerCase())} AND table_name IN (${[t.changelog, t.mirror, t.deletedKeys, t.truncations, t.handover].map((n) => rsLiteral(n.toLowerCase())).join(', ')}) ` +
    `ORDER BY table_name, ordinal_position`
  );
}

/** The tables of one captured table, its watermark row and its view (idempotent, in one transaction). */
export function createTableSql(r: RedshiftTable): string[] {
  const { t } = r;
  assertFoldsApart(
    t.tableId,
    [...r.key, ...r.data].map((c) => c.name),
  );
  const keyNames = list(r.key.map((c) => c.name));
  const out = [
    createSchemaSql(t.schema),
    `CREATE TABLE IF NOT EXISTS ${rsQualified(t.schema, t.changelog)} (${[...RS_CHANGELOG_CDC.map((c) => `${rsIdent(c.name)} ${c.type}`), ...defs(r.key, true), ...defs(r.data)].join(', ')})`,
    `CREATE TABLE IF NOT EXISTS ${rsQualified(t.schema, t.mirror)} (${[
      `${rsIdent(CdcColumn.DELETED)} boolean NOT NULL`,
      ...defs(r.key, true),
      ...defs(r.data),
      `${rsIdent(CdcColumn.POSITION)} varchar(24) NOT NULL`,
      `${rsIdent(CdcColumn.DELETED_AT)} timestamptz`,
      `${rsIdent(UNHELD_COLUMN)} varchar(65535)`,
      `${rsIdent(CdcColumn.APPLIED_AT)} timestamptz NOT NULL`,
      `PRIMARY KEY (${keyNames})`,
    ].join(', ')})`,
    `CREATE TABLE IF NOT EXISTS ${rsQualified(t.schema, WATERMARKS_TABLE)} (table_name varchar(128) NOT NULL, merged_load bigint NOT NULL, PRIMARY KEY (table_name))`,
    `INSERT INTO ${rsQualified(t.schema, WATERMARKS_TABLE)} (table_name, merged_load) SELECT ${rsLiteral(t.view.toLowerCase())}, 0 ` +
      `WHERE NOT EXISTS (SELECT 1 FROM ${rsQualified(t.schema, WATERMARKS_TABLE)} w WHERE w.table_name = ${rsLiteral(t.view.toLowerCase())})`,
  ];
  if (r.hard) out.push(createDeletedKeysSql(r));
  out.push(createTruncationsSql(r));
  out.push(createHandoverSql(r));
  out.push(createViewSql(r));
  return out;
}

/** The held events' own columns in `_cdc_handover_<t>`: the columns they lack, and a key change's old key (a JSON list of its staged texts). */
export const HANDOVER_MISSING = '_cdc_missing';
export const HANDOVER_BEFORE = '_cdc_before';

/**
 * `_cdc_handover_<t>` (idempotent): the events held until the old key of a primary-key change is known, each as its
 * changelog row without a load id, its absent columns NULL, and what it lacks (docs/primary-key-changes.md, "On Redshift").
 */
export function createHandoverSql(r: RedshiftTable): string {
  const cdc = RS_CHANGELOG_CDC.filter((c) => c.name !== LOAD_COLUMN).map((c) => `${rsIdent(c.name)} ${c.type}`);
  const own = [HANDOVER_MISSING, HANDOVER_BEFORE].map((n) => `${rsIdent(n)} varchar(65535)`);
  return `CREATE TABLE IF NOT EXISTS ${rsQualified(r.t.schema, r.t.handover)} (${[...cdc, ...defs(r.key, true), ...defs(r.data), ...own].join(', ')})`;
}

/** The truncations' columns, in table order: the load that brought the truncate, then the event's own. */
const TRUNCATION_COLUMNS: readonly { name: string; type: string }[] = [
  { name: LOAD_COLUMN, type: 'bigint NOT NULL' },
  { name: CdcColumn.POSITION, type: 'varchar(24) NOT NULL' },
  { name: CdcColumn.COMMIT_TS, type: 'timestamptz NOT NULL' },
  { name: CdcColumn.TX_ID, type: 'varchar(256)' },
  { name: CdcColumn.SCHEMA_VERSION, type: 'integer NOT NULL' },
  { name: CdcColumn.APPLIED_AT, type: 'timestamptz NOT NULL' },
];

/**
 * The table-level guard `_cdc_truncations_<t>` (idempotent): one row per loaded truncate, a redelivery a row
 * again. The view hides every row at or below the newest; the merge empties the base at it (docs/truncate.md).
 */
export function createTruncationsSql(r: RedshiftTable): string {
  const { t } = r;
  return `CREATE TABLE IF NOT EXISTS ${rsQualified(t.schema, t.truncations)} (${TRUNCATION_COLUMNS.map((c) => `${rsIdent(c.name)} ${c.type}`).join(', ')})`;
}

/** The truncates of one load, written in its transaction by a plain INSERT (a few rows: no object to stage). */
export function insertTruncationsSql(r: RedshiftTable, loadId: number, rows: readonly TruncationRow[]): string {
  if (rows.length === 0) throw new RangeError('insertTruncationsSql needs at least one truncate');
  const ts = (iso: string): string => `CAST(${rsLiteral(iso)} AS timestamptz)`;
  const values = rows.map(
    (x) =>
      `(${rsInt(loadId)}, ${rsLiteral(x.position)}, ${ts(x.commitTs)}, ${x.txId === null ? 'NULL' : rsText(x.txId)}, ${rsInt(x.schemaVersion)}, ${ts(x.appliedAt)})`,
  );
  return `INSERT INTO ${rsQualified(r.t.schema, r.t.truncations)} (${list(TRUNCATION_COLUMNS.map((c) => c.name))}) VALUES ${values.join(', ')}`;
}

/** The newest truncate's position, '' when there is none (every position is above it). */
function newestTruncate(r: RedshiftTable): string {
  return `(SELECT COALESCE(MAX(x.${rsIdent(CdcColumn.POSITION)}), '') FROM ${rsQualified(r.t.schema, r.t.truncations)} x)`;
}

/** Above every truncate: a row at or below one was emptied by it (docs/truncate.md, "In the warehouse"). */
function afterTruncates(r: RedshiftTable, alias: string): string {
  return `${alias}.${rsIdent(CdcColumn.POSITION)} > ${newestTruncate(r)}`;
}

/** Hard mode's remembered deletions of `r` (idempotent). */
function createDeletedKeysSql(r: RedshiftTable): string {
  const { t } = r;
  const cols = [...defs(r.key, true), `${rsIdent(CdcColumn.POSITION)} varchar(24) NOT NULL`, `PRIMARY KEY (${list(r.key.map((c) => c.name))})`];
  return `CREATE TABLE IF NOT EXISTS ${rsQualified(t.schema, t.deletedKeys)} (${cols.join(', ')})`;
}

/** The table's watermark: the last load its base has absorbed. */
function watermark(r: RedshiftTable): string {
  const { t } = r;
  return `(SELECT w.merged_load FROM ${rsQualified(t.schema, WATERMARKS_TABLE)} w WHERE w.table_name = ${rsLiteral(t.view.toLowerCase())})`;
}

/** The changelog rows of `t` the base has not absorbed: loads above the table's watermark (up to `cut`, when given). */
function pendingRows(r: RedshiftTable, cut?: string): string {
  const { t } = r;
  return `SELECT c.* FROM ${rsQualified(t.schema, t.changelog)} c WHERE c.${rsIdent(LOAD_COLUMN)} > ${watermark(r)}${cut ? ` AND c.${rsIdent(LOAD_COLUMN)} <= ${cut}` : ''}`;
}

/** The truncates of `t` the base has not absorbed (loaded above its watermark). */
function pendingTruncates(r: RedshiftTable): string {
  return `SELECT x.* FROM ${rsQualified(r.t.schema, r.t.truncations)} x WHERE x.${rsIdent(LOAD_COLUMN)} > ${watermark(r)}`;
}

/** The newest pending row per key (rank 1; a redelivery ties on position and the first load wins). */
function newestPending(r: RedshiftTable, cut?: string): string {
  const pos = rsIdent(CdcColumn.POSITION);
  return (
    `SELECT p.*, row_number() OVER (PARTITION BY ${list(
      r.key.map((k) => k.name),
      'p.',
    )} ORDER BY p.${pos} DESC, p.${rsIdent(LOAD_COLUMN)}) AS ${rsIdent(RANK)} ` + `FROM (${pendingRows(r, cut)}) p`
  );
}

/** Not shadowed by the base or, in hard mode, by a remembered deletion at or above the row. */
function aboveBase(r: RedshiftTable, alias: string): string {
  const { t } = r;
  const pos = rsIdent(CdcColumn.POSITION);
  let s = `NOT EXISTS (SELECT 1 FROM ${rsQualified(t.schema, t.mirror)} m WHERE ${keyMatch(r.key, 'm', alias)} AND m.${pos} >= ${alias}.${pos})`;
  if (r.hard)
    s += ` AND NOT EXISTS (SELECT 1 FROM ${rsQualified(t.schema, t.deletedKeys)} d WHERE ${keyMatch(r.key, 'd', alias)} AND d.${pos} >= ${alias}.${pos})`;
  return s;
}

/** The view consumers query: the base overlaid with the newest pending row per key, deletes hidden. */
export function createViewSql(r: RedshiftTable): string {
  const { t } = r;
  const pos = rsIdent(CdcColumn.POSITION);
  const cols = viewColumns(r);
  const base =
    `SELECT ${list(cols, 'm.')} FROM ${rsQualified(t.schema, t.mirror)} m WHERE NOT m.${rsIdent(CdcColumn.DELETED)} ` +
    `AND ${afterTruncates(r, 'm')} AND NOT EXISTS (SELECT 1 FROM (${pendingRows(r)}) p WHERE ${keyMatch(r.key, 'p', 'm')} AND p.${pos} > m.${pos})`;
  const pending =
    `SELECT ${list(cols, 'l.')} FROM (${newestPending(r)}) l WHERE l.${rsIdent(RANK)} = 1 AND l.${rsIdent(CdcColumn.OP)} <> 'delete' ` +
    `AND ${afterTruncates(r, 'l')} AND ${aboveBase(r, 'l')}`;
  return `CREATE OR REPLACE VIEW ${rsQualified(t.schema, t.view)} AS ${base} UNION ALL ${pending}`;
}

/** The merge's stage table of `t` (a session temp table, dropped by the merge). */
export function mergeStageName(r: RedshiftTable): string {
  return `cdc_merge_${r.t.mirror}`.toLowerCase().slice(0, 127);
}

/**
 * The merge of `t` up to load `cut` (an integer the caller read with `lastLoadSql` in the same
 * transaction), in order:
 * 1. stage the newest pending row per key that is above the base (one row per key), as a mirror row;
 * 2. hard mode: delete the base rows of staged deletes, replace the keys' remembered deletions,
 *    remember the staged deletes, drop them from the stage;
 * 3. `MERGE INTO` the base from the stage (matched: every column; soft-mode deletes become
 *    tombstones that keep the base's values; not matched: insert);
 * 4. the watermark moves to `cut`; the stage is dropped.
 */
export function mergeSql(r: RedshiftTable, cut: number, truncated = false): string[] {
  const { t } = r;
  const stage = rsIdent(mergeStageName(r));
  const del = rsIdent(CdcColumn.DELETED);
  const isDelete = `l.${rsIdent(CdcColumn.OP)} = 'delete'`;
  const mcols = mirrorColumns(r);
  const exprs = mcols.map((c) => {
    if (c === CdcColumn.DELETED) return `CASE WHEN ${isDelete} THEN true ELSE false END AS ${del}`;
    if (c === CdcColumn.DELETED_AT) return `CASE WHEN ${isDelete} THEN l.${rsIdent(CdcColumn.COMMIT_TS)} END AS ${rsIdent(c)}`;
    return `l.${rsIdent(c)}`;
  });
  const mirror = rsQualified(t.schema, t.mirror);
  const mirrorRef = rsIdent(t.mirror);
  const out = truncated ? emptyBaseSql(r) : [];
  out.push(
    `CREATE TEMP TABLE ${stage} AS SELECT ${exprs.join(', ')} FROM (${newestPending(r, String(rsInt(cut)))}) l ` +
      `WHERE l.${rsIdent(RANK)} = 1 AND ${afterTruncates(r, 'l')} AND ${aboveBase(r, 'l')}`,
  );
  if (r.hard) {
    const dk = rsQualified(t.schema, t.deletedKeys);
    const keys = r.key.map((k) => k.name);
    out.push(`DELETE FROM ${mirror} USING ${stage} s WHERE ${keyMatch(r.key, mirrorRef, 's')} AND s.${del}`);
    out.push(`DELETE FROM ${dk} USING ${stage} s WHERE ${keyMatch(r.key, rsIdent(t.deletedKeys), 's')}`);
    out.push(`INSERT INTO ${dk} (${list([...keys, CdcColumn.POSITION])}) SELECT ${list([...keys, CdcColumn.POSITION], 's.')} FROM ${stage} s WHERE s.${del}`);
    out.push(`DELETE FROM ${stage} WHERE ${del}`);
  }
  const data = [...r.data.map((c) => c.name), UNHELD_COLUMN];
  const keep = (c: string): string => `CASE WHEN s.${del} THEN ${mirrorRef}.${rsIdent(c)} ELSE s.${rsIdent(c)} END`;
  const assign = [
    ...data.map((c) => `${rsIdent(c)} = ${r.hard ? `s.${rsIdent(c)}` : keep(c)}`),
    ...[CdcColumn.DELETED, CdcColumn.POSITION, CdcColumn.DELETED_AT, CdcColumn.APPLIED_AT].map((c) => `${rsIdent(c)} = s.${rsIdent(c)}`),
  ];
  out.push(
    `MERGE INTO ${mirror} USING ${stage} s ON ${keyMatch(r.key, mirrorRef, 's')} ` +
      `WHEN MATCHED THEN UPDATE SET ${assign.join(', ')} ` +
      `WHEN NOT MATCHED THEN INSERT (${list(mcols)}) VALUES (${list(mcols, 's.')})`,
  );
  out.push(`UPDATE ${rsQualified(t.schema, WATERMARKS_TABLE)} SET merged_load = ${rsInt(cut)} WHERE table_name = ${rsLiteral(t.view.toLowerCase())}`);
  out.push(`DROP TABLE ${stage}`);
  return out;
}

/**
 * The base emptied at the newest truncate (docs/truncate.md, "In the warehouse"): soft mode makes every live
 * row at or below it a tombstone at the truncate (its position, commit time as `_cdc_deleted_at`); hard mode
 * removes those rows and the remembered deletions at or below it. Rows above it stay. Only the newest matters:
 * rows below an older one were emptied by its merge, and the guard kept every later row at or below it out.
 */
function emptyBaseSql(r: RedshiftTable): string[] {
  const { t } = r;
  const pos = rsIdent(CdcColumn.POSITION);
  const mirror = rsQualified(t.schema, t.mirror);
  const mirrorRef = rsIdent(t.mirror);
  if (r.hard)
    return [
      `DELETE FROM ${mirror} WHERE ${mirrorRef}.${pos} <= ${newestTruncate(r)}`,
      `DELETE FROM ${rsQualified(t.schema, t.deletedKeys)} WHERE ${rsIdent(t.deletedKeys)}.${pos} <= ${newestTruncate(r)}`,
    ];
  const trunc = rsQualified(t.schema, t.truncations);
  // A redelivered truncate is a second row at its position: grouped, one row.
  const newest =
    `SELECT y.${pos} AS p, MIN(y.${rsIdent(CdcColumn.COMMIT_TS)}) AS ts, MIN(y.${rsIdent(CdcColumn.APPLIED_AT)}) AS at FROM ${trunc} y ` +
    `WHERE y.${pos} = ${newestTruncate(r)} GROUP BY y.${pos}`;
  return [
    `UPDATE ${mirror} SET ${rsIdent(CdcColumn.DELETED)} = true, ${pos} = z.p, ${rsIdent(CdcColumn.DELETED_AT)} = z.ts, ${rsIdent(CdcColumn.APPLIED_AT)} = z.at ` +
      `FROM (${newest}) z WHERE NOT ${mirrorRef}.${rsIdent(CdcColumn.DELETED)} AND ${mirrorRef}.${pos} <= z.p`,
  ];
}

/** Pending rows of `t` (changelog rows and truncates above the watermark) and the `_cdc_applied_at` of the oldest (`n`, `oldest`): the merge's backlog and its age. */
export function pendingStatsSql(r: RedshiftTable): string {
  const at = rsIdent(CdcColumn.APPLIED_AT);
  return (
    `SELECT SUM(x.n) AS n, MIN(x.oldest) AS oldest FROM (SELECT COUNT(*) AS n, MIN(c.${at}) AS oldest FROM (${pendingRows(r)}) c ` +
    `UNION ALL SELECT COUNT(*) AS n, MIN(d.${at}) AS oldest FROM (${pendingTruncates(r)}) d) x`
  );
}

/** Pending rows of `t` (changelog rows above the watermark, `n`) and pending truncates (`truncates`): the merge's backlog. */
export function pendingCountSql(r: RedshiftTable): string {
  return (
    `SELECT SUM(x.n) AS n, SUM(x.t) AS truncates FROM (SELECT COUNT(*) AS n, 0 AS t FROM (${pendingRows(r)}) c ` +
    `UNION ALL SELECT 0 AS n, COUNT(*) AS t FROM (${pendingTruncates(r)}) d) x`
  );
}

/** What the loader's COPY says about the staged objects (docs/warehouse-apply.md, "Redshift: the load"). */
export const COPY_FORMAT = "FORMAT AS CSV GZIP TIMEFORMAT 'auto' DATEFORMAT 'auto' COMPUPDATE OFF STATUPDATE OFF";

/**
 * `COPY <changelog> (cols) FROM 's3://…/<manifest>' IAM_ROLE '<arn>' MANIFEST FORMAT AS CSV GZIP …`:
 * one COPY over every object the manifest lists. An unquoted empty field is NULL, `""` an empty
 * string (no `EMPTYASNULL`); no `TRUNCATECOLUMNS`, no `MAXERROR`, no `ACCEPTINVCHARS`: a value that
 * does not fit fails the load loudly (the loader checked every value against its column before).
 * The URI, role and region are checked, not parameters (COPY takes none).
 */
export function copyManifestSql(r: RedshiftTable, manifestUri: string, roleArn: string, region?: string): string {
  return copyIntoSql(rsQualified(r.t.schema, r.t.changelog), changelogColumns(r), manifestUri, roleArn, region);
}

/** `COPY <target> (columns) FROM '<manifest>' IAM_ROLE … MANIFEST …` into a table already quoted (`copyManifestSql`, or a load's stage table). */
export function copyIntoSql(target: string, columns: readonly string[], manifestUri: string, roleArn: string, region?: string): string {
  if (!/^s3:\/\/[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]\/[A-Za-z0-9!_.*()/=-]+$/.test(manifestUri))
    throw new UnsafeIdentifierError(manifestUri, 'not an S3 URI the loader makes (s3://bucket/key with plain characters)');
  if (!/^arn:aws[a-z-]*:iam::\d{12}:role\/[A-Za-z0-9+=,.@_/-]+$/.test(roleArn)) throw new UnsafeIdentifierError(roleArn, 'not an IAM role ARN');
  if (region !== undefined && !/^[a-z]{2}(-[a-z]+)+-\d$/.test(region)) throw new UnsafeIdentifierError(region, 'not an AWS region name');
  return `COPY ${target} (${list(columns)}) FROM '${manifestUri}' IAM_ROLE '${roleArn}' MANIFEST ${COPY_FORMAT}${region ? ` REGION '${region}'` : ''}`;
}

export function rsLiteral(s: string): string {
  if (/[\\\0]/.test(s)) throw new UnsafeIdentifierError(s, 'a literal the loader writes may not hold a backslash or NUL');
  return `'${s.replaceAll("'", "''")}'`;
}

/**
 * A text value (a key's staged text, a transaction id, a marker) as an expression that means the same on Redshift and
 * on PostgreSQL: a literal, with each backslash as `CHR(92)` between literals (a backslash inside a Redshift literal is an
 * escape, inside a PostgreSQL one it is not). A NUL is refused: no PostgreSQL text holds one.
 */
export function rsText(s: string): string {
  if (!s.includes('\\')) return rsLiteral(s);
  // VARCHAR, not CHAR (CHR's type; and a CHAR's trailing blanks do not count), so every blank of the value stays.
  const pieces = s.split('\\').map((piece) => `CAST(${rsLiteral(piece)} AS VARCHAR(65535))`);
  return `(${pieces.join(' || CAST(CHR(92) AS VARCHAR(1)) || ')})`;
}

export function rsInt(n: number): number {
  if (!Number.isSafeInteger(n) || n < 0) throw new RangeError(`expected a non-negative integer, got ${n}`);
  return n;
}

/** A column change Redshift cannot make in place (only a VARCHAR's length can change). */
export class RedshiftTypeChangeError extends CdcError {
  constructor(table: string, column: string, have: string, want: string) {
    super(
      'SINK_TYPE_CONFLICT',
      `${table}.${column}: the Redshift column is ${have} and the new schema version needs ${want}; Redshift changes only a VARCHAR's length, so the table is held (docs/schema-drift.md)`,
    );
  }
}

/** The schema change from `from` to `to` (the same table, a new schema version), in two parts. */
export interface RedshiftEvolution {
  /** One transaction: added columns on the changelog and the base (and hard mode's remembered deletions, when the table had none), the view made again. */
  transactional: string[];
  /** VARCHAR widenings, each its own statement outside a transaction (Redshift runs `ALTER COLUMN … TYPE` in none), between a DROP and a CREATE of the view. */
  widen: string[];
}

/**
 * Schema evolution per Redshift (docs/warehouse-apply.md, "Redshift: schema changes"): a new column
 * is added to the changelog, the base and the handover table; a VARCHAR that must hold more bytes is widened; any other
 * type change is refused (`RedshiftTypeChangeError`); a column the new version lacks stays (its
 * values become NULL in new rows, as a delivered row without it says nothing about it).
 */
export function evolveSql(from: RedshiftTable, to: RedshiftTable): RedshiftEvolution {
  const { t } = to;
  const have = new Map([...from.key, ...from.data].map((c) => [c.name.toLowerCase(), c]));
  const added: RedshiftColumn[] = [];
  const widened: RedshiftColumn[] = [];
  for (const c of [...to.key, ...to.data]) {
    const h = have.get(c.name.toLowerCase());
    if (h === undefined) added.push(c);
    else if (h.type === c.type) continue;
    else if (h.kind === 'varchar' && c.kind === 'varchar' && (c.maxBytes ?? 0) > (h.maxBytes ?? 0)) widened.push(c);
    else if (!(h.kind === 'varchar' && c.kind === 'varchar')) throw new RedshiftTypeChangeError(t.tableId, c.name, h.type, c.type);
  }
  if (to.key.some((k) => added.includes(k))) throw new RedshiftTypeChangeError(t.tableId, to.key.map((k) => k.name).join(', '), 'the key', 'a new key column');
  // A table made before key changes were held gets its handover table with every column (made after the others' new ones).
  const tables = from.lacksHandover === true ? [t.changelog, t.mirror] : [t.changelog, t.mirror, t.handover];
  const wider = (c: RedshiftColumn): RedshiftColumn => widened.find((w) => w.name.toLowerCase() === c.name.toLowerCase()) ?? c;
  const handover =
    from.lacksHandover === true ? [createHandoverSql({ ...to, data: [...from.data.map(wider), ...added.filter((c) => !to.key.includes(c))] })] : [];
  // A table made in soft mode that the new version loads in hard mode gets its remembered deletions, and its view reads them.
  const hardens = to.hard && !from.hard;
  // A table made before truncates were loaded gets its guard, and its view reads it.
  const guards = from.lacksTruncations === true;
  const transactional =
    added.length === 0 && !hardens && !guards
      ? handover
      : [
          `DROP VIEW ${rsQualified(t.schema, t.view)}`,
          ...(hardens ? [createDeletedKeysSql(to)] : []),
          ...(guards ? [createTruncationsSql(to)] : []),
          ...added.flatMap((c) => tables.map((x) => `ALTER TABLE ${rsQualified(t.schema, x)} ADD COLUMN ${rsIdent(c.name)} ${c.type}`)),
          ...handover,
          createViewSql(to),
        ];
  const widen =
    widened.length === 0
      ? []
      : [
          `DROP VIEW ${rsQualified(t.schema, t.view)}`,
          ...widened.flatMap((c) => tables.map((x) => `ALTER TABLE ${rsQualified(t.schema, x)} ALTER COLUMN ${rsIdent(c.name)} TYPE ${c.type}`)),
          createViewSql(to),
        ];
  return { transactional, widen };
}
