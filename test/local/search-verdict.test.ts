/**
 * The search verdict (`compareSourceAndSearch`) against embedded PostgreSQL and the search
 * stand-in, with documents written by the real search applier: a match (masked compared masked,
 * tombstones not counted), then each kind of divergence is named. Also the stand-in's state file:
 * a restarted stand-in holds the same documents and versions.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { SearchStandIn } from '../../local/search-standin.ts';
import { compareSourceAndSearch, formatVerdict } from '../../local/verdict.ts';
import { OpenSearchIndex, searchClient } from '../../lambda/adapters/search-opensearch.ts';
import { createSearchApplier } from '../../lambda/handlers/search-applier.ts';
import { maskValue } from '../../lambda/core/tables/masking.ts';
import { ENVELOPE_VERSION, type ChangeEvent, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import type { TableConfig } from '../../lambda/core/tables/table-config.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

let cluster: PostgresCluster;
let dir: string;
let standin: SearchStandIn;
let index: OpenSearchIndex;
let seq = 0;

beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  dir = mkdtempSync(path.join(os.tmpdir(), 'cdc-search-verdict-'));
  cluster = await startPostgres({ fast: true });
  standin = new SearchStandIn({ dataFile: path.join(dir, 'standin.json') });
  index = new OpenSearchIndex(searchClient({ node: await standin.start() }));
});

afterAll(async () => {
  index?.client.close();
  await standin?.stop();
  await cluster?.stop();
  rmSync(dir, { recursive: true, force: true });
});

const TABLES: TableConfig[] = [{ table: 'public.customers', deleteMode: 'soft', mask: ['email'], exclude: ['ssn'] }];

function ev(op: ChangeEvent['op'], n: number, key: Row, after: Row | null): ChangeEvent {
  return {
    v: ENVELOPE_VERSION,
    source: 'vsrc',
    table: 'public.customers',
    op,
    key,
    after,
    before: op === 'delete' ? key : null,
    missing: [],
    position: makePosition(0x100000000n + BigInt(n), 0),
    commitTs: new Date().toISOString(),
    txId: String(n),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  };
}

describe('search verdict', () => {
  it('matches the source (masked compared masked, tombstones not counted), and names every divergence', async () => {
    await cluster.createDatabase('vsrc');
    const url = cluster.url('vsrc');
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    await c.query(`CREATE TABLE customers (id int PRIMARY KEY, email text, ssn text, amount numeric(10,2));
      INSERT INTO customers VALUES (1, 'a@x', '1', 12.50), (2, 'b@x', '2', 3.00)`);
    const cp = new MemoryControlPlane();
    const at = new Date().toISOString();
    await cp.registerTable(
      { source: 'vsrc', table: 'public.customers', state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
      {
        source: 'vsrc',
        table: 'public.customers',
        version: 1,
        columns: [
          { name: 'id', type: 'integer', nullable: false },
          { name: 'email', type: 'text', nullable: true },
          { name: 'amount', type: 'numeric(10,2)', nullable: true },
          { name: 'bad', type: 'text', nullable: true },
        ],
        key: ['id'],
        effectivePosition: makePosition(0x100000000n, 0),
        registeredAt: at,
      },
      { at, actor: 'test', action: 'register-table', source: 'vsrc', table: 'public.customers', outcome: 'done', detail: {} },
    );
    const a = createSearchApplier({
      controlPlane: cp,
      search: index,
      sinkId: 'search',
      metrics: new Metrics({ namespace: 'test' }),
      logger: new Logger({ logLevel: 'CRITICAL' }),
    });
    const apply = async (events: ChangeEvent[]) => {
      const out = await a.applyRecords(events.map((e) => ({ sequenceNumber: String(++seq), origin: `t/${seq}`, text: JSON.stringify(e) })));
      expect(out.failed).toEqual([]);
    };
    await apply([
      ev('insert', 1, { id: 1 }, { id: 1, email: maskValue('a@x'), amount: '12.50' }),
      ev('insert', 2, { id: 2 }, { id: 2, email: maskValue('b@x'), amount: '3.00' }),
      ev('insert', 3, { id: 3 }, { id: 3, email: maskValue('c@x'), amount: '1.00' }),
      ev('delete', 4, { id: 3 }, null),
    ]);
    const ok = await compareSourceAndSearch({ sourceUrl: url, search: index, source: 'vsrc', tables: TABLES });
    expect(formatVerdict(ok).join('\n')).toContain('verdict (search index): MATCH');
    expect(ok.tables[0]).toMatchObject({ sourceRows: 2, warehouseRows: 2, match: true });

    // A restarted stand-in (same state file) holds the same index.
    await standin.stop();
    standin = new SearchStandIn({ dataFile: path.join(dir, 'standin.json') });
    index.client.close();
    index = new OpenSearchIndex(searchClient({ node: await standin.start() }));
    expect((await compareSourceAndSearch({ sourceUrl: url, search: index, source: 'vsrc', tables: TABLES })).match).toBe(true);

    // Divergences: a changed value, an extra key, a missing key.
    await c.query(`UPDATE customers SET amount = 99 WHERE id = 1; DELETE FROM customers WHERE id = 2; INSERT INTO customers VALUES (5, 'e@x', '5', 1)`);
    const bad = await compareSourceAndSearch({ sourceUrl: url, search: index, source: 'vsrc', tables: TABLES });
    expect(bad.match).toBe(false);
    expect(bad.tables[0]).toMatchObject({ missing: 1, extra: 1, different: 1 });
    expect(formatVerdict(bad).join('\n')).toMatch(/amount is "12.50" in the search index, expected "99.00"/);

    // An excluded column that reached the index is named.
    await c.query(`UPDATE customers SET amount = 12.50 WHERE id = 1`);
    const ex = createSearchApplier({
      controlPlane: cp,
      search: index,
      sinkId: 'search',
      metrics: new Metrics({ namespace: 'test' }),
      logger: new Logger({ logLevel: 'CRITICAL' }),
    });
    await ex.applyRecords([{ sequenceNumber: String(++seq), origin: 't', text: JSON.stringify(ev('update', 6, { id: 1 }, { id: 1, bad: 'x' })) }]);
    const leaked = await compareSourceAndSearch({ sourceUrl: url, search: index, source: 'vsrc', tables: [{ ...TABLES[0]!, exclude: ['ssn', 'bad'] }] });
    expect(leaked.tables[0]!.problems.join('\n')).toMatch(/excluded column bad is present/);
    await c.end();
  });
});
