/**
 * Warehouse applier: change log (Kinesis) → a PostgreSQL-wire warehouse (PostgreSQL or Redshift).
 *
 * Per batch (docs/architecture.md §5.4; invariants 2, 7, 10, 11, 12):
 * - each record is decoded and validated (`validateChangeEvent`); a record that fails goes to the
 *   dead letters with its reason and counts as processed;
 * - records are grouped by (source, table). Per table: the table and its schema versions are
 *   read from the control plane; a table or column name that is not a plain identifier or not in
 *   the registry's schema version is refused (`UnsafeIdentifierError`) and its records are dead
 *   letters, while other tables of the batch still apply;
 * - a table that is paused or needs a re-snapshot, or that this sink already holds, is not
 *   applied: the sink records the first held position (`holdSinkTable`) so a resume can replay
 *   from it, counts `EventsHeld`, and treats the records as processed. Holding goes on until the
 *   hold is released, because applying newer events first would make the replayed older ones
 *   look stale (the position guard would drop them); the resume replay applies the held range
 *   with `applyRecords(records, { replayHeld: true })` while the live path keeps holding;
 * - the table's events are applied in ONE warehouse transaction (`PgWarehouse.applyTable`; any
 *   additive DDL runs just before it), and only after COMMIT is its high-water mark advanced and
 *   its records reported as done;
 * - heartbeat events (table `<schema>.cdc_heartbeat`) are applied like any table and also give
 *   `EndToEndLag` = commit time of the sink transaction − source commit time;
 * - a `truncate` (table level) empties the table's mirror at its position, and a table-level
 *   guard keeps every later-applied older event out (docs/truncate.md);
 * - a database error fails the table's records; the response fails that table's records at or
 *   after its first failed one in sequence order (per-key order is kept), and no record of
 *   another table (they applied; a re-delivery from the lowest failed one is harmless). A value
 *   the warehouse refuses (data exception) is isolated by applying that table's events one at a
 *   time; the refused event is a dead letter. An error about the table that a retry will not fix
 *   (`persistentTableErrorCode`: a constraint, a missing object, a revoked privilege) holds the
 *   table for this sink with an audit entry, so the shard moves on and the other tables keep
 *   flowing; `cdc resume` replays the held range once the cause is fixed (docs/operations.md).
 *
 * Why not a per-record handler: one transaction per batch and table means the whole batch must
 * be processed before any record's outcome is known. The handler therefore applies the batch
 * first, then hands Powertools' `BatchProcessor` a record handler that only reports each record's
 * known outcome (throws for the failed ones). Powertools still builds `batchItemFailures` and
 * raises `FullBatchFailureError` when every record failed, exactly as for per-record processing.
 *
 * Metrics (EMF via Powertools, names from contracts/metrics.ts) carry exactly the dimensions the
 * contract names (Sink + Source, Stage + Source, or Sink): Powertools' default `service`
 * dimension is cleared so the constructs' alarms match.
 *
 * `createWarehouseApplier` builds the same applier from explicit dependencies for the local
 * pipeline and the tests; `handler` builds it once per container from the environment. On the
 * schedule's `{ cdcReplay: true }` event the handler runs the resume replay of released holds
 * (lambda/handlers/warehouse-replay.ts) on the change log `CDC_CHANGE_LOG_STREAM`.
 */
