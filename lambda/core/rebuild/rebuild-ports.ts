/**
 * What a rebuild of one table of a warehouse sink is asked, what it reports, and the ports it runs
 * over (docs/rebuild.md): the table's history (the archive, then the change log's stream), the
 * warehouse objects of the rebuild (live, shadow, retired) and the live apply code writing into
 * the shadow. lambda/adapters/rebuilder.ts implements them over PostgreSQL, S3 and Kinesis.
 */
import type { ControlPlane, RebuildRun } from '../shared/control-plane.ts';
import type { ChangeEvent } from '../shared/event.ts';
import type { Position } from '../shared/position.ts';
import type { MergeTarget, TableBatch } from '../warehouse/warehouse-port.ts';
import type { WarehouseTable } from '../warehouse/warehouse-sql.ts';
import type { DiffResult, DiffRow } from './rebuild.ts';
import type { HistoryCheck, ReplayRange, ReplayStats } from './replay.ts';

export interface RebuildRequest {
  source: string;
  table: string;
  sink: string;
  /** Replay from this position (inclusive). @default the beginning of the history */
  from?: Position;
  /** Build and diff, do not swap. */
  rehearse: boolean;
  /** Who asked (audit). */
  actor: string;
}

/** What a rebuild did. */
export interface RebuildReport {
  run: RebuildRun;
  stats: ReplayStats;
  /** Where the diff is kept (`schema.table`). */
  diffTable: string;
  diff: DiffRow[];
  /** Events skipped because they are not valid against the registry (they were dead letters live). */
  skipped: number;
  /** Time spent applying into the shadow (ms), and throttle sleep (ms). */
  applyMs: number;
  sleptMs: number;
}

/** The table's history: the archive first, then the change log's stream (lambda/adapters/replay-reader.ts). */
export interface RebuildReplay {
  checkHistory(sourceId: string, table: string): Promise<HistoryCheck>;
  read(range: ReplayRange, history?: HistoryCheck): Promise<{ events: ChangeEvent[]; stats: ReplayStats; resume: Map<string, string | null> }>;
  readStream(range: ReplayRange, start: ReadonlyMap<string, string | null>): Promise<{ events: ChangeEvent[]; resume: Map<string, string | null> }>;
  /**
   * `read`'s events in `read`'s order, in chunks handed over while the archive is still being read
   * (the bulk is applied meanwhile); its return value is `read`'s stats and resume. Throws
   * `ReplayOrderError` (replay-order.ts) when the order cannot be kept streaming: the rebuild then uses `read`.
   */
  stream?(range: ReplayRange, history?: HistoryCheck): AsyncGenerator<ChangeEvent[], { stats: ReplayStats; resume: Map<string, string | null> }>;
}

/** The warehouse objects of one table's rebuild (lambda/adapters/warehouse-rebuild-pg.ts). */
export interface RebuildTarget {
  readonly live: WarehouseTable;
  readonly shadow: WarehouseTable;
  readonly retired: WarehouseTable;
  /** Drops the shadow and retired objects an earlier rebuild left. */
  dropLeftovers(): Promise<unknown>;
  livePosition(): Promise<Position | null>;
  shadowExists(): Promise<boolean>;
  retiredPosition(): Promise<Position | null>;
  /** The diff of two mirrors (default live and shadow), keys above `upTo` left out. */
  diff(upTo: Position, client?: undefined, a?: WarehouseTable, b?: WarehouseTable): Promise<DiffResult>;
  /** Keeps the diff in a table of the warehouse; returns its `schema.table`. */
  keepDiff(rebuildId: string, diff: DiffResult): Promise<string>;
  /** Locks the live table, runs `catchUp`, renames the shadow in; returns the live position it was swapped at. */
  swap(catchUp: (upTo: Position | null) => Promise<void>): Promise<Position | null>;
  dropRetired(): Promise<void>;
}

/** The live apply code (lambda/adapters/warehouse-pg.ts), pointed at the shadow. */
export interface RebuildWarehouse {
  applyTable(batch: TableBatch): Promise<unknown>;
  merge(target: MergeTarget, options?: { freshBase?: boolean }): Promise<unknown>;
  /** Forgets the table shapes it remembers (the objects were dropped or renamed). */
  forgetShapes(): void;
}

export interface RebuildPorts {
  controlPlane: ControlPlane;
  replay: RebuildReplay;
  /** The sink's warehouse (one per pool: it remembers its connections' stage tables). */
  warehouse(): RebuildWarehouse;
  /** The rebuild objects of a live table. */
  target(live: WarehouseTable): RebuildTarget;
  /** Events per shadow apply. @default 1000 */
  batchSize?: number;
  /** Share of wall time the bulk replay may apply (the rest it sleeps). @default 0.5 */
  duty?: number;
  now: () => Date;
  /** How long a claimed rebuild slot may go without a report before it may be taken over. @default REBUILD_STALE_AFTER_MS (30 minutes) */
  staleAfterMs?: number;
  /** Crash injection for tests: called before each step with its name; a throw aborts the rebuild there. */
  step?: (name: string) => void | Promise<void>;
}
