/**
 * Ports of the local servers (docs/local.md, "Ports and names"). PostgreSQL and DynamoDB Local
 * cannot be told to listen on port 0, so a free port is chosen here and handed to them; between
 * that choice and the server's bind (up to 20 s for DynamoDB Local's JVM) another process may take
 * the port, another server among them. So a port that merely accepts connections proves nothing:
 * a start is ready only once the server it started is the one listening (its identity is checked),
 * and a start whose server lost the port to someone else picks another port and starts again.
 *
 * Who listens on a port is read from the OS: `/proc` on Linux, `lsof` elsewhere. Where neither
 * can tell (another platform, or the listener belongs to a user whose sockets this process may not
 * read), the answer is `null`, "unknown", and callers say so rather than guess.
 */
import { execFile } from 'node:child_process';
import { promises as fs, existsSync } from 'node:fs';
import net from 'node:net';

/** Finds a free TCP port on 127.0.0.1. It is free now, not reserved: see `startOnFreePort`. */
export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr ? resolve(addr.port) : reject(new Error('no port'))));
    });
  });
}

/** Whether something accepts TCP connections on 127.0.0.1:`port`. */
export async function portOpen(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1', () => {
      s.end();
      resolve(true);
    });
    s.on('error', () => resolve(false));
  });
}

/** The inodes of the TCP sockets listening on `port` (any local address), from /proc/net/tcp and tcp6. */
async function listeningInodes(port: number): Promise<Set<string>> {
  const inodes = new Set<string>();
  const hexPort = port.toString(16).toUpperCase().padStart(4, '0');
  for (const file of ['/proc/net/tcp', '/proc/net/tcp6']) {
    const text = await fs.readFile(file, 'utf8').catch(() => '');
    for (const line of text.split('\n').slice(1)) {
      const cols = line.trim().split(/\s+/);
      // sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
      if (cols.length < 10 || cols[3] !== '0A') continue;
      if (cols[1]!.split(':')[1] === hexPort) inodes.add(cols[9]!);
    }
  }
  return inodes;
}

/** Whether `pid` holds one of the socket `inodes` (false when its descriptors cannot be read). */
async function holdsSocket(pid: number, inodes: ReadonlySet<string>): Promise<boolean> {
  const dir = `/proc/${pid}/fd`;
  const fds = await fs.readdir(dir).catch(() => [] as string[]);
  for (const fd of fds) {
    const link = await fs.readlink(`${dir}/${fd}`).catch(() => '');
    const m = /^socket:\[(\d+)\]$/.exec(link);
    if (m && inodes.has(m[1]!)) return true;
  }
  return false;
}

function lsofListeners(port: number): Promise<number[] | null> {
  return new Promise((resolve) => {
    execFile('lsof', ['-nP', `-iTCP:${port}`, '-sTCP:LISTEN', '-t'], { timeout: 10_000 }, (err, stdout) => {
      // lsof exits 1 when nothing matches; a missing lsof is an error without stdout.
      if (err && (err as NodeJS.ErrnoException).code === 'ENOENT') return resolve(null);
      resolve(
        stdout
          .split('\n')
          .map(Number)
          .filter((n) => Number.isInteger(n) && n > 0),
      );
    });
  });
}

/**
 * The pids of the processes listening on TCP `port`, as far as this process can see; `null` when
 * the OS cannot be asked. An empty list with the port open means the listener is not visible to
 * this process (another user's, or another network namespace).
 */
export async function listenerPids(port: number): Promise<number[] | null> {
  if (!existsSync('/proc/net/tcp')) return lsofListeners(port);
  const inodes = await listeningInodes(port);
  if (inodes.size === 0) return [];
  const pids = (await fs.readdir('/proc')).filter((d) => /^\d+$/.test(d)).map(Number);
  const found: number[] = [];
  for (const pid of pids) if (await holdsSocket(pid, inodes)) found.push(pid);
  return found;
}

/**
 * Whether the server listening on `port` is process `pid` (or one of its children: `java` may be a
 * launcher). `null` when the OS cannot tell; false when nothing listens or someone else does.
 */
