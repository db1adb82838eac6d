/**
 * What `cdc local` prints about progress (docs/local.md, "Bounded runs (`--duration`)"), with an
 * injected clock: rates over a moving window (a pause shows within one window, not diluted since
 * the start), the drain's line per sink (events left, rate, ETA), the snapshot's throttle
 * explained, the lag of heartbeats committed before a restart apart from this run's p50/p99, the
 * summary's workload rates apart from the drain, and the --json report's outcome.
 */
import { describe, expect, it } from 'vitest';
import { DrainProgress, StatusView, whileWorking, type DrainReadings } from '../../bin/cli/local-progress.ts';
import { finishReport, runSummary, type LocalReport } from '../../bin/cli/local-report.ts';
import { MetricName } from '../../contracts/metrics.ts';
import { MetricsCollector } from '../../local/metrics.ts';
import {
  etaMs,
  explainThrottle,
  MovingRate,
  renderDrainLine,
  renderStatus,
  renderStatusLine,
  SnapshotWindow,
  type StatusSnapshot,
} from '../../local/status.ts';

function status(over: Partial<StatusSnapshot> = {}): StatusSnapshot {
  return {
    now: 1_000_000,
    startedAt: 900_000,
    source: 'demo',
    where: [],
    capture: { state: 'running', transactions: 10, records: 100, recordsPerSecond: 5, lastCommitLsn: null, slotRetainedBytes: null, error: null },
    workload: null,
    consumers: [],
    sinks: [{ sink: 'warehouse', lagMs: 800, lagAt: 999_000, lagP50Ms: null, lagP99Ms: null, eventsPerSecond: 5, deadLetters: 0 }],
    tables: [],
    deadLetters: 0,
    problems: [],
    hint: null,
    ...over,
  };
}

describe('MovingRate', () => {
  it('is the rate over the last window, so a stop shows as 0 within one window whatever came before', () => {
    const r = new MovingRate(30_000);
    expect(r.add(0, 0)).toBeNull();
    // 100/s for 60 s.
    for (let t = 1; t <= 60; t++) r.add(t * 1000, t * 100);
    expect(r.rate()).toBeCloseTo(100, 5);
    // Then nothing moves: since the start the average would still be 50/s after 60 s more; the window says 0.
    for (let t = 61; t <= 120; t++) r.add(t * 1000, 6000);
    expect(r.rate()).toBe(0);
    // It picks up within the window: 10/s for 30 s.
    for (let t = 121; t <= 150; t++) r.add(t * 1000, 6000 + (t - 120) * 10);
    expect(r.rate()).toBeCloseTo(10, 5);
  });

  it('never reports a negative rate (a counter that starts over)', () => {
    const r = new MovingRate(10_000);
    r.add(0, 500);
    expect(r.add(1000, 10)).toBe(0);
  });

  it('ETA: 0 when nothing is left, unknown when nothing moves', () => {
    expect(etaMs(0, null)).toBe(0);
    expect(etaMs(100, 0)).toBeNull();
    expect(etaMs(100, null)).toBeNull();
    expect(etaMs(1000, 250)).toBe(4000);
  });
});

