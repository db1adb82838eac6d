import { describe, expect, it } from 'vitest';
import { decodeRawRecord, detectRecordFormat } from '../../../lambda/core/capture/decode.ts';
import type { DecodeResult, DecodedChange } from '../../../lambda/core/capture/decoded.ts';
import { InvalidRecordError } from '../../../lambda/core/shared/errors.ts';
import { validateChangeEvent } from '../../../lambda/core/shared/event.ts';
import { makePosition } from '../../../lambda/core/shared/position.ts';
import { decodeSlotRecord } from '../../../lambda/core/capture/slot-decoder.ts';
import { buildSlotRecord, validateSlotRecord, type SlotColumn, type SlotRecord } from '../../../lambda/core/capture/slot-record.ts';

const tx = { source: 'orders', xid: '754', commitLsn: '0/1752928', commitTs: '2026-11-29T13:05:21.188736Z' };
const col = (name: string, value: SlotColumn['value'], type = 'text'): SlotColumn => ({ name, type, value });

function record(patch: Partial<SlotRecord>): SlotRecord {
  return {
    format: 'cdc-slot/1',
    ...tx,
    index: 0,
    table: 'public.t1',
    op: 'insert',
    key: ['id'],
    columns: [col('id', 1, 'integer'), col('v', 'a')],
    oldKey: null,
    unchanged: [],
    ...patch,
  };
}

function changes(r: DecodeResult): DecodedChange[] {
  if (r.kind !== 'changes') throw new Error(`expected changes, got ${r.kind}`);
  for (const c of r.changes) validateChangeEvent({ ...c, schemaVersion: 1 });
  return r.changes;
}

