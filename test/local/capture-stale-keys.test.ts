/**
 * The captured tables whose changes lack a column of the key held for them (local/capture-poison.ts,
 * `staleKeys` and `carriesKey`): the same tables, in the same order, as the check of every change
 * one by one (the key and whether the table is captured looked up per change), over random
 * transactions of captured, uncaptured and keyless tables whose changes carry the key, part of it
 * or none, truncates among them (seed and count printed).
 */
import { describe, expect, it } from 'vitest';
import type { DecodedTransaction, TestDecodingChange } from '../../lambda/core/capture/logical-text.ts';
import { TableConfigIndex } from '../../lambda/core/tables/table-config.ts';
import { staleKeys } from '../../local/capture-poison.ts';
import { rng } from '../helpers/rng.ts';

describe('the tables whose key a batch shows stale', () => {
  it('are those a change-by-change check finds (randomized)', () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1e9);
    const runs = Number(process.env.RUNS ?? 3000);
    console.log(`stale keys: seed ${seed}, ${runs} batches`);
    const r = rng(seed);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
    const TABLES = ['public.a', 'public.b', 'public.c', 'public.d'];
    const NAMES = ['id', 'code', 'v', 'w'];
    let stale = 0;
    for (let run = 0; run < runs; run++) {
      const captured = TABLES.filter(() => r() < 0.7);
      const tables = new TableConfigIndex(captured.map((table) => ({ table, deleteMode: 'soft' as const, mask: [], exclude: [] })));
      const keys = new Map(TABLES.filter(() => r() < 0.8).map((t) => [t, r() < 0.7 ? ['id'] : ['id', 'code']]));
      const tuple = () => NAMES.filter(() => r() < 0.8).map((name) => ({ name, type: 'text', value: 'x' }));
      const change = (): TestDecodingChange => {
        const table = pick(TABLES);
        const op = pick(['insert', 'update', 'delete', 'truncate'] as const);
        const [schema, name] = table.split('.') as [string, string];
        const t = r() < 0.1 ? null : tuple();
        return { schema, name, table, op, columns: op === 'delete' ? null : t, oldKey: op === 'delete' ? t : null, unchanged: [] };
      };
      // Runs of one table's changes, as a batch has them.
      const transactions: DecodedTransaction[] = Array.from({ length: 1 + Math.floor(r() * 4) }, (_, x) => {
        const changes: TestDecodingChange[] = [];
        while (changes.length < 1 + Math.floor(r() * 8)) {
          const c = change();
          for (let n = Math.floor(r() * 3); n >= 0; n--) changes.push({ ...change(), table: c.table });
        }
        return { xid: String(x), commitLsn: '0/1', commitTs: '2026-12-06T00:00:00.000000Z', changes };
      });
      const want = new Set<string>();
      for (const tx of transactions) {
        for (const c of tx.changes) {
          const key = keys.get(c.table);
          const tupleOf = c.op === 'delete' ? c.oldKey : c.columns;
          const carries = c.op === 'truncate' || (tupleOf !== null && key !== undefined && key.every((k) => tupleOf.some((x) => x.name === k)));
          if (key && tables.has(c.table) && !carries) want.add(c.table);
        }
      }
      const got = staleKeys({ keys, tables }, transactions);
      expect([...got], `seed ${seed}, run ${run}`).toEqual([...want]);
      stale += got.size;
    }
    expect(stale).toBeGreaterThan(runs / 4);
  });
});
