/**
 * The search sink's side of a reconciliation (docs/reconcile.md, "The search sink"): a table's
 * live documents, read through the readers' alias (tombstones hidden) with the search adapter
 * (lambda/adapters/search-opensearch.ts), compared with the source by the same core
 * (lambda/core/reconcile/reconcile.ts) as the warehouse.
 *
 * OpenSearch cannot hash a document server-side in a way PostgreSQL can reproduce, so this side
 * reads the documents of a key range and hashes them here, exactly as the SQL sides hash under
 * `md5-text` (`rowHash`, lambda/core/reconcile/reconcile-rows.ts): the pair always negotiates `md5-text`.
 * The documents of a range are read with a range query on the key fields, sorted by them, in
 * pages (`pageSize`), each page starting after the last key of the one before (a composite key is
 * a `bool` of ranges and terms, the row-value comparison `(k1, k2) > (a, b)` spelled out). A text
 * key is read and sorted through its `keyword` sub-field. The last range read is kept, so the
 * bisection inside a segment (summaries, the key at an offset, a leaf's rows) costs no further
 * request; re-checks (`rowsByKey`) always read afresh, by document id (`_mget`, tombstones left
 * out). It sends only `GET` (the mapping) and `POST` (`_search`, `_count`, `_mget`) requests.
 *
 * Values are read as their text: a string as it is, a number or boolean as JavaScript writes it,
 * an object as its JSON (`documentValueText`); a value whose text differs from PostgreSQL's (a
 * `numeric` indexed as a number, `true` for `t`) makes the hash differ, and the leaf comparison
 * (`sameValue` of lambda/core/shared/same-value.ts, by the column's registered type) then finds the rows
 * equal: a cost, never a false verdict.
 *
 * Key ordering (`keyOrder`): a `long`/`integer` key field orders as numbers, a `keyword` (or a
 * `text` field's `keyword` sub-field) by its UTF-8 bytes, as PostgreSQL's `COLLATE "C"` orders
 * UTF-8 text; other key mappings (a `double`, a `date`) are reported as their type, and a source
 * key whose order class is not the index's (a timestamp key, kept as a `keyword`) makes the core
 * call the table INCONCLUSIVE rather than compare ranges that would not hold the same keys. A
 * text key longer than its `keyword` sub-field's `ignore_above` (256) is not indexed there, so no
 * range holds it: a source row with such a key reads as missing and settles on the re-check (by
 * id), and a document with such a key that the source lacks is not found (docs/reconcile.md,
 * "Not covered"). The stable point (`appliedThrough`) is the source's heartbeat document in the search sink
 * (`beat_at`).
 */
import { DEFAULT_HEARTBEAT_SCHEMA, HEARTBEAT_KEY_COLUMN, HEARTBEAT_TABLE } from '../../contracts/env.ts';
import type { JsonValue, Row } from '../core/shared/event.ts';
import type { HashScheme, KeyRange, KeyTuple, RangeSummary, ReconcileSide, RowHashing, SideRow, SideShape } from '../core/reconcile/reconcile.ts';
import { documentValueText, rowHash } from '../core/reconcile/reconcile-rows.ts';
import { documentId, META_FIELD, searchNames, type SearchNames } from '../core/search/search-plan.ts';
import { SearchRequestRejectedError, type OpenSearchIndex } from './search-opensearch.ts';

const isRecord = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** How one key field is queried and ordered. */
interface KeyField {
  column: string;
  /** The field range queries, terms and sorts use (`name.keyword` for a text field). */
  field: string;
  /** `number` (exact integers), `text` (UTF-8 bytes), or the mapping's type (not comparable by ranges). */
  order: string;
}

/** The ordering class of a key column from its mapping (see the module comment). */
function keyFieldOf(column: string, mapping: unknown): KeyField {
  const m = isRecord(mapping) ? mapping : {};
  const type = typeof m.type === 'string' ? m.type : isRecord(m.properties) ? 'object' : 'absent';
  if (['long', 'integer', 'short', 'byte'].includes(type)) return { column, field: column, order: 'number' };
  if (type === 'keyword') return { column, field: column, order: 'text' };
  if (type === 'text' && isRecord(m.fields) && isRecord(m.fields.keyword) && m.fields.keyword.type === 'keyword')
    return { column, field: `${column}.keyword`, order: 'text' };
  return { column, field: column, order: type };
}

/**
 * Parses PostgreSQL's text of a `timestamptz` (`2026-12-01 15:00:00.123456+00`, any offset) as
 * the documents hold it; null when it is not one.
 */
