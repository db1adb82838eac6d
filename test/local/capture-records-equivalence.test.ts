/**
 * The slot capture's raw records (local/capture-records.ts) against the way they were built before
 * docs/performance-log.md §37 (test/helpers/capture-records-reference.ts): random test_decoding transactions, read as the
 * stream keeps them (local/stream-rows.ts: the LSN as two numbers) and as plain rows, through the
 * capture's whole batch path (parse, partition roots, column rules, slot records, raw records),
 * give the same transactions and the same raw records, byte for byte and in the same order, batch
 * after batch. Masks, excludes, unchanged TOAST values, deletes with a key or a whole row, truncates
 * (of roots, of some leaves), partitioned roots, multi-table transactions, odd names, one-column,
 * two-column and `__proto__` keys, key values long enough to be hashed. Seed and count printed.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { groupTransactions, type SlotRow } from '../../lambda/core/capture/logical-text.ts';
import type { DmsPrevious } from '../../lambda/core/capture/dms-record.ts';
import { partitionTree } from '../../lambda/core/tables/partitions.ts';
import { TableConfigIndex } from '../../lambda/core/tables/table-config.ts';
import type { CatalogType } from '../../local/catalog.ts';
import { leavesOf, rawRecordsOf, toRoots, transactionsToRecords } from '../../local/capture-records.ts';
import { formatLsn, StreamRow } from '../../local/stream-rows.ts';
import { referenceRawRecordsOf } from '../helpers/capture-records-reference.ts';
import { rng } from '../helpers/rng.ts';
import { col, id, literal, pick, quoteIdent, type Column, type Rand, type Table } from '../helpers/test-decoding-workload.ts';

const ITEMS: Table = {
  schema: 'public',
  name: 'items',
  columns: [
    col('id', 'bigint'),
    col('note', 'text'),
    col('secret', 'text'),
    col('amount', 'numeric', 'numeric(12,2)'),
    col('ok', 'boolean'),
    col('big', 'text'),
  ],
  key: ['id'],
};
const ODD: Table = {
  schema: 'public',
  name: 'Odd Name',
  columns: [col('k"x', 'text'), col('a b', 'integer'), col('ü', 'character varying', 'character varying(20)')],
  key: ['k"x'],
};
const MULTI: Table = { schema: 's2', name: 'multi', columns: [col('a', 'integer'), col('b', 'text'), col('v', 'double precision')], key: ['a', 'b'] };
const PROTO: Table = { schema: 'public', name: 'proto', columns: [col('__proto__', 'integer'), col('v', 'text')], key: ['__proto__'] };
const PARTED: Table = { schema: 'public', name: 'parted', columns: [col('id', 'integer'), col('v', 'text')], key: ['id'] };
const LEAVES: Table[] = [1, 2].map((i) => ({ ...PARTED, name: `parted_${i}` }));
const OTHER: Table = { schema: 'public', name: 'other', columns: [col('id', 'integer')], key: ['id'] };
const CAPTURED = [ITEMS, ODD, MULTI, PROTO, PARTED];
const WRITTEN = [ITEMS, ODD, MULTI, PROTO, ...LEAVES, OTHER];

function tuple(r: Rand, t: Table, cols: readonly Column[], toast: boolean): string {
  return cols
    .map((c) => {
      const isKey = t.key.includes(c.name);
      const value = toast && !isKey && c.type === 'text' && r() < 0.4 ? 'unchanged-toast-datum' : literal(r, c, isKey);
      return ` ${quoteIdent(c.name)}[${c.type}]:${value}`;
    })
    .join('');
}

function changeLine(r: Rand): string {
  const t = pick(r, WRITTEN);
  const head = `table ${quoteIdent(t.schema)}.${quoteIdent(t.name)}: `;
  const keyCols = t.columns.filter((c) => t.key.includes(c.name));
  const roll = r();
  if (roll < 0.08) {
    const tables = [t, ...(r() < 0.5 ? [pick(r, WRITTEN)] : [])].filter((x, i, a) => a.indexOf(x) === i);
    return `table ${tables.map((x) => `${quoteIdent(x.schema)}.${quoteIdent(x.name)}`).join(', ')}: TRUNCATE: ${pick(r, ['(no-flags)', 'restart_seqs', 'cascade'])}`;
  }
  if (roll < 0.45) return `${head}INSERT:${tuple(r, t, t.columns, false)}`;
  if (roll < 0.75) {
    const old = r() < 0.25 ? ` old-key:${tuple(r, t, r() < 0.5 ? keyCols : t.columns, false)} new-tuple:` : '';
    return `${head}UPDATE:${old}${tuple(r, t, t.columns, old === '')}`;
  }
  // A delete carries the key, or the whole row (REPLICA IDENTITY FULL).
  return `${head}DELETE:${tuple(r, t, r() < 0.7 ? keyCols : t.columns, false)}`;
}

/** Random transactions as test_decoding prints them, each line with its LSN. */
function lines(r: Rand, transactions: number, firstXid: number): Array<{ lo: number; text: string }> {
  const out: Array<{ lo: number; text: string }> = [];
  let lo = 0x1000000 + Math.floor(r() * 0xfffff);
  for (let x = 0; x < transactions; x++) {
    const xid = firstXid + x;
    out.push({ lo: (lo += 40), text: `BEGIN ${xid}` });
    const n = 1 + Math.floor(r() * 8);
    for (let i = 0; i < n; i++) out.push({ lo: (lo += 1 + Math.floor(r() * 300)), text: changeLine(r) });
    out.push({ lo: (lo += 40), text: `COMMIT ${xid} (at 2026-12-06 14:0${x % 10}:00.12345${x % 10}+00)` });
  }
  return out;
}

