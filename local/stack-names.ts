/**
 * The names of one local stack: its control-plane table and its streams (docs/local.md, "Ports
 * and names"). Each stack gets names of its own, derived from a random stack id made on its first
 * run and kept in its state folder, so a restart finds its own state again; and a stack that ever
 * reached another stack's server would still use only its own table and streams there, never
 * another stack's checkpoints, cursors and records. The consumers' checkpoints and the pollers'
 * cursors live in the control table, so they are the stack's own too.
 */
import { randomBytes } from 'node:crypto';
import { LocalConfigError } from './errors.ts';

/** The control table of a state folder made before stacks had names of their own. */
export const CONTROL_TABLE = 'cdc-control';

export interface StackNames {
  /** Random id of the stack, made on its first run; null for a state folder of an earlier version. */
  stackId: string | null;
  controlTable: string;
  streams: { raw: string; changeLog: string };
}

/** Names a user chose (each one optional): they win over derived ones on a first run. */
export interface ChosenNames {
  controlTable?: string;
  rawStream?: string;
  changeLogStream?: string;
}

/** A new stack id: 8 random hex digits. */
export function newStackId(): string {
  return randomBytes(4).toString('hex');
}

/** The names derived from a stack id, with the user's choices in their place. */
export function deriveStackNames(stackId: string, sourceId: string, chosen: ChosenNames = {}): StackNames {
  const names: StackNames = {
    stackId,
    controlTable: chosen.controlTable ?? `cdc-control-${stackId}`,
    streams: { raw: chosen.rawStream ?? `cdc-raw-${sourceId}-${stackId}`, changeLog: chosen.changeLogStream ?? `cdc-change-log-${stackId}` },
  };
  checkName(names.controlTable, 'control table', /^[A-Za-z0-9_.-]{3,255}$/, '3 to 255 letters, digits, _ . -');
  checkName(names.streams.raw, 'raw stream', /^[A-Za-z0-9_.-]{1,128}$/, '1 to 128 letters, digits, _ . -');
  checkName(names.streams.changeLog, 'change log stream', /^[A-Za-z0-9_.-]{1,128}$/, '1 to 128 letters, digits, _ . -');
  return names;
}

function checkName(name: string, what: string, pattern: RegExp, rule: string): void {
  if (!pattern.test(name)) throw new LocalConfigError(`the ${what} name ${JSON.stringify(name)} is not valid: it takes ${rule}`);
}

/** What a state file records of the names (fields absent in state folders of earlier versions). */
export interface RecordedNames {
  stackId?: string;
  controlTable?: string;
  streams: { raw: string; changeLog: string };
}

/** The names a state folder recorded (earlier versions: their streams and the one control table of then). */
export function recordedNames(state: RecordedNames): StackNames {
  return { stackId: state.stackId ?? null, controlTable: state.controlTable ?? CONTROL_TABLE, streams: state.streams };
}

/**
 * The names of a stack starting in a state folder: those it recorded (a restart), else new ones.
 * A name chosen now that differs from the recorded one is refused: the state is under the old one.
 */
export function stackNamesFor(previous: RecordedNames | null, sourceId: string, chosen: ChosenNames = {}, stateDir = 'the state folder'): StackNames {
  if (!previous) return deriveStackNames(newStackId(), sourceId, chosen);
  const names = recordedNames(previous);
  const clashes = [
    ['control table', chosen.controlTable, names.controlTable],
    ['raw stream', chosen.rawStream, names.streams.raw],
    ['change log stream', chosen.changeLogStream, names.streams.changeLog],
  ].filter(([, now, then]) => now !== undefined && now !== then);
  if (clashes.length > 0) {
    const list = clashes.map(([what, now, then]) => `${what} ${JSON.stringify(now)} (it has ${JSON.stringify(then)})`).join(', ');
    throw new LocalConfigError(`${stateDir} holds its state under other names than the ${list}; use another --state-dir for new names`);
  }
  return names;
}
