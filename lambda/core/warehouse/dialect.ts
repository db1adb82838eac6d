/**
 * The warehouse dialect: what differs per engine, behind one port (docs/warehouse-apply.md,
 * "Dialects"). Pure: a dialect names types and builds statement text; the adapters run them.
 *
 * Everything else of the warehouse apply is shared: the layout (changelog, base, guards, view),
 * the plan of a batch (lambda/core/sink/apply-plan.ts), the admission, the isolation of a refused
 * value, the holds. A dialect says only:
 * - which column type a source type gets, and whether a column the warehouse already holds can
 *   take a new schema version's values (`columnType`, `accepts`: schema evolution per engine);
 * - what happens to a value the engine cannot hold (`valueVerdict`: a declared, per-column
 *   policy, never a silent coercion);
 * - whether quoted identifiers fold to lower case (`foldsIdentifiers`);
 * - how a batch lands in the table's changelog (`landing`: rows streamed with `COPY … FROM
 *   STDIN`, or objects staged in S3 and loaded with `COPY … FROM 's3://…' MANIFEST`);
 * - the statements of the merge and of the view (`mergeSql`, `viewSql`), and the lock a merge
 *   opens its transaction with (`beginMergeSql`).
 *
 * The PostgreSQL dialect is lambda/core/warehouse/postgres-dialect.ts.
 */
import type { MergeSqlOptions, OverlayGuards, WarehouseEngine, WarehouseTable } from './warehouse-sql.ts';

/** What a dialect makes of a source column type: the warehouse column type, or why the column is refused. */
export type ColumnTypeChoice = { type: string } | { refused: string };

/**
 * What the warehouse does with a value of a column it cannot hold as it is (`valueVerdict`).
 * - `refuse-row`: the row is refused loudly (a dead letter naming the column and why); the
 *   table goes on;
 * - `null-with-marker`: the column gets NULL and the row's marker column names the column and why.
 */
export type ValuePolicy = 'refuse-row' | 'null-with-marker';

/** A value's fate under a dialect: kept as its text, or the declared policy with its reason. */
export type ValueVerdict = { keep: true } | { keep: false; policy: ValuePolicy; reason: string };

/** How a batch lands in the changelog. */
export type Landing =
  /** `COPY <changelog> (cols) FROM STDIN` on the applier's session (PostgreSQL). */
  | 'copy-stdin'
  /** Compressed objects in an S3 staging prefix, loaded by `COPY … FROM 's3://…' MANIFEST` (Redshift). */
  | 's3-manifest';

/** The port: one implementation per engine. */
export interface WarehouseDialect {
  readonly engine: WarehouseEngine;
  /** Whether the engine folds quoted identifiers to lower case (Redshift by default; docs/onboarding.md, "Names"). */
  readonly foldsIdentifiers: boolean;
  /** How a batch lands in the changelog. */
  readonly landing: Landing;
  /** The warehouse column type of a source type (PostgreSQL's name, or DMS's), or why the column is refused. */
  columnType(sourceType: string | null): ColumnTypeChoice;
  /**
   * Whether a column the warehouse holds with type `have` (as `catalogType` reads it) takes the
   * values of a column `columnType` gives `want` for, unchanged. False: a type conflict (the table
   * is held, docs/schema-drift.md).
   */
  accepts(have: string, want: string): boolean;
  /** Whether a value (its PostgreSQL text) fits a column of warehouse type `type`, and if not, the column's policy. */
  valueVerdict(type: string, text: string): ValueVerdict;
  /** Opens a merge's transaction and takes its lock (merges of one table are serialised; appends go on where the engine allows). */
  beginMergeSql(t: WarehouseTable): string;
  /** The merge's statements, run in the transaction `beginMergeSql` opened. */
  mergeSql(t: WarehouseTable, o: MergeSqlOptions): string[];
  /** The view consumers query: the base overlaid with the unmerged changes, deletes hidden. */
  viewSql(t: WarehouseTable, mirrorColumns: readonly string[], key: readonly string[], guards: OverlayGuards): string;
}
