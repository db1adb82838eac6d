/**
 * SQL identifiers that come from events. A name is used in SQL only if it is a plain identifier
 * AND the schema registry knows it; it is then always double-quoted. Values are never spliced
 * into SQL: they are parameters.
 */
import { PLAIN_IDENT } from '../../contracts/identifiers.ts';
import { UnsafeIdentifierError } from './errors.ts';

/** Letters, digits, `_` and `$`, not starting with a digit or `$`; at most 63 bytes (contracts/identifiers.ts). */
const PLAIN = PLAIN_IDENT;

/** Throws `UnsafeIdentifierError` unless `name` is a plain identifier. */
export function assertPlainIdentifier(name: string, what = 'identifier'): string {
  if (typeof name !== 'string' || !PLAIN.test(name)) {
    throw new UnsafeIdentifierError(String(name), `${what} must match ${PLAIN.source}`);
  }
  return name;
}

/** Double-quotes an identifier that has already been checked. */
export function quoteIdent(name: string): string {
  assertPlainIdentifier(name);
  return `"${name}"`;
}

/** Splits a table id `schema.table` and checks both parts. */
export function splitTableId(tableId: string): { schema: string; table: string } {
  const parts = typeof tableId === 'string' ? tableId.split('.') : [];
  if (parts.length !== 2) throw new UnsafeIdentifierError(String(tableId), "table id must be 'schema.table'");
  const [schema, table] = parts as [string, string];
  assertPlainIdentifier(schema, 'schema name');
  assertPlainIdentifier(table, 'table name');
  return { schema, table };
}
