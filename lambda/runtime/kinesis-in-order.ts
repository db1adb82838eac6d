/**
 * A Kinesis batch processed one record after another, for a workflow that buffers records and
 * publishes them later (the normalizer, lambda/core/capture/normalize.ts).
 *
 * Ordering. Records are processed one after another (`processInParallel: false`). With partial
 * batch responses Lambda checkpoints at the lowest failed sequence number and retries from
 * there, so once a record fails (an infrastructure error: control plane or change log
 * unavailable) every following record of the batch is failed too, and so is every earlier record
 * whose events were still buffered: no later event of a key is ever published before an
 * earlier one that failed.
 */
import { BatchProcessor, EventType, processPartialResponse } from '@aws-lambda-powertools/batch';
import type { Context, KinesisStreamBatchResponse, KinesisStreamEvent, KinesisStreamRecord } from 'aws-lambda';
import { kinesisRecordData } from '../adapters/kinesis-event.ts';
import type { RawRecord } from '../core/capture/normalize.ts';
import { CdcError } from '../core/shared/errors.ts';

/** One invocation's buffering batch: records in `add` order, `flush` after the last. */
export interface InOrderBatch {
  add(raw: RawRecord): Promise<unknown>;
  flush(): Promise<unknown>;
  /** Ordinal (0-based, in `add` order) of the first record whose output is not known to be published, or null. */
  readonly firstUnpublished: number | null;
}

/** A record was not processed because an earlier record of the same batch failed (it is retried after it). */
export class PrecedingRecordFailedError extends CdcError {
  constructor(sequenceNumber: string, failedSequenceNumber: string) {
    super(
      'PRECEDING_RECORD_FAILED',
      `record ${sequenceNumber} not processed: record ${failedSequenceNumber} earlier in the batch failed, and order per key must hold`,
    );
  }
}

/** `<stream>/<shard>/<sequence number>` of a Lambda Kinesis record. */
export function originOf(record: KinesisStreamRecord): string {
  const stream = record.eventSourceARN?.split('/').slice(1).join('/') || record.eventSourceARN || 'stream';
  const shard = record.eventID?.split(':')[0] || 'shard';
  return `${stream}/${shard}/${record.kinesis.sequenceNumber}`;
}

/** Feeds the event's records to `batch` in order and answers Lambda with the records to retry (see the module comment). */
export async function processInOrder(
  event: KinesisStreamEvent,
  context: Context | undefined,
  batch: InOrderBatch,
  logger: { error(message: string, extra: Record<string, unknown>): void },
): Promise<KinesisStreamBatchResponse> {
  // A processor holds the state of one batch. Lambda runs one invocation at a time per
  // environment, but the local event-source poller runs one batch per shard concurrently
  // through the same handler, so each invocation gets its own.
  const processor = new BatchProcessor(EventType.KinesisDataStreams);
  const records = event.Records ?? [];
  const index = new Map(records.map((r, i) => [r.kinesis.sequenceNumber, i]));
  const last = records.length - 1;
  let failedAt: number | null = null;
  let failedFrom: number | null = null;

  const recordHandler = async (record: KinesisStreamRecord): Promise<void> => {
    const i = index.get(record.kinesis.sequenceNumber);
    if (i === undefined) throw new CdcError('INTERNAL', `record ${record.kinesis.sequenceNumber} is not in the batch`);
    if (failedAt !== null) throw new PrecedingRecordFailedError(record.kinesis.sequenceNumber, records[failedAt]!.kinesis.sequenceNumber);
    try {
      await batch.add({ text: kinesisRecordData(record).toString('utf8'), origin: originOf(record) });
      if (i === last) await batch.flush();
    } catch (e) {
      failedAt = i;
      failedFrom = batch.firstUnpublished ?? i;
      logger.error('Record failed; it and every later record of the batch will be retried', {
        sequenceNumber: record.kinesis.sequenceNumber,
        retryFromSequenceNumber: records[failedFrom]?.kinesis.sequenceNumber,
        error: e instanceof Error ? { name: e.name, message: e.message } : String(e),
      });
      throw e;
    }
  };

  const response = await processPartialResponse(event, recordHandler, processor, { context, processInParallel: false });
  if (failedFrom === null) return response;
  // Earlier records whose events were still buffered are retried too; Lambda resumes at the lowest.
  return { batchItemFailures: records.slice(failedFrom).map((r) => ({ itemIdentifier: r.kinesis.sequenceNumber })) };
}
