/**
 * A Kinesis batch processed one record after another, for a workflow that buffers records and
 * publishes them later (the normalizer, lambda/core/capture/normalize.ts).
 *
 * Ordering. Records are processed one after another. With partial batch responses Lambda
 * checkpoints at the lowest failed sequence number and retries from there, so once a record
 * fails (an infrastructure error: control plane or change log unavailable) every following record
 * of the batch is failed too, and so is every earlier record whose events were still buffered: no
 * later event of a key is ever published before an earlier one that failed. When the first
 * record failed (and so every record) the handler throws Powertools' `FullBatchFailureError`, as
 * its batch processor does, so Lambda retries the whole batch. The loop is written here rather
 * than run through that batch processor, whose per-record bookkeeping (three environment reads per
 * record among it) was about a quarter of the normalizer's work per record (docs/performance-log.md,
 * "72. Less work per DMS record in the normalizer, measured by its own benchmark").
 */
import { FullBatchFailureError, UnexpectedBatchTypeError } from '@aws-lambda-powertools/batch';
import type { Context, KinesisStreamBatchResponse, KinesisStreamEvent, KinesisStreamRecord } from 'aws-lambda';
import { kinesisRecordData } from '../adapters/kinesis-event.ts';
import type { RawRecord } from '../core/capture/normalize.ts';
import { CdcError } from '../core/shared/errors.ts';
import { lastAnswer } from '../core/shared/last-answer.ts';

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

/** The stream's name in a record's ARN, read once per run of records with one ARN (a batch's records share it). */
const streamOf = lastAnswer((arn: string | undefined) => arn?.split('/').slice(1).join('/') || arn || 'stream');

/** `<stream>/<shard>/<sequence number>` of a Lambda Kinesis record. */
export function originOf(record: KinesisStreamRecord): string {
  const id = record.eventID;
  const colon = id === undefined ? -1 : id.indexOf(':');
  const shard = (colon >= 0 ? id!.slice(0, colon) : id) || 'shard';
  return `${streamOf(record.eventSourceARN)}/${shard}/${record.kinesis.sequenceNumber}`;
}

/** Feeds the event's records to `batch` in order and answers Lambda with the records to retry (see the module comment). */
export async function processInOrder(
  event: KinesisStreamEvent,
  _context: Context | undefined,
  batch: InOrderBatch,
  logger: { error(message: string, extra: Record<string, unknown>): void },
): Promise<KinesisStreamBatchResponse> {
  const records = event.Records;
  // An event without a list of records is refused as Powertools refuses it.
  if (!Array.isArray(records)) throw new UnexpectedBatchTypeError();
  const last = records.length - 1;
  for (let i = 0; i <= last; i++) {
    const record = records[i]!;
    try {
      await batch.add({ text: kinesisRecordData(record).toString('utf8'), origin: originOf(record) });
      if (i === last) await batch.flush();
    } catch (e) {
      const failedFrom = batch.firstUnpublished ?? i;
      logger.error('Record failed; it and every later record of the batch will be retried', {
        sequenceNumber: record.kinesis.sequenceNumber,
        retryFromSequenceNumber: records[failedFrom]?.kinesis.sequenceNumber,
        error: e instanceof Error ? { name: e.name, message: e.message } : String(e),
      });
      // The first record failed, so every one did (the later ones are not processed: order per key must hold): the whole batch is retried.
      if (i === 0)
        throw new FullBatchFailureError([
          e as Error,
          ...records.slice(1).map((r) => new PrecedingRecordFailedError(r.kinesis.sequenceNumber, record.kinesis.sequenceNumber)),
        ]);
      // Else every record from `failedFrom` on: the failed one, the later ones, and the earlier ones still buffered.
      return { batchItemFailures: records.slice(failedFrom).map((r) => ({ itemIdentifier: r.kinesis.sequenceNumber })) };
    }
  }
  return { batchItemFailures: [] };
}
