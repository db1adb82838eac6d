/**
 * The search stand-in on its own: OpenSearch's documented version semantics (external,
 * external_gte, internal, create), delete tombstones and their gc_deletes horizon (after which an
 * older write resurrects, as in OpenSearch), aliases with filters, get/mget ignoring alias
 * filters, search/count, and injected 429/503 failures. Also driven once through the real
 * `@opensearch-project/opensearch` client. Mappings and value checks: search-standin/fields.test.ts;
 * sorts and paging: search-standin/search.test.ts.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read the stand-in's JSON answers field by field, as untyped wire data */
import { describe, expect, it } from 'vitest';
import { Client } from '@opensearch-project/opensearch';
import { SearchStandIn } from '../../local/search-standin.ts';
import { bulk, del, idx, req, url, useStandIn } from './search-standin/fixture.ts';

let clock = 1_000_000;
const standin = new SearchStandIn({ now: () => clock, defaultGcDeletesMs: 60_000 });
useStandIn(standin);

describe('search stand-in', () => {
  it('says it is a stand-in', async () => {
    const r = await req('GET', '/');
    expect(r.body.tagline).toMatch(/stand-in, not OpenSearch/);
  });

  it('external: indexes only a greater version; conflicts are per item and change nothing', async () => {
    await req('PUT', '/v', {});
    const r = await bulk([idx('a', 5), { n: 1 }, idx('a', 5), { n: 2 }, idx('a', 4), { n: 3 }, idx('b', 1), { n: 9 }, idx('a', 6), { n: 4 }]);
    expect(r.status).toBe(200);
    expect(r.body.errors).toBe(true);
    const items = r.body.items.map((i: any) => i.index);
    expect(items.map((i: any) => i.status)).toEqual([201, 409, 409, 201, 200]);
    expect(items[1].error.type).toBe('version_conflict_engine_exception');
    expect(items[2].error.reason).toMatch(/current version \[5\] is higher or equal to the one provided \[4\]/);
    const g = await req('GET', '/v/_doc/a');
    expect(g.body._version).toBe(6);
    expect(g.body._source).toEqual({ n: 4 });
  });

  it('external_gte accepts an equal version; internal increments; create refuses an existing id', async () => {
    await req('PUT', '/gte', {});
    const r = await bulk([
      idx('x', 3, 'external', 'gte'),
      { n: 1 },
      idx('x', 3, 'external_gte', 'gte'),
      { n: 2 },
      idx('x', 2, 'external_gte', 'gte'),
      { n: 3 },
    ]);
    expect(r.body.items.map((i: any) => i.index.status)).toEqual([201, 200, 409]);
    const i1 = await bulk([
      '{"index":{"_index":"gte","_id":"i"}}',
      { n: 1 },
      '{"index":{"_index":"gte","_id":"i"}}',
      { n: 2 },
      '{"create":{"_index":"gte","_id":"i"}}',
      { n: 3 },
    ]);
    expect(i1.body.items[0].index._version).toBe(1);
    expect(i1.body.items[1].index._version).toBe(2);
    expect(i1.body.items[2].create.status).toBe(409);
  });

  it('keeps versions exactly up to 2^63 − 1 and refuses beyond', async () => {
    await req('PUT', '/big', {});
    const max = '9223372036854775807';
    const r = await bulk([
      idx('m', '9223372036854775806', 'external', 'big'),
      { n: 1 },
      idx('m', max, 'external', 'big'),
      { n: 2 },
      idx('m', '9223372036854775808', 'external', 'big'),
      { n: 3 },
    ]);
    expect(r.body.items.map((i: any) => i.index.status)).toEqual([201, 200, 400]);
    const raw = await (await fetch(`${url}/big/_doc/m`)).text();
    expect(raw).toContain(`"_version":${max}`);
  });

  it('a delete keeps its versioned tombstone for gc_deletes; after the horizon an older write resurrects the document', async () => {
    await req('PUT', '/gc', { settings: { index: { gc_deletes: '10s' } } });
    await bulk([idx('k', 10, 'external', 'gc'), { n: 1 }]);
    const d = await bulk([del('k', 20, 'external', 'gc')]);
    expect(d.body.items[0].delete.result).toBe('deleted');
    // Inside the horizon: an older write conflicts.
    clock += 9_000;
    const late = await bulk([idx('k', 15, 'external', 'gc'), { n: 2 }]);
    expect(late.body.items[0].index.status).toBe(409);
    expect((await req('GET', '/gc/_doc/k')).status).toBe(404);
    // Past the horizon: the tombstone is forgotten and the older write resurrects the document.
    clock += 2_000;
    const resurrect = await bulk([idx('k', 15, 'external', 'gc'), { n: 3 }]);
    expect(resurrect.body.items[0].index.status).toBe(201);
    expect((await req('GET', '/gc/_doc/k')).body._source).toEqual({ n: 3 });
  });

  it('a delete of an absent document answers not_found and still records its version', async () => {
    await req('PUT', '/nf', {});
    const d = await bulk([del('z', 7, 'external', 'nf')]);
    expect(d.body.items[0].delete.status).toBe(404);
    expect(d.body.items[0].delete.result).toBe('not_found');
    const late = await bulk([idx('z', 6, 'external', 'nf'), { n: 1 }]);
    expect(late.body.items[0].index.status).toBe(409);
    expect(standin.defaultGcDeletesMs).toBe(60_000);
  });

  it('aliases: filtered searches and counts, unfiltered get/mget, writes through the write alias, atomic swaps', async () => {
    await req('PUT', '/t.v1', { aliases: { t: { filter: { term: { 'meta.deleted': false } } }, 't.all': { is_write_index: true } } });
    await bulk([
      idx('a', 1, 'external', 't.all'),
      { meta: { deleted: false, key: 'a' } },
      idx('b', 1, 'external', 't.all'),
      { meta: { deleted: true, key: 'b' } },
      idx('c', 1, 'external', 't.all'),
      { meta: { deleted: false, key: 'c' } },
    ]);
    expect((await req('POST', '/t/_count', { query: { match_all: {} } })).body.count).toBe(2);
    expect((await req('POST', '/t.all/_count', {})).body.count).toBe(3);
    const s = await req('POST', '/t/_search', { size: 1, sort: [{ 'meta.key': 'asc' }], query: { match_all: {} } });
    expect(s.body.hits.hits.map((h: any) => h._id)).toEqual(['a']);
    const s2 = await req('POST', '/t/_search', { size: 1, sort: [{ 'meta.key': 'asc' }], search_after: s.body.hits.hits[0].sort });
    expect(s2.body.hits.hits.map((h: any) => h._id)).toEqual(['c']);
    expect((await req('POST', '/t/_search', { query: { term: { 'meta.key': 'c' } } })).body.hits.total.value).toBe(1);
    const mg = await req('POST', '/t/_mget', { ids: ['a', 'b', 'zz'] });
    expect(mg.body.docs.map((d: any) => d.found)).toEqual([true, true, false]);
    // Rebuild: a new index, then one atomic alias swap.
    await req('PUT', '/t.v2', {});
    const swap = await req('POST', '/_aliases', {
      actions: [
        { remove: { index: 't.v1', alias: 't' } },
        { remove: { index: 't.v1', alias: 't.all' } },
        { add: { index: 't.v2', alias: 't', filter: { term: { 'meta.deleted': false } } } },
        { add: { index: 't.v2', alias: 't.all', is_write_index: true } },
      ],
    });
    expect(swap.status).toBe(200);
    expect((await req('POST', '/t/_count', {})).body.count).toBe(0);
    expect(Object.keys((await req('GET', '/_alias/t')).body)).toEqual(['t.v2']);
    const bad = await req('POST', '/_aliases', { actions: [{ add: { index: 't.v2', alias: 'q' } }, { remove: { index: 'nope', alias: 't' } }] });
    expect(bad.status).toBe(404);
    expect((await req('GET', '/_alias/q')).status).toBe(404); // nothing of a failed list applied
    expect((await req('DELETE', '/t.v1')).status).toBe(200);
    expect((await req('HEAD', '/t.v1')).status).toBe(404);
  });

  it('injected throttling and unavailability fail without applying', async () => {
    await req('PUT', '/inj', {});
    standin.inject({ scope: 'item', status: 429, times: 1 });
    const r = await bulk([idx('a', 1, 'external', 'inj'), { n: 1 }, idx('b', 1, 'external', 'inj'), { n: 1 }]);
    expect(r.body.items.map((i: any) => i.index.status)).toEqual([429, 201]);
    expect((await req('GET', '/inj/_doc/a')).status).toBe(404);
    standin.inject({ scope: 'request', status: 503, times: 1 });
    expect((await req('GET', '/inj/_doc/b')).status).toBe(503);
    expect((await req('GET', '/inj/_doc/b')).status).toBe(200);
  });

  it('speaks enough of the API for the real OpenSearch client', async () => {
    const client = new Client({ node: url });
    await client.indices.create({ index: 'cl', body: { mappings: { properties: { n: { type: 'long' } } } } });
    expect((await client.indices.exists({ index: 'cl' })).body).toBe(true);
    const res = await client.bulk({ body: `${idx('q', 3, 'external', 'cl')}\n{"n":1}\n` as never });
    expect(res.body.items[0]!.index!.status).toBe(201);
    const m = await client.mget({ index: 'cl', body: { ids: ['q'] } });
    expect((m.body.docs[0] as any)._source).toEqual({ n: 1 });
    expect((await client.count({ index: 'cl' })).body.count).toBe(1);
    await expect(client.indices.create({ index: 'cl' })).rejects.toMatchObject({ meta: { statusCode: 400 } });
    client.close();
  });
});
