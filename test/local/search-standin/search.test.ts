/** The search stand-in's searches (local/search-standin/search.ts): range queries and sorts by the mapped type, several sort fields, search_after per field, missing last. */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read the stand-in's JSON answers field by field, as untyped wire data */
import { describe, expect, it } from 'vitest';
import { req, bulk, idx, useStandIn } from './fixture.ts';

useStandIn();

describe('search stand-in', () => {
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
});
