/**
 * Row hashing outside SQL (docs/reconcile.md): `rowHash`, exactly as the SQL sides hash under
 * `md5-text` (`rowHashText`, first 60 bits of the MD5), and `documentValueText`, the text of a
 * document value; the search sink's side (lambda/adapters/reconcile-search.ts) hashes a search
 * index's documents with both. And a side over rows held in memory (masked columns through the
 * masking module's `maskValue`), for the randomized test of the bisection, which can be compared
 * with a PostgreSQL side. Pure: no I/O.
 */
import { createHash } from 'node:crypto';
import { maskValue } from '../tables/masking.ts';
import type { JsonValue } from '../shared/event.ts';
import { compareKeys, rowHashText } from './reconcile.ts';
import type { KeyRange, KeyTuple, RangeSummary, ReconcileSide, RowHashing, SideRow, SideShape } from './reconcile.ts';

export interface MemorySideOptions {
  label: string;
  key: readonly string[];
  /** Every column the side holds (key included). */
  columns: readonly string[];
  /** Ordering class per key column (`number` orders numerically, anything else by code unit). */
  keyOrder: readonly string[];
  rows: Iterable<SideRow>;
  /** Columns hashed masked (a source side). */
  masked?: readonly string[];
  exists?: boolean;
  /**
   * What `estimateRows` answers (the database's estimate, which may be stale): a number, null (no
   * estimate), or `exact` (the row count). @default 'exact'
   */
  estimate?: number | null | 'exact';
  /** Whether the side has `summarizeFirst` (the walk then reads each source segment once). @default true */
  firstSummaries?: boolean;
}

/**
 * The text a document value (a search index's `_source` field, JSON) compares and hashes as: a
 * string as it is, a number or boolean as JavaScript writes it (a `-0` as `-0`, which `String`
 * would write `0`), an object or array as its JSON; absent or null is null.
 */
export function documentValueText(v: JsonValue | undefined): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v === 'string') return v;
  if (typeof v === 'number') return Object.is(v, -0) ? '-0' : String(v);
  if (typeof v === 'boolean') return String(v);
  return JSON.stringify(v);
}

/** The 60-bit hash of a row's compared values, as the SQL sides compute it. */
export function rowHash(values: readonly (string | null)[]): bigint {
  return BigInt(`0x${createHash('md5').update(rowHashText(values), 'utf8').digest('hex').slice(0, 15)}`);
}

export class MemoryReconcileSide implements ReconcileSide {
  readonly label: string;
  private readonly sorted: SideRow[];
  private readonly numeric: boolean[];
  private columns: readonly string[] = [];
  /** Prefix sums of the row hashes: `prefix[i]` is the sum of the first i rows'. */
  private prefix: bigint[] = [0n];
  /** Calls per method, for tests that care what a comparison cost. */
  readonly calls = new Map<string, number>();

  constructor(private readonly o: MemorySideOptions) {
    this.label = o.label;
    this.numeric = o.keyOrder.map((c) => c === 'number');
    this.sorted = [...o.rows].sort((a, b) => compareKeys(a.key, b.key, this.numeric));
    if (o.firstSummaries !== false) this.summarizeFirst = (range, limit) => this.first(range, limit);
  }

  private count(name: string): void {
    this.calls.set(name, (this.calls.get(name) ?? 0) + 1);
  }

  async shape(): Promise<SideShape> {
    return { exists: this.o.exists ?? true, columns: [...this.o.columns], keyOrder: [...this.o.keyOrder] };
  }

  /** Hashes `md5-text` only (the scheme every side has). */
  useColumns(columns: readonly string[], hashing?: RowHashing): void {
    if (hashing && hashing.scheme !== 'md5-text') throw new Error(`${this.label}: cannot hash rows as ${hashing.scheme}`);
    this.columns = columns;
    const masked = this.o.masked ?? [];
    this.prefix = [0n];
    for (const r of this.sorted)
      this.prefix.push(this.prefix.at(-1)! + rowHash(columns.map((c) => (masked.includes(c) ? maskValue(r.values[c] ?? null) : (r.values[c] ?? null)))));
  }

  /** First index with key > k (k null: 0). */
  private upper(k: KeyTuple | null): number {
    if (k === null) return 0;
    let lo = 0;
    let hi = this.sorted.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (compareKeys(this.sorted[mid]!.key, k, this.numeric) <= 0) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  private span(range: KeyRange): [number, number] {
    return [this.upper(range.after), range.upTo === null ? this.sorted.length : this.upper(range.upTo)];
  }

  private sum(from: number, to: number): RangeSummary {
    if (to <= from) return { rows: 0, checksum: '0' };
    return { rows: to - from, checksum: (this.prefix[to]! - this.prefix[from]!).toString() };
  }

  async countAll(): Promise<number> {
    this.count('countAll');
    return this.sorted.length;
  }

  async estimateRows(): Promise<number | null> {
    this.count('estimateRows');
    const e = this.o.estimate === undefined ? 'exact' : this.o.estimate;
    return e === 'exact' ? this.sorted.length : e;
  }

  async summarize(range: KeyRange): Promise<RangeSummary> {
    this.count('summarize');
    const [a, b] = this.span(range);
    return this.sum(a, b);
  }

  /** Set unless `firstSummaries` is false: the first `limit` rows of a range summarised, with the last key (`ReconcileSide.summarizeFirst`). */
  readonly summarizeFirst?: (range: KeyRange, limit: number) => Promise<{ summary: RangeSummary; last: KeyTuple | null }>;

  private async first(range: KeyRange, limit: number): Promise<{ summary: RangeSummary; last: KeyTuple | null }> {
    this.count('summarizeFirst');
    const [a, b] = this.span(range);
    if (b - a < limit) return { summary: this.sum(a, b), last: null };
    return { summary: this.sum(a, a + limit), last: this.sorted[a + limit - 1]!.key };
  }

  async keyAt(range: KeyRange, offset: number): Promise<KeyTuple | null> {
    this.count('keyAt');
    const [a, b] = this.span(range);
    return a + offset < b ? this.sorted[a + offset]!.key : null;
  }

  private pick(r: SideRow): SideRow {
    return { key: r.key, values: Object.fromEntries(this.columns.map((c) => [c, r.values[c] ?? null])), position: r.position };
  }

  async rows(range: KeyRange): Promise<SideRow[]> {
    this.count('rows');
    const [a, b] = this.span(range);
    return this.sorted.slice(a, b).map((r) => this.pick(r));
  }

  async rowsByKey(keys: readonly KeyTuple[]): Promise<SideRow[]> {
    this.count('rowsByKey');
    const want = new Set(keys.map((k) => JSON.stringify(k)));
    return this.sorted.filter((r) => want.has(JSON.stringify(r.key))).map((r) => this.pick(r));
  }
}
