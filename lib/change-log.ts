import { Duration, RemovalPolicy, Resource, type IResource } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type * as iam from 'aws-cdk-lib/aws-iam';
import * as kinesis from 'aws-cdk-lib/aws-kinesis';
import type * as firehose from 'aws-cdk-lib/aws-kinesisfirehose';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { S3_SERVER_ACCESS_LOGS_USE_BUCKET_POLICY } from 'aws-cdk-lib/cx-api';
import type { Construct } from 'constructs';
import { changeLogAlarms } from './private/change-log-alarms.ts';
import { archiveBucket } from './private/change-log-archive.ts';
import { ARCHIVE_COPIER_PREFIX, archiveCopier } from './private/change-log-copier.ts';
import { archiveDelivery } from './private/change-log-delivery.ts';
import { changeLogStream } from './private/change-log-stream.ts';
import { checkChangeLogProps } from './private/change-log-validate.ts';
import { checkRequiredProps } from './private/validate.ts';

/**
 * The change log: the Kinesis stream every sink reads (the system of record for change,
 * invariant 1), archived to S3.
 */
export interface IChangeLog extends IResource {
  /** The change-log stream. */
  readonly stream: kinesis.IStream;
  /** How long the stream keeps records; consumers derive their record-age bounds from it. */
  readonly retention: Duration;
  /**
   * The change log's customer-managed key (the platform's own key unless one was given; undefined
   * for an imported change log without one). Sinks encrypt their dead-letter queues and log
   * groups with it by default (docs/deploy.md, "Keys").
   */
  readonly encryptionKey?: kms.IKey;
  /**
   * Whether the normalizer packs change events bound for the same shard into KPL aggregated
   * records (docs/architecture.md, "5.1 The change event"). The platform's consumers, Firehose and
   * the KCL de-aggregate them; a consumer of your own reads them with `deaggregateChangeLogRecord`.
   */
  readonly recordAggregation: boolean;
  /**
   * ARN of the change-log stream.
   * @attribute
   */
  readonly changeLogStreamArn: string;
  /**
   * Name of the change-log stream.
   * @attribute
   */
  readonly changeLogStreamName: string;
  /** Read records (and decrypt them). */
  grantRead(grantee: iam.IGrantable): iam.Grant;
  /** Write records (and encrypt them). */
  grantWrite(grantee: iam.IGrantable): iam.Grant;
  /** Any stream actions. */
  grant(grantee: iam.IGrantable, ...actions: string[]): iam.Grant;
  /** A metric of the stream (namespace `AWS/Kinesis`, dimension `StreamName`). */
  metric(metricName: string, props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Records put into the stream; sum over 5 minutes by default. */
  metricIncomingRecords(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Bytes put into the stream; sum over 5 minutes by default. */
  metricIncomingBytes(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Age of the oldest record read by any consumer, milliseconds; maximum over 5 minutes by default. */
  metricGetRecordsIteratorAgeMilliseconds(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Records refused for exceeding provisioned write throughput; sum over 5 minutes by default. */
  metricWriteProvisionedThroughputExceeded(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Records that failed in PutRecords calls; sum over 5 minutes by default. */
  metricPutRecordsFailedRecords(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
}

/** Properties of a `ChangeLog`. */
export interface ChangeLogProps {
  /**
   * Pack change events bound for the same shard into KPL aggregated records (docs/architecture.md,
   * "5.1 The change event"): far fewer stream records per change. Turn it off when a consumer of
   * your own reads the stream without de-aggregating (the platform's consumers, Firehose and the KCL do).
   * @default true
   */
  readonly recordAggregation?: boolean;
  /**
   * How long the stream keeps records: the window in which a sink can be replayed or rebuilt from
   * the stream alone (older history comes from the archive). 24 hours to 365 days.
   * @default Duration.days(7)
   */
  readonly retention?: Duration;
  /**
   * Provisioned shard count. Each shard takes 1 MB/s or 1,000 records/s of writes.
   * @default - on-demand capacity mode
   */
  readonly shardCount?: number;
  /**
   * Customer-managed key for the stream, the archive copier's dead-letter queue and the log groups
   * of the copier and the delivery stream. A key of your own must let CloudWatch Logs of the
   * stack's region use it (docs/deploy.md, "Keys").
   * @default - a new key with rotation enabled (the platform's own key)
   */
  readonly encryptionKey?: kms.IKey;
  /**
   * How long archived change files are kept before the lifecycle rule expires them. At least the
   * stream retention: the archive is where history older than the stream comes from.
   * @default Duration.days(365)
   */
  readonly archiveRetention?: Duration;
  /**
   * Customer-managed key for the archive bucket.
   * @default - a new key with rotation enabled
   */
  readonly archiveEncryptionKey?: kms.IKey;
  /**
   * How long Firehose buffers records before writing an archive file (0 to 15 minutes).
   * @default Duration.minutes(5)
   */
  readonly archiveBufferingInterval?: Duration;
  /**
   * Bucket that receives the server access logs of the archive bucket.
   * @default - a new bucket with S3-managed encryption, expiring logs after `archiveRetention`
   */
  readonly accessLogsBucket?: s3.IBucket;
  /**
   * A versioned bucket in a second region that receives a replica of every archive object.
   * @default - no replication
   */
  readonly archiveReplicaBucket?: s3.IBucket;
  /**
   * Key in the replica's region that encrypts the replicas. Required with `archiveReplicaBucket`:
   * archive objects are KMS-encrypted and S3 replicates them only to a named key.
   * @default - no replication
   */
  readonly archiveReplicaEncryptionKey?: kms.IKey;
  /**
   * Roles that may delete archive objects and their versions, change the archive bucket's
   * configuration and bypass governance-mode Object Lock (break glass). The archive's bucket
   * policy denies `s3:DeleteObject`, `s3:DeleteObjectVersion`, `s3:BypassGovernanceRetention` and
   * lifecycle, policy, Object Lock, versioning and replication changes to every other principal, the
   * delivery role and the copier included; objects leave only through the lifecycle rule, and the
   * configuration changes only through a CloudFormation deployment (docs/deploy.md, "The archive").
   * @default - no principal may delete archive objects or change the archive's configuration outside CloudFormation
   */
  readonly archiveBreakGlassRoles?: iam.IRole[];
  /**
   * The S3 Object Lock mode of the archive: every object version is locked for `archiveRetention`
   * from when it is written. `GOVERNANCE`: a principal allowed `s3:BypassGovernanceRetention` (only
   * the break-glass roles: the bucket policy denies it to everyone else) can still delete a locked
   * version. `COMPLIANCE`: nobody can, not even the account's root user, until the retention
   * passes; a stack with `RemovalPolicy.DESTROY` cannot delete a bucket that still holds locked
   * versions (docs/deploy.md, "The archive").
   * @default s3.ObjectLockMode.GOVERNANCE
   */
  readonly archiveObjectLockMode?: s3.ObjectLockMode;
  /**
   * Whether to deploy the archive copier: a function that consumes the stream and writes the
   * by-table archive with batch markers under `change-log/` in the archive bucket, the archive a
   * rebuild replays (docs/rebuild.md, "Archive layout"). Firehose's archive under `changes/` is
   * written either way; without the copier no rebuild on AWS can prove its history complete.
   * @default true
   */
  readonly archiveCopierEnabled?: boolean;
  /**
   * How long the archive copier's event source gathers records before invoking it (0 to 5
   * minutes): longer means fewer, larger archive objects (fewer S3 requests).
   * @default Duration.minutes(1)
   */
  readonly archiveCopierBatchingWindow?: Duration;
  /**
   * Age of the oldest record the archive copier has not stored above which its alarm fires.
   * @default - a quarter of `retention` (at most 7 days; 6 hours when `retention` is a token)
   */
  readonly alarmArchiveCopierIteratorAgeThreshold?: Duration;
  /**
   * What happens to the stream, the archive bucket and the keys this construct creates when they
   * leave the stack.
   * @default RemovalPolicy.RETAIN
   */
  readonly removalPolicy?: RemovalPolicy;
  /**
   * Whether to create the recommended alarms (archive delivery freshness, archive copier iterator age).
   * @default true
   */
  readonly alarmsEnabled?: boolean;
  /**
   * Actions for the alarms' ALARM and OK transitions (an SNS topic, an incident tool).
   * @default - no actions
   */
  readonly alarmActions?: cloudwatch.IAlarmAction[];
  /**
   * Age of the oldest record not yet in the archive above which the archive alarm fires.
   * @default Duration.hours(1)
   */
  readonly alarmArchiveFreshnessThreshold?: Duration;
}

/** Attributes of an existing change log, for `ChangeLog.fromChangeLogAttributes`. */
export interface ChangeLogAttributes {
  /** ARN of the change-log stream. */
  readonly streamArn: string;
  /**
   * Whether the normalizers publishing to it pack events into KPL aggregated records (`ChangeLogProps.recordAggregation`).
   * @default true
   */
  readonly recordAggregation?: boolean;
  /** The stream's retention. */
  readonly retention: Duration;
  /**
   * The stream's customer-managed key.
   * @default - the stream uses the AWS managed key; grants do not cover a key
   */
  readonly encryptionKey?: kms.IKey;
}

abstract class ChangeLogBase extends Resource implements IChangeLog {
  abstract readonly stream: kinesis.IStream;
  abstract readonly recordAggregation: boolean;
  abstract readonly retention: Duration;
  abstract readonly encryptionKey?: kms.IKey;

  get changeLogStreamArn(): string {
    return this.stream.streamArn;
  }

  get changeLogStreamName(): string {
    return this.stream.streamName;
  }

  grantRead(grantee: iam.IGrantable): iam.Grant {
    return this.stream.grantRead(grantee);
  }

  grantWrite(grantee: iam.IGrantable): iam.Grant {
    return this.stream.grantWrite(grantee);
  }

  grant(grantee: iam.IGrantable, ...actions: string[]): iam.Grant {
    return this.stream.grant(grantee, ...actions);
  }

  metric(metricName: string, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.stream.metric(metricName, props).attachTo(this);
  }

  metricIncomingRecords(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.stream.metricIncomingRecords(props).attachTo(this);
  }

  metricIncomingBytes(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.stream.metricIncomingBytes(props).attachTo(this);
  }

  metricGetRecordsIteratorAgeMilliseconds(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.stream.metricGetRecordsIteratorAgeMilliseconds(props).attachTo(this);
  }

  metricWriteProvisionedThroughputExceeded(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.stream.metricWriteProvisionedThroughputExceeded(props).attachTo(this);
  }

  metricPutRecordsFailedRecords(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.stream.metricPutRecordsFailedRecords(props).attachTo(this);
  }
}

/** A change log of this app with its S3 archive: what a `WarehouseRebuild` replays. */
export interface IArchivedChangeLog extends IChangeLog {
  /** The archive bucket. */
  readonly archiveBucket: s3.IBucket;
  /** The key that encrypts the archive. */
  readonly archiveEncryptionKey: kms.IKey;
  /**
   * Key prefix of the by-table archive (docs/rebuild.md, "Archive layout").
   * @default - no by-table archive (the archive copier is disabled)
   */
  readonly archiveCopierPrefix?: string;
}

/**
 * The change log: a KMS-encrypted Kinesis stream (on-demand or provisioned) and a Firehose
 * delivery stream that archives every record, one JSON document per line, gzip-compressed, to an
 * S3 bucket (KMS, versioned, public access blocked, TLS only, access-logged, expiring after
 * `archiveRetention`), optionally replicated to a second region; and the archive copier, a
 * function that writes the same records to the bucket in the by-table layout with batch markers
 * (`archiveCopierPrefix`), the archive a rebuild replays (docs/rebuild.md).
 */
export class ChangeLog extends ChangeLogBase implements IArchivedChangeLog {
  /**
   * Refers to a change log deployed elsewhere (another stack, account or region). Its account and
   * region come from `streamArn`.
   */
  static fromChangeLogAttributes(scope: Construct, id: string, attrs: ChangeLogAttributes): IChangeLog {
    class Import extends ChangeLogBase {
      readonly stream: kinesis.IStream;
      readonly retention = attrs.retention;
      readonly encryptionKey = attrs.encryptionKey;
      readonly recordAggregation = attrs.recordAggregation ?? true;
      constructor() {
        super(scope, id, { environmentFromArn: attrs.streamArn });
        checkRequiredProps(this, 'ChangeLog.fromChangeLogAttributes', attrs, ['streamArn', 'retention']);
        this.stream = kinesis.Stream.fromStreamAttributes(this, 'Stream', { streamArn: attrs.streamArn, encryptionKey: attrs.encryptionKey });
      }
    }
    return new Import();
  }

  readonly stream: kinesis.IStream;
  readonly retention: Duration;
  readonly recordAggregation: boolean;
  /**
   * The key that encrypts the stream, the copier's dead-letter queue and this construct's log
   * groups: always set on a `ChangeLog` (the platform's own key unless one was given).
   */
  readonly encryptionKey?: kms.IKey;
  /** `encryptionKey`, for this construct's own use. */
  private readonly key: kms.IKey;
  /** How long archive objects are kept. */
  readonly archiveRetention: Duration;
  /** The archive bucket. */
  readonly archiveBucket: s3.IBucket;
  /** The key that encrypts the archive. */
  readonly archiveEncryptionKey: kms.IKey;
  /** The Firehose delivery stream that writes the archive. */
  readonly archiveDeliveryStream: firehose.IDeliveryStream;
  /** The role Firehose writes the archive with: put and read objects, never delete. */
  readonly archiveDeliveryRole: iam.IRole;
  /**
   * The archive copier function (undefined when `archiveCopierEnabled` is false).
   */
  readonly archiveCopier?: lambda.IFunction;
  /**
   * Key prefix of the by-table archive the copier writes (`change-log/`), where a
   * `WarehouseRebuild` reads by default; undefined when `archiveCopierEnabled` is false.
   */
  readonly archiveCopierPrefix?: string;
  /**
   * The on-failure queue of the archive copier's event source mapping (undefined without the
   * copier). It receives nothing with the default settings: a message there names a batch missing
   * from the by-table archive.
   */
  readonly archiveCopierDeadLetterQueue?: sqs.IQueue;
  /** The alarms this construct created (empty when `alarmsEnabled` is false). */
  readonly alarms: cloudwatch.IAlarm[] = [];

  constructor(scope: Construct, id: string, props: ChangeLogProps = {}) {
    super(scope, id);
    // Server access logs are delivered through a bucket policy (not the log-delivery ACL, which
    // needs ACLs enabled on the log bucket), whatever the app's feature flags say.
    this.node.setContext(S3_SERVER_ACCESS_LOGS_USE_BUCKET_POLICY, true);
    const removalPolicy = props.removalPolicy ?? RemovalPolicy.RETAIN;
    this.retention = props.retention ?? Duration.days(7);
    this.recordAggregation = props.recordAggregation ?? true;
    this.archiveRetention = props.archiveRetention ?? Duration.days(365);
    const bufferingInterval = props.archiveBufferingInterval ?? Duration.minutes(5);
    checkChangeLogProps(this, { ...props, retention: this.retention, archiveRetention: this.archiveRetention, bufferingInterval });

    const { key, stream } = changeLogStream(this, {
      retention: this.retention,
      shardCount: props.shardCount,
      encryptionKey: props.encryptionKey,
      removalPolicy,
    });
    this.key = key;
    this.encryptionKey = key;
    this.stream = stream;

    const archive = archiveBucket(this, { ...props, archiveRetention: this.archiveRetention, removalPolicy });
    this.archiveEncryptionKey = archive.archiveKey;
    this.archiveBucket = archive.bucket;

    const delivery = archiveDelivery(this, { stream, archive: archive.bucket, archiveKey: archive.archiveKey, logKey: key, bufferingInterval });
    this.archiveDeliveryRole = delivery.role;
    this.archiveDeliveryStream = delivery.delivery;

    let copier: { fn: lambda.IFunction; deadLetterQueue: sqs.IQueue } | undefined;
    if (props.archiveCopierEnabled ?? true) {
      const made = archiveCopier(this, {
        stream,
        retention: this.retention,
        archive: archive.bucket,
        archiveKey: archive.archiveKey,
        key,
        batchingWindow: props.archiveCopierBatchingWindow ?? Duration.minutes(1),
      });
      copier = { fn: made.copier.fn, deadLetterQueue: made.deadLetterQueue };
      this.archiveCopier = copier.fn;
      this.archiveCopierDeadLetterQueue = copier.deadLetterQueue;
      this.archiveCopierPrefix = ARCHIVE_COPIER_PREFIX;
    }

    if (props.alarmsEnabled ?? true) {
      this.alarms.push(
        ...changeLogAlarms(this, {
          actions: props.alarmActions,
          deliveryFreshness: this.metricDeliveryToS3DataFreshness({ period: Duration.minutes(5) }),
          freshnessThreshold: props.alarmArchiveFreshnessThreshold,
          retention: this.retention,
          copier,
          copierIteratorAgeThreshold: props.alarmArchiveCopierIteratorAgeThreshold,
        }),
      );
    }
  }

  /** Age of the oldest record not yet delivered to the archive, seconds; maximum over 5 minutes by default. */
  metricDeliveryToS3DataFreshness(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.archiveDeliveryStream.metric('DeliveryToS3.DataFreshness', { statistic: cloudwatch.Stats.MAXIMUM, ...props }).attachTo(this);
  }
}
