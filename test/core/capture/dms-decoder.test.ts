import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';
import { decodeDmsRecord, KeyMismatchError, KeyUnknownError, type DecodeContext } from '../../../lambda/core/capture/dms-decoder.ts';
import type { DecodeResult, DecodedChange } from '../../../lambda/core/capture/decoded.ts';
import { InvalidRecordError, UnknownOperationError } from '../../../lambda/core/shared/errors.ts';
import { validateChangeEvent } from '../../../lambda/core/shared/event.ts';
import { makePosition, POSITION_ZERO } from '../../../lambda/core/shared/position.ts';

const fixtures = path.join(path.dirname(fileURLToPath(import.meta.url)), '..', '..', 'fixtures', 'dms');
function records(file: string): Record<string, unknown>[] {
  return readFileSync(path.join(fixtures, file), 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l) as Record<string, unknown>);
}

function ctx(keys: Record<string, string[]> = {}, columns: Record<string, string[]> = {}): DecodeContext {
  return { source: 'orders', keyColumns: (t) => keys[t] ?? null, columns: (t) => columns[t] ?? null };
}

function changes(r: DecodeResult): DecodedChange[] {
  if (r.kind !== 'changes') throw new Error(`expected changes, got ${r.kind}`);
  for (const c of r.changes) validateChangeEvent({ ...c, schemaVersion: 1 });
  return r.changes;
}

const FOO = { 'public.foo': ['id'] };

describe('DMS decoder on the documented PostgreSQL records', () => {
  const [insert, updatePk, del] = records('postgres-cdc.jsonl') as [unknown, unknown, unknown];

  it('decodes an insert with its position, commit time and transaction id', () => {
    const [c, ...rest] = changes(decodeDmsRecord(insert, ctx(FOO)));
    expect(rest).toEqual([]);
    expect(c).toEqual({
      v: 1,
      source: 'orders',
      table: 'public.foo',
      op: 'insert',
      key: { id: 46 },
      after: { age: 31, attributes: '{"baz": "qux"}', id: 46, name: 'Jane' },
      before: null,
      missing: [],
      position: makePosition('2/7C007178', 1),
      commitTs: '2024-07-29T00:58:17.974340Z',
      txId: '1139',
      capture: 'dms',
      synthetic: false,
    });
    expect(c!.position).toBe('000000027c00717800000001');
  });

  it('turns an update that changes the primary key into a delete of the old key and an insert of the new', () => {
    const result = decodeDmsRecord(updatePk, ctx(FOO));
    const [d, i] = changes(result);
    expect(d).toMatchObject({ op: 'delete', key: { id: 46 }, after: null, before: { id: 46 }, txId: '1141' });
    expect(i).toMatchObject({ op: 'insert', key: { id: 45 }, after: { age: 31, attributes: '{"baz": "qux"}', id: 45, name: 'Jane' }, before: { id: 46 } });
    expect(d!.position).toBe(i!.position);
    expect(d!.position).toBe(makePosition('00000002/7C0073F8', 1));
  });

  it('learns the key from a pk-only before image when none is configured', () => {
    const result = decodeDmsRecord(updatePk, ctx());
    expect(result.kind === 'changes' && result.keyColumns).toEqual(['id']);
    expect(changes(result).map((c) => c.op)).toEqual(['delete', 'insert']);
  });

  it('refuses a declared key that the pk-only before image contradicts, instead of keying on the wrong columns', () => {
    expect(() => decodeDmsRecord(updatePk, ctx({ 'public.foo': ['name'] }))).toThrow(KeyMismatchError);
    expect(() => decodeDmsRecord(updatePk, ctx({ 'public.foo': ['name'] }))).toThrow(
      /KEY_MISMATCH|declared primary key of public.foo is \(name\) but the DMS before image carries \(id\)/,
    );
  });

  it('decodes a delete to its key: the nulls of the other columns are not values', () => {
    const [c] = changes(decodeDmsRecord(del, ctx(FOO)));
    expect(c).toMatchObject({ op: 'delete', key: { id: 45 }, after: null, before: { id: 45 }, missing: [], txId: '1144' });
    expect(c!.position).toBe(makePosition('2/840001D8', 1));
  });

  it('positions follow stream order across the session', () => {
    const session = records('postgres-session.jsonl');
    const out: DecodedChange[] = [];
    const learned: Record<string, string[]> = {};
    for (const r of session) {
      const res = decodeDmsRecord(r, ctx(learned));
      if (res.kind === 'control' && res.key) learned[res.table] = res.key;
      if (res.kind === 'changes') out.push(...changes(res));
    }
    expect(out.map((c) => `${c.op} ${JSON.stringify(c.key)}`)).toEqual([
      'snapshot {"id":42}',
      'insert {"id":46}',
      'update {"id":42}',
      'delete {"id":46}',
      'insert {"id":45}',
      'delete {"id":45}',
    ]);
    const positions = out.map((c) => c.position);
    expect([...positions].sort()).toEqual(positions);
    expect(positions[0]).toBe(POSITION_ZERO);
  });

  it('an update with an empty before image has no before image', () => {
    const update = records('postgres-session.jsonl')[4];
    expect((update as { 'before-image': unknown })['before-image']).toEqual({});
    const [c] = changes(decodeDmsRecord(update, ctx(FOO)));
    expect(c).toMatchObject({ op: 'update', key: { id: 42 }, before: null, missing: [], txId: '1140' });
  });

  it('an update without a configured key and with an empty before image is refused by name', () => {
    const update = records('postgres-session.jsonl')[4];
    expect(() => decodeDmsRecord(update, ctx())).toThrow(KeyUnknownError);
    expect(() => decodeDmsRecord(update, ctx())).toThrow(/primary key of public\.foo is unknown.*--key public\.foo=/);
  });

  it('lists the columns an update did not deliver when the columns are known', () => {
    const update = structuredClone(records('postgres-session.jsonl')[4]!) as { data: Record<string, unknown> };
    delete update.data.attributes;
    const [c] = changes(decodeDmsRecord(update, ctx(FOO, { 'public.foo': ['id', 'name', 'age', 'attributes'] })));
    expect(c!.missing).toEqual(['attributes']);
    expect(c!.after).not.toHaveProperty('attributes');
    // unknown columns: nothing can be said
    expect(changes(decodeDmsRecord(update, ctx(FOO)))[0]!.missing).toEqual([]);
  });
});

