/**
 * The slot capture (the local stand-in for DMS) against embedded PostgreSQL, kinesalite and the
 * DynamoDB control plane: peek → publish → ack, whole transactions, masking before publish,
 * unchanged TOAST values, caps, and the loud stops (slot gone, slot ahead, foreign slot, source
 * not ready).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import type { KinesisClient } from '@aws-sdk/client-kinesis';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { QUICK_START_JVM_OPTIONS, startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { startKinesalite, type Kinesalite } from '../../local/kinesis.ts';
import { dynamoDbClient, kinesisClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { TableConfigIndex, type TableConfig } from '../../lambda/core/tables/table-config.ts';
import type { SlotRecord } from '../../lambda/core/capture/slot-record.ts';
import { readCatalogTypes } from '../../lambda/core/shared/catalog-types.ts';
import { maskValue } from '../../lambda/core/tables/masking.ts';
import { HistoryGapError } from '../../lambda/core/shared/errors.ts';
import { SlotCapture, captureCheckpointName } from '../../local/capture.ts';
import { kinesisRawPublisher, type RawPublisher, type RawRecord } from '../../local/raw-publisher.ts';
import { compareLsn, readSlot } from '../../local/slot.ts';
import { SourceNotReadyError, TransactionTooLargeError } from '../../local/errors.ts';
import { createStream, readShards } from '../helpers/kinesis-read.ts';
import { until, capturedViews } from './helpers.ts';

let cluster: PostgresCluster;
let ddb: DynamoDbLocal;
let kin: Kinesalite;
let kinesis: KinesisClient;
let controlPlane: DynamoDbControlPlane;
let n = 0;

beforeAll(async () => {
  [cluster, ddb, kin] = await Promise.all([startPostgres({ fast: true }), startDynamoDbLocal({ jvmOptions: QUICK_START_JVM_OPTIONS }), startKinesalite()]);
  kinesis = kinesisClient(kin.endpoint);
  const dynamo = dynamoDbClient(ddb.endpoint);
  await createControlTable(dynamo, 'control');
  controlPlane = new DynamoDbControlPlane(dynamo, 'control');
});

afterAll(async () => {
  kinesis?.destroy();
  await Promise.all([cluster?.stop(), ddb?.stop(), kin?.stop()]);
});

const SCHEMA = `
  CREATE TABLE customers (id int PRIMARY KEY, name text, email text, ssn text);
  CREATE TABLE docs (id int PRIMARY KEY, title text, body text);
  ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;
  CREATE TABLE ignored (id int PRIMARY KEY, v text);
`;
const TABLES: TableConfig[] = [
  { table: 'public.customers', deleteMode: 'soft', mask: ['email'], exclude: ['ssn'] },
  { table: 'public.docs', deleteMode: 'soft', mask: [], exclude: [] },
];

interface Env {
  source: string;
  url: string;
  stream: string;
  sql: pg.Client;
}

/** A fresh database, stream and source id per test. */
async function env(schema = SCHEMA): Promise<Env> {
  const sourceId = `src${++n}`;
  await cluster.createDatabase(sourceId);
  const url = cluster.url(sourceId);
  const sql = new pg.Client({ connectionString: url });
  // A test that fails before closing its client must not turn the server's shutdown into an uncaught error.
  sql.on('error', () => undefined);
  await sql.connect();
  await sql.query(schema);
  const stream = `raw-${sourceId}`;
  await createStream(kinesis, stream, 2);
  return { source: sourceId, url, stream, sql };
}

/** How the capture under test reads its slot (every test runs on both paths). */
let read: 'stream' | 'peek' = 'stream';

function capture(e: Env, extra: Partial<ConstructorParameters<typeof SlotCapture>[0]> = {}): SlotCapture {
  return new SlotCapture({
    read,
    source: e.source,
    sourceUrl: e.url,
    tables: new TableConfigIndex(TABLES),
    controlPlane,
    publish: kinesisRawPublisher(kinesis, e.stream),
    idleMs: 20,
    ...extra,
  });
}

