/**
 * Reads paced by put notices (docs/local.md, "Reads paced by put notices"; local/read-pacing.ts),
 * randomized over seeds against kinesalite: a stream of 2 shards read by three consumers (two
 * through one fan-out, as the change log's, one with its own iterators, as the normalizer's),
 * every one with put notices and an idle poll of 60 s, so a record its notice did not get read
 * would wait a minute. Waves of puts go to one shard, the other or both (single puts, bursts,
 * concurrent puts), and between waves a random consumer stops and a new one starts from its
 * checkpoints. Checked:
 * - every consumer gets every record within the wave's deadline (5 s, well below the idle poll),
 *   per key in order within a life, and a new life starts at or before the record after the last
 *   one accepted;
 * - a wave on one shard does not read the other (no GetRecords there at all), and a single put on
 *   a quiet shard costs at most 3 GetRecords for the three consumers (one shared read, one own
 *   read, one spare for a race), where reading again after records cost 4 or more; plus one for
 *   each consumer with a batch size of 1, which got as many records as it asked for and so reads
 *   once more to learn that it reached the end (seed 1353355678, run 2, had one);
 * - a caught-up question is answered within the deadline though the readers wait a minute;
 * - a put on a client without notices is still read, at the idle poll.
 *
 * Runs and seed: `CDC_PACING_RUNS` (default 3) and `CDC_PROPERTY_SEED` (default random, printed).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeleteStreamCommand, PutRecordsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import { createStream } from '../helpers/kinesis-read.ts';
import { PutNotices, startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { Poller, type StreamHandler } from '../../local/poller.ts';
import { StreamFanout } from '../../local/fanout.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { until, values } from './helpers.ts';

const RUNS = Number(process.env.CDC_PACING_RUNS ?? 3);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const IDLE_POLL_MS = 60_000;
const DEADLINE_MS = 5_000;
/** Explicit hash keys inside each of the two shards' ranges (the hash key space split in half). */
const SHARD_HASH = ['1', (2n ** 127n + 1n).toString()];

let kin: Kinesalite;
let kinesis: KinesisClient;
let silent: KinesisClient;
let puts: PutNotices;
/** GetRecords per shard id, told apart by the iterators each shard gave out. */
const reads = new Map<string, number>();
let streamNo = 0;

beforeAll(async () => {
  kin = await startKinesalite();
  kinesis = kinesisClient(kin.endpoint);
  silent = kinesisClient(kin.endpoint);
  puts = new PutNotices();
  puts.attach(kinesis);
  const shardOf = new Map<string, string>();
  kinesis.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as { ShardId?: string; ShardIterator?: string };
      const shard = context.commandName === 'GetRecordsCommand' ? shardOf.get(input.ShardIterator!) : input.ShardId;
      if (context.commandName === 'GetRecordsCommand' && shard) reads.set(shard, (reads.get(shard) ?? 0) + 1);
      const out = await next(args);
      const o = out.output as { ShardIterator?: string; NextShardIterator?: string };
      if (shard && o.ShardIterator) shardOf.set(o.ShardIterator, shard);
      if (shard && o.NextShardIterator) shardOf.set(o.NextShardIterator, shard);
      return out;
    },
    { step: 'initialize', name: 'readsPerShard' },
  );
});

afterAll(async () => {
  kinesis?.destroy();
  silent?.destroy();
  await kin?.stop();
});

interface Consumer {
  name: string;
  poller: Poller;
  /** Per key, the values accepted in this life, in order. */
  accepted: Map<string, number[]>;
  /** Its batch size: a read that fills it cannot tell that it reached the shard's end. */
  batchSize: number;
}

