/**
 * The `cdc` vocabulary: every flag of every command, with its one meaning, in one table
 * (docs/operations.md, "Command line"). A command lists the flags it takes (`use`), adding only a
 * default or a detail of its own; `parseCommandLine` reads a command line with node's
 * `util.parseArgs` against that list, and `helpText` writes the command's help from it. Retired
 * spellings are still accepted for one release, each with a deprecation note (`Retired`).
 *
 * To add a flag: add its entry to `VOCABULARY` (or reuse one that means the same thing), list it
 * in the command's `options`, and read it from `values` in the command.
 */
import { parseArgs } from 'node:util';
import { UsageError, type CommandSpec, type Flag, type OptionUse, type ParsedLine, type Values } from './command.ts';

const flag = (name: string, type: Flag['type'], help: string, more: Partial<Flag> = {}): Flag => ({ name, type, help, ...more });
const valued = (name: string, value: string, help: string, more: Partial<Flag> = {}): Flag => flag(name, 'string', help, { value, ...more });

/** Every flag of `cdc`, by name. One name, one meaning, whichever command takes it. */
export const VOCABULARY = {
  help: flag('help', 'boolean', 'this text', { short: 'h' }),
  json: flag('json', 'boolean', 'machine-readable output on stdout (JSON)'),
  // Where: a state folder (on this machine) or the operator API (on AWS).
  stateDir: valued('state-dir', 'DIR', 'a cdc local state folder'),
  stack: valued(
    'stack',
    'NAME',
    'a stack of your CDK app: on AWS the deployed stack whose ControlPlane serves the operator API (its URL is read from the stack output OperatorApiUrl); with cdc local --app, that stack in the cloud assembly',
  ),
  app: valued(
    'app',
    'CDK_OUT',
    'your synthesized CDK app (the folder cdk synth writes): the captured tables, masks, excludes, delete modes, keys, rules, sinks and their settings come from its templates (docs/local.md, "Your synthesized app")',
  ),
  url: valued('url', 'URL', "on AWS: the operator API's URL (the stack output OperatorApiUrl); requests are signed with your AWS credentials (SigV4)"),
  region: valued('region', 'REGION', "on AWS: the region [default: the URL's, else the SDK's]"),
  // The source: a database (URL) or a name in the pipeline (id).
  source: valued('source', 'URL', 'the source PostgreSQL, as the capture user sees it (postgres://user@host/db)'),
  sourceId: valued('source-id', 'ID', 'the source id: the name the pipeline gives the source (events, control plane, warehouse schema <id>_<schema>)'),
  // The sinks.
  warehouse: valued('warehouse', 'URL', 'the warehouse PostgreSQL (postgres://user@host/db)'),
  search: valued('search', 'URL', 'the OpenSearch or Elasticsearch the search sink indexes into (http://host:9200)'),
  sink: valued('sink', 'ID', 'the sink id a command acts on (a warehouse sink, or the search sink)'),
  warehouseId: valued('warehouse-id', 'ID', "the warehouse sink's id"),
  warehouseEngine: valued(
    'warehouse-engine',
    'ENGINE',
    'the warehouse sink\'s engine, postgres or redshift: the table checks refuse what it cannot hold (docs/onboarding.md, "Names"); `local` loads a redshift warehouse the Redshift way, through the Redshift stand-in on the warehouse PostgreSQL (docs/local.md, "The Redshift stand-in")',
  ),
  searchId: valued('search-id', 'ID', "the search sink's id"),
  noSearch: flag('no-search', 'boolean', 'run without the search sink'),
  withSearch: flag('with-search', 'boolean', 'the tables join a search sink too: the table checks refuse what it cannot hold (docs/search.md, "Index names")'),
  // Captured tables (docs/onboarding.md).
  tables: valued(
    'tables',
    'LIST',
    'tables to capture, comma separated (schema.table); a pattern (public.*) captures every eligible table it matches (docs/onboarding.md)',
  ),
  excludeTables: valued('exclude-tables', 'LIST', 'patterns the --tables patterns leave out (public.audit_*)'),
  tableConfig: valued(
    'table-config',
    'FILE',
    'captured-table settings, a JSON array like [{"table":"public.users","mask":["email"],"exclude":["ssn"]}, {"match":"public.*","excludeTables":["public.audit_*"]}] (docs/onboarding.md, docs/masking.md)',
  ),
  slot: valued('slot', 'NAME', "the capture's replication slot"),
  // What writes: the audit's note.
  actor: valued(
    'actor',
    'TEXT',
    'a note for the audit entry this command writes; who you are is recorded from your IAM identity (on AWS) or your OS user (locally)',
  ),
  reason: valued('reason', 'TEXT', 'why (kept in the audit log)'),
  // Operator actions.
  for: valued('for', 'DURATION', 'how long you expect to pause: 90s, 10m, 2h, 7d, 1h30m'),
  acceptSchema: flag(
    'accept-schema',
    'boolean',
    'for a table paused by a breaking schema change: continue with the new schema version (docs/operations.md says what each sink keeps of a dropped or renamed column); without it the command refuses',
  ),
  since: valued('since', 'TIME', 'only entries at or after TIME (ISO 8601, e.g. 2026-12-01T08:00:00Z, or a duration back from now: 30m, 2h, 7d)'),
  from: valued('from', 'POSITION', 'replay from this position (24 hex digits) [default: the beginning]'),
  rehearse: flag('rehearse', 'boolean', "build and diff, do not swap; records the rebuild's duration"),
  // cdc local.
  demo: flag(
    'demo',
    'boolean',
    'create a demo schema in the embedded source and run a steady workload (customers with a masked email and an excluded ssn, orders with a foreign key, documents with large unchanged text)',
  ),
  duration: valued(
    'duration',
    'TIME',
    'run for TIME (60s, 5m, 1h), then stop the workload, wait until the sinks caught up (progress every 10 s; at most --max-drain), compare every captured table of source and sinks and print the verdicts; exit 0 only when they all match',
  ),
  maxDrain: valued(
    'max-drain',
    'TIME',
    'with --duration: wait at most TIME after time is up for the sinks to catch up; then compare what is there and report a table that differs on a sink that had not caught up as not compared, with the events not yet applied (never as diverged; exit 1)',
  ),
  rate: valued('rate', 'N', 'demo transactions per second'),
  slotRead: valued(
    'slot-read',
    'MODE',
    'how the capture reads its slot: stream (a replication connection: the WAL is decoded once) or peek (SQL peeks, for a source that allows no replication connection)',
  ),
  maxTxRows: valued('max-tx-rows', 'N', 'stop loudly on a source transaction with more rows'),
  maxTxBytes: valued('max-tx-bytes', 'N', 'stop loudly on a source transaction with more bytes of decoded changes'),
  heartbeatMs: valued('heartbeat-ms', 'N', 'heartbeat interval, milliseconds'),
  fast: flag('fast', 'boolean', 'run the embedded PostgreSQL without fsync (tests, benchmarks)'),
  noSnapshot: flag(
    'no-snapshot',
    'boolean',
    'do not copy rows that existed before capture started (a table opts out alone with "snapshot": false in --table-config; docs/snapshot.md)',
  ),
  snapshotChunk: valued('snapshot-chunk', 'N', 'read snapshot chunks of N rows instead of pacing them against the source budget (tests, benchmarks)'),
  snapshotReplica: valued('snapshot-replica', 'URL', 'read snapshot chunks from this read replica of the source'),
  reset: flag(
    'reset',
    'boolean',
    'remove the state folder and the embedded PostgreSQL data (stopping what a killed run left running), then exit: the next run starts over',
  ),
  // cdc doctor.
  heartbeatSchema: valued('heartbeat-schema', 'S', 'schema of the heartbeat table'),
  heartbeatUser: valued('heartbeat-user', 'ROLE', 'the role that writes the heartbeat'),
  slotFailBytes: valued('slot-fail-bytes', 'N', 'retained WAL above which a slot is a FAIL'),
  // cdc reconcile.
  rowsPerRun: valued('rows-per-run', 'N', 'source rows checked per table per run at most'),
  settle: valued('settle', 'TIME', "wait before re-reading differing keys (longer than the sink's lag)"),
  sourceBudget: valued(
    'source-budget',
    'PCT',
    "the write latency the reads may add on the source, percent over its baseline; above it the reads slow down and pause (the snapshot worker's pacer)",
  ),
  // cdc decode.
  key: valued(
    'key',
    'schema.table=c1,c2',
    'primary-key columns of a table (repeatable); without it the key is learned from create-table control records and pk-only before images seen earlier in the input',
    { multiple: true },
  ),
  sort: flag('sort', 'boolean', 'print all events at the end, ordered by position (stable)'),
  quiet: flag('quiet', 'boolean', 'do not print notes on stderr'),
} as const satisfies Record<string, Flag>;

