/**
 * A Redshift table made by an older schema version, after a restart (docs/warehouse-apply.md,
 * "Redshift: schema changes"): a process that first sees a table reads the columns the cluster has
 * and evolves from them. Version 1 is loaded by one writer and loader; version 2 (a column added, a
 * VARCHAR widened) by a NEW writer and loader, as after a restart or on a cold Lambda container: its
 * rows arrive with the new column and the long value, with no hold and no dead letter. In one process
 * (`RedshiftLoader`) and on the AWS path (`RedshiftStagingSubmitter` + `StagedRedshiftLoader`, load
 * requests on DynamoDB Local). A type change evolve refuses still holds the table. Through the Redshift
 * stand-in on embedded PostgreSQL, a folder as S3; every statement sent passes the Redshift grammar check.
 */
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbLoadRequests } from '../../lambda/adapters/control-plane-dynamodb/load-requests.ts';
import { RedshiftLoader, type RedshiftSession } from '../../lambda/adapters/redshift-loader.ts';
import { StagedRedshiftLoader } from '../../lambda/adapters/redshift-staged-loader.ts';
import { RedshiftStagingSubmitter } from '../../lambda/adapters/redshift-staging-submitter.ts';
import { RedshiftWarehouse, redshiftTableOf } from '../../lambda/adapters/warehouse-redshift.ts';
import type { BatchOutcome, ChangeRecord } from '../../lambda/handlers/warehouse-applier.ts';
import type { ColumnDef } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { existingTable, type CatalogColumn } from '../../lambda/core/warehouse/redshift-catalog.ts';
import { createTableSql, existingColumnsSql, RedshiftTypeChangeError, rsQualified, type RedshiftTable } from '../../lambda/core/warehouse/redshift-sql.ts';
import { redshiftColumn } from '../../lambda/core/warehouse/redshift-types.ts';
import { warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { FolderArchive } from '../../local/archive.ts';
import { type DynamoDbLocal } from '../../local/dynamodb.ts';
import { RedshiftStandIn } from '../../local/redshift-standin.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { useRedshiftFixture } from '../helpers/redshift-fixture.ts';
import { applyWhileLoading, quietApplier } from '../helpers/registered-applier.ts';
import { redshiftProblems } from '../helpers/redshift-grammar.ts';

const TABLE = 'public.items';
const BUCKET = 'staging';
const ROLE = 'arn:aws:iam::123456789012:role/cdc-copy';
const V1: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'code', type: 'varchar(4)', nullable: true },
  { name: 'qty', type: 'integer', nullable: true },
];
/** Version 2: `code` widened (varchar(16) → varchar(160) on Redshift, in bytes), `note` added. */
const V2: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'code', type: 'varchar(40)', nullable: true },
  { name: 'qty', type: 'integer', nullable: true },
  { name: 'note', type: 'text', nullable: true },
];
/** A version 2 the Redshift table cannot follow: `qty` from bigint to text. */
const V2_RETYPED: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'code', type: 'varchar(4)', nullable: true },
  { name: 'qty', type: 'text', nullable: true },
];
const LONG = 'x'.repeat(40);

let seq = 0;
function event(sourceId: string, version: number, op: 'insert' | 'update', after: Row, missing: string[] = []): ChangeEvent {
  const n = ++seq;
  return {
    v: ENVELOPE_VERSION,
    source: sourceId,
    table: TABLE,
    op,
    key: { id: after.id! },
    before: null,
    after,
    missing,
    position: makePosition(BigInt(n) * 0x100n, 0),
    commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString(),
    txId: String(n),
    schemaVersion: version,
    capture: 'slot',
    synthetic: false,
  };
}

