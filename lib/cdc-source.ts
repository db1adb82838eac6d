import { Duration, Fn, RemovalPolicy, Resource, Size, SizeRoundingBehavior, Token, type IResource } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as kinesis from 'aws-cdk-lib/aws-kinesis';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { DEFAULT_HEARTBEAT_SCHEMA } from '../contracts/env.ts';
import { MetricDimension, MetricName, NORMALIZER_STAGE } from '../contracts/metrics.ts';
import { AwsApiEgress } from './aws-api-egress.ts';
import { CapturedTable, CaptureMode } from './captured-table.ts';
import type { IChangeLog } from './change-log.ts';
import type { IControlPlane } from './control-plane.ts';
import { iteratorAgeMetric } from './private/alarms.ts';
import { addDmsReplication, addReplicationTask, taskConfiguration } from './private/dms-replication.ts';
import { createPlatformKey, encryptLogGroup } from './private/platform-key.ts';
import { dmsIdentifier } from './private/physical-name.ts';
import { platformMetric, searchByTable } from './private/platform-metric.ts';
import { addPollWorker } from './private/poll-worker.ts';
import { SlotMonitor } from './private/slot-monitor.ts';
import { addSnapshotWorker } from './private/snapshot-worker.ts';
import { sourceAlarms, sourceDiscontinuityAlarm } from './private/source-alarms.ts';
import { addHeartbeatWriter, addNormalizer } from './private/source-functions.ts';
import { requireDatabasePeer } from './private/function-network.ts';
import { sourceNetwork } from './private/source-network.ts';
import { acknowledgeGrantWildcards, createRawStream } from './private/raw-stream.ts';
import { checkTableList, compareVersions } from './private/source-props.ts';
import { defaultIteratorAgeThreshold } from './private/stream-consumer.ts';
import { findTableProblem, tableConfigEntries, tableRuleEntries } from './private/table-mappings.ts';
import { addSlotLifecycle, addTaskStarter } from './private/task-lifecycle.ts';
import {
  checkIntegerRange,
  checkKinesisRetention,
  checkLowerIdent,
  checkPropKinds,
  checkRequiredProps,
  fail,
  idFromConstructId,
  SLOT_NAME,
  type PropKind,
} from './private/validate.ts';
import type { SourceDatabase } from './source-database.ts';

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

/**
 * A source whose database the app reaches: what a `Reconciler` reads (a `CdcSource` of this app;
 * an imported source has no database connection).
 */
export interface IReconcilableSource extends ICdcSource {
  /** The source database (its secret, TLS, port, security group and snapshot budget). */
  readonly database: SourceDatabase;
  /** The key that encrypts the source's log groups (the reconciler's too). */
  readonly encryptionKey: kms.IKey;
}

/**
 * A source of this app whose panels a `PipelineDashboard` shows: its replication slot and the
 * metrics of its slot, DMS task, normalizer and snapshot (an imported source has none of these here).
 */
