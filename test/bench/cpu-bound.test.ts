/**
 * The cores' bound on a rate (bench/lib/cpu-bound.ts): the apply bench's row that says whether the
 * applier's CPU per event leaves room for logical replication's catch-up rate on this machine.
 */
import { describe, expect, it } from 'vitest';
import { coreBoundRate, cpuMicrosPerEvent } from '../../bench/lib/cpu-bound.ts';

describe('coreBoundRate', () => {
  it('is cores core-seconds a second over the CPU per event', () => {
    // 200,000 events in 5,000 ms of CPU: 25 µs each; two cores carry 80,000 a second, one 40,000.
    expect(coreBoundRate(200_000, 5_000, 2)).toBe(80_000);
    expect(coreBoundRate(200_000, 5_000, 1)).toBe(40_000);
    expect(coreBoundRate(200_000, 2_500, 2)).toBe(160_000);
  });

  it('refuses what has no bound', () => {
    expect(() => coreBoundRate(0, 5_000, 2)).toThrow(/events 0/);
    expect(() => coreBoundRate(200_000, 0, 2)).toThrow(/CPU 0 ms/);
    expect(() => coreBoundRate(200_000, Number.NaN, 2)).toThrow(RangeError);
    expect(() => coreBoundRate(200_000, 5_000, 0)).toThrow(/cores 0/);
  });
});

describe('cpuMicrosPerEvent', () => {
  it('is the CPU in microseconds over the events', () => {
    expect(cpuMicrosPerEvent(200_000, 5_000)).toBe(25);
    expect(() => cpuMicrosPerEvent(0, 5_000)).toThrow(/events 0/);
  });
});
