import { checkPropKinds, type PropKind } from './private/validate.ts';

/** What a sink does with a deleted row (invariant 7). */
export enum DeleteMode {
  /** The mirror keeps a tombstone (`_cdc_deleted`, deleted-at, position); the view hides it. */
  SOFT = 'soft',
  /** The mirror row is removed; the key's last position is still remembered against late events. */
  HARD = 'hard',
}

/** How a table is captured (docs/polling.md). */
export enum CaptureMode {
  /** From the source's log (DMS on AWS, the slot capture locally). */
  LOG = 'log',
  /**
   * By polling a modified-at timestamp or a trigger-maintained transaction-id (`xid8`) column, for
   * a table without log access (docs/polling.md). Deletes are not observable and ordering is the
   * column's.
   */
  POLL = 'poll',
}

/** A tenant column stamped into every row (docs/transforms.md). */
export interface TenantStamp {
  /** The column written into every row image (text). */
  readonly column: string;
  /** A constant, or a template with `{source}`, `{schema}`, `{table}`, `{tableId}`. */
  readonly value: string;
}

/** Per-event transforms of one table (docs/transforms.md), applied in this order: coerce, rename, tenant. */
export interface TableTransforms {
  /**
   * Source column → sink type: `text`, `bigint`, `double precision`, `boolean`, `date`,
   * `timestamptz` or `numeric(p,s)` (p ≤ 38). A value that does not coerce is dead-lettered with its reason.
   * @default - none
   */
  readonly coerce?: { [column: string]: string };
  /**
   * Source column → the name it has in the change log and every sink.
   * @default - none
   */
  readonly rename?: { [column: string]: string };
  /**
   * A tenant column stamped into every row.
   * @default - none
   */
  readonly tenant?: TenantStamp;
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
  /**
   * Per-event transforms: renames, coercions to a sink type, a tenant column (docs/transforms.md).
   * Changing them on a live table applies from the next position on; rows already in the sinks
   * keep the old shape until the table is re-snapshotted and the sinks rebuilt (`cdc rebuild`).
   * @default - none
   */
  readonly transforms?: TableTransforms;
  /**
   * How the table is captured. `CaptureMode.POLL` reads it by `pollColumn` with a scheduled function
   * in the VPC instead of DMS; its deletes are not observable (docs/polling.md).
   * @default CaptureMode.LOG
   */
  readonly capture?: CaptureMode;
  /**
   * The column a polled table is read by: a modified-at `timestamptz`/`timestamp` set by the
   * server clock, or an `xid8` set by a trigger to `pg_current_xact_id()`. An integer version
   * column is refused (it can lose changes, docs/polling.md). Required with `CaptureMode.POLL`.
   * @default - none
   */
  readonly pollColumn?: string;
  /**
   * Acknowledges a `mask` or `exclude` added to this table while it is already captured: who and
   * why, recorded in the audit log. Without it the deployment that adds the rule is refused, because
   * the change log, the archive and the sinks keep the clear values captured before
   * (docs/masking.md, "Adding a rule to a live table").
   * @default - none (a rule added to a captured table is refused)
   */
  readonly acknowledgeLateRules?: string;
}

/** Options of `CapturedTable.matching`: the settings every matched table gets, and the tables left out. */
export interface CapturedTableRuleOptions {
  /**
   * Patterns of tables the rule leaves out (`public.audit_*`); each becomes a DMS selection rule
   * with `exclude`. A table left out is named (`table-excluded` in the audit log), never captured.
   * @default - none
   */
  readonly exclude?: string[];
  /**
   * Columns masked in every matched table that has them (a DMS hash-mask rule by pattern).
   * @default - none
   */
  readonly mask?: string[];
  /**
   * Columns excluded from every matched table that has them (a DMS `remove-column` by pattern).
   * @default - none
   */
  readonly excludeColumns?: string[];
  /**
   * How sinks apply deletes of the matched tables.
   * @default DeleteMode.SOFT
   */
  readonly deletes?: DeleteMode;
  /**
   * Key columns of every matched table. DMS records do not name the key, so it is declared; a
   * matched table whose primary key is not this is named ineligible by the catalog scan.
   * @default ['id']
   */
  readonly primaryKey?: string[];
  /**
   * Snapshot a matched table's existing rows when it joins.
   * @default true
   */
  readonly snapshot?: boolean;
  /**
   * Acknowledges a `mask` or `excludeColumns` added to the rule while tables it matches are captured.
   * @default - none (refused)
   */
  readonly acknowledgeLateRules?: string;
}

