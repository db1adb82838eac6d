/**
 * Every local stack has names of its own (docs/local.md, "Ports and names"): two stacks started at
 * once get different control tables and streams, each on its own servers; a restart in the same
 * state folder reuses its names and finds its checkpoints; names a user chose are used, and a
 * restart under other names is refused; a state folder of an earlier version keeps its names.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { ListStreamsCommand } from '@aws-sdk/client-kinesis';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { startLocalStack, type LocalStack, type LocalState } from '../../local/stack.ts';
import { CONTROL_TABLE, deriveStackNames, newStackId, stackNamesFor } from '../../local/stack-names.ts';
import { LocalConfigError } from '../../local/errors.ts';

let cluster: PostgresCluster;
let dir: string;
const running: LocalStack[] = [];

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-names-'));
  cluster = await startPostgres({ fast: true });
  for (const db of ['src_a', 'src_b', 'dw']) await cluster.createDatabase(db);
}, 120_000);

afterAll(async () => {
  for (const s of running.splice(0)) await s.stop().catch(() => undefined);
  await cluster?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
}, 120_000);

/** A stack on the shared cluster's databases: no embedded PostgreSQL of its own, only DynamoDB Local and kinesalite. */
async function stack(name: string, db: string, names?: Parameters<typeof startLocalStack>[0]['names']): Promise<LocalStack> {
  const s = await startLocalStack({
    stateDir: path.join(dir, name),
    source: 'demo',
    sourceUrl: cluster.url(db),
    warehouseUrl: cluster.url('dw'),
    ...(names ? { names } : {}),
  });
  running.push(s);
  return s;
}

async function stop(s: LocalStack): Promise<void> {
  running.splice(running.indexOf(s), 1);
  await s.stop();
}

describe('stack names', () => {
  it('derives valid names from a stack id, refuses invalid chosen ones, and keeps recorded ones', () => {
    const id = newStackId();
    expect(id).toMatch(/^[0-9a-f]{8}$/);
    expect(deriveStackNames(id, 'shop')).toEqual({
      stackId: id,
      controlTable: `cdc-control-${id}`,
      streams: { raw: `cdc-raw-shop-${id}`, changeLog: `cdc-change-log-${id}` },
    });
    expect(deriveStackNames(id, 'shop', { changeLogStream: 'mine' }).streams).toEqual({ raw: `cdc-raw-shop-${id}`, changeLog: 'mine' });
    expect(() => deriveStackNames(id, 'shop', { controlTable: 'a b' })).toThrow(/control table name "a b" is not valid: it takes 3 to 255 letters/);
    // Earlier state folders recorded streams only: their control table is the one of then.
    const legacy = { streams: { raw: 'cdc-raw-shop', changeLog: 'cdc-change-log' } };
    expect(stackNamesFor(legacy, 'shop')).toEqual({ stackId: null, controlTable: CONTROL_TABLE, streams: legacy.streams });
    expect(() => stackNamesFor(legacy, 'shop', { rawStream: 'other' }, 'st')).toThrow(
      new LocalConfigError('st holds its state under other names than the raw stream "other" (it has "cdc-raw-shop"); use another --state-dir for new names'),
    );
    // Fresh names differ stack to stack.
    expect(stackNamesFor(null, 'shop').controlTable).not.toBe(stackNamesFor(null, 'shop').controlTable);
  });

  it('two stacks at once get names of their own on servers of their own; a restart reuses its names and state', async () => {
    const [a, b] = await Promise.all([stack('a', 'src_a'), stack('b', 'src_b')]);
    expect(a.stackId).not.toBeNull();
    expect(a.stackId).not.toBe(b.stackId);
    expect(a.controlTable).not.toBe(b.controlTable);
    expect(a.streams.raw).not.toBe(b.streams.raw);
    expect(a.streams.changeLog).not.toBe(b.streams.changeLog);
    expect(new Set([a.dynamodb.port, b.dynamodb.port, a.kinesalite.port, b.kinesalite.port]).size).toBe(4);
    for (const s of [a, b]) {
      expect((await s.dynamo.send(new ListTablesCommand({}))).TableNames).toEqual([s.controlTable]);
      expect(((await s.kinesis.send(new ListStreamsCommand({}))).StreamNames ?? []).sort()).toEqual([s.streams.changeLog, s.streams.raw].sort());
    }
    await a.controlPlane.putCheckpoint('normalizer', 'shardId-000000000000', '42');
    const recorded = JSON.parse(await readFile(path.join(a.stateDir, 'state.json'), 'utf8')) as LocalState;
    expect({ stackId: recorded.stackId, controlTable: recorded.controlTable, streams: recorded.streams }).toEqual({
      stackId: a.stackId,
      controlTable: a.controlTable,
      streams: a.streams,
    });

    await stop(a);
    const again = await stack('a', 'src_a');
    expect({ stackId: again.stackId, controlTable: again.controlTable, streams: again.streams }).toEqual({
      stackId: a.stackId,
      controlTable: a.controlTable,
      streams: a.streams,
    });
    expect(again.resumed).toBe(true);
    expect(await again.controlPlane.getCheckpoint('normalizer', 'shardId-000000000000')).toBe('42');
    expect(await b.controlPlane.getCheckpoint('normalizer', 'shardId-000000000000')).toBeNull();
    await stop(again);
    await stop(b);
  }, 180_000);

  it('uses names a user chose, and refuses a restart under other names', async () => {
    const c = await stack('c', 'src_a', { controlTable: 'my-control', changeLogStream: 'my-change-log' });
    expect(c.controlTable).toBe('my-control');
    expect(c.streams).toEqual({ raw: `cdc-raw-demo-${c.stackId}`, changeLog: 'my-change-log' });
    expect((await c.dynamo.send(new ListTablesCommand({}))).TableNames).toEqual(['my-control']);
    await stop(c);
    await expect(stack('c', 'src_a', { controlTable: 'your-control' })).rejects.toThrow(
      /holds its state under other names than the control table "your-control" \(it has "my-control"\)/,
    );
    const same = await stack('c', 'src_a', { controlTable: 'my-control' });
    expect(same.streams.changeLog).toBe('my-change-log');
    await stop(same);
  }, 180_000);
});
