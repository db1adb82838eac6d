/**
 * End to end, the operator actions against a running `cdc local` (docs/operations.md): a source
 * with two tables; `cdc pause` of one for 10 minutes is accepted, writes to both continue, only
 * the paused table's warehouse rows stop changing; a 400-day pause exits 3 with the reason;
 * `cdc resume` brings the table level. Then a breaking schema change (a dropped column) pauses
 * exactly that table while the other flows; `cdc resume` without `--accept-schema` exits 3
 * naming the decision, with it the table catches up; `cdc audit --json` lists the accepted pause,
 * the resumes and the refusals; the bounded run's verdict matches.
 *
 * `cdc local` runs as its own process (bin/cdc.js); the operator commands run in this process
 * through the CLI's `main`, on the same state folder, as a second terminal would.
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
import type { AuditEntry } from '../../lambda/core/shared/control-plane.ts';
import type { StatusReport } from '../../lambda/core/operator/operator.ts';
import { until } from '../local/helpers.ts';
import { TABLE_RECORD_MAX_AGE_MS } from '../../lambda/core/shared/kept-table-records.ts';
import { runCdc, type CdcRun } from '../helpers/cdc-cli.ts';
import { expectVerdict, stateDirDiagnostics } from '../helpers/verdict-diagnostics.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'cdc.js');

let cluster: PostgresCluster;
let dir: string;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-e2e-operator-'));
}, 120_000);

afterAll(async () => {
  await resetLocalState(path.join(dir, 'state')).catch(() => undefined);
  await cluster?.stop();
  await rm(dir, { recursive: true, force: true });
});

/** Runs `cdc <args>` in this process; returns exit code, stdout and stderr. */
async function cdc(...args: string[]): Promise<CdcRun> {
  return runCdc([...args, '--state-dir', path.join(dir, 'state'), '--actor', 'e2e']);
}

