/**
 * The Kinesis stand-in's ceiling for `cdc local`'s pattern (docs/performance-log.md, "Ceilings: what this machine and the mandated stand-ins allow").
 *
 * `KinesisTally` counts, on a client, the records put on each stream and the records read back
 * from each (GetRecords results, followed from iterator to iterator), and keeps the records put
 * during a window as samples: on the pipeline's own client it measures how many times a change
 * passes through kinesalite and how large the records are.
 *
 * `standInCeiling` then runs kinesalite alone, started as `cdc local` starts it (its own process,
 * a LevelDB folder: `startKinesaliteProcess`), with the same streams and shard counts, the same
 * client setup (`LeanKinesisClient` with put notices), the same publishers (`kinesisRawPublisher` for
 * the raw stream, `KinesisChangeLog.publishEncoded` for the change log) and the same pollers
 * (`Poller` with `cdc local`'s batch sizes, window and read-ahead), carrying the sampled records as
 * fast as it can: a capture stand-in puts N raw records in the capture's batches; a normalizer
 * poller on the raw stream publishes one change event per raw record, packed into KPL aggregates
 * per shard as the pipeline's normalizer packs them (`aggregation`; the samples of the change log
 * are its events, taken out of the aggregates the pipeline put); an applier poller and an
 * archive poller read the change log through one shared read of it (local/fanout.ts), as
 * `cdc local` does. What it excludes: every handler's own work (capture,
 * normalizer, applier, archive copier), PostgreSQL, DynamoDB (checkpoints are kept in memory).
 * What it keeps: kinesalite's work and the client side of every call (serialisation, HTTP, the
 * pollers' Lambda events).
 */
