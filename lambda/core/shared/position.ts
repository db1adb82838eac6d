/**
 * The canonical position of a change: one total order over all events of one source.
 *
 * A position is the commit LSN of the source transaction followed by the record's index within
 * that transaction (change LSNs alone are not ordered across concurrent transactions; commit
 * order is). It is written as a fixed-width, 24-character lower-case hexadecimal string:
 *
 *     16 hex digits of the commit LSN  +  8 hex digits of the index within the transaction
 *     "000000027c007178" + "00000003"  =  "000000027c00717800000003"
 *
 * Because every position has the same length and uses only [0-9a-f], plain string comparison
 * orders positions the same way everywhere: `<` in TypeScript, `<` on VARCHAR/TEXT in
 * PostgreSQL (C and linguistic collations alike) and in Redshift. `test/core/shared/position.test.ts`
 * proves this against a real PostgreSQL.
 *
 * Snapshot rows get positions from the stitching algorithm; they use the same representation.
 */
import { InvalidRecordError } from './errors.ts';

export type Position = string;

export const POSITION_LENGTH = 24;
const POSITION_RE = /^[0-9a-f]{24}$/;
const LSN_RE = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/;
const MAX_INDEX = 0xffffffff;

/** The lowest possible position: every real position compares greater. */
export const POSITION_ZERO: Position = '0'.repeat(POSITION_LENGTH);

/** Parses a PostgreSQL LSN text (`2/7C007178`) into a 64-bit integer. */
export function parseLsn(text: string, field = 'lsn'): bigint {
  const m = LSN_RE.exec(text);
  if (!m) throw new InvalidRecordError(field, `expected an LSN like '2/7C007178', got ${JSON.stringify(text)}`);
  return (BigInt(`0x${m[1]}`) << 32n) | BigInt(`0x${m[2]}`);
}

/** Formats a 64-bit LSN the way PostgreSQL prints it (`2/7C007178`). */
export function formatLsn(lsn: bigint): string {
  return `${(lsn >> 32n).toString(16).toUpperCase()}/${(lsn & 0xffffffffn).toString(16).toUpperCase()}`;
}

/** Builds a position from a commit LSN (text or integer) and the record's index within its transaction. */
export function makePosition(commitLsn: bigint | string, index: number): Position {
  const lsn = typeof commitLsn === 'string' ? parseLsn(commitLsn) : commitLsn;
  if (lsn < 0n || lsn > 0xffffffffffffffffn) throw new InvalidRecordError('position', `LSN out of range: ${lsn}`);
  if (!Number.isInteger(index) || index < 0 || index > MAX_INDEX) {
    throw new InvalidRecordError('position', `index within transaction must be an integer in [0, ${MAX_INDEX}], got ${index}`);
  }
  return lsn.toString(16).padStart(16, '0') + index.toString(16).padStart(8, '0');
}

export function isPosition(value: unknown): value is Position {
  return typeof value === 'string' && POSITION_RE.test(value);
}

/** Throws a named error unless `value` is a canonical position. */
export function assertPosition(value: unknown, field = 'position'): Position {
  if (!isPosition(value)) {
    throw new InvalidRecordError(field, `expected ${POSITION_LENGTH} lower-case hex digits (commit LSN + index), got ${JSON.stringify(value)}`);
  }
  return value;
}

/** Total order on positions: negative, zero or positive like `Array.prototype.sort` expects. */
export function comparePositions(a: Position, b: Position): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export function maxPosition(a: Position, b: Position): Position {
  return a >= b ? a : b;
}

/** Splits a position into its commit LSN and index (for humans and for gap checks). */
export function describePosition(position: Position): { commitLsn: string; index: number } {
  assertPosition(position);
  return {
    commitLsn: formatLsn(BigInt(`0x${position.slice(0, 16)}`)),
    index: Number.parseInt(position.slice(16), 16),
  };
}
