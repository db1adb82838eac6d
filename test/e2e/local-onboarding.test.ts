/**
 * Onboarding at scale, end to end through the `cdc` command (docs/onboarding.md): `cdc local`
 * runs on capture rules; tables created and filled while it runs join by themselves (registered,
 * sink objects created, snapshotted, in status) and the bounded run's verdict matches for them
 * without a restart; a table without a key is named ineligible with its reason, an excluded one
 * as excluded, a dropped one is marked and stops cleanly. Then a mask added to a captured table
 * is refused (exit 3) without its acknowledgement, and with it the audit log and the status say
 * what was left behind (docs/masking.md).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { resetLocalState } from '../../local/stack.ts';
import { maskValue } from '../../lambda/core/tables/masking.ts';
import type { AuditEntry } from '../../lambda/core/shared/control-plane.ts';
import type { StatusReport } from '../../lambda/core/operator/operator.ts';
import { until } from '../local/helpers.ts';
import { runCdc, type CdcRun } from '../helpers/cdc-cli.ts';
import { mergeWarehouseTable } from '../helpers/warehouse-merge.ts';
import { expectVerdict, stateDirDiagnostics } from '../helpers/verdict-diagnostics.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'cdc.js');

let cluster: PostgresCluster;
let dir: string;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-e2e-onboarding-'));
}, 120_000);

afterAll(async () => {
  await resetLocalState(path.join(dir, 'state')).catch(() => undefined);
  await cluster?.stop();
  await rm(dir, { recursive: true, force: true });
});

function local(args: string[]): { output: () => string; exited: Promise<number | null> } {
  const c = spawn(process.execPath, [CLI, 'local', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  c.stdout.on('data', (d: Buffer) => (out += d.toString()));
  c.stderr.on('data', (d: Buffer) => (out += d.toString()));
  return { output: () => out, exited: new Promise((resolve) => c.on('exit', (code) => resolve(code))) };
}

/** Runs an operator command (`cdc status|audit`) in this process against the state folder. */
async function cdc(...args: string[]): Promise<CdcRun> {
  return runCdc([...args, '--state-dir', path.join(dir, 'state'), '--actor', 'e2e']);
}

