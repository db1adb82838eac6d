/**
 * Whether a PostgreSQL merge may let the planner use nested loops, from the planner's estimates
 * of the base tables it writes (docs/warehouse-apply.md, "What a merge costs"). Pure: the
 * estimates' SQL text and the decision; the pg adapter (`lambda/adapters/warehouse-pg.ts`) runs it.
 */
import { quoteIdent } from '../shared/identifiers.ts';
import { CdcColumn } from './warehouse-sql.ts';

/**
 * How many rows a base table must hold, per delta row merged, before a PostgreSQL merge lets the
 * planner use nested loops (`mergeMayUseNestedLoops`).
 */
export const NESTED_LOOP_BASE_FACTOR = 8;

/**
 * PostgreSQL: the planner's row estimate of each named table of `t`'s schema as of now (`_cdc_kind`
 * = the table's name, `rows` = its analysed rows per page times its pages now, which is how the
 * planner scales them; NULL when it was never analysed with rows in it). Parameters: `$1` the
 * schema, `$2` the names (text[]).
 */
export function baseEstimateSql(): string {
  return (
    `SELECT c.relname AS ${quoteIdent(CdcColumn.KIND)}, CASE WHEN c.reltuples <= 0 OR c.relpages <= 0 THEN NULL ` +
    `ELSE c.reltuples / c.relpages * (pg_relation_size(c.oid) / current_setting('block_size')::int) END AS rows ` +
    'FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = ANY($2)'
  );
}

/**
 * Whether a PostgreSQL merge of `deltaRows` may let the planner use nested loops (docs/warehouse-apply.md,
 * "What a merge costs"). With them off, every merge hash-joins the whole base: its cost grows with
 * the table, not with the delta (measured: a 56,000-row merge over a 2,000,000-row mirror 4.9 s,
 * 1.3 s with the planner's index lookups). They are off unless every base table the merge both
 * reads and writes (`estimates`: the mirror, and the deleted keys when the table has them) is
 * estimated at `NESTED_LOOP_BASE_FACTOR` times the delta or more: a base that is small when the
 * statement is planned, or never analysed (null), can make the planner pick a nested loop whose
 * inner scan re-reads the rows the statement itself inserts (quadratic: minutes for 100,000 rows).
 */
export function mergeMayUseNestedLoops(deltaRows: number, estimates: ReadonlyArray<number | null>): boolean {
  return deltaRows > 0 && estimates.length > 0 && estimates.every((rows) => rows !== null && rows >= NESTED_LOOP_BASE_FACTOR * deltaRows);
}
