/**
 * Capture → normalizer → warehouse on real PostgreSQL (embedded), without the stream stand-ins:
 * the slot capture reads a real logical slot, its records go through the normalizer (in-memory
 * control plane, a collaborator double; see its doc) and the change log's JSON, and the
 * warehouse adapter applies them to a second database. DMS records (which have no local
 * producer) are fed to the same normalizer as text.
 *
 * - exact numbers: int8 keys beyond 2^53 and numerics from DMS JSON land exactly, two keys
 *   never collapse; numeric precision beyond 38 is refused by name (docs/exact-numbers.md);
 * - schema drift with type modifiers on the slot path: varchar(n)/numeric(p,s) narrowing pauses
 *   the table, widening does not; a same-type `ALTER … USING` rewrite, which decodes to nothing,
 *   is caught by the verdict (docs/schema-drift.md).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { SlotCapture } from '../../local/capture.ts';
import type { RawRecord } from '../../local/raw-publisher.ts';
import { readPublishedPartitionTree } from '../../lambda/core/tables/partitions.ts';
import { Normalizer, type ChangeLogWriter, type NormalizerLogger, type NormalizerOptions } from '../../lambda/core/capture/normalize.ts';
import { publishCatalogTypes, readCatalogTypes, TableTypesPendingError } from '../../lambda/core/shared/catalog-types.ts';
import { readCatalogColumnTypes } from '../../lambda/adapters/source-facts-pg.ts';
import { validateChangeEvent, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { TableConfigIndex, type TableConfig } from '../../lambda/core/tables/table-config.ts';
import type { SchemaVersion } from '../../lambda/core/shared/control-plane.ts';
import { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { compareSourceAndWarehouse } from '../../local/verdict.ts';
import { until } from '../local/helpers.ts';

let cluster: PostgresCluster;
let pool: pg.Pool;
let n = 0;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  await cluster.createDatabase('dw');
  pool = new pg.Pool({ connectionString: cluster.url('dw'), max: 2 });
  // the server's shutdown must not surface as an uncaught error of an idle connection
  pool.on('error', () => undefined);
}, 120_000);
afterAll(async () => {
  await pool?.end();
  await cluster?.stop();
});

const quiet: NormalizerLogger = { debug() {}, info() {}, warn() {}, error() {} };

/** Row changes among the raw records (the table definitions the capture writes before them are DMS control records). */
function changesIn(raw: readonly RawRecord[]): number {
  return raw.filter((r) => (JSON.parse(r.data) as { metadata?: Record<string, unknown> }).metadata?.['record-type'] !== 'control').length;
}

function pipeline(sourceId: string, tables: TableConfig[], extra: Partial<NormalizerOptions<string>> = {}) {
  const controlPlane = new MemoryControlPlane();
  const log: ChangeEvent[] = [];
  const changeLog: ChangeLogWriter<string> = {
    encode: (e) => JSON.stringify(e),
    async publishEncoded(records) {
      for (const r of records) log.push(validateChangeEvent(JSON.parse(r)));
    },
  };
  // The capture writes DMS records (docs/local.md, "DMS records"): types and keys come from the catalog types it publishes.
  const catalog = {
    catalogTypes: (t: string) => readCatalogTypes(controlPlane, sourceId, t),
    partitionTree: () => readPublishedPartitionTree(controlPlane, sourceId),
  };
  const normalizer = new Normalizer({
    source: sourceId,
    tables: new TableConfigIndex(tables),
    controlPlane,
    changeLog,
    metrics: { count() {}, milliseconds() {} },
    logger: quiet,
    ...('catalogTypes' in extra ? {} : catalog),
    ...extra,
  });
  const warehouse = new PgWarehouse(pool);
  let seq = 0;
  let applied = 0;
  return {
    controlPlane,
    log,
    async normalize(texts: readonly string[]): Promise<void> {
      const batch = normalizer.startBatch();
      for (const text of texts) await batch.add({ text, origin: `raw/shardId-000000000000/${++seq}` });
      await batch.flush();
    },
    /** Applies the change log's events not applied yet, per table, with their schema versions. */
    async apply(): Promise<void> {
      const fresh = log.slice(applied);
      applied = log.length;
      const byTable = new Map<string, ChangeEvent[]>();
      for (const e of fresh) byTable.set(e.table, [...(byTable.get(e.table) ?? []), e]);
      for (const [table, events] of byTable) {
        const schemas = new Map<number, SchemaVersion>((await controlPlane.listSchemaVersions(sourceId, table)).map((v) => [v.version, v]));
        await warehouse.applyTable({ source: sourceId, table, deleteMode: 'soft', schemas, events, appliedAt: new Date() });
      }
    },
  };
}