/** Spellings retired from the vocabulary, still accepted (with a deprecation note) where a command lists them in `retired`. */
export const RETIRED_FLAGS = {
  /** A table is an argument (TABLE) in every command that acts on tables. */
  table: valued('table', 'TABLE', 'a table (schema.table)'),
  /** `cdc local`'s warehouse sink id, now --warehouse-id beside --search-id. */
  sinkId: valued('sink-id', 'ID', "the warehouse sink's id"),
} as const satisfies Record<string, Flag>;

export const use = (f: Flag, more: Omit<OptionUse, 'flag'> = {}): OptionUse => ({ flag: f, ...more });

/** Exit codes, the same for every command (docs/operations.md, "Exit codes"). */
export const EXIT_CODE_MEANING = {
  0: 'done',
  1: 'error, or a difference found',
  2: 'usage error (the message names the flag)',
  3: 'refused (the reason and what to do on stderr); nothing was changed',
} as const;

function flagOf(spec: CommandSpec, name: string): Flag | null {
  for (const o of spec.options) if (o && o.flag.name === name) return o.flag;
  for (const r of spec.retired ?? []) if (r.flag.name === name) return r.flag;
  return null;
}

/** parseArgs' error as a message that names the flag. */
function usageMessage(spec: CommandSpec, e: Error & { code?: string }): string {
  const named = /'(-{1,2}[^' =]+)/.exec(e.message)?.[1] ?? '';
  switch (e.code) {
    case 'ERR_PARSE_ARGS_UNKNOWN_OPTION': {
      const hint = spec.mistaken?.[named.replace(/^-+/, '')];
      return hint ?? `unknown option '${named}' for cdc ${spec.name}`;
    }
    case 'ERR_PARSE_ARGS_INVALID_OPTION_VALUE': {
      const f = flagOf(spec, named.replace(/^-+/, ''));
      return f?.type === 'boolean' ? `${named} takes no value` : `${named} needs a value${f?.value ? ` (${f.value})` : ''}`;
    }
    case 'ERR_PARSE_ARGS_UNEXPECTED_POSITIONAL': {
      const arg = /Unexpected argument '([^']*)'/.exec(e.message)?.[1] ?? '';
      return `cdc ${spec.name} takes no argument '${arg}' (options start with --)`;
    }
    default:
      return e.message;
  }
}

