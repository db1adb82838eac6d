/**
 * The `cdc` command line: a router over subcommands. Each subcommand is a module exporting a
 * `Command` (name, one-line summary, `run(args, io)` returning the exit code).
 *
 * Exit codes: 0 success, 1 the command ran but something it processed failed, 2 usage error,
 * 3 refused (operator actions; the reason on stderr).
 */
import { EXIT_OK, EXIT_USAGE, UsageError, type CliIo, type Command } from './command.ts';
import { decodeCommand } from './decode.ts';
import { localCommand } from './local.ts';
import { auditCommand, pauseCommand, resnapshotCommand, resumeCommand, statusCommand } from './operator.ts';
import { doctorCommand } from './doctor.ts';
import { rebuildCommand } from './operator.ts';
import { reconcileCommand } from './reconcile.ts';

export type { CliIo, Command } from './command.ts';

/**
 * The subcommands, in the order `cdc --help` lists them.
 * To add one (e.g. `local`, the one-machine pipeline): write `bin/cli/<name>.ts` exporting a
 * `Command` and list it here.
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

function usage(): string {
  const width = Math.max(...COMMANDS.map((c) => c.name.length));
  return [
    'Usage: cdc <command> [options]',
    '',
    'Commands:',
    ...COMMANDS.map((c) => `  ${c.name.padEnd(width)}  ${c.summary}`),
    '',
    "Run 'cdc <command> --help' for a command's options.",
    '',
  ].join('\n');
}

/** Runs the command line `argv` (without the node and script paths) and returns the exit code. */
export async function main(argv: string[], io: CliIo = process): Promise<number> {
  const [name, ...rest] = argv;
  if (name === undefined) {
    io.stderr.write(usage());
    return EXIT_USAGE;
  }
  if (name === '--help' || name === '-h' || name === 'help') {
    io.stdout.write(usage());
    return EXIT_OK;
  }
  const command = COMMANDS.find((c) => c.name === name);
  if (!command) {
    io.stderr.write(`cdc: unknown command '${name}'\n\n${usage()}`);
    return EXIT_USAGE;
  }
  try {
    return await command.run(rest, io);
  } catch (e) {
    if (e instanceof UsageError) {
      io.stderr.write(`cdc ${command.name}: ${e.message}\nRun 'cdc ${command.name} --help' for usage.\n`);
      return EXIT_USAGE;
    }
    throw e;
  }
}
