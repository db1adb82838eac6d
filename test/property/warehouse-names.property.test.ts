/**
 * Property: the warehouse's names are injective (docs/architecture.md §5.4, "Names"). Over random
 * sets of sources, schemas and tables — long names near the 63-byte limit, names ending in
 * `_mirror`, `_delta`, `_changelog`, …, names made from another table's platform object, source
 * and schema pairs cut from one string at every `_` — no two (source, schema, table, object)
 * get the same (warehouse schema, name), the rebuild's shadow, retired and diff objects
 * included, and no two tables get the same search index names. Every name is at most 63 bytes.
 * `CDC_NAMES_RUNS` (default 400) runs, seed `CDC_PROPERTY_SEED`; both printed.
 */
import { describe, expect, it } from 'vitest';
import { seededRandom } from '../../local/seeded-random.ts';
import { warehouseTable, type WarehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { diffTableName, retiredTable, shadowTable } from '../../lambda/core/rebuild/rebuild.ts';
import { LEGACY_SUFFIXES, MAX_IDENTIFIER_BYTES, PLATFORM_KINDS, tableNameRefusal } from '../../lambda/core/warehouse/warehouse-names.ts';
import { searchNames } from '../../lambda/core/search/search-plan.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const RUNS = Number(process.env.CDC_NAMES_RUNS ?? 400);
const SUFFIXES = LEGACY_SUFFIXES.map(([, s]) => s);
const PARTS = ['changelog', 'mirror', 'deletedKeys', 'truncations', 'handover', 'delta', 'view'] as const;

function generator(random: () => number) {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(random() * xs.length)]!;
  const length = (): number => (random() < 0.4 ? 50 + Math.floor(random() * 14) : 1 + Math.floor(random() * 12));
  const word = (first: string, rest: string, n: number): string => {
    let s = pick([...first]);
    while (s.length < n) s += random() < 0.25 ? '_' : pick([...rest]);
    return s.slice(0, n);
  };
  const source = (): string => word('ab', 'ab0_', Math.min(length(), 63));
  const plain = (): string => {
    let s = word('aAbB_', 'aAbB0_$', length());
    if (random() < 0.4) s = `${s.slice(0, 63 - 13)}${pick([...SUFFIXES, `_${pick(Object.values(PLATFORM_KINDS))}`])}`;
    if (random() < 0.15) s = `${pick(['cdc_', 'rb_', 'old_', 'x_', ''])}${s}`;
    return s.slice(0, 63).replace(/^[0-9$]/, 'a');
  };
  return { pick, source, plain };
}

/** Every object of a table: live, shadow, retired and diff, with who owns it. */
function objects(t: WarehouseTable): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (const [set, w] of [
    ['live', t],
    ['shadow', shadowTable(t)],
    ['retired', retiredTable(t)],
  ] as const)
    for (const p of PARTS) out.push([`${w.schema}.${w[p]}`, `${t.source}|${t.tableId}|${set}|${p}`]);
  out.push([`${t.schema}.${diffTableName(t)}`, `${t.source}|${t.tableId}|diff`]);
  return out;
}

describe('warehouse names', () => {
  it(`are injective over random sources, schemas and tables (seed ${SEED}, ${RUNS} runs)`, () => {
    console.log(`warehouse names property: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED} CDC_NAMES_RUNS=${RUNS})`);
    const random = seededRandom(SEED);
    const g = generator(random);
    let checked = 0;
    let shortened = 0;
    for (let run = 0; run < RUNS; run++) {
      const ctx = `run ${run} (seed ${SEED})`;
      const ids = new Set<string>();
      // Source and schema pairs cut from one string at every `_` (the old layout joined them all).
      const joined = `${g.source()}_${g.plain()}`.slice(0, 63);
      for (let i = joined.indexOf('_'); i > 0; i = joined.indexOf('_', i + 1)) {
        const [src, sch] = [joined.slice(0, i), joined.slice(i + 1)];
        if (/^[a-z][a-z0-9_]{0,62}$/.test(src) && /^[A-Za-z_][A-Za-z0-9_$]{0,62}$/.test(sch)) ids.add(`${src}|${sch}.${g.plain()}`);
      }
      const sources = [g.source(), g.source()];
      const schemas = [g.plain(), g.plain()];
      const tables: string[] = [];
      for (let k = 0; k < 8; k++) {
        const t = g.plain();
        tables.push(t);
        // Another table named like this one's objects: with each suffix, and as its fitted platform name without the prefix.
        tables.push(`${t}${g.pick(SUFFIXES)}`.slice(0, 63));
        const fitted = warehouseTable('s', `p.${/^[A-Za-z_]/.test(t) ? t : `a${t}`}`.slice(0, 65)).mirror;
        tables.push(fitted.slice('_cdc_mirror_'.length) || 'x');
      }
      for (const s of sources) for (const c of schemas) for (const t of tables) ids.add(`${s}|${c}.${t}`);
      const owner = new Map<string, string>();
      const search = new Map<string, string>();
      for (const id of ids) {
        const [s, tableId] = id.split('|') as [string, string];
        const table = tableId.slice(tableId.indexOf('.') + 1);
        if (!/^[A-Za-z_][A-Za-z0-9_$]{0,62}$/.test(table)) continue;
        if (tableNameRefusal(tableId) !== null) {
          expect(() => warehouseTable(s, tableId), `${ctx}: ${id}`).toThrow(/reserved for the platform/);
          continue;
        }
        const t = warehouseTable(s, tableId);
        for (const [name, who] of objects(t)) {
          const [schema, rel] = [name.slice(0, name.indexOf('.')), name.slice(name.indexOf('.') + 1)];
          for (const n of [schema, rel])
            if (Buffer.byteLength(n) > MAX_IDENTIFIER_BYTES) expect.fail(`${ctx}: ${n} is longer than ${MAX_IDENTIFIER_BYTES} bytes`);
          if (Buffer.byteLength(rel) === MAX_IDENTIFIER_BYTES) shortened++;
          const before = owner.get(name);
          if (before !== undefined && before !== who) expect.fail(`${ctx}: ${name} is both ${before} and ${who}`);
          owner.set(name, who);
          checked++;
        }
        if (/^[a-z_][a-z0-9_]*$/.test(s) && /^[a-z_][a-z0-9_]*\.[a-z_][a-z0-9_]*$/.test(tableId)) {
          const alias = searchNames('cdc', s, tableId).alias;
          const before = search.get(alias);
          if (before !== undefined && before !== id) expect.fail(`${ctx}: search alias ${alias} is both ${before} and ${id}`);
          search.set(alias, id);
        }
      }
    }
    console.log(`warehouse names property: ${checked} names checked, ${shortened} of them shortened`);
    expect(shortened).toBeGreaterThan(0);
  });
});
