import { describe, expect, it } from 'vitest';
import { oneStatementMergeFits, oneStatementMergeSql } from '../../../lambda/core/warehouse/merge-statement.ts';
import { createMirrorSql, MIRROR_FILLFACTOR, qualified, warehouseTable } from '../../../lambda/core/warehouse/warehouse-sql.ts';

// What the merge writes is checked against the general merge on embedded PostgreSQL
// (test/adapters/merge-plans.test.ts, test/property/warehouse-apply.property.test.ts); here its text.
describe('the merge as one MERGE statement (docs/warehouse-apply.md, "The merge")', () => {
  const t = warehouseTable('demo', 'public.orders');
  const o = {
    key: ['id'],
    mirrorColumns: ['_cdc_deleted', 'id', 'status', '_cdc_position', '_cdc_deleted_at', '_cdc_applied_at'],
    changelogColumns: ['_cdc_position', '_cdc_op', 'id', 'status'],
    hard: false,
    deletedKeys: false,
    truncations: true,
    pending: { from: '7', to: '42' },
  };

  it('is one MERGE into the mirror over the pending rows, then the watermark moves; nothing is written to the changelog and no temp table is made', () => {
    const [merge, watermark, ...rest] = oneStatementMergeSql(t, o);
    expect(rest).toEqual([]);
    expect(merge).toMatch(new RegExp(`^MERGE INTO ${qualified(t.schema, t.mirror).replace(/[.*+?^${}()|[\]\\]/g, '\\$&')} `));
    expect(merge).toContain('"_cdc_seq" > 7 AND c."_cdc_seq" <= 42');
    expect(merge).not.toMatch(/CREATE TEMP|INSERT INTO .*_cdc_changelog|DELETE FROM/);
    expect(watermark).toBe(`UPDATE ${qualified(t.schema, t.watermark)} SET "_cdc_seq" = 42 WHERE "_cdc_seq" < 42`);
  });

  it('keeps the guards of the general merge: position on update, the truncate guard on update and insert, the base values for a delete with nothing to borrow', () => {
    const [merge] = oneStatementMergeSql(t, o);
    const m = `"${t.mirror}"`;
    expect(merge).toContain(
      `WHEN MATCHED AND ${m}."_cdc_position" < stg."_cdc_position" AND NOT EXISTS (SELECT 1 FROM ${qualified(t.schema, t.truncations)} x`,
    );
    expect(merge).toContain(`WHEN NOT MATCHED AND NOT EXISTS (SELECT 1 FROM ${qualified(t.schema, t.truncations)} x`);
    expect(merge).toContain(`"status" = CASE WHEN stg."_cdc_set" = 0 THEN stg."status" ELSE ${m}."status" END`);
    const [withoutTruncations] = oneStatementMergeSql(t, { ...o, truncations: false });
    expect(withoutTruncations).not.toContain(t.truncations);
  });

  it('is refused where the general merge has more to write: hard deletes, a deleted-keys table', () => {
    expect(oneStatementMergeFits(o)).toBe(true);
    for (const other of [
      { ...o, hard: true },
      { ...o, deletedKeys: true },
    ]) {
      expect(oneStatementMergeFits(other)).toBe(false);
      expect(() => oneStatementMergeSql(t, other)).toThrow(/use mergeSql/);
    }
  });
});

describe('the mirror on PostgreSQL leaves room for HOT updates (docs/warehouse-apply.md, "What a merge costs")', () => {
  const t = warehouseTable('demo', 'public.orders');
  const key = [{ name: 'id', type: 'bigint' }];
  const data = [{ name: 'status', type: 'text' }];
  it(`is made with fillfactor ${MIRROR_FILLFACTOR} on PostgreSQL and without a storage parameter elsewhere`, () => {
    expect(createMirrorSql(t, key, data, 'postgres')).toMatch(new RegExp(`\\) WITH \\(fillfactor = ${MIRROR_FILLFACTOR}\\)$`));
    expect(createMirrorSql(t, key, data, 'redshift')).not.toContain('WITH');
    expect(createMirrorSql(t, key, data)).not.toContain('WITH');
  });
});
