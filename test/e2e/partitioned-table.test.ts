/**
 * A partitioned table captured as one table, end to end through `cdc local` on a capture rule
 * (docs/partitioned-tables.md). `public.ev` is partitioned by month into 30 partitions and holds
 * 3000 rows before the run; `public.store` is an ordinary table beside it. After the snapshot has
 * finished, a workload inserts into several partitions, moves rows between partitions (updates
 * of the partition key, which is part of the primary key), updates and deletes rows, creates a
 * partition (`CREATE TABLE … PARTITION OF`) and fills it, and detaches a partition that holds
 * rows (and writes to it afterwards). At the end the warehouse view and the search index each hold
 * one table named after the root, equal to the source's root row by row (the bounded run's
 * verdicts, which compare every captured table); no partition is a table of its own anywhere;
 * `cdc status` names the root and not a partition; the detached partition's rows left the root's
 * copy through the re-snapshot the detach asked for.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { resetLocalState } from '../../local/stack.ts';
import type { AuditEntry } from '../../lambda/core/shared/control-plane.ts';
import type { StatusReport } from '../../lambda/core/operator/operator.ts';
import type { ReconcileVerdict } from '../../lambda/core/reconcile/reconcile.ts';
import { until } from '../local/helpers.ts';
import { runCdc, type CdcRun } from '../helpers/cdc-cli.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'cdc.js');
const MONTHS = 30; // 2024-01 … 2026-06
const DETACHED = 'ev_2024_03';

let cluster: PostgresCluster;
let dir: string;
let child: ChildProcess | null = null;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-e2e-partitioned-'));
}, 120_000);

afterAll(async () => {
  // A failed assertion leaves cdc local running: stop it (it stops its stand-ins) before the source goes.
  if (child && child.exitCode === null && child.signalCode === null) {
    const gone = new Promise((r) => child!.once('exit', r));
    child.kill('SIGTERM');
    await Promise.race([gone, new Promise((r) => setTimeout(r, 60_000))]);
  }
  await resetLocalState(path.join(dir, 'state')).catch(() => undefined);
  await cluster?.stop();
  await rm(dir, { recursive: true, force: true });
}, 120_000);

const month = (m: number): string => new Date(Date.UTC(2024, m, 1)).toISOString().slice(0, 7).replace('-', '_');
const monthStart = (m: number): string => new Date(Date.UTC(2024, m, 1)).toISOString();

async function cdc(...args: string[]): Promise<CdcRun> {
  return runCdc([...args, '--state-dir', path.join(dir, 'state'), '--actor', 'e2e']);
}

describe('a partitioned table through cdc local', () => {
  it('arrives as one table named after the root, snapshot and live changes, moves, a new and a detached partition', async () => {
    await cluster.createDatabase('app');
    await cluster.createDatabase('dw');
    const app = new pg.Client({ connectionString: cluster.url('app') });
    app.on('error', () => undefined);
    await app.connect();
    const dw = new pg.Client({ connectionString: cluster.url('dw') });
    dw.on('error', () => undefined);
    await dw.connect();
    const ddl = [
      'CREATE TABLE public.ev (id bigint NOT NULL, at timestamptz NOT NULL, amount numeric(10,2), note text, PRIMARY KEY (id, at)) PARTITION BY RANGE (at)',
    ];
    for (let m = 0; m < MONTHS; m++)
      ddl.push(`CREATE TABLE public.ev_${month(m)} PARTITION OF public.ev FOR VALUES FROM ('${monthStart(m)}') TO ('${monthStart(m + 1)}')`);
    await app.query(ddl.join(';\n'));
    // 100 rows per month, spread over the month.
    await app.query(
      `INSERT INTO public.ev SELECT g, timestamptz '2024-01-01' + ((g - 1) / 100) * interval '1 month' + ((g - 1) % 100) * interval '7 hours', g % 997, 'n' || g FROM generate_series(1, ${MONTHS * 100}) g`,
    );
    await app.query(`CREATE TABLE public.store (id int PRIMARY KEY, name text); INSERT INTO public.store VALUES (1, 'a'), (2, 'b')`);
    const config = path.join(dir, 'tables.json');
    // The detached partition becomes a table of its own: the rule leaves it out (the docs say why).
    await writeFile(config, JSON.stringify([{ match: 'public.*', excludeTables: [`public.${DETACHED}`] }]));
    child = spawn(
      process.execPath,
      [
        CLI,
        'local',
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
        '--snapshot-chunk',
        '400',
        '--heartbeat-ms',
        '500',
        '--duration',
        '55s',
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    const run = child;
    run.stdout!.on('data', (d: Buffer) => (output += d.toString()));
    run.stderr!.on('data', (d: Buffer) => (output += d.toString()));
    const exited = new Promise<number | null>((resolve) => run.on('exit', (code) => resolve(code)));
    const waitFor = async (what: string, check: () => boolean | Promise<boolean>, ms: number): Promise<void> => {
      try {
        await until(what, check, ms);
      } catch (err) {
        throw new Error(`${(err as Error).message}; cdc local printed:\n${output.slice(-4000)}`);
      }
    };
    const count = async (sql: string): Promise<number> => Number((await dw.query(sql).catch(() => ({ rows: [{ n: -1 }] }))).rows[0].n);
    await waitFor(
      'the snapshot of public.ev in the warehouse',
      async () => (await count('SELECT count(*)::int AS n FROM app_public.ev')) === MONTHS * 100,
      120_000,
    );

    // The workload, after the snapshot finished.
    const at = (m: number, day: number): string => new Date(Date.UTC(2024, m, day, 12)).toISOString();
    for (let i = 0; i < 10; i++) {
      // Inserts into several partitions, in one transaction.
      await app.query(`INSERT INTO public.ev VALUES ($1, $2, 1, 'new'), ($3, $4, 2, 'new'), ($5, $6, 3, 'new')`, [
        10_000 + i,
        at(i, 3),
        20_000 + i,
        at(i + 10, 4),
        30_000 + i,
        at(i + 20, 5),
      ]);
      // A row moved to another month (its partition key, part of the key, changes), and one moved twice in one transaction.
      await app.query(`UPDATE public.ev SET at = at + interval '1 month', note = 'moved' WHERE id = $1`, [i * 97 + 1]);
      await app.query('BEGIN');
      await app.query(`UPDATE public.ev SET at = at + interval '3 months', note = 'moved twice' WHERE id = $1`, [i * 89 + 5]);
      await app.query(`UPDATE public.ev SET at = at - interval '2 months', amount = amount + 1 WHERE id = $1`, [i * 89 + 5]);
      await app.query('COMMIT');
      // A row moved to the next month and back in one transaction: its key deleted, then inserted again (soft deletes: it must stay present).
      await app.query('BEGIN');
      await app.query(`UPDATE public.ev SET at = at + interval '1 month' WHERE id = $1`, [i * 61 + 9]);
      await app.query(`UPDATE public.ev SET at = at - interval '1 month', note = 'there and back' WHERE id = $1`, [i * 61 + 9]);
      await app.query('COMMIT');
      // Plain updates and deletes.
      await app.query(`UPDATE public.ev SET amount = amount + 0.5 WHERE id % 50 = $1`, [i]);
      await app.query('DELETE FROM public.ev WHERE id = $1', [i * 131 + 17]);
      if (i === 4) {
        // A partition created while running (pg_partman's way), and filled.
        await app.query(
          `CREATE TABLE public.ev_${month(MONTHS)} PARTITION OF public.ev FOR VALUES FROM ('${monthStart(MONTHS)}') TO ('${monthStart(MONTHS + 1)}')`,
        );
        await app.query(`INSERT INTO public.ev SELECT 40000 + g, $1::timestamptz + g * interval '1 hour', g, 'fresh month' FROM generate_series(1, 25) g`, [
          monthStart(MONTHS),
        ]);
      }
      if (i === 6) {
        // A partition detached while running; its rows leave the root. Written to afterwards, as a table of its own.
        await app.query(`ALTER TABLE public.ev DETACH PARTITION public.${DETACHED}`);
        await app.query(`UPDATE public.${DETACHED} SET note = 'after detach' WHERE id % 3 = 0`);
      }
      await new Promise((r) => setTimeout(r, 300));
    }
    await app.query(`UPDATE public.store SET name = 'c' WHERE id = 2`);
    // Reconcile reads the root, partitions included, against the warehouse (docs/reconcile.md), while cdc local runs.
    const sourceCount = Number((await app.query('SELECT count(*)::int AS n FROM public.ev')).rows[0].n);
    await waitFor('the workload in the warehouse', async () => (await count('SELECT count(*)::int AS n FROM app_public.ev')) === sourceCount, 60_000);
    const rec = await runCdc([
      'reconcile',
      '--state-dir',
      path.join(dir, 'state'),
      '--source',
      cluster.url('app'),
      '--warehouse',
      cluster.url('dw'),
      '--settle',
      '2s',
      '--source-budget',
      '100000',
      '--json',
    ]);
    expect(rec.out, `cdc reconcile exited ${rec.code}: ${rec.err}`).not.toBe('');
    const verdicts = (JSON.parse(rec.out) as { verdicts: ReconcileVerdict[] }).verdicts;
    expect(
      verdicts.find((v) => v.table === 'public.ev'),
      `${rec.out}\n${rec.err}`,
    ).toMatchObject({ verdict: 'MATCH' });
    expect(verdicts.map((v) => v.table).filter((t) => t.startsWith('public.ev'))).toEqual(['public.ev']);

    const code = await exited;
    const out = output;
    expect(out, out).toContain('verdict: MATCH');
    expect(out, out).toContain('verdict (search index): MATCH');
    // One table named after the root in each sink; no partition anywhere.
    const sourceRows = Number((await app.query('SELECT count(*)::int AS n FROM public.ev')).rows[0].n);
    expect(out.match(new RegExp(`ok {3}public\\.ev: source ${sourceRows} rows`, 'g'))?.length, out).toBe(2);
    // (the detached partition, a table of its own now, is named only as excluded by the rule)
    expect(out.slice(out.indexOf('verdict: '))).not.toMatch(/public\.ev_\d/);
    expect(out).toMatch(/not captured: [^\n]*public\.ev_2024_03 excluded/);
    expect(code, out).toBe(0);
    const relations = (
      await dw.query(
        `SELECT table_name FROM information_schema.tables WHERE table_schema = 'app_public' AND table_name LIKE 'ev%' AND table_name NOT LIKE 'ev\\_%'`,
      )
    ).rows.map((r) => r.table_name);
    expect(relations).toEqual(['ev']);
    expect(
      (await dw.query(`SELECT count(*)::int AS n FROM information_schema.tables WHERE table_schema = 'app_public' AND table_name ~ '^ev_[0-9]'`)).rows[0].n,
    ).toBe(0);
    // The moved rows are one row each, at their new month (the verdict compares every row; this names them).
    const moved = `SELECT note, count(*)::int AS n, count(DISTINCT id)::int AS ids FROM public.ev WHERE note LIKE 'moved%' GROUP BY note ORDER BY note`;
    const movedInSource = (await app.query(moved)).rows;
    expect(movedInSource.map((r) => r.note)).toEqual(['moved', 'moved twice']); // (those moved into the detached month left with it)
    for (const r of movedInSource) expect(r.n).toBe(r.ids);
    const back = `SELECT count(*)::int AS n FROM public.ev WHERE note = 'there and back'`;
    expect((await dw.query(back.replace('public.ev', 'app_public.ev'))).rows).toEqual((await app.query(back)).rows);
    expect((await dw.query(moved.replace('public.ev', 'app_public.ev'))).rows).toEqual(movedInSource);
    // The detached month's rows left the root's copy, and what was written to it afterwards never arrived.
    expect((await dw.query(`SELECT count(*)::int AS n FROM app_public.ev WHERE at >= $1 AND at < $2`, [monthStart(2), monthStart(3)])).rows[0].n).toBe(0);
    expect(Number((await app.query(`SELECT count(*)::int AS n FROM public.${DETACHED}`)).rows[0].n)).toBeGreaterThan(90);
    expect((await dw.query(`SELECT count(*)::int AS n FROM app_public.ev WHERE note = 'after detach'`)).rows[0].n).toBe(0);
    // The month created while running arrived.
    expect((await dw.query(`SELECT count(*)::int AS n FROM app_public.ev WHERE note = 'fresh month'`)).rows[0].n).toBe(25);

    const status = JSON.parse((await cdc('status', '--json')).out) as StatusReport;
    const names = status.tables.map((t) => t.table);
    expect(names.filter((t) => t.startsWith('public.ev'))).toEqual(['public.ev']);
    expect(status.tables.find((t) => t.table === 'public.ev')).toMatchObject({ state: 'active' });
    // The detach asked for the root's re-snapshot, which ran.
    const audit = JSON.parse((await cdc('audit', '--table', 'public.ev', '--json')).out) as AuditEntry[];
    expect(audit.find((e) => e.action === 'partition-tree-changed')?.detail).toMatchObject({ detached: `public.${DETACHED}` });
    expect(audit.filter((e) => e.action === 'finish-snapshot').length).toBe(2);
    await dw.end();
    await app.query("SELECT pg_drop_replication_slot('cdc_app')").catch(() => undefined);
    await app.end();
  }, 240_000);
});
