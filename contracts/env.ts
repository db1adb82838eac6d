/**
 * Environment variable names that the constructs set and the handlers read. One name per setting,
 * shared so the two sides cannot drift.
 */
export const EnvName = {
  /** DynamoDB control-plane table name. */
  CONTROL_TABLE: 'CDC_CONTROL_TABLE',
  /** Source id of a source-side function (normalizer, heartbeat writer). */
  SOURCE_ID: 'CDC_SOURCE_ID',
  /** JSON array of captured-table settings (see lambda/core/tables/table-config.ts). */
  TABLE_CONFIG: 'CDC_TABLE_CONFIG',
  /** JSON array of capture-by-pattern rules (contracts/table-config.ts `TableRule`, docs/onboarding.md). */
  TABLE_RULES: 'CDC_TABLE_RULES',
  /** Change-log stream name (the normalizer publishes to it). */
  CHANGE_LOG_STREAM: 'CDC_CHANGE_LOG_STREAM',
  /** `on` (the default) or `off`: whether the normalizer packs change events into KPL aggregates (docs/architecture.md, "5.1 The change event"). */
  CHANGE_LOG_AGGREGATION: 'CDC_CHANGE_LOG_AGGREGATION',
  /** Sink id of a sink applier. */
  SINK_ID: 'CDC_SINK_ID',
  /** Sink applier: how many batches of one shard its event source mapping runs at once (the sink's `parallelizationFactor`); above 1 its holds say so, and a resume replays held shards from their trim horizon (docs/operations.md, "How a resume replays"). */
  PARALLELIZATION_FACTOR: 'CDC_PARALLELIZATION_FACTOR',
  /** Secrets Manager ARN holding a PostgreSQL-wire connection (host, port, username, password, dbname). */
  WAREHOUSE_SECRET_ARN: 'CDC_WAREHOUSE_SECRET_ARN',
  /** A postgres:// URL for the warehouse (local runs and tests; takes precedence over the secret). */
  WAREHOUSE_URL: 'CDC_WAREHOUSE_URL',
  /** Secrets Manager ARN of the source database credentials of a function that connects to the source (docs/deploy.md, "TLS to the source"). */
  SOURCE_SECRET_ARN: 'CDC_SOURCE_SECRET_ARN',
  /** A postgres:// URL for the source (local runs and tests). */
  SOURCE_URL: 'CDC_SOURCE_URL',
  /** Schema of the heartbeat table on the source. */
  HEARTBEAT_SCHEMA: 'CDC_HEARTBEAT_SCHEMA',
  /** Heartbeats the writer sends per invocation, 10 s apart (the schedule starts it every minute). */
  HEARTBEAT_BEATS: 'CDC_HEARTBEAT_BEATS',
  /** TLS to the source (`verify-full`, the default, or `require`), on every function that connects to it: the weakest mode it may use (a secret asking for less is refused). */
  SOURCE_SSL_MODE: 'CDC_SOURCE_SSL_MODE',
  /** PEM of the CA(s) of the source's certificate, when not the Amazon RDS CAs. */
  SOURCE_CA_PEM: 'CDC_SOURCE_CA_PEM',
  /** Normalizer: `published` registers a table first seen through a type-less DMS record with the catalog types the snapshot worker published (docs/schema-drift.md). */
  CATALOG_TYPES: 'CDC_CATALOG_TYPES',
  /** TLS to the warehouse (`verify-full`, the default, or `require`). */
  WAREHOUSE_SSL_MODE: 'CDC_WAREHOUSE_SSL_MODE',
  /** Warehouse sink: rows in a table's delta at which it is merged into the base (docs/warehouse-apply.md). */
  MERGE_MAX_ROWS: 'CDC_MERGE_MAX_ROWS',
  /** Warehouse sink: age in ms of a delta's oldest row at which it is merged. */
  MERGE_MAX_AGE_MS: 'CDC_MERGE_MAX_AGE_MS',
  /** Warehouse sink: `true` when only the schedule merges (the applier does not merge after its appends). */
  MERGE_ON_SCHEDULE: 'CDC_MERGE_ON_SCHEDULE',
  /** Search sink: the OpenSearch endpoint (`https://…` of the domain; requests are SigV4-signed for `AWS_REGION`). */
  SEARCH_ENDPOINT: 'CDC_SEARCH_ENDPOINT',
  /** Search sink: JSON array of the tables it serves, `[{"source","table","deleteMode"}]` (see lambda/core/search/search-plan.ts). */
  SEARCH_TABLES: 'CDC_SEARCH_TABLES',
  /** Search sink: prefix of its index and alias names (default `cdc`). */
  SEARCH_INDEX_PREFIX: 'CDC_SEARCH_INDEX_PREFIX',
  /** The region Lambda runs in (set by Lambda itself); the search sink signs its requests for it. */
  AWS_REGION: 'AWS_REGION',
  /** Name of the capture's logical replication slot (slot monitor). */
  SLOT_NAME: 'CDC_SLOT_NAME',
  /** The source's declared WAL budget in bytes: headroom is measured against it (slot monitor). */
  SLOT_WAL_BUDGET_BYTES: 'CDC_SLOT_WAL_BUDGET_BYTES',
  /** S3 bucket of the payload store: dead letters' whole records and events stored out of line (docs/large-records.md). */
  PAYLOAD_BUCKET: 'CDC_PAYLOAD_BUCKET',
  /** KMS key ARN the payload store encrypts objects with. */
  PAYLOAD_KMS_KEY_ARN: 'CDC_PAYLOAD_KMS_KEY_ARN',
  /** Raw stream name (the snapshot worker publishes its chunk rows to it, like the capture). */
  RAW_STREAM: 'CDC_RAW_STREAM',
  /** JSON budget of the snapshot worker: `{"writeLatencyPct": 10, "cpuPct": 5}` (docs/snapshot.md). */
  SNAPSHOT_BUDGET: 'CDC_SNAPSHOT_BUDGET',
  /** Secrets Manager ARN of a read replica the snapshot worker reads chunks from (optional). */
  SNAPSHOT_REPLICA_SECRET_ARN: 'CDC_SNAPSHOT_REPLICA_SECRET_ARN',
  /** RDS DB instance identifier whose CloudWatch metrics (WriteLatency, CPUUtilization) pace the snapshot (optional). */
  SNAPSHOT_DB_INSTANCE: 'CDC_SNAPSHOT_DB_INSTANCE',
  /** Endpoint override for AWS clients (local stand-ins). */
  AWS_ENDPOINT: 'CDC_AWS_ENDPOINT',
  /** Operator function: the actions it serves, comma separated (the status-only function: `status,audit`). */
  OPERATOR_ACTIONS: 'CDC_OPERATOR_ACTIONS',
  /** Operator function: the change log's retention in ms (a pause must not outlive it). */
  CHANGE_LOG_RETENTION_MS: 'CDC_CHANGE_LOG_RETENTION_MS',
  /** Operator function: JSON object of source id → longest pause its slot/WAL budget allows, in ms. */
  PAUSE_BUDGETS: 'CDC_PAUSE_BUDGETS',
  /** Reconciler: JSON array of its tiers, `[{"name","periodMs","tables":["schema.table" | "*"]}]` (docs/reconcile.md). */
  RECONCILE_TIERS: 'CDC_RECONCILE_TIERS',
  /** Reconciler: source rows checked per table per run at most. */
  RECONCILE_ROWS_PER_RUN: 'CDC_RECONCILE_ROWS_PER_RUN',
  /** Reconciler: wait before re-reading differing keys, ms (longer than the sink's lag). */
  RECONCILE_SETTLE_MS: 'CDC_RECONCILE_SETTLE_MS',
  /** Rebuild worker and archive copier: the change-log archive's bucket (docs/rebuild.md, "On AWS"). */
  ARCHIVE_BUCKET: 'CDC_ARCHIVE_BUCKET',
  /** Rebuild worker and archive copier: the key prefix the archive's objects are under (the replay reader's prefix, the copier's prefix). */
  ARCHIVE_PREFIX: 'CDC_ARCHIVE_PREFIX',
  /** Archive copier: the KMS key ARN it encrypts archive objects with (the archive bucket's key; docs/rebuild.md, "Archive layout"). */
  ARCHIVE_KMS_KEY_ARN: 'CDC_ARCHIVE_KMS_KEY_ARN',
  /** Operator function: JSON object of sink id → `{ "worker": function name, "stateMachine": ARN }` of each sink's rebuild (docs/rebuild.md). */
  REBUILD_WORKERS: 'CDC_REBUILD_WORKERS',
  /** Redshift sink with staging: the staging bucket (the appliers stage under `<prefix>requests/`, the loader writes manifests under `<prefix>loads/`). */
  REDSHIFT_STAGING_BUCKET: 'CDC_REDSHIFT_STAGING_BUCKET',
  /** Redshift sink with staging: the staging prefix (ends with `/`). */
  REDSHIFT_STAGING_PREFIX: 'CDC_REDSHIFT_STAGING_PREFIX',
  /** Warehouse applier: the name of the sink's Redshift loader function, invoked asynchronously per load request. */
  REDSHIFT_LOADER_FUNCTION: 'CDC_REDSHIFT_LOADER_FUNCTION',
  /** Warehouse applier: how long a load request waits for its load, ms (below the applier's timeout). */
  REDSHIFT_LOAD_WAIT_MS: 'CDC_REDSHIFT_LOAD_WAIT_MS',
  /** Redshift loader: the cluster role COPY assumes (`IAM_ROLE`). */
  REDSHIFT_COPY_ROLE_ARN: 'CDC_REDSHIFT_COPY_ROLE_ARN',
  /** Redshift loader: its own timeout, ms (a claim older than it is stale). */
  REDSHIFT_LOADER_TIMEOUT_MS: 'CDC_REDSHIFT_LOADER_TIMEOUT_MS',
  /** Redshift loader: the sink's `freshnessTarget`, ms (its load and merge cadence, `redshiftCadence`). */
  FRESHNESS_TARGET_MS: 'CDC_FRESHNESS_TARGET_MS',
  POWERTOOLS_SERVICE_NAME: 'POWERTOOLS_SERVICE_NAME',
  POWERTOOLS_METRICS_NAMESPACE: 'POWERTOOLS_METRICS_NAMESPACE',
  /** Node.js's own flags (the warehouse applier's young generation: `applierNodeOptions`). */
  NODE_OPTIONS: 'NODE_OPTIONS',
} as const;

