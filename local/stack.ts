/**
 * The embedded stack of `cdc local`, started and stopped as one: PostgreSQL (source and/or
 * warehouse databases), DynamoDB Local (control plane), kinesalite (raw stream and change log)
 * and the archive folder.
 *
 * State lives in a project-local folder (`.cdc-local/` by default) so that a second run resumes:
 *
 *     .cdc-local/
 *       state.json     what was created and where: PostgreSQL data folder, ports of the last run, stream names
 *       lock           pid of the run using the folder
 *       dynamodb/      DynamoDB Local's database file (control plane: checkpoints, tables, audit, dead letters)
 *       kinesis/       kinesalite's LevelDB (records not yet consumed survive a restart); the change log's only with `rawStreamApart`
 *       kinesis-raw/   with `rawStreamApart`: the raw stream's kinesalite's LevelDB (a process of its own)
 *       archive/       the change-log archive (Firehose layout)
 *       logs/          handler logs, EMF metrics, PostgreSQL log
 *
 * PostgreSQL's data folder is under the OS temp folder (the server runs as the `postgres` OS user,
 * which may not reach the project folder), named after a hash of the state folder's path.
 * Ports are chosen free on every run and written to state.json; the stack's names (control table,
 * streams) are its own, derived from a stack id made on the first run and kept in state.json
 * (docs/local.md, "Ports and names").
 */
