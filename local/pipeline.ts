/**
 * The whole pipeline on one machine, wired from the real handlers:
 *
 *     source PostgreSQL ──slot capture──► raw stream ──poller "normalizer"──► normalizer handler
 *        ▲ heartbeat writer (1 s)                                                │
 *        └ demo workload                              change log ◄───────────────┘
 *                                                        ├──poller "<sink id>"──► warehouse applier ──► warehouse
 *                                                        ├──poller "<search id>"─► search applier ──► search index (stand-in or OpenSearch)
 *                                                        └──poller "archive"────► archive copier ──► archive
 *
 * Each poller has its own checkpoints in the control plane, as each event source mapping has on
 * AWS. The change log's consumers share one read of it (local/fanout.ts). Handler logs and EMF metrics go to stdout, where `cdc local` collects them.
 */
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { DEFAULT_HEARTBEAT_SCHEMA, HEARTBEAT_TABLE, ServiceName } from '../contracts/env.ts';
import { METRICS_NAMESPACE, MetricName } from '../contracts/metrics.ts';
import { KinesisChangeLog } from '../lambda/adapters/change-log-kinesis.ts';
import { createNormalizerHandler } from '../lambda/handlers/normalizer.ts';
import { createWarehouseApplier, type MergeDone } from '../lambda/handlers/warehouse-applier.ts';
import { createHeldRangeReplayer } from '../lambda/core/sink/held-range-replay.ts';
import { readChangeLog } from '../lambda/adapters/change-log-reader.ts';
import { createSearchApplier } from '../lambda/handlers/search-applier.ts';
import { OpenSearchIndex, searchClient } from '../lambda/adapters/search-opensearch.ts';
import { createHeartbeatHandler, type HeartbeatHandler } from '../lambda/handlers/heartbeat-writer.ts';
import { HeartbeatWriter } from '../lambda/adapters/heartbeat-pg.ts';
import { createSlotMonitorHandler, type SlotMonitorHandler } from '../lambda/handlers/slot-monitor.ts';
import type { SlotReport } from '../lambda/core/capture/slot-monitor.ts';
import { TableConfigIndex, type TableConfig, type TableRule } from '../lambda/core/tables/table-config.ts';
import { LocalDiscovery } from './discovery.ts';
import { PartitionWatch } from './partitions.ts';
import type { TableRecord } from '../lambda/core/shared/control-plane.ts';
import { SlotCapture } from './capture.ts';
import { kinesisRawPublisher } from './raw-publisher.ts';
import { Poller } from './poller.ts';
import { StreamFanout } from './fanout.ts';
import { createArchiveCopier } from '../lambda/core/rebuild/archive.ts';
import { startWorkload, type Workload } from './demo.ts';
import { MetricsCollector, percentile } from './metrics.ts';
import type { LocalStack } from './stack.ts';
import type { StatusSnapshot } from './status.ts';
import { LocalSnapshots } from './snapshot.ts';
import { LocalPolls } from './poll.ts';
import type { SourceBudget } from '../lambda/core/snapshot/snapshot-pacer.ts';
import { redactUrl } from './stack.ts';
import { guardPoolClients } from '../lambda/adapters/pg-pool.ts';
import type { SearchTableConfig } from '../lambda/core/search/search-plan.ts';
import type { LocalRedshiftSink } from './redshift-sink.ts';
import { waitCaughtUp } from './caught-up.ts';
import { setTimeout as sleep } from 'node:timers/promises';