/** The control plane of one source: the table at version 1, then `v2` registered. */
async function controlPlane(sourceId: string, v2: ColumnDef[]): Promise<MemoryControlPlane> {
  const memory = new MemoryControlPlane();
  const at = new Date().toISOString();
  const schema = (version: number, columns: ColumnDef[]) => ({
    source: sourceId,
    table: TABLE,
    version,
    columns,
    key: ['id'],
    effectivePosition: makePosition(0n, 0),
    registeredAt: at,
  });
  await memory.registerTable(
    { source: sourceId, table: TABLE, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
    schema(1, V1),
    { at, actor: 'test', action: 'register-table', source: sourceId, table: TABLE, outcome: 'done', detail: {} },
  );
  await memory.addSchemaVersion(schema(2, v2), { at, actor: 'test', action: 'schema-change', source: sourceId, table: TABLE, outcome: 'done', detail: {} });
  return memory;
}

describe('a Redshift table made by an older schema version, after a restart (stand-in, embedded PostgreSQL)', () => {
  const f = useRedshiftFixture({ database: 'rse', clients: 3, dynamo: true });
  const clients = f.clients;
  let ddb: DynamoDbLocal;
  let pool: pg.Pool;
  let folder: string;
  const statements: string[] = [];
  beforeAll(() => void ([ddb, pool, folder] = [f.ddb, f.pool, f.folder]));

  afterAll(async () => {
    const problems = [...new Set(statements)].flatMap((s) => redshiftProblems(s).map((p) => `${p}: ${s.slice(0, 160)}`));
    expect(problems).toEqual([]);
  });

  /** A session on `client` through the stand-in, every statement recorded for the grammar check. */
  const session = (client: pg.Client): RedshiftSession => {
    const standIn = new RedshiftStandIn({ client, store: new FolderArchive(folder), bucket: BUCKET });
    return { query: (q) => (statements.push(q), standIn.query(q)) };
  };

  const applier = (memory: MemoryControlPlane, writer: RedshiftWarehouse) => quietApplier(memory, pool, writer);

  const records = (events: ChangeEvent[]): ChangeRecord[] =>
    events.map((e, i) => ({ sequenceNumber: String(1000 + i), origin: `s/shard-0/${1000 + i}`, text: JSON.stringify(e) }));

  interface Process {
    apply(events: ChangeEvent[]): Promise<BatchOutcome>;
    loader: RedshiftLoader;
    evolveErrors: unknown[];
  }

  /** A process of `cdc local`: a new in-process loader and writer; each batch applied while the loader's cadence (squeezed) runs. */
  function startProcess(sourceId: string, memory: MemoryControlPlane, client = clients[0]!): Process {
    const loader = new RedshiftLoader({
      session: session(client),
      store: new FolderArchive(folder),
      bucket: BUCKET,
      prefix: `cdc/${sourceId}/`,
      roleArn: ROLE,
      ledgerSchema: `${sourceId}_loads`,
    });
    const evolveErrors: unknown[] = [];
    const evolve = loader.evolve.bind(loader);
    loader.evolve = (from, to) =>
      evolve(from, to).catch((err: unknown) => {
        evolveErrors.push(err);
        throw err;
      });
    const writer = applier(memory, new RedshiftWarehouse({ loader }));
    const apply = (events: ChangeEvent[]): Promise<BatchOutcome> => applyWhileLoading(writer, records(events), () => loader.flush());
    return { apply, loader, evolveErrors };
  }

  async function inProcess(
    sourceId: string,
    memory: MemoryControlPlane,
    ...batches: ChangeEvent[][]
  ): Promise<{ outcomes: BatchOutcome[]; loader: RedshiftLoader; evolveErrors: unknown[] }> {
    const p = startProcess(sourceId, memory);
    const outcomes: BatchOutcome[] = [];
    for (const events of batches) outcomes.push(await p.apply(events));
    return { outcomes, loader: p.loader, evolveErrors: p.evolveErrors };
  }

  const view = async (sourceId: string): Promise<Record<string, unknown>[]> => {
    const t = warehouseTable(sourceId, TABLE);
    return (await clients[2]!.query(`SELECT * FROM ${rsQualified(t.schema, t.view)} ORDER BY id`)).rows.map((r: Record<string, unknown>) => ({
      id: Number(r.id),
      code: r.code,
      qty: r.qty === null ? null : Number(r.qty),
      note: r.note,
    }));
  };

  const version1 = (sourceId: string): ChangeEvent[] => [
    event(sourceId, 1, 'insert', { id: 1, code: 'ab', qty: 1 }),
    event(sourceId, 1, 'insert', { id: 2, code: 'cd', qty: 2 }),
  ];
  /** Version 2: a new row with the long value and a note, an update of each earlier row (one without `code`, completed from the view). */
  const version2 = (sourceId: string): ChangeEvent[] => [
    event(sourceId, 2, 'insert', { id: 3, code: LONG, qty: 3, note: 'new' }),
    event(sourceId, 2, 'update', { id: 1, code: 'y'.repeat(30), qty: 10, note: 'n1' }),
    event(sourceId, 2, 'update', { id: 2, qty: 20, note: 'n2' }, ['code']),
  ];
  const expected = [
    { id: 1, code: 'y'.repeat(30), qty: 10, note: 'n1' },
    { id: 2, code: 'cd', qty: 20, note: 'n2' },
    { id: 3, code: LONG, qty: 3, note: 'new' },
  ];

  /** No hold, no dead letter: the batch went through whole. */
  const clean = async (memory: MemoryControlPlane, outcome: BatchOutcome): Promise<void> => {
    expect(outcome.failed, 'records failed (the batch would be retried)').toEqual([]);
    expect(await memory.listDeadLetters()).toEqual([]);
    expect(memory.calls.get('holdSinkTable') ?? 0, 'holds').toBe(0);
  };

  /** The declared type of each column of the table's changelog, as the catalog read gives it. */
  const columnTypes = async (sourceId: string): Promise<Record<string, string>> => {
    const t = warehouseTable(sourceId, TABLE);
    const r: RedshiftTable = { t, key: [], data: [], hard: false };
    const rows = (await session(clients[2]!).query(existingColumnsSql(r))).rows.filter((x) => x.table_name === t.changelog.toLowerCase());
    return Object.fromEntries(
      rows
        .filter((x) => ['code', 'qty', 'note'].includes(String(x.column_name)))
        .map((x) => [String(x.column_name), `${String(x.data_type)}${x.character_maximum_length === null ? '' : `(${String(x.character_maximum_length)})`}`]),
    );
  };

  it("the stand-in's catalog answers as Redshift's: a table of every type the dialect makes reads back as made", async () => {
    const types = [
      'integer',
      'double precision',
      'numeric(12,4)',
      'boolean',
      'date',
      'timestamp',
      'timestamptz',
      'time',
      'timetz',
      'varchar(7)',
      'text',
      'jsonb',
      'bytea',
    ];
    const want: RedshiftTable = {
      t: warehouseTable('cat', 'public.AllTypes'),
      key: [redshiftColumn('Id', 'bigint')],
      data: types.map((type, i) => redshiftColumn(`c${i}`, type)),
      hard: true,
    };
    const s = session(clients[2]!);
    expect(existingTable(want, (await s.query(existingColumnsSql(want))).rows as unknown as CatalogColumn[])).toBeNull();
    for (const q of createTableSql(want)) await s.query(q);
    expect(existingTable(want, (await s.query(existingColumnsSql(want))).rows as unknown as CatalogColumn[])).toEqual(want);
  }, 60_000);

  it('in one process: version 2 after a restart adds the column, widens the VARCHAR and loads, no hold, no dead letter', async () => {
    const memory = await controlPlane('rp', V2);
    const first = await inProcess('rp', memory, version1('rp'));
    await clean(memory, first.outcomes[0]!);
    expect((await first.loader.merge()).tables).toBe(1);
    expect(await columnTypes('rp')).toEqual({ code: 'character varying(16)', qty: 'bigint' });

    // The restart: a new loader and writer, which have never seen the table.
    const before = statements.length;
    const second = await inProcess('rp', memory, version2('rp'));
    await clean(memory, second.outcomes[0]!);
    expect(await view('rp')).toEqual(expected);
    // Read once, evolved once: the catalog, the added column (changelog, base and handover table), the widening (the same three).
    const sent = statements.slice(before);
    expect(sent.filter((q) => /FROM svv_columns/.test(q))).toHaveLength(1);
    expect(sent.filter((q) => /ADD COLUMN "note"/.test(q))).toHaveLength(3);
    expect(sent.filter((q) => /ALTER COLUMN "code" TYPE varchar\(160\)/.test(q))).toHaveLength(3);
    expect(await columnTypes('rp')).toEqual({ code: 'character varying(160)', qty: 'bigint', note: 'character varying(65535)' });
    // The new loader knows the table for its merges.
    expect((await second.loader.merge()).tables).toBe(1);
    expect(await view('rp')).toEqual(expected);

    // A process that meets version 1 events after version 2 (another shard's, late), then version 2 again: nothing evolves twice.
    const mixed = [event('rp', 1, 'insert', { id: 4, code: 'ok', qty: 4 })];
    const after = statements.length;
    const third = await inProcess('rp', memory, version2('rp').slice(0, 1), [event('rp', 2, 'insert', { id: 5, code: 'z', qty: 5, note: 'five' })], mixed);
    for (const o of third.outcomes) await clean(memory, o);
    expect(statements.slice(after).filter((q) => /^(ALTER|DROP VIEW)/.test(q))).toEqual([]);
    const all = [
      ...expected.slice(0, 2),
      { id: 3, code: LONG, qty: 3, note: 'new' },
      { id: 4, code: 'ok', qty: 4, note: null },
      { id: 5, code: 'z', qty: 5, note: 'five' },
    ];
    expect(await view('rp')).toEqual(all);
    // The merge after the older version's batch carries every column the table has: version 2's note is merged too.
    expect((await third.loader.merge()).tables).toBe(1);
    expect(await view('rp')).toEqual(all);
  }, 120_000);

  it('in one process: a type change evolve refuses after a restart holds the table (SINK_TYPE_CONFLICT), nothing is changed', async () => {
    const memory = await controlPlane('rt', V2_RETYPED);
    await clean(memory, (await inProcess('rt', memory, version1('rt'))).outcomes[0]!);
    const before = statements.length;
    const second = await inProcess('rt', memory, [event('rt', 2, 'insert', { id: 5, code: 'zz', qty: 'five' })]);
    expect(second.outcomes[0]!.failed, 'held, not retried').toEqual([]);
    expect(memory.calls.get('holdSinkTable') ?? 0).toBeGreaterThan(0);
    expect((await memory.getSinkProgress('warehouse', 'rt', TABLE))?.heldFrom).not.toBeNull();
    expect(second.evolveErrors).toHaveLength(1);
    expect(second.evolveErrors[0]).toBeInstanceOf(RedshiftTypeChangeError);
    expect((second.evolveErrors[0] as RedshiftTypeChangeError).code).toBe('SINK_TYPE_CONFLICT');
    expect((second.evolveErrors[0] as Error).message).toMatch(/qty: the Redshift column is bigint and the new schema version needs varchar\(65535\)/);
    expect(statements.slice(before).filter((s) => /^(ALTER|DROP|COPY)/.test(s))).toEqual([]);
    expect(await columnTypes('rt')).toEqual({ code: 'character varying(16)', qty: 'bigint' });
    expect(await memory.listDeadLetters()).toEqual([]);
  }, 120_000);

  it('a process whose table another process evolved meanwhile: its evolve fails once, the next try plans from the cluster', async () => {
    const memory = await controlPlane('rr', V2);
    const a = startProcess('rr', memory, clients[0]!);
    await clean(memory, await a.apply(version1('rr')));
    // Another process (a restart elsewhere, another shard's container) evolves the table to version 2.
    await clean(memory, (await inProcess('rr', memory, [event('rr', 2, 'insert', { id: 7, code: LONG, qty: 7, note: 'b' })])).outcomes[0]!);
    // The first process still knows version 1: its ADD COLUMN fails, the batch is retried (not held), and the retry loads.
    const batch = [event('rr', 2, 'insert', { id: 8, code: 'a8', qty: 8, note: 'a' })];
    const failed = await a.apply(batch);
    expect(failed.failed, 'retried').toHaveLength(1);
    expect(a.evolveErrors).toHaveLength(1);
    expect((a.evolveErrors[0] as { code?: string }).code, 'column already exists').toBe('42701');
    await clean(memory, await a.apply(batch));
    expect((await view('rr')).map((r) => [r.id, r.note])).toEqual([
      [1, null],
      [2, null],
      [7, 'b'],
      [8, 'a'],
    ]);
  }, 120_000);

  it("in one process: one load carries two schema versions' events of a table (two shards at different versions), each COPY naming its own columns", async () => {
    const memory = await controlPlane('rm', V2);
    const p = startProcess('rm', memory);
    await clean(memory, await p.apply(version1('rm')));
    await clean(memory, await p.apply([event('rm', 2, 'insert', { id: 3, code: LONG, qty: 3, note: 'new' })]));
    const target = warehouseTable('rm', TABLE);
    const [v1, v2] = await Promise.all([1, 2].map(async (n) => redshiftTableOf(target, (await memory.getSchemaVersion('rm', TABLE, n))!, false)));
    const loads = [
      p.loader.submit(v2!, [event('rm', 2, 'insert', { id: 5, code: 'z', qty: 5, note: 'five' })]),
      p.loader.submit(v1!, [event('rm', 1, 'insert', { id: 4, code: 'ok', qty: 4 })]),
    ];
    const stats = await p.loader.flush();
    expect(stats?.tables, 'one load, a COPY per column list').toBe(2);
    expect((await Promise.all(loads)).map((r) => r.loaded)).toEqual([1, 1]);
    // The merge after both takes every column: version 2's note is merged too.
    expect((await p.loader.merge()).tables).toBe(1);
    expect((await view('rm')).map((r) => [r.id, r.note])).toEqual([
      [1, null],
      [2, null],
      [3, 'new'],
      [4, null],
      [5, 'five'],
    ]);
  }, 120_000);

  it('in one process: a table made in soft mode, loaded in hard mode after a restart, gets its remembered deletions', async () => {
    const memory = await controlPlane('rh', V2);
    await clean(memory, (await inProcess('rh', memory, version1('rh'))).outcomes[0]!);
    memory.setDeleteMode('rh', TABLE, 'hard');
    const del: ChangeEvent = { ...event('rh', 1, 'insert', { id: 1 }), op: 'delete', after: null };
    const second = await inProcess('rh', memory, [del]);
    await clean(memory, second.outcomes[0]!);
    expect((await second.loader.merge()).tables).toBe(1);
    const t = warehouseTable('rh', TABLE);
    expect((await clients[2]!.query(`SELECT id FROM ${rsQualified(t.schema, t.deletedKeys)}`)).rows.map((r: { id: string }) => Number(r.id))).toEqual([1]);
    expect((await view('rh')).map((r) => r.id)).toEqual([2]);
  }, 120_000);

  it('on AWS: a cold applier (a new staging submitter) evolves the table from the cluster and its request loads', async () => {
    const sourceId = 'ra';
    const requests = new DynamoDbLoadRequests(dynamoDbClient(ddb.endpoint), 'control', 'aws');
    const store = new FolderArchive(folder);
    // The loader function: one invocation at a time, in-process.
    let queue: Promise<void> = Promise.resolve();
    const invoke = (mergeEveryMs = 3_600_000): Promise<void> =>
      (queue = queue.then(async () => {
        const loader = new StagedRedshiftLoader({
          session: session(clients[0]!),
          requests,
          place: { store, bucket: BUCKET },
          prefix: 'cdc/aws/',
          roleArn: ROLE,
          ledgerSchema: 'aws_loads',
          cadence: { loadEveryMs: 20, mergeEveryMs },
          loaderTimeoutMs: 60_000,
        });
        await loader.invoke(1_000);
      }));
    /** A cold applier container: its own session and submitter. */
    const coldApplier = (memory: MemoryControlPlane) =>
      applier(
        memory,
        new RedshiftWarehouse({
          loader: new RedshiftStagingSubmitter({
            session: session(clients[1]!),
            requests,
            place: { store, bucket: BUCKET },
            prefix: 'cdc/aws/',
            invokeLoader: async () => void invoke(),
            waitMs: 20_000,
            pollMs: 20,
          }),
        }),
      );
    const memory = await controlPlane(sourceId, V2);
    await clean(memory, await coldApplier(memory).applyRecords(records(version1(sourceId))));
    expect(await columnTypes(sourceId)).toEqual({ code: 'character varying(16)', qty: 'bigint' });

    await clean(memory, await coldApplier(memory).applyRecords(records(version2(sourceId))));
    expect(await view(sourceId)).toEqual(expected);
    expect(await columnTypes(sourceId)).toEqual({ code: 'character varying(160)', qty: 'bigint', note: 'character varying(65535)' });
    // Merged by the loader function, from the newest definition its requests carried.
    await invoke(0);
    await queue;
    const t = warehouseTable(sourceId, TABLE);
    const mirror = await clients[2]!.query(`SELECT id, code, note FROM ${rsQualified(t.schema, t.mirror)} ORDER BY id`);
    expect(mirror.rows.map((r: Record<string, unknown>) => [Number(r.id), r.code, r.note])).toEqual(expected.map((e) => [e.id, e.code, e.note]));
    expect(await view(sourceId)).toEqual(expected);
  }, 120_000);
});
