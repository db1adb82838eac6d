/**
 * One read of a stream for several consumers (local/fanout.ts; docs/local.md, "One read of the
 * change log for every consumer"), randomized over seeds: 2–3 pollers share one fan-out of a
 * 1–3 shard stream with a small window (so records are dropped from it and consumers fall behind
 * and read on their own), each with its own batch size, a handler that succeeds, throws an
 * infrastructure error or reports a partial failure at random, crashes at random points (the
 * crashed poller is abandoned and a new one starts from its checkpoints on the same fan-out), and
 * one consumer that stalls for a while (its handler waits) while records keep coming.
 *
 * Checked per consumer and key, as for one poller (test/local/poller-property.test.ts): within one
 * poller's life the accepted records are an unbroken run in order; a new life starts no later than
 * one past what was accepted before; in the end every record was accepted. Also: while one
 * consumer is stalled the others accept everything put; the windows never hold more than their
 * bound; every poller is caught up (local/shard-tips.ts) with records put before a last wave. Two more tests show
 * that three consumers keeping up read the stream about once, not three times, and that a
 * consumer starting from an older checkpoint reads on its own until it reaches the others; one
 * splits the shard under two consumers (the parent read to SHARD_END by both, then the children).
 *
 * Runs and seed: `CDC_FANOUT_RUNS` (default 6) and `CDC_PROPERTY_SEED` (default random, printed).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  DeleteStreamCommand,
  DescribeStreamSummaryCommand,
  ListShardsCommand,
  PutRecordsCommand,
  SplitShardCommand,
  type KinesisClient,
} from '@aws-sdk/client-kinesis';
import { createStream } from '../helpers/kinesis-read.ts';
import { PutNotices, startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { Poller, type StreamHandler } from '../../local/poller.ts';
import { StreamFanout } from '../../local/fanout.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { CrashableControl, until, values } from './helpers.ts';

const RUNS = Number(process.env.CDC_FANOUT_RUNS ?? 6);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);

let kin: Kinesalite;
let kinesis: KinesisClient;
let puts: PutNotices;
let streamNo = 0;

beforeAll(async () => {
  kin = await startKinesalite();
  kinesis = kinesisClient(kin.endpoint);
  puts = new PutNotices();
  puts.attach(kinesis);
});

afterAll(async () => {
  kinesis?.destroy();
  await kin?.stop();
});

async function stream(shards: number): Promise<string> {
  const name = `fo${++streamNo}`;
  await createStream(kinesis, name, shards);
  return name;
}

/** One consumer of the shared stream: its lives (pollers), what each accepted per key, and a stall switch. */
class Consumer {
  readonly lives: Array<Map<string, number[]>> = [];
  readonly ever = new Map<string, Set<number>>();
  poller: Poller | null = null;
  private controlPlane: CrashableControl | null = null;
  private alive = false;
  /** While set, the handler waits (a stalled sink). */
  stall: Promise<void> | null = null;
  readonly batchSize: number;

  constructor(
    readonly name: string,
    private readonly rand: () => number,
    private readonly memory: MemoryControlPlane,
    private readonly streamName: string,
    private readonly fanout: StreamFanout,
    private readonly onBatch: () => void,
  ) {
    this.batchSize = 1 + Math.floor(rand() * 40);
  }

  everCount(): number {
    let n = 0;
    for (const s of this.ever.values()) n += s.size;
    return n;
  }

  private accept(vs: string[], life: Map<string, number[]>): void {
    if (!this.alive) return;
    for (const v of vs) {
      const [k, n] = v.split(':') as [string, string];
      life.set(k, [...(life.get(k) ?? []), Number(n)]);
      if (!this.ever.has(k)) this.ever.set(k, new Set());
      this.ever.get(k)!.add(Number(n));
    }
  }

