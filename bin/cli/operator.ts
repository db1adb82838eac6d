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
import type { ActionResult, OperatorRequest, StatusReport } from '../../lambda/core/operator/operator.ts';
import { openOperatorApi } from './operator-api.ts';
import { openLocalOperator, type OperatorDoor } from '../../local/operator-door.ts';
import { DEFAULT_STATE_DIR } from '../../local/stack.ts';
import { formatBytes } from '../../local/status.ts';
import { EXIT_FAILED, EXIT_OK, UsageError, write, type CliIo, type Command } from './command.ts';

/** The action was refused; the reason is on stderr. */
export const EXIT_REFUSED = 3;

/** The stack output holding the operator API's URL (lib/private/operator-function.ts). */
export const OPERATOR_API_OUTPUT = 'OperatorApiUrl';

const DOOR_HELP = `Where:
  --state-dir DIR            a cdc local state folder [default: ${DEFAULT_STATE_DIR}]; works whether or
                             not cdc local is running there (if not, DynamoDB Local is started on
                             the folder's data for the duration of the command)
  --stack NAME               on AWS: the stack whose ControlPlane deploys the operator API
  --url URL                  on AWS: the operator API's URL (the stack output OperatorApiUrl);
                             requests are signed with your AWS credentials (SigV4)
  --region REGION            on AWS: the region [default: the URL's, else the SDK's]
  --source ID                the source of the table, when a table id is in several sources
  --actor TEXT               a note for the audit log; the audit records who you are from
                             your IAM identity (on AWS) or your OS user (locally)
  --json                     machine output on stdout
  -h, --help                 this text

Exit code: 0 done, 1 error, 2 usage error, 3 refused (the reason and what to do on stderr).`;

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
  help: boolean;
}

interface Parsed {
  door: DoorOptions;
  positional: string[];
  flags: Map<string, string | true>;
}

/** Parses the door options plus the command's own flags (`valued` take a value, `switches` do not). */
function parseArgs(command: string, args: readonly string[], valued: readonly string[], switches: readonly string[]): Parsed {
  const door: DoorOptions = { stateDir: DEFAULT_STATE_DIR, stack: null, url: null, region: null, source: null, actor: null, json: false, help: false };
  const positional: string[] = [];
  const flags = new Map<string, string | true>();
  const doorValued: Record<string, (v: string) => void> = {
    '--state-dir': (v) => (door.stateDir = v),
    '--stack': (v) => (door.stack = v),
    '--url': (v) => (door.url = v),
    '--region': (v) => (door.region = v),
    '--source': (v) => (door.source = v),
    '--actor': (v) => (door.actor = v),
  };
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    const eq = a.startsWith('--') ? a.indexOf('=') : -1;
    const name = eq > 0 ? a.slice(0, eq) : a;
    const inline = eq > 0 ? a.slice(eq + 1) : undefined;
    const value = (): string => {
      const v = inline ?? args[++i];
      if (v === undefined || (inline === undefined && v.startsWith('--'))) throw new UsageError(`${name} needs a value`);
      if (v === '') throw new UsageError(`${name} must not be empty`);
      return v;
    };
    if (name === '-h' || name === '--help') door.help = true;
    else if (name === '--json') door.json = true;
    else if (name in doorValued) doorValued[name]!(value());
    else if (valued.includes(name)) flags.set(name, value());
    else if (switches.includes(name)) flags.set(name, true);
    else if (a.startsWith('-')) throw new UsageError(`unknown option ${a} for cdc ${command}`);
    else positional.push(a);
  }
  if (door.stack && door.url) throw new UsageError('give --stack or --url, not both');
  return { door, positional, flags };
}

