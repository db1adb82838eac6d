/** What the local capture publishes to the raw stream through (local/capture.ts): records, and the Kinesis publisher. */
import type { KinesisClient } from '@aws-sdk/client-kinesis';
import { KinesisChangeLog } from '../lambda/adapters/change-log-kinesis.ts';

/** One record for the raw stream. */
export interface RawRecord {
  partitionKey: string;
  data: string;
  /** `source/table@commitLsn#index`, for error messages. */
  label: string;
}

/** Publishes records in order and resolves only when every one was accepted (retrying throttled ones). */
export type RawPublisher = (records: RawRecord[]) => Promise<void>;

/**
 * The raw-stream publisher on Kinesis: the same ordered, retrying PutRecords publisher the
 * normalizer uses for the change log (a record over 1 MiB is refused before anything is sent).
 */
export function kinesisRawPublisher(kinesis: KinesisClient, stream: string): RawPublisher {
  const log = new KinesisChangeLog(kinesis, stream);
  return (records) => log.publishEncoded(records.map((r) => ({ partitionKey: r.partitionKey, data: Buffer.from(r.data, 'utf8'), label: r.label })));
}
