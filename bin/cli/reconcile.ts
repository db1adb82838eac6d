/**
 * `cdc reconcile`: compares captured tables of a `cdc local` source with a sink's copy, the
 * warehouse's or the search index's (docs/reconcile.md), and stores each verdict, with the ranges
 * it covered and the cursor the next run starts at, in the state folder's control plane. The sink
 * id names the kind: the search sink's id is the one `cdc local` recorded for its search sink
 * (`search` by default, `--search-id`), or any id with `--search URL`; every other id is a
 * warehouse sink.
 *
 * Exit codes: 0 every table MATCH, 1 any DIVERGED or INCONCLUSIVE, or the databases could not be
 * reached (the reason on stderr), 2 usage.
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
import { parseDuration } from './local-args.ts';
import { DEFAULT_SOURCE_BUDGET } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import { EXIT_FAILED, EXIT_OK, UsageError, write, type CliIo, type Command, type CommandSpec } from './command.ts';
import { on, parseCommandLine, positiveInt, RETIRED_FLAGS, text, use, VOCABULARY } from './options.ts';

export const RECONCILE: CommandSpec = {
  name: 'reconcile',
  summary: 'compare captured tables with a sink (warehouse or search index): counts, range checksums, bisection to keys',
  usage: ['[TABLE...] [--sink ID] [--json] [--state-dir DIR] [options]'],
  description: `Compares captured tables of a cdc local source with a sink's copy (the warehouse's, or the
search index's live documents): row counts, then checksums over primary-key ranges, a differing
range narrowed by bisection down to the keys. A key that differs is read again after the settle
time: only a key that held still on both sides and still differs is reported (rows in flight are
not divergence). Big tables are checked a budget of rows per run, from where the last run
stopped, so coverage rotates. Each verdict is stored in the state folder's control plane. See
docs/reconcile.md.`,
  arguments: [{ name: 'TABLE', help: 'a table to reconcile (schema.table; several may follow) [default: every captured table of the source]' }],
  options: [
    use(VOCABULARY.sink, { detail: "The warehouse sink's, or the search sink's (cdc local's --search-id).", default: 'warehouse; with --search: search' }),
    use(VOCABULARY.search, { default: 'the stand-in of cdc local, running or, when stopped, served from its saved index' }),
    use(VOCABULARY.stateDir, { default: DEFAULT_STATE_DIR }),
    use(VOCABULARY.source, { default: 'the embedded one of a running cdc local --demo' }),
    use(VOCABULARY.warehouse, { default: 'the embedded one of a running cdc local' }),
    use(VOCABULARY.sourceId, { default: 'the only source the control plane knows' }),
    use(VOCABULARY.tableConfig, { detail: "The settings cdc local was given (mask and exclude rules; the demo's are used for the demo)." }),
    use(VOCABULARY.rowsPerRun, { default: '100000' }),
    use(VOCABULARY.settle, { default: '5s' }),
    use(VOCABULARY.sourceBudget, { default: String(DEFAULT_SOURCE_BUDGET.writeLatencyPct) }),
    use(VOCABULARY.json, { detail: 'Prints {"exitCode", "verdicts": [...]}.' }),
  ],
  exits: {
    0: 'every table MATCH',
    1: 'a table DIVERGED or INCONCLUSIVE (the reason on stderr; --json says which), or a database could not be reached',
  },
  retired: [
    {
      flag: RETIRED_FLAGS.table,
      instead: 'is now an argument: cdc reconcile TABLE...',
      apply: (v, line) =>
        void line.positionals.push(
          ...String(v)
            .split(',')
            .map((t) => t.trim())
            .filter(Boolean),
        ),
    },
  ],
};

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
  /** Deprecation notes for retired spellings. */
  notes: string[];
}

export function parseReconcileArgs(args: readonly string[]): ReconcileCliOptions {
  const { values, positionals, notes } = parseCommandLine(RECONCILE, args);
  const tables = positionals.flatMap((p) =>
    p
      .split(',')
      .map((t) => t.trim())
      .filter(Boolean),
  );
  for (const t of tables) if (!/^[^.\s]+\.[^.\s]+$/.test(t)) throw new UsageError(`a table is schema.table, got '${t}'`);
  const searchUrl = text(values, 'search');
  if (searchUrl !== null && !/^https?:\/\/[^\s/]+/.test(searchUrl))
    throw new UsageError(`--search expects an http(s) URL like http://localhost:9200, got '${searchUrl}'`);
  const warehouseUrl = text(values, 'warehouse');
  if (searchUrl !== null && warehouseUrl !== null) throw new UsageError('--search and --warehouse exclude each other (one sink per run)');
  const sink = text(values, 'sink');
  const settle = text(values, 'settle');
  const budget = text(values, 'source-budget');
  const pct = budget === null ? undefined : Number(budget);
  if (pct !== undefined && !(Number.isFinite(pct) && pct > 0)) throw new UsageError(`--source-budget expects a positive percentage, got '${budget}'`);
  return {
    tables,
    sink: sink ?? (searchUrl !== null ? 'search' : 'warehouse'),
    sinkGiven: sink !== null,
    searchUrl,
    stateDir: text(values, 'state-dir') ?? DEFAULT_STATE_DIR,
    sourceUrl: text(values, 'source'),
    warehouseUrl,
    sourceId: text(values, 'source-id'),
    tableConfig: text(values, 'table-config'),
    rowsPerRun: positiveInt(values, 'rows-per-run') ?? undefined,
    settleMs: settle === null ? undefined : parseDuration(settle, '--settle'),
    budgetLatencyPct: pct,
    json: on(values, 'json'),
    notes,
  };
}

