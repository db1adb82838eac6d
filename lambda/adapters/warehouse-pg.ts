/**
 * The warehouse over the PostgreSQL wire protocol (`pg`): PostgreSQL, or Amazon Redshift with the
 * same SQL (see `lambda/core/warehouse/warehouse-sql.ts` for the layout and the portable subset).
 *
 * `applyTable` applies one table's events of one batch:
 * 1. DDL, when the sink is not in shape yet, in its own short transaction first: create what is
 *    missing (schema, changelog, mirror, view; the deleted-keys table in hard-delete mode), and
 *    `ALTER TABLE … ADD COLUMN` (changelog and mirror) for columns of the batch's schema versions
 *    that the sink lacks, then the view again; planned from the catalog read in that transaction
 *    under the changelog's lock
 *    (docs/warehouse-apply.md, "Objects made from the catalog they run against"). The DDL is
 *    additive and idempotent, the stage tables are made from its result, and the data
 *    transaction then holds no catalog locks. A
 *    column whose warehouse type cannot take the new version's type is refused
 *    (`SinkTypeConflictError`) instead of being silently rounded.
 * 2. ONE data transaction: stage the distinct events, append those the changelog lacks, read
 *    what the mirror (and deleted-keys table) holds for their keys; collapse in TypeScript
 *    (`planTable`: one write per key, newer than what is stored); stage the writes,
 *    `UPDATE … FROM` stage where the stored position is lower (one statement per column set, so
 *    absent columns stay untouched), `INSERT … SELECT` the absent keys, and in hard mode delete
 *    tombstoned rows and remember their keys; `COMMIT`.
 *    `applyTables` runs the data phases of a batch's tables in ONE transaction instead, each
 *    under a savepoint (docs/warehouse-apply.md, "One transaction per batch").
 * 3. The commit time reported is `Date.now()` right after COMMIT returned: the client's clock,
 *    NTP-synced like the source's commit timestamps, with no extra round trip and no clock
 *    function (they differ between PostgreSQL and Redshift).
 *
 * Round trips per table and batch (PostgreSQL): load events, `BEGIN` + append + read state,
 * load writes, write + `COMMIT`. Values always travel as text parameters and are cast by the
 * target column types.
 *
 * Staging goes through one small interface (`StageLoader`). The default is the portable
 * multi-row parameterised INSERT, because Redshift has no `COPY FROM STDIN` and the path tested
 * on PostgreSQL must be the path that runs on Redshift (docs/architecture.md §5.4). `copyStageLoader` (COPY
 * FROM STDIN through `pg-copy-streams`) is the PostgreSQL-only fast path for benchmarks and
 * PostgreSQL sinks that want it.
 *
 * What the sink's tables look like is read from `information_schema` once per process and table
 * and kept; it is forgotten when an apply fails.
 */
import type pg from 'pg';
import { CdcError } from '../core/shared/errors.ts';
import { foundRelations, LegacyLayoutError, legacyProbeSql, planLegacyMigration } from '../core/warehouse/legacy-layout.ts';
import { guardPoolClients } from './pg-pool.ts';
import type { ChangeEvent, Row } from '../core/shared/event.ts';
import { keyText } from '../core/shared/event.ts';
import {
  appendedPlan,
  distinctEvents,
  needsHandover,
  oldKeysNeeded,
  planTable,
  setSignature,
  toParam,
  type StoredRow,
  type StoredState,
  type TablePlan,
} from '../core/sink/apply-plan.ts';
import {
  CdcColumn,
  appendChangelogSql,
  createAppendOrderIndexSql,
  createChangelogSql,
  createSchemaSql,
  applyStageSql,
  catalogLiteralSql,
  RESERVED_PREFIX,
  clearStagesSql,
  createStagesSql,
  clearHandoverSql,
  countHandoverSql,
  partnerInsertsSql,
  lockHandoverSql,
  readHandoverSql,
  HANDOVER_COLUMNS,
  migrateDeltaTableSql,
  lockDeltaSql,
  beginMergeSql,
  mergeSql,
  mergeIntoEmptySql,
  baseRowsSql,
  insertNewValuesSql,
  type PendingBounds,
  lockMirrorSql,
  recordTruncationSql,
  storedTruncationSql,
  truncateMirrorSql,
  dropStagesSql,
  mirrorRowsSql,
  qualified,
  rowsPerStatement,
  isSinkTextType,
  storedStateSql,
  stageNames,
  warehouseTable,
  STAGE_TRUNCATE_ROWS,
  type CatalogColumn,
  type StageNames,
  type SinkColumn,
  type UpdateSet,
  type WarehouseEngine,
  type WarehouseTable,
} from '../core/warehouse/warehouse-sql.ts';
import { deltaStatsSql, mergeUpperBoundSql, pendingBoundsSql, watermarkToEndSql } from '../core/warehouse/watermark-sql.ts';
import { quoteIdent } from '../core/shared/identifiers.ts';
import type {
  DeltaStats,
  MergeResult,
  MergeTarget,
  PendingDelta,
  TableApplyResult,
  TableBatch,
  TableOutcome,
  Warehouse,
  WriteErrorKind,
} from '../core/warehouse/warehouse-port.ts';
import { CONCURRENT_DDL_CODES, persistentTableErrorCode } from './warehouse-pg-errors.ts';
import type { WarehouseDialect } from '../core/warehouse/dialect.ts';
import { baseEstimateSql, mergeMayUseNestedLoops } from '../core/warehouse/merge-nested-loops.ts';
import { postgresDialect } from '../core/warehouse/postgres-dialect.ts';

import { oneStatementMergeFits, oneStatementMergeSql } from '../core/warehouse/merge-statement.ts';
import { insertStageLoader, copyStageLoader, type StageLoader } from './warehouse-pg-loaders.ts';
import { changelogCopyText } from './warehouse-pg-copy-text.ts';
import { appendableCopyText } from './warehouse-pg-append-text.ts';
import { appendableOf } from '../core/sink/lazy-event.ts';
import type { AppendableEvent } from '../core/sink/appendable-event.ts';
import {
  planDdl,
  readShape,
  sameShape,
  shapeOf,
  SinkTypeConflictError,
  wantedColumns,
  type DdlPlan,
  type DdlWants,
  type SinkShape,
} from './warehouse-pg-shape.ts';
import { changelogRow, handoverRows, readHandover, type HandoverRow } from './warehouse-pg-handover.ts';

export { copyStageLoader, copyText, insertStageLoader, type StageLoader } from './warehouse-pg-loaders.ts';
export { SinkTypeConflictError, UnsupportedSinkTypeError } from './warehouse-pg-shape.ts';
export type { MergeResult, MergeTarget, PendingDelta, TableApplyResult, TableBatch } from '../core/warehouse/warehouse-port.ts';

const DDL_ATTEMPTS = 3;

/** What a DDL retries on: a lost race (`CONCURRENT_DDL_CODES`), a serialization failure, a deadlock. */
const DDL_RETRY_CODES: ReadonlySet<string> = new Set([...CONCURRENT_DDL_CODES, '40001', '40P01']);

function isConcurrentDdlClash(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && DDL_RETRY_CODES.has(code);
}

