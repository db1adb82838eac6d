/**
 * The DMS records the local capture writes (lambda/core/capture/dms-record.ts): the DMS decoder
 * reads each to the changes the slot decoder reads from the slot record it was made of: same ops,
 * keys, positions, commit times, transaction ids and row images, over many random records (seed
 * and count printed). What DMS cannot carry differs as documented: a delete's before image is the
 * key, an unchanged TOAST value not in the old image is missing.
 */
import { describe, expect, it } from 'vitest';
import { decodeDmsRecord, type DecodeContext } from '../../../lambda/core/capture/dms-decoder.ts';
import { decodeSlotRecord } from '../../../lambda/core/capture/slot-decoder.ts';
import { dmsLsn, dmsRecordOf, dmsRecordText, dmsTimestamp, type DmsRenderContext } from '../../../lambda/core/capture/dms-record.ts';
import type { DecodeResult, DecodedChange } from '../../../lambda/core/capture/decoded.ts';
import { SLOT_RECORD_FORMAT, type SlotColumn, type SlotRecord } from '../../../lambda/core/capture/slot-record.ts';
import { InvalidRecordError } from '../../../lambda/core/shared/errors.ts';
import type { JsonValue } from '../../../lambda/core/shared/event.ts';
import { rng } from '../../helpers/rng.ts';

function changes(r: DecodeResult): DecodedChange[] {
  if (r.kind !== 'changes') throw new Error(`expected changes, got ${r.kind}`);
  return r.changes;
}

const COLUMNS = ['id', 'k2', 'name', 'amount', 'doc', 'big'];

function randomRecord(r: () => number): { record: SlotRecord; key: string[] } {
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
  const key = r() < 0.5 ? ['id'] : ['id', 'k2'];
  const value = (name: string): JsonValue => {
    if (key.includes(name)) return name === 'id' ? Math.floor(r() * 1000) : pick(['a', 'b', 'ü', '9007199254740993']);
    return pick<JsonValue>([null, 0, -1.5, '12.30', '9007199254740993', 'text "quoted"', '{"a": 1}', true, 'x'.repeat(Math.floor(r() * 50))]);
  };
  const row = (): SlotColumn[] => COLUMNS.map((name) => ({ name, type: 'text', value: value(name) }));
  const op = pick(['insert', 'update', 'delete'] as const);
  const full = r() < 0.3; // REPLICA IDENTITY FULL: the old image is the whole row
  const base = {
    format: SLOT_RECORD_FORMAT as typeof SLOT_RECORD_FORMAT,
    source: 'orders',
    xid: String(1 + Math.floor(r() * 4e9)),
    commitLsn: `${Math.floor(r() * 16)
      .toString(16)
      .toUpperCase()}/${Math.floor(r() * 0xffffffff)
      .toString(16)
      .toUpperCase()}`,
    commitTs: '2026-11-29T13:05:21.188736Z',
    index: Math.floor(r() * 5000),
    table: 'public.t',
    key,
  };
  const keyOf = (cols: SlotColumn[]) => cols.filter((c) => key.includes(c.name));
  if (op === 'insert') return { record: { ...base, op, columns: row(), oldKey: null, unchanged: [] }, key };
  if (op === 'delete') {
    const old = row();
    return {
      record: { ...base, op, columns: null, oldKey: full ? old.filter((c) => c.value !== null || key.includes(c.name)) : keyOf(old), unchanged: [] },
      key,
    };
  }
  const cols = row();
  const unchanged = r() < 0.4 ? ['doc'] : [];
  const delivered = cols.filter((c) => !unchanged.includes(c.name));
  const keyChanged = r() < 0.4;
  const old = row().map((c) => (!keyChanged && key.includes(c.name) ? cols.find((x) => x.name === c.name)! : c));
  const oldKey = full ? old : keyChanged ? keyOf(old) : null;
  return { record: { ...base, op, columns: delivered, oldKey, unchanged }, key };
}

