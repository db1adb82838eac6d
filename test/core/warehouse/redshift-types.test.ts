/**
 * The Redshift dialect's types and the per-column policy for values Redshift cannot hold: one
 * test per reason and policy (docs/warehouse-apply.md, "Redshift: types and values it cannot hold").
 */
import { describe, expect, it } from 'vitest';
import {
  redshiftColumn,
  redshiftText,
  RedshiftValueRefusedError,
  REDSHIFT_MAX_VARBYTE_BYTES,
  REDSHIFT_MAX_VARCHAR_BYTES,
  stageValues,
  type RedshiftColumn,
  type ValuePolicy,
} from '../../../lambda/core/warehouse/redshift-types.ts';
import type { JsonValue } from '../../../lambda/core/shared/event.ts';

describe('Redshift types', () => {
  it('maps source types to Redshift types', () => {
    const m = (t: string | null): string => redshiftColumn('c', t).type;
    expect(m('jsonb')).toBe('super');
    expect(m('json')).toBe('super');
    expect(m('integer[]')).toBe('super');
    expect(m('bytea')).toBe('varbyte(1024000)');
    expect(m('text')).toBe('varchar(65535)');
    expect(m(null)).toBe('varchar(65535)');
    expect(m('varchar(20)')).toBe('varchar(80)');
    expect(m('character varying(20000)')).toBe('varchar(65535)');
    expect(m('numeric(12,4)')).toBe('numeric(38,4)');
    expect(m('numeric')).toBe('varchar(65535)');
    expect(m('numeric(50,2)')).toBe('varchar(65535)');
    expect(m('smallint')).toBe('bigint');
    expect(m('double precision')).toBe('double precision');
    expect(m('timestamp with time zone')).toBe('timestamptz');
    expect(m('timestamp(3) without time zone')).toBe('timestamp');
    expect(m('time')).toBe('time');
    expect(m('timetz')).toBe('timetz');
    expect(m('date')).toBe('date');
    expect(m('uuid')).toBe('varchar(65535)');
  });
});

/** Each value Redshift cannot hold, with its column and reason. */
const UNHELD: { what: string; col: RedshiftColumn; value: JsonValue; reason: string }[] = [
  { what: 'a string over 65,535 bytes (21,846 three-byte characters)', col: redshiftColumn('c', 'text'), value: '€'.repeat(21_846), reason: 'too-long' },
  { what: 'a varchar(2) value over 8 bytes', col: redshiftColumn('c', 'varchar(2)'), value: '€€€', reason: 'too-long' },
  { what: 'NaN in a double', col: redshiftColumn('c', 'double precision'), value: 'NaN', reason: 'nan' },
  { what: 'Infinity in a double', col: redshiftColumn('c', 'real'), value: 'Infinity', reason: 'infinity' },
  { what: '-Infinity in a double', col: redshiftColumn('c', 'float8'), value: '-Infinity', reason: 'infinity' },
  { what: 'NaN in a numeric', col: redshiftColumn('c', 'numeric(10,2)'), value: 'NaN', reason: 'nan' },
  { what: 'a numeric beyond 38 − s integer digits', col: redshiftColumn('c', 'numeric(10,2)'), value: '1'.repeat(37), reason: 'numeric-overflow' },
  { what: 'a numeric that would round', col: redshiftColumn('c', 'numeric(10,2)'), value: '1.234', reason: 'numeric-overflow' },
  { what: 'a date before 4713 BC', col: redshiftColumn('c', 'date'), value: '4714-01-01 BC', reason: 'date-out-of-range' },
  { what: 'a timestamp before 4713-11-24 BC', col: redshiftColumn('c', 'timestamp'), value: '4713-11-23 10:00:00 BC', reason: 'date-out-of-range' },
  { what: 'infinity as a date', col: redshiftColumn('c', 'date'), value: 'infinity', reason: 'infinity' },
  { what: '-infinity as a timestamptz', col: redshiftColumn('c', 'timestamptz'), value: '-infinity', reason: 'infinity' },
  { what: 'a bytea over 1,024,000 bytes', col: redshiftColumn('c', 'bytea'), value: `\\x${'ab'.repeat(REDSHIFT_MAX_VARBYTE_BYTES + 1)}`, reason: 'too-long' },
  { what: 'a JSON document over 4 MB', col: redshiftColumn('c', 'jsonb'), value: JSON.stringify({ a: 'x'.repeat(4 * 1024 * 1024) }), reason: 'too-long' },
];

describe('values Redshift cannot hold meet the column policy', () => {
  const policy = (p: ValuePolicy) => () => p;
  for (const u of UNHELD) {
    it(`${u.what}: refuse-row throws a named error with the column; null-with-marker writes NULL and marks it`, () => {
      const row = { k: 1, c: u.value };
      const cols = [redshiftColumn('k', 'integer'), u.col];
      let err: unknown;
      try {
        stageValues('public.t', cols, row, policy('refuse-row'));
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(RedshiftValueRefusedError);
      expect(err).toMatchObject({ code: 'REDSHIFT_VALUE_REFUSED', table: 'public.t', column: 'c', reason: u.reason });
      expect(stageValues('public.t', cols, row, policy('null-with-marker'))).toEqual({ values: ['1', null], unheld: `c:${u.reason}` });
    });
  }

  it('values at the limits are held unchanged', () => {
    const held: [RedshiftColumn, JsonValue, string][] = [
      [redshiftColumn('c', 'text'), '€'.repeat(21_845), '€'.repeat(21_845)],
      [redshiftColumn('c', 'text'), 'x'.repeat(REDSHIFT_MAX_VARCHAR_BYTES), 'x'.repeat(REDSHIFT_MAX_VARCHAR_BYTES)],
      [redshiftColumn('c', 'numeric(10,2)'), '-999999999999999999999999999999999999.99', '-999999999999999999999999999999999999.99'],
      [redshiftColumn('c', 'numeric(10,2)'), '1.50', '1.50'],
      [redshiftColumn('c', 'date'), '4713-11-24 BC', '4713-11-24 BC'],
      [redshiftColumn('c', 'bytea'), '\\xDEADbeef', 'deadbeef'],
      [redshiftColumn('c', 'jsonb'), { a: [1, 'x'] }, '{"a":[1,"x"]}'],
      [redshiftColumn('c', 'double precision'), 1.5e300, '1.5e+300'],
    ];
    for (const [c, v, text] of held) expect(redshiftText(c, 't', v)).toEqual({ text });
  });

  it('marks several columns of one row, and an absent value is NULL, not a marker', () => {
    const cols = [redshiftColumn('a', 'double precision'), redshiftColumn('b', 'date'), redshiftColumn('c', 'text')];
    expect(stageValues('t', cols, { a: 'NaN', b: 'infinity' }, () => 'null-with-marker')).toEqual({ values: [null, null, null], unheld: 'a:nan,b:infinity' });
  });
});
