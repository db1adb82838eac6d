/**
 * The search sink's wire adapter over `@opensearch-project/opensearch` (docs/search.md): the only
 * code that speaks the OpenSearch REST API. Every request of a table goes to a path under the
 * table's own names (`<prefix>.<source>.<schema>.<table>…`), so the construct can grant
 * `es:ESHttp*` on those index paths only.
 *
 * - `tableIndex`: reads the write alias's concrete index (mapping `properties` and `_meta`), or
 *   creates generation 1 with both aliases (and, for hard deletes, the tombstone index);
 * - `addFields`: an additive `_mapping` update (before the first document that needs it);
 * - `readStored`: `_mget` of documents and tombstones by id (through the unfiltered alias);
 * - `bulk`: one `_bulk` request; its per-item results are returned for `classifyBulkItem`.
 *   Throttling (429), unavailability (5xx) and connection errors throw `SearchUnavailableError`
 *   (retried by the caller, never dead-lettered);
 * - `listDocuments` / `countDocuments`: the search-side read (live documents of a table, paged by
 *   key), for the local verdict;
 * - `readMapping` / `searchLive`: the mapping of a table's index, and one sorted page of its live
 *   documents matching a query, for reconciliation (lambda/adapters/reconcile-search.ts).
 *
 * On AWS, requests are signed with SigV4 (`AwsSigv4Signer`, service `es`) using the SDK's default
 * credential provider chain (the function's role); locally the client talks plain HTTP to the
 * stand-in (local/search-standin.ts) or to a real OpenSearch/Elasticsearch.
 */
import { Client, errors } from '@opensearch-project/opensearch';
import { AwsSigv4Signer } from '@opensearch-project/opensearch/aws';
import { defaultProvider } from '@aws-sdk/credential-provider-node';
import { CdcError } from '../core/shared/errors.ts';
import type { JsonValue, Row } from '../core/shared/event.ts';
import {
  createIndexBody,
  createTombstoneIndexBody,
  createHandoverIndexBody,
  indexMetaJson,
  META_FIELD,
  parseIndexMeta,
  type FieldMapping,
  type IndexMeta,
  type SearchNames,
} from '../core/search/search-plan.ts';
import { SearchRequestRejectedError, SearchUnavailableError, type SearchIndex, type TableIndexState } from '../core/search/search-index.ts';

export { SearchRequestRejectedError, SearchUnavailableError, type TableIndexState } from '../core/search/search-index.ts';

export interface SearchClientOptions {
  /** `https://…` of the domain, or `http://127.0.0.1:…` of a local server. */
  node: string;
  /** Sign requests with SigV4 for this region (AWS); unsigned when absent. */
  awsRegion?: string;
  /** @default 'es' */
  awsService?: 'es' | 'aoss';
  /** Request timeout. @default 30000 */
  requestTimeoutMs?: number;
}

/** Builds the OpenSearch client: SigV4-signed with the default credential chain on AWS, plain otherwise. */
export function searchClient(options: SearchClientOptions): Client {
  const common = { node: options.node, requestTimeout: options.requestTimeoutMs ?? 30_000, maxRetries: 0, compression: undefined };
  if (!options.awsRegion) return new Client(common);
  const credentials = defaultProvider();
  return new Client({
    ...common,
    ...AwsSigv4Signer({ region: options.awsRegion, service: options.awsService ?? 'es', getCredentials: () => credentials() }),
  });
}

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

function statusOf(err: unknown): number | null {
  if (err instanceof errors.ResponseError) return err.meta.statusCode ?? null;
  return null;
}

function typeOf(err: unknown): string | null {
  if (err instanceof errors.ResponseError) {
    const b = err.meta.body as unknown;
    if (isRecord(b) && isRecord(b.error) && typeof b.error.type === 'string') return b.error.type;
  }
  return null;
}

/** Maps a client error: 429/5xx/connection → `SearchUnavailableError`; other 4xx → `SearchRequestRejectedError`. */
export function mapSearchError(err: unknown, what: string): Error {
  const status = statusOf(err);
  if (status === null || status === 429 || status >= 500) {
    return new SearchUnavailableError(
      `${what}: ${status === null ? (err instanceof Error ? `${err.name}: ${err.message}` : String(err)) : `status ${status} ${typeOf(err) ?? ''}`.trim()}`,
    );
  }
  return new SearchRequestRejectedError(status, typeOf(err), `${what}: status ${status} ${err instanceof Error ? err.message : ''}`.trim());
}

export class OpenSearchIndex implements SearchIndex {
  constructor(
    readonly client: Client,
    /** Settings of new indexes (`{ number_of_shards: 1 }`, `{ gc_deletes: '60s' }`, …). */
    private readonly indexSettings: Record<string, JsonValue> = {},
  ) {}

  private async call<T>(what: string, f: () => Promise<{ body: T }>): Promise<T> {
    try {
      return (await f()).body;
    } catch (err) {
      throw mapSearchError(err, what);
    }
  }

