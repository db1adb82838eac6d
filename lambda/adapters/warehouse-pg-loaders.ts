/**
 * How `PgWarehouse` loads rows into a table (lambda/adapters/warehouse-pg.ts): the portable
 * multi-row parameterised INSERT, and PostgreSQL's `COPY FROM STDIN`.
 */
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import type pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { quoteIdent } from '../core/shared/identifiers.ts';
import { insertValuesSql, rowsPerStatement } from '../core/warehouse/warehouse-sql.ts';

/** Loads text rows into a session temp table inside the current transaction. */
export interface StageLoader {
  readonly name: string;
  /** One statement, so a load outside a transaction is atomic by itself (COPY). @default false */
  readonly atomic?: boolean;
  /** `table` is a quoted identifier; `rows[i][j]` is the text value of `columns[j]` or null. */
  load(client: pg.ClientBase, table: string, columns: readonly string[], rows: readonly (readonly (string | null)[])[]): Promise<void>;
  /**
   * Loads rows already written in COPY's text format (`chunks`: text or its UTF-8 bytes, whole lines, each
   * ending in a newline; none when there are no rows), where the loader is a COPY: the append writes its
   * text straight from the events (lambda/adapters/warehouse-pg-copy-text.ts).
   */
  loadCopyText?(client: pg.ClientBase, table: string, columns: readonly string[], chunks: Iterable<string | Buffer>): Promise<void>;
}

/** Multi-row parameterised INSERT, chunked under the parameter limit: works on PostgreSQL and Redshift. */
export const insertStageLoader: StageLoader = {
  name: 'insert',
  async load(client, table, columns, rows) {
    const per = rowsPerStatement(columns.length);
    for (let i = 0; i < rows.length; i += per) {
      const chunk = rows.slice(i, i + per);
      await client.query(insertValuesSql(table, columns, chunk.length), chunk.flat());
    }
  },
};

/** The characters COPY's text format escapes. */
const COPY_SPECIAL = /[\\\t\n\r]/;

/** A value in COPY's text format: `\N` for NULL; backslash, tab, newline and carriage return escaped (one test first: most values have none). */
export function copyText(v: string | null): string {
  if (v === null) return '\\N';
  if (!COPY_SPECIAL.test(v)) return v;
  return v.replace(/\\/g, '\\\\').replace(/\t/g, '\\t').replace(/\n/g, '\\n').replace(/\r/g, '\\r');
}

/** COPY FROM STDIN of rows already in COPY's text format. */
async function copyFromText(client: pg.ClientBase, table: string, columns: readonly string[], chunks: Iterable<string | Buffer>): Promise<void> {
  const sql = `COPY ${table} (${columns.map(quoteIdent).join(', ')}) FROM STDIN`;
  await pipeline(Readable.from(chunks), client.query(copyFrom(sql)));
}

/** COPY FROM STDIN (text format) through pg-copy-streams: PostgreSQL only (Redshift's COPY reads from S3). */
export const copyStageLoader: StageLoader = {
  name: 'copy',
  atomic: true,
  async load(client, table, columns, rows) {
    if (rows.length === 0) return;
    const lines = function* (): Generator<string> {
      let buf = '';
      for (const r of rows) {
        // One string per row, built without an intermediate array (this runs for every event appended).
        let line = r.length > 0 ? copyText(r[0] ?? null) : '';
        for (let j = 1; j < r.length; j++) line += `\t${copyText(r[j] ?? null)}`;
        buf += `${line}\n`;
        if (buf.length > 1 << 16) {
          yield buf;
          buf = '';
        }
      }
      if (buf) yield buf;
    };
    await copyFromText(client, table, columns, lines());
  },
  loadCopyText: copyFromText,
};
