/**
 * Normalizer Lambda: raw capture stream (DMS or slot capture) → change log. The work is done by
 * `Normalizer` (lambda/core/capture/normalize.ts); this module wires it to Kinesis, DynamoDB and
 * Powertools.
 *
 * Ordering. Records are processed one after another (`processInParallel: false`). With partial
 * batch responses Lambda checkpoints at the lowest failed sequence number and retries from
 * there, so once a record fails (an infrastructure error: control plane or change log
 * unavailable) every following record of the batch is failed too, and so is every earlier record
 * whose events were still buffered: no later event of a key is ever published before an
 * earlier one that failed. A record that cannot be decoded is NOT a failure: it is dead-lettered
 * and counts as processed.
 *
 * Configuration (environment): `CDC_CONTROL_TABLE`, `CDC_SOURCE_ID`, `CDC_TABLE_CONFIG`,
 * `CDC_CHANGE_LOG_STREAM`, optional `CDC_CATALOG_TYPES`; `CDC_AWS_ENDPOINT` points the clients at local stand-ins.
 */
import { BatchProcessor, EventType, processPartialResponse } from '@aws-lambda-powertools/batch';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import type { Context, KinesisStreamBatchResponse, KinesisStreamEvent, KinesisStreamRecord } from 'aws-lambda';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import { MetricDimension, METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import { dynamoDbClient, kinesisClient } from '../adapters/aws-clients.ts';
import { KinesisChangeLog } from '../adapters/change-log-kinesis.ts';
import type { PayloadStore } from '../core/shared/payload-store.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { kinesisRecordData } from '../adapters/kinesis-event.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { CdcError, ConfigurationError } from '../core/shared/errors.ts';
import { readCatalogTypes } from '../core/shared/catalog-types.ts';
import { readPublishedPartitionTree } from '../core/tables/partitions.ts';
import { isSourceId } from '../core/shared/event.ts';
import { Normalizer, type ChangeLogWriter } from '../core/capture/normalize.ts';
import { parseTableConfig, parseTableRules, TableConfigIndex, type TableConfig, type TableRule } from '../core/tables/table-config.ts';
import { catalogTypesSetting, requiredEnv } from '../runtime/environment.ts';
import { payloadStoreFromEnvironment } from '../runtime/payload-store.ts';
import { normalizerMetrics, onlyDimensions } from '../runtime/metrics.ts';

const SERVICE = ServiceName.NORMALIZER;

/** What the handler needs; the Lambda builds it from the environment, the local pipeline and tests from local clients. */
export interface NormalizerDeps<E> {
  source: string;
  tables: readonly TableConfig[];
  /** Capture-by-pattern rules: a table they match gets its rule's settings (docs/onboarding.md). @default none */
  rules?: readonly TableRule[];
  control: ControlPlane;
  changeLog: ChangeLogWriter<E>;
  /** @default a Powertools Logger for the normalizer service */
  logger?: Logger;
  /** @default Powertools Metrics in the platform namespace; its default dimensions become exactly Source */
  metrics?: Metrics;
  now?: () => Date;
  /** @default 1000 */
  flushEvents?: number;
  /** Where an event over the change log's record limit is stored whole (docs/large-records.md). */
  payloads?: PayloadStore;
  /**
   * Register a table first seen through a record without types (a DMS data record) with the
   * catalog types the snapshot worker published, retrying the record until they are there
   * (lambda/core/shared/catalog-types.ts; `CDC_CATALOG_TYPES=published` on AWS). With it the normalizer
   * also reads the partition tree the snapshot worker publishes, and decodes a DMS record of a
   * partition as a change of its root (docs/partitioned-tables.md). @default false
   */
  catalogTypes?: boolean;
}

export type NormalizerHandler = (event: KinesisStreamEvent, context?: Context) => Promise<KinesisStreamBatchResponse>;

/** A record was not processed because an earlier record of the same batch failed (it is retried after it). */
export class PrecedingRecordFailedError extends CdcError {
  constructor(sequenceNumber: string, failedSequenceNumber: string) {
    super(
      'PRECEDING_RECORD_FAILED',
      `record ${sequenceNumber} not processed: record ${failedSequenceNumber} earlier in the batch failed, and order per key must hold`,
    );
  }
}

/** `<stream>/<shard>/<sequence number>` of a Lambda Kinesis record. */
function originOf(record: KinesisStreamRecord): string {
  const stream = record.eventSourceARN?.split('/').slice(1).join('/') || record.eventSourceARN || 'stream';
  const shard = record.eventID?.split(':')[0] || 'shard';
  return `${stream}/${shard}/${record.kinesis.sequenceNumber}`;
}

/** Builds the normalizer handler from explicit dependencies. */
export function createNormalizerHandler<E>(deps: NormalizerDeps<E>): NormalizerHandler {
  if (!isSourceId(deps.source)) throw new ConfigurationError(`${EnvName.SOURCE_ID}: expected a lower-case source id, got ${JSON.stringify(deps.source)}`);
  const logger = deps.logger ?? new Logger({ serviceName: SERVICE, persistentKeys: { source: deps.source } });
  const metrics = onlyDimensions(deps.metrics ?? new Metrics({ namespace: METRICS_NAMESPACE, serviceName: SERVICE }), {
    [MetricDimension.SOURCE]: deps.source,
  });
  const normalizer = new Normalizer<E>({
    source: deps.source,
    tables: new TableConfigIndex(deps.tables, deps.rules ?? []),
    control: deps.control,
    changeLog: deps.changeLog,
    metrics: normalizerMetrics(metrics, deps.source),
    logger,
    ...(deps.now ? { now: deps.now } : {}),
    ...(deps.flushEvents ? { flushEvents: deps.flushEvents } : {}),
    ...(deps.payloads ? { payloads: deps.payloads } : {}),
    ...(deps.catalogTypes
      ? {
          catalogTypes: (table: string) => readCatalogTypes(deps.control, deps.source, table),
          partitionTree: () => readPublishedPartitionTree(deps.control, deps.source),
        }
      : {}),
  });

  return async (event, context) => {
    // A processor holds the state of one batch. Lambda runs one invocation at a time per
    // environment, but the local event-source poller runs one batch per shard concurrently
    // through the same handler, so each invocation gets its own.
    const processor = new BatchProcessor(EventType.KinesisDataStreams);
    if (context) logger.addContext(context);
    const records = event.Records ?? [];
    const index = new Map(records.map((r, i) => [r.kinesis.sequenceNumber, i]));
    const last = records.length - 1;
    const batch = normalizer.startBatch();
    let failedAt: number | null = null;
    let failedFrom: number | null = null;

    const recordHandler = async (record: KinesisStreamRecord): Promise<void> => {
      const i = index.get(record.kinesis.sequenceNumber);
      if (i === undefined) throw new CdcError('INTERNAL', `record ${record.kinesis.sequenceNumber} is not in the batch`);
      if (failedAt !== null) throw new PrecedingRecordFailedError(record.kinesis.sequenceNumber, records[failedAt]!.kinesis.sequenceNumber);
      try {
        await batch.add({ text: kinesisRecordData(record).toString('utf8'), origin: originOf(record) });
        if (i === last) await batch.flush();
      } catch (e) {
        failedAt = i;
        failedFrom = batch.firstUnpublished ?? i;
        logger.error('Record failed; it and every later record of the batch will be retried', {
          sequenceNumber: record.kinesis.sequenceNumber,
          retryFromSequenceNumber: records[failedFrom]?.kinesis.sequenceNumber,
          error: e instanceof Error ? { name: e.name, message: e.message } : String(e),
        });
        throw e;
      }
    };

    try {
      const response = await processPartialResponse(event, recordHandler, processor, { context, processInParallel: false });
      if (failedFrom === null) return response;
      // Earlier records whose events were still buffered are retried too; Lambda resumes at the lowest.
      return { batchItemFailures: records.slice(failedFrom).map((r) => ({ itemIdentifier: r.kinesis.sequenceNumber })) };
    } finally {
      if (metrics.hasStoredMetrics()) metrics.publishStoredMetrics();
    }
  };
}

// Module scope: created once per execution environment.
const kinesis = kinesisClient();
const dynamodb = dynamoDbClient();
const payloads = payloadStoreFromEnvironment();
let fromEnv: NormalizerHandler | undefined;

/** The Lambda entry point, configured from the environment (built on the first invocation). */
export const handler: NormalizerHandler = async (event, context) => {
  fromEnv ??= createNormalizerHandler({
    source: requiredEnv(EnvName.SOURCE_ID),
    tables: parseTableConfig(process.env[EnvName.TABLE_CONFIG]),
    rules: parseTableRules(process.env[EnvName.TABLE_RULES]),
    control: new DynamoDbControlPlane(dynamodb, requiredEnv(EnvName.CONTROL_TABLE), payloads),
    changeLog: new KinesisChangeLog(kinesis, requiredEnv(EnvName.CHANGE_LOG_STREAM)),
    ...(payloads ? { payloads } : {}),
    catalogTypes: catalogTypesSetting(process.env[EnvName.CATALOG_TYPES]),
  });
  return fromEnv(event, context);
};
