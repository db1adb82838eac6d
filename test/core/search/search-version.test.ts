/**
 * Property: the position → external version encoding preserves order inside its window, maps
 * POSITION_ZERO below everything, round-trips, stays inside OpenSearch's signed 64-bit range,
 * and refuses (named error, never a wrap) every position outside the window.
 * Runs: `CDC_PROPERTY_RUNS` (default 2,000 per property), seed `CDC_PROPERTY_SEED` (printed).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { makePosition, POSITION_ZERO } from '../../../lambda/core/shared/position.ts';
import {
  decodeVersion,
  encodeVersion,
  LSN_WINDOW,
  MAX_ENCODABLE_INDEX,
  MAX_VERSION,
  PositionNotEncodableError,
  searchBaseLsn,
  SNAPSHOT_INDEX,
  SWEEP_INDEX,
} from '../../../lambda/core/search/search-version.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 2_000);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const MAX_LSN = (1n << 64n) - 1n;

const baseArb = fc.oneof(
  fc.constant(0n),
  fc.bigInt({ min: 0n, max: MAX_LSN - LSN_WINDOW }).map((b) => (b >> 32n) << 32n),
  fc.bigInt({ min: 0n, max: MAX_LSN - LSN_WINDOW }),
);
/** A position inside the window of `base`, biased to the window's edges and to shared LSNs. */
const inWindow = (base: bigint) =>
  fc
    .tuple(
      fc.oneof(fc.bigInt({ min: 0n, max: LSN_WINDOW - 1n }), fc.constantFrom(0n, 1n, LSN_WINDOW - 2n, LSN_WINDOW - 1n), fc.bigInt({ min: 0n, max: 16n })),
      fc.oneof(
        fc.integer({ min: 0, max: MAX_ENCODABLE_INDEX }),
        fc.constantFrom(0, 1, MAX_ENCODABLE_INDEX - 1, MAX_ENCODABLE_INDEX, SWEEP_INDEX, SNAPSHOT_INDEX),
      ),
    )
    .map(([off, idx]) => [base + off, idx] as const)
    .filter(([lsn, idx]) => !(lsn - base === LSN_WINDOW - 1n && idx === SNAPSHOT_INDEX));

describe('search external version encoding', () => {
  console.log(`search-version property: ${RUNS} runs per property, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED})`);

  it('preserves the order of positions inside the window (and round-trips)', () => {
    fc.assert(
      fc.property(
        baseArb.chain((base) => fc.tuple(fc.constant(base), fc.array(inWindow(base), { minLength: 2, maxLength: 50 }))),
        ([base, entries]) => {
          const positions = entries.map(([l, i]) => makePosition(l, i));
          const withZero = [POSITION_ZERO, ...positions];
          const byPosition = [...withZero].sort();
          const byVersion = [...withZero].sort((a, b) => {
            const va = encodeVersion(a, base);
            const vb = encodeVersion(b, base);
            return va < vb ? -1 : va > vb ? 1 : 0;
          });
          expect(byVersion).toEqual(byPosition);
          for (const p of positions) {
            const v = encodeVersion(p, base);
            expect(p === POSITION_ZERO ? v === 0n : v > 0n && v <= MAX_VERSION).toBe(true);
            expect(decodeVersion(v, base)).toBe(p);
          }
          // Distinct positions, distinct versions.
          expect(new Set(positions.map((p) => encodeVersion(p, base).toString())).size).toBe(new Set(positions).size);
        },
      ),
      { numRuns: RUNS, seed: SEED },
    );
  });

  it('refuses every position outside the window by name, never wrapping', () => {
    const outside = baseArb.chain((base) =>
      fc.tuple(
        fc.constant(base),
        fc.oneof(
          // index too large
          fc.tuple(fc.bigInt({ min: base, max: base + LSN_WINDOW - 1n }), fc.integer({ min: MAX_ENCODABLE_INDEX + 1, max: SWEEP_INDEX - 1 })),
          // LSN past the window
          fc.tuple(fc.bigInt({ min: base + LSN_WINDOW, max: MAX_LSN }), fc.integer({ min: 0, max: MAX_ENCODABLE_INDEX })),
          // LSN below the base (when the base is above 0)
          ...(base > 0n
            ? [fc.tuple(fc.bigInt({ min: 0n, max: base - 1n }), fc.integer({ min: 0, max: 0xffffffff })).filter(([l, i]) => l !== 0n || i !== 0)]
            : []),
        ),
      ),
    );
    fc.assert(
      fc.property(outside, ([base, [lsn, idx]]) => {
        expect(() => encodeVersion(makePosition(lsn, idx), base)).toThrow(PositionNotEncodableError);
      }),
      { numRuns: RUNS, seed: SEED },
    );
  });

  it('states its bound: the last window position would be 2^63 and is refused; the one before is the maximum version', () => {
    const base = 0x500000000n;
    // The last slot of an LSN is a snapshot row's (docs/snapshot.md): it sorts after every change of that LSN.
    const last = makePosition(base + LSN_WINDOW - 1n, SNAPSHOT_INDEX);
    expect(() => encodeVersion(last, base)).toThrow(/2\^63/);
    expect(encodeVersion(makePosition(base + LSN_WINDOW - 1n, SWEEP_INDEX), base)).toBe(MAX_VERSION);
    expect(encodeVersion(makePosition(base + LSN_WINDOW - 1n, MAX_ENCODABLE_INDEX), base)).toBe(MAX_VERSION - 1n);
    // A re-snapshot's sweep sits between every change of its LSN and the LSN's snapshot rows (docs/snapshot.md, "Re-snapshot").
    expect(encodeVersion(makePosition(base + 7n, SWEEP_INDEX), base)).toBeGreaterThan(encodeVersion(makePosition(base + 7n, MAX_ENCODABLE_INDEX), base));
    expect(encodeVersion(makePosition(base + 7n, SNAPSHOT_INDEX), base)).toBeGreaterThan(encodeVersion(makePosition(base + 7n, SWEEP_INDEX), base));
    expect(encodeVersion(makePosition(base + 7n, SNAPSHOT_INDEX), base)).toBeLessThan(encodeVersion(makePosition(base + 8n, 0), base));
    expect(encodeVersion(makePosition(base, 0), base)).toBe(1n);
    expect(encodeVersion(POSITION_ZERO, base)).toBe(0n);
    const err = (() => {
      try {
        encodeVersion(makePosition(base + LSN_WINDOW, 0), base);
      } catch (e) {
        return e as PositionNotEncodableError;
      }
      return null;
    })();
    expect(err?.code).toBe('POSITION_NOT_ENCODABLE');
    expect(err?.message).toContain('rebuild');
  });

  it('the default base is the first position rounded down to a 4 GiB WAL boundary', () => {
    expect(searchBaseLsn(makePosition('2/7C007178', 3))).toBe(0x200000000n);
    expect(searchBaseLsn(POSITION_ZERO)).toBe(0n);
  });
});
