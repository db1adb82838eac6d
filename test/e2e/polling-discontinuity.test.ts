/**
 * A heartbeat discontinuity while a table is polled (docs/failures.md, docs/polling.md), on the whole
 * local pipeline against a real embedded PostgreSQL: beats are skipped (the heartbeat row's sequence
 * number jumps, as when beats are lost), the normalizer marks the source's log-captured tables
 * `needs-resnapshot` and the sinks hold them, but the polled table is in its own position space
 * (docs/architecture.md §5.2): it stays active and keeps converging. Before position spaces the
 * polled table was marked and held too, and the warehouse kept only the rows it had before the
 * discontinuity (all of them right): the symptom once seen in test/e2e/polling.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { startLocalStack, type LocalStack } from '../../local/stack.ts';
import { HEARTBEAT_TABLE_ID, LocalPipeline } from '../../local/pipeline.ts';
import { MetricsCollector } from '../../local/metrics.ts';
import { compareSourceAndWarehouse, formatVerdict } from '../../local/verdict.ts';
import { validateTableConfig } from '../../lambda/core/tables/table-config.ts';

const POLLED = validateTableConfig([{ table: 'public.versioned', capture: 'poll', pollColumn: 'cdc_xid' }]);
const LOGGED = validateTableConfig([{ table: 'public.items' }]);

let warehouse: PostgresCluster;
let dir: string;
let stack: LocalStack | null = null;
let pipeline: LocalPipeline | null = null;
let source: pg.Client;

beforeAll(async () => {
  process.env.POWERTOOLS_LOG_LEVEL = 'CRITICAL';
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-poll-gap-'));
  warehouse = await startPostgres({ fast: true });
  await warehouse.createDatabase('dw');
  stack = await startLocalStack({ stateDir: path.join(dir, 'state'), source: 'demo', warehouseUrl: warehouse.url('dw'), fast: true });
  source = new pg.Client({ connectionString: stack.sourceUrl });
  await source.connect();
  await source.query(`
    CREATE SEQUENCE public.versions;
    CREATE TABLE public.versioned (id int PRIMARY KEY, note text, v bigint NOT NULL, cdc_xid xid8);
    CREATE FUNCTION public.cdc_poll_xid() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.cdc_xid := pg_current_xact_id(); RETURN NEW; END $$;
    CREATE TRIGGER zz_cdc_poll_xid BEFORE INSERT OR UPDATE ON public.versioned FOR EACH ROW EXECUTE FUNCTION public.cdc_poll_xid();
    CREATE TABLE public.items (id int PRIMARY KEY, name text NOT NULL);
    INSERT INTO public.versioned SELECT g, 'note ' || g, nextval('public.versions') FROM generate_series(1, 30) g;
  `);
}, 240_000);

afterAll(async () => {
  await pipeline?.stop().catch(() => undefined);
  await source?.end().catch(() => undefined);
  await stack?.stop().catch(() => undefined);
  await warehouse?.stop().catch(() => undefined);
  if (dir) await rm(dir, { recursive: true, force: true });
}, 120_000);

describe('a heartbeat discontinuity and a polled table', () => {
  it('marks the log-captured tables needs-resnapshot and leaves the polled one active and converging', async () => {
    const errors: string[] = [];
    pipeline = new LocalPipeline({
      stack: stack!,
      source: 'demo',
      tables: [...POLLED, ...LOGGED],
      sinkId: 'warehouse',
      collector: new MetricsCollector(),
      heartbeatMs: 1000,
      snapshot: { fixedChunk: 50 },
      pollIntervalMs: 300,
      onError: (where, e) => errors.push(`${where}: ${e instanceof Error ? e.message : String(e)}`),
    });
    await pipeline.start();
    await source.query("INSERT INTO public.items VALUES (1, 'before')");
    await pipeline.waitCaughtUp(120_000);

    // Beats are lost: the heartbeat row's sequence number jumps ahead of the last one the normalizer accepted.
    await source.query(`UPDATE ${HEARTBEAT_TABLE_ID} SET seq = seq + 5 WHERE source_id = 'demo'`);
    const deadline = Date.now() + 60_000;
    const marked = async () => (await stack!.controlPlane.listAudit('demo')).filter((a) => a.action === 'needs-resnapshot').map((a) => a.table);
    while (!(await marked()).includes('public.items') && Date.now() < deadline) await new Promise((r) => setTimeout(r, 200));
    expect(await marked()).toContain('public.items');

    // After it: the polled table keeps changing.
    await source.query("INSERT INTO public.versioned SELECT g, 'later', nextval('public.versions') FROM generate_series(100, 139) g");
    await source.query("UPDATE public.versioned SET note = note || '+', v = nextval('public.versions') WHERE id % 3 = 0");
    await source.query("INSERT INTO public.items VALUES (2, 'after')");
    await pipeline.waitCaughtUp(120_000);

    expect((await stack!.controlPlane.getTable('demo', 'public.items'))!.state).toBe('needs-resnapshot');
    const polled = (await stack!.controlPlane.getTable('demo', 'public.versioned'))!;
    expect([polled.state, polled.positionSpace]).toEqual(['active', 'poll-xid']);
    expect(await marked()).not.toContain('public.versioned');
    const verdict = await compareSourceAndWarehouse({ sourceUrl: stack!.sourceUrl, warehouseUrl: warehouse.url('dw'), source: 'demo', tables: POLLED });
    expect(verdict.match, formatVerdict(verdict).join('\n')).toBe(true);
    expect(verdict.tables[0]!.warehouseRows).toBe(70);
    expect(errors.filter((e) => !/heartbeat|slot monitor/.test(e))).toEqual([]);
  }, 400_000);
});
