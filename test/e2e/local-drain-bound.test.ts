/**
 * End to end, through the `cdc` command: a bounded demo run whose drain cannot finish within
 * `--max-drain` (a snapshot read 10 rows per chunk) stops at the bound with a verdict that says
 * what was not compared, never DIVERGED, exits 1 (docs/operations.md, "Exit codes"), and its status
 * page stays live through the drain (docs/local.md, "Bounded runs (`--duration`)", "The status page").
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { stopCdcProcess } from '../helpers/cdc-cli.ts';
import { resetLocalState } from '../../local/stack.ts';
import { until } from '../local/helpers.ts';
import type { LocalReport } from '../../bin/cli/local-report.ts';
import type { StatusPageBody } from '../../local/status-page.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'cdc.js');

let stateDir: string;
let child: ChildProcess | null = null;

beforeAll(async () => {
  stateDir = await mkdtemp(path.join(os.tmpdir(), 'cdc-drain-'));
});

afterAll(async () => {
  if (child) await stopCdcProcess(child);
  if (stateDir) await resetLocalState(stateDir).catch(() => rm(stateDir, { recursive: true, force: true }));
}, 60_000);

describe('cdc local --duration with --max-drain', () => {
  it('stops at the drain bound with tables not compared (never DIVERGED), exit 1, and a live status page during the drain', async () => {
    const args = ['local', '--demo', '--state-dir', stateDir, '--fast', '--duration', '3s', '--max-drain', '6s', '--snapshot-chunk', '10', '--json'];
    child = spawn(process.execPath, [CLI, ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const exited = new Promise<number | null>((resolve) => child!.on('exit', (code) => resolve(code)));

    await until('time to be up', async () => err.includes('time is up'), 90_000).catch((e: Error) => {
      throw new Error(`${e.message}; output so far:\n${err}`);
    });
    const timeUpAt = Date.now();
    const url = /status page on (http:\/\/127\.0\.0\.1:\d+\/)/.exec(err)?.[1];
    expect(url, err).toBeDefined();
    // While it drains the page shows the live status (newer than time-up) and the drain's progress.
    let seen: StatusPageBody | null = null;
    await until(
      'the status page to show a status from the drain, with its progress',
      async () => {
        seen = (await (await fetch(new URL('/status.json', url))).json()) as StatusPageBody;
        return (seen.status?.now ?? 0) > timeUpAt + 1500 && /draining for|drain bound/.test(seen.phase ?? '');
      },
      5_000,
    ).catch((e: Error) => {
      throw new Error(`${e.message}; last seen: ${JSON.stringify(seen).slice(0, 1000)}`);
    });

    const code = await exited;
    child = null;
    expect(err).toMatch(/the drain bound \(--max-drain 6\.0 s\) was reached before warehouse( and search)? caught up/);
    const report = JSON.parse(out) as LocalReport;
    expect(code, err.slice(-4000)).toBe(1);
    expect(report.exitCode).toBe(1);
    expect(report.outcome, JSON.stringify(report.verdicts)).toBe('incomplete');
    // The customers snapshot (5,000 rows, 10 per chunk) could not be through: not compared, with what was pending.
    const customers = report.verdicts.find((v) => v.sink === 'warehouse')?.tables.find((t) => t.table === 'public.customers');
    expect(customers?.notCompared?.pendingEvents, JSON.stringify(customers)).toBeGreaterThan(0);
    for (const v of report.verdicts)
      for (const t of v.tables) expect(t.match || t.notCompared !== undefined, `${v.sink} ${t.table}: ${JSON.stringify(t)}`).toBe(true);
    expect(err).toMatch(/open public\.customers: not compared: \d+ events not yet applied to warehouse/);
    expect(err).not.toMatch(/MISMATCH|Unhandled|ECONNREFUSED/);
  }, 150_000);
});