/** The warehouse refused a value (SQLSTATE class 22 data exception, or 54 program limit): retrying will not help. */
export class ValueRejectedError extends CdcError {
  constructor(
    readonly sqlState: string,
    message: string,
  ) {
    super('VALUE_REJECTED', `the warehouse refused a value (SQLSTATE ${sqlState}): ${message}`);
  }
}

/** True for errors that are about the data (not the connection or a conflict), so that isolating the record is the remedy. */
export function isValueRejection(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^(22|54)[0-9A-Z]{3}$/.test(code);
}

const RAW_TEXT = { getTypeParser: () => (value: string) => value } as unknown as pg.CustomTypesConfig;

const isTrue = (v: unknown): boolean => v === true || v === 't' || v === 'true';

/**
 * How stage tables live:
 * - `session` (PostgreSQL default): created once per connection and table shape, loaded with the
 *   batch's events just before BEGIN and emptied before COMMIT (DELETE, and TRUNCATE once about
 *   `STAGE_TRUNCATE_ROWS` rows have passed, so dead rows cannot pile up in temp tables that
 *   autovacuum never visits; see `clearStagesSql`); a connection that saw any error is
 *   destroyed, so its temp tables cannot carry rows over. Measured on PostgreSQL with small
 *   batches: about 2.5× less time per apply than making and dropping the two tables each time.
 * - `transaction` (Redshift default): created inside the apply transaction and dropped before its
 *   COMMIT, so nothing is committed outside the one transaction (Redshift commits are costly and
 *   serialised). Valid on PostgreSQL too, and tested there.
 * The statements that stage, compare and write are the same in both.
 */
export type StageLifecycle = 'session' | 'transaction';

export interface PgWarehouseOptions {
  /** Loads the stage tables of the full apply. @default insertStageLoader (portable) */
  loader?: StageLoader;
  /** @default `transaction` when the server says it is Redshift, else `session` */
  stages?: StageLifecycle;
  /**
   * Appends a batch to the delta on the critical path: the engine's fastest load. Its `load`
   * must be atomic when `atomic` is set (one statement); otherwise it runs inside BEGIN … COMMIT.
   * @default copyStageLoader on PostgreSQL (COPY FROM STDIN); on Redshift insertStageLoader, or
   *   the S3 COPY loader (`s3CopyDeltaLoader`) when one is configured
   */
  deltaLoader?: StageLoader;
  /**
   * Whether the warehouse folds quoted names to lower case. Set `true` on PostgreSQL to stand in
   * for Redshift's folding (docs/onboarding.md, "Names").
   * @default true when the server says it is Redshift, else false
   */
  foldsNames?: boolean;
  /**
   * What differs per engine (lambda/core/warehouse/dialect.ts): column types and schema evolution.
   * @default the PostgreSQL dialect on PostgreSQL (native types); on Redshift the portable mapping
   */
  dialect?: WarehouseDialect;
  /**
   * On PostgreSQL 15 or later, merge a soft-mode table without deleted keys with one `MERGE`
   * (`oneStatementMergeSql`; docs/warehouse-apply.md, "The merge"). `false`: the stage statements
   * everywhere (benchmarks compare the two, `bench:merge-cpu`). @default true
   */
  mergeStatement?: boolean;
}

/** The warehouse sink over `pg`. One instance per process; one apply at a time per table. */
export class PgWarehouse implements Warehouse {
  private readonly shapes = new Map<string, SinkShape>();
  private readonly loader: StageLoader;
  private lifecycle: StageLifecycle | undefined;
  /** Session stage tables that exist, per connection: name → rows staged since the last TRUNCATE. */
  private readonly sessionStages = new WeakMap<pg.ClientBase, Map<string, number>>();
  private engine: WarehouseEngine | undefined;
  /** PostgreSQL 15 or later, unless the options say no: the merge may be one `MERGE` statement. */
  private mergeStatement = false;
  private readonly mergeStatementOption: boolean;
  private readonly deltaLoaderOption: StageLoader | undefined;
  private readonly foldsNamesOption: boolean | undefined;
  private readonly dialectOption: WarehouseDialect | undefined;
  /** Tables (`schema.view`) whose delta `deltaStats` has found: it reads their stats without the catalog. */
  private readonly withDelta = new Set<string>();
  /** Per table (`schema.view`): what this process appended since it last merged. */
  private readonly pendingDelta = new Map<string, PendingDelta>();

  constructor(
    private readonly pool: pg.Pool,
    options: PgWarehouseOptions = {},
  ) {
    guardPoolClients(pool);
    this.loader = options.loader ?? insertStageLoader;
    this.lifecycle = options.stages;
    this.deltaLoaderOption = options.deltaLoader;
    this.foldsNamesOption = options.foldsNames;
    this.dialectOption = options.dialect;
    this.mergeStatementOption = options.mergeStatement ?? true;
  }

  /** The dialect of the detected engine (null: the portable mapping of `sinkType`). */
  private dialect(): WarehouseDialect | null {
    return this.dialectOption ?? (this.engine === 'postgres' ? postgresDialect : null);
  }

  /** Whether a sink column of type `have` takes a column of type `want`'s values (the dialect's rule; portable: equal, or a text type). */
  private accepts(): (have: string, want: string) => boolean {
    const d = this.dialect();
    return d ? (have, want) => d.accepts(have, want) : (have, want) => have === want || isSinkTextType(have);
  }

  private deltaLoader(): StageLoader {
    return this.deltaLoaderOption ?? (this.engine === 'redshift' ? insertStageLoader : copyStageLoader);
  }

  /** The engine and stage lifecycle, from the server's version string (once per process). */
  private async detect(client: pg.ClientBase): Promise<StageLifecycle> {
    if (this.engine === undefined) {
      const engine = await detectEngine(client);
      this.mergeStatement = this.mergeStatementOption && engine === 'postgres' && (await serverVersionNum(client)) >= MERGE_STATEMENT_VERSION;
      this.engine = engine;
    }
    return (this.lifecycle ??= this.engine === 'redshift' ? 'transaction' : 'session');
  }

  /** Whether the warehouse folds quoted names to lower case: Redshift's default (`enable_case_sensitive_identifier` off). */
  async foldsNames(): Promise<boolean> {
    if (this.foldsNamesOption !== undefined) return this.foldsNamesOption;
    if (this.engine === undefined) {
      const client = await this.pool.connect();
      try {
        await this.detect(client);
      } finally {
        client.release();
      }
    }
    return this.engine === 'redshift';
  }

  /** How the apply treats an error of `applyTable` (see `WriteErrorKind`). */
  classifyError(err: unknown): WriteErrorKind | null {
    if (err instanceof SinkTypeConflictError) return { kind: 'type-conflict', message: err.message };
    if (err instanceof ValueRejectedError) return { kind: 'value-rejected' };
    // Old objects the applier cannot move: held, audited, with the statements to run (lambda/core/warehouse/legacy-layout.ts).
    if (err instanceof LegacyLayoutError) return { kind: 'persistent', code: err.code };
    const code = persistentTableErrorCode(err);
    return code === null ? null : { kind: 'persistent', code };
  }

