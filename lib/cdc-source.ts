import { createHash } from 'node:crypto';
import { Annotations, Aws, CustomResource, Duration, Fn, RemovalPolicy, Resource, Size, SizeRoundingBehavior, Token, Validations, type IResource } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as dms from 'aws-cdk-lib/aws-dms';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kinesis from 'aws-cdk-lib/aws-kinesis';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { Construct, type IDependable } from 'constructs';
import { DEFAULT_HEARTBEAT_SCHEMA, EnvName, ServiceName } from '../contracts/env.ts';
import { catalogConsumerId, columnRulesConsumerId, ControlPartition } from '../contracts/control-plane-keys.ts';
import { MetricDimension, MetricName, NORMALIZER_STAGE } from '../contracts/metrics.ts';
import { AwsApiEgress } from './aws-api-egress.ts';
import { allowDatabase, ownSecurityGroup } from './private/function-network.ts';
import { CaptureMode, type CapturedTable } from './captured-table.ts';
import type { IChangeLog } from './change-log.ts';
import type { IControlPlane } from './control-plane.ts';
import { payloadEnvironment } from './private/payloads.ts';
import { createAlarm, iteratorAgeMetric, onFailureQueueAlarm } from './private/alarms.ts';
import { CdcFunction } from './private/cdc-function.ts';
import { sourceConnectedFunction } from './private/source-connection.ts';
import { createPlatformKey, encryptLogGroup } from './private/platform-key.ts';
import { dmsIdentifier } from './private/physical-name.ts';
import { consumeStream, defaultIteratorAgeThreshold } from './private/stream-consumer.ts';
import { columnRulesDocument, compileTableMappings, findTableProblem, tableConfigEntries, tableRuleEntries } from './private/table-mappings.ts';
import { taskSettings } from './private/task-settings.ts';
import { checkIntegerRange, checkKinesisRetention, checkLowerIdent, checkRequiredProps, fail, idFromConstructId, SLOT_NAME } from './private/validate.ts';
import { SslMode, type SourceDatabase } from './source-database.ts';
import { rdsCaCertificate } from './private/rds-ca.ts';
import { platformMetric, searchByTable } from './private/platform-metric.ts';
import { SlotMonitor } from './private/slot-monitor.ts';
import { addSnapshotWorker } from './private/snapshot-worker.ts';
import { addPollWorker } from './private/poll-worker.ts';

/** Which columns DMS puts in the before image of an update. */
export enum BeforeImage {
  /** Primary-key columns only (what PostgreSQL logs without `REPLICA IDENTITY FULL`). */
  PRIMARY_KEY = 'pk-only',
  /** Every column; needs `REPLICA IDENTITY FULL` on the captured tables. */
  ALL_COLUMNS = 'all',
}

/** A captured source as sinks see it: a `CdcSource`, or one imported with `CdcSource.fromCdcSourceAttributes`. */
export interface ICdcSource extends IResource {
  /** The source id (lower-case identifier) in events, metrics and the control plane. */
  readonly sourceId: string;
  /** The change log the source publishes to. */
  readonly changeLog: IChangeLog;
  /** The captured tables. */
  readonly tables: CapturedTable[];
  /** Schema of the source's heartbeat table. */
  readonly heartbeatSchema: string;
}

/** Attributes of a source deployed elsewhere, for `CdcSource.fromCdcSourceAttributes`. */
export interface CdcSourceAttributes {
  /** The source id (as the source's `sourceId`). */
  readonly sourceId: string;
  /** The change log the source publishes to. */
  readonly changeLog: IChangeLog;
  /** The captured tables (as declared on the source). */
  readonly tables: CapturedTable[];
  /**
   * Schema of the source's heartbeat table.
   * @default 'public'
   */
  readonly heartbeatSchema?: string;
  /**
   * ARN of the source's DMS replication task; when given, the imported source has its account and
   * region.
   * @default - the account and region of the stack the source is imported into
   */
  readonly replicationTaskArn?: string;
}

