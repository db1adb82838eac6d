/**
 * The one module of metric names and dimensions. Imported by the constructs (alarms, `metric*`
 * methods) and by the handlers (Embedded Metric Format). Dependency-free on purpose.
 */
export const METRICS_NAMESPACE = 'CdcPlatform';

export const MetricName = {
  /** Source commit → sink commit, measured on heartbeat events. Milliseconds. Dims: Sink, Source. */
  END_TO_END_LAG: 'EndToEndLag',
  /** Source commit → normalizer publish. Milliseconds. Dims: Source. */
  CAPTURE_LAG: 'CaptureLag',
  /** Events published to the change log by the normalizer. Count. Dims: Source. */
  EVENTS_PUBLISHED: 'EventsPublished',
  /** Events applied by a sink (written or recognised as already applied). Count. Dims: Sink, Source. */
  EVENTS_APPLIED: 'EventsApplied',
  /** Events of a paused table held back by a sink. Count. Dims: Sink, Source. */
  EVENTS_HELD: 'EventsHeld',
  /** Records sent to a dead-letter destination. Count. Dims: Stage (normalizer or sink id), Source. */
  DEAD_LETTERS: 'DeadLetters',
  /** Batches that failed to apply (retried). Count. Dims: Sink. */
  APPLY_ERRORS: 'ApplyErrors',
  /** Delta rows a warehouse sink's deferred merges compacted into the base (docs/warehouse-apply.md). Count. Dims: Sink. */
  DELTA_ROWS_MERGED: 'DeltaRowsMerged',
  /** Deferred merges that failed (nothing changed; tried again on the next append or schedule; the merge-errors alarm's metric). Count. Dims: Sink. */
  MERGE_ERRORS: 'MergeErrors',
  /** Merges of a delta at twice its row threshold, which stopped the table's appends while they ran (merges fall behind appends). Count. Dims: Sink. */
  MERGES_STOPPING_APPENDS: 'MergesStoppingAppends',
  /** Change-log aggregates a sink applier read from another shard than the one they name, skipped: the normalizer put their events again on their shard (docs/architecture.md, "5.1 The change event"). Count. Dims: Sink. */
  MISPLACED_AGGREGATES_SKIPPED: 'MisplacedAggregatesSkipped',
  /** Raw records the normalizer read with its DMS decoder (data and control records). Count. Dims: Source. */
  DMS_RECORDS_DECODED: 'DmsRecordsDecoded',
  /** Schema versions registered. Count. Dims: Source. */
  SCHEMA_CHANGES: 'SchemaChanges',
  /** Tables paused by a change the normalizer could not classify as compatible. Count. Dims: Source. */
  TABLES_PAUSED: 'TablesPaused',
  /** Bytes of WAL retained by the capture slot. Dims: Source. */
  SLOT_RETAINED_BYTES: 'SlotRetainedBytes',
  /** Bytes left before the slot's retention limit. Dims: Source. */
  SLOT_HEADROOM_BYTES: 'SlotHeadroomBytes',
  /** Bytes of WAL pinned by inactive replication slots that are not the capture's (other tools'). Dims: Source. */
  SLOT_FOREIGN_INACTIVE_BYTES: 'SlotForeignInactiveBytes',
  /** Discontinuities in a source's history (missed or regressed heartbeat, changed system identifier or timeline). Count. Dims: Source. */
  SOURCE_DISCONTINUITIES: 'SourceDiscontinuities',
  /** Heartbeats written to the source. Count. Dims: Source. */
  HEARTBEATS_WRITTEN: 'HeartbeatsWritten',
  /** Snapshot rows published, per chunk. Count. Dims: Source, Table (docs/snapshot.md). */
  SNAPSHOT_ROWS: 'SnapshotRows',
  /** Snapshot rows done so far in the current run. Count. Dims: Source, Table. */
  SNAPSHOT_ROWS_DONE: 'SnapshotRowsDone',
  /** Estimated time left of a running snapshot. Seconds. Dims: Source, Table. */
  SNAPSHOT_ETA: 'SnapshotEta',
  /** Snapshot read rate (smoothed over chunks). Count/Second. Dims: Source, Table. */
  SNAPSHOT_RATE: 'SnapshotRate',
  /** Chunks the pacer slowed or paused for the source budget (1 per such chunk). Count. Dims: Source, Table. */
  SNAPSHOT_THROTTLED: 'SnapshotThrottled',
  /** Seconds since a running snapshot last completed a chunk (the stall alarm's metric). Seconds. Dims: Source. */
  SNAPSHOT_STALL_AGE: 'SnapshotStallAge',
  /** Tables whose reconciliation verdict was DIVERGED, per run (the divergence alarm's metric). Count. Dims: Sink (docs/reconcile.md). */
  RECONCILE_DIVERGED_TABLES: 'ReconcileDivergedTables',
  /** Confirmed differing keys (missing + extra + different), per run. Count. Dims: Sink. */
  RECONCILE_DIVERGED_KEYS: 'ReconcileDivergedKeys',
  /** Tables whose verdict was INCONCLUSIVE, per run. Count. Dims: Sink. */
  RECONCILE_INCONCLUSIVE_TABLES: 'ReconcileInconclusiveTables',
  /** Source rows checked by a run. Count. Dims: Sink, Source, Table. */
  RECONCILE_ROWS_CHECKED: 'ReconcileRowsChecked',
  /** Captured tables with no decided verdict (MATCH or DIVERGED) within their tier's period (the coverage alarm's metric). Count. Dims: Sink. */
  RECONCILE_COVERAGE_GAPS: 'ReconcileCoverageGaps',
  /** Change-log records the archive copier stored in the by-table archive (docs/rebuild.md). Count. Dims: Stage (`archive`). */
  ARCHIVE_RECORDS: 'ArchiveRecords',
  /** Batches the archive copier could not store (the whole batch is retried). Count. Dims: Stage (`archive`). */
  ARCHIVE_COPY_ERRORS: 'ArchiveCopyErrors',
} as const;
export type MetricNameValue = (typeof MetricName)[keyof typeof MetricName];

export const MetricDimension = {
  SINK: 'Sink',
  SOURCE: 'Source',
  STAGE: 'Stage',
  TABLE: 'Table',
} as const;

/** The Stage dimension value used by the normalizer (sinks use their sink id). */
export const NORMALIZER_STAGE = 'normalizer';

/** The Stage dimension value of the archive copier's metrics. */
export const ARCHIVE_STAGE = 'archive';
