/**
 * `groupByTable` (lambda/core/sink/sink-batch.ts) against its definition: the records decoded and
 * grouped by (source, table) in order of first appearance, each group in record order, a record
 * that does not decode dead-lettered. Random batches of runs of one table and interleaved tables,
 * with undecodable records among them (seed and count printed; `SEED=<n>` repeats a run).
 */
import { describe, expect, it } from 'vitest';
import { groupByTable } from '../../../lambda/core/sink/sink-batch.ts';
import { rng } from '../../helpers/rng.ts';

const TABLES: Array<[string, string]> = [
  ['src', 'public.a'],
  ['src', 'public.b'],
  ['other', 'public.a'],
  ['src', 'sales.a'],
];

function eventText(source: string, table: string, n: number): string {
  return JSON.stringify({
    v: 1,
    source,
    table,
    op: 'insert',
    key: { id: n },
    after: { id: n },
    before: null,
    missing: [],
    position: String(n).padStart(24, '0'),
    commitTs: '2026-12-06T10:00:00.000Z',
    txId: '1',
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  });
}

describe('groupByTable', () => {
  it('groups as its definition does: by (source, table), in order of first appearance, undecodable records dead-lettered', async () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1e9);
    const r = rng(seed);
    const runs = 400;
    for (let run = 0; run < runs; run++) {
      const records: Array<{ sequenceNumber: string; origin: string; text: string }> = [];
      const want = new Map<string, string[]>();
      const dead: string[] = [];
      let t = TABLES[Math.floor(r() * TABLES.length)]!;
      const n = Math.floor(r() * 60);
      for (let i = 0; i < n; i++) {
        if (r() < 0.3) t = TABLES[Math.floor(r() * TABLES.length)]!;
        const seq = String(1000 + i);
        if (r() < 0.1) {
          records.push({ sequenceNumber: seq, origin: `s/0/${seq}`, text: r() < 0.5 ? '{not json' : eventText('BAD ID', t[1], i) });
          dead.push(seq);
          continue;
        }
        records.push({ sequenceNumber: seq, origin: `s/0/${seq}`, text: eventText(t[0], t[1], i) });
        const k = `${t[0]}\u0000${t[1]}`;
        want.set(k, [...(want.get(k) ?? []), seq]);
      }
      const deadLettered: string[] = [];
      const groups = await groupByTable(records, {
        payloads: undefined,
        sinkId: 'sink',
        deadLetter: async (record) => {
          deadLettered.push(record.sequenceNumber);
        },
      });
      const got = new Map([...groups].map(([k, items]) => [k, items.map((i) => i.record.sequenceNumber)]));
      const at = `seed ${seed}, run ${run}`;
      expect([...got.entries()], at).toEqual([...want.entries()]);
      for (const [k, items] of groups) for (const i of items) expect(`${i.event.source}\u0000${i.event.table}`, at).toBe(k);
      expect(deadLettered, at).toEqual(dead);
    }
    console.log(`groupByTable: seed ${seed}, ${runs} batches`);
  });
});