/** Properties of a `CdcSource`. */
export interface CdcSourceProps {
  /** The control plane the normalizer records schema versions and table states in. */
  readonly controlPlane: IControlPlane;
  /** The change log the normalizer publishes to. */
  readonly changeLog: IChangeLog;
  /** VPC of the replication instance and of the functions that reach the database. */
  readonly vpc: ec2.IVpc;
  /**
   * Subnets of the replication instance and the database-facing functions. They need a route to
   * the database and to the Kinesis, Secrets Manager and DMS APIs (NAT or VPC endpoints).
   * @default - the VPC's private subnets with egress
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /** The database to capture. */
  readonly database: SourceDatabase;
  /**
   * How the replication instance and the database-facing functions reach AWS APIs over HTTPS;
   * each has its own security group, which allows nothing else outbound but the database port.
   * @default AwsApiEgress.vpcEndpoints() (HTTPS to the VPC's CIDR block only)
   */
  readonly awsApiEgress?: AwsApiEgress;
  /** The tables to capture, with their column rules. */
  readonly tables: CapturedTable[];
  /**
   * The source id: a lower-case identifier, unique per change log.
   * @default - derived from the construct id (`OrdersDb` → `orders_db`)
   */
  readonly sourceId?: string;
  /**
   * Name of the logical replication slot (plugin `test_decoding`). The slot is created before the
   * replication task if it does not exist, and the task starts from its position.
   * @default - `cdc_<sourceId>`
   */
  readonly slotName?: string;
  /**
   * What happens to the replication slot when this source leaves the stack. A retained slot keeps
   * WAL on the source until it is dropped (see docs/deploy.md).
   * @default RemovalPolicy.RETAIN
   */
  readonly slotRemovalPolicy?: RemovalPolicy;
  /**
   * Whether DMS installs its DDL capture artifacts (an event trigger) on the source, so table
   * changes reach the change log as control records.
   * @default true
   */
  readonly captureDdls?: boolean;
  /**
   * Columns in the before image of updates.
   * @default BeforeImage.PRIMARY_KEY
   */
  readonly beforeImage?: BeforeImage;
  /**
   * Schema of the heartbeat table (`<schema>.cdc_heartbeat`) on the source.
   * @default 'public'
   */
  readonly heartbeatSchema?: string;
  /**
   * The WAL the source's owners agree the capture slot may hold back. The slot monitor measures
   * headroom against it (and against `max_slot_wal_keep_size`, whichever is smaller) and alarms
   * when 80% of it is retained. Keep it below `max_slot_wal_keep_size` and the free disk.
   * @default Size.gibibytes(10)
   */
  readonly slotWalBudget?: Size;
  /**
   * DMS replication instance class.
   * @default 'dms.c5.large'
   */
  readonly replicationInstanceClass?: string;
  /**
   * DMS engine version (3.5.4 or later: data masking needs it).
   * @default '3.5.4'
   */
  readonly replicationEngineVersion?: string;
  /**
   * Storage of the replication instance (changes spill there while a transaction is open).
   * @default Size.gibibytes(50)
   */
  readonly replicationStorage?: Size;
  /**
   * Whether the replication instance has a standby in a second availability zone.
   * @default false
   */
  readonly multiAz?: boolean;
  /**
   * Largest LOB value (`text`, `json`, `bytea` columns) delivered; a longer value stops the task
   * rather than arriving truncated. At most 1 MiB (Kinesis target limit).
   * @default Size.kibibytes(64)
   */
  readonly maxLobSize?: Size;
  /**
   * Customer-managed key for the raw stream, the replication instance storage, the
   * normalizer's dead-letter queue and the log groups of the source's functions. A key of your own
   * must let CloudWatch Logs of the stack's region use it (docs/deploy.md, "Keys").
   * @default - a new key with rotation enabled (the platform's own key, retained) for the raw stream, the dead-letter queue and the log groups; the AWS managed key `alias/aws/dms` for the replication instance
   */
  readonly encryptionKey?: kms.IKey;
  /**
   * Retention of the raw stream between DMS and the normalizer.
   * @default - the change log's retention
   */
  readonly rawStreamRetention?: Duration;
  /**
   * Provisioned shard count of the raw stream.
   * @default - on-demand capacity mode
   */
  readonly rawStreamShardCount?: number;
  /**
   * Whether to create the recommended alarms.
   * @default true
   */
  readonly alarmsEnabled?: boolean;
  /**
   * Actions for the alarms' ALARM and OK transitions.
   * @default - no actions
   */
  readonly alarmActions?: cloudwatch.IAlarmAction[];
  /**
   * DMS `CDCLatencySource` / `CDCLatencyTarget` above which the latency alarms fire.
   * @default Duration.minutes(5)
   */
  readonly alarmCdcLatencyThreshold?: Duration;
  /**
   * Normalizer iterator age above which its alarm fires: the signal that the normalizer is stuck.
   * @default - a quarter of the raw stream retention
   */
  readonly alarmIteratorAgeThreshold?: Duration;
  /**
   * A running snapshot that completes no chunk for this long raises the snapshot-stalled alarm
   * (docs/snapshot.md).
   * @default Duration.minutes(30)
   */
  readonly alarmSnapshotStallThreshold?: Duration;
}

/** Tag on the replication task naming it (its identifier), for the lifecycle's stop permission. */
const TASK_TAG = 'cdc-platform:task';
/** Heartbeats per writer invocation: one every 10 s across the one-minute schedule. */
const HEARTBEAT_BEATS = 6;

/**
 * Captures one PostgreSQL database with AWS DMS into the change log: a replication subnet group,
 * instance and CDC task (`test_decoding` slot, table mappings compiled from the captured tables,
 * settings that stop rather than drop), a raw stream, the normalizer that turns DMS records into
 * change events, the heartbeat writer (every 10 s), a lifecycle resource that prepares the slot
 * and starts, resumes and stops the task around deployments, and alarms.
 */
export class CdcSource extends Resource implements ICdcSource, ec2.IConnectable {
  /** Refers to a source deployed elsewhere (another stack, account or region), for sinks there. */
  static fromCdcSourceAttributes(scope: Construct, id: string, attrs: CdcSourceAttributes): ICdcSource {
    class Import extends Resource implements ICdcSource {
      readonly sourceId: string;
      readonly changeLog: IChangeLog;
      readonly tables: CapturedTable[];
      readonly heartbeatSchema: string;
      constructor() {
        super(scope, id, attrs?.replicationTaskArn ? { environmentFromArn: attrs.replicationTaskArn } : {});
        checkRequiredProps(this, 'CdcSource.fromCdcSourceAttributes', attrs, ['sourceId', 'changeLog', 'tables']);
        this.sourceId = checkLowerIdent(this, 'sourceId', attrs.sourceId);
        this.changeLog = attrs.changeLog;
        this.tables = [...attrs.tables];
        this.heartbeatSchema = attrs.heartbeatSchema ?? DEFAULT_HEARTBEAT_SCHEMA;
        const problem = findTableProblem(this.tables, this.heartbeatSchema);
        if (problem) fail(this, problem);
      }
    }
    return new Import();
  }

