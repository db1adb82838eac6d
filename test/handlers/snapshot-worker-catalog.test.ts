/**
 * The snapshot worker's first step in each invocation (lambda/handlers/snapshot-worker.ts): it
 * publishes the catalog types of captured tables not registered yet, read from a real PostgreSQL
 * (embedded), into the control plane (in-memory, a collaborator double; see its doc), where the
 * normalizer finds them for a table first seen through a DMS data record (docs/schema-drift.md,
 * "First sight of a table").
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { createSnapshotWorker } from '../../lambda/handlers/snapshot-worker.ts';
import { readCatalogColumnTypes, readPartitionTree } from '../../lambda/adapters/source-facts-pg.ts';
import { PARTITION_TREE_KEY, readPublishedPartitionTree } from '../../lambda/core/tables/partitions.ts';
import { catalogConsumerId } from '../../contracts/control-plane-keys.ts';
import { PostgresSnapshotReader } from '../../lambda/adapters/snapshot-postgres.ts';
import { readCatalogTypes } from '../../lambda/core/shared/catalog-types.ts';
import { DEFAULT_SOURCE_BUDGET } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

let cluster: PostgresCluster;
let client: pg.Client;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  await cluster.createDatabase('src');
  client = new pg.Client({ connectionString: cluster.url('src') });
  client.on('error', () => undefined);
  await client.connect();
}, 120_000);
afterAll(async () => {
  await client?.end();
  await cluster?.stop();
});

describe('snapshot worker: catalog types of tables not registered yet', () => {
  it('publishes them with modifiers and key before any snapshot work, skips absent and registered tables, rewrites a changed one', async () => {
    await client.query('CREATE TABLE public.cdc_heartbeat (source_id text PRIMARY KEY, beat_at timestamptz)');
    await client.query('CREATE TABLE public.items (id bigint, line smallint, price numeric(12,2), name varchar(20), at timestamp(3), PRIMARY KEY (id, line))');
    const controlPlane = new MemoryControlPlane();
    const reader = new PostgresSnapshotReader({ primary: { connectionString: cluster.url('src') } });
    const worker = createSnapshotWorker({
      source: 'shop',
      // Snapshots of their own are off: this invocation has only the catalog step to do.
      tables: [
        { table: 'public.items', key: ['id', 'line'], deleteMode: 'soft', mask: [], exclude: [], snapshot: false },
        { table: 'public.gone', key: ['id'], deleteMode: 'soft', mask: [], exclude: [], snapshot: false },
      ],
      controlPlane,
      reader,
      publish: async () => undefined,
      budget: DEFAULT_SOURCE_BUDGET,
      metrics: new Metrics({ namespace: 'test', serviceName: 'test' }),
      logger: new Logger({ serviceName: 'test', logLevel: 'ERROR' }),
      owner: 'test',
      catalog: { describe: (t) => readCatalogColumnTypes(client, t), catalogTables: ['public.cdc_heartbeat'] },
    });
    try {
      await worker(() => 600_000);
      expect(await readCatalogTypes(controlPlane, 'shop', 'public.items')).toEqual({
        table: 'public.items',
        columns: [
          { name: 'id', type: 'bigint' },
          { name: 'line', type: 'smallint' },
          { name: 'price', type: 'numeric(12,2)' },
          { name: 'name', type: 'character varying(20)' },
          { name: 'at', type: 'timestamp(3) without time zone' },
        ],
        key: ['id', 'line'],
      });
      expect((await readCatalogTypes(controlPlane, 'shop', 'public.cdc_heartbeat'))?.columns.map((c) => c.type)).toEqual(['text', 'timestamp with time zone']);
      expect(await readCatalogTypes(controlPlane, 'shop', 'public.gone')).toBeNull();
      expect(await controlPlane.listSnapshots('shop')).toEqual([]);

      // A column added before the table is registered: the next invocation publishes it.
      await client.query('ALTER TABLE public.items ADD COLUMN note text');
      await worker(() => 600_000);
      expect((await readCatalogTypes(controlPlane, 'shop', 'public.items'))?.columns.at(-1)).toEqual({ name: 'note', type: 'text' });
    } finally {
      await reader.close();
    }
  });

  it('publishes the partition tree read from the catalog, and again only when a partition joins or leaves (docs/partitioned-tables.md)', async () => {
    await client.query(`CREATE TABLE public.ev (id int, at date, PRIMARY KEY (id, at)) PARTITION BY RANGE (at);
      CREATE TABLE public.ev_2024_01 PARTITION OF public.ev FOR VALUES FROM ('2024-01-01') TO ('2024-02-01');
      CREATE TABLE public.ev_2024_02 PARTITION OF public.ev FOR VALUES FROM ('2024-02-01') TO ('2024-03-01') PARTITION BY RANGE (id);
      CREATE TABLE public.ev_2024_02_low PARTITION OF public.ev_2024_02 FOR VALUES FROM (0) TO (1000);`);
    const controlPlane = new MemoryControlPlane();
    const reader = new PostgresSnapshotReader({ primary: { connectionString: cluster.url('src') } });
    const worker = createSnapshotWorker({
      source: 'shop',
      tables: [{ table: 'public.ev', key: ['id', 'at'], deleteMode: 'soft', mask: [], exclude: [], snapshot: false }],
      controlPlane,
      reader,
      publish: async () => undefined,
      budget: DEFAULT_SOURCE_BUDGET,
      metrics: new Metrics({ namespace: 'test', serviceName: 'test' }),
      logger: new Logger({ serviceName: 'test', logLevel: 'ERROR' }),
      owner: 'test',
      catalog: { describe: (t) => readCatalogColumnTypes(client, t), partitionTree: () => readPartitionTree(client) },
    });
    try {
      await worker(() => 600_000);
      let tree = (await readPublishedPartitionTree(controlPlane, 'shop'))!;
      // Leaves and the intermediate partition map to the root of their tree.
      expect(Object.fromEntries(tree.rootOf)).toEqual({
        'public.ev_2024_01': 'public.ev',
        'public.ev_2024_02': 'public.ev',
        'public.ev_2024_02_low': 'public.ev',
      });
      expect(tree.leavesOf.get('public.ev')).toEqual(['public.ev_2024_01', 'public.ev_2024_02_low']);
      expect(tree.standalone.has('public.ev')).toBe(true);
      const written = await controlPlane.getCheckpoint(catalogConsumerId('shop'), PARTITION_TREE_KEY);
      await worker(() => 600_000);
      expect(await controlPlane.getCheckpoint(catalogConsumerId('shop'), PARTITION_TREE_KEY)).toBe(written);
      await client.query(
        `CREATE TABLE public.ev_2024_03 PARTITION OF public.ev FOR VALUES FROM ('2024-03-01') TO ('2024-04-01'); ALTER TABLE public.ev DETACH PARTITION public.ev_2024_01`,
      );
      await worker(() => 600_000);
      tree = (await readPublishedPartitionTree(controlPlane, 'shop'))!;
      expect(tree.rootOf.get('public.ev_2024_03')).toBe('public.ev');
      expect(tree.rootOf.has('public.ev_2024_01')).toBe(false);
      expect(tree.standalone.has('public.ev_2024_01')).toBe(true);
    } finally {
      await reader.close();
    }
  });
});
