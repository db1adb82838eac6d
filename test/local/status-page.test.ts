/**
 * The status page of `cdc local` (docs/local.md, "The status page") in a real headless Chromium,
 * against a running local pipeline (embedded PostgreSQL, kinesalite, DynamoDB Local): after its
 * script ran, the page shows the sink's lag as a number, the tables by state (a paused table and
 * the sink that holds it), the snapshot, the slot, the dead letters and the lag drawn over time. The
 * HTML as served names no table, so what the test finds was drawn by the page's script from
 * `/status.json`.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startLocalStack, type LocalStack } from '../../local/stack.ts';
import { LocalPipeline } from '../../local/pipeline.ts';
import { captureStdout, MetricsCollector, type CapturedStdout } from '../../local/metrics.ts';
import { StatusPage } from '../../local/status-page.ts';
import { validateTableConfig } from '../../lambda/core/tables/table-config.ts';
import { controlPlaneSnapshots, Operator } from '../../lambda/core/operator/operator.ts';
import { chromiumPath, renderedDom } from '../helpers/chromium.ts';
import { until } from './helpers.ts';
import { TABLE_RECORD_MAX_AGE_MS } from '../../lambda/core/shared/kept-table-records.ts';

let dir: string;
let stack: LocalStack | null = null;
let pipeline: LocalPipeline | null = null;
let page: StatusPage | null = null;
let feeder: NodeJS.Timeout | null = null;
let captured: CapturedStdout | null = null;
const errors: string[] = [];

beforeAll(async () => {
  // CI installs Chromium (.ci/run): a missing browser fails here, it does not skip.
  chromiumPath();
  process.env.POWERTOOLS_LOG_LEVEL = 'CRITICAL';
  // The lag reaches the status as the handlers' EMF metrics on stdout, as in `cdc local`.
  delete process.env.POWERTOOLS_METRICS_DISABLED;
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-page-'));
  stack = await startLocalStack({ stateDir: path.join(dir, 'state'), source: 'demo', fast: true });
  const collector = new MetricsCollector();
  captured = captureStdout(collector, { emfFile: path.join(dir, 'emf.log'), logFile: path.join(dir, 'handlers.log') });
  const source = new pg.Client({ connectionString: stack.sourceUrl });
  await source.connect();
  try {
    await source.query(`
      CREATE TABLE public.orders (id int PRIMARY KEY, note text);
      CREATE TABLE public.customers (id int PRIMARY KEY, name text);
      INSERT INTO public.customers SELECT g, 'c' || g FROM generate_series(1, 120) g;
    `);
    pipeline = new LocalPipeline({
      stack,
      source: 'demo',
      tables: validateTableConfig([{ table: 'public.orders' }, { table: 'public.customers' }]),
      sinkId: 'warehouse',
      collector,
      heartbeatMs: 300,
      snapshot: { fixedChunk: 40 },
      onError: (where, e) => errors.push(`${where}: ${e instanceof Error ? e.message : String(e)}`),
    });
    await pipeline.start();
    // Port 0: tests run side by side; `cdc local` tries STATUS_PAGE_PORT first.
    page = await StatusPage.start({ port: 0 });
    const p = pipeline;
    feeder = setInterval(
      () =>
        void p
          .refreshControl()
          .then(() => page?.show(p.snapshot('Ctrl-C to stop')))
          .catch(() => undefined),
      250,
    );
    for (let i = 1; i <= 20; i++) await source.query('INSERT INTO public.orders VALUES ($1, $2)', [i, `n${i}`]);
    await pipeline.waitCaughtUp(120_000);
    const op = new Operator({
      controlPlane: stack.controlPlane,
      settings: { changeLogRetentionMs: 86_400_000 },
      snapshots: controlPlaneSnapshots(stack.controlPlane),
    });
    const paused = await op.pause('operator:test', { source: 'demo', table: 'public.customers', durationMs: 3_600_000, reason: 'page test' });
    expect(paused, JSON.stringify(paused)).toMatchObject({ outcome: 'done' });
    let seen = '';
    // A change to the paused table once the pause took effect (docs/architecture.md, "Table records kept for at most a second"): the warehouse sink holds it.
    await new Promise((r) => setTimeout(r, TABLE_RECORD_MAX_AGE_MS));
    await source.query(`UPDATE public.customers SET name = 'held' WHERE id = 1`);
    await until(
      'the status to show the held table, a lag and the slot',
      async () => {
        await p.refreshControl(true);
        const s = p.snapshot();
        seen = JSON.stringify({ tables: s.tables, sinks: s.sinks, slots: s.slots });
        return (
          s.tables.some((t) => t.table === 'public.customers' && t.state === 'paused' && t.heldBy?.includes('warehouse')) &&
          s.sinks[0]!.lagMs !== null &&
          (s.slots?.length ?? 0) > 0
        );
      },
      30_000,
    ).catch((e: Error) => {
      throw new Error(`${e.message}; last seen: ${seen}; errors: ${errors.join(' | ')}`);
    });
    // Let the page collect a few readings for its charts.
    await new Promise((r) => setTimeout(r, 1000));
  } finally {
    await source.end();
  }
}, 240_000);

afterAll(async () => {
  if (feeder) clearInterval(feeder);
  await page?.close().catch(() => undefined);
  await pipeline?.stop().catch(() => undefined);
  await stack?.stop().catch(() => undefined);
  await captured?.restore();
  if (dir) await rm(dir, { recursive: true, force: true });
}, 120_000);

/** The cells of the rows of `<table id="ID">` in a DOM dump, as text. */
function rows(dom: string, id: string): string[][] {
  const table = new RegExp(`<table id="${id}">([\\s\\S]*?)</table>`).exec(dom);
  if (!table) throw new Error(`the page has no table #${id}; it shows:\n${dom.slice(0, 4000)}`);
  return [...table[1]!.matchAll(/<tr>([\s\S]*?)<\/tr>/g)].map((r) => [...r[1]!.matchAll(/<t[hd]>([\s\S]*?)<\/t[hd]>/g)].map((c) => c[1]!));
}

