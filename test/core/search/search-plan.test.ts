/** The search sink's pure planning: names, ids, mappings, the bulk plan and item classification. */
import { describe, expect, it } from 'vitest';
import { ENVELOPE_VERSION, keyText, type ChangeEvent, type Row } from '../../../lambda/core/shared/event.ts';
import { makePosition } from '../../../lambda/core/shared/position.ts';
import {
  assertSearchColumn,
  bulkBody,
  classifyBulkItem,
  desiredProperties,
  documentId,
  fieldMappingOf,
  mappingDiff,
  parseIndexMeta,
  planSearchWrites,
  searchNames,
  validateSearchTables,
  type StoredDoc,
} from '../../../lambda/core/search/search-plan.ts';
import { searchNamePart } from '../../../contracts/search-index-names.ts';
import { PositionNotEncodableError } from '../../../lambda/core/search/search-version.ts';

const pos = (n: number): string => makePosition(0x100000000n + BigInt(n) * 0x100n, 0);
const META = { baseLsn: 0x100000000n, truncatedAt: null };
function ev(op: ChangeEvent['op'], n: number, key: Row, after: Row | null, missing: string[] = []): ChangeEvent {
  return {
    v: ENVELOPE_VERSION,
    source: 's',
    table: 'public.t',
    op,
    key,
    after,
    before: null,
    missing,
    position: pos(n),
    commitTs: '2026-01-01T00:00:00Z',
    txId: '1',
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  };
}
const doc = (n: number, values: Row, deleted = false): StoredDoc => ({ position: pos(n), deleted, values });

