/** The DynamoDB control plane against DynamoDB Local: every port method, atomicity, races, monotonic progress. */
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { CreateTableCommand, DeleteItemCommand, PutItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { createControlTable, DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import {
  DEAD_LETTER_RECORD_MAX_BYTES,
  type AuditEntry,
  type DeadLetter,
  type SchemaVersion,
  type TableRecord,
} from '../../lambda/core/shared/control-plane.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';

let ddb: DynamoDbLocal;
let client: DynamoDBClient;
let cp: DynamoDbControlPlane;
let tableName: string;

beforeAll(async () => {
  ddb = await startDynamoDbLocal();
  client = dynamoDbClient(ddb.endpoint);
});
afterAll(async () => {
  client?.destroy();
  await ddb?.stop();
});
beforeEach(async () => {
  tableName = `ctl-${randomUUID()}`;
  await createControlTable(client, tableName);
  cp = new DynamoDbControlPlane(client, tableName);
});

const pos = (lsn: number, index = 0) => makePosition(BigInt(lsn), index);
const now = () => new Date().toISOString();

function tableRecord(table = 'public.orders', source = 'shop'): TableRecord {
  return { source, table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: now() };
}
function schema(version: number, table = 'public.orders', source = 'shop', extra: string[] = []): SchemaVersion {
  return {
    source,
    table,
    version,
    columns: [
      { name: 'id', type: 'integer', nullable: false },
      { name: 'note', type: null, nullable: true },
      ...extra.map((n) => ({ name: n, type: 'text', nullable: true })),
    ],
    key: ['id'],
    effectivePosition: pos(100 * version),
    registeredAt: now(),
  };
}
function audit(action: string, table: string | null = 'public.orders', source: string | null = 'shop', detail: Record<string, unknown> = {}): AuditEntry {
  return { at: now(), actor: 'test', action, source, table, outcome: 'done', detail };
}

describe('createControlTable', () => {
  it('is idempotent on an existing control table', async () => {
    await expect(createControlTable(client, tableName)).resolves.toBeUndefined();
  });

  it('refuses an existing table whose key is not pk + sk', async () => {
    const name = `wrong-${randomUUID()}`;
    await client.send(
      new CreateTableCommand({
        TableName: name,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [{ AttributeName: 'id', AttributeType: 'S' }],
        KeySchema: [{ AttributeName: 'id', KeyType: 'HASH' }],
      }),
    );
    await expect(createControlTable(client, name)).rejects.toThrow(/not pk \(HASH\) \+ sk \(RANGE\)/);
  });
});

describe('tables and schema versions', () => {
  it('registers a table with its first version and an audit entry, atomically', async () => {
    expect(await cp.getTable('shop', 'public.orders')).toBeNull();
    const t = tableRecord();
    const s = schema(1);
    expect(await cp.registerTable(t, s, audit('register-table', 'public.orders', 'shop', { version: 1 }))).toBe(true);
    expect(await cp.getTable('shop', 'public.orders')).toEqual(t);
    expect(await cp.getSchemaVersion('shop', 'public.orders', 1)).toEqual(s);
    expect(await cp.listSchemaVersions('shop', 'public.orders')).toEqual([s]);
    const entries = await cp.listAudit('shop', 'public.orders');
    expect(entries).toHaveLength(1);
    expect(entries[0]).toMatchObject({ action: 'register-table', actor: 'test', outcome: 'done', detail: { version: 1 } });
  });

  it('a second registration of the same table changes nothing and returns false', async () => {
    expect(await cp.registerTable(tableRecord(), schema(1), audit('register-table'))).toBe(true);
    const other = { ...tableRecord(), deleteMode: 'hard' as const };
    const otherSchema = { ...schema(1), key: ['note'] };
    expect(await cp.registerTable(other, otherSchema, audit('register-table'))).toBe(false);
    expect((await cp.getTable('shop', 'public.orders'))?.deleteMode).toBe('soft');
    expect((await cp.getSchemaVersion('shop', 'public.orders', 1))?.key).toEqual(['id']);
    expect(await cp.listAudit()).toHaveLength(1);
  });

  it('of racing registrations exactly one wins', async () => {
    const results = await Promise.all(Array.from({ length: 8 }, () => cp.registerTable(tableRecord(), schema(1), audit('register-table'))));
    expect(results.filter(Boolean)).toHaveLength(1);
    expect(await cp.listAudit()).toHaveLength(1);
    expect(await cp.listSchemaVersions('shop', 'public.orders')).toHaveLength(1);
  });

  it('refuses a registration whose schema and table records disagree', async () => {
    await expect(cp.registerTable(tableRecord(), schema(1, 'public.other'), audit('x'))).rejects.toThrow(/schema version is for shop\/public.other/);
    await expect(cp.registerTable(tableRecord(), schema(2), audit('x'))).rejects.toThrow(/current version 1 but the schema version is 2/);
    await expect(cp.registerTable(tableRecord(), { ...schema(1), effectivePosition: 'zz' }, audit('x'))).rejects.toThrow(/effectivePosition/);
    expect(await cp.getTable('shop', 'public.orders')).toBeNull();
  });

  it("keeps a table's capture method and position space, and reads a record without them as before (docs/architecture.md §5.2)", async () => {
    await cp.registerTable(
      { ...tableRecord('public.polled'), capture: 'poll', positionSpace: 'poll-timestamp' },
      schema(1, 'public.polled'),
      audit('r', 'public.polled'),
    );
    await cp.registerTable({ ...tableRecord('public.logged'), positionSpace: 'wal' }, schema(1, 'public.logged'), audit('r', 'public.logged'));
    await cp.registerTable(tableRecord('public.old'), schema(1, 'public.old'), audit('r', 'public.old'));
    expect(await cp.getTable('shop', 'public.polled')).toMatchObject({ capture: 'poll', positionSpace: 'poll-timestamp' });
    expect((await cp.getTable('shop', 'public.logged'))!.positionSpace).toBe('wal');
    const old = (await cp.getTable('shop', 'public.old'))!;
    expect('positionSpace' in old || 'capture' in old).toBe(false);
    // A state change keeps them.
    await cp.setTableState('shop', 'public.polled', 'paused', 'test', audit('pause', 'public.polled'));
    expect(await cp.getTable('shop', 'public.polled')).toMatchObject({ state: 'paused', capture: 'poll', positionSpace: 'poll-timestamp' });
  });

  it('lists tables of one source and of all sources', async () => {
    await cp.registerTable(tableRecord('public.b'), schema(1, 'public.b'), audit('r', 'public.b'));
    await cp.registerTable(tableRecord('public.a'), schema(1, 'public.a'), audit('r', 'public.a'));
    await cp.registerTable(tableRecord('public.a', 'crm'), schema(1, 'public.a', 'crm'), audit('r', 'public.a', 'crm'));
    expect((await cp.listTables('shop')).map((t) => t.table)).toEqual(['public.a', 'public.b']);
    expect((await cp.listTables('crm')).map((t) => t.table)).toEqual(['public.a']);
    expect((await cp.listTables()).map((t) => `${t.source}/${t.table}`)).toEqual(['crm/public.a', 'shop/public.a', 'shop/public.b']);
    expect(await cp.listTables('nobody')).toEqual([]);
  });

  it('adds schema versions only on top of the current one', async () => {
    await cp.registerTable(tableRecord(), schema(1), audit('register-table'));
    const v2 = schema(2, 'public.orders', 'shop', ['extra']);
    expect(await cp.addSchemaVersion(v2, audit('add-schema-version', 'public.orders', 'shop', { version: 2 }))).toBe(true);
    expect((await cp.getTable('shop', 'public.orders'))?.currentVersion).toBe(2);
    expect(await cp.getSchemaVersion('shop', 'public.orders', 2)).toEqual(v2);
    // Another writer that also thought version 1 was current loses, and leaves no trace.
    expect(await cp.addSchemaVersion(schema(2, 'public.orders', 'shop', ['other']), audit('add-schema-version'))).toBe(false);
    expect(await cp.getSchemaVersion('shop', 'public.orders', 2)).toEqual(v2);
    // A version that skips one is refused the same way.
    expect(await cp.addSchemaVersion(schema(4), audit('add-schema-version'))).toBe(false);
    expect(await cp.getSchemaVersion('shop', 'public.orders', 4)).toBeNull();
    expect((await cp.listSchemaVersions('shop', 'public.orders')).map((s) => s.version)).toEqual([1, 2]);
    expect((await cp.listAudit()).map((a) => a.action)).toEqual(['register-table', 'add-schema-version']);
  });

  it('of racing schema versions exactly one wins', async () => {
    await cp.registerTable(tableRecord(), schema(1), audit('register-table'));
    const results = await Promise.all(
      Array.from({ length: 8 }, (_, i) => cp.addSchemaVersion(schema(2, 'public.orders', 'shop', [`c${i}`]), audit('add-schema-version'))),
    );
    expect(results.filter(Boolean)).toHaveLength(1);
    const winner = results.indexOf(true);
    expect((await cp.getSchemaVersion('shop', 'public.orders', 2))?.columns.map((c) => c.name)).toContain(`c${winner}`);
    expect((await cp.listAudit()).filter((a) => a.action === 'add-schema-version')).toHaveLength(1);
  });

  it('adding a version to a table that is not registered is a named error', async () => {
    await expect(cp.addSchemaVersion(schema(2), audit('add-schema-version'))).rejects.toMatchObject({ code: 'TABLE_NOT_REGISTERED' });
    await expect(cp.addSchemaVersion(schema(1), audit('add-schema-version'))).rejects.toThrow(/version 2 or later/);
    expect(await cp.listAudit()).toEqual([]);
  });

  it('versions sort numerically past 9', async () => {
    await cp.registerTable(tableRecord(), schema(1), audit('r'));
    for (let v = 2; v <= 11; v++) expect(await cp.addSchemaVersion(schema(v), audit('a'))).toBe(true);
    expect((await cp.listSchemaVersions('shop', 'public.orders')).map((s) => s.version)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    expect(await cp.getSchemaVersion('shop', 'public.orders', 0)).toBeNull();
  });

  it('changes a table state with its audit entry', async () => {
    await cp.registerTable(tableRecord(), schema(1), audit('register-table'));
    await cp.setTableState('shop', 'public.orders', 'paused', 'SCHEMA_BREAKING: column x was dropped', audit('pause-table'));
    expect(await cp.getTable('shop', 'public.orders')).toMatchObject({ state: 'paused', stateReason: 'SCHEMA_BREAKING: column x was dropped' });
    await cp.setTableState('shop', 'public.orders', 'active', null, audit('resume-table'));
    expect(await cp.getTable('shop', 'public.orders')).toMatchObject({ state: 'active', stateReason: null });
    expect((await cp.listAudit('shop', 'public.orders')).map((a) => a.action)).toEqual(['register-table', 'pause-table', 'resume-table']);
  });

  it('a failing state change leaves neither state nor audit entry', async () => {
    await expect(cp.setTableState('shop', 'public.ghost', 'paused', 'x', audit('pause-table', 'public.ghost'))).rejects.toMatchObject({
      code: 'TABLE_NOT_REGISTERED',
    });
    expect(await cp.getTable('shop', 'public.ghost')).toBeNull();
    expect(await cp.listAudit()).toEqual([]);
    await expect(cp.setTableState('shop', 'public.ghost', 'sleepy' as never, null, audit('x'))).rejects.toThrow(/table state must be one of/);
  });

  it('a registration that loses to an existing table writes no audit entry and no version', async () => {
    await cp.registerTable(tableRecord(), schema(1), audit('first'));
    await cp.setTableState('shop', 'public.orders', 'paused', 'r', audit('pause'));
    expect(await cp.registerTable(tableRecord(), schema(1), audit('second'))).toBe(false);
    expect((await cp.getTable('shop', 'public.orders'))?.state).toBe('paused');
    expect((await cp.listAudit()).map((a) => a.action)).toEqual(['first', 'pause']);
  });

  it('a schema version left without its table record is reported, not papered over', async () => {
    await client.send(
      new PutItemCommand({
        TableName: tableName,
        Item: { pk: { S: 'SCHEMA#shop#public.orders' }, sk: { S: 'V#000000001' }, source: { S: 'shop' } },
      }),
    );
    await expect(cp.registerTable(tableRecord(), schema(1), audit('r'))).rejects.toMatchObject({ code: 'CONTROL_PLANE_INCONSISTENT' });
    expect(await cp.getTable('shop', 'public.orders')).toBeNull();
    expect(await cp.listAudit()).toEqual([]);
    await client.send(new DeleteItemCommand({ TableName: tableName, Key: { pk: { S: 'SCHEMA#shop#public.orders' }, sk: { S: 'V#000000001' } } }));
  });
});

describe('sink progress', () => {
  it('is null before anything was applied', async () => {
    expect(await cp.getSinkProgress('wh', 'shop', 'public.orders')).toBeNull();
  });

  it('the applied high-water mark only rises', async () => {
    await cp.advanceSinkProgress('wh', 'shop', 'public.orders', pos(50));
    await cp.advanceSinkProgress('wh', 'shop', 'public.orders', pos(30));
    expect(await cp.getSinkProgress('wh', 'shop', 'public.orders')).toMatchObject({
      sink: 'wh',
      source: 'shop',
      table: 'public.orders',
      appliedPosition: pos(50),
      heldFrom: null,
    });
    await cp.advanceSinkProgress('wh', 'shop', 'public.orders', pos(50));
    await cp.advanceSinkProgress('wh', 'shop', 'public.orders', pos(50, 1));
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.appliedPosition).toBe(pos(50, 1));
  });

  it('concurrent advances end at the highest position', async () => {
    const positions = Array.from({ length: 30 }, (_, i) => pos(1000 + ((i * 7919) % 97), i));
    await Promise.all(positions.map((p) => cp.advanceSinkProgress('wh', 'shop', 'public.orders', p)));
    const highest = [...positions].sort().at(-1);
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.appliedPosition).toBe(highest);
  });

  it('refuses a position that is not canonical', async () => {
    await expect(cp.advanceSinkProgress('wh', 'shop', 'public.orders', '2/7C007178')).rejects.toThrow(/appliedPosition/);
    await expect(cp.holdSinkTable('wh', 'shop', 'public.orders', 'nope')).rejects.toThrow(/fromPosition/);
  });

  it('keeps the lowest held position until released, with an audit entry for the release', async () => {
    await cp.advanceSinkProgress('wh', 'shop', 'public.orders', pos(10));
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(20));
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(25));
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.heldFrom).toBe(pos(20));
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(15));
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.heldFrom).toBe(pos(15));
    await cp.releaseSinkTable('wh', 'shop', 'public.orders', audit('release-sink-table'));
    expect(await cp.getSinkProgress('wh', 'shop', 'public.orders')).toMatchObject({
      sink: 'wh',
      source: 'shop',
      table: 'public.orders',
      appliedPosition: pos(10),
      heldFrom: null,
    });
    expect((await cp.listAudit()).map((a) => a.action)).toEqual(['release-sink-table']);
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(40));
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.heldFrom).toBe(pos(40));
  });

  it('keeps the lowest held sequence number per shard with the hold count, atomically under racing holds, until released', async () => {
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(20), { 'shardId-000000000000': '200' });
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(30), { 'shardId-000000000000': '1000', 'shardId-000000000001': '99' });
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(25), { 'shardId-000000000001': '100' });
    expect(await cp.getSinkProgress('wh', 'shop', 'public.orders')).toMatchObject({
      heldFrom: pos(20),
      holdCount: 3,
      heldFromShards: { 'shardId-000000000000': '200', 'shardId-000000000001': '99' },
    });
    // Racing holds of several shards (the optimistic write retries): every shard and every count lands.
    await Promise.all(
      Array.from({ length: 8 }, (_, i) => cp.holdSinkTable('wh', 'shop', 'public.orders', pos(40 + i), { [`shardId-00000000001${i}`]: String(5 + i) })),
    );
    const p = await cp.getSinkProgress('wh', 'shop', 'public.orders');
    expect(p?.holdCount).toBe(11);
    expect(Object.keys(p?.heldFromShards ?? {})).toHaveLength(10);
    expect(await cp.completeSinkRelease('wh', 'shop', 'public.orders', { heldFrom: pos(20), holdCount: 10 }, audit('replay-held'))).toBe(false);
    expect(await cp.completeSinkRelease('wh', 'shop', 'public.orders', { heldFrom: pos(20), holdCount: 11 }, audit('replay-held'))).toBe(true);
    expect(await cp.getSinkProgress('wh', 'shop', 'public.orders')).toMatchObject({ heldFrom: null, heldFromShards: null });
    await cp.holdSinkTable('wh', 'shop', 'public.orders', pos(50), { 'shardId-000000000000': '5000' });
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.heldFromShards).toEqual({ 'shardId-000000000000': '5000' });
  });

  it('progress of one sink does not touch another sink or table', async () => {
    await cp.advanceSinkProgress('wh', 'shop', 'public.orders', pos(10));
    await cp.advanceSinkProgress('search', 'shop', 'public.orders', pos(5));
    await cp.holdSinkTable('wh', 'shop', 'public.items', pos(7));
    expect((await cp.getSinkProgress('wh', 'shop', 'public.orders'))?.appliedPosition).toBe(pos(10));
    expect((await cp.getSinkProgress('search', 'shop', 'public.orders'))?.appliedPosition).toBe(pos(5));
    expect(await cp.getSinkProgress('wh', 'shop', 'public.items')).toMatchObject({ appliedPosition: null, heldFrom: pos(7) });
  });
});