export interface PipelineOptions {
  stack: LocalStack;
  source: string;
  /** The captured tables (the heartbeat table is added). */
  tables: TableConfig[];
  sinkId: string;
  collector: MetricsCollector;
  /** How often the heartbeat writer runs (10 s on AWS; faster locally so lag is visible). @default 1000 */
  heartbeatMs?: number;
  /** Run the demo workload at this many transactions per second (0: none). */
  workloadRate?: number;
  workloadSeed?: number;
  capture?: { maxTxRows?: number; maxTxBytes?: number; slot?: string; read?: 'stream' | 'peek' };
  /** Poller settings; `maxRetries` applies to bad input only, infrastructure errors are retried without limit (backoff up to `maxBackoffMs`). */
  poller?: { batchSize?: number; maxRetries?: number; maxBackoffMs?: number; checkpointIntervalMs?: number };
  /** The source's WAL budget: slot headroom is measured against it and max_slot_wal_keep_size. @default 1 GiB */
  slotWalBudgetBytes?: number;
  /** How often the slot monitor runs. @default 5000 */
  slotMonitorMs?: number;
  /** Errors the pipeline recovers from (retries), for the log. */
  onError?: (where: string, err: unknown) => void;
  /** The search sink: its id and the OpenSearch (or stand-in) URL; the tables it serves (every captured table when not given) and its index prefix. @default no search sink */
  search?: { sinkId: string; url: string; tables?: SearchTableConfig[]; prefix?: string };
  /** The warehouse sink's merge thresholds (`WarehouseSink` `mergeMaxRows`, `mergeMaxAge`); merges run in the local loop either way. @default the applier's */
  merge?: { maxRows?: number; maxAgeMs?: number };
  /** The normalizer's catalog types for type-less records (`CDC_CATALOG_TYPES`, docs/schema-drift.md). @default off */
  catalogTypes?: boolean;
  changeLogAggregation?: boolean; // the normalizer packs the change log's events into KPL aggregates (`CDC_CHANGE_LOG_AGGREGATION`, docs/architecture.md "5.1 The change event"); default on
  /** Batch sizes per consumer (the event source mappings'), over `poller.batchSize`. */
  batchSizes?: { normalizer?: number; sink?: number; search?: number; archive?: number };
  /** Snapshots of existing rows (docs/snapshot.md): off, or budget / fixed chunk size / read replica. @default on, default budget */
  snapshot?: false | { budget?: SourceBudget; fixedChunk?: number; replicaUrl?: string };
  /** Time between poll passes over the tables configured `capture: 'poll'` (docs/polling.md). @default 1000 */
  pollIntervalMs?: number;
  /** Capture-by-pattern rules (docs/onboarding.md): matching tables join while the pipeline runs. @default none */
  rules?: TableRule[];
  /** How often the catalog is scanned for tables the rules match. @default 2000 */
  discoveryMs?: number;
  /** The warehouse sink written the Redshift way, through the stand-in (local/redshift-sink.ts): every applier shares its writer; stopped after the pollers. @default PostgreSQL */
  redshift?: LocalRedshiftSink;
}

/** The heartbeat table's id as the capture and the applier name it. */
export const HEARTBEAT_TABLE_ID = `${DEFAULT_HEARTBEAT_SCHEMA}.${HEARTBEAT_TABLE}`;

const LAG_WINDOW_MS = 60_000;
const RATE_WINDOW_MS = 10_000;

/** How often `cdc local` looks for deltas due for a merge (the thresholds decide; docs/warehouse-apply.md). */
const MERGE_CHECK_MS = 5_000;

/** A running local pipeline. */
export class LocalPipeline {
  readonly capture: SlotCapture;
  readonly pollers: { normalizer: Poller; sink: Poller; archive: Poller; search?: Poller };
  /** The change log's one read for its consumers (the sink, archive and search pollers). */
  readonly changeLogReads: StreamFanout;
  /** The search sink's index adapter (for the verdict), when there is a search sink. */
  readonly searchIndex: OpenSearchIndex | null = null;
  readonly tables: TableConfig[];
  /** What the capture captures now: the declared tables, the heartbeat table and the tables that joined by a rule. */
  readonly captureIndex: TableConfigIndex;
  /** The catalog scan, when there are capture rules. */
  readonly discovery: LocalDiscovery | null;
  /** The source's partition trees: the capture names each partition's changes by its root (docs/partitioned-tables.md). */
  readonly partitions: PartitionWatch;
  /** The snapshot worker, or null when snapshots are off. */
  readonly snapshots: LocalSnapshots | null;
  /** The poller of the tables configured `capture: 'poll'` (docs/polling.md), or null when there are none. */
  readonly polls: LocalPolls | null;
  readonly startedAt = Date.now();
  /** When the first change reached the warehouse (epoch ms), or null. */
  firstAppliedAt: number | null = null;
  private workload: Workload | null = null;
  private heartbeatLoop: Promise<void> | null = null;
  private heartbeatStop = false;
  private readonly pools: pg.Pool[] = [];
  private readonly heartbeat: HeartbeatHandler;
  private readonly slotMonitor: SlotMonitorHandler;
  private slotMonitorLoop: Promise<void> | null = null;
  /** The slot monitor's latest report (every slot of the source, retained WAL and headroom), or null before its first run. */
  slotReport: SlotReport | null = null;
  private tableStates: TableRecord[] = [];
  private deadLetterCount = 0;
  /** Per table of this source, the sinks that hold its events now (docs/operations.md, "Blast radius of one table"). */
  private heldBy = new Map<string, string[]>();
  private lastControlRead = 0;
  private readonly counters = new Map<string, Array<[number, number]>>();
  /** Each sink's resume replay (docs/operations.md): runs when an operator resume releases a hold. */
  readonly replayers: Array<ReturnType<typeof createHeldRangeReplayer>> = [];
  private replayLoop: Promise<void> | null = null;
  private replayStop = false;
  /** The warehouse sink's deferred merge of due deltas (docs/warehouse-apply.md): the schedule's second half, as on AWS. */
  private mergeDue: (() => Promise<MergeDone[]>) | null = null;

