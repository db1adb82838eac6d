/**
 * The poller's coalesced checkpoints (docs/local.md, "Checkpoints written at most once a second"),
 * randomized over seeds against kinesalite: records put in waves on 1–3 shards, a handler that
 * succeeds, throws an infrastructure error or reports a partial failure at random, checkpoints
 * written every `checkpointIntervalMs` (1–400 ms) or `checkpointEveryBatches` (1–30) batches, and
 * each life of the poller ends at a random moment in one of two ways:
 * - a crash: the control plane refuses every write from then on (what the process had not written
 *   is lost, as with SIGKILL) and the poller is abandoned;
 * - a clean stop: the stored checkpoint of every shard is then the last record the handler
 *   accepted on it (or what it was before, if it accepted nothing).
 * A new poller then starts from the checkpoints. Checked per key (a key lives on one shard): the
 * first record a new poller delivers is at most one past the last one accepted before (no
 * checkpoint passes a record not handled), each life delivers an unbroken run in order, every
 * record is accepted at least once, and when the last poller says it has caught up with the
 * stream, every shard's stored checkpoint is its last record. Over all runs the poller wrote fewer
 * checkpoints than it acknowledged batches (what the coalescing is for).
 *
 * Runs and seed: `CDC_CHECKPOINT_RUNS` (default 10) and `CDC_PROPERTY_SEED` (default random, printed).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeleteStreamCommand, PutRecordsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import { createStream } from '../helpers/kinesis-read.ts';
import { PutNotices, startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { Poller, type StreamHandler } from '../../local/poller.ts';
import { CheckpointSchedule } from '../../local/checkpoint-schedule.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { CrashableControl, until, values } from './helpers.ts';

const RUNS = Number(process.env.CDC_CHECKPOINT_RUNS ?? 10);
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

/** A control plane that crashes like CrashableControl and counts the checkpoints written. */
class CountingControl extends CrashableControl {
  written = 0;
  override async putCheckpoint(consumer: string, shardId: string, sequenceNumber: string): Promise<void> {
    await super.putCheckpoint(consumer, shardId, sequenceNumber);
    this.written++;
  }
}

const totals = { batches: 0, written: 0 };

async function oneRun(run: number, seed: number): Promise<void> {
  const rand = seededRandom(seed);
  const pick = (n: number): number => Math.floor(rand() * n);
  const label = `run ${run} (seed ${seed})`;
  const shards = 1 + pick(3);
  const keys = 2 + pick(12);
  const name = `pc${++streamNo}`;
  await createStream(kinesis, name, shards);
  const memory = new MemoryControlPlane();
  const batchSize = 1 + pick(40);
  const checkpointIntervalMs = 1 + pick(400);
  const checkpointEveryBatches = 1 + pick(30);
  // Per key, the values put so far (value = `${key}:${n}`); per shard, the last sequence number put.
  const putPerKey = new Map<string, number>();
  const lastPut = new Map<string, bigint>();
  const putWave = async (): Promise<void> => {
    const batch = Array.from({ length: 1 + pick(150) }, () => {
      const key = `k${pick(keys)}`;
      const n = putPerKey.get(key) ?? 0;
      putPerKey.set(key, n + 1);
      return `${key}:${n}`;
    });
    const out = await kinesis.send(
      new PutRecordsCommand({ StreamName: name, Records: batch.map((v) => ({ PartitionKey: v.split(':')[0]!, Data: Buffer.from(v) })) }),
    );
    expect(out.FailedRecordCount ?? 0).toBe(0);
    for (const r of out.Records ?? []) {
      const seq = BigInt(r.SequenceNumber!);
      if (seq > (lastPut.get(r.ShardId!) ?? -1n)) lastPut.set(r.ShardId!, seq);
    }
  };
  const waves = 2 + pick(4);
  let wavesPut = 0;
  const lives: Array<Map<string, number[]>> = [];
  const everAccepted = new Map<string, Set<number>>();
  for (let life = 0; ; life++) {
    const controlPlane = new CountingControl(memory);
    const accepted = new Map<string, number[]>();
    // Per shard, the last sequence number the handler accepted in this life.
    const lastAccepted = new Map<string, string>();
    lives.push(accepted);
    let alive = true;
    const accept = (shardId: string, event: Parameters<StreamHandler>[0], upTo: number): void => {
      if (!alive || upTo === 0) return;
      for (const v of values(event).slice(0, upTo)) {
        const [k, n] = v.split(':') as [string, string];
        accepted.set(k, [...(accepted.get(k) ?? []), Number(n)]);
        if (!everAccepted.has(k)) everAccepted.set(k, new Set());
        everAccepted.get(k)!.add(Number(n));
      }
      lastAccepted.set(shardId, event.Records[upTo - 1]!.kinesis.sequenceNumber);
    };
    const handler = (shardId: string): StreamHandler => {
      return async (event) => {
        if (rand() < 0.3) await new Promise((r) => setTimeout(r, pick(8)));
        const roll = rand();
        if (roll < 0.08) throw new Error('warehouse unreachable');
        if (roll < 0.16 && event.Records.length > 1) {
          const failAt = 1 + pick(event.Records.length - 1);
          accept(shardId, event, failAt);
          return { batchItemFailures: [{ itemIdentifier: event.Records[failAt]!.kinesis.sequenceNumber }] };
        }
        accept(shardId, event, event.Records.length);
        return { batchItemFailures: [] };
      };
    };
    const lastLife = life >= 2 + pick(3);
    const poller = new Poller({
      consumer: 'coalesced',
      kinesis,
      streamName: name,
      controlPlane,
      handler: { perShard: handler },
      batchSize,
      bisectOnError: rand() < 0.5,
      // The last life is asked whether it caught up since a time after the last put: its idle shards are read again soon.
      idleMs: lastLife || rand() < 0.5 ? 10 : 60_000,
      retryBackoffMs: 1,
      maxBackoffMs: 5,
      checkpointIntervalMs,
      checkpointEveryBatches,
      watchPuts: (listener) => puts.watch(name, listener),
    });
    const before = new Map<string, string | null>();
    for (const shardId of lastPut.keys()) before.set(shardId, await memory.getCheckpoint('coalesced', shardId));
    await poller.start();
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
      await until(`${label}: every record accepted`, () => [...everAccepted.values()].reduce((a, s) => a + s.size, 0) >= total, 30_000);
      // Caught up with everything put: every shard's stored checkpoint is its last record, before any stop.
      const since = Date.now();
      await until(`${label}: caught up`, () => poller.caughtUpSince(since), 30_000);
      for (const [shardId, seq] of lastPut) expect(await memory.getCheckpoint('coalesced', shardId), `${label} ${shardId} once caught up`).toBe(String(seq));
      await poller.stop();
      totals.batches += poller.stats.batches;
      totals.written += controlPlane.written;
      break;
    }
    await new Promise((r) => setTimeout(r, pick(80)));
    if (rand() < 0.5) {
      // A crash: nothing reaches the control plane from here on, the handler's work is lost.
      controlPlane.crashed = true;
      alive = false;
      await poller.stop();
    } else {
      // A clean stop: what the handler accepted is checkpointed.
      await poller.stop();
      alive = false;
      for (const shardId of lastPut.keys()) {
        const want = lastAccepted.get(shardId) ?? before.get(shardId) ?? null;
        expect(await memory.getCheckpoint('coalesced', shardId), `${label} life ${life} ${shardId} after a clean stop`).toBe(want);
      }
    }
    totals.batches += poller.stats.batches;
    totals.written += controlPlane.written;
  }

  for (const [key, count] of putPerKey) {
    let lastBefore = -1;
    for (const accepted of lives) {
      const got = accepted.get(key) ?? [];
      if (got.length === 0) continue;
      for (let i = 1; i < got.length; i++) expect(got[i], `${label} key ${key}: ${got.join(',')}`).toBe(got[i - 1]! + 1);
      expect(got[0]!, `${label} key ${key}: starts at ${got[0]} after ${lastBefore}`).toBeLessThanOrEqual(lastBefore + 1);
      lastBefore = Math.max(lastBefore, got[got.length - 1]!);
    }
    expect(everAccepted.get(key)?.size ?? 0, `${label} key ${key}`).toBe(count);
  }
}

