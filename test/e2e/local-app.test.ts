/**
 * `cdc local --app`: the example CDK app (bin/example-app.ts), synthesized, runs on this machine
 * with its own configuration: the orders source's tables, masks, excludes, delete modes and keys
 * and its search sink's tables come from the Dev stage's template, only the database URLs from the
 * command line. A bounded run against an embedded PostgreSQL holding the example's tables must
 * match row by row, with the masks of the CDK code applied. Flags that would restate the app's
 * configuration are refused.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { App } from 'aws-cdk-lib';
import { buildExampleApp } from '../../bin/example-app.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { resetLocalState } from '../../local/stack.ts';
import { maskValue } from '../../lambda/core/tables/masking.ts';
import { until } from '../local/helpers.ts';
import { runCdc } from '../helpers/cdc-cli.ts';
import { expectVerdict, stateDirDiagnostics } from '../helpers/verdict-diagnostics.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');
const CLI = path.join(ROOT, 'bin', 'cdc.js');

let cluster: PostgresCluster;
let dir: string;
/** The Dev stage's cloud assembly (a stage synthesizes into an assembly of its own). */
let devAssembly: string;

beforeAll(async () => {
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-e2e-app-'));
  const [c] = await Promise.all([
    startPostgres({ fast: true }),
    (async () => {
      const example = buildExampleApp(new App({ outdir: path.join(dir, 'cdk.out') }));
      devAssembly = example.stages.Dev.synth().directory;
    })(),
  ]);
  cluster = c;
}, 240_000);

afterAll(async () => {
  await resetLocalState(path.join(dir, 'state')).catch(() => undefined);
  await cluster?.stop();
  await rm(dir, { recursive: true, force: true });
});