/** The operator API's URL from the stack's outputs. */
async function apiUrlOfStack(stack: string, region: string | undefined): Promise<string> {
  const cfn = new CloudFormationClient({ region });
  try {
    const out = await cfn.send(new DescribeStacksCommand({ StackName: stack }));
    const found = (out.Stacks?.[0]?.Outputs ?? []).filter((o) => (o.OutputKey ?? '').includes(OPERATOR_API_OUTPUT));
    if (found.length > 1) throw new OperatorCliError(`stack ${stack} has several ${OPERATOR_API_OUTPUT} outputs (${found.map((o) => o.OutputKey).join(', ')}): pass --url`);
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
export const defaultDoor: DoorOpener = (door) => (door.stack || door.url ? awsDoor(door) : openLocalOperator(door.stateDir, { warehouseUrl: door.warehouse ?? null }));
let opener: DoorOpener = defaultDoor;
/** Replaces how doors are opened (tests: the operator handler in process, as the Lambda would run it). */
export function setDoorOpener(next: DoorOpener | null): void {
  opener = next ?? defaultDoor;
}

const pad = (rows: string[][]): string => {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? '').length)));
  return rows.map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ').trimEnd()).join('\n') + '\n';
};

export function formatStatus(report: StatusReport): string {
  const rows: string[][] = [['SOURCE', 'TABLE', 'STATE', 'VERSION', 'SINK', 'APPLIED', 'HELD FROM', 'HEADROOM', 'DEAD', 'SNAPSHOT', 'REASON']];
  for (const t of report.tables) {
    const sinks = t.sinks.length > 0 ? t.sinks : [{ sink: '-', appliedPosition: null, heldFrom: null, heldAt: null, releasePending: false }];
    for (const s of sinks) {
      rows.push([
        t.source,
        t.table,
        t.state,
        String(t.schemaVersion),
        s.sink,
        s.appliedPosition ?? '-',
        s.heldFrom ? `${s.heldFrom}${s.releasePending ? ' (replaying)' : ''}` : '-',
        t.retentionHeadroomMs === null ? '-' : formatDuration(t.retentionHeadroomMs),
        String(t.deadLetters),
        // Snapshot progress comes from the snapshot worker's entry point when one is wired.
        t.snapshot ? `${t.snapshot.state}${t.snapshot.chunksDone !== undefined ? ` ${t.snapshot.chunksDone}/${t.snapshot.chunksTotal ?? '?'}` : ''}${t.snapshot.eta ? ` eta ${t.snapshot.eta}` : ''}` : '-',
        [t.stateReason, t.capture === 'poll' ? `capture poll: ${POLL_DELETES_INVISIBLE}` : null].filter((x) => x).join('; '),
      ]);
    }
  }
  const lag = report.endToEndLag.length > 0 ? report.endToEndLag.map((l) => `end-to-end lag ${l.sink}: ${formatDuration(l.lagMs)} (${l.lagMs} ms at ${l.at})`).join('\n') + '\n' : 'end-to-end lag: unknown\n';
  // Tables the capture rules match but do not capture, each with its reason (docs/onboarding.md).
  const notCaptured = (report.notCaptured ?? []).map((n) => `not captured: ${n.source}/${n.table} ${n.verdict}: ${n.reasons.join('; ')}\n`).join('');
  // Rebuilds under way (docs/rebuild.md): the sink's rebuild slot and its checkpoint.
  const rebuilding = report.tables
    .flatMap((t) => (t.rebuilds ?? []).map((b) => `rebuild ${b.stale ? 'stalled' : 'running'}: ${t.source}/${t.table} sink ${b.sink} (${b.mode}, ${b.id}) since ${b.startedAt}: ${b.events} events into the shadow in ${b.slices} slice(s), last report ${b.heartbeatAt}\n`))
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
      rows.push([r.source, k.slot, k.ours ? 'capture' : 'other', k.active ? 'yes' : 'no', k.walStatus ?? '-', k.confirmedLsn ?? '-', formatBytes(k.retainedBytes), formatBytes(k.headroomBytes), k.level, age]);
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
  if (positional.length !== 1) throw new UsageError(`cdc ${command} takes one table (schema.table), got ${positional.length === 0 ? 'none' : positional.join(' ')}`);
  return positional[0]!;
}

const src = (p: Parsed): { source?: string } => (p.door.source ? { source: p.door.source } : {});

