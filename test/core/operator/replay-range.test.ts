/**
 * What the resume replay reads and applies for a hold (lambda/core/operator/operator-decisions.ts
 * `replayStarts`, `replaysRecord`; docs/operations.md, "How a resume replays"): a held shard from
 * its first held record, or from its trim horizon when the holder ran several batches of one shard
 * at once, or after an earlier pass's progress; shards that held nothing not at all.
 */
import { describe, expect, it } from 'vitest';
import { replayStarts, replaysRecord } from '../../../lambda/core/operator/operator-decisions.ts';
import type { SinkTableProgress } from '../../../lambda/core/shared/control-plane.ts';
import { makePosition } from '../../../lambda/core/shared/position.ts';

type Hold = Pick<SinkTableProgress, 'heldFrom' | 'heldFromShards' | 'parallelBatches' | 'replayedThrough'>;
const P = (n: number) => makePosition(BigInt(n) * 0x100n, 0);
const held = (over: Partial<Hold> = {}): Hold => ({ heldFrom: P(10), heldFromShards: { s0: '200', s1: '300.2' }, ...over });

describe('replayStarts', () => {
  it('reads each held shard from its first held record (an aggregate event: from its Kinesis record), no other shard', () => {
    expect(replayStarts(held())).toEqual(
      new Map([
        ['s0', '200'],
        ['s1', '300'],
      ]),
    );
  });
  it('reads a held shard from its trim horizon when the holder ran several batches of one shard at once', () => {
    expect(replayStarts(held({ parallelBatches: true }))).toEqual(
      new Map([
        ['s0', null],
        ['s1', null],
      ]),
    );
  });
  it('reads after an earlier pass where there is one, whatever the mode', () => {
    for (const parallelBatches of [false, true])
      expect(replayStarts(held({ parallelBatches, replayedThrough: { s1: '900.4' } }))).toEqual(
        new Map([
          ['s0', parallelBatches ? null : '200'],
          ['s1', '900'],
        ]),
      );
  });
  it('reads every shard from its trim horizon for a hold without shard information, and nothing once released', () => {
    expect(replayStarts(held({ heldFromShards: null }))).toBeNull();
    expect(replayStarts(held({ heldFromShards: {} }))).toBeNull();
    expect(replayStarts(held({ heldFrom: null }))).toEqual(new Map());
  });
});

describe('replaysRecord', () => {
  it('the held range from the first held record of each held shard; nothing of a shard that held nothing', () => {
    const h = held();
    expect(replaysRecord(h, 's0', '199', P(20))).toBeNull();
    expect(replaysRecord(h, 's0', '200', P(20))).toBe('held');
    expect(replaysRecord(h, 's1', '300.1', P(20))).toBeNull();
    expect(replaysRecord(h, 's1', '300.2', P(20))).toBe('held');
    expect(replaysRecord(h, 's2', '999', P(20))).toBeNull();
  });
  it('with several batches of one shard at once, the earlier records of a held shard as catch-up', () => {
    const h = held({ parallelBatches: true });
    expect(replaysRecord(h, 's0', '1', P(1))).toBe('catch-up');
    expect(replaysRecord(h, 's0', '200', P(20))).toBe('held');
    expect(replaysRecord(h, 's2', '1', P(1))).toBeNull();
  });
  it('nothing at or below an earlier pass’s progress on the shard', () => {
    const h = held({ parallelBatches: true, replayedThrough: { s0: '250', s1: '300.5' } });
    expect(replaysRecord(h, 's0', '250', P(20))).toBeNull();
    expect(replaysRecord(h, 's0', '251', P(20))).toBe('held');
    expect(replaysRecord(h, 's1', '300.5', P(20))).toBeNull();
    expect(replaysRecord(h, 's1', '300.6', P(20))).toBe('held');
  });
  it('by position on every shard for a hold without shard information; nothing once released', () => {
    const h = held({ heldFromShards: null });
    expect(replaysRecord(h, 's9', '1', P(9))).toBeNull();
    expect(replaysRecord(h, 's9', '1', P(10))).toBe('held');
    expect(replaysRecord(held({ heldFrom: null }), 's0', '500', P(20))).toBeNull();
  });
});
