/**
 * A table as the cluster has it (`existingTable`, docs/warehouse-apply.md, "Redshift: schema changes"):
 * the catalog rows read back into the dialect's column types, so `evolveSql` plans from what is there.
 */
import { describe, expect, it } from 'vitest';
import { catalogColumn, evolvedTable, existingTable, needsEvolving, type CatalogColumn } from '../../../lambda/core/warehouse/redshift-catalog.ts';
import { evolveSql, RedshiftTypeChangeError, type RedshiftTable } from '../../../lambda/core/warehouse/redshift-sql.ts';
import { redshiftColumn } from '../../../lambda/core/warehouse/redshift-types.ts';
import { warehouseTable } from '../../../lambda/core/warehouse/warehouse-sql.ts';

const t = warehouseTable('src', 'public.Orders');
const want: RedshiftTable = {
  t,
  key: [redshiftColumn('Id', 'integer')],
  data: [redshiftColumn('code', 'varchar(40)'), redshiftColumn('note', 'text'), redshiftColumn('doc', 'jsonb'), redshiftColumn('raw', 'bytea')],
  hard: false,
};
const row = (table: string, name: string, dataType: string, length: number | null = null, p: number | null = null, s: number | null = null): CatalogColumn => ({
  table_name: table.toLowerCase(),
  column_name: name,
  data_type: dataType,
  character_maximum_length: length,
  numeric_precision: p,
  numeric_scale: s,
});
/** Version 1 as the cluster holds it: code varchar(4) (16 bytes), no note; the platform's columns around. */
const v1 = (table: string, codeBytes = 16): CatalogColumn[] => [
  row(table, '_cdc_load', 'bigint'),
  row(table, '_cdc_position', 'character varying', 24),
  row(table, 'id', 'bigint'),
  row(table, 'code', 'character varying', codeBytes),
  row(table, 'doc', 'super'),
  row(table, 'raw', 'varbyte', 1_024_000),
  row(table, 'old_col', 'numeric', null, 38, 2),
];