  /** The write alias's index, created (generation 1, aliases, tombstone index when `hard`) when missing. */
  async tableIndex(names: SearchNames, properties: Record<string, FieldMapping>, meta: IndexMeta, hard: boolean): Promise<TableIndexState> {
    let created = false;
    let state = await this.readIndex(names);
    if (!state) {
      const index = names.index(1);
      try {
        await this.client.indices.create({ index, body: createIndexBody(names, properties, meta, this.indexSettings) as never });
        created = true;
      } catch (err) {
        // Another applier created it first: read what it created.
        if (typeOf(err) !== 'resource_already_exists_exception') throw mapSearchError(err, `create index ${index}`);
      }
      state = await this.readIndex(names);
      if (!state) throw new SearchUnavailableError(`index ${index} was created but alias ${names.all} does not resolve yet`);
    }
    if (hard) await this.ensureTombstoneIndex(names, state.meta);
    return { ...state, created };
  }

  /**
   * Creates the table's handover donor index if it does not exist (docs/search.md, "Primary-key
   * changes"); idempotent, and harmless when another applier creates it at the same time.
   */
  async ensureHandoverIndex(names: SearchNames, meta: IndexMeta): Promise<void> {
    const exists = await this.call(`check ${names.handover}`, () => this.client.indices.exists({ index: names.handover }) as Promise<{ body: boolean }>);
    if (exists) return;
    try {
      await this.client.indices.create({ index: names.handover, body: createHandoverIndexBody(meta, this.indexSettings) as never });
    } catch (err) {
      if (typeOf(err) !== 'resource_already_exists_exception') throw mapSearchError(err, `create index ${names.handover}`);
    }
  }

  private async ensureTombstoneIndex(names: SearchNames, meta: IndexMeta): Promise<void> {
    const exists = await this.call(`check ${names.deleted}`, () => this.client.indices.exists({ index: names.deleted }) as Promise<{ body: boolean }>);
    if (exists) return;
    try {
      await this.client.indices.create({ index: names.deleted, body: createTombstoneIndexBody(meta, this.indexSettings) as never });
    } catch (err) {
      if (typeOf(err) !== 'resource_already_exists_exception') throw mapSearchError(err, `create index ${names.deleted}`);
    }
  }

  private async readIndex(names: SearchNames): Promise<Omit<TableIndexState, 'created'> | null> {
    let body: unknown;
    try {
      body = (await this.client.indices.getMapping({ index: names.all })).body;
    } catch (err) {
      if (statusOf(err) === 404) return null;
      throw mapSearchError(err, `read mapping of ${names.all}`);
    }
    if (!isRecord(body)) throw new SearchUnavailableError(`unreadable mapping response for ${names.all}`);
    const entries = Object.entries(body);
    if (entries.length !== 1)
      throw new CdcError('SEARCH_INDEX_FOREIGN', `alias ${names.all} points at ${entries.length} indexes; the search sink writes through exactly one`);
    const [index, v] = entries[0]!;
    const mappings = isRecord(v) && isRecord(v.mappings) ? v.mappings : {};
    return { index, meta: parseIndexMeta(index, mappings._meta), properties: isRecord(mappings.properties) ? mappings.properties : {} };
  }

  /**
   * The index's `_meta` as stored now (base LSN and truncation position), read past any cache:
   * what a truncate recorded through another applier (docs/search.md, "Truncate").
   */
  async readMeta(names: SearchNames): Promise<IndexMeta | null> {
    const state = await this.readIndex(names);
    return state ? state.meta : null;
  }

  /** Makes every write acknowledged so far visible to search (`_refresh`): a truncate's sweep must see them all. */
  async refresh(names: SearchNames): Promise<void> {
    try {
      await this.client.indices.refresh({ index: names.all });
    } catch (err) {
      throw mapSearchError(err, `refresh ${names.all}`);
    }
  }

  /** Records a truncation position in the index's `_meta` (keeping the base LSN). */
  async setMeta(names: SearchNames, meta: IndexMeta): Promise<void> {
    try {
      await this.client.indices.putMapping({ index: names.all, body: { _meta: indexMetaJson(meta) } as never });
    } catch (err) {
      throw mapSearchError(err, `record _meta of ${names.all}`);
    }
  }

  /** Adds fields to the table's index mapping (additive only). */
  async addFields(names: SearchNames, add: Record<string, FieldMapping>): Promise<void> {
    if (Object.keys(add).length === 0) return;
    try {
      await this.client.indices.putMapping({ index: names.all, body: { properties: add } as never });
    } catch (err) {
      throw mapSearchError(err, `add fields ${Object.keys(add).join(', ')} to ${names.all}`);
    }
  }

