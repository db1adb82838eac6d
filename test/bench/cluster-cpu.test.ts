/**
 * The benches' PostgreSQL CPU reading (bench/lib/profile.ts): `childrenOf` reads a process's live
 * children from its threads' `children` files and must name the same processes as the scan of
 * every process's parent; `clusterCpuMs` counts a live child's CPU and, once it has ended and been
 * reaped, the parent's counters hold it.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { childrenByScan, childrenOf, clusterCpuMs } from '../../bench/lib/profile.ts';

/** A child that spends `ms` of CPU, then waits for stdin to close (so it can be measured alive). */
const BUSY = (ms: number): string =>
  `const u0 = process.cpuUsage(); while ((process.cpuUsage(u0).user + process.cpuUsage(u0).system) / 1000 < ${ms}) {} console.log('done'); process.stdin.resume(); process.stdin.on('end', () => process.exit(0));`;

async function busyChild(ms: number): Promise<ChildProcess> {
  const child = spawn(process.execPath, ['-e', BUSY(ms)], { stdio: ['pipe', 'pipe', 'inherit'] });
  await new Promise<void>((resolve) => child.stdout!.once('data', () => resolve()));
  return child;
}

async function end(child: ChildProcess): Promise<void> {
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.stdin!.end();
  await exited;
}

describe.runIf(process.platform === 'linux')('cluster CPU reading', () => {
  it('names the same live children as the scan of /proc, and counts their CPU', async () => {
    const children = [await busyChild(250), await busyChild(10), await busyChild(10)];
    try {
      const pids = children.map((c) => c.pid!).sort((a, b) => a - b);
      const read = childrenOf(process.pid).sort((a, b) => a - b);
      expect(read).toEqual(childrenByScan(process.pid).sort((a, b) => a - b));
      for (const pid of pids) expect(read).toContain(pid);
      // This process's own CPU is in the reading too; the busy child's 250 ms are what this checks.
      const own = process.cpuUsage();
      const withChildren = clusterCpuMs(process.pid);
      expect(withChildren - (own.user + own.system) / 1000).toBeGreaterThanOrEqual(240);
    } finally {
      for (const c of children) await end(c);
    }
    expect(childrenOf(process.pid)).not.toContain(children[0]!.pid);
  });
});
