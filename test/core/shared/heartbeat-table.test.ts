/**
 * `isHeartbeatTable` (lambda/core/shared/identifiers.ts): whether a table id names the heartbeat
 * table, split once per run of calls naming one table; the same answer and the same refusal as
 * `splitTableId`, in any sequence of ids (fast-check, seed printed).
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { HEARTBEAT_TABLE } from '../../../contracts/env.ts';
import { isHeartbeatTable, splitTableId } from '../../../lambda/core/shared/identifiers.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 500);

describe('isHeartbeatTable', () => {
  it(`answers as splitTableId does, in any sequence of ids: the same answer, the same refusal (seed ${SEED})`, () => {
    const ids = [
      'cdc.' + HEARTBEAT_TABLE,
      'public.orders',
      'public.' + HEARTBEAT_TABLE,
      HEARTBEAT_TABLE,
      'a.b.c',
      'public."x"',
      '',
      'cdc.' + HEARTBEAT_TABLE + '_old',
    ];
    const reference = (id: string): boolean | string => {
      try {
        return splitTableId(id).table === HEARTBEAT_TABLE;
      } catch (e) {
        return (e as Error).message;
      }
    };
    // The empty id first: it is refused before any other was asked about.
    expect(() => isHeartbeatTable('')).toThrow();
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...ids), { minLength: 1, maxLength: 12 }), (sequence) => {
        for (const id of sequence) {
          let got: boolean | string;
          try {
            got = isHeartbeatTable(id);
          } catch (e) {
            got = (e as Error).message;
          }
          expect(got, id).toBe(reference(id));
        }
      }),
      { seed: SEED, numRuns: RUNS },
    );
  });
});
