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
  /** Its name, summary, flags and exit codes: what `cdc help NAME` prints (bin/cli/options.ts). */
  spec: CommandSpec;
  /** Runs the command with the arguments after its name (`--help` is answered before); resolves to the exit code. */
  run(args: string[], io: CliIo): Promise<number>;
}

/** One flag and its one meaning. */
export interface Flag {
  /** The flag without its dashes (`state-dir`). */
  name: string;
  type: 'string' | 'boolean';
  /** The placeholder of its value in help (`URL`, `ID`, `DIR`). */
  value?: string;
  short?: string;
  /** Given more than once, the values add up. */
  multiple?: boolean;
  /** What it means, the same for every command that takes it. */
  help: string;
}

/** A flag as one command takes it: the vocabulary's meaning, plus that command's default or detail. */
export interface OptionUse {
  flag: Flag;
  /** Shown as `[default: …]`. */
  default?: string;
  /** A sentence the command adds to the flag's meaning. */
  detail?: string;
  /** Repeatable in this command (the values add up), though the vocabulary's flag is single. */
  multiple?: boolean;
}

/**
 * A spelling retired from a command, still accepted for one release: parsing prints `note`
 * (as a deprecation on stderr) and `apply` moves the value where it belongs now.
 */
export interface Retired {
  flag: Flag;
  /** What to write instead. */
  instead: string;
  /** How the old value is read now. */
  apply?: (value: string | boolean, into: ParsedLine) => void;
}

/** What a command line means to a command. */
export interface CommandSpec {
  name: string;
  /** One line for `cdc --help`. */
  summary: string;
  /** Usage lines after `cdc NAME`. */
  usage: string[];
  /** What the command does, as paragraphs. */
  description: string;
  /** The positional arguments, with what they are. */
  arguments?: Array<{ name: string; help: string }>;
  /** The flags it takes, in help order; a `null` separates groups in the help. */
  options: Array<OptionUse | null>;
  /** What exit codes 0, 1 and 3 mean for this command (2 is always a usage error); absent: not used. */
  exits: { 0: string; 1?: string; 3?: string };
  retired?: Retired[];
  /** A flag this command does not take but which is easy to mistake for one it takes: the message says which. */
  mistaken?: Record<string, string>;
}

export type Values = Record<string, string | boolean | string[] | undefined>;

export interface ParsedLine {
  values: Values;
  positionals: string[];
  /** Deprecation notes for retired spellings (printed on stderr by the command). */
  notes: string[];
}

/** A command line that cannot be run as written; the router prints it with a usage hint, exit code 2. */
export class UsageError extends Error {
  override name = 'UsageError';
}

/** Success. */
export const EXIT_OK = 0;
/** An error (reported on stderr), or a difference found (a verdict that does not match, a check that failed). */
export const EXIT_FAILED = 1;
/** The command line was wrong. */
export const EXIT_USAGE = 2;
/** The command refused (a safety rule said no: the reason and what to do on stderr); nothing was changed. */
export const EXIT_REFUSED = 3;

/** Writes text, waiting for the stream to drain when it asks to (large outputs into pipes). */
export async function write(stream: Writable, text: string): Promise<void> {
  if (!stream.write(text)) await new Promise<void>((resolve) => stream.once('drain', resolve));
}