/** Could not reconcile: an error (exit 1), the reason on stderr. */
async function fail(io: CliIo, message: string): Promise<number> {
  await write(io.stderr, `cdc reconcile: ${message}\n`);
  return EXIT_FAILED;
}

export const reconcileCommand: Command = {
  spec: RECONCILE,
  async run(args: string[], io: CliIo): Promise<number> {
    const o = parseReconcileArgs(args);
    for (const n of o.notes) await write(io.stderr, `${n}\n`);
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
      return fail(io, (e as Error).message);
    }
    const cleanups: Array<() => Promise<void>> = [];
    try {
      const registered = (await local.controlPlane.listTables()).filter((t) => t.table !== HEARTBEAT_TABLE_ID);
      const sources = [...new Set(registered.map((t) => t.source))];
      const source = o.sourceId ?? (sources.length === 1 ? sources[0]! : null);
      if (source === null) {
        if (sources.length === 0)
          return fail(io, `the control plane in ${o.stateDir} knows no captured table yet: run cdc local until its tables are registered`);
        throw new UsageError(`the control plane knows several sources (${sources.join(', ')}): pass --source-id`);
      }
      const captured = registered.filter((t) => t.source === source).map((t) => t.table);
      const wanted = o.tables.length > 0 ? o.tables : captured;
      const unknown = wanted.filter((t) => !captured.includes(t));
      if (unknown.length > 0)
        throw new UsageError(`not a captured table of source ${source}: ${unknown.join(', ')} (captured: ${captured.join(', ') || 'none'})`);
      const rules = configs ?? (local.embeddedSource ? DEMO_TABLES : []);
      const tables: TableConfig[] = wanted.map((t) => rules.find((c) => c.table === t) ?? { table: t, deleteMode: 'soft', mask: [], exclude: [] });
      const sourceUrl = o.sourceUrl ?? (local.embeddedSource && local.embeddedUrl ? local.embeddedUrl(SOURCE_DATABASE) : null);
      if (!sourceUrl)
        throw new UsageError(
          local.running
            ? 'cdc local captures an external source here: pass --source URL'
            : 'cdc local is not running on this state folder, so its embedded databases are down: pass --source URL (and --warehouse URL), or start cdc local',
        );
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
        if (url === null)
          throw new UsageError(`the search sink ${o.sink} indexes into an OpenSearch cdc local does not record the address of: pass --search URL`);
        const index = new OpenSearchIndex(searchClient({ node: url }));
        cleanups.push(async () => index.client.close());
        sink = { search: { index } };
      } else {
        const warehouseUrl = o.warehouseUrl ?? (local.embeddedUrl ? local.embeddedUrl(WAREHOUSE_DATABASE) : null);
        if (!warehouseUrl) throw new UsageError('pass --warehouse URL (the embedded warehouse runs only while cdc local runs)');
        sink = { warehouseUrl };
      }
      let verdicts: ReconcileVerdict[];
      try {
        verdicts = await reconcileDatabases({
          controlPlane: local.controlPlane,
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
        return fail(io, `could not reconcile: ${(e as Error).message}`);
      }
      // INCONCLUSIVE is not a refusal: any verdict but MATCH is exit 1 (docs/operations.md, "Exit codes").
      const code = verdictExitCode(verdicts) === EXIT_OK ? EXIT_OK : EXIT_FAILED;
      if (o.json) await write(io.stdout, JSON.stringify({ exitCode: code, verdicts }, null, 2) + '\n');
      const inconclusive = verdicts.filter((v) => v.verdict === 'INCONCLUSIVE');
      for (const v of inconclusive) await write(io.stderr, `cdc reconcile: ${v.table}: INCONCLUSIVE: ${v.reason}\n`);
      return code;
    } finally {
      for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
      await local.close();
    }
  },
};
