/**
 * End to end, through the `cdc` command: onboarding tables that already hold rows
 * (docs/snapshot.md). A source database is filled before capture starts (a pgbench-like
 * accounts table and a composite-key table with a masked column); `cdc local --source` starts,
 * snapshots both while this test runs a concurrent write workload (inserts, updates, deletes,
 * primary-key changes), and is killed with SIGKILL mid-snapshot. The restart must resume at the
 * first incomplete chunk (never restart the table: the chunks of the run are contiguous and
 * numbered once), and the bounded run must end with source and warehouse equal row by row
 * (verdict MATCH; the view is also compared here directly).
 */
import { stopCdcProcess } from '../helpers/cdc-cli.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { controlTableOf, resetLocalState, type LocalState } from '../../local/stack.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { maskValue } from '../../lambda/core/tables/masking.ts';
import { until } from '../local/helpers.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'cdc.js');
const ACCOUNTS = 6_000;
const TAGS = 1_000;

let cluster: PostgresCluster;
let dir: string;
let child: ChildProcess | null = null;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-e2e-snap-'));
}, 120_000);

afterAll(async () => {
  if (child) await stopCdcProcess(child);
  await resetLocalState(path.join(dir, 'state')).catch(() => undefined);
  await cluster?.stop();
  await rm(dir, { recursive: true, force: true });
});

