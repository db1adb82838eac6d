/** The search stand-in's fields (local/search-standin/fields.ts): strict mappings and value checks per item, mapping updates that add but never change a type, ignore_malformed. */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read the stand-in's JSON answers field by field, as untyped wire data */
import { describe, expect, it } from 'vitest';
import { req, bulk, idx, useStandIn } from './fixture.ts';

useStandIn();

describe('search stand-in', () => {
  it('strict mappings refuse unknown fields and wrong values per item; mapping updates add fields but never change a type', async () => {
    await req('PUT', '/m', {
      mappings: {
        dynamic: 'strict',
        _meta: { cdc: { baseLsn: '0000000000000000' } },
        properties: { n: { type: 'long' }, d: { type: 'date', format: 'strict_date' }, o: { type: 'object', enabled: false } },
      },
    });
    const r = await bulk([
      idx('1', 1, 'external', 'm'),
      { n: 1, extra: 2 },
      idx('2', 1, 'external', 'm'),
      { n: 'x' },
      idx('3', 1, 'external', 'm'),
      { n: '12', d: '2026-01-02', o: 'any' },
      idx('4', 1, 'external', 'm'),
      { d: '2026-01-02 10:00' },
    ]);
    expect(r.body.items.map((i: any) => i.index.status)).toEqual([400, 400, 201, 400]);
    expect(r.body.items[0].index.error.type).toBe('strict_dynamic_mapping_exception');
    expect(r.body.items[1].index.error.type).toBe('mapper_parsing_exception');
    expect((await req('PUT', '/m/_mapping', { properties: { extra: { type: 'keyword' } } })).status).toBe(200);
    const change = await req('PUT', '/m/_mapping', { properties: { n: { type: 'text' } } });
    expect(change.status).toBe(400);
    expect(change.body.error.type).toBe('illegal_argument_exception');
    const m = await req('GET', '/m/_mapping');
    expect(m.body.m.mappings.properties.extra).toEqual({ type: 'keyword' });
    expect(m.body.m.mappings._meta).toEqual({ cdc: { baseLsn: '0000000000000000' } });
  });

  it('ignore_malformed keeps a document whose number or date the field cannot index: the value stays in _source, out of range queries', async () => {
    await req('PUT', '/im', {
      mappings: {
        dynamic: 'strict',
        properties: {
          x: { type: 'double', ignore_malformed: true },
          d: { type: 'date', format: 'strict_date', ignore_malformed: true },
          b: { type: 'boolean' },
        },
      },
    });
    const r = await bulk([
      idx('1', 1, 'external', 'im'),
      { x: 'NaN', d: 'infinity' },
      idx('2', 1, 'external', 'im'),
      { x: '1.5', d: '2024-01-01' },
      idx('3', 1, 'external', 'im'),
      { b: 'maybe' },
    ]);
    expect(r.body.items.map((i: any) => i.index.status)).toEqual([201, 201, 400]);
    expect((await req('GET', '/im/_doc/1')).body._source).toEqual({ x: 'NaN', d: 'infinity' });
    const hits = await req('POST', '/im/_search', { query: { range: { x: { gte: 0 } } } });
    expect(hits.body.hits.hits.map((h: any) => h._id)).toEqual(['2']);
  });
});
