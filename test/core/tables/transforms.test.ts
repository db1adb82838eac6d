/**
 * Per-event transforms (lambda/core/tables/transforms.ts, docs/transforms.md): coercion rules with known
 * answers, the configuration checks, and the normalizer's use of them: a value that does not
 * coerce is dead-lettered with its reason and its raw record (never dropped, never passed on), the
 * registry holds the transformed shape with the transforms and their effective position, and a
 * transform change is audited with what it means for rows already in the sinks.
 */
import { describe, expect, it } from 'vitest';
import { coerceValue, transformChange, transformColumns, tenantValue, TransformError } from '../../../lambda/core/tables/transforms.ts';
import { validateTableConfig, TableConfigError } from '../../../lambda/core/tables/table-config.ts';
import { Normalizer, type ChangeLogWriter } from '../../../lambda/core/capture/normalize.ts';
import { validateChangeEvent, type ChangeEvent } from '../../../lambda/core/shared/event.ts';
import { TableConfigIndex, type TableConfig } from '../../../lambda/core/tables/table-config.ts';
import { buildSlotRecord } from '../../../lambda/core/capture/slot-record.ts';
import { MemoryControlPlane } from '../../helpers/memory-control-plane.ts';

describe('coerceValue', () => {
  it.each([
    ['42', 'bigint', 42],
    [' -7 ', 'bigint', -7],
    ['9223372036854775807', 'bigint', '9223372036854775807'],
    [12, 'text', '12'],
    [true, 'text', 'true'],
    [{ a: 1 }, 'text', '{"a":1}'],
    ['1.5', 'double precision', 1.5],
    ['1e20', 'double precision', '100000000000000000000'],
    ['yes', 'boolean', true],
    [0, 'boolean', false],
    ['2024-02-29', 'date', '2024-02-29'],
    ['2026-01-31 10:00:00+00', 'timestamptz', '2026-01-31 10:00:00+00'],
    ['12.5', 'numeric(12,2)', '12.50'],
    [-0.25, 'numeric(5,2)', '-0.25'],
    ['-0.00', 'numeric(5,2)', '0.00'],
    ['-0', 'double precision', '-0'],
    [' -0.0 ', 'double precision', '-0'],
    ['007', 'numeric(3,0)', '7'],
    [null, 'bigint', null],
  ])('%j → %s = %j', (value, type, expected) => {
    expect(coerceValue(value, type, 'public.t', 'c')).toEqual(expected);
  });

  it.each([
    ['abc', 'bigint', /does not coerce to bigint: not an integer/],
    ['1.5', 'bigint', /not an integer/],
    ['9223372036854775808', 'bigint', /outside the 64-bit range/],
    [true, 'bigint', /a boolean is not an integer/],
    ['maybe', 'boolean', /not one of/],
    ['2026-02-30', 'date', /not a calendar date/],
    ['2026-01-31 10:00:00', 'timestamptz', /with a time zone/],
    ['12.345', 'numeric(12,2)', /more than 2 fraction digits \(the platform does not round\)/],
    ['12345', 'numeric(5,2)', /more than 3 integer digits/],
    [[1], 'bigint', /not a scalar/],
    ['inf', 'double precision', /not a finite number/],
  ])('%j → %s is refused by name', (value, type, message) => {
    let err: unknown;
    try {
      coerceValue(value, type, 'public.t', 'amount');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TransformError);
    expect((err as TransformError).code).toBe('TRANSFORM_COERCION_FAILED');
    expect((err as Error).message).toMatch(/^public\.t\.amount: value /);
    expect((err as Error).message).toMatch(message);
  });
});

