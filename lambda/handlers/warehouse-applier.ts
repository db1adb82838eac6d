/**
 * Warehouse applier Lambda: change log (Kinesis) → the warehouse, through the warehouse apply
 * (lambda/core/warehouse/warehouse-apply.ts; docs/warehouse-apply.md) over `PgWarehouse` or another
 * engine's writer. `createWarehouseApplier` builds it from explicit dependencies (local pipeline,
 * tests); `handler` builds it once per container from the environment, and on the schedule's
 * `{ cdcReplay: true }` event runs the resume replay of released holds (lambda/runtime/replay.ts),
 * then merges every delta that is due (`CDC_MERGE_MAX_ROWS`, `CDC_MERGE_MAX_AGE_MS`).
 */
import { BatchProcessor, EventType } from '@aws-lambda-powertools/batch';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import type { Context, KinesisStreamBatchResponse, KinesisStreamEvent } from 'aws-lambda';
import type pg from 'pg';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import { METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { describeError } from '../core/sink/sink-batch.ts';
import type { PayloadStore } from '../core/shared/payload-store.ts';
import { createWarehouseApply, type ApplyOptions, type BatchOutcome, type ChangeRecord, type MergeDone } from '../core/warehouse/warehouse-apply.ts';
import type { MergePolicy } from '../core/warehouse/merge-policy.ts';
import type { Warehouse } from '../core/warehouse/warehouse-port.ts';
import type { WarehouseTable } from '../core/warehouse/warehouse-sql.ts';
import { dynamoDbClient } from '../adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { PgWarehouse, type PgWarehouseOptions } from '../adapters/warehouse-pg.ts';
import { optionalInt, requiredEnv } from '../runtime/environment.ts';
import { mergePolicyFromEnvironment } from '../runtime/merge-policy.ts';
import { payloadStoreFromEnvironment } from '../runtime/payload-store.ts';
import { redshiftWriterFromEnvironment } from '../runtime/redshift-submitter.ts';
import { poolFromEnvironment } from '../runtime/warehouse-pool.ts';
import { isReplayEvent, replayFromEnvironment, type ReplayEvent, type ReplayOutcome } from '../runtime/replay.ts';
import { applyLog, emitApplyMetrics, sinkRecordsOf, emitMergeMetrics, partialBatchResponse } from '../runtime/sink-batch.ts';

export type { ApplyOptions, BatchOutcome, ChangeRecord, MergeDone } from '../core/warehouse/warehouse-apply.ts';
export type { MergePolicy } from '../core/warehouse/merge-policy.ts';

export interface WarehouseApplierDeps {
  controlPlane: ControlPlane;
  pool: pg.Pool;
  /** Sink id: offsets, holds, dead-letter stage and metric dimension. */
  sinkId: string;
  metrics: Metrics;
  logger: Logger;
  /** Stage loaders and stage-table lifecycle. @default COPY into the delta on PostgreSQL; portable INSERT stages; lifecycle by server (see PgWarehouse) */
  warehouse?: PgWarehouseOptions;
  /** Another engine's writer, used instead of `PgWarehouse` (Redshift: the `RedshiftWarehouse` all shards share; docs/warehouse-apply.md, "Redshift: the applier"). */
  writer?: Warehouse;
  /** When deltas are merged. @default DEFAULT_MERGE_POLICY (50,000 rows or 60 s, inline) */
  merge?: Partial<MergePolicy>;
  /** Clock for `_cdc_applied_at` and dead-letter times. @default () => new Date() */
  now?: () => Date;
  /** Where events stored out of line are read back from (claim checks on the change log; docs/large-records.md). */
  payloads?: PayloadStore;
  /** The warehouse objects of a table (e.g. shadow objects of a rebuild). @default warehouseTable(source, table) */
  targetOf?: (sourceId: string, table: string) => WarehouseTable;
  /** Batches of one shard run at once (`WarehouseSink`'s `parallelizationFactor`; the handler reads it from the environment). @default 1 */
  parallelizationFactor?: number;
}

export interface WarehouseApplier {
  /** Applies a batch of change-log records (the handler's work, without the Lambda shapes). */
  applyRecords(records: readonly ChangeRecord[], options?: ApplyOptions): Promise<BatchOutcome>;
  /** The Lambda handler for a Kinesis event source mapping with `ReportBatchItemFailures`. */
  handler(event: KinesisStreamEvent, context?: Context): Promise<KinesisStreamBatchResponse>;
  /** Merges every registered table's delta that is due (`force`: every non-empty one); a failed merge is returned with its `error` (and counted in `MergeErrors`). */
  mergeDue(options?: { force?: boolean; source?: string }): Promise<MergeDone[]>;
  /** Merges one table's delta now. */
  mergeTable(sourceId: string, table: string): Promise<MergeDone>;
  readonly warehouse: PgWarehouse;
}

/** Builds the warehouse applier from explicit dependencies (local pipeline, tests, and the Lambda handler below). */
export function createWarehouseApplier(deps: WarehouseApplierDeps): WarehouseApplier {
  const { sinkId, metrics, logger } = deps;
  const warehouse = new PgWarehouse(deps.pool, deps.warehouse);
  const processor = new BatchProcessor(EventType.KinesisDataStreams);
  const apply = createWarehouseApply({ ...deps, writer: deps.writer ?? warehouse, log: applyLog(logger) });

  async function applyRecords(records: readonly ChangeRecord[], options: ApplyOptions = {}): Promise<BatchOutcome> {
    const outcome = await apply.applyRecords(records, options);
    emitApplyMetrics(metrics, sinkId, outcome);
    emitMergeMetrics(metrics, sinkId, outcome.merges);
    return outcome;
  }

  async function mergeDue(options?: { force?: boolean; source?: string }): Promise<MergeDone[]> {
    const done = await apply.mergeDue(options);
    emitMergeMetrics(metrics, sinkId, done);
    return done;
  }

  async function handler(event: KinesisStreamEvent, context?: Context): Promise<KinesisStreamBatchResponse> {
    return partialBatchResponse(event, await applyRecords(sinkRecordsOf(event.Records, logger, metrics, sinkId)), processor, context);
  }

  return { applyRecords, handler, mergeDue, mergeTable: apply.mergeTable, warehouse };
}

// --- The Lambda handler: module-scope clients, built once per container from the environment. ---

const logger = new Logger({ serviceName: process.env[EnvName.POWERTOOLS_SERVICE_NAME] ?? ServiceName.WAREHOUSE_APPLIER });
const metrics = new Metrics({ namespace: process.env[EnvName.POWERTOOLS_METRICS_NAMESPACE] ?? METRICS_NAMESPACE });
let applier: Promise<WarehouseApplier> | undefined;

async function fromEnvironment(): Promise<WarehouseApplier> {
  const table = requiredEnv(EnvName.CONTROL_TABLE);
  const sinkId = requiredEnv(EnvName.SINK_ID);
  const pool = await poolFromEnvironment();
  pool.on('error', (err) => logger.warn('idle warehouse connection failed', { error: describeError(err) }));
  const payloads = payloadStoreFromEnvironment();
  // Redshift with staging: the batch is staged for the sink's loader function (docs/warehouse-apply.md, "Redshift: the applier").
  const writer = redshiftWriterFromEnvironment(pool, table, sinkId);
  const controlPlane = new DynamoDbControlPlane(dynamoDbClient(), table, payloads);
  return createWarehouseApplier({
    controlPlane,
    pool,
    sinkId,
    metrics,
    logger,
    merge: mergePolicyFromEnvironment(),
    parallelizationFactor: optionalInt(EnvName.PARALLELIZATION_FACTOR) ?? 1,
    ...(writer ? { writer } : {}),
    ...(payloads ? { payloads } : {}),
  });
}

/** Lambda entry point (Kinesis event source mapping with `ReportBatchItemFailures`; the schedule's replay event). */
export const handler = async (
  event: KinesisStreamEvent | ReplayEvent,
  context: Context,
): Promise<KinesisStreamBatchResponse | { replayed: ReplayOutcome[]; merged: MergeDone[] }> => {
  logger.addContext(context);
  // Built once per container; a failed build is retried by the next invocation.
  const built = await (applier ??= fromEnvironment().catch((err: unknown) => {
    applier = undefined;
    throw err;
  }));
  if (isReplayEvent(event)) {
    const replayed = await replayFromEnvironment(built, (message, detail) => logger.info(message, detail));
    // The schedule also bounds the deltas' age: a table that stopped receiving changes is merged here.
    return { replayed, merged: await built.mergeDue() };
  }
  return built.handler(event, context);
};