describe('DMS full load', () => {
  const [create, load] = records('postgres-full-load.jsonl') as [unknown, unknown];

  it('decodes create-table to columns and key', () => {
    expect(decodeDmsRecord(create, ctx())).toEqual({
      kind: 'control',
      source: 'orders',
      table: 'public.demo',
      operation: 'create-table',
      columns: [
        { name: 'id', type: 'INT32', nullable: false },
        { name: 'name', type: 'STRING', nullable: true },
        { name: 'age', type: 'INT32', nullable: true },
        { name: 'attributes', type: 'STRING', nullable: true },
      ],
      key: ['id'],
      position: null,
    });
  });

  it('a load row is a snapshot at POSITION_ZERO with the message time as commit time', () => {
    const [c] = changes(decodeDmsRecord(load, ctx({ 'public.demo': ['id'] })));
    expect(c).toEqual({
      v: 1,
      source: 'orders',
      table: 'public.demo',
      op: 'snapshot',
      key: { id: 393 },
      after: { id: 393, name: 'Test', age: 4, attributes: null },
      before: null,
      missing: [],
      position: POSITION_ZERO,
      commitTs: '2025-06-10T11:28:47.326434Z',
      txId: null,
      capture: 'dms',
      synthetic: false,
    });
  });

  it('a load row without a known key is refused', () => {
    expect(() => decodeDmsRecord(load, ctx())).toThrow(KeyUnknownError);
  });
});

describe('DMS control records and DMS own tables', () => {
  const [, drop, awsdms] = records('control.jsonl') as [unknown, unknown, unknown];

  it('drop-table decodes to a control result without columns', () => {
    expect(decodeDmsRecord(drop, ctx())).toMatchObject({ kind: 'control', operation: 'drop-table', table: 'public.foo', columns: null, key: null });
  });

  it("ignores DMS's own awsdms_apply_exceptions table", () => {
    const r = decodeDmsRecord(awsdms, ctx());
    expect(r.kind).toBe('ignored');
    expect(r.kind === 'ignored' && r.reason).toMatch(/awsdms_apply_exceptions/);
  });

  it('ignores data records on awsdms_ tables and task-level control records', () => {
    const data = { data: { x: 1 }, metadata: { 'record-type': 'data', operation: 'insert', 'schema-name': 'public', 'table-name': 'awsdms_ddl_audit' } };
    expect(decodeDmsRecord(data, ctx()).kind).toBe('ignored');
    const task = { control: {}, metadata: { 'record-type': 'control', operation: 'drop-table', 'schema-name': '', 'table-name': '' } };
    expect(decodeDmsRecord(task, ctx()).kind).toBe('ignored');
  });

  it.each(['add-column', 'drop-column', 'rename-column', 'column-type-change', 'change-columns', 'rename-table'])('decodes %s', (operation) => {
    const rec = {
      control: { 'table-def': { columns: { id: { type: 'INT32', nullable: false } }, 'primary-key': ['id'] } },
      metadata: { 'record-type': 'control', operation, 'schema-name': 'public', 'table-name': 't' },
    };
    expect(decodeDmsRecord(rec, ctx())).toMatchObject({
      kind: 'control',
      operation,
      table: 'public.t',
      columns: [{ name: 'id', type: 'INT32', nullable: false }],
      key: ['id'],
    });
  });
});