import { BatchProcessor, EventType, processPartialResponse } from '@aws-lambda-powertools/batch';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { GetSecretValueCommand, SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Context, KinesisStreamBatchResponse, KinesisStreamEvent, KinesisStreamRecord } from 'aws-lambda';
import pg from 'pg';
import { EnvName, HEARTBEAT_TABLE, ServiceName } from '../../contracts/env.ts';
import { METRICS_NAMESPACE, MetricDimension, MetricName } from '../../contracts/metrics.ts';
import { failuresPerTable } from '../core/batch-failures.ts';
import { heldShardsOf } from '../core/operator-decisions.ts';
import type { ControlPlane, SchemaVersion } from '../core/control-plane.ts';
import { CdcError, ConfigurationError, InvalidRecordError, UnsafeIdentifierError } from '../core/errors.ts';
import { validateChangeEvent, type ChangeEvent } from '../core/event.ts';
import { assertPlainIdentifier, splitTableId } from '../core/identifiers.ts';
import { assertSourceColumn } from '../core/warehouse-sql.ts';
import { dynamoDbClient } from '../adapters/aws-clients.ts';
import { replayFromEnvironment, type ReplayOutcome } from './warehouse-replay.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { DEFAULT_SSL_MODE, parseSslMode, pgSsl } from '../adapters/tls.ts';
import { PgWarehouse, SinkTypeConflictError, ValueRejectedError, type PgWarehouseOptions } from '../adapters/warehouse-pg.ts';
import { persistentTableErrorCode } from '../adapters/warehouse-pg-errors.ts';
import { S3PayloadStore } from '../adapters/payload-store-s3.ts';
import { isClaimCheck, PayloadRefError, resolveClaim, validateClaimCheck, type PayloadStore } from '../core/payload-store.ts';
import { S3Client } from '@aws-sdk/client-s3';

/** One change-log record as the applier sees it. */
export interface ChangeRecord {
  /** Kinesis sequence number (the batch-failure identifier). */
  sequenceNumber: string;
  /** Where it was read: `<stream>/<shard>/<sequence number>` (kept with a dead letter). */
  origin: string;
  /** The record's payload text (a JSON change event). */
  text: string;
}

export interface WarehouseApplierDeps {
  controlPlane: ControlPlane;
  pool: pg.Pool;
  /** Sink id: offsets, holds, dead-letter stage and metric dimension. */
  sinkId: string;
  metrics: Metrics;
  logger: Logger;
  /** Stage loader and stage-table lifecycle. @default portable INSERT loader; lifecycle by server (see PgWarehouse) */
  warehouse?: PgWarehouseOptions;
  /** Clock for `_cdc_applied_at` and dead-letter times. @default () => new Date() */
  now?: () => Date;
  /** Where events stored out of line are read back from (claim checks on the change log; docs/large-records.md). */
  payloads?: PayloadStore;
}

/** What happened to a batch. */
export interface BatchOutcome {
  /** Sequence numbers to report as failed: each failed table's records at or after its first failed one. */
  failed: string[];
  /** Why each record failed (records after the first failure say so). */
  reasons: Map<string, string>;
  /** Valid events of applied tables (written, or recognised as already applied). */
  applied: number;
  held: number;
  deadLettered: number;
}

/** Options of one `applyRecords` call. */
export interface ApplyOptions {
  /**
   * Apply tables that this sink holds (its `heldFrom` is set) as long as the table itself is
   * active: for the resume replay, which re-applies the held range from the log while the live
   * path keeps holding, and releases the hold when it has caught up. @default false
   */
  replayHeld?: boolean;
}

export interface WarehouseApplier {
  /** Applies a batch of change-log records (the handler's work, without the Lambda shapes). */
  applyRecords(records: readonly ChangeRecord[], options?: ApplyOptions): Promise<BatchOutcome>;
  /** The Lambda handler for a Kinesis event source mapping with `ReportBatchItemFailures`. */
  handler(event: KinesisStreamEvent, context?: Context): Promise<KinesisStreamBatchResponse>;
  readonly warehouse: PgWarehouse;
}

/** A record reported as failed in the batch response. */
export class RecordNotAppliedError extends CdcError {
  constructor(sequenceNumber: string, reason: string) {
    super('NOT_APPLIED', `record ${sequenceNumber} was not applied: ${reason}`);
  }
}

/** A required setting is missing from the environment (defined once for every handler in lambda/core/errors.ts). */
export { ConfigurationError } from '../core/errors.ts';

interface Item {
  record: ChangeRecord;
  event: ChangeEvent;
}