  readonly sourceId: string;
  readonly changeLog: IChangeLog;
  readonly tables: CapturedTable[];
  readonly heartbeatSchema: string;
  /** The logical replication slot name. */
  readonly slotName: string;
  /**
   * The security groups of the replication instance and of each database-facing function (one
   * each): allow them on the database port (`connections.allowTo(db, port)` adds a rule per group).
   */
  readonly connections: ec2.Connections;
  /** The key that encrypts the raw stream, the normalizer's dead-letter queue and the source's log groups. */
  readonly encryptionKey: kms.IKey;
  /** The stream DMS writes to and the normalizer reads. */
  readonly rawStream: kinesis.IStream;
  /** The normalizer function. */
  readonly normalizer: lambda.IFunction;
  /** The heartbeat writer function. */
  readonly heartbeatWriter: lambda.IFunction;
  /** The slot monitor function (every minute, read-only monitoring identity). */
  readonly slotMonitor: lambda.IFunction;
  private readonly slotMonitorMetrics: SlotMonitor;
  /** The snapshot worker function (copies existing rows in paced chunks; docs/snapshot.md). */
  readonly snapshotWorker: lambda.IFunction;
  /** The poll worker function, when a table is captured with `CaptureMode.POLL` (docs/polling.md). */
  readonly pollWorker?: lambda.IFunction;
  /** The source database (the `Reconciler` reads it within the same budget as the snapshot worker). */
  readonly database: SourceDatabase;
  /** Records the normalizer gave up on (shard id and sequence numbers). */
  readonly deadLetterQueue: sqs.IQueue;
  /**
   * Identifier of the DMS replication instance.
   * @attribute
   */
  readonly replicationInstanceIdentifier: string;
  /**
   * Identifier (name) of the DMS replication task.
   * @attribute
   */
  readonly replicationTaskIdentifier: string;
  /**
   * ARN of the DMS replication task.
   * @attribute
   */
  readonly replicationTaskArn: string;
  /** The alarms this construct created (empty when `alarmsEnabled` is false). */
  readonly alarms: cloudwatch.IAlarm[] = [];

  constructor(scope: Construct, id: string, props: CdcSourceProps) {
    super(scope, id);
    checkRequiredProps(this, 'CdcSource', props, ['controlPlane', 'changeLog', 'vpc', 'database', 'tables']);
    this.sourceId = checkLowerIdent(this, 'sourceId', props.sourceId ?? idFromConstructId(id));
    this.changeLog = props.changeLog;
    this.tables = [...props.tables];
    this.heartbeatSchema = props.heartbeatSchema ?? DEFAULT_HEARTBEAT_SCHEMA;
    this.slotName = props.slotName ?? `cdc_${this.sourceId}`;
    const problem = findTableProblem(this.tables, this.heartbeatSchema);
    if (problem) fail(this, problem);
    if (!SLOT_NAME.test(this.slotName)) fail(this, `slotName must match ${SLOT_NAME.source} (postgresql slot names), got ${JSON.stringify(this.slotName)}`);
    const engineVersion = props.replicationEngineVersion ?? '3.5.4';
    if (this.tables.some((t) => t.mask.length > 0) && compareVersions(engineVersion, '3.5.4') < 0) {
      fail(this, `masked columns need dms engine 3.5.4 or later (data masking), got replicationEngineVersion ${engineVersion}`);
    }
    const rawRetention = props.rawStreamRetention ?? props.changeLog.retention;
    checkKinesisRetention(this, 'rawStreamRetention', rawRetention);
    checkIntegerRange(this, 'rawStreamShardCount', props.rawStreamShardCount, 1, 100_000);
    const maxLobSize = props.maxLobSize ?? Size.kibibytes(64);
    const lobKb = maxLobSize.toKibibytes({ rounding: SizeRoundingBehavior.FLOOR });
    if (!Token.isUnresolved(lobKb) && (lobKb < 1 || lobKb > 1024)) fail(this, `maxLobSize must be between 1 KiB and 1 MiB (kinesis target limit), got ${lobKb} KiB`);
    const storage = props.replicationStorage ?? Size.gibibytes(50);
    const storageGiB = storage.toGibibytes({ rounding: SizeRoundingBehavior.FLOOR });
    checkIntegerRange(this, 'replicationStorage (GiB)', storageGiB, 5, 6144);

    const subnets = props.vpc.selectSubnets(props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS });
    // One security group per member in the VPC (docs/deploy.md, "Network"): each sends only HTTPS
    // to AWS APIs and the database port to the database, nothing else.
    const awsApiEgress = props.awsApiEgress ?? AwsApiEgress.vpcEndpoints();
    const securityGroup = ownSecurityGroup(this, 'SecurityGroup', props.vpc, awsApiEgress, `CDC source ${this.sourceId}: DMS replication instance (${this.node.path})`);
    const groupOf = (member: string, what: string): ec2.SecurityGroup =>
      ownSecurityGroup(this, `${member}SecurityGroup`, props.vpc, awsApiEgress, `CDC source ${this.sourceId}: ${what} (${this.node.path})`);
    const lifecycleGroup = groupOf('TaskLifecycle', 'slot preparation and task lifecycle');
    const heartbeatGroup = groupOf('HeartbeatWriter', 'heartbeat writer');
    const slotMonitorGroup = groupOf('SlotMonitor', 'slot monitor');
    const snapshotGroup = groupOf('SnapshotWorker', 'snapshot worker');
    const pollGroup = this.tables.some((t) => t.capture === CaptureMode.POLL) ? groupOf('PollWorker', 'poll worker') : null;
    const memberGroups: ec2.SecurityGroup[] = [securityGroup, lifecycleGroup, heartbeatGroup, slotMonitorGroup, snapshotGroup, ...(pollGroup ? [pollGroup] : [])];
    this.connections = new ec2.Connections({ securityGroups: memberGroups });

    // The platform's own key (docs/deploy.md, "Keys"); retained: the log groups it encrypts are.
    this.encryptionKey = props.encryptionKey ?? createPlatformKey(this, 'Key', RemovalPolicy.RETAIN, `Created by ${this.node.path}: the raw stream, the dead-letter queue and log groups of the source`);
    // Raw stream: DMS output, read only by the normalizer.
    const rawStream = new kinesis.Stream(this, 'RawStream', {
      retentionPeriod: rawRetention,
      streamMode: props.rawStreamShardCount === undefined ? kinesis.StreamMode.ON_DEMAND : kinesis.StreamMode.PROVISIONED,
      shardCount: props.rawStreamShardCount,
      encryption: kinesis.StreamEncryption.KMS,
      encryptionKey: this.encryptionKey,
      // The raw stream is a buffer, not a record (the change log is): it goes with the source.
      removalPolicy: RemovalPolicy.DESTROY,
    });
    Validations.of(rawStream).acknowledge({ id: 'AwsSolutions-KDS3', reason: 'encrypted with the platform\'s own customer-managed key (or the encryptionKey given) instead of alias/aws/kinesis' });
    this.rawStream = rawStream;

