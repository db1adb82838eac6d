/**
 * Reads a change-log stream (Kinesis) to its tip, shard by shard, in each shard's order, from the
 * trim horizon or where the caller says: the resume replay's source of the held range
 * (docs/operations.md). Parent
 * shards are read before their children, so one key's events (one partition key, one shard at a
 * time) come in stream order. An aggregated record (contracts/change-log-record.ts) is read as its
 * events, one record each.
 */
import { subSequenceId, unpackChangeLogRecord } from '../../contracts/change-log-record.ts';
import { GetRecordsCommand, GetShardIteratorCommand, ListShardsCommand, type KinesisClient, type Shard } from '@aws-sdk/client-kinesis';

export interface LogRecord {
  shardId: string;
  /** The Kinesis sequence number; for an event of an aggregate, with its sub-sequence number (`kinesisSequenceOf` gives the record's). */
  sequenceNumber: string;
  /** When Kinesis received the record. */
  arrivedAt: Date | null;
  text: string;
  /** Set on an aggregate put for another shard (the shard it names): it holds no event to use; readers skip it. */
  otherShard?: string;
}

/** The shards of a stream, parents before children. */
export async function shardsInOrder(kinesis: KinesisClient, streamName: string): Promise<Shard[]> {
  const shards: Shard[] = [];
  let token: string | undefined;
  do {
    const page = await kinesis.send(new ListShardsCommand(token ? { NextToken: token } : { StreamName: streamName }));
    shards.push(...(page.Shards ?? []));
    token = page.NextToken;
  } while (token);
  const ids = new Set(shards.map((s) => s.ShardId));
  const done = new Set<string>();
  const out: Shard[] = [];
  while (out.length < shards.length) {
    const before = out.length;
    for (const s of shards) {
      if (done.has(s.ShardId!)) continue;
      const parents = [s.ParentShardId, s.AdjacentParentShardId].filter((p): p is string => !!p && ids.has(p));
      if (parents.every((p) => done.has(p))) {
        out.push(s);
        done.add(s.ShardId!);
      }
    }
    if (out.length === before) break;
  }
  return out;
}

/**
 * The stream's records now, in pages of at most `pageSize`, shard by shard (parents first): every
 * shard from its trim horizon, or with `starts` only the shards it names, each from its sequence
 * number (that record first) or its trim horizon (null).
 */
export async function* readChangeLog(
  kinesis: KinesisClient,
  streamName: string,
  options: { pageSize?: number; starts?: ReadonlyMap<string, string | null> | null } = {},
): AsyncGenerator<LogRecord[]> {
  const starts = options.starts ?? null;
  for (const shard of await shardsInOrder(kinesis, streamName)) {
    if (starts !== null && !starts.has(shard.ShardId!)) continue;
    yield* readShard(kinesis, streamName, shard.ShardId!, starts?.get(shard.ShardId!) ?? null, options);
  }
}

/**
 * One shard's records from a start onward, in pages, to the shard's tip (the replay reader's
 * stream part, docs/rebuild.md): `at` reads from that sequence number (the record itself first,
 * if the stream still holds it), `null` from the trim horizon.
 */
export async function* readShard(
  kinesis: KinesisClient,
  streamName: string,
  shardId: string,
  at: string | null,
  options: { pageSize?: number } = {},
): AsyncGenerator<LogRecord[]> {
  const start = await kinesis.send(
    new GetShardIteratorCommand(
      at === null
        ? { StreamName: streamName, ShardId: shardId, ShardIteratorType: 'TRIM_HORIZON' }
        : { StreamName: streamName, ShardId: shardId, ShardIteratorType: 'AT_SEQUENCE_NUMBER', StartingSequenceNumber: at },
    ),
  );
  let iterator = start.ShardIterator;
  let empty = 0;
  while (iterator) {
    const page = await kinesis.send(new GetRecordsCommand({ ShardIterator: iterator, Limit: options.pageSize ?? 1000 }));
    const records = page.Records ?? [];
    if (records.length > 0) {
      empty = 0;
      const out: LogRecord[] = [];
      for (const r of records) {
        const seq = r.SequenceNumber!;
        const arrivedAt = r.ApproximateArrivalTimestamp ?? null;
        const data = Buffer.from(r.Data ?? new Uint8Array());
        const u = unpackChangeLogRecord(data, r.PartitionKey, shardId, `${streamName}/${shardId}/${seq}`);
        if (u.kind === 'events')
          u.texts.forEach((text, i) => out.push({ shardId, sequenceNumber: u.aggregate ? subSequenceId(seq, i) : seq, arrivedAt, text }));
        // A corrupt aggregate is one record of its base64 data (not JSON: counted invalid by its readers).
        else if (u.kind === 'invalid') out.push({ shardId, sequenceNumber: seq, arrivedAt, text: data.toString('base64') });
        // An aggregate put for another shard: its events were put again on their shard; kept (no events) for the junction check.
        else out.push({ shardId, sequenceNumber: seq, arrivedAt, text: '', otherShard: u.meantFor });
      }
      yield out;
    } else if ((page.MillisBehindLatest ?? 0) === 0 || ++empty > 100) {
      break; // at the tip of an open shard
    }
    iterator = page.NextShardIterator;
  }
}
