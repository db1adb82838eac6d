/**
 * kinesalite's CPU per request kind and per record (docs/performance-log.md, "48. Where the
 * end-to-end pipeline's CPU goes, and one kinesalite per stream"): is its cost per request or per
 * record? kinesalite is started as `cdc local` starts it (its own process, a LevelDB folder), one
 * stream of one shard; requests go one at a time through the stack's client (`kinesisClient`).
 * Measured from /proc: kinesalite's CPU over each series, and this process's (the client side).
 *
 *     npx tsx bench/kinesalite-costs.ts [-- --records 10000 --bytes 600 --client-pairs 3 --pattern-runs 3 --pattern-changes 10000 --no-series --no-pattern]
 *
 * Then the client side alone (`--client-pairs`, default 3): the same PutRecords (350 records per
 * call, the capture's batches in the e2e bench) and GetRecords (Limit 10,000) through the SDK
 * client and through `cdc local`'s lean client (local/kinesis-lean.ts), in alternating pairs:
 * this process's CPU per record for each (docs/performance-log.md, "60. A lean Kinesis client for `cdc local`").
 *
 * Then the pipeline's pattern (bench/lib/kinesis-ceiling.ts, `standInCeiling`: capture put, normalizer
 * read and put, one shared change-log read; `cdc local`'s batch sizes) over records of the
 * pipeline's sizes (586-byte raw, 427-byte change-log records), alternating both streams in one
 * kinesalite and one kinesalite per stream, `--pattern-runs` pairs: kinesalite's CPU per change in
 * each process, and the changes/s.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { randomBytes } from 'node:crypto';
import {
  CreateStreamCommand,
  DescribeStreamCommand,
  DescribeStreamSummaryCommand,
  GetRecordsCommand,
  GetShardIteratorCommand,
  ListShardsCommand,
  PutRecordsCommand,
  type KinesisClient,
} from '@aws-sdk/client-kinesis';
import { kinesisClient } from '../lambda/adapters/aws-clients.ts';
import { startKinesaliteProcess } from '../local/kinesis.ts';
import { LeanKinesisClient } from '../local/kinesis-lean.ts';
import { standInCeiling, type SampledRecord } from './lib/kinesis-ceiling.ts';
import { processCpuMs } from './lib/profile.ts';
import { argValue, numberArg, runIfMain, Recorder, sleep, type BenchResult } from './lib/report.ts';

const STREAM = 'costs';

interface Series {
  kind: string;
  calls: number;
  records: number;
  kinesaliteMs: number;
  clientMs: number;
}

async function measure(pid: number, kind: string, fn: () => Promise<{ calls: number; records: number }>): Promise<Series> {
  await sleep(200);
  const k0 = processCpuMs(pid)!;
  const c0 = process.cpuUsage();
  const { calls, records } = await fn();
  const c = process.cpuUsage(c0);
  return { kind, calls, records, kinesaliteMs: processCpuMs(pid)! - k0, clientMs: (c.user + c.system) / 1000 };
}

async function put(kinesis: KinesisClient, total: number, perCall: number, bytes: number): Promise<{ calls: number; records: number }> {
  let calls = 0;
  for (let done = 0; done < total; done += perCall, calls++) {
    const Records = Array.from({ length: Math.min(perCall, total - done) }, () => ({
      PartitionKey: randomBytes(12).toString('hex'),
      Data: randomBytes(bytes),
    }));
    const out = await kinesis.send(new PutRecordsCommand({ StreamName: STREAM, Records }));
    if ((out.FailedRecordCount ?? 0) > 0) throw new Error(`PutRecords failed ${out.FailedRecordCount} records`);
  }
  return { calls, records: total };
}

async function read(kinesis: KinesisClient, shardId: string, total: number, limit: number): Promise<{ calls: number; records: number }> {
  let it = (await kinesis.send(new GetShardIteratorCommand({ StreamName: STREAM, ShardId: shardId, ShardIteratorType: 'TRIM_HORIZON' }))).ShardIterator;
  let calls = 0;
  let records = 0;
  while (records < total && it) {
    const out = await kinesis.send(new GetRecordsCommand({ ShardIterator: it, Limit: Math.min(limit, total - records) }));
    calls++;
    records += out.Records?.length ?? 0;
    it = out.NextShardIterator;
  }
  return { calls, records };
}

async function repeat(n: number, fn: () => Promise<unknown>): Promise<{ calls: number; records: number }> {
  for (let i = 0; i < n; i++) await fn();
  return { calls: n, records: 0 };
}

export async function runKinesaliteCosts(): Promise<BenchResult> {
  const total = numberArg('records', 10_000);
  const bytes = numberArg('bytes', 600);
  const rec = new Recorder('kinesalite-costs', { records: total, bytes });
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cdc-bench-kcosts-'));
  const k = await startKinesaliteProcess({ path: path.join(dir, 'kinesis') });
  const kinesis = kinesisClient(k.endpoint);
  const series: Series[] = [];
  try {
    await kinesis.send(new CreateStreamCommand({ StreamName: STREAM, ShardCount: 1 }));
    const shardId = (await kinesis.send(new ListShardsCommand({ StreamName: STREAM }))).Shards![0]!.ShardId!;
    const pid = k.pid!;
    await put(kinesis, 500, 100, bytes); // warm-up
    if (argValue('no-series') === undefined) await perKind(kinesis, pid, shardId, total, bytes, series);
  } finally {
    kinesis.destroy();
    await k.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  for (const s of series) {
    const perCall = (s.kinesaliteMs * 1000) / s.calls;
    const perRecord = s.records ? (s.kinesaliteMs * 1000) / s.records : null;
    process.stdout.write(
      `[kinesalite-costs] ${s.kind.padEnd(42)} ${String(s.calls).padStart(6)} calls ${String(s.records).padStart(6)} records: kinesalite ${perCall.toFixed(0).padStart(6)} µs per call${perRecord === null ? '' : `, ${perRecord.toFixed(1)} µs per record`}; client ${((s.clientMs * 1000) / s.calls).toFixed(0)} µs per call\n`,
    );
  }
  rec.details.series = series;
  rec.details.clientPairs = await clientPairs(numberArg('client-pairs', 3), total, bytes);
  rec.details.pattern = argValue('no-pattern') === undefined ? await patternPairs(numberArg('pattern-runs', 3), numberArg('pattern-changes', 10_000)) : [];
  return rec.finish();
}

/** kinesalite's CPU per request kind (`--no-series` skips it). */
async function perKind(kinesis: KinesisClient, pid: number, shardId: string, total: number, bytes: number, series: Series[]): Promise<void> {
  for (const perCall of [1, 10, 100, 500])
    series.push(await measure(pid, `PutRecords of ${perCall}`, () => put(kinesis, perCall === 1 ? total / 5 : total, perCall, bytes)));
  for (const limit of [10, 100, 1000, 10000])
    series.push(await measure(pid, `GetRecords, Limit ${limit}`, () => read(kinesis, shardId, limit === 10 ? total / 5 : total, limit)));
  const latest = (await kinesis.send(new GetShardIteratorCommand({ StreamName: STREAM, ShardId: shardId, ShardIteratorType: 'LATEST' }))).ShardIterator!;
  series.push(
    await measure(pid, 'GetRecords at the tip (empty)', () => repeat(1000, () => kinesis.send(new GetRecordsCommand({ ShardIterator: latest, Limit: 1000 })))),
  );
  series.push(
    await measure(pid, 'GetShardIterator (AFTER_SEQUENCE_NUMBER)', async () => {
      const seq = (
        await kinesis.send(
          new GetRecordsCommand({
            ShardIterator: (await kinesis.send(new GetShardIteratorCommand({ StreamName: STREAM, ShardId: shardId, ShardIteratorType: 'TRIM_HORIZON' })))
              .ShardIterator!,
            Limit: 1,
          }),
        )
      ).Records![0]!.SequenceNumber!;
      return repeat(1000, () =>
        kinesis.send(
          new GetShardIteratorCommand({ StreamName: STREAM, ShardId: shardId, ShardIteratorType: 'AFTER_SEQUENCE_NUMBER', StartingSequenceNumber: seq }),
        ),
      );
    }),
  );
  series.push(await measure(pid, 'ListShards', () => repeat(1000, () => kinesis.send(new ListShardsCommand({ StreamName: STREAM })))));
  series.push(await measure(pid, 'DescribeStreamSummary', () => repeat(1000, () => kinesis.send(new DescribeStreamSummaryCommand({ StreamName: STREAM })))));
  series.push(await measure(pid, 'DescribeStream', () => repeat(1000, () => kinesis.send(new DescribeStreamCommand({ StreamName: STREAM })))));
}

