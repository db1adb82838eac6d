/**
 * A search's page (docs/search.md, "The local stand-in"): the hits sorted by the mapped types of the
 * sort fields, paged by `from`/`size` or `search_after`. The sorted hits of a query are kept for its
 * next page while nothing was written (`SortedHits`, `sortedKey`): paging through N documents sorts
 * them once instead of once per page.
 */
import { compareIndexed, fieldKind, indexedValue, indexedValues, type FieldKind } from './fields.ts';
import { HttpError, isObj, stringifyExact, type Doc, type Index, type Json, type Obj } from './model.ts';

/** A document a search matched, in the index it is in. */
export interface Hit {
  index: Index;
  id: string;
  doc: Doc;
}

type Key = Array<bigint | number | string | null>;
interface Sort {
  field: string;
  desc: boolean;
}

/** A query's hits in their sort order, with their sort keys: what every page of the query reads. */
export interface SortedHits {
  sorts: Sort[];
  keyed: Array<{ h: Hit; key: Key }>;
  /** Every hit is in one index (so one reading of `search_after` holds for all). */
  oneIndex: boolean;
  kindsOf: (i: Index) => FieldKind[];
  compareKeys: (x: Key, y: Key) => number;
}

/** A request that may change what a search finds (any but a read): the kept sorted hits are dropped. */
export function mayWrite(method: string, pathname: string): boolean {
  return !(method === 'GET' || method === 'HEAD' || /\/(_search|_count|_mget|_refresh)$/.test(pathname));
}

/** The sorted hits of the last query, kept for its next page until `written`; `sorts` counts the searches that sorted. */
export class SortedPages {
  sorts = 0;
  private last: { key: string; sorted: SortedHits } | null = null;

  written(): void {
    this.last = null;
  }

  /** A page of the query `body` on `name`; `hits` (every hit of the query, unsorted) is read only when the query must be sorted. */
  page(name: string, body: Obj, hits: () => Hit[]): [number, Json] {
    const key = `${name}\u0000${stringifyExact(body.query ?? null)}\u0000${stringifyExact(body.sort ?? null)}`;
    if (this.last?.key !== key) {
      this.sorts++;
      this.last = { key, sorted: sortHits(hits(), body) };
    }
    return searchPage(this.last.sorted, body);
  }
}

function sortsOf(body: Obj): Sort[] {
  const specs = body.sort === undefined ? [] : Array.isArray(body.sort) ? body.sort : [body.sort];
  return specs.map((s) => {
    let field: string;
    let desc = false;
    if (typeof s === 'string') field = s;
    else if (isObj(s)) {
      const [f, spec] = Object.entries(s)[0]!;
      field = f;
      const order = isObj(spec) ? spec.order : spec;
      if (order !== undefined && order !== 'asc' && order !== 'desc')
        throw new HttpError(400, 'parsing_exception', `unknown sort order [${String(order)}] for [${f}]`);
      desc = order === 'desc';
    } else throw new HttpError(400, 'parsing_exception', 'sort entries must be field names or objects');
    return { field, desc };
  });
}

