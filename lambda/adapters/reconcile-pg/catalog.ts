/** What the PostgreSQL reconciliation sides (lambda/adapters/reconcile-pg.ts) read of the catalog. */
import type pg from 'pg';

export type Queryable = Pick<pg.ClientBase, 'query'>;

export interface Relation {
  schema: string;
  name: string;
}

export /** A relation's columns with their types (`format_type`), in column order. */
async function columnTypes(client: Queryable, rel: Relation): Promise<Array<{ name: string; type: string }>> {
  const res = await client.query(
    `SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type FROM pg_attribute a
       JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> 'v' ORDER BY a.attnum`,
    [rel.schema, rel.name],
  );
  return res.rows.map((r) => ({ name: String(r.name), type: String(r.type) }));
}