function cdc(args: string[]): { child: ChildProcess; output: () => string; exited: Promise<number | null> } {
  const c = spawn(process.execPath, [CLI, 'local', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  c.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  c.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  return { child: c, output: () => out, exited: new Promise((resolve) => c.on('exit', (code) => resolve(code))) };
}

/** The running cdc local's control plane (its DynamoDB Local). */
function control(stateDir: string): DynamoDbControlPlane | null {
  const file = path.join(stateDir, 'state.json');
  if (!existsSync(file)) return null;
  const s = JSON.parse(readFileSync(file, 'utf8')) as LocalState;
  return new DynamoDbControlPlane(dynamoDbClient(`http://127.0.0.1:${s.ports.dynamodb}`), controlTableOf(s));
}

/** A concurrent write workload on both tables until `stop()`. */
function workload(url: string, seed: number): { stop: () => Promise<number> } {
  const rand = seededRandom(seed);
  let stopped = false;
  let n = 0;
  const loops = [0, 1].map(async () => {
    const c = new pg.Client({ connectionString: url });
    c.on('error', () => undefined);
    await c.connect();
    try {
      while (!stopped) {
        const r = rand();
        const id = 1 + Math.floor(rand() * ACCOUNTS * 1.1);
        try {
          if (r < 0.4) await c.query('UPDATE accounts SET abalance = abalance + $2 WHERE aid = $1', [id, Math.floor(rand() * 1000) - 500]);
          else if (r < 0.6)
            await c.query("INSERT INTO accounts VALUES ($1, $2, $3, 'new') ON CONFLICT (aid) DO UPDATE SET filler = 'upserted'", [id, id % 10, 0]);
          else if (r < 0.75) await c.query('DELETE FROM accounts WHERE aid = $1', [id]);
          else if (r < 0.85) await c.query('UPDATE accounts SET aid = aid + 1000000 WHERE aid = $1 AND aid < 1000000', [id]);
          else if (r < 0.95) await c.query("UPDATE tags SET note = note || '+' WHERE item_id = $1", [id % TAGS]);
          else await c.query('DELETE FROM tags WHERE item_id = $1', [id % TAGS]);
          n++;
        } catch {
          // a key change that collides: skip it
        }
        await new Promise((res) => setTimeout(res, 5));
      }
    } finally {
      await c.end();
    }
  });
  return {
    stop: async () => {
      stopped = true;
      await Promise.all(loops);
      return n;
    },
  };
}

describe('cdc local --source on a database that already holds rows', () => {
  it('snapshots under a concurrent workload, survives a SIGKILL mid-snapshot, and ends equal row by row', async () => {
    await cluster.createDatabase('app');
    await cluster.createDatabase('dw');
    const appUrl = cluster.url('app');
    const app = new pg.Client({ connectionString: appUrl });
    app.on('error', () => undefined);
    await app.connect();
    await app.query(`
      CREATE TABLE accounts (aid int PRIMARY KEY, bid int NOT NULL, abalance int NOT NULL, filler text);
      INSERT INTO accounts SELECT g, g % 10, 0, repeat('x', 20) FROM generate_series(1, ${ACCOUNTS}) g;
      CREATE TABLE tags (item_id int, tag text, note text, PRIMARY KEY (item_id, tag));
      INSERT INTO tags SELECT g, t, 'note ' || g FROM generate_series(0, ${TAGS - 1}) g, (VALUES ('a'), ('b c')) v(t);
      ANALYZE accounts; ANALYZE tags;`);
    const config = path.join(dir, 'tables.json');
    await writeFile(config, JSON.stringify([{ table: 'public.tags', mask: ['note'] }]));
    const stateDir = path.join(dir, 'state');
    const args = [
      '--source',
      appUrl,
      '--tables',
      'public.accounts',
      '--table-config',
      config,
      '--warehouse',
      cluster.url('dw'),
      '--source-id',
      'app',
      '--state-dir',
      stateDir,
      '--snapshot-chunk',
      '150',
    ];

    const first = cdc(args);
    child = first.child;
    const load = workload(appUrl, 42);
    // Kill once the accounts snapshot is well under way but not finished.
    await until(
      'the accounts snapshot to be under way',
      async () => {
        if (first.child.exitCode !== null) throw new Error(`cdc local exited early (${first.child.exitCode}):\n${first.output()}`);
        const cp = control(stateDir);
        if (!cp) return false;
        try {
          const s = await cp.getSnapshot('app', 'public.accounts');
          return s !== null && s.status === 'running' && s.chunksDone >= 5;
        } catch {
          return false;
        }
      },
      240_000,
    );
    const t0 = Date.now();
    const mark = (what: string) => console.log(`local-snapshot e2e: ${what} at +${Math.round((Date.now() - t0) / 1000)} s`);
    const killedAt = new Date().toISOString();
    first.child.kill('SIGKILL');
    await first.exited;
    child = null;

    // Restart as a bounded run; the workload keeps writing during the resumed snapshot, then stops.
    const second = cdc([...args, '--duration', '20s']);
    child = second.child;
    await until('cdc local to resume', () => /cdc local: resumed in/.test(second.output()), 240_000);
    mark('resumed');
    await new Promise((r) => setTimeout(r, 5_000));
    // The run resumed where it stopped: one run, chunks numbered once and contiguous (each starts
    // after the previous one's last key), and the resume in the audit with the chunks done before.
    const cp = control(stateDir)!;
    // Bounded by progress, not by a clock: on a loaded machine the pacer may slow the snapshot (it reads
    // the source's own latency), so the wait ends only when no row was read for 90 s.
    {
      let seen = -1;
      let stalledSince = Date.now();
      let last = '';
      await until(
        'the accounts snapshot to finish',
        async () => {
          const s = await cp.getSnapshot('app', 'public.accounts');
          last = JSON.stringify({ status: s?.status, rowsDone: s?.rowsDone, estimatedRows: s?.estimatedRows, throttle: s?.throttle, error: s?.error });
          if ((s?.rowsDone ?? 0) !== seen) [seen, stalledSince] = [s?.rowsDone ?? 0, Date.now()];
          if (Date.now() - stalledSince > 90_000) throw new Error(`the accounts snapshot read no row for 90 s: ${last}\n${second.output().slice(-3000)}`);
          return s?.status === 'done';
        },
        600_000,
      );
    }
    mark('accounts snapshot done');
    const run = (await cp.getSnapshot('app', 'public.accounts'))!;
    const chunks = await cp.listSnapshotChunks('app', 'public.accounts', run.run);
    expect(chunks.map((c) => c.index)).toEqual(chunks.map((_, i) => i));
    for (let i = 1; i < chunks.length; i++) expect(chunks[i]!.startAfter, `chunk ${i}`).toEqual(chunks[i - 1]!.endKey);
    expect(chunks.reduce((n, c) => n + c.rows, 0)).toBe(run.rowsDone);
    const resumes = (await cp.listAudit('app', 'public.accounts')).filter((a) => a.action === 'resume-snapshot' || a.action === 'start-snapshot');
    // One start, then resumes: the first after the SIGKILL takes the killed run over with the chunks
    // done before it; the others are the turns the run took back after yielding to another table's
    // snapshot (docs/snapshot.md: runs take turns), which are audited as resumes too.
    expect(resumes[0]!.action).toBe('start-snapshot');
    expect(resumes.slice(1).map((a) => a.action)).toEqual(resumes.slice(1).map(() => 'resume-snapshot'));
    const takeover = resumes.find((a) => a.action === 'resume-snapshot' && a.at > killedAt);
    expect(takeover, JSON.stringify(resumes)).toBeDefined();
    expect(Number(takeover!.detail.chunksDone)).toBeGreaterThanOrEqual(5);
    await new Promise((r) => setTimeout(r, 3_000));
    const writes = await load.stop();
    expect(writes).toBeGreaterThan(50);
    const code = await second.exited;
    child = null;
    const out = second.output();
    mark('second run exited');
    console.log(
      out
        .split('\n')
        .filter((l) => /snapshot|measured|verdict|ok |resumed|time is up/.test(l))
        .join('\n'),
    );
    expect(out, out).toContain('verdict: MATCH');
    expect(out).toMatch(/ok +public\.accounts:/);
    expect(out).toMatch(/ok +public\.tags:/);
    expect(code, out).toBe(0);

    // Row by row here too, masked column masked.
    const dw = new pg.Client({ connectionString: cluster.url('dw') });
    await dw.connect();
    const src = (await app.query('SELECT aid::text, bid::text, abalance::text, filler FROM accounts ORDER BY aid')).rows;
    const wh = (await dw.query('SELECT aid::text, bid::text, abalance::text, filler FROM app_public.accounts ORDER BY aid')).rows;
    expect(wh.length).toBe(src.length);
    expect(wh).toEqual(src);
    const srcTags = (await app.query('SELECT item_id::text, tag, note FROM tags ORDER BY item_id, tag')).rows.map((r) => ({ ...r, note: maskValue(r.note) }));
    const whTags = (await dw.query('SELECT item_id::text, tag, note FROM app_public.tags ORDER BY item_id, tag')).rows;
    expect(whTags).toEqual(srcTags);
    await dw.end();

    await app.query("SELECT pg_drop_replication_slot('cdc_app')");
    await app.end();
  }, 600_000);
});
