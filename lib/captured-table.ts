/** What a sink does with a deleted row (invariant 7). */
export enum DeleteMode {
  /** The mirror keeps a tombstone (`_cdc_deleted`, deleted-at, position); the view hides it. */
  SOFT = 'soft',
  /** The mirror row is removed; the key's last position is still remembered against late events. */
  HARD = 'hard',
}

/** Options of `CapturedTable.of`. */
export interface CapturedTableOptions {
  /**
   * Columns that enter the change log only as a SHA-256 hash (a DMS hash-mask rule at capture).
   * Only bounded text columns (`varchar(n)`, `char(n)`) can be masked by DMS; exclude `text` or
   * `json` columns instead.
   * @default - none
   */
  readonly mask?: string[];
  /**
   * Columns that never enter the change log (a DMS `remove-column` rule at capture).
   * @default - none
   */
  readonly exclude?: string[];
  /**
   * How sinks apply deletes.
   * @default DeleteMode.SOFT
   */
  readonly deletes?: DeleteMode;
  /**
   * Primary-key columns, in key order. DMS records do not name the key, so it is declared here.
   * A key column can be neither masked nor excluded.
   * @default ['id']
   */
  readonly primaryKey?: string[];
  /**
   * Copy the rows the table already holds when it is first captured (a lock-free, chunked
   * snapshot stitched with the stream, paced against the source's budget; docs/snapshot.md).
   * @default true
   */
  readonly snapshot?: boolean;
}

/**
 * A source table to capture, with its column rules. Validated by the `CdcSource` that captures
 * it, whose construct path then appears in the error.
 */
export class CapturedTable {
  /**
   * A table by its id in the source, `schema.table`.
   *
   * @example CapturedTable.of('public.customers', { mask: ['email'], exclude: ['ssn'] })
   */
  static of(tableId: string, options: CapturedTableOptions = {}): CapturedTable {
    if (typeof tableId !== 'string') throw new Error(`CapturedTable.of needs a table id 'schema.table' (a string), got ${tableId === undefined ? 'undefined' : typeof tableId}`);
    return new CapturedTable(tableId, options);
  }

  /** `schema.table`. */
  readonly tableId: string;
  /** Masked columns. */
  readonly mask: string[];
  /** Excluded columns. */
  readonly exclude: string[];
  /** Delete handling in sinks. */
  readonly deletes: DeleteMode;
  /** Primary-key columns. */
  readonly primaryKey: string[];
  /** Whether existing rows are snapshotted when the table is first captured. */
  readonly snapshot: boolean;

  private constructor(tableId: string, options: CapturedTableOptions) {
    this.tableId = tableId;
    this.mask = [...(options.mask ?? [])];
    this.exclude = [...(options.exclude ?? [])];
    this.deletes = options.deletes ?? DeleteMode.SOFT;
    this.primaryKey = [...(options.primaryKey ?? ['id'])];
    this.snapshot = options.snapshot ?? true;
  }

  /** The schema part of the table id. */
  get schemaName(): string {
    return this.tableId.split('.')[0] ?? '';
  }

  /** The table part of the table id. */
  get tableName(): string {
    return this.tableId.split('.')[1] ?? '';
  }
}