  constructor(private readonly o: PipelineOptions) {
    const { stack } = o;
    const err = (where: string) => (e: unknown) => o.onError?.(where, e);
    const heartbeatConfig: TableConfig = { table: HEARTBEAT_TABLE_ID, deleteMode: 'soft', mask: [], exclude: [] };
    this.tables = o.tables.some((t) => t.table === HEARTBEAT_TABLE_ID) ? [...o.tables] : [...o.tables, heartbeatConfig];
    const rules = o.rules ?? [];
    // Log-captured tables (declared, heartbeat, and those that join by a rule); polled tables are read by the poller.
    this.captureIndex = new TableConfigIndex(
      this.tables.filter((t) => t.capture !== 'poll'),
      rules,
    );
    this.discovery =
      rules.length === 0
        ? null
        : new LocalDiscovery({
            source: o.source,
            sourceUrl: stack.sourceUrl,
            controlPlane: stack.controlPlane,
            rules,
            declared: new Set(this.tables.map((t) => t.table)),
            index: this.captureIndex,
            // The local warehouse's engine (Redshift through its stand-in); a search sink serves every discovered table unless it names its tables (docs/onboarding.md, "Names").
            sinks: { warehouse: o.redshift ? 'redshift' : 'postgres', search: o.search !== undefined && o.search.tables === undefined },
            ...(o.discoveryMs ? { everyMs: o.discoveryMs } : {}),
            onError: err('discovery'),
          });
    this.partitions = new PartitionWatch({
      source: o.source,
      sourceUrl: stack.sourceUrl,
      controlPlane: stack.controlPlane,
      index: this.captureIndex,
      ...(o.discoveryMs ? { everyMs: o.discoveryMs } : {}),
      onError: err('partitions'),
    });
    this.capture = new SlotCapture({
      source: o.source,
      sourceUrl: stack.sourceUrl,
      partitions: this.partitions,
      slot: o.capture?.slot,
      // A polled table is not read from the log (docs/polling.md): the index holds log-captured tables only.
      tables: this.captureIndex,
      controlPlane: stack.controlPlane,
      publish: kinesisRawPublisher(stack.kinesis, stack.streams.raw),
      maxTxRows: o.capture?.maxTxRows,
      maxTxBytes: o.capture?.maxTxBytes,
      ...(o.capture?.read ? { read: o.capture.read } : {}),
      onError: err('capture'),
    });
    this.snapshots =
      o.snapshot === false
        ? null
        : new LocalSnapshots({
            source: o.source,
            sourceUrl: stack.sourceUrl,
            ...(o.snapshot?.replicaUrl ? { replicaUrl: o.snapshot.replicaUrl } : {}),
            tables: o.tables.filter((t) => t.table !== HEARTBEAT_TABLE_ID),
            index: this.captureIndex,
            controlPlane: stack.controlPlane,
            publish: kinesisRawPublisher(stack.kinesis, stack.streams.raw),
            ...(o.snapshot?.budget ? { budget: o.snapshot.budget } : {}),
            ...(o.snapshot?.fixedChunk ? { fixedChunk: o.snapshot.fixedChunk } : {}),
            onError: err('snapshot'),
          });
    const polled = o.tables.filter((t) => t.capture === 'poll');
    this.polls =
      polled.length === 0
        ? null
        : new LocalPolls({
            source: o.source,
            sourceUrl: stack.sourceUrl,
            tables: polled,
            controlPlane: stack.controlPlane,
            publish: kinesisRawPublisher(stack.kinesis, stack.streams.raw),
            ...(o.snapshot && o.snapshot.budget ? { budget: o.snapshot.budget } : {}),
            ...(o.snapshot && o.snapshot.fixedChunk ? { fixedPage: o.snapshot.fixedChunk } : {}),
            ...(o.pollIntervalMs !== undefined ? { intervalMs: o.pollIntervalMs } : {}),
            onError: err('poll'),
          });
    // One beat per invocation, invoked every heartbeatMs: the local schedule.
    this.heartbeat = createHeartbeatHandler({ writer: new HeartbeatWriter({ source: o.source, connection: { connectionString: stack.sourceUrl } }), beats: 1 });
    // The slot monitor as it runs on AWS (its EMF metrics reach the collector through stdout).
    this.slotMonitor = createSlotMonitorHandler({
      source: o.source,
      slot: this.capture.slot,
      walBudgetBytes: o.slotWalBudgetBytes ?? 1024 ** 3,
      connection: { connectionString: stack.sourceUrl },
      store: stack.controlPlane,
    });
    // One handler instance per shard: each stands for a Lambda execution environment.
    const normalizer = {
      perShard: () =>
        createNormalizerHandler({
          source: o.source,
          tables: this.tables,
          rules,
          controlPlane: stack.controlPlane,
          changeLog: new KinesisChangeLog(stack.kinesis, stack.streams.changeLog, { aggregate: o.changeLogAggregation ?? true }),
          payloads: stack.payloads,
          // As on AWS: the capture writes DMS records, which carry no types (docs/local.md, "DMS records").
          catalogTypes: true,
        }),
    };
    const applier = {
      perShard: () => {
        // Its own pool too, as a Lambda environment has (the applier keeps per-connection stage tables).
        const pool = new pg.Pool({ connectionString: stack.warehouseUrl, max: 2, application_name: `cdc-local-${o.sinkId}` });
        // Every connection keeps an error listener while checked out too: a server that ends it
        // (a restart, 57P01 at a shutdown) fails the batch, never the process (docs/local.md, "Stopping").
        guardPoolClients(pool, err('warehouse pool'));
        this.pools.push(pool);
        const a = createWarehouseApplier({
          controlPlane: stack.controlPlane,
          pool,
          sinkId: o.sinkId,
          metrics: new Metrics({ namespace: METRICS_NAMESPACE }),
          logger: new Logger({ serviceName: ServiceName.WAREHOUSE_APPLIER }),
          payloads: stack.payloads,
          ...(o.redshift ? { writer: o.redshift.warehouse } : {}),
          // Merges run on the replay loop's own connection (below), never on a shard's batch:
          // a merge does not stop appends, so the sink's lag does not carry it (docs/warehouse-apply.md, "When").
          merge: { ...o.merge, inline: false },
        });
        return (e: Parameters<typeof a.handler>[0]) => a.handler(e);
      },
    };
    {
      const pool = new pg.Pool({ connectionString: stack.warehouseUrl, max: 2, application_name: `cdc-local-${o.sinkId}-replay` });
      // Every connection keeps an error listener while checked out too (as above).
      guardPoolClients(pool, err('warehouse pool'));
      this.pools.push(pool);
      const replayApplier = createWarehouseApplier({
        controlPlane: stack.controlPlane,
        pool,
        sinkId: o.sinkId,
        ...(o.merge ? { merge: o.merge } : {}),
        ...(o.redshift ? { writer: o.redshift.warehouse } : {}),
        metrics: new Metrics({ namespace: METRICS_NAMESPACE }),
        logger: new Logger({ serviceName: 'warehouse-replay' }),
      });
      this.replayers.push(
        createHeldRangeReplayer({
          controlPlane: stack.controlPlane,
          sinkId: o.sinkId,
          applier: replayApplier,
          readLog: (starts) => readChangeLog(stack.kinesis, stack.streams.changeLog, { starts }),
        }),
      );
      this.mergeDue = () => replayApplier.mergeDue();
    }
    const common = {
      kinesis: stack.kinesis,
      controlPlane: stack.controlPlane,
      // Up to 1,000 records per invocation: a backlog pays the per-batch costs (registry reads, the applier's round trips) once per 1,000 (docs/performance-log.md, "2. End to end").
      batchSize: o.poller?.batchSize ?? 1000,
      checkpointIntervalMs: o.poller?.checkpointIntervalMs ?? 1000, // docs/local.md, "Checkpoints written at most once a second"
      ...(o.poller?.maxRetries !== undefined ? { maxRetries: o.poller.maxRetries } : {}),
      ...(o.poller?.maxBackoffMs !== undefined ? { maxBackoffMs: o.poller.maxBackoffMs } : {}),
    };
    const batchOf = (consumer: 'normalizer' | 'sink' | 'search'): { batchSize?: number } =>
      o.batchSizes?.[consumer] ? { batchSize: o.batchSizes[consumer] } : {};
    const watch = (stream: string) => stack.puts.watcher(stream); // every put of this process: it wakes the pollers of the shards it put to
    // One read of the change log for all its consumers, each with its own checkpoints (docs/local.md, "One read of the change log for every consumer").
    const changeLogReads = new StreamFanout({ kinesis: stack.kinesis, streamName: stack.streams.changeLog });
    this.changeLogReads = changeLogReads;
    let searchPoller: Poller | undefined;
    if (o.search) {
      const search = o.search;
      this.searchIndex = new OpenSearchIndex(searchClient({ node: search.url }));
      // With capture rules, every registered table (each with its registered delete mode): tables that join by a rule are indexed too.
      const served = search.tables ?? (rules.length > 0 ? undefined : this.tables.map((t) => ({ source: o.source, table: t.table, deleteMode: t.deleteMode })));
      const searchApplier = {
        perShard: () => {
          const a = createSearchApplier({
            controlPlane: stack.controlPlane,
            search: new OpenSearchIndex(searchClient({ node: search.url })),
            sinkId: search.sinkId,
            ...(served ? { tables: served } : {}),
            ...(search.prefix ? { prefix: search.prefix } : {}),
            metrics: new Metrics({ namespace: METRICS_NAMESPACE }),
            logger: new Logger({ serviceName: 'search-applier' }),
            payloads: stack.payloads,
          });
          return (e: Parameters<typeof a.handler>[0]) => a.handler(e);
        },
      };
      searchPoller = new Poller({
        ...common,
        ...batchOf('search'),
        consumer: search.sinkId,
        streamName: stack.streams.changeLog,
        fanout: changeLogReads,
        watchPuts: watch(stack.streams.changeLog),
        handler: searchApplier,
        onError: err(`${search.sinkId} poller`),
      });
      // The search sink holds paused tables like the warehouse; a resume replays its held range through the same applier code.
      const searchReplayApplier = createSearchApplier({
        controlPlane: stack.controlPlane,
        search: new OpenSearchIndex(searchClient({ node: search.url })),
        sinkId: search.sinkId,
        tables: served,
        ...(search.prefix ? { prefix: search.prefix } : {}),
        metrics: new Metrics({ namespace: METRICS_NAMESPACE }),
        logger: new Logger({ serviceName: 'search-replay' }),
        payloads: stack.payloads,
      });
      this.replayers.push(
        createHeldRangeReplayer({
          controlPlane: stack.controlPlane,
          sinkId: search.sinkId,
          applier: searchReplayApplier,
          readLog: (starts) => readChangeLog(stack.kinesis, stack.streams.changeLog, { starts }),
        }),
      );
    }
    this.pollers = {
      normalizer: new Poller({
        ...common,
        ...batchOf('normalizer'),
        consumer: 'normalizer',
        streamName: stack.streams.raw,
        watchPuts: watch(stack.streams.raw),
        handler: normalizer,
        onError: err('normalizer poller'),
      }),
      sink: new Poller({
        ...common,
        ...batchOf('sink'),
        consumer: o.sinkId,
        streamName: stack.streams.changeLog,
        fanout: changeLogReads,
        watchPuts: watch(stack.streams.changeLog),
        handler: applier,
        onError: err(`${o.sinkId} poller`),
      }),
      // Firehose buffers: a batching window gives fewer, larger archive objects. Put notices pace its reads too (docs/local.md, "Reads paced by put notices").
      archive: new Poller({
        ...common,
        batchSize: o.batchSizes?.archive ?? 2000,
        batchWindowMs: 2000,
        consumer: 'archive',
        streamName: stack.streams.changeLog,
        fanout: changeLogReads,
        watchPuts: watch(stack.streams.changeLog),
        handler: createArchiveCopier({ archive: stack.archive, layout: 'by-table' }),
        onError: err('archive poller'),
      }),
      ...(searchPoller ? { search: searchPoller } : {}),
    };
  }

