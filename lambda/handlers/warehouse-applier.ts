/**
 * Warehouse applier Lambda: change log (Kinesis) → the warehouse. The work is done by the warehouse
 * apply (`lambda/core/warehouse/warehouse-apply.ts`; docs/warehouse-apply.md) over the `PgWarehouse`
 * writer (lambda/adapters/warehouse-pg.ts) or another engine's (`writer`); this module wires it to
 * Kinesis, DynamoDB, Secrets Manager and Powertools, and turns each batch's outcome into metrics.
 *
 * `createWarehouseApplier` builds the same applier from explicit dependencies for the local
 * pipeline and the tests; `handler` builds it once per container from the environment. On the
 * schedule's `{ cdcReplay: true }` event the handler runs the resume replay of released holds
 * (lambda/runtime/replay.ts) on the change log `CDC_CHANGE_LOG_STREAM`, then merges
 * every delta that is due (`CDC_MERGE_MAX_ROWS`, `CDC_MERGE_MAX_AGE_MS`).
 */
import { BatchProcessor, EventType } from '@aws-lambda-powertools/batch';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import type { Context, KinesisStreamBatchResponse, KinesisStreamEvent } from 'aws-lambda';
import type pg from 'pg';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import { METRICS_NAMESPACE, MetricDimension, MetricName } from '../../contracts/metrics.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { describeError } from '../core/sink/sink-batch.ts';
import { ConfigurationError } from '../core/shared/errors.ts';
import type { PayloadStore } from '../core/shared/payload-store.ts';
import { createWarehouseApply, type ApplyOptions, type BatchOutcome, type ChangeRecord, type MergeDone } from '../core/warehouse/warehouse-apply.ts';
import type { MergePolicy } from '../core/warehouse/merge-policy.ts';
import type { Warehouse } from '../core/warehouse/warehouse-port.ts';
import type { WarehouseTable } from '../core/warehouse/warehouse-sql.ts';
import { dynamoDbClient } from '../adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { PgWarehouse, type PgWarehouseOptions } from '../adapters/warehouse-pg.ts';
import { mergePolicyFromEnvironment } from '../runtime/merge-policy.ts';
import { payloadStoreFromEnvironment } from '../runtime/payload-store.ts';
import { poolFromEnvironment } from '../runtime/warehouse-pool.ts';
import { isReplayEvent, replayFromEnvironment, type ReplayEvent, type ReplayOutcome } from '../runtime/replay.ts';
import { changeRecordOf, emitApplyMetrics, emitSingleMetrics, partialBatchResponse } from '../runtime/sink-batch.ts';

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
  targetOf?: (source: string, table: string) => WarehouseTable;
}

export interface WarehouseApplier {
  /** Applies a batch of change-log records (the handler's work, without the Lambda shapes). */
  applyRecords(records: readonly ChangeRecord[], options?: ApplyOptions): Promise<BatchOutcome>;
  /** The Lambda handler for a Kinesis event source mapping with `ReportBatchItemFailures`. */
  handler(event: KinesisStreamEvent, context?: Context): Promise<KinesisStreamBatchResponse>;
  /** Merges every registered table's delta that is due (`force`: every non-empty one); a failed merge is returned with its `error` (and counted in `MergeErrors`). */
  mergeDue(options?: { force?: boolean; source?: string }): Promise<MergeDone[]>;
  /** Merges one table's delta now. */
  mergeTable(source: string, table: string): Promise<MergeDone>;
  readonly warehouse: PgWarehouse;
}

