/** The control table against DynamoDB Local: its creation, and every read strongly consistent. */
import { describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { CreateTableCommand } from '@aws-sdk/client-dynamodb';
import { dynamoDbClient } from '../../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../../lambda/adapters/control-plane-dynamodb.ts';
import { ControlTable, createControlTable } from '../../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { ddb, client, cp, tableName, now, pos, tableRecord, schema, audit, useControlTable } from './fixture.ts';

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

describe('scanKind', () => {
  it('follows the scan to its last page and returns only items of the kind asked for', async () => {
    await cp.registerTable(tableRecord(), schema(1), audit('r'));
    const tables = ['public.a', 'public.b', 'public.c'];
    for (const sink of ['wh', 'ix']) for (const table of tables) await cp.advanceSinkProgress(sink, 'shop', table, pos(10));
    let pages = 0;
    const paged = dynamoDbClient(ddb.endpoint);
    paged.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'ScanCommand') {
          pages++;
          (args.input as { Limit?: number }).Limit = 2;
        }
        return next(args);
      },
      { step: 'initialize', name: 'smallPages' },
    );
    const items = await new ControlTable(paged, tableName).scanKind('sink-progress');
    const listed = await new DynamoDbControlPlane(paged, tableName).listSinkProgress();
    paged.destroy();
    expect(pages).toBeGreaterThan(2);
    expect(items.map((i) => `${String(i.sink)}/${String(i.table)}`).sort()).toEqual([
      'ix/public.a',
      'ix/public.b',
      'ix/public.c',
      'wh/public.a',
      'wh/public.b',
      'wh/public.c',
    ]);
    expect(listed.map((p) => `${p.sink}/${p.table}`)).toEqual(['ix/public.a', 'ix/public.b', 'ix/public.c', 'wh/public.a', 'wh/public.b', 'wh/public.c']);
    expect(await new ControlTable(client, tableName).scanKind('no-such-kind')).toEqual([]);
  });
});
