/**
 * Runs a `cdc` command in this process (the CLI's own `main`), as the end-to-end tests drive the
 * operator commands against a running `cdc local`; returns its exit code, stdout and stderr.
 */
import type { ChildProcess } from 'node:child_process';
import { PassThrough } from 'node:stream';
import { main } from '../../bin/cli/main.ts';

export interface CdcRun {
  code: number;
  out: string;
  err: string;
}

export async function runCdc(args: readonly string[]): Promise<CdcRun> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (d: Buffer) => (out += d.toString()));
  stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await main([...args], { stdin: new PassThrough(), stdout, stderr });
  return { code, out, err };
}

/**
 * Stops a `cdc local` a test started and waits for it to exit: SIGTERM first (a clean stop that
 * stops its servers, docs/local.md "Stopping"), SIGKILL after `graceMs`. Waiting matters: a state
 * reset right after a kill races the process for the state folder's lock and may leave its servers
 * running.
 */
export async function stopCdcProcess(child: ChildProcess, graceMs = 30_000): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  child.kill('SIGTERM');
  const killer = setTimeout(() => child.kill('SIGKILL'), graceMs);
  await exited;
  clearTimeout(killer);
}
