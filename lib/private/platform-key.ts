/**
 * The platform's own key (docs/architecture.md §3; docs/deploy.md, "Keys"): a customer-managed
 * KMS key with rotation that encrypts a construct's streams, dead-letter queues and log groups,
 * unless the user passes a key of their own.
 */
import { ArnFormat, Stack, type RemovalPolicy } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import type * as logs from 'aws-cdk-lib/aws-logs';
import type { Construct } from 'constructs';

/** A new key with rotation whose policy lets CloudWatch Logs of the stack's region encrypt this account's log groups. */
export function createPlatformKey(scope: Construct, id: string, removalPolicy: RemovalPolicy, description: string): kms.Key {
  const key = new kms.Key(scope, id, { description, enableKeyRotation: true, removalPolicy });
  allowLogGroups(key);
  return key;
}

/**
 * Lets the CloudWatch Logs service of the stack's region use the key for this account's log
 * groups (the encryption context names the log group). No-op for an imported key: its policy is
 * its owner's (docs/deploy.md, "Keys", says what it must allow).
 */
export function allowLogGroups(key: kms.IKey): void {
  const stack = Stack.of(key);
  key.addToResourcePolicy(
    new iam.PolicyStatement({
      sid: 'AllowCloudWatchLogsOfThisAccount',
      principals: [new iam.ServicePrincipal(`logs.${stack.region}.amazonaws.com`)],
      actions: ['kms:Encrypt*', 'kms:Decrypt*', 'kms:ReEncrypt*', 'kms:GenerateDataKey*', 'kms:Describe*'],
      resources: ['*'],
      conditions: {
        ArnLike: {
          'kms:EncryptionContext:aws:logs:arn': stack.formatArn({
            service: 'logs',
            resource: 'log-group',
            resourceName: '*',
            arnFormat: ArnFormat.COLON_RESOURCE_NAME,
          }),
        },
      },
    }),
  );
}

/** Encrypts a log group this construct created with `key` (whose policy must let CloudWatch Logs use it: `allowLogGroups`). */
export function encryptLogGroup(group: logs.LogGroup, key: kms.IKey): void {
  (group.node.defaultChild as logs.CfnLogGroup).kmsKeyId = key.keyArn;
}
