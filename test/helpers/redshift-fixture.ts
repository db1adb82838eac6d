/**
 * What the Redshift tests stand on (the stand-in on embedded PostgreSQL, a folder as S3, and
 * DynamoDB Local with the control table where the loader function's requests are tested): started
 * before the file's tests, stopped after. The fields are filled in by the fixture's `beforeAll`,
 * which runs before any the file registers after calling it.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll } from 'vitest';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';

export interface RedshiftFixture {
  cluster: PostgresCluster;
  /** DynamoDB Local with the table `control` (with `dynamo`). */
  ddb: DynamoDbLocal;
  /** `clients` connections to the database, connected. */
  clients: pg.Client[];
  /** One connection at most, for the applier. */
  pool: pg.Pool;
  /** The S3 stand-in's folder. */
  folder: string;
}

export function useRedshiftFixture(o: { database: string; clients: number; dynamo?: boolean; utc?: boolean }): RedshiftFixture {
  const f = { clients: [] as pg.Client[] } as RedshiftFixture;
  beforeAll(async () => {
    const [cluster, ddb] = await Promise.all([startPostgres({ fast: true }), o.dynamo ? startDynamoDbLocal() : Promise.resolve(undefined)]);
    f.cluster = cluster;
    if (ddb) f.ddb = ddb;
    await cluster.createDatabase(o.database);
    for (let i = 0; i < o.clients; i++) {
      const c = new pg.Client({ connectionString: cluster.url(o.database) });
      await c.connect();
      if (o.utc) await c.query("SET TIME ZONE 'UTC'");
      f.clients.push(c);
    }
    f.pool = new pg.Pool({ connectionString: cluster.url(o.database), max: 1 });
    f.folder = await mkdtemp(path.join(os.tmpdir(), `cdc-${o.database}-s3-`));
    if (ddb) await createControlTable(dynamoDbClient(ddb.endpoint), 'control');
  }, 120_000);
  afterAll(async () => {
    await f.pool?.end();
    for (const c of f.clients) await c.end();
    await Promise.all([f.cluster?.stop(), f.ddb?.stop()]);
    if (f.folder) await rm(f.folder, { recursive: true, force: true });
  });
  return f;
}
