/** GetRecords output (kinesalite) → the Lambda KinesisStreamEvent shape. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PutRecordsCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { kinesisRecordData, toKinesisStreamEvent } from '../../lambda/adapters/kinesis-event.ts';
import { createStream, readShards } from '../helpers/kinesis-read.ts';

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

describe('toKinesisStreamEvent', () => {
  it('builds the event a Kinesis event source mapping delivers', async () => {
    const arn = await createStream(client, 'raw', 1);
    const payloads = ['{"a":1}', 'plain text', 'ünïcödé ✓'];
    await client.send(new PutRecordsCommand({ StreamName: 'raw', Records: payloads.map((p, i) => ({ PartitionKey: `k${i}`, Data: Buffer.from(p) })) }));
    const [shardId, records] = [...(await readShards(client, 'raw')).entries()][0]!;
    const event = toKinesisStreamEvent(records, { streamArn: arn, shardId });
    expect(event.Records).toHaveLength(3);
    event.Records.forEach((r, i) => {
      const src = records[i]!;
      expect(r).toEqual({
        kinesis: {
          kinesisSchemaVersion: '1.0',
          partitionKey: `k${i}`,
          sequenceNumber: src.SequenceNumber,
          data: Buffer.from(payloads[i]!).toString('base64'),
          approximateArrivalTimestamp: src.ApproximateArrivalTimestamp!.getTime() / 1000,
        },
        eventSource: 'aws:kinesis',
        eventVersion: '1.0',
        eventID: `${shardId}:${src.SequenceNumber}`,
        eventName: 'aws:kinesis:record',
        invokeIdentityArn: 'arn:aws:iam::000000000000:role/cdc-local-event-source',
        awsRegion: 'us-east-1',
        eventSourceARN: arn,
      });
      expect(kinesisRecordData(r).toString('utf8')).toBe(payloads[i]);
    });
    // Sequence numbers stay in shard order.
    const seqs = event.Records.map((r) => BigInt(r.kinesis.sequenceNumber));
    expect([...seqs].sort((a, b) => (a < b ? -1 : 1))).toEqual(seqs);
  });

  it('takes an explicit region and role', () => {
    const event = toKinesisStreamEvent(
      [{ SequenceNumber: '1', PartitionKey: 'p', Data: Buffer.from('x'), ApproximateArrivalTimestamp: new Date(1_700_000_000_500) }],
      {
        streamArn: 'arn:aws:kinesis:eu-west-1:123456789012:stream/s',
        shardId: 'shardId-000000000001',
        awsRegion: 'eu-central-1',
        invokeIdentityArn: 'arn:aws:iam::123456789012:role/r',
      },
    );
    expect(event.Records[0]).toMatchObject({
      awsRegion: 'eu-central-1',
      invokeIdentityArn: 'arn:aws:iam::123456789012:role/r',
      eventID: 'shardId-000000000001:1',
    });
    expect(event.Records[0]!.kinesis.approximateArrivalTimestamp).toBe(1_700_000_000.5);
  });

  it('names what is wrong with its input', () => {
    const ok = { SequenceNumber: '1', PartitionKey: 'p', Data: Buffer.from('x') };
    const src = { streamArn: 'arn:aws:kinesis:us-east-1:000000000000:stream/s', shardId: 'shardId-000000000000' };
    expect(() => toKinesisStreamEvent([ok], { ...src, streamArn: 'raw' })).toThrow(/streamArn: expected arn:/);
    expect(() => toKinesisStreamEvent([ok], { ...src, shardId: '' })).toThrow(/shardId/);
    expect(() => toKinesisStreamEvent([ok, { ...ok, SequenceNumber: undefined }], src)).toThrow(/records\[1\].SequenceNumber/);
    expect(() => toKinesisStreamEvent([{ ...ok, Data: undefined }], src)).toThrow(/records\[0\].Data/);
    expect(() => toKinesisStreamEvent([{ ...ok, PartitionKey: undefined }], src)).toThrow(/records\[0\].PartitionKey/);
    expect(toKinesisStreamEvent([], src)).toEqual({ Records: [] });
  });
});
