/**
 * What `cdc local` shows besides the pipeline's own status (docs/local.md, "Bounded runs
 * (`--duration`)"): snapshot rates and ETAs over a moving window, the end-to-end lag of this run apart
 * from the lag of heartbeats committed before a restart (which includes the downtime), and while
 * a bounded run drains, a progress line every 10 s per sink: events left, rate, ETA.
 */
import { isMainThread } from 'node:worker_threads';
import { MetricName } from '../../contracts/metrics.ts';
import type { MetricsCollector } from '../../local/metrics.ts';
import { percentile } from '../../local/metrics.ts';
import type { LocalPipeline } from '../../local/pipeline.ts';
import type { StatusPage } from '../../local/status-page.ts';
import { formatMs, MovingRate, renderDrainLine, SnapshotWindow, type DrainSink, type StatusSnapshot } from '../../local/status.ts';
import { ProgressTicker } from './progress-ticker.ts';

/** The window of the live lag percentiles (as the pipeline's status). */
const LAG_WINDOW_MS = 60_000;
/** The window of the drain's rates and ETAs. */
export const DRAIN_WINDOW_MS = 30_000;
/**
 * How often a draining run prints its progress, and a run off a terminal its status line: under
 * 10 s, so that a timer late by a busy machine's second still prints at least every 10 s.
 */
export const DRAIN_EVERY_MS = 9_000;

/**
 * The live status as the screen shows it: snapshot rates over a moving window, and per sink p50
 * and p99 over this run's heartbeats only (the window starts at the resume), with the largest lag
 * of heartbeats committed before the run started shown apart (`carriedLagMs`).
 */
export class StatusView {
  private readonly window = new SnapshotWindow();

  constructor(
    private readonly collector: MetricsCollector,
    private readonly runStartedAt: number,
  ) {}

  apply(s: StatusSnapshot): StatusSnapshot {
    const sinks = s.sinks.map((k) => {
      const { live, carried } = this.collector.lagSplit(MetricName.END_TO_END_LAG, { Sink: k.sink }, this.runStartedAt, s.now - LAG_WINDOW_MS);
      return { ...k, lagP50Ms: percentile(live, 50), lagP99Ms: percentile(live, 99), carriedLagMs: carried.length > 0 ? Math.max(...carried) : null };
    });
    return this.window.apply({ ...s, sinks });
  }
}

/** Lag samples of a sink for the summary: this run's heartbeats, and those committed before it started. */
export function runLags(collector: MetricsCollector, sink: string, runStartedAt: number): { live: number[]; carried: number[] } {
  return collector.lagSplit(MetricName.END_TO_END_LAG, { Sink: sink }, runStartedAt, runStartedAt);
}

/** What a drain reads from the running pipeline (a port, so tests feed it numbers and a clock). */
export interface DrainReadings {
  /** Snapshot rows still to read (estimate minus done, over running runs; per table in `leftByTable`), and rows read in total so far. */
  snapshot(): { left: number; done: number; leftByTable?: ReadonlyMap<string, number> };
  /** Change records the capture read from the log in this run. */
  captured(): number;
  /** Per sink: events applied in this run, and its poller's iterator age (ms). */
  sinks(): Array<{ sink: string; applied: number; behindMs: number }>;
}

/** Reads a running pipeline's counters for the drain (all counted since this run started). */
export function pipelineReadings(p: LocalPipeline, collector: MetricsCollector, sinks: string[]): DrainReadings {
  const first = new Map<string, number>();
  return {
    snapshot: () => {
      const lines = p.snapshots?.lines(Date.now()) ?? [];
      let left = 0;
      let read = 0;
      const leftByTable = new Map<string, number>();
      for (const l of lines) {
        if (!first.has(l.table)) first.set(l.table, l.rowsDone);
        read += Math.max(0, l.rowsDone - first.get(l.table)!);
        if (l.status === 'running' || l.status === 'requested') {
          left += Math.max(0, l.estimatedRows - l.rowsDone);
          leftByTable.set(l.table, Math.max(0, l.estimatedRows - l.rowsDone));
        }
      }
      return { left, done: read, leftByTable };
    },
    captured: () => p.capture.stats.records,
    sinks: () => {
      const pollers = [p.pollers.sink, ...(p.pollers.search ? [p.pollers.search] : [])];
      return sinks.map((sink, i) => ({
        sink,
        applied: collector.total(MetricName.EVENTS_APPLIED, { Sink: sink }),
        behindMs: Math.max(0, ...Object.values(pollers[i]?.stats.millisBehind ?? {})),
      }));
    },
  };
}

/**
 * The drain's progress: each `line(now)` reads the counters and renders what is left per sink
 * (records captured and snapshot rows read in this run, plus snapshot rows still to read, minus
 * events the sink applied in this run: about, as the counters start at this run), the rate over
 * the last DRAIN_WINDOW_MS, and the ETA at that rate.
 */
export class DrainProgress {
  private readonly rates = new Map<string, MovingRate>();
  private readonly snapshotRate = new MovingRate(DRAIN_WINDOW_MS);
  /** When the drain started ("time is up"); until then lines count from the run's start. */
  private drainStartedAt: number;

  constructor(
    private readonly readings: DrainReadings,
    startedAt: number,
  ) {
    this.drainStartedAt = startedAt;
  }

