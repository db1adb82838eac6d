import { Annotations, Duration, Resource, Size, Stack, Validations, type CfnElement, type IResource } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as sfn from 'aws-cdk-lib/aws-stepfunctions';
import * as tasks from 'aws-cdk-lib/aws-stepfunctions-tasks';
import type { Construct } from 'constructs';
import { ControlPartition } from '../contracts/control-plane-keys.ts';
import { EnvName, ServiceName } from '../contracts/env.ts';
import { AwsApiEgress } from './aws-api-egress.ts';
import type { IArchivedChangeLog } from './change-log.ts';
import type { IOperatedControlPlane } from './control-plane.ts';
import { createAlarm } from './private/alarms.ts';
import { CdcFunction } from './private/cdc-function.ts';
import { allowDatabase } from './private/function-network.ts';
import { encryptLogGroup } from './private/platform-key.ts';
import { payloadEnvironment } from './private/payloads.ts';
import { checkRequiredProps, fail } from './private/validate.ts';
import type { IConnectedWarehouseSink } from './warehouse-sink.ts';

/** A sink's rebuild: a `WarehouseRebuild`. */
export interface IWarehouseRebuild extends IResource {
  /** The state machine that runs one rebuild per execution. */
  readonly stateMachine: sfn.IStateMachine;
  /** Rebuild executions that failed (the state machine gave up on a slice); sum per 5 minutes by default. */
  metricRebuildsFailed(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
}

/** Properties of a `WarehouseRebuild`. */
export interface WarehouseRebuildProps {
  /** The control plane: the operator function learns of this rebuild from it, the worker keeps its checkpoint in it. */
  readonly controlPlane: IOperatedControlPlane;
  /** The change log the sink reads, and its archive. */
  readonly changeLog: IArchivedChangeLog;
  /** The sink whose tables this rebuilds. */
  readonly sink: IConnectedWarehouseSink;
  /** VPC from which the worker reaches the warehouse. */
  readonly vpc: ec2.IVpc;
  /**
   * Subnets of the worker.
   * @default - the VPC's private subnets with egress
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /**
   * How the worker reaches AWS APIs (S3, Kinesis, DynamoDB, Secrets Manager) over HTTPS.
   * @default AwsApiEgress.vpcEndpoints()
   */
  readonly awsApiEgress?: AwsApiEgress;
  /**
   * The key prefix of the archive objects the replay reads (docs/rebuild.md, "Archive layout"):
   * an archive in the by-table layout with batch markers.
   * @default - the change log's archive copier prefix (`changeLog.archiveCopierPrefix`,
   * `change-log/`); `changes/` (Firehose's archive, which every rebuild refuses as
   * HISTORY_INCOMPLETE) when the change log has no archive copier
   */
  readonly archivePrefix?: string;
  /**
   * Memory of the worker; the replay holds one table's events in memory to order them, up to 40 %
   * of the heap (a larger history stops with `REPLAY_TOO_LARGE`: docs/rebuild.md, "Limits").
   * @default Size.mebibytes(2048)
   */
  readonly memorySize?: Size;
  /**
   * Timeout of one slice (the state machine invokes the worker again until the rebuild is done).
   * @default Duration.minutes(15)
   */
  readonly sliceTimeout?: Duration;
  /**
   * The longest a rebuild may run before its execution is stopped.
   * @default Duration.days(1)
   */
  readonly timeout?: Duration;
  /**
   * Whether to create the alarm on failed rebuilds.
   * @default true
   */
  readonly alarmsEnabled?: boolean;
  /**
   * Actions for the alarm's ALARM and OK transitions.
   * @default - none
   */
  readonly alarmActions?: cloudwatch.IAlarmAction[];
}

/**
 * Rebuilds tables of a warehouse sink from the change log's archive and stream into a shadow and
 * swaps them in (docs/rebuild.md, "On AWS"): a worker function in the VPC that runs the rebuild
 * in slices (checkpointed in the control plane), and a Standard Step Functions state machine that
 * runs one rebuild per execution by invoking the worker until it is done, retrying a failed slice
 * (it goes on from the checkpoint) and recording the rebuild as failed when it gives up. The
 * operator function starts executions (`cdc rebuild TABLE --stack NAME`) after the worker's
 * check; nothing else may.
 */
export class WarehouseRebuild extends Resource implements IWarehouseRebuild {
  readonly stateMachine: sfn.IStateMachine;
  /** The worker function. */
  readonly worker: lambda.IFunction;
  /** The worker's security group. */
  readonly connections: ec2.Connections;
  /** The alarms this construct created (empty when `alarmsEnabled` is false). */
  readonly alarms: cloudwatch.IAlarm[] = [];

