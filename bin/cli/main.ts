/**
 * The `cdc` command line: a router over subcommands. Each subcommand is a module exporting a
 * `Command`: its spec (name, summary, flags from the one vocabulary of bin/cli/options.ts, exit
 * codes) and `run(args, io)` returning the exit code. `cdc help NAME` and `cdc NAME --help` print
 * the help written from the spec; `cdc --version` the package's version.
 *
 * Exit codes, the same for every command (docs/operations.md, "Exit codes"): 0 done, 1 an error
 * or a difference found, 2 usage error, 3 refused (the reason and what to do on stderr).
 */
import { readFileSync } from 'node:fs';
import { EXIT_OK, EXIT_USAGE, UsageError, type CliIo, type Command } from './command.ts';
import { decodeCommand } from './decode.ts';
import { localCommand } from './local.ts';
import { auditCommand, pauseCommand, rebuildCommand, resnapshotCommand, resumeCommand, statusCommand } from './operator.ts';
import { doctorCommand } from './doctor.ts';
import { reconcileCommand } from './reconcile.ts';
import { helpText } from './options.ts';

export type { CliIo, Command } from './command.ts';

/**
 * The subcommands, in the order `cdc --help` lists them.
 * To add one: write `bin/cli/<name>.ts` exporting a `Command` and list it here.
 */
export const COMMANDS: readonly Command[] = [
  decodeCommand,
  localCommand,
  statusCommand,
  pauseCommand,
  resumeCommand,
  resnapshotCommand,
  auditCommand,
  doctorCommand,
  rebuildCommand,
  reconcileCommand,
];

/**
 * The package's version. The package.json is two folders up both from bin/cli/ (the sources)
 * and from dist/cli/ (the bundle), so one relative path serves both.
 */
export function version(): string {
  const pkg = JSON.parse(readFileSync(new URL('../../package.json', import.meta.url), 'utf8')) as { name?: string; version?: string };
  return pkg.version ?? 'unknown';
}

function usage(): string {
  const width = Math.max(...COMMANDS.map((c) => c.spec.name.length));
  return [
    'Usage: cdc <command> [options]',
    '       cdc help <command>',
    '       cdc --version',
    '',
    'Commands:',
    ...COMMANDS.map((c) => `  ${c.spec.name.padEnd(width)}  ${c.spec.summary}`),
    '',
    "Run 'cdc help <command>' (or 'cdc <command> --help') for a command's options.",
    '',
    'Exit codes: 0 done, 1 error or a difference found, 2 usage error, 3 refused.',
    '',
  ].join('\n');
}

const find = (name: string): Command | undefined => COMMANDS.find((c) => c.spec.name === name);

/** Whether the arguments ask for help (before a `--`, which ends the options). */
function asksHelp(args: readonly string[]): boolean {
  const end = args.indexOf('--');
  return (end < 0 ? args : args.slice(0, end)).some((a) => a === '--help' || a === '-h');
}

/** Runs the command line `argv` (without the node and script paths) and returns the exit code. */
export async function main(argv: string[], io: CliIo = process): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined) {
    io.stderr.write(usage());
    return EXIT_USAGE;
  }
  if (name === '--version' || name === '-V') {
    io.stdout.write(`cdc ${version()}\n`);
    return EXIT_OK;
  }
  if (name === '--help' || name === '-h' || (name === 'help' && rest.length === 0)) {
    io.stdout.write(usage());
    return EXIT_OK;
  }
  if (name === 'help') {
    const command = find(rest[0]!);
    if (!command || rest.length > 1) {
      io.stderr.write(`cdc help: ${command ? 'one command at a time' : `unknown command '${rest[0]}'`}\n\n${usage()}`);
      return EXIT_USAGE;
    }
    io.stdout.write(helpText(command.spec));
    return EXIT_OK;
  }
  const command = find(name);
  if (!command) {
    io.stderr.write(`cdc: unknown command '${name}'\n\n${usage()}`);
    return EXIT_USAGE;
  }
  if (asksHelp(rest)) {
    io.stdout.write(helpText(command.spec));
    return EXIT_OK;
  }
  try {
    return await command.run(rest, io);
  } catch (e) {
    if (e instanceof UsageError) {
      io.stderr.write(`cdc ${command.spec.name}: ${e.message}\nRun 'cdc help ${command.spec.name}' for usage.\n`);
      return EXIT_USAGE;
    }
    throw e;
  }
}
