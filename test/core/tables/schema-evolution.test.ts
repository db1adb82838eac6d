import { describe, expect, it } from 'vitest';
import type { ColumnDef, SchemaVersion } from '../../../lambda/core/shared/control-plane.ts';
import {
  classifyControl,
  classifySchema,
  compareTypes,
  isBreaking,
  type ObservedColumn,
  type ObservedShape,
} from '../../../lambda/core/tables/schema-evolution.ts';
import { sinkType } from '../../../lambda/core/warehouse/warehouse-sql.ts';

function version(columns: ColumnDef[], key: string[] = ['id']): SchemaVersion {
  return {
    source: 'orders',
    table: 'public.t',
    version: 1,
    columns,
    key,
    effectivePosition: '000000000000001000000000',
    registeredAt: '2026-01-01T00:00:00.000Z',
  };
}

const col = (name: string, type: string | null, nullable = true): ColumnDef => ({ name, type, nullable });
const seen = (name: string, type: string | null = null, nullable: boolean | null = null): ObservedColumn => ({ name, type, nullable });
const slot = (columns: ObservedColumn[], key: string[] = ['id']): ObservedShape => ({ columns, key, complete: true });
const dms = (names: string[], key: string[] | null = ['id']): ObservedShape => ({ columns: names.map((n) => seen(n)), key, complete: false });

const base = version([col('id', 'integer', false), col('name', 'text'), col('qty', 'smallint')]);

