/**
 * The change-log stream and the key that encrypts it (the platform's own key unless one was
 * given; docs/deploy.md, "Keys").
 */
import { Validations, type Duration, type RemovalPolicy } from 'aws-cdk-lib';
import * as kinesis from 'aws-cdk-lib/aws-kinesis';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type { Construct } from 'constructs';
import { createPlatformKey } from './platform-key.ts';

export interface ChangeLogStreamProps {
  readonly retention: Duration;
  /** Undefined: on-demand capacity mode. */
  readonly shardCount?: number;
  /** Undefined: a new platform key `Key`. */
  readonly encryptionKey?: kms.IKey;
  readonly removalPolicy: RemovalPolicy;
}

/** `Key` (unless given) and `Stream`, in that order. */
export function changeLogStream(scope: Construct, props: ChangeLogStreamProps): { key: kms.IKey; stream: kinesis.Stream } {
  const key =
    props.encryptionKey ??
    createPlatformKey(scope, 'Key', props.removalPolicy, `Created by ${scope.node.path}: the change log, its dead-letter queue and log groups`);
  const stream = new kinesis.Stream(scope, 'Stream', {
    retentionPeriod: props.retention,
    streamMode: props.shardCount === undefined ? kinesis.StreamMode.ON_DEMAND : kinesis.StreamMode.PROVISIONED,
    shardCount: props.shardCount,
    encryption: kinesis.StreamEncryption.KMS,
    encryptionKey: key,
    removalPolicy: props.removalPolicy,
  });
  Validations.of(stream).acknowledge({
    id: 'AwsSolutions-KDS3',
    reason:
      "the stream is encrypted with the platform's own customer-managed key (or the encryptionKey given), as docs/architecture.md says, instead of alias/aws/kinesis",
  });
  return { key, stream };
}