    // --- DMS: roles, subnet group, instance, endpoints, task ---
    const targetRole = new iam.Role(this, 'DmsTargetRole', {
      assumedBy: new iam.ServicePrincipal('dms.amazonaws.com'),
      description: `DMS writes the raw stream of ${this.node.path}`,
    });
    rawStream.grantWrite(targetRole);
    rawStream.grant(targetRole, 'kinesis:DescribeStream');
    const secretsRole = new iam.Role(this, 'DmsSecretsRole', {
      // DMS assumes Secrets Manager access roles through its regional principal.
      assumedBy: new iam.CompositePrincipal(new iam.ServicePrincipal(`dms.${Aws.REGION}.amazonaws.com`), new iam.ServicePrincipal('dms.amazonaws.com')),
      description: `DMS reads the source credentials of ${this.node.path}`,
    });
    props.database.secret.grantRead(secretsRole);

    const subnetGroup = new dms.CfnReplicationSubnetGroup(this, 'SubnetGroup', {
      replicationSubnetGroupDescription: `CDC source ${this.sourceId} (${this.node.path})`,
      subnetIds: subnets.subnetIds,
    });
    this.replicationInstanceIdentifier = dmsIdentifier(this, `${this.sourceId}-instance`, 63);
    const instance = new dms.CfnReplicationInstance(this, 'ReplicationInstance', {
      replicationInstanceIdentifier: this.replicationInstanceIdentifier,
      replicationInstanceClass: props.replicationInstanceClass ?? 'dms.c5.large',
      engineVersion,
      allocatedStorage: storageGiB,
      multiAz: props.multiAz ?? false,
      publiclyAccessible: false,
      kmsKeyId: props.encryptionKey?.keyArn,
      replicationSubnetGroupIdentifier: subnetGroup.ref,
      vpcSecurityGroupIds: [securityGroup.securityGroupId],
    });

    const certificate =
      props.database.sslMode !== SslMode.VERIFY_FULL
        ? undefined
        : props.database.caCertificatePem
          ? new dms.CfnCertificate(this, 'CaCertificate', { certificatePem: props.database.caCertificatePem })
          : rdsCaCertificate(this);
    if (props.database.sslMode !== SslMode.VERIFY_FULL) {
      Annotations.of(this).addWarningV2('@cdc-platform/CdcSource:tlsNotVerified', `TLS to source ${this.sourceId} is encrypted but the server certificate is not verified (sslMode ${props.database.sslMode}); use it only for self-signed test servers`);
    }
    const sourceEndpoint = new dms.CfnEndpoint(this, 'SourceEndpoint', {
      endpointType: 'source',
      engineName: 'postgres',
      databaseName: props.database.databaseName,
      // TLS verified by default: the certificate chain against the RDS CAs (or the database's own
      // CA PEM) and the host name. REQUIRE (encrypted, unverified) is an explicit opt-out.
      sslMode: props.database.sslMode,
      certificateArn: certificate?.ref,
      postgreSqlSettings: {
        secretsManagerSecretId: props.database.secret.secretArn,
        secretsManagerAccessRoleArn: secretsRole.roleArn,
        pluginName: 'test-decoding',
        slotName: this.slotName,
        captureDdls: props.captureDdls ?? true,
        // A LOB longer than maxLobSize fails the task instead of being delivered cut short.
        failTasksOnLobTruncation: true,
        // The platform's own heartbeat (every 10 s) keeps the slot moving; DMS's is not needed.
        heartbeatEnable: false,
      },
    });
    sourceEndpoint.node.addDependency(secretsRole);
    const targetEndpoint = new dms.CfnEndpoint(this, 'TargetEndpoint', {
      endpointType: 'target',
      engineName: 'kinesis',
      kinesisSettings: {
        streamArn: rawStream.streamArn,
        serviceAccessRoleArn: targetRole.roleArn,
        // One JSON document per record, no pretty-printing.
        messageFormat: 'json-unformatted',
        // Commit timestamp, stream position, transaction ids: the normalizer builds positions from them.
        includeTransactionDetails: true,
        // Table definitions and DDL as control records: schema drift comes from the stream.
        includeControlDetails: true,
        includeTableAlterOperations: true,
        // Null columns are present as null, so an absent column means "not delivered".
        includeNullAndEmpty: true,
        partitionIncludeSchemaTable: true,
      },
    });
    targetEndpoint.node.addDependency(targetRole);

    const mappings = compileTableMappings(this.tables, this.heartbeatSchema);
    const settings = taskSettings({ beforeImageColumns: props.beforeImage ?? BeforeImage.PRIMARY_KEY, lobMaxSizeKb: lobKb });
    const tableMappingsJson = JSON.stringify(mappings);
    const settingsJson = JSON.stringify(settings);
    const configHash = createHash('sha256').update(tableMappingsJson).update('\n').update(settingsJson).digest('hex').slice(0, 16);
    this.replicationTaskIdentifier = dmsIdentifier(this, `${this.sourceId}-cdc`, 63);

