/**
 * The local door of the operator (docs/operations.md): the operator handler
 * (lambda/handlers/operator.ts) on the control plane of a `cdc local` state folder, whether or
 * not `cdc local` is running.
 *
 * - Running (the folder's lock names a live process): the command talks to that run's DynamoDB
 *   Local and kinesalite, on the ports state.json records.
 * - Not running: the command takes the folder's lock (a `cdc local` started meanwhile says the
 *   folder is in use), starts DynamoDB Local on the folder's database file and kinesalite on its
 *   LevelDB for the duration of the command, then stops them and releases the lock.
 *
 * The same action classes as on AWS (contracts/operator-routes.ts): each request comes in on its
 * route and is refused on another one. Who asks is the OS user running the command
 * (`os-user:NAME`, `localCaller`): whoever can open the state folder owns it, so locally the
 * classes are checked for their routes, not authorized per user; the `--actor` text is a note.
 *
 * The change log's retention is read from kinesalite (DescribeStreamSummary), as the operator
 * function on AWS gets the ChangeLog's retention. Pause budgets: `CDC_PAUSE_BUDGETS`, as on AWS.
 */
import { existsSync, readFileSync } from 'node:fs';
import { open } from 'node:fs/promises';
import path from 'node:path';
import { DescribeStreamSummaryCommand } from '@aws-sdk/client-kinesis';
import { EnvName } from '../contracts/env.ts';
import { MetricName } from '../contracts/metrics.ts';
import { dynamoDbClient, kinesisClient } from '../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../lambda/adapters/control-plane-dynamodb.ts';
import type { OperatorBody, OperatorResponse } from '../lambda/core/operator/operator-front-door.ts';
import os from 'node:os';
import { createOperatorHandler } from '../lambda/handlers/operator.ts';
import { startDynamoDbLocal, QUICK_START_JVM_OPTIONS } from './dynamodb.ts';
import { LocalConfigError } from './errors.ts';
import { startKinesalite } from './kinesis.ts';
import { MetricsCollector } from './metrics.ts';
import { alive, controlTableOf, WAREHOUSE_DATABASE, readState, takeLock, type LocalState } from './stack.ts';
import pg from 'pg';
import type { KinesisClient } from '@aws-sdk/client-kinesis';
import type { ControlPlane } from '../lambda/core/shared/control-plane.ts';
import type { RebuildScheduler } from '../lambda/core/operator/operator.ts';
import { archivePayloadStore, FolderArchive } from './archive.ts';
import { ReplayReader } from '../lambda/adapters/replay-reader.ts';
import { Rebuilder, RebuildRefusedError, type RebuildReport } from '../lambda/adapters/rebuilder.ts';

export interface OperatorDoor {
  /** Sends one request body to a route of the operator API (contracts/operator-routes.ts); answers what the operator Lambda would. */
  invoke(path: string, body: OperatorBody): Promise<OperatorResponse>;
  /** Whether `cdc local` was running on the folder. */
  readonly running: boolean;
  close(): Promise<void>;
}

/** Who asks at the local door: the OS user running the command. */
export function localCaller(): string {
  return `os-user:${os.userInfo().username}`;
}

/** The pid of a live `cdc local` using the folder, or null. */
export function runningPid(stateDir: string): number | null {
  const file = path.join(stateDir, 'lock');
  if (!existsSync(file)) return null;
  const pid = Number(readFileSync(file, 'utf8').trim());
  return Number.isInteger(pid) && pid > 0 && pid !== process.pid && alive(pid) ? pid : null;
}

