/** The verdict comparator and the demo workload against embedded PostgreSQL. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { compareSourceAndWarehouse, formatVerdict } from '../../local/verdict.ts';
import { maskValue } from '../../lambda/core/tables/masking.ts';
import type { TableConfig } from '../../lambda/core/tables/table-config.ts';
import { createDemoSchema, startWorkload } from '../../local/demo.ts';
import { until } from './helpers.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

let cluster: PostgresCluster;
let n = 0;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
});

afterAll(async () => {
  await cluster?.stop();
});

async function db(sql: string): Promise<string> {
  const name = `db${++n}`;
  await cluster.createDatabase(name);
  const c = new pg.Client({ connectionString: cluster.url(name) });
  await c.connect();
  await c.query(sql);
  await c.end();
  return cluster.url(name);
}

const TABLES: TableConfig[] = [{ table: 'public.customers', deleteMode: 'soft', mask: ['email'], exclude: ['ssn'] }];
const SOURCE = `
  CREATE TABLE customers (id int PRIMARY KEY, email text, ssn text, amount numeric(10,2), seen timestamptz);
  INSERT INTO customers VALUES (1, 'a@x', '1', 12.50, '2026-01-01 10:00:00+02'), (2, 'b@x', '2', 3.00, NULL), (3, NULL, '3', NULL, NULL);
`;
const mirror = (rows: string, extra = '', pk = 'PRIMARY KEY') => `
  CREATE SCHEMA demo_public;
  CREATE TABLE demo_public.customers_mirror (id bigint ${pk}, email varchar(65535), amount numeric(38,2), seen timestamptz${extra},
    _cdc_position varchar(24) NOT NULL DEFAULT '0', _cdc_deleted boolean NOT NULL DEFAULT false);
  CREATE VIEW demo_public.customers AS SELECT * FROM demo_public.customers_mirror WHERE NOT _cdc_deleted;
  ${rows}
`;
const a = maskValue('a@x');
const b = maskValue('b@x');

describe('verdict', () => {
  it('matches when every row is there, masked columns hashed, excluded columns absent, tombstones hidden', async () => {
    const src = await db(SOURCE);
    const wh = await db(
      mirror(`INSERT INTO demo_public.customers_mirror (id, email, amount, seen, _cdc_deleted) VALUES
        (1, '${a}', 12.5, '2026-01-01 08:00:00+00', false), (2, '${b}', 3, NULL, false), (3, NULL, NULL, NULL, false), (4, 'gone', NULL, NULL, true)`),
    );
    const v = await compareSourceAndWarehouse({ sourceUrl: src, warehouseUrl: wh, source: 'demo', tables: TABLES });
    expect(formatVerdict(v).join('\n')).toContain('verdict: MATCH');
    expect(v.match).toBe(true);
    expect(v.tables[0]).toMatchObject({ sourceRows: 3, warehouseRows: 3, missing: 0, extra: 0, different: 0, duplicates: 0 });
  });

  it('finds missing, extra and different rows, and a clear value where a masked one belongs', async () => {
    const src = await db(SOURCE);
    const wh = await db(mirror(`INSERT INTO demo_public.customers_mirror (id, email, amount) VALUES (1, 'a@x', 12.5), (3, NULL, 1), (9, NULL, NULL)`));
    const v = await compareSourceAndWarehouse({ sourceUrl: src, warehouseUrl: wh, source: 'demo', tables: TABLES });
    expect(v.match).toBe(false);
    expect(v.tables[0]).toMatchObject({ missing: 1, extra: 1, different: 2 });
    const text = formatVerdict(v).join('\n');
    expect(text).toContain('verdict: MISMATCH');
    expect(text).toContain('key ["2"]: missing in the warehouse');
    expect(text).toContain('key ["9"]: in the warehouse but not in the source');
    expect(text).toMatch(/key \["1"\]: email is "a@x" in the warehouse, expected "[0-9a-f]{40}…"/);
  });

  it('flags an excluded column that reached the warehouse, a missing view, and duplicate keys', async () => {
    const src = await db(SOURCE);
    const wh = await db(
      mirror(
        `INSERT INTO demo_public.customers_mirror (id, email, amount, seen, ssn) VALUES (1, '${a}', 12.5, '2026-01-01 08:00:00+00', '1'), (1, '${a}', 12.5, '2026-01-01 08:00:00+00', '1'),
          (2, '${b}', 3, NULL, '2'), (3, NULL, NULL, NULL, '3')`,
        ', ssn text',
        '',
      ),
    );
    const v = await compareSourceAndWarehouse({
      sourceUrl: src,
      warehouseUrl: wh,
      source: 'demo',
      tables: [...TABLES, { table: 'public.nothere', deleteMode: 'soft', mask: [], exclude: [] }],
    });
    expect(v.match).toBe(false);
    expect(v.tables[0]!.problems).toContain('excluded column ssn is present in the warehouse');
    expect(v.tables[0]!.duplicates).toBeGreaterThan(0);
    expect(v.tables[1]!.problems).toContain('source table public.nothere does not exist');
  });

  it('names a table the sink holds, with why and the command that replays it, and does not call it a match', async () => {
    const src = await db(SOURCE);
    const wh = await db(
      mirror(`INSERT INTO demo_public.customers_mirror (id, email, amount, seen, _cdc_deleted) VALUES
        (1, '${a}', 12.5, '2026-01-01 08:00:00+00', false), (2, '${b}', 3, NULL, false), (3, NULL, NULL, NULL, false)`),
    );
    const controlPlane = new MemoryControlPlane();
    const options = { sourceUrl: src, warehouseUrl: wh, source: 'demo', tables: TABLES, controlPlane, sink: 'dw' };
    expect((await compareSourceAndWarehouse(options)).match).toBe(true);
    // The rows are all there, yet the sink holds the table: its changes from the held position on are not applied.
    await controlPlane.holdSinkTable('dw', 'demo', 'public.customers', '00000000016b374800000003');
    await controlPlane.appendAudit({
      at: new Date().toISOString(),
      actor: 'applier:dw',
      action: 'hold-table',
      source: 'demo',
      table: 'public.customers',
      outcome: 'done',
      detail: { sink: 'dw', sqlState: '42501', reason: 'permission denied for table _cdc_changelog_customers' },
    });
    const held = await compareSourceAndWarehouse(options);
    expect(held.match).toBe(false);
    const text = formatVerdict(held).join('\n');
    expect(text).toContain('FAIL public.customers');
    expect(text).toMatch(
      /held by sink dw since \S+ from position 00000000016b374800000003: permission denied for table _cdc_changelog_customers; .*cdc resume public\.customers/,
    );
    // Another sink's hold is not this one's.
    expect((await compareSourceAndWarehouse({ ...options, sink: 'other' })).match).toBe(true);
  });
});

describe('demo workload', () => {
  it('runs inserts, updates, deletes and key changes against the demo schema, and resumes with the ids in the tables', async () => {
    const url = await db('SELECT 1');
    await createDemoSchema(url);
    await createDemoSchema(url); // idempotent
    const w = await startWorkload({ sourceUrl: url, rate: 500, seed: 42 });
    await until('workload', () => w.stats.transactions >= 300);
    await w.stop();
    expect(w.stats.errors).toBe(0);
    expect(w.stats.inserts).toBeGreaterThan(0);
    expect(w.stats.updates).toBeGreaterThan(0);
    expect(w.stats.deletes).toBeGreaterThan(0);
    expect(w.stats.keyChanges).toBeGreaterThan(0);
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    const orphans = await c.query('SELECT count(*)::int AS n FROM orders o LEFT JOIN customers c ON c.id = o.customer_id WHERE c.id IS NULL');
    expect(orphans.rows[0].n).toBe(0);
    const big = await c.query('SELECT min(length(body))::int AS n, min(pg_column_size(body))::int AS stored FROM documents');
    expect(big.rows[0].n).toBeGreaterThan(2048);
    await c.end();
    // A second workload on the same tables picks up the ids that exist (no key collisions).
    const again = await startWorkload({ sourceUrl: url, rate: 500, seed: 43 });
    await until('second workload', () => again.stats.transactions >= 100);
    await again.stop();
    expect(again.stats.errors).toBe(0);
  });
});
