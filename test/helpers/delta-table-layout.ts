/**
 * Test helper: turns a table's warehouse objects, made by the applier, into the layout before one
 * write per event (docs/warehouse-apply.md, "The layout before one write per event"): the
 * unmerged events (the changelog's rows above the watermark) move into a delta TABLE and leave the
 * changelog, which loses its append order; the watermark is dropped and the view made over the
 * delta table as that layout had it. What the view shows does not change.
 */
import type pg from 'pg';
import { createOverlayViewSql, qualified, type WarehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';

export async function toDeltaTableLayout(pool: pg.Pool, t: WarehouseTable, key: readonly string[], hard: boolean): Promise<void> {
  const q = (n: string): string => qualified(t.schema, n);
  const columnsOf = async (name: string): Promise<string[]> =>
    (
      await pool.query(`SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, [
        t.schema,
        name,
      ])
    ).rows.map((r) => String(r.column_name));
  const changelog = (await columnsOf(t.changelog)).filter((c) => c !== '_cdc_seq');
  const mirror = await columnsOf(t.mirror);
  const has = async (name: string): Promise<boolean> => (await pool.query(`SELECT to_regclass($1) AS r`, [`"${t.schema}"."${name}"`])).rows[0].r !== null;
  const cols = changelog.map((c) => `"${c}"`).join(', ');
  await pool.query(
    `BEGIN; DROP VIEW ${q(t.view)}; CREATE TABLE "${t.schema}"."_old_delta" AS SELECT ${cols} FROM ${q(t.delta)}; ` +
      `DELETE FROM ${q(t.changelog)} WHERE "_cdc_seq" > (SELECT "_cdc_seq" FROM ${q(t.watermark)}); DROP VIEW ${q(t.delta)}; DROP TABLE ${q(t.watermark)}; ` +
      `ALTER TABLE ${q(t.changelog)} DROP COLUMN "_cdc_seq"; ALTER TABLE "${t.schema}"."_old_delta" RENAME TO "${t.delta}"; ` +
      `${createOverlayViewSql(t, mirror, key, { deletedKeys: hard || (await has(t.deletedKeys)), truncations: await has(t.truncations) })}; COMMIT`,
  );
}