    // --- Lifecycle: slot before the task, start/resume/stop after it ---
    // Its source secret arrives with the slot resource's properties (`SecretArn`).
    const lifecycle = sourceConnectedFunction(this, 'TaskLifecycle', {
      handlerName: 'dms-task-starter',
      description: `Prepares the replication slot and starts, resumes and stops the DMS task of ${this.node.path}`,
      serviceName: ServiceName.DMS_TASK_LIFECYCLE,
      // The control plane: a slot that replaces another marks the source's tables needs-resnapshot.
      environment: { [EnvName.CONTROL_TABLE]: props.controlPlane.controlPlaneTableName },
      memorySize: Size.mebibytes(256),
      timeout: Duration.minutes(15),
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      securityGroups: [lifecycleGroup],
      retryAttempts: 0,
    }, { database: props.database, secrets: [{ secret: props.database.secret }] });
    // The slot step runs before the task exists (the task starts at the slot's position), so its
    // policy cannot name the task's ARN (DMS assigns it at creation); on an update it stops the
    // task before CloudFormation modifies it. It may stop only a task carrying this source's tag
    // (`aws:ResourceTag`, a condition key of the DMS task resource type); the start/stop steps
    // after the task are scoped to the task's ARN (TaskControlPolicy below).
    // A slot that replaces another marks this source's tables needs-resnapshot, with an audit entry.
    props.controlPlane.grantItems(lifecycle.fn, {
      read: [ControlPartition.source(this.sourceId)],
      put: [ControlPartition.AUDIT],
      update: [ControlPartition.source(this.sourceId)],
    });
    // The column-rules step (docs/masking.md, "Adding a rule to a live table"): the captured tables'
    // current schemas, its own digest of the rules in force; the starter requests re-snapshots.
    props.controlPlane.grantItems(lifecycle.fn, {
      read: [ControlPartition.schemasOf(this.sourceId), ControlPartition.checkpoint(columnRulesConsumerId(this.sourceId))],
      put: [ControlPartition.source(this.sourceId), ControlPartition.checkpoint(columnRulesConsumerId(this.sourceId))],
    });
    const taskArnPattern = `arn:${Aws.PARTITION}:dms:${Aws.REGION}:${Aws.ACCOUNT_ID}:task:*`;
    const lifecyclePolicy = new iam.Policy(this, 'TaskLifecyclePolicy', {
      statements: [
        // DescribeReplicationTasks supports no resource-level permissions.
        new iam.PolicyStatement({ actions: ['dms:DescribeReplicationTasks'], resources: ['*'] }),
        new iam.PolicyStatement({
          actions: ['dms:StopReplicationTask'],
          resources: [taskArnPattern],
          conditions: { StringEquals: { [`aws:ResourceTag/${TASK_TAG}`]: this.replicationTaskIdentifier } },
        }),
      ],
    });
    lifecycle.role.attachInlinePolicy(lifecyclePolicy);
    Validations.of(lifecyclePolicy).acknowledge(
      { id: 'AwsSolutions-IAM5[Resource::*]', reason: 'dms:DescribeReplicationTasks supports no resource-level permissions' },
      {
        id: 'AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:dms:<AWS::Region>:<AWS::AccountId>:task:*]',
        reason: `stop only, and only a task tagged ${TASK_TAG} = this source's task identifier: the slot step runs before the task exists, so it cannot name the ARN DMS assigns`,
      },
    );

    // A mask or exclude added to a captured table without acknowledgeLateRules fails the deployment
    // here, before the slot, the task and the functions change (docs/masking.md).
    const columnRules = new CustomResource(this, 'ColumnRules', {
      resourceType: 'Custom::CdcColumnRules',
      serviceToken: lifecycle.fn.functionArn,
      serviceTimeout: Duration.minutes(5),
      properties: {
        Action: 'check-column-rules',
        SourceId: this.sourceId,
        ColumnRules: JSON.stringify(columnRulesDocument(this.tables)),
      },
    });
    const slot = new CustomResource(this, 'ReplicationSlot', {
      resourceType: 'Custom::CdcReplicationSlot',
      serviceToken: lifecycle.fn.functionArn,
      serviceTimeout: Duration.minutes(16),
      properties: {
        Action: 'prepare-slot',
        SecretArn: props.database.secret.secretArn,
        DatabaseName: props.database.databaseName,
        SlotName: this.slotName,
        // The function connects with the TLS of its environment (docs/deploy.md, "TLS to the
        // source"); the mode here makes a change of it run the slot step again.
        Ssl: props.database.sslMode,
        TaskIdentifier: this.replicationTaskIdentifier,
        ConfigHash: configHash,
        RemoveSlotOnDelete: (props.slotRemovalPolicy ?? RemovalPolicy.RETAIN) === RemovalPolicy.DESTROY ? 'true' : 'false',
        SourceId: this.sourceId,
      },
    });
    slot.node.addDependency(lifecyclePolicy, columnRules);
    // The database port, to the database only, for each member that talks to it; the slot is
    // prepared only after the rules of DMS and of the slot step exist.
    const database = { securityGroup: props.database.securityGroup, port: props.database.port };
    const to = (member: string, group: ec2.ISecurityGroup, what: string): IDependable[] =>
      allowDatabase(this, member, group, database, `CDC source ${this.sourceId}: ${what}`, 'the database');
    const slotRules = [...to('Database', securityGroup, 'DMS replication instance'), ...to('TaskLifecycleDatabase', lifecycleGroup, 'slot preparation')];
    if (slotRules.length > 0) slot.node.addDependency(...slotRules);
    to('HeartbeatWriterDatabase', heartbeatGroup, 'heartbeat writer');
    to('SlotMonitorDatabase', slotMonitorGroup, 'slot monitor');
    to('SnapshotWorkerDatabase', snapshotGroup, 'snapshot worker');
    if (pollGroup) to('PollWorkerDatabase', pollGroup, 'poll worker');
    slot.node.addDependency(subnets.internetConnectivityEstablished);

