/**
 * Outages delay, they never skip (docs/local.md, "Outages"): the whole local pipeline runs while
 * its warehouse (its own embedded PostgreSQL) is stopped for longer than the old retry budget
 * of the poller (10 retries, about 26 s), while changes keep flowing on the source. The sink
 * poller must report the stall and retry without limit; when the warehouse is back, every event
 * is applied (the row-by-row verdict matches) and no record was dead-lettered.
 *
 * The outage lasts `CDC_OUTAGE_SECONDS` (default 35) seconds.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { startLocalStack, type LocalStack } from '../../local/stack.ts';
import { LocalPipeline } from '../../local/pipeline.ts';
import { MetricsCollector } from '../../local/metrics.ts';
import { compareSourceAndWarehouse, formatVerdict } from '../../local/verdict.ts';
import { stackPorts, verdictDiagnostics } from '../helpers/verdict-diagnostics.ts';
import type { TableConfig } from '../../lambda/core/tables/table-config.ts';
import { until } from '../local/helpers.ts';

const OUTAGE_MS = Number(process.env.CDC_OUTAGE_SECONDS ?? 35) * 1000;
const OLD_RETRY_BUDGET_MS = 26_300;
const TABLES: TableConfig[] = [{ table: 'public.items', deleteMode: 'soft', mask: [], exclude: [] }];

let warehouse: PostgresCluster;
let dir: string;
let stack: LocalStack | null = null;
let pipeline: LocalPipeline | null = null;
let source: pg.Client;

beforeAll(async () => {
  // The handlers' logs and EMF lines would flood the test output during the outage.
  process.env.POWERTOOLS_LOG_LEVEL = 'CRITICAL';
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-outage-'));
  warehouse = await startPostgres({ fast: true, persistent: true });
  await warehouse.createDatabase('dw');
  stack = await startLocalStack({ stateDir: path.join(dir, 'state'), source: 'demo', warehouseUrl: warehouse.url('dw'), fast: true });
  source = new pg.Client({ connectionString: stack.sourceUrl });
  await source.connect();
  await source.query('CREATE TABLE IF NOT EXISTS public.items (id int PRIMARY KEY, name text NOT NULL, qty int)');
}, 240_000);

afterAll(async () => {
  await pipeline?.stop().catch(() => undefined);
  await source?.end().catch(() => undefined);
  await stack?.stop().catch(() => undefined);
  await warehouse?.stop().catch(() => undefined);
  // The warehouse data folder is persistent (it survives the outage): remove it here.
  if (warehouse) await rm(warehouse.dataDir, { recursive: true, force: true }).catch(() => undefined);
  if (dir) await rm(dir, { recursive: true, force: true });
}, 120_000);

describe('warehouse outage longer than the old retry budget', () => {
  it('stalls the sink, dead-letters nothing, and applies every event after the warehouse is back', async () => {
    const errors: string[] = [];
    pipeline = new LocalPipeline({
      stack: stack!,
      source: 'demo',
      tables: TABLES,
      sinkId: 'warehouse',
      collector: new MetricsCollector(),
      heartbeatMs: 1000,
      onError: (where, e) => errors.push(`${where}: ${e instanceof Error ? e.message : String(e)}`),
    });
    await pipeline.start();
    await source.query("INSERT INTO items SELECT g, 'item ' || g, g FROM generate_series(1, 50) g");
    await pipeline.waitCaughtUp(120_000);

    // The warehouse goes away; changes keep coming.
    const { port, dataDir } = warehouse;
    await warehouse.stop();
    const downAt = Date.now();
    let n = 50;
    while (Date.now() - downAt < OUTAGE_MS) {
      n++;
      await source.query('INSERT INTO items VALUES ($1, $2, $1)', [n, `item ${n}`]);
      await source.query('UPDATE items SET qty = qty + 1000 WHERE id = $1', [n - 25]);
      if (n % 3 === 0) await source.query('DELETE FROM items WHERE id = $1', [n - 40]);
      await new Promise((r) => setTimeout(r, 500));
    }
    const sink = pipeline.snapshot().consumers.find((c) => c.consumer === 'warehouse')!;
    // Still retrying after longer than the old budget, and nothing given up.
    expect(sink.stalledMs, JSON.stringify(sink)).not.toBeNull();
    expect(sink.stalledMs!).toBeGreaterThan(OLD_RETRY_BUDGET_MS);
    expect(sink.lastError).toBeTruthy();
    expect(pipeline.pollers.sink.stats.deadLetters).toBe(0);

    // The warehouse comes back on the same port with the same data.
    warehouse = await startPostgres({ dataDir, port, persistent: true, fast: true });
    await pipeline.waitCaughtUp(180_000);
    await until('stall cleared', () => pipeline!.pollers.sink.stats.stalledSince === null, 30_000);

    const verdict = await compareSourceAndWarehouse({ sourceUrl: stack!.sourceUrl, warehouseUrl: warehouse.url('dw'), source: 'demo', tables: TABLES });
    expect(
      verdict.match,
      verdict.match
        ? ''
        : [
            ...formatVerdict(verdict),
            ...(await verdictDiagnostics({
              controlPlane: stack!.controlPlane,
              warehouseUrl: warehouse.url('dw'),
              source: 'demo',
              tables: TABLES.map((t) => t.table),
              ports: stackPorts(stack!, { warehouse: warehouse.port }),
            })),
          ].join('\n'),
    ).toBe(true);
    const rows = await source.query<{ n: number }>('SELECT count(*)::int AS n FROM items');
    expect(verdict.tables[0]!.warehouseRows).toBe(rows.rows[0]!.n);
    const letters = await stack!.controlPlane.listDeadLetters();
    expect(letters.filter((l) => l.code === 'RETRIES_EXHAUSTED')).toEqual([]);
    expect(letters).toEqual([]);
    // The outage was seen (and retried), not hidden.
    expect(errors.some((e) => e.startsWith('warehouse poller'))).toBe(true);
  }, 400_000);
});
