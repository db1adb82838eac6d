/**
 * End to end, through the `cdc` command: Ctrl-C and SIGTERM are clean stops (docs/local.md,
 * "Stopping"). `cdc local` is started as the leader of its own process group, as a shell starts a
 * foreground job, and SIGINT goes to the whole group, as a terminal's Ctrl-C does: once in the
 * middle of the snapshot (while a bounded run waits for its sinks), once in the middle of the
 * workload. Then SIGTERM to the cdc process
 * alone. Each stop must exit 0 with no unhandled error and no retry line (consumers stop before
 * the servers they use), remove the lock, leave no server process behind, and shut PostgreSQL
 * down cleanly (the next start does no crash recovery). A bounded run then resumes and its
 * verdicts match.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { DEMO_SEED_ROWS } from '../../local/demo.ts';
import { resetLocalState, WAREHOUSE_DATABASE, type LocalState } from '../../local/stack.ts';
import { until } from '../local/helpers.ts';
import { expectVerdict, stateDirDiagnostics } from '../helpers/verdict-diagnostics.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'cdc.js');

let stateDir: string;
let running: ChildProcess | null = null;

interface Run {
  child: ChildProcess;
  output: () => string;
  exited: Promise<{ code: number | null; signal: NodeJS.Signals | null }>;
}

/** Starts `cdc local` as the leader of a process group of its own (a shell's foreground job). */
function cdc(args: string[]): Run {
  const c = spawn(process.execPath, [CLI, 'local', '--demo', '--state-dir', stateDir, '--fast', '--rate', '30', ...args], {
    cwd: ROOT,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true,
  });
  running = c;
  let out = '';
  c.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  c.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => c.on('exit', (code, signal) => resolve({ code, signal })));
  return { child: c, output: () => out, exited };
}

