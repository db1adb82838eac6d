/**
 * The clock of `cdc local`'s progress lines while it drains, compares and stops (docs/local.md,
 * "Bounded runs (`--duration`)"): the lines are printed by a timer on a thread of its own, so a
 * main thread busy with the pipeline (applying, packing a chunk, comparing 500,000 rows in one
 * loop) or starved of the CPU on a loaded machine does not delay them. The main thread hands it
 * the newest line whenever it can (`set`); the ticker prints the newest it has every `everyMs`,
 * straight to the file descriptor, and when that line is older than `staleMs` it says how old
 * (`as of 12 s ago: the process is busy`), so a late reading is never shown as a fresh one.
 */
import { Worker } from 'node:worker_threads';

/** A line is marked with its age once it is older than this. */
export const STALE_LINE_MS = 3_000;

export interface ProgressTickerOptions {
  /** The file descriptor to print to (1 stdout, 2 stderr). */
  fd: number;
  everyMs: number;
  /** @default STALE_LINE_MS */
  staleMs?: number;
}

/**
 * The ticker thread, as plain JavaScript (it runs from the sources and from the bundled CLI alike):
 * keeps the newest line and its time, prints it every `everyMs` (counted from `startedAt`) with
 * `writeSync` to the descriptor.
 */
const TICKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { writeSync } = require('node:fs');
const { fd, everyMs, staleMs, startedAt } = workerData;
let latest = null;
let next = startedAt + everyMs;
parentPort.on('message', (m) => { latest = m; });
setInterval(() => {
  const now = Date.now();
  if (latest === null || now < next) return;
  next = Math.max(next + everyMs, now + everyMs / 2);
  const age = now - latest.at;
  const note = age > staleMs ? ' (as of ' + Math.round(age / 1000) + ' s ago: the process is busy)' : '';
  try { writeSync(fd, latest.text + note + '\\n'); } catch { /* a closed or full output skips one line */ }
}, Math.min(250, everyMs));
`;

export class ProgressTicker {
  private readonly worker: Worker;

  constructor(o: ProgressTickerOptions) {
    // Ticks counted from now, not from when the thread is up (slow to start on a busy machine).
    const workerData = { fd: o.fd, everyMs: o.everyMs, staleMs: o.staleMs ?? STALE_LINE_MS, startedAt: Date.now() };
    this.worker = new Worker(TICKER_SOURCE, { eval: true, workerData });
    // Never what keeps the process alive, and never what fails the run: a ticker that died prints nothing more.
    this.worker.unref();
    this.worker.on('error', () => undefined);
  }

  /** The newest line (without its newline), as of `at`. */
  set(text: string, at = Date.now()): void {
    this.worker.postMessage({ text, at });
  }

  async stop(): Promise<void> {
    await this.worker.terminate();
  }
}
