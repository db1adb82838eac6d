/**
 * Reconciliation on one machine (docs/reconcile.md): the core (lambda/core/reconcile/reconcile.ts) with
 * the PostgreSQL source side (lambda/adapters/reconcile-pg.ts) and one sink's side: a warehouse
 * database (the same file) or a search index (lambda/adapters/reconcile-search.ts, the stand-in or
 * an OpenSearch), verdicts and cursors in a control plane. `cdc reconcile` opens the control plane of a
 * `cdc local` state folder and calls `reconcileDatabases`; tests and the bench call it directly.
 *
 * Source reads are paced by the snapshot worker's pacer against the same source budget
 * (lambda/core/snapshot/snapshot-pacer.ts), with the same pressure probe (lambda/adapters/snapshot-postgres.ts).
 */
import { pgPollStablePoint } from '../lambda/adapters/poll-stable-point-pg.ts';
import { pollPoint } from '../lambda/core/capture/poll-stable-point.ts';
import { readFileSync } from 'node:fs';
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import pg from 'pg';
import { dynamoDbClient } from '../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../lambda/adapters/control-plane-dynamodb.ts';
import { QUICK_START_JVM_OPTIONS, startDynamoDbLocal } from './dynamodb.ts';
import { LocalConfigError } from './errors.ts';
import { openStateFolder } from './operator-door.ts';
import { controlTableOf } from './stack.ts';
import type { ControlPlane } from '../lambda/core/shared/control-plane.ts';
import { pgSourceSide, pgWarehouseSide, prepareReconcileSession } from '../lambda/adapters/reconcile-pg.ts';
import { searchSinkSide } from '../lambda/adapters/reconcile-search.ts';
import type { OpenSearchIndex } from '../lambda/adapters/search-opensearch.ts';
import { DEFAULT_INDEX_PREFIX } from '../lambda/core/search/search-plan.ts';
import { PostgresPressureProbe } from '../lambda/adapters/snapshot-postgres.ts';
import { reconcileTables, type ReconcileVerdict, type TableToReconcile } from '../lambda/core/reconcile/reconcile.ts';
import { AdaptivePacer, DEFAULT_SOURCE_BUDGET, FixedPacer, type SourceBudget } from '../lambda/core/snapshot/snapshot-pacer.ts';
import type { TableConfig } from '../lambda/core/tables/table-config.ts';
import { primaryKeyOf } from './catalog.ts';
import { splitTableId } from '../lambda/core/shared/identifiers.ts';

export interface ReconcileDatabasesOptions {
  controlPlane: ControlPlane;
  sourceUrl: string;
  /** The warehouse sink's database (a warehouse sink). */
  warehouseUrl?: string;
  /** The search sink's index adapter and prefix (a search sink; instead of `warehouseUrl`). */
  search?: { index: OpenSearchIndex; prefix?: string; pageSize?: number };
  source: string;
  sink: string;
  tables: readonly TableConfig[];
  rowsPerRun?: number;
  leafRows?: number;
  settleMs?: number;
  settleRounds?: number;
  /** The source budget the pacer keeps to. @default DEFAULT_SOURCE_BUDGET */
  budget?: SourceBudget;
  /** A fixed segment size instead of the adaptive pacer (bench, tests). */
  fixedSegment?: number;
  onVerdict?: (v: ReconcileVerdict) => void;
  /** Wait for the sink's heartbeat before re-checks (false: a warehouse without a pipeline, the bench). @default true */
  stablePoint?: boolean;
}

async function connect(url: string, name: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url, application_name: name });
  await c.connect();
  await prepareReconcileSession(c);
  return c;
}

