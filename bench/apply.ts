/**
 * Benchmark 1, warehouse apply: a seeded history of 200,000 change events (70 % updates, 20 %
 * inserts, 10 % deletes, ~120-byte rows, 100,000 keys) through the REAL warehouse applier (its
 * Lambda handler, fed Kinesis events exactly as the event source mapping delivers them) into
 * PostgreSQL, against two references measured in the same run on the same clusters:
 *
 * - `COPY` of the same final rows into an empty table: the machine's limit for writing them;
 * - PostgreSQL's own logical replication (publication → subscription between two local
 *   clusters) applying the same change history: live (workload start → subscriber caught up) and
 *   as catch-up of a backlog (subscription disabled during the workload, timed from ENABLE).
 *
 * Also per-batch latency at batch sizes 100, 1,000 and 10,000, the share of each SQL phase
 * (client wall time per statement and the server's own time from pg_stat_statements), the
 * appends' COPYs split into the process building their text and the process waiting for the
 * server (`timedCopyLoader`), a CPU profile of the applier's process, and the control plane's
 * share on DynamoDB Local.
 *
 * Durability is the default on every cluster (fsync on, synchronous_commit on), as in the
 * performance anchors. The control plane of the timed runs is the in-memory test double
 * (`test/helpers/memory-control-plane.ts`); its share on the real DynamoDB adapter is measured
 * separately and reported as its own row.
 *
 *     npm run bench:apply [-- --events 200000 --quick --variants append --no-extras --profile --no-floors --node-defaults]
 *
 * The applier runs with the Node.js flags the WarehouseSink deploys it with (its young generation,
 * `applierNodeOptions` at the default 1,024 MiB: the process starts itself again with them;
 * bench/lib/handler-runtime.ts); `--node-defaults` runs it with Node's own (docs/performance-log.md, "The applier's young generation").
 *
 * The cores' bound: the CPU each path spent per event, every process of it (this process and the
 * warehouse's cluster; for catch-up both clusters), against the machine's cores — the rate no
 * overlap can pass (bench/lib/cpu-bound.ts; docs/performance-log.md, "69. The cores' bound on the apply line").
 *
 * The append-first path also runs with two concurrent batches (the event source mapping's
 * parallelization factor 2, keys split by partition key; both in this one process), batch 10,000.
 *
 * The applier's Node-side floors (on unless `--no-floors`; docs/performance-log.md, "Ceilings: what this machine and the mandated stand-ins allow"), on
 * the same Kinesis events as the batch-10,000 runs, in this process, against the same run's
 * references: (a) base64 + UTF-8 decoding + `JSON.parse` of each record and nothing else; (b) the
 * real handler (`createWarehouseApplier`: records, decoding, validation, admission, plan, the
 * delta's rows and their COPY text built by the real `copyStageLoader`) whose delta COPY is not
 * sent: the text goes to a sink that counts it. (b) excludes the SQL (the COPY's bytes, its
 * commit) and the merges; its statements are counted and must be none in the timed part.
 * And the warehouse's own ceiling (c): the delta COPYs (b) built, sent as they are, with the real
 * merges at the merge worker's threshold between them, one after the other and no Node work
 * (`sqlCeiling`); the view must match the expected rows after it. And (c) on two cores: the same,
 * with the merges beside the COPYs on a second connection, as the merge worker runs them
 * (docs/performance-log.md, "62. Where the apply's wall goes; the statements' ceiling with the merges beside the appends").
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import type { KinesisStreamEvent } from 'aws-lambda';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { Readable, Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { from as copyFrom } from 'pg-copy-streams';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { ServiceName } from '../contracts/env.ts';
import { quoteIdent } from '../lambda/core/shared/identifiers.ts';
import { METRICS_NAMESPACE } from '../contracts/metrics.ts';
import { toKinesisStreamEvent } from '../lambda/adapters/kinesis-event.ts';
import { copyStageLoader, insertStageLoader, type StageLifecycle, type StageLoader } from '../lambda/adapters/warehouse-pg.ts';
import { dynamoDbClient } from '../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../lambda/adapters/control-plane-dynamodb/control-table.ts';
import type { ControlPlane } from '../lambda/core/shared/control-plane.ts';
import type { ChangeEvent } from '../lambda/core/shared/event.ts';
import { DEFAULT_MERGE_POLICY } from '../lambda/core/warehouse/merge-policy.ts';
import { createWarehouseApplier } from '../lambda/handlers/warehouse-applier.ts';
import { startDynamoDbLocal } from '../local/dynamodb.ts';
import { captureStdout, MetricsCollector } from '../local/metrics.ts';
import { startPostgres, type PostgresCluster } from '../local/postgres.ts';
import { MemoryControlPlane } from '../test/helpers/memory-control-plane.ts';
import {
  BENCH_SOURCE,
  BENCH_TABLE,
  DEFAULT_HISTORY,
  copyLine,
  fingerprintSql,
  generateHistory,
  historyEvents,
  itemsTableSql,
  registerBenchTable,
  snapshotEvents,
  type History,
} from './lib/history.ts';
import { copyLines, exec, one, serverVersion, waitFor, withClient } from './lib/pg.ts';
import { createItems, prepareReplay, replay } from './lib/replay.ts';
import {
  clusterCpuMs,
  cpuProfile,
  postmasterOf,
  resetStatementStats,
  SqlTimer,
  statementStats,
  Tally,
  timedControlPlane,
  type ProfileSummary,
} from './lib/profile.ts';
import { exitOnHelp } from './lib/usage.ts';
import { coreBoundRate, cpuMicrosPerEvent } from './lib/cpu-bound.ts';
import { argValue, isMain, median, nowMs, numberArg, percentile, rateRow, Recorder, timeRow, type BenchResult } from './lib/report.ts';
import { physicalReference } from './lib/physical.ts';
import { SetApplier } from './lib/set-apply.ts';
import { handlerFlags, relaunchWithApplierFlags } from './lib/handler-runtime.ts';
import { truncateCopyAnalyzeStageLoader } from './lib/stage-loaders.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SINK = 'warehouse';
const STREAM_ARN = 'arn:aws:kinesis:us-east-1:000000000000:stream/cdc-change-log';
const SHARD = 'shardId-000000000000';
const MIRROR_VIEW = `${BENCH_SOURCE}_public.items`;

let print: (text: string) => void = (t) => process.stdout.write(t);
const say = (text: string): void => print(`[apply] ${text}\n`);

// ---------------------------------------------------------------------------------------------
// References

/** COPY of the final rows into an empty table with its primary key; rows/s per run. */
async function copyReference(url: string, h: History, runs: number): Promise<number[]> {
  const rates: number[] = [];
  await withClient(url, async (c) => {
    for (let i = 0; i < runs; i++) {
      await c.query(`DROP TABLE IF EXISTS expected; ${itemsTableSql('expected')}; CHECKPOINT`);
      const t0 = nowMs();
      await copyLines(c, 'expected', h.finalRows.map(copyLine));
      rates.push(h.finalRows.length / ((nowMs() - t0) / 1000));
    }
    await c.query('ANALYZE expected');
  });
  return rates;
}

interface LogrepRun {
  mode: 'live' | 'catch-up';
  /** CALL replay(...) on the publisher: the source workload alone (the subscription applies in parallel when live). */
  sourceSeconds: number;
  /** live: workload start → marker visible; catch-up: ENABLE → marker visible. */
  seconds: number;
  changesPerSecond: number;
  lagAfterWorkloadSeconds: number | null;
  verified: boolean;
  /** Catch-up: CPU of each cluster from ENABLE to the marker visible (the publisher's walsender, the subscriber's apply worker, and whatever else each ran), ms. */
  cpuMs: { publisher: number; subscriber: number } | null;
}

/**
 * PostgreSQL's logical replication applying the history: publisher `src` on one cluster,
 * subscriber `sub` on the other. The history is replayed on the publisher by a PL/pgSQL
 * procedure (one statement per change, COMMIT every `txSize` changes) from an unlogged,
 * unpublished table, so the client is not the limit.
 */
