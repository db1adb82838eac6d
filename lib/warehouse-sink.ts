import { Duration, Resource, Size, type IResource } from 'aws-cdk-lib';
import type { IReconciledSink } from './reconciler.ts';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import type * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { applierNodeOptions, DEFAULT_APPLIER_MEMORY_MIB, EnvName, ServiceName } from '../contracts/env.ts';
import { MetricDimension, MetricName } from '../contracts/metrics.ts';
import { AwsApiEgress } from './aws-api-egress.ts';
import type { ICdcSource } from './cdc-source.ts';
import { createAlarm, iteratorAgeMetric } from './private/alarms.ts';
import { CdcFunction } from './private/cdc-function.ts';
import { allowDatabase } from './private/function-network.ts';
import { checkSinkProps, consumeChangeLog, grantApplierItems, SINK_PROP_KINDS, sinkAlarms } from './private/sink-applier.ts';
import type { ChangeLogSinkProps } from './sink-base.ts';
import {
  checkIntegerRange,
  checkLowerIdent,
  checkPropKinds,
  checkRequiredProps,
  fail,
  idFromConstructId,
  isKnownDuration,
  type PropKind,
} from './private/validate.ts';
import { WarehouseEngine, type WarehouseConnection } from './warehouse-connection.ts';
import { redshiftCopyRole } from './private/redshift-copy-role.ts';
import {
  grantStagingApplier,
  REDSHIFT_STAGING_BATCH,
  redshiftLoaderFunction,
  stagingEnvironment,
  type RedshiftLoaderProps,
} from './private/redshift-loader.ts';
import { platformMetric } from './private/platform-metric.ts';
import { payloadEnvironment } from './private/payloads.ts';

