/**
 * The Redshift loader of a warehouse sink with `redshiftStaging` (docs/warehouse-apply.md,
 * "Redshift: the applier"; docs/deploy.md, §11): the loader function (reserved concurrency 1: one
 * session per warehouse), its one-minute schedule, and what the applier and the loader may do:
 * - the applier: `s3:PutObject` on `<prefix>requests/*` only, `lambda:InvokeFunction` on the loader
 *   only, its load requests in the control table (read, put, update, delete);
 * - the loader: `s3:PutObject` on `<prefix>loads/*` only (its manifests; COPY reads through the
 *   cluster role, not the loader), the load requests (read, put, update, delete), the warehouse secret.
 * Both run in the applier's security group (the warehouse port and HTTPS to AWS APIs).
 */
import { Duration, Size, Stack, Validations, type CfnElement } from 'aws-cdk-lib';
import type * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import type * as kms from 'aws-cdk-lib/aws-kms';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as s3 from 'aws-cdk-lib/aws-s3';
import type { Construct } from 'constructs';
import { ControlPartition } from '../../contracts/control-plane-keys.ts';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import type { IControlPlane } from '../control-plane.ts';
import type { WarehouseConnection } from '../warehouse-connection.ts';
import { CdcFunction } from './cdc-function.ts';
import { startEveryMinute } from './minute-schedule.ts';
import { encryptLogGroup } from './platform-key.ts';
import { fail, isKnownDuration } from './validate.ts';

/** The loader's timeout: a claim older than it is stale (its invocation cannot be running). */
export const LOADER_TIMEOUT = Duration.minutes(2);
/**
 * The applier's batch size with staging unless `batchSize` says otherwise: a batch waits for a load, so
 * a shard carries one batch per load (docs/performance.md, "Sizing").
 */
export const REDSHIFT_STAGING_BATCH = 10_000;
/** What an applier keeps of its timeout for its own work after a load request stops waiting. */
const APPLIER_MARGIN = Duration.minutes(1);

export interface RedshiftLoaderProps {
  readonly sinkId: string;
  readonly bucket: s3.IBucket;
  readonly prefix: string;
  readonly copyRole: iam.IRole;
  readonly controlPlane: IControlPlane;
  readonly connection: WarehouseConnection;
  readonly freshnessTarget: Duration;
  readonly vpc: ec2.IVpc;
  readonly vpcSubnets: ec2.SubnetSelection;
  readonly securityGroup: ec2.ISecurityGroup;
  readonly logKey?: kms.IKey;
}

/** The loader function, its schedule and its grants. */
export function redshiftLoaderFunction(scope: Construct, p: RedshiftLoaderProps): CdcFunction {
  const loader = new CdcFunction(scope, 'RedshiftLoader', {
    handlerName: 'redshift-loader',
    description: `Loads the staged batches of warehouse sink ${p.sinkId} into Redshift with COPY, and merges (${scope.node.path})`,
    serviceName: ServiceName.REDSHIFT_LOADER,
    environment: {
      [EnvName.SINK_ID]: p.sinkId,
      [EnvName.CONTROL_TABLE]: p.controlPlane.controlPlaneTableName,
      [EnvName.WAREHOUSE_SECRET_ARN]: p.connection.secret.secretArn,
      [EnvName.WAREHOUSE_SSL_MODE]: p.connection.sslMode,
      [EnvName.REDSHIFT_STAGING_BUCKET]: p.bucket.bucketName,
      [EnvName.REDSHIFT_STAGING_PREFIX]: p.prefix,
      [EnvName.REDSHIFT_COPY_ROLE_ARN]: p.copyRole.roleArn,
      [EnvName.REDSHIFT_LOADER_TIMEOUT_MS]: String(LOADER_TIMEOUT.toMilliseconds()),
      [EnvName.FRESHNESS_TARGET_MS]: String(p.freshnessTarget.toMilliseconds()),
    },
    memorySize: Size.mebibytes(512),
    timeout: LOADER_TIMEOUT,
    vpc: p.vpc,
    vpcSubnets: p.vpcSubnets,
    securityGroups: [p.securityGroup],
    // A failed invocation is not retried: the next request's invocation or the schedule's does its work.
    retryAttempts: 0,
  });
  // One session per warehouse, whatever the shard count.
  (loader.fn.node.defaultChild as lambda.CfnFunction).reservedConcurrentExecutions = 1;
  if (p.logKey) encryptLogGroup(loader.logGroup, p.logKey);
  p.connection.secret.grantRead(loader.fn);
  grantRequests(p.controlPlane, loader.fn, p.sinkId);
  grantStagingWrite(loader, p.bucket, `${p.prefix}loads/`);
  startEveryMinute(
    scope,
    'RedshiftLoaderSchedule',
    loader.fn,
    `Runs the Redshift loader of warehouse sink ${p.sinkId}: merges and stranded requests (${scope.node.path})`,
  );
  return loader;
}