/** Sorts the hits of a query (every hit, unsorted) by its `sort`; the same order whatever page is asked next. */
export function sortHits(hits: Hit[], body: Obj): SortedHits {
  const sorts = sortsOf(body);
  // Typed per index (one alias may point at several); `_id` sorts by the id's bytes.
  const kinds = new Map<Index, FieldKind[]>();
  const kindsOf = (i: Index): FieldKind[] => {
    let k = kinds.get(i);
    if (!k) {
      k = sorts.map((s) => (s.field === '_id' ? { path: '_id', type: 'keyword' as const, ignoreAbove: null } : fieldKind(i.mappings.properties, s.field)));
      const text = k.findIndex((x) => x.type === 'text');
      if (text >= 0)
        throw new HttpError(
          400,
          'illegal_argument_exception',
          `Text fields are not optimised for operations that require per-document field data like aggregations and sorting, so these operations are disabled by default. Please use a keyword field instead [${sorts[text]!.field}]`,
        );
      kinds.set(i, k);
    }
    return k;
  };
  const keyOf = (h: Hit): Key =>
    kindsOf(h.index).map((k, j) => {
      if (k.path === '_id') return h.id;
      const vs = indexedValues(k, h.doc.source);
      if (vs.length === 0) return null;
      return vs.reduce((m, v) => ((sorts[j]!.desc ? compareIndexed(v, m) > 0 : compareIndexed(v, m) < 0) ? v : m));
    });
  const compareKeys = (x: Key, y: Key): number => {
    for (let j = 0; j < sorts.length; j++) {
      const a = x[j] ?? null;
      const b = y[j] ?? null;
      // Missing values sort last in either order (`missing: _last`).
      if (a === null || b === null) {
        if (a !== b) return a === null ? 1 : -1;
        continue;
      }
      const c = compareIndexed(a, b) * (sorts[j]!.desc ? -1 : 1);
      if (c !== 0) return c;
    }
    return 0;
  };
  const keyed = hits.map((h) => ({ h, key: sorts.length ? keyOf(h) : [] }));
  if (sorts.length) keyed.sort((x, y) => compareKeys(x.key, y.key));
  const oneIndex = keyed.every((x) => x.h.index === keyed[0]!.h.index);
  return { sorts, keyed, oneIndex, kindsOf, compareKeys };
}

/** The index in `keyed` of the first hit whose key sorts after `after` (the hits are sorted: a binary search). */
function firstAfter(keyed: SortedHits['keyed'], compareKeys: SortedHits['compareKeys'], after: Key): number {
  let lo = 0;
  let hi = keyed.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareKeys(keyed[mid]!.key, after) > 0) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/** The answer to `_search`: a page of the sorted hits. */
export function searchPage(sorted: SortedHits, body: Obj): [number, Json] {
  const size = typeof body.size === 'number' ? body.size : 10;
  const from = typeof body.from === 'number' ? body.from : 0;
  if (size > 10_000 || from + size > 10_000)
    throw new HttpError(400, 'illegal_argument_exception', 'Result window is too large, from + size must be less than or equal to: [10000]');
  const { sorts, kindsOf, compareKeys } = sorted;
  let keyed = sorted.keyed;
  let offset = 0;
  // The total counts every hit of the query (search_after pages through them, it does not filter the total).
  const total = keyed.length;
  if (sorts.length && body.search_after !== undefined) {
    if (!Array.isArray(body.search_after) || body.search_after.length !== sorts.length) {
      throw new HttpError(
        400,
        'illegal_argument_exception',
        `search_after has ${Array.isArray(body.search_after) ? body.search_after.length : 0} value(s) but sort has ${sorts.length}`,
      );
    }
    const afterValues = body.search_after;
    const after = (i: Index): Key =>
      kindsOf(i).map((k, j) => (afterValues[j] === null ? null : k.path === '_id' ? String(afterValues[j]) : indexedValue(k, afterValues[j])));
    // Hits of one index: a binary search. Several indexes may type the same value differently, so each hit is held to its
    // own index's reading of the values, one by one (not push(...kept): spreading 150,000 documents overflows the call stack).
    if (sorted.oneIndex) offset = keyed.length ? firstAfter(keyed, compareKeys, after(keyed[0]!.h.index)) : 0;
    else keyed = keyed.filter((x) => compareKeys(x.key, after(x.h.index)) > 0);
  }
  const page = keyed.slice(offset + from, offset + from + size);
  const sortJson = (v: bigint | number | string | null): Json => v;
  return [
    200,
    {
      took: 0,
      timed_out: false,
      hits: {
        total: { value: total, relation: 'eq' },
        max_score: sorts.length ? null : 1,
        hits: page.map(({ h, key }) => ({
          _index: h.index.name,
          _id: h.id,
          _score: sorts.length ? null : 1,
          _source: h.doc.source,
          ...(sorts.length ? { sort: key.map(sortJson) } : {}),
        })),
      },
    },
  ];
}
