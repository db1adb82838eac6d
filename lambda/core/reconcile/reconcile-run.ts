/**
 * One scheduled run of one reconciliation tier (docs/reconcile.md): the tier's tables of one
 * source against one sink, their keys completed from the source's catalog, reconciled in turn
 * (`reconcileTables`) and paced by the snapshot worker's pacer against the source budget; then
 * the sink's coverage gaps. The sessions, the sides and the metrics are ports: the reconciler
 * handler (lambda/handlers/reconciler.ts) gives them over PostgreSQL, OpenSearch and Powertools.
 */
import { DEFAULT_HEARTBEAT_SCHEMA, HEARTBEAT_TABLE } from '../../../contracts/env.ts';
import type { ControlPlane } from '../shared/control-plane.ts';
import { CdcError } from '../shared/errors.ts';
import { AdaptivePacer, type PressureReading, type SourceBudget } from '../snapshot/snapshot-pacer.ts';
import type { TableConfig } from '../tables/table-config.ts';
import {
  coverageGaps,
  reconcileTables,
  tierOf,
  type ReconcileRunOptions,
  type ReconcileTier,
  type ReconcileVerdict,
  type TableToReconcile,
} from './reconcile.ts';

/** The sessions of one run (opened by the first run of an execution environment, then kept). */
export interface ReconcileSessions {
  /** A source table's primary-key columns from the catalog, in key order. */
  primaryKey(table: string): Promise<string[]>;
  /** The two sides of a table (and its poll cursor's stable point for a polled table, `config`). */
  sides(t: TableToReconcile, config: TableConfig | undefined): ReturnType<ReconcileRunOptions['sides']>;
}

/** What a run reports as metrics. */
export interface ReconcileRunMetrics {
  rowsChecked(table: string, rows: number): void;
  sinkSummary(s: { divergedTables: number; divergedKeys: number; inconclusiveTables: number; coverageGaps: number }): void;
}

export interface ReconcileRunLog {
  info(message: string, detail: Record<string, unknown>): void;
  warn(message: string, detail: Record<string, unknown>): void;
  error(message: string, detail: Record<string, unknown>): void;
}

export interface ReconcileTierDeps {
  source: string;
  sink: string;
  tables: readonly TableConfig[];
  tiers: readonly ReconcileTier[];
  controlPlane: ControlPlane;
  sessions(): Promise<ReconcileSessions>;
  budget: SourceBudget;
  pressure?: { calibrate(): Promise<unknown>; read(): Promise<PressureReading> };
  rowsPerRun?: number;
  settleMs?: number;
  heartbeatSchema?: string;
  metrics: ReconcileRunMetrics;
  logger: ReconcileRunLog;
  now?: () => number;
}

export interface ReconcilerResult {
  tier: string;
  verdicts: Array<Pick<ReconcileVerdict, 'table' | 'verdict' | 'reason'>>;
  coverageGaps: number;
}

/** A run of the tier the event names (default: the first), until `timeLeftMs` runs low. */
export async function reconcileTier(
  d: ReconcileTierDeps,
  event: { tier?: unknown },
  timeLeftMs: () => number = () => Number.POSITIVE_INFINITY,
): Promise<ReconcilerResult> {
  const heartbeat = `${d.heartbeatSchema ?? DEFAULT_HEARTBEAT_SCHEMA}.${HEARTBEAT_TABLE}`;
  const captured = d.tables.filter((t) => t.table !== heartbeat);
  const name = typeof event?.tier === 'string' ? event.tier : d.tiers[0]!.name;
  const tier = d.tiers.find((t) => t.name === name);
  if (!tier) throw new CdcError('UNKNOWN_TIER', `no reconciliation tier '${name}' (tiers: ${d.tiers.map((t) => t.name).join(', ')})`);
  const tables = captured.filter((t) => tierOf(t.table, d.tiers)?.name === tier.name);
  const sessions = await d.sessions();
  const toReconcile: TableToReconcile[] = tables.map((t) => ({ table: t.table, key: t.key ?? [], rules: { mask: t.mask, exclude: t.exclude } }));
  // Keys the configuration does not declare come from the source's catalog.
  for (const t of toReconcile) if (t.key.length === 0) t.key = await sessions.primaryKey(t.table);
  await d.pressure?.calibrate();
  const verdicts = await reconcileTables({
    controlPlane: d.controlPlane,
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
    sides: (t) =>
      sessions.sides(
        t,
        tables.find((c) => c.table === t.table),
      ),
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
      d.metrics.rowsChecked(v.table, v.coveredRows);
    },
  });
  const all = await d.controlPlane.listReconcileVerdicts(d.sink);
  const gaps = coverageGaps(
    captured.map((t) => ({ source: d.source, table: t.table })),
    [d.sink],
    all.filter((v) => v.source === d.source),
    d.tiers,
    (d.now ?? Date.now)(),
  );
  d.metrics.sinkSummary({
    divergedTables: verdicts.filter((v) => v.verdict === 'DIVERGED').length,
    divergedKeys: verdicts.reduce((n, v) => n + v.diverged.missing + v.diverged.extra + v.diverged.different, 0),
    inconclusiveTables: verdicts.filter((v) => v.verdict === 'INCONCLUSIVE').length,
    coverageGaps: gaps.length,
  });
  if (gaps.length > 0) d.logger.warn('Tables without a decided verdict within their tier period', { gaps });
  return { tier: tier.name, verdicts: verdicts.map((v) => ({ table: v.table, verdict: v.verdict, reason: v.reason })), coverageGaps: gaps.length };
}
