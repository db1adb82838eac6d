/**
 * Benchmark: PostgreSQL's CPU per merged row (docs/warehouse-apply.md, "What a merge costs"). The
 * apply bench's history (`public.items`: 60,000 snapshot rows, then 200,000 events) is applied by
 * the live apply code to two table sets, in turn, 50,000 events at a time (the merge threshold),
 * each followed by a merge, one after the other with nothing else running:
 *
 * - **now**: the merge as the applier runs it (one `MERGE` on PostgreSQL 15+, a mirror made with
 *   `MIRROR_FILLFACTOR`);
 * - **before**: the stage statements (`mergeSql`: temp stage, `UPDATE`, `INSERT`) over a mirror at
 *   PostgreSQL's default fillfactor (100), as before 2026-12-06 (the reference, same run).
 *
 * The figure is the CPU time of the whole cluster during each merge (every server process,
 * background writers and autovacuum workers included, from /proc: Linux only), which on a shared
 * machine moves far less than wall time. Both sets must end with the same mirror (checked).
 *
 *     npm run bench:merge-cpu [-- --runs 3]
 */
import pg from 'pg';
import { PgWarehouse } from '../lambda/adapters/warehouse-pg.ts';
import type { ChangeEvent } from '../lambda/core/shared/event.ts';
import { MIRROR_FILLFACTOR, qualified, warehouseTable } from '../lambda/core/warehouse/warehouse-sql.ts';
import { startPostgres } from '../local/postgres.ts';
import { DEFAULT_HISTORY, generateHistory, historyEvents, registryEntries, snapshotEvents } from './lib/history.ts';
import { serverVersion } from './lib/pg.ts';
import { clusterCpuMs, postmasterOf } from './lib/profile.ts';
import { median, numberArg, Recorder, runIfMain, timeRow, type BenchResult } from './lib/report.ts';

const say = (text: string): void => void process.stdout.write(`[merge-cpu] ${text}\n`);
const BATCH = 10_000;
/** Events between merges: the default merge threshold (docs/warehouse-apply.md, "When a merge is due"). */
const PER_MERGE = 50_000;

export async function run(): Promise<BenchResult> {
  const runs = numberArg('runs', 2);
  const rec = new Recorder('merge-cpu', { history: DEFAULT_HISTORY, batch: BATCH, perMerge: PER_MERGE, runs, fillfactor: MIRROR_FILLFACTOR });
  const cluster = await startPostgres();
  try {
    await cluster.createDatabase('dw');
    rec.settings.postgres = await serverVersion(cluster.url('dw'));
    const pool = new pg.Pool({ connectionString: cluster.url('dw'), max: 2 });
    const postmaster = await postmasterOf(pool);
    const ways = { now: new PgWarehouse(pool), before: new PgWarehouse(pool, { mergeStatement: false }) };
    const h = generateHistory(DEFAULT_HISTORY);
    const { schema } = registryEntries();
    const snapshot = snapshotEvents(h);
    const history = historyEvents(h);
    const cpu: Record<'now' | 'before', number[]> = { now: [], before: [] };
    for (let r = 0; r < runs; r++) {
      const sources = { now: `now${r}`, before: `before${r}` };
      const apply = (how: 'now' | 'before', events: readonly ChangeEvent[]) =>
        ways[how].applyTable({
          source: sources[how],
          table: 'public.items',
          deleteMode: 'soft',
          schemas: new Map([[1, { ...schema, source: sources[how] }]]),
          events: events.map((e) => ({ ...e, source: sources[how] })),
          appliedAt: new Date(Date.UTC(2026, 0, 1)),
        });
      const merge = (how: 'now' | 'before') => ways[how].merge({ source: sources[how], table: 'public.items', deleteMode: 'soft', key: schema.key });
      for (const how of ['now', 'before'] as const) {
        for (let i = 0; i < snapshot.length; i += BATCH) await apply(how, snapshot.slice(i, i + BATCH));
        await merge(how);
        const mirror = qualified(warehouseTable(sources[how], 'public.items').schema, warehouseTable(sources[how], 'public.items').mirror);
        // Before: the mirror at PostgreSQL's default fillfactor, rewritten so every page is full as it was.
        if (how === 'before') for (const sql of [`ALTER TABLE ${mirror} SET (fillfactor = 100)`, `VACUUM FULL ${mirror}`]) await pool.query(sql);
        for (const sql of [`VACUUM ANALYZE ${mirror}`, 'CHECKPOINT']) await pool.query(sql);
      }
      // In turn, the order swapped every merge, so neither set always merges right after the other's appends.
      for (let c = 0; c < history.length; c += PER_MERGE) {
        for (const how of (c / PER_MERGE) % 2 === r % 2 ? (['now', 'before'] as const) : (['before', 'now'] as const)) {
          for (let i = c; i < Math.min(history.length, c + PER_MERGE); i += BATCH)
            await apply(how, history.slice(i, Math.min(history.length, i + BATCH, c + PER_MERGE)));
          const c0 = clusterCpuMs(postmaster);
          const merged = await merge(how);
          cpu[how].push((clusterCpuMs(postmaster) - c0) / merged.rows);
        }
      }
      const fingerprints = await Promise.all(
        (['now', 'before'] as const).map(async (how) => {
          const t = warehouseTable(sources[how], 'public.items');
          const sql = `SELECT md5(string_agg(m::text, '|' ORDER BY id)) AS h FROM (SELECT _cdc_deleted, id, customer_id, status, amount, note, updated_at, _cdc_position, _cdc_deleted_at FROM ${qualified(t.schema, t.mirror)}) m`;
          return (await pool.query<{ h: string }>(sql)).rows[0]!.h;
        }),
      );
      if (fingerprints[0] !== fingerprints[1]) throw new Error(`run ${r}: the two merges left different mirrors`);
      say(
        `run ${r}: both sets left the same mirror; cluster CPU per merged row, now ${cpu.now
          .slice(-4)
          .map((x) => x.toFixed(4))
          .join(', ')} ms, before ${cpu.before
          .slice(-4)
          .map((x) => x.toFixed(4))
          .join(', ')} ms`,
      );
    }
    const now = median(cpu.now) * 1000;
    const before = median(cpu.before) * 1000;
    rec.add(
      timeRow(
        `PostgreSQL CPU per merged row: one MERGE, mirror fillfactor ${MIRROR_FILLFACTOR} (median of ${cpu.now.length} merges)`,
        now,
        'µs',
        before,
        'stage statements, fillfactor 100',
        {
          note: `merges of ${PER_MERGE.toLocaleString('en-US')} rows over a base of about 60,000–90,000 keys`,
        },
      ),
    );
    rec.details.cpuMsPerRow = cpu;
    await pool.end();
    return rec.finish();
  } finally {
    await cluster.stop();
  }
}

runIfMain(import.meta.url, run);
