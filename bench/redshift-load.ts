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
 *   `--rate` × the load cadence of `--freshness` (`redshiftCadence`), one merge round at the end.
 * Both views are compared row by row at the end (they must be equal).
 *
 *     npx tsx bench/redshift-load.ts [-- --events 10000 --tables 20 --shards 8 --batch 100 --rate 5000 --freshness 60 --slices 1]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { insertStageLoader, PgWarehouse } from '../lambda/adapters/warehouse-pg.ts';
import { RedshiftLoader } from '../lambda/adapters/redshift-loader.ts';
import type { SchemaVersion } from '../lambda/core/shared/control-plane.ts';
import type { ChangeEvent } from '../lambda/core/shared/event.ts';
import { makePosition } from '../lambda/core/shared/position.ts';
import { redshiftCadence } from '../lambda/core/warehouse/redshift-load.ts';
import { rsQualified, type RedshiftTable } from '../lambda/core/warehouse/redshift-sql.ts';
import { redshiftColumn } from '../lambda/core/warehouse/redshift-types.ts';
import { qualified, warehouseTable } from '../lambda/core/warehouse/warehouse-sql.ts';
import { FolderArchive } from '../local/archive.ts';
import { seededRandom } from '../local/demo.ts';
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
    const per = (n: number): string => (n * (10_000 / o.events)).toFixed(1);
    say(
      `today's path (PgWarehouse, Redshift defaults): ${per(todayApplyStatements)} statements and ${per(todayApplyCommits)} commits per 10,000 events to append; with one merge per table: ${per(today.statements)} statements, ${per(today.commits)} commits (${todayMs} ms on PostgreSQL)`,
    );
    say(
      `Redshift loader (stand-in): ${loads} loads, ${rs.copies} COPY, ${(objects / Math.max(1, rs.copies)).toFixed(1)} objects per COPY; ${per(rsLoadStatements)} statements and ${per(rsLoadCommits)} commits per 10,000 events to load; with one merge round: ${per(rs.statements)} statements, ${per(rs.commits)} commits (${rsMs} ms on the stand-in)`,
    );
    say('views equal row by row: yes');
    await client.end();
    await pool.end();
  } finally {
    await cluster.stop();
    await rm(folder, { recursive: true, force: true });
  }
}

runIfMain(import.meta.url, runRedshiftLoadBench);
