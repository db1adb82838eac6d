/**
 * The change-log producer's KPL aggregation (lambda/adapters/change-log-kinesis.ts with `aggregate`,
 * docs/architecture.md "5.1 The change event") against kinesalite with a multi-shard change log:
 * randomized publishes (seed printed) with a shard split between two of them, so the producer's
 * shard map is stale and an aggregate lands on a child shard. Proven: every event arrives, each key's
 * events in order (the last copy of each after every earlier one), every event is read from the shard
 * its key maps to, the misplaced aggregate is on the stream and skipped by the reader (and re-sent),
 * and partial PutRecords failures keep the same guarantees. And the reader's per-shard starts, as
 * a resume replay asks for them (docs/operations.md, "How a resume replays": its held shards only,
 * each from the first held record or where an earlier pass stopped).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import {
  ListShardsCommand,
  PutRecordCommand,
  SplitShardCommand,
  type KinesisClient,
  type PutRecordsCommandInput,
  type PutRecordsCommandOutput,
  type PutRecordsResultEntry,
} from '@aws-sdk/client-kinesis';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { readChangeLog, shardsInOrder } from '../../lambda/adapters/change-log-reader.ts';
import { KinesisChangeLog, sha256Hex } from '../../lambda/adapters/change-log-kinesis.ts';
import { hashKeyOf } from '../../lambda/core/shared/change-log-aggregates.ts';
import { aggregateShardOf } from '../../contracts/change-log-record.ts';
import { isAggregate } from '../../contracts/kpl-aggregate.ts';
import { ENVELOPE_VERSION, partitionKeyOf, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { createStream, readShards } from '../helpers/kinesis-read.ts';
import { rng } from '../helpers/rng.ts';

const SEED = Number(process.env.CDC_TEST_SEED ?? Date.now() % 1_000_000);
const SEEDS = 6;

let kin: Kinesalite;
let client: KinesisClient;

beforeAll(async () => {
  kin = await startKinesalite();
  client = kinesisClient(kin.endpoint);
});
afterAll(async () => {
  client?.destroy();
  await kin?.stop();
});

function event(i: number, key: number, pad: number): ChangeEvent {
  return {
    v: ENVELOPE_VERSION,
    source: 'shop',
    table: 'public.orders',
    op: 'update',
    key: { id: key },
    after: { id: key, n: i, note: 'x'.repeat(pad) },
    before: null,
    missing: [],
    position: makePosition(BigInt(1000 + i), 0),
    commitTs: '2026-01-01T00:00:00.000Z',
    txId: String(i),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  };
}

const fast = { sleep: () => Promise.resolve() };

/** A client whose PutRecords calls may withhold entries (reported failed, as Kinesis reports them). */
function injected(decide: (call: number, count: number) => Set<number>): KinesisClient {
  const c = kinesisClient(kin.endpoint);
  let calls = 0;
  c.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== 'PutRecordsCommand') return next(args);
      const input = args.input as PutRecordsCommandInput;
      const entries = input.Records ?? [];
      const fail = decide(calls++, entries.length);
      if (fail.size === 0) return next(args);
      const kept = entries.filter((_, i) => !fail.has(i));
      const real =
        kept.length > 0 ? ((await next({ ...args, input: { ...input, Records: kept } })) as { output: PutRecordsCommandOutput; response: unknown }) : null;
      const realResults = real?.output.Records ?? [];
      let k = 0;
      const results: PutRecordsResultEntry[] = entries.map((_, i) =>
        fail.has(i) ? { ErrorCode: 'ProvisionedThroughputExceededException', ErrorMessage: 'Rate exceeded (injected)' } : realResults[k++]!,
      );
      return { response: real?.response ?? {}, output: { $metadata: {}, FailedRecordCount: fail.size, Records: results } };
    },
    { step: 'initialize', name: 'injectPutRecordsFailures' },
  );
  return c;
}

