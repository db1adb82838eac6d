/**
 * Benchmark: the normalizer's Node work per DMS record, the largest share of the `cdc local`
 * process's CPU at the end-to-end line's rates (docs/performance-log.md, "71. The normalizer's work
 * per DMS record, and the cores' bound on the end-to-end line").
 *
 * The records are those the local slot capture writes (DMS records, as DMS puts them on the raw
 * stream) for the apply benchmark's seeded history, replayed on embedded PostgreSQL in
 * transactions of `--tx-size` changes (10, as the end-to-end load commits them). They go, in
 * Lambda Kinesis events of `--batch` records, through the real normalizer handler as `cdc local`
 * wires it (Powertools' batch processor, the DMS decoder, the registry with the catalog types
 * published, the per-key position check, the encode, KPL aggregation for a change log of two
 * shards), with the in-memory control plane and a Kinesis client that accepts every PutRecords:
 * the figure is the handler's own work, no I/O. Each round is a fresh handler over every record;
 * best and median round are reported, in records per second of this process.
 *
 * The reference, in the same process and rounds: each record's text read with `JSON.parse` and an
 * event's worth of it written with `JSON.stringify` into UTF-8: what any normalizer must at least
 * do with a record.
 *
 *     npm run bench:normalizer [-- --events 50000 --tx-size 10 --batch 500 --rounds 12 --profile]
 *
 * `--profile` adds one round under the CPU profiler, apart from the timed ones.
 */
