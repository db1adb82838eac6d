/**
 * `checkEventColumns` (lambda/core/sink/sink-admission.ts) remembers, per schema version, column rule
 * and table, the names that passed; what it refuses it refuses every time, and the key check runs
 * on every event whatever was remembered.
 */
import { describe, expect, it } from 'vitest';
import { checkEventColumns } from '../../../lambda/core/sink/sink-admission.ts';
import type { SchemaVersion } from '../../../lambda/core/shared/control-plane.ts';
import { InvalidRecordError, UnsafeIdentifierError } from '../../../lambda/core/shared/errors.ts';
import { ENVELOPE_VERSION, type ChangeEvent, type Row } from '../../../lambda/core/shared/event.ts';
import { assertSourceColumn } from '../../../lambda/core/warehouse/warehouse-sql.ts';

const schema: SchemaVersion = {
  source: 'src',
  table: 'public.t',
  version: 3,
  columns: [
    { name: 'id', type: 'integer' },
    { name: 'v', type: 'text' },
    { name: 'w', type: 'text' },
  ],
  key: ['id'],
  effectivePosition: '0'.repeat(24),
  registeredAt: new Date(0).toISOString(),
} as SchemaVersion;

const ev = (key: Row, after: Row | null, op: ChangeEvent['op'] = 'update', table = 'public.t', missing: string[] = []): ChangeEvent => ({
  v: ENVELOPE_VERSION,
  source: 'src',
  table,
  op,
  key,
  after,
  before: null,
  missing,
  position: '0'.repeat(24),
  commitTs: new Date(0).toISOString(),
  txId: null,
  schemaVersion: 3,
  capture: 'slot',
  synthetic: false,
});

describe('checkEventColumns with its per-schema memory', () => {
  it('refuses an unknown or unsafe name every time, also after other names passed', () => {
    const rule = (name: string, table: string): void => void assertSourceColumn(name, table);
    for (let i = 0; i < 3; i++) {
      expect(() => checkEventColumns(ev({ id: 1 }, { id: 1, v: 'a' }), schema, rule)).not.toThrow();
      expect(() => checkEventColumns(ev({ id: 1 }, { id: 1, nope: 'a' }), schema, rule)).toThrow(UnsafeIdentifierError);
      expect(() => checkEventColumns(ev({ id: 1 }, { id: 1, _cdc_x: 'a' }), schema, rule)).toThrow(/reserved/);
      expect(() => checkEventColumns(ev({ id: 1 }, { id: 1 }, 'update', 'public.t', ['nope']), schema, rule)).toThrow(/missing names a column/);
    }
  });

  it('checks the whole primary key on every event', () => {
    const rule = (): void => undefined;
    checkEventColumns(ev({ id: 1 }, { id: 1, v: 'a', w: 'b' }), schema, rule);
    expect(() => checkEventColumns(ev({ v: 'a' }, { v: 'a' }), schema, rule)).toThrow(InvalidRecordError);
    expect(() => checkEventColumns(ev({ id: 1, v: 'a' }, { id: 1, v: 'a' }), schema, rule)).toThrow(/expected the primary key \(id\) .* got \(id, v\)/);
    expect(() => checkEventColumns(ev({}, null, 'truncate'), schema, rule)).not.toThrow();
    expect(() => checkEventColumns(ev({ id: 1 }, null, 'truncate'), schema, rule)).toThrow(/truncate/);
  });

  it('asks the column rule again for another table and for another rule', () => {
    const asked: string[] = [];
    const onlyT = (name: string, table: string): void => {
      asked.push(`${table}.${name}`);
      if (table !== 'public.t' && name === 'v') throw new UnsafeIdentifierError(name, `not on ${table}`);
    };
    checkEventColumns(ev({ id: 1 }, { id: 1, v: 'a' }), schema, onlyT);
    checkEventColumns(ev({ id: 1 }, { id: 1, v: 'a' }), schema, onlyT);
    expect(asked).toEqual(['public.t.id', 'public.t.v']);
    expect(() => checkEventColumns(ev({ id: 1 }, { id: 1, v: 'a' }, 'update', 'public.u'), schema, onlyT)).toThrow(/not on public.u/);
    const other: string[] = [];
    checkEventColumns(ev({ id: 1 }, { id: 1, v: 'a' }), schema, (n) => void other.push(n));
    expect(other).toEqual(['id', 'v']);
  });
});