export interface IMonitoredSource extends ICdcSource {
  /** The replication slot's name. */
  readonly slotName: string;
  /** WAL the slot retains, bytes (`SlotRetainedBytes`). */
  metricSlotRetainedBytes(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** WAL the slot may still retain before the source's budget, bytes (`SlotHeadroomBytes`). */
  metricSlotHeadroomBytes(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** DMS's latency reading the WAL (`CDCLatencySource`), seconds. */
  metricCdcLatencySource(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** DMS's latency writing the raw stream (`CDCLatencyTarget`), seconds. */
  metricCdcLatencyTarget(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** The normalizer's iterator age on the raw stream, milliseconds. */
  metricNormalizerIteratorAge(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Snapshot rows done, per table. */
  metricSnapshotRowsDone(props?: cloudwatch.MathExpressionOptions): cloudwatch.IMetric;
  /** Snapshot ETA per table, seconds. */
  metricSnapshotEta(props?: cloudwatch.MathExpressionOptions): cloudwatch.IMetric;
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

/**
 * Captures one PostgreSQL database with AWS DMS into the change log: a replication subnet group,
 * instance and CDC task (`test_decoding` slot, table mappings compiled from the captured tables,
 * settings that stop rather than drop), a raw stream, the normalizer that turns DMS records into
 * change events, the heartbeat writer (every 10 s), a lifecycle resource that prepares the slot
 * and starts, resumes and stops the task around deployments, and alarms.
 */
export class CdcSource extends Resource implements IReconcilableSource, IMonitoredSource, ec2.IConnectable {
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
   * each). The rules to the database the `SourceDatabase` names exist already; for anything else
   * (a read replica) `connections.allowTo(peer, port)` adds a rule per group.
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
    checkPropKinds(this.node.path, props, CDC_SOURCE_PROP_KINDS);
    checkTableList(this, props.tables);
    this.sourceId = checkLowerIdent(this, 'sourceId', props.sourceId ?? idFromConstructId(id));
    this.changeLog = props.changeLog;
    this.tables = [...props.tables];
    this.heartbeatSchema = props.heartbeatSchema ?? DEFAULT_HEARTBEAT_SCHEMA;
    this.slotName = props.slotName ?? `cdc_${this.sourceId}`;
    this.database = props.database;
    // The members send the database port only where the database is named (docs/deploy.md, "Network").
    requireDatabasePeer(this, props.database, 'the source database');
    const checked = this.checkProps(props);
    const alarmsEnabled = props.alarmsEnabled ?? true;

    const network = sourceNetwork(this, {
      sourceId: this.sourceId,
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets,
      awsApiEgress: props.awsApiEgress ?? AwsApiEgress.vpcEndpoints(),
      polls: this.tables.some((t) => t.capture === CaptureMode.POLL),
    });
    this.connections = new ec2.Connections({ securityGroups: network.all });
    // The platform's own key (docs/deploy.md, "Keys"); retained: the log groups it encrypts are.
    this.encryptionKey =
      props.encryptionKey ??
      createPlatformKey(this, 'Key', RemovalPolicy.RETAIN, `Created by ${this.node.path}: the raw stream, the dead-letter queue and log groups of the source`);
    const rawStream = createRawStream(this, this.encryptionKey, checked.rawRetention, props.rawStreamShardCount);
    this.rawStream = rawStream;

    // --- DMS, and the lifecycle around its task: slot before the task, start/resume/stop after it ---
    const replication = addDmsReplication(this, {
      sourceId: this.sourceId,
      slotName: this.slotName,
      captureDdls: props.captureDdls ?? true,
      database: props.database,
      network,
      rawStream,
      instanceClass: props.replicationInstanceClass ?? 'dms.c5.large',
      engineVersion: checked.engineVersion,
      storageGiB: checked.storageGiB,
      multiAz: props.multiAz ?? false,
      encryptionKey: props.encryptionKey,
    });
    this.replicationInstanceIdentifier = replication.instanceIdentifier;
    const config = taskConfiguration(this.tables, this.heartbeatSchema, {
      beforeImageColumns: props.beforeImage ?? BeforeImage.PRIMARY_KEY,
      lobMaxSizeKb: checked.lobKb,
    });
    this.replicationTaskIdentifier = dmsIdentifier(this, `${this.sourceId}-cdc`, 63);
    const lifecycle = addSlotLifecycle(this, {
      sourceId: this.sourceId,
      slotName: this.slotName,
      tables: this.tables,
      database: props.database,
      controlPlane: props.controlPlane,
      network,
      taskIdentifier: this.replicationTaskIdentifier,
      config,
      slotRemovalPolicy: props.slotRemovalPolicy ?? RemovalPolicy.RETAIN,
    });
    const task = addReplicationTask(this, { replication, identifier: this.replicationTaskIdentifier, config, startPosition: lifecycle.startPosition });
    this.replicationTaskArn = task.ref;
    const starter = addTaskStarter(this, { sourceId: this.sourceId, lifecycle, taskArn: task.ref, taskIdentifier: this.replicationTaskIdentifier, config });

    // --- Functions: normalizer, heartbeat writer, slot monitor, snapshot and poll workers ---
    const tableConfig = JSON.stringify(tableConfigEntries(this.tables, this.heartbeatSchema));
    // Capture by pattern (docs/onboarding.md): the rules the normalizer resolves new tables with.
    const ruleEntries = tableRuleEntries(this.tables);
    const tableRules = ruleEntries.length > 0 ? JSON.stringify(ruleEntries) : undefined;
    const { normalizer, consumer } = addNormalizer(this, {
      sourceId: this.sourceId,
      controlPlane: props.controlPlane,
      changeLog: props.changeLog,
      rawStream,
      rawRetention: checked.rawRetention,
      tableConfig,
      tableRules,
      heartbeatSchema: this.heartbeatSchema,
      encryptionKey: this.encryptionKey,
    });
    this.normalizer = normalizer.fn;
    this.deadLetterQueue = consumer.deadLetterQueue;
    const heartbeat = addHeartbeatWriter(this, { sourceId: this.sourceId, heartbeatSchema: this.heartbeatSchema, database: props.database, network });
    this.heartbeatWriter = heartbeat.fn;
    const slotMonitor = new SlotMonitor(this, 'SlotMonitor', {
      sourceId: this.sourceId,
      slotName: this.slotName,
      vpc: props.vpc,
      vpcSubnets: network.subnetSelection,
      securityGroup: network.slotMonitor,
      database: props.database,
      walBudget: props.slotWalBudget ?? Size.gibibytes(10),
      alarmsEnabled,
      alarmActions: props.alarmActions,
      controlPlane: props.controlPlane,
    });
    this.slotMonitor = slotMonitor.function.fn;
    this.slotMonitorMetrics = slotMonitor;
    this.alarms.push(...slotMonitor.alarms);
    if (alarmsEnabled) this.alarms.push(sourceDiscontinuityAlarm(this, this.sourceId, props.alarmActions));
    const workers = {
      sourceId: this.sourceId,
      controlPlane: props.controlPlane,
      rawStream,
      database: props.database,
      tableConfig,
      vpc: props.vpc,
      vpcSubnets: network.subnetSelection,
      alarmsEnabled,
      alarmActions: props.alarmActions,
    };
    // Snapshot worker: existing rows, in paced chunks (docs/snapshot.md).
    const snapshot = addSnapshotWorker(this, {
      ...workers,
      ...(tableRules ? { tableRules } : {}),
      heartbeatSchema: this.heartbeatSchema,
      securityGroup: network.snapshot,
      stallThreshold: props.alarmSnapshotStallThreshold ?? Duration.minutes(30),
    });
    this.snapshotWorker = snapshot.fn;
    this.alarms.push(...snapshot.alarms);
    // Poll worker: tables without log access, by their modified-at or version column (docs/polling.md).
    const polled = this.tables.filter((t) => t.capture === CaptureMode.POLL).map((t) => t.tableId);
    const poll = network.poll ? addPollWorker(this, { ...workers, polledTables: polled, securityGroup: network.poll }) : null;
    if (poll) {
      this.pollWorker = poll.fn;
      this.alarms.push(...poll.alarms);
    }

    // The functions that read the table configuration change only after the column-rules check
    // passed, and the starter (which requests re-snapshots for late rules) runs after they changed.
    for (const fn of [normalizer.fn, snapshot.fn, ...(poll ? [poll.fn] : [])]) {
      fn.node.addDependency(lifecycle.columnRules);
      starter.node.addDependency(fn);
    }
    const functions = [normalizer, heartbeat, lifecycle.function, slotMonitor.function, snapshot.worker, ...(poll ? [poll.worker] : [])];
    acknowledgeGrantWildcards(functions, replication.targetRole, replication.secretsRole);
    for (const f of functions) encryptLogGroup(f.logGroup, this.encryptionKey);

    if (alarmsEnabled) {
      this.alarms.push(
        ...sourceAlarms(this, {
          sourceId: this.sourceId,
          actions: props.alarmActions,
          latencyThreshold: props.alarmCdcLatencyThreshold ?? Duration.minutes(5),
          cdcLatencySource: this.metricCdcLatencySource(),
          cdcLatencyTarget: this.metricCdcLatencyTarget(),
          iteratorAgeThreshold: props.alarmIteratorAgeThreshold ?? defaultIteratorAgeThreshold(checked.rawRetention, consumer.maxRecordAge),
          rawRetention: checked.rawRetention,
          normalizer: normalizer.fn,
          normalizerQueue: consumer.deadLetterQueue,
          deadLetters: this.metricDeadLetters(),
          tablesPaused: this.metricTablesPaused(),
          heartbeatWriter: heartbeat.fn,
        }),
      );
    }
  }

  /** Validates what the constructor cannot take as given; returns the derived values. */
  private checkProps(props: CdcSourceProps): { engineVersion: string; rawRetention: Duration; lobKb: number; storageGiB: number } {
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
    if (!Token.isUnresolved(lobKb) && (lobKb < 1 || lobKb > 1024))
      fail(this, `maxLobSize must be between 1 KiB and 1 MiB (kinesis target limit), got ${lobKb} KiB`);
    const storage = props.replicationStorage ?? Size.gibibytes(50);
    const storageGiB = storage.toGibibytes({ rounding: SizeRoundingBehavior.FLOOR });
    checkIntegerRange(this, 'replicationStorage (GiB)', storageGiB, 5, 6144);
    return { engineVersion, rawRetention, lobKb, storageGiB };
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
}

/** The props' kinds, for callers without the type checker (`checkPropKinds`). */
const CDC_SOURCE_PROP_KINDS = {
  controlPlane: 'any',
  changeLog: 'any',
  vpc: 'any',
  vpcSubnets: 'any',
  database: 'any',
  awsApiEgress: 'any',
  tables: 'array',
  sourceId: 'string',
  slotName: 'string',
  slotRemovalPolicy: 'any',
  captureDdls: 'boolean',
  beforeImage: { enumOf: BeforeImage },
  heartbeatSchema: 'string',
  slotWalBudget: 'any',
  replicationInstanceClass: 'string',
  replicationEngineVersion: 'string',
  replicationStorage: 'any',
  multiAz: 'boolean',
  maxLobSize: 'any',
  encryptionKey: 'any',
  rawStreamRetention: 'any',
  rawStreamShardCount: 'number',
  alarmsEnabled: 'boolean',
  alarmActions: 'array',
  alarmCdcLatencyThreshold: 'any',
  alarmIteratorAgeThreshold: 'any',
  alarmSnapshotStallThreshold: 'any',
} as const satisfies Record<keyof CdcSourceProps, PropKind>;
