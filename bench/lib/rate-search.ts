/**
 * The search for the highest sustained rate (bench/e2e.ts): steps at growing shares of the
 * source-alone rate until one fails, then `refine` halvings of the interval between the last
 * step that passed and the first that failed. The grid alone places the rate only to within one
 * step (0.05× of the source alone, about 7 % of a rate near 0.7×); each halving halves that.
 * A step that passes inside the interval raises its lower end, one that fails lowers its upper end,
 * so the result is always a rate a step sustained, never one interpolated.
 */

/** One step as the search needs it: the share of the source-alone rate it asked for, and whether the pipeline sustained it. */
export interface SearchStep {
  share: number;
  pass: boolean;
}

/**
 * Runs `run` at each share of `grid` (ascending) until one fails, then at the midpoints of the
 * interval around the first failure, `refine` times. Returns every step run, in order.
 * With no failure there is nothing to refine; with a failure at the grid's first share the
 * interval starts at 0.
 */
export async function searchHighestSustained<S extends SearchStep>(grid: readonly number[], refine: number, run: (share: number) => Promise<S>): Promise<S[]> {
  for (let i = 1; i < grid.length; i++) if (!(grid[i]! > grid[i - 1]!)) throw new RangeError(`search steps must ascend: ${grid.join(', ')}`);
  if (!Number.isInteger(refine) || refine < 0) throw new RangeError(`refine must be a whole number ≥ 0, got ${refine}`);
  const steps: S[] = [];
  for (const share of grid) {
    const s = await run(share);
    steps.push(s);
    if (!s.pass) break;
  }
  const failed = steps.at(-1);
  if (!failed || failed.pass) return steps;
  let lo = steps.length > 1 ? steps.at(-2)!.share : 0;
  let hi = failed.share;
  for (let k = 0; k < refine; k++) {
    const mid = Math.round(((lo + hi) / 2) * 10_000) / 10_000;
    if (mid <= lo || mid >= hi) break;
    const s = await run(mid);
    steps.push(s);
    if (s.pass) lo = mid;
    else hi = mid;
  }
  return steps;
}

/** The step with the highest share that passed, or null. */
export function highestPassed<S extends SearchStep>(steps: readonly S[]): S | null {
  let best: S | null = null;
  for (const s of steps) if (s.pass && (best === null || s.share > best.share)) best = s;
  return best;
}
