/**
 * Turns Kinesis GetRecords output into the event a Lambda Kinesis event source mapping delivers
 * (`KinesisStreamEvent`), so that the local poller and the tests invoke handlers with exactly
 * the shape they get on AWS: base64 `data`, `eventID` = `<shard id>:<sequence number>`,
 * `approximateArrivalTimestamp` in seconds, `eventSource` `aws:kinesis`.
 */
import type { _Record as KinesisRecord } from '@aws-sdk/client-kinesis';
import type { KinesisStreamEvent, KinesisStreamRecord } from 'aws-lambda';

export interface KinesisEventSource {
  /** ARN of the stream the records were read from. */
  streamArn: string;
  /** Shard the records were read from (`shardId-000000000000`). */
  shardId: string;
  /** @default the region in the stream ARN */
  awsRegion?: string;
  /** Role the mapping invokes with. @default a local placeholder role in the stream's account */
  invokeIdentityArn?: string;
}

const ARN_RE = /^arn:[^:]+:kinesis:([^:]+):(\d+):stream\/.+$/;

/** Builds the Lambda event for records read from one shard, in the order given. */
export function toKinesisStreamEvent(records: readonly KinesisRecord[], source: KinesisEventSource): KinesisStreamEvent {
  const arn = ARN_RE.exec(source.streamArn);
  if (!arn) throw new Error(`streamArn: expected arn:<partition>:kinesis:<region>:<account>:stream/<name>, got ${JSON.stringify(source.streamArn)}`);
  if (!source.shardId) throw new Error('shardId: expected a shard id, got nothing');
  const region = source.awsRegion ?? arn[1]!;
  const identity = source.invokeIdentityArn ?? `arn:aws:iam::${arn[2]}:role/cdc-local-event-source`;
  return {
    Records: records.map((r, i): KinesisStreamRecord => {
      if (!r.SequenceNumber) throw new Error(`records[${i}].SequenceNumber: missing`);
      if (r.PartitionKey === undefined) throw new Error(`records[${i}].PartitionKey: missing`);
      if (!r.Data) throw new Error(`records[${i}].Data: missing`);
      const arrival = r.ApproximateArrivalTimestamp ?? new Date();
      return {
        kinesis: {
          kinesisSchemaVersion: '1.0',
          partitionKey: r.PartitionKey,
          sequenceNumber: r.SequenceNumber,
          data: Buffer.from(r.Data).toString('base64'),
          approximateArrivalTimestamp: arrival.getTime() / 1000,
        },
        eventSource: 'aws:kinesis',
        eventVersion: '1.0',
        eventID: `${source.shardId}:${r.SequenceNumber}`,
        eventName: 'aws:kinesis:record',
        invokeIdentityArn: identity,
        awsRegion: region,
        eventSourceARN: source.streamArn,
      };
    }),
  };
}

/** The payload bytes of a Lambda Kinesis record (its `data` is base64). */
export function kinesisRecordData(record: KinesisStreamRecord): Buffer {
  return Buffer.from(record.kinesis.data, 'base64');
}
