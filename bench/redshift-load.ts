/**
 * Benchmark: what the Redshift path sends per 10,000 events, against today's path
 * (docs/warehouse-apply.md, "Redshift: the load"). Counts, not time: there is no Redshift here,
 * and what a Redshift cluster pays for is statements and, above all, commits (serialised
 * cluster-wide) and objects per COPY.
 *
 * The same events (`--events`, default 10,000, over `--tables` tables, in Kinesis batches of
 * `--batch` records from `--shards` shards) go:
 * - today's way: `PgWarehouse` with Redshift's defaults (multi-row INSERT appends, stages made and
 *   dropped in the transaction): one transaction per table per batch, then one merge per table;
 * - the Redshift loader through the stand-in: every batch submitted, a load per window of
 *   `--rate` × the load cadence of `--freshness` (`redshiftCadence`), one merge round at the end;
 * - the AWS path through the stand-in: each batch one load request of its tables
 *   (`RedshiftStagingSubmitter.submitMany`, DynamoDB Local), the loader function's `invoke` once per
 *   window (it claims every request recorded), one merge at the end; with the control plane's
 *   operations on the load requests counted too.
 * The three views are compared row by row at the end (they must be equal).
 *
 *     npx tsx bench/redshift-load.ts [-- --events 10000 --tables 20 --shards 8 --batch 100 --rate 5000 --freshness 60 --slices 1]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { insertStageLoader, PgWarehouse } from '../lambda/adapters/warehouse-pg.ts';
import { RedshiftLoader } from '../lambda/adapters/redshift-loader.ts';
import { dynamoDbClient } from '../lambda/adapters/aws-clients.ts';
import { createControlTable } from '../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { DynamoDbLoadRequests } from '../lambda/adapters/control-plane-dynamodb/load-requests.ts';
import { StagedRedshiftLoader } from '../lambda/adapters/redshift-staged-loader.ts';
import { RedshiftStagingSubmitter } from '../lambda/adapters/redshift-staging-submitter.ts';
import { startDynamoDbLocal } from '../local/dynamodb.ts';
import type { SchemaVersion } from '../lambda/core/shared/control-plane.ts';
import type { ChangeEvent } from '../lambda/core/shared/event.ts';
import { makePosition } from '../lambda/core/shared/position.ts';
import { redshiftCadence } from '../lambda/core/warehouse/redshift-load.ts';
import { rsQualified, type RedshiftTable } from '../lambda/core/warehouse/redshift-sql.ts';
import { redshiftColumn } from '../lambda/core/warehouse/redshift-types.ts';
import { qualified, warehouseTable } from '../lambda/core/warehouse/warehouse-sql.ts';
import { FolderArchive } from '../local/archive.ts';
import { seededRandom } from '../local/seeded-random.ts';
import { startPostgres } from '../local/postgres.ts';
import { RedshiftStandIn } from '../local/redshift-standin.ts';
import { numberArg, runIfMain } from './lib/report.ts';

const say = (text: string): void => void process.stdout.write(`[redshift-load] ${text}\n`);

function schemaOf(table: string): SchemaVersion {
  return {
    source: 'bench',
    table,
    version: 1,
    columns: [
      { name: 'id', type: 'integer' },
      { name: 'note', type: 'text' },
      { name: 'amount', type: 'numeric(10,2)' },
    ],
    key: ['id'],
    effectivePosition: '0'.repeat(24),
    registeredAt: new Date(0).toISOString(),
  } as SchemaVersion;
}

/** Per shard, its batches of events (each event of a random table and key, positions increasing). */
function history(o: { events: number; tables: number; shards: number; batch: number; seed: number }): ChangeEvent[][] {
  const rand = seededRandom(o.seed);
  const batches: ChangeEvent[][] = [];
  let cur: ChangeEvent[] = [];
  for (let i = 0; i < o.events; i++) {
    const table = `public.t${Math.floor(rand() * o.tables)}`;
    const id = Math.floor(rand() * 2_000);
    const del = rand() < 0.1;
    cur.push({
      v: 1,
      source: 'bench',
      table,
      op: del ? 'delete' : rand() < 0.5 ? 'insert' : 'update',
      key: { id },
      after: del ? null : { id, note: `note ${i}`, amount: `${i % 1000}.${String(i % 100).padStart(2, '0')}` },
      before: null,
      missing: [],
      position: makePosition(BigInt(1_000 + i), 0),
      commitTs: new Date(1_700_000_000_000 + i).toISOString(),
      txId: String(i),
      schemaVersion: 1,
      capture: 'slot',
      synthetic: false,
    });
    if (cur.length === o.batch) {
      batches.push(cur);
      cur = [];
    }
  }
  if (cur.length > 0) batches.push(cur);
  return batches;
}

