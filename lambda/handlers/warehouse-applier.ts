/**
 * Warehouse applier Lambda: change log (Kinesis) → a PostgreSQL-wire warehouse (PostgreSQL or
 * Redshift). The work is done by the warehouse apply (`lambda/core/warehouse/warehouse-apply.ts`: decode,
 * validate, group per table, hold, append to the delta or apply, merge when due; see
 * docs/warehouse-apply.md) over the `PgWarehouse` writer (lambda/adapters/warehouse-pg.ts); this
 * module wires it to Kinesis, DynamoDB, Secrets Manager and Powertools, and turns each batch's
 * outcome into metrics.
 *
 * Why not a per-record handler: one transaction per batch and table means the whole batch must
 * be processed before any record's outcome is known. The handler therefore applies the batch
 * first, then hands Powertools' `BatchProcessor` a record handler that only reports each record's
 * known outcome (throws for the failed ones). Powertools still builds `batchItemFailures` and
 * raises `FullBatchFailureError` when every record failed, exactly as for per-record processing.
 * A batch in which no record failed is answered directly with the response Powertools gives then
 * (no failures), without its per-record pass.
 *
 * Metrics (EMF via Powertools, names from contracts/metrics.ts) carry exactly the dimensions the
 * contract names (Sink + Source, Stage + Source, or Sink): Powertools' default `service`
 * dimension is cleared so the constructs' alarms match.
 *
 * `createWarehouseApplier` builds the same applier from explicit dependencies for the local
 * pipeline and the tests; `handler` builds it once per container from the environment. On the
 * schedule's `{ cdcReplay: true }` event the handler runs the resume replay of released holds
 * (lambda/handlers/warehouse-replay.ts) on the change log `CDC_CHANGE_LOG_STREAM`, then merges
 * every delta that is due (`CDC_MERGE_MAX_ROWS`, `CDC_MERGE_MAX_AGE_MS`).
 */
import { BatchProcessor, EventType, processPartialResponse } from '@aws-lambda-powertools/batch';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Context, KinesisStreamBatchResponse, KinesisStreamEvent, KinesisStreamRecord } from 'aws-lambda';
import pg from 'pg';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import { METRICS_NAMESPACE, MetricDimension, MetricName } from '../../contracts/metrics.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { CdcError, ConfigurationError } from '../core/shared/errors.ts';
import { createWarehouseApply, validateMergePolicy, type ApplyOptions, type BatchOutcome, type ChangeRecord, type MergeDone, type MergePolicy } from '../core/warehouse/warehouse-apply.ts';
import type { WarehouseTable } from '../core/warehouse/warehouse-sql.ts';
import { dynamoDbClient } from '../adapters/aws-clients.ts';
import { replayFromEnvironment, type ReplayOutcome } from './warehouse-replay.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { DEFAULT_SSL_MODE, parseSslMode, pgSsl } from '../adapters/tls.ts';
import { PgWarehouse, type PgWarehouseOptions } from '../adapters/warehouse-pg.ts';
import { S3PayloadStore } from '../adapters/payload-store-s3.ts';
import type { PayloadStore } from '../core/shared/payload-store.ts';
import { S3Client } from '@aws-sdk/client-s3';

export type { ApplyOptions, BatchOutcome, ChangeRecord, MergeDone, MergePolicy } from '../core/warehouse/warehouse-apply.ts';

