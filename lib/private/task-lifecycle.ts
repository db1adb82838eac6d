/**
 * The lifecycle of a `CdcSource`'s replication task (docs/deploy.md): one function behind three
 * custom resources. `ColumnRules` refuses a mask or exclude added to a live table without
 * acknowledgement (docs/masking.md) before anything changes; `ReplicationSlot` prepares the slot
 * before the task exists (the task starts at the slot's position); `TaskStarter` starts, resumes
 * and stops the task around deployments.
 */
import { Aws, CustomResource, Duration, RemovalPolicy, Size, Validations } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type { Construct } from 'constructs';
import { columnRulesConsumerId, ControlPartition } from '../../contracts/control-plane-keys.ts';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import type { CapturedTable } from '../captured-table.ts';
import type { IControlPlane } from '../control-plane.ts';
import type { SourceDatabase } from '../source-database.ts';
import type { CdcFunction } from './cdc-function.ts';
import { TASK_TAG, type TaskConfiguration } from './dms-replication.ts';
import { sourceConnectedFunction } from './source-connection.ts';
import { allowSourceDatabase, type SourceNetwork } from './source-network.ts';
import { columnRulesDocument } from './table-mappings.ts';

export interface SlotLifecycleProps {
  readonly sourceId: string;
  readonly slotName: string;
  readonly tables: CapturedTable[];
  readonly database: SourceDatabase;
  readonly controlPlane: IControlPlane;
  readonly network: SourceNetwork;
  readonly taskIdentifier: string;
  readonly config: TaskConfiguration;
  readonly slotRemovalPolicy: RemovalPolicy;
}

export interface SlotLifecycle {
  /** The lifecycle function (`TaskLifecycle`). */
  readonly function: CdcFunction;
  /** Its stop permission, before the task exists (`TaskLifecyclePolicy`). */
  readonly policy: iam.Policy;
  /** The column-rules check (`ColumnRules`); the functions reading the table configuration change after it. */
  readonly columnRules: CustomResource;
  /** The slot (`ReplicationSlot`). */
  readonly slot: CustomResource;
  /** The slot's position when it was created (or found): the task's start. */
  readonly startPosition: string;
}

/** The lifecycle function, its permissions, the column-rules check and the slot; opens the database port to the source's members. */
export function addSlotLifecycle(scope: Construct, props: SlotLifecycleProps): SlotLifecycle {
  const fn = lifecycleFunction(scope, props);
  const policy = stopPolicy(scope, props.taskIdentifier);
  fn.role.attachInlinePolicy(policy);

  // A mask or exclude added to a captured table without acknowledgeLateRules fails the deployment
  // here, before the slot, the task and the functions change (docs/masking.md).
  const columnRules = new CustomResource(scope, 'ColumnRules', {
    resourceType: 'Custom::CdcColumnRules',
    serviceToken: fn.fn.functionArn,
    serviceTimeout: Duration.minutes(5),
    properties: {
      Action: 'check-column-rules',
      SourceId: props.sourceId,
      ColumnRules: JSON.stringify(columnRulesDocument(props.tables)),
    },
  });
  const slot = new CustomResource(scope, 'ReplicationSlot', {
    resourceType: 'Custom::CdcReplicationSlot',
    serviceToken: fn.fn.functionArn,
    serviceTimeout: Duration.minutes(16),
    properties: {
      Action: 'prepare-slot',
      SecretArn: props.database.secret.secretArn,
      DatabaseName: props.database.databaseName,
      SlotName: props.slotName,
      // The function connects with the TLS of its environment (docs/deploy.md, "TLS to the
      // source"); the mode here makes a change of it run the slot step again.
      Ssl: props.database.sslMode,
      TaskIdentifier: props.taskIdentifier,
      ConfigHash: props.config.configHash,
      RemoveSlotOnDelete: props.slotRemovalPolicy === RemovalPolicy.DESTROY ? 'true' : 'false',
      SourceId: props.sourceId,
    },
  });
  slot.node.addDependency(policy, columnRules);
  // The slot is prepared only after the rules of DMS and of the slot step exist.
  const slotRules = allowSourceDatabase(scope, props.network, props.database, props.sourceId);
  if (slotRules.length > 0) slot.node.addDependency(...slotRules);
  slot.node.addDependency(props.network.subnets.internetConnectivityEstablished);
  return { function: fn, policy, columnRules, slot, startPosition: slot.getAttString('StartPosition') };
}