/** Reconciles the tables of one source with one sink, a warehouse or a search index (see the module comment). */
export async function reconcileDatabases(o: ReconcileDatabasesOptions): Promise<ReconcileVerdict[]> {
  if ((o.warehouseUrl === undefined) === (o.search === undefined))
    throw new Error('reconcileDatabases: give either warehouseUrl (a warehouse sink) or search (a search sink)');
  const src = await connect(o.sourceUrl, 'cdc-reconcile');
  const wh =
    o.warehouseUrl !== undefined
      ? await connect(o.warehouseUrl, 'cdc-reconcile').catch(async (e: unknown) => {
          await src.end().catch(() => undefined);
          throw e;
        })
      : null;
  // A second session per database for the whole-table counts, which run alongside the range walk.
  const counts = await Promise.all([connect(o.sourceUrl, 'cdc-reconcile-count'), ...(wh ? [connect(o.warehouseUrl!, 'cdc-reconcile-count')] : [])]).catch(
    async (e: unknown) => {
      await src.end().catch(() => undefined);
      await wh?.end().catch(() => undefined);
      throw e;
    },
  );
  const [srcCount, whCount] = counts;
  const search = o.search;
  const stable = o.stablePoint === false ? { stablePoint: false } : {};
  let probeClient: pg.Client | null = null;
  try {
    const tables: TableToReconcile[] = [];
    for (const t of o.tables) {
      const { schema, table } = splitTableId(t.table);
      tables.push({ table: t.table, key: t.key ?? (await primaryKeyOf(src, schema, table)), rules: { mask: t.mask, exclude: t.exclude } });
    }
    const probe = new PostgresPressureProbe(async () => {
      probeClient ??= await connect(o.sourceUrl, 'cdc-reconcile-probe');
      return probeClient;
    });
    const pacer = o.fixedSegment ? new FixedPacer(o.fixedSegment) : new AdaptivePacer({ budget: o.budget ?? DEFAULT_SOURCE_BUDGET });
    if (!o.fixedSegment) await probe.calibrate(10);
    return await reconcileTables({
      controlPlane: o.controlPlane,
      source: o.source,
      sink: o.sink,
      tables,
      pacer,
      ...(o.fixedSegment ? {} : { pressure: () => probe.read(1) }),
      ...(o.rowsPerRun !== undefined ? { rowsPerRun: o.rowsPerRun } : {}),
      ...(o.leafRows !== undefined ? { leafRows: o.leafRows } : {}),
      ...(o.settleMs !== undefined ? { settleMs: o.settleMs } : {}),
      ...(o.settleRounds !== undefined ? { settleRounds: o.settleRounds } : {}),
      sides: async (t) => ({
        // A polled table's changes arrive through its poll cursor, not the log: re-checks wait for that (docs/polling.md).
        ...(await pollPoint(
          o.tables.find((c) => c.table === t.table),
          (c) => pgPollStablePoint({ client: src, controlPlane: o.controlPlane, source: o.source, sink: o.sink, table: c.table, pollColumn: c.pollColumn! }),
        )),
        source: pgSourceSide(src, t.table, t.key, t.rules.mask, { countClient: srcCount! }),
        sink: wh
          ? pgWarehouseSide(wh, o.source, t.table, t.key, { label: o.sink, ...stable, countClient: whCount! })
          : searchSinkSide(search!.index, {
              prefix: search!.prefix ?? DEFAULT_INDEX_PREFIX,
              source: o.source,
              table: t.table,
              key: t.key,
              label: o.sink,
              ...stable,
              ...(search!.pageSize ? { pageSize: search!.pageSize } : {}),
            }),
      }),
      ...(o.onVerdict ? { onVerdict: o.onVerdict } : {}),
    });
  } finally {
    await src.end().catch(() => undefined);
    await wh?.end().catch(() => undefined);
    for (const c of counts) await c.end().catch(() => undefined);
    const p = probeClient as pg.Client | null;
    if (p) await p.end().catch(() => undefined);
  }
}

/**
 * What `cdc local` records about its search sink in the state folder (`search/sink.json`), so that
 * `cdc reconcile --sink <id>` knows the id is the search sink's and where its index is: the
 * stand-in's URL while it runs (null for an OpenSearch given with `--search`, whose URL may hold
 * credentials: `cdc reconcile --search URL` then).
 */
export interface SearchSinkRecord {
  sinkId: string;
  url: string | null;
}

const searchSinkFile = (stateDir: string): string => path.join(stateDir, 'search', 'sink.json');

/** Records the run's search sink (see `SearchSinkRecord`). */
export async function writeSearchSinkRecord(stateDir: string, record: SearchSinkRecord): Promise<void> {
  await mkdir(path.dirname(searchSinkFile(stateDir)), { recursive: true });
  await writeFile(searchSinkFile(stateDir), `${JSON.stringify(record)}\n`);
}

/** The search sink `cdc local` last ran with on this state folder, or null. */
export function readSearchSinkRecord(stateDir: string): SearchSinkRecord | null {
  let text: string;
  try {
    text = readFileSync(searchSinkFile(stateDir), 'utf8');
  } catch {
    return null;
  }
  const v = JSON.parse(text) as Partial<SearchSinkRecord>;
  if (typeof v.sinkId !== 'string' || (v.url !== null && typeof v.url !== 'string'))
    throw new LocalConfigError(`${searchSinkFile(stateDir)} is not a search sink record (remove it; cdc local writes it again)`);
  return { sinkId: v.sinkId, url: v.url ?? null };
}

/** The search stand-in's saved index of a state folder (`search/standin.json`), served for a reconciliation while `cdc local` is stopped. */
export function standInDataFile(stateDir: string): string {
  return path.join(stateDir, 'search', 'standin.json');
}

/** The control plane of a `cdc local` state folder, and where its embedded databases are (when it runs). */
export interface LocalControl {
  controlPlane: ControlPlane;
  running: boolean;
  /** The embedded PostgreSQL's URL for a database, when `cdc local` runs with it; else null. */
  embeddedUrl: ((database: string) => string) | null;
  embeddedSource: boolean;
  /** The state folder (absolute). */
  stateDir: string;
  close(): Promise<void>;
}

/**
 * Opens a state folder's control plane: the running `cdc local`'s DynamoDB Local, or (not
 * running) DynamoDB Local started on the folder's data for the duration, under the folder's lock
 * (as the operator commands do, local/operator-door.ts).
 */
export async function openLocalControl(stateDirOption: string): Promise<LocalControl> {
  const { stateDir, state, running, cleanups, close } = await openStateFolder(stateDirOption);
  try {
    let endpoint = `http://127.0.0.1:${state.ports.dynamodb}`;
    if (!running) {
      const d = await startDynamoDbLocal({ dbPath: path.join(stateDir, 'dynamodb'), jvmOptions: QUICK_START_JVM_OPTIONS });
      cleanups.push(() => d.stop());
      endpoint = d.endpoint;
    }
    const dynamo = dynamoDbClient(endpoint);
    cleanups.push(async () => dynamo.destroy());
    const port = state.ports.postgres;
    return {
      controlPlane: new DynamoDbControlPlane(dynamo, controlTableOf(state)),
      running,
      embeddedUrl:
        running && port !== null && state.postgresDataDir !== null ? (db) => `postgres://postgres@127.0.0.1:${port}/${encodeURIComponent(db)}` : null,
      embeddedSource: state.embeddedSource,
      stateDir,
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
