/**
 * `cdc status`, `cdc pause`, `cdc resume`, `cdc resnapshot`, `cdc audit`: the operator actions
 * (docs/operations.md). One request/response shape (lambda/core/operator/operator.ts), each request on
 * its route (contracts/operator-routes.ts), through two doors: a `cdc local` state folder
 * (local/operator-door.ts), or the operator API on AWS, signed with the caller's own credentials
 * (bin/cli/operator-api.ts; `--url URL`, or `--stack NAME` to find it from the stack's outputs).
 *
 * Exit codes: 0 done, 1 error, 2 usage, 3 refused (the reason and what to do on stderr).
 */
import { POLL_DELETES_INVISIBLE } from '../../lambda/core/capture/poll.ts';
import { CloudFormationClient, DescribeStacksCommand } from '@aws-sdk/client-cloudformation';
import type { AuditEntry } from '../../lambda/core/shared/control-plane.ts';
import { formatDuration, parseDurationText } from '../../lambda/core/operator/operator-decisions.ts';
import { routeOfRequest } from '../../contracts/operator-routes.ts';
import type { ActionResult, StatusReport } from '../../lambda/core/operator/operator.ts';
import type { OperatorRequest } from '../../lambda/core/operator/operator-call.ts';
import { openOperatorApi } from './operator-api.ts';
import { openLocalOperator, type OperatorDoor } from '../../local/operator-door.ts';
import { DEFAULT_STATE_DIR } from '../../local/stack.ts';
import { formatBytes } from '../../local/status.ts';
import {
  EXIT_FAILED,
  EXIT_OK,
  EXIT_REFUSED,
  UsageError,
  write,
  type CliIo,
  type Command,
  type CommandSpec,
  type OptionUse,
  type Retired,
  type Values,
} from './command.ts';
import { on, parseCommandLine, RETIRED_FLAGS, text, use, VOCABULARY } from './options.ts';

/** The stack output holding the operator API's URL (lib/private/operator-function.ts). */
export const OPERATOR_API_OUTPUT = 'OperatorApiUrl';

/** Where an operator command acts: a state folder on this machine, or the operator API on AWS. */
const DOOR: OptionUse[] = [
  use(VOCABULARY.stateDir, {
    detail: "Works whether or not cdc local is running there (if not, DynamoDB Local is started on the folder's data for the duration of the command).",
    default: DEFAULT_STATE_DIR,
  }),
  use(VOCABULARY.stack),
  use(VOCABULARY.url),
  use(VOCABULARY.region),
  use(VOCABULARY.sourceId, { detail: 'Needed only when a table id is in several sources.' }),
];

/** `--source ID`, the old spelling of the source id in the operator commands (`--source` is a database URL everywhere else). */
const RETIRED_SOURCE: Retired = {
  flag: VOCABULARY.source,
  instead: 'named a source id here; use --source-id ID (--source is a source database URL in every command)',
  apply: (v, line) => (line.values['source-id'] ??= String(v)),
};

/** `--actor` on a command that writes nothing. */
const RETIRED_ACTOR: Retired = {
  flag: VOCABULARY.actor,
  instead: 'has no effect here: this command writes nothing to the audit log (the flag is for pause, resume, resnapshot and rebuild)',
};

/** The spec of an operator command: its own flags, then the door's, then `--actor` when it writes and `--json`. */
function operatorSpec(o: {
  name: string;
  summary: string;
  usage: string;
  description: string;
  table: 'one' | 'optional';
  own: OptionUse[];
  writes: boolean;
  retired?: Retired[];
}): CommandSpec {
  return {
    name: o.name,
    summary: o.summary,
    usage: [o.usage],
    description: o.description,
    arguments: [{ name: 'TABLE', help: o.table === 'one' ? 'the table (schema.table)' : 'only this table (schema.table) [default: every table]' }],
    options: [...o.own, ...(o.own.length > 0 ? [null] : []), ...DOOR, ...(o.writes ? [use(VOCABULARY.actor)] : []), use(VOCABULARY.json)],
    exits: {
      0: 'done',
      1: 'error (the control plane or the operator API could not be reached, no state folder, a malformed request)',
      ...(o.writes ? { 3: 'refused (the reason and what to do on stderr; with --json also on stdout); nothing was changed' } : {}),
    },
    retired: [RETIRED_SOURCE, ...(o.writes ? [] : [RETIRED_ACTOR]), ...(o.retired ?? [])],
  };
}

