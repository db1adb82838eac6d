/**
 * The snapshot pacer: how big the next chunk is and whether to wait first (invariant 9, "the
 * backfill yields"; docs/snapshot.md "Budget"). Pure: the worker asks `next()` before each chunk
 * and `record()`s what the chunk cost and what the source-pressure probe measured.
 *
 * `AdaptivePacer` is additive-increase / multiplicative-decrease around a target chunk time,
 * against a per-source budget:
 * - pressure at or above `hardPauseFactor` × budget (added p99 write latency or added CPU):
 *   pause `pauseMs` before the next chunk and halve the chunk size (state `paused`);
 * - pressure over budget: chunk size × `decrease` (state `slowed`);
 * - a chunk slower than 1.5 × target: scale the size to hit the target (never up);
 * - otherwise: + `increaseRows`, up to the size the last chunk's rate says fits the target and
 *   at most `maxChunk` (state `full-speed`).
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
  pressure: PressureReading | null;
}

export interface PacerDecision {
  chunkSize: number;
  /** Wait this long before reading (0: read now). */
  pauseMs: number;
  state: 'full-speed' | 'slowed' | 'paused';
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
    return { chunkSize: this.chunkSize, pauseMs: this.pauseMs, state: 'full-speed' };
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
  /** @default 20000 */
  maxChunk?: number;
  /** Additive increase per fast chunk, rows. @default 500 */
  increaseRows?: number;
  /** Multiplicative decrease over budget. @default 0.5 */
  decrease?: number;
  /** Pause when pressure reaches this multiple of the budget. @default 2 */
  hardPauseFactor?: number;
  /** @default 2000 */
  pauseMs?: number;
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
  private state: PacerDecision['state'] = 'full-speed';

  constructor(options: AdaptivePacerOptions = {}) {
    this.o = {
      budget: options.budget ?? DEFAULT_SOURCE_BUDGET,
      targetChunkMs: options.targetChunkMs ?? 500,
      initialChunk: options.initialChunk ?? 1000,
      minChunk: options.minChunk ?? 50,
      maxChunk: options.maxChunk ?? 20_000,
      increaseRows: options.increaseRows ?? 500,
      decrease: options.decrease ?? 0.5,
      hardPauseFactor: options.hardPauseFactor ?? 2,
      pauseMs: options.pauseMs ?? 2000,
    };
    if (!(this.o.decrease > 0 && this.o.decrease < 1)) throw new RangeError(`decrease must be in (0, 1), got ${this.o.decrease}`);
    if (this.o.minChunk < 1 || this.o.maxChunk < this.o.minChunk) throw new RangeError(`need 1 ≤ minChunk ≤ maxChunk, got ${this.o.minChunk}, ${this.o.maxChunk}`);
    this.size = this.clamp(this.o.initialChunk);
  }

  private clamp(n: number): number {
    return Math.max(this.o.minChunk, Math.min(this.o.maxChunk, Math.round(n)));
  }

  next(): PacerDecision {
    return { chunkSize: this.size, pauseMs: this.pause, state: this.state };
  }

  record(sample: PacerSample): void {
    const ratio = budgetRatio(sample.pressure, this.o.budget);
    if (ratio >= this.o.hardPauseFactor) {
      this.state = 'paused';
      this.pause = this.o.pauseMs;
      this.size = this.clamp(this.size * this.o.decrease);
      return;
    }
    this.pause = 0;
    if (ratio > 1) {
      this.state = 'slowed';
      this.size = this.clamp(this.size * this.o.decrease);
      return;
    }
    const target = this.o.targetChunkMs;
    if (sample.rows > 0 && sample.readMs > 1.5 * target) {
      this.state = 'slowed';
      this.size = this.clamp(Math.min(this.size, (sample.rows * target) / sample.readMs));
      return;
    }
    this.state = 'full-speed';
    // Only grow when the chunk was full: a short last chunk says nothing about the rate.
    if (sample.rows >= this.size) {
      const fits = sample.readMs > 0 ? (sample.rows * target) / sample.readMs : Number.POSITIVE_INFINITY;
      this.size = this.clamp(Math.min(this.size + this.o.increaseRows, Math.max(this.size, fits)));
    }
  }
}
