/**
 * The PostgreSQL dialect's column types (docs/warehouse-apply.md, "Dialects"; docs/types.md):
 * native types that read the source's text back as the same value, text for the rest.
 */
import { describe, expect, it } from 'vitest';
import { postgresAccepts, postgresColumnType, postgresDialect } from '../../../lambda/core/warehouse/postgres-dialect.ts';
import { catalogType } from '../../../lambda/core/warehouse/warehouse-sql.ts';

describe('postgresColumnType', () => {
  const cases: Array<[string | null, string]> = [
    ['integer', 'bigint'],
    ['smallint', 'bigint'],
    ['double precision', 'double precision'],
    ['real', 'double precision'],
    ['numeric', 'numeric'],
    ['numeric(10,2)', 'numeric(38,2)'],
    ['numeric(50,2)', 'numeric'],
    ['numeric(3,-2)', 'numeric'],
    ['text', 'text'],
    ['character varying(20)', 'text'],
    ['json', 'json'],
    ['jsonb', 'jsonb'],
    ['bytea', 'bytea'],
    ['uuid', 'uuid'],
    ['boolean', 'boolean'],
    ['date', 'date'],
    ['timestamp(3) without time zone', 'timestamp'],
    ['timestamp with time zone', 'timestamptz'],
    ['integer[]', 'bigint[]'],
    ['text[]', 'text[]'],
    ['numeric(10,2)[]', 'numeric[]'],
    ['jsonb[]', 'jsonb[]'],
    ['uuid[][]', 'uuid[]'],
    ['timestamp with time zone[]', 'text'],
    ['character varying(5)[]', 'text[]'],
    ['character(3)[]', 'text'],
    ['mood', 'text'],
    ['interval', 'text'],
    [null, 'text'],
  ];
  for (const [source, want] of cases) it(`${String(source)} → ${want}`, () => expect(postgresColumnType(source)).toBe(want));

  it('never refuses a numeric (PostgreSQL holds every numeric value exactly)', () => {
    expect(postgresDialect.columnType('numeric(1000,500)')).toEqual({ type: 'numeric' });
  });

  it('array columns read back from the catalog as the type it made', () => {
    for (const [udt, type] of [
      ['_int8', 'bigint[]'],
      ['_numeric', 'numeric[]'],
      ['_jsonb', 'jsonb[]'],
      ['_text', 'text[]'],
      ['_uuid', 'uuid[]'],
    ] as const) {
      expect(
        catalogType({
          table_name: 't',
          column_name: 'c',
          data_type: 'ARRAY',
          character_maximum_length: null,
          numeric_precision: null,
          numeric_scale: null,
          udt_name: udt,
        }),
      ).toBe(type);
    }
  });

  it('a text column (text, or varchar(65535) of earlier versions) takes every type; others only their own', () => {
    expect(postgresAccepts('text', 'jsonb')).toBe(true);
    expect(postgresAccepts('varchar(65535)', 'bytea')).toBe(true);
    expect(postgresAccepts('numeric(38,2)', 'numeric(38,2)')).toBe(true);
    expect(postgresAccepts('numeric(38,2)', 'numeric')).toBe(false);
    expect(postgresAccepts('bigint', 'double precision')).toBe(false);
  });
});
