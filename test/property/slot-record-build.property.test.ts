/**
 * `buildSlotRecord` checks only the record-level rules (its inputs are typed) and no longer runs
 * the full `validateSlotRecord` (docs/performance-log.md, "3. Capture"). Property: for random changes —
 * every op, duplicate and empty names, a column both delivered and unchanged, dotted table names,
 * missing images; values are JSON values, as the parser and the snapshot reader produce — `buildSlotRecord` refuses exactly the changes `validateSlotRecord` refuses (with
 * the same field named), and otherwise returns exactly what `validateSlotRecord` returns for the
 * same record as JSON, so the reader (the normalizer) sees the same records as before.
 *
 * Count and seed: `CDC_SLOT_RECORD_PROPERTY_RUNS` (default 5000) and `CDC_PROPERTY_SEED`.
 */
import { describe, expect, it } from 'vitest';
import { InvalidRecordError } from '../../lambda/core/shared/errors.ts';
import { buildSlotRecord, SLOT_OPS, validateSlotRecord, type SlotColumn, type SlotOp } from '../../lambda/core/capture/slot-record.ts';
import { seededRandom } from '../../local/seeded-random.ts';

const RUNS = Number(process.env.CDC_SLOT_RECORD_PROPERTY_RUNS ?? 5000);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);

function outcome(f: () => unknown): { ok: unknown } | { field: string } {
  try {
    return { ok: f() };
  } catch (e) {
    if (!(e instanceof InvalidRecordError)) throw e;
    return { field: e.message.split(':')[0]! };
  }
}

describe('buildSlotRecord against validateSlotRecord', () => {
  it(`agrees on ${RUNS} random changes`, () => {
    console.log(`slot record build property: ${RUNS} runs, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_SLOT_RECORD_PROPERTY_RUNS=${RUNS})`);
    const rand = seededRandom(SEED);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rand() * xs.length)]!;
    const names = ['id', 'v', 'big', 'note', 'Odd Name', ''];
    const types = ['integer', 'text', 'numeric(12,2)', 'character varying(20)', ''];
    const values = [1, 'a', null, true, '1.10', 9007199254740993n.toString(), ['x'], { k: 1 }];
    const good = names.slice(0, 5);
    // Mostly well-formed tuples (distinct names, non-empty types); now and then a duplicate, an empty name or type.
    const tuple = (): SlotColumn[] => {
      const cols = good.filter(() => rand() < 0.6).map((name) => ({ name, type: pick(types.slice(0, 4)), value: pick(values) as SlotColumn['value'] }));
      if (rand() < 0.1) cols.push({ name: pick(names), type: rand() < 0.5 ? '' : 'text', value: null });
      return cols;
    };
    const image = (wanted: boolean): SlotColumn[] | null => ((rand() < 0.9 ? wanted : !wanted) ? tuple() : null);
    let built = 0;
    let refused = 0;
    for (let i = 0; i < RUNS; i++) {
      const op: SlotOp = pick(SLOT_OPS);
      const table = rand() < 0.85 ? pick(['public.t', 's.Odd Name']) : pick(['public.a.b', 'nodot']);
      const key = rand() < 0.05 ? [] : rand() < 0.05 ? ['id', 'id'] : ['id'];
      const columns = image(op === 'insert' || op === 'update' || op === 'snapshot');
      const oldKey = image(op === 'delete' || (op === 'update' && rand() < 0.5));
      const unchanged =
        op === 'update' && rand() < 0.5 ? good.filter((n) => !columns?.some((c) => c.name === n)).slice(0, 1) : rand() < 0.05 ? [pick(names)] : [];
      const change = { table, op, columns, oldKey, unchanged };
      const tx = { source: 'src', xid: String(700 + i), commitLsn: `0/${(0x1000 + i).toString(16).toUpperCase()}`, commitTs: '2026-11-29T12:00:00.123456Z' };
      const a = outcome(() => buildSlotRecord(tx, i % 5, change, key));
      const record = { format: 'cdc-slot/1', ...tx, index: i % 5, table, op, key: op === 'truncate' ? [] : [...key], columns, oldKey, unchanged };
      const b = outcome(() => validateSlotRecord(JSON.parse(JSON.stringify(record))));
      if ('field' in b) {
        refused++;
        expect(a, `run ${i} (seed ${SEED}): ${JSON.stringify(record)}`).toEqual(b);
      } else {
        built++;
        expect('ok' in a, `run ${i} (seed ${SEED}): built refused ${JSON.stringify(a)} for ${JSON.stringify(record)}`).toBe(true);
        expect(JSON.parse(JSON.stringify((a as { ok: unknown }).ok)), `run ${i} (seed ${SEED})`).toEqual(b.ok);
      }
    }
    console.log(`  ${built} built, ${refused} refused by both`);
    expect(built).toBeGreaterThan(RUNS / 4);
    expect(refused).toBeGreaterThan(RUNS / 10);
  });
});
