/**
 * DMS replication-task settings for a CDC task that writes to Kinesis. The guiding rule: DMS
 * never silently drops or alters a record; when it cannot deliver one faithfully the task stops,
 * the CDC-latency and end-to-end-lag alarms fire, and an operator decides (invariant 3).
 */

export interface TaskSettingsOptions {
  /** `pk-only` or `all` (before images of updates). */
  readonly beforeImageColumns: 'pk-only' | 'all';
  /** Largest LOB value delivered, kilobytes (Kinesis targets take limited LOB mode only). */
  readonly lobMaxSizeKb: number;
}

/** The settings object (serialised into `ReplicationTaskSettings`). */
export function taskSettings(opts: TaskSettingsOptions): Record<string, unknown> {
  return {
    TargetMetadata: {
      // Kinesis targets support limited LOB mode only; a longer value fails the task through the
      // source endpoint's FailTasksOnLobTruncation instead of arriving cut short.
      SupportLobs: true,
      FullLobMode: false,
      LimitedSizeLobMode: true,
      LobMaxSize: opts.lobMaxSizeKb,
      // Batch apply is not supported for Kinesis targets and can lose data (DMS documentation).
      BatchApplyEnabled: false,
    },
    BeforeImageSettings: {
      // Updates carry the old key (or the whole old row with `all`) under `before-image`, so a
      // key change is seen as such and never as an insert of a new row alone.
      EnableBeforeImage: true,
      FieldName: 'before-image',
      ColumnFilter: opts.beforeImageColumns,
    },
    Logging: {
      // Task logs in CloudWatch Logs (needs the account's dms-cloudwatch-logs-role).
      EnableLogging: true,
    },
    ChangeProcessingDdlHandlingPolicy: {
      // DDL reaches the stream as control records; the normalizer classifies it (invariant 8).
      HandleSourceTableDropped: true,
      HandleSourceTableTruncated: true,
      HandleSourceTableAltered: true,
    },
    ErrorBehavior: {
      // A record DMS cannot convert stops the task (the default IGNORE_RECORD would drop it).
      DataErrorPolicy: 'STOP_TASK',
      // A truncated value stops the task (the default LOG_ERROR would deliver it cut short).
      DataTruncationErrorPolicy: 'STOP_TASK',
      DataErrorEscalationPolicy: 'STOP_TASK',
      DataErrorEscalationCount: 0,
      // A masking failure stops the task: LOG_ERROR would load the value unmasked (invariant 4).
      DataMaskingErrorPolicy: 'STOP_TASK',
      // A failing table stops the task rather than being suspended while the others go on,
      // which would leave a gap in that table nobody asked for.
      TableErrorPolicy: 'STOP_TASK',
      TableErrorEscalationPolicy: 'STOP_TASK',
      TableErrorEscalationCount: 0,
      // Apply errors (a put to the stream that fails) stop the task; the defaults ignore failed
      // deletes and only log failed inserts and updates.
      ApplyErrorDeletePolicy: 'STOP_TASK',
      ApplyErrorInsertPolicy: 'STOP_TASK',
      ApplyErrorUpdatePolicy: 'STOP_TASK',
      ApplyErrorEscalationPolicy: 'STOP_TASK',
      ApplyErrorEscalationCount: 0,
      ApplyErrorFailOnTruncationDdl: true,
      // Connection losses are retried (retrying drops nothing), with growing intervals; after the
      // throttling maximum the task stops so a long outage is not hidden behind retries.
      RecoverableErrorCount: -1,
      RecoverableErrorInterval: 5,
      RecoverableErrorThrottling: true,
      RecoverableErrorThrottlingMax: 1800,
      RecoverableErrorStopRetryAfterThrottlingMax: true,
      // A selection that matches no table is a configuration error, not an empty capture.
      FailOnNoTablesCaptured: true,
      FailOnTransactionConsistencyBreached: true,
      EventErrorPolicy: 'STOP_TASK',
    },
  };
}
