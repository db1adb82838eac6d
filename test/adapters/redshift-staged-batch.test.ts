/**
 * A batch of several tables on the AWS Redshift path (docs/warehouse-apply.md, "Redshift: the
 * applier"): the applier records ONE load request for the batch's tables, which the loader function
 * loads in one load (one transaction) or not at all; when such a request fails, the loader names
 * the table whose COPY fails alone, the applier holds that table (or isolates it) and delivers the
 * others again, and they load. DynamoDB Local, a folder as S3, the Redshift stand-in on PostgreSQL;
 * the loader invoked in-process, one invocation at a time. And a value held as NULL with a marker
 * keeps its marker when a later partial update or a key change's insert half takes it.
 */
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbLoadRequests } from '../../lambda/adapters/control-plane-dynamodb/load-requests.ts';
import { StagedRedshiftLoader } from '../../lambda/adapters/redshift-staged-loader.ts';
import { RedshiftStagingSubmitter } from '../../lambda/adapters/redshift-staging-submitter.ts';
import { RedshiftWarehouse } from '../../lambda/adapters/warehouse-redshift.ts';
import type { ChangeRecord } from '../../lambda/handlers/warehouse-applier.ts';
import type { ColumnDef } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { LEDGER_TABLE, rsQualified } from '../../lambda/core/warehouse/redshift-sql.ts';
import { UNHELD_COLUMN, type ValuePolicy } from '../../lambda/core/warehouse/redshift-types.ts';
import { warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { FolderArchive } from '../../local/archive.ts';
import { type DynamoDbLocal } from '../../local/dynamodb.ts';
import { RedshiftStandIn } from '../../local/redshift-standin.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { useRedshiftFixture } from '../helpers/redshift-fixture.ts';
import { quietApplier, registerTables } from '../helpers/registered-applier.ts';

const BUCKET = 'staging';
const ROLE = 'arn:aws:iam::123456789012:role/cdc-copy';
const TABLES = ['public.a', 'public.b', 'public.c'];
const COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'note', type: 'text', nullable: true },
];