/** The lifecycle function; its source secret arrives with the slot resource's properties (`SecretArn`). */
function lifecycleFunction(scope: Construct, props: SlotLifecycleProps): CdcFunction {
  const lifecycle = sourceConnectedFunction(
    scope,
    'TaskLifecycle',
    {
      handlerName: 'task-lifecycle',
      description: `Prepares the replication slot and starts, resumes and stops the DMS task of ${scope.node.path}`,
      serviceName: ServiceName.DMS_TASK_LIFECYCLE,
      // The control plane: a slot that replaces another marks the source's tables needs-resnapshot.
      environment: { [EnvName.CONTROL_TABLE]: props.controlPlane.controlPlaneTableName },
      memorySize: Size.mebibytes(256),
      timeout: Duration.minutes(15),
      vpc: props.network.vpc,
      vpcSubnets: props.network.subnetSelection,
      securityGroups: [props.network.lifecycle],
      retryAttempts: 0,
    },
    { database: props.database, secrets: [{ secret: props.database.secret }] },
  );
  // A slot that replaces another marks this source's tables needs-resnapshot, with an audit entry.
  props.controlPlane.grantItems(lifecycle.fn, {
    read: [ControlPartition.source(props.sourceId)],
    put: [ControlPartition.AUDIT],
    update: [ControlPartition.source(props.sourceId)],
  });
  // The column-rules step (docs/masking.md, "Adding a rule to a live table"): the captured tables'
  // current schemas, its own digest of the rules in force; the starter requests re-snapshots.
  props.controlPlane.grantItems(lifecycle.fn, {
    read: [ControlPartition.schemasOf(props.sourceId), ControlPartition.checkpoint(columnRulesConsumerId(props.sourceId))],
    put: [ControlPartition.source(props.sourceId), ControlPartition.checkpoint(columnRulesConsumerId(props.sourceId))],
  });
  return lifecycle;
}

/**
 * The slot step runs before the task exists (the task starts at the slot's position), so its
 * policy cannot name the task's ARN (DMS assigns it at creation); on an update it stops the task
 * before CloudFormation modifies it. It may stop only a task carrying this source's tag
 * (`aws:ResourceTag`, a condition key of the DMS task resource type); the start/stop steps after
 * the task are scoped to the task's ARN (`addTaskStarter`).
 */
function stopPolicy(scope: Construct, taskIdentifier: string): iam.Policy {
  const taskArnPattern = `arn:${Aws.PARTITION}:dms:${Aws.REGION}:${Aws.ACCOUNT_ID}:task:*`;
  const policy = new iam.Policy(scope, 'TaskLifecyclePolicy', {
    statements: [
      // DescribeReplicationTasks supports no resource-level permissions.
      new iam.PolicyStatement({ actions: ['dms:DescribeReplicationTasks'], resources: ['*'] }),
      new iam.PolicyStatement({
        actions: ['dms:StopReplicationTask'],
        resources: [taskArnPattern],
        conditions: { StringEquals: { [`aws:ResourceTag/${TASK_TAG}`]: taskIdentifier } },
      }),
    ],
  });
  Validations.of(policy).acknowledge(
    { id: 'AwsSolutions-IAM5[Resource::*]', reason: 'dms:DescribeReplicationTasks supports no resource-level permissions' },
    {
      id: 'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:dms:<AWS::Region>:<AWS::AccountId>:task:*]',
      reason: `stop only, and only a task tagged ${TASK_TAG} = this source's task identifier: the slot step runs before the task exists, so it cannot name the ARN DMS assigns`,
    },
  );
  return policy;
}

/** Start and stop of the task by its ARN (`TaskControlPolicy`), and the resource that does them (`TaskStarter`). */
export function addTaskStarter(
  scope: Construct,
  props: { sourceId: string; lifecycle: SlotLifecycle; taskArn: string; taskIdentifier: string; config: TaskConfiguration },
): CustomResource {
  const taskControlPolicy = new iam.Policy(scope, 'TaskControlPolicy', {
    statements: [new iam.PolicyStatement({ actions: ['dms:StartReplicationTask', 'dms:StopReplicationTask'], resources: [props.taskArn] })],
  });
  props.lifecycle.function.role.attachInlinePolicy(taskControlPolicy);
  const starter = new CustomResource(scope, 'TaskStarter', {
    resourceType: 'Custom::CdcReplicationTaskStarter',
    serviceToken: props.lifecycle.function.fn.functionArn,
    serviceTimeout: Duration.minutes(16),
    properties: {
      Action: 'start-task',
      TaskArn: props.taskArn,
      TaskIdentifier: props.taskIdentifier,
      ConfigHash: props.config.configHash,
      StartPosition: props.lifecycle.startPosition,
      SourceId: props.sourceId,
    },
  });
  starter.node.addDependency(props.lifecycle.policy, taskControlPolicy);
  return starter;
}