async function logicalReplication(pub: PostgresCluster, subCluster: PostgresCluster, h: History, mode: 'live' | 'catch-up', run: number): Promise<LogrepRun> {
  const pubUrl = pub.url('src');
  const subUrl = subCluster.url('sub');
  await exec(subUrl, 'DROP SUBSCRIPTION IF EXISTS bench_sub');
  await exec(pubUrl, 'DROP PUBLICATION IF EXISTS bench_pub; DROP TABLE IF EXISTS mk; CREATE TABLE mk (id int PRIMARY KEY)');
  await createItems(pubUrl, h);
  await exec(pubUrl, 'CREATE PUBLICATION bench_pub FOR TABLE items, mk');
  await exec(subUrl, `DROP TABLE IF EXISTS items, mk; ${itemsTableSql('items')}; CREATE TABLE mk (id int PRIMARY KEY)`);
  await exec(subUrl, `CREATE SUBSCRIPTION bench_sub CONNECTION 'host=127.0.0.1 port=${pub.port} user=postgres dbname=src' PUBLICATION bench_pub`);
  await withClient(subUrl, async (c) => {
    await waitFor(
      'the initial table sync',
      async () => {
        const r = await c.query(`SELECT count(*) FILTER (WHERE srsubstate <> 'r')::int AS pending, count(*)::int AS n FROM pg_subscription_rel`);
        return r.rows[0].n === 2 && r.rows[0].pending === 0;
      },
      120_000,
      50,
    );
  });
  // A marker round trip: the subscription is streaming and caught up.
  await exec(pubUrl, 'INSERT INTO mk VALUES (0)');
  await withClient(subUrl, (c) => waitFor('the first marker', async () => (await c.query('SELECT 1 FROM mk WHERE id = 0')).rowCount === 1, 60_000));
  await exec(subUrl, 'VACUUM ANALYZE items');
  if (mode === 'catch-up') {
    await exec(subUrl, 'ALTER SUBSCRIPTION bench_sub DISABLE');
    await withClient(subUrl, (c) =>
      waitFor(
        'the apply worker to stop',
        async () => (await c.query(`SELECT 1 FROM pg_stat_subscription WHERE subname = 'bench_sub' AND pid IS NOT NULL`)).rowCount === 0,
        30_000,
        20,
      ),
    );
  }
  await prepareReplay(pubUrl, h);
  await exec(pubUrl, 'CHECKPOINT');
  await exec(subUrl, 'CHECKPOINT');

  const marker = run + 1;
  const sub = new pg.Client({ connectionString: subUrl });
  await sub.connect();
  try {
    const t0 = nowMs();
    await replay(pubUrl, h);
    const t1 = nowMs();
    await exec(pubUrl, `INSERT INTO mk VALUES (${marker})`);
    let tStart = t0;
    const postmasters = mode === 'catch-up' ? { publisher: await withClient(pubUrl, postmasterOf), subscriber: await postmasterOf(sub) } : null;
    const cpu0 = postmasters ? { publisher: clusterCpuMs(postmasters.publisher), subscriber: clusterCpuMs(postmasters.subscriber) } : null;
    if (mode === 'catch-up') {
      tStart = nowMs();
      await sub.query('ALTER SUBSCRIPTION bench_sub ENABLE');
    }
    await waitFor('the subscriber to apply the history', async () => (await sub.query('SELECT 1 FROM mk WHERE id = $1', [marker])).rowCount === 1, 600_000, 5);
    const t2 = nowMs();
    const cpuMs =
      postmasters && cpu0
        ? { publisher: clusterCpuMs(postmasters.publisher) - cpu0.publisher, subscriber: clusterCpuMs(postmasters.subscriber) - cpu0.subscriber }
        : null;
    const seconds = (t2 - tStart) / 1000;
    const got = (await sub.query(fingerprintSql('items'))).rows[0] as { n: number; md5: string };
    const want = await one<{ n: number; md5: string }>(pubUrl, fingerprintSql('items'));
    return {
      mode,
      sourceSeconds: (t1 - t0) / 1000,
      seconds,
      changesPerSecond: h.changes.length / seconds,
      lagAfterWorkloadSeconds: mode === 'live' ? (t2 - t1) / 1000 : null,
      verified: got.n === want.n && got.md5 === want.md5,
      cpuMs,
    };
  } finally {
    await sub.end();
  }
}

// ---------------------------------------------------------------------------------------------
// The applier

interface ApplierRunOptions {
  label: string;
  batch: number;
  loader: StageLoader;
  /** Stage-table lifecycle. @default the adapter's choice (`session` on PostgreSQL) */
  stages?: StageLifecycle;
  /** Apply only the first `limit` history events. */
  limit?: number;
  /** Use this control plane instead of the in-memory one (it must be empty). */
  controlPlane?: ControlPlane;
  /** Take a CPU profile of the timed section. */
  profile?: boolean;
  /** Read pg_stat_statements for the timed section. */
  statements?: boolean;
  /** Apply the timed part with the set-based experiment (bench/lib/set-apply.ts) instead of the applier. */
  setBased?: boolean;
  /**
   * The append-first path (docs/warehouse-apply.md): `worker` appends only and a concurrent
   * worker merges the delta when due (what the view's freshness depends on); `inline` merges
   * inside the handler when due (the applier's default). Unset: merge after every append, i.e.
   * what the mirror-only applier did (the older variants' figures).
   */
  merge?: 'worker' | 'inline';
  /** Merge thresholds for `merge`. @default DEFAULT_MERGE_POLICY */
  mergeRows?: number;
  /**
   * Concurrent batches of the shard, as the event source mapping's parallelization factor
   * (`WarehouseSink` prop `parallelizationFactor`): the events are split by partition key into
   * this many streams (per-key order kept), each applied by its own applier and pool (its own
   * Lambda environment) at the same time. All run in this one process, so they share its one
   * thread: what they gain here is only that one stream's SQL overlaps the other's Node work.
   * @default 1
   */
  parallel?: number;
}

interface ApplierRun {
  label: string;
  loader: string;
  batch: number;
  events: number;
  batches: number;
  seconds: number;
  eventsPerSecond: number;
  batchMs: { p50: number; p90: number; p99: number; max: number };
  /** Client-side wall time per applier SQL phase (ms), and what is left for the handler's own code. */
  phases: Array<{ label: string; ms: number; calls: number }>;
  controlPlane: { kind: string; ms: number; calls: Array<{ label: string; ms: number; calls: number }> };
  /** Wall time of the timed part outside the handler's SQL statements and control-plane calls (the handler's own code, waiting for neither). */
  nodeMs: number;
  /** CPU time of this process (user + system) during the timed part: the handler's code, the pg driver, GC (and the merge worker's polling, small). */
  cpuMs: number;
  /** CPU time of the whole PostgreSQL cluster during the timed part (every server process: the appends, the merges, WAL, autovacuum). */
  serverCpuMs: number;
  server?: Awaited<ReturnType<typeof statementStats>>;
  profile?: ProfileSummary;
  verified: boolean | null;
  rowsInView: number;
  /** The append's COPYs in the timed part, timed apart (`timedCopyLoader`): none when the run appended nothing. */
  copy?: CopyTiming;
  /** Append-first runs: the merges, the largest delta seen, and the view checked before the final merge. */
  merges?: { count: number; rows: number; ms: number; maxDeltaRows: number; threshold: number; finalMergeMs: number; verifiedBeforeFinalMerge: boolean };
}

/** The append's COPYs of a run, wall ms summed over its batches (docs/performance-log.md, "Where a batch's wall time goes"). */
interface CopyTiming {
  copies: number;
  /** The whole COPY statement, from its start to the server's answer. */
  wholeMs: number;
  /** Building the COPY text from the events: this process's work inside the COPY (the generator's steps). */
  textMs: number;
  /** From the last chunk built to the server's answer: the process waiting for PostgreSQL to finish what it was sent. */
  tailMs: number;
}

/**
 * The adapter's COPY delta loader (`copyStageLoader`, the default on PostgreSQL) with each append
 * timed (`CopyTiming`): the same statement, text and stream; only the steps of its text are timed.
 */