interface DoorOptions {
  stateDir: string;
  /** The sink's warehouse (cdc rebuild on a local state folder). */
  warehouse?: string | null;
  stack: string | null;
  url: string | null;
  region: string | null;
  source: string | null;
  /** The caller's note for the audit entry (`--actor`), not its identity. */
  actor: string | null;
  json: boolean;
}

interface Parsed {
  door: DoorOptions;
  positional: string[];
  values: Values;
}

/** Parses an operator command line (its spec's flags, the door's), printing deprecation notes on stderr. */
function parseOperatorArgs(spec: CommandSpec, args: readonly string[], io: CliIo): Parsed {
  const { values, positionals, notes } = parseCommandLine(spec, args);
  for (const n of notes) io.stderr.write(`${n}\n`);
  const door: DoorOptions = {
    stateDir: text(values, 'state-dir') ?? DEFAULT_STATE_DIR,
    stack: text(values, 'stack'),
    url: text(values, 'url'),
    region: text(values, 'region'),
    source: text(values, 'source-id'),
    actor: text(values, 'actor'),
    json: on(values, 'json'),
  };
  if (door.stack && door.url) throw new UsageError('give --stack or --url, not both');
  return { door, positional: positionals, values };
}

/** The operator API's URL from the stack's outputs. */
async function apiUrlOfStack(stack: string, region: string | undefined): Promise<string> {
  const cfn = new CloudFormationClient({ region });
  try {
    const out = await cfn.send(new DescribeStacksCommand({ StackName: stack }));
    const found = (out.Stacks?.[0]?.Outputs ?? []).filter((o) => (o.OutputKey ?? '').includes(OPERATOR_API_OUTPUT));
    if (found.length > 1)
      throw new OperatorCliError(`stack ${stack} has several ${OPERATOR_API_OUTPUT} outputs (${found.map((o) => o.OutputKey).join(', ')}): pass --url`);
    const url = found[0]?.OutputValue;
    if (!url) throw new OperatorCliError(`stack ${stack} has no ${OPERATOR_API_OUTPUT} output (does it deploy a ControlPlane of this version?): pass --url`);
    return url;
  } finally {
    cfn.destroy();
  }
}

/** The operator API through the caller's credentials. */
async function awsDoor(door: DoorOptions): Promise<OperatorDoor> {
  const url = door.url ?? (await apiUrlOfStack(door.stack!, door.region ?? undefined));
  return openOperatorApi({ url, region: door.region });
}

/** An error the operator CLI reports with exit code 1. */
export class OperatorCliError extends Error {
  override name = 'OperatorCliError';
}

/** Opens the door the options name. Exported for tests (which pass a door of their own). */
export type DoorOpener = (door: DoorOptions) => Promise<OperatorDoor>;
export const defaultDoor: DoorOpener = (door) =>
  door.stack || door.url ? awsDoor(door) : openLocalOperator(door.stateDir, { warehouseUrl: door.warehouse ?? null });
let opener: DoorOpener = defaultDoor;
/** Replaces how doors are opened (tests: the operator handler in process, as the Lambda would run it). */
export function setDoorOpener(next: DoorOpener | null): void {
  opener = next ?? defaultDoor;
}

const pad = (rows: string[][]): string => {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return (
    rows
      .map((r) =>
        r
          .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!)))
          .join('  ')
          .trimEnd(),
      )
      .join('\n') + '\n'
  );
};

/** A table's snapshot in `cdc status`: its state, rows done of the estimate and throttle (as `cdc local`'s board), the ETA while it runs. */
export function snapshotCell(s: NonNullable<StatusReport['tables'][number]['snapshot']>): string {
  const progress = s.detail ?? (s.rows !== undefined ? `${s.rows} rows` : s.chunksDone !== undefined ? `${s.chunksDone}/${s.chunksTotal ?? '?'} chunks` : null);
  return [s.state, progress, s.state === 'running' && s.eta ? `ETA ${s.eta}` : null].filter((x) => x).join(' ');
}