function dmsInsert(table: string, data: string, lsn: number): string {
  const [schema, name] = table.split('.');
  const pos = `00000002/${lsn.toString(16).toUpperCase().padStart(8, '0')}`;
  return (
    `{"data":${data},"metadata":{"timestamp":"2026-12-01T00:00:01.000000Z","record-type":"data","operation":"insert","partition-key-type":"schema-table",` +
    `"schema-name":"${schema}","table-name":"${name}","commit-timestamp":"2026-12-01T00:00:00.000000Z","stream-position":"${pos}.1.${pos}","transaction-id":${lsn},"transaction-record-id":1}}`
  );
}

function dmsCreate(table: string, columns: Record<string, unknown>): string {
  const [schema, name] = table.split('.');
  return JSON.stringify({
    control: { 'table-def': { columns, 'primary-key': ['id'] } },
    metadata: {
      timestamp: '2026-12-01T00:00:00.000000Z',
      'record-type': 'control',
      operation: 'create-table',
      'partition-key-type': 'task-id',
      'schema-name': schema,
      'table-name': name,
    },
  });
}

describe('DMS JSON → normalizer → warehouse (PostgreSQL): exact numbers', () => {
  it('int8 keys 9007199254740993 and 9007199254740992 stay two rows; numerics keep every digit', async () => {
    const sourceId = `dms${++n}`;
    const p = pipeline(sourceId, [{ table: 'public.big', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] }]);
    await p.normalize([
      dmsCreate('public.big', {
        id: { type: 'INT8', nullable: false },
        amount: { type: 'NUMERIC', precision: 30, scale: 2, nullable: true },
        f: { type: 'REAL8', nullable: true },
      }),
      dmsInsert('public.big', '{"id":9007199254740993,"amount":1234567890123456789012345678.10,"f":0.1}', 0x100),
      dmsInsert('public.big', '{"id":9007199254740992,"amount":12.30,"f":1.5}', 0x200),
      dmsInsert('public.big', '{"id":-9223372036854775808,"amount":-0.01,"f":-2.25}', 0x300),
    ]);
    expect(await p.controlPlane.listDeadLetters()).toEqual([]);
    await p.apply();
    const rows = await pool.query(`SELECT id::text AS id, amount::text AS amount, f FROM ${sourceId}_public.big ORDER BY id`);
    expect(rows.rows).toEqual([
      { id: '-9223372036854775808', amount: '-0.01', f: -2.25 },
      { id: '9007199254740992', amount: '12.30', f: 1.5 },
      { id: '9007199254740993', amount: '1234567890123456789012345678.10', f: 0.1 },
    ]);
    const types = await pool.query(
      `SELECT column_name, data_type, numeric_precision FROM information_schema.columns WHERE table_schema = $1 AND table_name = '_cdc_mirror_big' AND column_name IN ('id', 'amount') ORDER BY column_name`,
      [`${sourceId}_public`],
    );
    expect(types.rows).toEqual([
      { column_name: 'amount', data_type: 'numeric', numeric_precision: 38 },
      { column_name: 'id', data_type: 'bigint', numeric_precision: 64 },
    ]);
  });

  it('a numeric precision beyond 38 arrives exact in a PostgreSQL warehouse (its dialect keeps numeric unbounded; the Redshift dialect refuses it by its policy)', async () => {
    const sourceId = `dms${++n}`;
    const p = pipeline(sourceId, [{ table: 'public.wide', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] }]);
    await p.normalize([
      dmsCreate('public.wide', { id: { type: 'INT4', nullable: false }, x: { type: 'NUMERIC', precision: 50, scale: 2, nullable: true } }),
      dmsInsert('public.wide', '{"id":1,"x":123456789012345678901234567890123456789012345678.25}', 0x100),
    ]);
    expect(await p.controlPlane.listDeadLetters()).toEqual([]);
    await p.apply();
    const rows = await pool.query(`SELECT id::text AS id, x::text AS x FROM ${sourceId}_public.wide`);
    expect(rows.rows).toEqual([{ id: '1', x: '123456789012345678901234567890123456789012345678.25' }]);
  });
});

