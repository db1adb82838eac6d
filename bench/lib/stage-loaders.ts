/**
 * EXPERIMENTAL stage loaders, for measuring apply-path ideas without touching the applier: each
 * wraps the adapter's COPY loader (`copyStageLoader`) and is passed to the real applier through
 * its `stageLoader` option. Not used outside `bench/`.
 *
 * Why: the applier's PostgreSQL "session" stage tables are emptied with `DELETE` after each batch
 * and are temp tables, which autovacuum never visits. Their pages keep every row ever staged in
 * the session (until the table is re-created after `stageReuse` uses), so every seq scan of a
 * stage reads all of them, and the planner, which sizes an unanalysed table from its page count,
 * believes a 100-row stage holds thousands of rows and picks hash joins that read the whole
 * mirror or changelog. `TRUNCATE` before loading gives the stage fresh, empty storage (on
 * PostgreSQL TRUNCATE is transactional, and a temp table needs no lock wait); `ANALYZE` after
 * loading gives the planner the real row count.
 */
import { copyStageLoader, type StageLoader } from '../../lambda/adapters/warehouse-pg.ts';

/** COPY into a freshly truncated stage, then ANALYZE it (PostgreSQL only). */
export const truncateCopyAnalyzeStageLoader: StageLoader = {
  name: 'truncate+copy+analyze',
  async load(client, table, columns, rows) {
    await client.query(`TRUNCATE ${table}`);
    await copyStageLoader.load(client, table, columns, rows);
    await client.query(`ANALYZE ${table}`);
  },
};
