/**
 * The snapshot pacer: how big the next chunk is, how long to wait before it, and whether the
 * next chunk may be read while this one is published (invariant 9, "the backfill yields";
 * docs/snapshot.md "The budget"). Pure: the worker asks `next()` before each chunk and
 * `record()`s what the chunk cost and what the source-pressure probe measured.
 *
 * `AdaptivePacer` runs two loops:
 * - **chunk size follows the target chunk time** (no pressure involved): a full chunk faster
 *   than the target grows by `increaseRows`, up to what its rate says fits the target and at
 *   most `maxChunk`; a chunk slower than 1.5 × the target shrinks to fit it. Bigger chunks mean
 *   fewer fences and control-plane writes per row. The time compared is the part of the read
 *   that grows with its rows (`rowsMs`): the read's round trips take as long for 50 rows as for
 *   50,000, so a chunk is never shrunk for them (a busy client, docs/snapshot.md "The budget").
 * - **the delay between chunks follows the source's pressure**, a duty cycle driven by the
 *   measured added latency (smoothed over chunks, `pressureWeight`): over budget, the rest
 *   ratio (delay ÷ the last chunk's busy time) doubles (at least `minRestRatio`, at most
 *   `maxRestRatio`): multiplicative decrease of the snapshot's share of the source; under
 *   `relaxBelow` × budget it halves and falls to zero below `minRestRatio` / 4: the snapshot
 *   gets its share back step by step; in between it holds. State `slowed` while resting.
 * - at `hardPauseFactor` × budget or more: pause `pauseMs`, halve the chunk (a long read holds
 *   the most), and rest at least 1 × the busy time afterwards (state `paused`).
 * The next chunk is read ahead (while the current one is published) only at full speed.
 */

/** A source's budget: how much the snapshot may add to the source's load (percent over the baseline). */
export interface SourceBudget {
  /** Added p99 write latency, percent. @default 10 */
  writeLatencyPct: number;
  /** Added CPU, percentage points. @default 5 */
  cpuPct: number;
}

export const DEFAULT_SOURCE_BUDGET: SourceBudget = Object.freeze({ writeLatencyPct: 10, cpuPct: 5 });

/** What the source-pressure probe measured, relative to the baseline taken before the snapshot. */
export interface PressureReading {
  /** Added write latency, percent over the baseline (p99 of the probe writes, or CloudWatch WriteLatency). */
  addedWriteLatencyPct: number | null;
  /** Added CPU, percentage points over the baseline (CloudWatch CPUUtilization; null locally). */
  addedCpuPct: number | null;
  /** Active sessions other than the snapshot's own (informational). */
  activeSessions: number | null;
}

export interface PacerSample {
  rows: number;
  /** Time the chunk's read took (fence wait not included), ms. */
  readMs: number;
  /**
   * The part of `readMs` that does not grow with the chunk's rows: its round trips to the source
   * (`ChunkRead.roundTripMs`), ms. @default 0
   */
  fixedMs?: number;
  /** Time the chunk kept the worker busy (read + publish + record), ms. @default readMs */
  busyMs?: number;
  pressure: PressureReading | null;
}

export interface PacerDecision {
  chunkSize: number;
  /** Wait this long before reading (0: read now). */
  pauseMs: number;
  state: 'full-speed' | 'slowed' | 'paused';
  /** Read the next chunk while this one is published (one read ahead). @default false */
  readAhead?: boolean;
}

/** The worker's pacer. */
export interface Pacer {
  next(): PacerDecision;
  record(sample: PacerSample): void;
}

/** A pacer that never adapts (tests, benchmarks of the unthrottled read rate). */
export class FixedPacer implements Pacer {
  constructor(
    private readonly chunkSize: number,
    private readonly pauseMs = 0,
  ) {}
  next(): PacerDecision {
    return { chunkSize: this.chunkSize, pauseMs: this.pauseMs, state: 'full-speed', readAhead: this.pauseMs === 0 };
  }
  record(): void {}
}

export interface AdaptivePacerOptions {
  budget?: SourceBudget;
  /** Target time of one chunk read, ms. @default 500 */
  targetChunkMs?: number;
  /** @default 1000 */
  initialChunk?: number;
  /** @default 50 */
  minChunk?: number;
  /** @default 50000 */
  maxChunk?: number;
  /** Additive increase per fast chunk, rows. @default 2000 */
  increaseRows?: number;
  /** Chunk size factor at the hard threshold. @default 0.5 */
  decrease?: number;
  /** Pause when pressure reaches this multiple of the budget. @default 2 */
  hardPauseFactor?: number;
  /** @default 2000 */
  pauseMs?: number;
  /** Smallest rest ratio (delay ÷ busy time) once over budget. @default 0.25 */
  minRestRatio?: number;
  /** Largest rest ratio: the snapshot keeps at least 1 / (1 + this) of its time. @default 32 */
  maxRestRatio?: number;
  /** Below this multiple of the budget the rest ratio halves. @default 0.5 */
  relaxBelow?: number;
  /** Weight of the newest pressure reading in the smoothed ratio. @default 0.5 */
  pressureWeight?: number;
}

