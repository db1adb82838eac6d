/**
 * The Firehose delivery stream that archives the change log under its own prefixes of the archive
 * bucket, with a role that may put and read objects there and never delete (docs/deploy.md,
 * "The archive").
 */
import { Size, Stack, Validations, type Duration } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kinesis from 'aws-cdk-lib/aws-kinesis';
import * as firehose from 'aws-cdk-lib/aws-kinesisfirehose';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type { Construct } from 'constructs';

/** Where Firehose writes in the archive bucket: its records, and the records it could not deliver. */
const FIREHOSE_PREFIXES = ['changes/', 'errors/'] as const;

export interface ArchiveDeliveryProps {
  readonly stream: kinesis.IStream;
  readonly archive: s3.Bucket;
  readonly archiveKey: kms.IKey;
  /** Encrypts the delivery stream's log group. */
  readonly logKey: kms.IKey;
  readonly bufferingInterval: Duration;
}

/** `ArchiveDeliveryRole`, `ArchiveDelivery` and `ArchiveDeliveryPolicy`, in that order. */
export function archiveDelivery(scope: Construct, props: ArchiveDeliveryProps): { role: iam.Role; delivery: firehose.DeliveryStream } {
  const { archive, archiveKey } = props;
  // Firehose's own role, with exactly what an S3 destination needs (no delete): the destination
  // is given an immutable view of it, so the L2's read-write grant adds nothing.
  const role = new iam.Role(scope, 'ArchiveDeliveryRole', {
    assumedBy: new iam.ServicePrincipal('firehose.amazonaws.com'),
    description: `Firehose writes the archive of ${scope.node.path}: put and read objects, never delete`,
  });
  const delivery = new firehose.DeliveryStream(scope, 'ArchiveDelivery', {
    source: new firehose.KinesisStreamSource(props.stream),
    destination: new firehose.S3Bucket(archive, {
      role: role.withoutPolicyUpdates(),
      encryptionKey: archiveKey,
      compression: firehose.Compression.GZIP,
      bufferingInterval: props.bufferingInterval,
      bufferingSize: Size.mebibytes(64),
      dataOutputPrefix: `${FIREHOSE_PREFIXES[0]}!{timestamp:yyyy/MM/dd/HH}/`,
      errorOutputPrefix: `${FIREHOSE_PREFIXES[1]}!{firehose:error-output-type}/!{timestamp:yyyy/MM/dd}/`,
      // One change event per line, so the archive reads back as JSON Lines.
      processors: [new firehose.AppendDelimiterToRecordProcessor()],
    }),
  });
  const logGroup = delivery.node.tryFindChild('LogGroup') as logs.LogGroup | undefined;
  if (logGroup) (logGroup.node.defaultChild as logs.CfnLogGroup).kmsKeyId = props.logKey.keyArn;
  const policy = new iam.Policy(scope, 'ArchiveDeliveryPolicy', {
    roles: [role],
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
      new iam.PolicyStatement({ actions: ['kms:Decrypt', 'kms:GenerateDataKey'], resources: [archiveKey.keyArn] }),
      ...(logGroup ? [new iam.PolicyStatement({ actions: ['logs:CreateLogStream', 'logs:PutLogEvents'], resources: [logGroup.logGroupArn] })] : []),
    ],
  });
  // Only the delivery stream itself waits for the policy (its log group is referenced by it).
  delivery.node.findChild('Resource').node.addDependency(policy);
  Validations.of(delivery).acknowledge({
    id: 'AwsSolutions-KDF1',
    reason:
      'a delivery stream whose source is a kinesis stream cannot have its own server-side encryption; records are encrypted in the source stream and, with kms, in the archive bucket',
  });
  acknowledgeGrantWildcards(policy, archive);
  return { role, delivery };
}

/** The object-key wildcard of the delivery policy (Firehose writes generated keys). */
function acknowledgeGrantWildcards(policy: iam.Policy, archive: s3.Bucket): void {
  const archiveId = Stack.of(policy).getLogicalId(archive.node.defaultChild as s3.CfnBucket);
  Validations.of(policy).acknowledge(
    ...FIREHOSE_PREFIXES.map((p) => ({
      id: `AwsSolutions-IAM5[Resource::<${archiveId}.Arn>/${p}*]`,
      reason: `Firehose writes objects under generated keys below ${p} in the archive bucket (put and read only; deletes are denied by the bucket policy)`,
    })),
  );
}
