/**
 * Merges a warehouse table's delta into its mirror now, as the sink's deferred merge does
 * (`PgWarehouse.merge`, docs/warehouse-apply.md): for tests that corrupt the mirror behind the
 * platform's back, so that what they corrupt is what the view shows (a row still in the delta
 * would hide the corruption). The view shows the same rows before and after a merge.
 */
import pg from 'pg';
import { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import type { DeleteMode } from '../../lambda/core/shared/control-plane.ts';

/** Returns the delta rows merged. */
export async function mergeWarehouseTable(
  url: string,
  sourceId: string,
  table: string,
  key: readonly string[],
  deleteMode: DeleteMode = 'soft',
): Promise<number> {
  const pool = new pg.Pool({ connectionString: url, max: 1 });
  try {
    return (await new PgWarehouse(pool).merge({ source: sourceId, table, deleteMode, key })).rows;
  } finally {
    await pool.end();
  }
}
