/**
 * Source pressure from the RDS instance's CloudWatch metrics (docs/snapshot.md "The budget"):
 * `WriteLatency` (seconds per write, per minute) and `CPUUtilization` (percent), read with
 * `GetMetricData`. `calibrate()` takes the baseline from the 15 minutes before the snapshot
 * starts (the maximum of the per-minute WriteLatency averages, the mean CPU); `read()` compares
 * the last 3 minutes against it: added write latency in percent of the baseline, added CPU in
 * percentage points. A metric with no data reads as null (the pacer then ignores that half of
 * the budget).
 */
import { GetMetricDataCommand, type CloudWatchClient, type GetMetricDataCommandOutput } from '@aws-sdk/client-cloudwatch';
import type { PressureReading } from '../core/snapshot/snapshot-pacer.ts';

/** The one call the probe makes (a `CloudWatchClient` or a stand-in with the same semantics). */
export type GetMetricData = (input: ConstructorParameters<typeof GetMetricDataCommand>[0]) => Promise<Pick<GetMetricDataCommandOutput, 'MetricDataResults'>>;

export function cloudWatchGetMetricData(client: CloudWatchClient): GetMetricData {
  return (input) => client.send(new GetMetricDataCommand(input));
}

interface Window {
  latency: number | null;
  cpu: number | null;
}

export class CloudWatchPressureProbe {
  private baseline: Window | null = null;

  constructor(
    private readonly getMetricData: GetMetricData,
    private readonly dbInstance: string,
    private readonly now: () => Date = () => new Date(),
  ) {}

  private async window(minutes: number): Promise<Window> {
    const end = this.now();
    const start = new Date(end.getTime() - minutes * 60_000);
    const metric = (id: string, name: string, stat: string) => ({
      Id: id,
      MetricStat: {
        Metric: { Namespace: 'AWS/RDS', MetricName: name, Dimensions: [{ Name: 'DBInstanceIdentifier', Value: this.dbInstance }] },
        Period: 60,
        Stat: stat,
      },
      ReturnData: true,
    });
    const out = await this.getMetricData({
      StartTime: start,
      EndTime: end,
      MetricDataQueries: [metric('latency', 'WriteLatency', 'Average'), metric('cpu', 'CPUUtilization', 'Average')],
      ScanBy: 'TimestampDescending',
    });
    const values = (id: string): number[] => (out.MetricDataResults ?? []).find((r) => r.Id === id)?.Values ?? [];
    const lat = values('latency');
    const cpu = values('cpu');
    return { latency: lat.length ? Math.max(...lat) : null, cpu: cpu.length ? cpu.reduce((a, b) => a + b, 0) / cpu.length : null };
  }

  async calibrate(): Promise<void> {
    this.baseline = await this.window(15);
  }

  async read(): Promise<PressureReading> {
    const now = await this.window(3);
    const b = this.baseline;
    const latency = b?.latency && now.latency !== null ? Math.max(0, ((now.latency - b.latency) / b.latency) * 100) : null;
    const cpu = b?.cpu !== null && b?.cpu !== undefined && now.cpu !== null ? Math.max(0, now.cpu - b.cpu) : null;
    return { addedWriteLatencyPct: latency, addedCpuPct: cpu, activeSessions: null };
  }
}

/** Two probes as one: the worse latency of the two, CPU from whichever has it, sessions from the first. */
export function combinePressure(a: PressureReading, b: PressureReading): PressureReading {
  const worse = (x: number | null, y: number | null): number | null => (x === null ? y : y === null ? x : Math.max(x, y));
  return {
    addedWriteLatencyPct: worse(a.addedWriteLatencyPct, b.addedWriteLatencyPct),
    addedCpuPct: worse(a.addedCpuPct, b.addedCpuPct),
    activeSessions: a.activeSessions ?? b.activeSessions,
  };
}