function timedCopyLoader(t: CopyTiming): StageLoader {
  return {
    ...copyStageLoader,
    async loadCopyText(client, table, columns, chunks) {
      let last = 0;
      const timed = function* (): Generator<string | Buffer> {
        const it = chunks[Symbol.iterator]();
        for (;;) {
          const a = nowMs();
          const r = it.next();
          last = nowMs();
          t.textMs += last - a;
          if (r.done) return;
          yield r.value;
        }
      };
      const t0 = nowMs();
      await copyStageLoader.loadCopyText!(client, table, columns, timed());
      const end = nowMs();
      t.copies++;
      t.wholeMs += end - t0;
      t.tailMs += end - last;
    },
  };
}

/** The events split into `n` streams by partition key (a key's events stay in one stream, in order), as concurrent batches of a shard are. */
function byPartitionKey(events: readonly ChangeEvent[], n: number): ChangeEvent[][] {
  const out: ChangeEvent[][] = Array.from({ length: n }, () => []);
  for (const e of events) {
    const k = `${e.source}/${e.table}/${JSON.stringify(e.key)}`;
    let h = 0x811c9dc5;
    for (let i = 0; i < k.length; i++) h = Math.imul(h ^ k.charCodeAt(i), 0x01000193) >>> 0;
    out[h % n]!.push(e);
  }
  return out;
}

/** Encodes events as Lambda Kinesis events of `batch` records (done before timing). */
function kinesisBatches(events: readonly ChangeEvent[], batch: number, firstSeq: bigint): KinesisStreamEvent[] {
  const out: KinesisStreamEvent[] = [];
  for (let i = 0; i < events.length; i += batch) {
    const slice = events.slice(i, i + batch);
    out.push(
      toKinesisStreamEvent(
        slice.map((e, j) => ({
          SequenceNumber: String(firstSeq + BigInt(i + j)),
          PartitionKey: `${e.source}/${e.table}/${JSON.stringify(e.key)}`,
          Data: Buffer.from(JSON.stringify(e), 'utf8'),
          ApproximateArrivalTimestamp: new Date(),
        })),
        { streamArn: STREAM_ARN, shardId: SHARD },
      ),
    );
  }
  return out;
}

let runNo = 0;

async function applierRun(
  wh: PostgresCluster,
  h: History,
  snapshot: ChangeEvent[],
  history: ChangeEvent[],
  o: ApplierRunOptions,
  expected: { n: number; md5: string },
): Promise<ApplierRun> {
  const db = `wh_${++runNo}`;
  await wh.createDatabase(db);
  const url = wh.url(db);
  if (o.statements) await exec(url, 'CREATE EXTENSION IF NOT EXISTS pg_stat_statements');
  let pool = new pg.Pool({ connectionString: url, max: 2 });
  const cpTally = new Tally();
  const copyTiming: CopyTiming = { copies: 0, wholeMs: 0, textMs: 0, tailMs: 0 };
  const inner = o.controlPlane ?? new MemoryControlPlane();
  await registerBenchTable(inner);
  const newApplier = (p: pg.Pool, cp: ControlPlane = timedControlPlane(inner, cpTally)) =>
    createWarehouseApplier({
      controlPlane: cp,
      pool: p,
      sinkId: SINK,
      metrics: new Metrics({ namespace: METRICS_NAMESPACE }),
      logger: new Logger({ serviceName: ServiceName.WAREHOUSE_APPLIER, logLevel: 'WARN' }),
      warehouse: { loader: o.loader, deltaLoader: timedCopyLoader(copyTiming), ...(o.stages ? { stages: o.stages } : {}) },
      merge: o.merge === undefined ? { maxRows: 0 } : { inline: o.merge === 'inline', ...(o.mergeRows !== undefined ? { maxRows: o.mergeRows } : {}) },
    });
  let applier = newApplier(pool);
  const events = o.limit ? history.slice(0, o.limit) : history;
  try {
    // Untimed: the rows that exist before the history, as snapshot events.
    for (const ev of kinesisBatches(snapshot, 10_000, 10n ** 20n)) {
      const r = await applier.handler(ev);
      if (r.batchItemFailures.length > 0) throw new Error(`preload: ${r.batchItemFailures.length} records failed`);
    }
    // The preload is merged into the base (untimed), as a table's history would be.
    await applier.mergeDue({ force: true });
    await exec(url, `VACUUM ANALYZE ${BENCH_SOURCE}_public._cdc_mirror_items`);
    await exec(url, `VACUUM ANALYZE ${BENCH_SOURCE}_public._cdc_changelog_items`);
    await exec(url, 'CHECKPOINT');
    // Fresh connections (and applier) for the timed part: session stage tables start empty, as in
    // a new Lambda container; the preload's 10,000-row batches would otherwise have left them large.
    await pool.end();
    pool = new pg.Pool({ connectionString: url, max: 2 });
    const timer = new SqlTimer(pool);
    const postmaster = await postmasterOf(pool);
    applier = newApplier(pool);
    const parallel = o.parallel ?? 1;
    // With concurrent batches: one stream per partition-key share, each its own applier and pool (timed apart from the first's SQL).
    const streams = parallel > 1 ? byPartitionKey(events, parallel) : [events];
    const extraPools = streams.slice(1).map(() => new pg.Pool({ connectionString: url, max: 2 }));
    const appliers = [applier, ...extraPools.map((p) => newApplier(p))];
    const streamBatches = streams.map((list, i) => kinesisBatches(list, o.batch, (2n + BigInt(i)) * 10n ** 20n));
    const batches = streamBatches.flat();
    timer.tally.reset();
    cpTally.reset();
    Object.assign(copyTiming, { copies: 0, wholeMs: 0, textMs: 0, tailMs: 0 });
    if (o.statements) await withClient(url, resetStatementStats);
    const times: number[] = [];
    const setClient = o.setBased ? await pool.connect() : null;
    const setApplier = setClient ? new SetApplier(setClient, `${BENCH_SOURCE}_public`) : null;
    // The merge worker of the append-first path: merges the delta whenever it is due, on its own
    // connection, concurrently with the appends (as the schedule or a separate function would).
    // Its own pool and applier, untimed: its statements and control-plane calls run concurrently
    // with the handler's, so timing them with the handler's would count overlapping time twice.
    const mergeTarget = { source: BENCH_SOURCE, table: BENCH_TABLE, deleteMode: 'soft' as const, key: ['id'] };
    const merges = { count: 0, rows: 0, ms: 0, maxDeltaRows: 0 };
    const workerPool = o.merge === 'worker' ? new pg.Pool({ connectionString: url, max: 1 }) : null;
    const mergeWorker = workerPool ? newApplier(workerPool, inner) : null;
    if (o.merge === 'inline') {
      // The handler's own merges (inline, when due): counted from the writer, as the handler's
      // response does not carry them; the delta was as large as the rows a merge took just before it.
      const writer = applier.warehouse;
      const merge = writer.merge.bind(writer);
      writer.merge = async (target, options) => {
        const r = await merge(target, options);
        if (appending && r.rows > 0) {
          merges.count++;
          merges.rows += r.rows;
          merges.ms += r.ms;
          merges.maxDeltaRows = Math.max(merges.maxDeltaRows, r.rows);
        }
        return r;
      };
    }
    let appending = false;
    const worker = async (): Promise<void> => {
      while (appending && mergeWorker) {
        const stats = await mergeWorker.warehouse.deltaStats(mergeTarget);
        merges.maxDeltaRows = Math.max(merges.maxDeltaRows, stats.rows);
        const done = await mergeWorker.mergeDue();
        for (const m of done) {
          if (m.error !== undefined) throw new Error(`the merge worker's merge of ${m.source}/${m.table} failed: ${m.error}`);
          merges.count++;
          merges.rows += m.rows;
          merges.ms += m.ms;
        }
        if (done.length === 0) await new Promise((r) => setTimeout(r, 20));
      }
    };
    const timed = async (): Promise<number> => {
      appending = true;
      const merging = o.merge === 'worker' ? worker() : Promise.resolve();
      const cpu0 = process.cpuUsage();
      const server0 = clusterCpuMs(postmaster);
      const t0 = nowMs();
      if (parallel > 1) {
        await Promise.all(
          streamBatches.map(async (list, i) => {
            for (const ev of list) {
              const b0 = nowMs();
              const r = await appliers[i]!.handler(ev);
              times.push(nowMs() - b0);
              if (r.batchItemFailures.length > 0) throw new Error(`${o.label}: ${r.batchItemFailures.length} records failed in a batch`);
            }
          }),
        );
      }
      for (const ev of parallel > 1 ? [] : batches) {
        const b0 = nowMs();
        if (setApplier) {
          await setApplier.apply(ev);
          times.push(nowMs() - b0);
          continue;
        }
        const r = await applier.handler(ev);
        times.push(nowMs() - b0);
        if (r.batchItemFailures.length > 0) throw new Error(`${o.label}: ${r.batchItemFailures.length} records failed in a batch`);
        if (o.merge === 'inline') merges.maxDeltaRows = Math.max(merges.maxDeltaRows, applier.warehouse.pendingOf(BENCH_SOURCE, BENCH_TABLE).rows);
      }
      const ms = nowMs() - t0;
      const cpu = process.cpuUsage(cpu0);
      cpuMs = (cpu.user + cpu.system) / 1000;
      serverCpuMs = clusterCpuMs(postmaster) - server0;
      appending = false;
      await merging;
      await workerPool?.end();
      await Promise.all(extraPools.map((p) => p.end()));
      return ms;
    };
    let cpuMs = 0;
    let serverCpuMs = 0;
    let wallMs: number;
    let profile: ProfileSummary | undefined;
    if (o.profile) {
      const p = await cpuProfile(ROOT, timed);
      wallMs = p.result;
      profile = p.profile;
    } else {
      wallMs = await timed();
    }
    setClient?.release();
    const server = o.statements ? await withClient(url, statementStats) : undefined;
    // Read before the untimed final merge below, which runs on the same pool.
    const sqlMs = timer.tally.total();
    const phases = timer.tally.entries();
    const copy = copyTiming.copies > 0 ? { ...copyTiming } : undefined;
    const cpMs = cpTally.total();
    let view = await one<{ n: number; md5: string }>(url, fingerprintSql(MIRROR_VIEW));
    const expectedRows = o.limit ? liveAfter(h, o.limit) : expected.n;
    let mergeDetail: ApplierRun['merges'];
    if (o.merge) {
      // The view was checked with the delta unmerged; merge it now (untimed) and check again.
      const before = o.limit ? view.n === expectedRows : view.n === expected.n && view.md5 === expected.md5;
      const f0 = nowMs();
      await applier.mergeDue({ force: true });
      const finalMergeMs = nowMs() - f0;
      view = await one<{ n: number; md5: string }>(url, fingerprintSql(MIRROR_VIEW));
      mergeDetail = {
        ...merges,
        threshold: applier.warehouse ? (o.mergeRows ?? DEFAULT_MERGE_POLICY.maxRows) : 0,
        finalMergeMs: Math.round(finalMergeMs),
        verifiedBeforeFinalMerge: before,
      };
    }
    return {
      label: o.label,
      loader: o.setBased ? 'set-based experiment (COPY)' : o.loader.name,
      batch: o.batch,
      events: events.length,
      batches: batches.length,
      seconds: wallMs / 1000,
      eventsPerSecond: events.length / (wallMs / 1000),
      batchMs: { p50: percentile(times, 50), p90: percentile(times, 90), p99: percentile(times, 99), max: Math.max(...times) },
      phases,
      controlPlane: { kind: o.controlPlane ? 'DynamoDB Local' : 'in-memory', ms: Math.round(cpMs), calls: cpTally.entries() },
      // With concurrent batches only the first stream's SQL is timed, and the streams overlap: no such figure.
      nodeMs: (o.parallel ?? 1) > 1 ? Number.NaN : Math.round(wallMs - sqlMs - cpMs),
      cpuMs: Math.round(cpuMs),
      serverCpuMs: Math.round(serverCpuMs),
      ...(server ? { server } : {}),
      ...(profile ? { profile } : {}),
      ...(copy ? { copy } : {}),
      verified: (o.limit ? view.n === expectedRows : view.n === expected.n && view.md5 === expected.md5) && (mergeDetail?.verifiedBeforeFinalMerge ?? true),
      rowsInView: view.n,
      ...(mergeDetail ? { merges: mergeDetail } : {}),
    };
  } finally {
    await pool.end();
    await exec(wh.url('postgres'), `DROP DATABASE ${db} WITH (FORCE)`).catch(() => undefined);
  }
}