  /** Starts capture, pollers, heartbeat and (if asked) the workload. Throws the capture's named errors. */
  async start(): Promise<void> {
    // The first beat creates the heartbeat table, which the capture must find.
    await this.heartbeat();
    // Tables that joined by a rule in an earlier run are captured from the first peek on.
    await this.discovery?.scan();
    // The partition trees as of now: a partition detached or attached from here on re-snapshots its root.
    await this.partitions.start();
    await this.capture.start();
    await Promise.all([this.pollers.normalizer.start(), this.pollers.sink.start(), this.pollers.archive.start(), this.pollers.search?.start()]);
    // Stream first: the slot exists before the first chunk's watermark is taken.
    await this.snapshots?.start();
    this.polls?.start();
    this.discovery?.start();
    const every = this.o.heartbeatMs ?? 1000;
    this.heartbeatLoop = (async () => {
      while (!this.heartbeatStop) {
        await sleep(every);
        if (this.heartbeatStop) break;
        try {
          await this.heartbeat();
        } catch (e) {
          this.o.onError?.('heartbeat', e);
        }
      }
    })();
    this.replayLoop = (async () => {
      let lastMerge = Date.now();
      while (!this.replayStop) {
        try {
          for (const r of this.replayers) await r.replayPending();
        } catch (e) {
          this.o.onError?.('resume replay', e);
        }
        // As the AWS schedule does after its replay: merge the deltas that are due (a table that
        // stopped receiving changes is merged here; mergeDue logs a failed table and goes on).
        if (this.mergeDue && Date.now() - lastMerge >= MERGE_CHECK_MS) {
          lastMerge = Date.now();
          const done = await this.mergeDue().catch((e: unknown) => void this.o.onError?.('delta merge', e));
          for (const m of done ?? []) if (m.error !== undefined) this.o.onError?.('delta merge', new Error(`${m.source}/${m.table}: ${m.error}`));
        }
        await sleep(500);
      }
    })();
    this.slotMonitorLoop = (async () => {
      while (!this.heartbeatStop) {
        try {
          this.slotReport = await this.slotMonitor();
        } catch (e) {
          this.o.onError?.('slot monitor', e);
        }
        const until = Date.now() + (this.o.slotMonitorMs ?? 5000);
        while (!this.heartbeatStop && Date.now() < until) await sleep(Math.min(200, until - Date.now()));
      }
    })();
    if ((this.o.workloadRate ?? 0) > 0) {
      this.workload = await startWorkload({
        sourceUrl: this.o.stack.sourceUrl,
        rate: this.o.workloadRate!,
        seed: this.o.workloadSeed,
        onError: (e) => this.o.onError?.('workload', e),
      });
    }
  }