describe('cdc pause / resume / audit against a running cdc local', () => {
  it('pauses one table while the other flows, refuses what it must, resumes level, and the verdict matches', async () => {
    await cluster.createDatabase('app');
    await cluster.createDatabase('dw');
    const app = new pg.Client({ connectionString: cluster.url('app') });
    await app.connect();
    const dw = new pg.Client({ connectionString: cluster.url('dw') });
    await dw.connect();
    await app.query(`
      CREATE TABLE public.kept (id int PRIMARY KEY, v text);
      CREATE TABLE public.held (id int PRIMARY KEY, v text, extra text);`);
    const child = spawn(
      process.execPath,
      [
        CLI,
        'local',
        '--source',
        cluster.url('app'),
        '--tables',
        'public.kept,public.held',
        '--warehouse',
        cluster.url('dw'),
        '--source-id',
        'app',
        '--state-dir',
        path.join(dir, 'state'),
        '--duration',
        '55s',
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    try {
      await until('cdc local to start', () => /cdc local: (started|resumed) in/.test(output), 240_000);
      const sourceRows = async (t: string) => (await app.query(`SELECT id, v FROM public.${t} ORDER BY id`)).rows as Array<{ id: number; v: string }>;
      const warehouseRows = async (t: string) => {
        const exists = (await dw.query(`SELECT to_regclass('app_public.${t}') AS r`)).rows[0].r;
        return exists ? ((await dw.query(`SELECT id::int AS id, v FROM app_public.${t} ORDER BY id`)).rows as Array<{ id: number; v: string }>) : [];
      };
      const level = async (t: string) => JSON.stringify(await sourceRows(t)) === JSON.stringify(await warehouseRows(t));

      await app.query("INSERT INTO kept SELECT g, 'k0' FROM generate_series(1, 20) g; INSERT INTO held SELECT g, 'h0', 'x' || g FROM generate_series(1, 20) g");
      await until('both tables in the warehouse', async () => (await level('kept')) && (await level('held')), 60_000);

      // Pause one table for 10 minutes: accepted once the table's initial snapshot is done (while
      // it runs, a pause is refused SNAPSHOT_RUNNING, exit 3, and nothing changes: asked again).
      let pause = await cdc('pause', 'public.held', '--for', '10m', '--reason', 'e2e: hold while the other flows');
      await until(
        'the snapshot of public.held to end, so the pause is accepted',
        async () => {
          if (pause.code === 3 && pause.err.includes('SNAPSHOT_RUNNING'))
            pause = await cdc('pause', 'public.held', '--for', '10m', '--reason', 'e2e: hold while the other flows');
          return !(pause.code === 3 && pause.err.includes('SNAPSHOT_RUNNING'));
        },
        60_000,
      );
      expect(pause.code, pause.err).toBe(0);
      expect(pause.out).toContain('app/public.held paused until');
      // A pause takes effect within the table records' bound (docs/architecture.md, "Table records kept for at most a second").
      await new Promise((r) => setTimeout(r, TABLE_RECORD_MAX_AGE_MS));
      const heldBefore = await warehouseRows('held');

      // Writes to both continue; only the paused table's warehouse rows stop changing.
      await app.query(
        "UPDATE kept SET v = 'k1'; UPDATE held SET v = 'h1'; INSERT INTO kept VALUES (21, 'k1'); INSERT INTO held VALUES (21, 'h1', 'x21'); DELETE FROM held WHERE id = 3",
      );
      await until('the other table to flow', () => level('kept'), 60_000);
      const status = await cdc('status', '--json');
      expect(status.code, status.err).toBe(0);
      const report = JSON.parse(status.out) as StatusReport;
      const heldStatus = report.tables.find((t) => t.table === 'public.held')!;
      expect(heldStatus.state).toBe('paused');
      await until(
        'the sink to hold the paused table',
        async () => {
          const s = JSON.parse((await cdc('status', 'public.held', '--json')).out) as StatusReport;
          return s.tables[0]!.sinks.some((k) => k.sink === 'warehouse' && k.heldFrom !== null);
        },
        30_000,
      );
      expect(report.tables.find((t) => t.table === 'public.kept')!.state).toBe('active');
      expect(await warehouseRows('held')).toEqual(heldBefore);
      const readable = await cdc('status');
      expect(readable.out).toMatch(/app +public\.held +paused +1 +warehouse/);

      // A pause longer than the change log keeps records: refused, exit 3, the reason on stderr.
      const tooLong = await cdc('pause', 'public.kept', '--for', '400d', '--reason', 'too long');
      expect(tooLong.code).toBe(3);
      expect(tooLong.err).toMatch(/refused \(PAUSE_OUTLIVES_RETENTION\): a pause of 400d would outlive the change log's retention \(1d\b/);

      // Resume: the sink replays the held range, then the table is level.
      const resume = await cdc('resume', 'public.held');
      expect(resume.code, resume.err).toBe(0);
      expect(resume.out).toMatch(/app\/public\.held is active; (sink search replays from \S+, )?sink warehouse replays from/);
      await until('the resumed table to be level', () => level('held'), 60_000);
      await app.query("UPDATE held SET v = 'h2' WHERE id <= 5");
      await until('the resumed table to apply live', () => level('held'), 30_000);

      // A breaking schema change pauses exactly that table; the other keeps flowing.
      await app.query("ALTER TABLE held DROP COLUMN extra; UPDATE held SET v = 'h3' WHERE id <= 10; INSERT INTO held VALUES (30, 'h3')");
      await app.query("UPDATE kept SET v = 'k3'");
      await until(
        'the breaking change to pause the table',
        async () => {
          const s = JSON.parse((await cdc('status', 'public.held', '--json')).out) as StatusReport;
          return s.tables[0]!.state === 'paused' && (s.tables[0]!.stateReason ?? '').startsWith('SCHEMA_BREAKING');
        },
        60_000,
      );
      await until('the other table to flow past the change', () => level('kept'), 60_000);
      expect(await level('held')).toBe(false);
      const noDecision = await cdc('resume', 'public.held');
      expect(noDecision.code).toBe(3);
      expect(noDecision.err).toMatch(/refused \(SCHEMA_DECISION_NEEDED\).*dropped/);
      expect(noDecision.err).toContain('--accept-schema');
      const accept = await cdc('resume', 'public.held', '--accept-schema');
      expect(accept.code, accept.err).toBe(0);
      await until('the accepted table to catch up', () => level('held'), 60_000);
      // What the mirror keeps of the dropped column (docs/operations.md): the column stays; a row
      // changed after the drop keeps the value it had (its events no longer carry the column, and
      // an absent column never overwrites), a row inserted after the drop has NULL.
      // Read through the view: what is not merged into the mirror yet is in the delta (docs/warehouse-apply.md).
      const extra = (await dw.query('SELECT id::int AS id, extra FROM app_public.held WHERE id IN (1, 15, 30) ORDER BY id')).rows;
      expect(extra).toEqual([
        { id: 1, extra: 'x1' },
        { id: 15, extra: 'x15' },
        { id: 30, extra: null },
      ]);

      // The audit log: the accepted pause, the resumes and the refusals.
      const audit = await cdc('audit', '--json');
      expect(audit.code, audit.err).toBe(0);
      // Who asks is the OS user the local door establishes; --actor is only the entry's note.
      const all = (JSON.parse(audit.out) as AuditEntry[]).filter((e) => e.detail.note === 'e2e');
      expect(all.length).toBeGreaterThan(0);
      for (const e of all) expect(e.actor).toBe(`os-user:${os.userInfo().username}`);
      // A pause asked while the snapshot still ran was refused SNAPSHOT_RUNNING and asked again
      // (above): each such refusal is audited too, before the accepted pause; how many depends on
      // the machine's speed (a loaded CI machine has some).
      const early = all.filter((e) => e.action === 'pause' && e.outcome === 'refused' && e.detail.code === 'SNAPSHOT_RUNNING');
      expect(early.every((e) => e.table === 'public.held' && all.indexOf(e) < all.findIndex((x) => x.action === 'pause' && x.outcome === 'done'))).toBe(true);
      const entries = all.filter((e) => !early.includes(e));
      expect(entries.map((e) => [e.action, e.table, e.outcome, e.detail.code ?? null])).toEqual([
        ['pause', 'public.held', 'done', null],
        ['pause', 'public.kept', 'refused', 'PAUSE_OUTLIVES_RETENTION'],
        ['resume', 'public.held', 'done', null],
        ['resume', 'public.held', 'refused', 'SCHEMA_DECISION_NEEDED'],
        ['resume', 'public.held', 'done', null],
      ]);
      expect(entries[4]!.detail).toMatchObject({ acceptSchema: true, decision: 'continue with schema version 2' });
      const since = await cdc('audit', '--table', 'public.kept', '--since', '10m');
      expect(since.out).toMatch(/os-user:\S+ +pause +app\/public\.kept +refused +PAUSE_OUTLIVES_RETENTION/);

      const code = await exited;
      await expectVerdict(output, 'verdict: MATCH', () => stateDirDiagnostics(path.join(dir, 'state'), { source: 'app', warehouseUrl: cluster.url('dw') }));
      expect(output).toMatch(/ok +public\.held:/);
      expect(code, output).toBe(0);
    } finally {
      if (child.exitCode === null) child.kill('SIGINT');
      await exited;
      await app.query("SELECT pg_drop_replication_slot('cdc_app') FROM pg_replication_slots WHERE slot_name = 'cdc_app'").catch(() => undefined);
      await app.end();
      await dw.end();
    }
  }, 300_000);
});
