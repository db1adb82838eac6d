/**
 * The CloudWatch pressure probe (docs/snapshot.md "The budget"). CloudWatch has no local
 * stand-in, so this is the smallest honest one: a GetMetricData function over stored per-minute
 * datapoints that keeps the documented semantics the probe relies on — datapoints of the
 * requested namespace, metric and dimension only, within [StartTime, EndTime), one per Period,
 * newest first with `ScanBy: TimestampDescending`, results by query Id, empty Values when there
 * is no data.
 */
import { describe, expect, it } from 'vitest';
import { CloudWatchPressureProbe, combinePressure, type GetMetricData } from '../../lambda/adapters/snapshot-cloudwatch.ts';

type Series = Map<string, Array<{ at: number; value: number }>>;

function standIn(series: Series, calls: unknown[]): GetMetricData {
  return async (input) => {
    calls.push(input);
    const start = input!.StartTime!.getTime();
    const end = input!.EndTime!.getTime();
    return {
      MetricDataResults: input!.MetricDataQueries!.map((q) => {
        const m = q.MetricStat!.Metric!;
        const dim = m.Dimensions!.map((d) => `${d.Name}=${d.Value}`).join(',');
        const points = (series.get(`${m.Namespace}/${m.MetricName}/${dim}`) ?? [])
          .filter((p) => p.at >= start && p.at < end)
          .sort((a, b) => (input!.ScanBy === 'TimestampDescending' ? b.at - a.at : a.at - b.at));
        return { Id: q.Id, Values: points.map((p) => p.value), Timestamps: points.map((p) => new Date(p.at)) };
      }),
    };
  };
}

const T0 = Date.parse('2026-12-01T10:00:00Z');
const minute = (i: number) => T0 + i * 60_000;

describe('CloudWatch pressure probe', () => {
  it('reads added write latency (percent of the baseline) and added CPU (points) for the named instance only', async () => {
    const series: Series = new Map();
    const lat = 'AWS/RDS/WriteLatency/DBInstanceIdentifier=orders-db';
    const cpu = 'AWS/RDS/CPUUtilization/DBInstanceIdentifier=orders-db';
    series.set(
      lat,
      Array.from({ length: 15 }, (_, i) => ({ at: minute(-15 + i), value: i === 3 ? 0.002 : 0.0015 })),
    );
    series.set(
      cpu,
      Array.from({ length: 15 }, (_, i) => ({ at: minute(-15 + i), value: 20 })),
    );
    series.set('AWS/RDS/CPUUtilization/DBInstanceIdentifier=other', [{ at: minute(-1), value: 99 }]);
    let now = new Date(T0);
    const calls: unknown[] = [];
    const probe = new CloudWatchPressureProbe(standIn(series, calls), 'orders-db', () => now);
    await probe.calibrate();
    // During the snapshot: latency 0.0022 s (10 % over the 0.002 baseline maximum), CPU 26 %.
    series.get(lat)!.push({ at: minute(1), value: 0.0022 }, { at: minute(2), value: 0.0021 });
    series.get(cpu)!.push({ at: minute(1), value: 26 }, { at: minute(2), value: 26 });
    now = new Date(minute(3));
    const r = await probe.read();
    expect(r.addedWriteLatencyPct).toBeCloseTo(10, 5);
    expect(r.addedCpuPct).toBeCloseTo(6, 5);
    expect(JSON.stringify(calls[0])).toContain('"Namespace":"AWS/RDS"');
  });

  it('no data reads as null; combined with the SQL probe, the worse latency and the known CPU count', async () => {
    const probe = new CloudWatchPressureProbe(standIn(new Map(), []), 'orders-db', () => new Date(T0));
    await probe.calibrate();
    const r = await probe.read();
    expect(r).toEqual({ addedWriteLatencyPct: null, addedCpuPct: null, activeSessions: null });
    expect(
      combinePressure({ addedWriteLatencyPct: 4, addedCpuPct: null, activeSessions: 3 }, { addedWriteLatencyPct: 12, addedCpuPct: 2, activeSessions: null }),
    ).toEqual({ addedWriteLatencyPct: 12, addedCpuPct: 2, activeSessions: 3 });
  });
});
