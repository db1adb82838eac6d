/**
 * Benchmark: what one merge of the delta costs against the size of the table's base
 * (docs/warehouse-apply.md, "What a merge costs"). The apply bench's history (`public.items`)
 * is applied by the live apply code: its first 140,000 events appended and merged (a base of about
 * 75,000 keys), then `--base-rows` more rows of other keys are written into the mirror and the
 * changelog (as if the table had that much history) and the base is analysed, then the next
 * `--delta` events are appended to the delta. Two table sets get exactly that, and their deltas
 * are merged:
 *
 * - by `PgWarehouse.merge` (the merge the applier and the merge worker run): on PostgreSQL it lets
 *   the planner use nested loops when the base is large against the delta, and appends to the
 *   changelog with `ON CONFLICT DO NOTHING`;
 * - by the portable merge with nested loops off, the merge before 2026-12-02 (the reference): hash
 *   joins over the whole mirror and an anti-join over the whole changelog.
 *
 * Each at two base sizes: the history's own (`--base-rows 0`) and the given one. Figures: merge
 * time, and the reference's time over the new one's at the same base size. Both sets end equal
 * (checked). Then, over the same bases, a full apply (one batch the append path cannot take: an
 * update without a TOAST column) with 1,000 delta rows pending, which it merges first: its time,
 * against the portable merge with nested loops off followed by the same batch (the full apply
 * before 2026-12-02). Both sets end equal (checked).
 *
 *     npm run bench:merge [-- --base-rows 1000000 --delta 56000]
 */
import pg from 'pg';
import { PgWarehouse } from '../lambda/adapters/warehouse-pg.ts';
import type { ChangeEvent } from '../lambda/core/shared/event.ts';
import { makePosition } from '../lambda/core/shared/position.ts';
import type { TableApplyResult } from '../lambda/core/warehouse/warehouse-port.ts';
import { lockDeltaSql, mergeSql, qualified, warehouseTable, type WarehouseTable } from '../lambda/core/warehouse/warehouse-sql.ts';
import { pendingBoundsSql } from '../lambda/core/warehouse/watermark-sql.ts';
import { startPostgres } from '../local/postgres.ts';
import { DEFAULT_HISTORY, generateHistory, historyEvents, registryEntries, snapshotEvents } from './lib/history.ts';
import { serverVersion } from './lib/pg.ts';
import { runIfMain, nowMs, numberArg, Recorder, timeRow, type BenchResult } from './lib/report.ts';

const say = (text: string): void => void process.stdout.write(`[merge] ${text}\n`);
const BASE_EVENTS = 140_000;
const BATCH = 10_000;
/** Delta rows pending when the full apply's batch comes. */
const PENDING = 1_000;
/** Keys of the added base rows start here (the history's keys are below). */
const FILL_KEY = 100_000_000;

