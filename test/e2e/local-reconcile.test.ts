/**
 * End to end, `cdc reconcile` against a running `cdc local` (docs/reconcile.md): a source with two
 * tables, `victim` and `busy`, captured into the warehouse. A steady workload runs on `busy` the
 * whole time (inserts of new keys and updates of old ones).
 *
 * 1. Under the live workload with no corruption, repeated reconciliation never says DIVERGED
 *    (rows in flight settle on the re-check), and says MATCH for both tables.
 * 2. The warehouse mirror of `victim` is corrupted behind the platform's back (a value changed,
 *    a row deleted, a row the source never had added): `cdc reconcile` exits 1 naming `victim`
 *    and exactly those keys, and says MATCH for `busy`; the verdicts are in the control plane.
 *
 * `cdc local` runs as its own process (bin/cdc.js); `cdc reconcile` runs in this process through
 * the CLI's `main`, on the same state folder, as a second terminal would.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { resetLocalState } from '../../local/stack.ts';
import type { ReconcileVerdict } from '../../lambda/core/reconcile/reconcile.ts';
import { until } from '../local/helpers.ts';
import { mergeWarehouseTable } from '../helpers/warehouse-merge.ts';
import { runCdc, type CdcRun } from '../helpers/cdc-cli.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'cdc.js');

let cluster: PostgresCluster;
let dir: string;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-e2e-reconcile-'));
}, 120_000);

afterAll(async () => {
  await resetLocalState(path.join(dir, 'state')).catch(() => undefined);
  await cluster?.stop();
  await rm(dir, { recursive: true, force: true });
});

async function cdc(...args: string[]): Promise<CdcRun> {
  return runCdc([...args, '--state-dir', path.join(dir, 'state')]);
}

describe('cdc reconcile against a running cdc local', () => {
  it('never says DIVERGED under a live workload, then names the corrupted table and keys and MATCH for the other', async () => {
    await cluster.createDatabase('app');
    await cluster.createDatabase('dw');
    const app = new pg.Client({ connectionString: cluster.url('app') });
    await app.connect();
    const dw = new pg.Client({ connectionString: cluster.url('dw') });
    await dw.connect();
    await app.query(`
      CREATE TABLE public.victim (id int PRIMARY KEY, v text, n int);
      CREATE TABLE public.busy (id int PRIMARY KEY, v text, n int);
      INSERT INTO public.victim SELECT g, 'v' || g, g % 7 FROM generate_series(1, 400) g;
      INSERT INTO public.busy SELECT g, 'b' || g, 0 FROM generate_series(1, 2000) g;`);
    const child = spawn(
      process.execPath,
      [
        CLI,
        'local',
        '--source',
        cluster.url('app'),
        '--tables',
        'public.victim,public.busy',
        '--warehouse',
        cluster.url('dw'),
        '--source-id',
        'app',
        '--state-dir',
        path.join(dir, 'state'),
        '--no-search',
        '--heartbeat-ms',
        '500',
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    let stop = false;
    let workload: Promise<void> = Promise.resolve();
    // Not a test of the pacer: on a loaded machine the source probe's noise alone exceeds the default
    // budget (10 % added write latency), and the pacer then rightly slows the reads to a crawl.
    const reconcile = (...extra: string[]) =>
      cdc('reconcile', '--source', cluster.url('app'), '--warehouse', cluster.url('dw'), '--settle', '2s', '--source-budget', '100000', '--json', ...extra);
    // A wait that times out says what cdc local printed (the test's own time limit would not).
    const waitFor = async (what: string, check: () => boolean | Promise<boolean>, ms: number): Promise<void> => {
      try {
        await until(what, check, ms);
      } catch (err) {
        throw new Error(`${(err as Error).message}; cdc local printed:\n${output.slice(-4000)}`);
      }
    };
    try {
      await waitFor('cdc local to start', () => /cdc local: (started|resumed) in/.test(output), 240_000);
      const count = async (t: string) =>
        Number((await dw.query(`SELECT count(*) AS n FROM (SELECT 1 FROM app_public.${t}) x`).catch(() => ({ rows: [{ n: 0 }] }))).rows[0].n);
      await waitFor('both snapshots in the warehouse', async () => (await count('victim')) === 400 && (await count('busy')) === 2000, 180_000);

      // The steady workload on busy: new keys and updates of old ones, ~25 transactions a second.
      const w = new pg.Client({ connectionString: cluster.url('app') });
      await w.connect();
      let next = 2001;
      let writes = 0;
      workload = (async () => {
        while (!stop) {
          await w.query('BEGIN');
          await w.query("INSERT INTO public.busy VALUES ($1, 'new', 0)", [next++]);
          await w.query('UPDATE public.busy SET n = n + 1, v = $2 WHERE id = $1', [1 + Math.floor(Math.random() * (next - 1)), `u${writes}`]);
          await w.query('COMMIT');
          writes++;
          await new Promise((r) => setTimeout(r, 40));
        }
        await w.end();
      })();
      await waitFor('the workload to flow', () => writes > 20, 30_000);

      // 1. No corruption: repeated reconciliation never says DIVERGED.
      const verdicts: ReconcileVerdict[] = [];
      for (let i = 0; i < 3; i++) {
        const r = await reconcile();
        expect(r.code, `${r.out}\n${r.err}`).not.toBe(1);
        const parsed = JSON.parse(r.out) as { exitCode: number; verdicts: ReconcileVerdict[] };
        expect(parsed.verdicts.map((v) => v.table).sort()).toEqual(['public.busy', 'public.victim']);
        verdicts.push(...parsed.verdicts);
      }
      expect(verdicts.filter((v) => v.verdict === 'DIVERGED')).toEqual([]);
      expect(verdicts.filter((v) => v.table === 'public.victim').map((v) => v.verdict)).toEqual(['MATCH', 'MATCH', 'MATCH']);
      expect(
        verdicts.some((v) => v.table === 'public.busy' && v.verdict === 'MATCH'),
        JSON.stringify(verdicts.map((v) => [v.table, v.verdict, v.reason])),
      ).toBe(true);

      // 2. Corrupt the victim's mirror behind the platform's back (merged first: rows still in the delta would hide it).
      await mergeWarehouseTable(cluster.url('dw'), 'app', 'public.victim', ['id']);
      await dw.query("UPDATE app_public._cdc_mirror_victim SET v = 'tampered' WHERE id = 7");
      await dw.query('DELETE FROM app_public._cdc_mirror_victim WHERE id = 42');
      await dw.query(
        "INSERT INTO app_public._cdc_mirror_victim (id, v, n, _cdc_position, _cdc_deleted, _cdc_applied_at) VALUES (100000, 'never', 1, '000000000000000000000001', false, now())",
      );
      let busyVerdict: ReconcileVerdict | undefined;
      for (let attempt = 0; attempt < 3 && busyVerdict?.verdict !== 'MATCH'; attempt++) {
        const r = await reconcile();
        expect(r.code, `${r.out}\n${r.err}`).toBe(1);
        const parsed = JSON.parse(r.out) as { exitCode: number; verdicts: ReconcileVerdict[] };
        const victim = parsed.verdicts.find((v) => v.table === 'public.victim')!;
        expect(victim.verdict).toBe('DIVERGED');
        expect(victim.sampleKeys.map((s) => [s.key.id, s.kind, s.column ?? null]).sort()).toEqual([
          ['100000', 'extra', null],
          ['42', 'missing', null],
          ['7', 'different', 'v'],
        ]);
        expect(victim.diverged).toEqual({ missing: 1, extra: 1, different: 1 });
        busyVerdict = parsed.verdicts.find((v) => v.table === 'public.busy')!;
        expect(busyVerdict.verdict, busyVerdict.reason).not.toBe('DIVERGED');
      }
      expect(busyVerdict?.verdict, busyVerdict?.reason).toBe('MATCH');

      // The readable form names the table and the keys.
      const text = await cdc(
        'reconcile',
        '--table',
        'public.victim',
        '--source',
        cluster.url('app'),
        '--warehouse',
        cluster.url('dw'),
        '--settle',
        '1s',
        '--source-budget',
        '100000',
      );
      expect(text.code).toBe(1);
      expect(text.out).toMatch(/DIVERGED +app\/public\.victim \(warehouse\): 1 missing, 1 extra, 1 different/);
      expect(text.out).toContain('key id=7: v differs');
      expect(text.out).toContain('key id=42: missing in the sink');
      expect(text.out).toContain('key id=100000: in the sink but not in the source');
      // Usage errors exit 2.
      expect((await cdc('reconcile', '--table', 'public.nope', '--source', cluster.url('app'), '--warehouse', cluster.url('dw'))).code).toBe(2);
    } finally {
      stop = true;
      await workload.catch(() => undefined);
      if (child.exitCode === null) child.kill('SIGINT');
      // A clean stop finishes the batches in flight; one that hangs is killed, never waited on forever.
      const killer = setTimeout(() => child.kill('SIGKILL'), 30_000);
      await exited;
      clearTimeout(killer);
      await app.query("SELECT pg_drop_replication_slot('cdc_app') FROM pg_replication_slots WHERE slot_name = 'cdc_app'").catch(() => undefined);
      await app.end();
      await dw.end();
    }
  }, 600_000);
});