/** Checks what the reader gives back against what was published: all events, per-key order, each from its key's shard. */
async function checkStream(stream: string, published: readonly ChangeEvent[]): Promise<void> {
  const ranges = new Map(
    ((await client.send(new ListShardsCommand({ StreamName: stream }))).Shards ?? []).map((s) => [
      s.ShardId!,
      { start: BigInt(s.HashKeyRange!.StartingHashKey!), end: BigInt(s.HashKeyRange!.EndingHashKey!) },
    ]),
  );
  const byKey = new Map<string, ChangeEvent[]>();
  for await (const page of readChangeLog(client, stream)) {
    for (const r of page) {
      expect(r.otherShard === undefined || r.text === '').toBe(true);
      if (r.otherShard !== undefined) continue;
      const e = JSON.parse(r.text) as ChangeEvent;
      // Read from the shard its key hashes to: no event is used from a shard it was not meant for.
      const h = hashKeyOf(partitionKeyOf(e, sha256Hex));
      const range = ranges.get(r.shardId)!;
      expect(h >= range.start && h <= range.end, `${e.position} read from ${r.shardId}`).toBe(true);
      const k = JSON.stringify(e.key);
      byKey.set(k, [...(byKey.get(k) ?? []), e]);
    }
  }
  const want = new Map<string, string[]>();
  for (const e of published) want.set(JSON.stringify(e.key), [...(want.get(JSON.stringify(e.key)) ?? []), e.position]);
  expect(new Set(byKey.keys())).toEqual(new Set(want.keys()));
  for (const [k, list] of byKey) {
    const expected = want.get(k)!;
    expect(new Set(list.map((e) => e.position)), `key ${k}: every event`).toEqual(new Set(expected));
    const lastCopies = [...new Map(list.map((e, i) => [e.position, i])).entries()].sort((a, b) => a[1] - b[1]).map(([p]) => p);
    expect(lastCopies, `key ${k}: order of last copies`).toEqual(expected);
  }
}

/** Records on the stream that are aggregates meant for another shard than the one they are on. */
async function misplacedAggregates(stream: string): Promise<number> {
  let n = 0;
  for (const [id, records] of await readShards(client, stream)) {
    for (const r of records) if (isAggregate(Buffer.from(r.Data!)) && aggregateShardOf(r.PartitionKey) !== id) n++;
  }
  return n;
}

