/** The control table against DynamoDB Local: its creation, and every read strongly consistent. */
import { describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { CreateTableCommand } from '@aws-sdk/client-dynamodb';
import { dynamoDbClient } from '../../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { ddb, client, tableName, now, tableRecord, schema, audit, useControlTable } from './fixture.ts';

useControlTable();

describe('createControlTable', () => {
  it('is idempotent on an existing control table', async () => {
    await expect(createControlTable(client, tableName)).resolves.toBeUndefined();
  });

  it('refuses an existing table whose key is not pk + sk', async () => {
    const name = `wrong-${randomUUID()}`;
    await client.send(
      new CreateTableCommand({
        TableName: name,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
        KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
      }),
    );
    await expect(createControlTable(client, name)).rejects.toThrow(/not pk \(HASH\) \+ sk \(RANGE\)/);
  });
});

describe('reads', () => {
  it('every read the adapter sends is strongly consistent', async () => {
    const reads: Array<{ command: string; consistent: unknown }> = [];
    const spied = dynamoDbClient(ddb.endpoint);
    spied.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { ConsistentRead?: unknown };
        if (context.commandName === 'GetItemCommand' || context.commandName === 'QueryCommand')
          reads.push({ command: context.commandName, consistent: input.ConsistentRead });
        return next(args);
      },
      { step: 'initialize', name: 'recordReads' },
    );
    const spy = new DynamoDbControlPlane(spied, tableName);
    await spy.registerTable(tableRecord(), schema(1), audit('r'));
    await spy.getTable('shop', 'public.orders');
    await spy.listTables();
    await spy.listTables('shop');
    await spy.getSchemaVersion('shop', 'public.orders', 1);
    await spy.listSchemaVersions('shop', 'public.orders');
    await spy.addSchemaVersion(schema(3), audit('a'));
    await spy.getSinkProgress('wh', 'shop', 'public.orders');
    await spy.getCheckpoint('c', 's');
    await spy.listAudit('shop');
    await spy.putDeadLetter({
      at: now(),
      stage: 'normalizer',
      source: 'shop',
      table: 'public.orders',
      code: 'X',
      reason: 'r',
      origin: 'o',
      record: '',
      truncated: false,
    });
    await spy.listDeadLetters();
    spied.destroy();
    expect(reads.length).toBeGreaterThanOrEqual(12);
    expect(reads.filter((r) => r.consistent !== true)).toEqual([]);
  });
});