async function rawRecords(stream: string): Promise<{ records: SlotRecord[]; text: string }> {
  const shards = await readShards(kinesis, stream);
  const texts = [...shards.values()].flat().map((r) => Buffer.from(r.Data!).toString('utf8'));
  return { records: texts.flatMap((t) => capturedViews(t)), text: texts.join('\n') };
}

function position(r: SlotRecord): string {
  const [hi, lo] = r.commitLsn.split('/') as [string, string];
  return `${hi.padStart(8, '0')}${lo.padStart(8, '0')}${String(r.index).padStart(8, '0')}`;
}

describe.each(['stream', 'peek'] as const)('slot capture (read: %s)', (mode) => {
  beforeAll(() => {
    read = mode;
  });

  it('publishes whole transactions as DMS records, masked and without excluded columns, then acks', async () => {
    const e = await env();
    const c = capture(e);
    await c.start();
    const body = Array.from({ length: 400 }, (_, i) => `w${i}-${(i * 7919) % 10007}`).join(' ');
    await e.sql.query("INSERT INTO customers VALUES (1, 'Ada', 'ada@example.com', '111-22-3333'), (2, 'Alan', 'alan@example.com', '444-55-6666')");
    await e.sql.query('INSERT INTO docs VALUES (1, $1, $2)', ['first', body]);
    await e.sql.query("INSERT INTO ignored VALUES (1, 'not captured')");
    await e.sql.query(
      "BEGIN; UPDATE docs SET title = 'renamed' WHERE id = 1; UPDATE customers SET email = 'ada@example.org' WHERE id = 1; DELETE FROM customers WHERE id = 2; UPDATE customers SET id = 10 WHERE id = 1; COMMIT",
    );
    await until('records', async () => (await rawRecords(e.stream)).records.length >= 7);
    await c.stop();

    const { records, text } = await rawRecords(e.stream);
    expect(records).toHaveLength(7);
    // DMS records (docs/local.md, "DMS records"): data, a before image on updates, the metadata.
    const raw = text.split('\n').map((t) => JSON.parse(t) as Record<string, unknown>);
    expect(raw.every((r) => ('data' in r || 'control' in r) && 'metadata' in r && !('format' in r))).toBe(true);
    expect(records.some((r) => r.table === 'public.ignored')).toBe(false);
    // Masked at capture: the clear value never enters the stream; the hash does.
    expect(text).not.toContain('ada@example');
    expect(text).not.toContain('alan@example');
    const firstInsert = records.find(
      (r) => r.table === 'public.customers' && r.op === 'insert' && r.columns!.some((col) => col.name === 'id' && col.value === 1),
    )!;
    expect(firstInsert.columns!.find((col) => col.name === 'email')!.value).toBe(maskValue('ada@example.com'));
    // Excluded: not there at all, not even as a name.
    expect(text).not.toContain('111-22-3333');
    expect(text).not.toContain('"ssn"');
    // The unchanged TOAST value is not delivered: absent from the data (IncludeNullAndEmpty writes a null as null).
    const docUpdate = records.find((r) => r.table === 'public.docs' && r.op === 'update')!;
    expect(docUpdate.columns!.map((col) => col.name)).toEqual(['id', 'title']);
    // Its type is in the catalog types the capture published for the normalizer (docs/schema-drift.md, "First sight of a table").
    expect((await readCatalogTypes(controlPlane, e.source, 'public.docs'))!.columns).toEqual([
      { name: 'id', type: 'integer' },
      { name: 'title', type: 'text' },
      { name: 'body', type: 'text' },
    ]);
    // The key change carries the old key in its before image.
    const keyChange = records.find((r) => r.op === 'update' && r.oldKey !== null)!;
    expect(keyChange.oldKey).toEqual([{ name: 'id', type: '', value: 1 }]);
    // Positions are unique.
    expect(new Set(records.map(position)).size).toBe(7);

    // Acked: the slot is confirmed exactly at the recorded checkpoint, the last commit.
    const slot = await readSlot(e.sql, c.slot);
    const checkpoint = await controlPlane.getCheckpoint(captureCheckpointName(e.source), c.slot);
    expect(slot!.confirmedFlushLsn).toBe(checkpoint);
    expect(checkpoint).toBe(records.map((r) => r.commitLsn).reduce((a, b) => (compareLsn(a, b) >= 0 ? a : b)));
    await e.sql.end();
  });

  it('never splits a transaction: a transaction larger than one peek is published whole before the slot moves', async () => {
    const e = await env();
    const calls: Array<{ records: number; confirmed: string | null; commits: Set<string> }> = [];
    const watcher = new pg.Client({ connectionString: e.url });
    await watcher.connect();
    const inner = kinesisRawPublisher(kinesis, e.stream);
    let slotName = '';
    const publish: RawPublisher = async (records: RawRecord[]) => {
      const confirmed = (await readSlot(watcher, slotName))!.confirmedFlushLsn;
      // Row changes only (the table definition before a table's first rows is a control record).
      const changes = records.flatMap((r) => capturedViews(r.data));
      calls.push({ records: changes.length, confirmed, commits: new Set(changes.map((r) => r.commitLsn)) });
      await inner(records);
    };
    const c = capture(e, { publish, peekChanges: 5 });
    slotName = c.slot;
    await c.start();
    const before = (await readSlot(e.sql, c.slot))!.confirmedFlushLsn!;
    await e.sql.query("INSERT INTO customers SELECT g, 'n' || g, 'e' || g || '@x', NULL FROM generate_series(1, 50) g");
    await until('published', () => calls.reduce((a, x) => a + x.records, 0) >= 50);
    await c.stop();
    const txCall = calls.find((x) => x.records > 0)!;
    expect(txCall.records).toBe(50);
    expect(txCall.commits.size).toBe(1);
    expect(txCall.confirmed).toBe(before);
    await watcher.end();
    await e.sql.end();
  });

  it('stops with TransactionTooLargeError on a transaction over the caps, acking none of it', async () => {
    const e = await env();
    const c = capture(e, { maxTxRows: 20 });
    await c.start();
    const initial = (await readSlot(e.sql, c.slot))!.confirmedFlushLsn;
    await e.sql.query("INSERT INTO customers VALUES (1, 'small', 's@x', NULL)");
    await until('small tx', async () => (await rawRecords(e.stream)).records.length >= 1);
    // The record is published before the slot is advanced (peek, publish, checkpoint, ack): wait for the ack.
    await until('small tx acked', async () => (await readSlot(e.sql, c.slot))!.confirmedFlushLsn !== initial);
    const acked = (await readSlot(e.sql, c.slot))!.confirmedFlushLsn;
    await e.sql.query("INSERT INTO customers SELECT g, 'n', 'e', NULL FROM generate_series(100, 129) g");
    const error = await c.done.then(
      () => null,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(TransactionTooLargeError);
    expect((error as Error).message).toMatch(/more than 20 rows/);
    expect((error as Error).message).toMatch(/--max-tx-rows/);
    expect((await readSlot(e.sql, c.slot))!.confirmedFlushLsn).toBe(acked);
    expect((await rawRecords(e.stream)).records).toHaveLength(1);
    expect(c.stats.state).toBe('failed');
    await e.sql.end();
  });

  it('stops loudly when the slot is dropped under it, marks tables for re-snapshot, and never re-creates the slot', async () => {
    const e = await env();
    await controlPlane.registerTable(
      {
        source: e.source,
        table: 'public.customers',
        state: 'active',
        currentVersion: 1,
        deleteMode: 'soft',
        preImage: 'key',
        stateReason: null,
        updatedAt: new Date().toISOString(),
      },
      {
        source: e.source,
        table: 'public.customers',
        version: 1,
        columns: [{ name: 'id', type: 'integer', nullable: false }],
        key: ['id'],
        effectivePosition: '0'.repeat(24),
        registeredAt: new Date().toISOString(),
      },
      { at: new Date().toISOString(), actor: 'test', action: 'register', source: e.source, table: 'public.customers', outcome: 'done', detail: {} },
    );
    const c = capture(e);
    await c.start();
    await e.sql.query("INSERT INTO customers VALUES (1, 'a', 'a@x', NULL)");
    await until('first record', async () => (await rawRecords(e.stream)).records.length >= 1);
    // The slot is active while it is read (a peek runs, or the stream holds it): as an operator
    // would, end the session holding it and drop it, retrying until the drop gets through.
    await until('slot dropped', async () => {
      try {
        await e.sql.query('SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL', [c.slot]);
        await e.sql.query('SELECT pg_drop_replication_slot($1)', [c.slot]);
        return true;
      } catch {
        return false;
      }
    });
    await e.sql.query("INSERT INTO customers VALUES (2, 'b', 'b@x', NULL)");
    const error = await c.done.then(
      () => null,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(HistoryGapError);
    expect((error as HistoryGapError).code).toBe('HISTORY_GAP');
    expect((error as Error).message).toMatch(/is gone/);
    expect((error as Error).message).toMatch(/re-snapshot/);
    expect(await readSlot(e.sql, c.slot)).toBeNull();
    const table = await controlPlane.getTable(e.source, 'public.customers');
    expect(table!.state).toBe('needs-resnapshot');
    expect(table!.stateReason).toMatch(/HISTORY_GAP/);
    const audit = await controlPlane.listAudit(e.source);
    expect(audit.some((a) => a.action === 'needs-resnapshot' && a.table === 'public.docs')).toBe(true);
    expect(audit.some((a) => a.action === 'capture-stopped')).toBe(true);

    // A new run refuses too, and still does not create a slot.
    const again = capture(e);
    await expect(again.start()).rejects.toBeInstanceOf(HistoryGapError);
    expect(await readSlot(e.sql, c.slot)).toBeNull();
    await e.sql.end();
  });

  it('refuses to start when the slot was confirmed past its checkpoint by someone else', async () => {
    const e = await env();
    const c = capture(e);
    await c.start();
    await c.stop();
    await e.sql.query("INSERT INTO customers VALUES (1, 'a', 'a@x', NULL)");
    await e.sql.query('SELECT pg_replication_slot_advance($1, pg_current_wal_lsn())', [c.slot]);
    const again = capture(e);
    const error = await again.start().then(
      () => null,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(HistoryGapError);
    expect((error as Error).message).toMatch(/past the capture's checkpoint/);
    expect((await rawRecords(e.stream)).records).toHaveLength(0);
    await e.sql.end();
  });

  it('resumes from its checkpoint after a stop: nothing lost, nothing published twice', async () => {
    const e = await env();
    const c1 = capture(e);
    await c1.start();
    await e.sql.query("INSERT INTO customers VALUES (1, 'a', 'a@x', NULL)");
    await until('first', async () => (await rawRecords(e.stream)).records.length >= 1);
    await c1.stop();
    await e.sql.query("INSERT INTO customers VALUES (2, 'b', 'b@x', NULL)");
    await e.sql.query("UPDATE customers SET name = 'c' WHERE id = 1");
    const c2 = capture(e);
    await c2.start();
    await until('rest', async () => (await rawRecords(e.stream)).records.length >= 3);
    await c2.stop();
    const { records } = await rawRecords(e.stream);
    expect(records).toHaveLength(3);
    expect(new Set(records.map(position)).size).toBe(3);
    await e.sql.end();
  });

  it('prints values canonically (UTC timestamps) whatever the server or database time zone', async () => {
    const e = await env(
      'CREATE TABLE customers (id int PRIMARY KEY, name text, email text, ssn text); CREATE TABLE docs (id int PRIMARY KEY, title text, body text);',
    );
    await e.sql.query(`ALTER DATABASE ${e.source} SET TimeZone = 'America/New_York'`);
    await e.sql.query('ALTER TABLE docs ADD COLUMN at timestamptz');
    const c = capture(e);
    await c.start();
    await e.sql.query("INSERT INTO docs (id, title, body, at) VALUES (1, 't', 'b', '2026-06-01 12:00:00+02')");
    await until('record', async () => (await rawRecords(e.stream)).records.length >= 1);
    await c.stop();
    const [r] = (await rawRecords(e.stream)).records;
    expect(r!.columns!.find((col) => col.name === 'at')!.value).toBe('2026-06-01 10:00:00+00');
    await e.sql.end();
  });

  it('a table that joins while a batch is being built (discovery runs alongside) is captured from the next batch, never as records without a key', async () => {
    const e = await env();
    // Discovery adds the table at the batch's first look at it: the batch decides it is not captured, and everything after sees it.
    class JoiningIndex extends TableConfigIndex {
      armed = false;
      override has(table: string): boolean {
        if (this.armed && table === 'public.ignored' && !super.has(table)) {
          this.armed = false;
          const answer = super.has(table);
          this.add({ table, deleteMode: 'soft', mask: [], exclude: [] });
          return answer;
        }
        return super.has(table);
      }
    }
    const tables = new JoiningIndex(TABLES);
    const c = capture(e, { tables });
    await c.start();
    tables.armed = true;
    await e.sql.query("INSERT INTO ignored VALUES (1, 'before it joined')");
    await until('the batch acked', () => c.stats.transactions >= 1);
    expect(tables.armed).toBe(false);
    await e.sql.query("INSERT INTO ignored VALUES (2, 'after it joined')");
    await until('the next batch published', async () => (await rawRecords(e.stream)).records.some((r) => r.table === 'public.ignored'));
    await c.stop();
    const mine = (await rawRecords(e.stream)).records.filter((r) => r.table === 'public.ignored');
    // Row 1 is the joining table's snapshot's to read; row 2 is a record, and the table's key is published with its catalog types.
    expect(mine.map((r) => r.columns!.find((col) => col.name === 'id')!.value)).toEqual([2]);
    expect((await readCatalogTypes(controlPlane, e.source, 'public.ignored'))!.key).toEqual(['id']);
    // And no change of it was dead-lettered (before, the batch built row 1 with an empty key: a dead letter, and the table degraded).
    expect((await controlPlane.listDeadLetters()).filter((d) => d.source === e.source)).toEqual([]);
    await e.sql.end();
  });

  it('refuses a slot of the same name that it did not create', async () => {
    const e = await env();
    await e.sql.query("SELECT pg_create_logical_replication_slot('cdc_' || $1, 'test_decoding')", [e.source]);
    const c = capture(e);
    await expect(c.start()).rejects.toThrow(/already exists, but this capture has no record of creating it/);
    await e.sql.end();
  });

  it('explains a user without the replication privilege and a table without a key', async () => {
    const e = await env('CREATE TABLE customers (id int, name text, email text, ssn text); CREATE TABLE docs (id int PRIMARY KEY, title text, body text);');
    // A role per run (the tests run once per read path; a role is cluster-wide).
    const role = `plain_${e.source}`;
    await e.sql.query(`CREATE ROLE ${role} LOGIN; GRANT SELECT ON ALL TABLES IN SCHEMA public TO ${role}`);
    const asPlain = capture({ ...e, url: e.url.replace('postgres@', `${role}@`) });
    const error = await asPlain.start().then(
      () => null,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(SourceNotReadyError);
    expect((error as Error).message).toMatch(new RegExp(`lacks the replication privilege.*ALTER ROLE "${role}" WITH REPLICATION`));
    await expect(capture(e).start()).rejects.toThrow(/public.customers has no primary key/);
    await e.sql.query(`DROP OWNED BY ${role}; DROP ROLE ${role}`).catch(() => undefined);
    await e.sql.end();
  });

  it('explains a source whose wal_level is not logical', async () => {
    const replica = await startPostgres({ fast: true, settings: { wal_level: 'replica' } });
    try {
      await replica.createDatabase('src');
      const sql = new pg.Client({ connectionString: replica.url('src') });
      await sql.connect();
      await sql.query(SCHEMA);
      await sql.end();
      const c = new SlotCapture({
        source: 'replica',
        sourceUrl: replica.url('src'),
        tables: new TableConfigIndex(TABLES),
        controlPlane,
        publish: async () => undefined,
      });
      await expect(c.start()).rejects.toThrow(/wal_level = 'replica'.*wal_level = logical.*restart/s);
    } finally {
      await replica.stop();
    }
  });
});