export interface WarehouseApplierDeps {
  controlPlane: ControlPlane;
  pool: pg.Pool;
  /** Sink id: offsets, holds, dead-letter stage and metric dimension. */
  sinkId: string;
  metrics: Metrics;
  logger: Logger;
  /** Stage loaders and stage-table lifecycle. @default COPY into the delta on PostgreSQL; portable INSERT stages; lifecycle by server (see PgWarehouse) */
  warehouse?: PgWarehouseOptions;
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

/** A record reported as failed in the batch response. */
export class RecordNotAppliedError extends CdcError {
  constructor(sequenceNumber: string, reason: string) {
    super('NOT_APPLIED', `record ${sequenceNumber} was not applied: ${reason}`);
  }
}

/** A required setting is missing from the environment (defined once for every handler in lambda/core/shared/errors.ts). */
export { ConfigurationError } from '../core/shared/errors.ts';

const describeError = (err: unknown): string => (err instanceof Error ? `${err.name}: ${err.message}` : String(err));

/** The stream name of the last event source ARN seen (every record of a batch has the same one). */
let lastArn: string | undefined;
let lastStream = 'stream';

/** The record a Lambda Kinesis event carries, as the applier sees it. */
export function changeRecordOf(r: KinesisStreamRecord): ChangeRecord {
  const arn = r.eventSourceARN;
  if (arn !== lastArn) {
    lastStream = arn?.split(':stream/')[1] ?? 'stream';
    lastArn = arn;
  }
  const id = r.eventID;
  const colon = id === undefined ? -1 : id.indexOf(':');
  const shard = id === undefined ? 'shard' : colon < 0 ? id : id.slice(0, colon);
  const seq = r.kinesis.sequenceNumber;
  return { sequenceNumber: seq, origin: `${lastStream}/${shard}/${seq}`, text: Buffer.from(r.kinesis.data, 'base64').toString('utf8') };
}

/** Builds the warehouse applier from explicit dependencies (local pipeline, tests, and the Lambda handler below). */
export function createWarehouseApplier(deps: WarehouseApplierDeps): WarehouseApplier {
  const { sinkId, metrics, logger } = deps;
  const warehouse = new PgWarehouse(deps.pool, deps.warehouse);
  const processor = new BatchProcessor(EventType.KinesisDataStreams);
  const apply = createWarehouseApply({
    controlPlane: deps.controlPlane,
    writer: warehouse,
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
    // Metrics, with exactly the contract's dimensions.
    for (const [source, c] of outcome.bySource) {
      if (c.applied > 0) emit(MetricName.EVENTS_APPLIED, MetricUnit.Count, [c.applied], { [MetricDimension.SINK]: sinkId, [MetricDimension.SOURCE]: source });
      if (c.held > 0) emit(MetricName.EVENTS_HELD, MetricUnit.Count, [c.held], { [MetricDimension.SINK]: sinkId, [MetricDimension.SOURCE]: source });
      if (c.dead > 0) emit(MetricName.DEAD_LETTERS, MetricUnit.Count, [c.dead], { [MetricDimension.STAGE]: sinkId, [MetricDimension.SOURCE]: source });
      if (c.lag.length > 0) emit(MetricName.END_TO_END_LAG, MetricUnit.Milliseconds, c.lag, { [MetricDimension.SINK]: sinkId, [MetricDimension.SOURCE]: source });
    }
    if (outcome.applyErrors > 0) emit(MetricName.APPLY_ERRORS, MetricUnit.Count, [outcome.applyErrors], { [MetricDimension.SINK]: sinkId });
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

/** Connection settings in the warehouse secret (the shape RDS and Redshift secrets use). */
interface WarehouseSecret {
  host: string;
  port?: number | string;
  username: string;
  password: string;
  dbname?: string;
  /** `disable`, `require` (encrypt, do not verify) or `verify-full` (default); `CDC_WAREHOUSE_SSL_MODE` wins. */
  sslmode?: string;
}

/** The warehouse connection the constructs configure (`CDC_WAREHOUSE_URL`, or the secret); the reconciler uses it too. */
export async function poolFromEnvironment(): Promise<pg.Pool> {
  const url = process.env[EnvName.WAREHOUSE_URL];
  const common = { max: 2, connectionTimeoutMillis: 10_000, idleTimeoutMillis: 60_000 };
  if (url) return new pg.Pool({ connectionString: url, ...common });
  const arn = process.env[EnvName.WAREHOUSE_SECRET_ARN];
  if (!arn) throw new ConfigurationError(`set ${EnvName.WAREHOUSE_URL} or ${EnvName.WAREHOUSE_SECRET_ARN}`);
  const out = await new SecretsManagerClient({}).send(new GetSecretValueCommand({ SecretId: arn }));
  let s: WarehouseSecret;
  try {
    s = JSON.parse(out.SecretString ?? '') as WarehouseSecret;
  } catch {
    throw new ConfigurationError(`secret ${arn} is not JSON with host, port, username, password, dbname`);
  }
  if (!s.host || !s.username) throw new ConfigurationError(`secret ${arn} lacks host or username`);
  // verify-full by default: Node's trusted CAs (Redshift) plus the Amazon RDS CAs (lambda/adapters/tls.ts).
  const envMode = process.env[EnvName.WAREHOUSE_SSL_MODE];
  const ssl = pgSsl(parseSslMode(envMode || s.sslmode || DEFAULT_SSL_MODE, envMode ? EnvName.WAREHOUSE_SSL_MODE : `secret ${arn}: field 'sslmode'`));
  return new pg.Pool({ host: s.host, port: Number(s.port ?? 5439), user: s.username, password: s.password, database: s.dbname, ssl, ...common });
}

async function fromEnvironment(): Promise<WarehouseApplier> {
  const table = process.env[EnvName.CONTROL_TABLE];
  const sinkId = process.env[EnvName.SINK_ID];
  if (!table) throw new ConfigurationError(`${EnvName.CONTROL_TABLE} is not set`);
  if (!sinkId) throw new ConfigurationError(`${EnvName.SINK_ID} is not set`);
  const pool = await poolFromEnvironment();
  pool.on('error', (err) => logger.warn('idle warehouse connection failed', { error: describeError(err) }));
  const payloads = payloadStoreFromEnvironment();
  const merge = mergePolicyFromEnvironment();
  return createWarehouseApplier({ controlPlane: new DynamoDbControlPlane(dynamoDbClient(), table, payloads), pool, sinkId, metrics, logger, merge, ...(payloads ? { payloads } : {}) });
}

/** The merge policy the construct sets (`WarehouseSink` props `mergeMaxRows`, `mergeMaxAge`, `mergeOnSchedule`); unset: the defaults. */
export function mergePolicyFromEnvironment(): Partial<MergePolicy> {
  const out: Partial<MergePolicy> = {};
  const rows = process.env[EnvName.MERGE_MAX_ROWS];
  const age = process.env[EnvName.MERGE_MAX_AGE_MS];
  const onSchedule = process.env[EnvName.MERGE_ON_SCHEDULE];
  if (rows) out.maxRows = Number(rows);
  if (age) out.maxAgeMs = Number(age);
  if (onSchedule !== undefined && onSchedule !== '') {
    if (onSchedule !== 'true' && onSchedule !== 'false') throw new ConfigurationError(`${EnvName.MERGE_ON_SCHEDULE} must be true or false, got ${JSON.stringify(onSchedule)}`);
    out.inline = onSchedule !== 'true';
  }
  try {
    return validateMergePolicy(out, `${EnvName.MERGE_MAX_ROWS} / ${EnvName.MERGE_MAX_AGE_MS}`);
  } catch (err) {
    throw new ConfigurationError((err as Error).message);
  }
}

/** The payload bucket the construct grants this function (dead letters' whole records, events stored out of line). */
export function payloadStoreFromEnvironment(): PayloadStore | undefined {
  const bucket = process.env[EnvName.PAYLOAD_BUCKET];
  return bucket ? new S3PayloadStore(new S3Client({}), bucket, '', process.env[EnvName.PAYLOAD_KMS_KEY_ARN] || undefined) : undefined;
}

/** The scheduled event (lib/warehouse-sink.ts) on which the function runs the resume replay of released holds. */
export interface ReplayEvent {
  cdcReplay: true;
}

export const isReplayEvent = (e: unknown): e is ReplayEvent => typeof e === 'object' && e !== null && (e as { cdcReplay?: unknown }).cdcReplay === true;

/** Lambda entry point (Kinesis event source mapping with `ReportBatchItemFailures`; the schedule's replay event). */
export const handler = async (event: KinesisStreamEvent | ReplayEvent, context: Context): Promise<KinesisStreamBatchResponse | { replayed: ReplayOutcome[]; merged: MergeDone[] }> => {
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


/** Emits each value as its own EMF metric with exactly `dimensions` (no default dimensions): both sink appliers. */
export function emitSingleMetrics(metrics: Metrics, name: string, unit: (typeof MetricUnit)[keyof typeof MetricUnit], values: number[], dimensions: Record<string, string>): void {
  for (const v of values) {
    const m = metrics.singleMetric();
    m.clearDefaultDimensions();
    m.addDimensions(dimensions);
    m.addMetric(name, unit, v);
  }
}

/** The Lambda partial-batch response of a sink applier: the records `outcome` reports failed, with their reasons. */
export function partialBatchResponse(event: KinesisStreamEvent, outcome: BatchOutcome, processor: BatchProcessor, context?: Context): Promise<KinesisStreamBatchResponse> {
  // Nothing failed: the response Powertools builds then, without its per-record pass (a few µs
  // per record on the critical path; docs/performance-log.md, "Warehouse apply: less Node work per event on the append path").
  if (outcome.failed.length === 0) return Promise.resolve({ batchItemFailures: [] });
  const failed = new Set(outcome.failed);
  return processPartialResponse(
    event,
    async (r: KinesisStreamRecord) => {
      const seq = r.kinesis.sequenceNumber;
      if (failed.has(seq)) throw new RecordNotAppliedError(seq, outcome.reasons.get(seq) ?? 'failed');
    },
    processor,
    { context, processInParallel: false },
  );
}
