/**
 * Runs a `cdc` command in this process (the CLI's own `main`), as the end-to-end tests drive the
 * operator commands against a running `cdc local`; returns its exit code, stdout and stderr.
 */
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
