/**
 * Results of a benchmark: every figure is printed next to a reference measured in the same run,
 * with their ratio, and written to `bench/results/<name>.json`.
 *
 * Absolute times are noise on a shared machine; the ratio to a reference taken minutes apart on
 * the same machine is the result. The load average before and after each benchmark is recorded
 * so a reader can tell a quiet run from a busy one.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { exitOnHelp } from './usage.ts';

/** Where results are written (`bench/results/`). */
export const RESULTS_DIR = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', 'results');

/** One line of a result table. */
export interface ResultRow {
  /** What was measured (`apply, batch 10,000, COPY stage loader`). */
  measure: string;
  figure: number | null;
  unit: string;
  /** The reference figure and what it is; null when the row has no same-run reference. */
  reference: number | null;
  referenceLabel: string | null;
  /**
   * figure ÷ reference for rates, reference ÷ figure for times (so > 1 is always "better than
   * the reference"); null without a reference.
   */
  ratio: number | null;
  /** The target this figure is judged against, in words (`≥ 0.5× COPY`), and whether it was met. */
  target?: string;
  met?: boolean | null;
  note?: string;
}

/** Machine facts that make a figure readable. */
export interface MachineInfo {
  cpus: number;
  cpuModel: string;
  memoryGiB: number;
  node: string;
  platform: string;
  /** 1, 5 and 15 minute load averages. */
  loadBefore: number[];
  loadAfter: number[];
}

export interface BenchResult {
  name: string;
  startedAt: string;
  finishedAt: string;
  seconds: number;
  machine: MachineInfo;
  /** What was run and how (sizes, seeds, settings). */
  settings: Record<string, unknown>;
  rows: ResultRow[];
  /** Per-run raw numbers, phase breakdowns, profiles. */
  details: Record<string, unknown>;
}

/** Median of a list (mean of the two middle values for an even count); NaN for an empty list. */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Nearest-rank percentile (0–100); NaN for an empty list. */
export function percentile(values: readonly number[], p: number): number {
  if (values.length === 0) return Number.NaN;
  const s = [...values].sort((a, b) => a - b);
  const rank = Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1));
  return s[rank]!;
}

/** Milliseconds since an arbitrary origin, with sub-millisecond resolution. */
export function nowMs(): number {
  return performance.now();
}

/** A rate row: higher is better, ratio = figure ÷ reference. */
export function rateRow(
  measure: string,
  figure: number,
  unit: string,
  reference: number | null,
  referenceLabel: string | null,
  extra: Partial<ResultRow> = {},
): ResultRow {
  return { measure, figure, unit, reference, referenceLabel, ratio: reference ? figure / reference : null, ...extra };
}

/** A time row: lower is better, ratio = reference ÷ figure. */
export function timeRow(
  measure: string,
  figure: number,
  unit: string,
  reference: number | null,
  referenceLabel: string | null,
  extra: Partial<ResultRow> = {},
): ResultRow {
  return { measure, figure, unit, reference, referenceLabel, ratio: reference && figure ? reference / figure : null, ...extra };
}

function cpuModel(): string {
  return os.cpus()[0]?.model.trim() ?? 'unknown';
}

/** The load average now (1, 5, 15 minutes), rounded. */
export function loadAverage(): number[] {
  return os.loadavg().map((l) => Math.round(l * 100) / 100);
}

/** Collects the result of one benchmark; `finish()` prints it and writes the JSON file. */
export class Recorder {
  readonly rows: ResultRow[] = [];
  readonly details: Record<string, unknown> = {};
  private readonly started = new Date();
  private readonly loadBefore = loadAverage();

  constructor(
    readonly name: string,
    readonly settings: Record<string, unknown>,
  ) {}

  add(row: ResultRow): void {
    this.rows.push(row);
  }