  /**
   * What the table's delta holds (0 rows when it has none yet). The catalog is read until the
   * table has a delta; after that the stats are one statement, which on PostgreSQL costs the same
   * whatever the delta holds (`deltaStatsSql`; docs/warehouse-apply.md, "When a merge is due").
   */
  async deltaStats(target: MergeTarget): Promise<DeltaStats> {
    const t = target.target ?? warehouseTable(target.source, target.table);
    const cacheKey = `${t.schema}.${t.view}`;
    const client = await this.pool.connect();
    try {
      await this.detect(client);
      let byAppendOrder = this.engine === 'postgres';
      if (!this.withDelta.has(cacheKey)) {
        const shape = this.shapes.get(cacheKey) ?? (await readShape(client, t));
        if (shape.delta.length === 0) return { rows: 0, oldest: null };
        // A delta table of the layout before one write per event has no append order: counted (it moves at the table's next apply).
        if (shape.seq) this.withDelta.add(cacheKey);
        else byAppendOrder = false;
      }
      const r = await client.query<{ n: string; oldest: Date | null }>(deltaStatsSql(t, { byAppendOrder })).catch((err: unknown) => {
        this.withDelta.delete(cacheKey);
        throw err;
      });
      const row = r.rows[0];
      return { rows: Number(row?.n ?? 0), oldest: row?.oldest ? new Date(row.oldest).getTime() : null };
    } finally {
      client.release();
    }
  }

  /** What this process appended to the table's delta and has not seen merged. */
  pendingOf(sourceId: string, table: string, target?: WarehouseTable): PendingDelta {
    const t = target ?? warehouseTable(sourceId, table);
    return this.pendingDelta.get(`${t.schema}.${t.view}`) ?? { rows: 0, since: null };
  }

  /**
   * Compacts the table's delta into its base in one transaction (`mergeSql`): the delta is locked
   * against other merges and full applies but not against appends, and the merge reads one
   * snapshot (`beginMergeSql`), so rows appended meanwhile stay in the delta for the next merge;
   * the sink's shape is read under the lock (so a column another process added is merged too),
   * and a merge that fails midway changes nothing. Returns the rows merged. `stopAppends`: the
   * delta is locked against appends too (`lockDeltaSql`), for a delta that outgrew its merges.
   *
   * `freshBase`: the caller expects the base to be empty (a rebuild's shadow, docs/rebuild.md).
   * The merge then looks under the same lock whether mirror, changelog, deleted keys and
   * truncations hold any row (`baseRowsSql`) and, when none does, writes the delta in with
   * `mergeIntoEmptySql`, which leaves exactly what `mergeSql` would; otherwise it is the general
   * merge. `fast` in the result says which ran.
   *
   * With `freshBase`, an empty delta over an unfolded fresh shadow (`TableBatch.freshShadow`: its
   * appends went to the changelog) is folded: the base is computed from the changelog
   * (`foldChangelogIntoEmptySql`, under the same lock; `folded` in the result).
   *
   * On PostgreSQL the general merge lets the planner use nested loops (index lookups into the base
   * instead of hash joins over all of it) when the base is large against the delta
   * (`mergeMayUseNestedLoops`; `nestedLoops` in the result), and appends to the changelog with
   * `ON CONFLICT DO NOTHING` (docs/warehouse-apply.md, "What a merge costs").
   */
  async merge(
    target: MergeTarget,
    options: { freshBase?: boolean; stopAppends?: boolean } = {},
  ): Promise<MergeResult & { fast?: boolean; nestedLoops?: boolean }> {
    const t = target.target ?? warehouseTable(target.source, target.table);
    const cacheKey = `${t.schema}.${t.view}`;
    const t0 = Date.now();
    const client = await this.pool.connect();
    let destroy = false;
    let inTransaction = false;
    try {
      await this.detect(client);
      const known = this.shapes.get(cacheKey) ?? (await readShape(client, t));
      if (!known.seq) return { rows: 0, committedAt: Date.now(), ms: Date.now() - t0 };
      // What this process had appended before the merge began (appends may go on meanwhile).
      const pendingAtStart = this.pendingDelta.get(cacheKey);
      inTransaction = true;
      // A fresh base is looked at with appends stopped, and so is a delta that outgrew its merges
      // (`stopAppends`): the bound is then the changelog's end. Any other merge lets appends go on
      // and absorbs up to a bound read first, below which every row is committed (`mergeUpperBoundSql`).
      const stops = options.freshBase === true || options.stopAppends === true || this.engine === 'redshift';
      let upTo: string | null = null;
      if (!stops) {
        const res = (await client.query(`BEGIN; ${mergeUpperBoundSql(t).join('; ')}; COMMIT`)) as unknown as pg.QueryResult[];
        upTo = String((res[2]!.rows[0] as { to: string | number }).to);
      }
      await client.query(stops ? `BEGIN; ${lockDeltaSql(t, this.engine!)}` : beginMergeSql(t, this.engine!));
      const shape = await readShape(client, t);
      const bounds = await pendingBounds(client, t, upTo);
      const n = bounds.n;
      const fast = n > 0 && options.freshBase === true && (await client.query(baseRowsSql(t, shape))).rows.length === 0;
      const nested = n > 0 && !fast && this.engine === 'postgres' && (await nestedLoopsFit(client, t, shape, n));
      if (n > 0)
        for (const sql of mergeStatements(t, shape, target.key, target.deleteMode === 'hard', this.engine!, bounds, fast, nested, this.mergeStatement))
          await client.query(sql);
      await client.query('COMMIT');
      inTransaction = false;
      this.shapes.set(cacheKey, shape);
      // Rows this process appended while the merge ran may have missed its snapshot: they stay pending
      // (counted from the merge's start: at worst the next merge comes a little early).
      const pendingNow = this.pendingDelta.get(cacheKey);
      if (pendingNow === pendingAtStart) this.pendingDelta.delete(cacheKey);
      else if (pendingNow) this.pendingDelta.set(cacheKey, { rows: Math.max(0, pendingNow.rows - (pendingAtStart?.rows ?? 0)), since: t0 });
      return { rows: n, committedAt: Date.now(), ms: Date.now() - t0, fast, nestedLoops: nested };
    } catch (err) {
      this.shapes.delete(cacheKey);
      if (inTransaction) {
        try {
          await client.query('ROLLBACK');
        } catch {
          destroy = true;
        }
      }
      if (typeof (err as { code?: unknown } | null)?.code !== 'string') destroy = true;
      throw err;
    } finally {
      client.release(destroy);
    }
  }

  /** Forgets what this process knows about the sink tables (after someone else changed them). */
  forgetShapes(): void {
    this.shapes.clear();
    this.withDelta.clear();
  }

