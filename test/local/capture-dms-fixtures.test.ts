/**
 * The local capture writes what DMS writes (docs/local.md, "DMS records"): the records it publishes
 * for a table's history are held against real DMS records of the same history, recorded from RDS
 * PostgreSQL through Kinesis (test/fixtures/dms/postgres-session.jsonl): same keys, same metadata
 * shape, same value rendering, the same data and before images. Then the normalizer reads them
 * with its DMS decoder, and its `DmsRecordsDecoded` metric counts every one.
 */
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { SlotCapture } from '../../local/capture.ts';
import type { RawRecord } from '../../local/raw-publisher.ts';
import { TableConfigIndex, type TableConfig } from '../../lambda/core/tables/table-config.ts';
import { Normalizer } from '../../lambda/core/capture/normalize.ts';
import { readCatalogTypes } from '../../lambda/core/shared/catalog-types.ts';
import { validateChangeEvent, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { MetricName } from '../../contracts/metrics.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { until } from './helpers.ts';

type Json = Record<string, unknown>;

const fixture = (name: string): Json[] =>
  readFileSync(new URL(`../fixtures/dms/${name}`, import.meta.url), 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Json);

const meta = (r: Json): Json => r.metadata as Json;
const MICROS_TS = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/;
const PG_STREAM_POSITION = /^[0-9A-F]{8}\/[0-9A-F]{8}\.\d+\.[0-9A-F]{8}\/[0-9A-F]{8}$/;

/** Holds a record the capture wrote against a recorded DMS record of the same change. */
function expectSameShape(ours: Json, real: Json): void {
  expect(Object.keys(ours).sort()).toEqual(Object.keys(real).sort());
  const m = meta(ours);
  const rm = meta(real);
  expect(Object.keys(m).sort()).toEqual(Object.keys(rm).sort());
  for (const k of Object.keys(rm)) expect(typeof m[k], `metadata.${k}`).toBe(typeof rm[k]);
  for (const k of ['record-type', 'operation', 'partition-key-type', 'schema-name', 'table-name']) expect(m[k], `metadata.${k}`).toBe(rm[k]);
  for (const k of ['timestamp', 'commit-timestamp']) {
    expect(rm[k]).toMatch(MICROS_TS);
    expect(m[k]).toMatch(MICROS_TS);
  }
  expect(rm['stream-position']).toMatch(PG_STREAM_POSITION);
  expect(m['stream-position']).toMatch(PG_STREAM_POSITION);
  const [first, , third] = String(m['stream-position']).split('.');
  expect(first).toBe(third);
  for (const k of ['transaction-id', 'transaction-record-id', 'prev-transaction-id', 'prev-transaction-record-id']) {
    if (k in rm) expect(Number.isInteger(m[k]), `metadata.${k}`).toBe(true);
  }
  // The values, rendered as DMS renders them: integers as numbers, jsonb as its text, nulls as null.
  expect(ours.data).toStrictEqual(real.data);
  if ('before-image' in real) expect(ours['before-image']).toStrictEqual(real['before-image']);
}

let cluster: PostgresCluster;
beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
});
afterAll(async () => {
  await cluster?.stop();
});

