import { describe, expect, it } from 'vitest';
import { parseTableConfig, TableConfigError, TableConfigIndex, validateTableConfig, checkKeyAgainstRules } from '../../../lambda/core/tables/table-config.ts';

describe('table configuration', () => {
  it('parses entries and fills defaults', () => {
    const configs = parseTableConfig(
      JSON.stringify([
        { table: 'public.customers', key: ['id'], deleteMode: 'soft', mask: ['email'], exclude: ['ssn'] },
        { table: 'public.orders', deleteMode: 'hard' },
        { table: 'public.notes' },
      ]),
    );
    expect(configs).toEqual([
      { table: 'public.customers', key: ['id'], deleteMode: 'soft', mask: ['email'], exclude: ['ssn'] },
      { table: 'public.orders', deleteMode: 'hard', mask: [], exclude: [] },
      { table: 'public.notes', deleteMode: 'soft', mask: [], exclude: [] },
    ]);
    const index = new TableConfigIndex(configs);
    expect(index.keyColumns('public.customers')).toEqual(['id']);
    expect(index.keyColumns('public.orders')).toBeNull();
    expect(index.columnRules('public.customers')).toEqual({ mask: ['email'], exclude: ['ssn'] });
    expect(index.columnRules('public.unknown')).toEqual({ mask: [], exclude: [] });
    expect(index.deleteMode('public.orders')).toBe('hard');
    expect(index.deleteMode('public.unknown')).toBe('soft');
    expect(index.has('public.notes')).toBe(true);
    expect(index.has('public.unknown')).toBe(false);
    expect(index.tables()).toEqual(['public.customers', 'public.orders', 'public.notes']);
  });

  it('takes any table name PostgreSQL accepts and refuses by name the ones that cannot be carried (docs/onboarding.md, "Names")', () => {
    const names = ['Sales Dept.Total with tax', 'public.Orders', 'public.Zoë "quoted"', ' lead.trail '];
    expect(validateTableConfig(names.map((table) => ({ table }))).map((c) => c.table)).toEqual(names);
    expect(() => validateTableConfig([{ table: 'public.a.b' }])).toThrow(/CDC_TABLE_CONFIG\[0\]\.table: expected 'schema\.table'/);
    expect(() => validateTableConfig([{ table: 'public.back\\slash' }])).toThrow(
      /CDC_TABLE_CONFIG\[0\]\.table: table name "back\\\\slash" .* cannot be carried: it holds '\\'/,
    );
    expect(() => validateTableConfig([{ table: 'public._cdc_x' }])).toThrow(/reserved for the platform/);
  });

  it('an empty array is a valid configuration; an unset variable is not', () => {
    expect(parseTableConfig('[]')).toEqual([]);
    expect(() => parseTableConfig(undefined)).toThrow(/^CDC_TABLE_CONFIG: not set/);
    expect(() => parseTableConfig('  ')).toThrow(TableConfigError);
    expect(() => parseTableConfig('{')).toThrow(/^CDC_TABLE_CONFIG: not valid JSON/);
    expect(() => parseTableConfig('{}')).toThrow(/^CDC_TABLE_CONFIG: expected a JSON array/);
  });

  it.each([
    [[null], 'CDC_TABLE_CONFIG[0]', /expected an object/],
    [[{ table: 'customers' }], 'CDC_TABLE_CONFIG[0].table', /schema\.table/],
    [[{ table: 'public.a' }, { table: 'public.a' }], 'CDC_TABLE_CONFIG[1].table', /configured twice \(also at index 0\)/],
    [[{ table: 'public.a', deleteMode: 'HARD' }], 'CDC_TABLE_CONFIG[0].deleteMode', /'soft' or 'hard'/],
    [[{ table: 'public.a', masks: ['email'] }], 'CDC_TABLE_CONFIG[0].masks', /unknown field/],
    [[{ table: 'public.a', mask: 'email' }], 'CDC_TABLE_CONFIG[0].mask', /array of column names/],
    [[{ table: 'public.a', mask: ['email', ''] }], 'CDC_TABLE_CONFIG[0].mask[1]', /column name/],
    [[{ table: 'public.a', exclude: ['x', 'x'] }], 'CDC_TABLE_CONFIG[0].exclude', /listed twice/],
    [[{ table: 'public.a', mask: ['x'], exclude: ['x'] }], 'CDC_TABLE_CONFIG[0].exclude', /both masked and excluded/],
    [[{ table: 'public.a', key: ['id', 7] }], 'CDC_TABLE_CONFIG[0].key[1]', /column name/],
    [[{ table: 'public.a' }, { table: 'public.b', key: ['id'], mask: ['id'] }], 'CDC_TABLE_CONFIG[1].key', /key column "id" of public\.b cannot be masked/],
    [[{ table: 'public.b', key: ['id', 'x'], exclude: ['x'] }], 'CDC_TABLE_CONFIG[0].key', /cannot be excluded/],
  ] as [unknown, string, RegExp][])('refuses %j at %s', (value, field, message) => {
    try {
      validateTableConfig(value);
    } catch (e) {
      expect(e).toBeInstanceOf(TableConfigError);
      expect((e as TableConfigError).field).toBe(field);
      expect((e as TableConfigError).code).toBe('INVALID_TABLE_CONFIG');
      expect((e as Error).message).toMatch(message);
      return;
    }
    throw new Error('expected an error');
  });

  it('an empty or null key is not declared', () => {
    const [a, b] = validateTableConfig([
      { table: 'public.a', key: [] },
      { table: 'public.b', key: null },
    ]);
    expect(a).not.toHaveProperty('key');
    expect(b).not.toHaveProperty('key');
    expect(new TableConfigIndex([a!]).keyColumns('public.a')).toBeNull();
  });

  it('checks a key learned later against the rules', () => {
    expect(() => checkKeyAgainstRules('public.a', ['id'], { mask: ['email'], exclude: [] })).not.toThrow();
    expect(() => checkKeyAgainstRules('public.a', ['email'], { mask: ['email'], exclude: [] })).toThrow(/cannot be masked/);
  });

  it('refuses a table whose name takes the platform prefix _cdc_, by name', () => {
    expect(() => parseTableConfig('[{"table":"public._cdc_mirror_t"}]', 'tables.json')).toThrow(
      /^tables\.json\[0\]\.table: .*reserved for the platform.*public\._cdc_mirror_t/,
    );
  });

  it('names the origin in errors', () => {
    expect(() => parseTableConfig('[1]', 'tables.json')).toThrow(/^tables\.json\[0\]: /);
  });
});