describe(`KinesisChangeLog with aggregation (seed ${SEED}, ${SEEDS} seeds)`, () => {
  it('packs events per shard; a split between publishes makes the map stale: the misplaced aggregate is skipped and its events re-sent in order', async () => {
    console.log(`change-log aggregation: seed ${SEED}, seeds ${SEEDS}`);
    for (let s = 0; s < SEEDS; s++) {
      const r = rng(SEED + s);
      const stream = `agg-${randomUUID()}`;
      await createStream(client, stream, 2 + Math.floor(r() * 3));
      const calls: Array<{ entries: number; aggregates: number }> = [];
      const c = kinesisClient(kin.endpoint);
      c.middlewareStack.add(
        (next, context) => async (args) => {
          if (context.commandName === 'PutRecordsCommand') {
            const rec = (args.input as PutRecordsCommandInput).Records ?? [];
            calls.push({ entries: rec.length, aggregates: rec.filter((e) => e.ExplicitHashKey !== undefined).length });
          }
          return next(args);
        },
        { step: 'initialize', name: 'countPuts' },
      );
      const log = new KinesisChangeLog(c, stream, {
        ...fast,
        aggregate: true,
        aggregateLimits: { maxBytes: 2_000 + Math.floor(r() * 20_000), maxEvents: 5 + Math.floor(r() * 100) },
      });
      const keys = 3 + Math.floor(r() * 60);
      const published: ChangeEvent[] = [];
      let i = 0;
      const batch = (): ChangeEvent[] => Array.from({ length: 50 + Math.floor(r() * 400) }, () => event(i++, Math.floor(r() * keys), Math.floor(r() * 300)));
      const first = batch();
      await log.publish(first);
      published.push(...first);
      expect(
        calls.some((x) => x.aggregates > 0),
        `seed ${SEED + s}: aggregates were put`,
      ).toBe(true);
      // Split every open shard: each aggregate of the next publish is meant for a closed parent and lands on a child.
      const open = ((await client.send(new ListShardsCommand({ StreamName: stream }))).Shards ?? []).filter(
        (x) => !x.SequenceNumberRange?.EndingSequenceNumber,
      );
      for (const sh of open) {
        const start = BigInt(sh.HashKeyRange!.StartingHashKey!);
        const end = BigInt(sh.HashKeyRange!.EndingHashKey!);
        await client.send(
          new SplitShardCommand({ StreamName: stream, ShardToSplit: sh.ShardId!, NewStartingHashKey: (start + (end - start) / 2n + 1n).toString() }),
        );
      }
      for (let round = 0; round < 3; round++) {
        const more = batch();
        await log.publish(more);
        published.push(...more);
      }
      expect(await misplacedAggregates(stream), `seed ${SEED + s}: the stale map put aggregates on other shards`).toBeGreaterThan(0);
      await checkStream(stream, published);
      c.destroy();
    }
  });

  it('on partial PutRecords failures re-sends from the first failed unit: every event arrives, each key in order', async () => {
    for (let s = 0; s < SEEDS; s++) {
      const r = rng(SEED + 100 + s);
      const stream = `agg-${randomUUID()}`;
      await createStream(client, stream, 3);
      const c = injected((call, count) => {
        const fail = new Set<number>();
        if (call < 6) for (let k = 0; k < count; k++) if (r() < 0.2) fail.add(k);
        return fail;
      });
      const log = new KinesisChangeLog(c, stream, { ...fast, aggregate: true, aggregateLimits: { maxBytes: 3_000, maxEvents: 20 } });
      const events = Array.from({ length: 300 + Math.floor(r() * 500) }, (_, i) => event(i, Math.floor(r() * 25), Math.floor(r() * 100)));
      await log.publish(events);
      await checkStream(stream, events);
      c.destroy();
    }
  });
});

describe('readChangeLog', () => {
  it('reads every shard from its trim horizon, or only the named shards, each from its start', async () => {
    const stream = 'reader-starts';
    await createStream(client, stream, 2);
    const [first, second] = (await shardsInOrder(client, stream)).map((s) => ({ id: s.ShardId!, hashKey: s.HashKeyRange!.StartingHashKey! }));
    const put = async (shard: { hashKey: string }, n: number) =>
      (await client.send(new PutRecordCommand({ StreamName: stream, PartitionKey: `k${n}`, ExplicitHashKey: shard.hashKey, Data: Buffer.from(`{"n":${n}}`) })))
        .SequenceNumber!;
    const seqs: string[] = [];
    for (let n = 1; n <= 5; n++) seqs.push(await put(first!, n));
    for (let n = 6; n <= 8; n++) await put(second!, n);
    const read = async (starts?: ReadonlyMap<string, string | null> | null) => {
      const out: Array<[string, number]> = [];
      for await (const page of readChangeLog(client, stream, { pageSize: 2, starts }))
        for (const r of page) out.push([r.shardId, (JSON.parse(r.text) as { n: number }).n]);
      return out;
    };
    const all = [1, 2, 3, 4, 5].map((n): [string, number] => [first!.id, n]).concat([6, 7, 8].map((n): [string, number] => [second!.id, n]));
    expect(await read()).toEqual(all);
    expect(await read(null)).toEqual(all);
    expect(await read(new Map([[first!.id, seqs[2]!]]))).toEqual([3, 4, 5].map((n) => [first!.id, n]));
    expect(await read(new Map([[second!.id, null]]))).toEqual([6, 7, 8].map((n) => [second!.id, n]));
    expect(await read(new Map())).toEqual([]);
  }, 60_000);
});