describe('compareTypes', () => {
  it.each([
    ['integer', 'integer'],
    ['integer', 'int4'],
    ['int', 'INT32'],
    ['bigint', 'int8'],
    ['INT8', 'bigint'],
    ['smallint', 'INT16'],
    ['character varying', 'varchar'],
    ['text', 'character varying'],
    ['STRING', 'text'],
    ['Character  Varying( 20 )', 'varchar(20)'],
    ['timestamp', 'timestamp without time zone'],
    ['timestamptz', 'timestamp with time zone'],
    ['bool', 'boolean'],
    ['numeric', 'decimal'],
    ['numeric(10, 2)', 'decimal(10,2)'],
    ['double precision', 'float8'],
    ['real', 'float4'],
    ['uuid', 'UUID'],
    ['jsonb', 'jsonb'],
  ])('%s and %s are the same type', (a, b) => {
    expect(compareTypes(a, b)).toBe('same');
  });

  it.each([
    ['smallint', 'integer'],
    ['integer', 'bigint'],
    ['smallint', 'bigint'],
    ['INT1', 'smallint'],
    ['numeric(10,2)', 'numeric(12,2)'],
    ['numeric(10,2)', 'numeric(38,2)'],
    ['NUMERIC(10,2)', 'numeric(12,2)'],
    ['real', 'double precision'],
    ['timestamp(3)', 'timestamp'],
    ['timestamp(0) with time zone', 'timestamptz'],
    ['WSTRING(10)', 'WSTRING(20)'],
    ['STRING(10)', 'text'],
    ['WSTRING', 'WSTRING(20)'], // a DMS length learned (registered before lengths were read)
    ['float(10)', 'float(40)'],
    ['varchar(10)', 'varchar(20)'],
    ['character varying(10)', 'text'],
    ['varchar(10)', 'character varying'],
    ['char(3)', 'character(5)'],
  ])('%s → %s is a widening', (a, b) => {
    expect(compareTypes(a, b)).toBe('widened');
  });

  it.each([
    ['bigint', 'integer'],
    ['integer', 'smallint'],
    ['integer', 'numeric(9,0)'],
    ['integer', 'numeric(10,2)'],
    ['bigint', 'numeric(18)'],
    ['numeric', 'numeric(10,2)'],
    ['numeric(10,2)', 'numeric(10,1)'],
    ['numeric(10,2)', 'numeric(10,3)'],
    ['numeric(10,2)', 'integer'],
    ['double precision', 'real'],
    ['integer', 'double precision'],
    ['integer', 'text'],
    ['varchar(20)', 'varchar(10)'],
    ['text', 'varchar(100)'],
    ['char(5)', 'char(3)'],
    ['char(5)', 'varchar(10)'],
    ['timestamp', 'timestamptz'],
    ['date', 'timestamp'],
    ['json', 'jsonb'],
    ['integer[]', 'bigint[]'],
    ['WSTRING(20)', 'WSTRING(10)'],
    ['character varying(20)', 'character varying(5)'],
    ['numeric(12,2)', 'numeric(10,2)'],
    ['timestamp', 'timestamp(3)'],
    ['timestamptz', 'timestamp(6)'],
    // widenings the warehouse could only apply with ALTER COLUMN TYPE (Redshift cannot): breaking
    ['integer', 'numeric'],
    ['bigint', 'numeric'],
    ['integer', 'numeric(10,0)'],
    ['integer', 'numeric(12,2)'],
    ['smallint', 'numeric(5)'],
    ['numeric(10,2)', 'numeric(11,3)'],
    ['numeric(10,2)', 'numeric'],
    ['numeric(10,2)', 'numeric(40,2)'],
  ])('%s → %s is a change, not a widening', (a, b) => {
    expect(compareTypes(a, b)).toBe('changed');
  });

  // What DMS reports for a PostgreSQL type (AWS DMS User Guide, "Source data types for
  // PostgreSQL"): a DMS table definition after a registration from the catalog or a snapshot is no
  // change of type, in either order (docs/schema-drift.md).
  it.each([
    ['char(5)', 'WSTRING(5)'],
    ['character', 'WSTRING(1)'],
    ['timestamp with time zone', 'DATETIME'],
    ['timestamp(3) with time zone', 'DATETIME'],
    ['time with time zone', 'TIME'],
    ['uuid', 'STRING'],
    ['uuid', 'WSTRING(36)'],
    ['jsonb', 'NCLOB'],
    ['json', 'NCLOB'],
    ['integer[]', 'NCLOB'],
    ['xml', 'CLOB'],
    ['bytea', 'BLOB'],
    ['boolean', 'BOOLEAN'],
    ['boolean', 'CHAR(5)'],
    ['money', 'NUMERIC(38,4)'],
    ['numeric', 'NUMERIC(28,6)'],
    ['numeric(40,2)', 'STRING'],
    ['interval', 'STRING(128)'],
    ['inet', 'STRING(50)'],
    ['bit(3)', 'STRING(3)'],
    ['tstzrange', 'STRING(255)'],
    ['mood', 'STRING(64)'], // an enum
  ])('DMS reports %s as %s: the same type, both ways', (pg, dms) => {
    expect(compareTypes(pg, dms)).toBe('same');
    expect(compareTypes(dms, pg)).toBe('same');
  });

  it.each([
    ['char(3)', 'WSTRING(5)'],
    ['uuid', 'NCLOB'],
    ['jsonb', 'STRING'],
    ['bytea', 'NCLOB'],
    ['integer', 'DATETIME'],
    ['mood', 'STRING(10)'],
    ['numeric(12,2)', 'STRING'],
    // two PostgreSQL names are compared as PostgreSQL's, never through DMS's coarser ones
    ['uuid', 'text'],
    ['timestamp', 'timestamptz'],
    ['char(5)', 'varchar(5)'],
  ])('%s and %s stay different types', (a, b) => {
    expect(compareTypes(a, b)).toBe('changed');
  });
});

describe('classifySchema: first sight', () => {
  it('a table not registered yet is a new table (compatible) with the observed columns and key', () => {
    const c = classifySchema(null, slot([seen('id', 'integer'), seen('v', 'text')]));
    expect(c.kind).toBe('compatible');
    expect(c.changes).toEqual([{ kind: 'new-table' }]);
    expect(c.reason).toBe('new table');
    expect(c.columns).toEqual([col('id', 'integer'), col('v', 'text')]);
    expect(c.key).toEqual(['id']);
  });

  it('a new table seen through DMS registers the delivered names with unknown types', () => {
    const c = classifySchema(null, dms(['id', 'name']));
    expect(c.columns).toEqual([col('id', null), col('name', null)]);
  });

  it('keeps known nullability of a new table', () => {
    const c = classifySchema(null, { columns: [seen('id', 'INT32', false), seen('name', 'STRING', true)], key: ['id'], complete: true });
    expect(c.columns).toEqual([col('id', 'INT32', false), col('name', 'STRING', true)]);
  });

  it('a new table without a known key registers an empty key', () => {
    expect(classifySchema(null, { columns: [], key: null, complete: false }).key).toEqual([]);
  });

  it('refuses an observation that names a column twice', () => {
    expect(() => classifySchema(null, slot([seen('id'), seen('id')]))).toThrow(/"id" twice/);
  });
});

