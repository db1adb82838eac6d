/**
 * kinesalite: a Kinesis Data Streams stand-in. Clients must use the HTTP/1.1 handler (see
 * lambda/adapters/aws-clients.ts). It has no ON_DEMAND mode: give a shard count.
 *
 * Two ways to run it: in this process (`startKinesalite`, what tests use), or in a child process
 * of its own (`startKinesaliteProcess`, what `cdc local` uses). kinesalite is single-threaded and
 * spends most of its time on sequence-number arithmetic and LevelDB encoding; in this process it
 * competes with every handler for one event loop (docs/performance-log.md, "2. End to end"), in its own it
 * gets a core of its own. The child exits when its parent does (the IPC channel closes), so a
 * parent killed with SIGKILL leaves no kinesalite behind holding the LevelDB lock.
 */
import { spawn } from 'node:child_process';
import { createRequire } from 'node:module';
import type { Server } from 'node:http';
import type { KinesisClient } from '@aws-sdk/client-kinesis';
import { describeListeners, portTakenIn } from './ports.ts';
import { LeanKinesisClient } from './kinesis-lean.ts';

export interface KinesaliteOptions {
  /** Port on 127.0.0.1. @default a free port */
  port?: number;
  /** Folder for a LevelDB store (streams and records survive restarts). @default in memory */
  path?: string;
}

export interface Kinesalite {
  readonly endpoint: string;
  readonly port: number;
  /** OS process id of the child process (`startKinesaliteProcess`); undefined when in process. */
  readonly pid?: number | undefined;
  stop(): Promise<void>;
}

type KinesaliteFactory = (opts: Record<string, unknown>) => Server;

/** kinesalite's settings in both modes: streams become ACTIVE at once, room for resharding. */
function kinesaliteSettings(options: KinesaliteOptions): Record<string, unknown> {
  return { createStreamMs: 0, deleteStreamMs: 0, updateStreamMs: 0, shardLimit: 100, ...(options.path ? { path: options.path } : {}) };
}

export async function startKinesalite(options: KinesaliteOptions = {}): Promise<Kinesalite> {
  const require = createRequire(import.meta.url);
  const kinesalite = require('kinesalite') as KinesaliteFactory;
  const server = kinesalite(kinesaliteSettings(options));
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve());
  });
  const addr = server.address();
  if (!addr || typeof addr !== 'object') throw new Error('kinesalite did not report its port');
  return {
    endpoint: `http://127.0.0.1:${addr.port}`,
    port: addr.port,
    async stop(): Promise<void> {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}

/**
 * The child's program (CommonJS, run with `node -e`, so it needs no file of its own in the
 * package): it loads kinesalite from the path the parent resolved, listens, reports its port over
 * IPC, closes its server on `stop`, and exits when the parent goes away.
 */
const CHILD_PROGRAM = `
const kinesalite = require(process.env.CDC_KINESALITE_MODULE);
const settings = JSON.parse(process.env.CDC_KINESALITE_SETTINGS);
const server = kinesalite(settings);
const bye = (code) => server.close(() => process.exit(code));
server.on('error', (err) => { process.send({ error: String(err && err.message || err) }); process.exit(1); });
server.listen(Number(process.env.CDC_KINESALITE_PORT), '127.0.0.1', () => process.send({ port: server.address().port }));
process.on('message', (m) => { if (m === 'stop') bye(0); });
process.on('disconnect', () => bye(0));
`;

/** Whether a start failure is another kinesalite still holding the LevelDB store (a parent killed a moment ago). */
function lockHeld(message: string): boolean {
  return /lock/i.test(message);
}

/**
 * Starts kinesalite in a child process and resolves once it listens. With a `path`, a LevelDB
 * lock still held by a kinesalite whose parent was just killed (it exits as soon as it notices)
 * is waited for, up to 15 s.
 */
export async function startKinesaliteProcess(options: KinesaliteOptions = {}): Promise<Kinesalite> {
  const require = createRequire(import.meta.url);
  const modulePath = require.resolve('kinesalite');
  const deadline = Date.now() + 15_000;
  for (;;) {
    try {
      return await startChild(modulePath, options);
    } catch (err) {
      const message = (err as Error).message;
      // The child listens on port 0 unless told a port, and reports the port it bound: the server
      // on it is its own. A port given and taken is refused with the name of its holder.
      if (options.port !== undefined && portTakenIn(message))
        throw new Error(`kinesalite cannot listen on port ${options.port}: it is in use by ${await describeListeners(options.port)}`);
      if (!options.path || !lockHeld(message) || Date.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 200));
    }
  }
}

