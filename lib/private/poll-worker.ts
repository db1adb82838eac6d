/**
 * The poll worker of a `CdcSource` (docs/polling.md): for the tables captured with
 * `CaptureMode.POLL`, a function in the VPC started every minute by a schedule; each invocation
 * runs one pass over the polled tables (paged and paced like the snapshot worker, against the same
 * source budget) and keeps its cursors as control-plane checkpoints. One at a time (reserved
 * concurrency 1). Least privilege: its own checkpoints (read, put), write the raw stream, read the
 * source secrets. Alarm: errors for 15 minutes (the cursors do not move meanwhile).
 */
import { Duration, Size } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import type * as kinesis from 'aws-cdk-lib/aws-kinesis';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type { Construct } from 'constructs';
import { ControlPartition, pollConsumerId } from '../../contracts/control-plane-keys.ts';
import { EnvName } from '../../contracts/env.ts';
import type { IControlPlane } from '../control-plane.ts';
import type { SourceDatabase } from '../source-database.ts';
import { createAlarm } from './alarms.ts';
import type { CdcFunction } from './cdc-function.ts';
import { sourceConnectedFunction, sourceSecrets } from './source-connection.ts';

export interface PollWorkerProps {
  readonly sourceId: string;
  readonly controlPlane: IControlPlane;
  readonly rawStream: kinesis.IStream;
  readonly database: SourceDatabase;
  readonly tableConfig: string;
  /** The polled table ids (for the description). */
  readonly polledTables: string[];
  readonly vpc: ec2.IVpc;
  readonly vpcSubnets: ec2.SubnetSelection;
  readonly securityGroup: ec2.ISecurityGroup;
  readonly alarmsEnabled: boolean;
  readonly alarmActions?: cloudwatch.IAlarmAction[];
}

export function addPollWorker(scope: Construct, props: PollWorkerProps): { fn: lambda.Function; worker: CdcFunction; alarms: cloudwatch.Alarm[] } {
  const budget = props.database.snapshotBudget;
  const worker = sourceConnectedFunction(
    scope,
    'PollWorker',
    {
      handlerName: 'poll-worker',
      description: `Polls ${props.polledTables.length} table(s) of source ${props.sourceId} without log access by their modified-at or version column (${scope.node.path})`,
      serviceName: 'cdc-poll-worker',
      environment: {
        [EnvName.SOURCE_ID]: props.sourceId,
        [EnvName.CONTROL_TABLE]: props.controlPlane.controlPlaneTableName,
        [EnvName.RAW_STREAM]: props.rawStream.streamName,
        [EnvName.TABLE_CONFIG]: props.tableConfig,
        ...(budget ? { [EnvName.SNAPSHOT_BUDGET]: JSON.stringify({ writeLatencyPct: budget.writeLatencyPercent ?? 10, cpuPct: budget.cpuPercent ?? 5 }) } : {}),
      },
      memorySize: Size.mebibytes(512),
      // The handler stops taking pages 60 s before its time is up.
      timeout: Duration.minutes(5),
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets,
      securityGroups: [props.securityGroup],
      // The schedule is the retry: a failed page is read again by the next invocation.
      retryAttempts: 0,
    },
    { database: props.database, secrets: sourceSecrets(props.database) },
  );
  const fn = worker.fn;
  (fn.node.defaultChild as lambda.CfnFunction).reservedConcurrentExecutions = 1;
  // Only its own cursors (checkpoints of consumer poll-<source>).
  props.controlPlane.grantItems(fn, {
    read: [ControlPartition.checkpoint(pollConsumerId(props.sourceId))],
    put: [ControlPartition.checkpoint(pollConsumerId(props.sourceId))],
  });
  props.rawStream.grantWrite(fn);
  new events.Rule(scope, 'PollSchedule', {
    description: `Starts the poll worker of source ${props.sourceId} every minute`,
    schedule: events.Schedule.rate(Duration.minutes(1)),
    targets: [new targets.LambdaFunction(fn, { retryAttempts: 0, maxEventAge: Duration.minutes(1) })],
  });
  const alarms: cloudwatch.Alarm[] = [];
  if (props.alarmsEnabled) {
    alarms.push(
      createAlarm(scope, 'PollErrorsAlarm', {
        nameSuffix: `${props.sourceId}-poll-errors`,
        description: `The poll worker of source ${props.sourceId} has failed for 15 minutes (${scope.node.path}). Its polled tables receive no changes meanwhile; see its log for the named error (docs/polling.md).`,
        metric: fn.metricErrors({ statistic: cloudwatch.Stats.SUM, period: Duration.minutes(1) }),
        threshold: 0,
        evaluationPeriods: 15,
        datapointsToAlarm: 15,
        treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
        actions: props.alarmActions,
      }),
    );
  }
  return { fn, worker, alarms };
}