/** The applier's environment for staging: where, which loader, and how long a request waits (its timeout less a minute). */
export function stagingEnvironment(scope: Construct, p: RedshiftLoaderProps, loader: lambda.IFunction, applierTimeout: Duration): Record<string, string> {
  if (isKnownDuration(applierTimeout) && applierTimeout.toMilliseconds() < LOADER_TIMEOUT.toMilliseconds())
    fail(
      scope,
      `timeout must be at least ${LOADER_TIMEOUT.toHumanString()} with redshiftStaging (a batch waits for the loader's COPY), got ${applierTimeout.toHumanString()}`,
    );
  return {
    [EnvName.REDSHIFT_STAGING_BUCKET]: p.bucket.bucketName,
    [EnvName.REDSHIFT_STAGING_PREFIX]: p.prefix,
    [EnvName.REDSHIFT_LOADER_FUNCTION]: loader.functionName,
    [EnvName.REDSHIFT_LOAD_WAIT_MS]: String(applierTimeout.toMilliseconds() - APPLIER_MARGIN.toMilliseconds()),
  };
}

/** The applier's rights for staging: its objects, its requests, the loader's invocation. */
export function grantStagingApplier(applier: CdcFunction, p: RedshiftLoaderProps, loader: lambda.IFunction): void {
  grantStagingWrite(applier, p.bucket, `${p.prefix}requests/`);
  grantRequests(p.controlPlane, applier.fn, p.sinkId);
  applier.fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['lambda:InvokeFunction'], resources: [loader.functionArn] }));
}

function grantRequests(controlPlane: IControlPlane, fn: lambda.IFunction, sinkId: string): void {
  const own = [ControlPartition.loadRequests(sinkId)];
  controlPlane.grantItems(fn, { read: own, put: own, update: own, remove: own });
}

/** `s3:PutObject` under `prefix` only; the bucket's customer managed key for encryption. */
function grantStagingWrite(fn: CdcFunction, bucket: s3.IBucket, prefix: string): void {
  fn.fn.addToRolePolicy(new iam.PolicyStatement({ actions: ['s3:PutObject'], resources: [bucket.arnForObjects(`${prefix}*`)] }));
  bucket.encryptionKey?.grantEncrypt(fn.fn);
  const cfn = bucket.node.defaultChild;
  Validations.of(fn).acknowledge(
    ...(cfn
      ? [
          {
            id: `AwsSolutions-IAM5[Resource::<${Stack.of(fn).getLogicalId(cfn as CfnElement)}.Arn>/${prefix}*]`,
            reason: `the staging objects are named per request and per load; writes are limited to ${prefix}`,
          },
        ]
      : []),
    {
      id: 'AwsSolutions-IAM5[Action::kms:GenerateDataKey*]',
      reason: 'CDK key grant; scoped to the one key that encrypts the control plane, the secret or the staging bucket',
    },
    {
      id: 'AwsSolutions-IAM5[Action::kms:ReEncrypt*]',
      reason: 'CDK key grant; scoped to the one key that encrypts the control plane, the secret or the staging bucket',
    },
  );
}
