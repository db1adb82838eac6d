/**
 * Normalizer Lambda: raw capture stream (DMS or slot capture) → change log. The work is done by
 * `Normalizer` (lambda/core/capture/normalize.ts); this module wires it to Kinesis, DynamoDB and
 * Powertools.
 *
 * Ordering: records are processed one after another, and a failed record is retried with every
 * later one and every earlier one whose events were still buffered (lambda/runtime/kinesis-in-order.ts).
 * A record that cannot be decoded is NOT a failure: it is dead-lettered and counts as processed.
 *
 * Configuration (environment): `CDC_CONTROL_TABLE`, `CDC_SOURCE_ID`, `CDC_TABLE_CONFIG`,
 * `CDC_CHANGE_LOG_STREAM`, optional `CDC_CATALOG_TYPES`; `CDC_AWS_ENDPOINT` points the clients at local stand-ins.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import type { Context, KinesisStreamBatchResponse, KinesisStreamEvent } from 'aws-lambda';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import { MetricDimension, METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import { dynamoDbClient, kinesisClient } from '../adapters/aws-clients.ts';
import { KinesisChangeLog } from '../adapters/change-log-kinesis.ts';
import type { PayloadStore } from '../core/shared/payload-store.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { ConfigurationError } from '../core/shared/errors.ts';
import { keepTableRecords } from '../core/shared/kept-table-records.ts';
import { readCatalogTypes } from '../core/shared/catalog-types.ts';
import { readPublishedPartitionTree } from '../core/tables/partitions.ts';
import { isSourceId } from '../core/shared/event.ts';
import { Normalizer, type ChangeLogWriter } from '../core/capture/normalize.ts';
import { parseTableConfig, parseTableRules, TableConfigIndex, type TableConfig, type TableRule } from '../core/tables/table-config.ts';
import { catalogTypesSetting, changeLogAggregationSetting, requiredEnv } from '../runtime/environment.ts';
import { payloadStoreFromEnvironment } from '../runtime/payload-store.ts';
import { processInOrder } from '../runtime/kinesis-in-order.ts';
import { normalizerMetrics, onlyDimensions } from '../runtime/metrics.ts';

const SERVICE = ServiceName.NORMALIZER;

/** What the handler needs; the Lambda builds it from the environment, the local pipeline and tests from local clients. */
export interface NormalizerDeps<E> {
  source: string;
  tables: readonly TableConfig[];
  /** Capture-by-pattern rules: a table they match gets its rule's settings (docs/onboarding.md). @default none */
  rules?: readonly TableRule[];
  controlPlane: ControlPlane;
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

/** Builds the normalizer handler from explicit dependencies. */
export function createNormalizerHandler<E>(deps: NormalizerDeps<E>): NormalizerHandler {
  if (!isSourceId(deps.source)) throw new ConfigurationError(`${EnvName.SOURCE_ID}: expected a lower-case source id, got ${JSON.stringify(deps.source)}`);
  const logger = deps.logger ?? new Logger({ serviceName: SERVICE, persistentKeys: { source: deps.source } });
  const metrics = onlyDimensions(deps.metrics ?? new Metrics({ namespace: METRICS_NAMESPACE, serviceName: SERVICE }), {
    [MetricDimension.SOURCE]: deps.source,
  });
  // Table records kept for at most a second across batches (docs/architecture.md, "Table records kept for at most a second").
  const controlPlane = keepTableRecords(deps.controlPlane).controlPlane;
  const normalizer = new Normalizer<E>({
    source: deps.source,
    tables: new TableConfigIndex(deps.tables, deps.rules ?? []),
    controlPlane,
    changeLog: deps.changeLog,
    metrics: normalizerMetrics(metrics, deps.source),
    logger,
    ...(deps.now ? { now: deps.now } : {}),
    ...(deps.flushEvents ? { flushEvents: deps.flushEvents } : {}),
    ...(deps.payloads ? { payloads: deps.payloads } : {}),
    ...(deps.catalogTypes
      ? {
          catalogTypes: (table: string) => readCatalogTypes(deps.controlPlane, deps.source, table),
          partitionTree: () => readPublishedPartitionTree(deps.controlPlane, deps.source),
        }
      : {}),
  });

  return async (event, context) => {
    if (context) logger.addContext(context);
    try {
      return await processInOrder(event, context, normalizer.startBatch(), logger);
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
    controlPlane: new DynamoDbControlPlane(dynamodb, requiredEnv(EnvName.CONTROL_TABLE), payloads),
    changeLog: new KinesisChangeLog(kinesis, requiredEnv(EnvName.CHANGE_LOG_STREAM), {
      aggregate: changeLogAggregationSetting(process.env[EnvName.CHANGE_LOG_AGGREGATION]),
    }),
    ...(payloads ? { payloads } : {}),
    catalogTypes: catalogTypesSetting(process.env[EnvName.CATALOG_TYPES]),
  });
  return fromEnv(event, context);
};
