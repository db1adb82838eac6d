/**
 * The lean Kinesis client of `cdc local` (local/kinesis-lean.ts; docs/local.md, "The lean Kinesis
 * client") against the SDK client, both on real kinesalite: for the same requests they give equal
 * results, compared by type (Data as Uint8Array, ApproximateArrivalTimestamp as Date, `$metadata`),
 * randomized over batch sizes, record sizes, binary data and partition keys; the same errors (a
 * missing stream, a bad iterator, an expired iterator, a throttle put in front of kinesalite); the
 * routing of a stream to its own kinesalite and the put notices work through it.
 *
 * Runs and seed: `CDC_LEAN_KINESIS_RUNS` (default 25) and `CDC_PROPERTY_SEED` (default random, printed).
 */
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import {
  CreateStreamCommand,
  GetRecordsCommand,
  GetShardIteratorCommand,
  PutRecordsCommand,
  type GetRecordsOutput,
  type KinesisClient,
  type PutRecordsRequestEntry,
} from '@aws-sdk/client-kinesis';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { PutNotices, routeStream, startKinesalite, type Kinesalite, type PutShards } from '../../local/kinesis.ts';
import { LeanKinesisClient } from '../../local/kinesis-lean.ts';
import { seededRandom } from '../../local/seeded-random.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const RUNS = Number(process.env.CDC_LEAN_KINESIS_RUNS ?? 25);
const STREAM = 'lean';
const SHARDS = 3;

/** A value with what differs between two equal responses (request ids, retry delays, sequence numbers, iterators) replaced by its type. */
function typed(v: unknown, key = ''): unknown {
  if (v instanceof Uint8Array) return { [Object.getPrototypeOf(v).constructor.name]: Array.from(v) };
  if (v instanceof Date) return { Date: v.getTime() };
  if (Array.isArray(v)) return v.map((x) => typed(x));
  if (v !== null && typeof v === 'object') {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(v).sort()) out[k] = typed((v as Record<string, unknown>)[k], k);
    return out;
  }
  if (['requestId', 'extendedRequestId', 'totalRetryDelay', 'SequenceNumber', 'NextShardIterator', 'ShardIterator'].includes(key)) return `<${typeof v}>`;
  return { [typeof v]: v };
}

/** What a client throws, with what differs between two equal errors (request ids) replaced by its type. */
async function thrown(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    const e = err as Error & Record<string, unknown>;
    return { class: Object.getPrototypeOf(e).constructor.name, name: e.name, message: e.message, fields: typed({ ...e }) };
  }
  throw new Error('expected an error, got a result');
}

function randomEntries(rand: () => number): PutRecordsRequestEntry[] {
  const n = 1 + Math.floor(rand() * (rand() < 0.2 ? 300 : 20));
  const big = rand() < 0.15;
  const out: PutRecordsRequestEntry[] = [];
  for (let i = 0; i < n; i++) {
    const size = big && i < 3 ? Math.floor(rand() * 200_000) : rand() < 0.1 ? 0 : Math.floor(rand() * 2_000);
    const data = new Uint8Array(size);
    for (let j = 0; j < size; j++) data[j] = Math.floor(rand() * 256);
    const keyChars = ['a', 'Z', '9', 'é', '"', '\\', '\n', '日', '😀', ' ', '/', '\u0000'];
    let key = '';
    const len = 1 + Math.floor(rand() * 40);
    while (key.length < len) key += keyChars[Math.floor(rand() * keyChars.length)]!;
    const entry: PutRecordsRequestEntry = { PartitionKey: key.slice(0, 256), Data: rand() < 0.5 ? data : Buffer.from(data) };
    if (rand() < 0.1) entry.ExplicitHashKey = String(BigInt(Math.floor(rand() * 2 ** 53)) * BigInt(2 ** 75));
    out.push(entry);
  }
  return out;
}

