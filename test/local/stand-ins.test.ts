/** The stand-ins start, answer and stop: embedded PostgreSQL (logical decoding on), DynamoDB Local, kinesalite. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { CreateTableCommand, TransactWriteItemsCommand, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { CreateStreamCommand, DescribeStreamSummaryCommand, PutRecordCommand } from '@aws-sdk/client-kinesis';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { dynamoDbClient, kinesisClient } from '../../lambda/adapters/aws-clients.ts';

describe('local stand-ins', () => {
  let cluster: PostgresCluster;
  let ddb: DynamoDbLocal;
  let kin: Kinesalite;
  beforeAll(async () => {
    [cluster, ddb, kin] = await Promise.all([startPostgres({ fast: true }), startDynamoDbLocal(), startKinesalite()]);
  });
  afterAll(async () => {
    await Promise.all([cluster?.stop(), ddb?.stop(), kin?.stop()]);
  });

  it('embedded PostgreSQL runs with logical decoding', async () => {
    await cluster.createDatabase('src');
    const client = new pg.Client({ connectionString: cluster.url('src') });
    await client.connect();
    try {
      expect((await client.query('SHOW wal_level')).rows[0].wal_level).toBe('logical');
      await client.query('CREATE TABLE t (id int primary key, v text)');
      await client.query("SELECT pg_create_logical_replication_slot('s', 'test_decoding')");
      await client.query("INSERT INTO t VALUES (1, 'a')");
      const changes = await client.query("SELECT data FROM pg_logical_slot_peek_changes('s', NULL, NULL)");
      expect(changes.rows.map((r) => r.data)).toContain("table public.t: INSERT: id[integer]:1 v[text]:'a'");
    } finally {
      await client.end();
    }
  });

  it('DynamoDB Local supports transactions', async () => {
    const client = dynamoDbClient(ddb.endpoint);
    await client.send(
      new CreateTableCommand({
        TableName: 'ctl',
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [
          { AttributeName: 'pk', AttributeType: 'S' },
          { AttributeName: 'sk', AttributeType: 'S' },
        ],
        KeySchema: [
          { AttributeName: 'pk', KeyType: 'HASH' },
          { AttributeName: 'sk', KeyType: 'RANGE' },
        ],
      }),
    );
    await client.send(
      new TransactWriteItemsCommand({
        TransactItems: [
          { Put: { TableName: 'ctl', Item: { pk: { S: 'a' }, sk: { S: '1' } } } },
          { Put: { TableName: 'ctl', Item: { pk: { S: 'a' }, sk: { S: '2' } } } },
        ],
      }),
    );
    const got = await client.send(new GetItemCommand({ TableName: 'ctl', Key: { pk: { S: 'a' }, sk: { S: '2' } }, ConsistentRead: true }));
    expect(got.Item?.sk?.S).toBe('2');
  });

  it('kinesalite accepts records over HTTP/1.1', async () => {
    const client = kinesisClient(kin.endpoint);
    await client.send(new CreateStreamCommand({ StreamName: 's', ShardCount: 1 }));
    const summary = await client.send(new DescribeStreamSummaryCommand({ StreamName: 's' }));
    expect(summary.StreamDescriptionSummary?.StreamStatus).toBe('ACTIVE');
    const put = await client.send(new PutRecordCommand({ StreamName: 's', PartitionKey: 'k', Data: Buffer.from('x') }));
    expect(put.SequenceNumber).toMatch(/^\d+$/);
  });
});