describe('the status page in headless Chromium', () => {
  it('draws the running pipeline: lag, tables by state with the held one, snapshot, slot, dead letters, lag over time', async () => {
    const served = await (await fetch(page!.url)).text();
    expect(served).not.toContain('public.orders');
    expect(served).not.toMatch(/<(link|img)\b|src="http/);

    const dom = await renderedDom(page!.url);
    expect(dom).toMatch(/<h1 id="title">cdc local — source demo — up \d/);
    expect(dom).toMatch(/<div id="updated" class="muted">status of [^<]*\(refreshed every 2 s\)</);

    const sinks = rows(dom, 'sinks-table');
    expect(sinks[0]).toEqual(['sink', 'lag now', 'p50', 'p99', 'events/s', 'dead letters']);
    const warehouse = sinks.find((r) => r[0] === 'warehouse');
    expect(warehouse, JSON.stringify(sinks)).toBeDefined();
    // A lag number (not "waiting for heartbeat"), as the terminal formats it.
    const lag = /^(\d+) ms$|^(\d+\.\d) s$/.exec(warehouse![1]!);
    expect(lag, `lag cell: ${warehouse![1]}`).not.toBeNull();
    expect(Number(lag![1] ?? lag![2])).toBeGreaterThan(0);
    expect(Number(warehouse![4])).toBeGreaterThanOrEqual(0);

    const tables = new Map(
      rows(dom, 'tables-table')
        .slice(1)
        .map((r) => [r[0]!, r.slice(1, 3)]),
    );
    expect(tables.get('public.customers')).toEqual(['paused', 'warehouse']);
    expect(tables.get('public.orders')).toEqual(['active', '']);
    expect(dom).toMatch(/<div id="table-states">[^<]*1 paused[^<]*; 1 held by a sink</);

    const snapshots = rows(dom, 'snapshots-table');
    expect(snapshots.find((r) => r[0] === 'public.customers')?.slice(1, 3)).toEqual(['done', '120/120 (100%)']);

    const slots = rows(dom, 'slots-table');
    expect(slots.some((r) => r[1] === 'capture')).toBe(true);

    expect(dom).toContain('<div id="dead-letter-count" class="">0</div>');
    // Lag over time: a line with at least two points.
    expect(dom).toMatch(/<div id="lag-chart">[\s\S]*?<polyline points="[\d.]+,[\d.]+ [\d.]+,[\d.]+/);
    expect(errors).toEqual([]);
  }, 90_000);

  it("after time is up it shows the bounded run's phase (draining: what is left per sink) above the live panels", async () => {
    const phase = 'draining for 12.0 s (rates over the last 30.0 s): warehouse 340 events left, 55/s, ETA 6.2 s, iterator age 0 ms';
    page!.setPhase(phase);
    try {
      const dom = await renderedDom(page!.url);
      expect(dom).toContain(`<div id="phase">${phase}</div>`);
      // Still fed: the status is live, not marked stale.
      expect(dom).toMatch(/<div id="updated" class="muted">status of [^<]*\(refreshed every 2 s\)</);
      expect(rows(dom, 'sinks-table').some((r) => r[0] === 'warehouse')).toBe(true);
    } finally {
      page!.setPhase(null);
    }
  }, 90_000);

  it('serves only its page and data, read-only', async () => {
    expect((await fetch(new URL('/nope', page!.url))).status).toBe(404);
    expect((await fetch(page!.url, { method: 'POST' })).status).toBe(405);
    const body = (await (await fetch(new URL('/status.json', page!.url))).json()) as { status: { source: string }; history: unknown[] };
    expect(body.status.source).toBe('demo');
    expect(body.history.length).toBeGreaterThan(1);
    // Another name for this machine (DNS rebinding) is refused.
    const foreign = await new Promise<number>((resolve, reject) => {
      const u = new URL('/status.json', page!.url);
      http
        .get({ host: u.hostname, port: u.port, path: u.pathname, headers: { host: `evil.example:${u.port}` } }, (res) => {
          res.resume();
          resolve(res.statusCode ?? 0);
        })
        .on('error', reject);
    });
    expect(foreign).toBe(421);
  });
});