/** Builds the warehouse applier from explicit dependencies (local pipeline, tests, and the Lambda handler below). */
export function createWarehouseApplier(deps: WarehouseApplierDeps): WarehouseApplier {
  const { sinkId, metrics, logger } = deps;
  const warehouse = new PgWarehouse(deps.pool, deps.warehouse);
  const processor = new BatchProcessor(EventType.KinesisDataStreams);
  const apply = createWarehouseApply({
    controlPlane: deps.controlPlane,
    writer: deps.writer ?? warehouse,
    sinkId,
    log: {
      info: (message, detail) => logger.info(message, detail ?? {}),
      warn: (message, detail) => logger.warn(message, detail ?? {}),
      error: (message, detail) => logger.error(message, detail ?? {}),
    },
    ...(deps.merge ? { merge: deps.merge } : {}),
    ...(deps.now ? { now: deps.now } : {}),
    ...(deps.payloads ? { payloads: deps.payloads } : {}),
    ...(deps.targetOf ? { targetOf: deps.targetOf } : {}),
  });

  const emit = (name: string, unit: (typeof MetricUnit)[keyof typeof MetricUnit], values: number[], dimensions: Record<string, string>): void =>
    emitSingleMetrics(metrics, name, unit, values, dimensions);

  async function applyRecords(records: readonly ChangeRecord[], options: ApplyOptions = {}): Promise<BatchOutcome> {
    const outcome = await apply.applyRecords(records, options);
    emitApplyMetrics(metrics, sinkId, outcome);
    emitMerges(outcome.merges);
    return outcome;
  }

  /** The deferred merges' metrics (inline after a batch, or the schedule's `mergeDue`). */
  function emitMerges(merges: readonly MergeDone[]): void {
    const sink = { [MetricDimension.SINK]: sinkId };
    const rows = merges.reduce((n, m) => n + m.rows, 0);
    const errors = merges.filter((m) => m.error !== undefined).length;
    const stopping = merges.filter((m) => m.appendsStopped && m.error === undefined).length;
    if (rows > 0) emit(MetricName.DELTA_ROWS_MERGED, MetricUnit.Count, [rows], sink);
    if (errors > 0) emit(MetricName.MERGE_ERRORS, MetricUnit.Count, [errors], sink);
    if (stopping > 0) emit(MetricName.MERGES_STOPPING_APPENDS, MetricUnit.Count, [stopping], sink);
  }

  async function mergeDue(options?: { force?: boolean; source?: string }): Promise<MergeDone[]> {
    const done = await apply.mergeDue(options);
    emitMerges(done);
    return done;
  }

  async function handler(event: KinesisStreamEvent, context?: Context): Promise<KinesisStreamBatchResponse> {
    return partialBatchResponse(event, await applyRecords(event.Records.map(changeRecordOf)), processor, context);
  }

  return { applyRecords, handler, mergeDue, mergeTable: apply.mergeTable, warehouse };
}

// ---------------------------------------------------------------------------------------------
// The Lambda handler: module-scope clients, built once per container from the environment.

const logger = new Logger({ serviceName: process.env[EnvName.POWERTOOLS_SERVICE_NAME] ?? ServiceName.WAREHOUSE_APPLIER });
const metrics = new Metrics({ namespace: process.env[EnvName.POWERTOOLS_METRICS_NAMESPACE] ?? METRICS_NAMESPACE });
let applier: Promise<WarehouseApplier> | undefined;

async function fromEnvironment(): Promise<WarehouseApplier> {
  const table = process.env[EnvName.CONTROL_TABLE];
  const sinkId = process.env[EnvName.SINK_ID];
  if (!table) throw new ConfigurationError(`${EnvName.CONTROL_TABLE} is not set`);
  if (!sinkId) throw new ConfigurationError(`${EnvName.SINK_ID} is not set`);
  const pool = await poolFromEnvironment();
  pool.on('error', (err) => logger.warn('idle warehouse connection failed', { error: describeError(err) }));
  const payloads = payloadStoreFromEnvironment();
  const merge = mergePolicyFromEnvironment();
  return createWarehouseApplier({
    controlPlane: new DynamoDbControlPlane(dynamoDbClient(), table, payloads),
    pool,
    sinkId,
    metrics,
    logger,
    merge,
    ...(payloads ? { payloads } : {}),
  });
}

/** Lambda entry point (Kinesis event source mapping with `ReportBatchItemFailures`; the schedule's replay event). */
export const handler = async (
  event: KinesisStreamEvent | ReplayEvent,
  context: Context,
): Promise<KinesisStreamBatchResponse | { replayed: ReplayOutcome[]; merged: MergeDone[] }> => {
  logger.addContext(context);
  applier ??= fromEnvironment();
  let built: WarehouseApplier;
  try {
    built = await applier;
  } catch (err) {
    applier = undefined;
    throw err;
  }
  if (isReplayEvent(event)) {
    const replayed = await replayFromEnvironment(built, (message, detail) => logger.info(message, detail));
    // The schedule also bounds the deltas' age: a table that stopped receiving changes is merged here.
    return { replayed, merged: await built.mergeDue() };
  }
  return built.handler(event, context);
};
