/**
 * The e2e bench's stand-in ceiling (bench/lib/kinesis-ceiling.ts): the tally counts every record
 * put and read per stream, also when two consumers read the same shard from the same position
 * (kinesalite can hand both the same iterator), and the ceiling run carries exactly the pattern it
 * says: N raw records put and read once, N change-log records put and read twice (one shared read
 * of the change log), with both streams in one kinesalite and with one kinesalite per stream.
 */
import {
  CreateStreamCommand,
  DescribeStreamSummaryCommand,
  GetRecordsCommand,
  GetShardIteratorCommand,
  PutRecordsCommand,
  type KinesisClient,
} from '@aws-sdk/client-kinesis';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { LeanKinesisClient } from '../../local/kinesis-lean.ts';
import { KinesisTally, shardCount, standInCeiling } from '../../bench/lib/kinesis-ceiling.ts';

describe('KinesisTally', () => {
  let kin: Kinesalite | undefined;
  afterEach(async () => {
    await kin?.stop();
    kin = undefined;
  });

  // The SDK client is counted by a middleware; the lean client (local/kinesis-lean.ts) answers its hot requests itself and is counted by its afterSend.
  it.each([
    { client: 'the SDK client', make: (endpoint: string): KinesisClient => kinesisClient(endpoint) },
    { client: 'the lean client', make: (endpoint: string): KinesisClient => new LeanKinesisClient(endpoint) },
  ])('counts puts and reads per stream, two readers at one position included, and samples only while asked: $client', async ({ make }) => {
    kin = await startKinesalite();
    const client = make(kin.endpoint);
    const tally = new KinesisTally(3);
    tally.attach(client);
    for (const [name, shards] of [
      ['a', 1],
      ['b', 2],
    ] as const) {
      await client.send(new CreateStreamCommand({ StreamName: name, ShardCount: shards }));
      while ((await client.send(new DescribeStreamSummaryCommand({ StreamName: name }))).StreamDescriptionSummary?.StreamStatus !== 'ACTIVE')
        await new Promise((r) => setTimeout(r, 20));
    }
    expect(await shardCount(client, 'b')).toBe(2);
    const put = (stream: string, n: number, from: number) =>
      client.send(
        new PutRecordsCommand({
          StreamName: stream,
          Records: Array.from({ length: n }, (_, i) => ({ PartitionKey: `k${from + i}`, Data: Buffer.from(`record ${from + i}`) })),
        }),
      );
    await put('a', 5, 0);
    tally.sampling = true;
    await put('a', 5, 5);
    tally.sampling = false;
    await put('b', 7, 0);
    // Stream a read twice from the start with one iterator: what two consumers get from kinesalite
    // when they ask for the same position within the same millisecond (the iterator encodes both).
    const it = (await client.send(new GetShardIteratorCommand({ StreamName: 'a', ShardId: 'shardId-000000000000', ShardIteratorType: 'TRIM_HORIZON' })))
      .ShardIterator;
    const readAll = async (): Promise<number> => {
      let n = 0;
      let next = it;
      for (;;) {
        const out = await client.send(new GetRecordsCommand({ ShardIterator: next, Limit: 4 }));
        n += out.Records?.length ?? 0;
        if ((out.Records?.length ?? 0) === 0) return n;
        next = out.NextShardIterator;
      }
    };
    const x = await readAll();
    const y = await readAll();
    expect([x, y]).toEqual([10, 10]);
    expect(tally.puts.get('a')).toBe(10);
    expect(tally.puts.get('b')).toBe(7);
    expect(tally.reads.get('a')).toBe(20);
    expect(tally.reads.get('b') ?? 0).toBe(0);
    expect(tally.readsPerPut('a')).toBe(2);
    // Requests per kind and stream: a GetRecords names its stream through the iterator it was given.
    expect(tally.requests.get('PutRecords a')).toEqual({ calls: 2, records: 10, empty: 0 });
    expect(tally.requests.get('PutRecords b')).toEqual({ calls: 1, records: 7, empty: 0 });
    expect(tally.requests.get('GetRecords a')).toEqual({ calls: 8, records: 20, empty: 2 });
    expect(tally.requests.get('GetShardIterator a')?.calls).toBe(1);
    // Only the records put while sampling, up to the cap.
    expect(tally.samples.get('a')?.map((s) => Buffer.from(s.data).toString())).toEqual(['record 5', 'record 6', 'record 7']);
    expect(tally.samples.get('b')).toBeUndefined();
    client.destroy();
  });
});