async function oneRun(run: number, seed: number): Promise<void> {
  const rand = seededRandom(seed);
  const pick = (n: number): number => Math.floor(rand() * n);
  const label = `run ${run} (seed ${seed})`;
  const name = `pace${++streamNo}`;
  await createStream(kinesis, name, 2);
  const shardIds = ['shardId-000000000000', 'shardId-000000000001'];
  const readsBefore = new Map(shardIds.map((id) => [id, reads.get(id) ?? 0]));
  const control = new MemoryControlPlane();
  const fanout = new StreamFanout({ kinesis, streamName: name });
  const putPerKey = new Map<string, number>();
  /** Per consumer and key, every value ever accepted; and each life's runs for the order check. */
  const ever = new Map<string, Map<string, Set<number>>>();
  const lives = new Map<string, Array<Map<string, number[]>>>();

  const start = async (consumer: string, maxIdleMs = IDLE_POLL_MS): Promise<Consumer> => {
    const accepted = new Map<string, number[]>();
    if (!lives.has(consumer)) lives.set(consumer, []);
    lives.get(consumer)!.push(accepted);
    if (!ever.has(consumer)) ever.set(consumer, new Map());
    const handler: StreamHandler = async (event) => {
      if (rand() < 0.3) await new Promise((r) => setTimeout(r, pick(20)));
      for (const v of values(event)) {
        const [k, n] = v.split(':') as [string, string];
        accepted.set(k, [...(accepted.get(k) ?? []), Number(n)]);
        if (!ever.get(consumer)!.has(k)) ever.get(consumer)!.set(k, new Set());
        ever.get(consumer)!.get(k)!.add(Number(n));
      }
    };
    const batchSize = 1 + pick(30);
    const poller = new Poller({
      consumer,
      kinesis,
      streamName: name,
      controlPlane: control,
      handler,
      batchSize,
      idleMs: 1 + pick(50),
      maxIdleMs,
      checkpointIntervalMs: pick(2) === 0 ? 0 : 1 + pick(300),
      watchPuts: puts.watcher(name),
      ...(consumer === 'own' ? {} : { fanout }),
    });
    await poller.start();
    return { name: consumer, poller, accepted, batchSize };
  };
  const consumers = [await start('shared-a'), await start('shared-b'), await start('own')];

  /** Puts `n` records on the shards named (0, 1 or both), each key on one shard. */
  const put = async (client: KinesisClient, shards: number[], n: number): Promise<void> => {
    const records = Array.from({ length: n }, () => {
      const shard = shards[pick(shards.length)]!;
      const key = `s${shard}k${pick(6)}`;
      const v = putPerKey.get(key) ?? 0;
      putPerKey.set(key, v + 1);
      return { PartitionKey: key, ExplicitHashKey: SHARD_HASH[shard]!, Data: Buffer.from(`${key}:${v}`) };
    });
    const out = await client.send(new PutRecordsCommand({ StreamName: name, Records: records }));
    expect(out.FailedRecordCount ?? 0).toBe(0);
  };
  const total = (): number => [...putPerKey.values()].reduce((a, b) => a + b, 0);
  const allDelivered = (): boolean => consumers.every((c) => [...putPerKey].every(([k, n]) => (ever.get(c.name)!.get(k)?.size ?? 0) === n));
  /** Waits until every consumer caught up since now (its readers woken by the question), then lets pending wake-ups settle. */
  const settle = async (what: string): Promise<void> => {
    const since = Date.now();
    await until(`${label}: ${what}, caught up`, () => consumers.every((c) => c.poller.caughtUpSince(since)), DEADLINE_MS);
    await new Promise((r) => setTimeout(r, 150));
  };
  await settle('started');

  const waves = 6 + pick(6);
  let singleWaves = 0;
  for (let wave = 0; wave < waves; wave++) {
    const kind = pick(4);
    const before = new Map(shardIds.map((s) => [s, reads.get(s) ?? 0]));
    if (kind === 0) {
      // One record on a quiet shard.
      const shard = pick(2);
      await put(kinesis, [shard], 1);
      await until(`${label} wave ${wave}: delivered`, allDelivered, DEADLINE_MS);
      await new Promise((r) => setTimeout(r, 150));
      const on = (reads.get(shardIds[shard]!) ?? 0) - before.get(shardIds[shard]!)!;
      const other = (reads.get(shardIds[1 - shard]!) ?? 0) - before.get(shardIds[1 - shard]!)!;
      const fillers = consumers.filter((c) => c.batchSize === 1).length;
      expect(
        on,
        `${label} wave ${wave}: GetRecords on the shard put to, for one record and three consumers (${fillers} with a batch size of 1)`,
      ).toBeLessThanOrEqual(3 + fillers);
      expect(other, `${label} wave ${wave}: GetRecords on the other shard`).toBe(0);
      singleWaves++;
    } else {
      // A burst on one shard or both: several puts, some at once, with random pauses.
      const shards = kind === 1 ? [0] : kind === 2 ? [1] : [0, 1];
      const bursts = 1 + pick(5);
      for (let b = 0; b < bursts; b++) {
        const together = 1 + pick(3);
        await Promise.all(Array.from({ length: together }, () => put(kinesis, shards, 1 + pick(40))));
        if (rand() < 0.5) await new Promise((r) => setTimeout(r, pick(100)));
      }
      await until(`${label} wave ${wave}: delivered`, allDelivered, DEADLINE_MS);
      await new Promise((r) => setTimeout(r, 150));
      if (shards.length === 1) {
        const other = shardIds[1 - shards[0]!]!;
        expect((reads.get(other) ?? 0) - before.get(other)!, `${label} wave ${wave}: GetRecords on the shard not put to`).toBe(0);
      }
    }
    if (rand() < 0.35) {
      // A consumer stops (writing its checkpoints) and a new one starts from them.
      const i = pick(consumers.length);
      await consumers[i]!.poller.stop();
      consumers[i] = await start(consumers[i]!.name);
      await settle(`wave ${wave}: ${consumers[i]!.name} restarted`);
    }
  }
  // A put no notice tells of: read at the idle poll (shortened for this), never lost.
  for (const c of consumers) await c.poller.stop();
  for (let i = 0; i < consumers.length; i++) consumers[i] = await start(consumers[i]!.name, 300);
  await settle('before the silent put');
  await put(silent, [pick(2)], 1 + pick(5));
  await until(`${label}: the silent put delivered at the idle poll`, allDelivered, DEADLINE_MS);
  for (const c of consumers) await c.poller.stop();

  for (const [consumer, runs] of lives) {
    for (const [key, count] of putPerKey) {
      let lastBefore = -1;
      for (const accepted of runs) {
        const got = accepted.get(key) ?? [];
        if (got.length === 0) continue;
        for (let i = 1; i < got.length; i++) expect(got[i], `${label} ${consumer} key ${key}: ${got.join(',')}`).toBe(got[i - 1]! + 1);
        expect(got[0]!, `${label} ${consumer} key ${key}: starts at ${got[0]} after ${lastBefore}`).toBeLessThanOrEqual(lastBefore + 1);
        lastBefore = Math.max(lastBefore, got[got.length - 1]!);
      }
      expect(ever.get(consumer)!.get(key)?.size ?? 0, `${label} ${consumer} key ${key}`).toBe(count);
    }
  }
  console.log(
    `${label}: ${waves} waves (${singleWaves} single puts), ${total()} records, GetRecords per shard ${shardIds.map((s) => (reads.get(s) ?? 0) - readsBefore.get(s)!).join(' / ')}`,
  );
  await kinesis.send(new DeleteStreamCommand({ StreamName: name }));
}

describe('local poller, reads paced by put notices', () => {
  it(`reads a shard when a put lands on it, and only then; loses and reorders nothing (${RUNS} runs)`, { timeout: 600_000 }, async () => {
    console.log(`read pacing: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED}, CDC_PACING_RUNS=${RUNS})`);
    const rand = seededRandom(SEED);
    for (let run = 0; run < RUNS; run++) await oneRun(run, Math.floor(rand() * 0x7fffffff));
  });
});