  /** Applies one table's batch (see the module comment). */
  async applyTable(batch: TableBatch): Promise<TableApplyResult> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.applyTableOnce(batch);
      } catch (err) {
        // Another process changed the sink's shape between this one's look and its lock: look again.
        if (!(err instanceof ShapeChangedError) || attempt >= DDL_ATTEMPTS) throw err;
      }
    }
  }

  private async applyTableOnce(batch: TableBatch): Promise<TableApplyResult> {
    const t = batch.target ?? warehouseTable(batch.source, batch.table);
    const cacheKey = `${t.schema}.${t.view}`;
    const client = await this.pool.connect();
    const st: TxState = { inTransaction: false, destroy: false };
    try {
      const prepared = await this.prepareTable(client, batch);
      const committed = await this.writeTable(client, prepared, st, false);
      st.inTransaction = false;
      st.destroy = false;
      return committed();
    } catch (err) {
      this.shapes.delete(cacheKey);
      if (st.inTransaction && !st.destroy) {
        try {
          await client.query('ROLLBACK');
        } catch {
          st.destroy = true;
        }
      }
      if (!(err instanceof CdcError) && typeof (err as { code?: unknown } | null)?.code !== 'string') st.destroy = true; // not a server error: the connection may be broken
      throw tableError(err);
    } finally {
      client.release(st.destroy);
    }
  }

  /**
   * Applies the tables of one batch in ONE transaction on PostgreSQL
   * (docs/warehouse-apply.md, "One transaction per batch"): first each table's DDL in its own short transaction (as
   * `applyTable`), then BEGIN, each table's data under a savepoint, COMMIT. Tables go in the
   * order of their warehouse names, so appliers of different shards take their locks in one order.
   * A table whose writes fail with an error about it (a server error, a `CdcError`) is rolled back
   * to its savepoint and reported in its outcome; the others commit. Any other error (a broken
   * connection) rolls the whole batch back and is thrown. A table whose shape changed under its
   * lock is applied again on its own after the COMMIT. On Redshift (no savepoints), and for one
   * table, each table is applied by `applyTable`.
   */
  async applyTables(batches: readonly TableBatch[]): Promise<TableOutcome[]> {
    const outcomes: TableOutcome[] = new Array<TableOutcome>(batches.length);
    const one = async (i: number): Promise<void> => {
      outcomes[i] = await this.applyTable(batches[i]!).then(
        (result) => ({ result }),
        (error: unknown) => ({ error }),
      );
    };
    if (batches.length > 1 && this.engine === undefined) {
      const client = await this.pool.connect();
      try {
        await this.detect(client);
      } finally {
        client.release();
      }
    }
    if (batches.length <= 1 || this.engine === 'redshift') {
      for (let i = 0; i < batches.length; i++) await one(i);
      return outcomes;
    }
    const order = batches
      .map((batch, i) => {
        const t = batch.target ?? warehouseTable(batch.source, batch.table);
        return { batch, i, name: `${t.schema}.${t.view}` };
      })
      .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const client = await this.pool.connect();
    const st: TxState = { inTransaction: false, destroy: false };
    let rolledBack = false;
    const done: { i: number; committed: () => TableApplyResult }[] = [];
    const again: number[] = [];
    try {
      const prepared: { i: number; name: string; p: PreparedTable }[] = [];
      for (const o of order) {
        try {
          prepared.push({ i: o.i, name: o.name, p: await this.prepareTable(client, o.batch) });
        } catch (err) {
          this.shapes.delete(o.name);
          if (!aboutTable(err)) throw err;
          await client.query('ROLLBACK').catch(() => undefined);
          outcomes[o.i] = { error: tableError(err) };
        }
      }
      st.inTransaction = true;
      await client.query('BEGIN');
      for (const { i, name, p } of prepared) {
        await client.query(`SAVEPOINT ${TABLE_SAVEPOINT}`);
        try {
          done.push({ i, committed: await this.writeTable(client, p, st, true) });
          await client.query(`RELEASE SAVEPOINT ${TABLE_SAVEPOINT}`);
        } catch (err) {
          this.shapes.delete(name);
          if (!aboutTable(err)) throw err;
          rolledBack = true;
          await client.query(`ROLLBACK TO SAVEPOINT ${TABLE_SAVEPOINT}`);
          if (err instanceof ShapeChangedError) again.push(i);
          else outcomes[i] = { error: tableError(err) };
        }
      }
      await client.query('COMMIT');
      st.inTransaction = false;
    } catch (err) {
      for (const o of order) this.shapes.delete(o.name);
      // Nothing of the batch is committed. The session's stage tables made in it are gone too: a new connection next time.
      st.destroy = true;
      if (st.inTransaction) await client.query('ROLLBACK').catch(() => undefined);
      throw tableError(err);
    } finally {
      // A table rolled back to its savepoint may have left this session's stage bookkeeping wrong: a new connection next time.
      client.release(st.destroy || rolledBack);
    }
    for (const d of done) outcomes[d.i] = { result: d.committed() };
    for (const i of again) await one(i);
    return outcomes;
  }

  /**
   * Brings the sink of one table's batch into shape (the DDL, each step in its own short
   * transaction; see the module comment) and returns what its data phase needs.
   */
  private async prepareTable(client: pg.ClientBase, batch: TableBatch): Promise<PreparedTable> {
    const t = batch.target ?? warehouseTable(batch.source, batch.table);
    const cacheKey = `${t.schema}.${t.view}`;
    const all = distinctEvents(batch.events);
    // Row events are staged (changelog, mirror); truncates are table-level (see applyStaged).
    const events = all.filter((e) => e.op !== 'truncate');
    const truncates = all.filter((e) => e.op === 'truncate');
    /** The delta this apply merges first (before a schema change or a full apply), if any. */
    let merged: { rows: number; nestedLoops: boolean } | undefined;
    {
      const lifecycle = await this.detect(client);
      const { key, data } = wantedColumns(batch, this.engine!, this.dialect());
      // Bring the sink into shape first, in its own short transaction: the DDL is additive and
      // idempotent, the stage tables are made from the resulting shape, and the data transaction
      // then holds no catalog locks.
      // A table's first apply in this process moves its objects of the layout before injective
      // names, if any (docs/warehouse-apply.md, "Layout before injective names"); a shadow has none.
      const moved = !this.shapes.has(cacheKey) && isLiveTable(t) && (await migrateLegacyLayout(client, t));
      let known = this.shapes.get(cacheKey) ?? (await readShape(client, t));
      // Its view is made again over the moved objects (PostgreSQL's would follow them; made anew, it is the same on every engine).
      if (moved) known = { ...known, view: false };
      // A table of the layout before one write per event (a delta table): moved to this one first
      // (docs/warehouse-apply.md, "The layout before one write per event").
      const migrated = known.changelog.length > 0 && !known.seq && known.delta.length > 0;
      if (migrated)
        known = {
          ...(await migrateDeltaTable(
            client,
            t,
            known,
            key.map((k) => k.name),
          )),
          view: false,
        };
      // Another process may have made the handover table since this one cached the shape: an
      // update that lacks columns must see it, or it could be applied onto a key that is held
      // (docs/primary-key-changes.md). So such a batch reads the catalog again until the table exists.
      if (!known.handover && events.some((e) => e.op === 'update' && e.missing.length > 0) && this.shapes.has(cacheKey)) known = await readShape(client, t);
      // The truncations table (the truncate guard) is created with the table, not with its first
      // truncate: an applier whose cached shape predates it would write without the guard
      // (docs/truncate.md). An older table without it gets it with its next batch.
      const wants = { hard: batch.deleteMode === 'hard', truncate: true, handover: needsHandover(events), polled: events.some((e) => e.capture === 'poll') };
      let ddl = planDdl(t, known, key, data, wants, this.accepts(), this.engine!);
      // `ddl` so far only says whether the sink needs DDL: it is planned again in the DDL's own
      // transaction, under the changelog's lock, from the catalog read there (`ddlUnderLock`).
      // Appliers of other shards may create the same schema or table at the same moment (`IF NOT
      // EXISTS` is not race-free in PostgreSQL): on such a clash, read the shape again and re-plan,
      // so what the other applier created is simply used.
      for (let attempt = 1; ddl.statements.length > 0; attempt++) {
        try {
          const done = await this.ddlUnderLock(client, t, known, key, data, wants, moved || migrated);
          ddl = done.ddl;
          if (done.merged.rows > 0) merged = done.merged;
          if (done.mergedFirst) this.pendingDelta.delete(cacheKey);
          break;
        } catch (err) {
          await client.query('ROLLBACK').catch(() => undefined);
          if (attempt >= DDL_ATTEMPTS || !isConcurrentDdlClash(err)) throw err;
          known = await readShape(client, t);
          ddl = planDdl(t, known, key, data, wants, this.accepts(), this.engine!);
        }
      }
      this.shapes.set(cacheKey, ddl.shape);
      return { batch, t, cacheKey, events, truncates, lifecycle, key, shape: ddl.shape, ddl: ddl.statements, merged };
    }
  }

  /**
   * Brings `t` into shape in ONE transaction whose DDL is planned from the shape read in it, under
   * the changelog's lock (`lockDeltaSql`;
   * docs/warehouse-apply.md, "Objects made from the catalog they run against").
   * Every DDL of the table takes that lock first, so they run one at a time and
   * none is planned from a catalog another applier changed since: a plan from an earlier read could
   * name a column in a view that the changelog lacks (42703), or make a view with fewer columns than
   * the one there (42P16). A table without a changelog (`known`) gets one first (`IF NOT EXISTS`:
   * another applier's, made since, is kept and read), so there is something to lock. A plan that
   * adds columns merges the delta first (docs/warehouse-apply.md, "The view": added columns).
   * `remakeView`: the view is made again even where the catalog has it (over objects just moved).
   * Returns the statements run, the shape after them, and the merge.
   */
  private async ddlUnderLock(
    client: pg.ClientBase,
    t: WarehouseTable,
    known: SinkShape,
    key: SinkColumn[],
    data: SinkColumn[],
    wants: DdlWants,
    remakeView: boolean,
  ): Promise<{ ddl: DdlPlan; merged: { rows: number; nestedLoops: boolean }; mergedFirst: boolean }> {
    const engine = this.engine!;
    const make = known.changelog.length === 0 ? [createSchemaSql(t), createChangelogSql(t, key, data, engine)] : [];
    await client.query(`BEGIN; ${[...make, lockDeltaSql(t, engine)].join('; ')}`);
    const read = await readShape(client, t);
    const shape = remakeView ? { ...read, view: false } : read;
    const plan = planDdl(t, shape, key, data, wants, this.accepts(), engine);
    const index = make.length > 0 && engine === 'postgres' ? [createAppendOrderIndexSql(t)] : [];
    const mergedFirst = plan.addsColumns && shape.seq && shape.watermark;
    const bounds = mergedFirst ? await pendingBounds(client, t, null) : null;
    const merged = bounds ? await mergeFirst(client, t, shape, bounds.n, engine) : { rows: 0, nestedLoops: false };
    const keyNames = key.map((k) => k.name);
    const mergeFirstSql =
      bounds && bounds.n > 0 ? mergeStatements(t, shape, keyNames, wants.hard, engine, bounds, false, merged.nestedLoops, this.mergeStatement) : [];
    await client.query([...mergeFirstSql, ...index, ...plan.statements, 'COMMIT'].join('; '));
    return { ddl: { ...plan, statements: [...make, ...index, ...plan.statements] }, merged, mergedFirst };
  }

  /**
   * The data phase of one table's batch: the append, or the full apply. `shared`: inside the
   * batch's transaction (no BEGIN or COMMIT of its own; `applyTables`). Returns what to report once
   * the data is committed (it counts the table's pending delta then).
   */
  private async writeTable(client: pg.ClientBase, p: PreparedTable, st: TxState, shared: boolean): Promise<() => TableApplyResult> {
    const { batch, t, cacheKey, events, truncates, lifecycle, key, shape } = p;
    let merged = p.merged;
    const ddl = { statements: p.ddl };
    {
      const stages = stageNames(t, shape.mirror, shape.changelog);
      const keyNames = key.map((k) => k.name);
      const appliedAt = batch.appliedAt.toISOString();

      // The critical path: a batch of full images and plain deletes is appended to the changelog with
      // the engine's bulk load and is visible in the view at its COMMIT (docs/warehouse-apply.md,
      // "Objects per captured table"). A rebuild's shadow appends the same way (`TableBatch.freshShadow` changes nothing).
      const dataNames = shape.mirror.filter((c) => !keyNames.includes(c) && !c.startsWith(RESERVED_PREFIX));
      if (shape.seq && truncates.length === 0 && events.every((e) => appendable(e, dataNames))) {
        if (events.length > 0) {
          st.destroy = true; // an error mid-load may leave the connection in COPY state: drop it
          st.inTransaction = true;
          await this.appendToChangelog(client, t, shape, events, appliedAt, shared);
          st.destroy = false;
        }
        return () => {
          const committedAt = Date.now();
          const pending = this.pendingDelta.get(cacheKey) ?? { rows: 0, since: null };
          const next = { rows: pending.rows + events.length, since: pending.since ?? (events.length > 0 ? committedAt : null) };
          this.pendingDelta.set(cacheKey, next);
          return { plan: appendedPlan(events), committedAt, ddl: ddl.statements, mode: 'append', pending: { ...next }, ...(merged ? { merged } : {}) };
        };
      }
      const eventRows = events.map((e, i) => [...changelogRow(e, shape.changelog, appliedAt), String(i)]);
      const eventCols = [...shape.changelog, CdcColumn.IDX];

      let begin: string;
      let end: string;
      const commit = shared ? '' : '; COMMIT';
      if (lifecycle === 'session') {
        st.destroy = true; // from here on, an error may leave the session's stage tables half made or holding rows: drop the connection
        const made = this.sessionStages.get(client) ?? new Map<string, number>();
        this.sessionStages.set(client, made);
        if (!made.has(stages.events)) {
          await client.query(createStagesSql(t, stages));
          made.set(stages.events, 0);
        }
        const staged = made.get(stages.events)! + events.length;
        const truncate = staged >= STAGE_TRUNCATE_ROWS;
        made.set(stages.events, truncate ? 0 : staged);
        await this.loader.load(client, quoteIdent(stages.events), eventCols, eventRows);
        begin = shared ? '' : 'BEGIN; ';
        end = `${clearStagesSql(stages, truncate)}${commit}`;
      } else {
        st.inTransaction = true;
        await client.query(`${shared ? '' : 'BEGIN; '}${createStagesSql(t, stages)}`);
        await this.loader.load(client, quoteIdent(stages.events), eventCols, eventRows);
        begin = '';
        end = `${dropStagesSql(stages)}${commit}`;
      }
      st.inTransaction = true;
      if (shape.seq) {
        // The full apply merges the delta first (its fold reads the base), under the changelog's
        // lock (appends wait); the shape is checked under that lock, so the merge writes every
        // column the changelog has. Its own events go to the base and the changelog, and the
        // watermark moves past them before COMMIT (they are absorbed).
        const res = (await client.query(
          `${begin}${lockDeltaSql(t, this.engine!)}; ${catalogLiteralSql(t)}; ${pendingBoundsSql(t)}`,
        )) as unknown as pg.QueryResult[];
        const rows = res[res.length - 2]!.rows as CatalogColumn[];
        if (!sameShape(shapeOf(t, rows), shape)) {
          this.shapes.delete(cacheKey);
          throw new ShapeChangedError(t.tableId);
        }
        const b = res[res.length - 1]!.rows[0] as { from: string | number; to: string | number; n: string | number };
        const bounds = { from: String(b.from), to: String(b.to) };
        const pending = Number(b.n);
        if (pending > 0) merged = await mergeFirst(client, t, shape, pending, this.engine!);
        begin = merged
          ? `${mergeStatements(t, shape, keyNames, batch.deleteMode === 'hard', this.engine!, bounds, false, merged.nestedLoops, this.mergeStatement).join('; ')}; `
          : '';
        end = `${watermarkToEndSql(t)}; ${end}`;
      }
      const plan = await this.applyStaged(client, t, shape, keyNames, events, truncates, stages, begin, end, batch, appliedAt);
      st.destroy = false;
      return () => {
        this.pendingDelta.delete(cacheKey);
        const mergedFirst = merged ? { merged } : {};
        return { plan, committedAt: Date.now(), ddl: ddl.statements, mode: 'apply', pending: { rows: 0, since: null }, ...mergedFirst };
      };
    }
  }

  /**
   * The append: the batch's rows into the changelog with the engine's bulk load, in one
   * transaction. An event the changelog holds already (a batch applied again after a crash, a
   * replay: invariant 2) fails the load on the changelog's primary key; the batch is then loaded
   * again with `INSERT … ON CONFLICT DO NOTHING` (PostgreSQL), so the first delivery stays.
   */
  private async appendToChangelog(
    client: pg.ClientBase,
    t: WarehouseTable,
    shape: SinkShape,
    events: readonly ChangeEvent[],
    appliedAt: string,
    shared: boolean,
  ): Promise<void> {
    const loader = this.deltaLoader();
    const table = qualified(t.schema, t.changelog);
    // Inside the batch's transaction (`shared`) the table's savepoint stands for BEGIN and ROLLBACK, and the batch commits.
    await client.query(shared ? `SAVEPOINT ${APPEND_SAVEPOINT}` : 'BEGIN');
    try {
      // A COPY takes its text straight from the events (no row arrays in between); another loader the rows.
      if (loader.loadCopyText) await loader.loadCopyText(client, table, shape.changelog, copyTextOf(events, shape.changelog, appliedAt));
      else
        await loader.load(
          client,
          table,
          shape.changelog,
          events.map((e) => changelogRow(e, shape.changelog, appliedAt)),
        );
      await client.query(shared ? `RELEASE SAVEPOINT ${APPEND_SAVEPOINT}` : 'COMMIT');
      return;
    } catch (err) {
      if ((err as { code?: unknown } | null)?.code !== UNIQUE_VIOLATION || this.engine === 'redshift') throw err;
      await client.query(shared ? `ROLLBACK TO SAVEPOINT ${APPEND_SAVEPOINT}` : 'ROLLBACK');
    }
    if (!shared) await client.query('BEGIN');
    const rows = events.map((e) => changelogRow(e, shape.changelog, appliedAt));
    const per = rowsPerStatement(shape.changelog.length);
    for (let i = 0; i < rows.length; i += per) {
      const chunk = rows.slice(i, i + per);
      await client.query(insertNewValuesSql(table, shape.changelog, chunk.length), chunk.flat());
    }
    if (!shared) await client.query('COMMIT');
  }

  private async applyStaged(
    client: pg.ClientBase,
    t: WarehouseTable,
    shape: SinkShape,
    key: string[],
    events: ChangeEvent[],
    truncates: ChangeEvent[],
    stages: StageNames,
    begin: string,
    end: string,
    batch: TableBatch,
    appliedAt: string,
  ): Promise<TablePlan> {
    const hard = batch.deleteMode === 'hard';
    const dataCols = shape.mirror.filter((c) => !key.includes(c) && !c.startsWith('_cdc_'));

    // Append the events the changelog lacks and read what the sink holds for their keys, then the
    // table's truncate position. A batch with a truncate locks the mirror first; the others read
    // the mirror (a conflicting lock, held to COMMIT) before the truncate guard, so a truncate of
    // another shard's applier is either wholly visible to this apply or waits for its COMMIT.
    // Handovers (primary-key changes whose insert lacks columns): an apply that brings one, or
    // that truncates, locks the handover table first; the others look whether it holds anything
    // and lock it then (what it holds for their keys was written by their own shard, earlier).
    const needs = needsHandover(events);
    const statements: string[] = [];
    if (shape.handover && (needs || truncates.length > 0)) statements.push(lockHandoverSql(t));
    if (truncates.length > 0) statements.push(lockMirrorSql(t));
    statements.push(appendChangelogSql(t, key, shape.changelog, stages));
    const at = { state: -1, truncation: -1, count: -1 };
    // The look at the handover table comes before the stored state: if an apply of another shard
    // completes a held key of this batch in between, the stored state read after sees its row.
    if (shape.handover && !needs && truncates.length === 0) at.count = statements.push(countHandoverSql(t)) - 1;
    at.state = statements.push(storedStateSql(t, key, shape.deletedKeys, stages)) - 1;
    if (shape.truncations) at.truncation = statements.push(storedTruncationSql(t)) - 1;
    const results = (await client.query({ text: `${begin}${statements.join('; ')}`, types: RAW_TEXT })) as unknown as pg.QueryResult[];
    const offset = results.length - statements.length;
    const truncatedAt =
      at.truncation >= 0 ? ((results[offset + at.truncation]!.rows[0] as { _cdc_position: string | null } | undefined)?._cdc_position ?? null) : null;
    let stateRows = results[offset + at.state]!.rows as { _cdc_idx: string; _cdc_position: string; _cdc_deleted: unknown }[];
    let locked = shape.handover && (needs || truncates.length > 0);
    if (at.count >= 0 && Number((results[offset + at.count]!.rows[0] as { n: string }).n) > 0) {
      // Lock, then read the keys' stored state again: an apply that held the lock meanwhile may
      // have completed a held key of this batch (written its mirror row).
      const again = (await client.query({
        text: `${lockHandoverSql(t)}; ${storedStateSql(t, key, shape.deletedKeys, stages)}`,
        types: RAW_TEXT,
      })) as unknown as pg.QueryResult[];
      stateRows = again[again.length - 1]!.rows as typeof stateRows;
      locked = true;
    }
    const stored = new Map<string, StoredState>();
    for (const r of stateRows) {
      const ev = events[Number(r._cdc_idx)];
      if (!ev) continue;
      const k = keyText(ev.key);
      const prev = stored.get(k);
      if (!prev || r._cdc_position > prev.position) stored.set(k, { position: r._cdc_position, deleted: isTrue(r._cdc_deleted) });
    }
    const handover = locked
      ? readHandover((await client.query({ text: readHandoverSql(t), types: RAW_TEXT })).rows as HandoverRow[], batch)
      : { donors: new Map<string, Row>(), held: [] };

    // Full rows of the old keys of primary-key changes with undelivered columns and of the keys
    // of held events (rare); a held key's row also gives its stored state.
    const heldKeys = new Map(handover.held.map((e) => [keyText(e.key), e.key]));
    const wanted = new Map<string, Row>([...oldKeysNeeded([...events, ...handover.held], key).map((k) => [keyText(k), k] as const), ...heldKeys]);
    const oldKeys = [...wanted.values()];
    const storedRows = new Map<string, StoredRow>();
    if (oldKeys.length > 0) {
      const res = await client.query({
        text: mirrorRowsSql(t, key, oldKeys.length),
        values: oldKeys.flatMap((k) => key.map((c) => toParam(k[c]))),
        types: RAW_TEXT,
      });
      for (const r of res.rows as Record<string, string | null>[]) {
        const old = oldKeys[Number(r._cdc_idx)];
        if (!old) continue;
        const values: Row = {};
        for (const c of dataCols) values[c] = r[c] ?? null;
        const row = { position: String(r._cdc_position), deleted: isTrue(r._cdc_deleted), values };
        storedRows.set(keyText(old), row);
        if (heldKeys.has(keyText(old)) && !stored.has(keyText(old))) stored.set(keyText(old), { position: row.position, deleted: row.deleted });
      }
    }

    const plan = planTable({
      events: [...events, ...truncates],
      keyColumns: key,
      stored,
      storedRows,
      truncatedAt,
      donors: handover.donors,
      held: handover.held,
    });
    if (locked && plan.donors.length > 0) {
      // A donor whose insert half was already planned (the changelog has it: it was applied, or
      // dropped as older than its key's row) and is not held waits for nothing: it is not kept
      // (docs/primary-key-changes.md, "Donors nobody takes").
      const heldAt = new Set(plan.held.map((e) => e.position));
      const positions = [...new Set(plan.donors.map((d) => d.position))];
      const res = await client.query({ text: partnerInsertsSql(t, positions.length), values: positions, types: RAW_TEXT });
      const planned = new Set((res.rows as { _cdc_position: string }[]).map((r) => r._cdc_position).filter((p) => !heldAt.has(p)));
      plan.donors = plan.donors.filter((d) => !planned.has(d.position));
    }
    if (locked) {
      await client.query(clearHandoverSql(t));
      const rows = handoverRows(plan.held, plan.donors, key, appliedAt);
      if (rows.length > 0) await insertStageLoader.load(client, qualified(t.schema, t.handover), HANDOVER_COLUMNS, rows);
    }

    // Truncates first: record every one (idempotent), and empty the mirror at the newest when it is above the stored one.
    for (const e of plan.truncates) {
      await client.query(recordTruncationSql(t), [e.position, e.commitTs, e.txId, String(e.schemaVersion), appliedAt]);
    }
    if (plan.truncate) {
      for (const sql of truncateMirrorSql(t, { hard, deletedKeys: shape.deletedKeys }))
        await client.query(sql, hard ? [plan.truncate.position] : [plan.truncate.position, plan.truncate.commitTs, appliedAt]);
    }

    // Stage the writes (one per key) and apply them, then COMMIT.
    const sets = new Map<string, UpdateSet>();
    const stageRows: (string | null)[][] = [];
    for (const w of plan.writes) {
      const sig = setSignature(w);
      let set = sets.get(sig);
      if (!set) {
        set = { id: sets.size, columns: w.full ? dataCols : dataCols.filter((c) => c in w.values) };
        sets.set(sig, set);
      }
      const row: (string | null)[] = [];
      for (const c of shape.mirror) {
        if (key.includes(c)) row.push(toParam(w.key[c]));
        else if (c === CdcColumn.POSITION) row.push(w.position);
        else if (c === CdcColumn.DELETED) row.push(w.deleted ? 'true' : 'false');
        else if (c === CdcColumn.DELETED_AT) row.push(w.deleted ? w.deletedAt : null);
        else if (c === CdcColumn.APPLIED_AT) row.push(appliedAt);
        else row.push(toParam(w.values[c]));
      }
      row.push(String(set.id));
      stageRows.push(row);
    }
    let tail = end;
    if (stageRows.length > 0) {
      await this.loader.load(client, quoteIdent(stages.writes), [...shape.mirror, CdcColumn.SET], stageRows);
      const statements = applyStageSql(t, {
        stages,
        key,
        mirrorColumns: shape.mirror,
        sets: [...sets.values()],
        hard,
        deletedKeys: shape.deletedKeys,
        truncations: shape.truncations,
      });
      tail = `${statements.join('; ')}; ${end}`;
    }
    await client.query(tail);
    return plan;
  }
}

