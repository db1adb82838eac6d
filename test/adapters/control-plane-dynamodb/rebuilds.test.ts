/** The rebuild slot and runs in the DynamoDB control plane against DynamoDB Local (docs/rebuild.md). */
import { describe, expect, it } from 'vitest';
import { cp, pos, audit, useControlTable } from './fixture.ts';

useControlTable();

describe('the rebuild slot (docs/rebuild.md, "One at a time")', () => {
  const claim = (id: string, at: string, table = 'public.orders') => ({
    id,
    sink: 'wh',
    source: 'shop',
    table,
    mode: 'swap' as const,
    from: null,
    actor: 'test',
    startedAt: at,
    state: 'running' as const,
    heartbeatAt: at,
    checkpoint: null,
  });
  const checkpoint = (events: number) => ({ phase: 'replay' as const, appliedThrough: pos(events), events, applyMs: 1, sleptMs: 0, skipped: 0, slices: 1 });

  it('one rebuild per sink, with its audit entry; checkpoints only by the holder; a finished or stale slot is taken over; runs are listed without the slot', async () => {
    const t0 = new Date('2026-12-01T10:00:00Z');
    const iso = (ms: number) => new Date(t0.getTime() + ms).toISOString();
    expect(await cp.getActiveRebuild('wh')).toBeNull();
    expect(await cp.claimRebuild(claim('a', iso(0)), iso(-60_000), audit('rebuild-started'))).toBeNull();
    // Another claim while `a` reports: refused, the holder returned, nothing audited for it.
    const holder = await cp.claimRebuild(claim('b', iso(1000), 'public.customers'), iso(1000 - 60_000), audit('rebuild-started', 'public.customers'));
    expect(holder?.id).toBe('a');
    expect((await cp.listAudit()).filter((e) => e.action === 'rebuild-started').map((e) => e.table)).toEqual(['public.orders']);
    // Only the holder checkpoints.
    expect(await cp.checkpointRebuild('wh', 'b', checkpoint(5), iso(2000))).toBe(false);
    expect(await cp.checkpointRebuild('wh', 'a', checkpoint(7), iso(2000))).toBe(true);
    expect(await cp.getActiveRebuild('wh')).toMatchObject({
      id: 'a',
      state: 'running',
      heartbeatAt: iso(2000),
      checkpoint: { events: 7, appliedThrough: pos(7) },
    });
    // Stale (no report since before the stale time): taken over; the old holder can no longer checkpoint.
    expect(await cp.claimRebuild(claim('c', iso(100_000)), iso(50_000), audit('rebuild-started'))).toBeNull();
    expect(await cp.checkpointRebuild('wh', 'a', checkpoint(9), iso(100_001))).toBe(false);
    // Releasing by a non-holder is a no-op; by the holder, it frees the slot for the next claim at once.
    await cp.releaseRebuild('wh', 'a', iso(100_002));
    expect((await cp.getActiveRebuild('wh'))?.state).toBe('running');
    await cp.releaseRebuild('wh', 'c', iso(100_003));
    expect(await cp.getActiveRebuild('wh')).toMatchObject({ id: 'c', state: 'finished' });
    expect(await cp.checkpointRebuild('wh', 'c', checkpoint(1), iso(100_004))).toBe(false);
    expect(await cp.claimRebuild(claim('d', iso(100_005)), iso(100_005 - 60_000), audit('rebuild-started'))).toBeNull();
    // The slot item shares the partition with the runs: listRebuilds returns runs only.
    expect(await cp.listRebuilds('wh')).toEqual([]);
  });
});
