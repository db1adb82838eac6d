import { describe, expect, it } from 'vitest';
import {
  compareSequenceNumbers,
  distinctEvents,
  failuresFrom,
  handoverId,
  oldKeysNeeded,
  planTable,
  setSignature,
  toParam,
  type StoredRow,
  type StoredState,
} from '../../../lambda/core/sink/apply-plan.ts';
import { ENVELOPE_VERSION, keyText, type ChangeEvent, type Row } from '../../../lambda/core/shared/event.ts';
import { makePosition } from '../../../lambda/core/shared/position.ts';
import { seededRandom } from '../../../local/seeded-random.ts';

const pos = (n: number, i = 0): string => makePosition(BigInt(n) * 0x100n, i);
const DISTINCT_RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 2000);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);

function ev(op: ChangeEvent['op'], n: number, key: Row, after: Row | null, extra: Partial<ChangeEvent> = {}): ChangeEvent {
  return {
    v: ENVELOPE_VERSION,
    source: 'demo',
    table: 'public.t',
    op,
    key,
    after,
    before: null,
    missing: [],
    position: pos(n),
    commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString(),
    txId: String(n),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
    ...extra,
  };
}

const K1 = { id: 1 };
const K2 = { id: 2 };
const stored = (entries: [Row, StoredState][]): Map<string, StoredState> => new Map(entries.map(([k, s]) => [keyText(k), s]));

describe('distinctEvents', () => {
  it('keeps the first delivery of each position + key, in position order', () => {
    const a = ev('insert', 2, K1, { id: 1, v: 'a' });
    const dup = { ...a, after: { id: 1, v: 'other' } };
    const b = ev('insert', 1, K2, { id: 2 });
    expect(distinctEvents([a, b, dup]).map((e) => [e.position, e.after])).toEqual([
      [pos(1), { id: 2 }],
      [pos(2), { id: 1, v: 'a' }],
    ]);
  });

  it('keeps the two halves of a primary-key change (same position, different keys)', () => {
    const del = ev('delete', 3, K1, null);
    const ins = ev('insert', 3, K2, { id: 2 }, { before: { id: 1 } });
    expect(distinctEvents([ins, del, ins])).toHaveLength(2);
  });

  /** The definition, the way it was written before it was made linear: first delivery kept, then a stable sort by position. */
  const reference = (events: readonly ChangeEvent[]): ChangeEvent[] => {
    const seen = new Set<string>();
    const out = events.filter((e) => {
      const id = `${e.position}|${keyText(e.key)}`;
      if (seen.has(id)) return false;
      seen.add(id);
      return true;
    });
    return out.sort((a, b) => (a.position < b.position ? -1 : a.position > b.position ? 1 : 0));
  };

  it(`is its definition over random batches: duplicates, runs at one position (snapshot chunks, primary-key changes), any order (${DISTINCT_RUNS} batches, seed ${SEED})`, () => {
    console.log(`distinctEvents property: seed ${SEED}, ${DISTINCT_RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED})`);
    const rand = seededRandom(SEED);
    for (let run = 0; run < DISTINCT_RUNS; run++) {
      const n = Math.floor(rand() * 60);
      const events: ChangeEvent[] = [];
      for (let i = 0; i < n; i++) {
        const r = rand();
        if (r < 0.15 && events.length > 0) {
          // Delivered again (maybe with other values: the first delivery wins).
          const again = events[Math.floor(rand() * events.length)]!;
          events.push({ ...again, after: { ...again.after, again: i } });
        } else {
          // Few positions, so runs at one position are common; keys from a small set.
          const e = ev(
            rand() < 0.2 ? 'delete' : 'snapshot',
            1 + Math.floor(rand() * (rand() < 0.5 ? 4 : 40)),
            { id: Math.floor(rand() * 8), k: rand() < 0.5 ? 'a' : 'b' },
            { i },
          );
          events.push(e);
        }
      }
      // Sometimes already in strictly increasing order (the fast path), sometimes in any order.
      if (rand() < 0.3) events.sort((a, b) => (a.position < b.position ? -1 : a.position > b.position ? 1 : 0));
      const got = distinctEvents(events);
      const want = reference(events);
      const show = (l: ChangeEvent[]): string[] => l.map((e) => `${e.position}|${keyText(e.key)}|${JSON.stringify(e.after)}`);
      expect(show(got), `run ${run}, seed ${SEED}`).toEqual(show(want));
      expect(got, `run ${run}: a new array, not the input`).not.toBe(events);
    }
  });
});