function startChild(modulePath: string, options: KinesaliteOptions): Promise<Kinesalite> {
  const child = spawn(process.execPath, ['-e', CHILD_PROGRAM], {
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    // A process group of its own: a terminal's Ctrl-C reaches the parent only, which stops this
    // server after the consumers that use it (docs/local.md, "Stopping"). It still exits when the parent goes away.
    detached: true,
    env: {
      ...process.env,
      CDC_KINESALITE_MODULE: modulePath,
      CDC_KINESALITE_SETTINGS: JSON.stringify(kinesaliteSettings(options)),
      CDC_KINESALITE_PORT: String(options.port ?? 0),
      // The parent's loader flags (tsx, coverage) have nothing to do with this plain program.
      NODE_OPTIONS: '',
    },
  });
  let stderr = '';
  child.stderr?.on('data', (d: Buffer) => (stderr = (stderr + d.toString()).slice(-4000)));
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
  return new Promise<Kinesalite>((resolve, reject) => {
    const fail = (reason: string): void => {
      child.kill('SIGKILL');
      reject(new Error(`kinesalite (child process) did not start: ${reason}${stderr ? `; stderr: ${stderr.trim()}` : ''}`));
    };
    const timer = setTimeout(() => fail('no port reported within 30 s'), 30_000);
    child.once('error', (err) => {
      clearTimeout(timer);
      fail(err.message);
    });
    const early = (code: number | null, signal: NodeJS.Signals | null): void => {
      clearTimeout(timer);
      fail(`exited with ${signal ?? `code ${code}`} before listening`);
    };
    child.once('exit', early);
    child.once('message', (m: { port?: number; error?: string }) => {
      clearTimeout(timer);
      if (typeof m?.port !== 'number') return fail(m?.error ?? `unexpected message ${JSON.stringify(m)}`);
      child.off('exit', early);
      // The parent may exit while the child still runs (it exits on disconnect): do not keep the parent alive for it.
      child.unref();
      (child as unknown as { channel?: { unref(): void } }).channel?.unref();
      (child.stderr as unknown as { unref?: () => void } | null)?.unref?.();
      const port = m.port;
      resolve({
        endpoint: `http://127.0.0.1:${port}`,
        port,
        pid: child.pid,
        async stop(): Promise<void> {
          if (child.exitCode !== null || child.signalCode !== null) return;
          child.ref(); // keep this process alive until the child is gone
          if (child.connected) child.send('stop');
          else child.kill('SIGTERM');
          const killer = setTimeout(() => child.kill('SIGKILL'), 10_000);
          await exited;
          clearTimeout(killer);
        },
      });
    });
  });
}

/** What one put put where: per shard, the highest sequence number it put there. */
export type PutShards = ReadonlyMap<string, string>;

/**
 * Notice of records put on a stream through one client: `cdc local`'s publishers (the capture,
 * the normalizer's change log) and its pollers share the stack's Kinesis client, so a poller of an
 * idle shard reads as soon as a PutRecords succeeded instead of at its next poll
 * (`PollerOptions.watchPuts`). A notice names the shards the put went to and the last sequence
 * number on each (from the put's response), so only those shards' readers wake, and only while
 * they have not read that far (docs/local.md, "Reads paced by put notices"). A notice only wakes
 * a reader; what it reads is still decided by the stream.
 */
export class PutNotices {
  private readonly listeners = new Map<string, Set<(put: PutShards | null) => void>>();

  /** Adds the notices to a client: after every successful PutRecords or PutRecord, the stream's listeners are called. */
  attach(client: KinesisClient): void {
    if (client instanceof LeanKinesisClient)
      client.afterSend((name, input, output) => {
        const stream = (input as { StreamName?: string }).StreamName;
        if (name === 'PutRecordsCommand' && stream) this.notify(stream, putShards(output as PutOutput));
      });
    client.middlewareStack.add(
      (next, context) => async (args) => {
        const out = await next(args);
        if (context.commandName === 'PutRecordsCommand' || context.commandName === 'PutRecordCommand') {
          const stream = (args.input as { StreamName?: string }).StreamName;
          if (stream) this.notify(stream, putShards(out.output as PutOutput));
        }
        return out;
      },
      { step: 'initialize', name: 'cdcLocalPutNotices' },
    );
  }

