/** Metrics the platform's handlers publish (Embedded Metric Format), in the shared namespace. */
import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type { IConstruct } from 'constructs';
import { METRICS_NAMESPACE, MetricDimension } from '../../contracts/metrics.ts';

/** Sum per minute unless `props` says otherwise; attached to `scope` so its region and account follow the stack. */
export function platformMetric(
  scope: IConstruct,
  metricName: string,
  dimensionsMap: Record<string, string>,
  props?: cloudwatch.MetricOptions,
): cloudwatch.Metric {
  return new cloudwatch.Metric({
    namespace: METRICS_NAMESPACE,
    metricName,
    dimensionsMap,
    statistic: cloudwatch.Stats.SUM,
    period: Duration.minutes(1),
    ...props,
  }).attachTo(scope);
}

/**
 * Every table's series of a per-table platform metric of one source (dimensions Source and Table),
 * tables captured by pattern included: a CloudWatch `SEARCH` expression, maximum per minute unless
 * `props` says otherwise.
 */
export function searchByTable(metricName: string, sourceId: string, props?: cloudwatch.MathExpressionOptions): cloudwatch.IMetric {
  const period = props?.period ?? Duration.minutes(1);
  const schema = `{${METRICS_NAMESPACE},${MetricDimension.SOURCE},${MetricDimension.TABLE}}`;
  const query = `${schema} MetricName="${metricName}" ${MetricDimension.SOURCE}="${sourceId}"`;
  return new cloudwatch.MathExpression({
    expression: `SEARCH('${query}', '${cloudwatch.Stats.MAXIMUM}', ${period.toSeconds()})`,
    usingMetrics: {},
    // One series per table, each labelled with its table.
    label: "${PROP('Dim.Table')}",
    ...props,
    period,
  });
}
