/**
 * The search stand-in on its own: OpenSearch's documented version semantics (external,
 * external_gte, internal, create), delete tombstones and their gc_deletes horizon (after which an
 * older write resurrects, as in OpenSearch), strict mappings and value checks, aliases with
 * filters, get/mget ignoring alias filters, search/count, range queries and sorts by the mapped
 * type (several fields, missing last), paging with search_after, and injected
 * 429/503 failures. Also driven once through the real `@opensearch-project/opensearch` client.
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read the stand-in's JSON answers field by field, as untyped wire data */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Client } from '@opensearch-project/opensearch';
import { SearchStandIn } from '../../local/search-standin.ts';

let clock = 1_000_000;
const standin = new SearchStandIn({ now: () => clock, defaultGcDeletesMs: 60_000 });
let url: string;

async function req(method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  const text = body === undefined ? undefined : typeof body === 'string' ? body : JSON.stringify(body);
  const res = await fetch(`${url}${path}`, { method, body: text, headers: { 'content-type': 'application/json' } });
  const t = await res.text();
  return { status: res.status, body: t === '' ? null : JSON.parse(t) };
}

function bulk(lines: unknown[]): Promise<{ status: number; body: any }> {
  return req('POST', '/_bulk', `${lines.map((l) => (typeof l === 'string' ? l : JSON.stringify(l))).join('\n')}\n`);
}

const idx = (id: string, version: number | string, type = 'external', index = 'v') =>
  `{"index":{"_index":"${index}","_id":"${id}","version":${version},"version_type":"${type}"}}`;
const del = (id: string, version: number | string, type = 'external', index = 'v') =>
  `{"delete":{"_index":"${index}","_id":"${id}","version":${version},"version_type":"${type}"}}`;

