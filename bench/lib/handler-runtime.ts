/**
 * The Node.js flags a benchmark's handlers run with: those the constructs deploy them with, so a
 * figure measures the function as deployed. `cdc` deploys the warehouse applier with
 * `NODE_OPTIONS=applierNodeOptions(memory)` (contracts/env.ts; docs/performance-log.md, "The applier's young generation"), and V8
 * reads those flags only at start: a benchmark that runs the applier in its own process starts
 * itself again with them, unless they are set already or `--node-defaults` asks for Node's own
 * (the A/B of §24).
 */
import { spawn } from 'node:child_process';
import { applierNodeOptions, DEFAULT_APPLIER_MEMORY_MIB } from '../../contracts/env.ts';
import { argValue } from './report.ts';

/** Whether this process's `NODE_OPTIONS` set a semi-space (the applier's flags, or the caller's own). */
const hasSemiSpace = (): boolean => /--max-semi-space-size=\d+/.test(process.env.NODE_OPTIONS ?? '');

/** The flags this process runs with for the applier: `NODE_OPTIONS` when it sets a semi-space, else Node's defaults. */
export function handlerFlags(): string {
  return hasSemiSpace() ? process.env.NODE_OPTIONS! : 'Node.js defaults';
}

/**
 * Starts this benchmark again with the applier's flags when it runs without them; resolves to the
 * child's exit code then, to null when this process already has them (or `--node-defaults`).
 */
export function relaunchWithApplierFlags(): Promise<number> | null {
  if (argValue('node-defaults') !== undefined || hasSemiSpace()) return null;
  const env = { ...process.env, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} ${applierNodeOptions(DEFAULT_APPLIER_MEMORY_MIB)}`.trim() };
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [...process.execArgv, ...process.argv.slice(1)], { stdio: 'inherit', env });
    child.on('exit', (code, signal) => resolve(code ?? (signal ? 128 : 1)));
  });
}
