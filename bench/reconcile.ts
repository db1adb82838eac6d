/**
 * Benchmark: reconciliation of a table that matches (docs/reconcile.md, "Cost and the source budget").
 *
 * A source table and its warehouse copy, identical. The warehouse objects are made by the applier
 * itself (`PgWarehouse`: its DDL, the warehouse's types, the column order of `mirrorLayout`) and the
 * mirror is then filled by column name; the warehouse side reads the view named after the table
 * (tombstones hidden): the base+delta view (the default), or the view over the mirror alone with
 * `--mirror-only` (the layout before the append-first apply).
 * One reconciliation run (`reconcileTable` over the PostgreSQL sides: counts of both sides on a
 * session of their own alongside range checksums over `rowsPerRun` rows from the cursor, segments
 * of 20,000 rows, both sides at the same time) against `SELECT count(*)` of the source table, in the same run. Goal ≤ 3× the count
 * (a time row: its ratio is count ÷ run, so ≥ 0.33). Also the cost of a full pass (every row
 * checksummed on both sides), for reference.
 *
 *     npm run bench:reconcile [-- --rows 1000000 --rows-per-run 100000 --runs 3]
 *     npm run bench:reconcile -- --mirror-only                                                  # the mirror-only view of §8
 *     npm run bench:reconcile -- --rows 1000000 --rows-per-run 100000 --runs 3 --delta 20000   # the base+delta view with 20,000 unmerged changes
 *
 * On the base+delta view the warehouse side counts and summarises it through its second
 * form (`overlayAggregateSql`, docs/reconcile.md "Counting the base+delta view").
 */
import pg from 'pg';
import { pgSourceSide, pgWarehouseSide, prepareReconcileSession } from '../lambda/adapters/reconcile-pg.ts';
import { NO_COLUMN_RULES } from '../lambda/core/tables/masking.ts';
import { chooseHashing, reconcileTable, type KeyRange, type KeyTuple } from '../lambda/core/reconcile/reconcile.ts';
import { FixedPacer } from '../lambda/core/snapshot/snapshot-pacer.ts';
import { CHANGELOG_CDC_COLUMNS, createViewSql, warehouseTable } from '../lambda/core/warehouse/warehouse-sql.ts';
import { PgWarehouse } from '../lambda/adapters/warehouse-pg.ts';
import type { SchemaVersion } from '../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../lambda/core/shared/event.ts';
import { makePosition } from '../lambda/core/shared/position.ts';
import { startPostgres } from '../local/postgres.ts';
import { exec, serverVersion } from './lib/pg.ts';
import { argValue, runIfMain, median, numberArg, Recorder, timeRow, type BenchResult } from './lib/report.ts';

const say = (text: string): void => void process.stdout.write(`[reconcile] ${text}\n`);
const T = warehouseTable('bench', 'public.recon');