describe('existingTable', () => {
  it('no changelog: no table', () => {
    expect(existingTable(want, [])).toBeNull();
    expect(existingTable(want, v1(t.mirror))).toBeNull();
  });

  it("reads the key and data columns as the dialect types them (the platform's left out), named as the schema version names them", () => {
    const have = existingTable(want, [...v1(t.changelog), ...v1(t.mirror)])!;
    expect(have.key).toEqual([redshiftColumn('Id', 'integer')]);
    expect(have.data).toEqual([
      redshiftColumn('code', 'varchar(4)'),
      redshiftColumn('doc', 'jsonb'),
      redshiftColumn('raw', 'bytea'),
      redshiftColumn('old_col', 'numeric(12,2)'),
    ]);
    // What evolve does from there: note added, code widened, old_col stays.
    const plan = evolveSql(have, want);
    expect(plan.transactional.filter((s) => s.includes('ADD COLUMN'))).toEqual([
      `ALTER TABLE "${t.schema}"."${t.changelog.toLowerCase()}" ADD COLUMN "note" varchar(65535)`,
      `ALTER TABLE "${t.schema}"."${t.mirror.toLowerCase()}" ADD COLUMN "note" varchar(65535)`,
    ]);
    expect(plan.widen.filter((s) => s.includes('ALTER COLUMN'))).toHaveLength(2);
    expect(plan.widen.join(';')).not.toMatch(/old_col/);
  });

  it('a widening interrupted between the changelog and the base is made again: each column at the narrower of the two', () => {
    const have = existingTable(want, [...v1(t.changelog, 160), ...v1(t.mirror, 16)])!;
    expect(have.data.find((c) => c.name === 'code')?.type).toBe('varchar(16)');
    expect(evolveSql(have, want).widen.filter((s) => s.includes('ALTER COLUMN'))).toHaveLength(2);
  });

  it('the same columns: nothing to evolve', () => {
    const rows = (table: string): CatalogColumn[] => [
      row(table, 'id', 'bigint'),
      row(table, 'code', 'character varying', 160),
      row(table, 'note', 'character varying', 65_535),
      row(table, 'doc', 'super'),
      row(table, 'raw', 'varbyte', 1_024_000),
    ];
    const guard = row(t.truncations, '_cdc_position', 'character varying', 24);
    const handover = row(t.handover, '_cdc_position', 'character varying', 24);
    expect(evolveSql(existingTable(want, [...rows(t.changelog), ...rows(t.mirror), guard, handover])!, want)).toEqual({ transactional: [], widen: [] });
  });

  it('a column the schema version needs, of a type the dialect does not make, holds the table; one it does not need is left alone', () => {
    expect(() => existingTable(want, [row(t.changelog, 'id', 'bigint'), row(t.changelog, 'code', 'character', 4)])).toThrow(RedshiftTypeChangeError);
    expect(() => existingTable(want, [row(t.changelog, 'id', 'bigint'), row(t.changelog, 'code', 'character', 4)])).toThrow(
      /code: the Redshift column is character\(4\)/,
    );
    expect(existingTable(want, [row(t.changelog, 'id', 'bigint'), row(t.changelog, 'legacy', 'integer')])!.data).toEqual([]);
  });

  it('a type change evolve refuses stays refused', () => {
    const have = existingTable(want, [row(t.changelog, 'id', 'bigint'), row(t.changelog, 'code', 'bigint')])!;
    expect(() => evolveSql(have, want)).toThrow(RedshiftTypeChangeError);
  });

  it('catalog types of every kind the dialect makes', () => {
    const cases: [CatalogColumn, string][] = [
      [row('x', 'c', 'double precision'), 'double precision'],
      [row('x', 'c', 'boolean'), 'boolean'],
      [row('x', 'c', 'date'), 'date'],
      [row('x', 'c', 'timestamp with time zone'), 'timestamptz'],
      [row('x', 'c', 'timestamp without time zone'), 'timestamp'],
      [row('x', 'c', 'time with time zone'), 'timetz'],
      [row('x', 'c', 'time without time zone'), 'time'],
      [row('x', 'c', 'numeric', null, 38, 4), 'numeric(38,4)'],
      [row('x', 'c', 'binary varying', 1_024_000), 'varbyte(1024000)'],
    ];
    for (const [r, type] of cases) expect(catalogColumn(r)?.type, String(r.data_type)).toBe(type);
  });
});

describe('evolvedTable, needsEvolving', () => {
  const v1: RedshiftTable = {
    t,
    key: [redshiftColumn('Id', 'integer')],
    data: [redshiftColumn('code', 'varchar(4)'), redshiftColumn('old', 'integer')],
    hard: false,
  };
  const v2: RedshiftTable = { ...v1, data: [redshiftColumn('code', 'varchar(40)'), redshiftColumn('note', 'text')] };

  it("the cluster's table after an evolution: widened, added, and what the new version lacks kept", () => {
    const after = evolvedTable(v1, v2);
    expect(after.data).toEqual([redshiftColumn('code', 'varchar(40)'), redshiftColumn('old', 'integer'), redshiftColumn('note', 'text')]);
    // An older version's batch after it changes nothing, and neither does the newer version's next batch.
    expect(needsEvolving(after, v1)).toBe(false);
    expect(needsEvolving(evolvedTable(after, v1), v2)).toBe(false);
    expect(evolvedTable(after, v1).data).toEqual(after.data);
  });

  it('what evolveSql would change or refuse', () => {
    expect(needsEvolving(v1, v1)).toBe(false);
    expect(needsEvolving(v1, v2)).toBe(true);
    expect(needsEvolving(v1, { ...v1, data: [redshiftColumn('code', 'varchar(2)')] })).toBe(false);
    expect(needsEvolving(v1, { ...v1, data: [redshiftColumn('old', 'text')] })).toBe(true);
  });
});

