/**
 * The warehouse port: what the apply (lambda/core/warehouse/warehouse-apply.ts) asks of a warehouse
 * writer, and what it hands it and gets back (docs/warehouse-apply.md). `PgWarehouse`
 * (lambda/adapters/warehouse-pg.ts) and `RedshiftWarehouse` (lambda/adapters/warehouse-redshift.ts)
 * implement it.
 */
import type { DeleteMode, SchemaVersion } from '../shared/control-plane.ts';
import type { ChangeEvent } from '../shared/event.ts';
import type { TablePlan } from '../sink/apply-plan.ts';
import type { WarehouseTable } from './warehouse-sql.ts';

/** One table's events of one batch, already validated against the registry. */
export interface TableBatch {
  source: string;
  /** Table id `schema.table`. */
  table: string;
  deleteMode: DeleteMode;
  /** The schema versions the events were read with, by version number. */
  schemas: ReadonlyMap<number, SchemaVersion>;
  events: readonly ChangeEvent[];
  /** Stamped as `_cdc_applied_at`. */
  appliedAt: Date;
  /** Where the table's warehouse objects are. @default warehouseTable(source, table) */
  target?: WarehouseTable;
  /**
   * The target is a rebuild's fresh shadow (no readers; docs/rebuild.md): while it is unfolded (its
   * mirror, delta, deleted keys, truncations and handover table hold no row), a batch that would be
   * appended to the delta is appended to the changelog instead, and the base is computed from the
   * changelog once, by the next full apply or merge (docs/warehouse-apply.md, "A rebuild's shadow").
   * Same admission, plan, column checks and rows as the append; only where the rows land differs.
   * PostgreSQL only (elsewhere ignored). Never for a table that is read: its view does not show
   * unfolded rows. @default false
   */
  freshShadow?: boolean;
}

/** Rows this process appended to a table's delta since it last saw it merged, and when the first of them was appended (ms). */
export interface PendingDelta {
  rows: number;
  since: number | null;
}

export interface TableApplyResult {
  plan: TablePlan;
  /** `Date.now()` right after COMMIT returned. */
  committedAt: number;
  /** DDL statements this apply ran (empty when the sink was already in shape). */
  ddl: string[];
  /**
   * `append`: the batch was appended to the delta (the critical path; visible in the view at
   * COMMIT, merged later). `apply`: the batch needed the full apply (a truncate, a primary-key
   * change whose insert lacks columns, an update that does not carry every column), which merges
   * the delta first and writes the base directly (docs/warehouse-apply.md).
   */
  mode: 'append' | 'apply';
  /** What this process appended to the table's delta since it last merged it (an estimate: other processes append too). */
  pending: PendingDelta;
  /**
   * The delta this apply merged first, when it did: before a schema change, or before a full
   * apply. `nestedLoops`: whether the merge let the planner use nested loops (PostgreSQL, a base
   * large against the delta: docs/warehouse-apply.md, "What a merge costs").
   */
  merged?: { rows: number; nestedLoops: boolean };
}

/** What became of one table of `Warehouse.applyTables`: its result once the batch committed, or the error about it (nothing of it committed). */
export type TableOutcome = { result: TableApplyResult } | { error: unknown };

/** The table a merge is for. */
export interface MergeTarget {
  source: string;
  table: string;
  deleteMode: DeleteMode;
  /** The table's primary-key columns (of its current schema version). */
  key: readonly string[];
  /** @default warehouseTable(source, table) */
  target?: WarehouseTable;
}

/** What a merge did. */
export interface MergeResult {
  /** Delta rows compacted into the base (0: nothing to merge). */
  rows: number;
  /** `Date.now()` right after COMMIT returned. */
  committedAt: number;
  /** Wall time of the merge transaction, ms. */
  ms: number;
}

/** What the delta of a table holds. */
export interface DeltaStats {
  rows: number;
  /** `_cdc_applied_at` of its oldest row, ms (null: empty). */
  oldest: number | null;
}

/** How a writer classifies an error of `applyTable`. */
export type WriteErrorKind =
  /** A sink column's type cannot take the schema version's (or the type is not carried): hold the table. */
  | { kind: 'type-conflict'; message: string }
  /** The warehouse refused a value: isolate the events, dead-letter the refused one. */
  | { kind: 'value-rejected' }
  /** An error about the table that a retry will not fix: hold the table, audited. */
  | { kind: 'persistent'; code: string };

/** The warehouse as the apply needs it (the port; `PgWarehouse` in lambda/adapters/warehouse-pg.ts implements it). */
export interface Warehouse {
  /** Writes one table's batch in one transaction (append to the delta, or the full apply). */
  applyTable(batch: TableBatch): Promise<TableApplyResult>;
  /**
   * Writes the tables of one batch in ONE warehouse transaction where the engine allows it
   * (docs/warehouse-apply.md, "One transaction per batch"): an outcome per batch, in order. An
   * error about one table leaves it out (its outcome holds the error) and the others commit; an
   * error of the whole (a broken connection) is thrown and nothing is committed. Without it, each
   * table is written by `applyTable`.
   */
  applyTables?(batches: readonly TableBatch[]): Promise<TableOutcome[]>;
  /**
   * Compacts the table's delta into its base in one transaction. Appends go on meanwhile where the
   * engine allows it, unless `stopAppends` (a delta that outgrew its merges: `stopsAppends`).
   */
  merge(target: MergeTarget, options?: { stopAppends?: boolean }): Promise<MergeResult>;
  /** What the table's delta holds (all processes' appends). */
  deltaStats(target: MergeTarget): Promise<DeltaStats>;
  /** How to treat an error `applyTable` threw; null: transient (the records are retried). */
  classifyError(err: unknown): WriteErrorKind | null;
  /** Whether the warehouse folds quoted names to lower case (Redshift): then of two tables whose names fold alike, the second is refused (lambda/core/shared/name-folding.ts). */
  foldsNames(): Promise<boolean>;
}
