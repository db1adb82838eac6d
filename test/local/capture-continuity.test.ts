/**
 * The local capture against embedded PostgreSQL, on what breaks the continuity of history or
 * cannot be decoded: a delete without its key after REPLICA IDENTITY NOTHING (dead letter, table
 * degraded, capture goes on), a primary key redefined while running (keys re-read), a slot
 * re-created under the same name, another cluster behind the same source (system identifier), a
 * source restored from a file-level backup to an earlier point, the crash window between
 * checkpoint and slot move (moves on exactly from where it was acked), and a standby capture with
 * no state of its own resuming from the control plane.
 */
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { HistoryGapError } from '../../lambda/core/shared/errors.ts';
import { POSITION_ZERO } from '../../lambda/core/shared/position.ts';
import { TableConfigIndex } from '../../lambda/core/tables/table-config.ts';
import { TestDecodingParseError } from '../../lambda/core/capture/logical-text.ts';
import type { SlotRecord } from '../../lambda/core/capture/slot-record.ts';
import { SlotCapture, captureCheckpointName, type CaptureOptions } from '../../local/capture.ts';
import { CaptureUndecodableError, undecodable } from '../../local/capture-poison.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { readSlot } from '../../local/slot.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { until, capturedViews } from './helpers.ts';

let cluster: PostgresCluster;
let n = 0;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
});
afterAll(async () => {
  await cluster?.stop();
});

interface Env {
  source: string;
  sql: pg.Client;
  controlPlane: MemoryControlPlane;
  published: SlotRecord[];
  options: CaptureOptions;
}

async function connect(url: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => undefined);
  await c.connect();
  return c;
}

async function env(schema: string, tables: string[], on: PostgresCluster = cluster): Promise<Env> {
  const sourceId = `cc${++n}`;
  await on.createDatabase(sourceId);
  const sql = await connect(on.url(sourceId));
  await sql.query(schema);
  const controlPlane = new MemoryControlPlane();
  const published: SlotRecord[] = [];
  const options: CaptureOptions = {
    source: sourceId,
    sourceUrl: on.url(sourceId),
    tables: new TableConfigIndex(tables.map((table) => ({ table, deleteMode: 'soft' as const, mask: [], exclude: [] }))),
    controlPlane,
    publish: async (records) => void published.push(...records.flatMap((r) => capturedViews(r.data))),
    idleMs: 20,
  };
  return { source: sourceId, sql, controlPlane, published, options };
}

