import { unpackChangeLogRecord } from '../contracts/change-log-record.ts';

/**
 * Reads the change log's records for a consumer of your own (docs/architecture.md, "5.1 The change
 * event"): with `ChangeLogProps.recordAggregation` (the default) a record may be a KPL aggregate
 * of several change events. The platform's consumers, Firehose and the KCL de-aggregate on their
 * own; a plain Lambda consumer or a GetRecords loop calls `eventsOf` for each record.
 */
export class ChangeLogRecords {
  /**
   * The JSON change events (or claim checks, docs/large-records.md) of one change-log record, in
   * order: the record itself when it is plain, the events of an aggregate, or none when the record is
   * an aggregate put for another shard than `shardId` (its events were put again on their own shard).
   * Throws, naming the record, when it starts like an aggregate but is corrupt (bad checksum, truncated).
   *
   * @param data the record's data, base64 (a Lambda Kinesis event's `kinesis.data`)
   * @param shardId the shard it was read from (a Lambda event's `eventID` up to its `:`)
   * @param partitionKey the record's partition key (`kinesis.partitionKey`)
   */
  static eventsOf(data: string, shardId: string, partitionKey: string): string[] {
    const u = unpackChangeLogRecord(Buffer.from(data, 'base64'), partitionKey, shardId, `record of ${shardId}`);
    if (u.kind === 'invalid') throw u.error;
    return u.kind === 'events' ? u.texts : [];
  }

  private constructor() {}
}