function cdc(args: string[]): { output: () => string; exited: Promise<number | null> } {
  const c = spawn(process.execPath, [CLI, 'local', ...args], { cwd: ROOT, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  c.stdout.on('data', (d: Buffer) => (out += d.toString()));
  c.stderr.on('data', (d: Buffer) => (out += d.toString()));
  return { output: () => out, exited: new Promise((resolve) => c.on('exit', (code) => resolve(code))) };
}

describe('cdc local --app', () => {
  it('runs the synthesized example app: its tables, masks, excludes, delete modes and search tables, to a MATCH', async () => {
    await cluster.createDatabase('orders');
    await cluster.createDatabase('dw');
    const db = new pg.Client({ connectionString: cluster.url('orders') });
    // A failed assertion leaves it open until the cluster stops: that end is not an error of the test.
    db.on('error', () => undefined);
    await db.connect();
    // The example's orders source (bin/example-app.ts): customers with masked email and phone and
    // excluded ssn and password_hash, orders, order items with hard deletes and a composite key.
    await db.query(`
      CREATE TABLE public.customers (id serial PRIMARY KEY, name text NOT NULL, email text, phone text, ssn text, password_hash text);
      CREATE TABLE public.orders (id serial PRIMARY KEY, customer_id int NOT NULL, status text NOT NULL, amount numeric(12,2));
      CREATE TABLE public.order_items (order_id int NOT NULL, line_no int NOT NULL, sku text NOT NULL, qty int NOT NULL, PRIMARY KEY (order_id, line_no));
      CREATE TABLE public.audit_log (id serial PRIMARY KEY, note text);`);
    // Rows from before the capture: the snapshot copies them.
    for (let i = 1; i <= 10; i++)
      await db.query('INSERT INTO customers (name, email, phone, ssn, password_hash) VALUES ($1, $2, $3, $4, $5)', [
        `c${i}`,
        `c${i}@example.com`,
        `+1-555-010${i}`,
        `000-00-000${i}`,
        `hash${i}`,
      ]);
    await db.query('INSERT INTO audit_log (note) VALUES ($1)', ['not captured in Dev']);

    const run = cdc([
      '--app',
      devAssembly,
      '--stack',
      'Dev/CdcExample',
      '--source-id',
      'orders',
      '--source',
      cluster.url('orders'),
      '--warehouse',
      cluster.url('dw'),
      '--state-dir',
      path.join(dir, 'state'),
      '--duration',
      '15s',
    ]);
    await until('cdc local to start', () => /cdc local: (started|resumed) in/.test(run.output()), 240_000);
    for (let i = 11; i <= 30; i++)
      await db.query('INSERT INTO customers (name, email, phone, ssn, password_hash) VALUES ($1, $2, $3, $4, $5)', [
        `c${i}`,
        `c${i}@example.com`,
        null,
        `000-00-${i}`,
        `hash${i}`,
      ]);
    for (let i = 1; i <= 20; i++) {
      await db.query('INSERT INTO orders (customer_id, status, amount) VALUES ($1, $2, $3)', [i, 'new', i * 10.5]);
      await db.query('INSERT INTO order_items VALUES ($1, 1, $2, 1), ($1, 2, $3, 2)', [i, `sku-${i}a`, `sku-${i}b`]);
    }
    await db.query(
      "BEGIN; UPDATE orders SET status = 'paid', amount = amount + 1 WHERE id % 3 = 0; DELETE FROM order_items WHERE order_id % 4 = 0; UPDATE customers SET email = 'new-' || email WHERE id % 5 = 0; COMMIT",
    );
    await db.query('DELETE FROM orders WHERE id % 7 = 0');
    await db.query('DELETE FROM customers WHERE id IN (29, 30)');
    const code = await run.exited;
    const out = run.output();
    await expectVerdict(out, 'verdict: MATCH', () => stateDirDiagnostics(path.join(dir, 'state'), { source: 'orders', warehouseUrl: cluster.url('dw') }));
    expect(out, out).toContain('verdict (search index): MATCH');
    expect(out).toContain('from Dev/CdcExample: source orders');
    for (const t of ['customers', 'orders', 'order_items']) expect(out).toMatch(new RegExp(`ok +public\\.${t}:`));
    expect(code, out).toBe(0);

    const dw = new pg.Client({ connectionString: cluster.url('dw') });
    await dw.connect();
    try {
      // Masks and excludes of the CDK code.
      const c5 = (await dw.query('SELECT email, phone FROM orders_public.customers WHERE id = 5')).rows[0];
      expect(c5).toEqual({ email: maskValue('new-c5@example.com'), phone: maskValue('+1-555-0105') });
      const excluded = await dw.query(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = 'orders_public' AND column_name IN ('ssn', 'password_hash')",
      );
      expect(excluded.rows).toEqual([]);
      // Delete modes: order items hard (the sink keeps a deleted-keys table for them), customers and orders soft.
      const regclass = async (name: string): Promise<unknown> => (await dw.query('SELECT to_regclass($1)::text AS t', [name])).rows[0].t;
      expect(await regclass('orders_public._cdc_deleted_keys_order_items')).toBe('orders_public._cdc_deleted_keys_order_items');
      expect(await regclass('orders_public._cdc_deleted_keys_customers')).toBeNull();
      expect(await regclass('orders_public._cdc_deleted_keys_orders')).toBeNull();
      // Only the Dev stage's named tables: no pattern rule captures the audit table there.
      expect(await regclass('orders_public.audit_log')).toBeNull();
    } finally {
      await dw.end();
    }
    await db.query("SELECT pg_drop_replication_slot('cdc_orders')");
    await db.end();
  }, 600_000);

  it('refuses flags that restate the app, and names what it cannot find', async () => {
    const clash = await runCdc(['local', '--app', devAssembly, '--source', 'postgres://x@127.0.0.1/x', '--tables', 'public.items', '--sink-id', 'dw']);
    expect(clash.code).toBe(2);
    expect(clash.err).toMatch(/--app excludes --tables \(the captured tables come from the app\), --sink-id/);
    const stack = await runCdc(['local', '--app', devAssembly, '--source', 'postgres://x@127.0.0.1/x', '--stack', 'Nope']);
    expect(stack.code).toBe(2);
    expect(stack.err).toContain('--stack Nope: no such stack');
    expect(stack.err).toContain('Dev/CdcExample');
    const sources = await runCdc(['local', '--app', devAssembly, '--source', 'postgres://x@127.0.0.1/x']);
    expect(sources.code).toBe(2);
    expect(sources.err).toContain('has 2 sources (orders, billing)');
    const stackAlone = await runCdc(['local', '--demo', '--stack', 'Dev/CdcExample']);
    expect(stackAlone.code).toBe(2);
    expect(stackAlone.err).toContain('--stack needs --app');
    const noSource = await runCdc(['local', '--app', devAssembly]);
    expect(noSource.code).toBe(2);
    expect(noSource.err).toContain('--app needs --source URL');
    const notAssembly = await runCdc(['local', '--app', dir, '--source', 'postgres://x@127.0.0.1/x']);
    expect(notAssembly.code).toBe(2);
    expect(notAssembly.err).toContain('is not a cloud assembly');
  }, 60_000);
});