// ---------------------------------------------------------------------------------------------
// The applier's Node-side floors

interface NodeFloors {
  events: number;
  batch: number;
  /** (a) base64 + UTF-8 + JSON.parse of every record, events/s per run. */
  decode: number[];
  /** (b) the real handler, its delta COPY text built and not sent, events/s per run. */
  handler: number[];
  /** (b): process CPU ms per run, COPY text bytes and rows built per run, SQL statements in the timed part. */
  handlerCpuMs: number[];
  copyBytes: number;
  copyRows: number;
  sqlStatements: number;
}

/**
 * A delta loader that builds the COPY text exactly as `copyStageLoader` does (it is called, with
 * a connection that takes the text and sends nothing; the append hands it its text straight from
 * the events, `loadCopyText`, as it does the real loader) and counts what it would have sent.
 */
function unsentCopyLoader(sent: { bytes: number; rows: number }, keep?: CapturedCopy[]): StageLoader {
  const unsent = async (table: string, columns: readonly string[], send: (client: pg.ClientBase) => Promise<void>): Promise<void> => {
    const chunks: Buffer[] = [];
    let rows = 0;
    const sink = new Writable({
      write(chunk: Buffer, _enc, done) {
        sent.bytes += chunk.length;
        for (let i = chunk.indexOf(10); i >= 0; i = chunk.indexOf(10, i + 1)) rows++;
        if (keep) chunks.push(chunk);
        done();
      },
    });
    await send({ query: () => sink } as unknown as pg.ClientBase);
    sent.rows += rows;
    keep?.push({ table, columns: [...columns], chunks, rows });
  };
  return {
    name: 'copy text built, not sent',
    atomic: true,
    load: (_client, table, columns, rows) => unsent(table, columns, (c) => copyStageLoader.load(c, table, columns, rows)),
    loadCopyText: (_client, table, columns, text) => unsent(table, columns, (c) => copyStageLoader.loadCopyText!(c, table, columns, text)),
  };
}

/** The bench sink's applier over `pool`, with a control plane that has the bench's table registered; the handler appends only (the merge worker variant's policy). */
async function appendOnlyApplier(
  pool: pg.Pool,
  warehouse: Parameters<typeof createWarehouseApplier>[0]['warehouse'],
): Promise<ReturnType<typeof createWarehouseApplier>> {
  const controlPlane = new MemoryControlPlane();
  await registerBenchTable(controlPlane);
  return createWarehouseApplier({
    controlPlane: controlPlane,
    pool,
    sinkId: SINK,
    metrics: new Metrics({ namespace: METRICS_NAMESPACE }),
    logger: new Logger({ serviceName: ServiceName.WAREHOUSE_APPLIER, logLevel: 'WARN' }),
    ...(warehouse ? { warehouse } : {}),
    merge: { inline: false },
  });
}

/** Untimed: the rows that exist before the history, applied as snapshot events (which also makes the sink's tables). */
async function preload(applier: ReturnType<typeof createWarehouseApplier>, snapshot: ChangeEvent[], batch: number, what: string): Promise<void> {
  for (const ev of kinesisBatches(snapshot, batch, 10n ** 20n)) {
    const r = await applier.handler(ev);
    if (r.batchItemFailures.length > 0) throw new Error(`${what} preload: ${r.batchItemFailures.length} records failed`);
  }
}

/** One delta COPY the handler built in floor (b): its target, columns and bytes. */
interface CapturedCopy {
  table: string;
  columns: string[];
  chunks: Buffer[];
  rows: number;
}