beforeAll(async () => {
  url = await standin.start();
});
afterAll(async () => {
  await standin.stop();
});

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

  it('range queries and sorts compare by the mapped type; several sort fields, search_after per field, missing last', async () => {
    await req('PUT', '/r', {
      mappings: {
        dynamic: 'strict',
        properties: {
          n: { type: 'long' },
          name: { type: 'text', fields: { keyword: { type: 'keyword', ignore_above: 5 } } },
          k: { type: 'keyword' },
          d: { type: 'date', format: 'strict_date' },
          x: { type: 'double' },
        },
      },
    });
    const docs: Array<[string, Record<string, unknown>]> = [
      ['a', { n: 9, name: 'b', k: 'é', d: '2026-01-02', x: 1.5 }],
      ['b', { n: 10, name: 'a', k: 'z', d: '2025-12-31', x: 0.25 }],
      ['c', { n: '9007199254740993', name: 'a', k: 'Z' }],
      ['d', { n: 9, name: 'a', k: '\u{1F600}' }],
      ['e', { name: 'toolong', k: '\uFFFF' }],
    ];
    await bulk(docs.flatMap(([id, d]) => [idx(id, 1, 'external', 'r'), d]));
    const ids = async (query: unknown, sort: unknown = [{ _id: 'asc' }], extra: Record<string, unknown> = {}) =>
      (await req('POST', '/r/_search', { size: 100, query, sort, ...extra })).body.hits.hits.map((h: any) => h._id);
    // long: numerically and exactly (10 > 9, 2^53 + 1 compares as itself), not as text.
    expect(await ids({ range: { n: { gt: 9 } } })).toEqual(['b', 'c']);
    expect(await ids({ range: { n: { gte: '9007199254740993', lte: '9007199254740993' } } })).toEqual(['c']);
    expect(await ids({ range: { n: { gt: '9007199254740992', lt: '9007199254740994' } } })).toEqual(['c']);
    // keyword: by UTF-8 bytes ('Z' < 'z' < 'é' < U+FFFF < U+1F600; JavaScript's code-unit order would put U+1F600 before U+FFFF).
    expect(await ids({ match_all: {} }, [{ k: 'asc' }])).toEqual(['c', 'b', 'a', 'e', 'd']);
    expect(await ids({ range: { k: { gt: 'z', lte: '\uFFFF' } } }, [{ k: 'asc' }])).toEqual(['a', 'e']);
    // date by time, double by value.
    expect(await ids({ range: { d: { lt: '2026-01-01' } } })).toEqual(['b']);
    expect(await ids({ range: { x: { gte: 0.5 } } })).toEqual(['a']);
    // A text field's keyword sub-field reads the text; a value over ignore_above is not indexed (never in a range, sorted as missing).
    expect(await ids({ range: { 'name.keyword': { gte: 'a' } } })).toEqual(['a', 'b', 'c', 'd']);
    // Several sort fields; a document without the field sorts last in either order.
    expect(await ids({ match_all: {} }, [{ n: 'asc' }, { 'name.keyword': 'desc' }])).toEqual(['a', 'd', 'b', 'c', 'e']);
    expect(await ids({ match_all: {} }, [{ n: { order: 'desc' } }, { _id: 'asc' }])).toEqual(['c', 'b', 'a', 'd', 'e']);
    const first = (await req('POST', '/r/_search', { size: 2, query: { match_all: {} }, sort: [{ n: 'asc' }, { _id: 'asc' }] })).body;
    expect(first.hits.hits.map((h: any) => h.sort)).toEqual([
      [9, 'a'],
      [9, 'd'],
    ]);
    const next = (
      await req('POST', '/r/_search', { size: 2, query: { match_all: {} }, sort: [{ n: 'asc' }, { _id: 'asc' }], search_after: first.hits.hits[1].sort })
    ).body;
    expect(next.hits.hits.map((h: any) => h._id)).toEqual(['b', 'c']);
    expect(next.hits.total.value).toBe(5);
    // A composite key range as a bool of ranges and terms: (n, name) > (9, 'a') and <= (10, 'a').
    const composite = {
      bool: {
        filter: [
          {
            bool: {
              should: [{ range: { n: { gt: 9 } } }, { bool: { filter: [{ term: { n: 9 } }, { range: { 'name.keyword': { gt: 'a' } } }] } }],
              minimum_should_match: 1,
            },
          },
          {
            bool: {
              should: [{ range: { n: { lt: 10 } } }, { bool: { filter: [{ term: { n: 10 } }, { range: { 'name.keyword': { lte: 'a' } } }] } }],
              minimum_should_match: 1,
            },
          },
        ],
      },
    };
    expect(await ids(composite)).toEqual(['a', 'b']);
    // With a filter, should clauses are optional unless minimum_should_match says otherwise.
    expect(await ids({ bool: { filter: [{ term: { n: 9 } }], should: [{ term: { k: 'nope' } }] } })).toEqual(['a', 'd']);
    expect(await ids({ bool: { filter: [{ term: { n: 9 } }], should: [{ term: { k: 'nope' } }], minimum_should_match: 1 } })).toEqual([]);
    // Refused as OpenSearch refuses: sorting a text field; a malformed range.
    const textSort = await req('POST', '/r/_search', { query: { match_all: {} }, sort: [{ name: 'asc' }] });
    expect([textSort.status, textSort.body.error.type]).toEqual([400, 'illegal_argument_exception']);
    expect((await req('POST', '/r/_search', { query: { range: { n: { from: 1 } } } })).status).toBe(400);
    expect((await req('POST', '/r/_search', { query: { range: { n: { gt: 'x' } } } })).status).toBe(400);
  });

  it('pages with search_after through an index larger than a spread argument list (200,000 documents)', async () => {
    await req('PUT', '/big', { mappings: { dynamic: 'strict', properties: { k: { type: 'keyword' } } } });
    const n = 200_000;
    for (let start = 0; start < n; start += 20_000) {
      const lines: string[] = [];
      for (let i = start; i < start + 20_000; i++) {
        const k = String(i).padStart(6, '0');
        lines.push(`{"index":{"_index":"big","_id":"${k}"}}`, `{"k":"${k}"}`);
      }
      expect((await bulk(lines)).status).toBe(200);
    }
    // The second page keeps 199,000 hits after search_after: it answered 500 (call stack overflow) before.
    const first = await req('POST', '/big/_search', { size: 1000, sort: [{ k: 'asc' }], query: { match_all: {} } });
    expect(first.status).toBe(200);
    const second = await req('POST', '/big/_search', {
      size: 1000,
      sort: [{ k: 'asc' }],
      query: { match_all: {} },
      search_after: first.body.hits.hits[999].sort,
    });
    expect(second.status, JSON.stringify(second.body).slice(0, 300)).toBe(200);
    expect(second.body.hits.hits.map((h: any) => h._id).slice(0, 2)).toEqual(['001000', '001001']);
    expect(second.body.hits.total.value).toBe(n);
    await req('DELETE', '/big');
  }, 120_000);

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
