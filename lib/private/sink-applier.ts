/**
 * What the two change-log sinks (`WarehouseSink`, `SearchSink`) build alike: the checks of their
 * shared props, the applier's control-plane grants, its consumer of the change log with the replay
 * schedule and the acknowledgement of CDK's key-grant wildcards, and the alarms that say whether
 * the sink is fresh (docs/deploy.md, "7. Alarms").
 */
import { Duration, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type { Construct } from 'constructs';
import { EnvName } from '../../contracts/env.ts';
import type { ICdcSource } from '../cdc-source.ts';
import type { ChangeLogSinkProps } from '../sink-base.ts';
import { createAlarm, iteratorAgeMetric, onFailureQueueAlarm } from './alarms.ts';
import type { CdcFunction } from './cdc-function.ts';
import { encryptLogGroup } from './platform-key.ts';
import { sameChangeLog } from './same-change-log.ts';
import { consumeStream, defaultIteratorAgeThreshold, type StreamConsumer } from './stream-consumer.ts';
import { checkIntegerRange, fail, isKnownDuration, type PropKind } from './validate.ts';

/** The shared props' kinds, for callers without the type checker (`checkPropKinds`). */
export const SINK_PROP_KINDS = {
  controlPlane: 'any',
  changeLog: 'any',
  sources: 'array',
  awsApiEgress: 'any',
  vpcSubnets: 'any',
  sinkId: 'string',
  freshnessTarget: 'any',
  batchSize: 'number',
  retryAttempts: 'number',
  maxRecordAge: 'any',
  parallelizationFactor: 'number',
  alarmsEnabled: 'boolean',
  alarmActions: 'array',
  alarmIteratorAgeThreshold: 'any',
} as const satisfies Record<keyof ChangeLogSinkProps, PropKind>;

/** Checks the shared props; `serves` says what the sink does with a source's tables (`indexes`, `mirrors`). Returns the source ids. */
export function checkSinkProps(scope: Construct, props: ChangeLogSinkProps, serves: string, freshnessTarget: Duration, maxBatchingWindow: Duration): string[] {
  if (props.sources.length === 0) fail(scope, `sources must not be empty; a sink ${serves} the tables of at least one source`);
  const sourceIds = new Set<string>();
  for (const source of props.sources) {
    if (sameChangeLog(source.changeLog, props.changeLog) === false)
      fail(scope, `source ${source.sourceId} (${source.node.path}) publishes to a different change log than this sink reads`);
    if (sourceIds.has(source.sourceId)) fail(scope, `source ${source.sourceId} is listed twice`);
    sourceIds.add(source.sourceId);
  }
  if (isKnownDuration(freshnessTarget)) {
    const freshnessSeconds = freshnessTarget.toSeconds();
    if (freshnessSeconds < 30)
      fail(scope, `freshnessTarget must be at least 30 seconds (heartbeats are 10 seconds apart), got ${freshnessTarget.toHumanString()}`);
    if (isKnownDuration(props.changeLog.retention) && freshnessSeconds >= props.changeLog.retention.toSeconds()) {
      fail(
        scope,
        `freshnessTarget (${freshnessTarget.toHumanString()}) must be shorter than the change-log retention (${props.changeLog.retention.toHumanString()})`,
      );
    }
  }
  checkIntegerRange(scope, 'batchSize', props.batchSize, 1, 10_000);
  checkIntegerRange(scope, 'retryAttempts', props.retryAttempts, -1, 10_000);
  checkIntegerRange(scope, 'parallelizationFactor', props.parallelizationFactor, 1, 10);
  if (isKnownDuration(maxBatchingWindow) && maxBatchingWindow.toSeconds() > 300)
    fail(scope, `maxBatchingWindow must be at most 5 minutes, got ${maxBatchingWindow.toHumanString()}`);
  return [...sourceIds];
}

/** Every minute the applier replays the holds an operator resume released (docs/operations.md); with nothing released it is one query of the sink's progress items. */
function addReplaySchedule(scope: Construct, kind: string, sinkId: string, applier: lambda.IFunction): void {
  new events.Rule(scope, 'ReplaySchedule', {
    description: `Runs the resume replay of ${kind} sink ${sinkId} (${scope.node.path})`,
    schedule: events.Schedule.rate(Duration.minutes(1)),
    targets: [new targets.LambdaFunction(applier, { event: events.RuleTargetInput.fromObject({ cdcReplay: true }), retryAttempts: 0 })],
  });
}

/** CDK's key grants name `kms:GenerateDataKey*` and `kms:ReEncrypt*`; `keys` says which keys they are scoped to. */
function acknowledgeKeyGrants(applier: CdcFunction, keys: string): void {
  Validations.of(applier).acknowledge(
    { id: 'AwsSolutions-IAM5[Action::kms:GenerateDataKey*]', reason: `CDK key grant; scoped to the one key that encrypts ${keys}` },
    { id: 'AwsSolutions-IAM5[Action::kms:ReEncrypt*]', reason: `CDK key grant; scoped to the one key that encrypts ${keys}` },
  );
}

/**
 * The applier's own items in the control plane (its progress, holds and the table states of its
 * sources), its dead letters' whole records under `dead-letters/<sink>/`, and the events stored
 * out of line under `claims/` that it reads back (docs/large-records.md).
 */
export function grantApplierItems(props: ChangeLogSinkProps, applier: lambda.IFunction, sinkId: string, sourceIds: string[]): void {
  props.controlPlane.grantSinkApplier(applier, sinkId, sourceIds);
  props.controlPlane.grantPayloadWrite(applier, `dead-letters/${sinkId}/`);
  props.controlPlane.grantPayloadRead(applier, 'claims/');
}

/** What sets one sink's consumer apart: its kind and id, its batching window, the key of its on-failure queue, and what its key grants cover. */
export interface ChangeLogConsumerOptions {
  /** `warehouse`, `search`. */
  readonly kind: string;
  readonly sinkId: string;
  readonly maxBatchingWindow: Duration;
  readonly deadLetterQueueEncryptionKey?: kms.IKey;
  /** The keys CDK's key grants of the applier are scoped to, for the acknowledgement. */
  readonly keys: string;
}

/**
 * The applier's event source mapping on the change log with the sink's stream settings (batch of
 * 1000, parallelization 1 by default) and its on-failure queue; its log group on the platform's key
 * (docs/deploy.md, "Keys"), the resume replay's schedule, and the acknowledgement of CDK's key grants.
 */
export function consumeChangeLog(scope: Construct, applier: CdcFunction, props: ChangeLogSinkProps, opts: ChangeLogConsumerOptions): StreamConsumer {
  const consumer = consumeStream(scope, applier.fn, {
    stream: props.changeLog.stream,
    streamRetention: props.changeLog.retention,
    batchSize: props.batchSize ?? 1000,
    maxBatchingWindow: opts.maxBatchingWindow,
    retryAttempts: props.retryAttempts,
    maxRecordAge: props.maxRecordAge,
    parallelizationFactor: props.parallelizationFactor ?? 1,
    deadLetterQueueEncryptionKey: opts.deadLetterQueueEncryptionKey,
  });
  // The applier's holds say whether lanes of one shard may lag one another (docs/operations.md, "How a resume replays").
  applier.fn.addEnvironment(EnvName.PARALLELIZATION_FACTOR, String(props.parallelizationFactor ?? 1));
  if (props.changeLog.encryptionKey) encryptLogGroup(applier.logGroup, props.changeLog.encryptionKey);
  addReplaySchedule(scope, opts.kind, opts.sinkId, applier.fn);
  acknowledgeKeyGrants(applier, opts.keys);
  return consumer;
}

/** What differs between the sinks' alarms: names and the tails of their descriptions. */
export interface SinkAlarmsProps {
  /** `Warehouse`, `Search`. */
  readonly label: string;
  readonly sinkId: string;
  readonly freshnessTarget: Duration;
  readonly consumer: StreamConsumer;
  readonly applier: lambda.IFunction;
  readonly endToEndLag: (source: ICdcSource) => cloudwatch.IMetric;
  readonly deadLetters: (source: ICdcSource) => cloudwatch.IMetric;
  readonly applyErrors: cloudwatch.IMetric;
  /** After `dead-lettered events of source X`. */
  readonly deadLettersWhat: string;
  /** After `has failed to apply batches in each of the last 5 minutes (path);`. */
  readonly applyErrorsCause: string;
  /** Appended to the on-failure queue alarm's description. */
  readonly queueTail: string;
  /** After `reads records older than T (path)`, before the period. */
  readonly iteratorMeaning: string;
  /** Alarms of this sink alone, after the apply-errors alarm. */
  readonly extra?: (scope: Construct) => cloudwatch.Alarm[];
}

/** None when the sink's `alarmsEnabled` is false; else per source: end-to-end lag and dead letters; then apply errors, the sink's own, the on-failure queue and iterator age. */
export function sinkAlarms(scope: Construct, sink: ChangeLogSinkProps, props: SinkAlarmsProps): cloudwatch.Alarm[] {
  if (!(sink.alarmsEnabled ?? true)) return [];
  const { label, sinkId } = props;
  const actions = sink.alarmActions;
  const alarms: cloudwatch.Alarm[] = [];
  for (const source of sink.sources) {
    const sourceId = source.sourceId;
    alarms.push(
      createAlarm(scope, `EndToEndLagAlarm-${sourceId}`, {
        nameSuffix: `${sinkId}-end-to-end-lag-${sourceId}`,
        description:
          `${label} sink ${sinkId} is more than ${props.freshnessTarget.toHumanString()} behind source ${sourceId}, or has had no heartbeat from it, for 5 minutes (${scope.node.path}). ` +
          'Silence counts as breaching: heartbeats arrive every 10 seconds, so a minute without one means capture, the log or the applier has stopped.',
        metric: props.endToEndLag(source),
        threshold: props.freshnessTarget.toMilliseconds(),
        evaluationPeriods: 5,
        datapointsToAlarm: 5,
        // A silent pipeline is a broken one: every minute carries six heartbeats, so a minute
        // without a lag datapoint means no change reached this sink from the source.
        treatMissingData: cloudwatch.TreatMissingData.BREACHING,
        actions,
      }),
      createAlarm(scope, `DeadLettersAlarm-${sourceId}`, {
        nameSuffix: `${sinkId}-dead-letters-${sourceId}`,
        description: `${label} sink ${sinkId} dead-lettered events of source ${sourceId}${props.deadLettersWhat}; their tables are marked degraded (${scope.node.path}).`,
        metric: props.deadLetters(source),
        threshold: 0,
        evaluationPeriods: 1,
        datapointsToAlarm: 1,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        actions,
      }),
    );
  }
  const iteratorThreshold = sink.alarmIteratorAgeThreshold ?? defaultIteratorAgeThreshold(sink.changeLog.retention, props.consumer.maxRecordAge);
  if (iteratorThreshold === undefined)
    fail(scope, 'alarmIteratorAgeThreshold is required when the change-log retention is a token (a quarter of it is not known at synth time)');
  const maxRecordAge = props.consumer.maxRecordAge;
  alarms.push(
    createAlarm(scope, 'ApplyErrorsAlarm', {
      nameSuffix: `${sinkId}-apply-errors`,
      description: `${label} sink ${sinkId} has failed to apply batches in each of the last 5 minutes (${scope.node.path}); ${props.applyErrorsCause}`,
      metric: props.applyErrors,
      threshold: 0,
      evaluationPeriods: 5,
      datapointsToAlarm: 5,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      actions,
    }),
    ...(props.extra ? props.extra(scope) : []),
    onFailureQueueAlarm(scope, 'DeadLetterQueueAlarm', {
      nameSuffix: `${sinkId}-dead-letter-queue`,
      description:
        `Change-log records were given up by the event source mapping of ${label.toLowerCase()} sink ${sinkId} (${scope.node.path}). ` +
        `Each message names the shard and sequence numbers; re-drive them from the change log or its archive.${props.queueTail}`,
      queue: props.consumer.deadLetterQueue,
      actions,
    }),
    createAlarm(scope, 'IteratorAgeAlarm', {
      nameSuffix: `${sinkId}-iterator-age`,
      description:
        `The applier of ${label.toLowerCase()} sink ${sinkId} reads records older than ${iteratorThreshold.toHumanString()} (${scope.node.path})${props.iteratorMeaning}. ` +
        (maxRecordAge
          ? `Records older than ${maxRecordAge.toHumanString()} go to the dead-letter queue.`
          : `Failing batches are retried without limit; records expire unread from the change log after ${sink.changeLog.retention.toHumanString()}.`),
      metric: iteratorAgeMetric(props.applier),
      threshold: iteratorThreshold.toMilliseconds(),
      evaluationPeriods: 5,
      datapointsToAlarm: 5,
      treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
      actions,
    }),
  );
  return alarms;
}
