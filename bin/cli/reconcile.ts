/**
 * `cdc reconcile`: compares captured tables of a `cdc local` source with a sink's copy, the
 * warehouse's or the search index's (docs/reconcile.md), and stores each verdict, with the ranges
 * it covered and the cursor the next run starts at, in the state folder's control plane. The sink
 * id names the kind: the search sink's id is the one `cdc local` recorded for its search sink
 * (`search` by default, `--search-id`), or any id with `--search URL`; every other id is a
 * warehouse sink.
 *
 * Exit codes: 0 every table MATCH, 1 any DIVERGED, 2 usage, 3 could not decide (INCONCLUSIVE, or
 * the databases could not be reached; the reason on stderr).
 */
import { readFile } from 'node:fs/promises';
import { formatReconcileVerdict, verdictExitCode, type ReconcileVerdict } from '../../lambda/core/reconcile/reconcile.ts';
import { validateTableConfig, type TableConfig } from '../../lambda/core/tables/table-config.ts';
import { DEMO_TABLES } from '../../local/demo.ts';
import { HEARTBEAT_TABLE_ID } from '../../local/pipeline.ts';
import { openLocalControl, readSearchSinkRecord, reconcileDatabases, standInDataFile } from '../../local/reconcile.ts';
import { SearchStandIn } from '../../local/search-standin.ts';
import { OpenSearchIndex, searchClient } from '../../lambda/adapters/search-opensearch.ts';
import { existsSync } from 'node:fs';
import { DEFAULT_STATE_DIR, SOURCE_DATABASE, WAREHOUSE_DATABASE } from '../../local/stack.ts';
import { parseDuration } from './local.ts';
import { DEFAULT_SOURCE_BUDGET } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import { EXIT_OK, EXIT_REFUSED, UsageError, write, type CliIo, type Command } from './command.ts';

const HELP = `Usage: cdc reconcile [--table T]... [--sink ID] [--json] [--state-dir DIR] [options]

Compares captured tables of a cdc local source with a sink's copy (the warehouse's, or the
search index's live documents): row counts, then
checksums over primary-key ranges, a differing range narrowed by bisection down to the keys. A
key that differs is read again after the settle time: only a key that held still on both sides
and still differs is reported (rows in flight are not divergence). Big tables are checked a
budget of rows per run, from where the last run stopped, so coverage rotates. Each verdict is
stored in the state folder's control plane. See docs/reconcile.md.

Options:
  --table T                  a table to reconcile (schema.table; repeat or comma separate)
                             [default: every captured table of the source]
  --sink ID                  the sink id: the warehouse sink's, or the search sink's (cdc local's
                             --search-id, default search) [default: warehouse; with --search: search]
  --search URL               the OpenSearch (or stand-in) the search sink indexes into [default: the
                             stand-in of cdc local, running or, when stopped, served from its saved index]
  --state-dir DIR            a cdc local state folder [default: ${DEFAULT_STATE_DIR}]
  --source URL               the source database [default: the embedded one of a running cdc local --demo]
  --warehouse URL            the warehouse database [default: the embedded one of a running cdc local]
  --source-id ID             the source id [default: the only source the control plane knows]
  --table-config FILE        the captured-table settings cdc local was given (mask and exclude rules;
                             the demo's are used for the demo)
  --rows-per-run N           source rows checked per table per run at most [default: 100000]
  --settle TIME              wait before re-reading differing keys (longer than the sink's lag) [default: 5s]
  --source-budget PCT        the write latency the reads may add on the source, percent over its
                             baseline; above it the reads slow down and pause (the snapshot
                             worker's pacer) [default: ${DEFAULT_SOURCE_BUDGET.writeLatencyPct}]
  --json                     the verdicts as JSON on stdout
  -h, --help                 this text

Exit code: 0 every table MATCH, 1 any table DIVERGED, 2 usage error, 3 could not decide
(a table INCONCLUSIVE, or a database unreachable; the reason on stderr).
`;

export interface ReconcileCliOptions {
  tables: string[];
  sink: string;
  /** Whether `--sink` was given. */
  sinkGiven: boolean;
  searchUrl: string | null;
  stateDir: string;
  sourceUrl: string | null;
  warehouseUrl: string | null;
  sourceId: string | null;
  tableConfig: string | null;
  rowsPerRun: number | undefined;
  settleMs: number | undefined;
  /** `--source-budget`: the added write latency the reads may cause, percent. */
  budgetLatencyPct: number | undefined;
  json: boolean;
  help: boolean;
}

