/**
 * The change log's archive bucket: its key, its access-log bucket, Object Lock for the archive's
 * retention, and the bucket policy that denies deletes and configuration changes to all but the
 * break-glass roles and CloudFormation (docs/deploy.md, "The archive").
 */
import { Duration, type RemovalPolicy } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import * as s3 from 'aws-cdk-lib/aws-s3';
import type { Construct } from 'constructs';
import { accessLogsBucket, dataBucketProps } from './platform-bucket.ts';

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

/** The `ChangeLogProps` the archive is built from, named here: importing them from ../change-log.ts would close an import cycle. */
export interface ArchiveBucketProps {
  readonly archiveEncryptionKey?: kms.IKey;
  readonly accessLogsBucket?: s3.IBucket;
  readonly archiveObjectLockMode?: s3.ObjectLockMode;
  readonly archiveReplicaBucket?: s3.IBucket;
  readonly archiveReplicaEncryptionKey?: kms.IKey;
  readonly archiveBreakGlassRoles?: iam.IRole[];
  readonly archiveRetention: Duration;
  readonly removalPolicy: RemovalPolicy;
}

/** `ArchiveKey` (unless given), `AccessLogs` (unless given) and `Archive` with its denies, in that order. */
export function archiveBucket(scope: Construct, props: ArchiveBucketProps): { archiveKey: kms.IKey; bucket: s3.Bucket } {
  const { archiveRetention, removalPolicy } = props;
  const archiveKey =
    props.archiveEncryptionKey ??
    new kms.Key(scope, 'ArchiveKey', {
      description: `Created by ${scope.node.path}`,
      enableKeyRotation: true,
      removalPolicy,
    });
  const accessLogs = props.accessLogsBucket ?? accessLogsBucket(scope, 'AccessLogs', { logged: 'the archive', expiration: archiveRetention, removalPolicy });
  const bucket = new s3.Bucket(scope, 'Archive', {
    ...dataBucketProps(archiveKey),
    // Every version is locked for the archive's retention (docs/deploy.md, "The archive"): a
    // rewrite makes a new version and leaves the one written first in place.
    objectLockEnabled: true,
    objectLockDefaultRetention:
      (props.archiveObjectLockMode ?? s3.ObjectLockMode.GOVERNANCE) === s3.ObjectLockMode.COMPLIANCE
        ? s3.ObjectLockRetention.compliance(archiveRetention)
        : s3.ObjectLockRetention.governance(archiveRetention),
    serverAccessLogsBucket: accessLogs,
    serverAccessLogsPrefix: 'archive/',
    lifecycleRules: [
      {
        id: 'expire-at-archive-retention',
        expiration: archiveRetention,
        // Versioning exists for replication and against accidental overwrites and deletes: a
        // version made noncurrent (overwritten, or hidden by a delete marker) is kept for
        // another archiveRetention, so whatever happened can be undone for that long
        // (docs/deploy.md, "The archive").
        noncurrentVersionExpiration: archiveRetention,
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
  denyDeletesAndConfigurationChanges(bucket, props.archiveBreakGlassRoles ?? []);
  return { archiveKey, bucket };
}

/**
 * The archive is the record of truth beyond the stream: nobody deletes from it but the lifecycle
 * rule (which bucket policies do not govern) and the break-glass roles.
 */
function denyDeletesAndConfigurationChanges(archive: s3.Bucket, breakGlass: iam.IRole[]): void {
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
}