export const statusCommand: Command = {
  name: 'status',
  summary: 'per source and table: state, schema version, sink positions and holds, lag, dead letters, retention headroom',
  async run(args, io) {
    const p = parseArgs('status', args, [], []);
    if (p.door.help) {
      await write(io.stdout, `Usage: cdc status [TABLE] [options]\n\nShows every registered table (or one): its state, schema version, each sink's applied and\nheld-from positions, how long the oldest held event stays in the change log, dead letters,\nsnapshot progress where a snapshot worker reports it, and the end-to-end lag where known; per\nsource, its replication slots as the slot monitor last measured them (owner, active, wal_status,\nconfirmed position, retained WAL, headroom, level, age) and a STOP line when the capture's slot\nis gone or invalidated (docs/doctor.md).\n\n${DOOR_HELP}\n`);
      return EXIT_OK;
    }
    if (p.positional.length > 1) throw new UsageError(`cdc status takes at most one table, got ${p.positional.join(' ')}`);
    return runRequest('status', p, io, { action: 'status', ...src(p), ...(p.positional[0] ? { table: p.positional[0] } : {}) });
  },
};

export const pauseCommand: Command = {
  name: 'pause',
  summary: "hold one table in every sink for a while (its events keep entering the change log)",
  async run(args, io) {
    const p = parseArgs('pause', args, ['--for', '--reason'], []);
    if (p.door.help) {
      await write(
        io.stdout,
        `Usage: cdc pause TABLE --for DURATION --reason TEXT [options]\n\nPauses one table: its events keep entering the change log and every sink holds them from the\nfirst held position; the other tables keep flowing. Refused when DURATION would outlive the\nchange log's retention (or the source's declared budget), or while a snapshot of the table runs.\n\n  --for DURATION             how long you expect to pause: 90s, 10m, 2h, 7d, 1h30m\n  --reason TEXT              why (kept in the audit log)\n\n${DOOR_HELP}\n`,
      );
      return EXIT_OK;
    }
    const table = oneTable('pause', p.positional);
    const forText = p.flags.get('--for');
    const reason = p.flags.get('--reason');
    if (typeof forText !== 'string') throw new UsageError('--for DURATION is required (e.g. --for 10m)');
    if (typeof reason !== 'string') throw new UsageError('--reason TEXT is required');
    const durationMs = parseDurationText(forText);
    if (durationMs === null) throw new UsageError(`--for expects a duration like 90s, 10m, 2h or 7d, got '${forText}'`);
    return runRequest('pause', p, io, { action: 'pause', ...src(p), table, durationMs, reason });
  },
};

export const resumeCommand: Command = {
  name: 'resume',
  summary: 'make a paused or held table active: each sink replays its held range in order, then applies live',
  async run(args, io) {
    const p = parseArgs('resume', args, [], ['--accept-schema']);
    if (p.door.help) {
      await write(
        io.stdout,
        `Usage: cdc resume TABLE [--accept-schema] [options]\n\nMakes the table active; every sink that holds it replays the held range from the change log in\nposition order and then applies live (cdc status shows "(replaying)" until it is done).\n\n  --accept-schema            for a table paused by a breaking schema change: continue with the\n                             new schema version (docs/operations.md says what each sink keeps of\n                             a dropped or renamed column); without it the command refuses\n\n${DOOR_HELP}\n`,
      );
      return EXIT_OK;
    }
    const table = oneTable('resume', p.positional);
    return runRequest('resume', p, io, { action: 'resume', ...src(p), table, acceptSchema: p.flags.get('--accept-schema') === true });
  },
};

export const resnapshotCommand: Command = {
  name: 'resnapshot',
  summary: 'mark a table for a re-snapshot and request it from the snapshot worker',
  async run(args, io) {
    const p = parseArgs('resnapshot', args, ['--reason'], []);
    if (p.door.help) {
      await write(io.stdout, `Usage: cdc resnapshot TABLE [--reason TEXT] [options]\n\nMarks the table needs-resnapshot and requests a snapshot. Refused while a snapshot of the table\nis queued or running, or when the source's snapshot budget says no.\n\n  --reason TEXT              why (kept in the audit log)\n\n${DOOR_HELP}\n`);
      return EXIT_OK;
    }
    const table = oneTable('resnapshot', p.positional);
    const reason = p.flags.get('--reason');
    return runRequest('resnapshot', p, io, { action: 'resnapshot', ...src(p), table, ...(typeof reason === 'string' ? { reason } : {}) });
  },
};