  /** Prints the table, writes `bench/results/<name>.json`, returns the result. */
  finish(): BenchResult {
    const finished = new Date();
    const result: BenchResult = {
      name: this.name,
      startedAt: this.started.toISOString(),
      finishedAt: finished.toISOString(),
      seconds: Math.round((finished.getTime() - this.started.getTime()) / 100) / 10,
      machine: {
        cpus: os.cpus().length,
        cpuModel: cpuModel(),
        memoryGiB: Math.round(os.totalmem() / 1024 ** 3),
        node: process.version,
        platform: `${os.platform()} ${os.release()}`,
        loadBefore: this.loadBefore,
        loadAfter: loadAverage(),
      },
      settings: this.settings,
      rows: this.rows,
      details: this.details,
    };
    writeResult(result);
    console.log(`\n${formatTable(result)}\n`);
    return result;
  }
}

/** Writes a result to `bench/results/<name>.json`. */
export function writeResult(result: BenchResult): string {
  mkdirSync(RESULTS_DIR, { recursive: true });
  const file = path.join(RESULTS_DIR, `${result.name}.json`);
  writeFileSync(file, `${JSON.stringify(result, null, 2)}\n`);
  return file;
}

/** A number for a table cell: thousands separators, few significant digits. */
export function formatNumber(v: number | null): string {
  if (v === null || Number.isNaN(v)) return '—';
  const a = Math.abs(v);
  const digits = a >= 100 ? 0 : a >= 10 ? 1 : a >= 1 ? 2 : 3;
  return v.toLocaleString('en-US', { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

function formatRatio(v: number | null): string {
  return v === null || Number.isNaN(v) ? '—' : `${v.toFixed(2)}×`;
}

/** The rows of one or more results as an aligned text table (also valid Markdown). */
export function formatTable(...results: BenchResult[]): string {
  const header = ['benchmark', 'measure', 'figure', 'reference (same run)', 'ratio', 'target'];
  const lines: string[][] = [];
  for (const r of results) {
    for (const row of r.rows) {
      const target = row.target ? `${row.target}${row.met === true ? ' ✔' : row.met === false ? ' ✘' : ''}` : '';
      lines.push([
        r.name,
        row.measure,
        `${formatNumber(row.figure)} ${row.unit}`,
        row.reference === null ? '—' : `${formatNumber(row.reference)} (${row.referenceLabel ?? ''})`,
        formatRatio(row.ratio),
        target,
      ]);
    }
  }
  const widths = header.map((h, i) => Math.max(h.length, ...lines.map((l) => l[i]!.length)));
  const fmt = (cells: string[]): string => `| ${cells.map((c, i) => c.padEnd(widths[i]!)).join(' | ')} |`;
  return [fmt(header), `|${widths.map((w) => '-'.repeat(w + 2)).join('|')}|`, ...lines.map(fmt)].join('\n');
}

/** True when this module's file is the script node was started with. */
export function isMain(metaUrl: string): boolean {
  const arg = process.argv[1];
  if (!arg) return false;
  try {
    return path.resolve(arg) === fileURLToPath(metaUrl) || path.resolve(arg) === fileURLToPath(metaUrl).replace(/\.ts$/, '');
  } catch {
    return false;
  }
}

/** Runs a benchmark when its file is the process's entry point (`--help` prints its usage instead: bench/lib/usage.ts): exit 0 when it finishes, 1 (the error printed) when it fails. */
export function runIfMain(metaUrl: string, run: () => Promise<unknown>): void {
  if (!isMain(metaUrl)) return;
  exitOnHelp(metaUrl);
  run().then(
    () => process.exit(0),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}

/** Reads `--name value` / `--flag` style options. */
export function argValue(name: string): string | undefined {
  const i = process.argv.indexOf(`--${name}`);
  if (i < 0) return undefined;
  const v = process.argv[i + 1];
  return v === undefined || v.startsWith('--') ? '' : v;
}

/** A positive number option, or the default. */
export function numberArg(name: string, fallback: number): number {
  const v = argValue(name);
  if (v === undefined || v === '') return fallback;
  const n = Number(v);
  if (!Number.isFinite(n) || n <= 0) throw new Error(`--${name} expects a positive number, got '${v}'`);
  return n;
}

/** Waits `ms` milliseconds. */
export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}