export function parsePgTimestamptz(text: string): number | null {
  const m = /^(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(\.\d+)?([+-]\d{2})(?::?(\d{2}))?$/.exec(text.trim());
  if (!m) return null;
  const ms = m[3] ? m[3].slice(0, 4).padEnd(4, '0') : '';
  const t = Date.parse(`${m[1]}T${m[2]}${ms}${m[4]}:${m[5] ?? '00'}`);
  return Number.isNaN(t) ? null : t;
}

export interface SearchSideOptions {
  index: OpenSearchIndex;
  /** The table's index names (`searchNames(prefix, source, table)`). */
  names: SearchNames;
  key: readonly string[];
  /** What the side is called in verdicts (the sink id). */
  label: string;
  /**
   * The source whose heartbeat document is the sink's stable point (its heartbeat table is
   * indexed like any table); absent: no stable point (a test without a pipeline).
   */
  heartbeat?: { names: SearchNames; source: string };
  /** Documents per search request. @default 1000 */
  pageSize?: number;
}

/** A table's live documents as a reconciliation side (see the module comment). */
export class SearchReconcileSide implements ReconcileSide {
  readonly label: string;
  readonly hashSchemes: readonly HashScheme[] = ['md5-text'];
  private columns: readonly string[] = [];
  private keys: KeyField[] = [];
  private cache: { range: KeyRange; rows: SideRow[]; hashes: bigint[] } | null = null;
  /** Search requests sent, for tests and the cost line. */
  requests = 0;
  readonly appliedThrough?: () => Promise<number | null>;

  constructor(private readonly o: SearchSideOptions) {
    this.label = o.label;
    if (o.heartbeat) this.appliedThrough = () => this.heartbeatApplied();
  }

  async shape(): Promise<SideShape> {
    const properties = await this.o.index.readMapping(this.o.names);
    if (properties === null) return { exists: false, columns: [], keyOrder: this.o.key.map(() => 'absent') };
    this.keys = this.o.key.map((k) => keyFieldOf(k, properties[k]));
    return { exists: true, columns: Object.keys(properties).filter((c) => c !== META_FIELD), keyOrder: this.keys.map((k) => k.order) };
  }

  useColumns(columns: readonly string[], hashing?: RowHashing): void {
    if (hashing && hashing.scheme !== 'md5-text') throw new Error(`${this.label}: a search index cannot hash rows as ${hashing.scheme}`);
    this.columns = columns;
    this.cache = null;
  }

  async countAll(): Promise<number> {
    return (await this.o.index.countDocuments(this.o.names)) ?? 0;
  }

  /** Orders key tuples as the index does: numbers exactly, text by UTF-8 bytes. */
  private compare(a: KeyTuple, b: KeyTuple): number {
    for (let i = 0; i < a.length; i++) {
      const x = a[i]!;
      const y = b[i]!;
      if (x === y) continue;
      if (this.keys[i]?.order === 'number') {
        const d = BigInt(x) - BigInt(y);
        if (d !== 0n) return d < 0n ? -1 : 1;
        continue;
      }
      const c = Buffer.compare(Buffer.from(x, 'utf8'), Buffer.from(y, 'utf8'));
      if (c !== 0) return c;
    }
    return 0;
  }

  private inRange(k: KeyTuple, r: KeyRange): boolean {
    return (r.after === null || this.compare(k, r.after) > 0) && (r.upTo === null || this.compare(k, r.upTo) <= 0);
  }

  /** Whether `inner` lies within `outer`. */
  private within(inner: KeyRange, outer: KeyRange): boolean {
    const lowOk = outer.after === null || (inner.after !== null && this.compare(inner.after, outer.after) >= 0);
    const highOk = outer.upTo === null || (inner.upTo !== null && this.compare(inner.upTo, outer.upTo) <= 0);
    return lowOk && highOk;
  }

  /** `(k1, …, kn) > t` (`gt`) or `<= t` (`lte`) as a query over the key fields (see the module comment). */
  private compareQuery(t: KeyTuple, op: 'gt' | 'lte', i = 0): Record<string, unknown> {
    const f = this.keys[i]!.field;
    if (i === this.keys.length - 1) return { range: { [f]: { [op]: t[i] } } };
    const strict = op === 'gt' ? 'gt' : 'lt';
    return {
      bool: {
        should: [{ range: { [f]: { [strict]: t[i] } } }, { bool: { filter: [{ term: { [f]: t[i] } }, this.compareQuery(t, op, i + 1)] } }],
        minimum_should_match: 1,
      },
    };
  }

  private query(r: KeyRange): Record<string, unknown> {
    const filter: Array<Record<string, unknown>> = [];
    if (r.after) filter.push(this.compareQuery(r.after, 'gt'));
    if (r.upTo) filter.push(this.compareQuery(r.upTo, 'lte'));
    return filter.length === 0 ? { match_all: {} } : { bool: { filter } };
  }

  private toRow(doc: { values: Row; position: string | null }): SideRow {
    const values: Record<string, string | null> = {};
    for (const c of this.columns) values[c] = documentValueText(doc.values[c]);
    return { key: this.o.key.map((k) => documentValueText(doc.values[k]) ?? ''), values, position: doc.position };
  }

  /** Every live document of `range`, in key order (served from the last range read when it lies within it). */
  private async load(range: KeyRange): Promise<{ rows: SideRow[]; hashes: bigint[] }> {
    if (this.keys.length === 0) await this.shape();
    const c = this.cache;
    if (c && this.within(range, c.range)) {
      const rows: SideRow[] = [];
      const hashes: bigint[] = [];
      c.rows.forEach((r, i) => {
        if (this.inRange(r.key, range)) {
          rows.push(r);
          hashes.push(c.hashes[i]!);
        }
      });
      return { rows, hashes };
    }
    const size = this.o.pageSize ?? 1000;
    const rows: SideRow[] = [];
    let after = range.after;
    for (;;) {
      this.requests++;
      const page = await this.o.index.searchLive(this.o.names, {
        query: this.query({ after, upTo: range.upTo }),
        sort: this.keys.map((k) => ({ [k.field]: 'asc' })),
        size,
      });
      rows.push(...page.map((d) => this.toRow(d)));
      if (page.length < size) break;
      after = rows.at(-1)!.key;
    }
    rows.sort((a, b) => this.compare(a.key, b.key));
    const hashes = rows.map((r) => rowHash(this.columns.map((col) => r.values[col] ?? null)));
    this.cache = { range, rows, hashes };
    return { rows, hashes };
  }

  async summarize(range: KeyRange): Promise<RangeSummary> {
    const { rows, hashes } = await this.load(range);
    return { rows: rows.length, checksum: hashes.reduce((a, b) => a + b, 0n).toString() };
  }

  async keyAt(range: KeyRange, offset: number): Promise<KeyTuple | null> {
    const { rows } = await this.load(range);
    return rows[offset]?.key ?? null;
  }

  async rows(range: KeyRange): Promise<SideRow[]> {
    return (await this.load(range)).rows;
  }

  async rowsByKey(keys: readonly KeyTuple[]): Promise<SideRow[]> {
    const out: SideRow[] = [];
    for (let i = 0; i < keys.length; i += 500) {
      const ids = keys.slice(i, i + 500).map((k) => documentId(Object.fromEntries(this.o.key.map((c, j) => [c, k[j]!])) as Row));
      const stored = await this.o.index.readStored(this.o.names.alias, ids);
      for (const source of stored.values()) {
        if (!isRecord(source)) continue;
        const meta = source[META_FIELD];
        // `_mget` does not apply the alias filter: leave tombstones out here.
        if (isRecord(meta) && meta.deleted === true) continue;
        const values: Row = {};
        for (const [k, v] of Object.entries(source)) if (k !== META_FIELD) values[k] = v as JsonValue;
        out.push(this.toRow({ values, position: isRecord(meta) && typeof meta.position === 'string' ? meta.position : null }));
      }
    }
    return out;
  }

  private async heartbeatApplied(): Promise<number | null> {
    const h = this.o.heartbeat!;
    let stored: Map<string, unknown>;
    try {
      stored = await this.o.index.readStored(h.names.alias, [documentId({ [HEARTBEAT_KEY_COLUMN]: h.source })]);
    } catch (e) {
      // No heartbeat indexed yet (no index): no stable point yet.
      if (e instanceof SearchRequestRejectedError && e.status === 404) return null;
      throw e;
    }
    const doc = [...stored.values()][0];
    if (!isRecord(doc) || typeof doc.beat_at !== 'string') return null;
    return parsePgTimestamptz(doc.beat_at);
  }
}

/** The search sink's side of a source table (names from the index prefix), its stable point the source's heartbeat document. */
export function searchSinkSide(
  index: OpenSearchIndex,
  o: {
    prefix: string;
    source: string;
    table: string;
    key: readonly string[];
    label: string;
    heartbeatSchema?: string;
    stablePoint?: boolean;
    pageSize?: number;
  },
): SearchReconcileSide {
  const heartbeat =
    o.stablePoint === false
      ? {}
      : { heartbeat: { names: searchNames(o.prefix, o.source, `${o.heartbeatSchema ?? DEFAULT_HEARTBEAT_SCHEMA}.${HEARTBEAT_TABLE}`), source: o.source } };
  return new SearchReconcileSide({
    index,
    names: searchNames(o.prefix, o.source, o.table),
    key: o.key,
    label: o.label,
    ...heartbeat,
    ...(o.pageSize ? { pageSize: o.pageSize } : {}),
  });
}