describe('transformChange and transformColumns', () => {
  const t = {
    coerce: { amount: 'numeric(10,2)', id: 'bigint' },
    rename: { id: 'order_id', amount: 'total' },
    tenant: { column: 'tenant', value: '{source}/{table}' },
  };
  it('coerces, renames (key, images, missing) and stamps the tenant into after', () => {
    const out = transformChange(
      { source: 'shop', table: 'public.orders', key: { id: '5' }, after: { id: '5', amount: 3 }, before: { id: '5' }, missing: ['amount'] },
      t,
    );
    expect(out).toEqual({
      source: 'shop',
      table: 'public.orders',
      key: { order_id: 5 },
      after: { order_id: 5, total: '3.00', tenant: 'shop/orders' },
      before: { order_id: 5 },
      missing: ['total'],
    });
    const del = transformChange({ source: 'shop', table: 'public.orders', key: { id: 5 }, after: null, before: { id: 5 }, missing: [] }, t);
    expect(del.after).toBeNull();
    expect(del.key).toEqual({ order_id: 5 });
  });
  it('shapes the registered columns the same way', () => {
    const cols = transformColumns(
      [
        { name: 'id', type: 'integer' },
        { name: 'amount', type: 'text' },
        { name: 'note', type: 'text' },
      ],
      t,
      (name) => ({ name, type: 'text' }),
    );
    expect(cols).toEqual([
      { name: 'order_id', type: 'bigint' },
      { name: 'total', type: 'numeric(10,2)' },
      { name: 'note', type: 'text' },
      { name: 'tenant', type: 'text' },
    ]);
  });
  it('refuses a rename onto an existing column and a tenant column that exists', () => {
    expect(() =>
      transformChange({ source: 'shop', table: 'public.t', key: { id: 1 }, after: { id: 1, a: 1, b: 2 }, before: null, missing: [] }, { rename: { a: 'b' } }),
    ).toThrow(/^public\.t\.b: two columns/);
    expect(() =>
      transformChange(
        { source: 'shop', table: 'public.t', key: { id: 1 }, after: { id: 1, tenant: 'x' }, before: null, missing: [] },
        { tenant: { column: 'tenant', value: 'a' } },
      ),
    ).toThrow(/^public\.t\.tenant: the tenant column/);
  });
  it('tenant values: constant or derived from source and table', () => {
    expect(tenantValue('acme', { source: 's', table: 'a.b' })).toBe('acme');
    expect(tenantValue('{source}-{schema}-{table}-{tableId}', { source: 's', table: 'a.b' })).toBe('s-a-b-a.b');
  });
});

describe('transforms in the table configuration', () => {
  const base = { table: 'public.t', mask: ['email'], exclude: ['ssn'] };
  it('accepts and keeps a valid declaration', () => {
    const [c] = validateTableConfig([
      {
        ...base,
        transforms: { coerce: { amount: 'numeric(10,2)', email: 'text' }, rename: { id: 'order_id' }, tenant: { column: 'tenant', value: '{source}' } },
      },
    ]);
    expect(c!.transforms).toEqual({
      coerce: { amount: 'numeric(10,2)', email: 'text' },
      rename: { id: 'order_id' },
      tenant: { column: 'tenant', value: '{source}' },
    });
  });
  it.each([
    [{ coerce: { a: 'int' } }, 'CDC_TABLE_CONFIG[0].transforms.coerce.a', /a sink type/],
    [{ coerce: { a: 'numeric(40,2)' } }, 'CDC_TABLE_CONFIG[0].transforms.coerce.a', /a sink type/],
    [{ coerce: { email: 'bigint' } }, 'CDC_TABLE_CONFIG[0].transforms.coerce.email', /masked/],
    [{ coerce: { ssn: 'text' } }, 'CDC_TABLE_CONFIG[0].transforms.coerce.ssn', /excluded/],
    [{ rename: { a: 'x', b: 'x' } }, 'CDC_TABLE_CONFIG[0].transforms.rename.b', /renamed to "x" as well/],
    [{ rename: { a: 'no spaces' } }, 'CDC_TABLE_CONFIG[0].transforms.rename.a', /plain column name/],
    [{ tenant: { column: 'x', value: '{who}' } }, 'CDC_TABLE_CONFIG[0].transforms.tenant.value', /unknown placeholder \{who\}/],
    [{ rename: { a: 'tenant' }, tenant: { column: 'tenant', value: 'x' } }, 'CDC_TABLE_CONFIG[0].transforms.tenant.column', /rename target/],
    [{ renames: {} }, 'CDC_TABLE_CONFIG[0].transforms.renames', /unknown field/],
  ])('refuses %j at %s', (transforms, field, message) => {
    let err: unknown;
    try {
      validateTableConfig([{ ...base, transforms }]);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TableConfigError);
    expect((err as TableConfigError).field).toBe(field);
    expect((err as Error).message).toMatch(message);
  });
});

