/**
 * Timestamp polling from a read replica (docs/polling.md "Timestamp columns"), on a real streaming
 * standby (a copy of a stopped primary's data folder with `standby.signal`): the horizon is read on
 * the primary, so a page must not be read from a replica that has not replayed every commit the
 * horizon no longer counts. Transaction A takes its modified-at first; B takes a later one, commits,
 * and the replica replays it; replay pauses; A commits on the primary. A pass then waits for the
 * replica (it does not finish while replay is paused) and, once replay resumes, reads A's row.
 * Read from the paused replica at once, the page would read B's row, move the cursor past A's
 * value, and A's row would be lost.
 */
import { execFileSync } from 'node:child_process';
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { PostgresSnapshotReader } from '../../lambda/adapters/snapshot-postgres.ts';
import { pollPass, type PollCursor } from '../../lambda/core/capture/poll.ts';
import { FixedPacer } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import type { SlotRecord } from '../../lambda/core/capture/slot-record.ts';
import { until } from './helpers.ts';

const MARGIN_MS = 100;

let dir: string;
let primary: PostgresCluster;
let replica: PostgresCluster;
let sql: pg.Client;
let standby: pg.Client;

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'cdc-poll-replica-'));
  await fs.chmod(dir, 0o755); // the server may run as another user (local/postgres.ts)
  const primaryDir = path.join(dir, 'primary');
  const first = await startPostgres({ fast: true, persistent: true, dataDir: primaryDir });
  await first.createDatabase('src');
  const setup = new pg.Client({ connectionString: first.url('src') });
  await setup.connect();
  await setup.query(`CREATE TABLE public.stamped (id int PRIMARY KEY, note text, updated_at timestamptz NOT NULL DEFAULT clock_timestamp());
    INSERT INTO public.stamped (id, note) SELECT g, 'init' FROM generate_series(1, 5) g`);
  await setup.end();
  await first.stop();
  // A cold copy of the stopped primary is a valid base backup (ownership and modes kept).
  const replicaDir = path.join(dir, 'replica');
  execFileSync('cp', ['-a', primaryDir, replicaDir]);
  await fs.writeFile(path.join(replicaDir, 'standby.signal'), '');
  primary = await startPostgres({ fast: true, persistent: true, dataDir: primaryDir });
  const user = new URL(primary.url('src')).username;
  replica = await startPostgres({
    fast: true,
    persistent: true,
    dataDir: replicaDir,
    settings: { primary_conninfo: `host=127.0.0.1 port=${primary.port} user=${user}`, hot_standby: 'on' },
  });
  sql = new pg.Client({ connectionString: primary.url('src') });
  standby = new pg.Client({ connectionString: replica.url('src') });
  await Promise.all([sql.connect(), standby.connect()]);
  expect((await standby.query<{ r: boolean }>('SELECT pg_is_in_recovery() AS r')).rows[0]!.r).toBe(true);
}, 180_000);

afterAll(async () => {
  await standby?.end().catch(() => undefined);
  await sql?.end().catch(() => undefined);
  await replica?.stop();
  await primary?.stop();
  if (dir) await fs.rm(dir, { recursive: true, force: true });
});

const replayed = async (lsn: string) => (await standby.query<{ ok: boolean }>('SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn AS ok', [lsn])).rows[0]!.ok;
const walNow = async () => (await sql.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn')).rows[0]!.lsn;

describe('timestamp polling from a read replica (real streaming standby)', () => {
  it('a page waits until the replica replayed every commit below its horizon; the late-committing row arrives', async () => {
    const reader = new PostgresSnapshotReader({
      primary: { connectionString: primary.url('src') },
      replica: { connectionString: replica.url('src') },
      pollHorizonMarginMs: MARGIN_MS,
      fencePollMs: 5,
    });
    const published: SlotRecord[] = [];
    const cursors = new Map<string, PollCursor>();
    const pass = () =>
      pollPass({
        source: 'src',
        tables: [{ table: 'public.stamped', pollColumn: 'updated_at', rules: { mask: [], exclude: [] } }],
        reader,
        cursors: { get: async (t) => cursors.get(t) ?? null, put: async (t, c) => void cursors.set(t, c) },
        publish: async (r) => void published.push(...r),
        pacerFor: () => new FixedPacer(100),
      });
    const notes = () =>
      new Map(published.map((r) => [Number(r.columns!.find((c) => c.name === 'id')!.value), String(r.columns!.find((c) => c.name === 'note')!.value)]));
    const a = new pg.Client({ connectionString: primary.url('src') });
    await a.connect();
    try {
      await pass();
      expect(notes().size).toBe(5);
      await a.query('BEGIN');
      await a.query(`UPDATE public.stamped SET note = 'A (slow tx)', updated_at = clock_timestamp() WHERE id = 1`);
      await sql.query(`UPDATE public.stamped SET note = 'B', updated_at = clock_timestamp() WHERE id = 2`);
      const afterB = await walNow();
      await until('the replica to replay B', () => replayed(afterB), 30_000);
      await standby.query('SELECT pg_wal_replay_pause()');
      await until(
        'replay to pause',
        async () => (await standby.query<{ s: string }>('SELECT pg_get_wal_replay_pause_state() AS s')).rows[0]!.s === 'paused',
        30_000,
      );
      await a.query('COMMIT');
      await new Promise((r) => setTimeout(r, MARGIN_MS + 50));

      let settled = false;
      const reading = pass().finally(() => (settled = true));
      await new Promise((r) => setTimeout(r, 500));
      expect(settled, 'a page was read from a replica that had not replayed A').toBe(false);
      await standby.query('SELECT pg_wal_replay_resume()');
      await reading;
      expect(notes().get(2)).toBe('B');
      expect(notes().get(1), "A's row was skipped").toBe('A (slow tx)');
    } finally {
      await standby.query('SELECT pg_wal_replay_resume()').catch(() => undefined);
      await a.end().catch(() => undefined);
      await reader.close();
    }
  });
});