describe('DMS records of the local capture', () => {
  it('decode with the DMS decoder to the slot decoder’s changes (randomized)', () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1e9);
    const runs = 2000;
    console.log(`dms-record round trip: seed ${seed}, ${runs} records`);
    const r = rng(seed);
    for (let i = 0; i < runs; i++) {
      const { record, key } = randomRecord(r);
      const ctx: DecodeContext = { source: 'orders', keyColumns: () => key, columns: () => COLUMNS };
      const dms = JSON.parse(JSON.stringify(dmsRecordOf(record, { now: new Date(), columns: COLUMNS, previous: null })));
      const fromDms = changes(decodeDmsRecord(dms, ctx));
      const fromSlot = changes(decodeSlotRecord(record));
      const at = `seed ${seed}, record ${i}: ${JSON.stringify(record)}`;
      expect(
        fromDms.map((c) => [c.op, c.key, c.position, c.commitTs, c.txId]),
        at,
      ).toEqual(fromSlot.map((c) => [c.op, c.key, c.position, c.commitTs, c.txId]));
      for (let j = 0; j < fromDms.length; j++) {
        const d = fromDms[j]!;
        const s = fromSlot[j]!;
        expect(d.after, at).toEqual(s.after);
        expect(d.missing, at).toEqual(s.missing);
        if (d.op === 'update') expect(d.before, at).toEqual(s.before);
        // A delete's before image is the key on the DMS path (its other columns arrive as nulls).
        if (d.op === 'delete' && record.op === 'delete') expect(d.before, at).toEqual(s.key);
      }
    }
  });

  it('writes each record as JSON.stringify writes dmsRecordOf, however consecutive records share a batch, a transaction or a table (randomized)', () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1e9);
    const runs = 5000;
    console.log(`dms-record text: seed ${seed}, ${runs} records`);
    const r = rng(seed);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
    const outcome = (f: () => string): { text: string } | { error: string } => {
      try {
        return { text: f() };
      } catch (err) {
        return { error: `${(err as Error).constructor.name}: ${(err as Error).message}` };
      }
    };
    // Consecutive records keep or change each part the metadata texts are made of, as a batch's records do.
    let now = new Date('2026-11-29T13:05:21.188Z');
    let previous: DmsRenderContext['previous'] = null;
    let last: SlotRecord | null = null;
    for (let i = 0; i < runs; i++) {
      const { record: fresh } = randomRecord(r);
      let record: SlotRecord = last !== null && r() < 0.6 ? { ...fresh, xid: last.xid, commitLsn: last.commitLsn, commitTs: last.commitTs } : fresh;
      if (r() < 0.3) record = { ...record, table: pick(['public.t', 'public.u', 'sales."odd.name"', 'ü.ß']) };
      if (r() < 0.05) record = { ...record, xid: pick(['99999999999999999999', 'x1', '0']) };
      if (r() < 0.03) record = { ...record, op: pick(['truncate', 'snapshot'] as const) };
      if (r() < 0.02) record = { ...record, capture: 'poll' };
      if (r() < 0.2) record = { ...record, commitTs: pick(['2026-11-29T13:05:21.188736Z', '2026-11-30T00:00:00.000001Z']) };
      if (r() < 0.1) now = new Date(now.getTime() + Math.floor(r() * 3));
      if (r() < 0.2) previous = r() < 0.2 ? null : { transactionId: Math.floor(r() * 4e9), recordId: Math.floor(r() * 100) };
      const ctx: DmsRenderContext = {
        now,
        columns: r() < 0.2 ? null : COLUMNS,
        previous,
        ...(r() < 0.2 ? { table: pick(['public.t_p1', 'public.t_p2']) } : {}),
      };
      const want = outcome(() => JSON.stringify(dmsRecordOf(record, ctx)));
      expect(
        outcome(() => dmsRecordText(record, ctx)),
        `seed ${seed}, record ${i}: ${JSON.stringify(record)}`,
      ).toEqual(want);
      last = record;
    }
  });

  it('writes a delete as JSON.stringify writes dmsRecordOf, whatever its old image and the table columns are named and hold (randomized)', () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1e9);
    const runs = Number(process.env.RUNS ?? 5000);
    console.log(`dms-record delete text: seed ${seed}, ${runs} deletes`);
    const r = rng(seed);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
    // Names an object writes in its own order, drops, or finds on its prototype, with plain ones.
    const NAMES = [
      'id',
      'k2',
      'name',
      'amount',
      '__proto__',
      'constructor',
      'toString',
      'hasOwnProperty',
      '10',
      '2',
      '01',
      '4294967295',
      'a"b',
      'x\\y',
      'ü',
      '',
      'x y',
      '\u2028',
    ];
    const VALUES: unknown[] = [
      null,
      0,
      -0,
      7,
      -1.5,
      1e21,
      2 ** 53,
      Number.NaN,
      Number.POSITIVE_INFINITY,
      'text',
      'say "hi"\n',
      '',
      '{"a": 1}',
      'ü€',
      true,
      false,
      { a: [1, 'x'] },
      [],
      undefined,
      1n,
    ];
    const outcome = (f: () => string): { text: string } | { error: string } => {
      try {
        return { text: f() };
      } catch (err) {
        return { error: `${(err as Error).constructor.name}: ${(err as Error).message}` };
      }
    };
    let direct = 0;
    for (let i = 0; i < runs; i++) {
      // Mostly plain names (the text is written without the object), now and then an odd one or a value only an object writes.
      const odd = r() < 0.3;
      const name = (): string => (odd && r() < 0.3 ? pick(NAMES) : pick(NAMES.slice(0, 4)));
      const value = (): unknown => (r() < 0.05 ? pick(VALUES.slice(-3)) : pick(VALUES.slice(0, -3)));
      const oldKey = Array.from({ length: Math.floor(r() * 5) }, () => ({ name: name(), type: 'text', value: value() })) as SlotColumn[];
      const columns = r() < 0.15 ? null : Array.from({ length: Math.floor(r() * 7) }, name);
      const record: SlotRecord = {
        format: SLOT_RECORD_FORMAT,
        source: 'orders',
        xid: String(1 + Math.floor(r() * 1000)),
        commitLsn: '0/10',
        commitTs: '2026-11-29T13:05:21.188736Z',
        index: i,
        table: 'public.t',
        op: 'delete',
        key: ['id'],
        columns: null,
        oldKey: r() < 0.03 ? null : oldKey,
        unchanged: [],
      };
      const ctx: DmsRenderContext = { now: new Date('2026-11-29T13:05:21.188Z'), columns, previous: null };
      const want = outcome(() => JSON.stringify(dmsRecordOf(record, ctx)));
      expect(
        outcome(() => dmsRecordText(record, ctx)),
        `seed ${seed}, delete ${i}: ${JSON.stringify({ oldKey: record.oldKey, columns }, (_, v: unknown) => (typeof v === 'bigint' ? `${v}n` : v))}`,
      ).toEqual(want);
      if (!odd) direct++;
    }
    expect(direct).toBeGreaterThan(runs / 2);
  });

  it('renders the metadata as DMS does: LSNs in 8+8 hex digits, microseconds, the previous transaction', () => {
    expect(dmsLsn('2/7C007178')).toBe('00000002/7C007178');
    expect(dmsLsn('0/1752928')).toBe('00000000/01752928');
    expect(dmsTimestamp(new Date('2026-11-29T13:05:21.188Z'))).toBe('2026-11-29T13:05:21.188000Z');
    const record: SlotRecord = {
      format: SLOT_RECORD_FORMAT,
      source: 'orders',
      xid: '1141',
      commitLsn: '2/7C0073F8',
      commitTs: '2024-07-29T00:59:07.678294Z',
      index: 1,
      table: 'public.foo',
      op: 'update',
      key: ['id'],
      columns: [{ name: 'id', type: 'integer', value: 45 }],
      oldKey: [{ name: 'id', type: 'integer', value: 46 }],
      unchanged: [],
    };
    const out = dmsRecordOf(record, {
      now: new Date('2024-07-29T00:59:07.686Z'),
      columns: ['id'],
      previous: { transactionId: 1140, recordId: 1 },
      table: 'public.foo_p1',
    });
    expect(out).toEqual({
      data: { id: 45 },
      'before-image': { id: 46 },
      metadata: {
        timestamp: '2024-07-29T00:59:07.686000Z',
        'record-type': 'data',
        operation: 'update',
        'partition-key-type': 'schema-table',
        'schema-name': 'public',
        'table-name': 'foo_p1',
        'transaction-id': 1141,
        'transaction-record-id': 1,
        'prev-transaction-id': 1140,
        'prev-transaction-record-id': 1,
        'commit-timestamp': '2024-07-29T00:59:07.678294Z',
        'stream-position': '00000002/7C0073F8.2.00000002/7C0073F8',
      },
    });
    // An update whose source supplied no old image has an empty before image, as DMS's pk-only one.
    expect(dmsRecordOf({ ...record, oldKey: null }, { now: new Date(), columns: null, previous: null })['before-image']).toEqual({});
  });

  it('refuses what DMS writes no change record for: a truncate, a snapshot row', () => {
    const truncate: SlotRecord = {
      format: SLOT_RECORD_FORMAT,
      source: 'orders',
      xid: '7',
      commitLsn: '0/10',
      commitTs: '2026-11-29T13:05:21.188736Z',
      index: 0,
      table: 'public.foo',
      op: 'truncate',
      key: [],
      columns: null,
      oldKey: null,
      unchanged: [],
    };
    expect(() => dmsRecordOf(truncate, { now: new Date(), columns: null, previous: null })).toThrow(InvalidRecordError);
    expect(() =>
      dmsRecordOf(
        { ...truncate, op: 'snapshot', key: ['id'], columns: [{ name: 'id', type: 'integer', value: 1 }] },
        { now: new Date(), columns: null, previous: null },
      ),
    ).toThrow(/snapshot/);
  });
});
