/**
 * Workflows' metrics ports over Powertools (EMF; names and dimensions from contracts/metrics.ts).
 */
import { MetricUnit, type Metrics } from '@aws-lambda-powertools/metrics';
import { MetricDimension } from '../../contracts/metrics.ts';
import type { NormalizerMetrics } from '../core/capture/normalize.ts';

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
export function normalizerMetrics(metrics: Metrics, source: string): NormalizerMetrics {
  return {
    count(name, value, dimensions) {
      if (dimensions && Object.keys(dimensions).length > 0) {
        const single = onlyDimensions(metrics.singleMetric(), { [MetricDimension.SOURCE]: source });
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
