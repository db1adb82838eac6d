import { Duration, RemovalPolicy, Resource, Size, Stack, Validations, type IResource } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kinesis from 'aws-cdk-lib/aws-kinesis';
import * as firehose from 'aws-cdk-lib/aws-kinesisfirehose';
import * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import * as logs from 'aws-cdk-lib/aws-logs';
import * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import { S3_SERVER_ACCESS_LOGS_USE_BUCKET_POLICY } from 'aws-cdk-lib/cx-api';
import type { Construct } from 'constructs';
import { EnvName, ServiceName } from '../contracts/env.ts';
import { createAlarm, iteratorAgeMetric, onFailureQueueAlarm } from './private/alarms.ts';
import { CdcFunction } from './private/cdc-function.ts';
import { createPlatformKey } from './private/platform-key.ts';
import { consumeStream, defaultIteratorAgeThreshold } from './private/stream-consumer.ts';
import { checkIntegerRange, checkKinesisRetention, checkRequiredProps, fail, isKnownDuration } from './private/validate.ts';

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
  /** The stream's retention. */
  readonly retention: Duration;
  /**
   * The stream's customer-managed key.
   * @default - the stream uses the AWS managed key; grants do not cover a key
   */
  readonly encryptionKey?: kms.IKey;
}

/**
 * The archive bucket's configuration changes its bucket policy denies to everyone but the
 * break-glass roles and CloudFormation (docs/deploy.md, "The archive").
 */
const ARCHIVE_CONFIGURATION_ACTIONS = [
  's3:PutLifecycleConfiguration',
  's3:PutBucketPolicy',
  's3:DeleteBucketPolicy',
  's3:PutBucketObjectLockConfiguration',
  's3:PutBucketVersioning',
  's3:PutReplicationConfiguration',
];

/** Where Firehose writes in the archive bucket: its records, and the records it could not deliver. */
const FIREHOSE_PREFIXES = ['changes/', 'errors/'] as const;

/** Where the archive copier writes in the archive bucket (docs/rebuild.md, "Archive layout"). */
const ARCHIVE_COPIER_PREFIX = 'change-log/';

abstract class ChangeLogBase extends Resource implements IChangeLog {
  abstract readonly stream: kinesis.IStream;
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
    this.archiveRetention = props.archiveRetention ?? Duration.days(365);
    checkKinesisRetention(this, 'retention', this.retention);
    checkIntegerRange(this, 'shardCount', props.shardCount, 1, 100_000);
    if (isKnownDuration(this.archiveRetention) && isKnownDuration(this.retention)) {
      if (this.archiveRetention.toDays({ integral: false }) !== Math.floor(this.archiveRetention.toDays({ integral: false }))) {
        fail(this, `archiveRetention must be a whole number of days (s3 lifecycle rules count days), got ${this.archiveRetention.toHumanString()}`);
      }
      if (this.archiveRetention.toSeconds() < this.retention.toSeconds()) {
        fail(
          this,
          `archiveRetention (${this.archiveRetention.toHumanString()}) must not be shorter than retention (${this.retention.toHumanString()}); the archive must hold at least what the stream holds`,
        );
      }
    }
    const bufferingInterval = props.archiveBufferingInterval ?? Duration.minutes(5);
    if (isKnownDuration(bufferingInterval) && bufferingInterval.toSeconds() > 900) {
      fail(this, `archiveBufferingInterval must be at most 15 minutes, got ${bufferingInterval.toHumanString()}`);
    }
    if (props.archiveReplicaBucket && !props.archiveReplicaEncryptionKey) {
      fail(this, 'archiveReplicaEncryptionKey is required with archiveReplicaBucket: archive objects are kms-encrypted and s3 replicates them only to a named key in the replica region');
    }
    if (props.archiveReplicaEncryptionKey && !props.archiveReplicaBucket) {
      fail(this, 'archiveReplicaEncryptionKey is set but archiveReplicaBucket is not');
    }

