/**
 * The captured-table settings the constructs write into `CDC_TABLE_CONFIG` (`EnvName.TABLE_CONFIG`)
 * and the handlers parse (lambda/core/table-config.ts): one definition of the shape and of the
 * delete modes for both sides. Dependency-free on purpose.
 */

/** How sinks apply deletes (invariant 7, docs/architecture.md §2): the values of `DeleteMode` in lib/ and lambda/core/. */
export const DELETE_MODES = ['soft', 'hard'] as const;
/** One of `DELETE_MODES`. */
export type DeleteModeValue = (typeof DELETE_MODES)[number];

/** One entry of `CDC_TABLE_CONFIG`. */
export interface TableConfig {
  /** `schema.table` as named in the source. */
  table: string;
  /** Primary-key columns in key order, when declared (DMS records do not name the key). */
  key?: string[];
  deleteMode: DeleteModeValue;
  /** Columns that enter the log only as a hash. */
  mask: string[];
  /** Columns that never enter the log. */
  exclude: string[];
  /** Snapshot the table's existing rows when it is first captured (docs/snapshot.md). @default true */
  snapshot?: boolean;
  /** Per-event transforms (docs/transforms.md). @default none */
  transforms?: TableTransforms;
  /** How the table is captured: from the source's log, or by polling `pollColumn` (docs/polling.md). @default 'log' */
  capture?: TableCaptureMode;
  /** The monotonic modified-at (timestamp) or version (integer) column a polled table is read by. Required with `capture: 'poll'`. */
  pollColumn?: string;
}

/** How a table is captured: `log` (logical decoding / DMS) or `poll` (docs/polling.md). */
export const TABLE_CAPTURE_MODES = ['log', 'poll'] as const;
/** One of `TABLE_CAPTURE_MODES`. */
export type TableCaptureMode = (typeof TABLE_CAPTURE_MODES)[number];

/** A tenant column stamped into every row image (docs/transforms.md). */
export interface TenantStamp {
  /** The column written into every `after` image (text). */
  column: string;
  /** A constant, or a template with `{source}`, `{schema}`, `{table}`, `{tableId}`. */
  value: string;
}

/** Per-event transforms of one table (docs/transforms.md): applied in this order. */
export interface TableTransforms {
  /** Source column → sink type (`text`, `bigint`, `double precision`, `boolean`, `date`, `timestamptz`, `numeric(p,s)`). */
  coerce?: Record<string, string>;
  /** Source column → the name it has in the change log and every sink. */
  rename?: Record<string, string>;
  tenant?: TenantStamp;
}
