/** The source's raw stream and the grant wildcards its functions carry (`CdcSource`'s private builders). */
import { Duration, RemovalPolicy, Validations } from 'aws-cdk-lib';
import type * as iam from 'aws-cdk-lib/aws-iam';
import * as kinesis from 'aws-cdk-lib/aws-kinesis';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type { Construct } from 'constructs';
import type { CdcFunction } from './cdc-function.ts';

/** The stream DMS writes and only the normalizer reads (`RawStream`, in `scope`). */
export function createRawStream(scope: Construct, encryptionKey: kms.IKey, retention: Duration, shardCount: number | undefined): kinesis.Stream {
  const rawStream = new kinesis.Stream(scope, 'RawStream', {
    retentionPeriod: retention,
    streamMode: shardCount === undefined ? kinesis.StreamMode.ON_DEMAND : kinesis.StreamMode.PROVISIONED,
    shardCount,
    encryption: kinesis.StreamEncryption.KMS,
    encryptionKey,
    // The raw stream is a buffer, not a record (the change log is): it goes with the source.
    removalPolicy: RemovalPolicy.DESTROY,
  });
  Validations.of(rawStream).acknowledge({
    id: 'AwsSolutions-KDS3',
    reason: "encrypted with the platform's own customer-managed key (or the encryptionKey given) instead of alias/aws/kinesis",
  });
  return rawStream;
}

/** Wildcards that CDK grants generate (Kinesis, KMS and secret grants), acknowledged with their scope. */
export function acknowledgeGrantWildcards(functions: CdcFunction[], ...roles: iam.Role[]): void {
  const kmsAcks = [
    { id: 'AwsSolutions-IAM5[Action::kms:GenerateDataKey*]', reason: 'CDK key grant; scoped to the one key that encrypts the stream or secret' },
    { id: 'AwsSolutions-IAM5[Action::kms:ReEncrypt*]', reason: 'CDK key grant; scoped to the one key that encrypts the stream or secret' },
  ];
  for (const f of functions) Validations.of(f).acknowledge(...kmsAcks);
  for (const r of roles) Validations.of(r).acknowledge(...kmsAcks);
}
