import { Duration, Resource, Size, Validations, type IResource } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { applierNodeOptions, DEFAULT_APPLIER_MEMORY_MIB, EnvName, ServiceName } from '../contracts/env.ts';
import { MetricDimension, MetricName } from '../contracts/metrics.ts';
import { AwsApiEgress } from './aws-api-egress.ts';
import type { ICdcSource } from './cdc-source.ts';
import type { IChangeLog } from './change-log.ts';
import type { IControlPlane } from './control-plane.ts';
import { createAlarm, iteratorAgeMetric, onFailureQueueAlarm } from './private/alarms.ts';
import { CdcFunction } from './private/cdc-function.ts';
import { encryptLogGroup } from './private/platform-key.ts';
import { sameChangeLog } from './private/same-change-log.ts';
import { consumeStream, defaultIteratorAgeThreshold } from './private/stream-consumer.ts';
import { checkIntegerRange, checkLowerIdent, checkRequiredProps, fail, idFromConstructId, isKnownDuration } from './private/validate.ts';
import type { WarehouseConnection } from './warehouse-connection.ts';
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
    return platformMetric(this, MetricName.END_TO_END_LAG, { [MetricDimension.SINK]: this.sinkId, [MetricDimension.SOURCE]: source.sourceId }, { statistic: cloudwatch.Stats.MAXIMUM, ...props });
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
export interface WarehouseSinkProps {
  /** The control plane holding this sink's offsets and table states. */
  readonly controlPlane: IControlPlane;
  /** The change log the sink reads. */
  readonly changeLog: IChangeLog;
  /** The sources whose tables this sink mirrors; each must publish to `changeLog`. */
  readonly sources: ICdcSource[];
  /** How to reach the warehouse. */
  readonly connection: WarehouseConnection;
  /** VPC from which the applier reaches the warehouse. */
  readonly vpc: ec2.IVpc;
  /**
   * How the applier reaches AWS APIs (Secrets Manager, DynamoDB) over HTTPS; its security group
   * allows nothing else outbound but the warehouse port.
   * @default AwsApiEgress.vpcEndpoints() (HTTPS to the VPC's CIDR block only)
   */
  readonly awsApiEgress?: AwsApiEgress;
  /**
   * Subnets of the applier; they need a route to the warehouse and to the Kinesis, DynamoDB and
   * Secrets Manager APIs.
   * @default - the VPC's private subnets with egress
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /**
   * The sink id: a lower-case identifier, unique per change log.
   * @default - derived from the construct id (`Warehouse` → `warehouse`)
   */
  readonly sinkId?: string;
  /**
   * The end-to-end lag objective: source commit to warehouse commit, measured on heartbeats.
   * The lag alarm of each source fires when five consecutive minutes exceed it.
   * @default Duration.minutes(5)
   */
  readonly freshnessTarget?: Duration;
  /**
   * Records per applier invocation (1 to 10,000); bigger batches mean fewer warehouse commits.
   * @default 1000
   */
  readonly batchSize?: number;
  /**
   * How long Lambda gathers records before invoking the applier (0 to 5 minutes).
   * @default Duration.seconds(5)
   */
  readonly maxBatchingWindow?: Duration;
  /**
   * Retries of a failing batch before its records are given up to the dead-letter queue (0 to
   * 10,000, or -1 for no limit). A limit turns an outage longer than the retries into skipped
   * mirror writes: the applier dead-letters bad input itself and fails only on infrastructure
   * errors (see docs/deploy.md, "Outages").
   * @default -1 (no limit: an outage delays, it never skips)
   */
  readonly retryAttempts?: number;
  /**
   * Age after which a record that still fails is given up to the dead-letter queue (60 s to 7
   * days, shorter than the change-log retention). Like `retryAttempts`, a limit lets an outage
   * skip records.
   * @default - no limit (an outage delays, it never skips)
   */
  readonly maxRecordAge?: Duration;
  /**
   * Concurrent batches per shard (1 to 10); order per key is kept either way.
   * @default 1
   */
  readonly parallelizationFactor?: number;
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
   * Applier iterator age above which its alarm fires: the signal that the sink is stuck.
   * @default - a quarter of the change-log retention (half of `maxRecordAge` when that is set)
   */
  readonly alarmIteratorAgeThreshold?: Duration;
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
}

