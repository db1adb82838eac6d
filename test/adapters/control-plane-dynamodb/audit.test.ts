/** The audit log of the DynamoDB control plane against DynamoDB Local: time order, filters, reads from a time on. */
import { describe, expect, it } from 'vitest';
import { DynamoDbControlPlane } from '../../../lambda/adapters/control-plane-dynamodb.ts';
import { client, cp, tableName, audit, useControlTable } from './fixture.ts';

useControlTable();

describe('audit', () => {
  it('appends entries and lists them in time order, filtered by source and table', async () => {
    await cp.appendAudit({
      at: '2026-01-02T00:00:00Z',
      actor: 'op',
      action: 'b',
      source: 'shop',
      table: 'public.orders',
      outcome: 'refused',
      detail: { why: 'no' },
    });
    await cp.appendAudit({ at: '2026-01-01T00:00:00.000Z', actor: 'op', action: 'a', source: 'shop', table: null, outcome: 'done', detail: {} });
    await cp.appendAudit({
      at: '2026-01-03T00:00:00.000Z',
      actor: 'op',
      action: 'c',
      source: 'crm',
      table: 'public.orders',
      outcome: 'done',
      detail: { nested: { n: [1, null, 'x'] } },
    });
    await cp.appendAudit({ at: '2026-01-04T00:00:00.000Z', actor: 'op', action: 'd', source: null, table: null, outcome: 'done', detail: {} });
    expect((await cp.listAudit()).map((a) => a.action)).toEqual(['a', 'b', 'c', 'd']);
    expect((await cp.listAudit('shop')).map((a) => a.action)).toEqual(['a', 'b']);
    expect((await cp.listAudit('shop', 'public.orders')).map((a) => a.action)).toEqual(['b']);
    expect((await cp.listAudit(undefined, 'public.orders')).map((a) => a.action)).toEqual(['b', 'c']);
    const all = await cp.listAudit();
    expect(all[1]).toEqual({
      at: '2026-01-02T00:00:00Z',
      actor: 'op',
      action: 'b',
      source: 'shop',
      table: 'public.orders',
      outcome: 'refused',
      detail: { why: 'no' },
    });
    expect(all[2]?.detail).toEqual({ nested: { n: [1, null, 'x'] } });
    expect(all[3]).toMatchObject({ source: null, table: null });
  });

  it('lists only the entries at or after a time, read by key (the part of the log before it is not read)', async () => {
    for (const [i, at] of ['2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z', '2026-01-02T00:00:00.000+00:00', '2026-01-03T12:00:00Z'].entries()) {
      await cp.appendAudit({ at, actor: 'op', action: `a${i}`, source: i % 2 ? 'crm' : 'shop', table: null, outcome: 'done', detail: {} });
    }
    expect((await cp.listAudit(undefined, undefined, '2026-01-02T00:00:00Z')).map((a) => a.action).sort()).toEqual(['a1', 'a2', 'a3']);
    expect((await cp.listAudit(undefined, undefined, '2026-01-02T00:00:00.001Z')).map((a) => a.action)).toEqual(['a3']);
    expect((await cp.listAudit('shop', undefined, '2026-01-02T00:00:00+01:00')).map((a) => a.action)).toEqual(['a2']);
    expect(await cp.listAudit(undefined, undefined, '2027-01-01T00:00:00Z')).toEqual([]);
    await expect(cp.listAudit(undefined, undefined, 'last tuesday')).rejects.toThrow(/ISO-8601/);
    // The bound is a key condition: a query that reads only the part from `since` on.
    const sent: unknown[] = [];
    const spy = { send: (c: { input: unknown }) => (sent.push(c.input), client.send(c as never)) } as unknown as typeof client;
    await new DynamoDbControlPlane(spy, tableName).listAudit('shop', undefined, '2026-01-03T00:00:00Z');
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({ KeyConditionExpression: '#pk = :pk AND #sk >= :from' });
  });

  it('refuses an entry with a bad time or outcome', async () => {
    await expect(cp.appendAudit({ ...audit('x'), at: 'yesterday' })).rejects.toThrow(/ISO-8601/);
    await expect(cp.appendAudit({ ...audit('x'), outcome: 'maybe' as never })).rejects.toThrow(/outcome/);
    expect(await cp.listAudit()).toEqual([]);
  });
});