  /** `_mget` by id through `index`; returns the `_source` of each found document. */
  async readStored(index: string, ids: readonly string[]): Promise<Map<string, unknown>> {
    const out = new Map<string, unknown>();
    if (ids.length === 0) return out;
    const body = await this.call(`read documents of ${index}`, () => this.client.mget({ index, body: { ids: [...ids] } }) as Promise<{ body: unknown }>);
    const docs = isRecord(body) && Array.isArray(body.docs) ? body.docs : null;
    if (!docs) throw new SearchUnavailableError(`unreadable _mget response from ${index}`);
    for (const d of docs) {
      if (!isRecord(d)) continue;
      if (isRecord(d.error)) throw new SearchUnavailableError(`_mget of ${index} failed for ${String(d._id)}: ${String(d.error.type)}`);
      if (d.found === true && typeof d._id === 'string') out.set(d._id, d._source);
    }
    return out;
  }

  /** One `_bulk` request (NDJSON body) through the table's write alias; returns the per-item results. */
  async bulk(names: SearchNames, body: string, expectedItems: number): Promise<unknown[]> {
    const res = await this.call(`bulk into ${names.all}`, () => this.client.bulk({ index: names.all, body: body as never }) as Promise<{ body: unknown }>);
    const items = isRecord(res) && Array.isArray(res.items) ? res.items : null;
    if (!items || items.length !== expectedItems)
      throw new SearchUnavailableError(`bulk into ${names.all}: expected ${expectedItems} item results, got ${items ? items.length : 'none'}`);
    return items;
  }

  /** Live documents of a table (through the readers' alias, tombstones hidden), paged by key. */
  async *listDocuments(names: SearchNames, pageSize = 1000): AsyncGenerator<{ id: string; values: Row }> {
    let after: string | null = null;
    for (;;) {
      const body: Record<string, unknown> = { size: pageSize, sort: [{ [`${META_FIELD}.key`]: 'asc' }], query: { match_all: {} } };
      if (after !== null) body.search_after = [after];
      const res = await this.call(
        `list documents of ${names.alias}`,
        () => this.client.search({ index: names.alias, body: body as never }) as Promise<{ body: unknown }>,
      );
      const hits = isRecord(res) && isRecord(res.hits) && Array.isArray(res.hits.hits) ? res.hits.hits : null;
      if (!hits) throw new SearchUnavailableError(`unreadable _search response from ${names.alias}`);
      for (const h of hits) {
        if (!isRecord(h) || typeof h._id !== 'string' || !isRecord(h._source)) continue;
        const values: Row = {};
        for (const [k, v] of Object.entries(h._source)) if (k !== META_FIELD) values[k] = v as JsonValue;
        yield { id: h._id, values };
      }
      if (hits.length < pageSize) return;
      const last = hits[hits.length - 1] as Record<string, unknown>;
      const sort = Array.isArray(last.sort) ? last.sort[0] : undefined;
      if (typeof sort !== 'string') throw new SearchUnavailableError(`_search of ${names.alias} returned no sort value to page on`);
      after = sort;
    }
  }

  /** The mapping `properties` of a table's index, or null when it has none yet. */
  async readMapping(names: SearchNames): Promise<Record<string, unknown> | null> {
    const state = await this.readIndex(names);
    return state ? state.properties : null;
  }

  /**
   * One page of a table's live documents (the readers' alias: tombstones hidden) that match
   * `query`, in `sort` order: each hit's id and `_source` (without `cdc_meta`, whose position is
   * returned apart).
   */
  async searchLive(
    names: SearchNames,
    body: { query: Record<string, unknown>; sort: Array<Record<string, unknown>>; size: number },
  ): Promise<Array<{ id: string; values: Row; position: string | null }>> {
    const res = await this.call(`search ${names.alias}`, () => this.client.search({ index: names.alias, body: body as never }) as Promise<{ body: unknown }>);
    const hits = isRecord(res) && isRecord(res.hits) && Array.isArray(res.hits.hits) ? res.hits.hits : null;
    if (!hits) throw new SearchUnavailableError(`unreadable _search response from ${names.alias}`);
    return hits.flatMap((h) => {
      if (!isRecord(h) || typeof h._id !== 'string' || !isRecord(h._source)) return [];
      const values: Row = {};
      for (const [k, v] of Object.entries(h._source)) if (k !== META_FIELD) values[k] = v as JsonValue;
      const meta = h._source[META_FIELD];
      return [{ id: h._id, values, position: isRecord(meta) && typeof meta.position === 'string' ? meta.position : null }];
    });
  }

  /** Live documents of a table (tombstones hidden). Null when the table has no index yet. */
  async countDocuments(names: SearchNames): Promise<number | null> {
    try {
      const res = (await this.client.count({ index: names.alias, body: { query: { match_all: {} } } as never })).body as unknown;
      if (!isRecord(res) || typeof res.count !== 'number') throw new SearchUnavailableError(`unreadable _count response from ${names.alias}`);
      return res.count;
    } catch (err) {
      if (statusOf(err) === 404) return null;
      if (err instanceof CdcError) throw err;
      throw mapSearchError(err, `count documents of ${names.alias}`);
    }
  }

  /** Whether the table has an index. */
  async exists(names: SearchNames): Promise<boolean> {
    return this.call(`check ${names.all}`, () => this.client.indices.exists({ index: names.all }) as Promise<{ body: boolean }>);
  }
}