describe('checkpoints', () => {
  it('stores one sequence number per consumer and shard', async () => {
    expect(await cp.getCheckpoint('normalizer', 'shardId-000000000000')).toBeNull();
    await cp.putCheckpoint('normalizer', 'shardId-000000000000', '49590338271490256608559692538361571095921575989136588898');
    await cp.putCheckpoint('normalizer', 'shardId-000000000001', '1');
    await cp.putCheckpoint('wh', 'shardId-000000000000', '2');
    expect(await cp.getCheckpoint('normalizer', 'shardId-000000000000')).toBe('49590338271490256608559692538361571095921575989136588898');
    await cp.putCheckpoint('normalizer', 'shardId-000000000000', '3');
    expect(await cp.getCheckpoint('normalizer', 'shardId-000000000000')).toBe('3');
    expect(await cp.getCheckpoint('wh', 'shardId-000000000000')).toBe('2');
    await expect(cp.putCheckpoint('wh', 's', '')).rejects.toThrow(/sequenceNumber/);
  });
});

describe('audit', () => {
  it('appends entries and lists them in time order, filtered by source and table', async () => {
    await cp.appendAudit({
      at: '2026-01-02T00:00:00Z',
      actor: 'op',
      action: 'b',
      source: 'shop',
      table: 'public.orders',
      outcome: 'refused',
      detail: { why: 'no' },
    });
    await cp.appendAudit({ at: '2026-01-01T00:00:00.000Z', actor: 'op', action: 'a', source: 'shop', table: null, outcome: 'done', detail: {} });
    await cp.appendAudit({
      at: '2026-01-03T00:00:00.000Z',
      actor: 'op',
      action: 'c',
      source: 'crm',
      table: 'public.orders',
      outcome: 'done',
      detail: { nested: { n: [1, null, 'x'] } },
    });
    await cp.appendAudit({ at: '2026-01-04T00:00:00.000Z', actor: 'op', action: 'd', source: null, table: null, outcome: 'done', detail: {} });
    expect((await cp.listAudit()).map((a) => a.action)).toEqual(['a', 'b', 'c', 'd']);
    expect((await cp.listAudit('shop')).map((a) => a.action)).toEqual(['a', 'b']);
    expect((await cp.listAudit('shop', 'public.orders')).map((a) => a.action)).toEqual(['b']);
    expect((await cp.listAudit(undefined, 'public.orders')).map((a) => a.action)).toEqual(['b', 'c']);
    const all = await cp.listAudit();
    expect(all[1]).toEqual({
      at: '2026-01-02T00:00:00Z',
      actor: 'op',
      action: 'b',
      source: 'shop',
      table: 'public.orders',
      outcome: 'refused',
      detail: { why: 'no' },
    });
    expect(all[2]?.detail).toEqual({ nested: { n: [1, null, 'x'] } });
    expect(all[3]).toMatchObject({ source: null, table: null });
  });

  it('lists only the entries at or after a time, read by key (the part of the log before it is not read)', async () => {
    for (const [i, at] of ['2026-01-01T00:00:00Z', '2026-01-02T00:00:00Z', '2026-01-02T00:00:00.000+00:00', '2026-01-03T12:00:00Z'].entries()) {
      await cp.appendAudit({ at, actor: 'op', action: `a${i}`, source: i % 2 ? 'crm' : 'shop', table: null, outcome: 'done', detail: {} });
    }
    expect((await cp.listAudit(undefined, undefined, '2026-01-02T00:00:00Z')).map((a) => a.action).sort()).toEqual(['a1', 'a2', 'a3']);
    expect((await cp.listAudit(undefined, undefined, '2026-01-02T00:00:00.001Z')).map((a) => a.action)).toEqual(['a3']);
    expect((await cp.listAudit('shop', undefined, '2026-01-02T00:00:00+01:00')).map((a) => a.action)).toEqual(['a2']);
    expect(await cp.listAudit(undefined, undefined, '2027-01-01T00:00:00Z')).toEqual([]);
    await expect(cp.listAudit(undefined, undefined, 'last tuesday')).rejects.toThrow(/ISO-8601/);
    // The bound is a key condition: a query that reads only the part from `since` on.
    const sent: unknown[] = [];
    const spy = { send: (c: { input: unknown }) => (sent.push(c.input), client.send(c as never)) } as unknown as typeof client;
    await new DynamoDbControlPlane(spy, tableName).listAudit('shop', undefined, '2026-01-03T00:00:00Z');
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({ KeyConditionExpression: '#pk = :pk AND #sk >= :from' });
  });

  it('refuses an entry with a bad time or outcome', async () => {
    await expect(cp.appendAudit({ ...audit('x'), at: 'yesterday' })).rejects.toThrow(/ISO-8601/);
    await expect(cp.appendAudit({ ...audit('x'), outcome: 'maybe' as never })).rejects.toThrow(/outcome/);
    expect(await cp.listAudit()).toEqual([]);
  });
});

