/**
 * The end of a bounded `cdc local` run (docs/local.md, "Bounded runs (`--duration`)"): the measured summary,
 * with the workload phase (what the live lines showed) apart from the drain, and the lag of this
 * run's heartbeats apart from that of heartbeats committed before a restart; and the verdict as
 * one JSON document for `--json`.
 */
import { percentile } from '../../local/metrics.ts';
import { formatMs } from '../../local/status.ts';
import type { Verdict } from '../../local/verdict.ts';

/** What `cdc local --json` prints on stdout at the end. */
export interface LocalReport {
  /**
   * `match`: every verdict matches; `diverged`: one does not; `incomplete`: none diverged but the drain bound
   * (`--max-drain`) left tables not compared; `stopped`: a signal stopped the run before a verdict; `failed`: an error did.
   */
  outcome: 'match' | 'diverged' | 'incomplete' | 'stopped' | 'failed';
  exitCode: number;
  source: string;
  /** Why there is no verdict (stopped, failed). */
  reason?: string;
  /** The summary numbers of a bounded run that reached its verdicts, else null. */
  measured: (RunNumbers & { sink: string; firstAppliedAfterMs: number | null }) | null;
  /** One per sink compared (the warehouse, then the search sink). */
  verdicts: Array<Verdict & { sink: string }>;
}

export interface RunNumbers {
  workloadMs: number;
  drainMs: number;
  capturedRecords: number;
  capturedPerSecond: number;
  appliedEvents: number;
  appliedPerSecond: number;
  drainCapturedRecords: number;
  drainAppliedEvents: number;
  drainAppliedPerSecond: number;
  lagP50Ms: number | null;
  lagP99Ms: number | null;
  lagHeartbeats: number;
  /** Largest lag of heartbeats committed before this run started (it includes the downtime), or null. */
  carriedLagMs: number | null;
}

const perSecond = (n: number, ms: number): number => (ms > 0 ? Math.round((n * 10_000) / ms) / 10 : 0);

/** End-to-end lag of this run's heartbeats, and apart, of those committed before it started. */
export function lagText(lags: { live: number[]; carried: number[] }): string {
  const live = `end-to-end lag p50 ${formatMs(percentile(lags.live, 50))}, p99 ${formatMs(percentile(lags.live, 99))} over ${lags.live.length} heartbeats of this run`;
  if (lags.carried.length === 0) return live;
  return `${live}; ${lags.carried.length} heartbeat(s) committed before this run started arrived with up to ${formatMs(Math.max(...lags.carried))} lag (it includes the downtime; not in p50/p99)`;
}

/**
 * The summary of a bounded run: rates over the workload phase (start to "time is up", what the
 * live lines showed), then what the drain did, then the lag.
 */
export function runSummary(o: {
  startedAt: number;
  timeUpAt: number;
  caughtUpAt: number;
  atTimeUp: { captured: number; applied: number };
  captured: number;
  applied: number;
  lags: { live: number[]; carried: number[] };
}): { text: string; numbers: RunNumbers } {
  const workloadMs = o.timeUpAt - o.startedAt;
  const drainMs = o.caughtUpAt - o.timeUpAt;
  const n: RunNumbers = {
    workloadMs,
    drainMs,
    capturedRecords: o.atTimeUp.captured,
    capturedPerSecond: perSecond(o.atTimeUp.captured, workloadMs),
    appliedEvents: o.atTimeUp.applied,
    appliedPerSecond: perSecond(o.atTimeUp.applied, workloadMs),
    drainCapturedRecords: o.captured - o.atTimeUp.captured,
    drainAppliedEvents: o.applied - o.atTimeUp.applied,
    drainAppliedPerSecond: perSecond(o.applied - o.atTimeUp.applied, drainMs),
    lagP50Ms: percentile(o.lags.live, 50),
    lagP99Ms: percentile(o.lags.live, 99),
    lagHeartbeats: o.lags.live.length,
    carriedLagMs: o.lags.carried.length > 0 ? Math.max(...o.lags.carried) : null,
  };
  const text =
    `in ${formatMs(workloadMs)} of workload captured ${n.capturedRecords} records (${n.capturedPerSecond}/s) and applied ${n.appliedEvents} events (${n.appliedPerSecond}/s); ` +
    `the drain took ${formatMs(drainMs)}: ${n.drainCapturedRecords} more records captured, ${n.drainAppliedEvents} more events applied (${n.drainAppliedPerSecond}/s); ` +
    lagText(o.lags);
  return { text, numbers: n };
}

/** The report as printed: the outcome follows from the verdicts when there are any. */
export function finishReport(report: LocalReport, exitCode: number): LocalReport {
  const diverged = report.verdicts.some((v) => v.tables.some((t) => !t.match && !t.notCompared) || (!v.match && v.tables.length === 0));
  const outcome = report.verdicts.length === 0 ? report.outcome : report.verdicts.every((v) => v.match) ? 'match' : diverged ? 'diverged' : 'incomplete';
  return { ...report, outcome, exitCode };
}
