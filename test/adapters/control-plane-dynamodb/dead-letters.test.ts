/** Dead letters in the DynamoDB control plane against DynamoDB Local: the degrade of their table, records kept whole or cut. */
import { describe, expect, it } from 'vitest';
import { dynamoDbClient } from '../../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../../lambda/adapters/control-plane-dynamodb.ts';
import { DEAD_LETTER_RECORD_MAX_BYTES, type DeadLetter } from '../../../lambda/core/shared/control-plane.ts';
import { ddb, cp, tableName, now, tableRecord, schema, audit, useControlTable } from './fixture.ts';

useControlTable();

describe('dead letters', () => {
  function letter(overrides: Partial<DeadLetter> = {}): DeadLetter {
    return {
      at: now(),
      stage: 'normalizer',
      source: 'shop',
      table: 'public.orders',
      code: 'INVALID_RECORD',
      reason: 'metadata.operation: expected an operation name, got nothing',
      origin: 'raw-stream/shardId-000000000000/4959',
      record: '{"metadata":{}}',
      truncated: false,
      ...overrides,
    };
  }

  it('stores a letter and degrades its active table, with an audit entry, in one step', async () => {
    await cp.registerTable(tableRecord(), schema(1), audit('register-table'));
    const l = letter();
    await cp.putDeadLetter(l);
    expect(await cp.listDeadLetters('normalizer')).toEqual([l]);
    const t = await cp.getTable('shop', 'public.orders');
    expect(t?.state).toBe('degraded');
    expect(t?.stateReason).toBe(`INVALID_RECORD: ${l.reason}`);
    const degrade = (await cp.listAudit('shop', 'public.orders')).find((a) => a.action === 'degrade-table');
    expect(degrade).toMatchObject({
      actor: 'normalizer',
      outcome: 'done',
      detail: { from: 'active', to: 'degraded', code: 'INVALID_RECORD', origin: l.origin },
    });
    // A second letter for a degraded table changes no state and adds no audit entry.
    await cp.putDeadLetter(letter({ reason: 'again' }));
    expect((await cp.listAudit()).filter((a) => a.action === 'degrade-table')).toHaveLength(1);
    expect(await cp.listDeadLetters('normalizer')).toHaveLength(2);
  });

  it('does not degrade a paused table, and stores letters without a table', async () => {
    await cp.registerTable(tableRecord(), schema(1), audit('register-table'));
    await cp.setTableState('shop', 'public.orders', 'paused', 'p', audit('pause'));
    await cp.putDeadLetter(letter());
    await cp.putDeadLetter(letter({ source: null, table: null, stage: 'wh', origin: 'file:3' }));
    await cp.putDeadLetter(letter({ table: 'public.unknown' }));
    expect((await cp.getTable('shop', 'public.orders'))?.state).toBe('paused');
    expect(await cp.listDeadLetters('wh')).toHaveLength(1);
    expect(await cp.listDeadLetters('normalizer')).toHaveLength(2);
    expect(await cp.listDeadLetters()).toHaveLength(3);
    expect(await cp.listDeadLetters('nobody')).toEqual([]);
    expect((await cp.listAudit()).map((a) => a.action)).toEqual(['register-table', 'pause']);
  });

  it('cuts an oversized record at 300 KB on a character boundary, marks it truncated, and pages through large results', async () => {
    const big = '{"data":"' + 'é'.repeat(250_000) + '"}'; // ~500 KB of UTF-8
    for (let i = 0; i < 5; i++) await cp.putDeadLetter(letter({ record: big, origin: `o${i}`, table: null }));
    let pages = 0;
    const counted = dynamoDbClient(ddb.endpoint);
    counted.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'QueryCommand') pages++;
        return next(args);
      },
      { step: 'initialize', name: 'countPages' },
    );
    const letters = await new DynamoDbControlPlane(counted, tableName).listDeadLetters('normalizer');
    counted.destroy();
    expect(pages).toBeGreaterThan(1); // 1.5 MB does not fit one 1 MB Query page
    expect(letters.map((l) => l.origin)).toEqual(['o0', 'o1', 'o2', 'o3', 'o4']);
    for (const l of letters) {
      expect(l.truncated).toBe(true);
      expect(Buffer.byteLength(l.record, 'utf8')).toBeLessThanOrEqual(DEAD_LETTER_RECORD_MAX_BYTES);
      expect(Buffer.byteLength(l.record, 'utf8')).toBeGreaterThan(DEAD_LETTER_RECORD_MAX_BYTES - 4);
      expect(l.record.endsWith('é')).toBe(true);
      expect(big.startsWith(l.record)).toBe(true);
    }
  });
});
