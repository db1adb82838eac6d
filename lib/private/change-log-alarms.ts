/**
 * The recommended alarms of a `ChangeLog` (docs/deploy.md, "Alarms"): archive delivery freshness,
 * and, with the archive copier, its iterator age and its on-failure queue.
 */
import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { createAlarm, iteratorAgeMetric, onFailureQueueAlarm } from './alarms.ts';
import { defaultIteratorAgeThreshold } from './stream-consumer.ts';

export interface ChangeLogAlarmsProps {
  readonly actions?: cloudwatch.IAlarmAction[];
  /** Age of the oldest record not yet delivered to the archive, seconds. */
  readonly deliveryFreshness: cloudwatch.IMetric;
  /** @default Duration.hours(1) */
  readonly freshnessThreshold?: Duration;
  /** The stream's retention, from which the copier's iterator-age threshold is derived. */
  readonly retention: Duration;
  /** Undefined without the archive copier. */
  readonly copier?: { readonly fn: lambda.IFunction; readonly deadLetterQueue: sqs.IQueue };
  /** @default - a quarter of `retention` (at most 7 days; 6 hours when `retention` is a token) */
  readonly copierIteratorAgeThreshold?: Duration;
}

/** `ArchiveFreshnessAlarm`, then the copier's `ArchiveCopierIteratorAgeAlarm` and `ArchiveCopierDeadLetterQueueAlarm`. */
export function changeLogAlarms(scope: Construct, props: ChangeLogAlarmsProps): cloudwatch.Alarm[] {
  const threshold = props.freshnessThreshold ?? Duration.hours(1);
  const alarms = [
    createAlarm(scope, 'ArchiveFreshnessAlarm', {
      nameSuffix: `${scope.node.id}-archive-freshness`,
      description:
        `The oldest change-log record not yet archived to S3 is older than ${threshold.toHumanString()} (${scope.node.path}). ` +
        'Check the delivery stream errors (bucket policy, kms key). Records still in the stream are not lost until the stream retention passes.',
      metric: props.deliveryFreshness,
      threshold: threshold.toSeconds(),
      evaluationPeriods: 3,
      datapointsToAlarm: 3,
      // Freshness is reported while there is something to deliver; no data means nothing waits.
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      actions: props.actions,
    }),
  ];
  return props.copier ? [...alarms, ...copierAlarms(scope, props, props.copier)] : alarms;
}

function copierAlarms(scope: Construct, props: ChangeLogAlarmsProps, copier: NonNullable<ChangeLogAlarmsProps['copier']>): cloudwatch.Alarm[] {
  // A token retention: a quarter of the shortest retention Kinesis allows (24 hours), never later than a quarter of the real one.
  const iteratorThreshold = props.copierIteratorAgeThreshold ?? defaultIteratorAgeThreshold(props.retention) ?? Duration.hours(6);
  return [
    createAlarm(scope, 'ArchiveCopierIteratorAgeAlarm', {
      nameSuffix: `${scope.node.id}-archive-copier-iterator-age`,
      description:
        `The archive copier reads change-log records older than ${iteratorThreshold.toHumanString()} (${scope.node.path}): it is stuck or behind (its logs name the batch and the error; S3 or KMS permissions, throttling). ` +
        `Failing batches are retried without limit; records not archived when they expire from the stream (after ${props.retention.toHumanString()}) are a hole that makes rebuilds over it refuse HISTORY_INCOMPLETE.`,
      metric: iteratorAgeMetric(copier.fn),
      threshold: iteratorThreshold.toMilliseconds(),
      evaluationPeriods: 5,
      datapointsToAlarm: 5,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      actions: props.actions,
    }),
    onFailureQueueAlarm(scope, 'ArchiveCopierDeadLetterQueueAlarm', {
      nameSuffix: `${scope.node.id}-archive-copier-dead-letter-queue`,
      description:
        `The event source mapping of the archive copier gave up change-log records (${scope.node.path}); each message names the shard and sequence numbers. ` +
        'They are missing from the by-table archive: rebuilds over them are refused as a history hole. With the default settings nothing is given up, so the mapping was changed.',
      queue: copier.deadLetterQueue,
      actions: props.actions,
    }),
  ];
}
