/** Catalog lookups shared by the capture and the verdict. */
import type pg from 'pg';
import { splitTableId } from '../lambda/core/shared/identifiers.ts';
import { SourceNotReadyError } from './errors.ts';

type Queryable = Pick<pg.ClientBase, 'query'>;

/** Column names of a table or view, in column order (empty if there is no such relation). */
export async function columnsOf(client: Queryable, schema: string, table: string): Promise<string[]> {
  const res = await client.query(
    `SELECT a.attname AS name FROM pg_attribute a
       JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> 'v' ORDER BY a.attnum`,
    [schema, table],
  );
  return res.rows.map((r) => String(r.name));
}

/** Primary-key columns of a source table, in key order (empty if it has none). */
export async function primaryKeyOf(client: Pick<pg.ClientBase, 'query'>, schema: string, table: string): Promise<string[]> {
  const res = await client.query(
    `SELECT a.attname AS name
       FROM pg_index i
       JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
       JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
       JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
      WHERE n.nspname = $1 AND c.relname = $2 AND i.indisprimary
      ORDER BY k.ord`,
    [schema, table],
  );
  return res.rows.map((r) => String(r.name));
}

/** A captured table's key (`declared`, else its primary key), checked to be one its deletes will carry. */
export async function captureKeyOf(client: Queryable, table: string, declared: string[] | null | undefined): Promise<string[]> {
  const { schema, table: name } = splitTableId(table);
  const rel = (
    await client.query(
      `SELECT c.relreplident AS ident FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`,
      [schema, name],
    )
  ).rows[0] as { ident: string } | undefined;
  if (!rel) throw new SourceNotReadyError(`captured table ${table} does not exist in the source database`);
  const pk = await primaryKeyOf(client, schema, name);
  const key = declared ?? pk;
  if (key.length === 0) {
    throw new SourceNotReadyError(
      `captured table ${table} has no primary key: add one (ALTER TABLE ${table} ADD PRIMARY KEY (...)), or declare its key and set REPLICA IDENTITY FULL`,
    );
  }
  if (rel.ident === 'n' || (rel.ident === 'd' && pk.length === 0)) {
    throw new SourceNotReadyError(
      `deletes on ${table} would not carry its key (replica identity ${rel.ident === 'n' ? 'NOTHING' : 'DEFAULT without a primary key'}): ALTER TABLE ${table} REPLICA IDENTITY FULL`,
    );
  }
  return key;
}

/** A column's type as the catalog has it now: without modifier (as test_decoding prints it) and with it. */
export interface CatalogType {
  base: string;
  full: string;
}

/**
 * Types of the columns of tables (`schema.table` → column → type), with their modifiers
 * (`format_type(atttypid, atttypmod)`: `character varying(20)`, `numeric(12,2)`), each table's
 * columns in table order, in one round trip. Tables that do not exist are absent.
 */
export async function columnTypesOf(client: Queryable, tables: readonly string[]): Promise<Map<string, Map<string, CatalogType>>> {
  const out = new Map<string, Map<string, CatalogType>>();
  if (tables.length === 0) return out;
  const res = await client.query(
    `SELECT n.nspname || '.' || c.relname AS tbl, a.attname AS name,
            format_type(a.atttypid, NULL) AS base, format_type(a.atttypid, a.atttypmod) AS full
       FROM pg_attribute a
       JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname || '.' || c.relname = ANY($1::text[]) AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> 'v' ORDER BY a.attnum`,
    [tables],
  );
  for (const r of res.rows as { tbl: string; name: string; base: string; full: string }[]) {
    let m = out.get(r.tbl);
    if (!m) out.set(r.tbl, (m = new Map()));
    m.set(r.name, { base: r.base, full: r.full });
  }
  return out;
}

/**
 * `columnTypesOf` read after the transactions `xids` became visible (`awaitTransactionsVisible`),
 * in one round trip when they already are: one statement reads the snapshot and, with that same
 * snapshot, the catalog, so when the snapshot shows every transaction ended the types are read
 * after them. Otherwise it reads both again 5 ms later, for at most `timeoutMs` (past it, the last
 * read's types, as the two-step read went on). The capture's batch read: one round trip instead of
 * two (docs/performance-log.md, "35. The slot capture's work per change").
 */
export async function columnTypesOnceVisible(
  client: Queryable,
  tables: readonly string[],
  xids: readonly number[],
  timeoutMs = 2_000,
): Promise<Map<string, Map<string, CatalogType>>> {
  const out = new Map<string, Map<string, CatalogType>>();
  if (tables.length === 0) return out;
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await client.query(
      `SELECT txid_snapshot_xmax(s)::text AS xmax, ARRAY(SELECT x::text FROM txid_snapshot_xip(s) x) AS xip,
              ARRAY(SELECT json_build_array(n.nspname || '.' || c.relname, a.attname, format_type(a.atttypid, NULL), format_type(a.atttypid, a.atttypmod))::text
                      FROM pg_attribute a
                      JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
                     WHERE n.nspname || '.' || c.relname = ANY($1::text[]) AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> 'v'
                     ORDER BY a.attnum) AS cols
         FROM txid_current_snapshot() s`,
      [tables],
    );
    const row = res.rows[0] as { xmax: string; xip: string[]; cols: string[] };
    if (!anyRunning(xids, row.xmax, row.xip) || Date.now() >= deadline) {
      for (const text of row.cols) {
        const [tbl, name, base, full] = JSON.parse(text) as [string, string, string, string];
        let m = out.get(tbl);
        if (!m) out.set(tbl, (m = new Map()));
        m.set(name, { base, full });
      }
      return out;
    }
    await new Promise((r) => setTimeout(r, 5));
  }
}

/** Whether any of `xids` (32 bits) is in progress for a snapshot with this xmax and in-progress list (full txids, as text). */
function anyRunning(xids: readonly number[], xmaxText: string, xipText: readonly string[]): boolean {
  const low = (txid: string): number => Number(BigInt(txid) & 0xffff_ffffn);
  const xmax = low(xmaxText);
  // In progress for this snapshot: listed as such, or at or after its xmax (modulo 2^32).
  const xip = new Set(xipText.map(low));
  return xids.some((xid) => xip.has(xid) || (xid - xmax) >>> 0 < 0x8000_0000);
}

/**
 * Waits until the transactions `xids` (32 bits, as test_decoding prints them) are visible to a new
 * snapshot of `client`'s session, for at most `timeoutMs`. A walsender can decode and send a
 * transaction as soon as its commit record is flushed, before the committing backend has ended it
 * for other sessions (commit order and visibility order differ in PostgreSQL): a catalog read made
 * in that window still sees the catalog from before the transaction, e.g. a column's type before an
 * `ALTER … TYPE` in it (docs/schema-drift.md). Bounded: past `timeoutMs` the read goes on as before.
 */
export async function awaitTransactionsVisible(client: Queryable, xids: readonly number[], timeoutMs = 2_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const res = await client.query(
      `SELECT txid_snapshot_xmax(s)::text AS xmax, ARRAY(SELECT x::text FROM txid_snapshot_xip(s) x) AS xip FROM txid_current_snapshot() s`,
    );
    const row = res.rows[0] as { xmax: string; xip: string[] };
    if (!anyRunning(xids, row.xmax, row.xip) || Date.now() >= deadline) return;
    await new Promise((r) => setTimeout(r, 5));
  }
}