describe('the drain line (every 10 s while a bounded run waits for its sinks)', () => {
  it('per sink: events left (captured and snapshot rows read in this run, plus rows still to read, minus applied), rate over the window, ETA', () => {
    let now = 0;
    const state = { snapshotLeft: 1000, snapshotDone: 0, captured: 500, applied: { warehouse: 0, search: 0 } };
    const readings: DrainReadings = {
      snapshot: () => ({ left: state.snapshotLeft, done: state.snapshotDone }),
      captured: () => state.captured,
      sinks: () => [
        { sink: 'warehouse', applied: state.applied.warehouse, behindMs: 1500 },
        { sink: 'search', applied: state.applied.search, behindMs: 40_000 },
      ],
    };
    const progress = new DrainProgress(readings, 0);
    const first = progress.line(now);
    expect(first).toBe(
      'draining for 0 ms (rates over the last 30.0 s): snapshot 1000 rows left to read, rate unknown, ETA unknown (no progress in the window); ' +
        'warehouse 1500 events left, rate unknown, ETA unknown (no progress in the window), iterator age 1.5 s; ' +
        'search 1500 events left, rate unknown, ETA unknown (no progress in the window), iterator age 40.0 s',
    );
    // 10 s later: the snapshot read 500 rows (50/s), the warehouse applied 1000 events (100/s), search 100 (10/s).
    now = 10_000;
    state.snapshotLeft = 500;
    state.snapshotDone = 500;
    state.applied = { warehouse: 1000, search: 100 };
    // "Time is up" came at 2 s: the line counts the drain from there, the rates keep their window.
    progress.startDrain(2_000);
    const line = progress.line(now);
    expect(line).toMatch(/^draining for 8\.0 s /);
    expect(line).toContain('snapshot 500 rows left to read, 50.0/s, ETA 10.0 s');
    // warehouse: produced 500 + 500 = 1000, applied 1000 → 0 on the log + 500 rows to read = 500 left at 100/s.
    expect(line).toContain('warehouse 500 events left, 100/s, ETA 5.0 s, iterator age 1.5 s');
    // search: 1000 - 100 + 500 = 1400 left at 10/s.
    expect(line).toContain('search 1400 events left, 10.0/s, ETA 2m20s, iterator age 40.0 s');
  });

  it('says so when nothing is left', () => {
    expect(renderDrainLine({ elapsedMs: 1000, windowMs: 30_000, snapshotRowsLeft: 0, snapshotPerSecond: null, sinks: [] })).toBe(
      'draining for 1.0 s (rates over the last 30.0 s): nothing left',
    );
  });
});

