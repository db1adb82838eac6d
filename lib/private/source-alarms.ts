/**
 * The recommended alarms of a `CdcSource` (docs/deploy.md, "Alarms"): a
 * discontinuous source history, DMS latency on both sides, the normalizer stuck or giving records
 * up, paused tables and a failing heartbeat writer. The slot, snapshot and poll alarms are made
 * with their functions.
 */
import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { MetricDimension, MetricName } from '../../contracts/metrics.ts';
import { createAlarm, iteratorAgeMetric, onFailureQueueAlarm } from './alarms.ts';
import { platformMetric } from './platform-metric.ts';
import { fail } from './validate.ts';

/** `SourceDiscontinuityAlarm`: a heartbeat missed or went back, or the system identifier or timeline changed. */
export function sourceDiscontinuityAlarm(scope: Construct, sourceId: string, actions?: cloudwatch.IAlarmAction[]): cloudwatch.Alarm {
  return createAlarm(scope, 'SourceDiscontinuityAlarm', {
    nameSuffix: `${sourceId}-source-discontinuity`,
    description:
      `The history of source ${sourceId} is not continuous: a heartbeat was missed or went back, or the source's system identifier or timeline changed (${scope.node.path}). ` +
      "The source's tables were marked needs-resnapshot and sinks hold their events; see docs/failures.md.",
    metric: platformMetric(scope, MetricName.SOURCE_DISCONTINUITIES, { [MetricDimension.SOURCE]: sourceId }),
    threshold: 0,
    evaluationPeriods: 1,
    datapointsToAlarm: 1,
    treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    actions,
  });
}

export interface SourceAlarmsProps {
  readonly sourceId: string;
  readonly actions?: cloudwatch.IAlarmAction[];
  readonly latencyThreshold: Duration;
  readonly cdcLatencySource: cloudwatch.IMetric;
  readonly cdcLatencyTarget: cloudwatch.IMetric;
  /** Undefined when it cannot be derived (a token retention) and was not given. */
  readonly iteratorAgeThreshold?: Duration;
  readonly rawRetention: Duration;
  readonly normalizer: lambda.IFunction;
  readonly normalizerQueue: sqs.IQueue;
  readonly deadLetters: cloudwatch.IMetric;
  readonly tablesPaused: cloudwatch.IMetric;
  readonly heartbeatWriter: lambda.IFunction;
}

/** DMS latency, normalizer and heartbeat alarms. */
export function sourceAlarms(scope: Construct, props: SourceAlarmsProps): cloudwatch.Alarm[] {
  const { sourceId, actions } = props;
  return [
    ...latencyAlarms(scope, props),
    ...normalizerAlarms(scope, props),
    ...[
      createAlarm(scope, 'HeartbeatErrorsAlarm', {
        nameSuffix: `${sourceId}-heartbeat-errors`,
        description:
          `The heartbeat writer of source ${sourceId} has failed for 5 minutes (${scope.node.path}). ` +
          'Without heartbeats the end-to-end lag alarms fire although changes may still flow: check the source connection first.',
        metric: props.heartbeatWriter.metricErrors({ statistic: cloudwatch.Stats.SUM, period: Duration.minutes(1) }),
        threshold: 0,
        evaluationPeriods: 5,
        datapointsToAlarm: 5,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        actions,
      }),
    ],
  ];
}

/** `CdcLatencySourceAlarm`, `CdcLatencyTargetAlarm`. */
function latencyAlarms(scope: Construct, props: SourceAlarmsProps): cloudwatch.Alarm[] {
  const latency = props.latencyThreshold;
  return (
    [
      ['CdcLatencySourceAlarm', props.cdcLatencySource, 'source'],
      ['CdcLatencyTargetAlarm', props.cdcLatencyTarget, 'target'],
    ] as const
  ).map(([alarmId, metric, kind]) =>
    createAlarm(scope, alarmId, {
      nameSuffix: `${props.sourceId}-cdc-latency-${kind}`,
      description:
        `DMS CDCLatency${kind === 'source' ? 'Source' : 'Target'} of source ${props.sourceId} is above ${latency.toHumanString()} for 10 minutes (${scope.node.path}). ` +
        (kind === 'source'
          ? 'DMS is behind reading the WAL: a long transaction, an undersized instance or a source problem; the slot retains WAL meanwhile.'
          : 'DMS is behind writing the raw stream: throttling on the raw stream or an undersized instance.'),
      metric,
      threshold: latency.toSeconds(),
      evaluationPeriods: 2,
      datapointsToAlarm: 2,
      // DMS reports task metrics only while the task runs; a stopped task is caught by the
      // sinks' end-to-end lag alarms, which treat silence as breaching.
      treatMissingData: cloudwatch.TreatMissingData.MISSING,
      actions: props.actions,
    }),
  );
}

/** `NormalizerIteratorAgeAlarm`, `NormalizerDeadLetterQueueAlarm`, `NormalizerDeadLettersAlarm`, `TablesPausedAlarm`. */
function normalizerAlarms(scope: Construct, props: SourceAlarmsProps): cloudwatch.Alarm[] {
  const { sourceId, actions } = props;
  const iteratorThreshold = props.iteratorAgeThreshold;
  if (iteratorThreshold === undefined)
    fail(scope, 'alarmIteratorAgeThreshold is required when the raw stream retention is a token (a quarter of it is not known at synth time)');
  return [
    createAlarm(scope, 'NormalizerIteratorAgeAlarm', {
      nameSuffix: `${sourceId}-normalizer-iterator-age`,
      description:
        `The normalizer of source ${sourceId} reads raw records older than ${iteratorThreshold.toHumanString()} (${scope.node.path}): it is stuck or behind. ` +
        `Failing batches are retried without limit; raw records expire unread after ${props.rawRetention.toHumanString()}.`,
      metric: iteratorAgeMetric(props.normalizer),
      threshold: iteratorThreshold.toMilliseconds(),
      evaluationPeriods: 5,
      datapointsToAlarm: 5,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      actions,
    }),
    onFailureQueueAlarm(scope, 'NormalizerDeadLetterQueueAlarm', {
      nameSuffix: `${sourceId}-normalizer-dead-letter-queue`,
      description:
        `Raw records of source ${sourceId} were given up by the normalizer's event source mapping (${scope.node.path}). ` +
        'The mapping has no retry or age limit, so this means records expired unread; each message names the shard and sequence numbers.',
      queue: props.normalizerQueue,
      actions,
    }),
    countAlarm(
      scope,
      'NormalizerDeadLettersAlarm',
      `${sourceId}-normalizer-dead-letters`,
      `The normalizer of source ${sourceId} dead-lettered records it could not decode; their tables are marked degraded (${scope.node.path}).`,
      props.deadLetters,
      actions,
    ),
    countAlarm(
      scope,
      'TablesPausedAlarm',
      `${sourceId}-tables-paused`,
      `A table of source ${sourceId} was paused by a schema change that needs an operator (${scope.node.path}).`,
      props.tablesPaused,
      actions,
    ),
  ];
}

/** An alarm on any count above zero in one period. */
function countAlarm(
  scope: Construct,
  id: string,
  nameSuffix: string,
  description: string,
  metric: cloudwatch.IMetric,
  actions?: cloudwatch.IAlarmAction[],
): cloudwatch.Alarm {
  return createAlarm(scope, id, {
    nameSuffix,
    description,
    metric,
    threshold: 0,
    evaluationPeriods: 1,
    datapointsToAlarm: 1,
    treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    actions,
  });
}
