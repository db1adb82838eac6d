/**
 * The delete half of a primary-key change whose insert half lacks columns (an unchanged TOAST
 * value) is marked with them (`handover`), on both capture paths, and the mark survives the
 * change event's validation; nothing else is marked.
 */
import { describe, expect, it } from 'vitest';
import { decodeRawRecord } from '../../../lambda/core/capture/decode.ts';
import { validateChangeEvent, type ChangeEvent } from '../../../lambda/core/shared/event.ts';
import { InvalidRecordError } from '../../../lambda/core/shared/errors.ts';
import type { DecodeResult } from '../../../lambda/core/capture/decoded.ts';

const slot = (patch: Record<string, unknown>) => ({
  format: 'cdc-slot/1',
  source: 'demo',
  xid: '754',
  commitLsn: '0/16B3748',
  commitTs: '2026-11-29T12:00:00.000Z',
  index: 0,
  table: 'public.docs',
  op: 'update',
  key: ['id'],
  columns: [
    { name: 'id', type: 'integer', value: 2 },
    { name: 'title', type: 'text', value: 'x' },
  ],
  oldKey: [{ name: 'id', type: 'integer', value: 1 }],
  unchanged: ['body'],
  ...patch,
});

const ctx = { source: 'demo', keyColumns: () => ['id'], columns: () => ['id', 'title', 'body'] };
const changes = (r: DecodeResult): ChangeEvent[] => {
  if (r.kind !== 'changes') throw new Error(`expected changes, got ${r.kind}`);
  return r.changes.map((c) => validateChangeEvent({ ...c, schemaVersion: 1 }));
};

describe('primary-key change halves', () => {
  it("slot path: the old key's delete names the columns its insert lacks", () => {
    const [del, ins] = changes(decodeRawRecord(slot({}), ctx));
    expect(del).toMatchObject({ op: 'delete', key: { id: 1 }, handover: ['body'] });
    expect(ins).toMatchObject({ op: 'insert', key: { id: 2 }, missing: ['body'], before: { id: 1 } });
    expect(ins!.handover).toBeUndefined();
  });

  it('slot path: no mark when the insert is complete, or for a plain update', () => {
    const [del] = changes(decodeRawRecord(slot({ unchanged: [] }), ctx));
    expect(del!.handover).toBeUndefined();
    const [upd] = changes(decodeRawRecord(slot({ oldKey: null }), ctx));
    expect(upd).toMatchObject({ op: 'update', missing: ['body'] });
    expect(upd!.handover).toBeUndefined();
  });

  it('DMS path: an update whose before image has another key, with a column left out of data', () => {
    const rec = {
      data: { id: 2, title: 'x' },
      'before-image': { id: 1 },
      metadata: {
        'record-type': 'data',
        operation: 'update',
        'schema-name': 'public',
        'table-name': 'docs',
        'stream-position': '00000002/7C007178.3.00000002/7C007178',
        'transaction-record-id': 1,
        'commit-timestamp': '2026-11-29T12:00:00Z',
        'transaction-id': 9,
      },
    };
    const [del, ins] = changes(decodeRawRecord(rec, ctx));
    expect(del).toMatchObject({ op: 'delete', key: { id: 1 }, handover: ['body'] });
    expect(ins).toMatchObject({ op: 'insert', key: { id: 2 }, missing: ['body'] });
  });

  it('the event validation keeps the mark on deletes and refuses it elsewhere', () => {
    const [del, ins] = changes(decodeRawRecord(slot({}), ctx));
    expect(validateChangeEvent(JSON.parse(JSON.stringify(del)))).toEqual(del);
    expect(() => validateChangeEvent({ ...ins, handover: ['body'] })).toThrow(InvalidRecordError);
    expect(() => validateChangeEvent({ ...del, handover: 'body' })).toThrow(/handover: expected an array of column names/);
  });
});