/** The client's CPU per record put and read, SDK client and lean client in alternating pairs, on one kinesalite. */
async function clientPairs(pairs: number, total: number, bytes: number): Promise<unknown[]> {
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cdc-bench-kcosts-'));
  const k = await startKinesaliteProcess({ path: path.join(dir, 'kinesis') });
  const clients: [string, KinesisClient][] = [
    ['SDK client', kinesisClient(k.endpoint)],
    ['lean client', new LeanKinesisClient(k.endpoint)],
  ];
  const out: { pair: number; client: string; putUsPerRecord: number; getUsPerRecord: number }[] = [];
  try {
    const sdk = clients[0]![1];
    await sdk.send(new CreateStreamCommand({ StreamName: STREAM, ShardCount: 1 }));
    const shardId = (await sdk.send(new ListShardsCommand({ StreamName: STREAM }))).Shards![0]!.ShardId!;
    for (const [, c] of clients) await put(c, 700, 350, bytes); // warm-up
    // The records are made before, the same for both clients: only the sends are measured.
    const batches = Array.from({ length: Math.ceil(total / 350) }, (_, b) =>
      Array.from({ length: Math.min(350, total - b * 350) }, () => ({ PartitionKey: randomBytes(12).toString('hex'), Data: randomBytes(bytes) })),
    );
    for (let pair = 0; pair < pairs; pair++) {
      for (const [name, c] of pair % 2 === 0 ? clients : [...clients].reverse()) {
        const p = await measure(k.pid!, 'put', async () => {
          for (const Records of batches) await c.send(new PutRecordsCommand({ StreamName: STREAM, Records }));
          return { calls: batches.length, records: total };
        });
        const g = await measure(k.pid!, 'get', () => read(c, shardId, total, 10_000));
        const row = { pair, client: name, putUsPerRecord: (p.clientMs * 1000) / p.records, getUsPerRecord: (g.clientMs * 1000) / g.records };
        out.push(row);
        process.stdout.write(
          `[kinesalite-costs] client pair ${pair + 1}, ${name.padEnd(11)}: PutRecords of 350: ${row.putUsPerRecord.toFixed(1)} µs per record; GetRecords: ${row.getUsPerRecord.toFixed(1)} µs per record (this process's CPU; load ${loadAverage()})\n`,
        );
      }
    }
  } finally {
    for (const [, c] of clients) c.destroy();
    await k.stop();
    rmSync(dir, { recursive: true, force: true });
  }
  return out;
}

