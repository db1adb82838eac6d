/**
 * Partition-key values of the control-plane table (docs/architecture.md §5.3). The DynamoDB adapter builds its
 * item keys from them (lambda/adapters/control-plane-dynamodb.ts has the whole layout) and the
 * constructs scope each function's IAM policy with `dynamodb:LeadingKeys` on the same values
 * (docs/deploy.md, "What each function may do"), so the two cannot drift. Source and sink ids
 * never contain `#`.
 */
export const ControlPartition = {
  /** One item per source that has tables (sort key `SOURCE#<source>`). */
  SOURCES: 'SOURCES',
  /** The table records of one source. */
  source: (sourceId: string): string => `SOURCE#${sourceId}`,
  /** The schema versions of one table. */
  schema: (sourceId: string, table: string): string => `SCHEMA#${sourceId}#${table}`,
  /** Every schema-version partition of one source, as an IAM `StringLike` pattern. */
  schemasOf: (sourceId: string): string => `SCHEMA#${sourceId}#*`,
  /** One sink's progress per table. */
  sink: (sink: string): string => `SINK#${sink}`,
  /** The local poller's checkpoints of one consumer. */
  checkpoint: (consumer: string): string => `CHECKPOINT#${consumer}`,
  /** The completed chunks of one table's snapshot runs (the run's state is an item of `source(…)`). */
  snapshotChunks: (sourceId: string, table: string): string => `SNAPSHOT#${sourceId}#${table}`,
  /** Every snapshot-chunk partition of one source, as an IAM `StringLike` pattern. */
  snapshotChunksOf: (sourceId: string): string => `SNAPSHOT#${sourceId}#*`,
  /** The append-only audit log. */
  AUDIT: 'AUDIT',
  /** The dead letters of one stage (`normalizer` or a sink id). */
  deadLetters: (stage: string): string => `DEADLETTER#${stage}`,
  /** One sink's latest reconciliation verdict per table, with its cursor (docs/reconcile.md). */
  verdicts: (sink: string): string => `VERDICT#${sink}`,
  /** One item per stage that has dead letters (sort key `STAGE#<stage>`). */
  DEAD_LETTER_STAGES: 'DEADLETTERS',
  /** One sink's rebuild runs (docs/rebuild.md; sort key `<source>#<table>#<started at>#<id>`). */
  rebuilds: (sink: string): string => `REBUILD#${sink}`,
  /** One Redshift sink's load requests, the tables its loader merges and its last merge (docs/warehouse-apply.md, "Redshift: the applier"). */
  loadRequests: (sink: string): string => `LOADREQ#${sink}`,
} as const;

/** The checkpoint consumer id under which a source's poll worker keeps its cursors, one per polled table (docs/polling.md). */
export const pollConsumerId = (sourceId: string): string => `poll-${sourceId}`;

/**
 * The checkpoint consumer id under which a source's `Custom::CdcColumnRules` step keeps the digest
 * of the column rules in force (and of the ones before), so a rollback is told from a change
 * (docs/masking.md, "Adding a rule to a live table").
 */
export const columnRulesConsumerId = (sourceId: string): string => `column-rules-${sourceId}`;

/** The checkpoint consumer id under which a source's slot monitor keeps its latest report for `cdc status` (docs/doctor.md). */
export const slotReportConsumerId = (sourceId: string): string => `slot-monitor:${sourceId}`;

/**
 * The checkpoint consumer id under which a source's snapshot worker publishes the catalog types of
 * captured tables not registered yet, one item per table; the normalizer registers a table first
 * seen through a type-less DMS record with them (docs/schema-drift.md, "First sight of a table").
 */
export const catalogConsumerId = (sourceId: string): string => `catalog-${sourceId}`;
