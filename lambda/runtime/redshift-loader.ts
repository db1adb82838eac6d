/**
 * The Redshift loader function's loader (docs/warehouse-apply.md, "Redshift: the applier"), from
 * what `WarehouseSink` sets on it: the control table and sink, the staging bucket and prefix, the
 * cluster role COPY assumes, its own timeout and the sink's `freshnessTarget` (its cadence).
 */
import { S3Client } from '@aws-sdk/client-s3';
import { EnvName } from '../../contracts/env.ts';
import { ConfigurationError } from '../core/shared/errors.ts';
import { redshiftCadence } from '../core/warehouse/redshift-load.ts';
import { S3Archive } from '../adapters/archive-s3.ts';
import { dynamoDbClient } from '../adapters/aws-clients.ts';
import { DynamoDbLoadRequests } from '../adapters/control-plane-dynamodb/load-requests.ts';
import { StagedRedshiftLoader } from '../adapters/redshift-staged-loader.ts';
import { pooledSession } from '../adapters/redshift-session.ts';
import { requiredEnv } from './environment.ts';
import { poolFromEnvironment } from './warehouse-pool.ts';

function positiveMs(name: string): number {
  const n = Number(requiredEnv(name));
  if (!Number.isInteger(n) || n <= 0) throw new ConfigurationError(`${name}: expected a positive number of ms, got ${JSON.stringify(process.env[name])}`);
  return n;
}

export async function stagedLoaderFromEnvironment(log: (message: string, detail: Record<string, unknown>) => void): Promise<StagedRedshiftLoader> {
  const sinkId = requiredEnv(EnvName.SINK_ID);
  const bucket = requiredEnv(EnvName.REDSHIFT_STAGING_BUCKET);
  return new StagedRedshiftLoader({
    session: pooledSession(await poolFromEnvironment()),
    requests: new DynamoDbLoadRequests(dynamoDbClient(), requiredEnv(EnvName.CONTROL_TABLE), sinkId),
    place: { store: new S3Archive(new S3Client({}), bucket), bucket },
    prefix: requiredEnv(EnvName.REDSHIFT_STAGING_PREFIX),
    roleArn: requiredEnv(EnvName.REDSHIFT_COPY_ROLE_ARN),
    // The ledger schema `cdc local` uses too (local/redshift-sink.ts).
    ledgerSchema: `${sinkId}_loads`,
    cadence: redshiftCadence(positiveMs(EnvName.FRESHNESS_TARGET_MS)),
    loaderTimeoutMs: positiveMs(EnvName.REDSHIFT_LOADER_TIMEOUT_MS),
    log,
  });
}
