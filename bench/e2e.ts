/**
 * Benchmark 2, end to end: the `cdc local` pipeline (slot capture → raw stream → normalizer →
 * change log → warehouse applier and archive copier, each behind its own poller, with the
 * heartbeat writer) under a sustained write load on the source, driven through the pipeline's
 * programmatic API (`local/stack.ts`, `local/pipeline.ts`) exactly as `cdc local` wires it.
 *
 * Measured: end-to-end lag from source commit to warehouse commit, read on the heartbeat rows
 * (p50 / p99 / max over the load), the changes applied per second, and the backlog when the load
 * stops (how far each stage is behind, and how long it takes to drain). Reference, measured in
 * the same run: the same workload's commit rate on the source alone (unthrottled, no capture).
 * At the end source and warehouse are compared row by row (the same verdict `cdc local` prints).
 *
 *     npm run bench:e2e [-- --rate 1000 --seconds 60 --tx-size 10 --profile --search-seconds 30 --search-steps 0.1,0.2,0.3 --search-refine 2 --kinesalite-per-stream --request-callers]
 *
 * After the fixed-rate run, a search for the highest sustained rate: steps at growing shares of
 * the source-alone rate (`--search-steps`, each `--search-seconds` long) until one fails (lag p99
 * over 1 s, the backlog not drained within 5 s, or the source not reaching the rate), then
 * `--search-refine` (default 2) halvings of the interval between the last step sustained and the
 * first not (bench/lib/rate-search.ts); the highest step sustained is the result.
 *
 * `--profile` takes a CPU profile of this process (capture, pollers, normalizer, applier, archive
 * copier: everything but PostgreSQL and DynamoDB Local) during the load.
 *
 * The stand-in's ceiling (`--stand-in-ceiling`, on by default; `--no-stand-in-ceiling` skips it;
 * `--ceiling-changes N`, default 30,000; docs/performance-log.md, "Ceilings: what this machine and the mandated stand-ins allow"): the pipeline's Kinesis
 * client counts every record put and read per stream over the whole run (the passes a change makes
 * through kinesalite) and keeps the records put during the load; after the stack has stopped
 * (everything else idle), kinesalite alone carries N changes of those records in the pipeline's
 * pattern (bench/lib/kinesis-ceiling.ts). Printed: the changes/s it can carry, as a ratio of the
 * source-alone rate of this run, and the share of a core kinesalite needs at the goal's rate.
 * The ceiling runs kinesalite as the stack ran it: one process for both streams, or one per stream
 * with `--kinesalite-per-stream` (docs/local.md, "One kinesalite process per stream").
 *
 * For the reference and the fixed-rate load, the CPU of every process per 10,000 changes
 * (bench/lib/cpu-table.ts) and, for the load, the Kinesis and DynamoDB requests per 10,000 changes
 * by kind (docs/performance-log.md, "48. Where the end-to-end pipeline's CPU goes, and one kinesalite per stream");
 * for each step of the rate search, the CPU of every process per 10,000 changes and the share of
 * the machine's cores they kept busy (docs/performance-log.md, "69. The cores' bound on the apply line").
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { MetricName } from '../contracts/metrics.ts';
import type { TableConfig } from '../lambda/core/tables/table-config.ts';
import { captureStdout, MetricsCollector } from '../local/metrics.ts';
import { LocalPipeline } from '../local/pipeline.ts';
import { LeanDynamoDbClient } from '../local/dynamodb-lean.ts';
import { startLocalStack } from '../local/stack.ts';
import { compareLsn } from '../local/slot.ts';
import { compareSourceAndWarehouse } from '../local/verdict.ts';
import { cpuProfile, processCpuMs } from './lib/profile.ts';
import { highestPassed, searchHighestSustained } from './lib/rate-search.ts';
import { runWorkload } from './lib/workload.ts';
import { exec, one } from './lib/pg.ts';
import { coreBoundRate } from './lib/cpu-bound.ts';
import { cpuRows, cpuSnapshot, cpuTableText, type CpuRow, type CpuSnapshot } from './lib/cpu-table.ts';
import { KinesisTally, shardCount, standInCeiling, type CeilingResult, type SampledRecord } from './lib/kinesis-ceiling.ts';
import { argValue, runIfMain, numberArg, percentile, rateRow, Recorder, sleep, timeRow, type BenchResult } from './lib/report.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
let print: (text: string) => void = (t) => process.stdout.write(t);
const say = (text: string): void => print(`[e2e] ${text}\n`);

const SOURCE = 'bench';
const SINK = 'warehouse';
const TABLE = 'public.orders';
const INITIAL_ROWS = 20_000;

const TABLE_SQL = (name: string): string =>
  `CREATE TABLE IF NOT EXISTS ${name} (id bigint PRIMARY KEY, customer_id bigint NOT NULL, status text NOT NULL, amount numeric(12,2) NOT NULL, note text, updated_at timestamptz NOT NULL DEFAULT now())`;

export async function runE2eBench(): Promise<BenchResult> {
  const rate = numberArg('rate', 1000);
  const seconds = numberArg('seconds', 60);
  const txSize = numberArg('tx-size', 10);
  const heartbeatMs = numberArg('heartbeat-ms', 250);
  const refSeconds = numberArg('reference-seconds', 10);
  const profileLoad = argValue('profile') !== undefined;
  // The search for the highest sustained rate (after the fixed-rate run): steps of this many seconds, at these shares of the source-alone rate.
  const searchSeconds = numberArg('search-seconds', 30);
  const searchSteps = (argValue('search-steps') ?? '0.1,0.15,0.2,0.25,0.3,0.35,0.4,0.45,0.5,0.6,0.7,0.85,1')
    .split(',')
    .map(Number)
    .filter((x) => x > 0);
  // Halvings of the interval between the last step sustained and the first not (bench/lib/rate-search.ts).
  const searchRefine = numberArg('search-refine', 2);
  const rec = new Recorder('e2e', {
    rate,
    seconds,
    txSize,
    heartbeatMs,
    referenceSeconds: refSeconds,
    searchSeconds,
    searchSteps,
    searchRefine,
    initialRows: INITIAL_ROWS,
    mix: '70 % updates, 20 % inserts, 10 % deletes',
    durability: 'fsync on (the embedded PostgreSQL defaults of cdc local)',
    pipeline:
      "cdc local: one embedded PostgreSQL (source and warehouse databases), DynamoDB Local, kinesalite in its own process (one per stream with --kinesalite-per-stream; the stack's shards: raw stream 1, change log 2), pollers with batch size up to 1,000 (no window; the archive copier's 2,000 with a 2 s window)",
  });
  const ceilingOn = argValue('no-stand-in-ceiling') === undefined;
  const ceilingChanges = numberArg('ceiling-changes', 30_000);
  // What the ceiling needs from the pipeline's run (filled in the run, used after the stack stopped).
  // The highest sustained rate of the search (null: no search ran, or no step passed), for the row against the stand-in's ceiling.
  let sustainedRate: number | null = null;
  // The search's step with the least CPU per change (every process), for the cores' bound against the ceiling.
  let leanestStep: StepResult | null = null;
  let ceilingInput: {
    sourceAlone: number;
    rate: number;
    settings: PatternSettings;
    streams: { raw: string; changeLog: string };
    shards: { raw: number; changeLog: number };
    raw: SampledRecord[];
    changeLog: SampledRecord[];
    perStream: boolean;
  } | null = null;
  const stateDir = mkdtempSync(path.join(os.tmpdir(), 'cdc-bench-e2e-'));
  const say0 = (t: string): void => void process.stdout.write(`[e2e] ${t}\n`);
  say0(`starting the local stack in ${stateDir}`);
  // `--kinesalite-per-stream`: the raw stream in a kinesalite process of its own (docs/local.md, "One kinesalite process per stream"; for A/B runs).
  const stack = await startLocalStack({ stateDir, source: SOURCE, log: (l) => say0(l), rawStreamApart: argValue('kinesalite-per-stream') !== undefined });
  // Every record put and read through the pipeline's client, per stream; the load's records kept for the ceiling.
  const tally = new KinesisTally(ceilingOn ? ceilingChanges : 0);
  tally.attach(stack.kinesis);
  // Control-plane requests per kind (DynamoDB Local's share of the CPU table).
  const dynamoCalls = new Map<string, { calls: number; records: number; empty: number }>();
  const requestCallers = argValue('request-callers') !== undefined;
  if (requestCallers) Error.stackTraceLimit = 40;
  const countDynamo = (commandName: string, args: object): void => {
    // The item's kind: the partition key up to its first '#' (the control table's layout).
    const input = args as { Key?: { pk?: { S?: string } }; Item?: { pk?: { S?: string } }; ExpressionAttributeValues?: Record<string, { S?: string }> };
    const pk = input.Key?.pk?.S ?? input.Item?.pk?.S ?? Object.values(input.ExpressionAttributeValues ?? {})[0]?.S ?? '';
    // The whole partition key names the consumer, sink or table; `--request-callers` adds who sent it (the first frame outside the control plane's adapter).
    const kind = `DynamoDB ${commandName.replace(/Command$/, '')} ${pk}${requestCallers ? ` from ${callerOf(new Error().stack ?? '')}` : ''}`;
    const r = dynamoCalls.get(kind) ?? { calls: 0, records: 0, empty: 0 };
    dynamoCalls.set(kind, { calls: r.calls + 1, records: 0, empty: 0 });
  };
  stack.dynamo.middlewareStack.add(
    (next, context) => (args) => {
      countDynamo(String(context.commandName), args.input as object);
      return next(args);
    },
    { step: 'initialize', name: 'benchDynamoCalls' },
  );
  // The requests the lean client answers itself (local/dynamodb-lean.ts), counted as they are sent.
  if (stack.dynamo instanceof LeanDynamoDbClient) stack.dynamo.afterSend((name, input, output) => output === undefined && countDynamo(name, input));
  // Both kinesalite processes (the raw stream's own, when the stack runs one: docs/local.md, "One kinesalite process per stream").
  const kinesalites = [stack.kinesalite, ...(stack.kinesaliteRaw ? [stack.kinesaliteRaw] : [])];
  const kinesaliteCpu = (): number | null => {
    let t = 0;
    for (const k of kinesalites) {
      const ms = k.pid !== undefined ? processCpuMs(k.pid) : null;
      if (ms === null) return null;
      t += ms;
    }
    return t;
  };
  const kinesaliteCpu0 = kinesaliteCpu();
  const collector = new MetricsCollector();
  const captured = captureStdout(collector, { emfFile: stack.files.emf, logFile: stack.files.handlerLog });
  print = (t) => captured.write(t);
  let pipeline: LocalPipeline | null = null;
  const errors: string[] = [];
  try {
    // Reference: the workload alone on the source, unthrottled, on an uncaptured copy of the table.
    await exec(stack.sourceUrl, `${TABLE_SQL('public.orders_ref')}; ${TABLE_SQL(TABLE)}`);
    await exec(
      stack.sourceUrl,
      `INSERT INTO public.orders_ref (id, customer_id, status, amount, note) SELECT g, g % 1000, 'placed', 1, md5(g::text) FROM generate_series(1, ${INITIAL_ROWS}) g`,
    );
    await exec(stack.sourceUrl, 'VACUUM ANALYZE public.orders_ref');
    say(`reference: the workload alone on the source, unthrottled, ${refSeconds} s`);
    const namedPids = new Map<number, string>();
    if (stack.kinesalite.pid !== undefined)
      namedPids.set(stack.kinesalite.pid, stack.kinesaliteRaw ? "kinesalite (the change log's)" : 'kinesalite (both streams)');
    if (stack.kinesaliteRaw?.pid !== undefined) namedPids.set(stack.kinesaliteRaw.pid, "kinesalite (the raw stream's)");
    const refCpu0 = cpuSnapshot(namedPids);
    const refT0 = Date.now();
    const ref = await runWorkload({ url: stack.sourceUrl, table: 'public.orders_ref', rate: 0, txSize, seed: 7, initialIds: INITIAL_ROWS, seconds: refSeconds })
      .done;
    const sourceAlone = ref.changesPerSecond;
    rec.details.cpuReference = cpuRows(refCpu0, cpuSnapshot(namedPids), ref.changes, Date.now() - refT0);
    say(`CPU during the reference (${ref.changes} changes):\n${cpuTableText(rec.details.cpuReference as never).join('\n')}`);
    await exec(stack.sourceUrl, 'DROP TABLE public.orders_ref');
    say(
      `source alone: ${Math.round(sourceAlone)} changes/s (${Math.round(sourceAlone / txSize)} transactions/s), commit p50 ${ref.commitMs.p50.toFixed(2)} ms`,
    );

    // The pipeline.
    const tables: TableConfig[] = [{ table: TABLE, deleteMode: 'soft', mask: [], exclude: [] }];
    pipeline = new LocalPipeline({
      stack,
      source: SOURCE,
      tables,
      sinkId: SINK,
      collector,
      heartbeatMs,
      workloadRate: 0,
      // The initial rows go through the stream (below); a snapshot would re-read them, paced by the source's load.
      snapshot: false,
      onError: (where, e) => errors.push(`${where}: ${e instanceof Error ? e.message : String(e)}`),
    });
    await pipeline.start();
    // Initial rows go through the pipeline too, so the warehouse starts equal to the source.
    await exec(
      stack.sourceUrl,
      `INSERT INTO ${TABLE} (id, customer_id, status, amount, note) SELECT g, g % 1000, 'placed', 1, md5(g::text) FROM generate_series(1, ${INITIAL_ROWS}) g`,
    );
    const c0 = performance.now();
    // Caught up: the capture acknowledged the insert, then a heartbeat written after that reached
    // the warehouse (the capture never finds the slot empty while beats come faster than one of
    // its rounds on a loaded machine). A heartbeat is judged by its commit time, which a lag
    // sample only bounds (the sample is taken after the warehouse commit), so one committed just
    // before the insert could pass for a later one: hence the capture first.
    const insertLsn = (await one<{ lsn: string }>(stack.sourceUrl, 'SELECT pg_current_wal_lsn()::text AS lsn')).lsn;
    const p0 = pipeline;
    await until(
      () => p0.capture.stats.lastCommitLsn !== null && compareLsn(p0.capture.stats.lastCommitLsn, insertLsn) >= 0,
      300_000,
      'the capture did not acknowledge the initial rows',
    );
    await heartbeatCaughtUp(collector, Date.now(), 300_000);
    say(`pipeline started; ${INITIAL_ROWS} initial rows captured and applied in ${((performance.now() - c0) / 1000).toFixed(1)} s`);
    await sleep(2 * heartbeatMs);

    const appliedBefore = collector.total(MetricName.EVENTS_APPLIED, { Sink: SINK });
    const capturedBefore = pipeline.capture.stats.records;
    const done0 = {
      normalizer: pipeline.pollers.normalizer.stats.recordsDone,
      sink: pipeline.pollers.sink.stats.recordsDone,
      archive: pipeline.pollers.archive.stats.recordsDone,
    };
    const batches0 = {
      normalizer: pipeline.pollers.normalizer.stats.batches,
      sink: pipeline.pollers.sink.stats.batches,
      archive: pipeline.pollers.archive.stats.batches,
    };
    const t0 = Date.now();
    tally.sampling = true;
    const loadCpu0: CpuSnapshot = cpuSnapshot(namedPids);
    const requests0 = new Map([...tally.requests, ...dynamoCalls]);
    const kinesaliteCpuLoad0 = kinesaliteCpu();
    say(`load: ${rate} changes/s in transactions of ${txSize} for ${seconds} s`);
    const workload = runWorkload({ url: stack.sourceUrl, table: TABLE, rate, txSize, seed: 11, initialIds: INITIAL_ROWS, seconds });
    const p = pipeline;
    const progress = setInterval(() => {
      const lags = p.lagSamples(Date.now() - 10_000);
      say(
        `  t+${Math.round((Date.now() - t0) / 1000)} s: lag (last 10 s) p50 ${Math.round(percentile(lags, 50))} ms, max ${Math.round(Math.max(0, ...lags))} ms; captured ${p.capture.stats.records - capturedBefore}`,
      );
    }, 10_000);
    const load = profileLoad ? await cpuProfile(ROOT, () => workload.done).then((r) => ((rec.details.profile = r.profile), r.result)) : await workload.done;
    clearInterval(progress);
    const t1 = Date.now();
    tally.sampling = false;
    reportLoadCpu(rec, cpuRows(loadCpu0, cpuSnapshot(namedPids), load.changes, t1 - t0), requests0, new Map([...tally.requests, ...dynamoCalls]), load.changes);
    const kinesaliteCpuLoad1 = kinesaliteCpu();
    const committedRate = load.changesPerSecond;

    // Backlog when the load stops.
    const slot = await one<{ lag: string | null }>(
      stack.sourceUrl,
      `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::bigint::text AS lag FROM pg_replication_slots WHERE slot_name = $1`,
      [pipeline.capture.slot],
    );
    const capturedAtStop = pipeline.capture.stats.records - capturedBefore;
    const appliedAtStop = collector.total(MetricName.EVENTS_APPLIED, { Sink: SINK }) - appliedBefore;
    // Records each stage has handled since the load started; the differences are the backlog per stage.
    const stages = {
      committed: load.changes,
      captured: capturedAtStop,
      normalized: pipeline.pollers.normalizer.stats.recordsDone - done0.normalizer,
      applied: pipeline.pollers.sink.stats.recordsDone - done0.sink,
      archived: pipeline.pollers.archive.stats.recordsDone - done0.archive,
    };
    // Batches each consumer ran during the load: with a saturated stage, load time ÷ batches is its time per batch.
    const batches = {
      normalizer: pipeline.pollers.normalizer.stats.batches - batches0.normalizer,
      sink: pipeline.pollers.sink.stats.batches - batches0.sink,
      archive: pipeline.pollers.archive.stats.batches - batches0.archive,
    };
    const lagDuring = collector
      .find(MetricName.END_TO_END_LAG, { Sink: SINK })
      .flatMap((s) => s.samples.filter(([t]) => t >= t0 && t <= t1 + 1000).map(([, v]) => v));
    // Drained: a heartbeat written after the load stopped reached the warehouse.
    const drainSeconds = (await heartbeatCaughtUp(collector, t1, 600_000)) / 1000;
    const appliedTotal = collector.total(MetricName.EVENTS_APPLIED, { Sink: SINK }) - appliedBefore;

    // The highest sustained rate: steps at growing shares of the source-alone rate until one fails,
    // then halvings of the interval around that failure (bench/lib/rate-search.ts). A step passes
    // when the source commits the rate (≥ 95 %), lag p99 < 1 s, and the backlog at the end drains
    // within 5 s (lag is bounded, not growing).
    let steps: StepResult[] = [];
    let searchRow: ReturnType<typeof rateRow> | null = null;
    if (searchSteps.length > 0 && searchSeconds > 0) {
      let seed = 100;
      const cores = os.availableParallelism();
      steps = await searchHighestSustained(searchSteps, searchRefine, async (share) => {
        const target = Math.max(txSize, Math.round((share * sourceAlone) / txSize) * txSize);
        const r = { share, ...(await step(stack.sourceUrl, collector, target, searchSeconds, txSize, seed++, namedPids)) };
        say(
          `search: ${target} changes/s (${share}× source alone): committed ${Math.round(r.committed)}/s, lag p50 ${Math.round(r.p50)} ms, p99 ${Math.round(r.p99)} ms, max ${Math.round(r.max)} ms (${r.samples} heartbeats), drained in ${r.drainSeconds.toFixed(1)} s; ` +
            `CPU ${r.cpu.coreSecondsPer10k.toFixed(2)} core-s per 10,000 changes, ${((r.cpu.shareOfCore / cores) * 100).toFixed(0)} % of ${cores} cores → ${r.pass ? 'sustained' : 'NOT sustained'}`,
        );
        return r;
      });
      const best = highestPassed(steps);
      const firstFail = steps.find((x) => !x.pass);
      const refined = firstFail ? steps.slice(steps.indexOf(firstFail) + 1) : [];
      sustainedRate = best?.committed ?? null;
      searchRow = rateRow('highest sustained rate (lag bounded, p99 < 1 s)', best?.committed ?? 0, 'changes/s', sourceAlone, 'source alone', {
        target: '≥ 0.3× source alone',
        met: best !== null && best.committed >= 0.3 * sourceAlone,
        note: `steps of ${searchSeconds} s at ${searchSteps.join(', ')}× source alone; first failing step: ${firstFail ? `${Math.round(firstFail.target)}/s` : 'none'}${refined.length > 0 ? `; then ${refined.map((x) => `${x.share}× ${x.pass ? 'sustained' : 'not'}`).join(', ')}` : ''}`,
      });
      rec.details.search = steps;
      leanestStep = steps.reduce<StepResult | null>((a, x) => (a === null || x.cpu.coreSecondsPer10k < a.cpu.coreSecondsPer10k ? x : a), null);
    }

    // Everything (the search's load too) through, then the row-by-row verdict.
    await pipeline.stopHeartbeat();
    await pipeline.waitCaughtUp(600_000);
    const verdict = await compareSourceAndWarehouse({ sourceUrl: stack.sourceUrl, warehouseUrl: stack.warehouseUrl, source: SOURCE, tables });

    // The passes through kinesalite, counted on the pipeline's client over the whole run (every
    // change, heartbeats and initial rows included): puts and reads per stream.
    const { raw, changeLog } = stack.streams;
    const putsRaw = tally.puts.get(raw) ?? 0;
    const putsLog = tally.puts.get(changeLog) ?? 0;
    const passes = {
      rawPuts: putsRaw,
      rawReads: tally.reads.get(raw) ?? 0,
      changeLogPuts: putsLog,
      changeLogReads: tally.reads.get(changeLog) ?? 0,
      readsPerRawRecord: tally.readsPerPut(raw),
      changeLogRecordsPerRawRecord: putsRaw === 0 ? 0 : putsLog / putsRaw,
      readsPerChangeLogRecord: tally.readsPerPut(changeLog),
      recordPassesPerChange: putsRaw === 0 ? 0 : (putsRaw + (tally.reads.get(raw) ?? 0) + putsLog + (tally.reads.get(changeLog) ?? 0)) / putsRaw,
      kinesaliteCpuMsDuringLoad: kinesaliteCpuLoad0 !== null && kinesaliteCpuLoad1 !== null ? kinesaliteCpuLoad1 - kinesaliteCpuLoad0 : null,
      kinesaliteCpuMsWholeRun: kinesaliteCpu0 !== null ? (kinesaliteCpu() ?? Number.NaN) - kinesaliteCpu0 : null,
    };
    rec.details.kinesisPasses = passes;
    say(
      `kinesalite passes over the run: raw stream ${passes.rawPuts} records put, ${passes.rawReads} read (${passes.readsPerRawRecord.toFixed(2)} reads each); ` +
        `change log ${passes.changeLogPuts} put (${passes.changeLogRecordsPerRawRecord.toFixed(3)} per raw record), ${passes.changeLogReads} read (${passes.readsPerChangeLogRecord.toFixed(2)} reads each): ` +
        `${passes.recordPassesPerChange.toFixed(2)} record passes per change; kinesalite's CPU during the load ${passes.kinesaliteCpuMsDuringLoad === null ? '?' : `${Math.round(passes.kinesaliteCpuMsDuringLoad)} ms in ${((t1 - t0) / 1000).toFixed(0)} s (${((passes.kinesaliteCpuMsDuringLoad / (t1 - t0)) * 100).toFixed(0)} % of a core)`}`,
    );
    if (ceilingOn) {
      ceilingInput = {
        sourceAlone,
        rate,
        settings: patternSettings(pipeline),
        streams: { raw, changeLog },
        shards: { raw: await shardCount(stack.kinesis, raw), changeLog: await shardCount(stack.kinesis, changeLog) },
        raw: tally.samples.get(raw) ?? [],
        changeLog: tally.samples.get(changeLog) ?? [],
        perStream: stack.kinesaliteRaw !== null,
      };
    }
    const p50 = percentile(lagDuring, 50);
    const p99 = percentile(lagDuring, 99);
    const max = Math.max(...lagDuring);
    say(
      `lag over ${lagDuring.length} heartbeats: p50 ${Math.round(p50)} ms, p99 ${Math.round(p99)} ms, max ${Math.round(max)} ms; drained in ${drainSeconds.toFixed(1)} s; verdict ${verdict.match ? 'match' : 'MISMATCH'}`,
    );

    rec.add(rateRow('source commit rate under the pipeline', committedRate, 'changes/s', rate, 'target rate'));
    rec.add(rateRow('source alone: the same workload unthrottled', sourceAlone, 'changes/s', null, null, { note: `${txSize} changes per transaction` }));
    rec.add(rateRow('load as a share of the source-alone rate', rate, 'changes/s', sourceAlone, 'source alone'));
    rec.add(rateRow('warehouse applied during the load', appliedAtStop / ((t1 - t0) / 1000), 'events/s', committedRate, 'source commit rate'));
    rec.add(timeRow(`end-to-end lag p50 (sink ${SINK})`, p50, 'ms', 1000, '1 s target'));
    rec.add(timeRow(`end-to-end lag p99 (sink ${SINK})`, p99, 'ms', 1000, '1 s target', { target: '< 1 s', met: p99 < 1000 }));
    rec.add(timeRow(`end-to-end lag max (sink ${SINK})`, max, 'ms', 1000, '1 s target'));
    rec.add(
      timeRow('backlog at the end: time to drain after the load stopped', drainSeconds * 1000, 'ms', null, null, {
        note: `at stop: ${stages.committed} committed, ${stages.captured} captured, ${stages.normalized} normalized, ${stages.applied} applied, ${stages.archived} archived; slot ${slot.lag ?? '?'} bytes behind`,
      }),
    );
    if (searchRow) rec.add(searchRow);
    Object.assign(rec.details, {
      heartbeats: lagDuring.length,
      lagMs: { p50, p90: percentile(lagDuring, 90), p99, max },
      load,
      sourceAlone: ref,
      capturedDuringLoad: capturedAtStop,
      appliedDuringLoad: appliedAtStop,
      appliedTotal,
      backlogAtStop: { slotBytes: slot.lag === null ? null : Number(slot.lag), recordsSinceLoadStart: stages, drainSeconds },
      batchesDuringLoad: batches,
      verdict: { match: verdict.match, tables: verdict.tables.map((t) => ({ ...t })) },
      recoveredErrors: errors.slice(0, 20),
    });
  } finally {
    await pipeline?.stop().catch(() => undefined);
    await captured.restore();
    print = (t) => process.stdout.write(t);
    await stack.stop();
    rmSync(stateDir, { recursive: true, force: true });
    if (stack.state.postgresDataDir) rmSync(stack.state.postgresDataDir, { recursive: true, force: true });
  }
  if (ceilingInput) {
    const c = ceilingInput;
    const dir = mkdtempSync(path.join(os.tmpdir(), 'cdc-bench-ceiling-'));
    let r: CeilingResult;
    try {
      say(
        `stand-in ceiling: kinesalite alone (${c.perStream ? 'a process per stream, as the stack ran it' : 'its own process'}, LevelDB; raw stream ${c.shards.raw} shard(s), change log ${c.shards.changeLog}), ${ceilingChanges} changes of the load's records (${c.raw.length} raw and ${c.changeLog.length} change-log records sampled), everything else stopped`,
      );
      r = await standInCeiling({
        path: path.join(dir, 'kinesis'),
        streams: c.streams,
        shards: c.shards,
        changes: ceilingChanges,
        raw: c.raw,
        changeLog: c.changeLog,
        perStream: c.perStream,
        ...c.settings,
      });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
    const goalShare = 0.3;
    const goalRate = goalShare * c.sourceAlone;
    const kinMsPerChange = r.kinesaliteCpuMs / r.changes;
    const clientMsPerChange = r.clientCpuMs / r.changes;
    const share = r.changesPerSecond / c.sourceAlone;
    const coresAtGoal = (kinMsPerChange * goalRate) / 1000;
    const coresAtRate = (kinMsPerChange * c.rate) / 1000;
    // Each kinesalite is one thread: with a whole core each and perfect overlap they could not pass
    // this many (the busiest process sets it; with one process per stream, two cores).
    const cpuBound = 1000 / (Math.max(...r.kinesaliteCpuMsPerProcess) / r.changes);
    const verdict =
      share < goalShare
        ? `kinesalite alone carries ${Math.round(r.changesPerSecond)} changes/s in this pattern = ${share.toFixed(2)}× the source alone: the e2e goal (≥ ${goalShare}×, ${Math.round(goalRate)} changes/s here) is UNREACHABLE on this machine with this stand-in whatever the pipeline does (short by ${(goalShare / share).toFixed(2)}×)`
        : `kinesalite alone carries ${Math.round(r.changesPerSecond)} changes/s in this pattern = ${share.toFixed(2)}× the source alone: the stand-in leaves room for the e2e goal (≥ ${goalShare}×, ${Math.round(goalRate)} changes/s here) when it has a core to itself`;
    say(
      `stand-in ceiling: ${r.changes} changes in ${r.seconds.toFixed(2)} s; puts ${JSON.stringify(r.puts)}, reads ${JSON.stringify(r.reads)}; records ${Math.round(r.rawBytes)} B raw, ${Math.round(r.changeLogBytes)} B change log`,
    );
    say(
      `stand-in ceiling: kinesalite's CPU ${Math.round(r.kinesaliteCpuMs)} ms (${(kinMsPerChange * 1000).toFixed(0)} µs per change, ${((r.kinesaliteCpuMs / (r.seconds * 1000)) * 100).toFixed(0)} % of a core during the run); this process (clients, pollers) ${Math.round(r.clientCpuMs)} ms (${(clientMsPerChange * 1000).toFixed(0)} µs per change)`,
    );
    say(
      `stand-in ceiling: at the goal's rate (${Math.round(goalRate)} changes/s) kinesalite needs ${(coresAtGoal * 100).toFixed(0)} % of a core, the clients ${((clientMsPerChange * goalRate) / 10).toFixed(0)} %; at this run's ${c.rate}/s ${(coresAtRate * 100).toFixed(0)} % of a core`,
    );
    say(
      `stand-in ceiling: kinesalite's CPU alone bounds it at ${Math.round(cpuBound)} changes/s = ${(cpuBound / c.sourceAlone).toFixed(2)}× the source alone (${r.kinesaliteCpuMsPerProcess.length > 1 ? `a whole core for each of its ${r.kinesaliteCpuMsPerProcess.length} processes: ${r.kinesaliteCpuMsPerProcess.map((ms) => `${((ms / r.changes) * 1000).toFixed(0)} µs`).join(' and ')} per change` : 'one whole core'}, no waits)`,
    );
    say(`verdict: ${verdict}`);
    rec.add(
      rateRow(
        "ceiling: kinesalite alone carrying the pipeline's pattern (everything else idle)",
        r.changesPerSecond,
        'changes/s',
        c.sourceAlone,
        'source alone',
        {
          target: `≥ ${goalShare}× needed for the e2e goal`,
          met: share >= goalShare,
          note: `${r.changes} changes, ${(kinMsPerChange * 1000).toFixed(0)} µs of kinesalite CPU per change: ${(coresAtGoal * 100).toFixed(0)} % of a core at ${goalShare}× the source alone`,
        },
      ),
    );
    rec.add(
      rateRow(
        "ceiling: kinesalite's CPU per change, a whole core per process (1 ÷ the busiest process's CPU time per change)",
        cpuBound,
        'changes/s',
        c.sourceAlone,
        'source alone',
        {
          target: `≥ ${goalShare}× needed for the e2e goal`,
          met: cpuBound >= goalRate,
          note: "the hard bound of the single-threaded stand-in; the pattern row above is what it reached with the pipeline's batches and concurrency",
        },
      ),
    );
    if (sustainedRate !== null)
      rec.add(
        rateRow(
          "highest sustained rate (p99 < 1 s) against the stand-in's ceiling, same run",
          sustainedRate,
          'changes/s',
          r.changesPerSecond,
          "kinesalite alone (the row above's pattern)",
          {
            target: "≥ 0.6× the stand-in's ceiling",
            met: sustainedRate >= 0.6 * r.changesPerSecond,
            note: 'issue "Rehearse the deployment", Done when: the pipeline against what the mandated Kinesis stand-in alone carries',
          },
        ),
      );
    if (leanestStep !== null) {
      // The cores' bound: with every core busy and no waits, the machine carries at most cores ÷ the CPU per change of every
      // process of the run, taken at the search's step with the least CPU per change (the batches grow with the rate). No scheduling
      // passes it (docs/performance-log.md, "71. The normalizer's work per DMS record, and the cores' bound on the end-to-end line").
      const cores = os.availableParallelism();
      const perChange = leanestStep.cpu.coreSecondsPer10k;
      const bound = coreBoundRate(10_000, perChange * 1000, cores);
      rec.add(
        rateRow(
          `cores' bound: ${cores} cores over the CPU per change of the leanest step (every process)`,
          bound,
          'changes/s',
          r.changesPerSecond,
          'kinesalite alone',
          {
            target: "≥ 0.6× the stand-in's ceiling possible",
            met: bound >= 0.6 * r.changesPerSecond,
            note: `the step at ${Math.round(leanestStep.committed)} changes/s spent ${perChange.toFixed(2)} core-s per 10,000 changes (${Math.round(perChange * 100)} µs per change) and kept ${((leanestStep.cpu.shareOfCore / cores) * 100).toFixed(0)} % of the cores busy`,
          },
        ),
      );
    }
    rec.details.standInCeiling = {
      ...r,
      cpuBoundChangesPerSecond: cpuBound,
      sourceAlone: c.sourceAlone,
      goalRate,
      kinesaliteMsPerChange: kinMsPerChange,
      clientMsPerChange,
      kinesaliteCoresAtGoal: coresAtGoal,
      kinesaliteCoresAtRate: coresAtRate,
      shards: c.shards,
      sampled: { raw: c.raw.length, changeLog: c.changeLog.length },
      verdict,
    };
  }
  return rec.finish();
}

/** The first frame of a stack in the project's own code outside the control plane's DynamoDB adapter: `file:function`. */
function callerOf(stack: string): string {
  for (const line of stack.split('\n').slice(1)) {
    const m = /at (?:async )?(?:(\S+) \()?.*?\/((?:lambda|local)\/[^:)]+\.ts)/.exec(line);
    if (!m || m[2]!.includes('control-plane-dynamodb') || m[2]!.includes('dynamodb-lean')) continue;
    return `${m[2]}:${m[1] ?? '?'}`;
  }
  return '?';
}