describe('dead letters', () => {
  function letter(overrides: Partial<DeadLetter> = {}): DeadLetter {
    return {
      at: now(),
      stage: 'normalizer',
      source: 'shop',
      table: 'public.orders',
      code: 'INVALID_RECORD',
      reason: 'metadata.operation: expected an operation name, got nothing',
      origin: 'raw-stream/shardId-000000000000/4959',
      record: '{"metadata":{}}',
      truncated: false,
      ...overrides,
    };
  }

  it('stores a letter and degrades its active table, with an audit entry, in one step', async () => {
    await cp.registerTable(tableRecord(), schema(1), audit('register-table'));
    const l = letter();
    await cp.putDeadLetter(l);
    expect(await cp.listDeadLetters('normalizer')).toEqual([l]);
    const t = await cp.getTable('shop', 'public.orders');
    expect(t?.state).toBe('degraded');
    expect(t?.stateReason).toBe(`INVALID_RECORD: ${l.reason}`);
    const degrade = (await cp.listAudit('shop', 'public.orders')).find((a) => a.action === 'degrade-table');
    expect(degrade).toMatchObject({
      actor: 'normalizer',
      outcome: 'done',
      detail: { from: 'active', to: 'degraded', code: 'INVALID_RECORD', origin: l.origin },
    });
    // A second letter for a degraded table changes no state and adds no audit entry.
    await cp.putDeadLetter(letter({ reason: 'again' }));
    expect((await cp.listAudit()).filter((a) => a.action === 'degrade-table')).toHaveLength(1);
    expect(await cp.listDeadLetters('normalizer')).toHaveLength(2);
  });

  it('does not degrade a paused table, and stores letters without a table', async () => {
    await cp.registerTable(tableRecord(), schema(1), audit('register-table'));
    await cp.setTableState('shop', 'public.orders', 'paused', 'p', audit('pause'));
    await cp.putDeadLetter(letter());
    await cp.putDeadLetter(letter({ source: null, table: null, stage: 'wh', origin: 'file:3' }));
    await cp.putDeadLetter(letter({ table: 'public.unknown' }));
    expect((await cp.getTable('shop', 'public.orders'))?.state).toBe('paused');
    expect(await cp.listDeadLetters('wh')).toHaveLength(1);
    expect(await cp.listDeadLetters('normalizer')).toHaveLength(2);
    expect(await cp.listDeadLetters()).toHaveLength(3);
    expect(await cp.listDeadLetters('nobody')).toEqual([]);
    expect((await cp.listAudit()).map((a) => a.action)).toEqual(['register-table', 'pause']);
  });

  it('cuts an oversized record at 300 KB on a character boundary, marks it truncated, and pages through large results', async () => {
    const big = '{"data":"' + 'é'.repeat(250_000) + '"}'; // ~500 KB of UTF-8
    for (let i = 0; i < 5; i++) await cp.putDeadLetter(letter({ record: big, origin: `o${i}`, table: null }));
    let pages = 0;
    const counted = dynamoDbClient(ddb.endpoint);
    counted.middlewareStack.add(
      (next, context) => async (args) => {
        if (context.commandName === 'QueryCommand') pages++;
        return next(args);
      },
      { step: 'initialize', name: 'countPages' },
    );
    const letters = await new DynamoDbControlPlane(counted, tableName).listDeadLetters('normalizer');
    counted.destroy();
    expect(pages).toBeGreaterThan(1); // 1.5 MB does not fit one 1 MB Query page
    expect(letters.map((l) => l.origin)).toEqual(['o0', 'o1', 'o2', 'o3', 'o4']);
    for (const l of letters) {
      expect(l.truncated).toBe(true);
      expect(Buffer.byteLength(l.record, 'utf8')).toBeLessThanOrEqual(DEAD_LETTER_RECORD_MAX_BYTES);
      expect(Buffer.byteLength(l.record, 'utf8')).toBeGreaterThan(DEAD_LETTER_RECORD_MAX_BYTES - 4);
      expect(l.record.endsWith('é')).toBe(true);
      expect(big.startsWith(l.record)).toBe(true);
    }
  });
});