export async function runReconcileBench(): Promise<BenchResult> {
  const rowsN = numberArg('rows', 1_000_000);
  const rowsPerRun = numberArg('rows-per-run', 100_000);
  const runs = numberArg('runs', 3);
  // By default the warehouse layout the applier makes: the base+delta view of the append-first
  // apply (an empty delta and the truncations table behind it, docs/warehouse-apply.md); `--overlay`
  // says the same. `--mirror-only`: the view over the mirror alone (the layout before it, §8).
  // --delta N: N changes not merged yet, in the delta and in the source alike
  // (half updates of existing keys, a quarter deletes, a quarter inserts of new keys).
  const deltaN = argValue('delta') !== undefined ? numberArg('delta', 0) : 0;
  const mirrorOnly = argValue('mirror-only') !== undefined;
  if (mirrorOnly && (deltaN > 0 || argValue('overlay') !== undefined))
    throw new Error('--mirror-only excludes --overlay and --delta (both read the base+delta view)');
  const overlay = !mirrorOnly;
  const rec = new Recorder('reconcile', {
    rows: rowsN,
    rowsPerRun,
    runs,
    segment: 20_000,
    view: overlay ? `base+delta (${deltaN} unmerged changes)` : 'mirror only',
    delta: deltaN,
  });
  const pgc = await startPostgres();
  try {
    await pgc.createDatabase('src');
    await pgc.createDatabase('wh');
    rec.settings.postgres = await serverVersion(pgc.url('src'));
    await exec(
      pgc.url('src'),
      `CREATE TABLE public.recon (id bigint PRIMARY KEY, a int NOT NULL, b text, c numeric(12,2), d timestamptz NOT NULL);
      INSERT INTO public.recon SELECT g, g % 1000, md5(g::text), g / 7.0, timestamptz '2026-01-01 00:00:00+00' + g * interval '1 second' FROM generate_series(1, ${rowsN}) g`,
    );
    await exec(pgc.url('src'), 'VACUUM ANALYZE public.recon');
    // The warehouse side is made by the applier itself (its DDL: mirror, changelog, delta,
    // truncations and the base+delta view), from one applied and merged event; then the mirror is
    // filled by column name, so the bench reads the layout a deployed reconciler reads.
    const whPool = new pg.Pool({ connectionString: pgc.url('wh'), max: 1 });
    try {
      const at = new Date().toISOString();
      const version: SchemaVersion = {
        source: 'bench',
        table: 'public.recon',
        version: 1,
        key: ['id'],
        effectivePosition: '0'.repeat(24),
        registeredAt: at,
        columns: [
          { name: 'id', type: 'bigint', nullable: false },
          { name: 'a', type: 'integer', nullable: false },
          { name: 'b', type: 'text', nullable: true },
          { name: 'c', type: 'numeric(12,2)', nullable: true },
          { name: 'd', type: 'timestamp with time zone', nullable: false },
        ],
      };
      const first: ChangeEvent = {
        v: ENVELOPE_VERSION,
        source: 'bench',
        table: 'public.recon',
        op: 'insert',
        key: { id: 1 },
        after: { id: 1, a: 1, b: 'x', c: '1.00', d: at },
        before: null,
        missing: [],
        position: makePosition(16n, 0),
        commitTs: at,
        txId: '1',
        schemaVersion: 1,
        capture: 'slot',
        synthetic: false,
      };
      const applier = new PgWarehouse(whPool);
      await applier.applyTable({
        source: 'bench',
        table: 'public.recon',
        deleteMode: 'soft',
        schemas: new Map([[1, version]]),
        events: [first],
        appliedAt: new Date(),
      });
      await applier.merge({ source: 'bench', table: 'public.recon', deleteMode: 'soft', key: ['id'] });
    } finally {
      await whPool.end();
    }
    const columnsOf = async (table: string): Promise<string[]> => {
      const c = new pg.Client({ connectionString: pgc.url('wh') });
      await c.connect();
      try {
        return (
          await c.query<{ n: string }>(
            'SELECT column_name AS n FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position',
            [T.schema, table],
          )
        ).rows.map((r) => r.n);
      } finally {
        await c.end();
      }
    };
    const mirrorColumns = await columnsOf(T.mirror);
    rec.settings.mirrorColumns = mirrorColumns;
    const named = (columns: readonly string[]): string => columns.map((c) => `"${c}"`).join(', ');
    const row = (id: string, a: string): string =>
      `${id}, ${a}, md5(${id}::text), round(${id} / 7.0, 2), timestamptz '2026-01-01 00:00:00+00' + ${id} * interval '1 second'`;
    await exec(
      pgc.url('wh'),
      [
        // Without --overlay: the view over the mirror alone (the layout before the append-first apply, §8).
        ...(overlay ? [] : [createViewSql(T, mirrorColumns)]),
        `DELETE FROM ${T.schema}.${T.mirror}`,
        `DELETE FROM ${T.schema}.${T.changelog}`,
        `INSERT INTO ${T.schema}.${T.mirror} (${named(['id', 'a', 'b', 'c', 'd', '_cdc_position', '_cdc_deleted', '_cdc_deleted_at', '_cdc_applied_at'])}) ` +
          `SELECT ${row('g', 'g % 1000')}, lpad(to_hex(g), 24, '0'), false, NULL, now() FROM generate_series(1, ${rowsN}) g`,
      ].join(';\n'),
    );
    if (deltaN > 0) {
      const [u, d, i] = [Math.floor(deltaN / 2), Math.floor(deltaN / 4), deltaN - Math.floor(deltaN / 2) - Math.floor(deltaN / 4)];
      const step = Math.max(1, Math.floor(rowsN / (u + d + 1)));
      // Updated keys: g * step; deleted keys: g * step + 1 (g past the updated ones); inserted keys: past the end.
      const upd = `SELECT g * ${step} AS id FROM generate_series(1, ${u}) g`;
      const del = `SELECT (${u} + g) * ${step} + 1 AS id FROM generate_series(1, ${d}) g`;
      await exec(
        pgc.url('src'),
        [
          `UPDATE public.recon SET a = a + 1 WHERE id IN (${upd})`,
          `DELETE FROM public.recon WHERE id IN (${del})`,
          `INSERT INTO public.recon SELECT ${row(`g`, `g % 1000`)} FROM generate_series(${rowsN + 1}, ${rowsN + i}) g`,
        ].join(';\n'),
      );
      await exec(pgc.url('src'), 'VACUUM ANALYZE public.recon');
      // Delta rows (the changelog's columns), at positions above every base row's.
      const cdc = (op: string, n: string): string => `lpad(to_hex(${2 * rowsN} + ${n}), 24, '0'), '${op}', now(), 1, NULL, false, NULL, now()`;
      const into = `INSERT INTO ${T.schema}.${T.delta} (${named([...CHANGELOG_CDC_COLUMNS.map((c) => c.name), 'id', 'a', 'b', 'c', 'd'])})`;
      await exec(
        pgc.url('wh'),
        [
          `${into} SELECT ${cdc('update', 'x.id')}, ${row('x.id', 'x.id % 1000 + 1')} FROM (${upd}) x`,
          `${into} SELECT ${cdc('delete', 'x.id')}, x.id, NULL, NULL, NULL, NULL FROM (${del}) x`,
          `${into} SELECT ${cdc('insert', 'g')}, ${row('g', 'g % 1000')} FROM generate_series(${rowsN + 1}, ${rowsN + i}) g`,
        ].join(';\n'),
      );
    }
    await exec(pgc.url('wh'), `VACUUM ANALYZE ${T.schema}.${T.mirror}, ${T.schema}.${T.delta}`);
    const s = new pg.Client({ connectionString: pgc.url('src') });
    const w = new pg.Client({ connectionString: pgc.url('wh') });
    // A second session per side for the whole-table counts, which run alongside the range walk.
    const sc = new pg.Client({ connectionString: pgc.url('src') });
    const wc = new pg.Client({ connectionString: pgc.url('wh') });
    await Promise.all([s.connect(), w.connect(), sc.connect(), wc.connect()]);
    await prepareReconcileSession(s);
    await prepareReconcileSession(w);
    const count = async (): Promise<number> => {
      const t0 = performance.now();
      await s.query('SELECT count(*) FROM public.recon');
      return performance.now() - t0;
    };
    let cursor: KeyTuple | null = null;
    const reconcile = async (perRun: number): Promise<{ ms: number; verdict: string; covered: number; full: boolean }> => {
      const t0 = performance.now();
      const v = await reconcileTable({
        sink: 'warehouse',
        source: 'bench',
        table: 'public.recon',
        key: ['id'],
        rules: NO_COLUMN_RULES,
        cursor,
        rowsPerRun: perRun,
        pacer: new FixedPacer(20_000),
        settleMs: 0,
        sourceSide: pgSourceSide(s, 'public.recon', ['id'], [], { countClient: sc }),
        sinkSide: pgWarehouseSide(w, 'bench', 'public.recon', ['id'], { stablePoint: false, countClient: wc }),
      });
      cursor = v.nextCursor;
      return { ms: performance.now() - t0, verdict: v.verdict, covered: v.coveredRows, full: v.fullCoverage };
    };
    await count(); // warm
    await reconcile(rowsPerRun);
    const counts: number[] = [];
    const runsMs: number[] = [];
    for (let i = 0; i < runs; i++) {
      counts.push(await count());
      const r = await reconcile(rowsPerRun);
      if (r.verdict !== 'MATCH') throw new Error(`expected MATCH, got ${r.verdict}`);
      runsMs.push(r.ms);
      say(`count(*) ${counts.at(-1)!.toFixed(1)} ms; reconcile run ${r.ms.toFixed(1)} ms (${r.covered} rows checksummed, ${r.verdict})`);
    }
    rec.add(
      timeRow(
        `reconcile run of a matching ${rowsN}-row table (${rowsPerRun} rows checksummed per run)`,
        median(runsMs),
        'ms',
        median(counts),
        'SELECT count(*) on the source',
        { target: '≤ 3× count(*)', met: median(runsMs) <= 3 * median(counts) },
      ),
    );
    // Where a run's work goes: its four kinds of statement, each timed alone on the same sessions
    // (the counts of both sides, the source's segments as the walk reads them, the warehouse's
    // summaries of the same ranges), alternating with the reference count. A run overlaps them on
    // the machine's cores; the reference count uses them all too (a parallel scan), so the sum of
    // the parts over the count is about the ratio a run cannot go below here (the work's floor).
    const parts = await runParts(rowsPerRun, count, s, w, sc, wc);
    for (const [name, ms] of Object.entries(parts.medians)) say(`part alone: ${name} ${ms.toFixed(1)} ms (${(ms / parts.count).toFixed(2)}× the count)`);
    const work = Object.values(parts.medians).reduce((a, b) => a + b, 0);
    say(`sum of the parts ${work.toFixed(1)} ms = ${(work / parts.count).toFixed(2)}× the count (${parts.count.toFixed(1)} ms, median of the same rounds)`);
    // Per side: on separate servers (the deployment) the two sides' work does not compete, and a run takes about the larger.
    const side = (prefix: string): number =>
      Object.entries(parts.medians)
        .filter(([k]) => k.startsWith(prefix))
        .reduce((a, [, v]) => a + v, 0);
    say(
      `per side: source ${(side('source') / parts.count).toFixed(2)}×, warehouse ${(side('warehouse') / parts.count).toFixed(2)}× the count (each side's parts summed)`,
    );
    rec.details.perSide = { source: side('source') / parts.count, warehouse: side('warehouse') / parts.count };
    rec.add(
      timeRow(
        `the run's parts timed alone, summed (source count, warehouse count, ${rowsPerRun} rows summarised on each side)`,
        work,
        'ms',
        parts.count,
        'SELECT count(*) on the source',
        { note: 'the work a run does; on one machine holding both databases a run cannot take much less than this ratio' },
      ),
    );
    rec.details.parts = parts;
    cursor = null;
    const full = await reconcile(rowsN + 1);
    const c = await count();
    say(`full pass ${full.ms.toFixed(1)} ms (${full.covered} rows, whole table ${full.full}); count(*) ${c.toFixed(1)} ms`);
    rec.add(
      timeRow(`full pass over the matching ${rowsN}-row table (every row checksummed on both sides)`, full.ms, 'ms', c, 'SELECT count(*) on the source', {
        note: 'reference only: a run checks rowsPerRun rows, a full pass takes ceil(rows / rowsPerRun) runs',
      }),
    );
    rec.details.counts = counts;
    rec.details.runs = runsMs;
    await Promise.all([s.end(), w.end(), sc.end(), wc.end()]);
  } finally {
    await pgc.stop();
  }
  return rec.finish();
}

