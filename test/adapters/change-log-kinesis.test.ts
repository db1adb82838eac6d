/**
 * The Kinesis change-log publisher against kinesalite. Partial PutRecords failures are injected
 * around the real client: the entries chosen to "fail" are withheld from kinesalite and reported
 * back with an error code, exactly as Kinesis reports them; everything else goes through.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import type { KinesisClient, PutRecordsCommandInput, PutRecordsCommandOutput, PutRecordsResultEntry } from '@aws-sdk/client-kinesis';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import {
  ChangeLogPublishError,
  ChangeLogRecordTooLargeError,
  encodeChangeEvent,
  KinesisChangeLog,
  PUT_RECORDS_MAX_BYTES,
  sha256Hex,
} from '../../lambda/adapters/change-log-kinesis.ts';
import { ENVELOPE_VERSION, partitionKeyOf, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { createStream, readJson } from '../helpers/kinesis-read.ts';

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

function event(i: number, key: number, extra: Record<string, string> = {}): ChangeEvent {
  return {
    v: ENVELOPE_VERSION,
    source: 'shop',
    table: 'public.orders',
    op: 'update',
    key: { id: key },
    after: { id: key, n: i, ...extra },
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

/** All events read back, grouped by key, in stream order (a key lives on one shard). */
async function readByKey(stream: string): Promise<Map<string, ChangeEvent[]>> {
  const byKey = new Map<string, ChangeEvent[]>();
  for (const records of (await readJson<ChangeEvent>(client, stream)).values()) {
    for (const r of records) {
      expect(r.partitionKey).toBe(partitionKeyOf(r.value, sha256Hex));
      const k = JSON.stringify(r.value.key);
      byKey.set(k, [...(byKey.get(k) ?? []), r.value]);
    }
  }
  return byKey;
}

interface Injection {
  calls: number;
  entriesPerCall: number[];
  bytesPerCall: number[];
}

/** A client whose PutRecords calls go through `decide` first: withhold entries (partial failure) or throw. */
function injected(decide: (call: number, count: number) => { fail?: Set<number>; throw?: boolean }): { client: KinesisClient; stats: Injection } {
  const c = kinesisClient(kin.endpoint);
  const stats: Injection = { calls: 0, entriesPerCall: [], bytesPerCall: [] };
  c.middlewareStack.add(
    (next, context) => async (args) => {
      if (context.commandName !== 'PutRecordsCommand') return next(args);
      const input = args.input as PutRecordsCommandInput;
      const entries = input.Records ?? [];
      const call = stats.calls++;
      stats.entriesPerCall.push(entries.length);
      stats.bytesPerCall.push(entries.reduce((n, e) => n + (e.Data?.byteLength ?? 0) + Buffer.byteLength(e.PartitionKey ?? ''), 0));
      const d = decide(call, entries.length);
      if (d.throw) throw Object.assign(new Error('injected: connection reset'), { name: 'NetworkingError' });
      const fail = d.fail ?? new Set<number>();
      if (fail.size === 0) return next(args);
      const kept = entries.filter((_, i) => !fail.has(i));
      const real =
        kept.length > 0 ? ((await next({ ...args, input: { ...input, Records: kept } })) as { output: PutRecordsCommandOutput; response: unknown }) : null;
      const realResults = real?.output.Records ?? [];
      let k = 0;
      const results: PutRecordsResultEntry[] = entries.map((_, i) =>
        fail.has(i) ? { ErrorCode: 'ProvisionedThroughputExceededException', ErrorMessage: 'Rate exceeded for shard (injected)' } : realResults[k++]!,
      );
      return { response: real?.response ?? {}, output: { $metadata: {}, FailedRecordCount: fail.size, Records: results } };
    },
    { step: 'initialize', name: 'injectPutRecordsFailures' },
  );
  return { client: c, stats };
}

