/** Test helpers for kinesalite: create a stream and read every record of it, shard by shard. */
import {
  CreateStreamCommand,
  DescribeStreamSummaryCommand,
  GetRecordsCommand,
  GetShardIteratorCommand,
  ListShardsCommand,
  type _Record as KinesisRecord,
  type KinesisClient,
} from '@aws-sdk/client-kinesis';
import { aggregateShardOf, subSequenceId, unpackChangeLogRecord } from '../../contracts/change-log-record.ts';
import { decodeAggregate, isAggregate } from '../../contracts/kpl-aggregate.ts';

/** Creates a stream and returns its ARN. */
export async function createStream(client: KinesisClient, name: string, shards = 1): Promise<string> {
  await client.send(new CreateStreamCommand({ StreamName: name, ShardCount: shards }));
  for (;;) {
    const d = await client.send(new DescribeStreamSummaryCommand({ StreamName: name }));
    if (d.StreamDescriptionSummary?.StreamStatus === 'ACTIVE') return d.StreamDescriptionSummary.StreamARN!;
    await new Promise((r) => setTimeout(r, 20));
  }
}

/** Every record of every shard, from the start of the stream, in shard order. */
export async function readShards(client: KinesisClient, stream: string): Promise<Map<string, KinesisRecord[]>> {
  const shards = (await client.send(new ListShardsCommand({ StreamName: stream }))).Shards ?? [];
  const out = new Map<string, KinesisRecord[]>();
  for (const s of shards) {
    const records: KinesisRecord[] = [];
    let iterator = (await client.send(new GetShardIteratorCommand({ StreamName: stream, ShardId: s.ShardId!, ShardIteratorType: 'TRIM_HORIZON' })))
      .ShardIterator;
    while (iterator) {
      const page = await client.send(new GetRecordsCommand({ ShardIterator: iterator, Limit: 10_000 }));
      records.push(...(page.Records ?? []));
      if ((page.Records ?? []).length === 0 && (page.MillisBehindLatest ?? 0) === 0) break;
      iterator = page.NextShardIterator;
    }
    out.set(s.ShardId!, records);
  }
  return out;
}

/**
 * Every record's payload parsed as JSON, per shard. A KPL aggregate (the change log's records,
 * contracts/change-log-record.ts) is read as its events, each with its own partition key
 * and `<sequence number>.<sub-sequence number>`; an aggregate put for another shard is skipped, as
 * every consumer skips it.
 */
export async function readJson<T = unknown>(
  client: KinesisClient,
  stream: string,
): Promise<Map<string, Array<{ partitionKey: string; sequenceNumber: string; value: T }>>> {
  const shards = await readShards(client, stream);
  const out = new Map<string, Array<{ partitionKey: string; sequenceNumber: string; value: T }>>();
  for (const [id, records] of shards) {
    const list: Array<{ partitionKey: string; sequenceNumber: string; value: T }> = [];
    for (const r of records) {
      const data = Buffer.from(r.Data!);
      if (!isAggregate(data)) {
        list.push({ partitionKey: r.PartitionKey!, sequenceNumber: r.SequenceNumber!, value: JSON.parse(data.toString('utf8')) as T });
        continue;
      }
      if (aggregateShardOf(r.PartitionKey) !== id) continue;
      decodeAggregate(data, `${stream}/${id}/${r.SequenceNumber}`).records.forEach((u, i) =>
        list.push({ partitionKey: u.partitionKey, sequenceNumber: subSequenceId(r.SequenceNumber!, i), value: JSON.parse(u.data.toString('utf8')) as T }),
      );
    }
    out.set(id, list);
  }
  return out;
}

/** Every event's text on a stream, in shard order: plain records and the events of aggregates meant for the shard they are on. */
export async function readTexts(client: KinesisClient, stream: string): Promise<string[]> {
  const out: string[] = [];
  for (const [id, records] of await readShards(client, stream)) {
    for (const r of records) {
      const u = unpackChangeLogRecord(Buffer.from(r.Data!), r.PartitionKey, id, `${stream}/${id}/${r.SequenceNumber}`);
      if (u.kind === 'events') out.push(...u.texts);
      else if (u.kind === 'invalid') throw u.error;
    }
  }
  return out;
}