/**
 * The run's statements by kind, each timed alone (7 rounds, medians): both sides' whole-table
 * counts, the source's segments read as the walk reads them (`summarizeFirst` of the pacer's 20,000
 * rows from the middle of the key space, `rowsPerRun` rows in all) and the warehouse's summaries of
 * the same ranges; the reference count before each round.
 */
async function runParts(
  rowsPerRun: number,
  count: () => Promise<number>,
  s: pg.Client,
  w: pg.Client,
  sc: pg.Client,
  wc: pg.Client,
): Promise<{ count: number; medians: Record<string, number> }> {
  const source = pgSourceSide(s, 'public.recon', ['id'], [], { countClient: sc });
  const sink = pgWarehouseSide(w, 'bench', 'public.recon', ['id'], { stablePoint: false, countClient: wc });
  const columns = ['id', 'a', 'b', 'c', 'd'];
  const [a, b] = await Promise.all([source.shape(), sink.shape()]);
  const hashing = chooseHashing(source, sink, a, b, columns, []);
  source.useColumns(columns, hashing);
  sink.useColumns(columns, hashing);
  await sink.countAll(); // the view's form verified once, as in a run
  const time = async (f: () => Promise<unknown>): Promise<number> => {
    const t0 = performance.now();
    await f();
    return performance.now() - t0;
  };
  const rounds: Record<string, number[]> = {};
  const add = (k: string, v: number): number => (rounds[k] ??= []).push(v);
  const counts: number[] = [];
  for (let round = 0; round < 7; round++) {
    counts.push(await count());
    add('source count', await time(() => source.countAll()));
    add('warehouse count', await time(() => sink.countAll()));
    const ranges: KeyRange[] = [];
    add(
      `source segments (${rowsPerRun} rows)`,
      await time(async () => {
        let after: KeyTuple | null = ['300000'];
        for (let done = 0; done < rowsPerRun; done += 20_000) {
          const r = await source.summarizeFirst({ after, upTo: null }, Math.min(20_000, rowsPerRun - done));
          ranges.push({ after, upTo: r.last });
          if (r.last === null) break;
          after = r.last;
        }
      }),
    );
    add(
      'warehouse summaries (same ranges)',
      await time(async () => {
        for (const r of ranges) await sink.summarize(r);
      }),
    );
  }
  return { count: median(counts), medians: Object.fromEntries(Object.entries(rounds).map(([k, v]) => [k, median(v)])) };
}

runIfMain(import.meta.url, runReconcileBench);
