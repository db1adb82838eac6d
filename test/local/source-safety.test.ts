/**
 * What the platform owes the source, against embedded PostgreSQL: `cdc doctor` on a misconfigured
 * and on a good source, the slot monitor on a foreign inactive slot pinning WAL, and a capture
 * slot invalidated by max_slot_wal_keep_size (set small, WAL generated, checkpoint), each with its
 * named outcome.
 */
import { PassThrough } from 'node:stream';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import pg from 'pg';
import { main } from '../../bin/cli/main.ts';
import { readSlotFacts } from '../../lambda/adapters/source-facts-pg.ts';
import type { CheckResult } from '../../lambda/core/operator/doctor-results.ts';
import { HistoryGapError } from '../../lambda/core/shared/errors.ts';
import { TableConfigIndex } from '../../lambda/core/tables/table-config.ts';
import { createSlotMonitorHandler } from '../../lambda/handlers/slot-monitor.ts';
import { SlotCapture } from '../../local/capture.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { renderStatus, renderStatusLine, type StatusSnapshot } from '../../local/status.ts';

let cluster: PostgresCluster;
let admin: pg.Client;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  admin = new pg.Client({ connectionString: cluster.url('postgres') });
  admin.on('error', () => undefined);
  await admin.connect();
});

afterAll(async () => {
  await admin?.end().catch(() => undefined);
  await cluster?.stop();
});

async function database(name: string, sql: string): Promise<pg.Client> {
  await cluster.createDatabase(name);
  const c = new pg.Client({ connectionString: cluster.url(name) });
  c.on('error', () => undefined);
  await c.connect();
  await c.query(sql);
  return c;
}

/** Runs `cdc <args>` in this process and collects its output. */
async function cdc(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (d: Buffer) => (out += d.toString()));
  stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await main(args, { stdin: new PassThrough(), stdout, stderr });
  return { code, stdout: out, stderr: err };
}

/** Moves the server's WAL on by about `segments` segments (16 MiB each): a write, then a segment switch, repeatedly. */
async function generateWal(c: pg.Client, segments: number): Promise<void> {
  await c.query('CREATE TABLE IF NOT EXISTS wal_filler (v text)');
  for (let i = 0; i < segments; i++) {
    await c.query("INSERT INTO wal_filler SELECT 'x' FROM generate_series(1, 10)");
    await admin.query('SELECT pg_switch_wal()');
  }
}

/** EMF lines Powertools prints while `fn` runs. */
async function emfLines<T>(fn: () => Promise<T>): Promise<{ result: T; lines: Array<Record<string, unknown>> }> {
  const lines: Array<Record<string, unknown>> = [];
  const write = process.stdout.write.bind(process.stdout);
  vi.spyOn(process.stdout, 'write').mockImplementation((chunk: string | Uint8Array, ...rest: unknown[]) => {
    const text = typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    if (text.trimStart().startsWith('{')) {
      for (const l of text.split('\n')) if (l.trim()) lines.push(JSON.parse(l) as Record<string, unknown>);
      return true;
    }
    return (write as (c: string | Uint8Array, ...r: unknown[]) => boolean)(chunk, ...rest);
  });
  try {
    return { result: await fn(), lines };
  } finally {
    vi.restoreAllMocks();
  }
}