  /** Stops the demo workload (the rest keeps running). */
  async stopWorkload(): Promise<void> {
    await this.workload?.stop();
  }

  /** Stops writing heartbeats. */
  async stopHeartbeat(): Promise<void> {
    this.heartbeatStop = true;
    await this.heartbeatLoop;
    await this.slotMonitorLoop;
  }

  /** The capture's loud stop, if it stopped: resolves never otherwise. */
  captureFailure(): Promise<Error> {
    return this.capture.done.then(
      () => new Promise<Error>(() => undefined),
      (e: Error) => e,
    );
  }

  /**
   * Waits until everything committed on the source so far has reached the warehouse and the
   * archive: the capture found nothing new in a peek that started after now, then the normalizer
   * found nothing new on the raw stream after that, then the sink and the archive copier found
   * nothing new on the change log after that. Throws when a stage made no progress for
   * `stallMs`, naming the stage that lags: a slow machine still finishes, a stuck stage does not
   * wait forever. `onSinkCaughtUp` hears each sink (its id) whose applier caught up, so a wait
   * aborted by a bounded run's drain bound knows which sinks did (docs/local.md, "Bounded runs (`--duration`)").
   */
  async waitCaughtUp(stallMs = 120_000, abort?: AbortSignal, onSinkCaughtUp?: (sinkId: string) => void): Promise<void> {
    const { normalizer, sink, archive, search } = this.pollers;
    await waitCaughtUp(
      {
        snapshots: this.snapshots,
        polls: this.polls,
        capture: this.capture,
        normalizer,
        archive,
        sinks: [
          { sinkId: this.o.sinkId, name: `${this.o.sinkId} applier`, consumer: sink },
          ...(search ? [{ sinkId: this.o.search!.sinkId, name: `${search.stats.consumer} applier`, consumer: search }] : []),
        ],
        replayers: this.replayers,
      },
      stallMs,
      abort,
      onSinkCaughtUp,
    );
  }

