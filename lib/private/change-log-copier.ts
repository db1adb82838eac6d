/**
 * The archive copier (lambda/handlers/archive-copier.ts) and its stream mapping: the by-table
 * archive with batch markers a rebuild replays (docs/rebuild.md, "Archive layout").
 */
import { Duration, Size, Stack, Validations } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kinesis from 'aws-cdk-lib/aws-kinesis';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import { CdcFunction } from './cdc-function.ts';
import { consumeStream } from './stream-consumer.ts';
import { fail, isKnownDuration } from './validate.ts';

/** Where the archive copier writes in the archive bucket (docs/rebuild.md, "Archive layout"). */
export const ARCHIVE_COPIER_PREFIX = 'change-log/';

export interface ArchiveCopierProps {
  readonly stream: kinesis.IStream;
  readonly retention: Duration;
  readonly archive: s3.IBucket;
  readonly archiveKey: kms.IKey;
  /** Encrypts the copier's log group and on-failure queue. */
  readonly key: kms.IKey;
  readonly batchingWindow: Duration;
}

/**
 * `ArchiveCopier`: the stream's event source mapping invokes it with one shard's batch at a time
 * (parallelization 1), from the trim horizon; it stores the whole batch (table objects, then the
 * batch marker) or reports the batch failed from its first record, so the checkpoint advances
 * only past stored batches. Failing batches are retried without limit and never given up (no
 * retry or record-age limit, so its on-failure queue stays empty): a batch given up would be a
 * hole in the archive. Bisect splits a failing batch; the halves are stored like any batch. Its
 * role may put, get and list only under the copier's prefix (never delete) and use the archive key.
 */
export function archiveCopier(scope: Construct, props: ArchiveCopierProps): { copier: CdcFunction; deadLetterQueue: sqs.IQueue } {
  const { archive, archiveKey, batchingWindow } = props;
  if (isKnownDuration(batchingWindow) && batchingWindow.toSeconds() > 300)
    fail(scope, `archiveCopierBatchingWindow must be at most 5 minutes, got ${batchingWindow.toHumanString()}`);
  const copier = new CdcFunction(scope, 'ArchiveCopier', {
    handlerName: 'archive-copier',
    description: `Copies the change log into the by-table archive (${ARCHIVE_COPIER_PREFIX}) of ${scope.node.path}`,
    serviceName: ServiceName.ARCHIVE_COPIER,
    environment: {
      [EnvName.ARCHIVE_BUCKET]: archive.bucketName,
      [EnvName.ARCHIVE_PREFIX]: ARCHIVE_COPIER_PREFIX,
      [EnvName.ARCHIVE_KMS_KEY_ARN]: archiveKey.keyArn,
    },
    memorySize: Size.mebibytes(512),
    timeout: Duration.minutes(2),
    logEncryptionKey: props.key,
  });
  const fn = copier.fn;
  fn.addToRolePolicy(
    new iam.PolicyStatement({
      actions: ['s3:ListBucket'],
      resources: [archive.bucketArn],
      conditions: { StringLike: { 's3:prefix': [`${ARCHIVE_COPIER_PREFIX}*`] } },
    }),
  );
  fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['s3:PutObject', 's3:GetObject'], resources: [archive.arnForObjects(`${ARCHIVE_COPIER_PREFIX}*`)] }));
  // Puts are encrypted with the archive key (GenerateDataKey), gets decrypt; nothing else.
  fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['kms:GenerateDataKey', 'kms:Decrypt'], resources: [archiveKey.keyArn] }));
  // The platform's CDC-safe mapping (lib/private/stream-consumer.ts): from the trim horizon, one
  // batch per shard at a time, partial batch responses, bisect, no retry or record-age limit. Its
  // on-failure queue receives nothing with these settings; a message there would be a batch that
  // is missing from the archive (the replay names it as a hole).
  const consumer = consumeStream(copier, fn, {
    stream: props.stream,
    streamRetention: props.retention,
    batchSize: 5000,
    maxBatchingWindow: batchingWindow,
    parallelizationFactor: 1,
    deadLetterQueueEncryptionKey: props.key,
  });
  const archiveId = Stack.of(scope).getLogicalId(archive.node.defaultChild as s3.CfnBucket);
  Validations.of(copier).acknowledge(
    {
      id: `AwsSolutions-IAM5[Resource::<${archiveId}.Arn>/${ARCHIVE_COPIER_PREFIX}*]`,
      reason:
        'the archive copier puts and reads objects under its own prefix of the archive bucket, under keys named by shard and sequence numbers (never deletes)',
    },
    ...['kms:GenerateDataKey*', 'kms:ReEncrypt*'].map((a) => ({
      id: `AwsSolutions-IAM5[Action::${a}]`,
      reason: 'CDK grant to send to the on-failure queue, which the platform key encrypts; scoped to that one key',
    })),
  );
  return { copier, deadLetterQueue: consumer.deadLetterQueue };
}