export function parseReconcileArgs(args: readonly string[]): ReconcileCliOptions {
  const o: ReconcileCliOptions = { tables: [], sink: 'warehouse', sinkGiven: false, searchUrl: null, stateDir: DEFAULT_STATE_DIR, sourceUrl: null, warehouseUrl: null, sourceId: null, tableConfig: null, rowsPerRun: undefined, settleMs: undefined, budgetLatencyPct: undefined, json: false, help: false };
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
    switch (name) {
      case '-h':
      case '--help':
        o.help = true;
        break;
      case '--json':
        o.json = true;
        break;
      case '--table':
        for (const t of value().split(',').map((s) => s.trim()).filter(Boolean)) {
          if (!/^[^.\s]+\.[^.\s]+$/.test(t)) throw new UsageError(`--table expects schema.table, got '${t}'`);
          o.tables.push(t);
        }
        break;
      case '--sink':
        o.sink = value();
        o.sinkGiven = true;
        break;
      case '--search': {
        const u = value();
        if (!/^https?:\/\/[^\s/]+/.test(u)) throw new UsageError(`--search expects an http(s) URL like http://localhost:9200, got '${u}'`);
        o.searchUrl = u;
        break;
      }
      case '--state-dir':
        o.stateDir = value();
        break;
      case '--source':
        o.sourceUrl = value();
        break;
      case '--warehouse':
        o.warehouseUrl = value();
        break;
      case '--source-id':
        o.sourceId = value();
        break;
      case '--table-config':
        o.tableConfig = value();
        break;
      case '--rows-per-run': {
        const v = value();
        const n = Number(v);
        if (!Number.isInteger(n) || n <= 0) throw new UsageError(`--rows-per-run expects a positive integer, got '${v}'`);
        o.rowsPerRun = n;
        break;
      }
      case '--settle':
        o.settleMs = parseDuration(value());
        break;
      case '--source-budget': {
        const v = value();
        const n = Number(v);
        if (!Number.isFinite(n) || n <= 0) throw new UsageError(`--source-budget expects a positive percentage, got '${v}'`);
        o.budgetLatencyPct = n;
        break;
      }
      default:
        throw new UsageError(a.startsWith('-') ? `unknown option ${a} for cdc reconcile` : `unexpected argument '${a}' (tables go with --table)`);
    }
  }
  if (o.searchUrl !== null && o.warehouseUrl !== null) throw new UsageError('--search and --warehouse exclude each other (one sink per run)');
  if (o.searchUrl !== null && !o.sinkGiven) o.sink = 'search';
  return o;
}

async function refuse(io: CliIo, message: string): Promise<number> {
  await write(io.stderr, `cdc reconcile: ${message}\n`);
  return EXIT_REFUSED;
}