describe('reads', () => {
  it('every read the adapter sends is strongly consistent', async () => {
    const reads: Array<{ command: string; consistent: unknown }> = [];
    const spied = dynamoDbClient(ddb.endpoint);
    spied.middlewareStack.add(
      (next, context) => async (args) => {
        const input = args.input as { ConsistentRead?: unknown };
        if (context.commandName === 'GetItemCommand' || context.commandName === 'QueryCommand')
          reads.push({ command: context.commandName, consistent: input.ConsistentRead });
        return next(args);
      },
      { step: 'initialize', name: 'recordReads' },
    );
    const spy = new DynamoDbControlPlane(spied, tableName);
    await spy.registerTable(tableRecord(), schema(1), audit('r'));
    await spy.getTable('shop', 'public.orders');
    await spy.listTables();
    await spy.listTables('shop');
    await spy.getSchemaVersion('shop', 'public.orders', 1);
    await spy.listSchemaVersions('shop', 'public.orders');
    await spy.addSchemaVersion(schema(3), audit('a'));
    await spy.getSinkProgress('wh', 'shop', 'public.orders');
    await spy.getCheckpoint('c', 's');
    await spy.listAudit('shop');
    await spy.putDeadLetter({
      at: now(),
      stage: 'normalizer',
      source: 'shop',
      table: 'public.orders',
      code: 'X',
      reason: 'r',
      origin: 'o',
      record: '',
      truncated: false,
    });
    await spy.listDeadLetters();
    spied.destroy();
    expect(reads.length).toBeGreaterThanOrEqual(12);
    expect(reads.filter((r) => r.consistent !== true)).toEqual([]);
  });
});

