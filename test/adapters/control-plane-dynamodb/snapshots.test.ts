/** Snapshot runs and chunks in the DynamoDB control plane against DynamoDB Local (docs/snapshot.md). */
import { describe, expect, it } from 'vitest';
import { cp, now, audit, useControlTable } from './fixture.ts';

useControlTable();

describe('snapshot runs and chunks (docs/snapshot.md)', () => {
  it('writes runs conditionally on their version, with the audit entry, and lists them per source', async () => {
    const { newSnapshotState } = await import('../../../lambda/core/snapshot/snapshot.ts');
    const s1 = newSnapshotState('shop', 'public.orders', 'initial', 'planner', new Date(), null);
    expect(await cp.putSnapshot(s1, null, audit('request-snapshot'))).toBe(true);
    // A second creation, or a write based on a stale version, loses.
    expect(await cp.putSnapshot({ ...s1, run: 'other' }, null, audit('request-snapshot'))).toBe(false);
    const s2 = { ...s1, status: 'running' as const, owner: 'w', version: s1.version + 1 };
    const racing = await Promise.all([cp.putSnapshot(s2, s1.version, null), cp.putSnapshot({ ...s2, owner: 'x' }, s1.version, null)]);
    expect(racing.filter(Boolean)).toHaveLength(1);
    expect(await cp.getSnapshot('shop', 'public.orders')).toMatchObject({ status: 'running', version: s2.version });
    expect((await cp.listSnapshots('shop')).map((s) => s.table)).toEqual(['public.orders']);
    expect(await cp.listSnapshots('other')).toEqual([]);
    expect((await cp.listAudit('shop', 'public.orders')).map((a) => a.action)).toEqual(['request-snapshot']);
    // The snapshot item does not show up as a table.
    expect(await cp.listTables('shop')).toEqual([]);
  });

  it('records a chunk and the cursor after it in one conditional transaction', async () => {
    const { newSnapshotState, snapshotPosition } = await import('../../../lambda/core/snapshot/snapshot.ts');
    const s1 = { ...newSnapshotState('shop', 'public.orders', 'initial', 'planner', new Date(), null), status: 'running' as const };
    await cp.putSnapshot(s1, null, null);
    const chunk = (index: number) => ({
      source: 'shop',
      table: 'public.orders',
      run: s1.run,
      index,
      startAfter: index === 0 ? null : [String(index * 10)],
      endKey: [String(index * 10 + 10)],
      rows: 10,
      lowWatermark: '0/16B3748',
      fenceXid: '731',
      position: snapshotPosition('0/16B3748'),
      readAt: now(),
      readMs: 3,
      fenceWaitMs: 0,
      fromReplica: false,
      status: 'published' as const,
      completedAt: now(),
    });
    const s2 = { ...s1, cursor: ['10'], chunksDone: 1, rowsDone: 10, version: s1.version + 1 };
    expect(await cp.completeSnapshotChunk(chunk(0), s2, s1.version)).toBe(true);
    // Stale version: neither the chunk nor the state is written.
    expect(await cp.completeSnapshotChunk(chunk(1), { ...s2, cursor: ['20'], version: s2.version + 1 }, s1.version)).toBe(false);
    expect((await cp.getSnapshot('shop', 'public.orders'))!.cursor).toEqual(['10']);
    expect((await cp.listSnapshotChunks('shop', 'public.orders', s1.run)).map((c) => c.index)).toEqual([0]);
    expect(await cp.completeSnapshotChunk(chunk(1), { ...s2, cursor: ['20'], version: s2.version + 1 }, s2.version)).toBe(true);
    expect((await cp.listSnapshotChunks('shop', 'public.orders', s1.run)).map((c) => [c.index, c.endKey])).toEqual([
      [0, ['10']],
      [1, ['20']],
    ]);
  });
});
