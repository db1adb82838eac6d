/**
 * The search apply's port to a search engine (docs/search.md): one index per captured table behind
 * a write alias, versioned by position. lambda/adapters/search-opensearch.ts implements it over
 * OpenSearch; the errors are the ones the apply tells apart (retry, or hold the table).
 */
import { CdcError } from '../shared/errors.ts';
import type { Row } from '../shared/event.ts';
import type { FieldMapping, IndexMeta, SearchNames } from './search-plan.ts';

/** OpenSearch is throttling or unavailable: retry later; nothing was lost. */
export class SearchUnavailableError extends CdcError {
  constructor(message: string) {
    super('SEARCH_UNAVAILABLE', message);
  }
}

/** OpenSearch refused a management request (create index, mapping) for a reason that retrying will not fix. */
export class SearchRequestRejectedError extends CdcError {
  constructor(
    readonly status: number,
    readonly type: string | null,
    message: string,
  ) {
    super('SEARCH_REQUEST_REJECTED', message);
  }
}

export interface TableIndexState {
  /** The concrete index behind the write alias. */
  index: string;
  meta: IndexMeta;
  properties: Record<string, unknown>;
  /** Whether this call created it. */
  created: boolean;
}

/** What the apply asks of the search engine. */
export interface SearchIndex {
  /** The write alias's index, created (with its aliases, and the tombstone index when `hard`) when missing. */
  tableIndex(names: SearchNames, properties: Record<string, FieldMapping>, meta: IndexMeta, hard: boolean): Promise<TableIndexState>;
  /** The handover donor index of primary-key changes, created when missing. */
  ensureHandoverIndex(names: SearchNames, meta: IndexMeta): Promise<void>;
  readMeta(names: SearchNames): Promise<IndexMeta | null>;
  refresh(names: SearchNames): Promise<void>;
  setMeta(names: SearchNames, meta: IndexMeta): Promise<void>;
  addFields(names: SearchNames, add: Record<string, FieldMapping>): Promise<void>;
  /** The stored documents of `ids` in `index` (absent ids are not in the map). */
  readStored(index: string, ids: readonly string[]): Promise<Map<string, unknown>>;
  /** One `_bulk` request; its items' results, in order. */
  bulk(names: SearchNames, body: string, expectedItems: number): Promise<unknown[]>;
  listDocuments(names: SearchNames, pageSize?: number): AsyncIterable<{ id: string; values: Row }>;
}