export async function run(): Promise<BenchResult> {
  const baseRows = numberArg('base-rows', 1_000_000);
  const delta = numberArg('delta', 56_000);
  const rec = new Recorder('merge', { history: DEFAULT_HISTORY, baseEvents: BASE_EVENTS, delta, baseRows, batch: BATCH });
  const cluster = await startPostgres();
  try {
    await cluster.createDatabase('dw');
    rec.settings.postgres = await serverVersion(cluster.url('dw'));
    const pool = new pg.Pool({ connectionString: cluster.url('dw'), max: 2 });
    const warehouse = new PgWarehouse(pool);
    const h = generateHistory(DEFAULT_HISTORY);
    const { schema } = registryEntries();
    const all = [...snapshotEvents(h), ...historyEvents(h)];
    if (BASE_EVENTS + delta > all.length) throw new Error(`--delta: at most ${all.length - BASE_EVENTS} events (the history has ${all.length})`);
    const runs: Record<string, unknown>[] = [];
    const times = new Map<string, number>();
    const applyEvents = async (sourceId: string, events: readonly ChangeEvent[]): Promise<TableApplyResult> =>
      warehouse.applyTable({
        source: sourceId,
        table: 'public.items',
        deleteMode: 'soft',
        schemas: new Map([[1, { ...schema, source: sourceId }]]),
        events: events.map((e) => ({ ...e, source: sourceId })),
        appliedAt: new Date(Date.UTC(2026, 0, 1)),
      });
    const e0 = all[0]!;
    for (const size of [0, baseRows]) {
      const sets = ['now', 'before'].map((how) => ({ how, source: `m${size}${how}` }));
      for (const s of sets) {
        const apply = (from: number, to: number) => async (): Promise<void> => {
          for (let i = from; i < to; i += BATCH) await applyEvents(s.source, all.slice(i, Math.min(to, i + BATCH)));
        };
        await apply(0, BASE_EVENTS)();
        await warehouse.merge({ source: s.source, table: e0.table, deleteMode: 'soft', key: schema.key });
        const t = warehouseTable(s.source, e0.table);
        if (size > 0) await fillBase(pool, t, size);
        await pool.query(`ANALYZE ${qualified(t.schema, t.mirror)}; ANALYZE ${qualified(t.schema, t.changelog)}`);
        await apply(BASE_EVENTS, BASE_EVENTS + delta)();
      }
      const [now, before] = sets.map((s) => warehouseTable(s.source, 'public.items'));
      const t0 = nowMs();
      const merged = await warehouse.merge({ source: sets[0]!.source, table: 'public.items', deleteMode: 'soft', key: schema.key });
      const nowMsTaken = nowMs() - t0;
      const t1 = nowMs();
      await portableMerge(pool, before!);
      const beforeMs = nowMs() - t1;
      const mirror = await count(pool, now!, 'mirror');
      if ((await fingerprint(pool, now!)) !== (await fingerprint(pool, before!)))
        throw new Error(`the two merges over a base of ${mirror} mirror rows left different tables`);
      times.set(`${size}now`, nowMsTaken);
      times.set(`${size}before`, beforeMs);
      say(
        `base of ${mirror} mirror rows (${size} added), delta of ${merged.rows} rows: merge ${Math.round(nowMsTaken)} ms (nested loops ${merged.nestedLoops ? 'allowed' : 'off'}), the merge before ${Math.round(beforeMs)} ms; both left the same tables`,
      );
      rec.add(
        timeRow(
          `merge of ${merged.rows} delta rows over a base of ${mirror.toLocaleString('en-US')} mirror rows (nested loops ${merged.nestedLoops ? 'allowed' : 'off'})`,
          nowMsTaken,
          'ms',
          beforeMs,
          'the merge before (hash joins, changelog anti-join)',
        ),
      );
      // A full apply over the same base: a pending delta of the next PENDING events, then a batch
      // the append path cannot take (an update without its `note`, an unchanged TOAST value), which
      // merges the delta first. Now: `applyTable` (its merge decides nested loops as `merge` does);
      // before: the portable merge with nested loops off, then the same batch (nothing to merge).
      const from = BASE_EVENTS + delta;
      for (const s of sets) for (let i = from; i < from + PENDING; i += BATCH) await applyEvents(s.source, all.slice(i, Math.min(from + PENDING, i + BATCH)));
      const { note: _note, ...withoutNote } = e0.after!;
      const toast: ChangeEvent = { ...e0, op: 'update', after: withoutNote, before: null, missing: ['note'], position: makePosition(1n << 40n, 0) };
      const t2 = nowMs();
      const full = await applyEvents(sets[0]!.source, [toast]);
      const fullMs = nowMs() - t2;
      const t3 = nowMs();
      await portableMerge(pool, before!);
      await applyEvents(sets[1]!.source, [toast]);
      const fullBeforeMs = nowMs() - t3;
      if (full.mode !== 'apply' || full.merged?.rows !== PENDING)
        throw new Error(`the full apply merged ${JSON.stringify(full.merged)} in mode ${full.mode}, expected ${PENDING} rows first`);
      if ((await fingerprint(pool, now!)) !== (await fingerprint(pool, before!)))
        throw new Error(`the two full applies over a base of ${mirror} mirror rows left different tables`);
      say(
        `full apply with ${PENDING} delta rows pending: ${Math.round(fullMs)} ms (its merge's nested loops ${full.merged.nestedLoops ? 'allowed' : 'off'}), the same before ${Math.round(fullBeforeMs)} ms`,
      );
      rec.add(
        timeRow(
          `full apply of one batch with ${PENDING} delta rows pending, over a base of ${mirror.toLocaleString('en-US')} mirror rows (nested loops ${full.merged.nestedLoops ? 'allowed' : 'off'})`,
          fullMs,
          'ms',
          fullBeforeMs,
          'the same before (its merge with hash joins)',
        ),
      );
      runs.push({
        addedRows: size,
        mirrorRows: mirror,
        deltaRows: merged.rows,
        nestedLoops: merged.nestedLoops,
        mergeMs: nowMsTaken,
        beforeMs,
        fullApply: { pending: PENDING, nestedLoops: full.merged.nestedLoops, ms: fullMs, beforeMs: fullBeforeMs },
      });
    }
    const growth = (how: string): number => times.get(`${baseRows}${how}`)! / times.get(`0${how}`)!;
    say(`merge time at ${baseRows} added rows over the history's own base: now ${growth('now').toFixed(2)}×, before ${growth('before').toFixed(2)}×`);
    rec.details.runs = runs;
    rec.details.growth = { now: growth('now'), before: growth('before') };
    await pool.end();
    return rec.finish();
  } finally {
    await cluster.stop();
  }
}