export function formatStatus(report: StatusReport): string {
  const rows: string[][] = [['SOURCE', 'TABLE', 'STATE', 'VERSION', 'SINK', 'APPLIED', 'HELD FROM', 'HEADROOM', 'DEAD', 'SNAPSHOT', 'REASON']];
  for (const t of report.tables) {
    const sinks =
      t.sinks.length > 0 ? t.sinks : [{ sink: '-', appliedPosition: null, heldFrom: null, heldAt: null, releasePending: false, fromTrimHorizon: false }];
    for (const s of sinks) {
      rows.push([
        t.source,
        t.table,
        t.state,
        String(t.schemaVersion),
        s.sink,
        s.appliedPosition ?? '-',
        s.heldFrom ? `${s.heldFrom}${s.releasePending ? (s.fromTrimHorizon ? ' (replaying from the trim horizon)' : ' (replaying)') : ''}` : '-',
        t.retentionHeadroomMs === null ? '-' : formatDuration(t.retentionHeadroomMs),
        String(t.deadLetters),
        // Snapshot progress comes from the snapshot worker's entry point when one is wired: in rows, as the board shows it.
        t.snapshot ? snapshotCell(t.snapshot) : '-',
        [t.stateReason, t.capture === 'poll' ? `capture poll: ${POLL_DELETES_INVISIBLE}` : null].filter((x) => x).join('; '),
      ]);
    }
  }
  const lag =
    report.endToEndLag.length > 0
      ? report.endToEndLag.map((l) => `end-to-end lag ${l.sink}: ${formatDuration(l.lagMs)} (${l.lagMs} ms at ${l.at})`).join('\n') + '\n'
      : 'end-to-end lag: unknown\n';
  // Tables the capture rules match but do not capture, each with its reason (docs/onboarding.md).
  const notCaptured = (report.notCaptured ?? []).map((n) => `not captured: ${n.source}/${n.table} ${n.verdict}: ${n.reasons.join('; ')}\n`).join('');
  // Rebuilds under way (docs/rebuild.md): the sink's rebuild slot and its checkpoint.
  const rebuilding = report.tables
    .flatMap((t) =>
      (t.rebuilds ?? []).map(
        (b) =>
          `rebuild ${b.stale ? 'stalled' : 'running'}: ${t.source}/${t.table} sink ${b.sink} (${b.mode}, ${b.id}) since ${b.startedAt}: ${b.events} events into the shadow in ${b.slices} slice(s), last report ${b.heartbeatAt}\n`,
      ),
    )
    .join('');
  return `${report.tables.length === 0 ? 'no registered tables\n' : pad(rows)}${notCaptured}${rebuilding}${formatSlots(report)}change log retention: ${formatDuration(report.changeLogRetentionMs)}\n${lag}`;
}

/** The slot monitor's latest report per source (docs/doctor.md): one row per slot, the named stop when the capture's slot is gone. */
export function formatSlots(report: StatusReport): string {
  const reports = report.slots ?? [];
  if (reports.length === 0) return '';
  const at = Date.parse(report.at);
  const rows: string[][] = [['SOURCE', 'SLOT', 'OWNER', 'ACTIVE', 'WAL STATUS', 'CONFIRMED', 'RETAINED', 'HEADROOM', 'LEVEL', 'MEASURED']];
  const notes: string[] = [];
  for (const r of reports) {
    if (!r.report) {
      notes.push(`slots of ${r.source}: unknown: ${r.problem ?? ''}\n`);
      continue;
    }
    const age = `${formatDuration(Math.max(0, at - Date.parse(r.report.at)))} ago`;
    for (const k of r.report.slots) {
      rows.push([
        r.source,
        k.slot,
        k.ours ? 'capture' : 'other',
        k.active ? 'yes' : 'no',
        k.walStatus ?? '-',
        k.confirmedLsn ?? '-',
        formatBytes(k.retainedBytes),
        formatBytes(k.headroomBytes),
        k.level,
        age,
      ]);
    }
    if (!r.report.slots.some((k) => k.ours)) rows.push([r.source, r.report.slot, 'capture', '-', 'missing', '-', '-', '-', 'lost', age]);
    if (r.report.stop) notes.push(`STOP ${r.source} slot ${r.report.slot}: ${r.report.stop}\n`);
    for (const k of r.report.slots) if (k.level !== 'ok' && !(k.ours && r.report.stop)) notes.push(`${k.level.toUpperCase()} ${r.source}: ${k.message}\n`);
  }
  return `${rows.length > 1 ? pad(rows) : ''}${notes.join('')}`;
}

export function formatAudit(entries: AuditEntry[]): string {
  if (entries.length === 0) return 'no audit entries\n';
  const rows: string[][] = [['AT', 'ACTOR', 'ACTION', 'TABLE', 'OUTCOME', 'DETAIL']];
  for (const e of entries) {
    const d = e.detail;
    const what = e.outcome === 'refused' ? `${String(d.code ?? '')}: ${String(d.reason ?? '')}` : typeof d.reason === 'string' ? d.reason : JSON.stringify(d);
    rows.push([e.at, e.actor, e.action, e.table ? `${e.source}/${e.table}` : '-', e.outcome, what.length > 160 ? `${what.slice(0, 157)}...` : what]);
  }
  return pad(rows);
}