/**
 * Moves `t`'s objects of the old layout (and those of another table holding its view's name) to
 * their names, in one transaction (`planLegacyMigration`); whether `t`'s own moved. Throws
 * `LegacyLayoutError` when they cannot be moved here.
 */
async function migrateLegacyLayout(client: pg.ClientBase, t: WarehouseTable): Promise<boolean> {
  const probe = legacyProbeSql(t);
  const found = foundRelations((await client.query<{ table_schema: string; table_name: string; table_type: string }>(probe.text, probe.values)).rows);
  const plan = planLegacyMigration(t, found);
  if (plan.statements.length === 0) return false;
  try {
    await client.query(`BEGIN; ${plan.statements.join('; ')}; COMMIT`);
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    // Another process moved them first (its rename took the name, or the old one is gone): the shape read next finds them.
    const code = (err as { code?: unknown } | null)?.code;
    if (!isConcurrentDdlClash(err) && code !== UNDEFINED_TABLE) throw err;
  }
  return plan.own;
}

/**
 * Moves `t` from the layout with a delta table to the changelog-with-watermark layout
 * (`migrateDeltaTableSql`) and returns the shape after it. Another process that moved it first
 * makes this one's statements fail; the shape read then shows the new layout.
 */
async function migrateDeltaTable(client: pg.ClientBase, t: WarehouseTable, known: SinkShape, key: readonly string[]): Promise<SinkShape> {
  const sql = migrateDeltaTableSql(t, {
    key,
    changelogColumns: known.changelog,
    mirrorColumns: known.mirror,
    guards: { deletedKeys: known.deletedKeys, truncations: known.truncations },
  });
  try {
    await client.query(`BEGIN; ${sql.join('; ')}; COMMIT`);
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    const after = await readShape(client, t);
    if (!after.seq) throw err;
    return after;
  }
  return readShape(client, t);
}