describe('local poller, coalesced checkpoints', () => {
  it(`no record skipped across crashes and stops; stop and caught-up see the last position (${RUNS} runs)`, async () => {
    console.log(`poller checkpoints: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED}, CDC_CHECKPOINT_RUNS=${RUNS})`);
    for (let run = 0; run < RUNS; run++) {
      const before = streamNo;
      await oneRun(run, SEED + run);
      for (let n = before + 1; n <= streamNo; n++) await kinesis.send(new DeleteStreamCommand({ StreamName: `pc${n}` }));
    }
    console.log(`poller checkpoints: ${totals.batches} batches acknowledged, ${totals.written} checkpoints written`);
    expect(totals.written).toBeLessThan(totals.batches);
  }, 600_000);

  it('writes a shard at most every interval or every N batches, the last acknowledged position, and on demand', () => {
    let now = 1_000;
    const s = new CheckpointSchedule({ intervalMs: 500, everyBatches: 3, now: () => now });
    expect(s.dueIn('a')).toBeNull();
    expect(s.acknowledged('a', '10')).toBe(false);
    expect(s.dueIn('a')).toBe(500);
    now += 200;
    expect(s.acknowledged('a', '20')).toBe(false);
    // The wait counts from the oldest acknowledgment not written.
    expect(s.dueIn('a')).toBe(300);
    expect(s.due('a')).toBeNull();
    expect(s.due('a', true)).toBe('20');
    now += 300;
    expect(s.due('a')).toBe('20');
    s.written('a', '20');
    expect(s.due('a', true)).toBeNull();
    // Every third batch, whatever the time.
    expect(s.acknowledged('a', '30')).toBe(false);
    expect(s.acknowledged('a', '40')).toBe(false);
    expect(s.acknowledged('a', '50')).toBe(true);
    expect(s.dueIn('a')).toBe(0);
    s.written('a', '40');
    // A write of an older position leaves the newer one pending.
    expect(s.due('a')).toBe('50');
    s.written('a', '50');
    // A caught-up check asks for it at once; shards are apart.
    expect(s.ask('a')).toBe(false);
    s.acknowledged('b', '7');
    expect(s.ask('b')).toBe(true);
    expect(s.due('b')).toBe('7');
    s.drop('b');
    expect(s.due('b', true)).toBeNull();
    // Interval 0: every batch.
    const every = new CheckpointSchedule({ intervalMs: 0, everyBatches: 100, now: () => now });
    expect(every.acknowledged('a', '1')).toBe(true);
    expect(() => new CheckpointSchedule({ intervalMs: -1, everyBatches: 1 })).toThrow(/checkpoint interval must be a number of ms >= 0, got -1/);
    expect(() => new CheckpointSchedule({ intervalMs: 10, everyBatches: 0 })).toThrow(/checkpoint batches must be an integer >= 1, got 0/);
  });
});
