/**
 * Workflows' metrics ports over Powertools (EMF; names and dimensions from contracts/metrics.ts).
 */
import { MetricUnit, type Metrics } from '@aws-lambda-powertools/metrics';
import { MetricDimension, MetricName } from '../../contracts/metrics.ts';
import type { NormalizerMetrics } from '../core/capture/normalize.ts';
import type { SnapshotState } from '../core/snapshot/snapshot-state.ts';
import type { SnapshotMetrics } from '../core/snapshot/snapshot-worker.ts';
import type { ReconcileRunMetrics } from '../core/reconcile/reconcile-run.ts';

/**
 * Powertools adds a `service` dimension to every metric; the platform's metrics carry exactly the
 * dimensions of contracts/metrics.ts (the constructs' alarms name those), so it is replaced.
 */
export function onlyDimensions(metrics: Metrics, dimensions: Record<string, string>): Metrics {
  metrics.clearDefaultDimensions();
  metrics.setDefaultDimensions(dimensions);
  return metrics;
}

/** The normalizer's metrics port over Powertools: the source's dimension, plus the ones a count names. */
export function normalizerMetrics(metrics: Metrics, sourceId: string): NormalizerMetrics {
  return {
    count(name, value, dimensions) {
      if (dimensions && Object.keys(dimensions).length > 0) {
        const single = onlyDimensions(metrics.singleMetric(), { [MetricDimension.SOURCE]: sourceId });
        for (const [k, v] of Object.entries(dimensions)) single.addDimension(k, v);
        single.addMetric(name, MetricUnit.Count, value);
        return;
      }
      metrics.addMetric(name, MetricUnit.Count, value);
    },
    milliseconds(name, value) {
      metrics.addMetric(name, MetricUnit.Milliseconds, value);
    },
  };
}

/** Snapshot progress as EMF metrics (names in contracts/metrics.ts), one record per chunk. */
export function emfSnapshotMetrics(metrics: Metrics): SnapshotMetrics {
  return {
    progress(s: SnapshotState): void {
      const m = metrics.singleMetric();
      m.clearDefaultDimensions();
      m.addDimensions({ [MetricDimension.SOURCE]: s.source, [MetricDimension.TABLE]: s.table });
      m.addMetric(MetricName.SNAPSHOT_ROWS_DONE, MetricUnit.Count, s.rowsDone);
      m.addMetric(MetricName.SNAPSHOT_RATE, MetricUnit.CountPerSecond, s.rowsPerSecond);
      if (s.etaSeconds !== null) m.addMetric(MetricName.SNAPSHOT_ETA, MetricUnit.Seconds, s.etaSeconds);
      if (s.throttle === 'slowed' || s.throttle === 'paused') m.addMetric(MetricName.SNAPSHOT_THROTTLED, MetricUnit.Count, 1);
    },
  };
}

/** The snapshot stall alarm's metric: seconds since the oldest running snapshot of the source last completed a chunk. */
export function emfStallAge(metrics: Metrics, sourceId: string): (seconds: number) => void {
  return (seconds) => {
    const m = metrics.singleMetric();
    m.clearDefaultDimensions();
    m.addDimensions({ [MetricDimension.SOURCE]: sourceId });
    m.addMetric(MetricName.SNAPSHOT_STALL_AGE, MetricUnit.Seconds, seconds);
  };
}

/** One EMF record per metric (a single metric flushes, and forgets its dimensions, on `addMetric`). */
function emitCount(metrics: Metrics, dims: Record<string, string>, name: string, value: number): void {
  const m = metrics.singleMetric();
  m.clearDefaultDimensions();
  m.addDimensions(dims);
  m.addMetric(name, MetricUnit.Count, value);
}

/** A reconcile run's metrics (names in contracts/metrics.ts): rows checked per table, then the sink's summary. */
export function emfReconcileMetrics(metrics: Metrics, sourceId: string, sink: string): ReconcileRunMetrics {
  const sinkDims = { [MetricDimension.SINK]: sink };
  return {
    rowsChecked(table, rows) {
      emitCount(
        metrics,
        { [MetricDimension.SINK]: sink, [MetricDimension.SOURCE]: sourceId, [MetricDimension.TABLE]: table },
        MetricName.RECONCILE_ROWS_CHECKED,
        rows,
      );
    },
    sinkSummary(s) {
      emitCount(metrics, sinkDims, MetricName.RECONCILE_DIVERGED_TABLES, s.divergedTables);
      emitCount(metrics, sinkDims, MetricName.RECONCILE_DIVERGED_KEYS, s.divergedKeys);
      emitCount(metrics, sinkDims, MetricName.RECONCILE_INCONCLUSIVE_TABLES, s.inconclusiveTables);
      emitCount(metrics, sinkDims, MetricName.RECONCILE_COVERAGE_GAPS, s.coverageGaps);
    },
  };
}
