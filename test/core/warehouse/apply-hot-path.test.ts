/**
 * The shortcuts of the warehouse apply's per-event path (docs/performance-log.md, "Warehouse apply: less Node work per event on the append path") against the
 * plain definitions they replace, over seeded random inputs (seed and count printed):
 * - `distinctEvents` compares keys only between events at the same position;
 * - `validateChangeEvent` skips the checks of a source id, table id or commit time equal to the
 *   last one that passed.
 */
import { describe, expect, it } from 'vitest';
import { distinctEvents } from '../../../lambda/core/sink/apply-plan.ts';
import { ENVELOPE_VERSION, keyText, validateChangeEvent, type ChangeEvent, type Row } from '../../../lambda/core/shared/event.ts';
import { InvalidRecordError } from '../../../lambda/core/shared/errors.ts';
import { makePosition } from '../../../lambda/core/shared/position.ts';
import { seededRandom } from '../../../local/seeded-random.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 500);

/** The definition: first delivery of each (position, key text) wins, then a stable sort by position. */
function distinctReference(events: readonly ChangeEvent[]): ChangeEvent[] {
  const seen = new Map<string, ChangeEvent>();
  for (const e of events) {
    const id = `${e.position}|${keyText(e.key)}`;
    if (!seen.has(id)) seen.set(id, e);
  }
  return [...seen.values()].sort((a, b) => (a.position < b.position ? -1 : a.position > b.position ? 1 : 0));
}

function event(position: string, key: ChangeEvent['key'], n: number): ChangeEvent {
  return {
    v: ENVELOPE_VERSION,
    source: 'demo',
    table: 'public.t',
    op: 'update',
    key,
    after: { ...key, n },
    before: null,
    missing: [],
    position,
    commitTs: '2026-01-01T00:00:00.000Z',
    txId: '1',
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  };
}

describe('distinctEvents', () => {
  it(`equals the definition on random batches with duplicates, shared positions, equal keys as number and text, and any order (${RUNS} seeds from 1)`, () => {
    console.log(`distinctEvents: ${RUNS} seeds from 1`);
    for (let seed = 1; seed <= RUNS; seed++) {
      const rnd = seededRandom(seed);
      const pick = (n: number): number => Math.floor(rnd() * n);
      const events: ChangeEvent[] = [];
      const size = pick(40);
      let n = 0;
      for (let i = 0; i < size; i++) {
        // Few positions and keys, so that duplicates and primary-key-change pairs are common.
        const p = makePosition(BigInt(1 + pick(rnd() < 0.5 ? 5 : 30)) * 0x100n, pick(2));
        const id = pick(4);
        const key: Row = rnd() < 0.2 ? { a: id, b: String(pick(2)) } : { id: rnd() < 0.5 ? id : String(id) };
        events.push(event(p, key, n++));
      }
      if (rnd() < 0.5) events.sort((a, b) => (a.position < b.position ? -1 : a.position > b.position ? 1 : 0));
      const got = distinctEvents(events);
      expect(got, `seed ${seed}`).toEqual(distinctReference(events));
      // The same objects, in the definition's order (not copies).
      distinctReference(events).forEach((e, i) => expect(got[i], `seed ${seed}`).toBe(e));
    }
  });
});

/** Whether an event is valid by the definition of each field the shortcut skips (the others are valid here). */
function validByDefinition(source: unknown, table: unknown, commitTs: unknown): boolean {
  return (
    typeof source === 'string' &&
    /^[a-z][a-z0-9_]{0,62}$/.test(source) &&
    typeof table === 'string' &&
    /^[^.]+\.[^.]+$/.test(table) &&
    typeof commitTs === 'string' &&
    !Number.isNaN(Date.parse(commitTs))
  );
}

describe('validateChangeEvent', () => {
  const sources: unknown[] = ['demo', 'other_1', '', 'Demo', '1x', null, undefined, 5, 'a'.repeat(64)];
  const tables: unknown[] = ['public.t', 's.u', '', 'public', 'a.b.c', '.t', null, undefined, 7];
  const times: unknown[] = ['2026-01-01T00:00:00.000Z', '2026-01-01T00:00:01Z', '', 'yesterday', null, undefined, 0, '2026-13-45T99:00:00Z'];

  it(`refuses exactly the invalid source ids, table ids and commit times in any sequence, whatever passed before (${RUNS} seeds from 1, 30 events each)`, () => {
    console.log(`validateChangeEvent: ${RUNS} seeds from 1`);
    for (let seed = 1; seed <= RUNS; seed++) {
      const rnd = seededRandom(seed);
      const one = <T>(xs: readonly T[]): T => (rnd() < 0.6 ? xs[0]! : xs[Math.floor(rnd() * xs.length)]!);
      for (let i = 0; i < 30; i++) {
        const source = one(sources);
        const table = one(tables);
        const commitTs = one(times);
        const value = { ...event(makePosition(0x100n, i), { id: 1 }, i), source, table, commitTs } as unknown;
        const want = validByDefinition(source, table, commitTs);
        let got = true;
        try {
          const e = validateChangeEvent(value);
          expect(e.source).toBe(source);
          expect(e.table).toBe(table);
          expect(e.commitTs).toBe(commitTs);
        } catch (err) {
          if (!(err instanceof InvalidRecordError)) throw err;
          got = false;
        }
        expect(got, `seed ${seed}, event ${i}: ${JSON.stringify({ source, table, commitTs })}`).toBe(want);
      }
    }
  });

  it('refuses an empty source id, table id or commit time right after valid ones passed', () => {
    const ok = event(makePosition(0x100n, 0), { id: 1 }, 0);
    expect(validateChangeEvent(ok).source).toBe('demo');
    expect(() => validateChangeEvent({ ...ok, source: '' })).toThrow(InvalidRecordError);
    expect(() => validateChangeEvent({ ...ok, table: '' })).toThrow(InvalidRecordError);
    expect(() => validateChangeEvent({ ...ok, commitTs: '' })).toThrow(InvalidRecordError);
    expect(() => validateChangeEvent({ ...ok, commitTs: undefined })).toThrow(InvalidRecordError);
  });
});
