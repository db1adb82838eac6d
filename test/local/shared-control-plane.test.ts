/**
 * Why every stack has names of its own (docs/local.md, "Ports and names"): the poll cursors live
 * in the control table. Two stacks polling a version-polled table, with their control planes on
 * one DynamoDB Local (what a stack that took another's port got before): under one table name the
 * second stack reads the first one's cursor, already past every version of its own table, and
 * delivers none of its rows, silently; under the names each stack derives from its own id both
 * deliver every row.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { pollConsumer } from '../../lambda/core/capture/poll.ts';
import { validateTableConfig } from '../../lambda/core/tables/table-config.ts';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { LocalPolls } from '../../local/poll.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { CONTROL_TABLE, deriveStackNames, newStackId } from '../../local/stack-names.ts';
import { until } from './helpers.ts';

// Polled by a modified-at column whose values are the same in both stacks' databases (integer versions are refused, docs/polling.md).
const TABLES = validateTableConfig([{ table: 'public.versioned', capture: 'poll', pollColumn: 'v' }]);
const ROWS = 120;

let cluster: PostgresCluster;
let ddb: DynamoDbLocal;
let dynamo: DynamoDBClient;

beforeAll(async () => {
  process.env.POWERTOOLS_LOG_LEVEL = 'CRITICAL';
  [cluster, ddb] = await Promise.all([startPostgres({ fast: true }), startDynamoDbLocal()]);
  dynamo = dynamoDbClient(ddb.endpoint);
}, 120_000);

afterAll(async () => {
  dynamo?.destroy();
  await ddb?.stop();
  await cluster?.stop();
}, 60_000);

/** One stack's polling on its own source database, against `controlTable`: polls until its cursor stops moving, returns the ids it delivered. */
async function pollStack(database: string, controlTable: string): Promise<Set<number>> {
  await cluster.createDatabase(database);
  const c = new pg.Client({ connectionString: cluster.url(database) });
  await c.connect();
  await c.query(
    `CREATE TABLE public.versioned (id int PRIMARY KEY, note text, v timestamptz NOT NULL); INSERT INTO public.versioned SELECT g, 'note ' || g, '2026-01-01 00:00:00+00'::timestamptz + g * interval '1 second' FROM generate_series(1, ${ROWS}) g`,
  );
  await c.end();
  await createControlTable(dynamo, controlTable);
  const controlPlane = new DynamoDbControlPlane(dynamo, controlTable);
  const delivered = new Set<number>();
  const polls = new LocalPolls({
    source: 'demo',
    sourceUrl: cluster.url(database),
    tables: TABLES,
    controlPlane,
    fixedPage: 50,
    intervalMs: 100,
    publish: async (records) => {
      for (const r of records)
        delivered.add(Number((JSON.parse(r.data) as { columns: { name: string; value: string }[] }).columns.find((col) => col.name === 'id')!.value));
    },
  });
  polls.start();
  try {
    // Done once a whole pass completed after the cursor stood at its end (or at someone else's).
    await until('a completed pass', async () => polls.lines().every((l) => l.lastPassAt !== null), 30_000);
    const first = polls.lines()[0]!.lastPassAt!;
    await until('a second pass', async () => polls.lines()[0]!.lastPassAt! > first, 30_000);
  } finally {
    await polls.stop();
  }
  expect(await controlPlane.getCheckpoint(pollConsumer('demo'), 'public.versioned')).toBe(JSON.stringify(['2026-01-01 00:02:00+00', String(ROWS)]));
  return delivered;
}

describe('two stacks on one control plane', () => {
  it('under one table name the second stack delivers none of its rows; under names of their own both deliver all', async () => {
    // One table name for both: what every stack used before.
    expect((await pollStack('shared_a', CONTROL_TABLE)).size).toBe(ROWS);
    expect((await pollStack('shared_b', CONTROL_TABLE)).size).toBe(0);
    // Names of their own, on the same server.
    const own = [deriveStackNames(newStackId(), 'demo'), deriveStackNames(newStackId(), 'demo')];
    expect((await pollStack('own_a', own[0]!.controlTable)).size).toBe(ROWS);
    expect((await pollStack('own_b', own[1]!.controlTable)).size).toBe(ROWS);
  }, 120_000);
});