/** Whether `t` names a table's live objects (not a rebuild's shadow or another schema's). */
function isLiveTable(t: WarehouseTable): boolean {
  const live = warehouseTable(t.source, t.tableId);
  return t.schema === live.schema && t.mirror === live.mirror;
}

/** SQLSTATE of a relation that does not exist. */
const UNDEFINED_TABLE = '42P01';

/** Redshift when its version string says so, else PostgreSQL. */
async function detectEngine(client: pg.ClientBase): Promise<WarehouseEngine> {
  const res = await client.query<{ version: string }>('SELECT version() AS version');
  return /redshift/i.test(res.rows[0]?.version ?? '') ? 'redshift' : 'postgres';
}

/** The first PostgreSQL with `MERGE` (`server_version_num`). */
const MERGE_STATEMENT_VERSION = 150000;

/** PostgreSQL's `server_version_num` (not asked of Redshift, which predates it). */
async function serverVersionNum(client: pg.ClientBase): Promise<number> {
  const res = await client.query<{ num: string }>("SELECT current_setting('server_version_num') AS num");
  return Number(res.rows[0]?.num ?? 0);
}

/** The sink's shape changed under this apply (another process added a column): the apply starts again. */
class ShapeChangedError extends CdcError {
  constructor(table: string) {
    super('SHAPE_CHANGED', `the warehouse tables of ${table} changed while this apply was starting`);
  }
}

