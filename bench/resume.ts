/**
 * Benchmark: what a resume replay costs (docs/operations.md, "How a resume replays"). The apply
 * bench's history of `public.items` (its initial rows as snapshot events, then its changes) on one
 * change-log shard, applied live by the warehouse applier in batches of 1,000 up to all but the last
 * `--held` share of it; then an operator pauses the table, the live path holds the rest, the
 * operator resumes, and the sink's replay applies the held range and releases the hold:
 *
 * - one batch per shard at a time (the sinks' default): the replay reads the held shard from its
 *   first held record;
 * - several batches of one shard at once (`parallelizationFactor` 2): from the shard's trim horizon,
 *   every event applied before the hold coming again as a duplicate, so that no lagging lane's
 *   older event is left behind.
 *
 * Each in a warehouse database of its own (embedded PostgreSQL; the control plane in memory, as in
 * the apply bench). Figures: each replay's wall time and events replayed per second, and the
 * second's time against the first's. Both views end equal, with the history's final rows (checked).
 *
 *     npm run bench:resume [-- --held 0.1]
 */
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { METRICS_NAMESPACE } from '../contracts/metrics.ts';
import type { LogRecord } from '../lambda/adapters/change-log-reader.ts';
import { Operator, stateOnlySnapshots } from '../lambda/core/operator/operator.ts';
import { createHeldRangeReplayer } from '../lambda/core/sink/held-range-replay.ts';
import { qualified, warehouseTable } from '../lambda/core/warehouse/warehouse-sql.ts';
import { createWarehouseApplier, type ChangeRecord } from '../lambda/handlers/warehouse-applier.ts';
import { startPostgres } from '../local/postgres.ts';
import { MemoryControlPlane } from '../test/helpers/memory-control-plane.ts';
import {
  BENCH_SOURCE,
  BENCH_TABLE,
  DEFAULT_HISTORY,
  fingerprintSql,
  generateHistory,
  historyEvents,
  registerBenchTable,
  snapshotEvents,
} from './lib/history.ts';
import { serverVersion } from './lib/pg.ts';
import { nowMs, numberArg, rateRow, Recorder, runIfMain, sleep, timeRow, type BenchResult } from './lib/report.ts';

const say = (text: string): void => void process.stdout.write(`[resume] ${text}\n`);
const BATCH = 1_000;
const SHARD = 'shardId-000000000000';
const FIRST_SEQUENCE = 49590338271490256608559692538361571095921575989136588898n;

export async function run(): Promise<BenchResult> {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  const heldShare = numberArg('held', 0.1);
  if (!(heldShare > 0 && heldShare < 1)) throw new Error(`--held: a share between 0 and 1, got ${heldShare}`);
  const h = generateHistory(DEFAULT_HISTORY);
  const log: LogRecord[] = [...snapshotEvents(h), ...historyEvents(h)].map((e, i) => ({
    shardId: SHARD,
    sequenceNumber: String(FIRST_SEQUENCE + BigInt(i) * 1000n),
    arrivedAt: null,
    text: JSON.stringify(e),
  }));
  const heldFrom = Math.floor(log.length * (1 - heldShare));
  const rec = new Recorder('resume', { history: DEFAULT_HISTORY, events: log.length, held: log.length - heldFrom, batch: BATCH });
  const cluster = await startPostgres();
  try {
    const outcomes: Array<{ factor: number; ms: number; replayed: number; fingerprint: { n: number; md5: string } }> = [];
    for (const factor of [1, 2]) {
      const database = `resume${factor}`;
      await cluster.createDatabase(database);
      rec.settings.postgres ??= await serverVersion(cluster.url(database));
      const pool = new pg.Pool({ connectionString: cluster.url(database), max: 2 });
      try {
        outcomes.push({ factor, ...(await resumeOnce(pool, log, heldFrom, factor)) });
      } finally {
        await pool.end();
      }
      const o = outcomes.at(-1)!;
      say(`parallelizationFactor ${factor}: the replay applied ${o.replayed} events in ${Math.round(o.ms)} ms; the view has ${o.fingerprint.n} rows`);
    }
    const [one, two] = outcomes;
    if (one!.fingerprint.md5 !== two!.fingerprint.md5 || one!.fingerprint.n !== h.finalRows.length)
      throw new Error(`the views differ (${JSON.stringify(outcomes.map((o) => o.fingerprint))}; the history ends with ${h.finalRows.length} rows)`);
    const held = log.length - heldFrom;
    for (const o of outcomes) {
      const how = o.factor === 1 ? 'one batch per shard (from the first held record)' : 'two batches of one shard at once (from the trim horizon)';
      rec.add(rateRow(`resume replay, ${how}: events it applied per second (duplicates included)`, (o.replayed / o.ms) * 1000, 'events/s', null, null));
    }
    rec.add(
      timeRow(
        `resume replay of ${held.toLocaleString('en-US')} held events after ${heldFrom.toLocaleString('en-US')} applied, two batches of one shard at once (from the trim horizon)`,
        two!.ms,
        'ms',
        one!.ms,
        'one batch per shard (from the first held record)',
      ),
    );
    rec.details.replays = outcomes.map(({ factor, ms, replayed }) => ({ factor, ms: Math.round(ms), replayed }));
    return rec.finish();
  } finally {
    await cluster.stop();
  }
}