  /** Calls `listener` after each put on `stream` with where it put (null: it did not say, so every shard); returns the unsubscribe function. */
  watch(stream: string, listener: (put: PutShards | null) => void): () => void {
    let set = this.listeners.get(stream);
    if (!set) this.listeners.set(stream, (set = new Set()));
    set.add(listener);
    return () => void set.delete(listener);
  }

  /** `watch` for one stream, as `PollerOptions.watchPuts` takes it. */
  watcher(stream: string): (listener: (put: PutShards | null) => void) => () => void {
    return (listener) => this.watch(stream, listener);
  }

  notify(stream: string, put: PutShards | null = null): void {
    for (const listener of this.listeners.get(stream) ?? []) listener(put);
  }
}

type PutEntry = { ShardId?: string; SequenceNumber?: string; ErrorCode?: string };
type PutOutput = (PutEntry & { Records?: PutEntry[] }) | undefined;

/** Where a PutRecords or PutRecord response says its records went; null when a successful entry does not say. */
export function putShards(output: PutOutput): PutShards | null {
  const entries = output?.Records ?? (output ? [output] : []);
  const put = new Map<string, string>();
  for (const e of entries) {
    if (e.ErrorCode) continue;
    if (!e.ShardId || !e.SequenceNumber) return null;
    const before = put.get(e.ShardId);
    if (before === undefined || BigInt(before) < BigInt(e.SequenceNumber)) put.set(e.ShardId, e.SequenceNumber);
  }
  return put;
}

/** Prefix of the shard iterators a routed stream's kinesalite gave out (`routeStream`). */
const ROUTED_ITERATOR = 'cdc-local-routed:';

/**
 * Sends every request for `stream` on `client` to the kinesalite at `endpoint` instead of the
 * client's own (docs/local.md, "One kinesalite process per stream"): one client for all streams,
 * one process per stream. A request names its stream by `StreamName` or `StreamARN`; a GetRecords
 * names none, so the shard iterators that stream's kinesalite gives out carry a prefix that sends
 * their GetRecords there too (iterators are opaque to every consumer; the prefix is removed before
 * the request leaves). Requests for any other stream go to the client's own endpoint.
 */
export function routeStream(client: KinesisClient, stream: string, endpoint: string): void {
  const target = new URL(endpoint);
  if (client instanceof LeanKinesisClient) client.route(stream, endpoint, ROUTED_ITERATOR);
  const routed = new WeakSet<object>();
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const input = args.input as { StreamName?: string; StreamARN?: string; ShardIterator?: string };
      const byIterator = typeof input.ShardIterator === 'string' && input.ShardIterator.startsWith(ROUTED_ITERATOR);
      if (!byIterator && input.StreamName !== stream && !input.StreamARN?.endsWith(`/${stream}`)) return next(args);
      routed.add(context);
      const sent = byIterator ? { ...args, input: { ...input, ShardIterator: input.ShardIterator!.slice(ROUTED_ITERATOR.length) } } : args;
      const out = await next(sent);
      const output = out.output as { ShardIterator?: string; NextShardIterator?: string };
      if (output.ShardIterator) output.ShardIterator = ROUTED_ITERATOR + output.ShardIterator;
      if (output.NextShardIterator) output.NextShardIterator = ROUTED_ITERATOR + output.NextShardIterator;
      return out;
    },
    { step: 'initialize', priority: 'high', name: `cdcLocalRoute:${stream}` },
  );
  client.middlewareStack.add(
    (next, context) => async (args) => {
      if (routed.has(context)) {
        const request = args.request as { hostname?: string; port?: number; headers?: Record<string, string> };
        request.hostname = target.hostname;
        request.port = Number(target.port);
        if (request.headers?.host !== undefined) request.headers.host = target.host;
      }
      return next(args);
    },
    { step: 'finalizeRequest', priority: 'low', name: `cdcLocalRouteHost:${stream}` },
  );
}
