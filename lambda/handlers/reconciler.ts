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
import { pgPollStablePoint } from '../adapters/poll-stable-point-pg.ts';
import { pollPoint } from '../core/capture/poll-stable-point.ts';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Context } from 'aws-lambda';
import pg from 'pg';
import { DEFAULT_HEARTBEAT_SCHEMA, EnvName, HEARTBEAT_TABLE, ServiceName } from '../../contracts/env.ts';
import { MetricDimension, MetricName, METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import { dynamoDbClient } from '../adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { pgSourceSide, pgWarehouseSide, prepareReconcileSession } from '../adapters/reconcile-pg.ts';
import { searchSinkSide } from '../adapters/reconcile-search.ts';
import { OpenSearchIndex, searchClient } from '../adapters/search-opensearch.ts';
import { DEFAULT_INDEX_PREFIX } from '../core/search/search-plan.ts';
import { PostgresPressureProbe } from '../adapters/snapshot-postgres.ts';
import { sourceConnectionFromEnvironment } from '../adapters/source-postgres.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { CdcError, ConfigurationError } from '../core/shared/errors.ts';
import {
  coverageGaps,
  reconcileTables,
  tierOf,
  type ReconcileSide,
  type ReconcileTier,
  type ReconcileVerdict,
  type TableToReconcile,
} from '../core/reconcile/reconcile.ts';
import { AdaptivePacer, type PressureReading, type SourceBudget } from '../core/snapshot/snapshot-pacer.ts';
import { parseTableConfig, type TableConfig } from '../core/tables/table-config.ts';
import { optionalInt, parseBudget, parseTiers } from '../runtime/environment.ts';
import { poolFromEnvironment } from '../runtime/warehouse-pool.ts';

const SERVICE = ServiceName.RECONCILER;

export interface ReconcilerDeps {
  source: string;
  sink: string;
  tables: readonly TableConfig[];
  tiers: readonly ReconcileTier[];
  control: ControlPlane;
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

export interface ReconcilerResult {
  tier: string;
  verdicts: Array<Pick<ReconcileVerdict, 'table' | 'verdict' | 'reason'>>;
  coverageGaps: number;
}

/** One EMF record per metric (a single metric flushes, and forgets its dimensions, on `addMetric`). */
function emit(metrics: Metrics, dims: Record<string, string>, name: string, value: number): void {
  const m = metrics.singleMetric();
  m.clearDefaultDimensions();
  m.addDimensions(dims);
  m.addMetric(name, MetricUnit.Count, value);
}

/** One scheduled run of one tier (see the module comment). */
export function createReconciler(d: ReconcilerDeps): (event: { tier?: unknown }, timeLeftMs?: () => number) => Promise<ReconcilerResult> {
  const heartbeat = `${d.heartbeatSchema ?? DEFAULT_HEARTBEAT_SCHEMA}.${HEARTBEAT_TABLE}`;
  const captured = d.tables.filter((t) => t.table !== heartbeat);
  return async (event, timeLeftMs = () => Number.POSITIVE_INFINITY) => {
    const name = typeof event?.tier === 'string' ? event.tier : d.tiers[0]!.name;
    const tier = d.tiers.find((t) => t.name === name);
    if (!tier) throw new CdcError('UNKNOWN_TIER', `no reconciliation tier '${name}' (tiers: ${d.tiers.map((t) => t.name).join(', ')})`);
    const tables = captured.filter((t) => tierOf(t.table, d.tiers)?.name === tier.name);
    const src = await d.sourceClient();
    const wh = d.warehouseClient ? await d.warehouseClient() : null;
    if (!wh && !d.search) throw new ConfigurationError('the reconciler needs a warehouse sink or a search sink');
    const toReconcile: TableToReconcile[] = tables.map((t) => ({ table: t.table, key: t.key ?? [], rules: { mask: t.mask, exclude: t.exclude } }));
    // Keys the configuration does not declare come from the source's catalog.
    for (const t of toReconcile) {
      if (t.key.length > 0) continue;
      const [schema, table] = t.table.split('.');
      const res = await src.query(
        `SELECT a.attname AS name FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
           JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
          WHERE n.nspname = $1 AND c.relname = $2 AND i.indisprimary ORDER BY k.ord`,
        [schema, table],
      );
      t.key = res.rows.map((r) => String(r.name));
    }
    await d.pressure?.calibrate();
    const verdicts = await reconcileTables({
      control: d.control,
      source: d.source,
      sink: d.sink,
      tables: toReconcile,
      pacer: new AdaptivePacer({ budget: d.budget }),
      ...(d.pressure ? { pressure: () => d.pressure!.read() } : {}),
      ...(d.rowsPerRun !== undefined ? { rowsPerRun: d.rowsPerRun } : {}),
      ...(d.settleMs !== undefined ? { settleMs: d.settleMs } : {}),
      ...(d.now ? { now: d.now } : {}),
      // Leave time for the verdict writes and the metrics of a table under way.
      shouldStop: () => timeLeftMs() < 120_000,
      sides: async (t) => ({
        // A polled table's changes arrive through its poll cursor, not the log: re-checks wait for that (docs/polling.md).
        ...(await pollPoint(
          tables.find((c) => c.table === t.table),
          (c) => pgPollStablePoint({ client: src, control: d.control, source: d.source, sink: d.sink, table: c.table, pollColumn: c.pollColumn! }),
        )),
        source: pgSourceSide(src, t.table, t.key, t.rules.mask) as ReconcileSide,
        sink: wh
          ? pgWarehouseSide(wh, d.source, t.table, t.key, { label: d.sink, ...(d.heartbeatSchema ? { heartbeatSchema: d.heartbeatSchema } : {}) })
          : searchSinkSide(d.search!.index, {
              prefix: d.search!.prefix ?? DEFAULT_INDEX_PREFIX,
              source: d.source,
              table: t.table,
              key: t.key,
              label: d.sink,
              ...(d.heartbeatSchema ? { heartbeatSchema: d.heartbeatSchema } : {}),
            }),
      }),
      onVerdict: (v) => {
        const log =
          v.verdict === 'DIVERGED' ? d.logger.error.bind(d.logger) : v.verdict === 'INCONCLUSIVE' ? d.logger.warn.bind(d.logger) : d.logger.info.bind(d.logger);
        log('Reconciliation verdict', {
          table: v.table,
          verdict: v.verdict,
          reason: v.reason,
          sampleKeys: v.sampleKeys,
          covered: v.covered,
          coveredRows: v.coveredRows,
        });
        emit(
          d.metrics,
          { [MetricDimension.SINK]: d.sink, [MetricDimension.SOURCE]: d.source, [MetricDimension.TABLE]: v.table },
          MetricName.RECONCILE_ROWS_CHECKED,
          v.coveredRows,
        );
      },
    });
    const all = await d.control.listReconcileVerdicts(d.sink);
    const gaps = coverageGaps(
      captured.map((t) => ({ source: d.source, table: t.table })),
      [d.sink],
      all.filter((v) => v.source === d.source),
      d.tiers,
      (d.now ?? Date.now)(),
    );
    const sinkDims = { [MetricDimension.SINK]: d.sink };
    emit(d.metrics, sinkDims, MetricName.RECONCILE_DIVERGED_TABLES, verdicts.filter((v) => v.verdict === 'DIVERGED').length);
    emit(
      d.metrics,
      sinkDims,
      MetricName.RECONCILE_DIVERGED_KEYS,
      verdicts.reduce((n, v) => n + v.diverged.missing + v.diverged.extra + v.diverged.different, 0),
    );
    emit(d.metrics, sinkDims, MetricName.RECONCILE_INCONCLUSIVE_TABLES, verdicts.filter((v) => v.verdict === 'INCONCLUSIVE').length);
    emit(d.metrics, sinkDims, MetricName.RECONCILE_COVERAGE_GAPS, gaps.length);
    if (gaps.length > 0) d.logger.warn('Tables without a decided verdict within their tier period', { gaps });
    return { tier: tier.name, verdicts: verdicts.map((v) => ({ table: v.table, verdict: v.verdict, reason: v.reason })), coverageGaps: gaps.length };
  };
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
    const source = env(EnvName.SOURCE_ID);
    const primary = await sourceConnectionFromEnvironment({ secrets, applicationName: SERVICE });
    let srcClient: pg.Client | null = null;
    const sourceClient = async (): Promise<pg.Client> => {
      if (!srcClient) {
        const c = new pg.Client(primary);
        await c.connect();
        await prepareReconcileSession(c);
        srcClient = c;
      }
      return srcClient;
    };
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
      const pool = await poolFromEnvironment();
      let whClient: pg.PoolClient | null = null;
      sink = {
        warehouseClient: async (): Promise<pg.PoolClient> => {
          if (!whClient) {
            const c = await pool.connect();
            await prepareReconcileSession(c);
            whClient = c;
          }
          return whClient;
        },
      };
    }
    let probeClient: pg.Client | null = null;
    const probe = new PostgresPressureProbe(async () => {
      if (!probeClient) {
        probeClient = new pg.Client(primary);
        await probeClient.connect();
      }
      return probeClient;
    });
    const rowsPerRun = optionalInt(EnvName.RECONCILE_ROWS_PER_RUN);
    const settleMs = optionalInt(EnvName.RECONCILE_SETTLE_MS);
    fromEnv = createReconciler({
      source,
      sink: env(EnvName.SINK_ID),
      tables: parseTableConfig(process.env[EnvName.TABLE_CONFIG]),
      tiers: parseTiers(process.env[EnvName.RECONCILE_TIERS]),
      control: new DynamoDbControlPlane(dynamoDbClient(process.env[EnvName.AWS_ENDPOINT]), env(EnvName.CONTROL_TABLE)),
      sourceClient,
      ...sink,
      budget: parseBudget(process.env[EnvName.SNAPSHOT_BUDGET]),
      pressure: probe,
      ...(rowsPerRun !== undefined ? { rowsPerRun } : {}),
      ...(settleMs !== undefined ? { settleMs } : {}),
      heartbeatSchema: process.env[EnvName.HEARTBEAT_SCHEMA] || DEFAULT_HEARTBEAT_SCHEMA,
      metrics: new Metrics({ namespace: process.env[EnvName.POWERTOOLS_METRICS_NAMESPACE] ?? METRICS_NAMESPACE, serviceName: SERVICE }),
      logger: new Logger({ serviceName: SERVICE }),
    });
  }
  return fromEnv(event, () => context.getRemainingTimeInMillis());
}