describe('the snapshot line', () => {
  const line = (over: object) => ({
    table: 'public.customers',
    status: 'running',
    rowsDone: 2538,
    estimatedRows: 5000,
    rowsPerSecond: 1747,
    etaSeconds: 1.4,
    throttle: 'paused',
    chunkSize: 50,
    sinceUpdateMs: 1000,
    error: null,
    ...over,
  });

  it('rate and ETA over a moving window of rows done, not the per-chunk rate: a resting snapshot shows what it really makes', () => {
    const w = new SnapshotWindow(30_000);
    // The worker's per-chunk rate says 1747/s; rows done move 10 per second.
    let s = w.apply(status({ now: 0, snapshots: [line({ rowsDone: 2538 })] }));
    expect(s.snapshots![0]!.rowsPerSecond).toBe(1747);
    for (let t = 1; t <= 30; t++) s = w.apply(status({ now: t * 1000, snapshots: [line({ rowsDone: 2538 + t * 10 })] }));
    expect(s.snapshots![0]!.rowsPerSecond).toBeCloseTo(10, 5);
    expect(s.snapshots![0]!.etaSeconds).toBeCloseTo((5000 - 2838) / 10, 5);
    expect(renderStatusLine(s)).toContain("snapshot public.customers 2838/5000 rows 10.0/s ETA 3m36s paused (the source's probe commits over 2x the budget)");
    expect(renderStatus(s).join('\n')).toContain("paused: the source's probe commits were slower than twice the budget allows");
  });

  it('explains each throttle state on screen', () => {
    expect(explainThrottle('paused')).toMatch(/the client's load does not count/);
    expect(explainThrottle('slowed')).toMatch(/over the budget/);
    expect(explainThrottle('fenced')).toMatch(/capture is behind/);
    expect(renderStatus(status({ snapshots: [line({ throttle: 'slowed' })] })).join('\n')).toContain("slowed: the source's probe commits were over the budget");
  });
});

describe('lag after a resume', () => {
  it("p50/p99 count this run's heartbeats; those committed before the run started are shown apart, labelled as including the downtime", () => {
    const c = new MetricsCollector();
    const runStartedAt = 100_000;
    // A heartbeat committed 89 s before the restart, applied 1 s after it; then this run's, ~1 s each.
    c.record(MetricName.END_TO_END_LAG, { Sink: 'warehouse' }, 90_000, 101_000);
    for (let i = 0; i < 20; i++) c.record(MetricName.END_TO_END_LAG, { Sink: 'warehouse' }, 900 + i * 10, 103_000 + i * 1000);
    const view = new StatusView(c, runStartedAt);
    const s = view.apply(status({ now: 125_000 }));
    const sink = s.sinks[0]!;
    expect(sink.carriedLagMs).toBe(90_000);
    expect(sink.lagP99Ms).toBe(1090);
    expect(sink.lagP50Ms).toBe(990);
    expect(renderStatus(s).join('\n')).toContain(
      "warehouse: heartbeats committed before this run started arrived with up to 1m30s lag (it includes the downtime); p50/p99 count this run's heartbeats only",
    );
    expect(renderStatusLine(s)).toContain('warehouse lag 800 ms (p99 1.1 s; up to 1m30s before the resume, downtime included)');
    // A run without a restart shows no such line.
    expect(renderStatus(new StatusView(new MetricsCollector(), runStartedAt).apply(status())).join('\n')).not.toContain('downtime');
  });
});

describe('the summary of a bounded run', () => {
  it('rates over the workload phase (what the live lines showed), the drain apart', () => {
    const { text, numbers } = runSummary({
      startedAt: 0,
      timeUpAt: 60_000,
      caughtUpAt: 90_000,
      atTimeUp: { captured: 1800, applied: 1500 },
      captured: 1810,
      applied: 3310,
      lags: { live: [900, 1000, 1100], carried: [89_000] },
    });
    expect(numbers).toMatchObject({
      workloadMs: 60_000,
      drainMs: 30_000,
      capturedPerSecond: 30,
      appliedPerSecond: 25,
      drainAppliedEvents: 1810,
      drainAppliedPerSecond: 60.3,
      lagP99Ms: 1100,
      carriedLagMs: 89_000,
    });
    expect(text).toContain(
      'in 1m00s of workload captured 1800 records (30/s) and applied 1500 events (25/s); the drain took 30.0 s: 10 more records captured, 1810 more events applied (60.3/s)',
    );
    expect(text).toContain('1 heartbeat(s) committed before this run started arrived with up to 1m29s lag (it includes the downtime; not in p50/p99)');
  });

  it('--json: the outcome follows from the verdicts; without verdicts it says why', () => {
    const base: LocalReport = { outcome: 'stopped', exitCode: 0, source: 'demo', measured: null, verdicts: [] };
    const t = {
      table: 'public.a',
      sourceRows: 1,
      warehouseRows: 1,
      missing: 0,
      extra: 0,
      different: 0,
      duplicates: 0,
      problems: [],
      examples: [],
      match: true,
    };
    expect(finishReport({ ...base, verdicts: [{ sink: 'warehouse', match: true, tables: [t] }] }, 0)).toMatchObject({ outcome: 'match', exitCode: 0 });
    expect(
      finishReport(
        {
          ...base,
          verdicts: [
            { sink: 'warehouse', match: true, tables: [t] },
            { sink: 'search', match: false, tables: [{ ...t, match: false, missing: 1 }] },
          ],
        },
        1,
      ),
    ).toMatchObject({ outcome: 'diverged', exitCode: 1 });
    expect(finishReport({ ...base, outcome: 'failed', reason: 'boom' }, 1)).toEqual({ ...base, outcome: 'failed', reason: 'boom', exitCode: 1 });
  });
});

describe('a long phase is never silent', () => {
  it('prints "still …" every interval until the work settles, then stops', async () => {
    const printed: string[] = [];
    let t = 0;
    let finish: (v: string) => void = () => undefined;
    const work = new Promise<string>((r) => (finish = r));
    const done = whileWorking(
      (x) => printed.push(x),
      'comparing source and warehouse',
      work,
      20,
      () => (t += 10_000),
    );
    await new Promise((r) => setTimeout(r, 70));
    finish('verdict');
    expect(await done).toBe('verdict');
    const count = printed.length;
    expect(count).toBeGreaterThanOrEqual(2);
    expect(printed[0]).toBe('cdc local: still comparing source and warehouse (10.0 s)\n');
    await new Promise((r) => setTimeout(r, 60));
    expect(printed.length).toBe(count);
  });
});
