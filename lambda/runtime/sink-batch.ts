/**
 * What both sink appliers' handlers share around a Kinesis batch (docs/architecture.md, "Where
 * things live"): the record a Lambda Kinesis event carries as the apply sees it, the partial-batch
 * response Powertools builds from the apply's outcome, and metrics with exactly the contract's
 * dimensions (contracts/metrics.ts).
 *
 * Why not a per-record handler: one transaction per batch and table means the whole batch must
 * be processed before any record's outcome is known. A sink handler therefore applies the batch
 * first, then hands Powertools' `BatchProcessor` a record handler that only reports each record's
 * known outcome (throws for the failed ones). Powertools still builds `batchItemFailures` and
 * raises `FullBatchFailureError` when every record failed, exactly as for per-record processing.
 * A batch in which no record failed is answered directly with the response Powertools gives then
 * (no failures), without its per-record pass.
 *
 * Metrics (EMF via Powertools, names from contracts/metrics.ts) carry exactly the dimensions the
 * contract names (Sink + Source, Stage + Source, or Sink): Powertools' default `service`
 * dimension is cleared so the constructs' alarms match.
 */
import { processPartialResponse, type BatchProcessor } from '@aws-lambda-powertools/batch';
import { MetricUnit, type Metrics } from '@aws-lambda-powertools/metrics';
import type { Context, KinesisStreamBatchResponse, KinesisStreamEvent, KinesisStreamRecord } from 'aws-lambda';
import { CdcError } from '../core/shared/errors.ts';
import { kinesisSequenceOf, subSequenceId, unpackChangeLogRecord } from '../../contracts/change-log-record.ts';
import { MetricDimension, MetricName } from '../../contracts/metrics.ts';
import type { ApplyLog, BatchOutcome, ChangeRecord, SourceCounts } from '../core/warehouse/warehouse-apply.ts';
import type { Logger } from '@aws-lambda-powertools/logger';

/** A record reported as failed in the batch response. */
export class RecordNotAppliedError extends CdcError {
  constructor(sequenceNumber: string, reason: string) {
    super('NOT_APPLIED', `record ${sequenceNumber} was not applied: ${reason}`);
  }
}

/** The stream name of the last event source ARN seen (every record of a batch has the same one). */
let lastArn: string | undefined;
let lastStream = 'stream';

/**
 * The one buffer every record's data is decoded into (grown for a larger record, never shrunk: a
 * Kinesis record is at most 1 MiB): no buffer allocated per record on the critical path
 * (docs/performance-log.md, "Less Node work per appended event").
 */
let scratch = Buffer.allocUnsafe(1 << 16);

/** The UTF-8 text of a record's base64 data: what `Buffer.from(data, 'base64').toString('utf8')` gives. */
export function recordText(data: string): string {
  // Four base64 characters hold three bytes; a tail without padding holds fewer.
  const most = Math.ceil(data.length / 4) * 3;
  if (most > scratch.length) scratch = Buffer.allocUnsafe(most);
  const n = scratch.write(data, 'base64');
  return scratch.toString('utf8', 0, n);
}

/**
 * A record of a Lambda Kinesis event as the apply sees it. Its text is decoded from the event's
 * base64 data each time it is read (the apply reads it once to decode the event, and again only
 * for a dead letter), and its origin is written only when read: neither is kept for the whole
 * batch, where every scavenge of the young generation would copy it (docs/warehouse-apply.md,
 * "The applier's young generation").
 */
class KinesisChangeRecord implements ChangeRecord {
  readonly sequenceNumber: string;
  constructor(
    private readonly r: KinesisStreamRecord,
    private readonly stream: string,
  ) {
    this.sequenceNumber = r.kinesis.sequenceNumber;
  }

  get origin(): string {
    const id = this.r.eventID;
    const colon = id === undefined ? -1 : id.indexOf(':');
    const shard = id === undefined ? 'shard' : colon < 0 ? id : id.slice(0, colon);
    return `${this.stream}/${shard}/${this.sequenceNumber}`;
  }

  get text(): string {
    return recordText(this.r.kinesis.data);
  }
}