describe('the normalizer applies the transforms', () => {
  function setup(config: TableConfig) {
    const controlPlane = new MemoryControlPlane();
    const published: ChangeEvent[] = [];
    const warnings: Record<string, unknown>[] = [];
    const changeLog: ChangeLogWriter<string> = {
      encode: (e) => JSON.stringify(e),
      async publishEncoded(records) {
        for (const x of records) published.push(validateChangeEvent(JSON.parse(x)));
      },
    };
    let tables = new TableConfigIndex([config]);
    const logger = { debug() {}, info() {}, warn: (_: string, extra: Record<string, unknown>) => void warnings.push(extra), error() {} };
    const make = () => new Normalizer({ source: 'shop', tables, controlPlane, changeLog, metrics: { count() {}, milliseconds() {} }, logger });
    let n = make();
    let seq = 0;
    return {
      controlPlane,
      published,
      warnings,
      reconfigure(next: TableConfig) {
        tables = new TableConfigIndex([next]);
        n = make();
      },
      async send(lsn: string, amount: string) {
        const text = JSON.stringify(
          buildSlotRecord(
            { source: 'shop', xid: '7', commitLsn: lsn, commitTs: '2026-12-01T10:00:00.000000Z' },
            0,
            {
              table: 'public.orders',
              op: 'insert',
              columns: [
                { name: 'id', type: 'integer', value: 1 },
                { name: 'amount', type: 'text', value: amount },
              ],
              oldKey: null,
              unchanged: [],
            },
            ['id'],
          ),
        );
        const b = n.startBatch();
        const outcome = await b.add({ text, origin: `raw/shardId-000000000000/${++seq}` });
        await b.flush();
        return { outcome, text };
      },
    };
  }
  const config: TableConfig = {
    table: 'public.orders',
    key: ['id'],
    deleteMode: 'soft',
    mask: [],
    exclude: [],
    transforms: { coerce: { amount: 'numeric(10,2)' }, rename: { amount: 'total' }, tenant: { column: 'tenant', value: 'acme' } },
  };

  it('a value that does not coerce is dead-lettered with its reason and its record; nothing of it enters the change log', async () => {
    const env = setup(config);
    expect((await env.send('0/100', '12.5')).outcome).toBe('buffered');
    const bad = await env.send('0/200', 'twelve');
    expect(bad.outcome).toBe('dead-lettered');
    expect(env.published).toHaveLength(1);
    expect(env.published[0]!.after).toEqual({ id: 1, total: '12.50', tenant: 'acme' });
    const [letter] = await env.controlPlane.listDeadLetters();
    expect(letter).toMatchObject({ stage: 'normalizer', source: 'shop', table: 'public.orders', code: 'TRANSFORM_COERCION_FAILED', record: bad.text });
    expect(letter!.reason).toBe('public.orders.amount: value "twelve" does not coerce to numeric(10,2): not a decimal number');
    // The table is degraded by the dead letter (invariant 12), not silently healthy.
    expect((await env.controlPlane.getTable('shop', 'public.orders'))!.state).toBe('degraded');
  });

  it('registers the transformed shape with its transforms; a change is a new version from its position, audited with the rebuild', async () => {
    const env = setup(config);
    await env.send('0/100', '1');
    const [v1] = await env.controlPlane.listSchemaVersions('shop', 'public.orders');
    expect(v1!.columns.map((c) => [c.name, c.type])).toEqual([
      ['id', 'integer'],
      ['total', 'numeric(10,2)'],
      ['tenant', 'text'],
    ]);
    expect(v1!.transforms).toEqual(config.transforms);
    env.reconfigure({ ...config, transforms: { ...config.transforms, tenant: { column: 'tenant', value: 'beta' } } });
    await env.send('0/300', '2');
    const versions = await env.controlPlane.listSchemaVersions('shop', 'public.orders');
    expect(versions).toHaveLength(2);
    expect(versions[1]!.transforms!.tenant).toEqual({ column: 'tenant', value: 'beta' });
    expect(versions[1]!.effectivePosition).toBe(env.published[1]!.position);
    expect(env.published[1]!.after).toEqual({ id: 1, total: '2.00', tenant: 'beta' });
    const audit = (await env.controlPlane.listAudit()).find((a) => a.action === 'add-schema-version')!;
    expect(audit.detail.rebuild).toMatch(/cdc rebuild/);
    expect(String(audit.detail.reason)).toMatch(/rows already in the sinks .* keep the old one/);
    expect(env.warnings.some((w) => /cdc rebuild/.test(String(w.notice)))).toBe(true);
    // The old record again (a replay): shaped with the transforms of its position.
    await env.send('0/100', '1');
    expect(env.published[2]!.after).toEqual(env.published[0]!.after);
    expect(env.published[2]!.schemaVersion).toBe(1);
  });
});
