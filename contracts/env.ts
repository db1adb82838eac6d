/**
 * Environment variable names that the constructs set and the handlers read. One name per setting,
 * shared so the two sides cannot drift.
 */
export const EnvName = {
  /** DynamoDB control-plane table name. */
  CONTROL_TABLE: 'CDC_CONTROL_TABLE',
  /** Source id of a source-side function (normalizer, heartbeat writer). */
  SOURCE_ID: 'CDC_SOURCE_ID',
  /** JSON array of captured-table settings (see lambda/core/table-config.ts). */
  TABLE_CONFIG: 'CDC_TABLE_CONFIG',
  /** Change-log stream name (the normalizer publishes to it). */
  CHANGE_LOG_STREAM: 'CDC_CHANGE_LOG_STREAM',
  /** Sink id of a sink applier. */
  SINK_ID: 'CDC_SINK_ID',
  /** Secrets Manager ARN holding a PostgreSQL-wire connection (host, port, username, password, dbname). */
  WAREHOUSE_SECRET_ARN: 'CDC_WAREHOUSE_SECRET_ARN',
  /** A postgres:// URL for the warehouse (local runs and tests; takes precedence over the secret). */
  WAREHOUSE_URL: 'CDC_WAREHOUSE_URL',
  /** Secrets Manager ARN of the source database credentials (heartbeat writer). */
  SOURCE_SECRET_ARN: 'CDC_SOURCE_SECRET_ARN',
  /** A postgres:// URL for the source (local runs and tests). */
  SOURCE_URL: 'CDC_SOURCE_URL',
  /** Schema of the heartbeat table on the source. */
  HEARTBEAT_SCHEMA: 'CDC_HEARTBEAT_SCHEMA',
  /** Heartbeats the writer sends per invocation, 10 s apart (the schedule starts it every minute). */
  HEARTBEAT_BEATS: 'CDC_HEARTBEAT_BEATS',
  /** Endpoint override for AWS clients (local stand-ins). */
  AWS_ENDPOINT: 'CDC_AWS_ENDPOINT',
  POWERTOOLS_SERVICE_NAME: 'POWERTOOLS_SERVICE_NAME',
  POWERTOOLS_METRICS_NAMESPACE: 'POWERTOOLS_METRICS_NAMESPACE',
} as const;

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
} as const;