describe('DMS decoder refusals', () => {
  const [insert] = records('postgres-cdc.jsonl') as [Record<string, unknown>];
  const withMeta = (patch: Record<string, unknown>, drop: string[] = []): Record<string, unknown> => {
    const r = structuredClone(insert) as { metadata: Record<string, unknown> };
    Object.assign(r.metadata, patch);
    for (const d of drop) delete r.metadata[d];
    return r;
  };
  const error = (fn: () => unknown): Error => {
    try {
      fn();
    } catch (e) {
      return e as Error;
    }
    throw new Error('expected an error');
  };

  it('refuses an unknown data operation by name', () => {
    const e = error(() => decodeDmsRecord(withMeta({ operation: 'upsert' }), ctx(FOO)));
    expect(e).toBeInstanceOf(UnknownOperationError);
    expect(e.message).toMatch(/'upsert'/);
  });

  it('refuses an unknown control operation and record type by name', () => {
    expect(() =>
      decodeDmsRecord(
        { control: {}, metadata: { 'record-type': 'control', operation: 'truncate-table', 'schema-name': 'public', 'table-name': 'foo' } },
        ctx(),
      ),
    ).toThrow(/unknown operation 'truncate-table'/);
    expect(() => decodeDmsRecord(withMeta({ 'record-type': 'heartbeat' }), ctx(FOO))).toThrow(/unknown operation 'heartbeat' in metadata\.record-type/);
  });

  it('refuses a change without a stream position, naming the field', () => {
    const e = error(() => decodeDmsRecord(withMeta({}, ['stream-position']), ctx(FOO)));
    expect(e).toBeInstanceOf(InvalidRecordError);
    expect((e as InvalidRecordError).field).toBe('metadata.stream-position');
  });

  it("reads a transaction's shared stream position and commit time once, and each record's own index and errors still count", () => {
    // The decoder keeps the last stream position's LSN and the last commit time that passed (docs/performance-log.md, "71. The normalizer's work per DMS record, and the cores' bound on the end-to-end line").
    const at = (patch: Record<string, unknown>): string => changes(decodeDmsRecord(withMeta(patch), ctx(FOO)))[0]!.position;
    const other = { 'stream-position': '00000003/00000010.3.00000003/00000010' };
    expect(at({ 'transaction-record-id': 1 })).toBe(makePosition('2/7C007178', 1));
    expect(at({ 'transaction-record-id': 2 })).toBe(makePosition('2/7C007178', 2));
    expect(error(() => decodeDmsRecord(withMeta({ 'transaction-record-id': 2 ** 32 }), ctx(FOO))).message).toMatch(/transaction-record-id/);
    expect(error(() => decodeDmsRecord(withMeta({ 'stream-position': 'x.3.x' }), ctx(FOO))).message).toMatch(/cannot read an LSN from "x\.3\.x"/);
    expect(error(() => decodeDmsRecord(withMeta({ 'commit-timestamp': 'later' }), ctx(FOO))).message).toMatch(/commit-timestamp/);
    expect(at({ ...other, 'transaction-record-id': 0 })).toBe(makePosition('3/10', 0));
    expect(at({ 'transaction-record-id': 7 })).toBe(makePosition('2/7C007178', 7));
  });

  it("refuses AWS's MySQL example: its stream position is not a PostgreSQL LSN", () => {
    const [mysql] = records('mysql-aws-example.jsonl');
    const e = error(() => decodeDmsRecord(mysql, ctx({ 'sbtest.sbtest_x': ['id'] })));
    expect((e as InvalidRecordError).field).toBe('metadata.stream-position');
    expect(e.message).toMatch(/mysql-bin-changelog/);
  });

  it.each([
    [{ 'transaction-record-id': -1 }, [], 'metadata.transaction-record-id'],
    [{ 'transaction-record-id': '1' }, [], 'metadata.transaction-record-id'],
    [{}, ['commit-timestamp'], 'metadata.commit-timestamp'],
    [{ 'commit-timestamp': 'yesterday' }, [], 'metadata.commit-timestamp'],
    [{ 'schema-name': '' }, [], 'metadata.schema-name'],
    [{ 'table-name': '' }, [], 'metadata.table-name'],
    [{ 'table-name': 7 }, [], 'metadata.table-name'],
    [{ 'transaction-id': { x: 1 } }, [], 'metadata.transaction-id'],
  ] as [Record<string, unknown>, string[], string][])('refuses %j (dropping %j) naming %s', (patch, drop, field) => {
    const e = error(() => decodeDmsRecord(withMeta(patch, drop), ctx({ 'public.foo': ['id'] })));
    expect(e).toBeInstanceOf(InvalidRecordError);
    expect((e as InvalidRecordError).field).toBe(field);
  });

  it('refuses structural problems naming the field', () => {
    expect(() => decodeDmsRecord('text', ctx())).toThrow(/^record: /);
    expect(() => decodeDmsRecord({ data: {} }, ctx())).toThrow(/^metadata: expected an object/);
    expect(() => decodeDmsRecord({ ...insert, data: [1] }, ctx(FOO))).toThrow(/^data: expected an object/);
    expect(() => decodeDmsRecord({ ...insert, data: { name: 'x' } }, ctx(FOO))).toThrow(/^data\.id: primary-key column is missing/);
    expect(() => decodeDmsRecord({ ...insert, data: { id: null } }, ctx(FOO))).toThrow(/^data\.id: primary-key value/);
    expect(() =>
      decodeDmsRecord(
        {
          control: { 'table-def': { columns: { id: { type: 3 } } } },
          metadata: { 'record-type': 'control', operation: 'create-table', 'schema-name': 'public', 'table-name': 't' },
        },
        ctx(),
      ),
    ).toThrow(/^control\.table-def\.columns\.id\.type: /);
    expect(() =>
      decodeDmsRecord(
        {
          control: { 'table-def': { columns: { id: {} }, 'primary-key': ['nope'] } },
          metadata: { 'record-type': 'control', operation: 'create-table', 'schema-name': 'public', 'table-name': 't' },
        },
        ctx(),
      ),
    ).toThrow(/^control\.table-def\.primary-key: /);
  });

  it('a configured key wins over the before image', () => {
    const [, updatePk] = records('postgres-cdc.jsonl');
    const r = structuredClone(updatePk) as { 'before-image': Record<string, unknown>; data: Record<string, unknown> };
    r['before-image'] = { id: 46, name: 'Jane' }; // e.g. ColumnFilter "all"
    const [c] = changes(decodeDmsRecord(r, ctx({ 'public.foo': ['name'] })));
    expect(c).toMatchObject({ op: 'update', key: { name: 'Jane' }, before: { id: 46, name: 'Jane' } });
  });
});