  async startLife(): Promise<void> {
    const rand = this.rand;
    const life = new Map<string, number[]>();
    this.lives.push(life);
    this.controlPlane = new CrashableControl(this.memory);
    this.alive = true;
    const handler: StreamHandler = async (event) => {
      this.onBatch();
      if (this.stall) await this.stall;
      const vs = values(event);
      if (rand() < 0.3) await new Promise((r) => setTimeout(r, Math.floor(rand() * 8)));
      const roll = rand();
      if (roll < 0.1) throw new Error('warehouse unreachable');
      if (roll < 0.2 && vs.length > 1) {
        const failAt = 1 + Math.floor(rand() * (vs.length - 1));
        this.accept(vs.slice(0, failAt), life);
        return { batchItemFailures: [{ itemIdentifier: event.Records[failAt]!.kinesis.sequenceNumber }] };
      }
      this.accept(vs, life);
      return { batchItemFailures: [] };
    };
    this.poller = new Poller({
      consumer: this.name,
      kinesis,
      streamName: this.streamName,
      controlPlane: this.controlPlane,
      handler,
      batchSize: this.batchSize,
      bisectOnError: rand() < 0.5,
      idleMs: rand() < 0.5 ? 10 : 60_000,
      retryBackoffMs: 1,
      maxBackoffMs: 5,
      fanout: this.fanout,
      watchPuts: (listener) => puts.watch(this.streamName, listener),
    });
    await this.poller.start();
  }

  /** Crash: no write reaches the control plane from here on, the handler's work is lost. */
  async crash(): Promise<void> {
    this.controlPlane!.crashed = true;
    this.alive = false;
    await this.poller!.stop();
  }

  /** Per key: unbroken runs in order per life, each starting at most one past what was accepted before, and everything accepted. */
  check(putPerKey: Map<string, number>, what: string): void {
    for (const [key, count] of putPerKey) {
      let lastBefore = -1;
      for (const accepted of this.lives) {
        const got = accepted.get(key) ?? [];
        if (got.length === 0) continue;
        for (let i = 1; i < got.length; i++) expect(got[i], `${what} ${this.name} key ${key}: ${got.join(',')}`).toBe(got[i - 1]! + 1);
        expect(got[0]!, `${what} ${this.name} key ${key}: starts at ${got[0]} after ${lastBefore}`).toBeLessThanOrEqual(lastBefore + 1);
        lastBefore = Math.max(lastBefore, got[got.length - 1]!);
      }
      expect(this.ever.get(key)?.size ?? 0, `${what} ${this.name} key ${key}`).toBe(count);
    }
  }
}

async function oneRun(run: number, seed: number): Promise<void> {
  const rand = seededRandom(seed);
  const pick = (n: number): number => Math.floor(rand() * n);
  const shards = 1 + pick(3);
  const keys = 2 + pick(12);
  const name = await stream(shards);
  const memory = new MemoryControlPlane();
  const maxRecords = 5 + pick(60);
  const fanout = new StreamFanout({ kinesis, streamName: name, maxRecords, readLimit: 1 + pick(maxRecords) });
  let maxHeld = 0;
  const sample = (): void => void (maxHeld = Math.max(maxHeld, fanout.held()));
  const consumers = Array.from({ length: 2 + pick(2) }, (_, i) => new Consumer(`c${i}`, rand, memory, name, fanout, sample));
  const what = `run ${run} (seed ${seed}, ${shards} shards, window ${maxRecords}, batches ${consumers.map((c) => c.batchSize).join('/')})`;

  const putPerKey = new Map<string, number>();
  const putOne = (): string => {
    const key = `k${pick(keys)}`;
    const n = putPerKey.get(key) ?? 0;
    putPerKey.set(key, n + 1);
    return `${key}:${n}`;
  };
  const putWave = async (): Promise<void> => {
    const batch = Array.from({ length: 1 + pick(120) }, putOne);
    const out = await kinesis.send(
      new PutRecordsCommand({ StreamName: name, Records: batch.map((v) => ({ PartitionKey: v.split(':')[0]!, Data: Buffer.from(v) })) }),
    );
    expect(out.FailedRecordCount ?? 0).toBe(0);
  };
  const total = (): number => [...putPerKey.values()].reduce((a, b) => a + b, 0);

  for (const c of consumers) await c.startLife();
  const waves = 3 + pick(4);
  for (let wave = 0; wave < waves; wave++) {
    await putWave();
    // Crash some consumers at a random moment; each starts again from its checkpoints on the same fan-out.
    await new Promise((r) => setTimeout(r, pick(40)));
    for (const c of consumers) {
      if (rand() < 0.3) {
        await c.crash();
        await c.startLife();
      }
    }
  }
  // One consumer stalls (its handler waits) while more records come: the others still get every record.
  const stalled = consumers[pick(consumers.length)]!;
  let release!: () => void;
  stalled.stall = new Promise<void>((r) => (release = r));
  for (let wave = 0; wave < 2 + pick(3); wave++) await putWave();
  for (const c of consumers)
    if (c !== stalled) await until(`${what}: ${c.name} gets every record while ${stalled.name} is stalled`, () => c.everCount() >= total(), 30_000);
  release();
  stalled.stall = null;
  await until(`${what}: ${stalled.name} gets every record after its stall`, () => stalled.everCount() >= total(), 30_000);
  // Caught up since T needs a read that started after T (an idle shard may be polled only every minute here): a last wave wakes them.
  const afterLastPut = Date.now();
  await putWave();
  for (const c of consumers) await until(`${what}: ${c.name} gets the last wave`, () => c.everCount() >= total(), 30_000);
  for (const c of consumers) await until(`${what}: ${c.name} caught up`, () => c.poller!.caughtUpSince(afterLastPut), 30_000);
  for (const c of consumers) await c.poller!.stop();

  for (const c of consumers) c.check(putPerKey, what);
  expect(maxHeld, `${what}: records held by the windows`).toBeLessThanOrEqual(shards * maxRecords);
  expect(fanout.stats.servedFromWindow, `${what}: records served from the shared window`).toBeGreaterThan(0);
  totals.dropped += fanout.stats.dropped;
  totals.ownReads += fanout.stats.ownReads;
  totals.served += fanout.stats.servedFromWindow;
}

