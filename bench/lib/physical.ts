/**
 * The physical reference of the warehouse benchmarks (`bench:apply`, `bench:rebuild`): what writing
 * a table's events where they must land costs PostgreSQL with no Node work.
 */
import type { ChangeEvent } from '../../lambda/core/shared/event.ts';
import { quoteIdent } from '../../lambda/core/shared/identifiers.ts';
import { postgresColumnType } from '../../lambda/core/warehouse/postgres-dialect.ts';
import {
  CHANGELOG_CDC_COLUMNS,
  createAppendOrderIndexSql,
  createChangelogSql,
  createSchemaSql,
  warehouseTable,
} from '../../lambda/core/warehouse/warehouse-sql.ts';
import { copyText } from '../../lambda/adapters/warehouse-pg.ts';
import { copyLine, itemsTableSql, ITEM_COLUMNS, type History } from './history.ts';
import { copyLines, withClient } from './pg.ts';
import { nowMs } from './report.ts';

/**
 * The physical reference (docs/performance-log.md, "31. One write per event in the warehouse, against a physical reference"): what writing the history where it must
 * land costs PostgreSQL with no Node work: COPY of every history event into a keyed changelog (the
 * warehouse's own: primary key position + key, append order and its index; the snapshot's events
 * already in it, untimed), then COPY of the final rows into an empty table with its primary key.
 * History events/s per run (events ÷ the two COPYs' time).
 */
export async function physicalReference(
  url: string,
  h: History,
  snapshot: readonly ChangeEvent[],
  history: readonly ChangeEvent[],
  runs: number,
): Promise<number[]> {
  const t = warehouseTable('ref', 'public.hist');
  const key = [{ name: 'id', type: postgresColumnType('bigint') }];
  const data = ITEM_COLUMNS.filter((c) => c.name !== 'id').map((c) => ({ name: c.name, type: postgresColumnType(c.type) }));
  const applied = new Date().toISOString();
  const line = (e: ChangeEvent): string => {
    const values = [
      e.position,
      e.op,
      e.commitTs,
      String(e.schemaVersion),
      e.txId,
      e.synthetic ? 't' : 'f',
      null,
      applied,
      String(e.key.id),
      ...data.map((c) => (e.after && e.after[c.name] !== undefined && e.after[c.name] !== null ? String(e.after[c.name]) : null)),
    ];
    return `${values.map(copyText).join('\t')}\n`;
  };
  const columns = [...CHANGELOG_CDC_COLUMNS.map((c) => c.name), 'id', ...data.map((c) => c.name)];
  const snapshotLines = snapshot.map(line);
  const historyLines = history.map(line);
  const rates: number[] = [];
  await withClient(url, async (c) => {
    for (let i = 0; i < runs; i++) {
      await c.query(`DROP SCHEMA IF EXISTS ${quoteIdent(t.schema)} CASCADE; DROP TABLE IF EXISTS physical_final`);
      await c.query(`${createSchemaSql(t)}; ${createChangelogSql(t, key, data)}; ${createAppendOrderIndexSql(t)}; ${itemsTableSql('physical_final')}`);
      await copyLines(c, `${quoteIdent(t.schema)}.${quoteIdent(t.changelog)} (${columns.map(quoteIdent).join(', ')})`, snapshotLines);
      await c.query('CHECKPOINT');
      const t0 = nowMs();
      await copyLines(c, `${quoteIdent(t.schema)}.${quoteIdent(t.changelog)} (${columns.map(quoteIdent).join(', ')})`, historyLines);
      await copyLines(c, 'physical_final', h.finalRows.map(copyLine));
      rates.push(history.length / ((nowMs() - t0) / 1000));
    }
    await c.query(`DROP SCHEMA IF EXISTS ${quoteIdent(t.schema)} CASCADE; DROP TABLE IF EXISTS physical_final`);
  });
  return rates;
}
