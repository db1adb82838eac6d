import { execFileSync } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { applierNodeOptions, applierSemiSpaceMiB } from '../../contracts/env.ts';

/** The heap limit (MiB) of a Node.js process started with `NODE_OPTIONS`. */
function heapLimitMiB(nodeOptions: string): number {
  const out = execFileSync(process.execPath, ['-e', 'process.stdout.write(String(require("v8").getHeapStatistics().heap_size_limit / 2 ** 20))'], {
    env: { ...process.env, NODE_OPTIONS: nodeOptions },
    encoding: 'utf8',
  });
  return Number(out);
}

describe(`the warehouse applier's Node.js flags (docs/performance-log.md, "The applier's young generation")`, () => {
  it('a semi-space of 1/16 of the memory, at most 64 MiB, at least 1', () => {
    expect([128, 256, 512, 1024, 2048, 10240].map(applierSemiSpaceMiB)).toEqual([8, 16, 32, 64, 64, 64]);
    expect(applierSemiSpaceMiB(8)).toBe(1);
    expect(applierNodeOptions(1024)).toBe('--max-semi-space-size=64');
    expect(() => applierNodeOptions(0)).toThrow('memory must be a positive number of MiB, got 0');
    expect(() => applierNodeOptions(Number.NaN)).toThrow('got NaN');
  });

  it('Node.js takes them in NODE_OPTIONS and its young generation grows by three semi-spaces', () => {
    // A flag Node.js refuses in NODE_OPTIONS would make the function fail at start: this one starts, and takes effect.
    const small = heapLimitMiB(applierNodeOptions(512));
    const large = heapLimitMiB(applierNodeOptions(1024));
    expect(large - small).toBe(3 * (applierSemiSpaceMiB(1024) - applierSemiSpaceMiB(512)));
  });
});
