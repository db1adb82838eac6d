/**
 * The poller's guarantees with read-ahead and put notices, randomized over seeds: records put in
 * waves while it runs on 1–3 shards, a handler that succeeds, throws an infrastructure error or
 * reports a partial failure at random, and crashes at random points — the control plane refuses
 * every write from some moment on (so a batch can be handled and never checkpointed, or a
 * checkpoint lost), the crashed poller is abandoned and a new one starts from the checkpoints.
 *
 * Checked per key (a key lives on one shard): within one poller's life the records a handler
 * accepted form an unbroken run of the key's records, in order, without repeats; the first
 * record a new poller delivers for a key is at most one past the last one accepted before (a
 * checkpoint never passes a record that was not accepted); and at the end every record was
 * accepted at least once. One test shows the read-ahead (the handler of the first batch waits
 * until the next batch was read) and one the put notice (an idle shard polled every 10 minutes
 * still gets a new record).
 *
 * Runs and seed: `CDC_POLLER_RUNS` (default 12) and `CDC_PROPERTY_SEED` (default random, printed).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeleteStreamCommand, PutRecordsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import { createStream } from '../helpers/kinesis-read.ts';
import { PutNotices, startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { Poller, type StreamHandler } from '../../local/poller.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { CrashableControl, until, values } from './helpers.ts';

const RUNS = Number(process.env.CDC_POLLER_RUNS ?? 12);
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
  const name = `pp${++streamNo}`;
  await createStream(kinesis, name, shards);
  return name;
}

async function oneRun(run: number, seed: number): Promise<void> {
  const rand = seededRandom(seed);
  const pick = (n: number): number => Math.floor(rand() * n);
  const shards = 1 + pick(3);
  const keys = 2 + pick(12);
  const name = await stream(shards);
  const memory = new MemoryControlPlane();
  const batchSize = 1 + pick(40);
  // Per key, the values put so far (in put order): value = `${key}:${n}`, n = 0, 1, 2, …
  const putPerKey = new Map<string, number>();
  const putOne = (): string => {
    const key = `k${pick(keys)}`;
    const n = putPerKey.get(key) ?? 0;
    putPerKey.set(key, n + 1);
    return `${key}:${n}`;
  };
  const waves = 2 + pick(4);
  const putWave = async (): Promise<void> => {
    const batch = Array.from({ length: 1 + pick(120) }, putOne);
    const out = await kinesis.send(
      new PutRecordsCommand({ StreamName: name, Records: batch.map((v) => ({ PartitionKey: v.split(':')[0]!, Data: Buffer.from(v) })) }),
    );
    expect(out.FailedRecordCount ?? 0).toBe(0);
  };

  // Per poller life: per key, the values accepted (handler returned them as done), in order.
  const lives: Array<Map<string, number[]>> = [];
  const everAccepted = new Map<string, Set<number>>();
  let wavesPut = 0;
  for (let life = 0; ; life++) {
    const controlPlane = new CrashableControl(memory);
    const accepted = new Map<string, number[]>();
    lives.push(accepted);
    let alive = true;
    const accept = (vs: string[]): void => {
      if (!alive) return;
      for (const v of vs) {
        const [k, n] = v.split(':') as [string, string];
        accepted.set(k, [...(accepted.get(k) ?? []), Number(n)]);
        if (!everAccepted.has(k)) everAccepted.set(k, new Set());
        everAccepted.get(k)!.add(Number(n));
      }
    };
    const handler: StreamHandler = async (event) => {
      const vs = values(event);
      if (rand() < 0.3) await new Promise((r) => setTimeout(r, pick(8)));
      const roll = rand();
      if (roll < 0.1) throw new Error('warehouse unreachable');
      if (roll < 0.2 && vs.length > 1) {
        const failAt = 1 + pick(vs.length - 1);
        accept(vs.slice(0, failAt));
        return { batchItemFailures: [{ itemIdentifier: event.Records[failAt]!.kinesis.sequenceNumber }] };
      }
      accept(vs);
      return { batchItemFailures: [] };
    };
    const poller = new Poller({
      consumer: 'prop',
      kinesis,
      streamName: name,
      controlPlane: controlPlane,
      handler,
      batchSize,
      bisectOnError: rand() < 0.5,
      idleMs: rand() < 0.5 ? 10 : 60_000,
      retryBackoffMs: 1,
      maxBackoffMs: 5,
      watchPuts: (listener) => puts.watch(name, listener),
    });
    await poller.start();
    const lastLife = life >= 2 + pick(3);
    if (wavesPut < waves) {
      await putWave();
      wavesPut++;
    }
    if (lastLife) {
      while (wavesPut < waves) {
        await putWave();
        wavesPut++;
      }
      const total = [...putPerKey.values()].reduce((a, b) => a + b, 0);
      await until(`run ${run}: every record accepted`, () => [...everAccepted.values()].reduce((a, s) => a + s.size, 0) >= total, 30_000);
      await poller.stop();
      break;
    }
    // Crash at a random moment: no write reaches the control plane from here on, the handler's work is lost.
    await new Promise((r) => setTimeout(r, pick(60)));
    controlPlane.crashed = true;
    alive = false;
    await poller.stop();
  }

  for (const [key, count] of putPerKey) {
    let lastBefore = -1;
    for (const accepted of lives) {
      const got = accepted.get(key) ?? [];
      if (got.length === 0) continue;
      // An unbroken run in order within one life …
      for (let i = 1; i < got.length; i++) expect(got[i], `run ${run} (seed ${seed}) key ${key}: ${got.join(',')}`).toBe(got[i - 1]! + 1);
      // … starting no later than one past what was accepted before (no checkpoint past an unaccepted record).
      expect(got[0]!, `run ${run} (seed ${seed}) key ${key}: starts at ${got[0]} after ${lastBefore}`).toBeLessThanOrEqual(lastBefore + 1);
      lastBefore = Math.max(lastBefore, got[got.length - 1]!);
    }
    expect(everAccepted.get(key)?.size ?? 0, `run ${run} (seed ${seed}) key ${key}`).toBe(count);
  }
}

describe('local event-source poller, randomized', () => {
  it(`keeps per-key order and at-least-once across random failures and crashes (${RUNS} runs)`, async () => {
    console.log(`poller property: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED}, CDC_POLLER_RUNS=${RUNS})`);
    for (let run = 0; run < RUNS; run++) {
      const before = streamNo;
      await oneRun(run, SEED + run);
      // kinesalite, like an account, holds at most 100 shards: a long run (CDC_POLLER_RUNS) gives each run's back.
      for (let n = before + 1; n <= streamNo; n++) await kinesis.send(new DeleteStreamCommand({ StreamName: `pp${n}` }));
    }
  }, 600_000);

  it('reads the next batch while the handler runs the current one', async () => {
    const name = await stream(1);
    await kinesis.send(
      new PutRecordsCommand({ StreamName: name, Records: Array.from({ length: 30 }, (_, i) => ({ PartitionKey: 'k', Data: Buffer.from(`r${i}`) })) }),
    );
    // Records returned by GetRecords on this stream, counted as they arrive.
    let read = 0;
    const client = kinesisClient(kin.endpoint);
    client.middlewareStack.add(
      (next) => async (args) => {
        const out = await next(args);
        if (args.input && (args.input as { ShardIterator?: string }).ShardIterator) read += ((out.output as { Records?: unknown[] }).Records ?? []).length;
        return out;
      },
      { step: 'initialize', name: 'countReads' },
    );
    const seen: string[] = [];
    const p = new Poller({
      consumer: 'ahead',
      kinesis: client,
      streamName: name,
      controlPlane: new MemoryControlPlane(),
      batchSize: 10,
      idleMs: 10,
      handler: async (event) => {
        // The first batch is held until the poller has read past it: without read-ahead this never happens.
        if (seen.length === 0) await until('the next batch read during the first', () => read > 10, 20_000);
        seen.push(...values(event));
      },
    });
    await p.start();
    await until('all records', () => seen.length >= 30, 30_000);
    await p.stop();
    client.destroy();
    expect(seen).toEqual(Array.from({ length: 30 }, (_, i) => `r${i}`));
  });

  it('a put notice wakes an idle shard that would otherwise be polled only every 10 minutes', async () => {
    const name = await stream(2);
    const seen: string[] = [];
    const p = new Poller({
      consumer: 'wake',
      kinesis,
      streamName: name,
      controlPlane: new MemoryControlPlane(),
      idleMs: 600_000,
      handler: async (event) => void seen.push(...values(event)),
      watchPuts: (listener) => puts.watch(name, listener),
    });
    await p.start();
    // Both shards were read once (empty) and now wait for their next poll.
    await until('both shards idle', () => p.caughtUpSince(0), 20_000);
    await kinesis.send(new PutRecordsCommand({ StreamName: name, Records: ['a', 'b', 'c', 'd'].map((v) => ({ PartitionKey: v, Data: Buffer.from(v) })) }));
    await until('the records put after the shards went idle', () => seen.length >= 4, 20_000);
    await p.stop();
    expect([...seen].sort()).toEqual(['a', 'b', 'c', 'd']);
  });
});