/**
 * Mirrors the captured tables into a warehouse (Redshift or PostgreSQL): the applier function in
 * the VPC with CDC-safe stream settings and a dead-letter queue, and the alarms that say whether
 * the warehouse is fresh: end-to-end lag per source against `freshnessTarget`, dead letters,
 * persistent apply errors, iterator age.
 */
export class WarehouseSink extends WarehouseSinkBase implements ec2.IConnectable {
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
  /** The applier's security group: allow it on the warehouse port. */
  readonly connections: ec2.Connections;
  /** The alarms this construct created (empty when `alarmsEnabled` is false). */
  readonly alarms: cloudwatch.IAlarm[] = [];
  /** The sources this sink mirrors. */
  readonly sources: ICdcSource[];
  /** How the sink reaches the warehouse (the `Reconciler` reads it the same way). */
  readonly connection: WarehouseConnection;

  constructor(scope: Construct, id: string, props: WarehouseSinkProps) {
    super(scope, id);
    checkRequiredProps(this, 'WarehouseSink', props, ['controlPlane', 'changeLog', 'sources', 'connection', 'vpc']);
    this.sinkId = checkLowerIdent(this, 'sinkId', props.sinkId ?? idFromConstructId(id));
    this.freshnessTarget = props.freshnessTarget ?? Duration.minutes(5);
    if (props.sources.length === 0) fail(this, 'sources must not be empty; a sink mirrors the tables of at least one source');
    const sourceIds = new Set<string>();
    for (const source of props.sources) {
      if (sameChangeLog(source.changeLog, props.changeLog) === false) {
        fail(this, `source ${source.sourceId} (${source.node.path}) publishes to a different change log than this sink reads`);
      }
      if (sourceIds.has(source.sourceId)) fail(this, `source ${source.sourceId} is listed twice`);
      sourceIds.add(source.sourceId);
    }
    this.sources = [...props.sources];
    this.connection = props.connection;
    if (isKnownDuration(this.freshnessTarget)) {
      const freshnessSeconds = this.freshnessTarget.toSeconds();
      if (freshnessSeconds < 30) fail(this, `freshnessTarget must be at least 30 seconds (heartbeats are 10 seconds apart), got ${this.freshnessTarget.toHumanString()}`);
      if (isKnownDuration(props.changeLog.retention) && freshnessSeconds >= props.changeLog.retention.toSeconds()) {
        fail(this, `freshnessTarget (${this.freshnessTarget.toHumanString()}) must be shorter than the change-log retention (${props.changeLog.retention.toHumanString()})`);
      }
    }
    checkIntegerRange(this, 'batchSize', props.batchSize, 1, 10_000);
    checkIntegerRange(this, 'retryAttempts', props.retryAttempts, -1, 10_000);
    checkIntegerRange(this, 'parallelizationFactor', props.parallelizationFactor, 1, 10);
    checkIntegerRange(this, 'mergeMaxRows', props.mergeMaxRows, 1, 10_000_000);
    if (props.mergeMaxAge !== undefined && isKnownDuration(props.mergeMaxAge) && (props.mergeMaxAge.toMilliseconds() < 1000 || props.mergeMaxAge.toMilliseconds() > 3_600_000)) {
      fail(this, `mergeMaxAge must be between 1 second and 1 hour, got ${props.mergeMaxAge.toHumanString()}`);
    }
    const maxBatchingWindow = props.maxBatchingWindow ?? Duration.seconds(5);
    if (isKnownDuration(maxBatchingWindow) && maxBatchingWindow.toSeconds() > 300) fail(this, `maxBatchingWindow must be at most 5 minutes, got ${maxBatchingWindow.toHumanString()}`);

    const securityGroup = new ec2.SecurityGroup(this, 'SecurityGroup', {
      vpc: props.vpc,
      description: `Warehouse sink ${this.sinkId}: the applier (${this.node.path})`,
      // Outbound only to the warehouse port and HTTPS to AWS APIs.
      allowAllOutbound: false,
    });
    (props.awsApiEgress ?? AwsApiEgress.vpcEndpoints()).applyTo(securityGroup, props.vpc);
    this.connections = new ec2.Connections({ securityGroups: [securityGroup] });
    if (props.connection.securityGroup) {
      const port = props.connection.port;
      checkIntegerRange(this, 'warehouse port', port, 1, 65535);
      new ec2.CfnSecurityGroupIngress(this, 'WarehouseIngress', {
        groupId: props.connection.securityGroup.securityGroupId,
        sourceSecurityGroupId: securityGroup.securityGroupId,
        ipProtocol: 'tcp',
        fromPort: port,
        toPort: port,
        description: `Warehouse sink ${this.sinkId}: the applier`,
      });
      new ec2.CfnSecurityGroupEgress(this, 'WarehouseEgress', {
        groupId: securityGroup.securityGroupId,
        destinationSecurityGroupId: props.connection.securityGroup.securityGroupId,
        ipProtocol: 'tcp',
        fromPort: port,
        toPort: port,
        description: `Warehouse sink ${this.sinkId}: to the warehouse`,
      });
    }

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
      },
      memorySize,
      timeout: props.timeout ?? Duration.minutes(5),
      vpc: props.vpc,
      vpcSubnets: props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
      securityGroups: [securityGroup],
    });
    this.applier = applier.fn;
    props.connection.secret.grantRead(applier.fn);
    props.controlPlane.grantSinkApplier(applier.fn, this.sinkId, this.sources.map((s) => s.sourceId));
    // Its own dead letters' whole records, and every source's events stored out of line (docs/large-records.md).
    props.controlPlane.grantPayloadWrite(applier.fn, `dead-letters/${this.sinkId}/`);
    props.controlPlane.grantPayloadRead(applier.fn, 'claims/');
    const consumer = consumeStream(this, applier.fn, {
      stream: props.changeLog.stream,
      streamRetention: props.changeLog.retention,
      batchSize: props.batchSize ?? 1000,
      maxBatchingWindow,
      retryAttempts: props.retryAttempts,
      maxRecordAge: props.maxRecordAge,
      parallelizationFactor: props.parallelizationFactor ?? 1,
      deadLetterQueueEncryptionKey: props.deadLetterQueueEncryptionKey ?? props.changeLog.encryptionKey,
    });
    this.deadLetterQueue = consumer.deadLetterQueue;
    // The applier logs rows' keys and errors: on the platform's key (docs/deploy.md, "Keys").
    if (props.changeLog.encryptionKey) encryptLogGroup(applier.logGroup, props.changeLog.encryptionKey);
    // Every minute the applier replays the holds an operator resume released (docs/operations.md);
    // with nothing released it is one query of this sink's progress items.
    new events.Rule(this, 'ReplaySchedule', {
      description: `Runs the resume replay of warehouse sink ${this.sinkId} (${this.node.path})`,
      schedule: events.Schedule.rate(Duration.minutes(1)),
      targets: [new targets.LambdaFunction(applier.fn, { event: events.RuleTargetInput.fromObject({ cdcReplay: true }), retryAttempts: 0 })],
    });
    Validations.of(applier).acknowledge(
      { id: 'AwsSolutions-IAM5[Action::kms:GenerateDataKey*]', reason: 'CDK key grant; scoped to the one key that encrypts the control plane, change log or secret' },
      { id: 'AwsSolutions-IAM5[Action::kms:ReEncrypt*]', reason: 'CDK key grant; scoped to the one key that encrypts the control plane, change log or secret' },
    );

    if (props.alarmsEnabled ?? true) {
      const actions = props.alarmActions;
      for (const source of this.sources) {
        const sourceId = source.sourceId;
        this.alarms.push(
          createAlarm(this, `EndToEndLagAlarm-${sourceId}`, {
            nameSuffix: `${this.sinkId}-end-to-end-lag-${sourceId}`,
            description:
              `Warehouse sink ${this.sinkId} is more than ${this.freshnessTarget.toHumanString()} behind source ${sourceId}, or has had no heartbeat from it, for 5 minutes (${this.node.path}). ` +
              'Silence counts as breaching: heartbeats arrive every 10 seconds, so a minute without one means capture, the log or the applier has stopped.',
            metric: this.metricEndToEndLag(source),
            threshold: this.freshnessTarget.toMilliseconds(),
            evaluationPeriods: 5,
            datapointsToAlarm: 5,
            // A silent pipeline is a broken one: every minute carries six heartbeats, so a minute
            // without a lag datapoint means no change reached this sink from the source.
            treatMissingData: cloudwatch.TreatMissingData.BREACHING,
            actions,
          }),
          createAlarm(this, `DeadLettersAlarm-${sourceId}`, {
            nameSuffix: `${this.sinkId}-dead-letters-${sourceId}`,
            description: `Warehouse sink ${this.sinkId} dead-lettered events of source ${sourceId}; their tables are marked degraded (${this.node.path}).`,
            metric: this.metricDeadLetters(source),
            threshold: 0,
            evaluationPeriods: 1,
            datapointsToAlarm: 1,
            treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
            actions,
          }),
        );
      }
      const iteratorThreshold = props.alarmIteratorAgeThreshold ?? defaultIteratorAgeThreshold(props.changeLog.retention, consumer.maxRecordAge);
      if (iteratorThreshold === undefined) fail(this, 'alarmIteratorAgeThreshold is required when the change-log retention is a token (a quarter of it is not known at synth time)');
      this.alarms.push(
        createAlarm(this, 'ApplyErrorsAlarm', {
          nameSuffix: `${this.sinkId}-apply-errors`,
          description: `Warehouse sink ${this.sinkId} has failed to apply batches in each of the last 5 minutes (${this.node.path}); batches are retried, the warehouse may be unreachable.`,
          metric: this.metricApplyErrors(),
          threshold: 0,
          evaluationPeriods: 5,
          datapointsToAlarm: 5,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          actions,
        }),
        createAlarm(this, 'MergeErrorsAlarm', {
          nameSuffix: `${this.sinkId}-merge-errors`,
          description:
            `Deferred merges of warehouse sink ${this.sinkId} have failed in each of the last 15 minutes (${this.node.path}). ` +
            'The views still show every change, but a delta that is not merged keeps growing and makes them slower to read; the applier logs name the table and the error (docs/warehouse-apply.md).',
          metric: this.metricMergeErrors(),
          threshold: 0,
          // The schedule tries every due delta once a minute: a merge that keeps failing breaches every minute.
          evaluationPeriods: 15,
          datapointsToAlarm: 15,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          actions,
        }),
        onFailureQueueAlarm(this, 'DeadLetterQueueAlarm', {
          nameSuffix: `${this.sinkId}-dead-letter-queue`,
          description:
            `Change-log records were given up by the event source mapping of warehouse sink ${this.sinkId} (${this.node.path}). ` +
            'Each message names the shard and sequence numbers; re-drive them from the change log or its archive. With the default settings (no retry or age limit) nothing is given up, so a message here means a limit was configured or a record expired unread.',
          queue: consumer.deadLetterQueue,
          actions,
        }),
        createAlarm(this, 'IteratorAgeAlarm', {
          nameSuffix: `${this.sinkId}-iterator-age`,
          description:
            `The applier of warehouse sink ${this.sinkId} reads records older than ${iteratorThreshold.toHumanString()} (${this.node.path}): the sink is stuck or behind. ` +
            (consumer.maxRecordAge
              ? `Records older than ${consumer.maxRecordAge.toHumanString()} go to the dead-letter queue.`
              : `Failing batches are retried without limit; records expire unread from the change log after ${props.changeLog.retention.toHumanString()}.`),
          metric: iteratorAgeMetric(applier.fn),
          threshold: iteratorThreshold.toMilliseconds(),
          evaluationPeriods: 5,
          datapointsToAlarm: 5,
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          actions,
        }),
      );
    }
  }

  /** Age of the oldest change-log record the applier reads (`AWS/Lambda IteratorAge`), milliseconds; maximum per minute by default. */
  metricIteratorAge(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return iteratorAgeMetric(this.applier, props);
  }
}
