/**
 * Benchmark: the snapshot of a partitioned table against the same table unpartitioned
 * (docs/partitioned-tables.md, "Snapshot"). Two tables of the same rows (default 16,000, the size
 * of Pagila's `payment`): `public.pay`, partitioned by month into 55 partitions with the primary
 * key (at, id) on the root, and `public.flat`, the same columns and key, not partitioned. Each is
 * snapshotted by the worker (`runTableSnapshot` with the Postgres reader, no stream) the way
 * `cdc local` runs it: the adaptive pacer against the default budget, fed by the pressure probe
 * calibrated before the run; and unthrottled (a fixed chunk) as the reference of what the source
 * gives. Runs alternate the order; the medians are reported.
 *
 * A run is cut at `--max-seconds` (default 60): a crawling snapshot reports the rate it had.
 *
 *     npm run bench:partitioned-snapshot [-- --rows 16000 --partitions 55 --runs 3 --max-seconds 60]
 */
import pg from 'pg';
import { PostgresPressureProbe, PostgresSnapshotReader } from '../lambda/adapters/snapshot-postgres.ts';
import { AdaptivePacer, FixedPacer, type Pacer } from '../lambda/core/snapshot/snapshot-pacer.ts';
import { requestSnapshot, runTableSnapshot } from '../lambda/core/snapshot/snapshot-worker.ts';
import { MemoryControlPlane } from '../test/helpers/memory-control-plane.ts';
import { NO_COLUMN_RULES } from '../lambda/core/tables/masking.ts';
import { startPostgres } from '../local/postgres.ts';
import { exec, serverVersion } from './lib/pg.ts';
import { median, numberArg, rateRow, Recorder, runIfMain, type BenchResult } from './lib/report.ts';

const say = (text: string): void => void process.stdout.write(`[partitioned-snapshot] ${text}\n`);

/** One snapshot run of `table`; the adaptive pacer with the probe as `cdc local` has them, or a fixed chunk. */
async function snapshotRate(
  url: string,
  table: string,
  paced: boolean,
  maxSeconds: number,
): Promise<{ rowsPerSecond: number; chunks: number; rows: number; cut: boolean }> {
  const probeClient = new pg.Client({ connectionString: url });
  await probeClient.connect();
  const probe = new PostgresPressureProbe(async () => probeClient);
  const reader = new PostgresSnapshotReader({ primary: { connectionString: url } });
  const controlPlane = new MemoryControlPlane();
  try {
    await requestSnapshot(controlPlane, { source: 'bench', table, reason: 'initial', actor: 'bench' });
    const pacer: Pacer = paced ? new AdaptivePacer() : new FixedPacer(5000);
    if (paced) await probe.calibrate(20);
    const t0 = performance.now();
    const shouldStop = () => performance.now() - t0 > maxSeconds * 1000;
    const outcome = await runTableSnapshot({
      controlPlane,
      reader,
      publish: async () => undefined,
      pacer,
      source: 'bench',
      table,
      rules: NO_COLUMN_RULES,
      owner: 'bench',
      shouldStop,
      ...(paced ? { pressure: () => probe.read() } : {}),
    });
    const seconds = (performance.now() - t0) / 1000;
    if (outcome !== 'done' && outcome !== 'stopped') throw new Error(`snapshot of ${table} ended ${outcome}`);
    const s = (await controlPlane.getSnapshot('bench', table))!;
    return { rowsPerSecond: s.rowsDone / seconds, chunks: s.chunksDone, rows: s.rowsDone, cut: outcome === 'stopped' };
  } finally {
    await reader.close();
    await probeClient.end();
  }
}

export async function runPartitionedSnapshotBench(): Promise<BenchResult> {
  const rows = numberArg('rows', 16_000);
  const partitions = numberArg('partitions', 55);
  const runs = numberArg('runs', 3);
  const maxSeconds = numberArg('max-seconds', 60);
  const rec = new Recorder('partitioned-snapshot', { rows, partitions, runs, maxSeconds });
  const pgc = await startPostgres({ fast: true });
  try {
    await pgc.createDatabase('src');
    const url = pgc.url('src');
    rec.settings.postgres = await serverVersion(url);
    const ddl = [
      `CREATE TABLE public.pay (id bigint NOT NULL, at timestamptz NOT NULL, amount numeric(8,2), note text, PRIMARY KEY (at, id)) PARTITION BY RANGE (at)`,
    ];
    for (let m = 0; m < partitions; m++) {
      ddl.push(
        `CREATE TABLE public.pay_${m} PARTITION OF public.pay FOR VALUES FROM ('${new Date(Date.UTC(2020, m, 1)).toISOString()}') TO ('${new Date(Date.UTC(2020, m + 1, 1)).toISOString()}')`,
      );
    }
    // The rows spread evenly over the months.
    const step = ((partitions * 28 * 24) / rows).toFixed(6);
    ddl.push(`INSERT INTO public.pay SELECT g, timestamptz '2020-01-01' + g * interval '${step} hours', g % 100, 'n' || g FROM generate_series(1, ${rows}) g`);
    ddl.push(
      `CREATE TABLE public.flat (id bigint NOT NULL, at timestamptz NOT NULL, amount numeric(8,2), note text, PRIMARY KEY (at, id)); INSERT INTO public.flat SELECT * FROM public.pay; ANALYZE`,
    );
    await exec(url, ddl.join(';\n'));
    const rates: Record<string, number[]> = { 'public.flat paced': [], 'public.pay paced': [], 'public.flat fixed': [], 'public.pay fixed': [] };
    for (let i = 0; i < runs; i++) {
      const order = i % 2 === 0 ? ['public.flat', 'public.pay'] : ['public.pay', 'public.flat'];
      for (const table of order) {
        for (const paced of [false, true]) {
          const r = await snapshotRate(url, table, paced, maxSeconds);
          if (!r.cut && r.rows !== rows) throw new Error(`the snapshot of ${table} read ${r.rows} rows of ${rows}`);
          rates[`${table} ${paced ? 'paced' : 'fixed'}`]!.push(r.rowsPerSecond);
          say(
            `${table} ${paced ? 'adaptive pacer' : 'fixed chunk 5000'}: ${Math.round(r.rowsPerSecond)} rows/s (${r.rows} rows, ${r.chunks} chunks${r.cut ? `, cut at ${maxSeconds} s` : ''})`,
          );
        }
      }
    }
    const m = (k: string): number => median(rates[k]!);
    rec.add(
      rateRow(
        `snapshot of a ${partitions}-partition table, unthrottled (fixed chunk 5000)`,
        m('public.pay fixed'),
        'rows/s',
        m('public.flat fixed'),
        'the same rows unpartitioned',
        { note: 'what the source gives' },
      ),
    );
    rec.add(
      rateRow(
        `snapshot of a ${partitions}-partition table, adaptive pacer and probe as cdc local runs them`,
        m('public.pay paced'),
        'rows/s',
        m('public.flat paced'),
        'the same rows unpartitioned, same pacer',
        { target: '≥ 0.5× unpartitioned', met: m('public.pay paced') >= 0.5 * m('public.flat paced') },
      ),
    );
    rec.details.rates = rates;
  } finally {
    await pgc.stop();
  }
  return rec.finish();
}

runIfMain(import.meta.url, runPartitionedSnapshotBench);