async function runRequest(command: string, parsed: Parsed, io: CliIo, request: OperatorRequest): Promise<number> {
  let door: OperatorDoor;
  try {
    door = await opener(parsed.door);
  } catch (e) {
    io.stderr.write(`cdc ${command}: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}\n`);
    return EXIT_FAILED;
  }
  try {
    const response = await door.invoke(routeOfRequest(request).path, { request, ...(parsed.door.actor !== null ? { note: parsed.door.actor } : {}) });
    if (!response.ok) {
      io.stderr.write(`cdc ${command}: ${response.error.code}: ${response.error.message}\n`);
      return EXIT_FAILED;
    }
    const result = response.result;
    if (parsed.door.json) await write(io.stdout, `${JSON.stringify(result, null, 2)}\n`);
    if (Array.isArray(result)) {
      if (!parsed.door.json) await write(io.stdout, formatAudit(result));
      return EXIT_OK;
    }
    if ('tables' in result) {
      if (!parsed.door.json) await write(io.stdout, formatStatus(result));
      return EXIT_OK;
    }
    const r = result as ActionResult;
    if (r.outcome === 'refused') {
      io.stderr.write(`cdc ${command}: refused (${r.code}): ${r.reason}\n  what to do: ${r.hint}\n`);
      return EXIT_REFUSED;
    }
    if (!parsed.door.json) await write(io.stdout, `${r.message}\n`);
    return EXIT_OK;
  } catch (e) {
    io.stderr.write(`cdc ${command}: ${e instanceof Error ? `${e.name}: ${e.message}` : String(e)}\n`);
    return EXIT_FAILED;
  } finally {
    await door.close();
  }
}

function oneTable(command: string, positional: string[]): string {
  if (positional.length !== 1)
    throw new UsageError(`cdc ${command} takes one table (schema.table), got ${positional.length === 0 ? 'none' : positional.join(' ')}`);
  return positional[0]!;
}

const src = (p: Parsed): { source?: string } => (p.door.source ? { source: p.door.source } : {});

/** An operator command: parse with its spec, then build the request. */
function operatorCommand(spec: CommandSpec, request: (p: Parsed) => OperatorRequest): Command {
  return {
    spec,
    async run(args, io) {
      const p = parseOperatorArgs(spec, args, io);
      return runRequest(spec.name, p, io, request(p));
    },
  };
}

export const statusCommand = operatorCommand(
  operatorSpec({
    name: 'status',
    summary: 'per source and table: state, schema version, sink positions and holds, lag, dead letters, retention headroom',
    usage: '[TABLE] [options]',
    description: `Shows every registered table (or one): its state, schema version, each sink's applied and
held-from positions, how long the oldest held event stays in the change log, dead letters,
snapshot progress (rows done of the estimate, ETA) where a snapshot worker reports it, and the
end-to-end lag where known; per source, its replication slots as the slot monitor last measured
them (owner, active, wal_status, confirmed position, retained WAL, headroom, level, age) and a
STOP line when the capture's slot is gone or invalidated (docs/doctor.md).`,
    table: 'optional',
    own: [],
    writes: false,
  }),
  (p) => {
    if (p.positional.length > 1) throw new UsageError(`cdc status takes at most one table, got ${p.positional.join(' ')}`);
    return { action: 'status', ...src(p), ...(p.positional[0] ? { table: p.positional[0] } : {}) };
  },
);

export const pauseCommand = operatorCommand(
  operatorSpec({
    name: 'pause',
    summary: 'hold one table in every sink for a while (its events keep entering the change log)',
    usage: 'TABLE --for DURATION --reason TEXT [options]',
    description: `Pauses one table: its events keep entering the change log and every sink holds them from the
first held position; the other tables keep flowing. Refused when DURATION would outlive the
change log's retention (or the source's declared budget), or while a snapshot of the table runs.`,
    table: 'one',
    own: [use(VOCABULARY.for, { detail: 'Required.' }), use(VOCABULARY.reason, { detail: 'Required.' })],
    writes: true,
  }),
  (p) => {
    const table = oneTable('pause', p.positional);
    const forText = text(p.values, 'for');
    const reason = text(p.values, 'reason');
    if (forText === null) throw new UsageError('--for DURATION is required (e.g. --for 10m)');
    if (reason === null) throw new UsageError('--reason TEXT is required');
    const durationMs = parseDurationText(forText);
    if (durationMs === null) throw new UsageError(`--for expects a duration like 90s, 10m, 2h or 7d, got '${forText}'`);
    return { action: 'pause', ...src(p), table, durationMs, reason };
  },
);

