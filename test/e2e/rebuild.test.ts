/**
 * End to end, `cdc rebuild` against a running `cdc local` (docs/rebuild.md): a source with two
 * tables (created empty, no initial snapshot: its rows would repair a corrupted row on their own); once both are in the warehouse, the mirror of one is corrupted behind the platform's
 * back (a value changed, a row deleted, a row the source never had added) while a workload keeps
 * writing the other. `cdc rebuild --rehearse` builds a shadow from the archive and the change
 * log, reports the three differing keys, records its duration and leaves live as it was. `cdc
 * rebuild` then swaps in a correct table while a reader loop on the view asserts it only ever
 * sees the corrupted table whole or the rebuilt one whole (never a partial one); the table then
 * agrees with the source row by row (local/verdict.ts), the other table kept flowing, and the
 * sink's high-water mark was not lowered. The archive was read first: the replay's stream part
 * starts at the archive's last record of each shard. Finally, a batch marker removed from the
 * archive makes the history incomplete: the rebuild is refused with exit 3, audited.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { resetLocalState } from '../../local/stack.ts';
import { compareSourceAndWarehouse } from '../../local/verdict.ts';
import type { AuditEntry, RebuildRun } from '../../lambda/core/shared/control-plane.ts';
import { until } from '../local/helpers.ts';
import { mergeWarehouseTable } from '../helpers/warehouse-merge.ts';
import { runCdc, type CdcRun } from '../helpers/cdc-cli.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'cdc.js');

let cluster: PostgresCluster;
let dir: string;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-e2e-rebuild-'));
}, 120_000);

afterAll(async () => {
  await resetLocalState(path.join(dir, 'state')).catch(() => undefined);
  await cluster?.stop();
  await rm(dir, { recursive: true, force: true });
});

async function cdc(...args: string[]): Promise<CdcRun> {
  return runCdc([...args, '--state-dir', path.join(dir, 'state'), '--actor', 'e2e']);
}

const ROWS = 300;

describe('cdc rebuild against a running cdc local', () => {
  it('rehearses, then swaps a corrupted mirror for a correct one without readers seeing a partial table; refuses when history is incomplete', async () => {
    await cluster.createDatabase('app');
    await cluster.createDatabase('dw');
    const app = new pg.Client({ connectionString: cluster.url('app') });
    await app.connect();
    const dw = new pg.Client({ connectionString: cluster.url('dw') });
    await dw.connect();
    const reader = new pg.Client({ connectionString: cluster.url('dw') });
    await reader.connect();
    await app.query(`
      CREATE TABLE public.busy (id int PRIMARY KEY, n int);
      CREATE TABLE public.fixme (id int PRIMARY KEY, v text, amount numeric(12,2));`);
    const state = path.join(dir, 'state');
    const child = spawn(
      process.execPath,
      [
        CLI,
        'local',
        '--source',
        cluster.url('app'),
        '--tables',
        'public.busy,public.fixme',
        '--warehouse',
        cluster.url('dw'),
        '--source-id',
        'app',
        '--state-dir',
        state,
        '--duration',
        '600s',
        '--no-snapshot',
      ],
      { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.on('exit', (code) => resolve(code)));
    let workload: Promise<void> | undefined;
    let stopWorkload = false;
    try {
      const t0 = Date.now();
      await until('cdc local to start', () => /cdc local: (started|resumed) in/.test(output), 240_000);
      console.log(`cdc local started in ${Date.now() - t0} ms`);
      const sourceRows = async (t: string) => (await app.query(`SELECT * FROM public.${t} ORDER BY id`)).rows.map((r) => JSON.stringify(r));
      const warehouseRows = async (t: string) => {
        const exists = (await dw.query(`SELECT to_regclass('app_public.${t}') AS r`)).rows[0].r;
        if (!exists) return [];
        const cols = t === 'busy' ? 'id::int AS id, n::int AS n' : 'id::int AS id, v, amount::text AS amount';
        return (await dw.query(`SELECT ${cols} FROM app_public.${t} ORDER BY id`)).rows.map((r) => JSON.stringify(r));
      };
      const level = async (t: string) => JSON.stringify(await sourceRows(t)) === JSON.stringify(await warehouseRows(t));

      // History in three steps, so the table's events span several archive objects.
      await app.query(
        `INSERT INTO fixme SELECT g, 'v' || g, g * 1.25 FROM generate_series(1, ${ROWS}) g; INSERT INTO busy SELECT g, 0 FROM generate_series(1, 50) g`,
      );
      await app.query(`UPDATE fixme SET v = 'w' || id WHERE id % 3 = 0`);
      await app.query(
        `DELETE FROM fixme WHERE id > ${ROWS - 10}; INSERT INTO fixme SELECT g, 'late' || g, 1 FROM generate_series(${ROWS + 1}, ${ROWS + 20}) g`,
      );
      await until('both tables in the warehouse', async () => (await level('busy')) && (await level('fixme')), 180_000);
      const expected = ROWS - 10 + 20;
      // The archive copier (2 s batching window) has archived the history once its markers cover it.
      await until(
        'the archive to hold the table',
        async () => (await readdir(path.join(state, 'archive', 'change-log', 'tables', 'app', 'public.fixme'), { recursive: true }).catch(() => [])).length > 0,
        60_000,
      );
      await new Promise((r) => setTimeout(r, 3000));

      // Corrupt the mirror behind the platform's back (merged first: rows still in the delta would hide it).
      await mergeWarehouseTable(cluster.url('dw'), 'app', 'public.fixme', ['id']);
      await dw.query(`UPDATE app_public._cdc_mirror_fixme SET v = 'CORRUPT' WHERE id = 5`);
      await dw.query(`DELETE FROM app_public._cdc_mirror_fixme WHERE id = 6`);
      await dw.query(
        `INSERT INTO app_public._cdc_mirror_fixme (id, v, amount, _cdc_position, _cdc_deleted, _cdc_applied_at) VALUES (99999, 'never in the source', 0, '000000000000000100000000', false, now())`,
      );
      expect(await level('fixme')).toBe(false);
      const corruptDigest = (
        await dw.query(`SELECT md5(string_agg(id || ':' || coalesce(v, '') || ':' || coalesce(amount::text, ''), ',' ORDER BY id)) AS d FROM app_public.fixme`)
      ).rows[0].d as string;

      // A workload on the other table all the while.
      let writes = 0;
      workload = (async () => {
        while (!stopWorkload) {
          await app.query('UPDATE busy SET n = n + 1 WHERE id = $1', [1 + (writes % 50)]);
          writes++;
          await new Promise((r) => setTimeout(r, 20));
        }
      })();

      // Rehearsal: builds and diffs, does not swap, records its duration.
      const rehearsal = await cdc('rebuild', 'public.fixme', '--sink', 'warehouse', '--rehearse', '--json', '--warehouse', cluster.url('dw'));
      expect(rehearsal.code, rehearsal.err).toBe(0);
      const r1 = JSON.parse(rehearsal.out) as { outcome: string; detail: { run: RebuildRun; diff: Array<{ kind: string; key: Record<string, string> }> } };
      expect(r1.outcome).toBe('done');
      expect(r1.detail.run.mode).toBe('rehearsal');
      expect(r1.detail.run.durationMs).toBeGreaterThan(0);
      expect(r1.detail.diff.map((d) => `${d.kind}:${d.key.id}`).sort(), rehearsal.out.slice(0, 4000)).toEqual(['changed:5', 'extra:99999', 'missing:6']);
      // Read from the archive first: the stream part starts at the archive's last record of every shard.
      expect(r1.detail.run.archiveRecords).toBeGreaterThan(expected);
      const stats = (JSON.parse(rehearsal.out) as { detail: { stats: { shards: Array<{ archivedThrough: string | null }>; objectsRead: number } } }).detail
        .stats;
      expect(stats.shards.every((s) => s.archivedThrough !== null)).toBe(true);
      expect(await level('fixme')).toBe(false);
      expect((await dw.query(`SELECT to_regclass('app_public._cdc_mirror__cdc_rb_fixme') AS r`)).rows[0].r).toBeNull();

      // The swap, with a reader loop on the view: every read sees the corrupted table whole or the rebuilt one whole.
      const correctDigest = (
        await app.query(`SELECT md5(string_agg(id || ':' || coalesce(v, '') || ':' || coalesce(amount::text, ''), ',' ORDER BY id)) AS d FROM public.fixme`)
      ).rows[0].d as string;
      let reading = true;
      const seen = new Map<string, number>();
      let readError: unknown = null;
      const reads = (async () => {
        while (reading && readError === null) {
          const r = await reader.query(
            `SELECT count(*)::int AS n, md5(string_agg(id || ':' || coalesce(v, '') || ':' || coalesce(amount::text, ''), ',' ORDER BY id)) AS d FROM app_public.fixme`,
          );
          const key = `${r.rows[0].n}/${r.rows[0].d === corruptDigest ? 'corrupt' : r.rows[0].d === correctDigest ? 'correct' : r.rows[0].d}`;
          seen.set(key, (seen.get(key) ?? 0) + 1);
        }
      })().catch((e: unknown) => {
        readError = e;
      });
      const before = JSON.parse((await cdc('status', 'public.fixme', '--json')).out) as {
        tables: Array<{ sinks: Array<{ sink: string; appliedPosition: string }> }>;
      };
      const rebuilt = await cdc('rebuild', 'public.fixme', '--sink', 'warehouse', '--json', '--warehouse', cluster.url('dw'));
      reading = false;
      await reads;
      expect(readError, 'a reader of the view failed during the swap').toBeNull();
      expect(rebuilt.code, rebuilt.err).toBe(0);
      const r2 = JSON.parse(rebuilt.out) as { detail: { run: RebuildRun; diffTable: string } };
      expect(r2.detail.run.mode).toBe('swap');
      expect(r2.detail.run.diff).toMatchObject({ missing: 1, extra: 1, changed: 1 });
      expect([...seen.keys()].sort(), JSON.stringify([...seen])).toEqual(expect.arrayContaining([`${expected}/correct`]));
      for (const k of seen.keys()) expect([`${expected}/corrupt`, `${expected}/correct`], `a reader saw ${k}`).toContain(k);
      expect(await level('fixme')).toBe(true);
      // The diff is kept.
      const kept = (await dw.query(`SELECT _cdc_kind AS kind, id FROM app_public._cdc_diff_fixme ORDER BY id`)).rows;
      expect(kept).toEqual([
        { kind: 'changed', id: '5' },
        { kind: 'missing', id: '6' },
        { kind: 'extra', id: '99999' },
      ]);
      // The sink's high-water mark is at or above where it was.
      const after = JSON.parse((await cdc('status', 'public.fixme', '--json')).out) as typeof before;
      expect(
        after.tables[0]!.sinks.find((s) => s.sink === 'warehouse')!.appliedPosition >=
          before.tables[0]!.sinks.find((s) => s.sink === 'warehouse')!.appliedPosition,
      ).toBe(true);

      // Live apply of the rebuilt table goes on; the other table flowed all along.
      await app.query(`UPDATE fixme SET v = 'after' WHERE id <= 10; INSERT INTO fixme VALUES (5000, 'new', 2)`);
      stopWorkload = true;
      await workload;
      expect(writes).toBeGreaterThan(0);
      await until('both tables level after the rebuild', async () => (await level('fixme')) && (await level('busy')), 60_000);
      const verdict = await compareSourceAndWarehouse({
        sourceUrl: cluster.url('app'),
        warehouseUrl: cluster.url('dw'),
        source: 'app',
        tables: [
          { table: 'public.fixme', deleteMode: 'soft', mask: [], exclude: [] },
          { table: 'public.busy', deleteMode: 'soft', mask: [], exclude: [] },
        ],
      });
      expect(verdict.match, JSON.stringify(verdict.tables)).toBe(true);

      // A batch marker gone from the middle of the archive: the history is not complete, refused and audited.
      // (The last marker of a shard is no hole: the stream still holds what it covered. One in the middle is.)
      const markers = (await readdir(path.join(state, 'archive', 'change-log', 'batches'), { recursive: true }))
        .filter((f) => /\d-\d+-(\d+|origin)$/.test(f))
        .sort();
      const byShard = new Map<string, string[]>();
      for (const m of markers) byShard.set(path.dirname(m), [...(byShard.get(path.dirname(m)) ?? []), m]);
      const middle = [...byShard.values()].find((l) => l.length >= 3)?.[1];
      expect(middle, markers.join('\n')).toBeDefined();
      await rm(path.join(state, 'archive', 'change-log', 'batches', middle!));
      const refused = await cdc('rebuild', 'public.fixme', '--sink', 'warehouse', '--warehouse', cluster.url('dw'));
      expect(refused.code, refused.out + refused.err).toBe(3);
      expect(refused.err).toMatch(/refused \(HISTORY_INCOMPLETE\): history hole in shard/);
      const unknown = await cdc('rebuild', 'public.nosuch');
      expect(unknown.code).toBe(3);

      const audit = (JSON.parse((await cdc('audit', '--json')).out) as AuditEntry[]).filter((e) => e.action === 'rebuild');
      expect(audit.map((e) => [e.table, e.outcome, e.detail.mode ?? null, e.detail.code ?? null])).toEqual([
        ['public.fixme', 'done', 'rehearsal', null],
        ['public.fixme', 'done', 'swap', null],
        ['public.fixme', 'refused', null, 'HISTORY_INCOMPLETE'],
        ['public.nosuch', 'refused', null, 'TABLE_NOT_FOUND'],
      ]);

      // Ctrl-C stops cdc local at once: its --duration (600 s) does not keep the process alive.
      stopWorkload = true;
      const asked = Date.now();
      child.kill('SIGINT');
      expect(await exited).toBe(0);
      expect(Date.now() - asked, 'cdc local exits on SIGINT, not when its --duration ends').toBeLessThan(60_000);
    } catch (err) {
      // What cdc local printed, to tell a slow pipeline from a stuck one.
      console.log(`cdc local's output (last 6,000 characters):\n${output.slice(-6000)}`);
      throw err;
    } finally {
      stopWorkload = true;
      await workload?.catch(() => undefined);
      if (child.exitCode === null) child.kill('SIGINT');
      await exited;
      await app.query("SELECT pg_drop_replication_slot('cdc_app') FROM pg_replication_slots WHERE slot_name = 'cdc_app'").catch(() => undefined);
      await app.end();
      await dw.end();
      await reader.end();
    }
  }, 600_000);
});