describe('standInCeiling', () => {
  it.each([
    { perStream: false, aggregation: true },
    { perStream: true, aggregation: true },
    { perStream: false, aggregation: false },
  ])(
    "carries N changes in the pipeline's pattern: raw put and read once, change log put once and read once for both consumers (one shared read); raw stream in a process of its own: $perStream, change log aggregated: $aggregation",
    async ({ perStream, aggregation }) => {
      const dir = mkdtempSync(path.join(os.tmpdir(), 'cdc-ceiling-test-'));
      try {
        const rec = (key: string, size: number) => ({ key, data: Buffer.alloc(size, 'x') });
        const r = await standInCeiling({
          path: path.join(dir, 'kinesis'),
          streams: { raw: 'raw', changeLog: 'log' },
          shards: { raw: 1, changeLog: 2 },
          changes: 1200,
          raw: Array.from({ length: 7 }, (_, i) => rec(`t/${i}`, 500)),
          changeLog: Array.from({ length: 5 }, (_, i) => rec(`s/t/${i}`, 400)),
          captureBatch: 500,
          batchSize: 300,
          archiveBatchSize: 600,
          archiveWindowMs: 100,
          perStream,
          aggregation,
        });
        expect(r.puts.raw).toBe(1200);
        expect(r.reads.raw).toBe(1200);
        if (aggregation) {
          // 1,200 events of 400 bytes for 2 shards in aggregates of at most 50 KiB: at least 10 records, far fewer than the events.
          expect(r.puts.log).toBeGreaterThanOrEqual(10);
          expect(r.puts.log).toBeLessThanOrEqual(60);
        } else expect(r.puts.log).toBe(1200);
        expect(r.reads.log).toBe(r.puts.log);
        expect(r.rawBytes).toBe(500);
        expect(r.changeLogBytes).toBe(400);
        expect(r.changesPerSecond).toBeCloseTo(1200 / r.seconds, 6);
        expect(r.clientCpuMs).toBeGreaterThan(0);
        expect(r.kinesaliteCpuMsPerProcess).toHaveLength(perStream ? 2 : 1);
        if (process.platform === 'linux') for (const ms of r.kinesaliteCpuMsPerProcess) expect(ms).toBeGreaterThan(0);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  );

  it("does not time the archive's batching window: the run ends when the shared read has read everything and the applier handled it", async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'cdc-ceiling-test-'));
    try {
      const rec = (key: string, size: number) => ({ key, data: Buffer.alloc(size, 'x') });
      const windowMs = 20_000;
      const r = await standInCeiling({
        path: path.join(dir, 'kinesis'),
        streams: { raw: 'raw', changeLog: 'log' },
        shards: { raw: 1, changeLog: 2 },
        changes: 600,
        raw: Array.from({ length: 7 }, (_, i) => rec(`t/${i}`, 500)),
        changeLog: Array.from({ length: 5 }, (_, i) => rec(`s/t/${i}`, 400)),
        captureBatch: 300,
        batchSize: 300,
        // A batch the archive never fills: it is delivered only when its window closes.
        archiveBatchSize: 10_000,
        archiveWindowMs: windowMs,
      });
      expect(r.reads.log).toBe(r.puts.log);
      // Timed with the window, the run could not end before it closed (600 changes take well under a second here).
      expect(r.seconds).toBeLessThan(windowMs / 1000 / 2);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