const byTable = (events: readonly ChangeEvent[]): Map<string, ChangeEvent[]> => {
  const m = new Map<string, ChangeEvent[]>();
  for (const e of events) m.set(e.table, [...(m.get(e.table) ?? []), e]);
  return m;
};

export async function runRedshiftLoadBench(): Promise<void> {
  const o = {
    events: numberArg('events', 10_000),
    tables: numberArg('tables', 20),
    shards: numberArg('shards', 8),
    batch: numberArg('batch', 100),
    seed: numberArg('seed', 1),
  };
  const rate = numberArg('rate', 5_000);
  const freshnessS = numberArg('freshness', 60);
  const cadence = redshiftCadence(freshnessS * 1000);
  const perLoad = Math.max(1, Math.round((rate * cadence.loadEveryMs) / 1000));
  say(
    `seed ${o.seed}: ${o.events} events, ${o.tables} tables, ${o.shards} shards, batches of ${o.batch}; ${rate} changes/s, freshnessTarget ${freshnessS} s: a load every ${cadence.loadEveryMs} ms (~${perLoad} events), a merge every ${cadence.mergeEveryMs} ms`,
  );
  const batches = history(o);
  const cluster = await startPostgres({ fast: true });
  const folder = await mkdtemp(path.join(os.tmpdir(), 'cdc-rs-bench-'));
  try {
    await cluster.createDatabase('today');
    await cluster.createDatabase('rs');

    // Today's path, with Redshift's defaults.
    const pool = new pg.Pool({ connectionString: cluster.url('today'), max: o.shards });
    const today = { statements: 0, commits: 0 };
    pool.on('connect', (c) => {
      const q = c.query.bind(c) as (...a: unknown[]) => unknown;
      (c as unknown as { query: (...a: unknown[]) => unknown }).query = (...a: unknown[]) => {
        const text = typeof a[0] === 'string' ? a[0] : ((a[0] as { text?: string }).text ?? '');
        // A multi-statement text counts as its statements.
        today.statements += text.split(';').filter((s) => s.trim() !== '').length;
        if (/\bCOMMIT\b/i.test(text)) today.commits++;
        return q(...a);
      };
    });
    const wh = new PgWarehouse(pool, { loader: insertStageLoader, deltaLoader: insertStageLoader, stages: 'transaction' });
    // Warm-up: each table's objects made by one event at position 1 (not counted: steady state is measured).
    const warm = Array.from({ length: o.tables }, (_, i) => ({
      ...batches[0]![0]!,
      table: `public.t${i}`,
      op: 'insert' as const,
      key: { id: 1_000_000 },
      after: { id: 1_000_000, note: 'w', amount: '1.00' },
      position: makePosition(1n, i),
    }));
    for (const e of warm)
      await wh.applyTable({
        source: 'bench',
        table: e.table,
        deleteMode: 'soft',
        schemas: new Map([[1, schemaOf(e.table)]]),
        events: [e],
        appliedAt: new Date(),
      });
    today.statements = 0;
    today.commits = 0;
    const t0 = Date.now();
    for (const b of batches) {
      for (const [table, events] of byTable(b)) {
        await wh.applyTable({ source: 'bench', table, deleteMode: 'soft', schemas: new Map([[1, schemaOf(table)]]), events, appliedAt: new Date() });
      }
    }
    const todayApplyStatements = today.statements;
    const todayApplyCommits = today.commits;
    for (let i = 0; i < o.tables; i++) await wh.merge({ source: 'bench', table: `public.t${i}`, deleteMode: 'soft', key: ['id'] });
    const todayMs = Date.now() - t0;

    // The Redshift path through the stand-in.
    const client = new pg.Client({ connectionString: cluster.url('rs') });
    await client.connect();
    const store = new FolderArchive(folder);
    const rs = { statements: 0, commits: 0, copies: 0 };
    const loader = new RedshiftLoader({
      session: new RedshiftStandIn({ client, store, bucket: 'staging' }),
      store,
      bucket: 'staging',
      prefix: 'cdc/',
      roleArn: 'arn:aws:iam::123456789012:role/cdc-copy',
      ledgerSchema: 'cdc_loader',
      slices: numberArg('slices', 1),
      onStatement: (s) => {
        rs.statements++;
        if (s === 'COMMIT') rs.commits++;
        if (s.startsWith('COPY')) rs.copies++;
      },
    });
    const tables = new Map<string, RedshiftTable>();
    const tableOf = (id: string): RedshiftTable => {
      let r = tables.get(id);
      if (!r) {
        r = {
          t: warehouseTable('bench', id),
          key: [redshiftColumn('id', 'integer')],
          data: [redshiftColumn('note', 'text'), redshiftColumn('amount', 'numeric(10,2)')],
          hard: false,
        };
        tables.set(id, r);
      }
      return r;
    };
    for (const e of warm) void loader.submit(tableOf(e.table), [e]);
    await loader.flush();
    rs.statements = 0;
    rs.commits = 0;
    rs.copies = 0;
    const t1 = Date.now();
    let objects = 0;
    let loads = 0;
    let inWindow = 0;
    let waiting: Promise<unknown>[] = [];
    const flush = async (): Promise<void> => {
      const stats = await loader.flush();
      await Promise.all(waiting);
      waiting = [];
      if (stats) {
        objects += stats.objects;
        loads++;
      }
      inWindow = 0;
    };
    for (const b of batches) {
      for (const [table, events] of byTable(b)) waiting.push(loader.submit(tableOf(table), events));
      inWindow += b.length;
      if (inWindow >= perLoad) await flush();
    }
    await flush();
    const rsLoadStatements = rs.statements;
    const rsLoadCommits = rs.commits;
    await loader.merge();
    const rsMs = Date.now() - t1;

    // Both views hold the same rows.
    for (const id of tables.keys()) {
      const t = warehouseTable('bench', id);
      const a = (await pool.query(`SELECT id, note, amount FROM ${qualified(t.schema, t.view)} ORDER BY id`)).rows;
      const b = (await client.query(`SELECT id, note, amount FROM ${rsQualified(t.schema, t.view)} ORDER BY id`)).rows;
      if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${id}: the two paths' views differ`);
    }
    const aws = await awsPath(batches, tableOf, perLoad, folder, cluster.url('aws'), (c) => cluster.createDatabase(c));
    // The AWS path had no warm-up row (id 1,000,000): its tables were made by `register`.
    for (const id of tables.keys()) {
      const t = warehouseTable('bench', id);
      const a = (await pool.query(`SELECT id, note, amount FROM ${qualified(t.schema, t.view)} WHERE id <> 1000000 ORDER BY id`)).rows;
      const b = (await aws.client.query(`SELECT id, note, amount FROM ${rsQualified(t.schema, t.view)} ORDER BY id`)).rows;
      if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`${id}: the AWS path's view differs from today's`);
    }
    await aws.client.end();
    const per = (n: number): string => (n * (10_000 / o.events)).toFixed(1);
    say(
      `today's path (PgWarehouse, Redshift defaults): ${per(todayApplyStatements)} statements and ${per(todayApplyCommits)} commits per 10,000 events to append; with one merge per table: ${per(today.statements)} statements, ${per(today.commits)} commits (${todayMs} ms on PostgreSQL)`,
    );
    say(
      `Redshift loader (stand-in): ${loads} loads, ${rs.copies} COPY, ${(objects / Math.max(1, rs.copies)).toFixed(1)} objects per COPY; ${per(rsLoadStatements)} statements and ${per(rsLoadCommits)} commits per 10,000 events to load; with one merge round: ${per(rs.statements)} statements, ${per(rs.commits)} commits (${rsMs} ms on the stand-in)`,
    );
    const a = aws.counts;
    say(
      `AWS path (applier stages, one load request per batch, loader function; stand-in): ${a.requests} requests, ${a.loads} loads, ${a.copies} COPY, ${(a.objects / Math.max(1, a.copies)).toFixed(1)} objects per COPY; ${per(a.loadStatements)} statements and ${per(a.loadCommits)} commits per 10,000 events to load; with one merge: ${per(a.statements)} statements, ${per(a.commits)} commits; load requests in the control plane: ${per(a.ddbWrites)} writes per 10,000 events, and ${per(a.ddbReads)} reads (the appliers' polls every 250 ms while their requests waited, and the loader's queries; they follow the time a load takes) (${a.ms} ms on the stand-in and DynamoDB Local)`,
    );
    say('views equal row by row: yes (all three)');
    await client.end();
    await pool.end();
  } finally {
    await cluster.stop();
    await rm(folder, { recursive: true, force: true });
  }
}