describe('classifySchema: same', () => {
  it('the same columns and types are the same version', () => {
    const c = classifySchema(base, slot([seen('id', 'integer'), seen('name', 'text'), seen('qty', 'smallint')]));
    expect(c).toEqual({ kind: 'same', changes: [], reason: 'no change', columns: base.columns, key: ['id'] });
  });

  it('synonym type names are the same version', () => {
    expect(classifySchema(base, slot([seen('id', 'int4'), seen('name', 'text'), seen('qty', 'int2')])).kind).toBe('same');
  });

  it('a DMS record that leaves columns out did not drop them', () => {
    expect(classifySchema(base, dms(['id'])).kind).toBe('same');
    expect(classifySchema(base, dms(['id', 'qty'])).kind).toBe('same');
  });

  it('unknown types and nullability are no information', () => {
    expect(classifySchema(base, slot([seen('id'), seen('name'), seen('qty')])).kind).toBe('same');
  });

  it('an unknown key is no information', () => {
    expect(classifySchema(base, dms(['id'], null)).kind).toBe('same');
    expect(classifySchema(base, { columns: [], key: [], complete: false }).kind).toBe('same');
  });

  it('a DMS table definition after a registration from the catalog is the same version (DMS names the types coarser)', () => {
    const catalog = version([
      col('id', 'uuid', false),
      col('at', 'timestamp with time zone'),
      col('doc', 'jsonb'),
      col('code', 'character(2)'),
      col('price', 'numeric(12,2)'),
      col('ok', 'boolean'),
    ]);
    const tableDef: ObservedShape = {
      columns: [
        seen('id', 'STRING', false),
        seen('at', 'DATETIME', true),
        seen('doc', 'NCLOB', true),
        seen('code', 'WSTRING(2)', true),
        seen('price', 'NUMERIC(12,2)', true),
        seen('ok', 'BOOLEAN', true),
      ],
      key: ['id'],
      complete: true,
    };
    const c = classifySchema(catalog, tableDef);
    expect(c.kind, c.reason).toBe('same');
    expect(c.columns).toEqual(catalog.columns); // the catalog's finer names are kept
    // A real change still shows through DMS's names: the code column widened to WSTRING(5) is not char(2).
    expect(
      classifySchema(catalog, { ...tableDef, columns: tableDef.columns.map((x) => (x.name === 'code' ? seen('code', 'WSTRING(5)', true) : x)) }).kind,
    ).toBe('breaking');
  });

  it('a same result returns copies, not the registered objects', () => {
    const c = classifySchema(base, dms(['id']));
    expect(c.columns).not.toBe(base.columns);
    expect(c.columns[0]).not.toBe(base.columns[0]);
  });
});