export const reconcileCommand: Command = {
  name: 'reconcile',
  summary: 'compare captured tables with a sink (warehouse or search index): counts, range checksums, bisection to keys',
  async run(args: string[], io: CliIo): Promise<number> {
    const o = parseReconcileArgs(args);
    if (o.help) {
      await write(io.stdout, HELP);
      return EXIT_OK;
    }
    let configs: TableConfig[] | null = null;
    if (o.tableConfig) {
      let text: string;
      try {
        text = await readFile(o.tableConfig, 'utf8');
      } catch (e) {
        throw new UsageError(`--table-config ${o.tableConfig}: ${(e as Error).message}`);
      }
      try {
        configs = validateTableConfig(JSON.parse(text), o.tableConfig);
      } catch (e) {
        throw new UsageError(`--table-config ${o.tableConfig}: ${(e as Error).message}`);
      }
    }
    let local;
    try {
      local = await openLocalControl(o.stateDir);
    } catch (e) {
      return refuse(io, (e as Error).message);
    }
    const cleanups: Array<() => Promise<void>> = [];
    try {
      const registered = (await local.control.listTables()).filter((t) => t.table !== HEARTBEAT_TABLE_ID);
      const sources = [...new Set(registered.map((t) => t.source))];
      const source = o.sourceId ?? (sources.length === 1 ? sources[0]! : null);
      if (source === null) {
        if (sources.length === 0) return refuse(io, `the control plane in ${o.stateDir} knows no captured table yet: run cdc local until its tables are registered`);
        throw new UsageError(`the control plane knows several sources (${sources.join(', ')}): pass --source-id`);
      }
      const captured = registered.filter((t) => t.source === source).map((t) => t.table);
      const wanted = o.tables.length > 0 ? o.tables : captured;
      const unknown = wanted.filter((t) => !captured.includes(t));
      if (unknown.length > 0) throw new UsageError(`not a captured table of source ${source}: ${unknown.join(', ')} (captured: ${captured.join(', ') || 'none'})`);
      const rules = configs ?? (local.embeddedSource ? DEMO_TABLES : []);
      const tables: TableConfig[] = wanted.map((t) => rules.find((c) => c.table === t) ?? { table: t, deleteMode: 'soft', mask: [], exclude: [] });
      const sourceUrl = o.sourceUrl ?? (local.embeddedSource && local.embeddedUrl ? local.embeddedUrl(SOURCE_DATABASE) : null);
      if (!sourceUrl) return refuse(io, local.running ? 'cdc local captures an external source here: pass --source URL' : 'cdc local is not running on this state folder, so its embedded databases are down: pass --source URL (and --warehouse URL), or start cdc local');
      // Which sink: the search sink's id (recorded by cdc local) or --search, else a warehouse.
      const record = readSearchSinkRecord(local.stateDir);
      const isSearch = o.searchUrl !== null || (record !== null && record.sinkId === o.sink);
      let sink: { warehouseUrl: string } | { search: { index: OpenSearchIndex } };
      if (isSearch) {
        let url = o.searchUrl;
        if (url === null && record?.url && local.running) url = record.url;
        if (url === null && record?.url && !local.running && existsSync(standInDataFile(local.stateDir))) {
          // cdc local is stopped: serve its stand-in's saved index for the duration (read only).
          const standin = new SearchStandIn({ dataFile: standInDataFile(local.stateDir) });
          url = await standin.start();
          cleanups.push(() => standin.stop());
        }
        if (url === null) return refuse(io, `the search sink ${o.sink} indexes into an OpenSearch cdc local does not record the address of: pass --search URL`);
        const index = new OpenSearchIndex(searchClient({ node: url }));
        cleanups.push(async () => index.client.close());
        sink = { search: { index } };
      } else {
        const warehouseUrl = o.warehouseUrl ?? (local.embeddedUrl ? local.embeddedUrl(WAREHOUSE_DATABASE) : null);
        if (!warehouseUrl) return refuse(io, 'pass --warehouse URL (the embedded warehouse runs only while cdc local runs)');
        sink = { warehouseUrl };
      }
      let verdicts: ReconcileVerdict[];
      try {
        verdicts = await reconcileDatabases({
          control: local.control,
          sourceUrl,
          ...sink,
          source,
          sink: o.sink,
          tables,
          ...(o.rowsPerRun !== undefined ? { rowsPerRun: o.rowsPerRun } : {}),
          ...(o.settleMs !== undefined ? { settleMs: o.settleMs } : {}),
          ...(o.budgetLatencyPct !== undefined ? { budget: { ...DEFAULT_SOURCE_BUDGET, writeLatencyPct: o.budgetLatencyPct } } : {}),
          onVerdict: (v) => {
            if (!o.json) void write(io.stdout, formatReconcileVerdict(v).join('\n') + '\n');
          },
        });
      } catch (e) {
        return refuse(io, `could not reconcile: ${(e as Error).message}`);
      }
      const code = verdictExitCode(verdicts);
      if (o.json) await write(io.stdout, JSON.stringify({ exitCode: code, verdicts }, null, 2) + '\n');
      const inconclusive = verdicts.filter((v) => v.verdict === 'INCONCLUSIVE');
      if (code === EXIT_REFUSED) for (const v of inconclusive) await write(io.stderr, `cdc reconcile: ${v.table}: INCONCLUSIVE: ${v.reason}\n`);
      return code;
    } finally {
      for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
      await local.close();
    }
  },
};