/** The CPU table and the Kinesis requests of the fixed-rate load, per 10,000 changes (docs/performance-log.md, "48. Where the end-to-end pipeline's CPU goes, and one kinesalite per stream"). */
function reportLoadCpu(
  rec: Recorder,
  rows: ReturnType<typeof cpuRows>,
  before: ReadonlyMap<string, { calls: number; records: number; empty: number }>,
  after: ReadonlyMap<string, { calls: number; records: number; empty: number }>,
  changes: number,
): void {
  const requests = [...after].map(([kind, a]) => {
    const b = before.get(kind) ?? { calls: 0, records: 0, empty: 0 };
    const calls = a.calls - b.calls;
    const records = a.records - b.records;
    return { kind, callsPer10k: (calls * 10_000) / Math.max(1, changes), recordsPerCall: calls === 0 ? 0 : records / calls, emptyCalls: a.empty - b.empty };
  });
  rec.details.cpuDuringLoad = rows;
  rec.details.kinesisRequestsDuringLoad = requests;
  say(`CPU during the load (${changes} changes):\n${cpuTableText(rows).join('\n')}`);
  say(
    `Kinesis and DynamoDB requests during the load, per 10,000 changes:\n${requests
      .filter((r) => r.callsPer10k > 0)
      .map(
        (r) =>
          `${r.kind.padEnd(60)} ${r.callsPer10k.toFixed(1).padStart(8)} calls, ${r.recordsPerCall.toFixed(1).padStart(7)} records per call, ${r.emptyCalls} empty`,
      )
      .join('\n')}`,
  );
}