describe('classifySchema: compatible', () => {
  it('a new column in a slot record is a compatible new version, appended in table order', () => {
    const c = classifySchema(base, slot([seen('id', 'integer'), seen('name', 'text'), seen('qty', 'smallint'), seen('note', 'text')]));
    expect(c.kind).toBe('compatible');
    expect(c.changes).toEqual([{ kind: 'add-column', column: 'note', type: 'text' }]);
    expect(c.reason).toBe('new nullable column note (text)');
    expect(c.columns.map((x) => x.name)).toEqual(['id', 'name', 'qty', 'note']);
    expect(c.columns[3]).toEqual(col('note', 'text', true));
  });

  it('a new column in a DMS record that also lacks a registered column is a rename seen in data: breaking, not a new nullable column', () => {
    const c = classifySchema(base, dms(['id', 'qty', 'note']));
    expect(c.kind).toBe('breaking');
    expect(c.changes).toEqual([{ kind: 'rename-column', from: 'name', to: 'note' }]);
    expect(c.reason).toBe('column name was dropped or renamed (to note?)');
    expect(classifySchema(base, dms(['id', 'note'])).changes).toEqual([{ kind: 'rename-column', from: 'name or qty', to: 'note' }]);
  });

  it('a new column in a DMS record that names every registered column is compatible', () => {
    const c = classifySchema(base, dms(['id', 'name', 'qty', 'note']));
    expect(c.kind).toBe('compatible');
    expect(c.changes).toEqual([{ kind: 'add-column', column: 'note', type: null }]);
    expect(c.columns).toEqual([...base.columns, col('note', null)]);
  });

  it('several new columns are one compatible change', () => {
    const c = classifySchema(base, dms(['id', 'name', 'qty', 'a', 'b']));
    expect(c.kind).toBe('compatible');
    expect(c.changes).toHaveLength(2);
    expect(c.reason).toBe('new nullable column a; new nullable column b');
  });

  it('a new column in a column listed as not delivered still exists (slot unchanged TOAST)', () => {
    const v = version([col('id', 'integer'), col('big', 'text')]);
    expect(classifySchema(v, slot([seen('id', 'integer'), seen('big')])).kind).toBe('same');
  });

  it.each([
    ['qty', 'smallint', 'integer'],
    ['qty', 'smallint', 'bigint'],
    ['name', 'text', 'text'],
  ])('widening %s from %s to %s', (column, from, to) => {
    const cols = base.columns.map((c) => (c.name === column ? seen(c.name, to) : seen(c.name, c.type)));
    const c = classifySchema(base, slot(cols));
    if (from === to) {
      expect(c.kind).toBe('same');
      return;
    }
    expect(c.kind).toBe('compatible');
    expect(c.changes).toEqual([{ kind: 'widen-type', column, from, to }]);
    expect(c.columns.find((x) => x.name === column)?.type).toBe(to);
  });

  it('every widening the registry calls compatible keeps the warehouse column type (no SinkTypeConflictError later)', () => {
    const types = [
      'smallint',
      'integer',
      'bigint',
      'INT8',
      'numeric',
      'numeric(5)',
      'numeric(10,2)',
      'numeric(12,2)',
      'numeric(11,3)',
      'numeric(38,2)',
      'numeric(40,2)',
      'real',
      'double precision',
      'float(10)',
      'text',
      'varchar(10)',
      'varchar(20)',
      'character varying',
      'WSTRING(20)',
      'char(3)',
      'char(5)',
      'timestamp',
      'timestamp(3)',
      'timestamptz',
      'date',
      'boolean',
      'uuid',
      'jsonb',
    ];
    let widenings = 0;
    for (const from of types) {
      for (const to of types) {
        if (compareTypes(from, to) !== 'widened') continue;
        widenings++;
        expect(sinkType(to), `${from} → ${to}`).toBe(sinkType(from));
      }
    }
    expect(widenings).toBeGreaterThanOrEqual(20);
  });

  it('integer → numeric is breaking: the warehouse (bigint) could not take it without a column-type change', () => {
    const c = classifySchema(base, slot(base.columns.map((x) => (x.name === 'qty' ? seen('qty', 'numeric(12,2)') : seen(x.name, x.type)))));
    expect(c.kind).toBe('breaking');
    expect(c.changes).toEqual([{ kind: 'change-type', column: 'qty', from: 'smallint', to: 'numeric(12,2)' }]);
  });

  it('varchar(n) narrowing is breaking, widening compatible', () => {
    const v = version([col('id', 'integer'), col('s', 'character varying(20)')]);
    expect(classifySchema(v, slot([seen('id', 'integer'), seen('s', 'character varying(10)')])).kind).toBe('breaking');
    expect(classifySchema(v, slot([seen('id', 'integer'), seen('s', 'character varying(30)')])).kind).toBe('compatible');
  });

  it('varchar(n) → text and real → double precision are compatible', () => {
    const v = version([col('id', 'integer'), col('s', 'varchar(10)'), col('f', 'real')]);
    const c = classifySchema(v, slot([seen('id', 'integer'), seen('s', 'text'), seen('f', 'double precision')]));
    expect(c.kind).toBe('compatible');
    expect(c.changes.map((x) => x.kind)).toEqual(['widen-type', 'widen-type']);
  });

  it('learning a type that was unknown is compatible', () => {
    const v = version([col('id', null), col('name', null)]);
    const c = classifySchema(v, { columns: [seen('id', 'INT32', false), seen('name', 'STRING', true)], key: ['id'], complete: true });
    expect(c.kind).toBe('compatible');
    expect(c.changes).toEqual([
      { kind: 'learn-type', column: 'id', type: 'INT32' },
      { kind: 'change-nullability', column: 'id', nullable: false },
      { kind: 'learn-type', column: 'name', type: 'STRING' },
    ]);
    expect(c.columns).toEqual([col('id', 'INT32', false), col('name', 'STRING', true)]);
  });

  it('a nullability change of an existing column is compatible', () => {
    const c = classifySchema(base, {
      columns: [seen('id', 'integer', true), seen('name', 'text', false), seen('qty', 'smallint')],
      key: ['id'],
      complete: true,
    });
    expect(c.kind).toBe('compatible');
    expect(c.changes).toEqual([
      { kind: 'change-nullability', column: 'id', nullable: true },
      { kind: 'change-nullability', column: 'name', nullable: false },
    ]);
  });

  it('learning the key of a table registered without one is compatible', () => {
    const v = version([col('id', 'integer')], []);
    const c = classifySchema(v, slot([seen('id', 'integer')], ['id']));
    expect(c.kind).toBe('compatible');
    expect(c.changes).toEqual([{ kind: 'learn-key', key: ['id'] }]);
    expect(c.key).toEqual(['id']);
  });

  it('a complete observation keeps the table order it shows', () => {
    const v = version([col('id', 'integer'), col('b', 'text')]);
    const c = classifySchema(v, slot([seen('id', 'integer'), seen('a', 'text'), seen('b', 'text')]));
    expect(c.columns.map((x) => x.name)).toEqual(['id', 'a', 'b']);
  });
});