const describeError = (err: unknown): string => (err instanceof Error ? `${err.name}: ${err.message}` : String(err));
const codeOf = (err: unknown): string => (err instanceof CdcError ? err.code : 'APPLY_FAILED');
const minPosition = (items: readonly Item[]): string => items.reduce((m, i) => (i.event.position < m ? i.event.position : m), items[0]!.event.position);
const maxPosition = (items: readonly Item[]): string => items.reduce((m, i) => (i.event.position > m ? i.event.position : m), items[0]!.event.position);

/** The record a Lambda Kinesis event carries, as the applier sees it. */
export function changeRecordOf(r: KinesisStreamRecord): ChangeRecord {
  const stream = r.eventSourceARN?.split(':stream/')[1] ?? 'stream';
  const shard = r.eventID?.split(':')[0] ?? 'shard';
  return { sequenceNumber: r.kinesis.sequenceNumber, origin: `${stream}/${shard}/${r.kinesis.sequenceNumber}`, text: Buffer.from(r.kinesis.data, 'base64').toString('utf8') };
}

/** Builds the warehouse applier from explicit dependencies (local pipeline, tests, and the Lambda handler below). */
export function createWarehouseApplier(deps: WarehouseApplierDeps): WarehouseApplier {
  const { controlPlane: cp, sinkId, metrics, logger } = deps;
  assertPlainIdentifier(sinkId, 'sink id');
  const now = deps.now ?? (() => new Date());
  const warehouse = new PgWarehouse(deps.pool, deps.warehouse);
  const schemaCache = new Map<string, SchemaVersion>();
  const processor = new BatchProcessor(EventType.KinesisDataStreams);

  async function schemaOf(source: string, table: string, version: number): Promise<SchemaVersion> {
    const k = `${source}\u0000${table}\u0000${version}`;
    const hit = schemaCache.get(k);
    if (hit) return hit;
    const v = await cp.getSchemaVersion(source, table, version);
    if (!v) throw new InvalidRecordError('schemaVersion', `version ${version} of ${source}/${table} is not registered`);
    for (const c of v.columns) assertSourceColumn(c.name, table);
    schemaCache.set(k, v);
    return v;
  }

  const checkColumns = checkEventColumns;

  async function applyRecords(records: readonly ChangeRecord[], options: ApplyOptions = {}): Promise<BatchOutcome> {
    const appliedAt = now();
    const failed = new Map<string, string>();
    const counts = new Map<string, { applied: number; held: number; dead: number; lag: number[] }>();
    const countFor = (source: string | null) => {
      const k = source ?? 'unknown';
      let c = counts.get(k);
      if (!c) counts.set(k, (c = { applied: 0, held: 0, dead: 0, lag: [] }));
      return c;
    };
    let applyErrors = 0;

    const deadLetter = async (record: ChangeRecord, source: string | null, table: string | null, err: unknown): Promise<void> => {
      try {
        await cp.putDeadLetter({
          at: now().toISOString(),
          stage: sinkId,
          source,
          table,
          code: codeOf(err),
          reason: describeError(err),
          origin: record.origin,
          record: record.text,
          truncated: false,
        });
        countFor(source).dead++;
        logger.warn('record sent to dead letters', { origin: record.origin, source, table, code: codeOf(err), reason: describeError(err) });
      } catch (dlErr) {
        failed.set(record.sequenceNumber, `dead letter could not be stored: ${describeError(dlErr)}`);
      }
    };

    // Decode and validate; group by (source, table) in order of first appearance.
    const groups = new Map<string, Item[]>();
    const tableOf = new Map<string, string>();
    for (const record of records) {
      let event: ChangeEvent;
      try {
        let parsed: unknown;
        try {
          parsed = JSON.parse(record.text);
        } catch (e) {
          throw new InvalidRecordError('event', `not JSON: ${(e as Error).message}`);
        }
        if (isClaimCheck(parsed)) {
          // An event stored out of line: read it back whole (a store outage is thrown: retried, not dead-lettered).
          const claim = validateClaimCheck(parsed);
          if (!deps.payloads) throw new PayloadRefError(claim.claim.ref, `cannot be read: sink ${sinkId} has no payload store configured`);
          const text = await resolveClaim(deps.payloads, claim);
          try {
            parsed = JSON.parse(text);
          } catch (e) {
            throw new InvalidRecordError('claim', `the stored event ${claim.claim.ref} is not JSON: ${(e as Error).message}`);
          }
        }
        event = validateChangeEvent(parsed);
      } catch (err) {
        if (!(err instanceof CdcError)) throw err;
        const about = aboutRecord(record.text);
        await deadLetter(record, about.source, about.table, err);
        continue;
      }
      const k = `${event.source}\u0000${event.table}`;
      tableOf.set(record.sequenceNumber, k);
      const list = groups.get(k);
      if (list) list.push({ record, event });
      else groups.set(k, [{ record, event }]);
    }

    for (const items of groups.values()) {
      const { source, table } = items[0]!.event;
      try {
        await applyGroup(source, table, items);
      } catch (err) {
        applyErrors++;
        logger.error('table batch not applied; its records will be retried', { source, table, error: describeError(err) });
        for (const i of items) if (!failed.has(i.record.sequenceNumber)) failed.set(i.record.sequenceNumber, describeError(err));
      }
    }

    async function applyGroup(source: string, table: string, items: Item[]): Promise<void> {
      try {
        assertPlainIdentifier(source, 'source id');
        splitTableId(table);
      } catch (err) {
        for (const i of items) await deadLetter(i.record, source, table, err);
        return;
      }
      const rec = await cp.getTable(source, table);
      if (!rec) {
        const err = new UnsafeIdentifierError(table, `not a registered table of source ${source}`);
        for (const i of items) await deadLetter(i.record, source, table, err);
        return;
      }
      const progress = options.replayHeld ? null : await cp.getSinkProgress(sinkId, source, table);
      if (rec.state === 'paused' || rec.state === 'needs-resnapshot' || (progress?.heldFrom ?? null) !== null) {
        await hold(source, table, items, progress?.heldFrom ? `held since ${progress.heldFrom}` : `table is ${rec.state}`);
        return;
      }
      const valid: Item[] = [];
      const schemas = new Map<number, SchemaVersion>();
      for (const i of items) {
        try {
          const schema = await schemaOf(source, table, i.event.schemaVersion);
          checkColumns(i.event, schema);
          schemas.set(schema.version, schema);
          valid.push(i);
        } catch (err) {
          if (!(err instanceof CdcError)) throw err;
          await deadLetter(i.record, source, table, err);
        }
      }
      if (valid.length === 0) return;
      try {
        await applyItems(source, table, rec.deleteMode, schemas, valid);
      } catch (err) {
        if (err instanceof SinkTypeConflictError) {
          logger.error('warehouse column type conflict; table held for this sink', { source, table, error: err.message });
          await hold(source, table, valid, err.message);
        } else if (err instanceof ValueRejectedError) {
          await isolate(source, table, rec.deleteMode, schemas, valid);
        } else if (persistentTableErrorCode(err) !== null) {
          await holdOnError(source, table, valid, err);
        } else {
          throw err;
        }
      }
    }

    async function hold(source: string, table: string, items: Item[], why: string): Promise<void> {
      await cp.holdSinkTable(sinkId, source, table, minPosition(items), heldShardsOf(items.map((i) => i.record)));
      countFor(source).held += items.length;
      logger.info('events held', { source, table, count: items.length, from: minPosition(items), why });
    }

    /** Holds a table this sink cannot write (an error a retry will not fix), audited, so the shard moves on. */
    async function holdOnError(source: string, table: string, items: Item[], err: unknown): Promise<void> {
      const code = persistentTableErrorCode(err);
      applyErrors++;
      logger.error('warehouse refuses writes to this table; table held for this sink (fix it, then cdc resume)', { source, table, sqlState: code, error: describeError(err) });
      await hold(source, table, items, describeError(err));
      await cp.appendAudit({
        at: now().toISOString(),
        actor: `applier:${sinkId}`,
        action: 'hold-table',
        source,
        table,
        outcome: 'done',
        detail: { sink: sinkId, heldFrom: minPosition(items), sqlState: code, reason: describeError(err), hint: `fix the warehouse table, then cdc resume ${table}` },
      });
    }

    async function applyItems(source: string, table: string, deleteMode: 'soft' | 'hard', schemas: Map<number, SchemaVersion>, items: Item[]): Promise<void> {
      const result = await warehouse.applyTable({ source, table, deleteMode, schemas, events: items.map((i) => i.event), appliedAt });
      await cp.advanceSinkProgress(sinkId, source, table, maxPosition(items));
      const c = countFor(source);
      c.applied += items.length;
      if (splitTableId(table).table === HEARTBEAT_TABLE) {
        for (const e of result.plan.fresh) c.lag.push(Math.max(0, result.committedAt - Date.parse(e.commitTs)));
      }
      if (result.plan.held.length > 0 || result.plan.donors.length > 0) {
        // A primary-key change whose insert lacks columns (an unchanged TOAST value) waits for the
        // old key's row, applied on another shard; nothing is written as NULL meanwhile.
        logger.info('primary-key change in flight: events held until the old key\'s values are known', {
          source,
          table,
          heldEvents: result.plan.held.length,
          heldKeys: new Set(result.plan.held.map((e) => JSON.stringify(e.key))).size,
          handedOver: result.plan.donors.length,
        });
      }
      if (result.ddl.length > 0) logger.info('warehouse DDL applied', { source, table, statements: result.ddl });
    }

    /** Applies the table's events one at a time, so that the one the warehouse refuses becomes a dead letter. */
    async function isolate(source: string, table: string, deleteMode: 'soft' | 'hard', schemas: Map<number, SchemaVersion>, items: Item[]): Promise<void> {
      const ordered = [...items].sort((a, b) => (a.event.position < b.event.position ? -1 : a.event.position > b.event.position ? 1 : 0));
      for (let n = 0; n < ordered.length; n++) {
        const i = ordered[n]!;
        try {
          await applyItems(source, table, deleteMode, schemas, [i]);
        } catch (err) {
          if (err instanceof ValueRejectedError) {
            await deadLetter(i.record, source, table, err);
            continue;
          }
          if (persistentTableErrorCode(err) !== null) {
            await holdOnError(source, table, ordered.slice(n), err);
            return;
          }
          applyErrors++;
          for (const rest of ordered.slice(n)) failed.set(rest.record.sequenceNumber, describeError(err));
          logger.error('table batch not applied; its records will be retried', { source, table, error: describeError(err) });
          return;
        }
      }
    }

    // Metrics, with exactly the contract's dimensions.
    for (const [source, c] of counts) {
      if (c.applied > 0) emit(MetricName.EVENTS_APPLIED, MetricUnit.Count, [c.applied], { [MetricDimension.SINK]: sinkId, [MetricDimension.SOURCE]: source });
      if (c.held > 0) emit(MetricName.EVENTS_HELD, MetricUnit.Count, [c.held], { [MetricDimension.SINK]: sinkId, [MetricDimension.SOURCE]: source });
      if (c.dead > 0) emit(MetricName.DEAD_LETTERS, MetricUnit.Count, [c.dead], { [MetricDimension.STAGE]: sinkId, [MetricDimension.SOURCE]: source });
      if (c.lag.length > 0) emit(MetricName.END_TO_END_LAG, MetricUnit.Milliseconds, c.lag, { [MetricDimension.SINK]: sinkId, [MetricDimension.SOURCE]: source });
    }
    if (applyErrors > 0) emit(MetricName.APPLY_ERRORS, MetricUnit.Count, [applyErrors], { [MetricDimension.SINK]: sinkId });

    const reported = failuresPerTable(
      records.map((r) => ({ sequenceNumber: r.sequenceNumber, table: tableOf.get(r.sequenceNumber) ?? null })),
      new Set(failed.keys()),
    );
    const reasons = new Map<string, string>();
    for (const s of reported) reasons.set(s, failed.get(s) ?? 'comes after a failed record of its table');
    let total = { applied: 0, held: 0, dead: 0 };
    for (const c of counts.values()) total = { applied: total.applied + c.applied, held: total.held + c.held, dead: total.dead + c.dead };
    return { failed: reported, reasons, applied: total.applied, held: total.held, deadLettered: total.dead };
  }

  const emit = (name: string, unit: (typeof MetricUnit)[keyof typeof MetricUnit], values: number[], dimensions: Record<string, string>): void =>
    emitSingleMetrics(metrics, name, unit, values, dimensions);

  async function handler(event: KinesisStreamEvent, context?: Context): Promise<KinesisStreamBatchResponse> {
    return partialBatchResponse(event, await applyRecords(event.Records.map(changeRecordOf)), processor, context);
  }

  return { applyRecords, handler, warehouse };
}