  /** Stops everything in order: workload, heartbeat, capture, then the pollers (each finishes its batch). */
  async stop(): Promise<void> {
    await this.stopWorkload();
    await this.stopHeartbeat();
    await this.discovery?.stop();
    await this.partitions.stop();
    await this.snapshots?.stop();
    await this.polls?.stop();
    await this.capture.stop();
    this.replayStop = true;
    await this.replayLoop;
    await this.pollers.normalizer.stop();
    await Promise.all([this.pollers.sink.stop(), this.pollers.archive.stop(), this.pollers.search?.stop()]);
    await this.o.redshift?.stop();
    await Promise.all(this.pools.map((p) => p.end().catch(() => undefined)));
    this.searchIndex?.client.close();
  }

  /** Every table captured now (declared, heartbeat, joined by a rule, polled): what the verdict compares. */
  capturedTables(): TableConfig[] {
    return [...this.captureIndex.list(), ...this.tables.filter((t) => t.capture === 'poll')];
  }

  /** Reads table states and dead letters from the control plane (at most every 2 s). */
  async refreshControl(force = false): Promise<void> {
    if (!force && Date.now() - this.lastControlRead < 2_000) return;
    this.lastControlRead = Date.now();
    try {
      this.tableStates = await this.o.stack.controlPlane.listTables(this.o.source);
      this.deadLetterCount = (await this.o.stack.controlPlane.listDeadLetters()).length;
      const held = new Map<string, string[]>();
      for (const p of await this.o.stack.controlPlane.listSinkProgress())
        if (p.source === this.o.source && p.heldFrom !== null) held.set(p.table, [...(held.get(p.table) ?? []), p.sink]);
      this.heldBy = held;
    } catch (e) {
      this.o.onError?.('control plane', e);
    }
  }

