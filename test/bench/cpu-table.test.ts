/**
 * The e2e bench's CPU table (bench/lib/cpu-table.ts): a live child is counted under the label it is
 * given, an ended one under the ended children of this process, and the rows are core-seconds per
 * 10,000 changes with a total.
 */
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { cpuRows, cpuSnapshot } from '../../bench/lib/cpu-table.ts';

/** A child that spends `ms` of CPU, then waits for stdin to close (so it can be measured alive). */
const BUSY = (ms: number): string =>
  `const u0 = process.cpuUsage(); while ((process.cpuUsage(u0).user + process.cpuUsage(u0).system) / 1000 < ${ms}) {} console.log('done'); process.stdin.resume(); process.stdin.on('end', () => process.exit(0));`;

describe.runIf(process.platform === 'linux')('cpu table', () => {
  it('counts a live child under its name and an ended one under the ended children; rows per 10,000 changes', async () => {
    const s0 = cpuSnapshot();
    const child = spawn(process.execPath, ['-e', BUSY(300)], { stdio: ['pipe', 'pipe', 'inherit'] });
    await new Promise<void>((resolve) => child.stdout.once('data', () => resolve()));
    const named = new Map([[child.pid!, 'the busy child']]);
    const alive = cpuRows(s0, cpuSnapshot(named), 20_000, 1000);
    const row = alive.find((r) => r.label === 'the busy child');
    expect(row?.ms).toBeGreaterThanOrEqual(290);
    expect(row!.coreSecondsPer10k).toBeCloseTo((row!.ms / 1000) * 0.5, 6);
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    child.stdin.end();
    await exited;
    const ended = cpuRows(s0, cpuSnapshot(named), 20_000, 1000);
    expect(ended.find((r) => r.label === 'the busy child')).toBeUndefined();
    expect(ended.find((r) => r.label === 'ended child processes (the load generator)')?.ms).toBeGreaterThanOrEqual(290);
    const total = ended.at(-1)!;
    expect(total.label).toBe('total');
    expect(total.ms).toBeCloseTo(
      ended.slice(0, -1).reduce((a, r) => a + r.ms, 0),
      6,
    );
  });
});