    const task = new dms.CfnReplicationTask(this, 'ReplicationTask', {
      replicationTaskIdentifier: this.replicationTaskIdentifier,
      migrationType: 'cdc',
      replicationInstanceArn: instance.ref,
      sourceEndpointArn: sourceEndpoint.ref,
      targetEndpointArn: targetEndpoint.ref,
      tableMappings: tableMappingsJson,
      replicationTaskSettings: settingsJson,
      // The slot's position when it was created (or found): DMS starts there, natively.
      cdcStartPosition: slot.getAttString('StartPosition'),
      tags: [{ key: TASK_TAG, value: this.replicationTaskIdentifier }],
    });
    this.replicationTaskArn = task.ref;
    const taskControlPolicy = new iam.Policy(this, 'TaskControlPolicy', {
      statements: [new iam.PolicyStatement({ actions: ['dms:StartReplicationTask', 'dms:StopReplicationTask'], resources: [task.ref] })],
    });
    lifecycle.role.attachInlinePolicy(taskControlPolicy);

    const starter = new CustomResource(this, 'TaskStarter', {
      resourceType: 'Custom::CdcReplicationTaskStarter',
      serviceToken: lifecycle.fn.functionArn,
      serviceTimeout: Duration.minutes(16),
      properties: {
        Action: 'start-task',
        TaskArn: task.ref,
        TaskIdentifier: this.replicationTaskIdentifier,
        ConfigHash: configHash,
        StartPosition: slot.getAttString('StartPosition'),
        SourceId: this.sourceId,
      },
    });
    starter.node.addDependency(lifecyclePolicy, taskControlPolicy);

    // --- Normalizer: raw stream → change log ---
    const tableConfig = JSON.stringify(tableConfigEntries(this.tables, this.heartbeatSchema));
    // Capture by pattern (docs/onboarding.md): the rules the normalizer resolves new tables with.
    const ruleEntries = tableRuleEntries(this.tables);
    const tableRules = ruleEntries.length > 0 ? JSON.stringify(ruleEntries) : undefined;
    const normalizer = new CdcFunction(this, 'Normalizer', {
      handlerName: 'normalizer',
      description: `Turns DMS records of source ${this.sourceId} into change events (${this.node.path})`,
      serviceName: ServiceName.NORMALIZER,
      environment: {
        [EnvName.SOURCE_ID]: this.sourceId,
        [EnvName.CONTROL_TABLE]: props.controlPlane.controlPlaneTableName,
        [EnvName.CHANGE_LOG_STREAM]: props.changeLog.changeLogStreamName,
        [EnvName.TABLE_CONFIG]: tableConfig,
        ...(tableRules ? { [EnvName.TABLE_RULES]: tableRules } : {}),
        [EnvName.HEARTBEAT_SCHEMA]: this.heartbeatSchema,
        ...payloadEnvironment(props.controlPlane),
        // A table first seen through a type-less DMS record is registered with the catalog types
        // the snapshot worker publishes (docs/schema-drift.md, "First sight of a table").
        [EnvName.CATALOG_TYPES]: 'published',
      },
      memorySize: Size.mebibytes(1024),
      timeout: Duration.minutes(2),
    });
    this.normalizer = normalizer.fn;
    props.changeLog.grantWrite(normalizer.fn);
    props.changeLog.grant(normalizer.fn, 'kinesis:DescribeStreamSummary');
    props.controlPlane.grantNormalizer(normalizer.fn, this.sourceId);
    props.controlPlane.grantItems(normalizer.fn, { read: [ControlPartition.checkpoint(catalogConsumerId(this.sourceId))] });
    // Its own dead letters' whole records, and its source's events stored out of line (docs/large-records.md).
    props.controlPlane.grantPayloadWrite(normalizer.fn, 'dead-letters/normalizer/');
    props.controlPlane.grantPayloadWrite(normalizer.fn, `claims/${this.sourceId}/`);
    const consumer = consumeStream(normalizer, normalizer.fn, {
      stream: rawStream,
      streamRetention: rawRetention,
      batchSize: 500,
      maxBatchingWindow: Duration.seconds(0),
      // No retry or age limit: an outage of the control plane or the change log delays the
      // normalizer and never skips raw records (docs/deploy.md, "Outages").
      parallelizationFactor: 1,
      deadLetterQueueEncryptionKey: this.encryptionKey,
    });
    this.deadLetterQueue = consumer.deadLetterQueue;

    // --- Heartbeat writer: one beat every 10 s ---
    const heartbeat = sourceConnectedFunction(this, 'HeartbeatWriter', {
      handlerName: 'heartbeat-writer',
      description: `Writes the heartbeat row of source ${this.sourceId} every 10 seconds (${this.node.path})`,
      serviceName: ServiceName.HEARTBEAT_WRITER,
      environment: {
        [EnvName.SOURCE_ID]: this.sourceId,
        [EnvName.HEARTBEAT_SCHEMA]: this.heartbeatSchema,
        [EnvName.HEARTBEAT_BEATS]: String(HEARTBEAT_BEATS),
      },
      memorySize: Size.mebibytes(256),
      // Six beats 10 s apart take 50 s plus connection time; the next invocation starts a minute later.
      timeout: Duration.seconds(80),
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      securityGroups: [heartbeatGroup],
      // A missed minute is replaced by the next one; a late retry would only crowd it.
      retryAttempts: 0,
    }, { database: props.database, secrets: [{ secret: props.database.heartbeatSecret, environmentName: EnvName.SOURCE_SECRET_ARN }] });
    this.heartbeatWriter = heartbeat.fn;
    new events.Rule(this, 'HeartbeatSchedule', {
      description: `Starts the heartbeat writer of source ${this.sourceId} every minute`,
      schedule: events.Schedule.rate(Duration.minutes(1)),
      targets: [new targets.LambdaFunction(heartbeat.fn, { retryAttempts: 0, maxEventAge: Duration.minutes(1) })],
    });