describe('DMS decoder on records of a partitioned table (docs/partitioned-tables.md)', () => {
  const [insert, update, moveOut, moveIn, newPartition] = records('postgres-partitioned.jsonl') as [unknown, unknown, unknown, unknown, unknown];
  const EV = { 'public.ev': ['id', 'at'] };
  const roots: Record<string, string> = {
    'public.ev_2024_01': 'public.ev',
    'public.ev_2024_02': 'public.ev',
    'public.ev_2024_03': 'public.ev',
    'public.ev_2024_04': 'public.ev',
  };
  const withRoots: DecodeContext = { ...ctx(EV), rootOf: (t) => roots[t] ?? null };

  it('names every change of a partition by its root, keyed by the root key', () => {
    for (const r of [insert, update, moveOut, moveIn]) for (const c of changes(decodeDmsRecord(r, withRoots))) expect(c.table).toBe('public.ev');
    expect(changes(decodeDmsRecord(update, withRoots))).toMatchObject([
      { op: 'update', key: { id: 8, at: '2024-02-03 12:00:00+00' }, after: { amount: '11.50' } },
    ]);
  });

  it('a row moved between partitions is a delete of its old key, then an insert of its new key, in position order', () => {
    const [d] = changes(decodeDmsRecord(moveOut, withRoots));
    const [i] = changes(decodeDmsRecord(moveIn, withRoots));
    expect(d).toMatchObject({ op: 'delete', key: { id: 7, at: '2024-01-05 12:00:00+00' } });
    expect(i).toMatchObject({ op: 'insert', key: { id: 7, at: '2024-03-05 12:00:00+00' }, after: { note: 'moved' } });
    expect(d!.position < i!.position).toBe(true);
    expect(d!.txId).toBe(i!.txId);
  });

  it("a partition's control record is ignored (its root's counts); without the roots every partition is a table of its own", () => {
    expect(decodeDmsRecord(newPartition, withRoots)).toMatchObject({ kind: 'ignored', reason: expect.stringContaining('a partition of public.ev') });
    expect(changes(decodeDmsRecord(insert, ctx({ 'public.ev_2024_01': ['id', 'at'] })))[0]!.table).toBe('public.ev_2024_01');
  });
});
