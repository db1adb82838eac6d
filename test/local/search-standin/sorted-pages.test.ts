/**
 * The search stand-in keeps a query's sorted hits for its next page (local/search-standin/search.ts): paging
 * through an index sorts it once while nothing is written, a write between two pages is seen by the next
 * page, and pages over several indexes (an alias) still hold each hit to its own index's types. Random
 * values, seed printed (`CDC_PROPERTY_SEED`).
 */
/* eslint-disable @typescript-eslint/no-explicit-any -- the tests read the stand-in's JSON answers field by field, as untyped wire data */
import { describe, expect, it } from 'vitest';
import { SearchStandIn } from '../../../local/search-standin.ts';
import { rng } from '../../helpers/rng.ts';
import { bulk, req, useStandIn } from './fixture.ts';

const standin = new SearchStandIn({ defaultGcDeletesMs: 60_000 });
useStandIn(standin);

const seed = Number(process.env.CDC_PROPERTY_SEED ?? Date.now() % 2 ** 31);
const sort = [{ n: 'desc' }, { _id: 'asc' }];

/** Pages through `path` with `search_after`, `size` hits a page; `between` runs after each page but the last. */
async function pageAll(path: string, size: number, between: (page: number) => Promise<void> = async () => {}): Promise<string[]> {
  const ids: string[] = [];
  let after: unknown;
  for (let page = 0; ; page++) {
    const r = await req('POST', `${path}/_search`, { size, sort, query: { match_all: {} }, ...(after === undefined ? {} : { search_after: after }) });
    expect(r.status, JSON.stringify(r.body).slice(0, 300)).toBe(200);
    const hits = r.body.hits.hits as any[];
    if (hits.length === 0) return ids;
    ids.push(...hits.map((h) => h._id as string));
    after = hits[hits.length - 1].sort;
    await between(page);
  }
}

/** The order OpenSearch gives: `n` descending (numerically), then `_id` by its bytes (ASCII here). */
const expected = (docs: Map<string, number>): string[] => [...docs].sort(([a, x], [b, y]) => y - x || (a < b ? -1 : a > b ? 1 : 0)).map(([id]) => id);

describe(`search stand-in: sorted pages kept between pages (seed ${seed})`, () => {
  it('sorts once per query while nothing is written, and a write between pages is seen', async () => {
    const next = rng(seed);
    await req('PUT', '/p', { mappings: { dynamic: 'strict', properties: { n: { type: 'long' } } } });
    const docs = new Map<string, number>();
    for (let i = 0; i < 3000; i++) docs.set(`d${String(i).padStart(5, '0')}`, Math.floor(next() * 500));
    expect((await bulk([...docs].flatMap(([id, n]) => [{ index: { _index: 'p', _id: id } }, { n }]))).status).toBe(200);

    const before = standin.pages.sorts;
    expect(await pageAll('/p', 97)).toEqual(expected(docs));
    expect(standin.pages.sorts - before, 'one sort for 31 pages of one query').toBe(1);

    // A write between pages: a document that sorts into a later page, and one already passed, are each placed as OpenSearch would.
    const late = 'd99999';
    const passed = 'd99998';
    const seen = await pageAll('/p', 211, async (page) => {
      if (page !== 2) return;
      expect((await bulk([{ index: { _index: 'p', _id: late } }, { n: -1 }, { index: { _index: 'p', _id: passed } }, { n: 10_000 }])).status).toBe(200);
    });
    expect(seen).toContain(late);
    expect(seen).not.toContain(passed);
    expect(seen[seen.length - 1]).toBe(late);
    // The second paging's first pages reuse the first paging's sort (same query, nothing written); the write makes the next page sort again.
    expect(standin.pages.sorts - before, 'one more sort, after the write').toBe(2);
    await req('DELETE', '/p');
  }, 60_000);

  it('pages through an alias over two indexes as one order', async () => {
    const next = rng(seed + 1);
    const docs = new Map<string, number>();
    for (const index of ['a1', 'a2']) {
      await req('PUT', `/${index}`, { mappings: { dynamic: 'strict', properties: { n: { type: 'long' } } } });
      const lines: unknown[] = [];
      for (let i = 0; i < 400; i++) {
        const id = `${index}-${i}`;
        const n = Math.floor(next() * 50);
        docs.set(id, n);
        lines.push({ index: { _index: index, _id: id } }, { n });
      }
      expect((await bulk(lines)).status).toBe(200);
    }
    await req('POST', '/_aliases', { actions: [{ add: { index: 'a1', alias: 'both' } }, { add: { index: 'a2', alias: 'both' } }] });
    expect(await pageAll('/both', 53)).toEqual(expected(docs));
  }, 60_000);
});
