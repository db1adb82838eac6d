/**
 * The rebuild worker's events (lambda/core/rebuild/rebuild-invocation.ts): each op reaches the
 * rebuild with its request checked, bad input is refused naming the field, and the answer has the
 * shape the operator function and the state machine read.
 */
import { describe, expect, it } from 'vitest';
import { parseRebuildRequest, runRebuildInvocation, SLICE_MARGIN_MS } from '../../../lambda/core/rebuild/rebuild-invocation.ts';
import type { RebuildRequest } from '../../../lambda/core/rebuild/rebuild-ports.ts';
import type { RebuildRun } from '../../../lambda/core/shared/control-plane.ts';

const request = { source: 'shop', table: 'public.items', sink: 'wh' };
const run = { id: 'rb-1', outcome: 'done', mode: 'swap' } as RebuildRun;

function fakeRebuilder(done: boolean) {
  const calls: Array<{ op: string; r: RebuildRequest; extra?: unknown }> = [];
  return {
    calls,
    async check(r: RebuildRequest) {
      calls.push({ op: 'check', r });
      return { refusal: null, history: {} as never };
    },
    async slice(r: RebuildRequest, id: string, opts: { marginMs?: number; timeLeftMs?: () => number }) {
      calls.push({ op: 'slice', r, extra: { id, marginMs: opts.marginMs, left: opts.timeLeftMs?.() } });
      const checkpoint = { phase: 'replay' as const, appliedThrough: null, events: 3, applyMs: 0, sleptMs: 0, skipped: 0, slices: 1 };
      return done ? { done: true as const, report: { run } as never } : { done: false as const, checkpoint };
    },
    async abandon(r: RebuildRequest, id: string, error: string) {
      calls.push({ op: 'abandon', r, extra: { id, error } });
      return { ...run, outcome: 'failed' as const, error };
    },
  };
}

describe('runRebuildInvocation', () => {
  it('check asks the rebuild with a non-rehearsal request of actor check', async () => {
    const rb = fakeRebuilder(true);
    expect(await runRebuildInvocation(rb, { sink: 'wh' }, { op: 'check', request })).toEqual({ refusal: null });
    expect(rb.calls[0]!.r).toEqual({ ...request, rehearse: false, actor: 'check' });
  });

  it('slice passes the time left and the margin, and answers done or the checkpoint', async () => {
    const more = fakeRebuilder(false);
    const out = await runRebuildInvocation(more, { sink: 'wh' }, { op: 'slice', id: 'rb-1', request: { ...request, rehearse: true } as never }, () => 42);
    expect(out).toMatchObject({ id: 'rb-1', done: false, checkpoint: { events: 3 } });
    expect(more.calls[0]).toMatchObject({ r: { rehearse: true, actor: 'operator' }, extra: { id: 'rb-1', marginMs: SLICE_MARGIN_MS, left: 42 } });
    const done = fakeRebuilder(true);
    expect(await runRebuildInvocation(done, { sink: 'wh', marginMs: 5 }, { op: 'slice', id: 'rb-1', request: request as never })).toEqual({
      id: 'rb-1',
      done: true,
      outcome: 'done',
      run,
    });
    expect(done.calls[0]!.extra).toMatchObject({ marginMs: 5, left: Number.POSITIVE_INFINITY });
  });

  it('abandon records the error the state machine gives', async () => {
    const rb = fakeRebuilder(true);
    const out = await runRebuildInvocation(rb, { sink: 'wh' }, { op: 'abandon', id: 'rb-1', request: request as never, error: { Cause: 'timeout' } });
    expect(out).toMatchObject({ id: 'rb-1', done: true, outcome: 'failed' });
    expect(rb.calls[0]!.extra).toEqual({ id: 'rb-1', error: '{"Cause":"timeout"}' });
  });

  it('refuses an unknown op, a missing id, a bad field and another sink, naming them', async () => {
    const rb = fakeRebuilder(true);
    await expect(runRebuildInvocation(rb, { sink: 'wh' }, { op: 'rerun' } as never)).rejects.toThrow(/op must be check, slice or abandon, got "rerun"/);
    await expect(runRebuildInvocation(rb, { sink: 'wh' }, { op: 'slice', request } as never)).rejects.toThrow(/^id must be a non-empty string/);
    expect(() => parseRebuildRequest({ ...request, table: '' }, 'wh')).toThrow(/request.table must be a non-empty string/);
    expect(() => parseRebuildRequest({ ...request, from: 7 }, 'wh')).toThrow(/request.from must be a non-empty string, got 7/);
    expect(() => parseRebuildRequest(null, 'wh')).toThrow(/request must be an object/);
    expect(() => parseRebuildRequest(request, 'search')).toThrow(/request.sink is wh, but this rebuild worker serves sink search/);
    expect(rb.calls).toEqual([]);
  });
});
