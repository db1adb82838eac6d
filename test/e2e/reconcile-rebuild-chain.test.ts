/**
 * End to end, issue 12's first "Done when" line as one chain against a running `cdc local`
 * (docs/reconcile.md, docs/rebuild.md):
 *
 * 1. A source with two tables, `victim` and `busy`, created empty (no initial snapshot: the whole
 *    history is in the change log and its archive), filled in several steps so `victim`'s events
 *    span several archive objects. A workload then runs on `busy` for the rest of the chain.
 * 2. `victim`'s warehouse mirror is corrupted behind the platform's back: a value changed, a row
 *    deleted, a row the source never had added.
 * 3. `cdc reconcile` exits 1, names `victim` and exactly those keys, and says MATCH for `busy`.
 * 4. `cdc rebuild public.victim` rebuilds it from the archive (stream retention made irrelevant:
 *    every shard's stream part starts at the archive's last record, so the early history comes
 *    from the archive only, and the stream part holds fewer records than that history), swaps in
 *    a correct table, and a reader polling the view during the swap sees the corrupted table
 *    whole or the correct one whole, never a partial one.
 * 5. The next `cdc reconcile` exits 0 (MATCH for both; an INCONCLUSIVE `busy` under the live
 *    workload is tried again, a DIVERGED anything fails), and a row-by-row comparison
 *    (local/verdict.ts) agrees for both tables.
 *
 * Reads go through the view named after the table (`app_public.victim`), never the physical
 * tables, so the test does not depend on how the warehouse stores a table behind its view. The
 * corruption writes the mirror, the object a consumer or a stray job would write.
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
import type { RebuildRun } from '../../lambda/core/shared/control-plane.ts';
import type { ReconcileVerdict } from '../../lambda/core/reconcile/reconcile.ts';
import { until } from '../local/helpers.ts';
import { mergeWarehouseTable } from '../helpers/warehouse-merge.ts';
import { runCdc, type CdcRun } from '../helpers/cdc-cli.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'cdc.js');
const ROWS = 300;

let cluster: PostgresCluster;
let dir: string;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-e2e-chain-'));
}, 120_000);

afterAll(async () => {
  await resetLocalState(path.join(dir, 'state')).catch(() => undefined);
  await cluster?.stop();
  await rm(dir, { recursive: true, force: true });
});

async function cdc(...args: string[]): Promise<CdcRun> {
  return runCdc([...args, '--state-dir', path.join(dir, 'state')]);
}

const digestSql = (t: string): string =>
  `SELECT count(*)::int AS n, md5(coalesce(string_agg(id || ':' || coalesce(v, '') || ':' || coalesce(n::text, ''), ',' ORDER BY id), '')) AS d FROM ${t}`;

describe('reconcile finds a corrupted mirror, rebuild from the archive fixes it, reconcile agrees', () => {
  it('reconcile exits 1 naming the table and keys (MATCH for the other), rebuild swaps in a correct table without partial reads, reconcile exits 0 and rows agree', async () => {
    await cluster.createDatabase('app');
    await cluster.createDatabase('dw');
    const app = new pg.Client({ connectionString: cluster.url('app') });
    await app.connect();
    const dw = new pg.Client({ connectionString: cluster.url('dw') });
    await dw.connect();
    const reader = new pg.Client({ connectionString: cluster.url('dw') });
    await reader.connect();
    await app.query(`
      CREATE TABLE public.victim (id int PRIMARY KEY, v text, n int);
      CREATE TABLE public.busy (id int PRIMARY KEY, v text, n int);`);
    const state = path.join(dir, 'state');
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
        state,
        '--no-snapshot',
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
    let reading = false;
    let workload: Promise<void> = Promise.resolve();
    // Not a test of the pacer: on a loaded machine the source probe's noise alone exceeds the default
    // budget (10 % added write latency), and the pacer then rightly slows the reads to a crawl.
    const reconcile = (...extra: string[]) =>
      cdc('reconcile', '--source', cluster.url('app'), '--warehouse', cluster.url('dw'), '--settle', '2s', '--source-budget', '100000', '--json', ...extra);
    const t0 = Date.now();
    const mark = (what: string) => console.log(`chain: ${what} at ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    try {
      await until('cdc local to start', () => /cdc local: (started|resumed) in/.test(output), 240_000);
      mark('cdc local started');
      const rows = async (db: pg.Client, t: string) => {
        const exists = (await db.query(`SELECT to_regclass($1) AS r`, [t])).rows[0].r;
        if (!exists) return '';
        return JSON.stringify((await db.query(`SELECT id::int AS id, v, n::int AS n FROM ${t} ORDER BY id`)).rows);
      };
      const level = async (t: string) => (await rows(app, `public.${t}`)) === (await rows(dw, `app_public.${t}`));

      // 1. The history, in steps: victim's events span several archive objects (2 s batching window).
      await app.query(
        `INSERT INTO victim SELECT g, 'v' || g, g % 7 FROM generate_series(1, ${ROWS}) g; INSERT INTO busy SELECT g, 'b' || g, 0 FROM generate_series(1, 200) g`,
      );
      await until('the first step in the warehouse', () => level('victim'), 90_000);
      await app.query(`UPDATE victim SET v = 'w' || id WHERE id % 3 = 0`);
      await until('the second step in the warehouse', () => level('victim'), 60_000);
      await app.query(
        `DELETE FROM victim WHERE id > ${ROWS - 10}; INSERT INTO victim SELECT g, 'late' || g, 1 FROM generate_series(${ROWS + 1}, ${ROWS + 20}) g`,
      );
      await until('both tables in the warehouse', async () => (await level('victim')) && (await level('busy')), 90_000);
      mark('history in the warehouse');
      const historyEvents = ROWS + ROWS / 3 + 10 + 20;
      const expected = ROWS - 10 + 20;
      await until(
        'the archive to hold victim',
        async () =>
          (await readdir(path.join(state, 'archive', 'change-log', 'tables', 'app', 'public.victim'), { recursive: true }).catch(() => [])).length >= 3,
        60_000,
      );

      // The workload on busy, from here to the end: new keys and updates of old ones.
      const w = new pg.Client({ connectionString: cluster.url('app') });
      await w.connect();
      let next = 201;
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
      await until('the workload to flow', () => writes > 20, 30_000);

      // 2. Corrupt victim's mirror behind the platform's back (merged first: rows still in the
      // delta would hide it, docs/warehouse-apply.md).
      await mergeWarehouseTable(cluster.url('dw'), 'app', 'public.victim', ['id']);
      await dw.query("UPDATE app_public._cdc_mirror_victim SET v = 'tampered' WHERE id = 7");
      await dw.query('DELETE FROM app_public._cdc_mirror_victim WHERE id = 42');
      await dw.query(
        "INSERT INTO app_public._cdc_mirror_victim (id, v, n, _cdc_position, _cdc_deleted, _cdc_applied_at) VALUES (100000, 'never', 1, '000000000000000000000001', false, now())",
      );
      expect(await level('victim')).toBe(false);
      const corrupt = (await dw.query(digestSql('app_public.victim'))).rows[0] as { n: number; d: string };
      const correct = (await app.query(digestSql('public.victim'))).rows[0] as { n: number; d: string };
      expect(corrupt.n).toBe(expected);
      expect(correct.n).toBe(expected);

      mark('corrupted');
      // 3. Reconcile: exit 1, victim DIVERGED with exactly those keys, busy MATCH (INCONCLUSIVE under the workload is tried again).
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
        busyVerdict = parsed.verdicts.find((v) => v.table === 'public.busy')!;
        expect(busyVerdict.verdict, busyVerdict.reason).not.toBe('DIVERGED');
      }
      expect(busyVerdict?.verdict, busyVerdict?.reason).toBe('MATCH');
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

      mark('reconcile said DIVERGED');
      // 4. Rebuild from the archive while a reader polls the view.
      reading = true;
      let readError: unknown = null;
      const seen = new Map<string, number>();
      const reads = (async () => {
        while (reading && readError === null) {
          const r = (await reader.query(digestSql('app_public.victim'))).rows[0] as { n: number; d: string };
          const key = `${r.n}/${r.d === corrupt.d ? 'corrupt' : r.d === correct.d ? 'correct' : r.d}`;
          seen.set(key, (seen.get(key) ?? 0) + 1);
        }
      })().catch((e: unknown) => {
        readError = e;
      });
      const rebuilt = await cdc('rebuild', 'public.victim', '--sink', 'warehouse', '--actor', 'e2e', '--json', '--warehouse', cluster.url('dw'));
      reading = false;
      await reads;
      expect(readError, 'a reader of the view failed during the swap').toBeNull();
      expect(rebuilt.code, rebuilt.out + rebuilt.err).toBe(0);
      const report = JSON.parse(rebuilt.out) as {
        detail: {
          run: RebuildRun;
          stats: { archiveRecords: number; streamRecords: number; shards: Array<{ shard: string; archivedThrough: string | null; streamRecords: number }> };
        };
      };
      expect(report.detail.run.mode).toBe('swap');
      expect(report.detail.run.diff).toMatchObject({ missing: 1, extra: 1, changed: 1 });
      // Read from the archive first: every shard's stream part starts at the archive's last record, so
      // the early history came from the archive alone (the stream part is shorter than that history).
      const stats = report.detail.stats;
      expect(stats.shards.length).toBeGreaterThan(0);
      expect(
        stats.shards.every((s) => s.archivedThrough !== null),
        JSON.stringify(stats.shards),
      ).toBe(true);
      expect(report.detail.run.archiveRecords).toBeGreaterThanOrEqual(historyEvents);
      expect(stats.streamRecords, JSON.stringify(stats)).toBeLessThan(historyEvents);
      // Readers saw one whole table or the other.
      expect([...seen.keys()], JSON.stringify([...seen])).toContain(`${expected}/correct`);
      for (const k of seen.keys()) expect([`${expected}/corrupt`, `${expected}/correct`], `a reader saw ${k}`).toContain(k);
      expect(await level('victim')).toBe(true);

      mark('rebuilt');
      // 5. The next reconcile exits 0; never DIVERGED (an INCONCLUSIVE busy under the workload is tried again).
      let final: CdcRun | undefined;
      for (let attempt = 0; attempt < 3 && final?.code !== 0; attempt++) {
        final = await reconcile();
        // Any verdict but MATCH exits 1 (docs/operations.md, "Exit codes"): judged by the verdicts, as in step 3.
        const verdicts = (JSON.parse(final.out) as { verdicts: ReconcileVerdict[] }).verdicts;
        expect(
          verdicts.filter((v) => v.verdict === 'DIVERGED'),
          `${final.out}\n${final.err}`,
        ).toEqual([]);
      }
      expect(final!.code, `${final!.out}\n${final!.err}`).toBe(0);
      const verdicts = (JSON.parse(final!.out) as { verdicts: ReconcileVerdict[] }).verdicts;
      expect(verdicts.map((v) => [v.table, v.verdict]).sort()).toEqual([
        ['public.busy', 'MATCH'],
        ['public.victim', 'MATCH'],
      ]);

      // And row by row.
      stop = true;
      await workload;
      expect(writes).toBeGreaterThan(0);
      await until('both tables level', async () => (await level('victim')) && (await level('busy')), 60_000);
      const verdict = await compareSourceAndWarehouse({
        sourceUrl: cluster.url('app'),
        warehouseUrl: cluster.url('dw'),
        source: 'app',
        tables: [
          { table: 'public.victim', deleteMode: 'soft', mask: [], exclude: [] },
          { table: 'public.busy', deleteMode: 'soft', mask: [], exclude: [] },
        ],
      });
      expect(verdict.match, JSON.stringify(verdict.tables)).toBe(true);
      mark('row-by-row comparison agreed');
    } finally {
      stop = true;
      reading = false;
      await workload.catch(() => undefined);
      if (child.exitCode === null) child.kill('SIGINT');
      await exited;
      await app.query("SELECT pg_drop_replication_slot('cdc_app') FROM pg_replication_slots WHERE slot_name = 'cdc_app'").catch(() => undefined);
      await app.end();
      await dw.end();
      await reader.end();
    }
  }, 420_000);
});