describe('cdc local on capture rules', () => {
  it('tables created and filled during the run join and match; ineligible, excluded and dropped tables are named; a late mask is loud', async () => {
    await cluster.createDatabase('app');
    await cluster.createDatabase('dw');
    const app = new pg.Client({ connectionString: cluster.url('app') });
    app.on('error', () => undefined);
    await app.connect();
    const dw = new pg.Client({ connectionString: cluster.url('dw') });
    dw.on('error', () => undefined);
    await dw.connect();
    await app.query(`
      CREATE SCHEMA sales;
      CREATE TABLE public.customers (id int PRIMARY KEY, email text, name text);
      INSERT INTO public.customers SELECT g, 'c' || g || '@example.com', 'name ' || g FROM generate_series(1, 40) g;
      CREATE TABLE public.items (id int PRIMARY KEY, name text);
      INSERT INTO public.items SELECT g, 'item ' || g FROM generate_series(1, 120) g;
      CREATE TABLE public.audit_log (id int PRIMARY KEY, what text);
      CREATE TABLE public.nokey (msg text);
      CREATE TABLE public.doomed (id int PRIMARY KEY);
      INSERT INTO public.doomed SELECT generate_series(1, 5);`);
    const config = path.join(dir, 'tables.json');
    const settings = [
      { table: 'public.customers', mask: ['email'] },
      { match: 'public.*', excludeTables: ['public.audit_*'] },
      { match: 'sales.*', mask: ['email'], deleteMode: 'hard' },
    ];
    await writeFile(config, JSON.stringify(settings));
    const common = [
      '--source',
      cluster.url('app'),
      '--table-config',
      config,
      '--warehouse',
      cluster.url('dw'),
      '--source-id',
      'app',
      '--state-dir',
      path.join(dir, 'state'),
      '--no-search',
      '--snapshot-chunk',
      '50',
    ];

    const run = local([...common, '--duration', '35s']);
    await until('cdc local to start', () => /cdc local: (started|resumed) in/.test(run.output()), 240_000);
    // public.doomed joined (snapshotted into the warehouse) before it is dropped below.
    await until('public.doomed in the warehouse', async () => (await dw.query("SELECT to_regclass('app_public.doomed') AS t")).rows[0].t !== null, 120_000);
    // While it runs: a new table created and filled in one schema, another in a second, an
    // ineligible one, and a captured one dropped.
    await app.query(`CREATE TABLE public.fresh (id serial PRIMARY KEY, v text, n int);
      INSERT INTO public.fresh (v, n) SELECT 'v' || g, g FROM generate_series(1, 400) g;`);
    await app.query(`CREATE TABLE sales.leads (id int PRIMARY KEY, email varchar(100), score int);
      INSERT INTO sales.leads SELECT g, 'lead' || g || '@example.com', g FROM generate_series(1, 150) g;
      CREATE TABLE public.heap_log (line text); INSERT INTO public.heap_log VALUES ('x');
      DROP TABLE public.doomed;`);
    for (let i = 0; i < 20; i++) {
      await app.query('UPDATE public.fresh SET n = n + 1000 WHERE id % 20 = $1', [i]);
      await app.query('DELETE FROM public.fresh WHERE id = $1', [i * 17 + 3]);
      await app.query('INSERT INTO public.fresh (v, n) VALUES ($1, $2)', [`late ${i}`, i]);
      await app.query('UPDATE sales.leads SET score = score * 2 WHERE id % 10 = $1', [i % 10]);
      await app.query('DELETE FROM sales.leads WHERE id = $1', [i * 7 + 1]);
      await app.query('UPDATE public.items SET name = name || $2 WHERE id = $1', [i + 1, '!']);
      await new Promise((r) => setTimeout(r, 300));
    }
    const code = await run.exited;
    const out = run.output();
    await expectVerdict(out, 'verdict: MATCH', () => stateDirDiagnostics(path.join(dir, 'state'), { source: 'app', warehouseUrl: cluster.url('dw') }));
    for (const t of ['public.customers', 'public.items', 'public.fresh', 'sales.leads']) expect(out, out).toMatch(new RegExp(`ok +${t.replace('.', '\\.')}:`));
    expect(code, out).toBe(0);
    // The pre-flight and the live status named what the rules match but do not capture.
    expect(out).toMatch(
      /pre-flight WARN table_rule \(public\.nokey\): matches rule public\.\* but is not captured \(ineligible\): primary_key: public\.nokey has no primary key/,
    );
    expect(out).toMatch(/not captured: [^\n]*public\.audit_log excluded/);
    expect(out).toMatch(/not captured: [^\n]*public\.doomed dropped/);
    expect(out).toMatch(/not captured: [^\n]*public\.heap_log ineligible/);

    // The warehouse: the rule's mask and hard deletes on the table that joined.
    expect((await dw.query('SELECT email FROM app_sales.leads WHERE id = 2')).rows).toEqual([{ email: maskValue('lead2@example.com') }]);
    // Hard delete: gone from the view, and once the delta is merged (docs/warehouse-apply.md) no row of it is left in the base.
    expect((await dw.query('SELECT count(*)::int AS n FROM app_sales.leads WHERE id = 8')).rows[0].n).toBe(0);
    await mergeWarehouseTable(cluster.url('dw'), 'app', 'sales.leads', ['id'], 'hard');
    expect((await dw.query('SELECT count(*)::int AS n FROM app_sales._cdc_mirror_leads WHERE id = 8')).rows[0].n).toBe(0);
    expect((await dw.query("SELECT to_regclass('app_public.audit_log') AS a, to_regclass('app_public.nokey') AS b")).rows[0]).toEqual({ a: null, b: null });
    // The dropped table's sink objects are kept.
    expect((await dw.query("SELECT to_regclass('app_public.doomed') AS t")).rows[0].t).toBe('app_public.doomed');

    // cdc status and the audit log say the same.
    const status = JSON.parse((await cdc('status', '--json')).out) as StatusReport;
    expect(status.tables.map((t) => t.table)).toEqual(expect.arrayContaining(['public.fresh', 'sales.leads', 'public.items', 'public.doomed']));
    const fresh = status.tables.find((t) => t.table === 'public.fresh');
    // A table that got a dead letter is degraded: the reason (and cdc local's output) say why.
    expect(fresh, `${JSON.stringify(fresh)}\n${out}`).toMatchObject({ state: 'active', snapshot: { state: 'done' } });
    expect(status.tables.find((t) => t.table === 'public.doomed')).toMatchObject({ state: 'paused', stateReason: expect.stringMatching(/^TABLE_DROPPED: /) });
    expect(status.notCaptured).toEqual(
      expect.arrayContaining([
        expect.objectContaining({ table: 'public.nokey', verdict: 'ineligible', reasons: expect.arrayContaining([expect.stringContaining('no primary key')]) }),
        expect.objectContaining({ table: 'public.heap_log', verdict: 'ineligible' }),
        expect.objectContaining({ table: 'public.audit_log', verdict: 'excluded' }),
        expect.objectContaining({ table: 'public.doomed', verdict: 'dropped' }),
      ]),
    );
    const readable = await cdc('status');
    expect(readable.out).toMatch(/not captured: app\/public\.nokey ineligible: primary_key: /);
    const audit = JSON.parse((await cdc('audit', '--json')).out) as AuditEntry[];
    const actions = (table: string) => audit.filter((e) => e.table === table).map((e) => e.action);
    expect(actions('public.fresh')).toEqual(expect.arrayContaining(['table-discovered', 'request-snapshot', 'register-table', 'finish-snapshot']));
    expect(actions('public.nokey')).toContain('table-ineligible');
    expect(actions('public.audit_log')).toContain('table-excluded');
    expect(actions('public.doomed')).toEqual(expect.arrayContaining(['table-discovered', 'table-dropped', 'pause']));

    // A mask added to a captured table without its acknowledgement: refused, nothing started.
    await writeFile(config, JSON.stringify([{ table: 'public.items', mask: ['name'] }, ...settings]));
    const refused = local([...common, '--duration', '5s']);
    expect(await refused.exited).toBe(3);
    expect(refused.output()).toMatch(
      /refused: public\.items: mask name added while the table is captured; existing change-log records, archive files and sink rows of public\.items still hold the clear values of name/,
    );
    expect(refused.output()).not.toContain('cdc local: started');
    // With it: accepted, audited, the table marked for re-snapshot with what was left behind.
    await writeFile(config, JSON.stringify([{ table: 'public.items', mask: ['name'], acknowledgeLateRules: 'privacy review 42 (e2e)' }, ...settings]));
    // (--no-snapshot: the re-snapshot stays requested, so the table stays marked for the status below.)
    const accepted = local([...common, '--no-snapshot', '--duration', '5s']);
    await accepted.exited;
    expect(accepted.output()).toMatch(/public\.items: late rule acknowledged \(privacy review 42 \(e2e\)\); existing change-log records/);
    const late = (JSON.parse((await cdc('audit', '--table', 'public.items', '--json')).out) as AuditEntry[]).filter((e) => e.action === 'late-column-rules');
    expect(late.map((e) => e.outcome)).toEqual(['refused', 'done']);
    expect(late[1]!.detail).toMatchObject({
      addedMask: ['name'],
      acknowledgement: 'privacy review 42 (e2e)',
      needsResnapshot: true,
      needsSinkRebuild: true,
      leftBehind: expect.stringContaining('still hold the clear values of name'),
    });
    const after = JSON.parse((await cdc('status', 'public.items', '--json')).out) as StatusReport;
    expect(after.tables[0]!.stateReason).toMatch(
      /^LATE_COLUMN_RULES: mask name added \(acknowledged: privacy review 42 \(e2e\)\); existing change-log records, archive files and sink rows/,
    );
    await dw.end();
    await app.query("SELECT pg_drop_replication_slot('cdc_app')");
    await app.end();
  }, 600_000);
});