async function nodeFloors(wh: PostgresCluster, snapshot: ChangeEvent[], history: ChangeEvent[], runs: number, keep: CapturedCopy[]): Promise<NodeFloors> {
  const batch = 10_000;
  const batches = kinesisBatches(history, batch, 2n * 10n ** 20n);
  const out: NodeFloors = { events: history.length, batch, decode: [], handler: [], handlerCpuMs: [], copyBytes: 0, copyRows: 0, sqlStatements: 0 };
  // (a) Decoding alone.
  for (let i = 0; i < runs; i++) {
    let ops = 0;
    const t0 = nowMs();
    for (const ev of batches) {
      for (const r of ev.Records) {
        const e = JSON.parse(Buffer.from(r.kinesis.data, 'base64').toString('utf8')) as { op?: string };
        if (e.op !== undefined) ops++;
      }
    }
    const ms = nowMs() - t0;
    if (ops !== history.length) throw new Error(`floor (a) decoded ${ops} events of ${history.length}`);
    out.decode.push(history.length / (ms / 1000));
  }
  // (b) The real handler without the warehouse's work: a fresh database, control plane and applier per run.
  for (let i = 0; i < runs; i++) {
    const db = `wh_floor_${i}`;
    await wh.createDatabase(db);
    const url = wh.url(db);
    const pool = new pg.Pool({ connectionString: url, max: 2 });
    try {
      const sent = { bytes: 0, rows: 0 };
      const applier = await appendOnlyApplier(pool, { loader: insertStageLoader, deltaLoader: unsentCopyLoader(sent, i === runs - 1 ? keep : undefined) });
      const timer = new SqlTimer(pool);
      // Untimed: the sink's tables made by the first batches (the preload), as in the timed runs.
      await preload(applier, snapshot, batch, 'floor (b)');
      sent.bytes = 0;
      sent.rows = 0;
      keep.length = 0;
      timer.tally.reset();
      const cpu0 = process.cpuUsage();
      const t0 = nowMs();
      for (const ev of batches) {
        const r = await applier.handler(ev);
        if (r.batchItemFailures.length > 0) throw new Error(`floor (b): ${r.batchItemFailures.length} records failed in a batch`);
      }
      const ms = nowMs() - t0;
      const cpu = process.cpuUsage(cpu0);
      out.handler.push(history.length / (ms / 1000));
      out.handlerCpuMs.push(Math.round((cpu.user + cpu.system) / 1000));
      out.copyBytes = sent.bytes;
      out.copyRows = sent.rows;
      out.sqlStatements = Math.max(
        out.sqlStatements,
        timer.tally.entries().reduce((n, e) => n + e.calls, 0),
      );
    } finally {
      await pool.end();
      await exec(wh.url('postgres'), `DROP DATABASE ${db} WITH (FORCE)`).catch(() => undefined);
    }
  }
  return out;
}

interface SqlCeiling {
  /** Timed: the delta COPYs and the merges due meanwhile, ms. */
  ms: number;
  appendMs: number;
  mergeMs: number;
  merges: number;
  mergedRows: number;
  largestDelta: number;
  /** Untimed, as in the applier's runs: the final merge. */
  finalMergeMs: number;
  verified: boolean;
  /** Whether the merges ran beside the COPYs (on a second connection, as the merge worker runs them) instead of between them. */
  concurrent: boolean;
  /** The warehouse cluster's CPU over the timed part, ms (its COPYs and merges, and any merge still running at its end). */
  serverCpuMs: number;
}

/**
 * Ceiling (c): the warehouse's statements alone, no Node work but sending bytes (docs/performance-log.md,
 * "Ceilings of the last two goals"). The delta COPYs the real handler built in floor (b) (their bytes, kept) are sent as they
 * are, each in its own transaction, on one connection; the real merge (`PgWarehouse.merge`) runs
 * whenever the delta reaches the merge worker's threshold, between two COPYs (one after the
 * other: appends and merges do not overlap here, where the merge worker lets them). The preload
 * is the applier runs' (snapshot applied and merged, untimed); the view is checked against the
 * expected rows after the final merge (untimed, as in the applier's runs).
 *
 * `concurrent`: the merges run beside the COPYs instead, on a second connection, as the merge worker
 * runs them in the applier's runs (a merge starts when the rows appended since the last one began
 * reach the threshold and none is running); the timed part ends at the last COPY's commit, when
 * every event is in the view, as the applier's runs end; a merge still running then is awaited
 * untimed. So (c) serial is what the statements cost on one core, (c) concurrent what two cores
 * allow them with no Node work.
 */
async function sqlCeiling(
  wh: PostgresCluster,
  snapshot: ChangeEvent[],
  copies: readonly CapturedCopy[],
  expected: { n: number; md5: string },
  run: number,
  concurrent: boolean,
  mergeRows = DEFAULT_MERGE_POLICY.maxRows,
): Promise<SqlCeiling> {
  const db = `wh_sql_${concurrent ? 'c' : 's'}${run}`;
  await wh.createDatabase(db);
  const url = wh.url(db);
  const pool = new pg.Pool({ connectionString: url, max: 2 });
  try {
    const applier = await appendOnlyApplier(pool, { loader: insertStageLoader });
    await preload(applier, snapshot, 10_000, 'ceiling (c)');
    await applier.mergeDue({ force: true });
    await exec(url, `VACUUM ANALYZE ${BENCH_SOURCE}_public._cdc_mirror_items`);
    await exec(url, `VACUUM ANALYZE ${BENCH_SOURCE}_public._cdc_changelog_items`);
    await exec(url, 'CHECKPOINT');
    const target = { source: BENCH_SOURCE, table: BENCH_TABLE, deleteMode: 'soft' as const, key: ['id'] };
    const out: SqlCeiling = {
      ms: 0,
      appendMs: 0,
      mergeMs: 0,
      merges: 0,
      mergedRows: 0,
      largestDelta: 0,
      finalMergeMs: 0,
      verified: false,
      concurrent,
      serverCpuMs: 0,
    };
    const postmaster = await postmasterOf(pool);
    const client = await pool.connect();
    const merge = async (): Promise<void> => {
      const m0 = nowMs();
      const m = await applier.warehouse.merge(target);
      out.mergeMs += nowMs() - m0;
      out.merges++;
      out.mergedRows += m.rows;
    };
    let merging: Promise<void> | null = null;
    try {
      let delta = 0;
      const server0 = clusterCpuMs(postmaster);
      const t0 = nowMs();
      for (const c of copies) {
        const a0 = nowMs();
        await client.query('BEGIN');
        await pipeline(Readable.from(c.chunks), client.query(copyFrom(`COPY ${c.table} (${c.columns.map(quoteIdent).join(', ')}) FROM STDIN`)));
        await client.query('COMMIT');
        out.appendMs += nowMs() - a0;
        delta += c.rows;
        out.largestDelta = Math.max(out.largestDelta, delta);
        if (delta >= mergeRows && !merging) {
          delta = 0;
          if (!concurrent) await merge();
          else
            merging = merge().finally(() => {
              merging = null;
            });
        }
      }
      out.ms = nowMs() - t0;
      await merging;
      out.serverCpuMs = clusterCpuMs(postmaster) - server0;
    } finally {
      await merging?.catch(() => undefined);
      client.release();
    }
    const f0 = nowMs();
    await applier.warehouse.merge(target);
    out.finalMergeMs = nowMs() - f0;
    const view = await one<{ n: number; md5: string }>(url, fingerprintSql(MIRROR_VIEW));
    out.verified = view.n === expected.n && view.md5 === expected.md5;
    return out;
  } finally {
    await pool.end();
    await exec(wh.url('postgres'), `DROP DATABASE ${db} WITH (FORCE)`).catch(() => undefined);
  }
}

/** Live rows after the first `n` history changes. */
function liveAfter(h: History, n: number): number {
  let live = h.initialRows.length;
  for (let i = 0; i < n; i++) {
    const op = h.changes[i]!.op;
    if (op === 'insert') live++;
    else if (op === 'delete') live--;
  }
  return live;
}

