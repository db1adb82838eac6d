/**
 * The Redshift dialect's answers to the dialect port's questions (column type, accepts, value verdict).
 */
import { describe, expect, it } from 'vitest';
import { columnOfType, redshiftDialectParts } from '../../../lambda/core/warehouse/redshift-dialect.ts';
import { redshiftColumn } from '../../../lambda/core/warehouse/redshift-types.ts';

describe('Redshift dialect parts', () => {
  const d = redshiftDialectParts((type) => (type === 'date' ? 'null-with-marker' : 'refuse-row'));

  it('reads back every type it makes', () => {
    for (const s of [
      'integer',
      'text',
      'varchar(3)',
      'jsonb',
      'bytea',
      'numeric(12,4)',
      'real',
      'boolean',
      'date',
      'timestamp',
      'timestamptz',
      'time',
      'timetz',
      'integer[]',
    ]) {
      const c = redshiftColumn('c', s);
      expect(columnOfType('c', c.type), s).toEqual(c);
    }
    expect(() => columnOfType('c', 'jsonb')).toThrow(RangeError);
  });

  it('accepts a column unchanged only when it holds every value of the new one', () => {
    expect(d.accepts('varchar(65535)', 'varchar(80)')).toBe(true);
    expect(d.accepts('varchar(80)', 'varchar(65535)')).toBe(false);
    expect(d.accepts('bigint', 'bigint')).toBe(true);
    expect(d.accepts('numeric(38,2)', 'numeric(38,4)')).toBe(false);
    expect(d.columnType('jsonb')).toEqual({ type: 'super' });
  });

  it('a value verdict names the reason and the column policy', () => {
    expect(d.valueVerdict('varchar(4)', 'abcd')).toEqual({ keep: true });
    expect(d.valueVerdict('varchar(4)', 'abcdé')).toMatchObject({ keep: false, policy: 'refuse-row', reason: expect.stringMatching(/^too-long/) });
    expect(d.valueVerdict('date', '5000-01-01 BC')).toMatchObject({
      keep: false,
      policy: 'null-with-marker',
      reason: expect.stringMatching(/^date-out-of-range/),
    });
    expect(d.valueVerdict('double precision', 'NaN')).toMatchObject({ keep: false, reason: expect.stringMatching(/^nan/) });
  });
});