function loadAverage(): string {
  return os.loadavg()[0]!.toFixed(2);
}

/** Alternating runs of the pipeline's pattern with one kinesalite and with one per stream. */
async function patternPairs(runs: number, changes: number): Promise<unknown[]> {
  const records = (n: number, bytes: number, prefix: string): SampledRecord[] =>
    Array.from({ length: n }, (_, i) => ({
      key: `${prefix}/${i}`,
      data: Buffer.from(
        randomBytes(Math.ceil(bytes / 2))
          .toString('hex')
          .slice(0, bytes),
      ),
    }));
  const raw = records(1000, 586, 'public.orders');
  const changeLog = records(1000, 427, 'bench/public.orders');
  const out: unknown[] = [];
  for (let i = 0; i < runs; i++) {
    for (const perStream of [false, true]) {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'cdc-bench-kcosts-'));
      try {
        const r = await standInCeiling({
          path: path.join(dir, 'kinesis'),
          streams: { raw: 'raw', changeLog: 'log' },
          shards: { raw: 1, changeLog: 2 },
          changes,
          raw,
          changeLog,
          captureBatch: 5000,
          batchSize: 1000,
          archiveBatchSize: 2000,
          archiveWindowMs: 2000,
          perStream,
        });
        const perChange = r.kinesaliteCpuMsPerProcess.map((ms) => ((ms / changes) * 1000).toFixed(0));
        process.stdout.write(
          `[kinesalite-costs] pattern, ${perStream ? 'one kinesalite per stream' : 'one kinesalite       '}: ${Math.round(r.changesPerSecond)} changes/s; kinesalite ${((r.kinesaliteCpuMs / changes) * 1000).toFixed(0)} µs per change (${perChange.join(' + ')} µs: ${perStream ? "change log's + raw stream's" : 'both streams'}); clients ${((r.clientCpuMs / changes) * 1000).toFixed(0)} µs per change\n`,
        );
        out.push({ perStream, ...r });
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    }
  }
  return out;
}

runIfMain(import.meta.url, runKinesaliteCosts);
