/**
 * The progress lines of a draining `cdc local` come from a timer on a thread of its own
 * (bin/cli/progress-ticker.ts; docs/local.md, "Bounded runs (`--duration`)"): while the main thread
 * is blocked (a comparison's long loop, a CPU-starved process), lines still reach the output, and
 * a line the main thread could not refresh says how old it is. A timer of the main thread prints
 * nothing while it is blocked: that is what the ticker replaces.
 */
import { afterEach, describe, expect, it } from 'vitest';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { printEvery } from '../../bin/cli/local-progress.ts';
import { ProgressTicker } from '../../bin/cli/progress-ticker.ts';
import { until } from '../local/helpers.ts';

/** Keeps this thread busy for `ms` (no timer of this thread runs meanwhile). */
function block(ms: number): void {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    // busy
  }
}

let dir: string | null = null;
afterEach(async () => {
  if (dir) await rm(dir, { recursive: true, force: true });
  dir = null;
});

async function outputFile(): Promise<{ fd: number; lines: () => string[] }> {
  dir = await mkdtemp(path.join(os.tmpdir(), 'progress-ticker-'));
  const file = path.join(dir, 'out.txt');
  const fd = openSync(file, 'a');
  return { fd, lines: () => readFileSync(file, 'utf8').split('\n').filter(Boolean) };
}

describe('progress lines on a timer of their own', () => {
  it('keep coming while the main thread is blocked for 2 s, and the stale ones say how old they are', async () => {
    const out = await outputFile();
    const ticker = new ProgressTicker({ fd: out.fd, everyMs: 150, staleMs: 400 });
    try {
      ticker.set('cdc local: draining');
      // The thread starts (slowly on a busy machine) before the main thread blocks.
      await until('the first line', () => out.lines().length > 0, 30_000);
      const before = out.lines().length;
      block(2_000);
      const during = out.lines().slice(before);
      expect(during.length, during.join('\n')).toBeGreaterThanOrEqual(3);
      expect(during.every((l) => l.startsWith('cdc local: draining'))).toBe(true);
      expect(during.at(-1)).toMatch(/^cdc local: draining \(as of \d+ s ago: the process is busy\)$/);
    } finally {
      await ticker.stop();
      closeSync(out.fd);
    }
  }, 60_000);

  it('printEvery with a descriptor: a fresh line each tick while the main thread runs, lines while it is blocked, none after stop', async () => {
    const out = await outputFile();
    let n = 0;
    const printedHere: string[] = [];
    const lines = printEvery(
      (t) => printedHere.push(t),
      200,
      () => `cdc local: line ${++n}`,
      out.fd,
    );
    try {
      await until('two lines', () => out.lines().length >= 2, 30_000);
      const before = out.lines().length;
      block(1_500);
      expect(out.lines().length - before).toBeGreaterThanOrEqual(2);
    } finally {
      await lines.stop();
    }
    const count = out.lines().length;
    await new Promise((r) => setTimeout(r, 500));
    expect(out.lines().length).toBe(count);
    // Printed by the ticker, not through this thread's print.
    expect(printedHere).toEqual([]);
    expect(new Set(out.lines()).size).toBeGreaterThan(1);
    closeSync(out.fd);
  }, 60_000);

  it('without a descriptor (a timer of the main thread) nothing is printed while the main thread is blocked', async () => {
    const printed: string[] = [];
    const lines = printEvery(
      (t) => printed.push(t),
      100,
      () => 'cdc local: line',
      null,
    );
    try {
      await until('a line', () => printed.length > 0, 30_000);
      const before = printed.length;
      block(1_000);
      expect(printed.length).toBe(before);
    } finally {
      await lines.stop();
    }
  }, 60_000);
});