describe('cdc doctor', () => {
  it('lists every failing check of a misconfigured source with its fix, reports a foreign inactive slot pinning WAL, and exits 1', async () => {
    const db = await database(
      'bad',
      `CREATE TABLE nokey (id int, v text);
       CREATE TABLE idx (id int PRIMARY KEY, email text NOT NULL);
       CREATE UNIQUE INDEX idx_email ON idx (email);
       ALTER TABLE idx REPLICA IDENTITY USING INDEX idx_email;
       CREATE TABLE nothing (id int PRIMARY KEY);
       ALTER TABLE nothing REPLICA IDENTITY NOTHING;
       CREATE TABLE secret (id int PRIMARY KEY);
       CREATE TABLE cdc_heartbeat (source_id text PRIMARY KEY, beat_at timestamptz NOT NULL);
       CREATE ROLE doctor_plain LOGIN;
       GRANT SELECT ON nokey, idx, nothing TO doctor_plain;`,
    );
    await admin.query("SELECT pg_create_logical_replication_slot('old_tool', 'test_decoding')");
    try {
      await generateWal(db, 2);
      const url = cluster.url('bad').replace('postgres@', 'doctor_plain@');
      const r = await cdc(['doctor', '--source', url, '--tables', 'public.nokey,public.idx,public.nothing,public.secret,public.missing', '--json']);
      expect(r.code).toBe(1);
      const report = JSON.parse(r.stdout) as { status: string; checks: CheckResult[] };
      expect(report.status).toBe('FAIL');
      const failed = report.checks.filter((c) => c.status === 'FAIL').map((c) => `${c.check}${c.subject ? ` ${c.subject}` : ''}`);
      expect(failed.sort()).toEqual(
        [
          'replication_grant',
          'heartbeat public.cdc_heartbeat',
          'primary_key public.nokey',
          'replica_identity public.nokey',
          'replica_identity public.idx',
          'replica_identity public.nothing',
          'select_grant public.secret',
          'table_exists public.missing',
        ].sort(),
      );
      for (const c of report.checks) expect(c.status === 'PASS' ? c.fix === null : typeof c.fix === 'string' && c.fix.length > 0).toBe(true);
      const idx = report.checks.find((c) => c.check === 'replica_identity' && c.subject === 'public.idx')!;
      expect(idx.message).toMatch(/USING INDEX on \(email\), which does not cover the key \(id\)/);
      const old = report.checks.find((c) => c.subject === 'slot old_tool')!;
      expect(old).toMatchObject({ check: 'slot_retained_wal', status: 'WARN' });
      expect(old.message).toMatch(/inactive and pins \d+\.\d MiB of WAL/);
      expect(report.checks.find((c) => c.check === 'max_slot_wal_keep_size')!.status).toBe('WARN');
      expect(report.checks.find((c) => c.check === 'tls')!.status).toBe('WARN');

      // The text report says the same, one line per check with the fix under it.
      const text = await cdc(['doctor', '--source', url, '--tables', 'public.idx']);
      expect(text.code).toBe(1);
      expect(text.stdout).toMatch(
        /^FAIL {2}replication_grant: "doctor_plain" lacks the replication privilege.*\n {6}fix: ALTER ROLE "doctor_plain" WITH REPLICATION;/m,
      );
      expect(text.stdout).toMatch(/^FAIL: \d+ failed, \d+ warnings, \d+ passed$/m);

      // The slot monitor sees the same foreign slot and warns on it separately, with the metric.
      const monitor = createSlotMonitorHandler({ source: 'bad', slot: 'cdc_bad', connection: { connectionString: cluster.url('bad') } });
      const { result: slots, lines } = await emfLines(() => monitor());
      const foreign = slots.slots.find((s) => s.slot === 'old_tool')!;
      expect(foreign).toMatchObject({ ours: false, active: false, level: 'warn' });
      expect(foreign.retainedBytes!).toBeGreaterThanOrEqual(16 * 1024 ** 2);
      expect(slots.own).toBeNull();
      const emf = lines.find((l) => 'SlotForeignInactiveBytes' in l)!;
      expect(emf.SlotForeignInactiveBytes).toBe(slots.foreignInactiveBytes);
      expect(emf).toMatchObject({ Source: 'bad' });
    } finally {
      await admin.query("SELECT pg_drop_replication_slot('old_tool')");
      await db.query('DROP OWNED BY doctor_plain').catch(() => undefined);
      await db.end();
      await admin.query('DROP ROLE IF EXISTS doctor_plain').catch(() => undefined);
    }
  });

  it('passes a good source (warnings only) and exits 0; usage errors exit 2', async () => {
    const db = await database(
      'good',
      'CREATE TABLE t (id int PRIMARY KEY, v text); CREATE TABLE cdc_heartbeat (source_id text PRIMARY KEY, beat_at timestamptz NOT NULL);',
    );
    await db.end();
    const r = await cdc(['doctor', '--source', cluster.url('good'), '--tables', 'public.t', '--json']);
    expect(r.code).toBe(0);
    const report = JSON.parse(r.stdout) as { status: string; checks: CheckResult[] };
    expect(report.checks.filter((c) => c.status === 'FAIL')).toEqual([]);
    expect(
      report.checks
        .filter((c) => c.status === 'WARN')
        .map((c) => c.check)
        .sort(),
    ).toEqual(['max_slot_wal_keep_size', 'tls']);
    expect((await cdc(['doctor'])).code).toBe(2);
    expect((await cdc(['doctor', '--source', cluster.url('good'), '--bogus'])).code).toBe(2);
    const help = await cdc(['doctor', '--help']);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^Usage: cdc doctor --source URL/);
  });
});

