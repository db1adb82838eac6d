/**
 * The statements of the loader function's loads (docs/warehouse-apply.md, "Redshift: the applier"):
 * objects an applier staged before any load existed carry no load id, so each table's COPY goes
 * into a session temp table of the changelog's other columns and one `INSERT … SELECT` adds the
 * load id on the way into the changelog, in the load's transaction. The ledger names the requests
 * a load carried (`_cdc_load_requests`), so a claim whose invocation died is resolved by reading it.
 */
import { rsIdent, rsInt, rsLiteral, rsQualified, changelogColumns, copyIntoSql, LOAD_COLUMN, type RedshiftTable } from './redshift-sql.ts';

/** The requests each committed load carried (one row per request, written in the load's transaction). */
export const LOAD_REQUESTS_TABLE = '_cdc_load_requests';

export function createLoadRequestsSql(schema: string): string {
  return `CREATE TABLE IF NOT EXISTS ${rsQualified(schema, LOAD_REQUESTS_TABLE)} (load_id bigint NOT NULL, request_id varchar(128) NOT NULL, PRIMARY KEY (load_id, request_id))`;
}

export function recordRequestsSql(schema: string, loadId: number, requestIds: readonly string[]): string {
  if (requestIds.length === 0) throw new RangeError('a load names at least one request');
  return `INSERT INTO ${rsQualified(schema, LOAD_REQUESTS_TABLE)} (load_id, request_id) VALUES ${requestIds.map((id) => `(${rsInt(loadId)}, ${rsLiteral(id)})`).join(', ')}`;
}

/** Which of `requestIds` a committed load carried, and which load (`load_id`, `request_id`). */
export function committedRequestsSql(schema: string, requestIds: readonly string[]): string {
  if (requestIds.length === 0) throw new RangeError('ask about at least one request');
  return `SELECT load_id, request_id FROM ${rsQualified(schema, LOAD_REQUESTS_TABLE)} WHERE request_id IN (${requestIds.map(rsLiteral).join(', ')})`;
}

/** The session temp table one COPY of `r` lands in. */
export function copyStageName(r: RedshiftTable): string {
  return `cdc_copy_${r.t.changelog}`.toLowerCase().slice(0, 127);
}

/**
 * One table's part of a load: the stage table (the changelog's columns but the load id, no rows),
 * the COPY of the manifest into it, the rows into the changelog with `loadId`, the stage dropped.
 */
export function stagedCopySql(r: RedshiftTable, manifestUri: string, roleArn: string, loadId: number, region?: string): string[] {
  const stage = rsIdent(copyStageName(r));
  const changelog = rsQualified(r.t.schema, r.t.changelog);
  const columns = changelogColumns(r).filter((c) => c !== LOAD_COLUMN);
  const names = columns.map(rsIdent).join(', ');
  return [
    `CREATE TEMP TABLE ${stage} AS SELECT ${names} FROM ${changelog} WHERE 1 = 0`,
    copyIntoSql(stage, columns, manifestUri, roleArn, region),
    `INSERT INTO ${changelog} (${rsIdent(LOAD_COLUMN)}, ${names}) SELECT ${rsInt(loadId)}, ${names} FROM ${stage}`,
    `DROP TABLE ${stage}`,
  ];
}
