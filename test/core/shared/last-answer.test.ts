/**
 * `lastAnswer` (lambda/core/shared/last-answer.ts): the one-entry memo of the hot paths' functions
 * of a text. Over random sequences of arguments (the empty text and undefined among them, first
 * too), every answer is the function's own, the function runs only when the argument changed, and a
 * throw is not remembered (fast-check, seed printed).
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { lastAnswer } from '../../../lambda/core/shared/last-answer.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 500);

describe('lastAnswer', () => {
  it(`answers as the function does, calls it only when the argument changed, never remembers a throw (seed ${SEED})`, () => {
    const args = [undefined, '', 'a', 'b', 'bad'];
    const plain = (arg: string | undefined): string => {
      if (arg === 'bad') throw new Error(`refused ${arg}`);
      return `<${String(arg)}>`;
    };
    fc.assert(
      fc.property(fc.array(fc.constantFrom(...args), { minLength: 1, maxLength: 15 }), (sequence) => {
        let calls = 0;
        const memo = lastAnswer((arg: string | undefined) => (calls++, plain(arg)));
        let expectedCalls = 0;
        let remembered: { arg: string | undefined } | null = null;
        for (const arg of sequence) {
          if (remembered === null || remembered.arg !== arg) expectedCalls++;
          let want: string;
          try {
            want = plain(arg);
          } catch (e) {
            expect(() => memo(arg)).toThrow((e as Error).message);
            expect(calls).toBe(expectedCalls);
            continue;
          }
          expect(memo(arg)).toBe(want);
          expect(calls).toBe(expectedCalls);
          remembered = { arg };
        }
      }),
      { seed: SEED, numRuns: RUNS },
    );
  });
});