/**
 * Whether an event can go to the delta as it is: its row is fully known from the event alone.
 * Inserts and snapshots are full images (absent columns are NULL); an update must carry every
 * data column of the sink and list none as missing; a delete must hand nothing over. Anything
 * else (an update without an unchanged TOAST value, a primary-key change's halves that carry a
 * handover, a truncate) needs the fold over the base (docs/warehouse-apply.md).
 */
export function appendable(e: ChangeEvent, dataColumns: readonly string[]): boolean {
  switch (e.op) {
    case 'insert':
    case 'snapshot':
      return e.missing.length === 0;
    case 'update': {
      // A lazy event answers from its after image's names (`in` also finds what an object's prototype has).
      const names = appendableOf(e)?.shape.afterNames;
      if (names) return dataColumns.every((c) => names.includes(c) || c in Object.prototype);
      return e.missing.length === 0 && e.after !== null && dataColumns.every((c) => c in e.after!);
    }
    case 'delete':
      return (e.handover?.length ?? 0) === 0;
    default:
      return false;
  }
}

/** The append's COPY text: from the events' texts when every event is a lazy one (`appendableCopyText`), else from the events. */
function copyTextOf(events: readonly ChangeEvent[], columns: readonly string[], appliedAt: string): Iterable<Buffer> {
  const taken: AppendableEvent[] = [];
  for (const e of events) {
    const a = appendableOf(e);
    if (a === undefined) return changelogCopyText(events, columns, appliedAt);
    taken.push(a);
  }
  return appendableCopyText(taken, columns, appliedAt);
}

