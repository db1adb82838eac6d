/**
 * The Lambda shell's per-record work on the critical path (docs/performance-log.md, "Warehouse apply: less Node work per event on the append path"): the record
 * text and origin of each Kinesis record (`changeRecordOf`, which keeps the last stream name it
 * read), and the batch response when no record failed (built without Powertools' per-record pass,
 * so it must equal what Powertools builds).
 */
import { BatchProcessor, EventType, processPartialResponse } from '@aws-lambda-powertools/batch';
import type { KinesisStreamEvent, KinesisStreamRecord } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { toKinesisStreamEvent } from '../../lambda/adapters/kinesis-event.ts';
import type { BatchOutcome } from '../../lambda/core/warehouse/warehouse-apply.ts';
import { changeRecordOf, partialBatchResponse, recordText } from '../../lambda/runtime/sink-batch.ts';
import { rng } from '../helpers/rng.ts';

const kinesisEvent = (stream: string, shard: string, seqs: string[]): KinesisStreamEvent =>
  toKinesisStreamEvent(
    seqs.map((s) => ({ SequenceNumber: s, PartitionKey: 'p', Data: Buffer.from(`{"seq":"${s}","é":"ü"}`, 'utf8') })),
    { streamArn: `arn:aws:kinesis:us-east-1:123456789012:stream/${stream}`, shardId: shard },
  );

const outcome = (failed: string[]): BatchOutcome => ({
  failed,
  reasons: new Map(failed.map((s) => [s, 'broken'])),
  applied: 0,
  held: 0,
  deadLettered: 0,
});

describe('changeRecordOf', () => {
  it('gives each record its text and its own stream, shard and sequence number, when records of different streams follow each other', () => {
    const a = kinesisEvent('log-a', 'shardId-000000000001', ['11', '12']).Records;
    const b = kinesisEvent('log-b', 'shardId-000000000002', ['21']).Records;
    const got = [a[0]!, b[0]!, a[1]!].map(changeRecordOf).map(({ sequenceNumber, origin, text }) => ({ sequenceNumber, origin, text }));
    expect(got).toEqual([
      { sequenceNumber: '11', origin: 'log-a/shardId-000000000001/11', text: '{"seq":"11","é":"ü"}' },
      { sequenceNumber: '21', origin: 'log-b/shardId-000000000002/21', text: '{"seq":"21","é":"ü"}' },
      { sequenceNumber: '12', origin: 'log-a/shardId-000000000001/12', text: '{"seq":"12","é":"ü"}' },
    ]);
  });

  it('names the stream and shard by their defaults when the record lacks its source ARN or event id', () => {
    const r = kinesisEvent('log-a', 'shardId-000000000001', ['31']).Records[0]!;
    const bare = { ...r, eventSourceARN: undefined, eventID: undefined } as unknown as KinesisStreamRecord;
    expect(changeRecordOf(bare).origin).toBe('stream/shard/31');
    const noColon = { ...r, eventID: 'shardId-000000000009' } as KinesisStreamRecord;
    expect(changeRecordOf(noColon).origin).toBe('log-a/shardId-000000000009/31');
  });
});

describe('partialBatchResponse', () => {
  const viaPowertools = (event: KinesisStreamEvent, failed: string[]) =>
    processPartialResponse(
      event,
      async (r: KinesisStreamRecord) => {
        if (failed.includes(r.kinesis.sequenceNumber)) throw new Error('broken');
      },
      new BatchProcessor(EventType.KinesisDataStreams),
      { processInParallel: false },
    );

  it('answers a batch with no failed record as Powertools does (also an empty batch)', async () => {
    for (const seqs of [['1', '2', '3'], ['7'], []]) {
      const event = kinesisEvent('log', 'shardId-000000000000', seqs);
      expect(await partialBatchResponse(event, outcome([]), new BatchProcessor(EventType.KinesisDataStreams))).toEqual(await viaPowertools(event, []));
    }
  });

  it('still reports the failed records through Powertools, and refuses a batch whose every record failed', async () => {
    const event = kinesisEvent('log', 'shardId-000000000000', ['1', '2', '3']);
    const got = await partialBatchResponse(event, outcome(['2', '3']), new BatchProcessor(EventType.KinesisDataStreams));
    expect(got).toEqual({ batchItemFailures: [{ itemIdentifier: '2' }, { itemIdentifier: '3' }] });
    expect(got).toEqual(await viaPowertools(event, ['2', '3']));
    await expect(partialBatchResponse(event, outcome(['1', '2', '3']), new BatchProcessor(EventType.KinesisDataStreams))).rejects.toThrow();
  });
});

describe('recordText', () => {
  it("is Buffer.from(data, 'base64').toString('utf8') over random data, padded or not, malformed, long and short (seed printed)", () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1e9);
    const r = rng(seed);
    const runs = 5000;
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=-_ \n.';
    for (let i = 0; i < runs; i++) {
      // Mostly real records (bytes of UTF-8 text, some invalid sequences, sizes up to 300 KB), some arbitrary text.
      const size = r() < 0.05 ? Math.floor(r() * 300_000) : Math.floor(r() * 600);
      const bytes = Buffer.from(Array.from({ length: size }, () => (r() < 0.9 ? 32 + Math.floor(r() * 95) : Math.floor(r() * 256))));
      let data = bytes.toString('base64');
      if (r() < 0.3) data = data.replace(/=+$/, '');
      if (r() < 0.2) data = Array.from({ length: Math.floor(r() * 50) }, () => alphabet[Math.floor(r() * alphabet.length)]).join('');
      expect(recordText(data), `seed ${seed}, run ${i}: ${data.slice(0, 60)}`).toBe(Buffer.from(data, 'base64').toString('utf8'));
    }
    console.log(`recordText: seed ${seed}, ${runs} records`);
  });
});