describe('search plan', () => {
  it('names a table’s index, aliases and tombstone index; refuses names OpenSearch cannot hold', () => {
    const n = searchNames('cdc', 'orders', 'public.customers');
    expect([n.alias, n.all, n.deleted, n.index(1)]).toEqual([
      'cdc.orders.public.customers',
      'cdc.orders.public.customers.all',
      'cdc.orders.public.customers.deleted',
      'cdc.orders.public.customers.v000001',
    ]);
    expect(() => searchNames('CDC', 'orders', 'public.c')).toThrow(/prefix/);
    expect(() => searchNames('cdc', 'Orders', 'public.c')).toThrow(/source id/);
    expect(() => searchNames('cdc', 'orders', 'public.a.b')).toThrow(/schema\.table/);
  });

  it('writes any carried schema or table name as a lower-case index-name part (docs/search.md, "Index names")', () => {
    expect(searchNames('cdc', 's', 'public.Orders').alias).toBe('cdc.s.public.orders');
    expect(searchNames('cdc', 's', 'Sales Dept.Total with tax').alias).toBe('cdc.s.sales-20dept.total-20with-20tax');
    expect(searchNames('cdc', 's', 'public.Zoë "q"').alias).toBe('cdc.s.public.zo-c3-ab-20-22q-22');
    expect(searchNames('cdc', 's', 'my$schema.t-1').alias).toBe('cdc.s.my-24schema.t-2d1');
    // Injective but for ASCII case: only names that differ in it share a part.
    expect(searchNamePart('Orders')).toBe(searchNamePart('orders'));
    expect(searchNamePart('-2d')).not.toBe(searchNamePart('-'));
    expect(searchNamePart('Ä')).not.toBe(searchNamePart('ä'));
    // A long part is cut and hashed: at most 63 characters, distinct, and every name stays within OpenSearch's 255 bytes.
    const long = 'ü'.repeat(31);
    const part = searchNamePart(long);
    expect(part).toHaveLength(63);
    expect(part).toMatch(/-h[0-9a-f]{16}$/);
    expect(searchNamePart(`${long.slice(1)}x`)).not.toBe(part);
    const n = searchNames('abcdefghijklmnopqrstuvwxyz012345', 'a'.repeat(63), `${long}.${long}`);
    expect(Buffer.byteLength(n.handover)).toBeLessThanOrEqual(255);
    for (const name of [n.alias, n.all, n.deleted, n.handover, n.index(1)]) expect(name).toMatch(/^[a-z0-9][a-z0-9._-]*$/);
  });

  it('refuses columns OpenSearch cannot hold as a field, by name', () => {
    for (const ok of ['CustomerName', 'Total with tax', 'Zoë', 'a"b', '_private']) expect(() => assertSearchColumn(ok, 'public.t')).not.toThrow();
    expect(() => assertSearchColumn('a.b', 'public.t')).toThrow(/'\.'/);
    expect(() => assertSearchColumn('_id', 'public.t')).toThrow(/metadata/);
    expect(() => assertSearchColumn('  ', 'public.t')).toThrow(/whitespace/);
    expect(() => assertSearchColumn('cdc_meta', 'public.t')).toThrow(/cdc_meta/);
  });

  it('keys documents by the platform’s key text, hashing keys longer than 512 bytes', () => {
    expect(documentId({ id: 7 })).toBe(keyText({ id: 7 }));
    const long = documentId({ id: 'x'.repeat(600) });
    expect(long).toMatch(/^sha256:[0-9a-f]{64}$/);
  });

  it('maps registered types to fields, and tells additions from type changes', () => {
    expect(fieldMappingOf('bigint')).toEqual({ type: 'long' });
    expect(fieldMappingOf('numeric(12,2)')).toEqual({ type: 'double', ignore_malformed: true });
    expect(fieldMappingOf('double precision')).toEqual({ type: 'double', ignore_malformed: true });
    expect(fieldMappingOf('date')).toEqual({ type: 'date', format: 'strict_date', ignore_malformed: true });
    expect(fieldMappingOf('character varying(20)')).toMatchObject({ type: 'text' });
    expect(fieldMappingOf('timestamp with time zone')).toMatchObject({ type: 'keyword' });
    expect(fieldMappingOf('jsonb')).toEqual({ type: 'object', enabled: false });
    expect(fieldMappingOf(null)).toMatchObject({ type: 'keyword' });
    const v1 = {
      source: 's',
      table: 'public.t',
      version: 1,
      columns: [
        { name: 'id', type: 'integer', nullable: false },
        { name: 'a', type: null, nullable: true },
      ],
      key: ['id'],
      effectivePosition: pos(0),
      registeredAt: '',
    };
    const v2 = {
      ...v1,
      version: 2,
      columns: [...v1.columns.slice(0, 1), { name: 'a', type: 'integer', nullable: true }, { name: 'b', type: 'text', nullable: true }],
    };
    const current = desiredProperties([v1]);
    const diff = mappingDiff(current, desiredProperties([v1, v2]));
    expect(Object.keys(diff.add)).toEqual(['b']);
    // `a` was made a keyword while its type was unknown: the learned integer keeps it (no conflict).
    expect(diff.conflicts).toEqual([]);
    // A field that changes type for real, or a learned json column (an object cannot go into a keyword), conflicts.
    const v3 = {
      ...v1,
      version: 3,
      columns: [...v1.columns.slice(0, 1), { name: 'a', type: 'jsonb', nullable: true }, { name: 'b', type: 'integer', nullable: true }],
    };
    expect(mappingDiff({ ...current, b: fieldMappingOf('text') }, desiredProperties([v1, v2, v3])).conflicts).toEqual([
      { field: 'a', current: 'keyword', desired: 'object' },
      { field: 'b', current: 'text', desired: 'long' },
    ]);
    expect(() => desiredProperties([{ ...v1, columns: [{ name: 'cdc_meta', type: 'text', nullable: true }] }])).toThrow(/collides/);
  });

  it('classifies bulk items: applied, stale (version conflict), retry (429/5xx), reject (the rest)', () => {
    expect(classifyBulkItem({ index: { status: 201 } })).toEqual({ kind: 'applied' });
    expect(classifyBulkItem({ delete: { status: 404, result: 'not_found' } })).toEqual({ kind: 'applied' });
    expect(classifyBulkItem({ index: { status: 409, error: { type: 'version_conflict_engine_exception', reason: 'x' } } })).toEqual({ kind: 'stale' });
    expect(classifyBulkItem({ index: { status: 429, error: { type: 'es_rejected_execution_exception' } } }).kind).toBe('retry');
    expect(classifyBulkItem({ index: { status: 503 } }).kind).toBe('retry');
    expect(classifyBulkItem({ index: { status: 400, error: { type: 'mapper_parsing_exception', reason: 'bad' } } })).toEqual({
      kind: 'reject',
      reason: '400 mapper_parsing_exception: bad',
    });
    expect(classifyBulkItem({ index: { status: 409, error: { type: 'other' } } }).kind).toBe('reject');
    expect(classifyBulkItem('nonsense').kind).toBe('retry');
  });

  it('writes exact 63-bit versions into the bulk body', () => {
    const plan = planSearchWrites({
      events: [ev('insert', 1, { id: 1 }, { id: 1 })],
      keyColumns: ['id'],
      deleteMode: 'soft',
      stored: new Map(),
      meta: { baseLsn: 0x100000000n - (1n << 42n), truncatedAt: null },
      appliedAt: new Date(0),
    });
    const body = bulkBody(plan.ops, searchNames('cdc', 's', 'public.t'));
    expect(body).toContain(`"version":${plan.ops[0]!.version.toString()},"version_type":"external"`);
    expect(plan.ops[0]!.version > BigInt(Number.MAX_SAFE_INTEGER)).toBe(true);
  });

  it('merges an event with absent columns onto the stored document, and drops what the stored position covers', () => {
    const stored = new Map([[keyText({ id: 1 }), { doc: doc(2, { id: 1, a: 1, b: 'keep' }) }]]);
    const plan = planSearchWrites({
      events: [ev('update', 1, { id: 1 }, { id: 1, a: 9 }), ev('update', 3, { id: 1 }, { id: 1, a: 3 }, ['b'])],
      keyColumns: ['id'],
      deleteMode: 'soft',
      stored,
      meta: META,
      appliedAt: new Date(0),
    });
    expect(plan.ops).toHaveLength(1);
    expect(plan.ops[0]!.document).toMatchObject({ id: 1, a: 3, b: 'keep', cdc_meta: { position: pos(3), deleted: false } });
  });

  it('hard delete: the document is deleted and a tombstone written at the same version; a late event below the tombstone is dropped', () => {
    const del = planSearchWrites({
      events: [ev('delete', 5, { id: 1 }, null)],
      keyColumns: ['id'],
      deleteMode: 'hard',
      stored: new Map([[keyText({ id: 1 }), { doc: doc(2, { id: 1 }) }]]),
      meta: META,
      appliedAt: new Date(0),
    });
    expect(del.ops.map((o) => [o.action, o.target])).toEqual([
      ['delete', 'all'],
      ['index', 'deleted'],
    ]);
    expect(del.ops[0]!.version).toBe(del.ops[1]!.version);
    const late = planSearchWrites({
      events: [ev('insert', 3, { id: 1 }, { id: 1 })],
      keyColumns: ['id'],
      deleteMode: 'hard',
      stored: new Map([[keyText({ id: 1 }), { tombstone: doc(5, {}, true) }]]),
      meta: META,
      appliedAt: new Date(0),
    });
    expect(late.ops).toEqual([]);
  });

  it('hard delete: a tombstone above a still-live document (the delete item failed earlier) finishes the delete', () => {
    const plan = planSearchWrites({
      events: [ev('delete', 5, { id: 1 }, null)],
      keyColumns: ['id'],
      deleteMode: 'hard',
      stored: new Map([[keyText({ id: 1 }), { doc: doc(2, { id: 1 }), tombstone: doc(5, {}, true) }]]),
      meta: META,
      appliedAt: new Date(0),
    });
    expect(plan.ops.map((o) => [o.action, o.target, o.position])).toEqual([['delete', 'all', pos(5)]]);
  });

  it('drops events below the truncation position, and refuses an unencodable position before planning anything', () => {
    const plan = planSearchWrites({
      events: [ev('insert', 3, { id: 1 }, { id: 1 }), ev('insert', 12, { id: 2 }, { id: 2 })],
      keyColumns: ['id'],
      deleteMode: 'soft',
      stored: new Map(),
      meta: { ...META, truncatedAt: pos(10) },
      appliedAt: new Date(0),
    });
    expect(plan.ops.map((o) => o.id)).toEqual([documentId({ id: 2 })]);
    const far = { ...ev('insert', 1, { id: 3 }, { id: 3 }), position: makePosition(0x100000000n + (1n << 43n), 0) };
    expect(() => planSearchWrites({ events: [far], keyColumns: ['id'], deleteMode: 'soft', stored: new Map(), meta: META, appliedAt: new Date(0) })).toThrow(
      PositionNotEncodableError,
    );
  });

  it('reads index _meta and refuses an index the sink did not create; validates the served-tables setting by field', () => {
    expect(parseIndexMeta('i', { cdc: { baseLsn: '0000000100000000', truncatedAt: pos(3) } })).toEqual({ baseLsn: 0x100000000n, truncatedAt: pos(3) });
    expect(() => parseIndexMeta('i', {})).toThrow(/not created by the search sink/);
    expect(validateSearchTables([{ source: 'a', table: 'public.t' }])).toEqual([{ source: 'a', table: 'public.t', deleteMode: 'soft' }]);
    expect(() => validateSearchTables([{ source: 'a', table: 'public.t', deletes: 'hard' }])).toThrow(/CDC_SEARCH_TABLES\[0\]\.deletes: unknown field/);
    expect(() => validateSearchTables([{ source: 'a', table: 'public.t', deleteMode: 'gone' }])).toThrow(/deleteMode: expected soft or hard/);
    expect(() => validateSearchTables('x')).toThrow(/expected a JSON array/);
  });
});
