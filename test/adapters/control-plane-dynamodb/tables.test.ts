/** Table records and schema versions in the DynamoDB control plane against DynamoDB Local: atomicity, races, audit entries. */
import { describe, expect, it } from 'vitest';
import { DeleteItemCommand, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { client, cp, tableName, tableRecord, schema, audit, useControlTable } from './fixture.ts';

useControlTable();

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
