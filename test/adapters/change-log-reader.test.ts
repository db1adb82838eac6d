/**
 * The change-log reader (lambda/adapters/change-log-reader.ts) against kinesalite: every shard from
 * its trim horizon, or only the shards a resume replay names, each from its start
 * (docs/operations.md, "How a resume replays": a replay reads its held shards only, from the first
 * held record or where an earlier pass stopped).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PutRecordCommand, type KinesisClient } from '@aws-sdk/client-kinesis';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { readChangeLog, shardsInOrder } from '../../lambda/adapters/change-log-reader.ts';
import { createStream } from '../helpers/kinesis-read.ts';

let kin: Kinesalite;
let client: KinesisClient;

beforeAll(async () => {
  kin = await startKinesalite();
  client = kinesisClient(kin.endpoint);
});
afterAll(async () => {
  client?.destroy();
  await kin?.stop();
});

describe('readChangeLog', () => {
  it('reads every shard from its trim horizon, or only the named shards, each from its start', async () => {
    const stream = 'reader-starts';
    await createStream(client, stream, 2);
    const [first, second] = (await shardsInOrder(client, stream)).map((s) => ({ id: s.ShardId!, hashKey: s.HashKeyRange!.StartingHashKey! }));
    const put = async (shard: { hashKey: string }, n: number) =>
      (await client.send(new PutRecordCommand({ StreamName: stream, PartitionKey: `k${n}`, ExplicitHashKey: shard.hashKey, Data: Buffer.from(`{"n":${n}}`) })))
        .SequenceNumber!;
    const seqs: string[] = [];
    for (let n = 1; n <= 5; n++) seqs.push(await put(first!, n));
    for (let n = 6; n <= 8; n++) await put(second!, n);
    const read = async (starts?: ReadonlyMap<string, string | null> | null) => {
      const out: Array<[string, number]> = [];
      for await (const page of readChangeLog(client, stream, { pageSize: 2, starts }))
        for (const r of page) out.push([r.shardId, (JSON.parse(r.text) as { n: number }).n]);
      return out;
    };
    const all = [1, 2, 3, 4, 5].map((n): [string, number] => [first!.id, n]).concat([6, 7, 8].map((n): [string, number] => [second!.id, n]));
    expect(await read()).toEqual(all);
    expect(await read(null)).toEqual(all);
    expect(await read(new Map([[first!.id, seqs[2]!]]))).toEqual([3, 4, 5].map((n) => [first!.id, n]));
    expect(await read(new Map([[second!.id, null]]))).toEqual([6, 7, 8].map((n) => [second!.id, n]));
    expect(await read(new Map())).toEqual([]);
  }, 60_000);
});
