/**
 * The snapshot worker of a `CdcSource` (docs/snapshot.md): a function in the VPC started every
 * minute by a schedule; each invocation works on pending snapshot chunks for up to ~13 minutes
 * and leaves its cursor and lease in the control plane, so a snapshot runs as long as it needs
 * in Lambda-sized pieces. One at a time (reserved concurrency 1; the lease guards anyway).
 * Least privilege: read/write the control table, write the raw stream, read the source secrets.
 * Alarms: errors for 15 minutes, and no snapshot progress for `stallThreshold`.
 */
import { Duration, Size, Validations } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type { Construct } from 'constructs';
import { catalogConsumerId, ControlPartition } from '../../contracts/control-plane-keys.ts';
import { EnvName } from '../../contracts/env.ts';
import { MetricDimension, MetricName } from '../../contracts/metrics.ts';
import { createAlarm } from './alarms.ts';
import type { CdcFunction } from './cdc-function.ts';
import { startEveryMinute } from './minute-schedule.ts';
import { platformMetric } from './platform-metric.ts';
import { sourceWorkerFunction, workerErrorsAlarm, type SourceWorkerProps } from './source-worker.ts';

export interface SnapshotWorkerProps extends SourceWorkerProps {
  /** `CDC_TABLE_RULES` when the source captures by pattern: the worker then scans the catalog (docs/onboarding.md). */
  readonly tableRules?: string;
  readonly heartbeatSchema: string;
  readonly stallThreshold: Duration;
}

export function addSnapshotWorker(scope: Construct, props: SnapshotWorkerProps): { fn: lambda.Function; worker: CdcFunction; alarms: cloudwatch.Alarm[] } {
  const worker = sourceWorkerFunction(scope, 'SnapshotWorker', props, {
    handlerName: 'snapshot-worker',
    description: `Snapshots the existing rows of the tables of source ${props.sourceId} in paced chunks (${scope.node.path})`,
    serviceName: 'cdc-snapshot-worker',
    environment: {
      ...(props.tableRules ? { [EnvName.TABLE_RULES]: props.tableRules } : {}),
      [EnvName.HEARTBEAT_SCHEMA]: props.heartbeatSchema,
      ...(props.database.instanceIdentifier ? { [EnvName.SNAPSHOT_DB_INSTANCE]: props.database.instanceIdentifier } : {}),
    },
    memorySize: Size.mebibytes(1024),
    // The handler stops taking chunks 90 s before its time is up.
    timeout: Duration.minutes(15),
  });
  const fn = worker.fn;
  // Its source's table records and snapshot states (SOURCE#), schema versions, chunk records; audit appends.
  props.controlPlane.grantItems(fn, {
    // With capture rules, the catalog scan reads the audit log once per cold start for the verdicts so far.
    read: [
      ControlPartition.source(props.sourceId),
      ControlPartition.schemasOf(props.sourceId),
      ControlPartition.snapshotChunksOf(props.sourceId),
      ...(props.tableRules ? [ControlPartition.AUDIT] : []),
    ],
    put: [ControlPartition.source(props.sourceId), ControlPartition.snapshotChunksOf(props.sourceId), ControlPartition.AUDIT],
    update: [ControlPartition.source(props.sourceId)],
  });
  // The catalog types of tables not registered yet, for the normalizer (docs/schema-drift.md, "First sight of a table").
  props.controlPlane.grantItems(fn, {
    read: [ControlPartition.checkpoint(catalogConsumerId(props.sourceId))],
    put: [ControlPartition.checkpoint(catalogConsumerId(props.sourceId))],
  });
  props.rawStream.grantWrite(fn);
  if (props.database.instanceIdentifier) {
    // GetMetricData supports no resource-level permissions.
    worker.role.addToPrincipalPolicy(new iam.PolicyStatement({ actions: ['cloudwatch:GetMetricData'], resources: ['*'] }));
    Validations.of(worker).acknowledge({
      id: 'AwsSolutions-IAM5[Resource::*]',
      reason: 'cloudwatch:GetMetricData has no resource-level permissions; read-only metrics for the snapshot pacer',
    });
  }
  startEveryMinute(
    scope,
    'SnapshotSchedule',
    fn,
    `Starts the snapshot worker of source ${props.sourceId} every minute (it returns at once when nothing is pending)`,
  );

  const alarms: cloudwatch.Alarm[] = [];
  if (props.alarmsEnabled) {
    alarms.push(
      workerErrorsAlarm(scope, 'SnapshotErrorsAlarm', props, {
        fn,
        name: 'snapshot',
        meanwhile: 'Its cursor does not move meanwhile',
        doc: 'docs/snapshot.md',
      }),
      createAlarm(scope, 'SnapshotStalledAlarm', {
        nameSuffix: `${props.sourceId}-snapshot-stalled`,
        description:
          `A snapshot of source ${props.sourceId} has completed no chunk for ${props.stallThreshold.toHumanString()} (${scope.node.path}). ` +
          'Look for a long-running transaction holding the fence (throttle "fenced"), a source over budget (throttle "paused"), or worker errors (docs/snapshot.md).',
        metric: platformMetric(
          scope,
          MetricName.SNAPSHOT_STALL_AGE,
          { [MetricDimension.SOURCE]: props.sourceId },
          { statistic: cloudwatch.Stats.MAXIMUM, period: Duration.minutes(1) },
        ),
        threshold: props.stallThreshold.toSeconds(),
        evaluationPeriods: 3,
        datapointsToAlarm: 3,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        actions: props.alarmActions,
      }),
    );
  }
  return { fn, worker, alarms };
}