interface PatternSettings {
  captureBatch: number;
  batchSize: number;
  archiveBatchSize: number;
  archiveWindowMs: number;
}

/**
 * The batch sizes and window the running pipeline uses (its capture's batch, its pollers'
 * settings), read from the objects themselves so that the ceiling carries records in exactly
 * the pipeline's batches: the settings are not exported, and a copy here could drift.
 */
function patternSettings(p: LocalPipeline): PatternSettings {
  type Opts = { batchSize?: number; batchWindowMs?: number; peekChanges?: number };
  const opts = (x: unknown): Opts => (x as { o?: Opts }).o ?? {};
  const s = {
    captureBatch: opts(p.capture).peekChanges,
    batchSize: opts(p.pollers.normalizer).batchSize,
    archiveBatchSize: opts(p.pollers.archive).batchSize,
    archiveWindowMs: opts(p.pollers.archive).batchWindowMs,
  };
  if (opts(p.pollers.sink).batchSize !== s.batchSize)
    throw new Error('the normalizer and the applier poll with different batch sizes: the ceiling assumes one');
  for (const [k, v] of Object.entries(s)) if (typeof v !== 'number') throw new Error(`the pipeline's ${k} could not be read`);
  return s as PatternSettings;
}

interface StepResult {
  share: number;
  target: number;
  committed: number;
  p50: number;
  p99: number;
  max: number;
  drainSeconds: number;
  /** Heartbeat lag samples of the step: under 100, its p99 is its largest sample (nearest rank). */
  samples: number;
  pass: boolean;
  /** CPU of every process of the run (this process's threads; its children: the stand-ins, PostgreSQL, the load generator) during the step's load: the CPU table's total row. */
  cpu: CpuRow;
}