/** How far over budget a reading is: the larger of the two ratios (1 = exactly at budget); 0 without data. */
export function budgetRatio(p: PressureReading | null, budget: SourceBudget): number {
  if (p === null) return 0;
  const lat = p.addedWriteLatencyPct === null || budget.writeLatencyPct <= 0 ? 0 : p.addedWriteLatencyPct / budget.writeLatencyPct;
  const cpu = p.addedCpuPct === null || budget.cpuPct <= 0 ? 0 : p.addedCpuPct / budget.cpuPct;
  return Math.max(lat, cpu, 0);
}

export class AdaptivePacer implements Pacer {
  readonly o: Required<AdaptivePacerOptions>;
  private size: number;
  private pause = 0;
  private rest = 0;
  private busyMs = 0;
  private ratio: number | null = null;
  private state: PacerDecision['state'] = 'full-speed';

  constructor(options: AdaptivePacerOptions = {}) {
    this.o = {
      budget: options.budget ?? DEFAULT_SOURCE_BUDGET,
      targetChunkMs: options.targetChunkMs ?? 500,
      initialChunk: options.initialChunk ?? 1000,
      minChunk: options.minChunk ?? 50,
      maxChunk: options.maxChunk ?? 50_000,
      increaseRows: options.increaseRows ?? 2000,
      decrease: options.decrease ?? 0.5,
      hardPauseFactor: options.hardPauseFactor ?? 2,
      pauseMs: options.pauseMs ?? 2000,
      minRestRatio: options.minRestRatio ?? 0.25,
      maxRestRatio: options.maxRestRatio ?? 32,
      relaxBelow: options.relaxBelow ?? 0.5,
      pressureWeight: options.pressureWeight ?? 0.5,
    };
    if (!(this.o.decrease > 0 && this.o.decrease < 1)) throw new RangeError(`decrease must be in (0, 1), got ${this.o.decrease}`);
    if (this.o.minChunk < 1 || this.o.maxChunk < this.o.minChunk)
      throw new RangeError(`need 1 ≤ minChunk ≤ maxChunk, got ${this.o.minChunk}, ${this.o.maxChunk}`);
    if (!(this.o.minRestRatio > 0 && this.o.maxRestRatio >= this.o.minRestRatio))
      throw new RangeError(`need 0 < minRestRatio ≤ maxRestRatio, got ${this.o.minRestRatio}, ${this.o.maxRestRatio}`);
    if (!(this.o.pressureWeight > 0 && this.o.pressureWeight <= 1)) throw new RangeError(`pressureWeight must be in (0, 1], got ${this.o.pressureWeight}`);
    this.size = this.clamp(this.o.initialChunk);
  }

  private clamp(n: number): number {
    return Math.max(this.o.minChunk, Math.min(this.o.maxChunk, Math.round(n)));
  }

  /** The current rest ratio (delay ÷ busy time): 0 at full speed. */
  restRatio(): number {
    return this.rest;
  }

  next(): PacerDecision {
    const pauseMs = this.pause + Math.round(this.rest * this.busyMs);
    return { chunkSize: this.size, pauseMs, state: this.state, readAhead: this.state === 'full-speed' && pauseMs === 0 };
  }

  record(sample: PacerSample): void {
    this.busyMs = sample.busyMs ?? sample.readMs;
    const reading = budgetRatio(sample.pressure, this.o.budget);
    // A reading at the hard threshold acts at once; otherwise the smoothed ratio drives the rest.
    this.ratio = this.ratio === null ? reading : this.o.pressureWeight * reading + (1 - this.o.pressureWeight) * this.ratio;
    this.pause = 0;
    if (reading >= this.o.hardPauseFactor) {
      this.state = 'paused';
      this.pause = this.o.pauseMs;
      this.rest = Math.min(this.o.maxRestRatio, Math.max(1, this.rest * 2));
      this.size = this.clamp(this.size * this.o.decrease);
      return;
    }
    if (this.ratio > 1) this.rest = Math.min(this.o.maxRestRatio, Math.max(this.o.minRestRatio, this.rest * 2));
    else if (this.ratio < this.o.relaxBelow) this.rest = this.rest / 2 < this.o.minRestRatio / 4 ? 0 : this.rest / 2;
    this.state = this.rest > 0 ? 'slowed' : 'full-speed';

