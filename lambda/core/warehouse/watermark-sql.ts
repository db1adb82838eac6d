/**
 * The statements that read the changelog's append order against the watermark outside the merge
 * itself (docs/warehouse-apply.md, "The merge" and "When a merge is due"): the merge's bounds, the
 * full apply's move of the watermark to the end, and what the schedule reads to decide a merge is
 * due. Pure SQL text; the layout and the merge are in `warehouse-sql.ts`.
 */
import { quoteIdent } from '../shared/identifiers.ts';
import { CdcColumn, qualified, type WarehouseTable } from './warehouse-sql.ts';

/**
 * Under a lock that keeps appends out: the watermark (`from`), the highest append order (`to`)
 * and how many changelog rows lie between (`n`). With `upTo` (a merge that lets appends go on: a
 * bound read before, below which every row is committed; `mergeUpperBoundSql`): `to` is `upTo`
 * and `n` counts the rows up to it, in the same statement.
 */
export function pendingBoundsSql(t: WarehouseTable, upTo?: string): string {
  if (upTo !== undefined && !/^\d{1,19}$/.test(upTo)) throw new RangeError(`not an append order: ${upTo}`);
  const seq = quoteIdent(CdcColumn.SEQ);
  const changelog = qualified(t.schema, t.changelog);
  // The count reads the append-order index from the watermark up (what the delta holds), and the
  // end is one backward index step: a merge or full apply costs its delta, not the table's history
  // (before, one scan of the whole changelog; docs/performance-log.md, "One transaction per batch; the batch of 1,000").
  const end = upTo ?? `COALESCE((SELECT MAX(e.${seq}) FROM ${changelog} e), 0)`;
  const bounded = upTo === undefined ? '' : ` AND c.${seq} <= ${upTo}`;
  return (
    `SELECT w.${seq} AS "from", ${end} AS "to", COUNT(c.${seq}) AS n ` +
    `FROM ${qualified(t.schema, t.watermark)} w LEFT JOIN ${changelog} c ON c.${seq} > w.${seq}${bounded} GROUP BY w.${seq}`
  );
}

/**
 * The merge's upper bound, read in its own short transaction before the merge: waits for the
 * appends in flight (`SHARE ROW EXCLUSIVE` conflicts with their `ROW EXCLUSIVE`) and keeps new ones
 * out for the moment it reads the highest append order, so every row at or below it is committed
 * (an append's rows get their order after its lock). PostgreSQL.
 */
export function mergeUpperBoundSql(t: WarehouseTable): string[] {
  return [
    `LOCK TABLE ${qualified(t.schema, t.changelog)} IN SHARE ROW EXCLUSIVE MODE`,
    `SELECT COALESCE(MAX(${quoteIdent(CdcColumn.SEQ)}), 0) AS "to" FROM ${qualified(t.schema, t.changelog)}`,
  ];
}

/** Moves the watermark past every changelog row (a full apply, which holds appends out and wrote its own events to the base). */
export function watermarkToEndSql(t: WarehouseTable): string {
  const seq = quoteIdent(CdcColumn.SEQ);
  const w = qualified(t.schema, t.watermark);
  return `UPDATE ${w} SET ${seq} = m.s FROM (SELECT MAX(${seq}) AS s FROM ${qualified(t.schema, t.changelog)}) m WHERE m.s > ${w}.${seq}`;
}

/**
 * How many rows the delta holds and since when (`n`; `oldest`: `_cdc_applied_at` of its first
 * row). Portable: a count of the delta view, which reads every unmerged row. `byAppendOrder`
 * (PostgreSQL, whose identity values are consecutive but for rolled-back appends): two steps of
 * the append-order index, whatever the delta holds: `n` is the distance from the watermark to the
 * highest append order, an upper bound (a rolled-back append leaves a gap), 0 when no row is above
 * the watermark; `oldest` is the first unmerged row's by append order. Redshift's IDENTITY values
 * are not consecutive: there the count stays (docs/warehouse-apply.md, "When a merge is due").
 */
export function deltaStatsSql(t: WarehouseTable, o: { byAppendOrder?: boolean } = {}): string {
  const applied = quoteIdent(CdcColumn.APPLIED_AT);
  if (!o.byAppendOrder) return `SELECT COUNT(*) AS n, MIN(${applied}) AS oldest FROM ${qualified(t.schema, t.delta)}`;
  const seq = quoteIdent(CdcColumn.SEQ);
  const changelog = qualified(t.schema, t.changelog);
  const first = `SELECT f.${applied} FROM ${changelog} f WHERE f.${seq} > w.${seq} ORDER BY f.${seq} LIMIT 1`;
  return (
    `SELECT CASE WHEN o.oldest IS NULL THEN 0 ELSE o.last - o.mark END AS n, o.oldest FROM (SELECT w.${seq} AS mark, ` +
    `(SELECT MAX(e.${seq}) FROM ${changelog} e) AS last, (${first}) AS oldest FROM ${qualified(t.schema, t.watermark)} w) o`
  );
}
