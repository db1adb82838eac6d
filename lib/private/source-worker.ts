/**
 * What the two paced workers of a `CdcSource` share, the snapshot worker (docs/snapshot.md) and the
 * poll worker (docs/polling.md): a function in the VPC that reads the source's tables page by page
 * against the source's budget (docs/snapshot.md, "The budget: the backfill yields") and writes them
 * to the raw stream, one invocation at a time, started every minute by a schedule that is also its
 * retry; and the alarm on its errors for 15 minutes.
 */
import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as kinesis from 'aws-cdk-lib/aws-kinesis';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type { Construct } from 'constructs';
import { EnvName } from '../../contracts/env.ts';
import type { IControlPlane } from '../control-plane.ts';
import type { SourceDatabase } from '../source-database.ts';
import { createAlarm } from './alarms.ts';
import type { CdcFunction, CdcFunctionProps } from './cdc-function.ts';
import { snapshotBudgetEnvironment, sourceConnectedFunction, sourceSecrets } from './source-connection.ts';

/** What a paced worker of a source is given (`SnapshotWorkerProps`, `PollWorkerProps`). */
export interface SourceWorkerProps {
  readonly sourceId: string;
  readonly controlPlane: IControlPlane;
  readonly rawStream: kinesis.IStream;
  readonly database: SourceDatabase;
  readonly tableConfig: string;
  readonly vpc: ec2.IVpc;
  readonly vpcSubnets: ec2.SubnetSelection;
  readonly securityGroup: ec2.ISecurityGroup;
  readonly alarmsEnabled: boolean;
  readonly alarmActions?: cloudwatch.IAlarmAction[];
}

/** What sets one worker apart: its handler, description, size and time, and its own variables (after the shared ones). */
export type SourceWorkerFunction = Pick<CdcFunctionProps, 'handlerName' | 'description' | 'serviceName' | 'environment' | 'memorySize' | 'timeout'>;

/**
 * The worker's function `id`: connected to the source with the capture secret (and the replica's),
 * in the VPC behind `securityGroup`, with the source, the control table, the raw stream, the table
 * configuration and the source's budget in its environment; one invocation at a time (reserved
 * concurrency 1), and no retry of its own.
 */
export function sourceWorkerFunction(scope: Construct, id: string, props: SourceWorkerProps, worker: SourceWorkerFunction): CdcFunction {
  const fn = sourceConnectedFunction(
    scope,
    id,
    {
      ...worker,
      environment: {
        [EnvName.SOURCE_ID]: props.sourceId,
        [EnvName.CONTROL_TABLE]: props.controlPlane.controlPlaneTableName,
        [EnvName.RAW_STREAM]: props.rawStream.streamName,
        [EnvName.TABLE_CONFIG]: props.tableConfig,
        ...worker.environment,
        ...snapshotBudgetEnvironment(props.database),
      },
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets,
      securityGroups: [props.securityGroup],
      // The schedule is the retry: what a failed invocation did not finish, the next one reads again.
      retryAttempts: 0,
    },
    { database: props.database, secrets: sourceSecrets(props.database) },
  );
  // One worker per source at a time.
  (fn.fn.node.defaultChild as lambda.CfnFunction).reservedConcurrentExecutions = 1;
  return fn;
}

/**
 * `id`: the worker `name` of the source has failed in each of the last 15 minutes; `meanwhile` says
 * what stands still until it recovers, `doc` where the worker is described.
 */
export function workerErrorsAlarm(
  scope: Construct,
  id: string,
  props: SourceWorkerProps,
  worker: { fn: lambda.IFunction; name: string; meanwhile: string; doc: string },
): cloudwatch.Alarm {
  return createAlarm(scope, id, {
    nameSuffix: `${props.sourceId}-${worker.name}-errors`,
    description: `The ${worker.name} worker of source ${props.sourceId} has failed for 15 minutes (${scope.node.path}). ${worker.meanwhile}; see its log for the named error (${worker.doc}).`,
    metric: worker.fn.metricErrors({ statistic: cloudwatch.Stats.SUM, period: Duration.minutes(1) }),
    threshold: 0,
    evaluationPeriods: 15,
    datapointsToAlarm: 15,
    treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
    actions: props.alarmActions,
  });
}
