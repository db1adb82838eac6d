/** A sink's progress in the DynamoDB control plane against DynamoDB Local: a high-water mark that only rises, holds and their release. */
import { describe, expect, it } from 'vitest';
import { cp, pos, audit, useControlTable } from './fixture.ts';

useControlTable();

describe('sink progress', () => {
  it('is null before anything was applied', async () => {
    expect(await cp.getSinkProgress('wh', 'shop', 'public.orders')).toBeNull();
  });

  it('the applied high-water mark only rises', async () => {
    await cp.advanceSinkProgress('wh', 'shop', 'public.orders', pos(50));
    await cp.advanceSinkProgress('wh', 'shop', 'public.orders', pos(30));
    expect(await cp.getSinkProgress('wh', 'shop', 'public.orders')).toMatchObject({
      sink: 'wh',
      source: 'shop',
      table: 'public.orders',
      appliedPosition: pos(50),
      heldFrom: null,
    });
    await cp.advanceSinkProgress('wh', 'shop', 'public.orders', pos(50));
    await cp.advanceSinkProgress('wh', 'shop', 'public.orders', pos(50, 1));
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.appliedPosition).toBe(pos(50, 1));
  });

  it('concurrent advances end at the highest position', async () => {
    const positions = Array.from({ length: 30 }, (_, i) => pos(1000 + ((i * 7919) % 97), i));
    await Promise.all(positions.map((p) => cp.advanceSinkProgress('wh', 'shop', 'public.orders', p)));
    const highest = [...positions].sort().at(-1);
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.appliedPosition).toBe(highest);
  });

  it('refuses a position that is not canonical', async () => {
    await expect(cp.advanceSinkProgress('wh', 'shop', 'public.orders', '2/7C007178')).rejects.toThrow(/appliedPosition/);
    await expect(cp.holdSinkTable('wh', 'shop', 'public.orders', 'nope')).rejects.toThrow(/fromPosition/);
  });

  it('keeps the lowest held position until released, with an audit entry for the release', async () => {
    await cp.advanceSinkProgress('wh', 'shop', 'public.orders', pos(10));
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(20));
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(25));
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.heldFrom).toBe(pos(20));
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(15));
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.heldFrom).toBe(pos(15));
    await cp.releaseSinkTable('wh', 'shop', 'public.orders', audit('release-sink-table'));
    expect(await cp.getSinkProgress('wh', 'shop', 'public.orders')).toMatchObject({
      sink: 'wh',
      source: 'shop',
      table: 'public.orders',
      appliedPosition: pos(10),
      heldFrom: null,
    });
    expect((await cp.listAudit()).map((a) => a.action)).toEqual(['release-sink-table']);
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(40));
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.heldFrom).toBe(pos(40));
  });

  it('keeps the lowest held sequence number per shard with the hold count, atomically under racing holds, until released', async () => {
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(20), { 'shardId-000000000000': '200' });
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(30), { 'shardId-000000000000': '1000', 'shardId-000000000001': '99' });
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(25), { 'shardId-000000000001': '100' });
    expect(await cp.getSinkProgress('wh', 'shop', 'public.orders')).toMatchObject({
      heldFrom: pos(20),
      holdCount: 3,
      heldFromShards: { 'shardId-000000000000': '200', 'shardId-000000000001': '99' },
    });
    // Racing holds of several shards (the optimistic write retries): every shard and every count lands.
    await Promise.all(
      Array.from({ length: 8 }, (_, i) => cp.holdSinkTable('wh', 'shop', 'public.orders', pos(40 + i), { [`shardId-00000000001${i}`]: String(5 + i) })),
    );
    const p = await cp.getSinkProgress('wh', 'shop', 'public.orders');
    expect(p?.holdCount).toBe(11);
    expect(Object.keys(p?.heldFromShards ?? {})).toHaveLength(10);
    expect(await cp.completeSinkRelease('wh', 'shop', 'public.orders', { heldFrom: pos(20), holdCount: 10 }, audit('replay-held'))).toBe(false);
    expect(await cp.completeSinkRelease('wh', 'shop', 'public.orders', { heldFrom: pos(20), holdCount: 11 }, audit('replay-held'))).toBe(true);
    expect(await cp.getSinkProgress('wh', 'shop', 'public.orders')).toMatchObject({ heldFrom: null, heldFromShards: null });
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(50), { 'shardId-000000000000': '5000' });
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.heldFromShards).toEqual({ 'shardId-000000000000': '5000' });
  });

  it('says a hold was recorded by a consumer with several batches of one shard at once until the hold is released, whatever holds come after', async () => {
    await cp.holdSinkTable('wh', 'shop', 'public.lanes', pos(20), { 'shardId-000000000000': '200' });
    expect((await cp.getSinkProgress('wh', 'shop', 'public.lanes'))?.parallelBatches).toBe(false);
    await cp.holdSinkTable('wh', 'shop', 'public.lanes', pos(30), { 'shardId-000000000000': '300' }, true);
    await cp.holdSinkTable('wh', 'shop', 'public.lanes', pos(40), { 'shardId-000000000001': '400' }, false);
    expect(await cp.getSinkProgress('wh', 'shop', 'public.lanes')).toMatchObject({ heldFrom: pos(20), holdCount: 3, parallelBatches: true });
    expect(await cp.completeSinkRelease('wh', 'shop', 'public.lanes', { heldFrom: pos(20), holdCount: 3 }, audit('replay-held'))).toBe(true);
    expect((await cp.getSinkProgress('wh', 'shop', 'public.lanes'))?.parallelBatches).toBe(false);
    await cp.holdSinkTable('wh', 'shop', 'public.lanes', pos(50), { 'shardId-000000000000': '500' }, true);
    await cp.releaseSinkTable('wh', 'shop', 'public.lanes', audit('release-sink-table'));
    expect(await cp.getSinkProgress('wh', 'shop', 'public.lanes')).toMatchObject({ heldFrom: null, parallelBatches: false });
  });

  it("keeps a resume replay's progress on the hold until the release, and refuses it when nothing is held", async () => {
    expect(await cp.noteReplayProgress('wh', 'shop', 'public.progress', { 'shardId-000000000000': '10' })).toBe(false);
    expect((await cp.getSinkProgress('wh', 'shop', 'public.progress'))?.replayedThrough ?? null).toBeNull();
    await cp.holdSinkTable('wh', 'shop', 'public.progress', pos(20), { 'shardId-000000000000': '200' }, true);
    expect(await cp.noteReplayProgress('wh', 'shop', 'public.progress', { 'shardId-000000000000': '150' })).toBe(true);
    expect(await cp.noteReplayProgress('wh', 'shop', 'public.progress', { 'shardId-000000000000': '250', 'shardId-000000000001': '7.3' })).toBe(true);
    expect(await cp.getSinkProgress('wh', 'shop', 'public.progress')).toMatchObject({
      holdCount: 1,
      replayedThrough: { 'shardId-000000000000': '250', 'shardId-000000000001': '7.3' },
    });
    expect(await cp.completeSinkRelease('wh', 'shop', 'public.progress', { heldFrom: pos(20), holdCount: 1 }, audit('replay-held'))).toBe(true);
    expect((await cp.getSinkProgress('wh', 'shop', 'public.progress'))?.replayedThrough).toBeNull();
    expect(await cp.noteReplayProgress('wh', 'shop', 'public.progress', { 'shardId-000000000000': '300' })).toBe(false);
    await cp.holdSinkTable('wh', 'shop', 'public.progress', pos(30), { 'shardId-000000000000': '400' });
    expect(await cp.noteReplayProgress('wh', 'shop', 'public.progress', { 'shardId-000000000000': '450' })).toBe(true);
    await cp.releaseSinkTable('wh', 'shop', 'public.progress', audit('release-sink-table'));
    expect((await cp.getSinkProgress('wh', 'shop', 'public.progress'))?.replayedThrough).toBeNull();
  });

  it('progress of one sink does not touch another sink or table', async () => {
    await cp.advanceSinkProgress('wh', 'shop', 'public.orders', pos(10));
    await cp.advanceSinkProgress('search', 'shop', 'public.orders', pos(5));
    await cp.holdSinkTable('wh', 'shop', 'public.items', pos(7));
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.appliedPosition).toBe(pos(10));
    expect((await cp.getSinkProgress('search', 'shop', 'public.orders'))?.appliedPosition).toBe(pos(5));
    expect(await cp.getSinkProgress('wh', 'shop', 'public.items')).toMatchObject({ appliedPosition: null, heldFrom: pos(7) });
  });
});
