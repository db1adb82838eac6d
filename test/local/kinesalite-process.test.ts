/**
 * kinesalite in a child process of its own (`startKinesaliteProcess`, what `cdc local` runs): it
 * answers like the in-process one, keeps its LevelDB store across restarts, stops on `stop()`,
 * and exits by itself when its parent is killed with SIGKILL, so the next run gets the store.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, describe, expect, it } from 'vitest';
import { CreateStreamCommand, GetRecordsCommand, GetShardIteratorCommand, ListShardsCommand, PutRecordsCommand } from '@aws-sdk/client-kinesis';
import { kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { startKinesaliteProcess } from '../../local/kinesis.ts';
import { until } from './helpers.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const dirs: string[] = [];

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function readAll(endpoint: string, stream: string): Promise<string[]> {
  const client = kinesisClient(endpoint);
  try {
    const out: string[] = [];
    const shards = (await client.send(new ListShardsCommand({ StreamName: stream }))).Shards ?? [];
    for (const s of shards) {
      const it = (await client.send(new GetShardIteratorCommand({ StreamName: stream, ShardId: s.ShardId!, ShardIteratorType: 'TRIM_HORIZON' }))).ShardIterator;
      const got = await client.send(new GetRecordsCommand({ ShardIterator: it! }));
      for (const r of got.Records ?? []) out.push(Buffer.from(r.Data!).toString('utf8'));
    }
    return out.sort();
  } finally {
    client.destroy();
  }
}

afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

describe('kinesalite in its own process', () => {
  it('serves records, keeps its store across a restart, and stops', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'cdc-kin-proc-'));
    dirs.push(dir);
    const k = await startKinesaliteProcess({ path: dir });
    expect(k.pid).toBeGreaterThan(0);
    expect(k.pid).not.toBe(process.pid);
    const client = kinesisClient(k.endpoint);
    await client.send(new CreateStreamCommand({ StreamName: 's', ShardCount: 2 }));
    await until('stream active', async () => (await client.send(new ListShardsCommand({ StreamName: 's' })).catch(() => null))?.Shards?.length === 2);
    const put = await client.send(new PutRecordsCommand({ StreamName: 's', Records: ['a', 'b', 'c'].map((x) => ({ PartitionKey: x, Data: Buffer.from(x) })) }));
    expect(put.FailedRecordCount).toBe(0);
    client.destroy();
    await k.stop();
    expect(alive(k.pid!)).toBe(false);

    const again = await startKinesaliteProcess({ path: dir });
    try {
      expect(await readAll(again.endpoint, 's')).toEqual(['a', 'b', 'c']);
    } finally {
      await again.stop();
    }
  }, 60_000);

  it('exits when its parent is killed with SIGKILL, and the next start gets the store', async () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'cdc-kin-orphan-'));
    dirs.push(dir);
    const program = `import('${path.join(ROOT, 'local/kinesis.ts')}').then((m) => m.startKinesaliteProcess({ path: ${JSON.stringify(dir)} })).then((k) => { console.log(JSON.stringify({ pid: k.pid, endpoint: k.endpoint })); setInterval(() => undefined, 1000); });`;
    const parent = spawn(process.execPath, ['--import', 'tsx', '-e', program], { cwd: ROOT, stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    parent.stdout.on('data', (d: Buffer) => (out += d.toString()));
    await until('the parent reports its kinesalite', () => out.includes('\n'), 60_000);
    const started = JSON.parse(out.trim().split('\n')[0]!) as { pid: number; endpoint: string };
    const client = kinesisClient(started.endpoint);
    await client.send(new CreateStreamCommand({ StreamName: 'o', ShardCount: 1 }));
    await until('stream active', async () => (await client.send(new ListShardsCommand({ StreamName: 'o' })).catch(() => null))?.Shards?.length === 1);
    await client.send(new PutRecordsCommand({ StreamName: 'o', Records: [{ PartitionKey: 'k', Data: Buffer.from('kept') }] }));
    client.destroy();

    parent.kill('SIGKILL');
    await until('the orphaned kinesalite exits', () => !alive(started.pid), 30_000);
    const next = await startKinesaliteProcess({ path: dir });
    try {
      expect(await readAll(next.endpoint, 'o')).toEqual(['kept']);
    } finally {
      await next.stop();
    }
  }, 90_000);
});