describe('a table made in soft mode, loaded in hard mode', () => {
  it('the catalog says whether the table has its remembered deletions; evolve makes them and the view again', () => {
    const hardWant = { ...want, hard: true };
    const soft = existingTable(hardWant, [
      ...v1(t.changelog),
      ...v1(t.mirror),
      row(t.truncations, '_cdc_position', 'character varying', 24),
      row(t.handover, '_cdc_position', 'character varying', 24),
    ])!;
    expect(soft.hard).toBe(false);
    expect(soft.lacksTruncations).toBeUndefined();
    expect(existingTable(hardWant, [...v1(t.changelog), ...v1(t.mirror), row(t.deletedKeys, 'id', 'bigint')])!.hard).toBe(true);
    const same = { ...soft, data: soft.data.filter((c) => c.name !== 'old_col') };
    const plan = evolveSql(same, { ...same, hard: true });
    expect(plan.transactional[0]).toMatch(/^DROP VIEW /);
    expect(plan.transactional[1]).toMatch(new RegExp(`^CREATE TABLE IF NOT EXISTS "[^"]+"\\."${t.deletedKeys.toLowerCase()}"`));
    expect(plan.transactional.at(-1)).toMatch(/^CREATE OR REPLACE VIEW .*_cdc_deleted_keys_/);
    expect(needsEvolving(same, { ...same, hard: true })).toBe(true);
    expect(needsEvolving({ ...same, hard: true }, same)).toBe(false);
  });
});

describe('a table made before truncates were loaded', () => {
  it('the catalog says it lacks its truncations; evolve makes them and the view again, and nothing else', () => {
    const old = existingTable(want, [...v1(t.changelog), ...v1(t.mirror), row(t.handover, '_cdc_position', 'character varying', 24)])!;
    expect(old.lacksTruncations).toBe(true);
    const same = { ...old, data: old.data.filter((c) => c.name !== 'old_col') };
    const { lacksTruncations: _, ...guarded } = same;
    expect(needsEvolving(same, guarded)).toBe(true);
    const plan = evolveSql(same, guarded);
    expect(plan.transactional).toHaveLength(3);
    expect(plan.transactional[0]).toMatch(/^DROP VIEW /);
    expect(plan.transactional[1]).toMatch(new RegExp(`^CREATE TABLE IF NOT EXISTS "[^"]+"\\."${t.truncations.toLowerCase()}"`));
    expect(plan.transactional[2]).toMatch(/^CREATE OR REPLACE VIEW .*_cdc_truncations_/);
    expect(needsEvolving(evolvedTable(same, guarded), guarded)).toBe(false);
  });
});

describe('a table made before primary-key changes were held', () => {
  it('the catalog says it lacks its handover table; evolve makes it with every column the table has, without touching the view', () => {
    const guards = [row(t.truncations, '_cdc_position', 'character varying', 24)];
    const old = existingTable(want, [...v1(t.changelog), ...v1(t.mirror), ...guards])!;
    expect(old.lacksHandover).toBe(true);
    const { lacksHandover: _, ...made } = old;
    expect(needsEvolving(old, made)).toBe(true);
    const plan = evolveSql(old, made);
    expect(plan.transactional).toHaveLength(1);
    expect(plan.transactional[0]).toMatch(
      new RegExp(
        `^CREATE TABLE IF NOT EXISTS "[^"]+"\\."${t.handover.toLowerCase()}" \\(.*"old_col" numeric\\(38,2\\).*"_cdc_missing" varchar\\(65535\\), "_cdc_before" varchar\\(65535\\)\\)$`,
      ),
    );
    expect(needsEvolving(evolvedTable(old, made), made)).toBe(false);
    // With a column added at the same time: the changelog and the base get it by ALTER, the new handover table has it from the start.
    const grown = evolveSql(old, want);
    expect(grown.transactional.filter((s) => s.includes('ADD COLUMN') && s.includes(t.handover.toLowerCase()))).toEqual([]);
    expect(grown.transactional.find((s) => s.includes(t.handover.toLowerCase()))).toMatch(/"note" varchar\(65535\)/);
    // A table that has it gets the added column there too.
    const has = existingTable(want, [...v1(t.changelog), ...v1(t.mirror), ...guards, row(t.handover, 'id', 'bigint')])!;
    expect(evolveSql(has, want).transactional.filter((s) => s.includes('ADD COLUMN'))).toHaveLength(3);
  });
});
