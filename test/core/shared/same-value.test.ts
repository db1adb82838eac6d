/**
 * The one value comparison (lambda/core/shared/same-value.ts), by the class of the column's type. The
 * first block is the reproduction of the review of 2026-12-06 (`same-value.ts`): the old
 * comparison called every pair of it equal whatever the column's type.
 */
import { describe, expect, it } from 'vitest';
import { compareClasses, compareClassOf, sameValue, type CompareClass } from '../../../lambda/core/shared/same-value.ts';
import { documentValueText } from '../../../lambda/core/reconcile/reconcile-rows.ts';

describe('sameValue: the reproduction (a type-blind comparison called these equal)', () => {
  const cases: Array<[CompareClass, string | null, string | null, string]> = [
    ['text', '007', '7', 'zip code with leading zeros vs stripped'],
    ['text', '1.0', '1', 'a text column holding a decimal-looking text'],
    ['text', '1e2', '100', 'a text column'],
    ['jsonb', '{"id":9007199254740993}', '{"id":9007199254740992}', 'json big int that lost precision'],
    ['json', '{"id":9007199254740993}', '{"id":9007199254740992}', 'json big int that lost precision'],
    ['text', '[1,2]', '[1, 2]', 'a text column holding JSON-looking text'],
    ['json', '{"a":1,"a":2}', '{"a":2}', 'json keeps duplicate keys'],
    ['jsonb', '{"a":1e400}', '{"a":1e401}', 'beyond a double (Infinity, then null)'],
    ['decimal', '1e400', '1e401', 'beyond a double'],
    ['float', '-0', '0', 'negative zero is carried exactly'],
    ['text', '-0', '0', 'a text column'],
    ['text', '', null, 'empty vs NULL'],
    ['decimal', '', null, 'empty vs NULL'],
  ];
  for (const [cls, a, b, what] of cases) {
    it(`${cls}: ${JSON.stringify(a)} ≠ ${JSON.stringify(b)} (${what})`, () => {
      expect(sameValue(cls, a, b)).toBe(false);
      expect(sameValue(cls, b, a)).toBe(false);
    });
  }
});

describe('sameValue: what is equal, per class', () => {
  const equal: Array<[CompareClass, string | null, string | null]> = [
    ['decimal', '12.50', '12.5'],
    ['decimal', '1e5', '100000'],
    ['decimal', '-0', '0'],
    ['decimal', 'NaN', 'NaN'],
    ['decimal', 'Infinity', 'Infinity'],
    ['decimal', '123456789012345678901234567890.10', '123456789012345678901234567890.1'],
    ['float', '1e+308', '1e308'],
    ['float', '-0', '-0.0'],
    ['float', 'NaN', 'NaN'],
    ['float', '0.1', '0.100'],
    ['jsonb', '{"a": 1, "b": [1, 2]}', '{"b":[1,2],"a":1.0}'],
    ['jsonb', '{"a":1,"a":2}', '{"a":2}'],
    ['json', '{"a": [1, "\\u00e9"]}', '{"a":[1,"é"]}'],
    ['boolean', 't', 'true'],
    ['boolean', 'false', 'f'],
    ['text', null, null],
    ['text', 'x', 'x'],
  ];
  for (const [cls, a, b] of equal) {
    it(`${cls}: ${JSON.stringify(a)} = ${JSON.stringify(b)}`, () => {
      expect(sameValue(cls, a, b)).toBe(true);
      expect(sameValue(cls, b, a)).toBe(true);
    });
  }
  const different: Array<[CompareClass, string, string]> = [
    ['decimal', 'NaN', 'Infinity'],
    ['decimal', 'Infinity', '-Infinity'],
    ['decimal', '12.50', '12.51'],
    ['decimal', 'abc', 'abd'],
    ['decimal', 'NaN', '0'],
    ['float', '0.1', '0.10000000000000001'],
    ['json', '{"a":1,"b":2}', '{"b":2,"a":1}'],
    ['jsonb', '{"a":"1"}', '{"a":1}'],
    ['jsonb', '{"a":', '{"a":}'],
    ['boolean', 't', 'yes'],
    ['text', 'abc', 'abc '],
  ];
  for (const [cls, a, b] of different) {
    it(`${cls}: ${JSON.stringify(a)} ≠ ${JSON.stringify(b)}`, () => expect(sameValue(cls, a, b)).toBe(false));
  }
});

describe('compareClassOf / compareClasses', () => {
  it('classes PostgreSQL and DMS type names; anything else is text', () => {
    const want: Record<string, CompareClass> = {
      integer: 'decimal',
      bigint: 'decimal',
      smallint: 'decimal',
      'numeric(12,2)': 'decimal',
      numeric: 'decimal',
      INT8: 'decimal',
      UINT8: 'decimal',
      'NUMERIC(38,4)': 'decimal',
      'double precision': 'float',
      real: 'float',
      REAL8: 'float',
      jsonb: 'jsonb',
      json: 'json',
      boolean: 'boolean',
      text: 'text',
      'character varying(5)': 'text',
      'integer[]': 'text',
      money: 'text',
      'timestamp with time zone': 'text',
      uuid: 'text',
      STRING: 'text',
      NCLOB: 'text',
    };
    for (const [t, c] of Object.entries(want)) expect(compareClassOf(t), t).toBe(c);
    expect(compareClassOf(null)).toBe('text');
  });
  it('takes the registered type first, then the catalog type, and compares masked columns as text', () => {
    const classes = compareClasses(['a', 'b', 'c', 'd'], { a: 'numeric', b: null, c: 'integer' }, { a: 'text', b: 'jsonb', c: 'integer', d: 'bigint' }, ['c']);
    expect(classes).toEqual({ a: 'decimal', b: 'jsonb', c: 'text', d: 'decimal' });
    expect(compareClasses(['x'], undefined, undefined)).toEqual({ x: 'text' });
  });
});

describe('documentValueText (a search document value as compared)', () => {
  it('keeps the sign of a -0 number, which String() drops', () => {
    expect(documentValueText(-0)).toBe('-0');
    expect(documentValueText(JSON.parse('-0') as number)).toBe('-0');
    expect(sameValue('float', documentValueText(0), '-0')).toBe(false);
    expect(sameValue('float', documentValueText(-0), '-0')).toBe(true);
    expect(documentValueText(12.5)).toBe('12.5');
    expect(documentValueText(true)).toBe('true');
    expect(documentValueText(undefined)).toBeNull();
  });
});
