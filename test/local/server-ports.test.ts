/**
 * No two local servers share a port (docs/local.md, "Ports and names"). Two servers of each kind
 * are started at once and made to collide: both are handed the same free port first (a race for
 * it), and a third is told a port another server already holds. Each start must end on a server
 * of its own (its identity checked: the listener's pid, the cluster's data directory, the tables
 * it holds), the loser of the race on another port, and a taken port given explicitly refused
 * with the name of its holder. Before, a start took any server that accepted on its port for its
 * own: the loser of the race talked to the winner's server.
 */
import { afterAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { CreateTableCommand, ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { ListStreamsCommand, CreateStreamCommand } from '@aws-sdk/client-kinesis';
import { dynamoDbClient, kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { QUICK_START_JVM_OPTIONS, startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { startKinesaliteProcess, type Kinesalite } from '../../local/kinesis.ts';
import { freePort, listenerPids, listensOn } from '../../local/ports.ts';

const stops: Array<() => Promise<void>> = [];
afterAll(async () => {
  for (const stop of stops.splice(0).reverse()) await stop().catch(() => undefined);
}, 120_000);

/** A port source that hands out `first` once, then free ports; counts its calls. */
function colliding(first: number): { choose: () => Promise<number>; calls: () => number } {
  let n = 0;
  return { choose: async () => (n++ === 0 ? first : freePort()), calls: () => n };
}

async function tablesOf(endpoint: string): Promise<string[]> {
  const client = dynamoDbClient(endpoint);
  try {
    return (await client.send(new ListTablesCommand({}))).TableNames ?? [];
  } finally {
    client.destroy();
  }
}

describe('local servers on ports of their own', () => {
  it('DynamoDB Local: two JVMs racing for one port each end on their own; a taken port given explicitly is refused naming its holder', async () => {
    const contested = await freePort();
    const a = colliding(contested);
    const b = colliding(contested);
    const started = await Promise.all([a, b].map((c) => startDynamoDbLocal({ choosePort: c.choose, jvmOptions: QUICK_START_JVM_OPTIONS })));
    for (const d of started) stops.push(() => d.stop());
    const [x, y] = started as [DynamoDbLocal, DynamoDbLocal];
    // A port given explicitly and held by another server: refused, naming the holder.
    await expect(startDynamoDbLocal({ port: x.port, jvmOptions: QUICK_START_JVM_OPTIONS })).rejects.toThrow(
      new RegExp(`DynamoDB Local cannot listen on port ${x.port}: it is in use by pid ${x.pid}\\b`),
    );
    // Both were offered the contested port; one of them had to move.
    expect(a.calls() + b.calls()).toBeGreaterThanOrEqual(3);
    expect([x.port, y.port]).toContain(contested);
    expect(x.port).not.toBe(y.port);
    for (const d of started) expect(await listensOn(d.pid!, d.port)).toBe(true);
    // Each endpoint is its own server: a table made through one is not in the other.
    for (const [d, name] of [
      [x, 'only-in-x'],
      [y, 'only-in-y'],
    ] as const) {
      const client = dynamoDbClient(d.endpoint);
      await client.send(
        new CreateTableCommand({
          TableName: name,
          AttributeDefinitions: [{ AttributeName: 'k', AttributeType: 'S' }],
          KeySchema: [{ AttributeName: 'k', KeyType: 'HASH' }],
          BillingMode: 'PAY_PER_REQUEST',
        }),
      );
      client.destroy();
    }
    expect(await tablesOf(x.endpoint)).toEqual(['only-in-x']);
    expect(await tablesOf(y.endpoint)).toEqual(['only-in-y']);
    expect(await tablesOf(x.endpoint)).toEqual(['only-in-x']);
  }, 150_000);

  it('PostgreSQL: two clusters racing for one port each end on their own (data directory checked); a taken port given explicitly is refused naming its holder', async () => {
    const contested = await freePort();
    const a = colliding(contested);
    const b = colliding(contested);
    const started = await Promise.all([a, b].map((c) => startPostgres({ fast: true, choosePort: c.choose })));
    for (const c of started) stops.push(() => c.stop());
    const [x, y] = started as [PostgresCluster, PostgresCluster];
    const holders = await listenerPids(x.port);
    expect(holders?.length).toBe(1);
    await expect(startPostgres({ fast: true, port: x.port })).rejects.toThrow(
      new RegExp(`PostgreSQL cannot listen on port ${x.port}: it is in use by pid ${holders![0]}\\b`),
    );
    expect(a.calls() + b.calls()).toBeGreaterThanOrEqual(3);
    expect([x.port, y.port]).toContain(contested);
    expect(x.port).not.toBe(y.port);
    await x.createDatabase('only_in_x');
    await y.createDatabase('only_in_y');
    for (const [c, own, other] of [
      [x, 'only_in_x', 'only_in_y'],
      [y, 'only_in_y', 'only_in_x'],
    ] as const) {
      const client = new pg.Client({ connectionString: c.url('postgres') });
      await client.connect();
      const r = await client.query<{ dir: string; own: boolean; other: boolean }>(
        'SELECT current_setting($1) AS dir, EXISTS (SELECT 1 FROM pg_database WHERE datname = $2) AS own, EXISTS (SELECT 1 FROM pg_database WHERE datname = $3) AS other',
        ['data_directory', own, other],
      );
      await client.end();
      expect(r.rows[0]).toEqual({ dir: c.dataDir, own: true, other: false });
    }
  }, 150_000);

  it('kinesalite: two child processes at once listen on ports of their own; a taken port given explicitly is refused naming its holder', async () => {
    const started = await Promise.all([startKinesaliteProcess(), startKinesaliteProcess()]);
    for (const k of started) stops.push(() => k.stop());
    const [x, y] = started as [Kinesalite, Kinesalite];
    await expect(startKinesaliteProcess({ port: x.port })).rejects.toThrow(
      new RegExp(`kinesalite cannot listen on port ${x.port}: it is in use by pid ${x.pid}\\b`),
    );
    expect(x.port).not.toBe(y.port);
    for (const k of started) expect(await listensOn(k.pid!, k.port)).toBe(true);
    const client = kinesisClient(x.endpoint);
    await client.send(new CreateStreamCommand({ StreamName: 'only-in-x', ShardCount: 1 }));
    client.destroy();
    for (const [k, names] of [
      [x, ['only-in-x']],
      [y, []],
    ] as const) {
      const c = kinesisClient(k.endpoint);
      expect((await c.send(new ListStreamsCommand({}))).StreamNames).toEqual(names);
      c.destroy();
    }
  }, 60_000);
});