/** Reads `args` against the command's flags. Throws a UsageError naming the flag on a bad line. */
export function parseCommandLine(spec: CommandSpec, args: readonly string[]): ParsedLine {
  const options: Record<string, { type: 'string' | 'boolean'; short?: string; multiple?: boolean }> = {};
  const declare = (f: Flag, multiple?: boolean): void => {
    options[f.name] = { type: f.type, ...(f.short ? { short: f.short } : {}), ...(multiple || f.multiple ? { multiple: true } : {}) };
  };
  for (const o of spec.options) if (o) declare(o.flag, o.multiple);
  for (const r of spec.retired ?? []) declare(r.flag, true);
  // A negative number is a value, not a flag (`--rate -1` reaches the flag's own check).
  const joined: string[] = [];
  for (let i = 0; i < args.length; i++) {
    const name = /^--([^=]+)$/.exec(args[i]!)?.[1];
    const next = args[i + 1];
    if (name && options[name]?.type === 'string' && next !== undefined && /^-\d/.test(next)) {
      joined.push(`--${name}=${next}`);
      i++;
    } else joined.push(args[i]!);
  }
  let parsed: { values: Values; positionals: string[] };
  try {
    parsed = parseArgs({ args: joined, options, strict: true, allowPositionals: (spec.arguments ?? []).length > 0 }) as {
      values: Values;
      positionals: string[];
    };
  } catch (e) {
    throw new UsageError(usageMessage(spec, e as Error & { code?: string }));
  }
  const line: ParsedLine = { values: { ...parsed.values }, positionals: [...parsed.positionals], notes: [] };
  for (const [name, v] of Object.entries(parsed.values)) {
    const values = Array.isArray(v) ? v : [v];
    if (values.some((x) => x === '')) throw new UsageError(`--${name} must not be empty`);
  }
  for (const r of spec.retired ?? []) {
    const given = line.values[r.flag.name];
    if (given === undefined) continue;
    delete line.values[r.flag.name];
    line.notes.push(`cdc ${spec.name}: deprecated: --${r.flag.name} ${r.instead}; the old spelling is accepted until the next release`);
    for (const v of Array.isArray(given) ? given : [given]) r.apply?.(v, line);
  }
  return line;
}