    this.key = props.encryptionKey ?? createPlatformKey(this, 'Key', removalPolicy, `Created by ${this.node.path}: the change log, its dead-letter queue and log groups`);
    this.encryptionKey = this.key;
    const stream = new kinesis.Stream(this, 'Stream', {
      retentionPeriod: this.retention,
      streamMode: props.shardCount === undefined ? kinesis.StreamMode.ON_DEMAND : kinesis.StreamMode.PROVISIONED,
      shardCount: props.shardCount,
      encryption: kinesis.StreamEncryption.KMS,
      encryptionKey: this.key,
      removalPolicy,
    });
    this.stream = stream;
    Validations.of(stream).acknowledge({
      id: 'AwsSolutions-KDS3',
      reason: 'the stream is encrypted with the platform\'s own customer-managed key (or the encryptionKey given), as docs/architecture.md says, instead of alias/aws/kinesis',
    });

    this.archiveEncryptionKey =
      props.archiveEncryptionKey ??
      new kms.Key(this, 'ArchiveKey', {
        description: `Created by ${this.node.path}`,
        enableKeyRotation: true,
        removalPolicy,
      });
    const accessLogs = props.accessLogsBucket ?? this.createAccessLogsBucket(removalPolicy);
    const archive = new s3.Bucket(this, 'Archive', {
      encryption: s3.BucketEncryption.KMS,
      encryptionKey: this.archiveEncryptionKey,
      bucketKeyEnabled: true,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      enforceSSL: true,
      minimumTLSVersion: 1.2,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      versioned: true,
      // Every version is locked for the archive's retention (docs/deploy.md, "The archive"): a
      // rewrite makes a new version and leaves the one written first in place.
      objectLockEnabled: true,
      objectLockDefaultRetention:
        (props.archiveObjectLockMode ?? s3.ObjectLockMode.GOVERNANCE) === s3.ObjectLockMode.COMPLIANCE
          ? s3.ObjectLockRetention.compliance(this.archiveRetention)
          : s3.ObjectLockRetention.governance(this.archiveRetention),
      serverAccessLogsBucket: accessLogs,
      serverAccessLogsPrefix: 'archive/',
      lifecycleRules: [
        {
          id: 'expire-at-archive-retention',
          expiration: this.archiveRetention,
          // Versioning exists for replication and against accidental overwrites and deletes: a
          // version made noncurrent (overwritten, or hidden by a delete marker) is kept for
          // another archiveRetention, so whatever happened can be undone for that long
          // (docs/deploy.md, "The archive").
          noncurrentVersionExpiration: this.archiveRetention,
          abortIncompleteMultipartUploadAfter: Duration.days(7),
        },
        { id: 'remove-expired-delete-markers', expiredObjectDeleteMarker: true },
      ],
      replicationRules: props.archiveReplicaBucket
        ? [
            {
              id: 'replicate-archive',
              destination: props.archiveReplicaBucket,
              kmsKey: props.archiveReplicaEncryptionKey,
              sseKmsEncryptedObjects: true,
              priority: 0,
              deleteMarkerReplication: false,
            },
          ]
        : undefined,
      removalPolicy,
    });
    this.archiveBucket = archive;
    // The archive is the record of truth beyond the stream: nobody deletes from it but the
    // lifecycle rule (which bucket policies do not govern) and the break-glass roles.
    const breakGlass = props.archiveBreakGlassRoles ?? [];
    const notBreakGlass = breakGlass.length > 0 ? { ArnNotEquals: { 'aws:PrincipalArn': breakGlass.map((r) => r.roleArn) } } : {};
    archive.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'DenyArchiveDeletes',
        effect: iam.Effect.DENY,
        principals: [new iam.AnyPrincipal()],
        actions: ['s3:DeleteObject', 's3:DeleteObjectVersion', 's3:BypassGovernanceRetention'],
        resources: [archive.arnForObjects('*')],
        ...(breakGlass.length > 0 ? { conditions: notBreakGlass } : {}),
      }),
    );
    // Nobody shortens the retention, drops the lock or the policy, or suspends versioning outside
    // a CloudFormation deployment of this stack (which must stay able to update and delete the
    // bucket and its policy) or a break-glass role (docs/deploy.md, "The archive").
    archive.addToResourcePolicy(
      new iam.PolicyStatement({
        sid: 'DenyArchiveConfigurationChanges',
        effect: iam.Effect.DENY,
        principals: [new iam.AnyPrincipal()],
        actions: ARCHIVE_CONFIGURATION_ACTIONS,
        resources: [archive.bucketArn],
        conditions: { ...notBreakGlass, 'ForAllValues:StringNotEquals': { 'aws:CalledVia': ['cloudformation.amazonaws.com'] } },
      }),
    );

    // Firehose's own role, with exactly what an S3 destination needs (no delete): the destination
    // is given an immutable view of it, so the L2's read-write grant adds nothing.
    const deliveryRole = new iam.Role(this, 'ArchiveDeliveryRole', {
      assumedBy: new iam.ServicePrincipal('firehose.amazonaws.com'),
      description: `Firehose writes the archive of ${this.node.path}: put and read objects, never delete`,
    });
    this.archiveDeliveryRole = deliveryRole;

    const delivery = new firehose.DeliveryStream(this, 'ArchiveDelivery', {
      source: new firehose.KinesisStreamSource(stream),
      destination: new firehose.S3Bucket(archive, {
        role: deliveryRole.withoutPolicyUpdates(),
        encryptionKey: this.archiveEncryptionKey,
        compression: firehose.Compression.GZIP,
        bufferingInterval,
        bufferingSize: Size.mebibytes(64),
        dataOutputPrefix: `${FIREHOSE_PREFIXES[0]}!{timestamp:yyyy/MM/dd/HH}/`,
        errorOutputPrefix: `${FIREHOSE_PREFIXES[1]}!{firehose:error-output-type}/!{timestamp:yyyy/MM/dd}/`,
        // One change event per line, so the archive reads back as JSON Lines.
        processors: [new firehose.AppendDelimiterToRecordProcessor()],
      }),
    });
    this.archiveDeliveryStream = delivery;
    const deliveryLogGroup = delivery.node.tryFindChild('LogGroup') as logs.LogGroup | undefined;
    if (deliveryLogGroup) (deliveryLogGroup.node.defaultChild as logs.CfnLogGroup).kmsKeyId = this.key.keyArn;
    const deliveryPolicy = new iam.Policy(this, 'ArchiveDeliveryPolicy', {
      roles: [deliveryRole],
      statements: [
        // The S3 destination permissions Firehose documents, without s3:DeleteObject*, and objects
        // only under Firehose's own prefixes: the by-table archive a rebuild replays is the
        // copier's alone (docs/deploy.md, "The archive").
        new iam.PolicyStatement({
          actions: ['s3:GetBucketLocation', 's3:ListBucket', 's3:ListBucketMultipartUploads'],
          resources: [archive.bucketArn],
        }),
        new iam.PolicyStatement({
          actions: ['s3:AbortMultipartUpload', 's3:GetObject', 's3:PutObject'],
          resources: FIREHOSE_PREFIXES.map((p) => archive.arnForObjects(`${p}*`)),
        }),
        new iam.PolicyStatement({ actions: ['kms:Decrypt', 'kms:GenerateDataKey'], resources: [this.archiveEncryptionKey.keyArn] }),
        ...(deliveryLogGroup ? [new iam.PolicyStatement({ actions: ['logs:CreateLogStream', 'logs:PutLogEvents'], resources: [deliveryLogGroup.logGroupArn] })] : []),
      ],
    });
    // Only the delivery stream itself waits for the policy (its log group is referenced by it).
    delivery.node.findChild('Resource').node.addDependency(deliveryPolicy);
    Validations.of(delivery).acknowledge({
      id: 'AwsSolutions-KDF1',
      reason: 'a delivery stream whose source is a kinesis stream cannot have its own server-side encryption; records are encrypted in the source stream and, with kms, in the archive bucket',
    });
    this.acknowledgeGrantWildcards();

    let copier: CdcFunction | undefined;
    if (props.archiveCopierEnabled ?? true) {
      const made = this.createArchiveCopier(props.archiveCopierBatchingWindow ?? Duration.minutes(1));
      copier = made.copier;
      this.archiveCopier = copier.fn;
      this.archiveCopierDeadLetterQueue = made.deadLetterQueue;
      this.archiveCopierPrefix = ARCHIVE_COPIER_PREFIX;
    }

    if (props.alarmsEnabled ?? true) {
      const threshold = props.alarmArchiveFreshnessThreshold ?? Duration.hours(1);
      this.alarms.push(
        createAlarm(this, 'ArchiveFreshnessAlarm', {
          nameSuffix: `${this.node.id}-archive-freshness`,
          description:
            `The oldest change-log record not yet archived to S3 is older than ${threshold.toHumanString()} (${this.node.path}). ` +
            'Check the delivery stream errors (bucket policy, kms key). Records still in the stream are not lost until the stream retention passes.',
          metric: this.metricDeliveryToS3DataFreshness({ period: Duration.minutes(5) }),
          threshold: threshold.toSeconds(),
          evaluationPeriods: 3,
          datapointsToAlarm: 3,
          // Freshness is reported while there is something to deliver; no data means nothing waits.
          treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
          actions: props.alarmActions,
        }),
      );
      if (copier) {
        // A token retention: a quarter of the shortest retention Kinesis allows (24 hours), never later than a quarter of the real one.
        const iteratorThreshold = props.alarmArchiveCopierIteratorAgeThreshold ?? defaultIteratorAgeThreshold(this.retention) ?? Duration.hours(6);
        this.alarms.push(
          createAlarm(this, 'ArchiveCopierIteratorAgeAlarm', {
            nameSuffix: `${this.node.id}-archive-copier-iterator-age`,
            description:
              `The archive copier reads change-log records older than ${iteratorThreshold.toHumanString()} (${this.node.path}): it is stuck or behind (its logs name the batch and the error; S3 or KMS permissions, throttling). ` +
              `Failing batches are retried without limit; records not archived when they expire from the stream (after ${this.retention.toHumanString()}) are a hole that makes rebuilds over it refuse HISTORY_INCOMPLETE.`,
            metric: iteratorAgeMetric(copier.fn),
            threshold: iteratorThreshold.toMilliseconds(),
            evaluationPeriods: 5,
            datapointsToAlarm: 5,
            treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
            actions: props.alarmActions,
          }),
          onFailureQueueAlarm(this, 'ArchiveCopierDeadLetterQueueAlarm', {
            nameSuffix: `${this.node.id}-archive-copier-dead-letter-queue`,
            description:
              `The event source mapping of the archive copier gave up change-log records (${this.node.path}); each message names the shard and sequence numbers. ` +
              'They are missing from the by-table archive: rebuilds over them are refused as a history hole. With the default settings nothing is given up, so the mapping was changed.',
            queue: this.archiveCopierDeadLetterQueue!,
            actions: props.alarmActions,
          }),
        );
      }
    }
  }

  /**
   * The archive copier (lambda/handlers/archive-copier.ts): the stream's event source mapping
   * invokes it with one shard's batch at a time (parallelization 1), from the trim horizon; it
   * stores the whole batch (table objects, then the batch marker) or reports the batch failed from
   * its first record, so the checkpoint advances only past stored batches. Failing batches are
   * retried without limit and never given up (no retry or record-age limit, so its on-failure
   * queue stays empty): a batch given up would be a hole in the archive. Bisect splits a failing batch;
   * the halves are stored like any batch. Its role may put, get and list only under the copier's
   * prefix (never delete) and use the archive key.
   */
  private createArchiveCopier(batchingWindow: Duration): { copier: CdcFunction; deadLetterQueue: sqs.IQueue } {
    if (isKnownDuration(batchingWindow) && batchingWindow.toSeconds() > 300) fail(this, `archiveCopierBatchingWindow must be at most 5 minutes, got ${batchingWindow.toHumanString()}`);
    const archive = this.archiveBucket;
    const copier = new CdcFunction(this, 'ArchiveCopier', {
      handlerName: 'archive-copier',
      description: `Copies the change log into the by-table archive (${ARCHIVE_COPIER_PREFIX}) of ${this.node.path}`,
      serviceName: ServiceName.ARCHIVE_COPIER,
      environment: {
        [EnvName.ARCHIVE_BUCKET]: archive.bucketName,
        [EnvName.ARCHIVE_PREFIX]: ARCHIVE_COPIER_PREFIX,
        [EnvName.ARCHIVE_KMS_KEY_ARN]: this.archiveEncryptionKey.keyArn,
      },
      memorySize: Size.mebibytes(512),
      timeout: Duration.minutes(2),
      logEncryptionKey: this.key,
    });
    const fn = copier.fn;
    fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['s3:ListBucket'], resources: [archive.bucketArn], conditions: { StringLike: { 's3:prefix': [`${ARCHIVE_COPIER_PREFIX}*`] } } }));
    fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['s3:PutObject', 's3:GetObject'], resources: [archive.arnForObjects(`${ARCHIVE_COPIER_PREFIX}*`)] }));
    // Puts are encrypted with the archive key (GenerateDataKey), gets decrypt; nothing else.
    fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['kms:GenerateDataKey', 'kms:Decrypt'], resources: [this.archiveEncryptionKey.keyArn] }));
    // The platform's CDC-safe mapping (lib/private/stream-consumer.ts): from the trim horizon, one
    // batch per shard at a time, partial batch responses, bisect, no retry or record-age limit. Its
    // on-failure queue receives nothing with these settings; a message there would be a batch that
    // is missing from the archive (the replay names it as a hole).
    const consumer = consumeStream(copier, fn, {
      stream: this.stream,
      streamRetention: this.retention,
      batchSize: 5000,
      maxBatchingWindow: batchingWindow,
      parallelizationFactor: 1,
      deadLetterQueueEncryptionKey: this.key,
    });
    const archiveId = Stack.of(this).getLogicalId(archive.node.defaultChild as s3.CfnBucket);
    Validations.of(copier).acknowledge({
      id: `AwsSolutions-IAM5[Resource::<${archiveId}.Arn>/${ARCHIVE_COPIER_PREFIX}*]`,
      reason: 'the archive copier puts and reads objects under its own prefix of the archive bucket, under keys named by shard and sequence numbers (never deletes)',
    }, ...['kms:GenerateDataKey*', 'kms:ReEncrypt*'].map((a) => ({
      id: `AwsSolutions-IAM5[Action::${a}]`,
      reason: 'CDK grant to send to the on-failure queue, which the platform key encrypts; scoped to that one key',
    })));
    return { copier, deadLetterQueue: consumer.deadLetterQueue };
  }

  /** Age of the oldest record not yet delivered to the archive, seconds; maximum over 5 minutes by default. */
  metricDeliveryToS3DataFreshness(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return this.archiveDeliveryStream.metric('DeliveryToS3.DataFreshness', { statistic: cloudwatch.Stats.MAXIMUM, ...props }).attachTo(this);
  }

  private createAccessLogsBucket(removalPolicy: RemovalPolicy): s3.Bucket {
    const bucket = new s3.Bucket(this, 'AccessLogs', {
      encryption: s3.BucketEncryption.S3_MANAGED,
      blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
      enforceSSL: true,
      minimumTLSVersion: 1.2,
      objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
      lifecycleRules: [{ id: 'expire-access-logs', expiration: this.archiveRetention }],
      removalPolicy,
    });
    Validations.of(bucket).acknowledge({
      id: 'AwsSolutions-S1',
      reason: 'this bucket is the server-access-log destination of the archive; logging it into itself would loop',
    });
    return bucket;
  }

  /** The object-key wildcard of the delivery policy (Firehose writes generated keys). */
  private acknowledgeGrantWildcards(): void {
    const stack = Stack.of(this);
    const policy = this.node.findChild('ArchiveDeliveryPolicy');
    const archiveId = stack.getLogicalId(this.archiveBucket.node.defaultChild as s3.CfnBucket);
    Validations.of(policy).acknowledge(
      ...FIREHOSE_PREFIXES.map((p) => ({
        id: `AwsSolutions-IAM5[Resource::<${archiveId}.Arn>/${p}*]`,
        reason: `Firehose writes objects under generated keys below ${p} in the archive bucket (put and read only; deletes are denied by the bucket policy)`,
      })),
    );
  }
}