export async function listensOn(pid: number, port: number): Promise<boolean | null> {
  if (!existsSync('/proc/net/tcp')) {
    const pids = await lsofListeners(port);
    return pids === null ? null : pids.some((p) => p === pid);
  }
  const inodes = await listeningInodes(port);
  if (inodes.size === 0) return false;
  for (const p of [pid, ...(await descendants(pid))]) if (await holdsSocket(p, inodes)) return true;
  return false;
}

async function descendants(pid: number): Promise<number[]> {
  const out: number[] = [];
  const queue = [pid];
  while (queue.length > 0 && out.length < 64) {
    const p = queue.shift()!;
    const tasks = await fs.readdir(`/proc/${p}/task`).catch(() => [] as string[]);
    for (const t of tasks) {
      const children = await fs.readFile(`/proc/${p}/task/${t}/children`, 'utf8').catch(() => '');
      for (const c of children.split(/\s+/).filter(Boolean).map(Number)) {
        out.push(c);
        queue.push(c);
      }
    }
  }
  return out;
}

/** "pid 123 (java -jar …)" for each listener of `port`, for error messages and diagnostics. */
export async function describeListeners(port: number): Promise<string> {
  const pids = await listenerPids(port);
  if (pids === null) return 'listeners unknown (neither /proc nor lsof available)';
  if (pids.length === 0) return (await portOpen(port)) ? 'a listener this process cannot see' : 'nothing listening';
  const names = await Promise.all(
    pids.map(async (p) => {
      const cmd = await fs.readFile(`/proc/${p}/cmdline`, 'utf8').catch(() => '');
      const text = commandLine(cmd.split('\0').filter(Boolean));
      return text ? `pid ${p} (${text})` : `pid ${p}`;
    }),
  );
  return names.join(', ');
}

/** A command line, short: folders dropped from paths, whitespace runs as one space, at most 200 characters. */
function commandLine(args: readonly string[]): string {
  const text = args
    .map((a) => a.replace(/(?:[^\s=/]*\/)+([^\s=/]+)/g, '$1'))
    .join(' ')
    .replace(/\s+/g, ' ')
    .trim();
  return text.length > 200 ? `${text.slice(0, 197)}...` : text;
}

/** Whether a server's start output says its port was taken (PostgreSQL, Jetty/Java, Node). */
export function portTakenIn(output: string): boolean {
  return /address already in use|EADDRINUSE|BindException|could not create any TCP\/IP sockets/i.test(output);
}

/** A server start lost its port to another process: pick another port and start again. */
export class PortTakenError extends Error {
  constructor(
    readonly port: number,
    detail: string,
  ) {
    super(`port ${port} was taken by another process before the server could bind it (${detail})`);
    this.name = 'PortTakenError';
  }
}

/**
 * Starts a server on a port of its own: `start(port)` runs one attempt and throws
 * `PortTakenError` when the server lost the port; then another port from `choose` is tried, up to
 * `attempts` times. With a fixed `port` (the caller's choice) a taken port is an error naming
 * who holds it.
 */
export async function startOnFreePort<T>(
  options: { port?: number | undefined; choose?: (() => Promise<number>) | undefined; attempts?: number; what: string },
  start: (port: number) => Promise<T>,
): Promise<T> {
  const attempts = options.port !== undefined ? 1 : (options.attempts ?? 8);
  const tried: number[] = [];
  for (;;) {
    const port = options.port ?? (await (options.choose ?? freePort)());
    tried.push(port);
    try {
      return await start(port);
    } catch (err) {
      if (!(err instanceof PortTakenError)) throw err;
      if (tried.length >= attempts) {
        const who = await describeListeners(port);
        throw new Error(
          options.port !== undefined
            ? `${options.what} cannot listen on port ${port}: it is in use by ${who}`
            : `${options.what} lost its port to another process ${tried.length} times (ports ${tried.join(', ')}; the last is in use by ${who})`,
        );
      }
    }
  }
}