    const slotMonitor = new SlotMonitor(this, 'SlotMonitor', {
      sourceId: this.sourceId,
      slotName: this.slotName,
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      securityGroup: slotMonitorGroup,
      database: props.database,
      walBudget: props.slotWalBudget ?? Size.gibibytes(10),
      alarmsEnabled: props.alarmsEnabled ?? true,
      alarmActions: props.alarmActions,
      controlPlane: props.controlPlane,
    });
    this.slotMonitor = slotMonitor.function.fn;
    this.slotMonitorMetrics = slotMonitor;
    this.alarms.push(...slotMonitor.alarms);
    if (props.alarmsEnabled ?? true) {
      this.alarms.push(
        createAlarm(this, 'SourceDiscontinuityAlarm', {
          nameSuffix: `${this.sourceId}-source-discontinuity`,
          description:
            `The history of source ${this.sourceId} is not continuous: a heartbeat was missed or went back, or the source's system identifier or timeline changed (${this.node.path}). ` +
            "The source's tables were marked needs-resnapshot and sinks hold their events; see docs/failures.md.",
          metric: platformMetric(this, MetricName.SOURCE_DISCONTINUITIES, { [MetricDimension.SOURCE]: this.sourceId }),
          threshold: 0,
          evaluationPeriods: 1,
          datapointsToAlarm: 1,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          actions: props.alarmActions,
        }),
      );
    }

    // --- Snapshot worker: existing rows, in paced chunks (docs/snapshot.md) ---
    const snapshot = addSnapshotWorker(this, {
      sourceId: this.sourceId,
      control: props.controlPlane,
      rawStream,
      database: props.database,
      tableConfig,
      ...(tableRules ? { tableRules } : {}),
      heartbeatSchema: this.heartbeatSchema,
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      securityGroup: snapshotGroup,
      alarmsEnabled: props.alarmsEnabled ?? true,
      alarmActions: props.alarmActions,
      stallThreshold: props.alarmSnapshotStallThreshold ?? Duration.minutes(30),
    });
    this.snapshotWorker = snapshot.fn;
    this.database = props.database;
    this.alarms.push(...snapshot.alarms);

    // --- Poll worker: tables without log access, by their modified-at or version column (docs/polling.md) ---
    const polled = this.tables.filter((t) => t.capture === CaptureMode.POLL).map((t) => t.tableId);
    const poll =
      polled.length === 0
        ? null
        : addPollWorker(this, {
            sourceId: this.sourceId,
            control: props.controlPlane,
            rawStream,
            database: props.database,
            tableConfig,
            polledTables: polled,
            vpc: props.vpc,
            vpcSubnets: props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
            securityGroup: pollGroup!,
            alarmsEnabled: props.alarmsEnabled ?? true,
            alarmActions: props.alarmActions,
          });
    if (poll) {
      this.pollWorker = poll.fn;
      this.alarms.push(...poll.alarms);
    }

    // The functions that read the table configuration change only after the column-rules check
    // passed, and the starter (which requests re-snapshots for late rules) runs after they changed.
    for (const fn of [normalizer.fn, snapshot.fn, ...(poll ? [poll.fn] : [])]) {
      fn.node.addDependency(columnRules);
      starter.node.addDependency(fn);
    }

    this.acknowledgeGrantWildcards([normalizer, heartbeat, lifecycle, slotMonitor.function, snapshot.worker, ...(poll ? [poll.worker] : [])], targetRole, secretsRole);
    for (const f of [normalizer, heartbeat, lifecycle, slotMonitor.function, snapshot.worker, ...(poll ? [poll.worker] : [])]) encryptLogGroup(f.logGroup, this.encryptionKey);

