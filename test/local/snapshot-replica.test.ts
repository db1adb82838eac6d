/**
 * Reading snapshot chunks from a read replica (docs/snapshot.md, "Reading from a replica"), on a
 * real streaming standby: a copy of a stopped primary's data folder started with
 * `standby.signal` and `primary_conninfo`, replaying from the restarted primary. The fence runs on
 * the primary and waits until the replica has replayed past the chunk's low watermark: with
 * replay paused, a chunk waits, and after replay resumes it sees every row committed before its
 * watermark. Chunks and the run are annotated: read from the replica, its replay position (at
 * or past the low watermark) and its replay lag.
 */
import { execFileSync } from 'node:child_process';
import { promises as fs } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { PostgresSnapshotReader } from '../../lambda/adapters/snapshot-postgres.ts';
import { parseLsn } from '../../lambda/core/shared/position.ts';
import { NO_COLUMN_RULES } from '../../lambda/core/tables/masking.ts';
import { FixedPacer } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import { requestSnapshot, runTableSnapshot } from '../../lambda/core/snapshot/snapshot-worker.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { until } from './helpers.ts';

let dir: string;
let primary: PostgresCluster;
let replica: PostgresCluster;
let sql: pg.Client;
let standby: pg.Client;

beforeAll(async () => {
  dir = await fs.mkdtemp(path.join(os.tmpdir(), 'cdc-replica-'));
  await fs.chmod(dir, 0o755); // the server may run as another user (local/postgres.ts)
  const primaryDir = path.join(dir, 'primary');
  const first = await startPostgres({ fast: true, persistent: true, dataDir: primaryDir });
  await first.createDatabase('src');
  const setup = new pg.Client({ connectionString: first.url('src') });
  await setup.connect();
  await setup.query("CREATE TABLE public.r (id int PRIMARY KEY, v text); INSERT INTO public.r SELECT g, 'v' || g FROM generate_series(1, 20) g");
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

describe('snapshot chunks from a read replica (real streaming standby)', () => {
  it('the fence waits for the replica to replay past the low watermark; chunks and the run say they were read from the replica, with its replay position and lag', async () => {
    const reader = new PostgresSnapshotReader({
      primary: { connectionString: primary.url('src') },
      replica: { connectionString: replica.url('src') },
      fencePollMs: 5,
    });
    try {
      const shape = await reader.describe('public.r');
      await sql.query("INSERT INTO public.r VALUES (21, 'just committed')");
      const read = await reader.readChunk(shape, null, 100);
      expect(read.fromReplica).toBe(true);
      expect(read.rows).toHaveLength(21); // the row committed on the primary before the watermark is there
      expect(parseLsn(read.replayLsn!, 'replayLsn') >= parseLsn(read.lowWatermark, 'lowWatermark')).toBe(true);
      expect(read.replicaLagMs).toBeGreaterThanOrEqual(0);

      // Replay paused: a chunk waits for the replica; after replay resumes it sees the new row.
      await standby.query('SELECT pg_wal_replay_pause()');
      await until(
        'replay to pause',
        async () => (await standby.query<{ s: string }>('SELECT pg_get_wal_replay_pause_state() AS s')).rows[0]!.s === 'paused',
        30_000,
      );
      await sql.query("INSERT INTO public.r VALUES (22, 'while replay is paused')");
      let settled = false;
      const reading = reader.readChunk(shape, null, 100).finally(() => (settled = true));
      await new Promise((r) => setTimeout(r, 500));
      expect(settled, 'waits while the replica has not replayed past the watermark').toBe(false);
      await standby.query('SELECT pg_wal_replay_resume()');
      const after = await reading;
      expect(after.rows.map((r) => r[0])).toContain('22');
      expect(after.fenceWaitMs).toBeGreaterThanOrEqual(400);

      // The worker records where each chunk was read.
      const controlPlane = new MemoryControlPlane();
      await requestSnapshot(controlPlane, { source: 'src', table: 'public.r', reason: 'initial', actor: 'test' });
      expect(
        await runTableSnapshot({
          controlPlane,
          reader,
          publish: async () => undefined,
          pacer: new FixedPacer(10),
          source: 'src',
          table: 'public.r',
          rules: NO_COLUMN_RULES,
          owner: 'test',
        }),
      ).toBe('done');
      const run = (await controlPlane.getSnapshot('src', 'public.r'))!;
      expect(run).toMatchObject({ status: 'done', rowsDone: 22, readFrom: 'replica' });
      const chunks = await controlPlane.listSnapshotChunks('src', 'public.r', run.run);
      expect(chunks).toHaveLength(3);
      for (const c of chunks) {
        expect(c.fromReplica).toBe(true);
        expect(parseLsn(c.replayLsn!, 'replayLsn') >= parseLsn(c.lowWatermark, 'lowWatermark')).toBe(true);
        expect(typeof c.replicaLagMs).toBe('number');
      }
    } finally {
      await reader.close();
    }
  }, 120_000);

  it('on the primary a chunk carries no replica annotation', async () => {
    const reader = new PostgresSnapshotReader({ primary: { connectionString: primary.url('src') } });
    try {
      const read = await reader.readChunk(await reader.describe('public.r'), null, 5);
      expect([read.fromReplica, read.replayLsn, read.replicaLagMs]).toEqual([false, null, null]);
    } finally {
      await reader.close();
    }
  }, 60_000);
});
