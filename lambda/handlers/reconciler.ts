/**
 * Reconciler Lambda (docs/reconcile.md): one source against one sink, a warehouse
 * (lambda/adapters/reconcile-pg.ts) or a search index (lambda/adapters/reconcile-search.ts,
 * when `CDC_SEARCH_ENDPOINT` is set: SigV4-signed reads of the readers' aliases). A schedule per
 * tier starts it with `{ "tier": "<name>" }`; it reconciles that tier's tables
 * (lambda/core/reconcile/reconcile.ts over lambda/adapters/reconcile-pg.ts), stores each verdict with its
 * cursor in the control plane, and publishes the run's metrics in Embedded Metric Format:
 * diverged and inconclusive tables and diverged keys per sink, rows checked per table, and the
 * coverage gap (captured tables with no decided verdict within their tier's period) per sink.
 *
 * Source reads are paced by the snapshot worker's pacer (lambda/core/snapshot/snapshot-pacer.ts) against
 * the same source budget (`CDC_SNAPSHOT_BUDGET`) and pressure probe.
 *
 * Configuration (environment): `CDC_CONTROL_TABLE`, `CDC_SOURCE_ID`, `CDC_TABLE_CONFIG`,
 * `CDC_SINK_ID`, `CDC_SOURCE_URL` or `CDC_SOURCE_SECRET_ARN`, `CDC_WAREHOUSE_URL` or
 * `CDC_WAREHOUSE_SECRET_ARN` (a warehouse sink) or `CDC_SEARCH_ENDPOINT` and optional
 * `CDC_SEARCH_INDEX_PREFIX` (a search sink), `CDC_RECONCILE_TIERS`, optional `CDC_RECONCILE_ROWS_PER_RUN`,
 * `CDC_RECONCILE_SETTLE_MS`, `CDC_SNAPSHOT_BUDGET`, `CDC_HEARTBEAT_SCHEMA`.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Context } from 'aws-lambda';
import type pg from 'pg';
import { DEFAULT_HEARTBEAT_SCHEMA, EnvName, ServiceName } from '../../contracts/env.ts';
import { METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import { dynamoDbClient } from '../adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { lazySourceSession, lazyWarehouseSession, openReconcileSessions } from '../adapters/reconcile-sessions.ts';
import { OpenSearchIndex, searchClient } from '../adapters/search-opensearch.ts';
import { DEFAULT_INDEX_PREFIX } from '../core/search/search-plan.ts';
import { pressureProbeOver } from '../adapters/snapshot-postgres.ts';
import { sourceConnectionFromEnvironment } from '../adapters/source-postgres.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { ConfigurationError } from '../core/shared/errors.ts';
import type { ReconcileTier } from '../core/reconcile/reconcile.ts';
import { reconcileTier, type ReconcilerResult } from '../core/reconcile/reconcile-run.ts';
import type { PressureReading, SourceBudget } from '../core/snapshot/snapshot-pacer.ts';
import { parseTableConfig, type TableConfig } from '../core/tables/table-config.ts';
import { optionalInt, parseBudget, parseTiers } from '../runtime/environment.ts';
import { emfReconcileMetrics } from '../runtime/metrics.ts';
import { poolFromEnvironment } from '../runtime/warehouse-pool.ts';

export type { ReconcilerResult } from '../core/reconcile/reconcile-run.ts';

const SERVICE = ServiceName.RECONCILER;

export interface ReconcilerDeps {
  source: string;
  sink: string;
  tables: readonly TableConfig[];
  tiers: readonly ReconcileTier[];
  controlPlane: ControlPlane;
  /** The source and warehouse sessions (the handler opens them once per execution environment). */
  sourceClient: () => Promise<pg.ClientBase>;
  /** A warehouse sink's session; absent for a search sink. */
  warehouseClient?: () => Promise<pg.ClientBase>;
  /** A search sink's index adapter and prefix (instead of `warehouseClient`). */
  search?: { index: OpenSearchIndex; prefix?: string };
  budget: SourceBudget;
  pressure?: { calibrate(): Promise<unknown>; read(): Promise<PressureReading> };
  rowsPerRun?: number;
  settleMs?: number;
  heartbeatSchema?: string;
  metrics: Metrics;
  logger: Logger;
  now?: () => number;
}

/** One scheduled run of one tier (see the module comment; the run is lambda/core/reconcile/reconcile-run.ts). */
export function createReconciler(d: ReconcilerDeps): (event: { tier?: unknown }, timeLeftMs?: () => number) => Promise<ReconcilerResult> {
  const run = {
    ...d,
    sessions: () => openReconcileSessions(d),
    metrics: emfReconcileMetrics(d.metrics, d.source, d.sink),
  };
  return (event, timeLeftMs) => reconcileTier(run, event, timeLeftMs);
}

// Module scope: created once per execution environment.
const secrets = new SecretsManagerClient({});
let fromEnv: ReturnType<typeof createReconciler> | undefined;

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new ConfigurationError(`environment variable ${name} is not set`);
  return v;
}

/** The Lambda entry point (scheduled, one rule per tier). */
export async function handler(event: { tier?: unknown }, context: Context): Promise<ReconcilerResult> {
  if (!fromEnv) {
    const sourceId = env(EnvName.SOURCE_ID);
    const primary = await sourceConnectionFromEnvironment({ secrets, applicationName: SERVICE });
    const sourceClient = lazySourceSession(primary);
    // A search sink (its endpoint set by the construct), or a warehouse sink.
    const endpoint = process.env[EnvName.SEARCH_ENDPOINT];
    let sink: Pick<ReconcilerDeps, 'warehouseClient' | 'search'>;
    if (endpoint) {
      const region = env(EnvName.AWS_REGION);
      const node = endpoint.startsWith('http') ? endpoint : `https://${endpoint}`;
      sink = {
        search: {
          index: new OpenSearchIndex(searchClient({ node, awsRegion: region })),
          prefix: process.env[EnvName.SEARCH_INDEX_PREFIX] || DEFAULT_INDEX_PREFIX,
        },
      };
    } else {
      sink = { warehouseClient: lazyWarehouseSession(await poolFromEnvironment()) };
    }
    const rowsPerRun = optionalInt(EnvName.RECONCILE_ROWS_PER_RUN);
    const settleMs = optionalInt(EnvName.RECONCILE_SETTLE_MS);
    fromEnv = createReconciler({
      source: sourceId,
      sink: env(EnvName.SINK_ID),
      tables: parseTableConfig(process.env[EnvName.TABLE_CONFIG]),
      tiers: parseTiers(process.env[EnvName.RECONCILE_TIERS]),
      controlPlane: new DynamoDbControlPlane(dynamoDbClient(process.env[EnvName.AWS_ENDPOINT]), env(EnvName.CONTROL_TABLE)),
      sourceClient,
      ...sink,
      budget: parseBudget(process.env[EnvName.SNAPSHOT_BUDGET]),
      pressure: pressureProbeOver(primary),
      ...(rowsPerRun !== undefined ? { rowsPerRun } : {}),
      ...(settleMs !== undefined ? { settleMs } : {}),
      heartbeatSchema: process.env[EnvName.HEARTBEAT_SCHEMA] || DEFAULT_HEARTBEAT_SCHEMA,
      metrics: new Metrics({ namespace: process.env[EnvName.POWERTOOLS_METRICS_NAMESPACE] ?? METRICS_NAMESPACE, serviceName: SERVICE }),
      logger: new Logger({ serviceName: SERVICE }),
    });
  }
  return fromEnv(event, () => context.getRemainingTimeInMillis());
}