  /** The drain starts now: lines say how long it has been draining. */
  startDrain(at: number): void {
    this.drainStartedAt = at;
  }

  /**
   * Where each sink stands now, for the drain bound's verdict: events produced in this run and not
   * applied (as the lines count them), and snapshot rows still to read per table.
   */
  standing(): { pendingBySink: Map<string, number>; snapshotRowsLeft: ReadonlyMap<string, number> } {
    const snap = this.readings.snapshot();
    const produced = this.readings.captured() + snap.done;
    const pendingBySink = new Map(this.readings.sinks().map((k) => [k.sink, Math.max(0, produced - k.applied) + snap.left]));
    return { pendingBySink, snapshotRowsLeft: snap.leftByTable ?? new Map() };
  }

  line(now: number): string {
    const snap = this.readings.snapshot();
    const snapshotPerSecond = this.snapshotRate.add(now, snap.done);
    const produced = this.readings.captured() + snap.done;
    const sinks: DrainSink[] = this.readings.sinks().map((k) => {
      let r = this.rates.get(k.sink);
      if (!r) this.rates.set(k.sink, (r = new MovingRate(DRAIN_WINDOW_MS)));
      return { sink: k.sink, left: Math.max(0, produced - k.applied) + snap.left, perSecond: r.add(now, k.applied), behindMs: k.behindMs };
    });
    return renderDrainLine({ elapsedMs: now - this.drainStartedAt, windowMs: DRAIN_WINDOW_MS, snapshotRowsLeft: snap.left, snapshotPerSecond, sinks });
  }
}

/**
 * Prints `render()`'s line every `everyMs` until stopped (docs/local.md, "Bounded runs
 * (`--duration`)"). With a file descriptor, on a thread of its own (`ProgressTicker`): this thread
 * only hands it a fresh line every second, so a busy or CPU-starved main thread delays the numbers,
 * never the line (a line older than `STALE_LINE_MS` says how old). Without one (tests, and a
 * `cdc` run inside a worker thread, whose descriptors are not its own), a timer of this thread.
 */
export function printEvery(print: (text: string) => void, everyMs: number, render: () => string, fd: number | null): { stop(): Promise<void> } {
  const line = (): string | null => {
    try {
      return render();
    } catch {
      // a reading that failed (a stopping poller) skips one line, never the phase
      return null;
    }
  };
  const ticker = fd === null ? null : startTicker(fd, everyMs);
  if (ticker === null) {
    const timer = setInterval(() => {
      const text = line();
      if (text !== null) print(`${text}\n`);
    }, everyMs);
    return { stop: async () => clearInterval(timer) };
  }
  const refresh = (): void => {
    const text = line();
    if (text !== null) ticker.set(text);
  };
  refresh();
  const timer = setInterval(refresh, Math.min(REFRESH_MS, everyMs));
  return {
    stop: async () => {
      clearInterval(timer);
      await ticker.stop();
    },
  };
}

/** A ticker on `fd`, or null when its thread cannot start (then this thread's timer prints). */
function startTicker(fd: number, everyMs: number): ProgressTicker | null {
  try {
    return new ProgressTicker({ fd, everyMs });
  } catch {
    return null;
  }
}

/** How often the main thread hands the ticker a fresh line. */
const REFRESH_MS = 1_000;

/**
 * The descriptor `cdc local`'s own lines go to (`print` writes to this process's stdout, or stderr
 * with `--json`), for `printEvery`; null inside a worker thread (an in-process test run), whose
 * stdout is not the descriptor.
 */
export function progressFd(json: boolean): number | null {
  return isMainThread ? (json ? 2 : 1) : null;
}

/** Prints a drain line now and every DRAIN_EVERY_MS until stopped (`printEvery`); `onLine` gets each fresh line (the status page). */
export function printDrainProgress(
  progress: DrainProgress,
  print: (text: string) => void,
  fd: number | null,
  onLine: (text: string) => void = () => undefined,
  everyMs = DRAIN_EVERY_MS,
): { stop(): Promise<void> } {
  progress.startDrain(Date.now());
  const render = (): string => {
    const text = `cdc local: ${progress.line(Date.now())}`;
    onLine(text);
    return text;
  };
  try {
    print(`${render()}\n`);
  } catch {
    // a reading that failed (a stopping poller) skips one line, never the drain
  }
  return printEvery(print, everyMs, render, fd);
}

/**
 * Runs `work`, printing `still <what> (N s)` every `everyMs` until it settles (`printEvery`): a
 * long phase (comparing a big table row by row) is never silent for more than `everyMs`.
 */
export async function whileWorking<T>(
  print: (text: string) => void,
  what: string,
  work: Promise<T>,
  everyMs = DRAIN_EVERY_MS,
  now: () => number = Date.now,
  fd: number | null = null,
): Promise<T> {
  const started = now();
  const lines = printEvery(print, everyMs, () => `cdc local: still ${what} (${formatMs(now() - started)})`, fd);
  try {
    return await work;
  } finally {
    await lines.stop();
  }
}

/**
 * Gives the status page the pipeline's live status (the terminal's writer is released once time
 * is up, so after that the page is fed on its own: it stays live through the drain and the comparison).
 */
export async function feedPage(p: LocalPipeline, page: StatusPage | null, view: StatusView, hint: string | null): Promise<void> {
  if (!page) return;
  await p.refreshControl();
  page.show(view.apply(p.snapshot(hint)));
}