const totals = { dropped: 0, ownReads: 0, served: 0 };

/** Counts the records GetRecords returned through `client`. */
function countReads(client: KinesisClient): { records: number } {
  const counter = { records: 0 };
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const out = await next(args);
      if (context.commandName === 'GetRecordsCommand') counter.records += ((out.output as { Records?: unknown[] }).Records ?? []).length;
      return out;
    },
    { step: 'initialize', name: 'countReads' },
  );
  return counter;
}

describe('one read of a stream for several consumers, randomized', () => {
  it(`keeps per-consumer order, checkpoints and at-least-once with crashes, a stall and a small window (${RUNS} runs)`, async () => {
    console.log(`fanout property: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED}, CDC_FANOUT_RUNS=${RUNS})`);
    for (let run = 0; run < RUNS; run++) {
      const before = streamNo;
      await oneRun(run, SEED + run);
      for (let n = before + 1; n <= streamNo; n++) await kinesis.send(new DeleteStreamCommand({ StreamName: `fo${n}` }));
    }
    console.log(
      `fanout property: ${totals.served} records served from windows, ${totals.dropped} dropped from full windows, ${totals.ownReads} reads on their own`,
    );
    // The runs went through the paths that matter: windows full, consumers behind reading on their own.
    expect(totals.dropped).toBeGreaterThan(0);
    expect(totals.ownReads).toBeGreaterThan(0);
  }, 600_000);

  it('three consumers keeping up read the stream about once, not three times', async () => {
    const name = await stream(2);
    const client = kinesisClient(kin.endpoint);
    const reads = countReads(client);
    const fanout = new StreamFanout({ kinesis: client, streamName: name });
    const seen = [0, 0, 0];
    const pollers = seen.map(
      (_, i) =>
        new Poller({
          consumer: `once${i}`,
          kinesis: client,
          streamName: name,
          controlPlane: new MemoryControlPlane(),
          batchSize: 100,
          idleMs: 20,
          fanout,
          handler: async (event) => void (seen[i]! += event.Records.length),
        }),
    );
    for (const p of pollers) await p.start();
    const n = 3000;
    for (let i = 0; i < n; i += 500)
      await kinesis.send(
        new PutRecordsCommand({
          StreamName: name,
          Records: Array.from({ length: 500 }, (_, j) => ({ PartitionKey: `k${(i + j) % 7}`, Data: Buffer.from(`r${i + j}`) })),
        }),
      );
    await until('every consumer has every record', () => seen.every((s) => s >= n), 30_000);
    for (const p of pollers) await p.stop();
    client.destroy();
    expect(seen).toEqual([n, n, n]);
    // Each record is read from the stream once (the consumers started together, at the shard's start).
    expect(reads.records).toBe(n);
    expect(fanout.stats.ownReads).toBe(0);
  });

  it('a consumer starting from an older checkpoint reads on its own until it reaches the window, then joins it', async () => {
    const name = await stream(1);
    const client = kinesisClient(kin.endpoint);
    const reads = countReads(client);
    const fanout = new StreamFanout({ kinesis: client, streamName: name, maxRecords: 50 });
    const put = async (from: number, count: number): Promise<void> =>
      void (await kinesis.send(
        new PutRecordsCommand({
          StreamName: name,
          Records: Array.from({ length: count }, (_, j) => ({ PartitionKey: 'k', Data: Buffer.from(`${from + j}`) })),
        }),
      ));
    await put(0, 400);
    const got: number[][] = [[], []];
    const poller = (i: number): Poller =>
      new Poller({
        consumer: `c${i}`,
        kinesis: client,
        streamName: name,
        controlPlane: new MemoryControlPlane(),
        batchSize: 40,
        idleMs: 20,
        fanout,
        handler: async (event) => void got[i]!.push(...values(event).map(Number)),
      });
    const ahead = poller(0);
    await ahead.start();
    await until('the first consumer read the backlog', () => got[0]!.length >= 400, 30_000);
    // The second starts at the shard's start: 400 records behind a window of 50.
    const behind = poller(1);
    await behind.start();
    await until('the second consumer read the backlog', () => got[1]!.length >= 400, 30_000);
    // Having read the backlog, the second joins the window at its next read: until then an idle read of
    // its own still counts (every 20 ms). Joined once its own reads stop for 300 ms.
    await until(
      'the second consumer to join the window',
      async () => {
        const n = fanout.stats.ownReads;
        await new Promise((r) => setTimeout(r, 300));
        return fanout.stats.ownReads === n;
      },
      30_000,
    );
    const ownBefore = fanout.stats.ownReads;
    expect(ownBefore).toBeGreaterThan(0);
    const readsBefore = reads.records;
    await put(400, 200);
    await until('both have the new records', () => got[0]!.length >= 600 && got[1]!.length >= 600, 30_000);
    await ahead.stop();
    await behind.stop();
    client.destroy();
    const all = Array.from({ length: 600 }, (_, i) => i);
    expect(got[0]).toEqual(all);
    expect(got[1]).toEqual(all);
    // Caught up, the second joined the window: the new records were read from the stream once.
    expect(fanout.stats.ownReads).toBe(ownBefore);
    expect(reads.records - readsBefore).toBe(200);
  });

  it('a shard split under the shared read: the parent is read to its end (SHARD_END) by every consumer, then the children, each key in order', async () => {
    const name = await stream(1);
    const fanout = new StreamFanout({ kinesis, streamName: name, maxRecords: 30 });
    const put = async (from: number, count: number): Promise<void> =>
      void (await kinesis.send(
        new PutRecordsCommand({
          StreamName: name,
          Records: Array.from({ length: count }, (_, j) => ({ PartitionKey: `k${(from + j) % 5}`, Data: Buffer.from(`k${(from + j) % 5}:${from + j}`) })),
        }),
      ));
    const memory = new MemoryControlPlane();
    const got: Array<Map<string, number[]>> = [new Map(), new Map()];
    const pollers = got.map(
      (seen, i) =>
        new Poller({
          consumer: `split${i}`,
          kinesis,
          streamName: name,
          controlPlane: memory,
          batchSize: 7 + i * 20,
          idleMs: 20,
          shardRefreshMs: 100,
          fanout,
          handler: async (event) => {
            for (const v of values(event)) {
              const [k, n] = v.split(':') as [string, string];
              seen.set(k, [...(seen.get(k) ?? []), Number(n)]);
            }
          },
        }),
    );
    for (const p of pollers) await p.start();
    await put(0, 100);
    const parent = (await kinesis.send(new ListShardsCommand({ StreamName: name }))).Shards![0]!.ShardId!;
    await kinesis.send(new SplitShardCommand({ StreamName: name, ShardToSplit: parent, NewStartingHashKey: (2n ** 127n).toString() }));
    await until(
      'the split is done',
      async () => (await kinesis.send(new DescribeStreamSummaryCommand({ StreamName: name }))).StreamDescriptionSummary?.StreamStatus === 'ACTIVE',
      20_000,
    );
    await put(100, 100);
    const count = (m: Map<string, number[]>): number => [...m.values()].reduce((a, v) => a + v.length, 0);
    await until('both consumers have every record', () => got.every((m) => count(m) >= 200), 30_000);
    for (const p of pollers) await p.stop();
    for (const [i, seen] of got.entries()) {
      for (const [k, ns] of seen) expect(ns, `consumer ${i} key ${k}`).toEqual([...ns].sort((a, b) => a - b));
      expect(count(seen), `consumer ${i}`).toBe(200);
      expect(await memory.getCheckpoint(`split${i}`, parent)).toBe('SHARD_END');
    }
  });
});
