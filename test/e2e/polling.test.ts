/**
 * The polling fallback end to end (docs/polling.md) and per-event transforms in the sinks
 * (docs/transforms.md), on the whole local pipeline against a real embedded PostgreSQL:
 *
 * - two tables configured `capture: 'poll'` (one by a `timestamptz` modified-at column, one by a
 *   trigger-maintained transaction id, docs/polling.md) and one captured from the slot as usual. Rows that exist before the start,
 *   inserts and updates while it runs all converge (the row-by-row verdict matches); the polled
 *   events on the change log say `capture: "poll"`; the slot capture never reads the polled tables;
 * - a delete on a polled table is not seen: the warehouse keeps the row, and both the table record
 *   (`capture: 'poll'`) and the live status say that deletes are not observable;
 * - a log-captured table with transforms (rename, coercion, tenant stamp): the warehouse view has
 *   the renamed, coerced and stamped columns, created from the registered schema.
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
import { renderStatus } from '../../local/status.ts';
import { compareSourceAndWarehouse, formatVerdict } from '../../local/verdict.ts';
import { readChangeLog } from '../../lambda/adapters/change-log-reader.ts';
import { validateTableConfig, type TableConfig } from '../../lambda/core/tables/table-config.ts';
import { POLL_DELETES_INVISIBLE, pollConsumer } from '../../lambda/core/capture/poll.ts';
import { POLLED_TABLE_COMMENT } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { stackPorts, verdictDiagnostics } from '../helpers/verdict-diagnostics.ts';

const POLLED: TableConfig[] = validateTableConfig([
  { table: 'public.accounts', capture: 'poll', pollColumn: 'updated_at' },
  { table: 'public.versioned', capture: 'poll', pollColumn: 'cdc_xid' },
]);
const LOGGED: TableConfig[] = validateTableConfig([{ table: 'public.items' }]);
const SHAPED: TableConfig[] = validateTableConfig([
  {
    table: 'public.orders',
    transforms: { rename: { amt: 'amount' }, coerce: { amt: 'numeric(12,2)', code: 'bigint' }, tenant: { column: 'tenant', value: '{source}:{table}' } },
  },
]);

let warehouse: PostgresCluster;
let dir: string;
let stack: LocalStack | null = null;
let pipeline: LocalPipeline | null = null;
let source: pg.Client;
let dw: pg.Client;

beforeAll(async () => {
  process.env.POWERTOOLS_LOG_LEVEL = 'CRITICAL';
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-poll-'));
  warehouse = await startPostgres({ fast: true });
  await warehouse.createDatabase('dw');
  stack = await startLocalStack({ stateDir: path.join(dir, 'state'), source: 'demo', warehouseUrl: warehouse.url('dw'), fast: true });
  source = new pg.Client({ connectionString: stack.sourceUrl });
  await source.connect();
  dw = new pg.Client({ connectionString: warehouse.url('dw') });
  await dw.connect();
  await source.query(`
    CREATE TABLE public.accounts (id int PRIMARY KEY, name text NOT NULL, balance numeric(12,2), updated_at timestamptz NOT NULL DEFAULT clock_timestamp());
    CREATE TABLE public.versioned (id int PRIMARY KEY, note text, v bigint NOT NULL, cdc_xid xid8);
    CREATE FUNCTION public.cdc_poll_xid() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.cdc_xid := pg_current_xact_id(); RETURN NEW; END $$;
    CREATE TRIGGER zz_cdc_poll_xid BEFORE INSERT OR UPDATE ON public.versioned FOR EACH ROW EXECUTE FUNCTION public.cdc_poll_xid();
    ALTER TABLE public.versioned ENABLE ALWAYS TRIGGER zz_cdc_poll_xid;
    CREATE TABLE public.items (id int PRIMARY KEY, name text NOT NULL);
    CREATE TABLE public.orders (id int PRIMARY KEY, amt text, code text);
    CREATE SEQUENCE public.versions;
    INSERT INTO public.accounts (id, name, balance) SELECT g, 'acct ' || g, g * 1.5 FROM generate_series(1, 300) g;
    INSERT INTO public.versioned SELECT g, 'note ' || g, nextval('public.versions') FROM generate_series(1, 120) g;
  `);
}, 240_000);

afterAll(async () => {
  await pipeline?.stop().catch(() => undefined);
  await source?.end().catch(() => undefined);
  await dw?.end().catch(() => undefined);
  await stack?.stop().catch(() => undefined);
  await warehouse?.stop().catch(() => undefined);
  if (dir) await rm(dir, { recursive: true, force: true });
}, 120_000);

/** What the pipeline knew when a verdict did not match: table states, the poller's lines, dead letters, errors, the pollers' checkpoints; the audit log, the sink's positions per table and the processes behind each port. */
async function diagnostics(errors: readonly string[]): Promise<string[]> {
  await pipeline!.refreshControl(true);
  const out = ['--- status', ...renderStatus(pipeline!.snapshot()), '--- poll lines', ...pipeline!.polls!.lines().map((l) => JSON.stringify(l))];
  const dead = await stack!.controlPlane.listDeadLetters();
  out.push(`--- dead letters: ${dead.length}`, ...dead.slice(0, 10).map((d) => `${d.stage} ${d.table} ${d.code}: ${d.reason}`));
  for (const t of POLLED) out.push(`--- cursor of ${t.table}: ${await stack!.controlPlane.getCheckpoint(pollConsumer('demo'), t.table)}`);
  const marks = await discontinuities();
  out.push(`--- tables marked needs-resnapshot: ${marks.length}`, ...marks);
  out.push(`--- errors: ${errors.length}`, ...errors.slice(0, 10));
  const tables = [...POLLED, ...LOGGED].map((t) => t.table);
  out.push(
    ...(await verdictDiagnostics({
      controlPlane: stack!.controlPlane,
      warehouseUrl: warehouse.url('dw'),
      source: 'demo',
      tables,
      ports: stackPorts(stack!, { warehouse: warehouse.port }),
    })),
  );
  return out;
}

