/**
 * The checks of a `ChangeLog`'s properties that the types cannot express: retentions, shard
 * count, buffering interval and the replica pair (docs/deploy.md, "The archive").
 */
import type { Duration } from 'aws-cdk-lib';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type { Construct } from 'constructs';
import { checkIntegerRange, checkKinesisRetention, fail, isKnownDuration } from './validate.ts';

export interface ChangeLogChecks {
  readonly retention: Duration;
  readonly archiveRetention: Duration;
  readonly bufferingInterval: Duration;
  readonly shardCount?: number;
  readonly archiveReplicaBucket?: s3.IBucket;
  readonly archiveReplicaEncryptionKey?: kms.IKey;
}

/** Fails synthesis, naming the property, on what a `ChangeLog` cannot be built from. */
export function checkChangeLogProps(scope: Construct, props: ChangeLogChecks): void {
  const { retention, archiveRetention, bufferingInterval } = props;
  checkKinesisRetention(scope, 'retention', retention);
  checkIntegerRange(scope, 'shardCount', props.shardCount, 1, 100_000);
  if (isKnownDuration(archiveRetention) && isKnownDuration(retention)) {
    if (archiveRetention.toDays({ integral: false }) !== Math.floor(archiveRetention.toDays({ integral: false }))) {
      fail(scope, `archiveRetention must be a whole number of days (s3 lifecycle rules count days), got ${archiveRetention.toHumanString()}`);
    }
    if (archiveRetention.toSeconds() < retention.toSeconds()) {
      fail(
        scope,
        `archiveRetention (${archiveRetention.toHumanString()}) must not be shorter than retention (${retention.toHumanString()}); the archive must hold at least what the stream holds`,
      );
    }
  }
  if (isKnownDuration(bufferingInterval) && bufferingInterval.toSeconds() > 900) {
    fail(scope, `archiveBufferingInterval must be at most 15 minutes, got ${bufferingInterval.toHumanString()}`);
  }
  if (props.archiveReplicaBucket && !props.archiveReplicaEncryptionKey) {
    fail(
      scope,
      'archiveReplicaEncryptionKey is required with archiveReplicaBucket: archive objects are kms-encrypted and s3 replicates them only to a named key in the replica region',
    );
  }
  if (props.archiveReplicaEncryptionKey && !props.archiveReplicaBucket) {
    fail(scope, 'archiveReplicaEncryptionKey is set but archiveReplicaBucket is not');
  }
}