export const auditCommand: Command = {
  name: 'audit',
  summary: 'the append-only audit log (state changes, operator actions, refusals)',
  async run(args, io) {
    const p = parseArgs('audit', args, ['--table', '--since'], []);
    if (p.door.help) {
      await write(io.stdout, `Usage: cdc audit [--table TABLE] [--since TIME] [options]\n\nLists the audit log in time order: who did what, when, and why, refused attempts included.\n\n  --table TABLE              only this table's entries\n  --since TIME               only entries at or after TIME (ISO 8601, e.g. 2026-12-01T08:00:00Z,\n                             or a duration back from now: 30m, 2h, 7d)\n\n${DOOR_HELP}\n`);
      return EXIT_OK;
    }
    if (p.positional.length > 0) throw new UsageError(`cdc audit takes no positional arguments (use --table), got ${p.positional.join(' ')}`);
    const table = p.flags.get('--table');
    const sinceText = p.flags.get('--since');
    let since: string | undefined;
    if (typeof sinceText === 'string') {
      const back = parseDurationText(sinceText);
      if (back !== null) since = new Date(Date.now() - back).toISOString();
      else if (!Number.isNaN(Date.parse(sinceText))) since = new Date(Date.parse(sinceText)).toISOString();
      else throw new UsageError(`--since expects an ISO-8601 time or a duration back from now (30m, 2h), got '${sinceText}'`);
    }
    return runRequest('audit', p, io, { action: 'audit', ...src(p), ...(typeof table === 'string' ? { table } : {}), ...(since ? { since } : {}) });
  },
};

export const rebuildCommand: Command = {
  name: 'rebuild',
  summary: 'rebuild one table of a sink from the archive and the change log into a shadow, diff it, swap it in',
  async run(args, io) {
    const p = parseArgs('rebuild', args, ['--sink', '--from', '--warehouse'], ['--rehearse']);
    if (p.door.help) {
      await write(
        io.stdout,
        `Usage: cdc rebuild TABLE [--sink ID] [--from POSITION] [--rehearse] [options]\n\nRebuilds the sink's changelog and mirror of TABLE into shadow objects by replaying the table's\nhistory (the archive first, then the change log) through the same apply code as live, catches\nup to the live position, diffs shadow against live (the diff is printed and kept in\n<schema>._cdc_diff_<table>), then swaps the shadow in atomically: readers of the view see the\nold table or the new one, never a partial one. Other tables keep flowing. Refused when the history\nneeded is no longer complete (docs/rebuild.md lists the reasons).\n\n  --sink ID                  the sink to rebuild [default: the only sink that applies TABLE]\n  --from POSITION            replay from this position (24 hex digits) [default: the beginning]\n  --rehearse                 build and diff, do not swap; records the rebuild's duration\n  --warehouse URL            the sink's warehouse [default: cdc local's embedded one, while it runs]\n\n${DOOR_HELP}\n`,
      );
      return EXIT_OK;
    }
    const table = oneTable('rebuild', p.positional);
    const sink = p.flags.get('--sink');
    const from = p.flags.get('--from');
    const warehouse = p.flags.get('--warehouse');
    if (typeof from === 'string' && !/^[0-9a-f]{24}$/.test(from)) throw new UsageError(`--from expects a position of 24 lower-case hex digits, got '${from}'`);
    if (typeof warehouse === 'string') p.door.warehouse = warehouse;
    const request: OperatorRequest = { action: 'rebuild', ...src(p), table, ...(typeof sink === 'string' ? { sink } : {}), ...(typeof from === 'string' ? { from } : {}), rehearse: p.flags.get('--rehearse') === true };
    return runRequest('rebuild', p, io, request);
  },
};
