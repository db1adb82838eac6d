/**
 * A Kinesis-consuming function wired with CDC-safe event-source-mapping settings and its
 * on-failure dead-letter queue.
 *
 * - `reportBatchItemFailures`: the handler returns the sequence number of the first record it
 *   could not process; Lambda checkpoints before it and retries from there, so a failure never
 *   re-applies records after the failed one out of order, and never skips it.
 * - `bisectBatchOnError`: a batch that throws is split until the failing record is isolated.
 * - Outages delay, they never skip (docs/deploy.md, "Outages"): by default there is no retry or
 *   record-age limit (`MaximumRetryAttempts` and `MaximumRecordAgeInSeconds` -1, CloudFormation's
 *   "infinite"). The handlers dead-letter records they cannot decode or apply themselves and
 *   report only infrastructure failures (warehouse, DynamoDB, Kinesis unreachable, throttled,
 *   timing out) as batch item failures, so what is retried is what an outage held up; bisect and
 *   the partial-batch response still isolate a failing record. A sink that stays stuck is seen
 *   on the iterator-age and lag alarms, long before its records could expire from the stream.
 *   Bounded limits remain an explicit opt-in (`retryAttempts`, `maxRecordAge`); then a record
 *   past them goes to the on-failure queue (shard id and sequence numbers only), and
 *   `maxRecordAge` must stay below the stream retention.
 * - `parallelizationFactor` 1 by default: one batch per shard at a time.
 * - `startingPosition: TRIM_HORIZON`: a new consumer starts from the oldest record retained.
 */
import { Duration, Validations } from 'aws-cdk-lib';
import type * as kinesis from 'aws-cdk-lib/aws-kinesis';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as lambda from 'aws-cdk-lib/aws-lambda';
import * as sources from 'aws-cdk-lib/aws-lambda-event-sources';
import * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { fail, halfOf, isKnownDuration, minDuration } from './validate.ts';

/** The event-source-mapping limit on `maxRecordAge`. */
export const MAX_RECORD_AGE_LIMIT = Duration.days(7);
/** CloudFormation's value for "no limit" of `MaximumRetryAttempts` and `MaximumRecordAgeInSeconds`. */
export const UNLIMITED = -1;

export interface StreamConsumerOptions {
  readonly stream: kinesis.IStream;
  readonly streamRetention: Duration;
  readonly batchSize: number;
  readonly maxBatchingWindow: Duration;
  /** Retries of a failing batch; -1 (the default) for no limit. */
  readonly retryAttempts?: number;
  /** Age after which a failing record is given up; unset for no limit. */
  readonly maxRecordAge?: Duration;
  readonly parallelizationFactor: number;
  /** Key of the on-failure queue. @default SQS-managed encryption */
  readonly deadLetterQueueEncryptionKey?: kms.IKey;
}

export interface StreamConsumer {
  readonly deadLetterQueue: sqs.Queue;
  /** The record-age limit, or undefined when there is none (the default). */
  readonly maxRecordAge?: Duration;
  readonly eventSource: sources.KinesisEventSource;
}

/**
 * The default iterator-age alarm threshold: a quarter of the stream retention (at most 7 days),
 * so an operator hears of a stuck consumer while three quarters of the retention are left before
 * its oldest unread record would expire from the stream. Unknown for a token retention.
 */
export function defaultIteratorAgeThreshold(streamRetention: Duration, maxRecordAge?: Duration): Duration | undefined {
  if (maxRecordAge) return halfOf(maxRecordAge);
  const half = halfOf(streamRetention);
  const quarter = half && halfOf(half);
  return quarter && minDuration(quarter, MAX_RECORD_AGE_LIMIT);
}

/** Creates `scope/DeadLetterQueue` and the mapping from `opts.stream` to `fn`. */
export function consumeStream(scope: Construct, fn: lambda.Function, opts: StreamConsumerOptions): StreamConsumer {
  const maxRecordAge = opts.maxRecordAge;
  const retryAttempts = opts.retryAttempts ?? UNLIMITED;
  if (maxRecordAge && isKnownDuration(maxRecordAge) && (maxRecordAge.toSeconds() < 60 || maxRecordAge.toSeconds() > MAX_RECORD_AGE_LIMIT.toSeconds())) {
    fail(scope, `maxRecordAge must be between 60 seconds and 7 days, got ${maxRecordAge.toHumanString()}`);
  }
  if (maxRecordAge && isKnownDuration(maxRecordAge) && isKnownDuration(opts.streamRetention) && maxRecordAge.toSeconds() >= opts.streamRetention.toSeconds()) {
    fail(
      scope,
      `maxRecordAge (${maxRecordAge.toHumanString()}) must be shorter than the stream retention (${opts.streamRetention.toHumanString()}); otherwise a record can expire from the stream before it is dead-lettered`,
    );
  }
  const deadLetterQueue = new sqs.Queue(scope, 'DeadLetterQueue', {
    encryption: opts.deadLetterQueueEncryptionKey ? sqs.QueueEncryption.KMS : sqs.QueueEncryption.SQS_MANAGED,
    encryptionMasterKey: opts.deadLetterQueueEncryptionKey,
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
    retryAttempts,
    maxRecordAge,
    parallelizationFactor: opts.parallelizationFactor,
    onFailure: new sources.SqsDlq(deadLetterQueue),
  });
  fn.addEventSource(eventSource);
  if (!maxRecordAge) {
    // The L2 takes no "infinite" record age; written out so the template says it (-1 is also
    // CloudFormation's default, which an omitted property would get).
    const mapping = fn.node.children.filter((c): c is lambda.EventSourceMapping => c instanceof lambda.EventSourceMapping).at(-1);
    if (!mapping) fail(scope, 'the kinesis event source mapping was not created');
    (mapping.node.defaultChild as lambda.CfnEventSourceMapping).maximumRecordAgeInSeconds = UNLIMITED;
  }
  return { deadLetterQueue, maxRecordAge, eventSource };
}