/** A warehouse sink: a `WarehouseSink`, or one imported with `WarehouseSink.fromWarehouseSinkAttributes`. */
export interface IWarehouseSink extends IResource {
  /**
   * The sink id (lower-case identifier) in metrics and the control plane.
   * @attribute
   */
  readonly sinkId: string;
  /** Source commit → warehouse commit for one source, milliseconds (`EndToEndLag`); maximum per minute by default. */
  metricEndToEndLag(source: ICdcSource, props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Events of one source this sink dead-lettered (`DeadLetters`, Stage=sink id); sum per minute by default. */
  metricDeadLetters(source: ICdcSource, props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Events of one source applied (`EventsApplied`); sum per minute by default. */
  metricEventsApplied(source: ICdcSource, props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Batches that failed to apply and were retried (`ApplyErrors`); sum per minute by default. */
  metricApplyErrors(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Deferred merges of a table's delta that failed and are tried again (`MergeErrors`); sum per minute by default. */
  metricMergeErrors(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Delta rows compacted into the base by deferred merges (`DeltaRowsMerged`); sum per minute by default. */
  metricDeltaRowsMerged(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /**
   * Merges of a delta at twice its row threshold, which stopped the table's appends while they ran:
   * merges falling behind appends (`MergesStoppingAppends`); sum per minute by default.
   */
  metricMergesStoppingAppends(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
}

/**
 * A warehouse sink of this app, with what the constructs that reach its warehouse need (a
 * `WarehouseRebuild`, a `Reconciler`): how to reach it and which sources it mirrors.
 */
export interface IConnectedWarehouseSink extends IWarehouseSink {
  /** How the sink reaches the warehouse. */
  readonly connection: WarehouseConnection;
  /** The sources this sink mirrors. */
  readonly sources: ICdcSource[];
  /** The ids of the sources this sink mirrors. */
  readonly sourceIds: string[];
  /** The end-to-end lag objective. */
  readonly freshnessTarget: Duration;
}

/** Attributes of a sink deployed elsewhere, for `WarehouseSink.fromWarehouseSinkAttributes`. */
export interface WarehouseSinkAttributes {
  /** The sink id (as the sink's `sinkId`). */
  readonly sinkId: string;
  /**
   * ARN of the sink's applier function; when given, the imported sink (and its metrics) has its
   * account and region.
   * @default - the account and region of the stack the sink is imported into
   */
  readonly applierFunctionArn?: string;
}

abstract class WarehouseSinkBase extends Resource implements IWarehouseSink {
  abstract readonly sinkId: string;

  metricEndToEndLag(source: ICdcSource, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(
      this,
      MetricName.END_TO_END_LAG,
      { [MetricDimension.SINK]: this.sinkId, [MetricDimension.SOURCE]: source.sourceId },
      { statistic: cloudwatch.Stats.MAXIMUM, ...props },
    );
  }

  metricDeadLetters(source: ICdcSource, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.DEAD_LETTERS, { [MetricDimension.STAGE]: this.sinkId, [MetricDimension.SOURCE]: source.sourceId }, props);
  }

  metricApplyErrors(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.APPLY_ERRORS, { [MetricDimension.SINK]: this.sinkId }, props);
  }

  metricEventsApplied(source: ICdcSource, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.EVENTS_APPLIED, { [MetricDimension.SINK]: this.sinkId, [MetricDimension.SOURCE]: source.sourceId }, props);
  }

  metricMergeErrors(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.MERGE_ERRORS, { [MetricDimension.SINK]: this.sinkId }, props);
  }

  metricDeltaRowsMerged(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.DELTA_ROWS_MERGED, { [MetricDimension.SINK]: this.sinkId }, props);
  }

  metricMergesStoppingAppends(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.MERGES_STOPPING_APPENDS, { [MetricDimension.SINK]: this.sinkId }, props);
  }
}

/** Properties of a `WarehouseSink`. */
export interface WarehouseSinkProps extends ChangeLogSinkProps {
  /** How to reach the warehouse. */
  readonly connection: WarehouseConnection;
  /** VPC from which the applier reaches the warehouse. */
  readonly vpc: ec2.IVpc;
  /**
   * How long Lambda gathers records before invoking the applier (0 to 5 minutes).
   * @default Duration.seconds(5)
   */
  readonly maxBatchingWindow?: Duration;
  /**
   * Memory of the applier. Its young generation (`NODE_OPTIONS=--max-semi-space-size`) is sized
   * from it: 1/16 of it per semi-space, at most 64 MiB (docs/performance-log.md, "The applier's young generation").
   * @default Size.mebibytes(1024)
   */
  readonly memorySize?: Size;
  /**
   * Timeout of one applier invocation.
   * @default Duration.minutes(5)
   */
  readonly timeout?: Duration;
  /**
   * Customer-managed key for the dead-letter queue of the applier's event source mapping.
   * @default - the change log's key (`changeLog.encryptionKey`), which also encrypts the applier's log group; SQS-managed encryption for an imported change log without one
   */
  readonly deadLetterQueueEncryptionKey?: kms.IKey;
  /**
   * Rows in a table's delta (changes appended but not merged into its base yet) at which the
   * applier merges it (1 to 10,000,000). Every change is visible in the table's view at once
   * either way; the threshold bounds how much the view overlays at query time
   * (docs/warehouse-apply.md).
   * @default 50000
   */
  readonly mergeMaxRows?: number;
  /**
   * Age of a delta's oldest row at which it is merged (1 s to 1 hour); the applier's schedule
   * runs every minute, so an idle table is merged within a minute of this age.
   * @default Duration.minutes(1)
   */
  readonly mergeMaxAge?: Duration;
  /**
   * Whether only the applier's one-minute schedule merges deltas. By default the applier also
   * merges a table's delta right after an append that makes it due, which adds the merge's
   * duration (about a second per 50,000 rows) to that batch and so to its shard's lag; on the
   * schedule alone no batch carries a merge (on PostgreSQL a merge does not stop appends), and a
   * busy table's delta holds up to about a minute of its changes; a table with more than twice
   * `mergeMaxRows` changes a minute is then merged with its appends stopped (docs/warehouse-apply.md, "When").
   * @default false
   */
  readonly mergeOnSchedule?: boolean;
  /**
   * Redshift only: where the Redshift loader stages its objects, for the cluster role this sink
   * creates (`copyRole`: COPY's reads on the staging prefix, nothing more; docs/deploy.md, §11).
   * Associate that role with the cluster. The applier stages its batches there and the sink's
   * Redshift loader function loads them with COPY (docs/warehouse-apply.md, "Redshift: the applier");
   * the applier's `timeout` must then be at least 2 minutes.
   * @default - no staging, no cluster role
   */
  readonly redshiftStaging?: RedshiftStaging;
}

/** Where the Redshift loader stages its objects (`WarehouseSinkProps.redshiftStaging`). */
export interface RedshiftStaging {
  /** The staging bucket, in the cluster's region. Its customer managed key, if any, is granted `kms:Decrypt`. */
  readonly bucket: s3.IBucket;
  /**
   * The staging prefix (letters, digits, `!-_.*'()/`, ending with `/`).
   * @default `cdc/<sink id>/`
   */
  readonly prefix?: string;
}

/** The props' kinds, for callers without the type checker (`checkPropKinds`). */
const WAREHOUSE_SINK_PROP_KINDS = {
  ...SINK_PROP_KINDS,
  connection: 'any',
  vpc: 'any',
  maxBatchingWindow: 'any',
  memorySize: 'any',
  timeout: 'any',
  deadLetterQueueEncryptionKey: 'any',
  mergeMaxRows: 'number',
  mergeMaxAge: 'any',
  mergeOnSchedule: 'boolean',
  redshiftStaging: 'any',
} as const satisfies Record<keyof WarehouseSinkProps, PropKind>;

/**
 * Mirrors the captured tables into a warehouse (Redshift or PostgreSQL): the applier function in
 * the VPC with CDC-safe stream settings and a dead-letter queue, and the alarms that say whether
 * the warehouse is fresh: end-to-end lag per source against `freshnessTarget`, dead letters,
 * persistent apply errors, iterator age.
 */
/**
 * A warehouse sink of this app whose panels a `PipelineDashboard` shows: reconciled, with its
 * applier's on-failure queue and iterator age.
 */
export interface IMonitoredWarehouseSink extends IConnectedWarehouseSink, IReconciledSink {
  /** The applier's on-failure queue. */
  readonly deadLetterQueue: sqs.IQueue;
  /** The applier's iterator age on the change log, milliseconds. */
  metricIteratorAge(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
}

export class WarehouseSink extends WarehouseSinkBase implements IMonitoredWarehouseSink, ec2.IConnectable {
  /** Refers to a sink deployed elsewhere (another stack, account or region), for its metrics and dashboards. */
  static fromWarehouseSinkAttributes(scope: Construct, id: string, attrs: WarehouseSinkAttributes): IWarehouseSink {
    class Import extends WarehouseSinkBase {
      readonly sinkId: string;
      constructor() {
        super(scope, id, attrs?.applierFunctionArn ? { environmentFromArn: attrs.applierFunctionArn } : {});
        checkRequiredProps(this, 'WarehouseSink.fromWarehouseSinkAttributes', attrs, ['sinkId']);
        this.sinkId = checkLowerIdent(this, 'sinkId', attrs.sinkId);
      }
    }
    return new Import();
  }