/** The record a Lambda Kinesis event carries, as the applier sees it (a plain record: one change event). */
export function changeRecordOf(r: KinesisStreamRecord): ChangeRecord {
  const arn = r.eventSourceARN;
  if (arn !== lastArn) {
    lastStream = arn?.split(':stream/')[1] ?? 'stream';
    lastArn = arn;
  }
  return new KinesisChangeRecord(r, lastStream);
}

/** Whether a record's base64 data starts with the aggregate magic (F3 89 9A C2 is `84ma` in base64). */
function looksAggregated(data: string): boolean {
  return data.startsWith('84ma');
}

/**
 * The change records of a Lambda Kinesis batch, as the applier sees them: a plain record is one
 * event; a KPL aggregate (contracts/change-log-record.ts) is one record per event, each
 * with its own id (`<sequence number>.<sub-sequence number>`); an aggregate put for another shard
 * is skipped (logged, counted in `skipped`, which the appliers emit as `MisplacedAggregatesSkipped`); a corrupt aggregate is one record of its whole base64
 * data, which the apply dead-letters (nothing lost).
 */
export function changeRecordsOf(
  records: readonly KinesisStreamRecord[],
  log: { warn(message: string, detail: Record<string, unknown>): void; error(message: string, detail: Record<string, unknown>): void },
): { records: ChangeRecord[]; skipped: number } {
  const out: ChangeRecord[] = [];
  let skipped = 0;
  for (const r of records) {
    if (!looksAggregated(r.kinesis.data)) {
      out.push(changeRecordOf(r));
      continue;
    }
    const plain = changeRecordOf(r);
    const seq = r.kinesis.sequenceNumber;
    const shard = plain.origin.split('/').at(-2)!;
    const u = unpackChangeLogRecord(Buffer.from(r.kinesis.data, 'base64'), r.kinesis.partitionKey, shard, plain.origin);
    if (u.kind === 'other-shard') {
      skipped++;
      log.warn('aggregate read from another shard than it was put for: skipped (its events were put again on their shard)', {
        origin: plain.origin,
        meantFor: u.meantFor,
      });
    } else if (u.kind === 'invalid') {
      log.error('corrupt aggregated record: dead-lettered whole, as base64', { origin: plain.origin, reason: u.error.message });
      out.push({ sequenceNumber: seq, origin: plain.origin, text: r.kinesis.data });
    } else {
      const origin = plain.origin;
      u.texts.forEach((text, i) => {
        const id = u.aggregate ? subSequenceId(seq, i) : seq;
        out.push({ sequenceNumber: id, origin: `${origin.slice(0, origin.length - seq.length)}${id}`, text });
      });
    }
  }
  return { records: out, skipped };
}

/** Emits each value as its own EMF metric with exactly `dimensions` (no default dimensions): both sink appliers. */
export function emitSingleMetrics(
  metrics: Metrics,
  name: string,
  unit: (typeof MetricUnit)[keyof typeof MetricUnit],
  values: number[],
  dimensions: Record<string, string>,
): void {
  for (const v of values) {
    const m = metrics.singleMetric();
    m.clearDefaultDimensions();
    m.addDimensions(dimensions);
    m.addMetric(name, unit, v);
  }
}

/** The Lambda partial-batch response of a sink applier: the records `outcome` reports failed, with their reasons. */
export function partialBatchResponse(
  event: KinesisStreamEvent,
  outcome: BatchOutcome,
  processor: BatchProcessor,
  context?: Context,
): Promise<KinesisStreamBatchResponse> {
  // Nothing failed: the response Powertools builds then, without its per-record pass (a few µs
  // per record on the critical path; docs/performance-log.md, "Warehouse apply: less Node work per event on the append path").
  if (outcome.failed.length === 0) return Promise.resolve({ batchItemFailures: [] });
  // A failed event of an aggregate fails its whole Kinesis record (re-applied whole: the apply is idempotent by position).
  const failed = new Map<string, string>();
  for (const id of outcome.failed) {
    const seq = kinesisSequenceOf(id);
    if (!failed.has(seq)) failed.set(seq, id === seq ? (outcome.reasons.get(id) ?? 'failed') : `event ${id}: ${outcome.reasons.get(id) ?? 'failed'}`);
  }
  return processPartialResponse(
    event,
    async (r: KinesisStreamRecord) => {
      const seq = r.kinesis.sequenceNumber;
      const reason = failed.get(seq);
      if (reason !== undefined) throw new RecordNotAppliedError(seq, reason);
    },
    processor,
    { context, processInParallel: false },
  );
}

