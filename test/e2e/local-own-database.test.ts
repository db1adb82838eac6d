/**
 * End to end, through the `cdc` command, against "your own" PostgreSQL: `--source` with a table
 * configuration (mask, exclude), `--warehouse` pointing at another existing database, and a
 * bounded run whose verdict must match. Also: a source that cannot be captured is explained
 * before anything starts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { resetLocalState } from '../../local/stack.ts';
import { maskValue } from '../../lambda/core/tables/masking.ts';
import { until } from '../local/helpers.ts';
import { expectVerdict, stateDirDiagnostics } from '../helpers/verdict-diagnostics.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'cdc.js');

let cluster: PostgresCluster;
let dir: string;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-e2e-own-'));
});

afterAll(async () => {
  await resetLocalState(path.join(dir, 'state')).catch(() => undefined);
  await cluster?.stop();
  await rm(dir, { recursive: true, force: true });
});

function cdc(args: string[]): { output: () => string; exited: Promise<number | null> } {
  const c = spawn(process.execPath, [CLI, 'local', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  c.stdout.on('data', (d: Buffer) => (out += d.toString()));
  c.stderr.on('data', (d: Buffer) => (out += d.toString()));
  return { output: () => out, exited: new Promise((resolve) => c.on('exit', (code) => resolve(code))) };
}

describe('cdc local --source / --warehouse', () => {
  it('captures existing tables of a PostgreSQL into another one, masked, and the verdict matches', async () => {
    await cluster.createDatabase('app');
    await cluster.createDatabase('dw');
    const app = new pg.Client({ connectionString: cluster.url('app') });
    await app.connect();
    await app.query(`
      CREATE TABLE public.items (id serial PRIMARY KEY, name text NOT NULL, secret text, price numeric(10,2));
      CREATE TABLE public.tags (item_id int, tag text, PRIMARY KEY (item_id, tag));
      CREATE TABLE public.untouched (id int PRIMARY KEY);
      CREATE TABLE public.people (id bigint PRIMARY KEY, pin int, born date, doc jsonb, tag uuid, name text);`);
    const config = path.join(dir, 'tables.json');
    // Masked columns of non-text types (issue 15): registered and delivered as text, never dead-lettered.
    await writeFile(
      config,
      JSON.stringify([
        { table: 'public.items', mask: ['name'], exclude: ['secret'] },
        { table: 'public.people', mask: ['pin', 'born', 'doc', 'tag'] },
      ]),
    );

    const run = cdc([
      '--source',
      cluster.url('app'),
      '--table-config',
      config,
      '--tables',
      'public.tags',
      '--warehouse',
      cluster.url('dw'),
      '--source-id',
      'app',
      '--state-dir',
      path.join(dir, 'state'),
      '--duration',
      '25s',
      // The SQL-peek read (for sources that allow no replication connection); the other e2e tests stream.
      '--slot-read',
      'peek',
    ]);
    await until('cdc local to start', () => /cdc local: (started|resumed) in/.test(run.output()), 240_000);
    // Peeking holds no WAL sender: nothing streams the slot (a streaming capture would show here).
    expect((await app.query("SELECT count(*)::int AS n FROM pg_stat_replication WHERE application_name LIKE 'cdc-local-capture%'")).rows[0].n).toBe(0);
    for (let i = 1; i <= 60; i++) await app.query('INSERT INTO items (name, secret, price) VALUES ($1, $2, $3)', [`item ${i}`, `s3cr3t-${i}`, i * 1.5]);
    await app.query(
      "BEGIN; UPDATE items SET price = price * 2 WHERE id % 3 = 0; DELETE FROM items WHERE id % 7 = 0; INSERT INTO tags SELECT id, 'even' FROM items WHERE id % 2 = 0; COMMIT",
    );
    await app.query("UPDATE items SET name = 'renamed ' || id, id = id + 1000 WHERE id % 5 = 0");
    await app.query('DELETE FROM tags WHERE item_id % 4 = 0');
    // two keys beyond 2^53 that a double cannot tell apart
    await app.query(`INSERT INTO people VALUES
      (9007199254740993, 1234, '1980-05-17', '{"a": 1}', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', 'odd'),
      (9007199254740992, 5678, '1990-01-02', NULL, NULL, 'even'),
      (3, NULL, NULL, '[1, 2]', NULL, 'small')`);
    await app.query('UPDATE people SET pin = pin + 1 WHERE id = 9007199254740993');
    const code = await run.exited;
    const out = run.output();
    await expectVerdict(out, 'verdict: MATCH', () => stateDirDiagnostics(path.join(dir, 'state'), { source: 'app', warehouseUrl: cluster.url('dw') }));
    expect(out, out).toContain('verdict (search index): MATCH');
    expect(out).toMatch(/ok +public\.items:/);
    expect(out).toMatch(/ok +public\.tags:/);
    expect(out).toMatch(/ok +public\.people:/);
    expect(code, out).toBe(0);
    // The slot monitor ran: the capture slot's retained WAL and headroom in the status and as metrics.
    expect(out).toMatch(/slot retains [\d.]+ (B|KiB|MiB), headroom [\d.]+ (KiB|MiB)/);
    const emf = (await readFile(path.join(dir, 'state', 'logs', 'metrics.emf.jsonl'), 'utf8')).split('\n').filter((l) => l.includes('SlotHeadroomBytes'));
    expect(emf.length).toBeGreaterThan(0);
    expect(JSON.parse(emf[0]!)).toMatchObject({ Source: 'app', SlotRetainedBytes: expect.any(Number), SlotHeadroomBytes: expect.any(Number) });

    // In the user's database: our slot and the heartbeat table; in the warehouse: masked names, no secret.
    expect((await app.query("SELECT slot_name FROM pg_replication_slots WHERE slot_name = 'cdc_app'")).rowCount).toBe(1);
    expect((await app.query('SELECT source_id FROM public.cdc_heartbeat')).rows).toEqual([{ source_id: 'app' }]);
    const dw = new pg.Client({ connectionString: cluster.url('dw') });
    await dw.connect();
    const one = await dw.query('SELECT name FROM app_public.items WHERE id = 1');
    expect(one.rows[0].name).toBe(maskValue('item 1'));
    const people = await dw.query('SELECT id::text AS id, pin, born, doc, tag, name FROM app_public.people ORDER BY id');
    expect(people.rows).toEqual([
      { id: '3', pin: null, born: null, doc: maskValue('[1, 2]'), tag: null, name: 'small' },
      { id: '9007199254740992', pin: maskValue(5678), born: maskValue('1990-01-02'), doc: null, tag: null, name: 'even' },
      {
        id: '9007199254740993',
        pin: maskValue(1235),
        born: maskValue('1980-05-17'),
        doc: maskValue('{"a": 1}'),
        tag: maskValue('a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'),
        name: 'odd',
      },
    ]);
    const masked = await dw.query(
      "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'app_public' AND table_name = '_cdc_mirror_people' AND column_name IN ('pin', 'born', 'doc', 'tag') ORDER BY column_name",
    );
    expect(masked.rows.map((r) => r.data_type)).toEqual(['text', 'text', 'text', 'text']);
    const cols = await dw.query("SELECT column_name FROM information_schema.columns WHERE table_schema = 'app_public' AND column_name = 'secret'");
    expect(cols.rowCount).toBe(0);
    expect((await dw.query("SELECT to_regclass('app_public.untouched') AS t")).rows[0].t).toBeNull();
    await dw.end();
    await app.query("SELECT pg_drop_replication_slot('cdc_app')");
    await app.end();
  }, 600_000);

  it('explains a source without logical decoding before starting anything', async () => {
    const replica = await startPostgres({ fast: true, settings: { wal_level: 'replica' } });
    try {
      const run = cdc(['--source', replica.url('postgres'), '--tables', 'public.x', '--state-dir', path.join(dir, 'other')]);
      const code = await run.exited;
      expect(code).toBe(1);
      expect(run.output()).toMatch(/SourceNotReadyError \(SOURCE_NOT_READY\): the source has wal_level = 'replica'.*wal_level = logical/);
      expect(run.output()).not.toContain('starting (state in');
    } finally {
      await replica.stop();
    }
  }, 120_000);
});