/** The last end-to-end lag per sink that the local run measured (its EMF file), newest first. */
async function localLag(stateDir: string): Promise<Array<{ sink: string; lagMs: number; at: string }>> {
  const file = path.join(stateDir, 'logs', 'metrics.emf.jsonl');
  if (!existsSync(file)) return [];
  const fh = await open(file, 'r');
  try {
    const { size } = await fh.stat();
    const length = Math.min(size, 2 * 1024 * 1024);
    const buf = Buffer.alloc(length);
    await fh.read(buf, 0, length, size - length);
    const collector = new MetricsCollector();
    for (const line of buf.toString('utf8').split('\n')) {
      if (!line.startsWith('{')) continue;
      try {
        collector.ingestEmf(JSON.parse(line));
      } catch {
        // a line cut by the tail window
      }
    }
    return collector.dimensionValues(MetricName.END_TO_END_LAG, 'Sink').flatMap((sink) => {
      const l = collector.latest(MetricName.END_TO_END_LAG, { Sink: sink });
      return l ? [{ sink, lagMs: l.value, at: new Date(l.at).toISOString() }] : [];
    });
  } finally {
    await fh.close();
  }
}

/**
 * The rebuild worker of a state folder (docs/rebuild.md): the folder's archive, its change log
 * and the warehouse at `warehouseUrl`. The warehouse pool is opened on first use.
 */
export function localRebuilds(o: {
  controlPlane: ControlPlane;
  kinesis: KinesisClient;
  stream: string;
  archiveDir: string;
  warehouseUrl: string | null;
}): RebuildScheduler & { close(): Promise<void> } {
  let pool: pg.Pool | undefined;
  let rebuilder: Rebuilder | undefined;
  const get = (): Rebuilder => {
    if (!o.warehouseUrl)
      throw new LocalConfigError('cdc rebuild needs the warehouse: pass --warehouse URL (or run it while cdc local runs with its embedded warehouse)');
    pool ??= new pg.Pool({ connectionString: o.warehouseUrl, max: 4 });
    const archive = new FolderArchive(o.archiveDir);
    return (rebuilder ??= new Rebuilder({
      controlPlane: o.controlPlane,
      pool,
      reader: new ReplayReader({ archive, kinesis: o.kinesis, stream: o.stream, payloads: archivePayloadStore(archive) }),
    }));
  };
  const histories = new Map<string, Awaited<ReturnType<Rebuilder['check']>>>();
  return {
    async check(r) {
      const out = await get().check(r);
      histories.set(`${r.sink}|${r.source}|${r.table}`, out);
      return { refusal: out.refusal };
    },
    async run(r) {
      const checked = histories.get(`${r.sink}|${r.source}|${r.table}`) ?? (await get().check(r));
      if (checked.refusal !== null) throw new LocalConfigError(`the rebuild of ${r.source}/${r.table} was not checked first: ${checked.refusal.reason}`);
      let report: RebuildReport;
      try {
        report = await get().run(r, checked.history);
      } catch (err) {
        // Another rebuild of the sink claimed its slot between the check and the start.
        if (err instanceof RebuildRefusedError) return { refusal: err.refusal };
        throw err;
      }
      const d = report.run.diff;
      const what = r.rehearse ? 'rehearsal (not swapped)' : 'rebuilt and swapped in';
      return {
        message:
          `${r.source}/${r.table} ${what} for sink ${r.sink}: ${report.run.events} events replayed (${report.run.archiveRecords} archive records, ${report.run.streamRecords} stream records read) in ${(report.run.durationMs / 1000).toFixed(1)} s, ` +
          `caught up to ${report.run.caughtUpTo ?? '-'}; diff: ${d.missing} missing, ${d.extra} extra, ${d.changed} changed (kept in ${report.diffTable})`,
        detail: {
          run: report.run,
          diffTable: report.diffTable,
          diff: report.diff.slice(0, 100),
          stats: report.stats,
          skipped: report.skipped,
          applyMs: report.applyMs,
          sleptMs: report.sleptMs,
        },
      };
    },
    async close() {
      await pool?.end();
    },
  };
}

/**
 * A state folder as a command opens it: its state, whether a `cdc local` runs on it (else the
 * command holds the folder's lock), and what the command started, undone in reverse by `close`.
 */
