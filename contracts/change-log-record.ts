/**
 * A change-log Kinesis record as its consumers read it (docs/architecture.md, "5.1 The change
 * event"): one JSON change event (or claim check), or a KPL aggregate of several
 * (contracts/kpl-aggregate.ts) written for one shard.
 *
 * An aggregate's own partition key names the shard the producer meant it for (`AGGREGATE_KEY_PREFIX`
 * + shard id). An aggregate read from another shard (the producer's shard map was stale when it was
 * put) is skipped: the producer saw where it landed and put its events again on the right shard.
 *
 * Identity. Every event of an aggregate gets its own id, the aggregate's sequence number and the
 * event's index in it (its sub-sequence number): `<sequence number>.<sub-sequence number>`.
 * `compareSequenceNumbers` (lambda/core/sink/apply-plan.ts) orders such ids by sequence number,
 * then sub-sequence number; `kinesisSequenceOf` gives back the Kinesis sequence number a partial
 * batch response names (a failed event fails its whole aggregate, re-applied whole).
 */
import { AggregateFormatError, deaggregate, isAggregate } from './kpl-aggregate.ts';

/** The prefix of an aggregate's partition key; the rest is the shard id it was put for. */
export const AGGREGATE_KEY_PREFIX = 'cdc-aggregate:';

/** The separator between a sequence number and a sub-sequence number. */
const SUB = '.';

/** The id of event `sub` of the aggregate at `sequenceNumber`. */
export function subSequenceId(sequenceNumber: string, sub: number): string {
  return `${sequenceNumber}${SUB}${sub}`;
}

/** The Kinesis sequence number of a record id (the id itself for a plain record). */
export function kinesisSequenceOf(id: string): string {
  const dot = id.indexOf(SUB);
  return dot < 0 ? id : id.slice(0, dot);
}

/** The shard an aggregate's partition key names, or null (not one of ours). */
export function aggregateShardOf(partitionKey: string | undefined): string | null {
  return partitionKey !== undefined && partitionKey.startsWith(AGGREGATE_KEY_PREFIX) ? partitionKey.slice(AGGREGATE_KEY_PREFIX.length) : null;
}

/** What a change-log record holds, as its consumer reads it. */
export type UnpackedRecord =
  /** The events' texts in order; `aggregate` when they came from an aggregate (their ids carry a sub-sequence number). */
  | { kind: 'events'; texts: string[]; aggregate: boolean }
  /** An aggregate put for another shard than the one it was read from: skip it. */
  | { kind: 'other-shard'; meantFor: string }
  /** Data that starts with the aggregate magic but is not a valid aggregate. */
  | { kind: 'invalid'; error: AggregateFormatError };

/**
 * The events of one change-log record read from shard `shardId`. `where` names the record in an
 * error (`<stream>/<shard>/<sequence number>`).
 */
export function unpackChangeLogRecord(data: Buffer, partitionKey: string | undefined, shardId: string, where: string): UnpackedRecord {
  if (!isAggregate(data)) return { kind: 'events', texts: [data.toString('utf8')], aggregate: false };
  const meantFor = aggregateShardOf(partitionKey);
  if (meantFor !== null && meantFor !== shardId) return { kind: 'other-shard', meantFor };
  try {
    return { kind: 'events', texts: deaggregate(data, where).map((b) => b.toString('utf8')), aggregate: true };
  } catch (e) {
    if (e instanceof AggregateFormatError) return { kind: 'invalid', error: e };
    throw e;
  }
}
