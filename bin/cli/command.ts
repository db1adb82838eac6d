/**
 * What every `cdc` subcommand shares: the streams it uses, its shape, the usage error and the
 * exit codes. Kept apart from main.ts so subcommand modules do not import the router.
 */
import type { Readable, Writable } from 'node:stream';

/** Where a command reads and writes (the process streams, or others in tests). */
export interface CliIo {
  stdin: Readable;
  stdout: Writable;
  stderr: Writable;
}

export interface Command {
  name: string;
  /** One line for `cdc --help`. */
  summary: string;
  /** Runs the command with the arguments after its name; resolves to the exit code. */
  run(args: string[], io: CliIo): Promise<number>;
}

/** A command line that cannot be run as written; the router prints it with a usage hint, exit code 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** Success. */
export const EXIT_OK = 0;
/** The command ran, but some input it processed failed (reported on stderr). */
export const EXIT_FAILED = 1;
/** The command line was wrong. */
export const EXIT_USAGE = 2;
/** The command refused to run (the reason is on stderr); nothing was started or changed. */
export const EXIT_REFUSED = 3;

/** Writes text, waiting for the stream to drain when it asks to (large outputs into pipes). */
export async function write(stream: Writable, text: string): Promise<void> {
  if (!stream.write(text)) await new Promise<void>((resolve) => stream.once('drain', resolve));
}