import { CreateStreamCommand, DescribeStreamSummaryCommand, ListShardsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import { KinesisChangeLog } from '../../lambda/adapters/change-log-kinesis.ts';
import { decodeAggregate, isAggregate } from '../../contracts/kpl-aggregate.ts';
import { kinesisRawPublisher } from '../../local/raw-publisher.ts';
import { PutNotices, routeStream, startKinesaliteProcess } from '../../local/kinesis.ts';
import { LeanKinesisClient } from '../../local/kinesis-lean.ts';
import { Poller } from '../../local/poller.ts';
import { StreamFanout } from '../../local/fanout.ts';
import { processCpuMs } from './profile.ts';
import { sleep } from './report.ts';

/** One record as it was put: partition key and data. */
export interface SampledRecord {
  key: string;
  data: Uint8Array;
}

/** Records put and read per stream on one client, and samples of the records put while `sampling`. */
export class KinesisTally {
  readonly puts = new Map<string, number>();
  readonly reads = new Map<string, number>();
  readonly samples = new Map<string, SampledRecord[]>();
  /** Requests per kind and stream ("GetRecords raw-stream-name"): calls, records carried, calls that carried none. */
  readonly requests = new Map<string, { calls: number; records: number; empty: number }>();
  /** Keep the records put (up to `cap` per stream) while true. */
  sampling = false;
  private readonly iterators = new Map<string, string>();

  constructor(private readonly cap: number) {}

  /** Counts every request sent through `client`: the SDK's by a middleware, and those a `LeanKinesisClient` answers itself by its `afterSend`. */
  attach(client: KinesisClient): void {
    client.middlewareStack.add(
      (next, context) => async (args) => {
        const out = await next(args);
        this.count(String(context.commandName), args.input, out.output);
        return out;
      },
      { step: 'initialize', name: 'benchKinesisTally' },
    );
    if (client instanceof LeanKinesisClient) client.afterSend((name, input, output) => this.count(name, input, output));
  }

  private count(commandName: string, rawInput: unknown, rawOutput: unknown): void {
    const input = rawInput as { StreamName?: string; ShardIterator?: string; Records?: Array<{ PartitionKey?: string; Data?: Uint8Array }> };
    const output = rawOutput as { FailedRecordCount?: number; ShardIterator?: string; NextShardIterator?: string; Records?: unknown[] };
    const onStream = input.StreamName ?? (input.ShardIterator ? this.iterators.get(input.ShardIterator) : undefined) ?? '?';
    const carried = commandName === 'PutRecordsCommand' ? (input.Records?.length ?? 0) : (output.Records?.length ?? 0);
    const kind = `${String(commandName).replace(/Command$/, '')} ${onStream}`;
    const r = this.requests.get(kind) ?? { calls: 0, records: 0, empty: 0 };
    this.requests.set(kind, { calls: r.calls + 1, records: r.records + carried, empty: r.empty + (carried === 0 ? 1 : 0) });
    switch (commandName) {
      case 'PutRecordsCommand': {
        const stream = input.StreamName ?? '?';
        const entries = input.Records ?? [];
        add(this.puts, stream, entries.length - (output.FailedRecordCount ?? 0));
        const kept = this.samples.get(stream) ?? [];
        // Once `cap` records are kept nothing more is decoded: the count's own work stays out of the pipeline's CPU.
        if (this.sampling && (output.FailedRecordCount ?? 0) === 0 && kept.length < this.cap) {
          this.samples.set(stream, kept);
          for (const e of entries) {
            if (kept.length >= this.cap) break;
            const data = e.Data ?? new Uint8Array();
            // An aggregate (the change log's records, contracts/kpl-aggregate.ts) is kept as its events: the ceiling packs them again as the producer does.
            const events = isAggregate(data)
              ? decodeAggregate(data, 'sampled record').records.map((u) => ({ key: u.partitionKey, data: u.data }))
              : [{ key: e.PartitionKey ?? '', data }];
            for (const ev of events) if (kept.length < this.cap) kept.push(ev);
          }
        }
        break;
      }
      case 'GetShardIteratorCommand':
        if (output.ShardIterator && input.StreamName) this.iterators.set(output.ShardIterator, input.StreamName);
        break;
      case 'GetRecordsCommand': {
        // Not forgotten after use: two consumers at the same position can be handed the same iterator.
        const stream = input.ShardIterator ? this.iterators.get(input.ShardIterator) : undefined;
        if (stream) {
          add(this.reads, stream, output.Records?.length ?? 0);
          if (output.NextShardIterator) this.iterators.set(output.NextShardIterator, stream);
        }
        break;
      }
    }
  }

  /** Reads per record put on `stream` (0 when nothing was put). */
  readsPerPut(stream: string): number {
    const p = this.puts.get(stream) ?? 0;
    return p === 0 ? 0 : (this.reads.get(stream) ?? 0) / p;
  }
}

function add(m: Map<string, number>, k: string, n: number): void {
  m.set(k, (m.get(k) ?? 0) + n);
}

/** Shards of a stream (open or not). */
export async function shardCount(client: KinesisClient, stream: string): Promise<number> {
  return (await client.send(new ListShardsCommand({ StreamName: stream }))).Shards?.length ?? 0;
}

export interface CeilingOptions {
  /** Where kinesalite keeps its LevelDB folder (as `cdc local`'s state folder holds `kinesis/`). */
  path: string;
  streams: { raw: string; changeLog: string };
  shards: { raw: number; changeLog: number };
  /** Source changes to carry. */
  changes: number;
  /** The records to put, cycled: raw records and change-log records as the pipeline put them. */
  raw: readonly SampledRecord[];
  changeLog: readonly SampledRecord[];
  /** The capture's batch (rows published together). */
  captureBatch: number;
  /** The pollers' batch sizes and the archive's window, as `cdc local` sets them. */
  batchSize: number;
  archiveBatchSize: number;
  archiveWindowMs: number;
  /** The raw stream in a kinesalite process of its own, as `cdc local` runs it (docs/local.md, "One kinesalite process per stream"). */
  perStream?: boolean;
  /** The normalizer packs change events into KPL aggregates, as `cdc local` does (docs/architecture.md, "5.1 The change event"). @default true */
  aggregation?: boolean;
}

export interface CeilingResult {
  changes: number;
  seconds: number;
  changesPerSecond: number;
  /** Records put and read per stream during the run (from the run's own tally). */
  puts: Record<string, number>;
  reads: Record<string, number>;
  /** CPU of the kinesalite processes (summed) and of this process (the clients and pollers) during the run, ms. */
  kinesaliteCpuMs: number;
  /** CPU of each kinesalite process during the run, ms: the change log's (both streams' when not `perStream`), then the raw stream's. */
  kinesaliteCpuMsPerProcess: number[];
  clientCpuMs: number;
  /** Mean bytes of the records carried. */
  rawBytes: number;
  changeLogBytes: number;
}

async function createStream(client: KinesisClient, name: string, shards: number): Promise<void> {
  await client.send(new CreateStreamCommand({ StreamName: name, ShardCount: shards }));
  for (;;) {
    const s = await client.send(new DescribeStreamSummaryCommand({ StreamName: name }));
    if (s.StreamDescriptionSummary?.StreamStatus === 'ACTIVE') return;
    await sleep(20);
  }
}

/** Carries `changes` changes through kinesalite alone in `cdc local`'s pattern, as fast as it goes (see the module comment). */
export async function standInCeiling(o: CeilingOptions): Promise<CeilingResult> {
  if (o.raw.length === 0 || o.changeLog.length === 0) throw new Error('no sampled records to carry');
  const kin = await startKinesaliteProcess({ path: o.path });
  let kinRaw = null;
  try {
    if (o.perStream) kinRaw = await startKinesaliteProcess({ path: `${o.path}-raw` });
  } catch (err) {
    await kin.stop();
    throw err;
  }
  const kins = kinRaw ? [kin, kinRaw] : [kin];
  const client = new LeanKinesisClient(kin.endpoint);
  if (kinRaw) routeStream(client, o.streams.raw, kinRaw.endpoint);
  const puts = new PutNotices();
  puts.attach(client);
  const tally = new KinesisTally(0);
  tally.attach(client);
  const pollers: Poller[] = [];
  try {
    await createStream(client, o.streams.raw, o.shards.raw);
    await createStream(client, o.streams.changeLog, o.shards.changeLog);
    const checkpoints = new Map<string, string>();
    const controlPlane = {
      getCheckpoint: async (c: string, s: string) => checkpoints.get(`${c}/${s}`) ?? null,
      putCheckpoint: async (c: string, s: string, v: string) => void checkpoints.set(`${c}/${s}`, v),
      putDeadLetter: async () => {
        throw new Error('no dead letters expected in the ceiling run');
      },
    };
    // Records prepared before timing: the capture's raw records as text (its publisher takes text), the change log's as bytes.
    const rawText = o.raw.map((r) => ({ partitionKey: r.key, data: Buffer.from(r.data).toString('utf8') }));
    const changeLog = o.changeLog.map((r, i) => ({ partitionKey: r.key, data: r.data, label: `ceiling#${i}` }));
    const logOut = new KinesisChangeLog(client, o.streams.changeLog, { aggregate: o.aggregation ?? true });
    let normalized = 0;
    let published = 0;
    const watch = (stream: string) => puts.watcher(stream);
    // As local/pipeline.ts builds them: the archive's poller has a window; every poller has put notices.
    const common = { kinesis: client, controlPlane, batchSize: o.batchSize };
    const changeLogReads = new StreamFanout({ kinesis: client, streamName: o.streams.changeLog });
    pollers.push(
      // The normalizer stand-in: one change event per raw record, through the change log's publisher (aggregated as the pipeline's are).
      new Poller({
        ...common,
        consumer: 'normalizer',
        streamName: o.streams.raw,
        watchPuts: watch(o.streams.raw),
        handler: async (event) => {
          const out = event.Records.map(() => changeLog[normalized++ % changeLog.length]!);
          await logOut.publishEncoded(out);
          published += out.length;
        },
      }),
      new Poller({
        ...common,
        consumer: 'warehouse',
        streamName: o.streams.changeLog,
        fanout: changeLogReads,
        watchPuts: watch(o.streams.changeLog),
        handler: async () => undefined,
      }),
      new Poller({
        ...common,
        consumer: 'archive',
        streamName: o.streams.changeLog,
        fanout: changeLogReads,
        batchSize: o.archiveBatchSize,
        batchWindowMs: o.archiveWindowMs,
        watchPuts: watch(o.streams.changeLog),
        handler: async () => undefined,
      }),
    );
    for (const p of pollers) await p.start();
    const publish = kinesisRawPublisher(client, o.streams.raw);
    const cpu0 = process.cpuUsage();
    const k0 = kins.map((k) => (k.pid !== undefined ? processCpuMs(k.pid) : null));
    const t0 = performance.now();
    // The capture stand-in: its batches, one after the other.
    for (let i = 0; i < o.changes; i += o.captureBatch) {
      const batch = [];
      for (let j = i; j < Math.min(o.changes, i + o.captureBatch); j++) batch.push({ ...rawText[j % rawText.length]!, label: `raw#${j}` });
      await publish(batch);
    }
    // Done when the raw stream was read once in full, every change's event was published, the applier stand-in handled
    // every change-log record put (fewer than the changes when aggregated), and the change log's one shared read (the
    // applier's and the archive's) read them all. The archive's batching window only delays the delivery of what that
    // read already read: a latency, not kinesalite's work, so its last wait is not timed (timed, it made the ceiling's
    // wall a multiple of the window in short runs: docs/performance-log.md, "58. The goals on this machine after this round, committed code").
    const want = (stream: string, times: number): boolean => (tally.reads.get(stream) ?? 0) >= times * o.changes;
    const changeLogPuts = (): number => tally.puts.get(o.streams.changeLog) ?? 0;
    const handled = (): boolean => pollers[1]!.stats.recordsDone >= changeLogPuts() && (tally.reads.get(o.streams.changeLog) ?? 0) >= changeLogPuts();
    const deadline = Date.now() + 600_000;
    while (!(want(o.streams.raw, 1) && published >= o.changes && handled())) {
      if (Date.now() > deadline)
        throw new Error(`the ceiling run did not finish: ${JSON.stringify({ puts: Object.fromEntries(tally.puts), reads: Object.fromEntries(tally.reads) })}`);
      await sleep(2);
    }
    const seconds = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const perProcess = kins.map((k, i) => {
      const k1 = k.pid !== undefined ? processCpuMs(k.pid) : null;
      return k1 !== null && k0[i] != null ? k1 - k0[i] : Number.NaN;
    });
    const mean = (rs: readonly SampledRecord[]): number => rs.reduce((a, r) => a + r.data.length, 0) / rs.length;
    return {
      changes: o.changes,
      seconds,
      changesPerSecond: o.changes / seconds,
      puts: Object.fromEntries(tally.puts),
      reads: Object.fromEntries(tally.reads),
      kinesaliteCpuMs: perProcess.reduce((a, b) => a + b, 0),
      kinesaliteCpuMsPerProcess: perProcess,
      clientCpuMs: (cpu.user + cpu.system) / 1000,
      rawBytes: mean(o.raw),
      changeLogBytes: mean(o.changeLog),
    };
  } finally {
    for (const p of pollers) await p.stop().catch(() => undefined);
    client.destroy();
    for (const k of kins) await k.stop();
  }
}