describe('DMS JSON → normalizer → warehouse (PostgreSQL): a table first seen through a data record', () => {
  function dmsControl(operation: string, table: string, columns: Record<string, unknown>): string {
    const [schema, name] = table.split('.');
    return JSON.stringify({
      control: { 'table-def': { columns, 'primary-key': ['id'] } },
      metadata: {
        timestamp: '2026-12-01T00:00:02.000000Z',
        'record-type': 'control',
        operation,
        'partition-key-type': 'task-id',
        'schema-name': schema,
        'table-name': name,
      },
    });
  }

  it('is registered with the catalog types the snapshot worker publishes, so the table definition that follows is no type change any sink must apply', async () => {
    // DMS data records carry no types. Registered untyped, the table got text columns in the
    // warehouse, and the types of the table definition that followed were "compatible" in the
    // registry but held the table for good in the warehouse (SinkTypeConflictError).
    const sourceId = `dmscat${++n}`;
    await cluster.createDatabase(sourceId);
    const src = new pg.Client({ connectionString: cluster.url(sourceId) });
    src.on('error', () => undefined);
    await src.connect();
    try {
      await src.query('CREATE TABLE public.items (id bigint PRIMARY KEY, price numeric(12,2), name varchar(20), placed date)');
      const tables: TableConfig[] = [{ table: 'public.items', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] }];
      const p = pipeline(sourceId, tables, { catalogTypes: (t) => readCatalogTypes(p.controlPlane, sourceId, t) });
      const first = dmsInsert('public.items', '{"id":1,"price":12.30,"name":"a","placed":"2026-11-30"}', 0x100);

      // Before the catalog types are published the record is not registered, published or dead-lettered: it is retried.
      const pending = await p.normalize([first]).catch((e: unknown) => e);
      expect(pending).toBeInstanceOf(TableTypesPendingError);
      expect((pending as TableTypesPendingError).code).toBe('TABLE_TYPES_PENDING');
      expect((pending as Error).message).toContain(`${sourceId}/public.items is seen for the first time through a record without column types`);
      expect(p.log).toEqual([]);
      expect(await p.controlPlane.listTables(sourceId)).toEqual([]);
      expect(await p.controlPlane.listDeadLetters()).toEqual([]);

      // The snapshot worker's step, against the real catalog; the retried record then registers with those types.
      expect(await publishCatalogTypes(p.controlPlane, sourceId, ['public.items', 'public.absent'], (t) => readCatalogColumnTypes(src, t))).toEqual([
        'public.items',
      ]);
      await p.normalize([first]);
      expect((await p.controlPlane.getSchemaVersion(sourceId, 'public.items', 1))?.columns.map((c) => [c.name, c.type])).toEqual([
        ['id', 'bigint'],
        ['price', 'numeric(12,2)'],
        ['name', 'character varying(20)'],
        ['placed', 'date'],
      ]);
      // Registered: nothing more to publish for it.
      expect(await publishCatalogTypes(p.controlPlane, sourceId, ['public.items'], (t) => readCatalogColumnTypes(src, t))).toEqual([]);
      await p.apply(); // the sink tables are made from version 1

      // DMS then reports a new column with the table definition (its own type names).
      await src.query('ALTER TABLE public.items ADD COLUMN note varchar(50)');
      await p.normalize([
        dmsControl('add-column', 'public.items', {
          id: { type: 'INT8', nullable: false },
          price: { type: 'NUMERIC', precision: 12, scale: 2, nullable: true },
          name: { type: 'WSTRING', length: 20, nullable: true },
          placed: { type: 'DATE', nullable: true },
          note: { type: 'WSTRING', length: 50, nullable: true },
        }),
        dmsInsert('public.items', '{"id":2,"price":7.05,"name":"b","placed":"2026-12-01","note":"n"}', 0x200),
      ]);
      expect((await p.controlPlane.listTables(sourceId)).map((t) => t.state)).toEqual(['active']);
      expect(p.log.map((e) => e.schemaVersion)).toEqual([1, 2]);
      // Version 2 applies onto the tables made from version 1; the columns keep their types.
      await p.apply();
      const types = await pool.query(
        `SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = '_cdc_mirror_items' AND column_name IN ('id', 'price', 'placed', 'note') ORDER BY column_name`,
        [`${sourceId}_public`],
      );
      expect(types.rows.map((r: { column_name: string; data_type: string }) => [r.column_name, r.data_type])).toEqual([
        ['id', 'bigint'],
        ['note', 'text'],
        ['placed', 'date'],
        ['price', 'numeric'],
      ]);
      const rows = await pool.query(`SELECT id::text AS id, price::text AS price, placed::text AS placed, note FROM ${sourceId}_public.items ORDER BY id`);
      expect(rows.rows).toEqual([
        { id: '1', price: '12.30', placed: '2026-11-30', note: null },
        { id: '2', price: '7.05', placed: '2026-12-01', note: 'n' },
      ]);
    } finally {
      await src.end();
    }
  });

  it('without the catalog types (the normalizer registers the first sight untyped), the learned types are applied into the text columns: nothing is held', async () => {
    // A table registered untyped (before catalog types, or by the normalizer core without them):
    // the registry calls the learned types compatible, and the warehouse keeps the text columns it
    // made for the unknown types (docs/schema-drift.md). Before, this held the table for good
    // (SinkTypeConflictError: "column id of public.items is varchar(65535) in the warehouse but …").
    const sourceId = `dmscat${++n}`;
    const p = pipeline(sourceId, [{ table: 'public.items', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] }], { catalogTypes: undefined });
    await p.normalize([dmsInsert('public.items', '{"id":1,"price":12.30}', 0x100)]);
    expect((await p.controlPlane.getSchemaVersion(sourceId, 'public.items', 1))?.columns.map((c) => c.type)).toEqual([null, null]);
    await p.apply(); // the sink tables are made from version 1
    await p.normalize([
      dmsControl('add-column', 'public.items', {
        id: { type: 'INT8', nullable: false },
        price: { type: 'NUMERIC', precision: 12, scale: 2, nullable: true },
        note: { type: 'WSTRING', length: 50, nullable: true },
      }),
      dmsInsert('public.items', '{"id":2,"price":7.05,"note":"n"}', 0x200),
    ]);
    expect((await p.controlPlane.listTables(sourceId)).map((t) => t.state)).toEqual(['active']); // "compatible" in the registry
    await p.apply();
    const rows = (await pool.query(`SELECT id, price, note FROM ${sourceId}_public.items ORDER BY id`)).rows;
    // The values as the records carried them (every digit of the JSON numbers), written into text.
    expect(rows).toEqual([
      { id: '1', price: '12.30', note: null },
      { id: '2', price: '7.05', note: 'n' },
    ]);
    const types = (
      await pool.query(
        `SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = '_cdc_mirror_items' AND column_name IN ('id', 'price', 'note') ORDER BY column_name`,
        [`${sourceId}_public`],
      )
    ).rows;
    expect(types.map((r: { column_name: string; data_type: string }) => `${r.column_name}:${r.data_type}`)).toEqual(['id:text', 'note:text', 'price:text']);
  });

  it('a record naming a column the published catalog read lacks waits for a newer read, never registers it untyped', async () => {
    const sourceId = `dmscat${++n}`;
    await cluster.createDatabase(sourceId);
    const src = new pg.Client({ connectionString: cluster.url(sourceId) });
    src.on('error', () => undefined);
    await src.connect();
    try {
      await src.query('CREATE TABLE public.t (id integer PRIMARY KEY, a text)');
      const p = pipeline(sourceId, [{ table: 'public.t', key: ['id'], deleteMode: 'soft', mask: ['a'], exclude: [] }], {
        catalogTypes: (t) => readCatalogTypes(p.controlPlane, sourceId, t),
      });
      await publishCatalogTypes(p.controlPlane, sourceId, ['public.t'], (t) => readCatalogColumnTypes(src, t));
      // The column was added after the catalog was read.
      await src.query('ALTER TABLE public.t ADD COLUMN b numeric(5,1)');
      const record = dmsInsert('public.t', '{"id":1,"a":"x","b":1.5}', 0x100);
      const err = await p.normalize([record]).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(TableTypesPendingError);
      expect((err as Error).message).toContain('the published catalog types lack column(s) b');
      expect(await p.controlPlane.listTables(sourceId)).toEqual([]);
      expect(await publishCatalogTypes(p.controlPlane, sourceId, ['public.t'], (t) => readCatalogColumnTypes(src, t))).toEqual(['public.t']);
      await p.normalize([record]);
      // A masked column is text whatever its catalog type (docs/masking.md).
      expect((await p.controlPlane.getSchemaVersion(sourceId, 'public.t', 1))?.columns.map((c) => [c.name, c.type])).toEqual([
        ['id', 'integer'],
        ['a', 'text'],
        ['b', 'numeric(5,1)'],
      ]);
      await p.apply();
      expect((await pool.query(`SELECT id::text AS id, b::text AS b FROM ${sourceId}_public.t`)).rows).toEqual([{ id: '1', b: '1.5' }]);
    } finally {
      await src.end();
    }
  });
});