describe('classifySchema: breaking', () => {
  it('a column absent from a slot record was dropped', () => {
    const c = classifySchema(base, slot([seen('id', 'integer'), seen('name', 'text')]));
    expect(c.kind).toBe('breaking');
    expect(c.changes).toEqual([{ kind: 'drop-column', column: 'qty' }]);
    expect(c.reason).toBe('column qty was dropped');
    expect(c.columns.map((x) => x.name)).toEqual(['id', 'name']);
  });

  it('one column gone and one new is reported as a drop or rename', () => {
    const c = classifySchema(base, slot([seen('id', 'integer'), seen('full_name', 'text'), seen('qty', 'smallint')]));
    expect(c.kind).toBe('breaking');
    expect(c.changes).toEqual([{ kind: 'rename-column', from: 'name', to: 'full_name' }]);
    expect(c.reason).toMatch(/name was dropped or renamed \(to full_name\?\)/);
    expect(c.columns.map((x) => x.name)).toEqual(['id', 'full_name', 'qty']);
  });

  it('two drops and one new column are listed separately', () => {
    const c = classifySchema(base, slot([seen('id', 'integer'), seen('x', 'text')]));
    expect(c.kind).toBe('breaking');
    expect(c.changes).toEqual([
      { kind: 'drop-column', column: 'name' },
      { kind: 'drop-column', column: 'qty' },
      { kind: 'add-column', column: 'x', type: 'text' },
    ]);
    expect(c.reason).toBe('column name was dropped; column qty was dropped');
  });

  it.each([
    ['qty', 'smallint', 'text'],
    ['id', 'integer', 'smallint'],
    ['name', 'text', 'varchar(50)'],
    ['qty', 'smallint', 'boolean'],
  ])('changing %s from %s to %s is breaking', (column, from, to) => {
    const cols = base.columns.map((c) => (c.name === column ? seen(c.name, to) : seen(c.name, c.type)));
    const c = classifySchema(base, slot(cols));
    expect(c.kind).toBe('breaking');
    expect(c.changes).toEqual([{ kind: 'change-type', column, from, to }]);
    expect(c.reason).toBe(`column ${column} changed type from ${from} to ${to}, which is not a widening`);
  });

  it('a primary-key change is breaking', () => {
    const c = classifySchema(base, slot([seen('id', 'integer'), seen('name', 'text'), seen('qty', 'smallint')], ['id', 'name']));
    expect(c.kind).toBe('breaking');
    expect(c.changes).toEqual([{ kind: 'change-key', from: ['id'], to: ['id', 'name'] }]);
    expect(c.key).toEqual(['id', 'name']);
    expect(c.reason).toBe('primary key changed from (id) to (id, name)');
  });

  it('a key in a different order is a key change', () => {
    const v = version([col('a', 'integer'), col('b', 'integer')], ['a', 'b']);
    expect(classifySchema(v, slot([seen('a', 'integer'), seen('b', 'integer')], ['b', 'a'])).kind).toBe('breaking');
  });

  it('a new NOT NULL column is breaking: existing rows hold a value the stream never carried', () => {
    const c = classifySchema(base, {
      columns: [seen('id', 'integer'), seen('name', 'text'), seen('qty', 'smallint'), seen('created', 'timestamptz', false)],
      key: ['id'],
      complete: true,
    });
    expect(c.kind).toBe('breaking');
    expect(c.changes).toEqual([{ kind: 'add-not-null-column', column: 'created', type: 'timestamptz' }]);
    expect(c.reason).toMatch(/new NOT NULL column created/);
  });

  it('a breaking change among compatible ones makes the whole version breaking, with only the breaking reasons', () => {
    const c = classifySchema(base, slot([seen('id', 'bigint'), seen('name', 'text'), seen('note', 'text'), seen('extra', 'text')]));
    expect(c.kind).toBe('breaking');
    expect(c.changes.map((x) => x.kind).sort()).toEqual(['add-column', 'add-column', 'drop-column', 'widen-type']);
    expect(c.reason).toBe('column qty was dropped');
  });

  it('isBreaking tells the kinds apart', () => {
    expect(isBreaking({ kind: 'add-column', column: 'x', type: null })).toBe(false);
    expect(isBreaking({ kind: 'widen-type', column: 'x', from: 'a', to: 'b' })).toBe(false);
    expect(isBreaking({ kind: 'drop-column', column: 'x' })).toBe(true);
    expect(isBreaking({ kind: 'unclassified', operation: 'x' })).toBe(true);
  });
});

