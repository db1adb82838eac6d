/**
 * Search applier Lambda: change log (Kinesis) → OpenSearch. The work is the search apply
 * (lambda/core/search/apply.ts; docs/search.md); this module wires it to Kinesis, DynamoDB,
 * OpenSearch (SigV4-signed) and Powertools, and turns each batch's outcome into metrics.
 *
 * `createSearchApplier` builds the applier from explicit dependencies (local pipeline, tests);
 * `handler` builds it once per container from the environment.
 */
import { BatchProcessor, EventType } from '@aws-lambda-powertools/batch';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import type { Context, KinesisStreamBatchResponse, KinesisStreamEvent } from 'aws-lambda';
import { EnvName } from '../../contracts/env.ts';
import { METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { ConfigurationError } from '../core/shared/errors.ts';
import type { PayloadStore } from '../core/shared/payload-store.ts';
import { createSearchApply } from '../core/search/apply.ts';
import { validateSearchTables, type SearchTableConfig } from '../core/search/search-plan.ts';
import type { ApplyOptions, BatchOutcome, ChangeRecord } from '../core/warehouse/warehouse-apply.ts';
import { OpenSearchIndex, searchClient } from '../adapters/search-opensearch.ts';
import { dynamoDbClient } from '../adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { payloadStoreFromEnvironment } from '../runtime/payload-store.ts';
import { optionalInt } from '../runtime/environment.ts';
import { isReplayEvent, replayFromEnvironment, type ReplayEvent, type ReplayOutcome } from '../runtime/replay.ts';
import { applyLog, emitApplyMetrics, sinkRecordsOf, partialBatchResponse } from '../runtime/sink-batch.ts';

export interface SearchApplierDeps {
  controlPlane: ControlPlane;
  search: OpenSearchIndex;
  /** Sink id: offsets, holds, dead-letter stage and metric dimension. */
  sinkId: string;
  /** Tables served (with their delete mode); the heartbeat table is always served. @default every registered table, with its registered delete mode */
  tables?: readonly SearchTableConfig[];
  /** Index name prefix. @default 'cdc' */
  prefix?: string;
  metrics: Metrics;
  logger: Logger;
  /** Attempts of a bulk whose items are throttled or unavailable, before they are reported as failures. @default 4 */
  bulkAttempts?: number;
  /** First backoff between attempts, doubled each time. @default 200 */
  backoffMs?: number;
  /** Where events stored out of line are read back (claim checks, docs/large-records.md). @default - none: such a record is dead-lettered, named */
  payloads?: PayloadStore;
  now?: () => Date;
  /** Batches of one shard run at once (`SearchSink`'s `parallelizationFactor`; the handler reads it from the environment). @default 1 */
  parallelizationFactor?: number;
}

export interface SearchApplier {
  applyRecords(records: readonly ChangeRecord[], options?: ApplyOptions): Promise<BatchOutcome>;
  handler(event: KinesisStreamEvent, context?: Context): Promise<KinesisStreamBatchResponse>;
  /** Forgets cached index state (a test that rebuilds indexes underneath). */
  clearCache(): void;
}

/** Builds the search applier from explicit dependencies (local pipeline, tests, and the Lambda handler below). */
export function createSearchApplier(deps: SearchApplierDeps): SearchApplier {
  const { metrics, logger, sinkId } = deps;
  const processor = new BatchProcessor(EventType.KinesisDataStreams);
  const apply = createSearchApply({
    ...deps,
    log: applyLog(logger),
  });
  async function applyRecords(records: readonly ChangeRecord[], options: ApplyOptions = {}): Promise<BatchOutcome> {
    const { bySource, applyErrors, ...outcome } = await apply.applyRecords(records, options);
    emitApplyMetrics(metrics, sinkId, { bySource, applyErrors });
    return outcome;
  }
  async function handler(event: KinesisStreamEvent, context?: Context): Promise<KinesisStreamBatchResponse> {
    return partialBatchResponse(event, await applyRecords(sinkRecordsOf(event.Records, logger, metrics, sinkId)), processor, context);
  }
  return { applyRecords, handler, clearCache: apply.clearCache };
}

// ---------------------------------------------------------------------------------------------
// The Lambda handler: module-scope clients, built once per container from the environment.

const logger = new Logger({ serviceName: process.env[EnvName.POWERTOOLS_SERVICE_NAME] ?? 'search-applier' });
const metrics = new Metrics({ namespace: process.env[EnvName.POWERTOOLS_METRICS_NAMESPACE] ?? METRICS_NAMESPACE });
let applier: SearchApplier | undefined;

function fromEnvironment(): SearchApplier {
  const table = process.env[EnvName.CONTROL_TABLE];
  const sinkId = process.env[EnvName.SINK_ID];
  const endpoint = process.env[EnvName.SEARCH_ENDPOINT];
  const region = process.env[EnvName.AWS_REGION];
  if (!table) throw new ConfigurationError(`${EnvName.CONTROL_TABLE} is not set`);
  if (!sinkId) throw new ConfigurationError(`${EnvName.SINK_ID} is not set`);
  if (!endpoint) throw new ConfigurationError(`${EnvName.SEARCH_ENDPOINT} is not set`);
  if (!region) throw new ConfigurationError(`${EnvName.AWS_REGION} is not set (the region to sign search requests for)`);
  let tables: SearchTableConfig[] | undefined;
  const raw = process.env[EnvName.SEARCH_TABLES];
  if (raw) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(raw);
    } catch (e) {
      throw new ConfigurationError(`${EnvName.SEARCH_TABLES} is not JSON: ${(e as Error).message}`);
    }
    tables = validateSearchTables(parsed, EnvName.SEARCH_TABLES);
  }
  const node = endpoint.startsWith('http') ? endpoint : `https://${endpoint}`;
  // The payload bucket the construct grants: events stored out of line, and dead letters' whole records.
  const payloads = payloadStoreFromEnvironment();
  return createSearchApplier({
    controlPlane: new DynamoDbControlPlane(dynamoDbClient(), table, payloads),
    search: new OpenSearchIndex(searchClient({ node, awsRegion: region })),
    sinkId,
    tables,
    prefix: process.env[EnvName.SEARCH_INDEX_PREFIX] || undefined,
    metrics,
    logger,
    parallelizationFactor: optionalInt(EnvName.PARALLELIZATION_FACTOR) ?? 1,
    ...(payloads ? { payloads } : {}),
  });
}

/**
 * Lambda entry point (Kinesis event source mapping with `ReportBatchItemFailures`; the schedule's
 * `{ cdcReplay: true }` event, lib/search-sink.ts, runs the resume replay of released holds,
 * lambda/runtime/replay.ts, on the change log `CDC_CHANGE_LOG_STREAM`).
 */
export const handler = async (
  event: KinesisStreamEvent | ReplayEvent,
  context: Context,
): Promise<KinesisStreamBatchResponse | { replayed: ReplayOutcome[] }> => {
  logger.addContext(context);
  applier ??= fromEnvironment();
  if (isReplayEvent(event)) return { replayed: await replayFromEnvironment(applier, (message, detail) => logger.info(message, detail)) };
  return applier.handler(event, context);
};