/**
 * Waits until a heartbeat written after `since` (epoch ms) has reached the warehouse, and returns
 * how long after `since` that was (ms): the backlog at `since` has drained. A lag sample taken at
 * apply time `t` with lag `v` is a beat written at `t - v`.
 */
async function heartbeatCaughtUp(collector: MetricsCollector, since: number, timeoutMs: number): Promise<number> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    for (const series of collector.find(MetricName.END_TO_END_LAG, { Sink: SINK })) {
      const hit = series.samples.find(([t, v]) => t - v >= since);
      if (hit) return hit[0] - since;
    }
    if (Date.now() > deadline) throw new Error(`no heartbeat written after the load reached the warehouse within ${Math.round(timeoutMs / 1000)} s`);
    await sleep(50);
  }
}

/** Waits until `done()` holds, checking every 50 ms; throws `message` after `timeoutMs`. */
async function until(done: () => boolean, timeoutMs: number, message: string): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!done()) {
    if (Date.now() > deadline) throw new Error(`${message} within ${Math.round(timeoutMs / 1000)} s`);
    await sleep(50);
  }
}

/** One step of the search: the load at `rate` for `seconds`, then the drain; lag read on the heartbeats of the load. */
async function step(
  url: string,
  collector: MetricsCollector,
  rate: number,
  seconds: number,
  txSize: number,
  seed: number,
  namedPids: ReadonlyMap<number, string>,
): Promise<Omit<StepResult, 'share'>> {
  const ids = (await one<{ ids: number[] | null; next: string | null }>(
    url,
    `SELECT array_agg(id ORDER BY id) AS ids, (coalesce(max(id), 0) + 1)::text AS next FROM ${TABLE}`,
  )) ?? { ids: [], next: '1' };
  const t0 = Date.now();
  const cpu0 = cpuSnapshot(namedPids);
  const load = await runWorkload({
    url,
    table: TABLE,
    rate,
    txSize,
    seed,
    initialIds: 0,
    liveIds: { ids: (ids.ids ?? []).map(Number), next: Number(ids.next ?? 1) },
    seconds,
  }).done;
  const t1 = Date.now();
  const cpu = cpuRows(cpu0, cpuSnapshot(namedPids), load.changes, t1 - t0).find((r) => r.label === 'total')!;
  const drainSeconds = (await heartbeatCaughtUp(collector, t1, 600_000)) / 1000;
  const lags = collector.find(MetricName.END_TO_END_LAG, { Sink: SINK }).flatMap((s) => s.samples.filter(([t]) => t >= t0 && t <= t1 + 1000).map(([, v]) => v));
  const p99 = percentile(lags, 99);
  return {
    target: rate,
    committed: load.changesPerSecond,
    p50: percentile(lags, 50),
    p99,
    max: Math.max(0, ...lags),
    drainSeconds,
    samples: lags.length,
    cpu,
    pass: lags.length > 0 && load.changesPerSecond >= 0.95 * rate && p99 < 1000 && drainSeconds < 5,
  };
}

runIfMain(import.meta.url, runE2eBench);
