/**
 * The local stand-in for CloudWatch metrics: handlers publish Embedded Metric Format (EMF) lines
 * on stdout exactly as in Lambda; `cdc local` takes those lines off its stdout (so they do not
 * scribble over the live status), keeps them in a file, and summarises them here: per metric and
 * dimensions, counts, sums and recent values for rates and percentiles.
 */
import { createWriteStream, type WriteStream } from 'node:fs';

/** One metric series: a metric name and the dimension values it was published with. */
export interface Series {
  name: string;
  dimensions: Record<string, string>;
  count: number;
  sum: number;
  last: number | null;
  lastAt: number | null;
  /** Recent (time ms, value) samples, oldest first, at most `MAX_SAMPLES`. */
  samples: Array<[number, number]>;
}

const MAX_SAMPLES = 20_000;

function seriesKey(name: string, dims: Record<string, string>): string {
  return `${name}|${Object.keys(dims)
    .sort()
    .map((k) => `${k}=${dims[k]}`)
    .join(',')}`;
}

/** Percentile (0–100) of a list of numbers, nearest-rank; null for an empty list. */
export function percentile(values: readonly number[], p: number): number | null {
  if (values.length === 0) return null;
  const sorted = [...values].sort((a, b) => a - b);
  const rank = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[rank]!;
}

interface EmfDirective {
  Namespace?: string;
  Dimensions?: string[][];
  Metrics?: Array<{ Name?: string; Unit?: string }>;
}

/** Collects metric samples (from EMF lines or recorded directly) and answers summary questions. */
export class MetricsCollector {
  private readonly series = new Map<string, Series>();
  private readonly problems: Array<{ at: number; text: string }> = [];

  /** Remembers an error worth showing (handler ERROR logs, retried failures); keeps the last 5. */
  noteProblem(text: string, at = Date.now()): void {
    this.problems.push({ at, text });
    if (this.problems.length > 5) this.problems.shift();
  }

  /** Problems noted since `since` (epoch ms), oldest first. */
  problemsSince(since: number): Array<{ at: number; text: string }> {
    return this.problems.filter((p) => p.at >= since);
  }

  /** Records one value of a metric. */
  record(name: string, dimensions: Record<string, string>, value: number, at = Date.now()): void {
    const key = seriesKey(name, dimensions);
    let s = this.series.get(key);
    if (!s) {
      s = { name, dimensions: { ...dimensions }, count: 0, sum: 0, last: null, lastAt: null, samples: [] };
      this.series.set(key, s);
    }
    s.count++;
    s.sum += value;
    s.last = value;
    s.lastAt = at;
    s.samples.push([at, value]);
    if (s.samples.length > MAX_SAMPLES) s.samples.splice(0, s.samples.length - MAX_SAMPLES);
  }

  /**
   * Reads one EMF document (already parsed). Returns false if it is not EMF. Values may be a
   * number or an array of numbers (Powertools aggregates repeated values of one metric).
   */
  ingestEmf(doc: unknown): boolean {
    if (typeof doc !== 'object' || doc === null) return false;
    const d = doc as Record<string, unknown>;
    const aws = d._aws as { Timestamp?: number; CloudWatchMetrics?: EmfDirective[] } | undefined;
    if (!aws || !Array.isArray(aws.CloudWatchMetrics)) return false;
    const at = typeof aws.Timestamp === 'number' ? aws.Timestamp : Date.now();
    for (const directive of aws.CloudWatchMetrics) {
      const dimSets = directive.Dimensions && directive.Dimensions.length > 0 ? directive.Dimensions : [[]];
      for (const metric of directive.Metrics ?? []) {
        if (!metric.Name) continue;
        const raw = d[metric.Name];
        const values = Array.isArray(raw) ? raw : [raw];
        for (const dimNames of dimSets) {
          const dims: Record<string, string> = {};
          for (const n of dimNames) if (typeof d[n] === 'string') dims[n] = d[n] as string;
          for (const v of values) if (typeof v === 'number' && Number.isFinite(v)) this.record(metric.Name, dims, v, at);
        }
      }
    }
    return true;
  }

  /** Every series of a metric whose dimensions include `match`. */
  find(name: string, match: Record<string, string> = {}): Series[] {
    return [...this.series.values()].filter((s) => s.name === name && Object.entries(match).every(([k, v]) => s.dimensions[k] === v));
  }

  /** Sum of values over all matching series. */
  total(name: string, match: Record<string, string> = {}): number {
    return this.find(name, match).reduce((a, s) => a + s.sum, 0);
  }

  /** Values of matching series recorded since `since` (epoch ms). */
  valuesSince(name: string, match: Record<string, string>, since: number): number[] {
    const out: number[] = [];
    for (const s of this.find(name, match)) for (const [t, v] of s.samples) if (t >= since) out.push(v);
    return out;
  }

  /**
   * Values of a lag metric (ms, recorded when the measured thing arrived) since `since`, split by
   * when the measured thing started (arrival minus lag): at or after `runStartedAt` (`live`), or
   * before it (`carried`: committed before a restart, so the lag includes the downtime).
   */
  lagSplit(name: string, match: Record<string, string>, runStartedAt: number, since: number): { live: number[]; carried: number[] } {
    const live: number[] = [];
    const carried: number[] = [];
    for (const s of this.find(name, match)) for (const [t, v] of s.samples) if (t >= since) (t - v >= runStartedAt ? live : carried).push(v);
    return { live, carried };
  }