/** Adds `n` rows of other keys to the base: live mirror rows and their insert events in the changelog. */
async function fillBase(pool: pg.Pool, t: WarehouseTable, n: number): Promise<void> {
  const at = "timestamptz '2026-01-01 00:00:00+00'";
  const pos = "'0000000000000000' || lpad(to_hex(g), 8, '0')";
  await pool.query(
    `INSERT INTO ${qualified(t.schema, t.mirror)} (_cdc_deleted, id, customer_id, status, amount, note, updated_at, _cdc_position, _cdc_deleted_at, _cdc_applied_at) ` +
      `SELECT false, ${FILL_KEY} + g, g % 5000, 'open', (g % 1000) / 7.0, md5(g::text), ${at}, ${pos}, NULL, ${at} FROM generate_series(1, ${n}) g`,
  );
  await pool.query(
    `INSERT INTO ${qualified(t.schema, t.changelog)} (_cdc_position, _cdc_op, _cdc_commit_ts, _cdc_schema_version, _cdc_tx_id, _cdc_synthetic, _cdc_missing, _cdc_applied_at, id, customer_id, status, amount, note, updated_at) ` +
      `SELECT ${pos}, 'insert', ${at}, 1, '1', false, NULL, ${at}, ${FILL_KEY} + g, g % 5000, 'open', (g % 1000) / 7.0, md5(g::text), ${at} FROM generate_series(1, ${n}) g`,
  );
}

/** The merge as it was before 2026-12-02: the portable statements (`mergeSql` without `engine`) with nested loops off, in one transaction. */
async function portableMerge(pool: pg.Pool, t: WarehouseTable): Promise<void> {
  const columns = async (name: string): Promise<string[]> =>
    (
      await pool.query<{ attname: string }>(
        `SELECT attname FROM pg_attribute WHERE attrelid = '${qualified(t.schema, name)}'::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
      )
    ).rows.map((r) => r.attname);
  const o = {
    key: ['id'],
    mirrorColumns: await columns(t.mirror),
    changelogColumns: (await columns(t.changelog)).filter((n) => n !== '_cdc_seq'),
    hard: false,
    deletedKeys: false,
    truncations: true,
  };
  const c = await pool.connect();
  try {
    await c.query(`BEGIN; SET LOCAL enable_nestloop = off; ${lockDeltaSql(t, 'postgres')}`);
    const b = (await c.query<{ from: string; to: string }>(pendingBoundsSql(t))).rows[0]!;
    for (const sql of mergeSql(t, { ...o, pending: { from: String(b.from), to: String(b.to) } })) await c.query(sql);
    await c.query('COMMIT');
  } finally {
    c.release();
  }
}

async function count(pool: pg.Pool, t: WarehouseTable, which: 'mirror'): Promise<number> {
  return Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${qualified(t.schema, t[which])}`)).rows[0]!.n);
}

/** A digest of every mirror and changelog row (platform columns included) and the delta's size. */
async function fingerprint(pool: pg.Pool, t: WarehouseTable): Promise<string> {
  const digest = async (name: string, order: string): Promise<string> =>
    (await pool.query<{ d: string }>(`SELECT md5(string_agg(x::text, '|' ORDER BY ${order})) AS d FROM ${qualified(t.schema, name)} x`)).rows[0]!.d;
  const deltaRows = (await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${qualified(t.schema, t.delta)}`)).rows[0]!.n;
  return `${await digest(t.mirror, 'x.id')} ${await digest(t.changelog, 'x._cdc_position, x.id')} ${deltaRows}`;
}

runIfMain(import.meta.url, run);