function describeRun(r: ApplierRun): string {
  const m = r.merges
    ? `; ${r.merges.count} merges (${r.merges.rows} rows, ${r.merges.ms} ms), largest delta ${r.merges.maxDeltaRows} rows (threshold ${r.merges.threshold}), final merge ${r.merges.finalMergeMs} ms`
    : '';
  const c = r.copy
    ? `; the appends' COPYs ${Math.round(r.copy.wholeMs)} ms over ${r.copy.copies} (their text built ${Math.round(r.copy.textMs)} ms, waiting for the server after the last chunk ${Math.round(r.copy.tailMs)} ms)`
    : '';
  return (
    `${r.label}: ${r.events} events in ${r.seconds.toFixed(2)} s = ${Math.round(r.eventsPerSecond)} events/s; batch p50 ${r.batchMs.p50.toFixed(1)} ms, p99 ${r.batchMs.p99.toFixed(1)} ms; ` +
    `${Number.isNaN(r.nodeMs) ? '' : `outside SQL and control plane ${r.nodeMs} ms `}(process CPU ${r.cpuMs} ms, PostgreSQL CPU ${r.serverCpuMs} ms, of ${Math.round(r.seconds * 1000)} ms wall; SQL ${Math.round(r.phases.reduce((a, p) => a + p.ms, 0))} ms), control plane ${r.controlPlane.ms} ms${c}${m}; ${r.verified ? 'warehouse matches' : 'WAREHOUSE DOES NOT MATCH'}`
  );
}

// ---------------------------------------------------------------------------------------------

