/**
 * The Redshift loader Lambda of a warehouse sink with `redshiftStaging` (docs/warehouse-apply.md,
 * "Redshift: the applier"): reserved concurrency 1, so one session per warehouse whatever the shard
 * count. Started asynchronously by the appliers after each load request and every minute by its
 * schedule (merges and stranded requests with no traffic); each invocation recovers stale claims,
 * loads while requests arrive within its time, and merges when due (`StagedRedshiftLoader`).
 */
import { Logger } from '@aws-lambda-powertools/logger';
import type { Context } from 'aws-lambda';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import type { LoaderRun, StagedRedshiftLoader } from '../adapters/redshift-staged-loader.ts';
import { stagedLoaderFromEnvironment } from '../runtime/redshift-loader.ts';

const logger = new Logger({ serviceName: process.env[EnvName.POWERTOOLS_SERVICE_NAME] ?? ServiceName.REDSHIFT_LOADER });
/** Time left for the last statements and the marks after the loop stops taking requests. */
const RESERVE_MS = 30_000;
let loader: Promise<StagedRedshiftLoader> | undefined;

export const handler = async (_event: unknown, context: Context): Promise<LoaderRun> => {
  logger.addContext(context);
  // Built once per container; a failed build is retried by the next invocation.
  const built = await (loader ??= stagedLoaderFromEnvironment((message, detail) => logger.warn(message, detail)).catch((err: unknown) => {
    loader = undefined;
    throw err;
  }));
  const run = await built.invoke(Math.max(1_000, context.getRemainingTimeInMillis() - RESERVE_MS));
  logger.info('loader run', { ...run });
  return run;
};
