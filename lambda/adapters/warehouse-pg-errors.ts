/**
 * PostgreSQL/Redshift errors that are about ONE table and that a retry will not fix
 * (docs/operations.md, "Blast radius of one table"): the applier holds that table for its sink
 * (so the shard moves on and the other tables keep flowing) instead of failing the batch until
 * the retries run out. The operator fixes the cause and resumes the table (`cdc resume`), which
 * replays the held range.
 *
 * By SQLSTATE class: 23 integrity constraint violation (a constraint someone added to a mirror),
 * 42 syntax error or access rule violation (a missing or altered object, a revoked privilege),
 * 0A feature not supported, 44 WITH CHECK OPTION violation, P0 raised by a trigger or function,
 * 2F/38/39 routine exceptions. Not: the codes a concurrent DDL clash gives (the warehouse re-plans
 * those), class 22/54 (a rejected value: that record is dead-lettered), connection, resource,
 * lock, shutdown and internal errors (transient: retried).
 */
const PERSISTENT_CLASSES = new Set(['23', '42', '0A', '44', 'P0', '2F', '38', '39']);
/**
 * SQLSTATEs of a DDL that lost a race with the same DDL in another session: unique violation on a
 * catalog index, duplicate schema, duplicate table, duplicate column, duplicate object (`type
 * "<table>" already exists`: the row type of a table another session created first).
 */
export const CONCURRENT_DDL_CODES: ReadonlySet<string> = new Set(['23505', '42P06', '42P07', '42701', '42710']);

/** The SQLSTATE of an error that holds its table, or null. */
export function persistentTableErrorCode(err: unknown): string | null {
  const code = (err as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !/^[0-9A-Z]{5}$/.test(code)) return null;
  if (CONCURRENT_DDL_CODES.has(code)) return null;
  return PERSISTENT_CLASSES.has(code.slice(0, 2)) ? code : null;
}
