/**
 * `npm run bench`: runs every benchmark, each in its own process (so one's memory, JIT state and
 * child processes never colour the next), then prints one table of figure, same-run reference and
 * ratio, and writes `bench/results/<name>.json` per benchmark plus `bench/results/summary.json`.
 *
 *     npm run bench                      # all: synth, capture, apply, e2e, search, snapshot, rebuild, reconcile, merge, resume, hot-paths
 *     npm run bench -- --only apply,e2e  # some
 *     npm run bench -- --quick           # smaller sizes, for checking the harness
 *
 * Other options are passed to every benchmark (each ignores what it does not know).
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { exitOnHelp } from './lib/usage.ts';
import { argValue, formatTable, loadAverage, RESULTS_DIR, writeResult, type BenchResult } from './lib/report.ts';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BENCHMARKS = ['synth', 'capture', 'apply', 'e2e', 'search', 'snapshot', 'rebuild', 'reconcile', 'merge', 'resume', 'hot-paths'] as const;

/** Extra options per benchmark for `--quick`. */
const QUICK: Record<(typeof BENCHMARKS)[number], string[]> = {
  synth: ['--runs', '1'],
  capture: ['--events', '40000', '--kinesis-events', '10000'],
  apply: ['--quick'],
  e2e: ['--seconds', '20', '--reference-seconds', '5', '--search-seconds', '15', '--ceiling-changes', '10000'],
  search: ['--quick'],
  snapshot: ['--rows', '50000', '--seconds', '10', '--runs', '1'],
  rebuild: ['--quick'],
  reconcile: ['--rows', '200000', '--rows-per-run', '20000', '--runs', '1'],
  merge: ['--base-rows', '300000', '--delta', '20000'],
  resume: ['--held', '0.1'],
  'hot-paths': ['--rounds', '2'],
};

/** Extra options per benchmark for a full run. */
const FULL: Partial<Record<(typeof BENCHMARKS)[number], string[]>> = {
  synth: ['--cli'],
};

function runOne(name: string, args: string[]): Promise<number> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [...process.execArgv, path.join(HERE, `${name}.ts`), ...args], { stdio: 'inherit' });
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}

async function main(): Promise<number> {
  exitOnHelp(import.meta.url);
  const only = argValue('only');
  const quick = argValue('quick') !== undefined;
  const names = only ? only.split(',').map((s) => s.trim()) : [...BENCHMARKS];
  for (const n of names)
    if (!(BENCHMARKS as readonly string[]).includes(n)) throw new Error(`--only: unknown benchmark '${n}' (known: ${BENCHMARKS.join(', ')})`);
  const passThrough = process.argv.slice(2).filter((a, i, all) => a !== '--only' && all[i - 1] !== '--only' && a !== '--quick');
  const started = Date.now();
  const load = loadAverage();
  const results: BenchResult[] = [];
  const failed: string[] = [];
  for (const name of names) {
    process.stdout.write(`\n=== ${name} (load average ${loadAverage().join(' ')}) ===\n`);
    const file = path.join(RESULTS_DIR, `${name}.json`);
    const before = existsSync(file) ? readFileSync(file, 'utf8') : null;
    const key = name as (typeof BENCHMARKS)[number];
    const code = await runOne(name, [...(quick ? QUICK[key] : (FULL[key] ?? [])), ...passThrough]);
    const after = existsSync(file) ? readFileSync(file, 'utf8') : null;
    if (code !== 0 || after === null || after === before) {
      failed.push(name);
      process.stdout.write(`=== ${name} FAILED (exit ${code}) ===\n`);
      continue;
    }
    results.push(JSON.parse(after) as BenchResult);
  }
  const minutes = (Date.now() - started) / 60_000;
  process.stdout.write(`\n=== all benchmarks: ${minutes.toFixed(1)} min; load average at start ${load.join(' ')}, at end ${loadAverage().join(' ')} ===\n\n`);
  if (results.length > 0) process.stdout.write(`${formatTable(...results)}\n`);
  writeResult({
    name: 'summary',
    startedAt: new Date(started).toISOString(),
    finishedAt: new Date().toISOString(),
    seconds: Math.round((Date.now() - started) / 1000),
    machine: results[0]?.machine ?? {
      cpus: 0,
      cpuModel: '',
      memoryGiB: 0,
      node: process.version,
      platform: process.platform,
      loadBefore: load,
      loadAfter: loadAverage(),
    },
    settings: { benchmarks: names, quick },
    rows: results.flatMap((r) => r.rows.map((row) => ({ ...row, measure: `${r.name}: ${row.measure}` }))),
    details: { failed, loadBefore: load, loadAfter: loadAverage() },
  });
  if (failed.length > 0) process.stdout.write(`\nfailed: ${failed.join(', ')}\n`);
  return failed.length > 0 ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (err: unknown) => {
    console.error(err);
    process.exit(2);
  },
);