  constructor(scope: Construct, id: string, props: WarehouseRebuildProps) {
    super(scope, id);
    checkRequiredProps(this, 'WarehouseRebuild', props, ['controlPlane', 'changeLog', 'sink', 'vpc']);
    const sink = props.sink;
    const prefix = props.archivePrefix ?? props.changeLog.archiveCopierPrefix ?? 'changes/';
    if (props.archivePrefix === undefined && props.changeLog.archiveCopierPrefix === undefined) {
      Annotations.of(this).addWarningV2(
        'cdc:rebuildWithoutArchiveCopier',
        "the change log has no archive copier (archiveCopierEnabled: false), so the rebuild worker reads Firehose's archive under changes/, whose objects it cannot place in the history: every rebuild is refused HISTORY_INCOMPLETE. Enable the copier, or set archivePrefix to an archive in the by-table layout (docs/rebuild.md).",
      );
    }
    if (!/^([A-Za-z0-9!_.*'()-]+\/)*$/.test(prefix))
      fail(this, `archivePrefix must be empty or end with '/' (folders of safe key characters), got ${JSON.stringify(prefix)}`);
    const sliceTimeout = props.sliceTimeout ?? Duration.minutes(15);
    if (!sliceTimeout.isUnresolved() && (sliceTimeout.toSeconds() < 300 || sliceTimeout.toSeconds() > 900))
      fail(this, `sliceTimeout must be between 5 and 15 minutes (a slice keeps 4 minutes for the swap), got ${sliceTimeout.toHumanString()}`);

    const securityGroup = new ec2.SecurityGroup(this, 'SecurityGroup', {
      vpc: props.vpc,
      description: `Rebuild worker of warehouse sink ${sink.sinkId} (${this.node.path})`,
      allowAllOutbound: false,
    });
    (props.awsApiEgress ?? AwsApiEgress.vpcEndpoints()).applyTo(securityGroup, props.vpc);
    this.connections = new ec2.Connections({ securityGroups: [securityGroup] });
    const wh = sink.connection;
    allowDatabase(this, 'Warehouse', securityGroup, wh, `Rebuild worker of warehouse sink ${sink.sinkId}`, 'the warehouse');

    const worker = new CdcFunction(this, 'Worker', {
      handlerName: 'rebuild-worker',
      description: `Rebuilds tables of warehouse sink ${sink.sinkId} from the archive and the change log, in slices (${this.node.path})`,
      serviceName: ServiceName.REBUILD_WORKER,
      environment: {
        [EnvName.SINK_ID]: sink.sinkId,
        [EnvName.CONTROL_TABLE]: props.controlPlane.controlPlaneTableName,
        [EnvName.WAREHOUSE_SECRET_ARN]: wh.secret.secretArn,
        [EnvName.WAREHOUSE_SSL_MODE]: wh.sslMode,
        [EnvName.CHANGE_LOG_STREAM]: props.changeLog.stream.streamName,
        [EnvName.ARCHIVE_BUCKET]: props.changeLog.archiveBucket.bucketName,
        [EnvName.ARCHIVE_PREFIX]: prefix,
        ...payloadEnvironment(props.controlPlane),
      },
      memorySize: props.memorySize ?? Size.mebibytes(2048),
      timeout: sliceTimeout,
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      securityGroups: [securityGroup],
    });
    this.worker = worker.fn;
    wh.secret.grantRead(worker.fn);
    const sources = sink.sources.map((s) => s.sourceId);
    props.controlPlane.grantItems(worker.fn, {
      // Table states and schema versions, the sink's progress, the rebuild slot and runs.
      read: [
        ...sources.flatMap((s) => [ControlPartition.source(s), ControlPartition.schemasOf(s)]),
        ControlPartition.sink(sink.sinkId),
        ControlPartition.rebuilds(sink.sinkId),
      ],
      put: [ControlPartition.rebuilds(sink.sinkId), ControlPartition.AUDIT],
      // The slot's checkpoint; the sink's high-water mark after a swap.
      update: [ControlPartition.rebuilds(sink.sinkId), ControlPartition.sink(sink.sinkId)],
    });
    props.controlPlane.grantPayloadRead(worker.fn, 'claims/');
    props.changeLog.stream.grantRead(worker.fn);
    // Its log group on the platform's key (docs/deploy.md, "Keys").
    if (props.changeLog.encryptionKey) encryptLogGroup(worker.logGroup, props.changeLog.encryptionKey);
    // The archive: list and read under the prefix, decrypt; never write or delete.
    worker.fn.addToRolePolicy(
      new iam.PolicyStatement({
        actions: ['s3:ListBucket'],
        resources: [props.changeLog.archiveBucket.bucketArn],
        conditions: { StringLike: { 's3:prefix': [`${prefix}*`] } },
      }),
    );
    worker.fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['s3:GetObject'], resources: [props.changeLog.archiveBucket.arnForObjects(`${prefix}*`)] }));
    props.changeLog.archiveEncryptionKey.grantDecrypt(worker.fn);
    const archiveResource = props.changeLog.archiveBucket.node.defaultChild;
    if (!archiveResource)
      fail(this, `the archive bucket of the change log (${props.changeLog.node.path}) must be created in this app (a ChangeLog), not imported`);
    const archiveId = Stack.of(this).getLogicalId(archiveResource as unknown as CfnElement);
    Validations.of(worker).acknowledge(
      {
        id: `AwsSolutions-IAM5[Resource::<${archiveId}.Arn>/${prefix}*]`,
        reason: 'reads the archive objects under its prefix only; their keys are written by the archive delivery',
      },
      { id: 'AwsSolutions-IAM5[Action::kms:GenerateDataKey*]', reason: 'CDK key grant; scoped to the one key that encrypts the control plane or secret' },
      { id: 'AwsSolutions-IAM5[Action::kms:ReEncrypt*]', reason: 'CDK key grant; scoped to the one key that encrypts the control plane or secret' },
    );

    // One rebuild per execution: slice until done; a failed slice is retried (it goes on from the
    // checkpoint), and when the retries are spent the rebuild is recorded failed.
    const slice = new tasks.LambdaInvoke(this, 'Slice', {
      lambdaFunction: worker.fn,
      payload: sfn.TaskInput.fromObject({ op: 'slice', id: sfn.JsonPath.stringAt('$.id'), request: sfn.JsonPath.objectAt('$.request') }),
      payloadResponseOnly: true,
      resultPath: '$.result',
      retryOnServiceExceptions: true,
    });
    slice.addRetry({
      errors: [sfn.Errors.ALL],
      interval: Duration.seconds(30),
      backoffRate: 2,
      maxAttempts: 4,
      maxDelay: Duration.minutes(10),
      jitterStrategy: sfn.JitterType.FULL,
    });
    const abandon = new tasks.LambdaInvoke(this, 'Abandon', {
      lambdaFunction: worker.fn,
      payload: sfn.TaskInput.fromObject({
        op: 'abandon',
        id: sfn.JsonPath.stringAt('$.id'),
        request: sfn.JsonPath.objectAt('$.request'),
        error: sfn.JsonPath.objectAt('$.error'),
      }),
      payloadResponseOnly: true,
      resultPath: '$.result',
      retryOnServiceExceptions: true,
    });
    slice.addCatch(
      abandon.next(
        new sfn.Fail(this, 'Failed', {
          error: 'RebuildFailed',
          cause: 'a slice failed after its retries; the run is recorded failed in the control plane (cdc audit)',
        }),
      ),
      { errors: [sfn.Errors.ALL], resultPath: '$.error' },
    );
    const definition = slice.next(
      new sfn.Choice(this, 'Done?').when(sfn.Condition.booleanEquals('$.result.done', true), new sfn.Succeed(this, 'Rebuilt')).otherwise(slice),
    );
    const logGroup = new logs.LogGroup(this, 'Executions', { retention: logs.RetentionDays.THREE_MONTHS });
    // On the same key as the worker's log group (docs/deploy.md, "Keys").
    if (props.changeLog.encryptionKey) encryptLogGroup(logGroup, props.changeLog.encryptionKey);
    this.stateMachine = new sfn.StateMachine(this, 'StateMachine', {
      definitionBody: sfn.DefinitionBody.fromChainable(definition),
      stateMachineType: sfn.StateMachineType.STANDARD,
      timeout: props.timeout ?? Duration.days(1),
      comment: `One rebuild of a table of warehouse sink ${sink.sinkId} per execution (docs/rebuild.md)`,
      logs: { destination: logGroup, level: sfn.LogLevel.ALL, includeExecutionData: false },
      tracingEnabled: true,
    });
    Validations.of(this.stateMachine).acknowledge(
      {
        id: `AwsSolutions-IAM5[Resource::<${Stack.of(this).getLogicalId(worker.fn.node.defaultChild as CfnElement)}.Arn>:*]`,
        reason: 'the Step Functions Lambda task grant covers the worker function and its versions only',
      },
      {
        id: 'AwsSolutions-IAM5[Resource::*]',
        reason: 'X-Ray tracing and the CloudWatch Logs delivery of Step Functions need actions that take no resource (documented by AWS)',
      },
    );
    props.controlPlane.addRebuildWorker(sink.sinkId, worker.fn, this.stateMachine);

    if (props.alarmsEnabled ?? true) {
      this.alarms.push(
        createAlarm(this, 'FailedAlarm', {
          nameSuffix: `${sink.sinkId}-rebuild-failed`,
          description: `A rebuild of a table of warehouse sink ${sink.sinkId} failed (${this.node.path}); the live table is untouched unless the audit entry says the swap was done. cdc audit and the execution's history say why.`,
          metric: this.metricRebuildsFailed(),
          threshold: 0,
          evaluationPeriods: 1,
          datapointsToAlarm: 1,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          actions: props.alarmActions,
        }),
      );
    }
  }

  metricRebuildsFailed(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.stateMachine.metricFailed({ statistic: cloudwatch.Stats.SUM, period: Duration.minutes(5), ...props });
  }
}
