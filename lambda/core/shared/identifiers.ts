/**
 * SQL identifiers that come from events. Two rules:
 * - **plain** (`assertPlainIdentifier`): letters, digits, `_` and `$`; the platform's own names
 *   (source and sink ids, slot names, the heartbeat schema).
 * - **carried** (`assertCarriedIdentifier`): any name PostgreSQL accepts — mixed case, spaces,
 *   quotes, non-ASCII — of 1 to 63 bytes without NUL; schema and table names may in addition hold
 *   no `.` (a table id is `schema.table`) and no `\` (Redshift reads it as an escape in the
 *   catalog literals the applier sends). Source names are carried (docs/onboarding.md, "Names").
 * A name used in SQL is always double-quoted by `quoteIdent` (`"` doubled); values are never
 * spliced into SQL: they are parameters.
 */
import { HEARTBEAT_TABLE } from '../../../contracts/env.ts';
import { PLAIN_IDENT } from '../../../contracts/identifiers.ts';
import { UnsafeIdentifierError } from './errors.ts';
import { lastAnswer } from './last-answer.ts';

/** Letters, digits, `_` and `$`, not starting with a digit or `$`; at most 63 bytes (contracts/identifiers.ts). */
const PLAIN = PLAIN_IDENT;
/** PostgreSQL's identifier limit in bytes. */
const MAX_BYTES = 63;

/** Throws `UnsafeIdentifierError` unless `name` is a plain identifier. */
export function assertPlainIdentifier(name: string, what = 'identifier'): string {
  if (typeof name !== 'string' || !PLAIN.test(name)) {
    throw new UnsafeIdentifierError(String(name), `${what} must match ${PLAIN.source}`);
  }
  return name;
}

/** Why `name` cannot be carried as a column name (`relation`: as a schema or table name), or null. */
export function carriedIdentifierRefusal(name: unknown, relation = false): string | null {
  if (typeof name !== 'string' || name.length === 0) return 'it is empty';
  if (name.includes('\u0000')) return 'it holds a NUL character';
  if (Buffer.byteLength(name, 'utf8') > MAX_BYTES) return `it is longer than ${MAX_BYTES} bytes (PostgreSQL's limit)`;
  if (relation && name.includes('.')) return "it holds '.' (a table id is schema.table)";
  if (relation && name.includes('\\')) return "it holds '\\' (Redshift reads it as an escape)";
  return null;
}

/** Throws `UnsafeIdentifierError` unless `name` can be carried (`carriedIdentifierRefusal`). */
export function assertCarriedIdentifier(name: string, what = 'identifier', relation = false): string {
  const refusal = carriedIdentifierRefusal(name, relation);
  if (refusal !== null) throw new UnsafeIdentifierError(String(name), `${what} cannot be carried: ${refusal}`);
  return name;
}

/** Double-quotes a carried identifier, doubling any `"` in it. */
export function quoteIdent(name: string): string {
  assertCarriedIdentifier(name);
  return `"${name.replaceAll('"', '""')}"`;
}

/** Splits a table id `schema.table` and checks both parts. */
export function splitTableId(tableId: string): { schema: string; table: string } {
  const parts = typeof tableId === 'string' ? tableId.split('.') : [];
  if (parts.length !== 2) throw new UnsafeIdentifierError(String(tableId), "table id must be 'schema.table' (names holding '.' are not carried)");
  const [schema, table] = parts as [string, string];
  assertCarriedIdentifier(schema, 'schema name', true);
  assertCarriedIdentifier(table, 'table name', true);
  return { schema, table };
}

/** Whether a table id names the heartbeat table (`splitTableId`, which throws for an id it refuses), split once per run of calls naming one table. */
export const isHeartbeatTable = lastAnswer((tableId: string) => splitTableId(tableId).table === HEARTBEAT_TABLE);
