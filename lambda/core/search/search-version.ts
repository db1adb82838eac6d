/**
 * Position → OpenSearch external version: an order-preserving encoding with a stated bound
 * (docs/architecture.md §5.2; docs/search.md "Versions").
 *
 * A position is 96 bits (64-bit commit LSN + 32-bit index within the transaction, see
 * position.ts); an OpenSearch version is a signed 64-bit integer, so at most 63 bits. No
 * encoding of all 96-bit positions into 63 bits can preserve order, so the encoding covers a
 * window of positions and refuses (`PositionNotEncodableError`, never a wrap) everything else:
 *
 *     version(POSITION_ZERO) = 0
 *     version(lsn, index)    = ((lsn − base) · 2^20 + index) + 1
 *
 * where `base` is the search index's base LSN (recorded in the index mapping's `_meta` when the
 * index is created; by default the table's first registered position rounded down to a 4 GiB
 * WAL boundary, `searchBaseLsn`). The bound: `index < 2^20 − 2` (1,048,574 records in one source
 * transaction; `2^20 − 1` encodes a snapshot row's index `0xffffffff` and `2^20 − 2` a re-snapshot
 * sweep's `0xfffffffe`) and `base ≤ lsn < base + 2^43` (8 TiB of WAL after the base), excluding the single
 * position whose version would be 2^63. Inside the window the map is strictly increasing:
 * positions compare by (lsn, index), and for lsn₁ < lsn₂ the gap of at least 2^20 exceeds any
 * index difference. `POSITION_ZERO` (full-load rows) maps to 0, below every other version.
 * `test/core/search/search-version.test.ts` proves order preservation and the refusals with random
 * positions. A table whose positions leave the window is held for the search sink; the
 * recovery is a rebuild into a new index with a later base.
 *
 * Pure: no I/O.
 */
import { CdcError } from '../shared/errors.ts';
import { assertPosition, POSITION_ZERO, type Position } from '../shared/position.ts';

/** Bits of the index within the transaction. */
export const VERSION_INDEX_BITS = 20n;
/** Bits of the LSN distance from the base. */
export const VERSION_LSN_BITS = 43n;
/** Largest OpenSearch version (Java `Long.MAX_VALUE`). */
export const MAX_VERSION = (1n << 63n) - 1n;
/**
 * The index a snapshot row carries (`snapshotPosition` in lambda/core/snapshot/snapshot.ts: the last slot
 * of its LSN, docs/snapshot.md); it encodes into the top index value, which no change uses.
 */
export const SNAPSHOT_INDEX = 0xffffffff;
const SNAPSHOT_SLOT = (1n << VERSION_INDEX_BITS) - 1n;
/**
 * The index a re-snapshot's sweep carries (`sweepPosition` in lambda/core/snapshot/snapshot.ts: just below
 * the snapshot slot of its LSN); it encodes into the index value below the snapshot slot.
 */
export const SWEEP_INDEX = 0xfffffffe;
const SWEEP_SLOT = SNAPSHOT_SLOT - 1n;
/** Largest index within a transaction that encodes (the two top index values are the sweep's and the snapshot's slots). */
export const MAX_ENCODABLE_INDEX = Number(SWEEP_SLOT - 1n);
/** Bytes of WAL after the base that encode. */
export const LSN_WINDOW = 1n << VERSION_LSN_BITS;

/** A position outside the window the external version can represent: the table is held for this sink. */
export class PositionNotEncodableError extends CdcError {
  constructor(
    readonly position: Position,
    why: string,
  ) {
    super(
      'POSITION_NOT_ENCODABLE',
      `position ${position} cannot be encoded as an OpenSearch external version: ${why}. ` +
        'The table is held for this search sink; rebuild its index with a later base LSN (docs/search.md, "Versions")',
    );
  }
}

const lsnOf = (p: Position): bigint => BigInt(`0x${p.slice(0, 16)}`);
const indexOf = (p: Position): number => Number.parseInt(p.slice(16), 16);

/** The default base LSN of a new index: the table's first position rounded down to a 4 GiB WAL boundary. */
export function searchBaseLsn(firstPosition: Position): bigint {
  assertPosition(firstPosition, 'firstPosition');
  return (lsnOf(firstPosition) >> 32n) << 32n;
}

/** The external version of `position` in an index with base LSN `base`; throws `PositionNotEncodableError` outside the window. */
export function encodeVersion(position: Position, base: bigint): bigint {
  assertPosition(position);
  if (position === POSITION_ZERO) return 0n;
  const lsn = lsnOf(position);
  const index = indexOf(position);
  if (lsn < base) throw new PositionNotEncodableError(position, `its commit LSN is below the index's base LSN ${base.toString(16)}`);
  if (index > MAX_ENCODABLE_INDEX && index !== SNAPSHOT_INDEX && index !== SWEEP_INDEX)
    throw new PositionNotEncodableError(position, `its index within the transaction (${index}) exceeds ${MAX_ENCODABLE_INDEX}`);
  const offset = lsn - base;
  if (offset >= LSN_WINDOW)
    throw new PositionNotEncodableError(position, `its commit LSN is 2^43 bytes or more past the index's base LSN ${base.toString(16)}`);
  const v = ((offset << VERSION_INDEX_BITS) | (index === SNAPSHOT_INDEX ? SNAPSHOT_SLOT : index === SWEEP_INDEX ? SWEEP_SLOT : BigInt(index))) + 1n;
  if (v > MAX_VERSION) throw new PositionNotEncodableError(position, 'it is the last position of the window, whose version would be 2^63');
  return v;
}

/** The position of an external version (inverse of `encodeVersion` for the same base). */
export function decodeVersion(version: bigint, base: bigint): Position {
  if (version < 0n || version > MAX_VERSION) throw new RangeError(`version ${version} is outside [0, 2^63 − 1]`);
  if (version === 0n) return POSITION_ZERO;
  const v = version - 1n;
  const lsn = base + (v >> VERSION_INDEX_BITS);
  const slot = v & ((1n << VERSION_INDEX_BITS) - 1n);
  const index = slot === SNAPSHOT_SLOT ? BigInt(SNAPSHOT_INDEX) : slot === SWEEP_SLOT ? BigInt(SWEEP_INDEX) : slot;
  return lsn.toString(16).padStart(16, '0') + index.toString(16).padStart(8, '0');
}