export interface OpenStateFolder {
  stateDir: string;
  state: LocalState;
  running: boolean;
  cleanups: Array<() => Promise<void>>;
  close(): Promise<void>;
}

/** Opens a state folder for a command (the operator door, local/reconcile.ts): refuses one with no state; takes its lock when no `cdc local` runs on it. */
export async function openStateFolder(stateDirOption: string): Promise<OpenStateFolder> {
  const stateDir = path.resolve(stateDirOption);
  const state = readState(path.join(stateDir, 'state.json'));
  if (!state) throw new LocalConfigError(`${stateDir} holds no cdc local state (no state.json): run cdc local there first, or pass --state-dir`);
  const cleanups: Array<() => Promise<void>> = [];
  const close = async (): Promise<void> => {
    for (const c of cleanups.splice(0).reverse()) await c().catch(() => undefined);
  };
  const running = runningPid(stateDir) !== null;
  if (!running) cleanups.push(await takeLock(stateDir));
  return { stateDir, state, running, cleanups, close };
}

/** Opens the operator on a state folder (see the module comment). `warehouseUrl`: the sink's warehouse, for a rebuild. */
export async function openLocalOperator(stateDirOption: string, options: { warehouseUrl?: string | null } = {}): Promise<OperatorDoor> {
  const { stateDir, state, running, cleanups, close } = await openStateFolder(stateDirOption);
  try {
    let ddbEndpoint = `http://127.0.0.1:${state.ports.dynamodb}`;
    let kinEndpoint = `http://127.0.0.1:${state.ports.kinesis}`;
    if (!running) {
      const [d, k] = await Promise.all([
        startDynamoDbLocal({ dbPath: path.join(stateDir, 'dynamodb'), jvmOptions: QUICK_START_JVM_OPTIONS }),
        startKinesalite({ path: path.join(stateDir, 'kinesis') }),
      ]);
      cleanups.push(
        () => d.stop(),
        () => k.stop(),
      );
      ddbEndpoint = d.endpoint;
      kinEndpoint = k.endpoint;
    }
    const dynamo = dynamoDbClient(ddbEndpoint);
    const kinesis = kinesisClient(kinEndpoint);
    cleanups.push(
      async () => dynamo.destroy(),
      async () => kinesis.destroy(),
    );
    const summary = await kinesis.send(new DescribeStreamSummaryCommand({ StreamName: state.streams.changeLog }));
    const hours = summary.StreamDescriptionSummary?.RetentionPeriodHours ?? 24;
    const controlPlane = new DynamoDbControlPlane(dynamo, controlTableOf(state));
    const warehouseUrl =
      options.warehouseUrl ?? (running && state.ports.postgres ? `postgresql://postgres@127.0.0.1:${state.ports.postgres}/${WAREHOUSE_DATABASE}` : null);
    const rebuilds = localRebuilds({ controlPlane, kinesis, stream: state.streams.changeLog, archiveDir: path.join(stateDir, 'archive'), warehouseUrl });
    cleanups.push(() => rebuilds.close());
    const handler = createOperatorHandler({
      controlPlane,
      rebuilds,
      env: { [EnvName.CHANGE_LOG_RETENTION_MS]: String(hours * 3_600_000), [EnvName.PAUSE_BUDGETS]: process.env[EnvName.PAUSE_BUDGETS] },
      // The command prints the outcome itself (stdout stays clean for --json); the audit log keeps it.
      logger: { info: () => undefined, warn: () => undefined },
    });
    return {
      running,
      async invoke(route: string, body: OperatorBody): Promise<OperatorResponse> {
        const response = await handler({ path: route, caller: localCaller(), body });
        if (response.ok && !Array.isArray(response.result) && 'tables' in response.result) response.result.endToEndLag = await localLag(stateDir);
        return response;
      },
      close,
    };
  } catch (err) {
    await close();
    throw err;
  }
}