/**
 * Refuses names that are not plain identifiers or not columns of the event's schema version
 * (the applier's check of every event; the rebuild checks replayed events with it too).
 */
export function checkEventColumns(e: ChangeEvent, schema: SchemaVersion): void {
  const known = new Set(schema.columns.map((c) => c.name));
  const check = (name: string, where: string): void => {
    assertSourceColumn(name, e.table);
    if (!known.has(name)) throw new UnsafeIdentifierError(name, `${where} names a column that is not in schema version ${schema.version} of ${e.source}/${e.table}`);
  };
  for (const k of Object.keys(e.key)) check(k, 'key');
  for (const c of Object.keys(e.after ?? {})) check(c, 'after');
  for (const c of e.missing) check(c, 'missing');
  if (e.op === 'truncate') {
    // A truncate is table-level: no key, no images (docs/truncate.md).
    if (Object.keys(e.key).length > 0 || e.before !== null) throw new InvalidRecordError('key', `a truncate of ${e.table} carries no key and no before image`);
    return;
  }
  const keyCols = Object.keys(e.key).sort();
  const want = [...schema.key].sort();
  if (keyCols.length !== want.length || keyCols.some((k, i) => k !== want[i])) {
    throw new InvalidRecordError('key', `expected the primary key (${want.join(', ')}) of ${e.table} schema version ${schema.version}, got (${keyCols.join(', ')})`);
  }
}

