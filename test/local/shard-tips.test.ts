/**
 * `ShardTips` (docs/local.md, "Semantics of the poller (Lambda's Kinesis event source mapping)"):
 * caught up since T once a read started after T found nothing new and everything read before it is
 * acknowledged, including when that read came back while a batch was with the handler; never
 * before the records it covers are acknowledged. Randomized against a model over many seeds.
 */
import { describe, expect, it } from 'vitest';
import { ShardTips } from '../../local/shard-tips.ts';
import { seededRandom } from '../../local/seeded-random.ts';

const seq = (n: number): string => (10n ** 30n + BigInt(n)).toString();

describe('ShardTips', () => {
  it('counts an empty read made while a batch was in flight once that batch is acknowledged', () => {
    const t = new ShardTips(null);
    t.tipRead(100, seq(5)); // records up to 5 read, a batch with the handler, nothing new on the stream
    expect(t.caughtUpSince(100)).toBe(false);
    t.acknowledged(seq(4));
    expect(t.caughtUpSince(100)).toBe(false);
    t.acknowledged(seq(5));
    expect(t.caughtUpSince(100)).toBe(true);
    expect(t.caughtUpSince(101)).toBe(false);
  });

  it('is caught up on an empty shard, and from its checkpoint when nothing was read', () => {
    const empty = new ShardTips(null);
    empty.tipRead(50, null);
    expect(empty.caughtUpSince(50)).toBe(true);
    const resumed = new ShardTips(seq(9));
    resumed.tipRead(60, seq(9));
    expect(resumed.caughtUpSince(60)).toBe(true);
  });

  it('compares sequence numbers as integers, not as text', () => {
    const t = new ShardTips('99');
    t.tipRead(10, '100');
    t.acknowledged('99');
    expect(t.caughtUpSince(10)).toBe(false);
    t.acknowledged('100');
    expect(t.caughtUpSince(10)).toBe(true);
  });

  it('agrees with a model under a steady trickle of records (randomized)', () => {
    const seeds = Number(process.env.CDC_PROPERTY_RUNS ?? 200);
    const base = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
    console.log(`shard-tips: ${seeds} seeds from ${base} (replay with CDC_PROPERTY_SEED=${base})`);
    let everCaughtUp = 0;
    for (let i = 0; i < seeds; i++) {
      const rand = seededRandom(base + i);
      const t = new ShardTips(null);
      let put = 0; // records on the shard
      let read = 0; // records read
      let acked = 0; // records acknowledged
      const putAt: number[] = []; // time of each put
      for (let now = 1; now <= 400; now++) {
        const r = rand();
        if (r < 0.3) putAt[++put] = now;
        else if (r < 0.6) {
          if (read < put) read = Math.min(put, read + 1 + Math.floor(rand() * 3));
          else t.tipRead(now, read === 0 ? null : seq(read));
        } else if (r < 0.8 && acked < read) {
          acked = Math.min(read, acked + 1 + Math.floor(rand() * 3));
          t.acknowledged(seq(acked));
        }
        // Claimed caught up since T: every record put before T is acknowledged.
        const since = 1 + Math.floor(rand() * now);
        if (t.caughtUpSince(since)) {
          const before = putAt.filter((at, n) => at !== undefined && at < since && n > acked);
          expect(before, `seed ${base + i}, time ${now}: caught up since ${since} with records put before it unacknowledged`).toEqual([]);
          everCaughtUp++;
        }
      }
      // Liveness: the trickle stops, the handler acknowledges all, a read finds the end.
      acked = read = put;
      if (put > 0) t.acknowledged(seq(put));
      t.tipRead(1000, put === 0 ? null : seq(put));
      expect(t.caughtUpSince(1000), `seed ${base + i}: caught up once all is acknowledged`).toBe(true);
    }
    expect(everCaughtUp).toBeGreaterThan(0);
  });
});