import { createHash } from 'node:crypto';
import { existsSync, promises as fs, readFileSync, realpathSync, rmSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';
import { CreateStreamCommand, DescribeStreamSummaryCommand, ResourceInUseException, type KinesisClient } from '@aws-sdk/client-kinesis';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { LeanDynamoDbClient } from './dynamodb-lean.ts';
import { DynamoDbControlPlane } from '../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { startPostgres, type PostgresCluster } from './postgres.ts';
import { QUICK_START_JVM_OPTIONS, startDynamoDbLocal, type DynamoDbLocal } from './dynamodb.ts';
import { PutNotices, routeStream, startKinesaliteProcess, type Kinesalite } from './kinesis.ts';
import { LeanKinesisClient } from './kinesis-lean.ts';
import type { Archive } from '../lambda/core/rebuild/archive.ts';
import { archivePayloadStore, FolderArchive } from './archive.ts';
import type { PayloadStore } from '../lambda/core/shared/payload-store.ts';
import { LocalConfigError } from './errors.ts';
import { recordedNames, stackNamesFor, type ChosenNames } from './stack-names.ts';

export const DEFAULT_STATE_DIR = '.cdc-local';
export { CONTROL_TABLE } from './stack-names.ts';
export const SOURCE_DATABASE = 'source';
export const WAREHOUSE_DATABASE = 'warehouse';

/** What state.json records. */
export interface LocalState {
  version: 1;
  createdAt: string;
  /** Embedded PostgreSQL data folder (null when source and warehouse are both external). */
  postgresDataDir: string | null;
  /** Whether the embedded PostgreSQL holds the source database (demo) or only the warehouse. */
  embeddedSource: boolean;
  /** `kinesis`: kinesalite (both streams', or the change log's only); `kinesisRaw`: the raw stream's, when it has its own. */
  ports: { postgres: number | null; dynamodb: number; kinesis: number; kinesisRaw?: number };
  /** Pids of child processes of the last run (to clean up after a run that was killed). */
  pids: { dynamodb: number | null };
  /** The stack's own names (local/stack-names.ts); the first two are absent in state folders of earlier versions. */
  stackId?: string;
  controlTable?: string;
  streams: { raw: string; changeLog: string };
  /** The source URL of the last run (password removed), to refuse a silent switch of source. */
  source: string | null;
}

export interface StackOptions {
  stateDir: string;
  /** External source database; default: a database in the embedded PostgreSQL. */
  sourceUrl?: string;
  /** External warehouse database; default: a database in the embedded PostgreSQL. */
  warehouseUrl?: string;
  /** Source id (names the raw stream). */
  source: string;
  /** PostgreSQL without fsync (tests). @default false */
  fast?: boolean;
  /**
   * Shards of the raw stream and of the change log (kinesalite has no on-demand mode). Both are
   * partitioned by table and key, so per-key order holds on any shard count; each shard is one
   * batch at a time, shards run concurrently. The raw stream keeps 1 shard: with 2, a table whose
   * first record on one shard is a delete (key only, no types) registers a version without
   * types, and the warehouse holds the table when the typed version follows (docs/performance-log.md,
   * "2.1 After issue 14"). @default 1 and 2
   */
  rawShards?: number;
  changeLogShards?: number;
  /** The raw stream in a kinesalite of its own, on a first run (docs/local.md, "One kinesalite process per stream"); a resumed folder keeps its layout. @default false */
  rawStreamApart?: boolean;
  /** Names for the control table and the streams; by default each stack derives its own from a random stack id (docs/local.md, "Ports and names"). */
  names?: ChosenNames;
  /** Progress lines while starting. */
  log?: (line: string) => void;
}

export interface LocalStack {
  readonly stateDir: string;
  readonly state: LocalState;
  readonly postgres: PostgresCluster | null;
  readonly sourceUrl: string;
  readonly warehouseUrl: string;
  readonly dynamodb: DynamoDbLocal;
  /** kinesalite: both streams', or the change log's only when the raw stream has its own. */
  readonly kinesalite: Kinesalite;
  /** The raw stream's own kinesalite (`rawStreamApart`: docs/local.md, "One kinesalite process per stream"); null when both streams share one. */
  readonly kinesaliteRaw: Kinesalite | null;
  /** One client for both streams: requests for the raw stream go to its own kinesalite. */
  readonly kinesis: KinesisClient;
  /** Notice of records put on a stream through `kinesis`, for the pollers' `watchPuts`. */
  readonly puts: PutNotices;
  readonly dynamo: DynamoDBClient;
  readonly controlPlane: DynamoDbControlPlane;
  readonly controlTable: string;
  /** Random id the stack's names derive from (null: a state folder of an earlier version). */
  readonly stackId: string | null;
  readonly archive: Archive;
  /** The payload store (under the archive's `payloads/`): dead letters' whole records, events stored out of line. */
  readonly payloads: PayloadStore;
  readonly streams: { raw: string; changeLog: string };
  /** Whether this run created the state folder's contents (first run) or resumed. */
  readonly resumed: boolean;
  /** Files for logs and metrics. */
  readonly files: { emf: string; handlerLog: string; postgresLog: string };
  /**
   * Stops the servers in order, after whatever used them was stopped: kinesalite, DynamoDB Local,
   * PostgreSQL (fast shutdown, waited for), then removes the lock. `log` gets a line per step.
   */
  stop(log?: (line: string) => void): Promise<void>;
  /**
   * Signals every server to stop and returns at once (a forced exit): PostgreSQL gets a fast
   * shutdown (it completes on its own), DynamoDB Local and kinesalite SIGTERM; the lock is removed.
   */
  kill(): void;
}

/** Hides the password of a connection URL. */
export function redactUrl(url: string): string {
  try {
    const u = new URL(url);
    if (u.password) u.password = '***';
    return u.toString();
  } catch {
    return '(unparsable URL)';
  }
}

/** The embedded PostgreSQL data folder for a state folder: under the OS temp folder, named after the state folder. */
export function postgresDataDirFor(stateDir: string): string {
  const hash = createHash('sha256').update(realpathSync(stateDir)).digest('hex').slice(0, 16);
  return path.join(os.tmpdir(), `cdc-local-pg-${hash}`);
}

/** Whether a process `pid` is alive (a signal 0 reaches it). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Takes the state folder's lock, or explains who holds it. */
export async function takeLock(stateDir: string): Promise<() => Promise<void>> {
  const file = path.join(stateDir, 'lock');
  if (existsSync(file)) {
    const pid = Number(readFileSync(file, 'utf8').trim());
    if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && alive(pid)) {
      throw new LocalConfigError(`another cdc local (pid ${pid}) is using ${stateDir}; stop it first, or pass a different --state-dir`);
    }
  }
  await fs.writeFile(file, `${process.pid}\n`);
  return async () => {
    try {
      if (readFileSync(file, 'utf8').trim() === String(process.pid)) await fs.rm(file, { force: true });
    } catch {
      // already gone
    }
  };
}

/** Removes the state folder's lock at once if this process holds it (a forced exit). */
function releaseLockNow(stateDir: string): void {
  const file = path.join(stateDir, 'lock');
  try {
    if (readFileSync(file, 'utf8').trim() === String(process.pid)) rmSync(file, { force: true });
  } catch {
    // already gone
  }
}