  /** End-to-end lag samples (ms) of the sink (the warehouse by default) since `since`. */
  lagSamples(since = 0, sinkId = this.o.sinkId): number[] {
    return this.o.collector.valuesSince(MetricName.END_TO_END_LAG, { Sink: sinkId }, since);
  }

  /** Per-second rate of a growing counter over the last RATE_WINDOW_MS of snapshots. */
  private rate(name: string, value: number, now: number): number {
    const seen = this.counters.get(name) ?? [];
    seen.push([now, value]);
    while (seen.length > 2 && seen[0]![0] < now - RATE_WINDOW_MS) seen.shift();
    this.counters.set(name, seen);
    const [t0, v0] = seen[0]!;
    return now > t0 ? ((value - v0) * 1000) / (now - t0) : 0;
  }

  /** What the live status shows. */
  snapshot(hint: string | null = null): StatusSnapshot {
    const now = Date.now();
    const c = this.o.collector;
    const cap = this.capture.stats;
    const captureRate = this.rate('capture', cap.records, now);
    const sinkDims = { Sink: this.o.sinkId };
    const lag = c.latest(MetricName.END_TO_END_LAG, sinkDims);
    const lags = c.valuesSince(MetricName.END_TO_END_LAG, sinkDims, now - LAG_WINDOW_MS);
    if (this.firstAppliedAt === null && c.total(MetricName.EVENTS_APPLIED, sinkDims) > 0) this.firstAppliedAt = now;
    const pollerStatus = (p: Poller) => ({
      consumer: p.stats.consumer,
      recordsPerSecond: this.rate(p.stats.consumer, p.stats.recordsDone, now),
      behindMs: Math.max(0, ...Object.values(p.stats.millisBehind)),
      retries: p.stats.retries,
      deadLetters: p.stats.deadLetters,
      stalledMs: p.stats.stalledSince === null ? null : now - p.stats.stalledSince,
      lastError: p.stats.lastError,
    });
    const consumers = [this.pollers.normalizer, this.pollers.sink, this.pollers.archive, ...(this.pollers.search ? [this.pollers.search] : [])].map(
      pollerStatus,
    );
    const searchStatus = (p: Poller, sink: string) => {
      const dims = { Sink: sink };
      const l = c.latest(MetricName.END_TO_END_LAG, dims);
      const ls = c.valuesSince(MetricName.END_TO_END_LAG, dims, now - LAG_WINDOW_MS);
      return {
        sink,
        lagMs: l?.value ?? null,
        lagAt: l?.at ?? null,
        lagP50Ms: percentile(ls, 50),
        lagP99Ms: percentile(ls, 99),
        eventsPerSecond: c.ratePerSecond(MetricName.EVENTS_APPLIED, dims, RATE_WINDOW_MS, now),
        deadLetters: p.stats.deadLetters,
      };
    };
    const w = this.workload?.stats;
    return {
      now,
      startedAt: this.startedAt,
      source: this.o.source,
      where: [
        `state     ${this.o.stack.stateDir}`,
        `source    ${redactUrl(this.o.stack.sourceUrl)}`,
        `warehouse ${redactUrl(this.o.stack.warehouseUrl)} (schema ${this.o.source}_<schema>)`,
        `archive   ${this.o.stack.archive.location}`,
        ...(this.o.search ? [`search    ${redactUrl(this.o.search.url)} (aliases cdc.${this.o.source}.<schema>.<table>)`] : []),
      ],
      capture: {
        state: cap.state,
        transactions: cap.transactions,
        records: cap.records,
        recordsPerSecond: captureRate,
        dmsDecoded: c.total(MetricName.DMS_RECORDS_DECODED),
        lastCommitLsn: cap.lastCommitLsn,
        slotRetainedBytes: cap.slotRetainedBytes,
        error: cap.error ? `${cap.error.name}: ${cap.error.message}` : null,
      },
      workload: w ? { transactions: w.transactions, transactionsPerSecond: this.rate('workload', w.transactions, now), errors: w.errors } : null,
      consumers,
      sinks: [
        {
          sink: this.o.sinkId,
          lagMs: lag?.value ?? null,
          lagAt: lag?.at ?? null,
          lagP50Ms: percentile(lags, 50),
          lagP99Ms: percentile(lags, 99),
          eventsPerSecond: c.ratePerSecond(MetricName.EVENTS_APPLIED, sinkDims, RATE_WINDOW_MS, now),
          deadLetters: this.pollers.sink.stats.deadLetters,
        },
        ...(this.pollers.search && this.o.search ? [searchStatus(this.pollers.search, this.o.search.sinkId)] : []),
      ],
      tables: this.tableStates.map((t) => ({
        table: t.table,
        state: t.state,
        reason: t.stateReason,
        ...(t.capture === 'poll' ? { capture: 'poll' as const } : {}),
        ...(this.heldBy.has(t.table) ? { heldBy: this.heldBy.get(t.table) } : {}),
      })),
      slots:
        this.slotReport?.slots.map((r) => ({
          slot: r.slot,
          ours: r.ours,
          active: r.active,
          walStatus: r.walStatus,
          confirmedLsn: r.confirmedLsn ?? null,
          retainedBytes: r.retainedBytes,
          headroomBytes: r.headroomBytes,
          level: r.level,
        })) ?? [],
      ...(this.snapshots ? { snapshots: this.snapshots.lines(now) } : {}),
      ...(this.discovery
        ? {
            notCaptured: this.discovery.verdicts
              .filter((v) => v.verdict !== 'captured')
              .map((v) => ({ table: v.table, verdict: v.verdict, reason: v.reasons.join('; ') })),
          }
        : {}),
      deadLetters: this.deadLetterCount,
      problems: c.problemsSince(now - 60_000),
      hint,
    };
  }
}
