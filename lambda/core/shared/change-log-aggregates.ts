/**
 * How the change-log producer packs events into KPL aggregates (docs/architecture.md, "5.1 The
 * change event"): only events bound for the same shard share an aggregate, so per-key order holds.
 *
 * A key's shard is the open shard whose hash key range holds the MD5 of its partition key (a 128-bit
 * big-endian integer; what Kinesis does). The producer keeps the open shards' ranges (`ShardRange`)
 * from ListShards; each aggregate is put with an explicit hash key inside its predicted shard's range
 * and names that shard in its own partition key (`AGGREGATE_KEY_PREFIX`), which is how the producer
 * and the consumers see that the map was stale (the aggregate landed elsewhere).
 *
 * Planning: events are taken in order; each predicted shard has one open aggregate, closed when the
 * next event would take it past `maxBytes` or `maxEvents`. Units (aggregates, or plain records for
 * a group of one) are put in the order they were opened, so a shard's units go in event order.
 */
import { createHash } from 'node:crypto';
import { AGGREGATE_KEY_PREFIX } from '../../../contracts/change-log-record.ts';
import { AGGREGATE_OVERHEAD, encodeAggregate, keyTableEntrySize, userRecordSize } from '../../../contracts/kpl-aggregate.ts';

/** An open shard's hash key range. */
export interface ShardRange {
  shardId: string;
  start: bigint;
  end: bigint;
}

/** The shape of a ListShards shard this module reads. */
export interface ListedShard {
  ShardId?: string;
  HashKeyRange?: { StartingHashKey?: string; EndingHashKey?: string };
  SequenceNumberRange?: { EndingSequenceNumber?: string };
}

/** The open shards of a listing (a closed shard has an ending sequence number), by start of range. */
export function openShardRanges(shards: readonly ListedShard[]): ShardRange[] {
  const out: ShardRange[] = [];
  for (const s of shards) {
    if (s.SequenceNumberRange?.EndingSequenceNumber !== undefined) continue;
    if (!s.ShardId || s.HashKeyRange?.StartingHashKey === undefined || s.HashKeyRange.EndingHashKey === undefined) continue;
    out.push({ shardId: s.ShardId, start: BigInt(s.HashKeyRange.StartingHashKey), end: BigInt(s.HashKeyRange.EndingHashKey) });
  }
  return out.sort((a, b) => (a.start < b.start ? -1 : a.start > b.start ? 1 : 0));
}

/** The largest hash key: MD5 is 128 bits. */
const MAX_HASH_KEY = (1n << 128n) - 1n;

/** The hash key Kinesis maps a partition key to: MD5 of its UTF-8 bytes, as a 128-bit big-endian integer. */
export function hashKeyOf(partitionKey: string): bigint {
  return BigInt(`0x${createHash('md5').update(partitionKey, 'utf8').digest('hex')}`);
}

/** The range holding `hash`, or null (no open shard covers it: a map caught mid-reshard). */
export function shardOfHash(ranges: readonly ShardRange[], hash: bigint): ShardRange | null {
  let lo = 0;
  let hi = ranges.length - 1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    const r = ranges[mid]!;
    if (hash < r.start) hi = mid - 1;
    else if (hash > r.end) lo = mid + 1;
    else return r;
  }
  return null;
}

/** An event as the planner sees it. */
export interface PlannedEvent {
  partitionKey: string;
  data: Uint8Array;
}

/** One Kinesis record to put: a plain event or an aggregate of several. */
export interface PutUnit {
  partitionKey: string;
  explicitHashKey?: string;
  data: Uint8Array;
  /** The shard the aggregate was meant for; undefined for a plain record (Kinesis routes it by its own key). */
  shardId?: string;
  /** Indexes of its events in the input, ascending. */
  members: number[];
}

export interface AggregateLimits {
  /** Bytes of one aggregate (KPL's AggregationMaxSize default is 51,200). */
  maxBytes: number;
  /** Events in one aggregate. */
  maxEvents: number;
}

export const DEFAULT_AGGREGATE_LIMITS: AggregateLimits = { maxBytes: 50 * 1024, maxEvents: 1000 };

interface Open {
  shard: ShardRange;
  members: number[];
  keys: Set<string>;
  bytes: number;
  order: number;
}

/** What `e` adds to the aggregate `x`: its record, and its partition key unless the aggregate has it. */
function addedBytes(x: Open, e: PlannedEvent): number {
  return (x.keys.has(e.partitionKey) ? 0 : keyTableEntrySize(e.partitionKey)) + userRecordSize(e.data.length, x.keys.size, null);
}

/**
 * Plans the units that put `indexes` (in order) of `events`. `ranges` is the shard map; an event whose
 * hash no open shard covers goes as a plain record.
 */
export function planUnits(events: readonly PlannedEvent[], indexes: readonly number[], ranges: readonly ShardRange[], limits: AggregateLimits): PutUnit[] {
  const done: Array<{ order: number; unit: PutUnit }> = [];
  const open = new Map<string, Open>();
  let order = 0;
  const close = (o: Open): void => {
    open.delete(o.shard.shardId);
    done.push({ order: o.order, unit: unitOf(events, o) });
  };
  // One open shard over the whole hash key space (a stream of one shard) holds every hash: no MD5 per event.
  const whole = ranges.length === 1 && ranges[0]!.start === 0n && ranges[0]!.end === MAX_HASH_KEY ? ranges[0]! : null;
  for (const i of indexes) {
    const e = events[i]!;
    const shard = whole ?? shardOfHash(ranges, hashKeyOf(e.partitionKey));
    if (shard === null) {
      done.push({ order: order++, unit: { partitionKey: e.partitionKey, data: e.data, members: [i] } });
      continue;
    }
    let o = open.get(shard.shardId);
    if (o && (o.members.length >= limits.maxEvents || o.bytes + addedBytes(o, e) > limits.maxBytes)) {
      close(o);
      o = undefined;
    }
    if (!o) {
      o = { shard, members: [], keys: new Set(), bytes: AGGREGATE_OVERHEAD + keyTableEntrySize(AGGREGATE_KEY_PREFIX), order: order++ };
      open.set(shard.shardId, o);
    }
    o.bytes += addedBytes(o, e);
    o.keys.add(e.partitionKey);
    o.members.push(i);
  }
  for (const o of [...open.values()]) close(o);
  return done.sort((a, b) => a.order - b.order).map((d) => d.unit);
}

function unitOf(events: readonly PlannedEvent[], o: Open): PutUnit {
  if (o.members.length === 1) {
    const e = events[o.members[0]!]!;
    return { partitionKey: e.partitionKey, data: e.data, members: o.members };
  }
  const data = encodeAggregate(o.members.map((i) => events[i]!));
  return {
    partitionKey: `${AGGREGATE_KEY_PREFIX}${o.shard.shardId}`,
    explicitHashKey: o.shard.start.toString(),
    data,
    shardId: o.shard.shardId,
    members: o.members,
  };
}