async function register(e: Env, table: string): Promise<void> {
  const at = new Date().toISOString();
  await e.controlPlane.registerTable(
    { source: e.source, table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
    { source: e.source, table, version: 1, columns: [], key: ['id'], effectivePosition: POSITION_ZERO, registeredAt: at },
    { at, actor: 'test', action: 'register', source: e.source, table, outcome: 'done', detail: {} },
  );
}

const failure = (p: Promise<unknown>): Promise<unknown> =>
  p.then(
    () => null,
    (e: unknown) => e,
  );

describe('poison in the capture', () => {
  it('dead-letters a delete that carries no key (REPLICA IDENTITY NOTHING set while running), marks the table degraded and goes on', async () => {
    const e = await env('CREATE TABLE t (id int PRIMARY KEY, v text);', ['public.t']);
    await register(e, 'public.t');
    const c = new SlotCapture(e.options);
    await c.start();
    await e.sql.query("INSERT INTO t VALUES (1, 'a'), (2, 'b')");
    await e.sql.query('ALTER TABLE t REPLICA IDENTITY NOTHING');
    await e.sql.query('DELETE FROM t WHERE id = 1');
    await e.sql.query("INSERT INTO t VALUES (3, 'c')");
    await until('the insert after the poison', () =>
      e.published.some((r) => r.op === 'insert' && r.columns!.some((col) => col.name === 'id' && col.value === 3)),
    );
    expect(c.stats.state).toBe('running');
    await c.stop();
    const letters = await e.controlPlane.listDeadLetters('capture');
    expect(letters).toHaveLength(1);
    expect(letters[0]).toMatchObject({ stage: 'capture', source: e.source, table: 'public.t', code: 'INVALID_RECORD' });
    expect(letters[0]!.reason).toMatch(/a delete carries the old key/);
    expect(JSON.parse(letters[0]!.record).change).toMatchObject({ op: 'delete', oldKey: null });
    expect((await e.controlPlane.getTable(e.source, 'public.t'))!.state).toBe('degraded');
    expect(e.published.filter((r) => r.op === 'delete')).toEqual([]);
    // Acknowledged past it: a restart does not meet it again.
    const slot = await readSlot(e.sql, c.slot);
    expect(slot!.confirmedFlushLsn).toBe(await e.controlPlane.getCheckpoint(captureCheckpointName(e.source), c.slot));
    await e.sql.end();
  });

  it('re-reads the key when the primary key is redefined while running', async () => {
    const e = await env('CREATE TABLE k (id int PRIMARY KEY, code text NOT NULL);', ['public.k']);
    const c = new SlotCapture(e.options);
    await c.start();
    await e.sql.query("INSERT INTO k VALUES (1, 'one')");
    await until('the first insert', () => e.published.length === 1);
    await e.sql.query('ALTER TABLE k DROP CONSTRAINT k_pkey, ADD PRIMARY KEY (code); ALTER TABLE k DROP COLUMN id');
    await e.sql.query("INSERT INTO k VALUES ('two')");
    await until('the insert after the key change', () => e.published.length === 2);
    await c.stop();
    // DMS records name no key: the rows as they were, and the refresh in the audit.
    expect(e.published.map((r) => r.columns!.map((col) => col.name))).toEqual([['id', 'code'], ['code']]);
    const audit = await e.controlPlane.listAudit(e.source);
    expect(audit.find((a) => a.action === 'capture-key-refreshed')).toMatchObject({ table: 'public.k', detail: { from: ['id'], to: ['code'] } });
    await e.sql.end();
  });

  it('stops loudly on output it cannot parse: a named error, a dead letter, an audit entry (the line kept only for a table without column rules)', async () => {
    const controlPlane = new MemoryControlPlane();
    const tables = new TableConfigIndex([
      { table: 'public.plain', deleteMode: 'soft', mask: [], exclude: [] },
      { table: 'public.secret', deleteMode: 'soft', mask: ['email'], exclude: [] },
    ]);
    const ctx = { source: 'p', slot: 'cdc_p', tables, keys: new Map<string, string[]>(), controlPlane };
    const plain = await undecodable(ctx, new TestDecodingParseError('table public.plain: INSERT: id[integer]:1 x[mystery]:??', 40, 'unquoted value'));
    expect(plain).toBeInstanceOf(CaptureUndecodableError);
    expect(plain.code).toBe('CAPTURE_UNDECODABLE');
    await undecodable(ctx, new TestDecodingParseError("table public.secret: INSERT: id[integer]:1 email[text]:'a@b.c' x[mystery]:??", 40, 'unquoted value'));
    const [first, second] = await controlPlane.listDeadLetters('capture');
    expect(first).toMatchObject({ table: 'public.plain', code: 'CAPTURE_UNDECODABLE', record: 'table public.plain: INSERT: id[integer]:1 x[mystery]:??' });
    expect(second!.table).toBe('public.secret');
    expect(second!.record).not.toContain('a@b.c');
    expect(second!.reason).not.toContain('a@b.c');
    expect(JSON.stringify(await controlPlane.listAudit('p'))).not.toContain('a@b.c');
    expect((await controlPlane.listAudit('p')).filter((a) => a.action === 'capture-stopped')).toHaveLength(2);
  });
});

describe('continuity of history', () => {
  it('stops with HistoryGapError when the slot was re-created under the same name', async () => {
    const e = await env('CREATE TABLE t (id int PRIMARY KEY);', ['public.t']);
    await register(e, 'public.t');
    const c = new SlotCapture(e.options);
    await c.start();
    await c.stop();
    await e.sql.query('INSERT INTO t VALUES (1)');
    await e.sql.query(`SELECT pg_drop_replication_slot('${c.slot}')`);
    await e.sql.query(`SELECT pg_create_logical_replication_slot('${c.slot}', 'test_decoding')`);
    const error = await failure(new SlotCapture(e.options).start());
    expect(error).toBeInstanceOf(HistoryGapError);
    expect((error as Error).message).toMatch(/past the capture's checkpoint/);
    expect((await e.controlPlane.getTable(e.source, 'public.t'))!.state).toBe('needs-resnapshot');
    await e.sql.query(`SELECT pg_drop_replication_slot('${c.slot}')`);
    await e.sql.end();
  });

  it('stops with HistoryGapError when the source is another cluster (a changed system identifier)', async () => {
    const other = await startPostgres({ fast: true });
    try {
      const e = await env('CREATE TABLE t (id int PRIMARY KEY);', ['public.t']);
      const c = new SlotCapture(e.options);
      await c.start();
      await c.stop();
      // The same database name, table and slot on another cluster, behind the same source id.
      await other.createDatabase(e.source);
      const o = await connect(other.url(e.source));
      await o.query('CREATE TABLE t (id int PRIMARY KEY)');
      await o.query(`SELECT pg_create_logical_replication_slot('${c.slot}', 'test_decoding')`);
      const error = await failure(new SlotCapture({ ...e.options, sourceUrl: other.url(e.source) }).start());
      expect(error).toBeInstanceOf(HistoryGapError);
      expect((error as Error).message).toMatch(/system identifier changed from \d+ to \d+/);
      const stopped = (await e.controlPlane.listAudit(e.source)).find((a) => a.action === 'capture-stopped')!;
      expect(stopped.detail.problem).toBe('identity-changed');
      await o.end();
      await e.sql.end();
    } finally {
      await other.stop();
    }
  });

  it('moves the slot on only from exactly where it was acked: a crash between checkpoint and slot move resumes without republishing', async () => {
    const e = await env('CREATE TABLE t (id int PRIMARY KEY);', ['public.t']);
    const c = new SlotCapture(e.options);
    await c.start();
    await c.stop();
    await e.sql.query('INSERT INTO t VALUES (1)');
    // The transaction was published and checkpointed, then the process died before moving the slot.
    const commit = (await e.sql.query(`SELECT lsn::text AS lsn FROM pg_logical_slot_peek_changes('${c.slot}', NULL, NULL) WHERE data LIKE 'COMMIT%'`)).rows[0]
      .lsn as string;
    await e.controlPlane.putCheckpoint(captureCheckpointName(e.source), c.slot, commit);
    const again = new SlotCapture(e.options);
    await again.start();
    await e.sql.query('INSERT INTO t VALUES (2)');
    await until('the next insert', () => e.published.length === 1);
    await again.stop();
    expect(e.published.map((r) => r.columns![0]!.value)).toEqual([2]);
    await e.sql.end();
  });

  it('stops with HistoryGapError when the source was restored to an earlier point (a file-level backup put back)', async () => {
    const dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-restore-'));
    execFileSync('chmod', ['755', dir]);
    const data = path.join(dir, 'data');
    const backup = path.join(dir, 'backup');
    let pgc = await startPostgres({ fast: true, persistent: true, dataDir: data });
    try {
      const e = await env('CREATE TABLE t (id int PRIMARY KEY);', ['public.t'], pgc);
      await register(e, 'public.t');
      const first = new SlotCapture(e.options);
      await first.start();
      await e.sql.query('INSERT INTO t VALUES (1)');
      await until('row 1', () => e.published.length === 1);
      await first.stop();
      await e.sql.end();
      await pgc.stop();
      execFileSync('cp', ['-a', data, backup]); // the backup, taken at row 1
      pgc = await startPostgres({ fast: true, persistent: true, dataDir: data });
      const sql = await connect(pgc.url(e.source));
      const second = new SlotCapture({ ...e.options, sourceUrl: pgc.url(e.source) });
      await second.start();
      await sql.query('INSERT INTO t VALUES (2)');
      await sql.query('INSERT INTO t VALUES (3)');
      await until('rows 2 and 3', () => e.published.length === 3);
      await second.stop();
      await sql.end();
      await pgc.stop();
      // The operator restores the backup: rows 2 and 3 are gone from the source, but were published.
      await rm(data, { recursive: true, force: true });
      execFileSync('cp', ['-a', backup, data]);
      pgc = await startPostgres({ fast: true, persistent: true, dataDir: data });
      const error = await failure(new SlotCapture({ ...e.options, sourceUrl: pgc.url(e.source) }).start());
      expect(error).toBeInstanceOf(HistoryGapError);
      expect((error as Error).message).toMatch(/behind the capture's checkpoint .* restored to an earlier point/);
      expect((await e.controlPlane.getTable(e.source, 'public.t'))!.state).toBe('needs-resnapshot');
      expect((await e.controlPlane.listAudit(e.source)).find((a) => a.action === 'capture-stopped')!.detail.problem).toBe('slot-restored');
    } finally {
      await pgc.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('failover of the capture', () => {
  it('a standby capture with no state of its own resumes from the control plane: no loss, no duplicates after a clean stop', async () => {
    const e = await env('CREATE TABLE t (id int PRIMARY KEY);', ['public.t']);
    const primary = new SlotCapture(e.options);
    await primary.start();
    for (let i = 1; i <= 20; i++) await e.sql.query('INSERT INTO t VALUES ($1)', [i]);
    await until('the first 20', () => e.published.length === 20);
    // The primary's host goes away: its backend is killed, its process stops.
    const pid = (await readSlot(e.sql, primary.slot))!.activePid;
    if (pid) await e.sql.query('SELECT pg_terminate_backend($1)', [pid]);
    await primary.stop();
    for (let i = 21; i <= 40; i++) await e.sql.query('INSERT INTO t VALUES ($1)', [i]);
    // The standby: a new instance, nothing in memory, the same control plane.
    const standby = new SlotCapture(e.options);
    await standby.start();
    await until('all 40', () => new Set(e.published.map((r) => r.columns![0]!.value)).size === 40);
    await standby.stop();
    const ids = e.published.map((r) => r.columns![0]!.value as number);
    expect(new Set(ids).size).toBe(40);
    expect(ids.length).toBe(40);
    await e.sql.end();
  });
});