  /** The sink id. */
  readonly sinkId: string;
  /** The end-to-end lag objective. */
  readonly freshnessTarget: Duration;
  /** The applier function. */
  readonly applier: lambda.IFunction;
  /** Records the applier's event source mapping gave up on (shard id and sequence numbers). */
  readonly deadLetterQueue: sqs.IQueue;
  /** The applier's security group (the rules to the warehouse the `WarehouseConnection` names exist already). */
  readonly connections: ec2.Connections;
  /** The alarms this construct created (empty when `alarmsEnabled` is false). */
  readonly alarms: cloudwatch.IAlarm[] = [];
  /** The sources this sink mirrors. */
  readonly sources: ICdcSource[];
  /** The ids of the sources this sink mirrors. */
  readonly sourceIds: string[];
  /** How the sink reaches the warehouse (the `Reconciler` reads it the same way). */
  readonly connection: WarehouseConnection;
  /** The same connection, as a `Reconciler` reads it. */
  readonly warehouseConnection?: WarehouseConnection;
  /** The role to associate with the Redshift cluster, which COPY assumes to read the staging prefix (with `redshiftStaging`). */
  readonly copyRole?: iam.IRole;
  /** The staging prefix `copyRole` reads (with `redshiftStaging`). */
  readonly stagingPrefix?: string;
  /** The Redshift loader function (with `redshiftStaging`): loads what the applier stages, reserved concurrency 1 (docs/warehouse-apply.md, "Redshift: the applier"). */
  readonly redshiftLoader?: lambda.IFunction;