/** Taken before the test fixes the clock (the records carry the time they are written). */
const SEED = Number(process.env.SEED ?? Date.now() % 1e9);

describe('the raw records of the slot capture', () => {
  beforeEach(() => {
    vi.useFakeTimers({ toFake: ['Date'] });
    vi.setSystemTime(new Date('2026-12-06T15:00:00.123Z'));
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  it('are the same, byte for byte and in order, as the reference builds them, batch after batch (randomized)', () => {
    const seed = SEED;
    const runs = Number(process.env.RUNS ?? 60);
    const r = rng(seed);
    const tables = new TableConfigIndex([
      { table: id(ITEMS), deleteMode: 'soft', mask: ['note'], exclude: ['secret'] },
      { table: id(ODD), deleteMode: 'soft', mask: [], exclude: [] },
      { table: id(MULTI), deleteMode: 'soft', mask: ['v'], exclude: [] },
      { table: id(PROTO), deleteMode: 'soft', mask: [], exclude: [] },
      { table: id(PARTED), deleteMode: 'soft', mask: [], exclude: [] },
    ]);
    const keys = new Map(CAPTURED.map((t) => [id(t), t.key]));
    const types = new Map<string, Map<string, CatalogType>>(
      CAPTURED.map((t) => [id(t), new Map(t.columns.map((c) => [c.name, { base: c.base, full: c.full }]))]),
    );
    const tree = partitionTree(
      LEAVES.map((l) => ({ partition: id(l), root: id(PARTED), leaf: true })),
      CAPTURED.map(id),
    );
    let records = 0;
    for (let run = 0; run < runs; run++) {
      const at = `seed ${seed}, run ${run}`;
      const printed = lines(r, 2 + Math.floor(r() * 20), 700 + run * 100);
      const hi = Math.floor(r() * 3);
      const plain: SlotRow[] = [];
      const streamed: StreamRow[] = [];
      let xid: string | null = null;
      for (const l of printed) {
        if (l.text.startsWith('BEGIN')) xid = l.text.slice(6);
        plain.push({ lsn: formatLsn(hi, l.lo), xid, data: l.text });
        const row = StreamRow.of(hi, l.lo, l.text);
        row.xid = xid;
        streamed.push(row);
      }
      const decoded = groupTransactions(streamed).transactions;
      expect(decoded, at).toEqual(groupTransactions(plain).transactions);
      // The batch path of local/capture.ts, both ways from the same slot records, over random batch cuts.
      const state = {
        mine: { shapes: new Map<string, string>(), last: { dms: null as DmsPrevious | null } },
        ref: { shapes: new Map<string, string>(), last: { dms: null as DmsPrevious | null } },
      };
      for (let from = 0; from < decoded.length;) {
        const to = Math.min(decoded.length, from + 1 + Math.floor(r() * 6));
        const batch = decoded.slice(from, to);
        from = to;
        const rooted = toRoots(batch, tree, types, () => undefined);
        const built = transactionsToRecords('bench', rooted, tables, keys, types, () => undefined, new Set(CAPTURED.map(id)));
        const leaves = leavesOf(batch, rooted);
        const ctx = (s: typeof state.mine) => ({ types, leaves, shapes: s.shapes, last: s.last, tables, taskId: 'cdc-local-bench' });
        const mine = rawRecordsOf(built, ctx(state.mine));
        const ref = referenceRawRecordsOf(built, ctx(state.ref));
        expect(mine, at).toEqual(ref);
        expect(state.mine.last, at).toEqual(state.ref.last);
        expect([...state.mine.shapes], at).toEqual([...state.ref.shapes]);
        records += mine.length;
      }
    }
    console.log(`capture records equivalence: seed ${seed}, ${runs} runs, ${records} raw records`);
    expect(records).toBeGreaterThan(runs);
  });
});
