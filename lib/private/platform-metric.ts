/** A metric the platform's handlers publish (Embedded Metric Format), in the shared namespace. */
import { Duration } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import type { IConstruct } from 'constructs';
import { METRICS_NAMESPACE } from '../../contracts/metrics.ts';

/** Sum per minute unless `props` says otherwise; attached to `scope` so its region and account follow the stack. */
export function platformMetric(scope: IConstruct, metricName: string, dimensionsMap: Record<string, string>, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
  return new cloudwatch.Metric({
    namespace: METRICS_NAMESPACE,
    metricName,
    dimensionsMap,
    statistic: cloudwatch.Stats.SUM,
    period: Duration.minutes(1),
    ...props,
  }).attachTo(scope);
}