describe('snapshot runs and chunks (docs/snapshot.md)', () => {
  it('writes runs conditionally on their version, with the audit entry, and lists them per source', async () => {
    const { newSnapshotState } = await import('../../lambda/core/snapshot/snapshot.ts');
    const s1 = newSnapshotState('shop', 'public.orders', 'initial', 'planner', new Date(), null);
    expect(await cp.putSnapshot(s1, null, audit('request-snapshot'))).toBe(true);
    // A second creation, or a write based on a stale version, loses.
    expect(await cp.putSnapshot({ ...s1, run: 'other' }, null, audit('request-snapshot'))).toBe(false);
    const s2 = { ...s1, status: 'running' as const, owner: 'w', version: s1.version + 1 };
    const racing = await Promise.all([cp.putSnapshot(s2, s1.version, null), cp.putSnapshot({ ...s2, owner: 'x' }, s1.version, null)]);
    expect(racing.filter(Boolean)).toHaveLength(1);
    expect(await cp.getSnapshot('shop', 'public.orders')).toMatchObject({ status: 'running', version: s2.version });
    expect((await cp.listSnapshots('shop')).map((s) => s.table)).toEqual(['public.orders']);
    expect(await cp.listSnapshots('other')).toEqual([]);
    expect((await cp.listAudit('shop', 'public.orders')).map((a) => a.action)).toEqual(['request-snapshot']);
    // The snapshot item does not show up as a table.
    expect(await cp.listTables('shop')).toEqual([]);
  });

  it('records a chunk and the cursor after it in one conditional transaction', async () => {
    const { newSnapshotState, snapshotPosition } = await import('../../lambda/core/snapshot/snapshot.ts');
    const s1 = { ...newSnapshotState('shop', 'public.orders', 'initial', 'planner', new Date(), null), status: 'running' as const };
    await cp.putSnapshot(s1, null, null);
    const chunk = (index: number) => ({
      source: 'shop',
      table: 'public.orders',
      run: s1.run,
      index,
      startAfter: index === 0 ? null : [String(index * 10)],
      endKey: [String(index * 10 + 10)],
      rows: 10,
      lowWatermark: '0/16B3748',
      fenceXid: '731',
      position: snapshotPosition('0/16B3748'),
      readAt: now(),
      readMs: 3,
      fenceWaitMs: 0,
      fromReplica: false,
      status: 'published' as const,
      completedAt: now(),
    });
    const s2 = { ...s1, cursor: ['10'], chunksDone: 1, rowsDone: 10, version: s1.version + 1 };
    expect(await cp.completeSnapshotChunk(chunk(0), s2, s1.version)).toBe(true);
    // Stale version: neither the chunk nor the state is written.
    expect(await cp.completeSnapshotChunk(chunk(1), { ...s2, cursor: ['20'], version: s2.version + 1 }, s1.version)).toBe(false);
    expect((await cp.getSnapshot('shop', 'public.orders'))!.cursor).toEqual(['10']);
    expect((await cp.listSnapshotChunks('shop', 'public.orders', s1.run)).map((c) => c.index)).toEqual([0]);
    expect(await cp.completeSnapshotChunk(chunk(1), { ...s2, cursor: ['20'], version: s2.version + 1 }, s2.version)).toBe(true);
    expect((await cp.listSnapshotChunks('shop', 'public.orders', s1.run)).map((c) => [c.index, c.endKey])).toEqual([
      [0, ['10']],
      [1, ['20']],
    ]);
  });
});

