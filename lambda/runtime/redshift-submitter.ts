/**
 * The warehouse applier's Redshift writer on AWS (docs/warehouse-apply.md, "Redshift: the applier"),
 * from what `WarehouseSink` sets when it has `redshiftStaging`: the staging bucket and prefix, the
 * loader function and how long a request waits for its load. Without the staging bucket the
 * applier keeps the portable path (`PgWarehouse`).
 */
import { InvokeCommand, LambdaClient } from '@aws-sdk/client-lambda';
import { S3Client } from '@aws-sdk/client-s3';
import type pg from 'pg';
import { EnvName } from '../../contracts/env.ts';
import { ConfigurationError } from '../core/shared/errors.ts';
import type { Warehouse } from '../core/warehouse/warehouse-port.ts';
import { S3Archive } from '../adapters/archive-s3.ts';
import { dynamoDbClient } from '../adapters/aws-clients.ts';
import { DynamoDbLoadRequests } from '../adapters/control-plane-dynamodb/load-requests.ts';
import { asyncInvoker, RedshiftStagingSubmitter } from '../adapters/redshift-staging-submitter.ts';
import { pooledSession } from '../adapters/redshift-session.ts';
import { RedshiftWarehouse } from '../adapters/warehouse-redshift.ts';
import { requiredEnv } from './environment.ts';

/** The staging writer when the sink stages for a loader function; undefined otherwise. */
export function redshiftWriterFromEnvironment(pool: pg.Pool, controlTable: string, sinkId: string): Warehouse | undefined {
  const bucket = process.env[EnvName.REDSHIFT_STAGING_BUCKET];
  if (!bucket) return undefined;
  const waitMs = Number(requiredEnv(EnvName.REDSHIFT_LOAD_WAIT_MS));
  if (!Number.isInteger(waitMs) || waitMs <= 0) throw new ConfigurationError(`${EnvName.REDSHIFT_LOAD_WAIT_MS}: expected a positive number of ms`);
  const lambda = new LambdaClient({});
  const submitter = new RedshiftStagingSubmitter({
    session: pooledSession(pool),
    requests: new DynamoDbLoadRequests(dynamoDbClient(), controlTable, sinkId),
    place: { store: new S3Archive(new S3Client({}), bucket), bucket },
    prefix: requiredEnv(EnvName.REDSHIFT_STAGING_PREFIX),
    invokeLoader: asyncInvoker((input) => lambda.send(new InvokeCommand(input)), requiredEnv(EnvName.REDSHIFT_LOADER_FUNCTION)),
    waitMs,
  });
  return new RedshiftWarehouse({ loader: submitter });
}
