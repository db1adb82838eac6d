/**
 * Archive copier Lambda: change-log stream → the by-table archive in S3 (docs/rebuild.md,
 * "Archive layout"), the archive the rebuild worker replays. The work is done by the archive
 * copier of lambda/core/rebuild/archive.ts (the one `cdc local` runs); this module wires it to S3 and
 * Powertools.
 *
 * Whole batch or nothing. A batch (one shard's records, in order) is stored as one object per
 * table and then its batch marker; only then does the handler return success and the event source
 * checkpoint past it. If any put fails the handler reports the whole batch failed from its first
 * record (a partial batch response naming it): Lambda keeps the checkpoint before the batch and
 * retries it, and the retry writes the same keys again (objects of the failed attempt are
 * overwritten or, if the retry's batch is shorter, duplicate records the replay deduplicates). A
 * batch whose marker was stored but whose response was lost (a timeout) is copied again with the
 * same predecessor. Markers chain each batch to the one before (`previous`), which is what lets the
 * replay reader prove that no batch is missing; a shard's batches may run in any execution
 * environment, so the copier runs with `soleWriter: false` and lists the markers written since the
 * last one it knows of.
 *
 * Configuration (environment): `CDC_ARCHIVE_BUCKET`, `CDC_ARCHIVE_PREFIX` (the copier's prefix,
 * e.g. `change-log/`), optional `CDC_ARCHIVE_KMS_KEY_ARN` (puts name the key; otherwise the
 * bucket's default encryption).
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { S3Client } from '@aws-sdk/client-s3';
import type { Context, KinesisStreamBatchResponse, KinesisStreamEvent } from 'aws-lambda';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import { ARCHIVE_STAGE, MetricDimension, MetricName, METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import { S3Archive } from '../adapters/archive-s3.ts';
import { createArchiveCopier, type Archive } from '../core/rebuild/archive.ts';
import { ConfigurationError } from '../core/shared/errors.ts';

const SERVICE = ServiceName.ARCHIVE_COPIER;

export interface ArchiveCopierDeps {
  archive: Archive;
  /** The copier's key prefix in the archive. @default 'change-log/' */
  prefix?: string;
  /** @default a Powertools Logger for the archive copier service */
  logger?: Logger;
  /** @default Powertools Metrics in the platform namespace, dimension Stage = `archive` only */
  metrics?: Metrics;
}

export type ArchiveCopierHandler = (event: KinesisStreamEvent, context?: Context) => Promise<KinesisStreamBatchResponse>;

/** Builds the handler from explicit dependencies (tests run it against kinesalite's records and s3rver or a folder archive). */
export function createArchiveCopierHandler(deps: ArchiveCopierDeps): ArchiveCopierHandler {
  const logger = deps.logger ?? new Logger({ serviceName: SERVICE });
  const metrics = deps.metrics ?? new Metrics({ namespace: METRICS_NAMESPACE, serviceName: SERVICE });
  // The platform's metrics carry exactly the dimensions of contracts/metrics.ts (not Powertools' service).
  metrics.clearDefaultDimensions();
  metrics.setDefaultDimensions({ [MetricDimension.STAGE]: ARCHIVE_STAGE });
  const copy = createArchiveCopier({ archive: deps.archive, prefix: deps.prefix ?? 'change-log/', layout: 'by-table', soleWriter: false });
  return async (event, context) => {
    if (context) logger.addContext(context);
    const records = event.Records ?? [];
    try {
      const out = await copy(event);
      if (out.records > 0) {
        metrics.addMetric(MetricName.ARCHIVE_RECORDS, MetricUnit.Count, out.records);
        logger.debug('batch archived', {
          shard: out.shard,
          records: out.records,
          objects: out.objects,
          first: records[0]?.kinesis.sequenceNumber,
          last: records.at(-1)?.kinesis.sequenceNumber,
        });
      }
      return { batchItemFailures: [] };
    } catch (e) {
      metrics.addMetric(MetricName.ARCHIVE_COPY_ERRORS, MetricUnit.Count, 1);
      logger.error('Batch not archived; the whole batch will be retried', {
        shard: records[0]?.eventID?.split(':')[0],
        firstSequenceNumber: records[0]?.kinesis.sequenceNumber,
        records: records.length,
        error: e instanceof Error ? { name: e.name, message: e.message } : String(e),
      });
      // The whole batch failed: the checkpoint stays before its first record.
      return { batchItemFailures: records.length > 0 ? [{ itemIdentifier: records[0]!.kinesis.sequenceNumber }] : [] };
    } finally {
      if (metrics.hasStoredMetrics()) metrics.publishStoredMetrics();
    }
  };
}

function requiredEnv(name: string): string {
  const v = process.env[name];
  if (v === undefined || v.trim() === '') throw new ConfigurationError(`environment variable ${name} is not set`);
  return v;
}

// Module scope: created once per execution environment.
const s3 = new S3Client({});
let fromEnv: ArchiveCopierHandler | undefined;

/** The Lambda entry point, configured from the environment (built on the first invocation). */
export const handler: ArchiveCopierHandler = async (event, context) => {
  fromEnv ??= createArchiveCopierHandler({
    archive: new S3Archive(s3, requiredEnv(EnvName.ARCHIVE_BUCKET), '', process.env[EnvName.ARCHIVE_KMS_KEY_ARN] || undefined),
    prefix: requiredEnv(EnvName.ARCHIVE_PREFIX),
  });
  return fromEnv(event, context);
};