describe('KinesisChangeLog', () => {
  it('publishes more than 500 events in several calls, keeping the order of every key', async () => {
    const stream = `log-${randomUUID()}`;
    await createStream(client, stream, 4);
    const { client: c, stats } = injected(() => ({}));
    const events = Array.from({ length: 1234 }, (_, i) => event(i, i % 37));
    await new KinesisChangeLog(c, stream, fast).publish(events);
    expect(stats.entriesPerCall).toEqual([500, 500, 234]);
    const byKey = await readByKey(stream);
    expect(byKey.size).toBe(37);
    for (const [k, list] of byKey) {
      expect(list.map((e) => e.position)).toEqual(events.filter((e) => JSON.stringify(e.key) === k).map((e) => e.position));
    }
    c.destroy();
  });

  it('on a partial failure re-sends everything from the first failed entry, so the last copy of each event is in order', async () => {
    const stream = `log-${randomUUID()}`;
    await createStream(client, stream, 2);
    // First call: entries 3, 10 and 11 fail (entries after them succeed); second call: its first entry fails.
    const { client: c, stats } = injected((call) => (call === 0 ? { fail: new Set([3, 10, 11]) } : call === 1 ? { fail: new Set([0]) } : {}));
    const events = Array.from({ length: 40 }, (_, i) => event(i, i % 3));
    await new KinesisChangeLog(c, stream, fast).publish(events);
    expect(stats.entriesPerCall).toEqual([40, 37, 37]);
    const byKey = await readByKey(stream);
    for (const [k, list] of byKey) {
      const expected = events.filter((e) => JSON.stringify(e.key) === k).map((e) => e.position);
      // Every event arrived.
      expect(new Set(list.map((e) => e.position))).toEqual(new Set(expected));
      // The last copy of each event comes after the last copy of every earlier event.
      const lastCopies = [...new Map(list.map((e, i) => [e.position, i])).entries()].sort((a, b) => a[1] - b[1]).map(([p]) => p);
      expect(lastCopies).toEqual(expected);
      // A consumer that ignores positions lower than or equal to the stored one ends at the last event.
      let stored = '';
      for (const e of list) if (e.position > stored) stored = e.position;
      expect(stored).toBe(expected.at(-1));
    }
    // Entries after the first failure that had succeeded were sent again: duplicates, never gaps.
    const total = [...byKey.values()].reduce((n, l) => n + l.length, 0);
    expect(total).toBe(40 - 3 + 37 - 1 + 37);
    c.destroy();
  });

  it('retries a call that failed as a whole', async () => {
    const stream = `log-${randomUUID()}`;
    await createStream(client, stream, 1);
    const { client: c, stats } = injected((call) => (call < 2 ? { throw: true } : {}));
    const events = Array.from({ length: 10 }, (_, i) => event(i, i));
    await new KinesisChangeLog(c, stream, fast).publish(events);
    expect(stats.calls).toBe(3);
    expect([...(await readByKey(stream)).values()].flat().map((e) => e.position)).toEqual(events.map((e) => e.position));
    c.destroy();
  });

  it('gives up with a named error after the bounded retries, telling how many events are published', async () => {
    const stream = `log-${randomUUID()}`;
    await createStream(client, stream, 1);
    // First call: entries 4.. fail; every later call: all entries fail.
    const { client: c, stats } = injected((call, count) => ({ fail: new Set(Array.from({ length: count }, (_, i) => i).filter((i) => call > 0 || i >= 4)) }));
    const events = Array.from({ length: 10 }, (_, i) => event(i, i));
    const err = await new KinesisChangeLog(c, stream, { ...fast, maxAttempts: 3 }).publish(events).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ChangeLogPublishError);
    const e = err as ChangeLogPublishError;
    expect(e.code).toBe('CHANGE_LOG_PUBLISH_FAILED');
    expect(e.published).toBe(4);
    expect(e.total).toBe(10);
    expect(e.message).toMatch(/failed 3 times in a row; 4 of 10 events are published, the first unpublished is shop\/public.orders@/);
    expect(e.message).toMatch(/ProvisionedThroughputExceededException/);
    expect(stats.calls).toBe(3);
    c.destroy();
  });

  it('keeps each call under 5 MiB', async () => {
    const stream = `log-${randomUUID()}`;
    await createStream(client, stream, 2);
    const { client: c, stats } = injected(() => ({}));
    const big = 'x'.repeat(400 * 1024);
    const events = Array.from({ length: 30 }, (_, i) => event(i, i % 5, { blob: big }));
    await new KinesisChangeLog(c, stream, fast).publish(events);
    expect(stats.calls).toBeGreaterThanOrEqual(3);
    for (const b of stats.bytesPerCall) expect(b).toBeLessThanOrEqual(PUT_RECORDS_MAX_BYTES);
    expect(stats.entriesPerCall.reduce((a, b) => a + b, 0)).toBe(30);
    const byKey = await readByKey(stream);
    expect([...byKey.values()].flat()).toHaveLength(30);
    c.destroy();
  });

  it('refuses an event larger than a record before sending anything', async () => {
    const stream = `log-${randomUUID()}`;
    await createStream(client, stream, 1);
    const events = [event(0, 0), event(1, 1, { blob: 'y'.repeat(1024 * 1024) })];
    const err = await new KinesisChangeLog(client, stream, fast).publish(events).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ChangeLogRecordTooLargeError);
    expect((err as ChangeLogRecordTooLargeError).message).toMatch(
      /shop\/public.orders@00000000000003e900000000 is \d+ bytes as a stream record, above the 1048576-byte limit/,
    );
    expect((await readByKey(stream)).size).toBe(0);
  });

  it('does not retry a request the service refuses as such', async () => {
    const { client: c, stats } = injected(() => ({}));
    const err = await new KinesisChangeLog(c, `missing-${randomUUID()}`, fast).publish([event(0, 0)]).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ChangeLogPublishError);
    expect((err as Error).message).toMatch(/was refused: ResourceNotFoundException/);
    expect(stats.calls).toBe(1);
    c.destroy();
  });
});

describe('encodeChangeEvent', () => {
  it('uses the event partition key, hashing keys that are too long', () => {
    const short = encodeChangeEvent(event(0, 7));
    expect(short.partitionKey).toBe('shop/public.orders/[["id","7"]]');
    expect(JSON.parse(Buffer.from(short.data).toString('utf8'))).toEqual(event(0, 7));
    const long = { ...event(0, 7), key: { id: 'k'.repeat(300) } };
    const encoded = encodeChangeEvent(long);
    expect(encoded.partitionKey).toBe(`shop/${sha256Hex(`shop/public.orders/${JSON.stringify([['id', 'k'.repeat(300)]])}`)}`);
    expect(encoded.partitionKey.length).toBeLessThanOrEqual(256);
  });

  it('sha256Hex is SHA-256', () => {
    expect(sha256Hex('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
  });
});