/** The merge statements for the sink's current shape (`mergeSql`; `intoEmpty`: `mergeIntoEmptySql`, for a base found empty under the delta's lock). */
function mergeStatements(
  t: WarehouseTable,
  shape: SinkShape,
  key: readonly string[],
  hard: boolean,
  engine: WarehouseEngine,
  pending: PendingBounds,
  intoEmpty = false,
  nestedLoops = false,
  mergeStatement = false,
): string[] {
  const o = {
    key,
    mirrorColumns: shape.mirror,
    changelogColumns: shape.changelog,
    hard,
    deletedKeys: shape.deletedKeys,
    truncations: shape.truncations,
    engine,
    pending,
  };
  // PostgreSQL 15+, soft mode without deleted keys: one `MERGE` (docs/warehouse-apply.md, "The merge").
  const merge = intoEmpty ? mergeIntoEmptySql(t, o) : mergeStatement && oneStatementMergeFits(o) ? oneStatementMergeSql(t, o) : mergeSql(t, o);
  // PostgreSQL only: a merge is a large set operation, but a base analysed while small (a new
  // table) makes the planner pick nested loops whose inner scans re-read the rows the statement
  // itself inserts (quadratic: measured minutes for 100,000 rows). Hash joins for the merge,
  // unless the base is known to be large against the delta (`mergeMayUseNestedLoops`).
  return engine === 'postgres' && !nestedLoops ? ['SET LOCAL enable_nestloop = off', ...merge, 'SET LOCAL enable_nestloop = on'] : merge;
}

/**
 * The merge an apply runs first (before a schema change or a full apply), of the `rows` the delta
 * holds under its lock: whether it may use nested loops, decided as `merge` decides it (`nestedLoopsFit`).
 */
async function mergeFirst(
  client: pg.ClientBase,
  t: WarehouseTable,
  shape: SinkShape,
  rows: number,
  engine: WarehouseEngine,
): Promise<{ rows: number; nestedLoops: boolean }> {
  return { rows, nestedLoops: rows > 0 && engine === 'postgres' && (await nestedLoopsFit(client, t, shape, rows)) };
}

/** PostgreSQL: whether the merge of `deltaRows` into `t`'s base may use nested loops (`mergeMayUseNestedLoops`, from the planner's estimates of the base tables it writes). */
async function nestedLoopsFit(client: pg.ClientBase, t: WarehouseTable, shape: SinkShape, deltaRows: number): Promise<boolean> {
  const names = [t.mirror, ...(shape.deletedKeys ? [t.deletedKeys] : [])];
  const rows = new Map(
    (await client.query<{ _cdc_kind: string; rows: number | string | null }>(baseEstimateSql(), [t.schema, names])).rows.map((r) => [
      r._cdc_kind,
      r.rows === null ? null : Number(r.rows),
    ]),
  );
  return mergeMayUseNestedLoops(
    deltaRows,
    names.map((n) => rows.get(n) ?? null),
  );
}

/**
 * The changelog rows a merge absorbs, read under its lock: from the watermark up to `upTo` (read
 * before, with every row at or below it committed) or, when appends are kept out, the changelog's end.
 */
async function pendingBounds(client: pg.ClientBase, t: WarehouseTable, upTo: string | null): Promise<PendingBounds & { n: number }> {
  const r = (await client.query<{ from: string | number; to: string | number; n: string | number }>(pendingBoundsSql(t, upTo ?? undefined))).rows[0]!;
  const from = String(r.from);
  const to = String(r.to);
  if (BigInt(to) <= BigInt(from)) return { from, to: from, n: 0 };
  return { from, to, n: Number(r.n) };
}

/** The savepoint each table's data phase runs under in the batch's transaction (`applyTables`), and the one an append's bulk load runs under there. */
const TABLE_SAVEPOINT = '_cdc_table';
const APPEND_SAVEPOINT = '_cdc_append';

/** A table's batch with its sink in shape (its DDL done): what its data phase needs. */
interface PreparedTable {
  batch: TableBatch;
  t: WarehouseTable;
  cacheKey: string;
  /** The batch's distinct row events, and its truncates. */
  events: ChangeEvent[];
  truncates: ChangeEvent[];
  lifecycle: StageLifecycle;
  key: SinkColumn[];
  shape: SinkShape;
  ddl: string[];
  /** The delta merged before a schema change, if any. */
  merged: { rows: number; nestedLoops: boolean } | undefined;
}

/** Where an apply's connection stands, for its error handling: in a transaction; to be dropped (an error may have left it unusable). */
interface TxState {
  inTransaction: boolean;
  destroy: boolean;
}

/** Whether an error is about a table (a server error, or one of ours) rather than the connection: the connection is still usable. */
function aboutTable(err: unknown): boolean {
  return err instanceof CdcError || typeof (err as { code?: unknown } | null)?.code === 'string';
}

/** The error an apply reports: a refused value as `ValueRejectedError` (the applier isolates the record), any other as it is. */
function tableError(err: unknown): unknown {
  if (!isValueRejection(err) || err instanceof CdcError) return err;
  const e = err as { code: string; message: string; column?: string };
  return new ValueRejectedError(e.code, e.column ? `${e.message} (column ${e.column})` : e.message);
}

/** SQLSTATE of a primary-key (unique) violation. */
const UNIQUE_VIOLATION = '23505';