describe('the local capture writes DMS records', () => {
  it('as DMS recorded them for the same history of public.foo, and the normalizer decodes each with its DMS decoder', async () => {
    const source = 'dmsfix';
    await cluster.createDatabase(source);
    const sql = new pg.Client({ connectionString: cluster.url(source) });
    sql.on('error', () => undefined);
    await sql.connect();
    // The table of the recording (its control record's table-def: id INT32 not null, name, age, attributes).
    await sql.query('CREATE TABLE foo (id int PRIMARY KEY, name text, age int, attributes jsonb)');
    const tables: TableConfig[] = [{ table: 'public.foo', deleteMode: 'soft', mask: [], exclude: [] }];
    const controlPlane = new MemoryControlPlane();
    const raw: RawRecord[] = [];
    const capture = new SlotCapture({
      source,
      sourceUrl: cluster.url(source),
      tables: new TableConfigIndex(tables),
      controlPlane,
      publish: async (r) => void raw.push(...r),
      idleMs: 20,
    });
    await capture.start();
    try {
      // The recorded session, step by step (its `load` of row 42 is an insert here).
      await sql.query(`INSERT INTO foo VALUES (46, 'Jane', 31, '{"baz": "qux"}')`);
      await sql.query(`INSERT INTO foo VALUES (42, 'John', 30, '{"foo": "bar"}')`);
      await sql.query('UPDATE foo SET age = 33 WHERE id = 42');
      await sql.query('UPDATE foo SET id = 45 WHERE id = 46');
      await sql.query('DELETE FROM foo WHERE id = 45');
      await until('five row changes', () => raw.filter((r) => !r.label.endsWith(':table-def')).length === 5, 30_000);
    } finally {
      await capture.stop();
      await sql.end();
    }
    const all = raw.map((r) => JSON.parse(r.data) as Json);
    const ours = all.filter((r) => meta(r)['record-type'] === 'data');
    const session = fixture('postgres-session.jsonl');
    const real = session.filter((r) => meta(r)['record-type'] === 'data' && meta(r).operation !== 'load');
    // First the table's definition, as DMS sends a create-table control record before a table's rows:
    // the same keys and metadata, the columns and key of the table (its types are PostgreSQL's names, docs/local.md).
    const realCreate = session.find((r) => meta(r).operation === 'create-table')!;
    expect(all[0]).toMatchObject({ metadata: { 'record-type': 'control', operation: 'create-table' } });
    expect(Object.keys(all[0]!).sort()).toEqual(Object.keys(realCreate).sort());
    expect(Object.keys(meta(all[0]!)).sort()).toEqual(Object.keys(meta(realCreate)).sort());
    const def = (r: Json) => (r.control as { 'table-def': { columns: Record<string, { nullable: boolean }>; 'primary-key': string[] } })['table-def'];
    expect(Object.keys(def(all[0]!).columns).sort()).toEqual(Object.keys(def(realCreate).columns).sort());
    expect(def(all[0]!)['primary-key']).toEqual(def(realCreate)['primary-key']);
    expect(all.filter((r) => meta(r)['record-type'] === 'control')).toHaveLength(1);
    expect(real.map((r) => meta(r).operation)).toEqual(['insert', 'update', 'update', 'delete']);
    // ours: insert 46, insert 42, update of 42 (key unchanged), key change 46 → 45, delete 45.
    expectSameShape(ours[0]!, real[0]!);
    expectSameShape(ours[2]!, real[1]!);
    expectSameShape(ours[3]!, real[2]!);
    expectSameShape(ours[4]!, real[3]!);
    // Each record names the previous transaction's last record, as DMS's chain does.
    for (let i = 1; i < ours.length; i++) expect(meta(ours[i]!)['prev-transaction-id']).toBe(meta(ours[i - 1]!)['transaction-id']);

    // The normalizer reads them with its DMS decoder (the key from the catalog types the capture published).
    expect((await readCatalogTypes(controlPlane, source, 'public.foo'))!.key).toEqual(['id']);
    const counted: number[] = [];
    const log: ChangeEvent[] = [];
    const quiet = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };
    const normalizer = new Normalizer<string>({
      source,
      tables: new TableConfigIndex(tables),
      controlPlane,
      changeLog: { encode: (e) => JSON.stringify(e), publishEncoded: async (texts) => void log.push(...texts.map((t) => validateChangeEvent(JSON.parse(t)))) },
      metrics: { count: (name, v) => void (name === MetricName.DMS_RECORDS_DECODED && counted.push(v)), milliseconds: () => undefined },
      logger: quiet,
      catalogTypes: (t) => readCatalogTypes(controlPlane, source, t),
    });
    const batch = normalizer.startBatch();
    for (const r of raw) await batch.add({ text: r.data, origin: r.label });
    await batch.flush();
    expect(counted.reduce((a, b) => a + b, 0)).toBe(6);
    expect(await controlPlane.listDeadLetters()).toEqual([]);
    expect(log.map((e) => [e.op, e.key, e.capture])).toEqual([
      ['insert', { id: 46 }, 'dms'],
      ['insert', { id: 42 }, 'dms'],
      ['update', { id: 42 }, 'dms'],
      ['delete', { id: 46 }, 'dms'],
      ['insert', { id: 45 }, 'dms'],
      ['delete', { id: 45 }, 'dms'],
    ]);
    expect(log[0]!.after).toEqual({ id: 46, name: 'Jane', age: 31, attributes: '{"baz": "qux"}' });
    // The positions are the slot path's: commit LSN, then the change's index in its transaction.
    const lsn = String(meta(ours[3]!)['stream-position']).split('.')[0]!.replace('/', '');
    expect(log[3]!.position).toBe(`${lsn}00000000`.toLowerCase());
  });
});