export async function runApplyBench(): Promise<BenchResult> {
  const quick = argValue('quick') !== undefined;
  const opts = { ...DEFAULT_HISTORY, events: numberArg('events', quick ? 40_000 : DEFAULT_HISTORY.events) };
  const copyRuns = quick ? 2 : 5;
  const logrepRuns = argValue('logrep-runs') === '0' ? 0 : numberArg('logrep-runs', quick ? 1 : 2);
  const only = argValue('variants');
  const extras = argValue('no-extras') === undefined;
  const floorsOn = argValue('no-floors') === undefined;
  /** `--profile`: take a CPU profile of each append-first run at batch 10,000 (the profiler costs a few per cent) and print its top functions. */
  const profileAppend = argValue('profile') !== undefined;
  /**
   * Which part of the history each batch size applies, to keep the whole benchmark near its time
   * budget: batch 10,000 the whole history, batch 1,000 the first half, batch 100 the first 10 %
   * (2,000 batches of the full history would take minutes per variant). Rates over a prefix are
   * slightly flattered (smaller tables); the rows say which prefix.
   */
  const share = (batch: number): number | undefined =>
    batch >= 10_000 ? undefined : Math.min(opts.events, Math.round(opts.events * (batch >= 1000 ? 0.5 : 0.1)));
  const all = [10_000, 1_000, 100];
  /** The apply paths measured: the default, the adapter's PostgreSQL fast path, and experiments (bench/lib/stage-loaders.ts, bench/lib/set-apply.ts). */
  const variants: Array<{
    name: string;
    loader: StageLoader;
    stages?: StageLifecycle;
    batches: number[];
    setBased?: boolean;
    latency?: boolean;
    merge?: 'worker' | 'inline';
    parallel?: number;
  }> = [
    { name: 'append-first (default): COPY into the changelog, merge worker', loader: insertStageLoader, batches: all, latency: true, merge: 'worker' },
    {
      name: 'append-first, merge worker, parallelization factor 2 (two concurrent batches, keys split, one process)',
      loader: insertStageLoader,
      batches: [10_000],
      merge: 'worker',
      parallel: 2,
    },
    { name: 'append-first: merges inline in the handler', loader: insertStageLoader, batches: [10_000, 1_000], merge: 'inline' },
    { name: 'default (INSERT stage, session stage tables)', loader: insertStageLoader, batches: all, latency: true },
    { name: 'COPY stage loader', loader: copyStageLoader, batches: all, latency: true },
    { name: 'experiment: COPY, per-transaction stage tables', loader: copyStageLoader, stages: 'transaction', batches: [1_000] },
    { name: 'experiment: TRUNCATE + COPY + ANALYZE stage', loader: truncateCopyAnalyzeStageLoader, batches: [1_000] },
    { name: 'experiment: set-based SQL apply, one COPY + one round trip', loader: copyStageLoader, setBased: true, batches: all, latency: true },
  ];
  const rec = new Recorder('apply', {
    history: opts,
    copyRuns,
    logrepRuns,
    eventsPerBatchSize: Object.fromEntries(all.map((b) => [b, share(b) ?? opts.events])),
    variants: variants.map((v) => ({ name: v.name, loader: v.loader.name, stages: v.stages ?? 'session', batches: v.batches })),
    durability: 'fsync on, synchronous_commit on (defaults)',
    handlerNodeFlags: handlerFlags(),
  });

  const workDir = mkdtempSync(path.join(os.tmpdir(), 'cdc-bench-apply-'));
  const collector = new MetricsCollector();
  const captured = captureStdout(collector, { emfFile: path.join(workDir, 'metrics.emf.jsonl'), logFile: path.join(workDir, 'handlers.log') });
  print = (t) => captured.write(t);
  const clusters: PostgresCluster[] = [];
  try {
    say(`the applier runs with ${handlerFlags()} (docs/performance-log.md, "The applier's young generation": its deployed flags unless --node-defaults)`);
    say(`generating the history (${opts.events} events, seed ${opts.seed})`);
    const h = generateHistory(opts);
    const snapshot = snapshotEvents(h);
    const history = historyEvents(h);
    const bytesPerRow = h.finalRows.reduce((a, r) => a + copyLine(r).length, 0) / h.finalRows.length;
    const eventBytes = history.slice(0, 1000).reduce((a, e) => a + JSON.stringify(e).length, 0) / 1000;
    rec.details.history = {
      counts: h.counts,
      initialRows: h.initialRows.length,
      finalRows: h.finalRows.length,
      keysTouched: h.keysTouched,
      copyBytesPerRow: Math.round(bytesPerRow * 10) / 10,
      eventJsonBytes: Math.round(eventBytes),
    };
    say(`history: ${JSON.stringify(rec.details.history)}`);

    say('starting two PostgreSQL clusters (fsync on)');
    const [wh, src] = await Promise.all([
      startPostgres({ settings: { shared_preload_libraries: 'pg_stat_statements', 'pg_stat_statements.track': 'all' } }),
      startPostgres(),
    ]);
    clusters.push(wh, src);
    await Promise.all([wh.createDatabase('ref'), wh.createDatabase('sub'), src.createDatabase('src')]);
    rec.settings.postgres = await serverVersion(wh.url('postgres'));

    // 1. COPY of the final rows.
    const copyRates = await copyReference(wh.url('ref'), h, copyRuns);
    const copyRate = median(copyRates);
    const expected = await one<{ n: number; md5: string }>(wh.url('ref'), fingerprintSql('expected'));
    rec.details.copy = { rowsPerSecond: copyRates.map(Math.round), rows: h.finalRows.length };
    say(`COPY of ${h.finalRows.length} final rows: median ${Math.round(copyRate)} rows/s (${copyRates.map(Math.round).join(', ')})`);
    // 1b. The physical reference: COPY of the history into a keyed changelog plus COPY of the final rows.
    const physRates = await physicalReference(wh.url('ref'), h, snapshot, history, copyRuns);
    const physRate = median(physRates);
    rec.details.physical = { eventsPerSecond: physRates.map(Math.round), events: history.length, finalRows: h.finalRows.length };
    say(
      `COPY of ${history.length} history events into a keyed changelog + COPY of the final rows: median ${Math.round(physRate)} events/s (${physRates.map(Math.round).join(', ')})`,
    );

    // 2. Native logical replication, live and catch-up.
    const logrep: LogrepRun[] = [];
    for (let i = 0; i < logrepRuns; i++) {
      for (const mode of ['live', 'catch-up'] as const) {
        const r = await logicalReplication(src, wh, h, mode, logrep.length);
        logrep.push(r);
        const cpu = r.cpuMs
          ? `; CPU ${Math.round(r.cpuMs.publisher + r.cpuMs.subscriber)} ms = ${cpuMicrosPerEvent(h.changes.length, r.cpuMs.publisher + r.cpuMs.subscriber).toFixed(1)} µs per change (publisher ${Math.round(r.cpuMs.publisher)}, subscriber ${Math.round(r.cpuMs.subscriber)})`
          : '';
        say(
          `logical replication ${mode}: ${r.seconds.toFixed(2)} s = ${Math.round(r.changesPerSecond)} changes/s (source alone ${r.sourceSeconds.toFixed(2)} s${cpu})${r.verified ? '' : ' SUBSCRIBER DOES NOT MATCH'}`,
        );
      }
    }
    await exec(wh.url('sub'), 'DROP SUBSCRIPTION IF EXISTS bench_sub');
    const live = logrep.length === 0 ? Number.NaN : median(logrep.filter((r) => r.mode === 'live').map((r) => r.changesPerSecond));
    const catchUp = median(logrep.filter((r) => r.mode === 'catch-up').map((r) => r.changesPerSecond));
    const sourceAlone = median(logrep.filter((r) => r.mode === 'catch-up').map((r) => h.changes.length / r.sourceSeconds));
    rec.details.logicalReplication = logrep;

    // The applier's Node-side floors, against the references above.
    const copies: CapturedCopy[] = [];
    const floors = floorsOn ? await nodeFloors(wh, snapshot, history, quick ? 2 : 3, copies) : null;
    const sqlCeilings: SqlCeiling[] = [];
    if (floors) {
      for (let i = 0; i < (quick ? 1 : 2); i++)
        for (const concurrent of [false, true]) sqlCeilings.push(await sqlCeiling(wh, snapshot, copies, expected, i, concurrent));
      copies.length = 0;
      rec.details.nodeFloors = floors;
      rec.details.sqlCeilings = sqlCeilings;
      for (const c of sqlCeilings) {
        say(
          `ceiling (c), the warehouse's statements alone, merges ${c.concurrent ? 'beside' : 'between'} the COPYs: ${history.length} events in ${Math.round(c.ms)} ms = ${Math.round(history.length / (c.ms / 1000))} events/s (delta COPYs ${Math.round(c.appendMs)} ms, ${c.merges} merges ${Math.round(c.mergeMs)} ms of ${c.mergedRows} rows, largest delta ${c.largestDelta}; PostgreSQL CPU ${Math.round(c.serverCpuMs)} ms; final merge ${Math.round(c.finalMergeMs)} ms untimed); ${c.verified ? 'view matches' : 'VIEW DOES NOT MATCH'}`,
        );
        if (!c.verified) throw new Error('ceiling (c): the view does not match the expected rows');
      }
      say(
        `Node-side floors over the ${floors.events} events in batches of ${floors.batch}: (a) decode + JSON.parse ${floors.decode.map(Math.round).join(', ')} events/s; ` +
          `(b) the handler, COPY text built and not sent ${floors.handler.map(Math.round).join(', ')} events/s (process CPU ${floors.handlerCpuMs.join(', ')} ms; ${floors.copyRows} rows, ${(floors.copyBytes / 1e6).toFixed(1)} MB of COPY text; ${floors.sqlStatements} SQL statements in the timed part)`,
      );
    }

    // 3. The applier: each variant at each batch size, then a CPU profile and the control plane on DynamoDB Local.
    const runs: ApplierRun[] = [];
    const run = async (o: ApplierRunOptions): Promise<ApplierRun> => {
      const r = await applierRun(wh, h, snapshot, history, o, expected);
      runs.push(r);
      say(describeRun(r));
      if (r.profile)
        say(
          `CPU profile (${r.profile.totalMs} ms sampled): ${r.profile.byFunction
            .slice(0, 25)
            .map((f) => `${f.fn} ${(f.share * 100).toFixed(1)} %`)
            .join('; ')}`,
        );
      return r;
    };
    const byVariant = new Map<string, ApplierRun[]>();
    const chosen = only ? variants.filter((v) => only.split(',').some((w) => v.name.includes(w))) : variants;
    for (const v of chosen) {
      const list: ApplierRun[] = [];
      for (const batch of v.batches) {
        list.push(
          await run({
            label: `${v.name}, batch ${batch}`,
            batch,
            loader: v.loader,
            ...(v.stages ? { stages: v.stages } : {}),
            ...(v.setBased ? { setBased: true } : {}),
            ...(v.merge ? { merge: v.merge } : {}),
            ...(v.parallel ? { parallel: v.parallel } : {}),
            limit: share(batch),
            statements: batch === 1000,
            profile: profileAppend && v.merge !== undefined && batch === 10_000,
          }),
        );
      }
      byVariant.set(v.name, list);
    }
    // CPU profile of the applier's process on the default path (separate pass: the profiler costs a few per cent).
    const profiled = !extras
      ? null
      : await run({ label: 'profile: default path, batch 1000', batch: 1000, loader: insertStageLoader, limit: Math.min(opts.events, 50_000), profile: true });

    // Control plane on DynamoDB Local: its share of a batch.
    let dynamo: ApplierRun | null = null;
    if (extras) {
      try {
        const ddb = await startDynamoDbLocal({});
        try {
          const client = dynamoDbClient(ddb.endpoint);
          await createControlTable(client, 'bench-control');
          dynamo = await run({
            label: 'default path, batch 1000, DynamoDB Local control plane',
            batch: 1000,
            loader: insertStageLoader,
            limit: Math.min(opts.events, 50_000),
            controlPlane: new DynamoDbControlPlane(client, 'bench-control'),
          });
          client.destroy();
        } finally {
          await ddb.stop();
        }
      } catch (err) {
        say(`DynamoDB Local run skipped: ${(err as Error).message}`);
        rec.details.dynamoDbSkipped = (err as Error).message;
      }
    }
    rec.details.applier = runs;

    // Rows.
    const full = (r: ApplierRun): boolean => r.events === h.changes.length;
    rec.add(
      rateRow('COPY of the final rows into an empty table', copyRate, 'rows/s', null, null, { note: `${h.finalRows.length} rows, median of ${copyRuns}` }),
    );
    rec.add(
      rateRow('physical reference: COPY of the history into a keyed changelog + COPY of the final rows', physRate, 'events/s', null, null, {
        note: `${history.length} events, ${h.finalRows.length} rows, median of ${copyRuns}`,
      }),
    );
    rec.add(rateRow('native logical replication, live (workload start → caught up)', live, 'changes/s', copyRate, 'COPY rows/s'));
    rec.add(rateRow('native logical replication, catch-up of the backlog', catchUp, 'changes/s', copyRate, 'COPY rows/s'));
    rec.add(
      rateRow('source alone: the history replayed on the publisher', sourceAlone, 'changes/s', null, null, {
        note: `${h.options.txSize} changes per transaction`,
      }),
    );
    for (const v of chosen) {
      for (const r of byVariant.get(v.name)!) {
        const notes = [`${(r.eventsPerSecond / physRate).toFixed(2)}× history+final COPY`, `${(r.eventsPerSecond / copyRate).toFixed(2)}× final-rows COPY`];
        if (r.merges)
          notes.push(`largest delta ${r.merges.maxDeltaRows} rows (merge at ${r.merges.threshold}), ${r.merges.count} merges, ${r.merges.ms} ms merging`);
        if (!full(r)) notes.push(`first ${r.events} events`);
        if (!r.verified) notes.push('warehouse did NOT match the expected rows');
        rec.add(
          rateRow(`applier: ${r.label}`, r.eventsPerSecond, 'events/s', catchUp, 'logrep catch-up', {
            target: '≥ 1× logrep and ≥ 0.5× history+final COPY',
            met: r.eventsPerSecond >= catchUp && r.eventsPerSecond >= 0.5 * physRate,
            note: notes.join('; '),
          }),
        );
      }
    }
    // The cores' bound (docs/performance-log.md, "69. The cores' bound on the apply line"): the CPU each path spent per event, every
    // process of it, against the cores of this machine; no overlap lets a path beat its bound.
    const catchUpCpu = logrep.filter((r) => r.mode === 'catch-up' && r.cpuMs).map((r) => r.cpuMs!.publisher + r.cpuMs!.subscriber);
    const cores = os.availableParallelism();
    if (catchUpCpu.length > 0) {
      const catchUpMicros = cpuMicrosPerEvent(h.changes.length, median(catchUpCpu));
      // The CPU per event at which the bound equals catch-up: the cores' second over catch-up's changes in it.
      const needMicros = cpuMicrosPerEvent(catchUp, cores * 1000);
      for (const v of chosen) {
        for (const r of byVariant.get(v.name)!.filter((x) => full(x) && x.cpuMs > 0 && x.serverCpuMs > 0)) {
          const cpuMs = r.cpuMs + r.serverCpuMs;
          const bound = coreBoundRate(r.events, cpuMs, cores);
          say(
            `cores' bound, ${r.label}: CPU ${Math.round(cpuMs)} ms (this process ${r.cpuMs}, PostgreSQL ${Math.round(r.serverCpuMs)}) = ` +
              `${cpuMicrosPerEvent(r.events, cpuMs).toFixed(1)} µs per event; ${cores} cores carry at most ${Math.round(bound)} events/s = ${(bound / catchUp).toFixed(2)}× logrep catch-up ` +
              `(catch-up ${catchUpMicros.toFixed(1)} µs per change; the line needs at most ${needMicros.toFixed(1)})`,
          );
          rec.add(
            rateRow(
              `cores' bound: ${cores} cores over the CPU per event of ${r.label} (this process + PostgreSQL)`,
              bound,
              'events/s',
              catchUp,
              'logrep catch-up',
              {
                target: '≥ 1× logrep possible',
                met: bound >= catchUp,
                note: `${cpuMicrosPerEvent(r.events, cpuMs).toFixed(1)} µs per event (process ${cpuMicrosPerEvent(r.events, r.cpuMs).toFixed(1)}, PostgreSQL ${cpuMicrosPerEvent(r.events, r.serverCpuMs).toFixed(1)}); catch-up ${catchUpMicros.toFixed(1)} µs per change (publisher + subscriber); ≥ 1× needs ≤ ${needMicros.toFixed(1)} µs with every core busy`,
              },
            ),
          );
        }
      }
    }
    for (const v of chosen.filter((x) => x.latency)) {
      for (const r of byVariant.get(v.name)!) {
        rec.add(
          timeRow(`per-batch latency p50, ${r.label}`, r.batchMs.p50, 'ms', null, null, {
            note: `p90 ${r.batchMs.p90.toFixed(1)} ms, p99 ${r.batchMs.p99.toFixed(1)} ms, max ${r.batchMs.max.toFixed(1)} ms`,
          }),
        );
      }
    }
    const defaultAt1000 = byVariant.get(variants[0]!.name)?.find((r) => r.batch === 1000);
    if (dynamo && defaultAt1000) {
      const mem = defaultAt1000;
      rec.add(
        rateRow(
          'default path, batch 1000, DynamoDB Local control plane',
          dynamo.eventsPerSecond,
          'events/s',
          mem.eventsPerSecond,
          'same, in-memory control plane',
          {
            note: `control plane ${((dynamo.controlPlane.ms / (dynamo.seconds * 1000)) * 100).toFixed(1)} % of the time, ${(dynamo.controlPlane.ms / dynamo.batches).toFixed(1)} ms per batch`,
          },
        ),
      );
    }
    if (floors) {
      // The ceilings (docs/performance-log.md, "Ceilings: what this machine and the mandated stand-ins allow"): what one Node process can do at most, before any SQL.
      const decode = median(floors.decode);
      const handler = median(floors.handler);
      const verdicts: string[] = [];
      for (const [what, v] of [
        ['(a) decode + JSON.parse alone', decode],
        ['(b) the handler without SQL', handler],
      ] as const) {
        const short = [
          v < catchUp ? `${(v / catchUp).toFixed(2)}× logrep catch-up (goal ≥ 1×)` : null,
          v < 0.5 * copyRate ? `${(v / copyRate).toFixed(2)}× COPY (goal ≥ 0.5×)` : null,
        ].filter((x): x is string => x !== null);
        verdicts.push(
          short.length > 0
            ? `${what} reaches only ${short.join(' and ')}: ${short.length > 1 ? 'those goals are' : 'that goal is'} UNREACHABLE by any SQL-side change in a single Node process`
            : `${what} leaves room for both goals (${(v / catchUp).toFixed(2)}× logrep, ${(v / copyRate).toFixed(2)}× COPY)`,
        );
      }
      for (const v of verdicts) say(`verdict: ${v}`);
      const note = `median of ${floors.decode.length}; ${floors.events} events in batches of ${floors.batch}, this process only (PostgreSQL idle)`;
      rec.add(
        rateRow('ceiling (a): base64 + UTF-8 + JSON.parse of each record, nothing else', decode, 'events/s', catchUp, 'logrep catch-up', {
          target: '≥ 1× logrep and ≥ 0.5× COPY needed',
          met: decode >= catchUp && decode >= 0.5 * copyRate,
          note: `${(decode / copyRate).toFixed(2)}× COPY; ${note}`,
        }),
      );
      rec.add(
        rateRow('ceiling (b): the real handler, delta COPY text built and not sent (no SQL, no merges)', handler, 'events/s', catchUp, 'logrep catch-up', {
          target: '≥ 1× logrep and ≥ 0.5× COPY needed',
          met: handler >= catchUp && handler >= 0.5 * copyRate,
          note: `${(handler / copyRate).toFixed(2)}× COPY; ${note}; ${floors.sqlStatements} SQL statements in the timed part`,
        }),
      );
      const serial = sqlCeilings.filter((c) => !c.concurrent);
      const beside = sqlCeilings.filter((c) => c.concurrent);
      const sql = median(serial.map((c) => history.length / (c.ms / 1000)));
      const appendsOnly = median(serial.map((c) => history.length / (c.appendMs / 1000)));
      const sqlBeside = median(beside.map((c) => history.length / (c.ms / 1000)));
      rec.add(
        rateRow(
          "ceiling (c): the warehouse's statements alone, delta COPYs and merges one after the other (no Node work)",
          sql,
          'events/s',
          catchUp,
          'logrep catch-up',
          {
            target: '≥ 1× logrep and ≥ 0.5× COPY needed',
            met: sql >= catchUp && sql >= 0.5 * copyRate,
            note: `${(sql / copyRate).toFixed(2)}× COPY; the delta COPYs alone ${Math.round(appendsOnly)} events/s (${(appendsOnly / catchUp).toFixed(2)}× logrep); median of ${serial.length}, merges at ${DEFAULT_MERGE_POLICY.maxRows} delta rows`,
          },
        ),
      );
      rec.add(
        rateRow(
          'ceiling (c), two cores: the same statements, the merges beside the COPYs on a second connection (as the merge worker runs them; no Node work)',
          sqlBeside,
          'events/s',
          catchUp,
          'logrep catch-up',
          {
            target: '≥ 1× logrep and ≥ 0.5× COPY needed',
            met: sqlBeside >= catchUp && sqlBeside >= 0.5 * copyRate,
            note: `${(sqlBeside / copyRate).toFixed(2)}× COPY; median of ${beside.length}, merges at ${DEFAULT_MERGE_POLICY.maxRows} delta rows; timed to the last COPY's commit`,
          },
        ),
      );
      rec.details.ceilingVerdicts = verdicts;
    }
    const fullRuns = runs.filter(full);
    const best = fullRuns.reduce((a, b) => (b.eventsPerSecond > a.eventsPerSecond ? b : a));
    rec.details.summary = {
      copyRowsPerSecond: Math.round(copyRate),
      logrepLive: Math.round(live),
      logrepCatchUp: Math.round(catchUp),
      sourceAlone: Math.round(sourceAlone),
      applierBest: { label: best.label, eventsPerSecond: Math.round(best.eventsPerSecond) },
      profiled: profiled ? { label: profiled.label, phases: profiled.phases, nodeMs: profiled.nodeMs, profile: profiled.profile } : null,
    };
  } finally {
    for (const c of clusters) await c.stop().catch(() => undefined);
    await captured.restore();
    print = (t) => process.stdout.write(t);
    rmSync(workDir, { recursive: true, force: true });
  }
  return rec.finish();
}

if (isMain(import.meta.url)) {
  exitOnHelp(import.meta.url);
  const done =
    relaunchWithApplierFlags() ??
    runApplyBench().then(
      () => 0,
      (err: unknown) => {
        console.error(err);
        return 1;
      },
    );
  void done.then((code) => process.exit(code));
}
