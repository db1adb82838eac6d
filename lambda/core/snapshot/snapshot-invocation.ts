/**
 * One invocation of the snapshot worker (docs/snapshot.md): the capture rules' catalog scan (new
 * tables join, docs/onboarding.md), the catalog types and partition trees the normalizer reads,
 * first snapshots requested for configured tables that have none, then the source's pending runs
 * chunk by chunk until the invocation's time is nearly up. The reader, the publisher, the pressure
 * probe, the metrics and the log are ports (lambda/handlers/snapshot-worker.ts gives them).
 */
import type { ControlPlane } from '../shared/control-plane.ts';
import { publishCatalogTypes, type DescribeTable } from '../shared/catalog-types.ts';
import { publishPartitionTree, type PartitionTree } from '../tables/partitions.ts';
import { TableConfigIndex, type TableConfig, type TableRule } from '../tables/table-config.ts';
import { scanTables, type DiscoveryRecord } from '../tables/discovery.ts';
import type { TableFact } from '../operator/doctor-facts.ts';
import { AdaptivePacer, type PressureReading, type SourceBudget } from './snapshot-pacer.ts';
import type { SnapshotRawRecord } from './snapshot.ts';
import type { SnapshotState } from './snapshot-state.ts';
import { planSnapshots, runPendingSnapshots, type RunOutcome, type SnapshotMetrics, type SnapshotReader } from './snapshot-worker.ts';

export interface SnapshotInvocationLog {
  info(message: string, detail: Record<string, unknown>): void;
  debug(message: string, detail: Record<string, unknown>): void;
}

/** Seconds since the oldest running snapshot of the source last completed a chunk (0 when none runs): the stall alarm's metric. */
export function stallAgeSeconds(runs: readonly SnapshotState[], now: number): number {
  const running = runs.filter((r) => r.status === 'running' || r.status === 'requested');
  if (running.length === 0) return 0;
  return Math.max(...running.map((r) => (now - Date.parse(r.updatedAt)) / 1000));
}

export interface SnapshotInvocationDeps {
  source: string;
  tables: TableConfig[];
  /**
   * Capture-by-pattern: the rules and the catalog scan that lets new tables join (docs/onboarding.md).
   * Each invocation scans first: tables that joined get their snapshot requested.
   */
  discovery?: {
    rules: readonly TableRule[];
    declared: ReadonlySet<string>;
    listTables(): Promise<string[]>;
    tableFact(table: string, key: string[] | null): Promise<TableFact>;
    user(): Promise<string>;
  };
  controlPlane: ControlPlane;
  reader: SnapshotReader;
  publish: (records: SnapshotRawRecord[]) => Promise<void>;
  budget: SourceBudget;
  pressure?: { calibrate(): Promise<unknown>; read(): Promise<PressureReading> };
  metrics: SnapshotMetrics;
  /** Seconds since the oldest running snapshot last completed a chunk (the stall alarm's metric), reported after each invocation. */
  stallAge(seconds: number): void;
  logger: SnapshotInvocationLog;
  owner: string;
  /**
   * The source catalog's types of a table (null when it does not exist): published for every
   * captured table not registered yet, first thing in each invocation, so that the normalizer
   * registers a table first seen through a type-less DMS record with them
   * (lambda/core/shared/catalog-types.ts). `catalogTables` are the declared tables to publish beyond
   * `tables` (the heartbeat table); tables a capture rule matched join them. @default none published
   */
  catalog?: { describe: DescribeTable; catalogTables?: readonly string[]; partitionTree?: () => Promise<PartitionTree> };
}

/** One invocation: plan, then run pending chunks while `timeLeftMs()` stays above `reserveMs`. */
export function createSnapshotInvocation(d: SnapshotInvocationDeps): (timeLeftMs: () => number, reserveMs?: number) => Promise<Record<string, RunOutcome>> {
  const index = new TableConfigIndex(d.tables, d.discovery?.rules ?? []);
  let known: Map<string, DiscoveryRecord> | null = null;
  return async (timeLeftMs, reserveMs = 90_000) => {
    if (d.discovery) {
      const disc = d.discovery;
      // On AWS the DMS task selects the tables by the same patterns: capturing needs nothing here.
      const scan = await scanTables(
        {
          controlPlane: d.controlPlane,
          source: d.source,
          rules: disc.rules,
          declared: disc.declared,
          listTables: () => disc.listTables(),
          tableFact: (t, k) => disc.tableFact(t, k),
          user: await disc.user(),
          capture: () => undefined,
          release: () => undefined,
          actor: 'snapshot-worker:discovery',
        },
        known,
      );
      known = scan.known;
      if (scan.result.changed.length > 0)
        d.logger.info('Capture rules: tables changed', {
          changed: scan.result.changed.map((r) => ({ table: r.table, verdict: r.verdict, reasons: r.reasons })),
        });
    }
    if (d.catalog) {
      // Every table a capture rule matched (the DMS task selects by the same patterns, whatever the verdict), not the dropped ones.
      const captured = [...(known?.values() ?? [])].filter((r) => r.verdict !== 'dropped').map((r) => r.table);
      const written = await publishCatalogTypes(
        d.controlPlane,
        d.source,
        [...d.tables.map((t) => t.table), ...(d.catalog.catalogTables ?? []), ...captured],
        d.catalog.describe,
      );
      if (written.length > 0) d.logger.info('Published catalog types of tables not registered yet', { tables: written });
      // The partition trees, for the normalizer to name a partition's DMS records by their root (docs/partitioned-tables.md).
      if (d.catalog.partitionTree && (await publishPartitionTree(d.controlPlane, d.source, await d.catalog.partitionTree())))
        d.logger.info('Published the partition tree', {});
    }
    const requested = await planSnapshots(d.controlPlane, d.source, d.tables, 'snapshot-planner');
    if (requested.length > 0) d.logger.info('Requested first snapshots', { tables: requested });
    const outcomes = await runPendingSnapshots({
      controlPlane: d.controlPlane,
      reader: d.reader,
      publish: d.publish,
      source: d.source,
      owner: d.owner,
      rulesOf: (t) => index.columnRules(t),
      pollColumnOf: (t) => index.get(t)?.pollColumn,
      pacerFor: () => new AdaptivePacer({ budget: d.budget }),
      beforeRun: async () => {
        await d.pressure?.calibrate();
      },
      ...(d.pressure ? { pressure: () => d.pressure!.read() } : {}),
      metrics: d.metrics,
      shouldStop: () => timeLeftMs() < reserveMs,
      onState: (s) =>
        d.logger.debug('Snapshot progress', {
          table: s.table,
          rowsDone: s.rowsDone,
          estimatedRows: s.estimatedRows,
          etaSeconds: s.etaSeconds,
          throttle: s.throttle,
        }),
    });
    d.stallAge(stallAgeSeconds(await d.controlPlane.listSnapshots(d.source), Date.now()));
    return Object.fromEntries(outcomes);
  };
}