/**
 * Every table the normalizer marked `needs-resnapshot` (a heartbeat discontinuity: a missed or
 * regressed beat, another system identifier — e.g. another stack's source writing into this one's
 * streams), with the beats it compared: the normalizer logs the named error, which this test's log
 * level hides, so it is read back from the audit log.
 */
async function discontinuities(): Promise<string[]> {
  const audit = await stack!.controlPlane.listAudit('demo');
  return audit.filter((a) => a.action === 'needs-resnapshot').map((a) => `${a.at} ${a.actor} ${a.table}: ${JSON.stringify(a.detail)}`);
}

describe('polling fallback', () => {
  it('a polled table converges for inserts and updates; its deletes are invisible and status says so; transforms shape the sink', async () => {
    const errors: string[] = [];
    pipeline = new LocalPipeline({
      stack: stack!,
      source: 'demo',
      tables: [...POLLED, ...LOGGED, ...SHAPED],
      sinkId: 'warehouse',
      collector: new MetricsCollector(),
      heartbeatMs: 1000,
      // Small pages, so a pass takes several pages and cursors.
      snapshot: { fixedChunk: 50 },
      pollIntervalMs: 300,
      onError: (where, e) => errors.push(`${where}: ${e instanceof Error ? e.message : String(e)}`),
    });
    await pipeline.start();
    // While it runs: inserts and updates on every table (updates move the modified-at / transaction-id column).
    for (let round = 0; round < 5; round++) {
      await source.query(
        `INSERT INTO public.accounts (id, name, balance) SELECT g, 'new ' || g, 1 FROM generate_series(${1000 + round * 20}, ${1019 + round * 20}) g`,
      );
      await source.query(`UPDATE public.accounts SET balance = balance + 100, updated_at = clock_timestamp() WHERE id % 7 = ${round}`);
      await source.query(`UPDATE public.versioned SET note = note || '+', v = nextval('public.versions') WHERE id % 5 = ${round}`);
      await source.query(
        `INSERT INTO public.versioned SELECT g, 'later', nextval('public.versions') FROM generate_series(${500 + round * 10}, ${509 + round * 10}) g`,
      );
      await source.query(`INSERT INTO public.items VALUES (${round}, 'item ${round}')`);
      await source.query(`INSERT INTO public.orders VALUES (${round}, '${round}.5', '${100 + round}')`);
      await new Promise((r) => setTimeout(r, 200));
    }
    await pipeline.waitCaughtUp(180_000).catch((e: Error) => {
      throw new Error(`${e.message}; errors: ${errors.slice(0, 5).join(' | ')}`);
    });

    const verdict = await compareSourceAndWarehouse({
      sourceUrl: stack!.sourceUrl,
      warehouseUrl: warehouse.url('dw'),
      source: 'demo',
      tables: [...POLLED, ...LOGGED],
    });
    expect(verdict.match, verdict.match ? '' : [...formatVerdict(verdict), ...(await diagnostics(errors))].join('\n')).toBe(true);
    const accounts = verdict.tables.find((t) => t.table === 'public.accounts')!;
    expect(accounts.warehouseRows).toBe(400);

    // Polled events say so; the slot capture never read the polled tables.
    const events: { table: string; capture: string; txId: string | null }[] = [];
    for await (const page of readChangeLog(stack!.kinesis, stack!.streams.changeLog)) for (const r of page) events.push(JSON.parse(r.text));
    const polled = events.filter((e) => e.table === 'public.accounts' || e.table === 'public.versioned');
    expect(polled.length).toBeGreaterThanOrEqual(420 + 150);
    expect(new Set(polled.map((e) => e.capture))).toEqual(new Set(['poll']));
    expect(polled.every((e) => e.txId === null)).toBe(true);
    // The log-captured table: slot (and snapshot) events only.
    expect(events.filter((e) => e.table === 'public.items').every((e) => e.capture === 'dms' || e.capture === 'snapshot')).toBe(true);
    expect(events.some((e) => e.table === 'public.items' && e.capture === 'dms')).toBe(true);

    // A delete on a polled table is not observable: the warehouse keeps the row, and the platform says so.
    await source.query('DELETE FROM public.accounts WHERE id = 1');
    await source.query("UPDATE public.accounts SET name = 'after delete', updated_at = clock_timestamp() WHERE id = 2");
    await pipeline.waitCaughtUp(120_000);
    const kept = await dw.query<{ name: string }>('SELECT name FROM demo_public.accounts WHERE id IN (1, 2) ORDER BY id');
    expect(kept.rows.map((r) => r.name)).toEqual(['acct 1', 'after delete']);
    const record = await stack!.controlPlane.getTable('demo', 'public.accounts');
    expect(record!.capture).toBe('poll');
    expect((await stack!.controlPlane.getTable('demo', 'public.items'))!.capture).toBeUndefined();
    await pipeline.refreshControl(true);
    const status = renderStatus(pipeline.snapshot()).join('\n');
    expect(status).toMatch(new RegExp(`public\\.accounts\\s+active\\s+capture poll: ${POLL_DELETES_INVISIBLE.replace(/[()]/g, '\\$&')}`));
    expect(status).not.toMatch(/public\.items\s+\S+\s+capture poll/);
    // And the sink says it on the table: a catalog comment on the polled table's view, none on a logged one.
    const comments = await dw.query<{ accounts: string | null; items: string | null }>(
      "SELECT obj_description('demo_public.accounts'::regclass, 'pg_class') AS accounts, obj_description('demo_public.items'::regclass, 'pg_class') AS items",
    );
    expect(comments.rows[0]).toEqual({ accounts: POLLED_TABLE_COMMENT, items: null });

    // Transforms: the warehouse has the renamed, coerced and stamped columns.
    const cols = await dw.query<{ column_name: string; data_type: string }>(
      "SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = 'demo_public' AND table_name = 'orders' AND column_name NOT LIKE '\\_cdc%' ORDER BY ordinal_position",
    );
    expect(cols.rows.map((c) => `${c.column_name} ${c.data_type}`)).toEqual(['id bigint', 'amount numeric', 'code bigint', 'tenant text']);
    const orders = await dw.query<{ id: string; amount: string; code: string; tenant: string }>(
      'SELECT id::text, amount::text, code::text, tenant FROM demo_public.orders ORDER BY id',
    );
    expect(orders.rows).toEqual([0, 1, 2, 3, 4].map((i) => ({ id: String(i), amount: `${i}.50`, code: String(100 + i), tenant: 'demo:orders' })));
    // The registry keeps the transforms with the version (read back from DynamoDB Local every batch): one version, no spurious change.
    const versions = await stack!.controlPlane.listSchemaVersions('demo', 'public.orders');
    expect(versions.map((v) => v.transforms)).toEqual([SHAPED[0]!.transforms]);
    // The heartbeat writer and the slot monitor may fail a round on a busy machine (retried): printed, not failed.
    const transient = errors.filter((e) => /heartbeat|slot monitor/.test(e));
    if (transient.length > 0) console.log(`polling e2e: ${transient.length} transient heartbeat/slot-monitor error(s):\n${transient.slice(0, 10).join('\n')}`);
    expect(errors.filter((e) => !/heartbeat|slot monitor/.test(e))).toEqual([]);
    // No fault was injected: a discontinuity here is a finding (docs/failures.md), never filtered away.
    expect(await discontinuities()).toEqual([]);
  }, 400_000);
});