/** Stops a DynamoDB Local left running by a run that was killed (checked by its command line, then by pid). */
async function stopLeftoverDynamoDb(pid: number | null): Promise<void> {
  if (!pid || !alive(pid)) return;
  let command = '';
  try {
    command = execFileSync('ps', ['-p', String(pid), '-o', 'command='], { encoding: 'utf8' });
  } catch {
    return;
  }
  if (!command.includes('DynamoDBLocal.jar')) return;
  process.kill(pid, 'SIGTERM');
  const deadline = Date.now() + 10_000;
  while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
  if (alive(pid)) process.kill(pid, 'SIGKILL');
}

/** Stops a server still running on a data folder (fast shutdown) and removes the folder. */
async function removePostgresDataDir(dataDir: string): Promise<void> {
  const pidFile = path.join(dataDir, 'postmaster.pid');
  if (existsSync(pidFile)) {
    const pid = Number(readFileSync(pidFile, 'utf8').split('\n')[0]);
    if (Number.isInteger(pid) && pid > 0 && alive(pid)) {
      process.kill(pid, 'SIGINT');
      const deadline = Date.now() + 30_000;
      while (alive(pid) && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    }
  }
  await fs.rm(dataDir, { recursive: true, force: true });
}

async function ensureStream(kinesis: KinesisClient, name: string, shards: number): Promise<void> {
  try {
    await kinesis.send(new CreateStreamCommand({ StreamName: name, ShardCount: shards }));
  } catch (err) {
    if (!(err instanceof ResourceInUseException) && (err as { name?: string }).name !== 'ResourceInUseException') throw err;
  }
  const deadline = Date.now() + 30_000;
  for (;;) {
    const s = await kinesis.send(new DescribeStreamSummaryCommand({ StreamName: name }));
    if (s.StreamDescriptionSummary?.StreamStatus === 'ACTIVE') return;
    if (Date.now() > deadline) throw new Error(`stream ${name} did not become ACTIVE within 30 s`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** The control table of a state folder (the one control table of then for state folders of earlier versions). */
export function controlTableOf(state: LocalState): string {
  return recordedNames(state).controlTable;
}

export function readState(file: string): LocalState | null {
  if (!existsSync(file)) return null;
  let parsed: unknown;
  try {
    parsed = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new LocalConfigError(`${file} is not valid JSON (${(err as Error).message}); remove the state folder to start over`);
  }
  const s = parsed as Partial<LocalState>;
  if (s.version !== 1 || !s.streams || !s.ports)
    throw new LocalConfigError(`${file} is not a state file this version understands; remove the state folder to start over`);
  return s as LocalState;
}

/**
 * Removes a state folder and everything it stands for: stops a PostgreSQL or DynamoDB Local left
 * running by a run that was killed, deletes the embedded PostgreSQL data folder, then the state
 * folder. Refuses while a run holds the folder's lock. Returns what it removed.
 */
export async function resetLocalState(stateDirOption: string): Promise<string[]> {
  const stateDir = path.resolve(stateDirOption);
  if (!existsSync(stateDir)) return [];
  const release = await takeLock(stateDir);
  const removed: string[] = [];
  try {
    const state = readState(path.join(stateDir, 'state.json'));
    await stopLeftoverDynamoDb(state?.pids.dynamodb ?? null);
    const dataDir = state?.postgresDataDir ?? postgresDataDirFor(stateDir);
    if (existsSync(dataDir)) {
      await removePostgresDataDir(dataDir);
      removed.push(dataDir);
    }
  } finally {
    await release();
  }
  await fs.rm(stateDir, { recursive: true, force: true });
  removed.push(stateDir);
  return removed;
}

/** Starts (or resumes) the embedded stack in `stateDir`. */
export async function startLocalStack(options: StackOptions): Promise<LocalStack> {
  const log = options.log ?? (() => undefined);
  const stateDir = path.resolve(options.stateDir);
  await fs.mkdir(path.join(stateDir, 'logs'), { recursive: true });
  const releaseLock = await takeLock(stateDir);
  const stateFile = path.join(stateDir, 'state.json');
  // What started, stopped in this order whatever order they started in: the stream and the
  // control plane first, PostgreSQL last, then the lock (docs/local.md, "Stopping").
  const started: Partial<Record<'kinesaliteRaw' | 'kinesalite' | 'dynamodb' | 'postgres', () => Promise<void>>> = {};
  const stopAll = async (say: (line: string) => void = () => undefined): Promise<void> => {
    for (const [name, what] of [
      ['kinesaliteRaw', "the raw stream's kinesalite"],
      ['kinesalite', 'kinesalite'],
      ['dynamodb', 'DynamoDB Local'],
      ['postgres', 'PostgreSQL (fast shutdown)'],
    ] as const) {
      const stop = started[name];
      delete started[name];
      if (!stop) continue;
      await stop().then(
        () => say(`${what} stopped`),
        (err: unknown) => say(`${what} did not stop cleanly: ${err instanceof Error ? err.message : String(err)}`),
      );
    }
    await releaseLock();
    say('lock removed');
  };
  try {
    const previous = readState(stateFile);
    const resumed = previous !== null;
    const sourceLabel = options.sourceUrl ? redactUrl(options.sourceUrl) : null;
    if (previous && previous.source !== sourceLabel) {
      throw new LocalConfigError(
        `${stateDir} holds the state of a run against ${previous.source ?? 'the embedded demo source'}, not ${sourceLabel ?? 'the embedded demo source'}; use another --state-dir (or remove this one to start over)`,
      );
    }
    // A restart reuses the names its state folder recorded; a first run makes its own.
    const names = stackNamesFor(previous, options.source, options.names, stateDir);
    const needPostgres = !options.sourceUrl || !options.warehouseUrl;
    const files = {
      emf: path.join(stateDir, 'logs', 'metrics.emf.jsonl'),
      handlerLog: path.join(stateDir, 'logs', 'handlers.log'),
      postgresLog: path.join(stateDir, 'logs', 'postgres.log'),
    };

    const dataDir = needPostgres ? (previous?.postgresDataDir ?? postgresDataDirFor(stateDir)) : null;
    if (dataDir && !previous && existsSync(dataDir)) {
      // A first run in this folder (no state.json): a data folder left from an earlier state
      // folder of the same path (removed to start over) is stale, and so is its slot.
      log(`removing a stale embedded PostgreSQL data folder (${dataDir})`);
      await removePostgresDataDir(dataDir);
    }
    if (dataDir && previous?.postgresDataDir && !existsSync(path.join(previous.postgresDataDir, 'PG_VERSION'))) {
      throw new LocalConfigError(
        `the embedded PostgreSQL data folder of ${stateDir} (${previous.postgresDataDir}) is gone (the OS temp folder was cleaned?), ` +
          `but the control state still expects its replication slot. Run cdc local --reset --state-dir ${stateDir} to start over.`,
      );
    }
    await stopLeftoverDynamoDb(previous?.pids.dynamodb ?? null);
    log(`starting ${dataDir ? 'embedded PostgreSQL, ' : ''}DynamoDB Local and kinesalite`);
    // All three at once; whatever started is stopped again if another one fails.
    const t0 = Date.now();
    const took = (): string => `${((Date.now() - t0) / 1000).toFixed(1)} s`;
    const startPg = async (): Promise<PostgresCluster | null> => {
      if (!dataDir) return null;
      const pgLog = await fs.open(files.postgresLog, 'a');
      const cluster = await startPostgres({
        dataDir,
        persistent: true,
        fast: options.fast ?? false,
        onLog: (line) => void pgLog.write(line).catch(() => undefined),
      }).catch(async (err) => {
        await pgLog.close();
        throw err;
      });
      started.postgres = async () => {
        await cluster.stop();
        await pgLog.close();
      };
      if (!options.sourceUrl) await cluster.createDatabase(SOURCE_DATABASE);
      if (!options.warehouseUrl) await cluster.createDatabase(WAREHOUSE_DATABASE);
      log(`PostgreSQL ready on port ${cluster.port} (${took()})`);
      return cluster;
    };
    const startDdb = async (): Promise<DynamoDbLocal> => {
      const d = await startDynamoDbLocal({ dbPath: path.join(stateDir, 'dynamodb'), jvmOptions: QUICK_START_JVM_OPTIONS });
      started.dynamodb = () => d.stop();
      log(`DynamoDB Local ready on port ${d.port} (${took()})`);
      return d;
    };
    const startKin = async (): Promise<Kinesalite> => {
      const k = await startKinesaliteProcess({ path: path.join(stateDir, 'kinesis') });
      started.kinesalite = () => k.stop();
      log(`kinesalite ready on port ${k.port} (${took()})`);
      return k;
    };
    // The raw stream in a kinesalite of its own when asked on a first run; a resumed folder keeps
    // the layout it has (docs/local.md, "One kinesalite process per stream").
    const rawApart = previous ? previous.ports.kinesisRaw !== undefined : (options.rawStreamApart ?? false);
    const startKinRaw = async (): Promise<Kinesalite | null> => {
      if (!rawApart) return null;
      const k = await startKinesaliteProcess({ path: path.join(stateDir, 'kinesis-raw') });
      started.kinesaliteRaw = () => k.stop();
      log(`the raw stream's kinesalite ready on port ${k.port} (${took()})`);
      return k;
    };
    const results = await Promise.allSettled([startPg(), startDdb(), startKin(), startKinRaw()]);
    for (const r of results) if (r.status === 'rejected') throw r.reason;
    const [postgres, dynamodb, kinesalite, kinesaliteRaw] = results.map((r) => (r as PromiseFulfilledResult<unknown>).value) as [
      PostgresCluster | null,
      DynamoDbLocal,
      Kinesalite,
      Kinesalite | null,
    ];

    const streams = names.streams;
    const state: LocalState = {
      version: 1,
      createdAt: previous?.createdAt ?? new Date().toISOString(),
      postgresDataDir: dataDir,
      embeddedSource: !options.sourceUrl,
      ports: {
        postgres: postgres?.port ?? null,
        dynamodb: dynamodb.port,
        kinesis: kinesalite.port,
        ...(kinesaliteRaw ? { kinesisRaw: kinesaliteRaw.port } : {}),
      },
      pids: { dynamodb: dynamodb.pid ?? null },
      ...(names.stackId !== null ? { stackId: names.stackId } : {}),
      controlTable: names.controlTable,
      streams,
      source: sourceLabel,
    };
    await fs.writeFile(`${stateFile}.tmp`, `${JSON.stringify(state, null, 2)}\n`);
    await fs.rename(`${stateFile}.tmp`, stateFile);

    const kinesis = new LeanKinesisClient(kinesalite.endpoint);
    if (kinesaliteRaw) routeStream(kinesis, streams.raw, kinesaliteRaw.endpoint);
    const puts = new PutNotices();
    puts.attach(kinesis);
    // Its hot requests sent lean (docs/local.md, "The lean DynamoDB client"); the rest through the SDK.
    const dynamo = new LeanDynamoDbClient(dynamodb.endpoint);
    await createControlTable(dynamo, names.controlTable);
    await ensureStream(kinesis, streams.raw, options.rawShards ?? 1);
    await ensureStream(kinesis, streams.changeLog, options.changeLogShards ?? 2);
    const archive = new FolderArchive(path.join(stateDir, 'archive'));
    // Dead letters' whole records and events over the record limit, through the archive interface (docs/large-records.md).
    const payloads = archivePayloadStore(archive);

    return {
      stateDir,
      state,
      postgres,
      sourceUrl: options.sourceUrl ?? postgres!.url(SOURCE_DATABASE),
      warehouseUrl: options.warehouseUrl ?? postgres!.url(WAREHOUSE_DATABASE),
      dynamodb,
      kinesalite,
      kinesaliteRaw,
      kinesis,
      puts,
      dynamo,
      controlPlane: new DynamoDbControlPlane(dynamo, names.controlTable, payloads),
      controlTable: names.controlTable,
      stackId: names.stackId,
      archive,
      payloads,
      streams,
      resumed,
      files,
      async stop(say?: (line: string) => void): Promise<void> {
        kinesis.destroy();
        dynamo.destroy();
        await stopAll(say);
      },
      kill(): void {
        const signal = (pid: number | null | undefined, sig: NodeJS.Signals): void => {
          try {
            if (pid) process.kill(pid, sig);
          } catch {
            // already gone
          }
        };
        signal(postgres?.pid, 'SIGINT'); // fast shutdown
        signal(dynamodb.pid, 'SIGTERM');
        signal(kinesalite.pid, 'SIGTERM');
        signal(kinesaliteRaw?.pid, 'SIGTERM');
        releaseLockNow(stateDir);
      },
    };
  } catch (err) {
    await stopAll();
    throw err;
  }
}