describe('classifyControl', () => {
  const def = (columns: ObservedColumn[], key: string[] | null = ['id']) => ({ columns, key });

  it('create-table with a definition registers a new table', () => {
    const c = classifyControl(null, { operation: 'create-table', ...def([seen('id', 'INT32', false), seen('v', 'STRING', true)]) });
    expect(c.kind).toBe('compatible');
    expect(c.columns).toEqual([col('id', 'INT32', false), col('v', 'STRING', true)]);
  });

  it('a definition is a complete observation: a column it lacks was dropped', () => {
    const c = classifyControl(base, { operation: 'drop-column', ...def([seen('id', 'integer'), seen('name', 'text')]) });
    expect(c.kind).toBe('breaking');
    expect(c.changes).toEqual([{ kind: 'drop-column', column: 'qty' }]);
  });

  it('add-column with a definition holding a nullable column is compatible', () => {
    const c = classifyControl(base, {
      operation: 'add-column',
      ...def([seen('id', 'integer'), seen('name', 'text'), seen('qty', 'smallint'), seen('n', 'integer', true)]),
    });
    expect(c.kind).toBe('compatible');
    expect(c.changes).toEqual([{ kind: 'add-column', column: 'n', type: 'integer' }]);
  });

  it('column-type-change with a widening definition is compatible', () => {
    const c = classifyControl(base, { operation: 'column-type-change', ...def([seen('id', 'integer'), seen('name', 'text'), seen('qty', 'integer')]) });
    expect(c.kind).toBe('compatible');
  });

  it.each(['drop-column', 'rename-column', 'column-type-change', 'change-columns', 'something-new'])(
    '%s without a definition cannot be classified: breaking',
    (operation) => {
      const c = classifyControl(base, { operation, columns: null, key: null });
      expect(c.kind).toBe('breaking');
      expect(c.changes).toEqual([{ kind: 'unclassified', operation }]);
      expect(c.reason).toContain(`'${operation}' without the table definition`);
      expect(c.columns).toEqual(base.columns);
    },
  );

  it.each(['create-table', 'add-column'])('%s without a definition changes nothing', (operation) => {
    expect(classifyControl(base, { operation, columns: null, key: null }).kind).toBe('same');
  });

  it('drop-table and rename-table are breaking for a registered table, even with a definition', () => {
    expect(classifyControl(base, { operation: 'drop-table', columns: null, key: null })).toMatchObject({
      kind: 'breaking',
      reason: 'table was dropped at the source',
    });
    expect(classifyControl(base, { operation: 'rename-table', ...def([seen('id', 'integer')]) })).toMatchObject({
      kind: 'breaking',
      changes: [{ kind: 'rename-table' }],
    });
  });

  it('a control record about a table never seen changes nothing unless it defines the table', () => {
    expect(classifyControl(null, { operation: 'drop-table', columns: null, key: null }).kind).toBe('same');
    expect(classifyControl(null, { operation: 'rename-table', columns: null, key: null }).kind).toBe('same');
    expect(classifyControl(null, { operation: 'drop-column', columns: null, key: null }).kind).toBe('same');
  });
});
