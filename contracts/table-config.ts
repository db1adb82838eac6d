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
}