/** A proxy in front of kinesalite that answers the next `throttle.remaining` requests of `throttle.target` with a throttle. */
async function throttlingProxy(target: Kinesalite): Promise<{ endpoint: string; throttle: { target: string; remaining: number }; close(): Promise<void> }> {
  const throttle = { target: '', remaining: 0 };
  const agent = new http.Agent({ keepAlive: true });
  const server = http.createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (req.headers['x-amz-target'] === `Kinesis_20131202.${throttle.target}` && throttle.remaining > 0) {
        throttle.remaining--;
        res.writeHead(400, { 'content-type': 'application/x-amz-json-1.1', 'x-amzn-requestid': 'throttled' });
        return res.end(JSON.stringify({ __type: 'ProvisionedThroughputExceededException', message: 'Rate exceeded for shard shardId-000000000000' }));
      }
      const fwd = http.request({ agent, host: '127.0.0.1', port: target.port, method: req.method, path: req.url, headers: req.headers }, (r) => {
        res.writeHead(r.statusCode!, r.headers);
        r.pipe(res);
      });
      fwd.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
  return {
    endpoint: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    throttle,
    close: () => new Promise<void>((resolve) => server.close(() => resolve(agent.destroy()))),
  };
}

describe('LeanKinesisClient: the same results as the SDK client on kinesalite', () => {
  let main: Kinesalite;
  let other: Kinesalite;
  let sdk: KinesisClient;
  let lean: LeanKinesisClient;

  beforeAll(async () => {
    [main, other] = await Promise.all([startKinesalite(), startKinesalite()]);
    sdk = kinesisClient(main.endpoint);
    lean = new LeanKinesisClient(main.endpoint);
    await sdk.send(new CreateStreamCommand({ StreamName: STREAM, ShardCount: SHARDS }));
  });
  afterAll(async () => {
    sdk?.destroy();
    lean?.destroy();
    await Promise.all([main?.stop(), other?.stop()]);
  });

  async function iterators(after: Map<string, string>): Promise<{ shard: string; sdk: string; lean: string }[]> {
    const out = [];
    for (let s = 0; s < SHARDS; s++) {
      const shard = `shardId-00000000000${s}`;
      const seq = after.get(shard);
      const input = seq
        ? { StreamName: STREAM, ShardId: shard, ShardIteratorType: 'AFTER_SEQUENCE_NUMBER' as const, StartingSequenceNumber: seq }
        : { StreamName: STREAM, ShardId: shard, ShardIteratorType: 'TRIM_HORIZON' as const };
      const [a, b] = [await sdk.send(new GetShardIteratorCommand(input)), await lean.send(new GetShardIteratorCommand(input))];
      expect(typed(b)).toEqual(typed(a));
      out.push({ shard, sdk: a.ShardIterator!, lean: b.ShardIterator! });
    }
    return out;
  }

  it('puts and reads random batches: equal outputs by type, every record back as put', async () => {
    console.log(`lean kinesis: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED}, CDC_LEAN_KINESIS_RUNS=${RUNS})`);
    const rand = seededRandom(SEED);
    const read = new Map<string, string>();
    const before = { ...lean.counts };
    for (let run = 0; run < RUNS; run++) {
      const what = `run ${run} (seed ${SEED})`;
      const entries = randomEntries(rand);
      // The same batch through each client: the same shards, the same shape, sequence numbers aside.
      const bySdk = await sdk.send(new PutRecordsCommand({ StreamName: STREAM, Records: entries }));
      const byLean = await lean.send(new PutRecordsCommand({ StreamName: STREAM, Records: entries }));
      expect(typed(byLean), what).toEqual(typed(bySdk));
      expect(bySdk.FailedRecordCount, what).toBe(0);
      // Read each shard from where the last run stopped, through both clients with iterators of the same position.
      const expected = [...entries, ...entries].map((e) => ({ PartitionKey: e.PartitionKey, Data: Array.from(e.Data!) }));
      const got: { PartitionKey: string | undefined; Data: number[] }[] = [];
      const order = [...bySdk.Records!, ...byLean.Records!].map((r) => r.SequenceNumber!);
      for (const it of await iterators(read)) {
        let [a, b] = [it.sdk, it.lean];
        for (;;) {
          const limit = 1 + Math.floor(rand() * 500);
          const x: GetRecordsOutput = await sdk.send(new GetRecordsCommand({ ShardIterator: a, Limit: limit }));
          const y: GetRecordsOutput = await lean.send(new GetRecordsCommand({ ShardIterator: b, Limit: limit }));
          // MillisBehindLatest is "now" minus the last record's arrival: it may move between the two reads.
          expect(typed({ ...y, MillisBehindLatest: 0 }), what).toEqual(typed({ ...x, MillisBehindLatest: 0 }));
          for (const r of y.Records!) {
            expect(r.Data, what).toBeInstanceOf(Uint8Array);
            expect(r.ApproximateArrivalTimestamp, what).toBeInstanceOf(Date);
            got[order.indexOf(r.SequenceNumber!)] = { PartitionKey: r.PartitionKey, Data: Array.from(r.Data!) };
            read.set(it.shard, r.SequenceNumber!);
          }
          if (y.Records!.length === 0) break;
          [a, b] = [x.NextShardIterator!, y.NextShardIterator!];
        }
      }
      expect(got, what).toEqual(expected);
    }
    // The lean path answered them: none went through the SDK.
    expect(lean.counts.viaSdk - before.viaSdk).toBe(0);
    expect(lean.counts.lean - before.lean).toBeGreaterThan(RUNS * 3);
  });

  it('throws what the SDK throws: a missing stream, a bad iterator, an expired iterator', async () => {
    const before = lean.counts.viaSdk;
    const put = new PutRecordsCommand({ StreamName: 'missing', Records: [{ PartitionKey: 'k', Data: new Uint8Array([1]) }] });
    expect(await thrown(lean.send(put))).toEqual(await thrown(sdk.send(put)));
    const iterator = new GetShardIteratorCommand({ StreamName: 'missing', ShardId: 'shardId-000000000000', ShardIteratorType: 'LATEST' });
    expect(await thrown(lean.send(iterator))).toEqual(await thrown(sdk.send(iterator)));
    const bad = new GetRecordsCommand({ ShardIterator: 'AAAAnot-an-iterator' });
    expect(await thrown(lean.send(bad))).toMatchObject({ name: 'InvalidArgumentException' });
    expect(await thrown(lean.send(bad))).toEqual(await thrown(sdk.send(bad)));
    const badInput = new PutRecordsCommand({ StreamName: STREAM, Records: [{ PartitionKey: '', Data: new Uint8Array([1]) }] });
    expect(await thrown(lean.send(badInput))).toEqual(await thrown(sdk.send(badInput)));

    const it0 = (await lean.send(new GetShardIteratorCommand({ StreamName: STREAM, ShardId: 'shardId-000000000000', ShardIteratorType: 'LATEST' })))
      .ShardIterator!;
    // kinesalite runs in this process: its clock moves 6 minutes on and stands still, so both errors say the same time.
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() + 6 * 60_000 });
    try {
      const expired = new GetRecordsCommand({ ShardIterator: it0 });
      const e = await thrown(lean.send(expired));
      expect(e).toMatchObject({ class: 'ExpiredIteratorException', name: 'ExpiredIteratorException' });
      expect(e).toEqual(await thrown(sdk.send(expired)));
    } finally {
      vi.useRealTimers();
    }
    expect(lean.counts.viaSdk - before).toBe(6);
  });

  it('a throttle: retried as the SDK retries it, then thrown as the SDK throws it; nothing put twice', async () => {
    const proxy = await throttlingProxy(main);
    const viaProxy = { sdk: kinesisClient(proxy.endpoint), lean: new LeanKinesisClient(proxy.endpoint) };
    try {
      await sdk.send(new CreateStreamCommand({ StreamName: 'throttled', ShardCount: 1 }));
      const put = (c: KinesisClient, v: number) =>
        c.send(new PutRecordsCommand({ StreamName: 'throttled', Records: [{ PartitionKey: 'k', Data: new Uint8Array([v]) }] }));
      proxy.throttle.target = 'PutRecords';
      proxy.throttle.remaining = 2;
      const a = await put(viaProxy.sdk, 1);
      proxy.throttle.remaining = 2;
      const b = await put(viaProxy.lean, 2);
      expect(typed({ ...b, $metadata: {} })).toEqual(typed({ ...a, $metadata: {} }));
      expect(proxy.throttle.remaining).toBe(0);
      proxy.throttle.remaining = 1_000;
      const always = [await thrown(put(viaProxy.sdk, 3)), await thrown(put(viaProxy.lean, 4))];
      expect(always[0]).toMatchObject({ class: 'ProvisionedThroughputExceededException', fields: { $fault: { string: 'client' } } });
      expect({ ...(always[1] as object), fields: null }).toEqual({ ...(always[0] as object), fields: null });
      proxy.throttle.remaining = 0;
      const it0 = (await sdk.send(new GetShardIteratorCommand({ StreamName: 'throttled', ShardId: 'shardId-000000000000', ShardIteratorType: 'TRIM_HORIZON' })))
        .ShardIterator;
      const all = (await sdk.send(new GetRecordsCommand({ ShardIterator: it0 }))).Records!.map((r) => Array.from(r.Data!));
      expect(all).toEqual([[1], [2]]);
    } finally {
      viaProxy.sdk.destroy();
      viaProxy.lean.destroy();
      await proxy.close();
    }
  });

  it("routes a stream to its own kinesalite (by name and by its iterators) and gives put notices for the lean path's puts", async () => {
    const routed = 'routed';
    const client = new LeanKinesisClient(main.endpoint);
    const direct = kinesisClient(other.endpoint);
    try {
      routeStream(client, routed, other.endpoint);
      const puts = new PutNotices();
      puts.attach(client);
      const heard: (PutShards | null)[] = [];
      puts.watch(routed, (p) => heard.push(p));
      await client.send(new CreateStreamCommand({ StreamName: routed, ShardCount: 1 }));
      const out = await client.send(new PutRecordsCommand({ StreamName: routed, Records: [{ PartitionKey: 'p', Data: Buffer.from('on other') }] }));
      expect(heard).toEqual([new Map([['shardId-000000000000', out.Records![0]!.SequenceNumber!]])]);
      const it0 = (await client.send(new GetShardIteratorCommand({ StreamName: routed, ShardId: 'shardId-000000000000', ShardIteratorType: 'TRIM_HORIZON' })))
        .ShardIterator!;
      expect(it0.startsWith('cdc-local-routed:')).toBe(true);
      const got = await client.send(new GetRecordsCommand({ ShardIterator: it0 }));
      expect(got.Records!.map((r) => Buffer.from(r.Data!).toString())).toEqual(['on other']);
      expect(got.NextShardIterator!.startsWith('cdc-local-routed:')).toBe(true);
      // The record is on the other kinesalite, and the main one has no such stream.
      const itOther = (
        await direct.send(new GetShardIteratorCommand({ StreamName: routed, ShardId: 'shardId-000000000000', ShardIteratorType: 'TRIM_HORIZON' }))
      ).ShardIterator;
      expect((await direct.send(new GetRecordsCommand({ ShardIterator: itOther }))).Records!.length).toBe(1);
      expect(
        await thrown(sdk.send(new GetShardIteratorCommand({ StreamName: routed, ShardId: 'shardId-000000000000', ShardIteratorType: 'LATEST' }))),
      ).toMatchObject({
        name: 'ResourceNotFoundException',
      });
      expect(client.counts).toEqual({ lean: 3, viaSdk: 0 });
    } finally {
      client.destroy();
      direct.destroy();
    }
  });
});