/** A string flag's value (the last one given), or null. */
export function text(values: Values, name: string): string | null {
  const v = values[name];
  if (Array.isArray(v)) return v[v.length - 1] ?? null;
  return typeof v === 'string' ? v : null;
}

/** Every value of a repeatable string flag. */
export function texts(values: Values, name: string): string[] {
  const v = values[name];
  return Array.isArray(v) ? v : typeof v === 'string' ? [v] : [];
}

/** A boolean flag. */
export function on(values: Values, name: string): boolean {
  return values[name] === true;
}

/** A positive integer flag, or null when absent. */
export function positiveInt(values: Values, name: string): number | null {
  const t = text(values, name);
  if (t === null) return null;
  const n = Number(t);
  if (!Number.isSafeInteger(n) || n <= 0) throw new UsageError(`--${name} expects a positive integer, got '${t}'`);
  return n;
}

const WIDTH = 100;
const COLUMN = 29;

/** Wraps `words` into lines of at most WIDTH characters, after `lead` (on a line of its own when long), indented to COLUMN. */
function wrap(lead: string, words: string, column = COLUMN): string[] {
  const lines: string[] = [];
  const indent = ' '.repeat(column);
  let line = indent;
  if (lead.length <= column - 2) line = lead.padEnd(column);
  else lines.push(lead);
  let fresh = true;
  for (const word of words.split(/\s+/).filter(Boolean)) {
    if (!fresh && line.length + 1 + word.length > WIDTH) {
      lines.push(line);
      line = indent;
      fresh = true;
    }
    line += fresh ? word : ` ${word}`;
    fresh = false;
  }
  lines.push(line.trimEnd());
  return lines;
}

/** The flag as the help shows it: `--state-dir DIR`, `-h, --help`. */
export function spelling(f: Flag): string {
  return `${f.short ? `-${f.short}, ` : ''}--${f.name}${f.value ? ` ${f.value}` : ''}`;
}

/** The command's help: usage, description, arguments, options, exit codes. One layout for every command. */
export function helpText(spec: CommandSpec): string {
  const out: string[] = [];
  spec.usage.forEach((u, i) => out.push(`${i === 0 ? 'Usage: ' : '       '}cdc ${spec.name}${u ? ` ${u}` : ''}`));
  out.push('', spec.description.trim(), '');
  if (spec.arguments && spec.arguments.length > 0) {
    out.push('Arguments:');
    for (const a of spec.arguments) out.push(...wrap(`  ${a.name}`, a.help));
    out.push('');
  }
  out.push('Options:');
  for (const o of [...spec.options, null, use(VOCABULARY.help)]) {
    if (o === null) {
      if (out[out.length - 1] !== '' && out[out.length - 1] !== 'Options:') out.push('');
      continue;
    }
    const meaning = o.detail ? `${o.flag.help}${/\.$/.test(o.flag.help) ? '' : '.'} ${o.detail}` : o.flag.help;
    const words = [meaning, o.default !== undefined ? `[default: ${o.default}]` : undefined, o.multiple ? '(repeatable)' : undefined]
      .filter((w) => w)
      .join(' ');
    out.push(...wrap(`  ${spelling(o.flag)}`, words));
  }
  out.push('', 'Exit codes:');
  const exits: Array<[string, string]> = [
    ['0', spec.exits[0]],
    ...(spec.exits[1] ? [['1', spec.exits[1]] as [string, string]] : []),
    ['2', EXIT_CODE_MEANING[2]],
    ...(spec.exits[3] ? [['3', spec.exits[3]] as [string, string]] : []),
  ];
  for (const [code, meaning] of exits) out.push(...wrap(`  ${code}`, meaning, 5));
  for (const r of spec.retired ?? []) {
    if (r === spec.retired![0]) out.push('', 'Deprecated (accepted until the next release):');
    out.push(...wrap(`  --${r.flag.name}`, r.instead));
  }
  return `${out.join('\n')}\n`;
}