/**
 * The AWS path: per window of `perLoad` events, each batch's tables as one request (submitted by the
 * shard's applier side, which waits), then one `invoke` of the loader (it claims them all), as the
 * loader function does when started by the first request; one merge at the end.
 */
async function awsPath(
  batches: ChangeEvent[][],
  tableOf: (id: string) => RedshiftTable,
  perLoad: number,
  folder: string,
  url: string,
  createDatabase: (name: string) => Promise<unknown>,
): Promise<{
  client: pg.Client;
  counts: Record<
    'requests' | 'loads' | 'copies' | 'objects' | 'loadStatements' | 'loadCommits' | 'statements' | 'commits' | 'ddbWrites' | 'ddbReads' | 'ms',
    number
  >;
}> {
  await createDatabase('aws');
  const ddb = await startDynamoDbLocal();
  const client = new pg.Client({ connectionString: url });
  const applierClient = new pg.Client({ connectionString: url });
  await Promise.all([client.connect(), applierClient.connect()]);
  try {
    const ddbClient = dynamoDbClient(ddb.endpoint);
    await createControlTable(ddbClient, 'control');
    const store = new FolderArchive(path.join(folder, 'aws'));
    const c = { requests: 0, loads: 0, copies: 0, objects: 0, loadStatements: 0, loadCommits: 0, statements: 0, commits: 0, ddbWrites: 0, ddbReads: 0, ms: 0 };
    const plain = new DynamoDbLoadRequests(ddbClient, 'control', 'bench');
    const writes = new Set(['put', 'move', 'delete', 'putTable', 'setMergeAt']);
    const requests = new Proxy(plain, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (typeof v !== 'function') return v;
        return (...args: unknown[]) => {
          if (writes.has(String(prop))) c.ddbWrites++;
          else c.ddbReads++;
          if (prop === 'put') c.requests++;
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    }) as DynamoDbLoadRequests;
    const standIn = new RedshiftStandIn({ client, store, bucket: 'staging' });
    const counting = {
      query: (q: string) => {
        c.statements++;
        if (q === 'COMMIT') c.commits++;
        if (q.startsWith('COPY')) c.copies++;
        return standIn.query(q);
      },
    };
    const loader = new StagedRedshiftLoader({
      session: counting,
      requests,
      place: { store, bucket: 'staging' },
      prefix: 'cdc/',
      roleArn: 'arn:aws:iam::123456789012:role/cdc-copy',
      ledgerSchema: 'cdc_loader',
      cadence: { loadEveryMs: 1_000, mergeEveryMs: 3_600_000 },
      loaderTimeoutMs: 600_000,
      sleep: async () => undefined,
    });
    const submitter = new RedshiftStagingSubmitter({
      session: new RedshiftStandIn({ client: applierClient, store, bucket: 'staging' }),
      requests,
      place: { store, bucket: 'staging' },
      prefix: 'cdc/',
      invokeLoader: async () => undefined,
      waitMs: 600_000,
      // The deployed poll (the default); the reads below are these polls while the requests wait for their load.
      pollMs: 250,
    });
    for (const r of new Set(batches.flat().map((e) => e.table))) await submitter.register(tableOf(r));
    // No merge during the loads (the loader merges when none is recorded yet): one at the end, as the other paths.
    await plain.setMergeAt(Date.now());
    const [statements0, ddbWrites0, ddbReads0] = [c.statements, c.ddbWrites, c.ddbReads];
    const t0 = Date.now();
    let window: Promise<unknown>[] = [];
    let inWindow = 0;
    let objects = 0;
    const load = async (): Promise<void> => {
      while ((await plain.list()).filter((r) => r.state === 'pending').length < window.length) await new Promise((r) => setTimeout(r, 50));
      objects += (await plain.list()).filter((r) => r.state === 'pending').reduce((n, r) => n + r.tables.reduce((m, t) => m + t.objects.length, 0), 0);
      const run = await loader.invoke(60_000);
      c.loads += run.loads;
      await Promise.all(window);
      window = [];
      inWindow = 0;
    };
    for (const b of batches) {
      window.push(submitter.submitMany([...byTable(b)].map(([table, events]) => ({ r: tableOf(table), events }))));
      inWindow += b.length;
      if (inWindow >= perLoad) await load();
    }
    if (window.length > 0) await load();
    c.loadStatements = c.statements - statements0;
    c.loadCommits = c.commits;
    await plain.setMergeAt(0);
    await loader.invoke(1_000);
    c.objects = objects;
    c.statements -= statements0;
    c.ddbWrites -= ddbWrites0;
    c.ddbReads -= ddbReads0;
    c.ms = Date.now() - t0;
    return { client, counts: c };
  } finally {
    await applierClient.end();
    await ddb.stop();
  }
}

runIfMain(import.meta.url, runRedshiftLoadBench);