describe('planTable', () => {
  it('drops events at or below the stored position (replays change nothing)', () => {
    const plan = planTable({
      events: [ev('update', 3, K1, { id: 1, v: 'old' }), ev('update', 5, K1, { id: 1, v: 'same' })],
      keyColumns: ['id'],
      stored: stored([[K1, { position: pos(5), deleted: false }]]),
    });
    expect(plan.writes).toEqual([]);
    expect(plan.fresh).toEqual([]);
    expect(plan.events).toHaveLength(2);
    expect(plan.maxPosition).toBe(pos(5));
  });

  it('merges an update onto a stored live row with only the delivered columns (absent is not null)', () => {
    const plan = planTable({
      events: [ev('update', 6, K1, { id: 1, a: 2 }, { missing: ['b'] }), ev('update', 7, K1, { id: 1, c: null })],
      keyColumns: ['id'],
      stored: stored([[K1, { position: pos(5), deleted: false }]]),
    });
    expect(plan.writes).toEqual([
      { key: K1, keyText: keyText(K1), position: pos(7), deleted: false, deletedAt: null, full: false, values: { id: 1, a: 2, c: null } },
    ]);
    expect(setSignature(plan.writes[0]!)).toBe('a,c,id');
  });

  it('does not let a stale update overwrite a newer one in the same batch', () => {
    const plan = planTable({
      events: [ev('update', 9, K1, { id: 1, a: 9 }), ev('update', 4, K1, { id: 1, a: 4 }), ev('update', 6, K1, { id: 1, b: 'x' })],
      keyColumns: ['id'],
      stored: stored([[K1, { position: pos(5), deleted: false }]]),
    });
    expect(plan.writes[0]!.values).toEqual({ id: 1, a: 9, b: 'x' });
    expect(plan.writes[0]!.position).toBe(pos(9));
    expect(plan.fresh.map((e) => e.position)).toEqual([pos(6), pos(9)]);
  });

  it('treats an insert as a full image: absent columns become NULL, later updates merge into it', () => {
    const plan = planTable({
      events: [ev('insert', 1, K1, { id: 1, a: 1 }), ev('update', 2, K1, { id: 1, b: 'x' }, { missing: ['c'] })],
      keyColumns: ['id'],
      stored: new Map(),
    });
    expect(plan.writes[0]).toMatchObject({ full: true, deleted: false, values: { id: 1, a: 1, b: 'x' } });
    expect(setSignature(plan.writes[0]!)).toBe('*');
  });

  it('writes a full image for an update with nothing live underneath (absent, or deleted)', () => {
    const none = planTable({ events: [ev('update', 2, K1, { id: 1, a: 2 })], keyColumns: ['id'], stored: new Map() });
    expect(none.writes[0]).toMatchObject({ full: true, values: { id: 1, a: 2 } });
    const tomb = planTable({ events: [ev('update', 6, K1, { id: 1, a: 6 })], keyColumns: ['id'], stored: stored([[K1, { position: pos(5), deleted: true }]]) });
    expect(tomb.writes[0]).toMatchObject({ full: true, deleted: false, values: { id: 1, a: 6 } });
    const inBatch = planTable({
      events: [ev('delete', 6, K1, null), ev('update', 7, K1, { id: 1, a: 7 })],
      keyColumns: ['id'],
      stored: stored([[K1, { position: pos(5), deleted: false }]]),
    });
    expect(inBatch.writes[0]).toMatchObject({ full: true, deleted: false, values: { id: 1, a: 7 } });
  });

  it('makes a delete a tombstone that keeps the values it had', () => {
    const live = planTable({
      events: [ev('update', 6, K1, { id: 1, a: 6 }), ev('delete', 7, K1, null)],
      keyColumns: ['id'],
      stored: stored([[K1, { position: pos(5), deleted: false }]]),
    });
    expect(live.writes[0]).toEqual({
      key: K1,
      keyText: keyText(K1),
      position: pos(7),
      deleted: true,
      deletedAt: '2026-01-01T00:00:07.000Z',
      full: false,
      values: { id: 1, a: 6 },
    });
    const unknown = planTable({ events: [ev('delete', 3, K1, null)], keyColumns: ['id'], stored: new Map() });
    expect(unknown.writes[0]).toMatchObject({ deleted: true, full: false, values: {} });
    const revived = planTable({ events: [ev('delete', 3, K1, null), ev('insert', 4, K1, { id: 1, a: 4 })], keyColumns: ['id'], stored: new Map() });
    expect(revived.writes[0]).toMatchObject({ deleted: false, deletedAt: null, full: true, values: { id: 1, a: 4 } });
  });

  describe('primary-key change with undelivered columns', () => {
    // k1 → k2 at position 10; column `big` was not delivered (unchanged TOAST value).
    const del = ev('delete', 10, K1, null, { before: { id: 1 } });
    const ins = ev('insert', 10, K2, { id: 2, a: 5 }, { before: { id: 1 }, missing: ['big'] });

    it('names the old keys whose stored rows it needs', () => {
      expect(oldKeysNeeded([del, ins, ev('insert', 11, { id: 3 }, { id: 3 })], ['id'])).toEqual([K1]);
    });

    it('takes the value from the old key when its delete is in the batch (stored row + earlier events of the batch)', () => {
      const rows = new Map<string, StoredRow>([[keyText(K1), { position: pos(5), deleted: false, values: { a: '1', big: 'stored' } }]]);
      const plan = planTable({ events: [ins, del], keyColumns: ['id'], stored: stored([[K1, { position: pos(5), deleted: false }]]), storedRows: rows });
      expect(plan.writes.find((w) => w.keyText === keyText(K2))!.values).toEqual({ id: 2, a: 5, big: 'stored' });
      expect(plan.held).toEqual([]);
      expect(plan.donors).toEqual([]);
      const updated = planTable({
        events: [ins, del, ev('update', 8, K1, { id: 1, big: 'newer' })],
        keyColumns: ['id'],
        stored: stored([[K1, { position: pos(5), deleted: false }]]),
        storedRows: rows,
      });
      expect(updated.writes.find((w) => w.keyText === keyText(K2))!.values.big).toBe('newer');
    });

    it('takes the value from a tombstone of the old key at exactly that position', () => {
      const rows = new Map<string, StoredRow>([[keyText(K1), { position: pos(10), deleted: true, values: { a: '1', big: 'kept' } }]]);
      const plan = planTable({ events: [ins], keyColumns: ['id'], stored: stored([[K1, { position: pos(10), deleted: true }]]), storedRows: rows });
      expect(plan.writes[0]!.values).toEqual({ id: 2, a: 5, big: 'kept' });
    });

    it('holds the insert (and every later event of its key) when the old row at that position is not known: never a NULL', () => {
      const later = new Map<string, StoredRow>([[keyText(K1), { position: pos(12), deleted: false, values: { a: '1', big: 'later' } }]]);
      const upd = ev('update', 11, K2, { id: 2, a: 6 });
      const plan = planTable({ events: [ins, upd], keyColumns: ['id'], stored: stored([[K1, { position: pos(12), deleted: false }]]), storedRows: later });
      expect(plan.writes).toEqual([]);
      expect(plan.held).toEqual([ins, upd]);
      const notYet = planTable({
        events: [ins],
        keyColumns: ['id'],
        stored: stored([[K1, { position: pos(5), deleted: false }]]),
        storedRows: new Map([[keyText(K1), { position: pos(5), deleted: false, values: { big: 'maybe stale' } }]]),
      });
      expect(notYet.held).toEqual([ins]);
      expect(notYet.writes).toEqual([]);
    });

    it('only knows what the old key delivered when it had no full row underneath', () => {
      const plan = planTable({ events: [ev('update', 8, K1, { id: 1, a: 8 }), del, ins], keyColumns: ['id'], stored: new Map() });
      expect(plan.held).toEqual([ins]);
    });

    it('a delete that hands columns over keeps the old values for an insert not planned yet, and that insert takes them later', () => {
      const marked = { ...del, handover: ['big'] };
      const rows = new Map<string, StoredRow>([[keyText(K1), { position: pos(5), deleted: false, values: { a: '1', big: 'stored' } }]]);
      const first = planTable({
        events: [ev('update', 8, K1, { id: 1, big: 'newer' }), marked],
        keyColumns: ['id'],
        stored: stored([[K1, { position: pos(5), deleted: false }]]),
        storedRows: rows,
      });
      expect(first.donors).toEqual([{ key: K1, position: pos(10), values: { big: 'newer' } }]);
      const donors = new Map(first.donors.map((d) => [handoverId(d.key, d.position), d.values]));
      const second = planTable({ events: [ins], keyColumns: ['id'], stored: new Map(), donors });
      expect(second.writes[0]!.values).toEqual({ id: 2, a: 5, big: 'newer' });
      expect(second.donors).toEqual([]);
    });

    it("a held insert is applied when the old key's delete comes (held events planned again with the batch)", () => {
      const marked = { ...del, handover: ['big'] };
      const upd = ev('update', 11, K2, { id: 2, a: 6 });
      const rows = new Map<string, StoredRow>([[keyText(K1), { position: pos(5), deleted: false, values: { a: '1', big: 'stored' } }]]);
      const plan = planTable({
        events: [marked],
        held: [ins, upd],
        keyColumns: ['id'],
        stored: stored([[K1, { position: pos(5), deleted: false }]]),
        storedRows: rows,
      });
      expect(plan.held).toEqual([]);
      expect(plan.donors).toEqual([]);
      expect(plan.writes.find((w) => w.keyText === keyText(K2))).toMatchObject({ position: pos(11), full: true, values: { id: 2, a: 6, big: 'stored' } });
    });
    describe("a held chain its key's stored row has overtaken (a later full image took the append path)", () => {
      // K2 → K3 at 10 (K3's insert lacks `big`, held), then K3 → K4 at 20 (K3's delete hands `big`
      // over, held behind it), then a full image of K3 at 30 is stored. The seed of the CI run of
      // 2026-12-01 (CDC_PROPERTY_SEED=301703647) left K4's insert held for ever.
      const K3 = { id: 3 };
      const K4 = { id: 4 };
      const insK3 = ev('insert', 10, K3, { id: 3, a: 1 }, { before: { id: 2 }, missing: ['big'] });
      const delK3 = ev('delete', 20, K3, null, { before: { id: 3 }, handover: ['big'] });
      const delK2 = ev('delete', 10, K2, null, { before: { id: 2 }, handover: ['big'] });
      const overtaken = stored([
        [K3, { position: pos(30), deleted: false }],
        [K2, { position: pos(5), deleted: false }],
      ]);
      const k2Row = new Map<string, StoredRow>([[keyText(K2), { position: pos(5), deleted: false, values: { a: '0', big: 'from K2' } }]]);

      it("writes nothing of the chain but keeps the donor its delete owes, once the chain's insert is complete", () => {
        const plan = planTable({ events: [delK2], held: [insK3, delK3], keyColumns: ['id'], stored: overtaken, storedRows: k2Row });
        expect(plan.writes.map((w) => w.keyText)).toEqual([keyText(K2)]);
        expect(plan.held).toEqual([]);
        expect(plan.donors.map((d) => [keyText(d.key), d.position, d.values])).toEqual([[keyText(K3), pos(20), { big: 'from K2' }]]);
        // K4's insert then takes it.
        const insK4 = ev('insert', 20, K4, { id: 4, a: 1 }, { before: { id: 3 }, missing: ['big'] });
        const next = planTable({
          events: [insK4],
          keyColumns: ['id'],
          stored: overtaken,
          donors: new Map(plan.donors.map((d) => [handoverId(d.key, d.position), d.values])),
        });
        expect(next.writes).toEqual([expect.objectContaining({ keyText: keyText(K4), values: { id: 4, a: 1, big: 'from K2' } })]);
        expect(next.held).toEqual([]);
        expect(next.donors).toEqual([]);
      });

      it('keeps the chain held while its insert cannot be completed, and drops a chain that owes nothing', () => {
        const waiting = planTable({ events: [ev('update', 31, K3, { id: 3, a: 2 })], held: [insK3, delK3], keyColumns: ['id'], stored: overtaken });
        expect(waiting.held).toEqual([insK3, delK3]);
        expect(waiting.writes).toEqual([expect.objectContaining({ keyText: keyText(K3), position: pos(31) })]);
        expect(waiting.donors).toEqual([]);
        const owesNothing = planTable({ events: [], held: [insK3, ev('update', 20, K3, { id: 3, a: 9 })], keyColumns: ['id'], stored: overtaken });
        expect(owesNothing.held).toEqual([]);
        expect(owesNothing.writes).toEqual([]);
      });

      it('drops a chain held below a truncate: the rows are gone and nothing is owed', () => {
        // K3's insert (10) and its handing delete (20) wait for `big`, then the table is truncated at
        // 25 (CDC_PROPERTY_SEED=1735425301 of the warehouse-apply property test left them held for ever).
        const truncated = planTable({ events: [ev('truncate', 25, {}, null)], held: [insK3, delK3], keyColumns: ['id'], stored: overtaken });
        expect(truncated.held).toEqual([]);
        expect(truncated.donors).toEqual([]);
        // A truncate stored earlier, with no new one in the batch: the same.
        const storedFloor = planTable({ events: [], held: [insK3, delK3], keyColumns: ['id'], stored: overtaken, truncatedAt: pos(25) });
        expect(storedFloor.held).toEqual([]);
      });
    });
  });

  describe('truncate', () => {
    const tr = ev('truncate', 10, {}, null);
    it('drops every row event at or below the truncate position and starts keys below it from nothing', () => {
      const plan = planTable({
        events: [ev('insert', 9, K1, { id: 1, a: 9 }), tr, ev('update', 11, K2, { id: 2, a: 11 })],
        keyColumns: ['id'],
        stored: stored([[K2, { position: pos(5), deleted: false }]]),
      });
      expect(plan.truncate).toBe(tr);
      expect(plan.writes).toEqual([expect.objectContaining({ keyText: keyText(K2), full: true, values: { id: 2, a: 11 } })]);
      const late = planTable({ events: [ev('insert', 9, K1, { id: 1, a: 9 })], keyColumns: ['id'], stored: new Map(), truncatedAt: pos(10) });
      expect(late.writes).toEqual([]);
      expect(late.truncate).toBeNull();
      const again = planTable({ events: [tr], keyColumns: ['id'], stored: new Map(), truncatedAt: pos(10) });
      expect(again.truncate).toBeNull();
      expect(again.truncates).toEqual([tr]);
    });
  });
});

describe('sequence numbers and failures', () => {
  it('compares sequence numbers numerically', () => {
    expect(compareSequenceNumbers('9', '10')).toBeLessThan(0);
    expect(
      compareSequenceNumbers('49590338271490256608559692538361571095921575989136588898', '49590338271490256608559692540925702759324208523137515618'),
    ).toBeLessThan(0);
    expect(compareSequenceNumbers('5', '5')).toBe(0);
  });

  it('fails every record at or after the first failed one', () => {
    expect(failuresFrom(['8', '9', '10', '11'], new Set(['11', '10']))).toEqual(['10', '11']);
    expect(failuresFrom(['8', '9', '10'], new Set())).toEqual([]);
  });
});

describe('toParam', () => {
  it('turns JSON values into text parameters', () => {
    expect([toParam(null), toParam(undefined), toParam('a'), toParam(1.5), toParam(false), toParam({ x: [1] }), toParam([1, 2])]).toEqual([
      null,
      null,
      'a',
      '1.5',
      'false',
      '{"x":[1]}',
      '[1,2]',
    ]);
  });
});