  /** Sum of matching values per second over the last `windowMs`. */
  ratePerSecond(name: string, match: Record<string, string>, windowMs: number, now = Date.now()): number {
    const vs = this.valuesSince(name, match, now - windowMs);
    return vs.reduce((a, v) => a + v, 0) / (windowMs / 1000);
  }

  /** The most recent value among matching series, or null. */
  latest(name: string, match: Record<string, string> = {}): { value: number; at: number } | null {
    let best: { value: number; at: number } | null = null;
    for (const s of this.find(name, match)) if (s.lastAt !== null && s.last !== null && (!best || s.lastAt > best.at)) best = { value: s.last, at: s.lastAt };
    return best;
  }

  /** Distinct values of one dimension among a metric's series (e.g. every Sink that reported lag). */
  dimensionValues(name: string, dimension: string): string[] {
    return [
      ...new Set(
        this.find(name)
          .map((s) => s.dimensions[dimension])
          .filter((v): v is string => v !== undefined),
      ),
    ].sort();
  }
}

/** A handle on the process output taken over by `captureStdout`. */
export interface CapturedStdout {
  /** Writes to the real stdout (the live status, the verdict). */
  write(text: string): void;
  /** Writes to the real stderr (the live status and the verdict lines when stdout carries JSON). */
  writeErr(text: string): void;
  /** Gives stdout and stderr back (flushing partial lines to the log). */
  restore(): Promise<void>;
}

type Write = (chunk: string | Uint8Array, encodingOrCb?: unknown, cb?: unknown) => boolean;

/** Replaces a stream's write with a line splitter; returns the original write and a flush. */
function splitLines(
  stream: NodeJS.WriteStream,
  line: (text: string, original: (t: string) => void) => void,
): { original: (t: string) => void; flush: () => void; restore: () => void } {
  const saved = stream.write;
  const bound = saved.bind(stream) as (chunk: string | Uint8Array) => boolean;
  const original = (t: string): void => {
    bound(t);
  };
  let partial = '';
  const patched: Write = (chunk, encodingOrCb, cb) => {
    partial += typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8');
    let nl: number;
    while ((nl = partial.indexOf('\n')) >= 0) {
      line(partial.slice(0, nl), original);
      partial = partial.slice(nl + 1);
    }
    const done = typeof encodingOrCb === 'function' ? encodingOrCb : cb;
    if (typeof done === 'function') process.nextTick(done as () => void);
    return true;
  };
  stream.write = patched as typeof stream.write;
  return {
    original,
    flush: () => {
      if (partial) line(partial, original);
      partial = '';
    },
    restore: () => {
      stream.write = saved;
    },
  };
}

function logLevelOf(text: string): string | null {
  if (!text.startsWith('{') || !text.includes('"level"')) return null;
  try {
    const v = JSON.parse(text) as { level?: unknown };
    return typeof v.level === 'string' ? v.level : null;
  } catch {
    return null;
  }
}

/**
 * Takes over stdout and stderr of the process, as CloudWatch collects a Lambda's output: EMF
 * lines go to the collector (and to `emfFile`); structured log lines of in-process handlers
 * (Powertools JSON, on stdout or stderr) go to `logFile`, and their errors are noted as problems
 * for the status. Anything else on stderr passes through. The caller writes its own output
 * through the returned `write`.
 */
export function captureStdout(collector: MetricsCollector, files: { emfFile: string; logFile: string }): CapturedStdout {
  const emf: WriteStream = createWriteStream(files.emfFile, { flags: 'a' });
  const log: WriteStream = createWriteStream(files.logFile, { flags: 'a' });
  const structured = (text: string): boolean => {
    const level = logLevelOf(text);
    if (level === null) return false;
    log.write(`${text}\n`);
    if (level === 'ERROR' || level === 'CRITICAL') {
      try {
        const v = JSON.parse(text) as { message?: unknown; service?: unknown; error?: unknown };
        const error = typeof v.error === 'string' ? v.error : v.error ? JSON.stringify(v.error) : '';
        collector.noteProblem(`${String(v.service ?? 'handler')}: ${String(v.message ?? '')}${error ? ` (${error})` : ''}`);
      } catch {
        collector.noteProblem(text);
      }
    }
    return true;
  };
  const out = splitLines(process.stdout, (text) => {
    if (text.startsWith('{') && text.includes('"_aws"')) {
      try {
        if (collector.ingestEmf(JSON.parse(text))) {
          emf.write(`${text}\n`);
          return;
        }
      } catch {
        // not JSON after all: keep it as a log line
      }
    }
    if (!structured(text)) log.write(`${text}\n`);
  });
  const err = splitLines(process.stderr, (text, original) => {
    if (!structured(text)) original(`${text}\n`);
  });
  return {
    write: out.original,
    writeErr: err.original,
    async restore(): Promise<void> {
      out.flush();
      err.flush();
      out.restore();
      err.restore();
      await Promise.all([new Promise<void>((r) => emf.end(() => r())), new Promise<void>((r) => log.end(() => r()))]);
    },
  };
}
