/**
 * A Kinesis-consuming function wired with CDC-safe event-source-mapping settings and its
 * on-failure dead-letter queue.
 *
 * - `reportBatchItemFailures`: the handler returns the sequence number of the first record it
 *   could not process; Lambda checkpoints before it and retries from there, so a failure never
 *   re-applies records after the failed one out of order, and never skips it.
 * - `bisectBatchOnError`: a batch that throws is split until the failing record is isolated.
 * - `retryAttempts` and `maxRecordAge` are bounded, so a record that keeps failing ends up in
 *   the dead-letter queue (with shard id and sequence numbers) instead of blocking the shard until
 *   it expires; `maxRecordAge` stays below the stream retention so nothing expires silently.
 * - `parallelizationFactor` 1 by default: one batch per shard at a time.
 * - `startingPosition: TRIM_HORIZON`: a new consumer starts from the oldest record retained.
 */
import { Duration, Validations } from 'aws-cdk-lib';
import * as kinesis from 'aws-cdk-lib/aws-kinesis';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sources from 'aws-cdk-lib/aws-lambda-event-sources';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { fail, halfOf, isKnownDuration, minDuration } from './validate.ts';

/** The event-source-mapping limit on `maxRecordAge`. */
export const MAX_RECORD_AGE_LIMIT = Duration.days(7);

export interface StreamConsumerOptions {
  readonly stream: kinesis.IStream;
  readonly streamRetention: Duration;
  readonly batchSize: number;
  readonly maxBatchingWindow: Duration;
  readonly retryAttempts: number;
  readonly maxRecordAge?: Duration;
  readonly parallelizationFactor: number;
}

export interface StreamConsumer {
  readonly deadLetterQueue: sqs.Queue;
  readonly maxRecordAge: Duration;
  readonly eventSource: sources.KinesisEventSource;
}

/** The default `maxRecordAge`: half the stream retention, at most the 7-day mapping limit; unknown for a token retention. */
export function defaultMaxRecordAge(streamRetention: Duration): Duration | undefined {
  const half = halfOf(streamRetention);
  return half && minDuration(half, MAX_RECORD_AGE_LIMIT);
}

/** Creates `scope/DeadLetterQueue` and the mapping from `opts.stream` to `fn`. */
export function consumeStream(scope: Construct, fn: lambda.Function, opts: StreamConsumerOptions): StreamConsumer {
  const maxRecordAge = opts.maxRecordAge ?? defaultMaxRecordAge(opts.streamRetention);
  if (maxRecordAge === undefined) {
    fail(scope, 'maxRecordAge cannot be derived from a stream retention that is a token (half of it is not known at synth time); give the retention as a known duration or set maxRecordAge');
  }
  if (isKnownDuration(maxRecordAge) && (maxRecordAge.toSeconds() < 60 || maxRecordAge.toSeconds() > MAX_RECORD_AGE_LIMIT.toSeconds())) {
    fail(scope, `maxRecordAge must be between 60 seconds and 7 days, got ${maxRecordAge.toHumanString()}`);
  }
  if (isKnownDuration(maxRecordAge) && isKnownDuration(opts.streamRetention) && maxRecordAge.toSeconds() >= opts.streamRetention.toSeconds()) {
    fail(
      scope,
      `maxRecordAge (${maxRecordAge.toHumanString()}) must be shorter than the stream retention (${opts.streamRetention.toHumanString()}); otherwise a record can expire from the stream before it is dead-lettered`,
    );
  }
  const deadLetterQueue = new sqs.Queue(scope, 'DeadLetterQueue', {
    encryption: sqs.QueueEncryption.SQS_MANAGED,
    enforceSSL: true,
    retentionPeriod: Duration.days(14),
  });
  Validations.of(deadLetterQueue).acknowledge({
    id: 'AwsSolutions-SQS3',
    reason: 'this queue is itself the on-failure destination of a stream event source mapping; it has no further dead-letter queue',
  });
  const eventSource = new sources.KinesisEventSource(opts.stream, {
    startingPosition: lambda.StartingPosition.TRIM_HORIZON,
    batchSize: opts.batchSize,
    maxBatchingWindow: opts.maxBatchingWindow,
    reportBatchItemFailures: true,
    bisectBatchOnError: true,
    retryAttempts: opts.retryAttempts,
    maxRecordAge,
    parallelizationFactor: opts.parallelizationFactor,
    onFailure: new sources.SqsDlq(deadLetterQueue),
  });
  fn.addEventSource(eventSource);
  return { deadLetterQueue, maxRecordAge, eventSource };
}