export const resumeCommand = operatorCommand(
  operatorSpec({
    name: 'resume',
    summary: 'make a paused or held table active: each sink replays its held range in order, then applies live',
    usage: 'TABLE [--accept-schema] [options]',
    description: `Makes the table active; every sink that holds it replays the held range from the change log in
position order and then applies live (cdc status shows "(replaying)" until it is done).`,
    table: 'one',
    own: [use(VOCABULARY.acceptSchema)],
    writes: true,
  }),
  (p) => ({ action: 'resume', ...src(p), table: oneTable('resume', p.positional), acceptSchema: on(p.values, 'accept-schema') }),
);

export const resnapshotCommand = operatorCommand(
  operatorSpec({
    name: 'resnapshot',
    summary: 'mark a table for a re-snapshot and request it from the snapshot worker',
    usage: 'TABLE [--reason TEXT] [options]',
    description: `Marks the table needs-resnapshot and requests a snapshot. Refused while a snapshot of the table
is queued or running, or when the source's snapshot budget says no.`,
    table: 'one',
    own: [use(VOCABULARY.reason)],
    writes: true,
  }),
  (p) => {
    const reason = text(p.values, 'reason');
    return { action: 'resnapshot', ...src(p), table: oneTable('resnapshot', p.positional), ...(reason !== null ? { reason } : {}) };
  },
);

/** `--table T`, the old spelling of audit's table (a table is an argument in every operator command). */
const RETIRED_AUDIT_TABLE: Retired = {
  flag: RETIRED_FLAGS.table,
  instead: 'is now an argument, as in every operator command: cdc audit TABLE',
  apply: (v, line) => void line.positionals.push(String(v)),
};

export const auditCommand = operatorCommand(
  operatorSpec({
    name: 'audit',
    summary: 'the append-only audit log (state changes, operator actions, refusals)',
    usage: '[TABLE] [--since TIME] [options]',
    description: 'Lists the audit log in time order: who did what, when, and why, refused attempts included.',
    table: 'optional',
    own: [use(VOCABULARY.since)],
    writes: false,
    retired: [RETIRED_AUDIT_TABLE],
  }),
  (p) => {
    if (p.positional.length > 1) throw new UsageError(`cdc audit takes at most one table, got ${p.positional.join(' ')}`);
    const table = p.positional[0];
    const sinceText = text(p.values, 'since');
    let since: string | undefined;
    if (sinceText !== null) {
      const back = parseDurationText(sinceText);
      if (back !== null) since = new Date(Date.now() - back).toISOString();
      else if (!Number.isNaN(Date.parse(sinceText))) since = new Date(Date.parse(sinceText)).toISOString();
      else throw new UsageError(`--since expects an ISO-8601 time or a duration back from now (30m, 2h), got '${sinceText}'`);
    }
    return { action: 'audit', ...src(p), ...(table !== undefined ? { table } : {}), ...(since ? { since } : {}) };
  },
);

export const rebuildCommand = operatorCommand(
  operatorSpec({
    name: 'rebuild',
    summary: 'rebuild one table of a sink from the archive and the change log into a shadow, diff it, swap it in',
    usage: 'TABLE [--sink ID] [--from POSITION] [--rehearse] [options]',
    description: `Rebuilds the sink's changelog and mirror of TABLE into shadow objects by replaying the table's
history (the archive first, then the change log) through the same apply code as live, catches
up to the live position, diffs shadow against live (the diff is printed and kept in
<schema>._cdc_diff_<table>), then swaps the shadow in atomically: readers of the view see the
old table or the new one, never a partial one. Other tables keep flowing. Refused when the history
needed is no longer complete (docs/rebuild.md lists the reasons).`,
    table: 'one',
    own: [
      use(VOCABULARY.sink, { default: 'the only sink that applies TABLE' }),
      use(VOCABULARY.from),
      use(VOCABULARY.rehearse),
      use(VOCABULARY.warehouse, { default: "cdc local's embedded one, while it runs" }),
    ],
    writes: true,
  }),
  (p) => {
    const table = oneTable('rebuild', p.positional);
    const sink = text(p.values, 'sink');
    const from = text(p.values, 'from');
    const warehouse = text(p.values, 'warehouse');
    if (from !== null && !/^[0-9a-f]{24}$/.test(from)) throw new UsageError(`--from expects a position of 24 lower-case hex digits, got '${from}'`);
    if (warehouse !== null) p.door.warehouse = warehouse;
    return { action: 'rebuild', ...src(p), table, ...(sink !== null ? { sink } : {}), ...(from !== null ? { from } : {}), rehearse: on(p.values, 'rehearse') };
  },
);
