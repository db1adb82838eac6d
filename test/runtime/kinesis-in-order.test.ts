/**
 * The ordered Kinesis batch (lambda/runtime/kinesis-in-order.ts): records reach the batch in
 * order, the last one flushes, and after a failure Lambda is told to retry from the first record
 * whose output was not published, never from a later one. Randomized over seeds (seed and count printed).
 */
import type { KinesisStreamEvent } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { originOf, processInOrder, type InOrderBatch } from '../../lambda/runtime/kinesis-in-order.ts';
import type { RawRecord } from '../../lambda/core/capture/normalize.ts';

function eventOf(n: number): KinesisStreamEvent {
  return {
    Records: Array.from({ length: n }, (_, i) => ({
      eventSourceARN: 'arn:aws:kinesis:eu-west-1:1:stream/raw',
      eventID: `shardId-000:${i}`,
      kinesis: { sequenceNumber: String(1000 + i), data: Buffer.from(`r${i}`).toString('base64'), partitionKey: 'k' },
    })),
  } as unknown as KinesisStreamEvent;
}

/** A batch that publishes every `every` records and fails at `failAt` (if any). */
function fakeBatch(failAt: number | null, every: number): InOrderBatch & { added: RawRecord[]; flushed: number } {
  let pending: number | null = null;
  const b = {
    added: [] as RawRecord[],
    flushed: 0,
    get firstUnpublished() {
      return pending;
    },
    async add(raw: RawRecord) {
      const i = b.added.length;
      if (i === failAt) throw new Error(`boom at ${i}`);
      b.added.push(raw);
      pending ??= i;
      if ((i + 1) % every === 0) pending = null;
    },
    async flush() {
      b.flushed++;
      pending = null;
    },
  };
  return b;
}

const silent = { error: () => undefined };

describe('processInOrder', () => {
  it('feeds every record in order with its origin and flushes after the last', async () => {
    const batch = fakeBatch(null, 1000);
    const out = await processInOrder(eventOf(5), undefined, batch, silent);
    expect(out.batchItemFailures).toEqual([]);
    expect(batch.added.map((r) => r.text)).toEqual(['r0', 'r1', 'r2', 'r3', 'r4']);
    expect(batch.added[2]!.origin).toBe('raw/shardId-000/1002');
    expect(batch.flushed).toBe(1);
  });

  it('retries from the first unpublished record, and processes nothing after a failure', async () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1_000_000);
    const runs = 200;
    console.log(`kinesis-in-order: seed ${seed}, ${runs} runs`);
    let s = seed;
    const rand = (n: number): number => ((s = (s * 1103515245 + 12345) % 2 ** 31), s % n);
    for (let run = 0; run < runs; run++) {
      const n = 1 + rand(20);
      const failAt = rand(n);
      const every = 1 + rand(6);
      const batch = fakeBatch(failAt, every);
      if (failAt === 0) {
        // The first record failed, so every one did: the handler throws (Powertools' error), and Lambda retries the whole batch.
        await expect(processInOrder(eventOf(n), undefined, batch, silent)).rejects.toThrow(/All records failed/);
        expect(batch.added).toEqual([]);
        continue;
      }
      const out = await processInOrder(eventOf(n), undefined, batch, silent);
      // Records before the failure were added; none after it.
      expect(batch.added.length).toBe(failAt);
      const published = Math.floor(failAt / every) * every;
      const retried = out.batchItemFailures.map((f) => Number(f.itemIdentifier) - 1000);
      expect(retried).toEqual(Array.from({ length: n - published }, (_, i) => published + i));
    }
  });

  it('refuses an event without a list of records, as Powertools does, and answers an empty list with no failures and no flush', async () => {
    await expect(processInOrder({} as KinesisStreamEvent, undefined, fakeBatch(null, 1), silent)).rejects.toThrow(/Unexpected batch type/);
    const batch = fakeBatch(null, 1);
    expect(await processInOrder({ Records: [] }, undefined, batch, silent)).toEqual({ batchItemFailures: [] });
    expect(batch.flushed).toBe(0);
  });

  it('names the stream, shard and sequence number of a record', () => {
    expect(originOf(eventOf(1).Records[0]!)).toBe('raw/shardId-000/1000');
  });

  it('names them as the plain definition does in any sequence of records, the stream name kept from the last ARN', () => {
    const reference = (r: KinesisStreamEvent['Records'][number]): string =>
      `${r.eventSourceARN?.split('/').slice(1).join('/') || r.eventSourceARN || 'stream'}/${r.eventID?.split(':')[0] || 'shard'}/${r.kinesis.sequenceNumber}`;
    const arns = [undefined, '', 'arn:aws:kinesis:eu-west-1:1:stream/raw', 'arn:aws:kinesis:eu-west-1:1:stream/a/b', 'no-slash', 'arn:x:stream/'];
    const ids = [undefined, '', 'shardId-000:5', 'shardId-001:7', 'nocolon', ':9', 'a:b:c'];
    const seed = Number(process.env.SEED ?? Date.now() % 1_000_000);
    console.log(`originOf: seed ${seed}, 2000 records`);
    let s = seed;
    const rand = (n: number): number => ((s = (s * 1103515245 + 12345) % 2 ** 31), s % n);
    for (let i = 0; i < 2000; i++) {
      const r = {
        eventSourceARN: arns[rand(arns.length)],
        eventID: ids[rand(ids.length)],
        kinesis: { sequenceNumber: String(i) },
      } as unknown as KinesisStreamEvent['Records'][number];
      expect(originOf(r), `record ${i} (seed ${seed}): ${JSON.stringify(r)}`).toBe(reference(r));
    }
  });
});