describe('slot capture → normalizer → warehouse (PostgreSQL): type modifiers', () => {
  async function sourceDb(schema: string) {
    const sourceId = `slot${++n}`;
    await cluster.createDatabase(sourceId);
    const sql = new pg.Client({ connectionString: cluster.url(sourceId) });
    sql.on('error', () => undefined);
    await sql.connect();
    await sql.query(schema);
    return { source: sourceId, sql };
  }

  function capture(sourceId: string, tables: TableConfig[], controlPlane: MemoryControlPlane, out: RawRecord[]): SlotCapture {
    return new SlotCapture({
      source: sourceId,
      sourceUrl: cluster.url(sourceId),
      tables: new TableConfigIndex(tables),
      controlPlane,
      publish: async (records) => void out.push(...records),
      idleMs: 20,
    });
  }

  it('registers varchar(n) and numeric(p,s); narrowing pauses the table, widening registers a compatible version', async () => {
    const { source: sourceId, sql } = await sourceDb('CREATE TABLE t (id int PRIMARY KEY, name varchar(20), amount numeric(10,2), at timestamp(3))');
    const tables: TableConfig[] = [{ table: 'public.t', deleteMode: 'soft', mask: [], exclude: [] }];
    const p = pipeline(sourceId, tables);
    const raw: RawRecord[] = [];
    const c = capture(sourceId, tables, p.controlPlane, raw);
    await c.start();
    try {
      const step = async (statement: string): Promise<void> => {
        const before = raw.length;
        await sql.query(statement);
        await until('capture', () => changesIn(raw.slice(before)) > 0);
        await p.normalize(raw.slice(before).map((r) => r.data));
        await p.apply();
      };
      await step("INSERT INTO t VALUES (1, 'a', 1.50, '2026-01-01 00:00:00.123')");
      const v1 = (await p.controlPlane.listSchemaVersions(sourceId, 'public.t'))[0]!;
      expect(v1.columns.map((x) => x.type)).toEqual(['integer', 'character varying(20)', 'numeric(10,2)', 'timestamp(3) without time zone']);

      // widening: compatible, the table stays active and the warehouse keeps its types
      await step("ALTER TABLE t ALTER COLUMN name TYPE varchar(40), ALTER COLUMN amount TYPE numeric(12,2); INSERT INTO t VALUES (2, 'b', 2.25, NULL)");
      const versions = await p.controlPlane.listSchemaVersions(sourceId, 'public.t');
      expect(versions.at(-1)!.columns.map((x) => x.type)).toEqual(['integer', 'character varying(40)', 'numeric(12,2)', 'timestamp(3) without time zone']);
      expect((await p.controlPlane.getTable(sourceId, 'public.t'))!.state).toBe('active');
      expect((await pool.query(`SELECT id, name, amount::text FROM ${sourceId}_public.t ORDER BY id`)).rows).toEqual([
        { id: '1', name: 'a', amount: '1.50' },
        { id: '2', name: 'b', amount: '2.25' },
      ]);

      // narrowing (test_decoding alone would print `character varying` both times): breaking
      await step("ALTER TABLE t ALTER COLUMN name TYPE varchar(5); INSERT INTO t VALUES (3, 'c', 3, NULL)");
      const t = await p.controlPlane.getTable(sourceId, 'public.t');
      expect(t!.state).toBe('paused');
      expect(t!.stateReason).toMatch(/column name changed type from character varying\(40\) to character varying\(5\), which is not a widening/);
    } finally {
      await c.stop();
      await sql.query(`SELECT pg_drop_replication_slot('${c.slot}')`).catch(() => undefined);
      await sql.end();
    }
  }, 120_000);

  it('a same-type ALTER … USING rewrite is invisible to the decoder; the verdict (the reconciliation backstop) shows the divergence', async () => {
    const { source: sourceId, sql } = await sourceDb('CREATE TABLE r (id int PRIMARY KEY, cents int)');
    const tables: TableConfig[] = [{ table: 'public.r', deleteMode: 'soft', mask: [], exclude: [] }];
    const p = pipeline(sourceId, tables);
    const raw: RawRecord[] = [];
    const c = capture(sourceId, tables, p.controlPlane, raw);
    await c.start();
    try {
      await sql.query('INSERT INTO r VALUES (1, 5), (2, 7)');
      await until('capture', () => changesIn(raw) >= 2);
      // a table rewrite: every value changes, no row change is decoded
      await sql.query('ALTER TABLE r ALTER COLUMN cents TYPE int USING cents * 100; INSERT INTO r VALUES (3, 900)');
      await until('capture', () => changesIn(raw) >= 3);
      await p.normalize(raw.map((r) => r.data));
      await p.apply();
      expect(changesIn(raw)).toBe(3);
      expect((await p.controlPlane.getTable(sourceId, 'public.r'))!.state).toBe('active'); // nothing the stream could classify
      const verdict = await compareSourceAndWarehouse({ sourceUrl: cluster.url(sourceId), warehouseUrl: cluster.url('dw'), source: sourceId, tables });
      expect(verdict.match).toBe(false);
      expect(verdict.tables[0]).toMatchObject({ table: 'public.r', different: 2, missing: 0, extra: 0 });
    } finally {
      await c.stop();
      await sql.query(`SELECT pg_drop_replication_slot('${c.slot}')`).catch(() => undefined);
      await sql.end();
    }
  }, 120_000);

  it('integer → numeric is breaking (the warehouse could not change its bigint column), not held forever as a type conflict', async () => {
    const { source: sourceId, sql } = await sourceDb('CREATE TABLE q (id int PRIMARY KEY, qty int)');
    const tables: TableConfig[] = [{ table: 'public.q', deleteMode: 'soft', mask: [], exclude: [] }];
    const p = pipeline(sourceId, tables);
    const raw: RawRecord[] = [];
    const c = capture(sourceId, tables, p.controlPlane, raw);
    await c.start();
    try {
      await sql.query('INSERT INTO q VALUES (1, 5)');
      await until('capture', () => changesIn(raw) >= 1);
      await sql.query('ALTER TABLE q ALTER COLUMN qty TYPE numeric(12,2); INSERT INTO q VALUES (2, 2.5)');
      await until('capture', () => changesIn(raw) >= 2);
      await p.normalize(raw.map((r) => r.data));
      const t = await p.controlPlane.getTable(sourceId, 'public.q');
      expect(t!.state).toBe('paused');
      expect(t!.stateReason).toMatch(/column qty changed type from integer to numeric\(12,2\)/);
    } finally {
      await c.stop();
      await sql.query(`SELECT pg_drop_replication_slot('${c.slot}')`).catch(() => undefined);
      await sql.end();
    }
  }, 120_000);
});
