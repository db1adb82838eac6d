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

/** Every record's payload parsed as JSON, per shard. */
export async function readJson<T = unknown>(
  client: KinesisClient,
  stream: string,
): Promise<Map<string, Array<{ partitionKey: string; sequenceNumber: string; value: T }>>> {
  const shards = await readShards(client, stream);
  const out = new Map<string, Array<{ partitionKey: string; sequenceNumber: string; value: T }>>();
  for (const [id, records] of shards) {
    out.set(
      id,
      records.map((r) => ({ partitionKey: r.PartitionKey!, sequenceNumber: r.SequenceNumber!, value: JSON.parse(Buffer.from(r.Data!).toString('utf8')) as T })),
    );
  }
  return out;
}