/** Applies the log live up to `heldFrom`, pauses, holds the rest, resumes, and times the replay until the hold is released. */
async function resumeOnce(pool: pg.Pool, log: readonly LogRecord[], heldFrom: number, factor: number) {
  const cp = new MemoryControlPlane();
  await registerBenchTable(cp, new Date(Date.now() - 60_000).toISOString());
  const applier = createWarehouseApplier({
    controlPlane: cp,
    pool,
    sinkId: 'warehouse',
    metrics: new Metrics({ namespace: METRICS_NAMESPACE, serviceName: 'bench' }),
    logger: new Logger({ logLevel: 'SILENT' }),
    parallelizationFactor: factor,
  });
  const deliver = async (from: number, to: number): Promise<{ held: number }> => {
    let held = 0;
    for (let i = from; i < to; i += BATCH) {
      const batch: ChangeRecord[] = log
        .slice(i, Math.min(to, i + BATCH))
        .map((r) => ({ sequenceNumber: r.sequenceNumber, origin: `changes/${r.shardId}/${r.sequenceNumber}`, text: r.text }));
      const out = await applier.applyRecords(batch);
      if (out.failed.length > 0) throw new Error(`live batch at ${i}: ${out.reasons.get(out.failed[0]!)}`);
      held += out.held;
    }
    return { held };
  };
  await deliver(0, heldFrom);
  const operator = new Operator({ controlPlane: cp, settings: { changeLogRetentionMs: 86_400_000 }, snapshots: stateOnlySnapshots });
  await operator.pause('bench', { table: BENCH_TABLE, durationMs: 3_600_000, reason: 'bench' });
  await sleep(1_100); // the applier reads a table's record again after at most a second
  const { held } = await deliver(heldFrom, log.length);
  if (held !== log.length - heldFrom) throw new Error(`the live path held ${held} of ${log.length - heldFrom} events after the pause`);
  await operator.resume('bench', { table: BENCH_TABLE });
  const replayer = createHeldRangeReplayer({
    controlPlane: cp,
    sinkId: 'warehouse',
    applier,
    readLog: async function* (starts) {
      // As lambda/adapters/change-log-reader.ts reads: the named shard from its start (that record first), in pages.
      const at = starts === null ? null : starts.has(SHARD) ? starts.get(SHARD)! : undefined;
      if (at === undefined) return;
      const from = at === null ? 0 : log.findIndex((r) => BigInt(r.sequenceNumber) >= BigInt(at));
      for (let i = Math.max(0, from); i < log.length; i += 10_000) yield log.slice(i, i + 10_000);
    },
  });
  const t0 = nowMs();
  const [outcome] = await replayer.replayPending();
  const ms = nowMs() - t0;
  if (!outcome?.released) throw new Error(`the replay did not release the hold: ${JSON.stringify(outcome)}`);
  await applier.mergeDue({ force: true });
  const t = warehouseTable(BENCH_SOURCE, BENCH_TABLE);
  const fingerprint = (await pool.query<{ n: number; md5: string }>(fingerprintSql(qualified(t.schema, t.view)))).rows[0]!;
  return { ms, replayed: outcome.replayed, fingerprint };
}

runIfMain(import.meta.url, run);