function state(): LocalState {
  return JSON.parse(readFileSync(path.join(stateDir, 'state.json'), 'utf8')) as LocalState;
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Every process under `pid` (children, their children, ...). */
function descendants(pid: number): number[] {
  let text = '';
  try {
    text = execFileSync('ps', ['-e', '-o', 'pid=,ppid='], { encoding: 'utf8' });
  } catch {
    return [];
  }
  const pairs = text
    .trim()
    .split('\n')
    .map((l) => l.trim().split(/\s+/).map(Number) as [number, number]);
  const found: number[] = [];
  const walk = (p: number): void => {
    for (const [child, parent] of pairs) {
      if (parent !== p || found.includes(child)) continue;
      found.push(child);
      walk(child);
    }
  };
  walk(pid);
  return found;
}

async function count(sql: string): Promise<number | null> {
  if (!existsSync(path.join(stateDir, 'state.json'))) return null;
  const port = state().ports.postgres;
  if (!port) return null;
  const client = new pg.Client({ host: '127.0.0.1', port, user: 'postgres', database: WAREHOUSE_DATABASE, connectionTimeoutMillis: 2000 });
  client.on('error', () => undefined);
  try {
    await client.connect();
    return ((await client.query(sql)).rows[0] as { n: number }).n;
  } catch {
    return null;
  } finally {
    await client.end().catch(() => undefined);
  }
}

function postgresLog(): string {
  return readFileSync(path.join(stateDir, 'logs', 'postgres.log'), 'utf8');
}

/** Waits for a run to reach `ready`, records its server processes, stops it with `stop`, and checks the stop was clean. */
async function stopCleanly(run: Run, what: string, ready: () => Promise<boolean>, stop: (pid: number) => void): Promise<string> {
  await until(
    what,
    async () => {
      if (run.child.exitCode !== null) throw new Error(`cdc local exited early (${run.child.exitCode}):\n${run.output()}`);
      return ready();
    },
    120_000,
  );
  const servers = descendants(run.child.pid!);
  expect(servers.length, `server processes under cdc local: ${servers.join(', ')}`).toBeGreaterThanOrEqual(3);
  const logBefore = postgresLog().length;
  stop(run.child.pid!);
  const { code, signal } = await run.exited;
  running = null;
  const out = run.output();
  expect({ code, signal }, out).toEqual({ code: 0, signal: null });
  expect(out, out).toMatch(/cdc local: stopping/);
  expect(out, out).toMatch(/cdc local: stopped/);
  for (const bad of [/unhandled/i, /uncaught/i, /ECONNREFUSED/, /\(retrying\)/, /57P01/, /Connection terminated/i, /second interrupt/])
    expect(out, out).not.toMatch(bad);
  expect(existsSync(path.join(stateDir, 'lock')), 'lock removed').toBe(false);
  // No server outlives the run: PostgreSQL (and its backends), DynamoDB Local, kinesalite.
  await until('the servers of the run to be gone', () => servers.every((p) => !alive(p)), 15_000).catch(() => undefined);
  expect(servers.filter(alive), 'processes left behind').toEqual([]);
  // PostgreSQL stopped by a fast shutdown it completed (its pid file is removed only then).
  expect(postgresLog().slice(logBefore), 'PostgreSQL log of the stop').toMatch(/database system is shut down/);
  expect(existsSync(path.join(state().postgresDataDir!, 'postmaster.pid')), 'postmaster.pid gone').toBe(false);
  return out;
}

beforeAll(async () => {
  stateDir = await mkdtemp(path.join(os.tmpdir(), 'cdc-e2e-signals-'));
});

afterAll(async () => {
  if (running && running.exitCode === null && running.signalCode === null) {
    try {
      process.kill(-running.pid!, 'SIGKILL');
    } catch {
      running.kill('SIGKILL');
    }
  }
  if (stateDir) await resetLocalState(stateDir).catch(() => rm(stateDir, { recursive: true, force: true }));
});

describe('cdc local stops cleanly on Ctrl-C and SIGTERM', () => {
  it('SIGINT to the process group mid-snapshot and mid-apply, SIGTERM to cdc alone: exit 0, no unhandled error, lock removed, PostgreSQL shut down, nothing left; the next run resumes and matches', async () => {
    const seeded = "SELECT count(*)::int AS n FROM demo_public.customers WHERE name LIKE 'Seeded Customer %'";
    // 1. Mid-snapshot, while a bounded run waits for the sinks to catch up (a signal there was
    // once ignored): small unpaced chunks keep the snapshot of the seeded rows going for a while.
    let atSignal: number | null = null;
    const first = cdc(['--snapshot-chunk', '25', '--duration', '1s']);
    const out1 = await stopCleanly(
      first,
      'the drain of a bounded run, with the snapshot in the warehouse',
      async () => {
        if (!/time is up/.test(first.output())) return false;
        atSignal = await count(seeded);
        return atSignal !== null && atSignal > 0;
      },
      (pid) => process.kill(-pid, 'SIGINT'),
    );
    expect(atSignal!, 'stopped in the middle of the snapshot').toBeLessThan(DEMO_SEED_ROWS.customers);
    expect(out1, out1).toMatch(/stopped before the verdict \(SIGINT\)/);
    expect(out1, out1).not.toMatch(/verdict: /);

    // 2. Mid-apply: the resumed run's workload is flowing into the warehouse.
    const second = cdc(['--snapshot-chunk', '500']);
    let firstOrders: number | null = null;
    const out2 = await stopCleanly(
      second,
      'workload changes to flow into the warehouse',
      async () => {
        const n = await count('SELECT count(*)::int AS n FROM demo_public.orders WHERE id > ' + DEMO_SEED_ROWS.orders);
        if (n === null) return false;
        firstOrders ??= n;
        return n >= firstOrders + 15;
      },
      (pid) => process.kill(-pid, 'SIGINT'),
    );
    expect(out2, out2).toContain('resumed');

    // 3. SIGTERM to the cdc process alone (a service manager, a timeout): consumers stop before the servers.
    const third = cdc(['--snapshot-chunk', '500']);
    let baseline: number | null = null;
    await stopCleanly(
      third,
      'the third run to apply changes',
      async () => {
        const n = await count('SELECT count(*)::int AS n FROM demo_public.orders');
        if (n === null) return false;
        baseline ??= n;
        return n >= baseline + 15;
      },
      (pid) => process.kill(pid, 'SIGTERM'),
    );

    // 4. The next run resumes from the checkpoints and its verdicts match; PostgreSQL did no crash recovery at any start.
    const last = cdc(['--snapshot-chunk', '500', '--duration', '8s']);
    const { code } = await last.exited;
    running = null;
    const out = last.output();
    expect(out, out).toContain('resumed');
    await expectVerdict(out, 'verdict: MATCH', () => stateDirDiagnostics(stateDir, { source: 'demo' }));
    expect(out, out).toContain('verdict (search index): MATCH');
    expect(code, out).toBe(0);
    const log = postgresLog();
    expect(log).not.toMatch(/not properly shut down|automatic recovery in progress|was interrupted/);
    expect(log.match(/database system was shut down at/g)?.length ?? 0, 'clean restarts of PostgreSQL').toBeGreaterThanOrEqual(3);
  }, 600_000);

  it('a second Ctrl-C exits at once with 130 and still stops every server; the lock is removed', async () => {
    const run = cdc(['--snapshot-chunk', '500']);
    await until(
      'the run to start',
      () => {
        if (run.child.exitCode !== null) throw new Error(`cdc local exited early (${run.child.exitCode}):\n${run.output()}`);
        return /cdc local: resumed in/.test(run.output());
      },
      120_000,
    );
    const servers = descendants(run.child.pid!);
    expect(servers.length, `server processes under cdc local: ${servers.join(', ')}`).toBeGreaterThanOrEqual(3);
    process.kill(-run.child.pid!, 'SIGINT');
    await until('the clean stop to begin', () => /SIGINT received/.test(run.output()), 10_000);
    process.kill(-run.child.pid!, 'SIGINT');
    const { code } = await run.exited;
    running = null;
    const out = run.output();
    expect(code, out).toBe(130);
    expect(out, out).toMatch(/second signal \(SIGINT\)/);
    expect(out, out).not.toMatch(/unhandled|uncaught/i);
    expect(existsSync(path.join(stateDir, 'lock')), 'lock removed').toBe(false);
    // The servers were told to stop and do so by themselves (PostgreSQL completes its fast shutdown).
    await until('the servers of the forced run to be gone', () => servers.every((p) => !alive(p)), 30_000).catch(() => undefined);
    expect(servers.filter(alive), 'processes left behind').toEqual([]);
    expect(existsSync(path.join(state().postgresDataDir!, 'postmaster.pid')), 'postmaster.pid gone').toBe(false);
  }, 300_000);
});