    // --- Alarms ---
    if (props.alarmsEnabled ?? true) {
      const actions = props.alarmActions;
      const latency = props.alarmCdcLatencyThreshold ?? Duration.minutes(5);
      for (const [alarmId, metric, kind] of [
        ['CdcLatencySourceAlarm', this.metricCdcLatencySource(), 'source'],
        ['CdcLatencyTargetAlarm', this.metricCdcLatencyTarget(), 'target'],
      ] as const) {
        this.alarms.push(
          createAlarm(this, alarmId, {
            nameSuffix: `${this.sourceId}-cdc-latency-${kind}`,
            description:
              `DMS CDCLatency${kind === 'source' ? 'Source' : 'Target'} of source ${this.sourceId} is above ${latency.toHumanString()} for 10 minutes (${this.node.path}). ` +
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
            actions,
          }),
        );
      }
      const iteratorThreshold = props.alarmIteratorAgeThreshold ?? defaultIteratorAgeThreshold(rawRetention, consumer.maxRecordAge);
      if (iteratorThreshold === undefined) fail(this, 'alarmIteratorAgeThreshold is required when the raw stream retention is a token (a quarter of it is not known at synth time)');
      this.alarms.push(
        createAlarm(this, 'NormalizerIteratorAgeAlarm', {
          nameSuffix: `${this.sourceId}-normalizer-iterator-age`,
          description:
            `The normalizer of source ${this.sourceId} reads raw records older than ${iteratorThreshold.toHumanString()} (${this.node.path}): it is stuck or behind. ` +
            `Failing batches are retried without limit; raw records expire unread after ${rawRetention.toHumanString()}.`,
          metric: iteratorAgeMetric(normalizer.fn),
          threshold: iteratorThreshold.toMilliseconds(),
          evaluationPeriods: 5,
          datapointsToAlarm: 5,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          actions,
        }),
        onFailureQueueAlarm(this, 'NormalizerDeadLetterQueueAlarm', {
          nameSuffix: `${this.sourceId}-normalizer-dead-letter-queue`,
          description:
            `Raw records of source ${this.sourceId} were given up by the normalizer's event source mapping (${this.node.path}). ` +
            'The mapping has no retry or age limit, so this means records expired unread; each message names the shard and sequence numbers.',
          queue: consumer.deadLetterQueue,
          actions,
        }),
        createAlarm(this, 'NormalizerDeadLettersAlarm', {
          nameSuffix: `${this.sourceId}-normalizer-dead-letters`,
          description: `The normalizer of source ${this.sourceId} dead-lettered records it could not decode; their tables are marked degraded (${this.node.path}).`,
          metric: this.metricDeadLetters(),
          threshold: 0,
          evaluationPeriods: 1,
          datapointsToAlarm: 1,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          actions,
        }),
        createAlarm(this, 'TablesPausedAlarm', {
          nameSuffix: `${this.sourceId}-tables-paused`,
          description: `A table of source ${this.sourceId} was paused by a schema change that needs an operator (${this.node.path}).`,
          metric: this.metricTablesPaused(),
          threshold: 0,
          evaluationPeriods: 1,
          datapointsToAlarm: 1,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          actions,
        }),
        createAlarm(this, 'HeartbeatErrorsAlarm', {
          nameSuffix: `${this.sourceId}-heartbeat-errors`,
          description:
            `The heartbeat writer of source ${this.sourceId} has failed for 5 minutes (${this.node.path}). ` +
            'Without heartbeats the end-to-end lag alarms fire although changes may still flow: check the source connection first.',
          metric: heartbeat.fn.metricErrors({ statistic: cloudwatch.Stats.SUM, period: Duration.minutes(1) }),
          threshold: 0,
          evaluationPeriods: 5,
          datapointsToAlarm: 5,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          actions,
        }),
      );
    }
  }

  /** A DMS task metric (namespace `AWS/DMS`, dimensions instance and task). */
  metricReplicationTask(metricName: string, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return new cloudwatch.Metric({
      namespace: 'AWS/DMS',
      metricName,
      dimensionsMap: {
        ReplicationInstanceIdentifier: this.replicationInstanceIdentifier,
        // DMS names a task in CloudWatch by the resource id that ends its ARN.
        ReplicationTaskIdentifier: Fn.select(6, Fn.split(':', this.replicationTaskArn)),
      },
      statistic: cloudwatch.Stats.MAXIMUM,
      period: Duration.minutes(5),
      ...props,
    }).attachTo(this);
  }

  /** Seconds between a change's commit and DMS reading it; maximum over 5 minutes by default. */
  metricCdcLatencySource(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metricReplicationTask('CDCLatencySource', props);
  }

  /** Seconds between a change's commit and DMS writing it to the raw stream; maximum over 5 minutes by default. */
  metricCdcLatencyTarget(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.metricReplicationTask('CDCLatencyTarget', props);
  }

  /** Records the normalizer dead-lettered (`DeadLetters`, Stage=normalizer); sum per minute by default. */
  metricDeadLetters(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.DEAD_LETTERS, { [MetricDimension.STAGE]: NORMALIZER_STAGE, [MetricDimension.SOURCE]: this.sourceId }, props);
  }

  /** Tables paused by the normalizer (`TablesPaused`); sum per minute by default. */
  metricTablesPaused(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.TABLES_PAUSED, { [MetricDimension.SOURCE]: this.sourceId }, props);
  }

  /** Bytes of WAL the capture slot retains (`SlotRetainedBytes`, from the slot monitor); maximum per minute by default. */
  metricSlotRetainedBytes(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.slotMonitorMetrics.metricRetainedBytes(props);
  }

  /** Bytes left before the WAL budget or max_slot_wal_keep_size (`SlotHeadroomBytes`); minimum per minute by default. */
  metricSlotHeadroomBytes(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.slotMonitorMetrics.metricHeadroomBytes(props);
  }

  /** Source commit → change-log publish, milliseconds (`CaptureLag`); maximum per minute by default. */
  metricCaptureLag(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.CAPTURE_LAG, { [MetricDimension.SOURCE]: this.sourceId }, { statistic: cloudwatch.Stats.MAXIMUM, ...props });
  }

  /** Age of the oldest raw record the normalizer reads (`AWS/Lambda IteratorAge`), milliseconds; maximum per minute by default. */
  metricNormalizerIteratorAge(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return iteratorAgeMetric(this.normalizer, props);
  }

  /**
   * Snapshot rows done so far in the current run (`SnapshotRowsDone`), one series per table, tables
   * captured by pattern included (a `SEARCH` expression over the `Table` dimension); maximum per
   * minute by default.
   */
  metricSnapshotRowsDone(props?: cloudwatch.MathExpressionOptions): cloudwatch.IMetric {
    return searchByTable(MetricName.SNAPSHOT_ROWS_DONE, this.sourceId, props);
  }

  /** Estimated time left of each running snapshot (`SnapshotEta`, seconds), one series per table; maximum per minute by default. */
  metricSnapshotEta(props?: cloudwatch.MathExpressionOptions): cloudwatch.IMetric {
    return searchByTable(MetricName.SNAPSHOT_ETA, this.sourceId, props);
  }


  /** Wildcards that CDK grants generate (Kinesis, KMS and secret grants), acknowledged with their scope. */
  private acknowledgeGrantWildcards(functions: CdcFunction[], ...roles: iam.Role[]): void {
    const kmsAcks = [
      { id: 'AwsSolutions-IAM5[Action::kms:GenerateDataKey*]', reason: 'CDK key grant; scoped to the one key that encrypts the stream or secret' },
      { id: 'AwsSolutions-IAM5[Action::kms:ReEncrypt*]', reason: 'CDK key grant; scoped to the one key that encrypts the stream or secret' },
    ];
    for (const f of functions) Validations.of(f).acknowledge(...kmsAcks);
    for (const r of roles) Validations.of(r).acknowledge(...kmsAcks);
  }
}

/** Compares dotted version strings numerically. */
function compareVersions(a: string, b: string): number {
  const pa = a.split('.').map((x) => Number.parseInt(x, 10) || 0);
  const pb = b.split('.').map((x) => Number.parseInt(x, 10) || 0);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) {
    const d = (pa[i] ?? 0) - (pb[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