  constructor(scope: Construct, id: string, props: WarehouseSinkProps) {
    super(scope, id);
    checkRequiredProps(this, 'WarehouseSink', props, ['controlPlane', 'changeLog', 'sources', 'connection', 'vpc']);
    checkPropKinds(this.node.path, props, WAREHOUSE_SINK_PROP_KINDS);
    this.sinkId = checkLowerIdent(this, 'sinkId', props.sinkId ?? idFromConstructId(id));
    this.freshnessTarget = props.freshnessTarget ?? Duration.minutes(5);
    const maxBatchingWindow = props.maxBatchingWindow ?? Duration.seconds(5);
    checkSinkProps(this, props, 'mirrors', this.freshnessTarget, maxBatchingWindow);
    this.sources = [...props.sources];
    this.sourceIds = this.sources.map((s) => s.sourceId);
    this.connection = props.connection;
    this.warehouseConnection = props.connection;
    checkIntegerRange(this, 'mergeMaxRows', props.mergeMaxRows, 1, 10_000_000);
    if (
      props.mergeMaxAge !== undefined &&
      isKnownDuration(props.mergeMaxAge) &&
      (props.mergeMaxAge.toMilliseconds() < 1000 || props.mergeMaxAge.toMilliseconds() > 3_600_000)
    ) {
      fail(this, `mergeMaxAge must be between 1 second and 1 hour, got ${props.mergeMaxAge.toHumanString()}`);
    }

    let staging: Omit<RedshiftLoaderProps, 'securityGroup'> | undefined;
    if (props.redshiftStaging) {
      if (props.connection.engine !== WarehouseEngine.REDSHIFT) fail(this, 'redshiftStaging is for a Redshift warehouse (WarehouseConnection.redshift)');
      const prefix = props.redshiftStaging.prefix ?? `cdc/${this.sinkId}/`;
      if (!/^[A-Za-z0-9!_.*'()/-]+\/$/.test(prefix) || prefix.startsWith('/'))
        fail(this, `redshiftStaging.prefix must be plain key characters ending with '/' (not starting with one), got '${prefix}'`);
      this.stagingPrefix = prefix;
      this.copyRole = redshiftCopyRole(this, 'CopyRole', {
        bucket: props.redshiftStaging.bucket,
        prefix,
        description: `Warehouse sink ${this.sinkId}: Redshift COPY reads the staging prefix ${prefix} (${this.node.path})`,
      });
      staging = this.stagingProps(props, props.redshiftStaging.bucket, prefix, this.copyRole);
    }

    const securityGroup = new ec2.SecurityGroup(this, 'SecurityGroup', {
      vpc: props.vpc,
      description: `Warehouse sink ${this.sinkId}: the applier (${this.node.path})`,
      // Outbound only to the warehouse port and HTTPS to AWS APIs.
      allowAllOutbound: false,
    });
    (props.awsApiEgress ?? AwsApiEgress.vpcEndpoints()).applyTo(securityGroup, props.vpc);
    this.connections = new ec2.Connections({ securityGroups: [securityGroup] });
    allowDatabase(this, 'Warehouse', securityGroup, props.connection, `Warehouse sink ${this.sinkId}: the applier`, 'the warehouse');
    // Redshift with staging: the sink's loader function (docs/warehouse-apply.md, "Redshift: the applier").
    const loaderProps = staging ? { ...staging, securityGroup } : undefined;
    const loader = loaderProps ? redshiftLoaderFunction(this, loaderProps) : undefined;
    const timeout = props.timeout ?? Duration.minutes(5);

    const memorySize = props.memorySize ?? Size.mebibytes(DEFAULT_APPLIER_MEMORY_MIB);
    const applier = new CdcFunction(this, 'Applier', {
      handlerName: 'warehouse-applier',
      description: `Applies change events to warehouse sink ${this.sinkId} (${this.node.path})`,
      serviceName: ServiceName.WAREHOUSE_APPLIER,
      environment: {
        [EnvName.SINK_ID]: this.sinkId,
        [EnvName.CONTROL_TABLE]: props.controlPlane.controlPlaneTableName,
        [EnvName.WAREHOUSE_SECRET_ARN]: props.connection.secret.secretArn,
        // The resume replay reads the held range from the change log (docs/operations.md).
        [EnvName.CHANGE_LOG_STREAM]: props.changeLog.stream.streamName,
        [EnvName.WAREHOUSE_SSL_MODE]: props.connection.sslMode,
        ...payloadEnvironment(props.controlPlane),
        // Merge thresholds: set only when given, the applier's defaults otherwise (docs/warehouse-apply.md).
        ...(props.mergeMaxRows !== undefined ? { [EnvName.MERGE_MAX_ROWS]: String(props.mergeMaxRows) } : {}),
        ...(props.mergeMaxAge !== undefined ? { [EnvName.MERGE_MAX_AGE_MS]: String(props.mergeMaxAge.toMilliseconds()) } : {}),
        ...(props.mergeOnSchedule === true ? { [EnvName.MERGE_ON_SCHEDULE]: 'true' } : {}),
        // A young generation sized for a batch (docs/performance-log.md, "The applier's young generation").
        [EnvName.NODE_OPTIONS]: applierNodeOptions(memorySize.toMebibytes()),
        ...(loaderProps && loader ? stagingEnvironment(this, loaderProps, loader.fn, timeout) : {}),
      },
      memorySize,
      timeout,
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      securityGroups: [securityGroup],
    });
    this.applier = applier.fn;
    props.connection.secret.grantRead(applier.fn);
    grantApplierItems(props, applier.fn, this.sinkId, this.sourceIds);
    if (loaderProps && loader) grantStagingApplier(applier, loaderProps, loader.fn);
    this.redshiftLoader = loader?.fn;
    // With staging a batch waits for a load: batches of 10,000 by default (docs/warehouse-apply.md, "Redshift: the applier").
    const batchSize = props.batchSize ?? (staging ? REDSHIFT_STAGING_BATCH : undefined);
    const consumer = consumeChangeLog(
      this,
      applier,
      { ...props, batchSize },
      {
        kind: 'warehouse',
        sinkId: this.sinkId,
        maxBatchingWindow,
        deadLetterQueueEncryptionKey: props.deadLetterQueueEncryptionKey ?? props.changeLog.encryptionKey,
        keys: 'the control plane, change log or secret',
      },
    );
    this.deadLetterQueue = consumer.deadLetterQueue;

    this.alarms.push(
      ...sinkAlarms(this, props, {
        label: 'Warehouse',
        sinkId: this.sinkId,
        freshnessTarget: this.freshnessTarget,
        consumer,
        applier: applier.fn,
        endToEndLag: (source) => this.metricEndToEndLag(source),
        deadLetters: (source) => this.metricDeadLetters(source),
        applyErrors: this.metricApplyErrors(),
        deadLettersWhat: '',
        applyErrorsCause: 'batches are retried, the warehouse may be unreachable.',
        queueTail:
          ' With the default settings (no retry or age limit) nothing is given up, so a message here means a limit was configured or a record expired unread.',
        iteratorMeaning: ': the sink is stuck or behind',
        extra: (scope) => [
          createAlarm(scope, 'MergeErrorsAlarm', {
            nameSuffix: `${this.sinkId}-merge-errors`,
            description:
              `Deferred merges of warehouse sink ${this.sinkId} have failed in each of the last 15 minutes (${scope.node.path}). ` +
              'The views still show every change, but a delta that is not merged keeps growing and makes them slower to read; the applier logs name the table and the error (docs/warehouse-apply.md).',
            metric: this.metricMergeErrors(),
            threshold: 0,
            // The schedule tries every due delta once a minute: a merge that keeps failing breaches every minute.
            evaluationPeriods: 15,
            datapointsToAlarm: 15,
            treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
            actions: props.alarmActions,
          }),
        ],
      }),
    );
  }

  private stagingProps(props: WarehouseSinkProps, bucket: s3.IBucket, prefix: string, copyRole: iam.IRole): Omit<RedshiftLoaderProps, 'securityGroup'> {
    return {
      sinkId: this.sinkId,
      bucket,
      prefix,
      copyRole,
      controlPlane: props.controlPlane,
      connection: props.connection,
      freshnessTarget: this.freshnessTarget,
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      logKey: props.changeLog.encryptionKey,
    };
  }

  /** Age of the oldest change-log record the applier reads (`AWS/Lambda IteratorAge`), milliseconds; maximum per minute by default. */
  metricIteratorAge(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return iteratorAgeMetric(this.applier, props);
  }
}