/**
 * The warehouse applier's Node.js flags (`NODE_OPTIONS`), for a function of `memoryMiB`: V8's
 * young generation sized for a batch. A batch's decoded records live until the batch ends; when
 * they outgrow the semi-space each scavenge copies them and then promotes them to the old space,
 * which later needs mark-compacts (docs/performance-log.md, "The applier's young generation"). V8 sizes the semi-space from the heap
 * limit, below 16 MiB for heaps up to 2 GiB; this makes it 1/16 of the function's memory, at most
 * 64 MiB (the young generation takes three semi-spaces: at most 3/16 of the memory, 192 MiB of 1,024).
 */
/** The warehouse applier's memory when `WarehouseSinkProps.memorySize` is not set, MiB. */
export const DEFAULT_APPLIER_MEMORY_MIB = 1024;

export function applierNodeOptions(memoryMiB: number): string {
  if (!Number.isFinite(memoryMiB) || memoryMiB <= 0) throw new RangeError(`applierNodeOptions: memory must be a positive number of MiB, got ${memoryMiB}`);
  return `--max-semi-space-size=${applierSemiSpaceMiB(memoryMiB)}`;
}

/** The semi-space of `applierNodeOptions`, MiB: memory / 16, at least 1 and at most 64. */
export function applierSemiSpaceMiB(memoryMiB: number): number {
  return Math.max(1, Math.min(64, Math.floor(memoryMiB / 16)));
}

/** The heartbeat table the platform writes on every source (one row per source id). */
export const HEARTBEAT_TABLE = 'cdc_heartbeat';
/** The heartbeat table's primary-key column (the source id); the normalizer's table config names it. */
export const HEARTBEAT_KEY_COLUMN = 'source_id';
export const DEFAULT_HEARTBEAT_SCHEMA = 'public';

/**
 * The service name (`POWERTOOLS_SERVICE_NAME`, in every log line and metric) of each platform
 * function: the constructs set it, the handlers and `cdc local` default to it.
 */
export const ServiceName = {
  NORMALIZER: 'cdc-normalizer',
  HEARTBEAT_WRITER: 'cdc-heartbeat-writer',
  WAREHOUSE_APPLIER: 'cdc-warehouse-applier',
  DMS_TASK_LIFECYCLE: 'cdc-dms-task-lifecycle',
  RECONCILER: 'cdc-reconciler',
  REBUILD_WORKER: 'cdc-rebuild-worker',
  ARCHIVE_COPIER: 'cdc-archive-copier',
  REDSHIFT_LOADER: 'cdc-redshift-loader',
} as const;