import { createHash } from 'node:crypto';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { ListShardsCommand, PutRecordsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import type { KinesisStreamEvent } from 'aws-lambda';
import { KinesisChangeLog } from '../lambda/adapters/change-log-kinesis.ts';
import { publishCatalogTypes } from '../lambda/core/shared/catalog-types.ts';
import { TableConfigIndex, type TableConfig } from '../lambda/core/tables/table-config.ts';
import { createNormalizerHandler } from '../lambda/handlers/normalizer.ts';
import { SlotCapture } from '../local/capture.ts';
import type { RawRecord } from '../local/raw-publisher.ts';
import { startPostgres } from '../local/postgres.ts';
import { MemoryControlPlane } from '../test/helpers/memory-control-plane.ts';
import { BENCH_SOURCE, BENCH_TABLE, DEFAULT_HISTORY, generateHistory, ITEM_COLUMNS } from './lib/history.ts';
import { cpuProfile } from './lib/profile.ts';
import { createItems, prepareReplay, replay } from './lib/replay.ts';
import { argValue, median, numberArg, rateRow, Recorder, runIfMain, sleep, type BenchResult } from './lib/report.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const RAW_ARN = 'arn:aws:kinesis:local:000000000000:stream/raw';
const SHARD = 'shardId-000000000000';
const TABLES: TableConfig[] = [{ table: BENCH_TABLE, deleteMode: 'soft', mask: [], exclude: [] }];
const say = (text: string): void => void process.stdout.write(`[normalizer] ${text}\n`);

/** A change log of two shards over the whole hash key space (the end-to-end stack's), which accepts every record. */
function acceptingKinesis(): KinesisClient {
  const half = 2n ** 127n;
  const shards = [
    { ShardId: 'shardId-000000000000', HashKeyRange: { StartingHashKey: '0', EndingHashKey: String(half - 1n) } },
    { ShardId: 'shardId-000000000001', HashKeyRange: { StartingHashKey: String(half), EndingHashKey: String(2n * half - 1n) } },
  ];
  let seq = 0;
  // A record lands on the shard whose range holds its explicit hash key (the aggregates name one), else its partition key's MD5.
  const shardOf = (r: { PartitionKey?: string; ExplicitHashKey?: string }): string => {
    const hash = BigInt(
      r.ExplicitHashKey ??
        `0x${createHash('md5')
          .update(r.PartitionKey ?? '', 'utf8')
          .digest('hex')}`,
    );
    return shards[hash < half ? 0 : 1]!.ShardId;
  };
  const send = async (command: unknown): Promise<unknown> => {
    if (command instanceof ListShardsCommand) return { Shards: shards };
    if (command instanceof PutRecordsCommand) {
      const records = command.input.Records ?? [];
      return { FailedRecordCount: 0, Records: records.map((r) => ({ ShardId: shardOf(r), SequenceNumber: String(++seq) })) };
    }
    throw new Error(`the benchmark's Kinesis client answers ListShards and PutRecords only, not ${(command as object).constructor.name}`);
  };
  return { send } as unknown as KinesisClient;
}

/** The capture's records for the seeded history, read from a fresh cluster. */
async function capturedRecords(events: number, txSize: number): Promise<RawRecord[]> {
  const h = generateHistory({ ...DEFAULT_HISTORY, events, keys: Math.ceil(events / 2), initial: Math.ceil(events / 4), txSize });
  const cluster = await startPostgres();
  try {
    await cluster.createDatabase('src');
    const url = cluster.url('src');
    await createItems(url, h);
    await prepareReplay(url, h);
    const records: RawRecord[] = [];
    const capture = (): SlotCapture =>
      new SlotCapture({
        source: BENCH_SOURCE,
        sourceUrl: url,
        slot: 'cdc_bench_normalizer',
        tables: new TableConfigIndex(TABLES),
        controlPlane,
        publish: async (batch) => void records.push(...batch),
        idleMs: 5,
      });
    const controlPlane = new MemoryControlPlane();
    // The slot exists before the workload: its first start creates it.
    const primer = capture();
    await primer.start();
    await primer.stop();
    await replay(url, h);
    const reader = capture();
    const since = Date.now();
    await reader.start();
    while (!reader.caughtUpSince(since)) {
      if (reader.stats.state === 'failed') throw reader.stats.error ?? new Error('capture failed');
      await sleep(5);
    }
    await reader.stop();
    return records;
  } finally {
    await cluster.stop();
  }
}

/** The records as Lambda delivers them: events of `batch` records of one shard, data in base64. */
function lambdaEvents(records: readonly RawRecord[], batch: number): KinesisStreamEvent[] {
  const out: KinesisStreamEvent[] = [];
  for (let i = 0; i < records.length; i += batch) {
    out.push({
      Records: records.slice(i, i + batch).map((r, j) => {
        const sequenceNumber = String(10n ** 20n + BigInt(i + j));
        return {
          kinesis: {
            kinesisSchemaVersion: '1.0',
            partitionKey: r.partitionKey,
            sequenceNumber,
            data: Buffer.from(r.data).toString('base64'),
            approximateArrivalTimestamp: 0,
          },
          eventSource: 'aws:kinesis',
          eventVersion: '1.0',
          eventID: `${SHARD}:${sequenceNumber}`,
          eventName: 'aws:kinesis:record',
          invokeIdentityArn: 'arn:aws:iam::000000000000:role/bench',
          awsRegion: 'local',
          eventSourceARN: RAW_ARN,
        };
      }),
    });
  }
  return out;
}

/** One round: a fresh handler (and control plane, with the table's catalog types published) over every event; seconds. */
async function normalizerRound(events: readonly KinesisStreamEvent[]): Promise<number> {
  const controlPlane = new MemoryControlPlane();
  const columns = ITEM_COLUMNS.map((c) => ({ name: c.name, type: String(c.type) }));
  await publishCatalogTypes(controlPlane, BENCH_SOURCE, [BENCH_TABLE], async (table) => ({ table, columns, key: ['id'] }));
  const handler = createNormalizerHandler({
    source: BENCH_SOURCE,
    tables: TABLES,
    controlPlane,
    changeLog: new KinesisChangeLog(acceptingKinesis(), 'change-log', { aggregate: true }),
    catalogTypes: true,
  });
  const t0 = performance.now();
  for (const e of events) {
    const out = await handler(e);
    if (out.batchItemFailures.length > 0) throw new Error(`the normalizer failed ${out.batchItemFailures.length} records of a batch`);
  }
  const seconds = (performance.now() - t0) / 1000;
  const dead = (await controlPlane.listDeadLetters()).length;
  if (dead > 0) throw new Error(`the normalizer dead-lettered ${dead} records`);
  return seconds;
}

/** The reference round: each record's text parsed, and written back as UTF-8 JSON; seconds. */
function referenceRound(records: readonly RawRecord[]): number {
  const t0 = performance.now();
  let bytes = 0;
  for (const r of records) bytes += Buffer.from(JSON.stringify(JSON.parse(r.data)), 'utf8').byteLength;
  if (bytes === 0) throw new Error('nothing written');
  return (performance.now() - t0) / 1000;
}

export async function run(): Promise<BenchResult> {
  const events = numberArg('events', 50_000);
  const txSize = numberArg('tx-size', 10);
  const batch = numberArg('batch', 500);
  const rounds = numberArg('rounds', 12);
  const profile = argValue('profile') !== undefined;
  const rec = new Recorder('normalizer', { events, txSize, batch, rounds });
  const records = await capturedRecords(events, txSize);
  say(`${records.length} DMS records captured for ${events} changes in transactions of ${txSize}`);
  const lambda = lambdaEvents(records, batch);
  const ours: number[] = [];
  const reference: number[] = [];
  for (let r = 0; r < rounds; r++) {
    ours.push(records.length / (await normalizerRound(lambda)));
    reference.push(records.length / referenceRound(records));
  }
  // The first rounds compile: best and median of the rest.
  const warm = (xs: number[]): number[] => xs.slice(Math.min(2, xs.length - 1));
  const [best, med, refBest, refMed] = [Math.max(...warm(ours)), median(warm(ours)), Math.max(...warm(reference)), median(warm(reference))];
  say(`normalizer: best ${Math.round(best)} records/s (${(1e6 / best).toFixed(1)} µs each), median ${Math.round(med)} (${(1e6 / med).toFixed(1)} µs)`);
  say(`reference (JSON.parse + JSON.stringify): best ${Math.round(refBest)} records/s (${(1e6 / refBest).toFixed(1)} µs), median ${Math.round(refMed)}`);
  rec.add(rateRow('normalizer handler, DMS records, best round', best, 'records/s', refBest, 'JSON.parse + JSON.stringify of each record, best round'));
  rec.add(rateRow('normalizer handler, DMS records, median round', med, 'records/s', refMed, 'JSON.parse + JSON.stringify of each record, median round'));
  rec.details.roundsRecordsPerSecond = { normalizer: ours.map(Math.round), reference: reference.map(Math.round) };
  if (profile) rec.details.profile = (await cpuProfile(ROOT, () => normalizerRound(lambda))).profile;
  return rec.finish();
}

runIfMain(import.meta.url, run);