/** The options' kinds, for callers without the type checker (`checkPropKinds`). */
const TABLE_OPTION_KINDS = {
  mask: 'string[]',
  exclude: 'string[]',
  deletes: { enumOf: DeleteMode },
  primaryKey: 'string[]',
  snapshot: 'boolean',
  transforms: 'any',
  capture: { enumOf: CaptureMode },
  pollColumn: 'string',
  acknowledgeLateRules: 'string',
} as const satisfies Record<keyof CapturedTableOptions, PropKind>;

const RULE_OPTION_KINDS = {
  exclude: 'string[]',
  mask: 'string[]',
  excludeColumns: 'string[]',
  deletes: { enumOf: DeleteMode },
  primaryKey: 'string[]',
  snapshot: 'boolean',
  acknowledgeLateRules: 'string',
} as const satisfies Record<keyof CapturedTableRuleOptions, PropKind>;

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
    if (typeof tableId !== 'string')
      throw new Error(`CapturedTable.of needs a table id 'schema.table' (a string), got ${tableId === undefined ? 'undefined' : typeof tableId}`);
    checkPropKinds(`CapturedTable.of(${JSON.stringify(tableId)})`, options ?? {}, TABLE_OPTION_KINDS);
    return new CapturedTable(tableId, options);
  }

  /**
   * Every table of the source that matches `pattern` (`schemaGlob.tableGlob`, `*` for any run of
   * characters within one part) and none of `exclude`: DMS selection rules by pattern with
   * explicit exclusions. A table created in the source later joins by itself (registered,
   * snapshotted, in status) if it is eligible (a key, carried types); one that is not is named
   * with its reason (docs/onboarding.md).
   *
   * @example CapturedTable.matching('public.*', { exclude: ['public.audit_*'] })
   */
  static matching(pattern: string, options: CapturedTableRuleOptions = {}): CapturedTable {
    if (typeof pattern !== 'string')
      throw new Error(`CapturedTable.matching needs a pattern 'schema.table' (a string), got ${pattern === undefined ? 'undefined' : typeof pattern}`);
    checkPropKinds(`CapturedTable.matching(${JSON.stringify(pattern)})`, options ?? {}, RULE_OPTION_KINDS);
    return new CapturedTable(
      pattern,
      {
        mask: options.mask,
        exclude: options.excludeColumns,
        deletes: options.deletes,
        primaryKey: options.primaryKey,
        snapshot: options.snapshot,
        acknowledgeLateRules: options.acknowledgeLateRules,
      },
      [...(options.exclude ?? [])],
    );
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
  /** Per-event transforms, if any. */
  readonly transforms?: TableTransforms;
  /** How the table is captured. */
  readonly capture: CaptureMode;
  /** The poll column of a polled table. */
  readonly pollColumn?: string;
  /** The pattern of a rule made by `matching` (then `tableId` is the pattern too), else undefined. */
  readonly pattern?: string;
  /** Patterns a rule leaves out (empty for a single table). */
  readonly excludeTables: string[];
  /** The acknowledgement of a late mask or exclude, if given. */
  readonly acknowledgeLateRules?: string;

  private constructor(tableId: string, options: CapturedTableOptions, excludeTables?: string[]) {
    this.tableId = tableId;
    this.mask = [...(options.mask ?? [])];
    this.exclude = [...(options.exclude ?? [])];
    this.deletes = options.deletes ?? DeleteMode.SOFT;
    this.primaryKey = [...(options.primaryKey ?? ['id'])];
    this.snapshot = options.snapshot ?? true;
    if (options.transforms) this.transforms = options.transforms;
    this.capture = options.capture ?? CaptureMode.LOG;
    if (options.pollColumn !== undefined) this.pollColumn = options.pollColumn;
    if (excludeTables !== undefined) this.pattern = tableId;
    this.excludeTables = excludeTables ?? [];
    if (options.acknowledgeLateRules !== undefined) this.acknowledgeLateRules = options.acknowledgeLateRules;
  }

  /**
   * Whether the sinks see this table's deletes: false for a polled table (`CaptureMode.POLL`),
   * whose deleted rows stay in every sink; its warehouse view and mirror say so in their catalog
   * comment (docs/polling.md).
   */
  get deletesObservable(): boolean {
    return this.capture !== CaptureMode.POLL;
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