describe('the rebuild slot (docs/rebuild.md, "One at a time")', () => {
  const claim = (id: string, at: string, table = 'public.orders') => ({
    id,
    sink: 'wh',
    source: 'shop',
    table,
    mode: 'swap' as const,
    from: null,
    actor: 'test',
    startedAt: at,
    state: 'running' as const,
    heartbeatAt: at,
    checkpoint: null,
  });
  const checkpoint = (events: number) => ({ phase: 'replay' as const, appliedThrough: pos(events), events, applyMs: 1, sleptMs: 0, skipped: 0, slices: 1 });

  it('one rebuild per sink, with its audit entry; checkpoints only by the holder; a finished or stale slot is taken over; runs are listed without the slot', async () => {
    const t0 = new Date('2026-12-01T10:00:00Z');
    const iso = (ms: number) => new Date(t0.getTime() + ms).toISOString();
    expect(await cp.getActiveRebuild('wh')).toBeNull();
    expect(await cp.claimRebuild(claim('a', iso(0)), iso(-60_000), audit('rebuild-started'))).toBeNull();
    // Another claim while `a` reports: refused, the holder returned, nothing audited for it.
    const holder = await cp.claimRebuild(claim('b', iso(1000), 'public.customers'), iso(1000 - 60_000), audit('rebuild-started', 'public.customers'));
    expect(holder?.id).toBe('a');
    expect((await cp.listAudit()).filter((e) => e.action === 'rebuild-started').map((e) => e.table)).toEqual(['public.orders']);
    // Only the holder checkpoints.
    expect(await cp.checkpointRebuild('wh', 'b', checkpoint(5), iso(2000))).toBe(false);
    expect(await cp.checkpointRebuild('wh', 'a', checkpoint(7), iso(2000))).toBe(true);
    expect(await cp.getActiveRebuild('wh')).toMatchObject({
      id: 'a',
      state: 'running',
      heartbeatAt: iso(2000),
      checkpoint: { events: 7, appliedThrough: pos(7) },
    });
    // Stale (no report since before the stale time): taken over; the old holder can no longer checkpoint.
    expect(await cp.claimRebuild(claim('c', iso(100_000)), iso(50_000), audit('rebuild-started'))).toBeNull();
    expect(await cp.checkpointRebuild('wh', 'a', checkpoint(9), iso(100_001))).toBe(false);
    // Releasing by a non-holder is a no-op; by the holder, it frees the slot for the next claim at once.
    await cp.releaseRebuild('wh', 'a', iso(100_002));
    expect((await cp.getActiveRebuild('wh'))?.state).toBe('running');
    await cp.releaseRebuild('wh', 'c', iso(100_003));
    expect(await cp.getActiveRebuild('wh')).toMatchObject({ id: 'c', state: 'finished' });
    expect(await cp.checkpointRebuild('wh', 'c', checkpoint(1), iso(100_004))).toBe(false);
    expect(await cp.claimRebuild(claim('d', iso(100_005)), iso(100_005 - 60_000), audit('rebuild-started'))).toBeNull();
    // The slot item shares the partition with the runs: listRebuilds returns runs only.
    expect(await cp.listRebuilds('wh')).toEqual([]);
  });
});
