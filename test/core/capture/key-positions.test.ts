/**
 * Per-key monotonicity (lambda/core/capture/key-positions.ts; docs/positions.md): `KeyPositions`
 * parses each remembered commit time once and skips the parse when two commit times are the same
 * text. It must decide exactly as the check did when it parsed both times on every change: the
 * reference below is that check. Randomized over batches of changes on a few keys and shards,
 * positions going back and forth, commit times in several spellings of the same instant and
 * unreadable ones (NaN), truncates, snapshot rows and load rows (position zero).
 *
 * Runs and seed: `CDC_KEY_POSITIONS_RUNS` (default 300) and `CDC_PROPERTY_SEED` (default random, printed).
 */
import { describe, expect, it } from 'vitest';
import { KeyPositions } from '../../../lambda/core/capture/key-positions.ts';
import type { DecodedChange } from '../../../lambda/core/capture/decoded.ts';
import { PositionRegressionError } from '../../../lambda/core/shared/errors.ts';
import { keyText } from '../../../lambda/core/shared/event.ts';
import { POSITION_ZERO } from '../../../lambda/core/shared/position.ts';
import { rng } from '../../helpers/rng.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const RUNS = Number(process.env.CDC_KEY_POSITIONS_RUNS ?? 300);

/** The check as it was: both commit times parsed on every comparison. */
class ReferenceCheck {
  private readonly seen = new Map<string, Map<string, { position: string; commitTs: string }>>();
  check(origin: string, changes: readonly DecodedChange[]): PositionRegressionError | null {
    const shard = origin.includes('/') ? origin.slice(0, origin.lastIndexOf('/')) : origin;
    let keys = this.seen.get(shard);
    if (!keys) this.seen.set(shard, (keys = new Map()));
    const updates: [string, { position: string; commitTs: string }][] = [];
    for (const c of changes) {
      if (c.position === POSITION_ZERO || c.op === 'truncate' || c.op === 'snapshot') continue;
      const id = `${c.table}|${keyText(c.key)}`;
      const last = keys.get(id);
      if (last && c.position < last.position) {
        if (Date.parse(c.commitTs) > Date.parse(last.commitTs))
          return new PositionRegressionError(c.table, keyText(c.key), shard, c.position, last.position, last.commitTs);
        continue;
      }
      const latest = last && Date.parse(last.commitTs) > Date.parse(c.commitTs) ? last.commitTs : c.commitTs;
      updates.push([id, { position: c.position, commitTs: latest }]);
    }
    for (const [id, s] of updates) {
      keys.delete(id);
      keys.set(id, s);
    }
    return null;
  }
}

/** Spellings of a few instants: the same instant in other texts, and texts Date.parse cannot read. */
const COMMIT_TIMES = [
  '2026-12-07T08:00:00Z',
  '2026-12-07T08:00:00.000Z',
  '2026-12-07T09:00:00+01:00',
  '2026-12-07T08:00:00.001Z',
  '2026-12-07T07:59:59.999Z',
  '2026-12-07T08:00:01Z',
  '2026-12-07 08:00:02+00',
  'not a time',
  '',
];

function position(n: number): string {
  return String(n).padStart(POSITION_ZERO.length, '0');
}

describe('KeyPositions', () => {
  it('decides as the check that parsed both commit times every time: the same regressions, the same positions and times remembered', () => {
    console.log(`key positions: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED}, CDC_KEY_POSITIONS_RUNS=${RUNS})`);
    let regressions = 0;
    for (let run = 0; run < RUNS; run++) {
      const rand = rng(SEED + run);
      const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
      const subject = new KeyPositions();
      const reference = new ReferenceCheck();
      for (let b = 0; b < 30; b++) {
        const origin = `${pick(['raw', 'raw/shard-1', 'raw/shard-2'])}/${b}`;
        const changes: DecodedChange[] = Array.from({ length: 1 + Math.floor(rand() * 6) }, () => ({
          source: 's',
          table: pick(['public.a', 'public.b']),
          op: pick(['insert', 'update', 'update', 'delete', 'truncate', 'snapshot'] as const),
          key: rand() < 0.5 ? { id: Math.floor(rand() * 4) } : { id: String(Math.floor(rand() * 4)), k: pick(['x', 'y']) },
          position: rand() < 0.05 ? POSITION_ZERO : position(Math.floor(rand() * 40)),
          commitTs: pick(COMMIT_TIMES),
          row: null,
        })) as unknown as DecodedChange[];
        const want = reference.check(origin, changes);
        const got = subject.check(origin, changes);
        const what = `run ${run} batch ${b} (seed ${SEED + run})`;
        expect(got === null, what).toBe(want === null);
        if (want && got) {
          regressions++;
          expect([got.table, got.key, got.where, got.position, got.previous], what).toEqual([want.table, want.key, want.where, want.position, want.previous]);
          // The reference's hint is the commit time it remembered for the key: the subject's message names the same one.
          expect(got.message, what).toContain(`(committed ${want.message.slice(want.message.lastIndexOf('. ') + 2)})`);
        }
      }
    }
    // The workload does reach regressions (not only replays and advances).
    expect(regressions).toBeGreaterThan(RUNS / 10);
  });
});
