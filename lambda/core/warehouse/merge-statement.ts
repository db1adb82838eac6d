/**
 * PostgreSQL 15 or later: the merge of a soft-mode table without a deleted-keys table as ONE
 * `MERGE` statement (docs/warehouse-apply.md, "The merge"). Its source is the query the general
 * merge writes to its temp stage (`mergeWritesSelect`), so the newest pending row per key is not
 * written to a temp table and read back, and the base is joined once for the update and the
 * insert of absent keys instead of once for each.
 */
import { quoteIdent } from '../shared/identifiers.ts';
import { CdcColumn, mergeWritesSelect, moveWatermarkSql, qualified, RESERVED_PREFIX, type MergeSqlOptions, type WarehouseTable } from './warehouse-sql.ts';

/** Whether `oneStatementMergeSql` writes what `mergeSql` writes for this table: soft mode, no deleted-keys table. */
export function oneStatementMergeFits(o: Pick<MergeSqlOptions, 'hard' | 'deletedKeys'>): boolean {
  return !o.hard && !o.deletedKeys;
}

/**
 * The merge as `MERGE INTO mirror USING (the stage's query)`, then the watermark's move: the same
 * guards as `applyStageSql` with the merge's two column sets: a base row is updated only where its
 * position is lower (a delete with no live pending row above the base, `_cdc_set` 1, keeps the
 * base's data columns), an absent key is inserted, and nothing at or below a truncate is written.
 */
export function oneStatementMergeSql(t: WarehouseTable, o: MergeSqlOptions): string[] {
  if (!oneStatementMergeFits(o)) throw new Error(`oneStatementMergeSql: ${t.tableId} has deleted keys or hard deletes; use mergeSql`);
  const q = quoteIdent;
  const pos = q(CdcColumn.POSITION);
  const m = q(t.mirror);
  const data = o.mirrorColumns.filter((c) => !o.key.includes(c) && !c.startsWith(RESERVED_PREFIX));
  const always = [CdcColumn.POSITION, CdcColumn.DELETED, CdcColumn.DELETED_AT, CdcColumn.APPLIED_AT];
  const truncated = o.truncations ? ` AND NOT EXISTS (SELECT 1 FROM ${qualified(t.schema, t.truncations)} x WHERE x.${pos} >= stg.${pos})` : '';
  const assign = [
    ...data.map((c) => `${q(c)} = CASE WHEN stg.${q(CdcColumn.SET)} = 0 THEN stg.${q(c)} ELSE ${m}.${q(c)} END`),
    ...always.map((c) => `${q(c)} = stg.${q(c)}`),
  ].join(', ');
  const on = o.key.map((k) => `${m}.${q(k)} = stg.${q(k)}`).join(' AND ');
  const columns = o.mirrorColumns.map(q);
  return [
    `MERGE INTO ${qualified(t.schema, t.mirror)} ${m} USING (${mergeWritesSelect(t, o, true)}) stg ON ${on} ` +
      `WHEN MATCHED AND ${m}.${pos} < stg.${pos}${truncated} THEN UPDATE SET ${assign} ` +
      `WHEN NOT MATCHED${truncated} THEN INSERT (${columns.join(', ')}) VALUES (${columns.map((c) => `stg.${c}`).join(', ')})`,
    moveWatermarkSql(t, o.pending.to),
  ];
}
