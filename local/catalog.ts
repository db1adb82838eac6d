/** Catalog lookups shared by the capture and the verdict. */
import type pg from 'pg';

type Queryable = Pick<pg.ClientBase, 'query'>;

/** Column names of a table or view, in column order (empty if there is no such relation). */
export async function columnsOf(client: Queryable, schema: string, table: string): Promise<string[]> {
  const res = await client.query(
    `SELECT a.attname AS name FROM pg_attribute a
       JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
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