/** Best effort: the source and table a record that failed validation is about. */
function aboutRecord(text: string): { source: string | null; table: string | null } {
  try {
    const v = JSON.parse(text) as Record<string, unknown>;
    return { source: typeof v.source === 'string' ? v.source : null, table: typeof v.table === 'string' ? v.table : null };
  } catch {
    return { source: null, table: null };
  }
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
  return createWarehouseApplier({ controlPlane: new DynamoDbControlPlane(dynamoDbClient(), table, payloads), pool, sinkId, metrics, logger, ...(payloads ? { payloads } : {}) });
}

/** The payload bucket the construct grants this function (dead letters' whole records, events stored out of line). */
function payloadStoreFromEnvironment(): PayloadStore | undefined {
  const bucket = process.env[EnvName.PAYLOAD_BUCKET];
  return bucket ? new S3PayloadStore(new S3Client({}), bucket, '', process.env[EnvName.PAYLOAD_KMS_KEY_ARN] || undefined) : undefined;
}

/** The scheduled event (lib/warehouse-sink.ts) on which the function runs the resume replay of released holds. */
export interface ReplayEvent {
  cdcReplay: true;
}

export const isReplayEvent = (e: unknown): e is ReplayEvent => typeof e === 'object' && e !== null && (e as { cdcReplay?: unknown }).cdcReplay === true;

/** Lambda entry point (Kinesis event source mapping with `ReportBatchItemFailures`; the schedule's replay event). */
export const handler = async (event: KinesisStreamEvent | ReplayEvent, context: Context): Promise<KinesisStreamBatchResponse | { replayed: ReplayOutcome[] }> => {
  logger.addContext(context);
  applier ??= fromEnvironment();
  let built: WarehouseApplier;
  try {
    built = await applier;
  } catch (err) {
    applier = undefined;
    throw err;
  }
  if (isReplayEvent(event)) return { replayed: await replayFromEnvironment(built, (message, detail) => logger.info(message, detail)) };
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