describe('slot decoder', () => {
  it('decodes an insert with position = commit LSN + index, and the table columns', () => {
    const r = decodeSlotRecord(record({ index: 3 }));
    expect(r).toEqual({
      kind: 'changes',
      changes: [
        {
          v: 1,
          source: 'orders',
          table: 'public.t1',
          op: 'insert',
          key: { id: 1 },
          after: { id: 1, v: 'a' },
          before: null,
          missing: [],
          position: makePosition('0/1752928', 3),
          commitTs: tx.commitTs,
          txId: '754',
          capture: 'slot',
          synthetic: false,
        },
      ],
      columns: [
        { name: 'id', type: 'integer', nullable: true },
        { name: 'v', type: 'text', nullable: true },
      ],
      keyColumns: ['id'],
    });
    expect(changes(r)[0]!.position).toBe('000000000175292800000003');
  });

  it('an update with an unchanged TOAST value lists it as missing and reports no column list', () => {
    const r = decodeSlotRecord(record({ op: 'update', columns: [col('id', 1, 'integer'), col('v', 'z')], unchanged: ['big'] }));
    const [c] = changes(r);
    expect(c).toMatchObject({ op: 'update', key: { id: 1 }, after: { id: 1, v: 'z' }, before: null, missing: ['big'] });
    expect(c!.after).not.toHaveProperty('big');
    expect(r.kind === 'changes' && r.columns).toBeNull();
    // The unchanged column's type, when the capture says it, is among the types the record shows.
    const typed = decodeSlotRecord({
      ...record({ op: 'update', columns: [col('id', 1, 'integer'), col('v', 'z')], unchanged: ['big'] }),
      unchangedTypes: { big: 'text' },
    });
    expect(typed.kind === 'changes' && typed.types).toMatchObject({ id: 'integer', big: 'text' });
  });

  it('an unchanged TOAST value is taken from a full old image (REPLICA IDENTITY FULL)', () => {
    const r = decodeSlotRecord(
      record({
        op: 'update',
        columns: [col('id', 1, 'integer'), col('v', 'z')],
        unchanged: ['big'],
        oldKey: [col('id', 1, 'integer'), col('v', 'a'), col('big', 'xxx')],
      }),
    );
    expect(changes(r)[0]).toMatchObject({ op: 'update', after: { id: 1, v: 'z', big: 'xxx' }, before: { id: 1, v: 'a', big: 'xxx' }, missing: [] });
  });

  it('a key change is a delete of the old key then an insert of the new, at the same position', () => {
    const r = decodeSlotRecord(
      record({ op: 'update', index: 2, columns: [col('id', 2, 'integer'), col('v', 'z')], oldKey: [col('id', 1, 'integer')], unchanged: ['big'] }),
    );
    const [d, i, ...rest] = changes(r);
    expect(rest).toEqual([]);
    expect(d).toMatchObject({ op: 'delete', key: { id: 1 }, after: null, before: { id: 1 }, missing: [] });
    expect(i).toMatchObject({ op: 'insert', key: { id: 2 }, after: { id: 2, v: 'z' }, before: { id: 1 }, missing: ['big'] });
    expect(d!.position).toBe(i!.position);
  });

  it('an old image with the same key (REPLICA IDENTITY FULL) is a plain update with a before image', () => {
    const r = decodeSlotRecord(record({ op: 'update', columns: [col('id', 1, 'integer'), col('v', 'z')], oldKey: [col('id', 1, 'integer'), col('v', 'a')] }));
    expect(changes(r)).toMatchObject([{ op: 'update', key: { id: 1 }, before: { id: 1, v: 'a' }, after: { id: 1, v: 'z' } }]);
  });

  it('a composite key compares every key column', () => {
    const r = decodeSlotRecord(
      record({ op: 'update', key: ['a', 'b'], columns: [col('a', 1, 'integer'), col('b', 'y')], oldKey: [col('a', 1, 'integer'), col('b', 'x')] }),
    );
    expect(changes(r).map((c) => [c.op, c.key])).toEqual([
      ['delete', { a: 1, b: 'x' }],
      ['insert', { a: 1, b: 'y' }],
    ]);
  });

  it('a delete is keyed by its old key; the before image is the old image', () => {
    const r = decodeSlotRecord(record({ op: 'delete', columns: null, oldKey: [col('id', 5, 'integer'), col('v', 'q')] }));
    expect(changes(r)).toMatchObject([{ op: 'delete', key: { id: 5 }, after: null, before: { id: 5, v: 'q' } }]);
    expect(r.kind === 'changes' && r.columns).toBeNull();
  });

  it('a truncate has an empty key and no images', () => {
    const r = decodeSlotRecord(record({ op: 'truncate', key: [], columns: null }));
    expect(changes(r)).toMatchObject([{ op: 'truncate', key: {}, after: null, before: null, missing: [] }]);
  });

  it('refuses malformed records naming the field', () => {
    const field = (value: unknown): string => {
      try {
        decodeSlotRecord(value);
      } catch (e) {
        expect(e).toBeInstanceOf(InvalidRecordError);
        return (e as InvalidRecordError).field;
      }
      throw new Error('expected an error');
    };
    expect(field(record({ commitLsn: '1752928' }))).toBe('commitLsn');
    expect(field(record({ commitTs: 'now' }))).toBe('commitTs');
    expect(field(record({ index: -1 }))).toBe('index');
    expect(field(record({ index: 1.5 }))).toBe('index');
    expect(field(record({ xid: 'abc' }))).toBe('xid');
    expect(field(record({ source: 'Orders' }))).toBe('source');
    expect(field(record({ table: 'no_schema' }))).toBe('table');
    expect(field(record({ op: 'upsert' as 'insert' }))).toBe('op');
    expect(field(record({ key: [] }))).toBe('key');
    expect(field(record({ columns: [col('id', 1), { name: 'v', type: '', value: 1 }] }))).toBe('columns[1].type');
    expect(field(record({ columns: [col('id', 1), col('id', 2)] }))).toBe('columns[1].name');
    expect(field(record({ columns: null }))).toBe('columns');
    expect(field(record({ columns: [col('v', 'a')] }))).toBe('columns');
    expect(field(record({ columns: [col('id', null)] }))).toBe('columns.id');
    expect(field(record({ op: 'delete', columns: null, oldKey: null }))).toBe('oldKey');
    expect(field(record({ op: 'delete', columns: null, oldKey: [col('v', 1)] }))).toBe('oldKey');
    expect(field(record({ unchanged: ['big'] }))).toBe('unchanged');
    expect(field(record({ op: 'update', unchanged: ['v'] }))).toBe('unchanged');
    expect(field({ ...record({ op: 'update', columns: [col('id', 1)], unchanged: ['big'] }), unchangedTypes: { other: 'text' } })).toBe('unchangedTypes.other');
    expect(field({ ...record({ op: 'update', columns: [col('id', 1)], unchanged: ['big'] }), unchangedTypes: { big: '' } })).toBe('unchangedTypes.big');
    expect(field({ ...record({ op: 'update', columns: [col('id', 1)], unchanged: ['big'] }), unchangedTypes: ['text'] })).toBe('unchangedTypes');
    expect(field({ ...record({}), format: 'cdc-slot/2' })).toBe('format');
  });

  it('buildSlotRecord validates what it builds', () => {
    const built = buildSlotRecord(tx, 0, { table: 'public.t1', op: 'insert', columns: [col('id', 1, 'integer')], oldKey: null, unchanged: [] }, ['id']);
    expect(validateSlotRecord(JSON.parse(JSON.stringify(built)))).toEqual(built);
    expect(() => buildSlotRecord(tx, 0, { table: 'public.t1', op: 'delete', columns: null, oldKey: null, unchanged: [] }, ['id'])).toThrow(/^oldKey: /);
    expect(() => buildSlotRecord(tx, 0, { table: 'public.a.b', op: 'insert', columns: [col('id', 1)], oldKey: null, unchanged: [] }, ['id'])).toThrow(
      /^table: /,
    );
    expect(buildSlotRecord(tx, 1, { table: 'public.t1', op: 'truncate', columns: null, oldKey: null, unchanged: [] }, ['id']).key).toEqual([]);
  });
});

describe('decodeRawRecord dispatch', () => {
  const ctx = { source: 'orders', keyColumns: () => ['id'] };

  it('detects slot and DMS records', () => {
    expect(detectRecordFormat(record({}))).toBe('slot');
    expect(detectRecordFormat({ metadata: {} })).toBe('dms');
    expect(changes(decodeRawRecord(record({}), ctx))[0]!.capture).toBe('slot');
    const dms = {
      data: { id: 1 },
      metadata: {
        'record-type': 'data',
        operation: 'insert',
        'schema-name': 'public',
        'table-name': 't',
        'stream-position': '0/10.1.0/10',
        'transaction-record-id': 1,
        'commit-timestamp': '2026-01-01T00:00:00Z',
      },
    };
    expect(changes(decodeRawRecord(dms, ctx))[0]!.capture).toBe('dms');
  });

  it('refuses an unknown format by name', () => {
    expect(() => decodeRawRecord({ format: 'debezium/1' }, ctx)).toThrow(/^format: unknown record format "debezium\/1"/);
    expect(() => decodeRawRecord({ payload: {} }, ctx)).toThrow(/^record: neither a slot-capture record/);
    expect(() => decodeRawRecord([1], ctx)).toThrow(/^record: expected a JSON object, got an array/);
  });
});