    this.resize(sample);
  }

  /** The chunk-time loop: what the rows of the chunk took (its round trips left out) against the target. */
  private resize(sample: PacerSample): void {
    const target = this.o.targetChunkMs;
    const rowsMs = rowsTimeMs(sample);
    if (sample.rows > 0 && rowsMs > 1.5 * target) {
      this.size = this.clamp(Math.min(this.size, (sample.rows * target) / rowsMs));
      return;
    }
    // Only grow when the chunk was full: a short last chunk says nothing about the rate.
    if (sample.rows >= this.size) {
      const fits = rowsMs > 0 ? (sample.rows * target) / rowsMs : Number.POSITIVE_INFINITY;
      this.size = this.clamp(Math.min(this.size + this.o.increaseRows, Math.max(this.size, fits)));
    }
  }
}

/**
 * The time a chunk's rows took to read, ms: the read's time less its round trips (`fixedMs`),
 * which cost the same at every chunk size. On a busy client a round trip waits for the process to
 * get the CPU back, and a 600-row read of 5 ms on the source took over a second end to end: taken
 * as the rows' time, it shrank the chunk to its smallest while the source was idle, and per-chunk
 * costs (fence, publish, control-plane write) then held the snapshot at 5-150 rows/s
 * (docs/snapshot.md, "The budget").
 */
export function rowsTimeMs(sample: Pick<PacerSample, 'readMs' | 'fixedMs'>): number {
  return Math.max(0, sample.readMs - Math.max(0, sample.fixedMs ?? 0));
}

/**
 * The quantile of probe latencies the budget compares (docs/snapshot.md, "The budget"): the median
 * of the recent probes against the median of the baseline's. Not the 99th percentile: of the 50
 * probes a window holds, the 99th percentile is the slowest one, so a single slow commit (a
 * checkpoint, another tenant of the machine, the worker's own event loop busy packing a chunk)
 * read as pressure for the next 25 chunks and held a snapshot at its smallest chunk and longest
 * rest (about 20-50 rows/s, docs/partitioned-tables.md has the measurements); the median moves only
 * when half the probes are slower, which a snapshot that loads the source does.
 */
export const PROBE_QUANTILE = 0.5;

/**
 * Added latency below this many milliseconds is no pressure: a probe is one commit that waits for
 * a WAL flush, timed by the server (docs/snapshot.md, "The budget"), and a flush on a disk shared
 * with other work varies by about that much, while a commit without a flush takes a fraction of it
 * (10 % of 0.2 ms is 20 µs: below what the measurement can tell).
 */
export const PROBE_NOISE_FLOOR_MS = 1;

/** The baseline's own spread that still counts as no pressure: its `PROBE_SPREAD_QUANTILE` above its `PROBE_QUANTILE`. */
export const PROBE_SPREAD_QUANTILE = 0.9;

/**
 * The smallest added latency that is pressure, ms: `PROBE_NOISE_FLOOR_MS`, or the baseline's own
 * spread when that is wider (docs/snapshot.md, "The budget"): a probe commit waits for a WAL flush,
 * and on a disk shared with other work the flush varies by more than the snapshot could be told
 * apart from (measured 0.8 ms median, 3-5 ms at the 90th percentile on an idle server of a busy
 * machine). A median that moved less than the baseline's own 90th percentile did is that variation.
 */
export function probeNoiseFloorMs(baseline: readonly number[]): number {
  const spread = quantile(baseline, PROBE_SPREAD_QUANTILE) - quantile(baseline, PROBE_QUANTILE);
  return Math.max(PROBE_NOISE_FLOOR_MS, Number.isFinite(spread) ? spread : 0);
}

/** The `q` quantile of `xs` (nearest rank; NaN for none). */
export function quantile(xs: readonly number[], q: number): number {
  if (xs.length === 0) return Number.NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}

/**
 * Added write latency, percent over the baseline: the `PROBE_QUANTILE` of `recent` against that of
 * `baseline`, 0 when the difference is under `PROBE_NOISE_FLOOR_MS`; null without samples on
 * either side (or a zero baseline).
 */
export function addedLatencyPct(baseline: readonly number[], recent: readonly number[]): number | null {
  if (baseline.length === 0 || recent.length === 0) return null;
  const base = quantile(baseline, PROBE_QUANTILE);
  if (!(base > 0)) return null;
  const added = quantile(recent, PROBE_QUANTILE) - base;
  return added < probeNoiseFloorMs(baseline) ? 0 : (added / base) * 100;
}
