/**
 * One kinesalite process per stream (docs/local.md, "One kinesalite process per stream"): the
 * stack's one client sends each stream's requests to its own kinesalite (by stream name, and by
 * the iterators that stream's kinesalite gave out), every consumer reads what was put, a resumed
 * state folder keeps the layout it has (one process or two, whatever is asked), and no kinesalite
 * outlives its parent: not after `stop()`, not after the parent is killed with SIGKILL.
 */
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  CreateStreamCommand,
  GetRecordsCommand,
  GetShardIteratorCommand,
  ListShardsCommand,
  ListStreamsCommand,
  PutRecordsCommand,
  type KinesisClient,
} from '@aws-sdk/client-kinesis';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { routeStream, startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { KinesisCursor, StreamFanout } from '../../local/fanout.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { startLocalStack, type LocalStack, type LocalState } from '../../local/stack.ts';
import { until } from './helpers.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function alive(pid: number | undefined): boolean {
  if (!pid) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function streamsOn(endpoint: string): Promise<string[]> {
  const c = kinesisClient(endpoint);
  try {
    return ((await c.send(new ListStreamsCommand({}))).StreamNames ?? []).sort();
  } finally {
    c.destroy();
  }
}

async function put(kinesis: KinesisClient, stream: string, values: string[]): Promise<void> {
  const out = await kinesis.send(new PutRecordsCommand({ StreamName: stream, Records: values.map((v) => ({ PartitionKey: v, Data: Buffer.from(v) })) }));
  expect(out.FailedRecordCount).toBe(0);
}

/** Every record of every shard of `stream`, read through `kinesis` with iterators followed from one GetRecords to the next. */
async function readAll(kinesis: KinesisClient, stream: string): Promise<string[]> {
  const out: string[] = [];
  for (const s of (await kinesis.send(new ListShardsCommand({ StreamName: stream }))).Shards ?? []) {
    let it = (await kinesis.send(new GetShardIteratorCommand({ StreamName: stream, ShardId: s.ShardId!, ShardIteratorType: 'TRIM_HORIZON' }))).ShardIterator;
    for (;;) {
      const got = await kinesis.send(new GetRecordsCommand({ ShardIterator: it!, Limit: 2 }));
      for (const r of got.Records ?? []) out.push(Buffer.from(r.Data!).toString('utf8'));
      if ((got.Records ?? []).length === 0) break;
      it = got.NextShardIterator;
    }
  }
  return out.sort();
}

describe('routeStream: one client, one kinesalite per stream', () => {
  const servers: Kinesalite[] = [];
  afterAll(async () => {
    for (const s of servers) await s.stop();
  });

  it("sends a stream's requests, and the GetRecords of its iterators, to its own kinesalite; other streams to the client's", async () => {
    const [main, other] = await Promise.all([startKinesalite(), startKinesalite()]);
    servers.push(main, other);
    const kinesis = kinesisClient(main.endpoint);
    routeStream(kinesis, 'raw', other.endpoint);
    try {
      await kinesis.send(new CreateStreamCommand({ StreamName: 'raw', ShardCount: 1 }));
      await kinesis.send(new CreateStreamCommand({ StreamName: 'log', ShardCount: 2 }));
      expect(await streamsOn(other.endpoint)).toEqual(['raw']);
      expect(await streamsOn(main.endpoint)).toEqual(['log']);
      await put(kinesis, 'raw', ['r1', 'r2', 'r3', 'r4', 'r5']);
      await put(kinesis, 'log', ['l1', 'l2', 'l3']);
      // Iterators from the raw stream's kinesalite keep going there, page after page (Limit 2).
      expect(await readAll(kinesis, 'raw')).toEqual(['r1', 'r2', 'r3', 'r4', 'r5']);
      expect(await readAll(kinesis, 'log')).toEqual(['l1', 'l2', 'l3']);
      // The consumers' readers: a cursor of its own, and the shared read of the fan-out.
      const shard = (await kinesis.send(new ListShardsCommand({ StreamName: 'raw' }))).Shards![0]!.ShardId!;
      const own = new KinesisCursor(kinesis, 'raw', shard, null);
      expect((await own.read(10)).records.map((r) => Buffer.from(r.Data!).toString())).toEqual(['r1', 'r2', 'r3', 'r4', 'r5']);
      const fan = new StreamFanout({ kinesis, streamName: 'raw' });
      const [a, b] = [fan.cursor(shard, null), fan.cursor(shard, null)];
      expect((await a.read(10)).records).toHaveLength(5);
      expect((await b.read(10)).records).toHaveLength(5);
      expect(fan.stats.sharedReads).toBe(1);
      // A stream name that is neither goes to the client's own endpoint, and is refused there by name.
      await expect(kinesis.send(new ListShardsCommand({ StreamName: 'nope' }))).rejects.toThrow(/nope/);
    } finally {
      kinesis.destroy();
    }
  }, 60_000);
});

describe('the local stack: the raw stream in a kinesalite of its own', () => {
  let cluster: PostgresCluster;
  let dir: string;
  const running: LocalStack[] = [];

  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-per-stream-'));
    cluster = await startPostgres({ fast: true });
    for (const db of ['src', 'dw']) await cluster.createDatabase(db);
  }, 120_000);

  afterAll(async () => {
    for (const s of running.splice(0)) await s.stop().catch(() => undefined);
    await cluster?.stop();
    if (dir) await rm(dir, { recursive: true, force: true });
  }, 120_000);

  /** A stack on the shared cluster's databases; `rawStreamApart` as given (null: not given, the default). */
  const options = (name: string, rawStreamApart: boolean | null = true): Parameters<typeof startLocalStack>[0] => ({
    stateDir: path.join(dir, name),
    source: 'demo',
    sourceUrl: cluster.url('src'),
    warehouseUrl: cluster.url('dw'),
    ...(rawStreamApart === null ? {} : { rawStreamApart }),
  });

  it('runs one kinesalite per stream, records it in state.json, keeps the records across a restart and stops both', async () => {
    const s = await startLocalStack(options('fresh'));
    running.push(s);
    expect(s.kinesaliteRaw).not.toBeNull();
    expect(s.kinesaliteRaw!.pid).not.toBe(s.kinesalite.pid);
    expect(await streamsOn(s.kinesaliteRaw!.endpoint)).toEqual([s.streams.raw]);
    expect(await streamsOn(s.kinesalite.endpoint)).toEqual([s.streams.changeLog]);
    const state = JSON.parse(await readFile(path.join(s.stateDir, 'state.json'), 'utf8')) as LocalState;
    expect(state.ports).toMatchObject({ kinesis: s.kinesalite.port, kinesisRaw: s.kinesaliteRaw!.port });
    await put(s.kinesis, s.streams.raw, ['a', 'b']);
    await put(s.kinesis, s.streams.changeLog, ['c']);
    const pids = [s.kinesalite.pid, s.kinesaliteRaw!.pid];
    running.splice(running.indexOf(s), 1);
    await s.stop();
    for (const pid of pids) expect(alive(pid)).toBe(false);

    // Resumed without asking: the folder keeps its two processes.
    const again = await startLocalStack(options('fresh', false));
    running.push(again);
    expect(again.kinesaliteRaw).not.toBeNull();
    expect(await readAll(again.kinesis, again.streams.raw)).toEqual(['a', 'b']);
    expect(await readAll(again.kinesis, again.streams.changeLog)).toEqual(['c']);
    running.splice(running.indexOf(again), 1);
    await again.stop();
  }, 120_000);

  it('runs one kinesalite for both streams by default, and a folder started so keeps it when per stream is asked', async () => {
    const first = await startLocalStack(options('one', null));
    running.push(first);
    expect(first.kinesaliteRaw).toBeNull();
    expect(await streamsOn(first.kinesalite.endpoint)).toEqual([first.streams.changeLog, first.streams.raw].sort());
    const state = JSON.parse(await readFile(path.join(dir, 'one', 'state.json'), 'utf8')) as LocalState;
    expect(state.ports.kinesisRaw).toBeUndefined();
    await put(first.kinesis, first.streams.raw, ['x']);
    running.splice(running.indexOf(first), 1);
    await first.stop();
    const s = await startLocalStack(options('one', true));
    running.push(s);
    expect(s.kinesaliteRaw).toBeNull();
    expect(await readAll(s.kinesis, s.streams.raw)).toEqual(['x']);
    running.splice(running.indexOf(s), 1);
    await s.stop();
  }, 120_000);

  it('leaves no kinesalite behind when its parent is killed with SIGKILL', async () => {
    const o = options('killed');
    const program =
      `import('${path.join(ROOT, 'local/stack.ts')}').then((m) => m.startLocalStack(${JSON.stringify(o)}))` +
      `.then((s) => { console.log(JSON.stringify({ pids: [s.kinesalite.pid, s.kinesaliteRaw.pid] })); setInterval(() => undefined, 1000); });`;
    const parent = spawn(process.execPath, ['--import', 'tsx', '-e', program], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    parent.stdout.on('data', (d: Buffer) => (out += d.toString()));
    await until('the parent reports its kinesalites', () => out.includes('\n'), 90_000);
    const { pids } = JSON.parse(out.trim().split('\n')[0]!) as { pids: number[] };
    expect(pids.every((p) => alive(p))).toBe(true);
    parent.kill('SIGKILL');
    await until('both kinesalites exit', () => pids.every((p) => !alive(p)), 30_000);
    // The next run in the folder stops the DynamoDB Local the killed run left, and starts both kinesalites again.
    const s = await startLocalStack(o);
    running.push(s);
    expect(s.kinesaliteRaw).not.toBeNull();
    running.splice(running.indexOf(s), 1);
    await s.stop();
  }, 150_000);
});
