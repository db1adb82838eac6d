import { describe, expect, it } from 'vitest';
import { highestPassed, searchHighestSustained } from '../../bench/lib/rate-search.ts';

const GRID = [0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.85, 1];

/** A pipeline that sustains every share up to `limit` (and one that fails at random around it, for noise). */
const upTo = (limit: number, asked: number[]) => async (share: number) => (asked.push(share), { share, pass: share <= limit });

describe('the search for the highest sustained rate', () => {
  it('runs the grid up to the first failure, then halves the interval around it', async () => {
    const asked: number[] = [];
    const steps = await searchHighestSustained(GRID, 2, upTo(0.43, asked));
    expect(asked).toEqual([0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.425, 0.4375]);
    expect(highestPassed(steps)?.share).toBe(0.425);
  });

  it('refines downwards when the midpoint fails, and not at all with refine 0 or no failure', async () => {
    const a: number[] = [];
    expect(highestPassed(await searchHighestSustained(GRID, 3, upTo(0.41, a)))?.share).toBe(0.4063);
    expect(a.slice(8)).toEqual([0.425, 0.4125, 0.4063]);
    const b: number[] = [];
    expect(highestPassed(await searchHighestSustained(GRID, 0, upTo(0.43, b)))?.share).toBe(0.4);
    expect(b.at(-1)).toBe(0.45);
    const c: number[] = [];
    expect(highestPassed(await searchHighestSustained(GRID, 2, upTo(2, c)))?.share).toBe(1);
    expect(c).toEqual(GRID);
  });

  it('starts the interval at 0 when the first step fails, and reports none passed when nothing does', async () => {
    const a: number[] = [];
    const steps = await searchHighestSustained(GRID, 2, upTo(0.07, a));
    expect(a).toEqual([0.1, 0.05, 0.075]);
    expect(highestPassed(steps)?.share).toBe(0.05);
    expect(highestPassed(await searchHighestSustained(GRID, 2, upTo(0, [])))).toBeNull();
  });

  it('keeps the highest share that passed, whatever order the steps passed in, over random limits', async () => {
    const seed = Number(process.env.CDC_TEST_SEED ?? Date.now() % 1_000_000);
    let x = seed;
    const rnd = () => (x = (x * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    for (let i = 0; i < 200; i++) {
      const limit = rnd() * 1.1;
      const refine = Math.floor(rnd() * 5);
      const steps = await searchHighestSustained(GRID, refine, upTo(limit, []));
      const best = highestPassed(steps);
      const gridBest = [...GRID].reverse().find((g) => g <= limit) ?? null;
      // Never worse than the grid alone, never above the limit, and within the refined interval's width of it.
      if (gridBest === null && best === null) continue;
      expect(best, `seed ${seed}, run ${i}`).not.toBeNull();
      expect(best!.share, `seed ${seed}, run ${i}`).toBeLessThanOrEqual(limit);
      if (gridBest !== null) expect(best!.share, `seed ${seed}, run ${i}`).toBeGreaterThanOrEqual(gridBest);
      const fail = steps.find((s) => !s.pass);
      if (fail) {
        const lo = gridBest ?? 0;
        expect(limit - best!.share, `seed ${seed}, run ${i}`).toBeLessThanOrEqual((fail.share - lo) / 2 ** refine + 1e-4);
      }
    }
    console.log(`rate search: 200 random limits, seed ${seed}`);
  });

  it('refuses a grid that does not ascend', async () => {
    await expect(searchHighestSustained([0.2, 0.1], 1, upTo(1, []))).rejects.toThrow(/ascend/);
  });
});