describe('slot invalidated by max_slot_wal_keep_size', () => {
  it('reports wal_status lost in the monitor and doctor, and the capture stops with HistoryGapError marking re-snapshot', async () => {
    const db = await database('inv', 'CREATE TABLE t (id int PRIMARY KEY, v text);');
    const controlPlane = new MemoryControlPlane();
    const tables = new TableConfigIndex([{ table: 'public.t', deleteMode: 'soft', mask: [], exclude: [] }]);
    const published: string[] = [];
    const options = {
      source: 'inv',
      sourceUrl: cluster.url('inv'),
      tables,
      controlPlane,
      publish: async (rs: Array<{ data: string }>) => void published.push(...rs.map((r) => r.data)),
      idleMs: 20,
    };
    const first = new SlotCapture(options);
    await first.start();
    await first.stop();
    await admin.query("ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'");
    await admin.query('SELECT pg_reload_conf()');
    try {
      await generateWal(db, 3);
      await admin.query('CHECKPOINT');
      const own = (await readSlotFacts(admin)).find((s) => s.name === 'cdc_inv')!;
      expect(own.walStatus).toBe('lost');

      const monitor = createSlotMonitorHandler({ source: 'inv', slot: 'cdc_inv', connection: { connectionString: cluster.url('inv') } });
      const { result: report, lines } = await emfLines(() => monitor());
      expect(report.own).toMatchObject({ level: 'lost', headroomBytes: 0 });
      expect(lines.find((l) => 'SlotHeadroomBytes' in l)?.SlotHeadroomBytes).toBe(0);

      const doctor = await cdc(['doctor', '--source', cluster.url('inv'), '--tables', 'public.t', '--slot', 'cdc_inv', '--json']);
      expect(doctor.code).toBe(1);
      const lost = (JSON.parse(doctor.stdout) as { checks: CheckResult[] }).checks.find((c) => c.check === 'slot_lost')!;
      expect(lost).toMatchObject({ status: 'FAIL', subject: 'slot cdc_inv' });

      const second = new SlotCapture(options);
      const error = await second.start().then(
        () => null,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(HistoryGapError);
      expect((error as Error).message).toMatch(/was invalidated \(wal_status lost/);
      const audit = await controlPlane.listAudit('inv');
      expect(audit.some((a) => a.action === 'needs-resnapshot' && a.table === 'public.t')).toBe(true);
      expect(audit.some((a) => a.action === 'capture-stopped' && a.detail.problem === 'slot-invalidated')).toBe(true);
    } finally {
      await admin.query('ALTER SYSTEM RESET max_slot_wal_keep_size');
      await admin.query('SELECT pg_reload_conf()');
      await admin.query("SELECT pg_drop_replication_slot('cdc_inv')").catch(() => undefined);
      await db.end();
    }
  });
});

describe("cdc local's status", () => {
  it('shows every slot with retained WAL and headroom, and the capture slot in the plain line', () => {
    const snapshot: StatusSnapshot = {
      now: 10_000,
      startedAt: 0,
      source: 'demo',
      where: [],
      capture: { state: 'running', transactions: 1, records: 1, recordsPerSecond: 0, lastCommitLsn: '0/1', slotRetainedBytes: 2 * 1024 * 1024, error: null },
      workload: null,
      consumers: [],
      sinks: [],
      tables: [],
      slots: [
        {
          slot: 'cdc_demo',
          ours: true,
          active: true,
          walStatus: 'reserved',
          confirmedLsn: '0/1A2B3C4',
          retainedBytes: 2 * 1024 * 1024,
          headroomBytes: 1022 * 1024 * 1024,
          level: 'ok',
        },
        {
          slot: 'old_tool',
          ours: false,
          active: false,
          walStatus: 'extended',
          retainedBytes: 40 * 1024 * 1024,
          headroomBytes: 984 * 1024 * 1024,
          level: 'warn',
        },
      ],
      deadLetters: 0,
      problems: [],
      hint: null,
    };
    const text = renderStatus(snapshot).join('\n');
    expect(text).toMatch(/slots \(retained WAL, headroom/);
    expect(text).toMatch(/slot +owner +active +wal_status +confirmed +retained +headroom +level/);
    expect(text).toMatch(/cdc_demo +capture +yes +reserved +0\/1A2B3C4 +2\.0 MiB +1022\.0 MiB +ok/);
    expect(text).toMatch(/old_tool +other +no +extended +- +40\.0 MiB +984\.0 MiB +warn/);
    const line = renderStatusLine(snapshot);
    expect(line).toContain('slot retains 2.0 MiB, headroom 1022.0 MiB');
    expect(line).toContain('SLOT old_tool warn');
  });
});
