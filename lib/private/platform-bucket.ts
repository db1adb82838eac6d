/**
 * The settings the platform's buckets share (docs/deploy.md, "1. What the example deploys"): the
 * data buckets (the control plane's payloads, the change log's archive) are encrypted with a
 * customer managed key, private, TLS only and versioned, and log their access to a bucket of
 * their own, which is private and TLS only as well.
 */
import { Validations, type Duration, type RemovalPolicy } from 'aws-cdk-lib';
import type * as kms from 'aws-cdk-lib/aws-kms';
import * as s3 from 'aws-cdk-lib/aws-s3';
import type { Construct } from 'constructs';

/** No public access, TLS 1.2 or later only, objects owned by the bucket owner (no ACLs). */
const PRIVATE_BUCKET = {
  blockPublicAccess: s3.BlockPublicAccess.BLOCK_ALL,
  enforceSSL: true,
  minimumTLSVersion: 1.2,
  objectOwnership: s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
} as const satisfies s3.BucketProps;

/** A data bucket's settings: SSE-KMS with `key` (and an S3 bucket key), private, TLS only, versioned. */
export function dataBucketProps(key: kms.IKey): s3.BucketProps {
  return { encryption: s3.BucketEncryption.KMS, encryptionKey: key, bucketKeyEnabled: true, ...PRIVATE_BUCKET, versioned: true };
}

/**
 * The server-access-log bucket of the data bucket `logged` names: SSE-S3 (the only encryption
 * S3 delivers access logs to), private, TLS only, its logs expiring after `expiration`.
 */
export function accessLogsBucket(scope: Construct, id: string, props: { logged: string; expiration: Duration; removalPolicy: RemovalPolicy }): s3.Bucket {
  const bucket = new s3.Bucket(scope, id, {
    encryption: s3.BucketEncryption.S3_MANAGED,
    ...PRIVATE_BUCKET,
    lifecycleRules: [{ id: 'expire-access-logs', expiration: props.expiration }],
    removalPolicy: props.removalPolicy,
  });
  Validations.of(bucket).acknowledge({
    id: 'AwsSolutions-S1',
    reason: `this bucket is the server-access-log destination of ${props.logged}; logging it into itself would loop`,
  });
  return bucket;
}