/** A sink batch's metrics, with exactly the contract's dimensions (Sink + Source, Stage + Source, or Sink): both sink appliers. */
export function emitApplyMetrics(metrics: Metrics, sinkId: string, outcome: { bySource: ReadonlyMap<string, SourceCounts>; applyErrors: number }): void {
  for (const [sourceId, c] of outcome.bySource) {
    if (c.applied > 0)
      emitSingleMetrics(metrics, MetricName.EVENTS_APPLIED, MetricUnit.Count, [c.applied], {
        [MetricDimension.SINK]: sinkId,
        [MetricDimension.SOURCE]: sourceId,
      });
    if (c.held > 0)
      emitSingleMetrics(metrics, MetricName.EVENTS_HELD, MetricUnit.Count, [c.held], { [MetricDimension.SINK]: sinkId, [MetricDimension.SOURCE]: sourceId });
    if (c.dead > 0)
      emitSingleMetrics(metrics, MetricName.DEAD_LETTERS, MetricUnit.Count, [c.dead], { [MetricDimension.STAGE]: sinkId, [MetricDimension.SOURCE]: sourceId });
    if (c.lag.length > 0)
      emitSingleMetrics(metrics, MetricName.END_TO_END_LAG, MetricUnit.Milliseconds, c.lag, {
        [MetricDimension.SINK]: sinkId,
        [MetricDimension.SOURCE]: sourceId,
      });
  }
  if (outcome.applyErrors > 0) emitSingleMetrics(metrics, MetricName.APPLY_ERRORS, MetricUnit.Count, [outcome.applyErrors], { [MetricDimension.SINK]: sinkId });
}

/**
 * The change records of a sink applier's Lambda batch (`changeRecordsOf`), the misplaced
 * aggregates it skipped counted in `MisplacedAggregatesSkipped` (dimension Sink): both sink appliers.
 */
export function sinkRecordsOf(
  records: readonly KinesisStreamRecord[],
  log: Parameters<typeof changeRecordsOf>[1],
  metrics: Metrics,
  sinkId: string,
): ChangeRecord[] {
  const read = changeRecordsOf(records, log);
  if (read.skipped > 0)
    emitSingleMetrics(metrics, MetricName.MISPLACED_AGGREGATES_SKIPPED, MetricUnit.Count, [read.skipped], { [MetricDimension.SINK]: sinkId });
  return read.records;
}

/** A sink apply's log (the core's `log` port) over a Powertools logger: both sink appliers. */
export function applyLog(logger: Pick<Logger, 'info' | 'warn' | 'error'>): ApplyLog {
  return {
    info: (message, detail) => logger.info(message, detail ?? {}),
    warn: (message, detail) => logger.warn(message, detail ?? {}),
    error: (message, detail) => logger.error(message, detail ?? {}),
  };
}

/** The deferred merges' metrics (inline after a batch, or the schedule's `mergeDue`): rows merged, merge errors, merges that stopped appends. */
export function emitMergeMetrics(metrics: Metrics, sinkId: string, merges: ReadonlyArray<{ rows: number; error?: unknown; appendsStopped?: boolean }>): void {
  const sink = { [MetricDimension.SINK]: sinkId };
  const rows = merges.reduce((n, m) => n + m.rows, 0);
  const errors = merges.filter((m) => m.error !== undefined).length;
  const stopping = merges.filter((m) => m.appendsStopped && m.error === undefined).length;
  if (rows > 0) emitSingleMetrics(metrics, MetricName.DELTA_ROWS_MERGED, MetricUnit.Count, [rows], sink);
  if (errors > 0) emitSingleMetrics(metrics, MetricName.MERGE_ERRORS, MetricUnit.Count, [errors], sink);
  if (stopping > 0) emitSingleMetrics(metrics, MetricName.MERGES_STOPPING_APPENDS, MetricUnit.Count, [stopping], sink);
}