describe('a batch of several tables through the Redshift loader function', () => {
  const f = useRedshiftFixture({ database: 'rsb', clients: 2, dynamo: true });
  let ddb: DynamoDbLocal;
  let appl: pg.Client;
  let load: pg.Client;
  let pool: pg.Pool;
  let folder: string;
  beforeAll(() => void ([ddb, appl, load, pool, folder] = [f.ddb, f.clients[0]!, f.clients[1]!, f.pool, f.folder]));

  /** One sink: an applier over the staging submitter, the loader started by its requests; `copyFails` fails the COPY of a table's stage. */
  async function sink(sinkId: string, copyFails: (sql: string) => boolean = () => false, policyOf?: (table: string, column: string) => ValuePolicy) {
    const store = new FolderArchive(folder);
    const requests = new DynamoDbLoadRequests(dynamoDbClient(ddb.endpoint), 'control', sinkId);
    let puts = 0;
    const counted = new Proxy(requests, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (typeof v !== 'function') return v;
        return (...args: unknown[]) => {
          if (prop === 'put') puts++;
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    }) as DynamoDbLoadRequests;
    const standIn = new RedshiftStandIn({ client: load, store, bucket: BUCKET });
    const loader = new StagedRedshiftLoader({
      session: {
        query: async (q) => {
          if (q.startsWith('COPY') && copyFails(q)) throw Object.assign(new Error('permission denied for relation'), { code: '42501' });
          return standIn.query(q);
        },
      },
      requests,
      place: { store, bucket: BUCKET },
      prefix: `cdc/${sinkId}/`,
      roleArn: ROLE,
      ledgerSchema: `${sinkId}_loads`,
      cadence: { loadEveryMs: 20, mergeEveryMs: 3_600_000 },
      loaderTimeoutMs: 60_000,
    });
    let queue: Promise<unknown> = Promise.resolve();
    const submitter = new RedshiftStagingSubmitter({
      session: new RedshiftStandIn({ client: appl, store, bucket: BUCKET }),
      requests: counted,
      place: { store, bucket: BUCKET },
      prefix: `cdc/${sinkId}/`,
      invokeLoader: async () => void (queue = queue.then(() => loader.invoke(30_000)).catch(() => undefined)),
      waitMs: 20_000,
      pollMs: 20,
      ...(policyOf ? { policyOf } : {}),
    });
    const memory = new MemoryControlPlane();
    await registerTables(memory, sinkId, TABLES, COLUMNS);
    const applier = quietApplier(memory, pool, new RedshiftWarehouse({ loader: submitter, ...(policyOf ? { policyOf } : {}) }));
    const records = (events: ChangeEvent[]): ChangeRecord[] =>
      events.map((e, i) => ({ sequenceNumber: String(1000 + i), origin: `s/shard-0/${1000 + i}`, text: JSON.stringify(e) }));
    const loads = async (): Promise<number> =>
      Number((await load.query(`SELECT count(*) AS n FROM ${rsQualified(`${sinkId}_loads`, LEDGER_TABLE)}`)).rows[0].n);
    const notes = async (table: string): Promise<string[]> => {
      const t = warehouseTable(sinkId, table);
      const exists = await load.query('SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2', [
        t.schema,
        t.view,
      ]);
      if (exists.rowCount === 0) return [];
      return (await load.query(`SELECT note FROM ${rsQualified(t.schema, t.view)} ORDER BY id`)).rows.map((r: { note: string }) => r.note);
    };
    const marked = async (table: string): Promise<{ id: string; note: string | null; unheld: string | null }[]> => {
      const t = warehouseTable(sinkId, table);
      return (await load.query(`SELECT id, note, ${UNHELD_COLUMN} AS unheld FROM ${rsQualified(t.schema, t.view)} ORDER BY id`)).rows;
    };
    return { applier, memory, records, loads, notes, marked, puts: () => puts };
  }

  const event = (source: string, table: string, id: number): ChangeEvent => ({
    v: ENVELOPE_VERSION,
    source,
    table,
    op: 'insert',
    key: { id },
    before: null,
    after: { id, note: `${table}#${id}` },
    missing: [],
    position: makePosition(BigInt(id) * 0x100n, 0),
    commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, id)).toISOString(),
    txId: String(id),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  });

  it('records one load request for the batch, and one load carries every table', async () => {
    const s = await sink('one');
    const events = TABLES.flatMap((table, n) => [event('one', table, 10 * n + 1), event('one', table, 10 * n + 2)]);
    const outcome = await s.applier.applyRecords(s.records(events));
    expect(outcome.failed).toEqual([]);
    expect(s.puts(), 'one request for three tables').toBe(1);
    expect(await s.loads(), 'one load').toBe(1);
    for (const [n, table] of TABLES.entries()) expect(await s.notes(table)).toEqual([`${table}#${10 * n + 1}`, `${table}#${10 * n + 2}`]);
  }, 120_000);

  it('a table whose COPY fails alone is named and held; nothing of the batch loaded with it, the other tables load on the next delivery', async () => {
    const b = warehouseTable('two', 'public.b');
    const s = await sink('two', (q) => q.includes(`cdc_copy_${b.changelog}`.toLowerCase()));
    const events = TABLES.flatMap((table, n) => [event('two', table, 10 * n + 1)]);
    const first = await s.applier.applyRecords(s.records(events));
    // Table b is held (a persistent error, 42501, named on it): its record is acknowledged as held. a and c come again.
    const again = s.records(events).filter((r) => first.failed.includes(r.sequenceNumber));
    expect(again.map((r) => (JSON.parse(r.text) as ChangeEvent).table).sort()).toEqual(['public.a', 'public.c']);
    expect(await s.loads(), 'nothing loaded with the failing table').toBe(0);
    const held = (await s.memory.listSinkProgress()).filter((p) => p.heldFrom !== null).map((p) => p.table);
    expect(held).toEqual(['public.b']);
    const second = await s.applier.applyRecords(again);
    expect(second.failed).toEqual([]);
    expect(await s.loads()).toBe(1);
    expect(await s.notes('public.a')).toEqual(['public.a#1']);
    expect(await s.notes('public.c')).toEqual(['public.c#21']);
  }, 120_000);

  it('a value held as NULL with a marker keeps its marker when a partial update or a key change takes it from the warehouse', async () => {
    const policy = (_t: string, c: string): ValuePolicy => (c === 'note' ? 'null-with-marker' : 'refuse-row');
    const s = await sink('marks', () => false, policy);
    const long = 'é'.repeat(32_768); // 65,536 bytes: over Redshift's VARCHAR, though 32,768 characters
    const at = (e: ChangeEvent, n: number): ChangeEvent => ({ ...e, position: makePosition(BigInt(n) * 0x100n, 0), txId: String(n) });
    const first = [
      { ...event('marks', 'public.a', 1), after: { id: 1, note: long } },
      { ...event('marks', 'public.a', 2), after: { id: 2, note: 'short' } },
      { ...event('marks', 'public.a', 4), after: { id: 4, note: long } },
    ];
    expect((await s.applier.applyRecords(s.records(first))).failed).toEqual([]);
    const marked = { note: null, unheld: 'note:too-long' };
    expect(await s.marked('public.a')).toEqual([
      { id: '1', ...marked },
      { id: '2', note: 'short', unheld: null },
      { id: '4', ...marked },
    ]);
    // A partial update of 1 (the note unchanged, not delivered), a partial update of 2, and the key change 4 -> 5 lacking the note.
    const base = event('marks', 'public.a', 1);
    const second: ChangeEvent[] = [
      at({ ...base, op: 'update', key: { id: 1 }, after: { id: 1 }, missing: ['note'] }, 10),
      at({ ...base, op: 'update', key: { id: 2 }, after: { id: 2 }, missing: ['note'] }, 11),
      at({ ...base, op: 'delete', key: { id: 4 }, after: null, before: { id: 4 }, handover: ['note'] }, 12),
      at({ ...base, op: 'insert', key: { id: 5 }, after: { id: 5 }, before: { id: 4 }, missing: ['note'] }, 12),
    ];
    // The halves one batch after the other (the delete's shard first), so the insert half reads the changelog.
    expect((await s.applier.applyRecords(s.records(second.slice(0, 3)))).failed).toEqual([]);
    expect((await s.applier.applyRecords(s.records(second.slice(3)))).failed).toEqual([]);
    expect(await s.marked('public.a')).toEqual([
      { id: '1', ...marked },
      { id: '2', note: 'short', unheld: null },
      { id: '5', ...marked },
    ]);
    // A chain in one batch: 5 -> 7 (completed from the changelog, marked), then 7 -> 8, completed from the batch's own image of 7.
    const third: ChangeEvent[] = [
      at({ ...base, op: 'delete', key: { id: 5 }, after: null, before: { id: 5 }, handover: ['note'] }, 20),
      at({ ...base, op: 'insert', key: { id: 7 }, after: { id: 7 }, before: { id: 5 }, missing: ['note'] }, 20),
      at({ ...base, op: 'delete', key: { id: 7 }, after: null, before: { id: 7 }, handover: ['note'] }, 21),
      at({ ...base, op: 'insert', key: { id: 8 }, after: { id: 8 }, before: { id: 7 }, missing: ['note'] }, 21),
    ];
    expect((await s.applier.applyRecords(s.records(third))).failed).toEqual([]);
    expect(await s.marked('public.a')).toEqual([
      { id: '1', ...marked },
      { id: '2', note: 'short', unheld: null },
      { id: '8', ...marked },
    ]);
  }, 120_000);
});
