/**
 * Alarm creation shared by the constructs: a deterministic name and a description, explicit
 * missing-data semantics, injected actions, and the evaluation-window check.
 */
import { Duration, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type { Construct, IConstruct } from 'constructs';
import { fail } from './validate.ts';

export interface CdcAlarmProps {
  /** Name suffix after the stack name, e.g. `orders-cdc-latency-source`. */
  readonly nameSuffix: string;
  readonly description: string;
  readonly metric: cloudwatch.IMetric;
  readonly threshold: number;
  readonly comparisonOperator?: cloudwatch.ComparisonOperator;
  readonly evaluationPeriods: number;
  readonly datapointsToAlarm: number;
  readonly treatMissingData: cloudwatch.TreatMissingData;
  readonly actions?: cloudwatch.IAlarmAction[];
}

/**
 * Marks an alarm as one of the platform's, and whether its construct was given its own actions
 * (`alarmActions`, even an empty list): `PipelineAlarmActions` adds its actions only to platform
 * alarms without their own. A symbol from the global registry, so two copies of the library in one
 * app recognise each other's alarms.
 */
const PLATFORM_ALARM = Symbol.for('cdc-platform.PlatformAlarm');

/** What `createAlarm` recorded on an alarm, or undefined for an alarm the platform did not create. */
export function platformAlarmOf(construct: IConstruct): { readonly ownActions: boolean } | undefined {
  return (construct as unknown as Record<symbol, { ownActions: boolean } | undefined>)[PLATFORM_ALARM];
}

/** Adds `action` to an alarm's ALARM and OK transitions (what every platform alarm notifies). */
export function notifyAlarmAndOk(alarm: cloudwatch.Alarm, action: cloudwatch.IAlarmAction): void {
  alarm.addAlarmAction(action);
  alarm.addOkAction(action);
}

/** Creates the alarm `id` under `scope` and wires the injected actions to ALARM and OK. */
export function createAlarm(scope: Construct, id: string, props: CdcAlarmProps): cloudwatch.Alarm {
  if (props.evaluationPeriods < props.datapointsToAlarm) {
    fail(scope, `alarm ${id}: evaluationPeriods (${props.evaluationPeriods}) must be greater than or equal to datapointsToAlarm (${props.datapointsToAlarm})`);
  }
  const alarm = new cloudwatch.Alarm(scope, id, {
    alarmName: `${Stack.of(scope).stackName}-${props.nameSuffix}`.slice(0, 255),
    alarmDescription: props.description,
    metric: props.metric,
    threshold: props.threshold,
    comparisonOperator: props.comparisonOperator ?? cloudwatch.ComparisonOperator.GREATER_THAN_THRESHOLD,
    evaluationPeriods: props.evaluationPeriods,
    datapointsToAlarm: props.datapointsToAlarm,
    treatMissingData: props.treatMissingData,
  });
  Object.defineProperty(alarm, PLATFORM_ALARM, { value: { ownActions: props.actions !== undefined }, enumerable: false });
  for (const action of props.actions ?? []) notifyAlarmAndOk(alarm, action);
  return alarm;
}

/** `Lambda IteratorAge` of a stream-consuming function: maximum per minute, milliseconds. */
export function iteratorAgeMetric(
  fn: { metric(name: string, props?: cloudwatch.MetricOptions): cloudwatch.Metric },
  props?: cloudwatch.MetricOptions,
): cloudwatch.Metric {
  return fn.metric('IteratorAge', { statistic: cloudwatch.Stats.MAXIMUM, period: Duration.minutes(1), ...props });
}

/**
 * The alarm on an event source mapping's on-failure queue: any message there is a batch the
 * mapping gave up on, so one visible message is enough.
 */
export function onFailureQueueAlarm(
  scope: Construct,
  id: string,
  props: {
    nameSuffix: string;
    description: string;
    queue: { metricApproximateNumberOfMessagesVisible(props?: cloudwatch.MetricOptions): cloudwatch.Metric };
    actions?: cloudwatch.IAlarmAction[];
  },
): cloudwatch.Alarm {
  return createAlarm(scope, id, {
    nameSuffix: props.nameSuffix,
    description: props.description,
    metric: props.queue.metricApproximateNumberOfMessagesVisible({ statistic: cloudwatch.Stats.MAXIMUM, period: Duration.minutes(5) }),
    threshold: 0,
    evaluationPeriods: 1,
    datapointsToAlarm: 1,
    treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    actions: props.actions,
  });
}
