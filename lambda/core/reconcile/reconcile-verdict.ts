/**
 * The reconciler's verdict as the control plane stores it (docs/reconcile.md), and the key ranges
 * and row-hash schemes it is stated in, and the verdict that compared nothing yet. No imports, so the
 * control-plane port (lambda/core/shared/control-plane.ts) can name them without importing the reconcile workflow.
 */

/** Primary-key values as text, in key order. */
export type KeyTuple = readonly string[];

/** The keys `k` with `after < k <= upTo` (a null bound is open). */
export interface KeyRange {
  after: KeyTuple | null;
  upTo: KeyTuple | null;
}

/**
 * How both sides of a comparison hash a row (docs/reconcile.md, "Range checksums"); each side lists
 * the schemes it can compute and the core picks the first of the source's that the sink has.
 * - `md5-text`: the first 60 bits of the MD5 of `rowHashText` of the compared columns' text.
 *   Every side can compute it: SQL, and a sink read into memory (a search index's documents).
 * - `pg-typed`: PostgreSQL's own per-type hash functions (`hashint8extended`, `hash_numeric_extended`,
 *   `hashtextextended`, …) of each column, seeded with the column's position and combined with
 *   XOR: no value is converted to text, so it costs a fraction of `md5-text`. Both sides must be
 *   PostgreSQL; a column is hashed by the class of its type only when the two sides' types are of
 *   the same class (`hashClassOf`), else as its text (`text`), and a masked column as its masked text.
 */
export type HashScheme = 'md5-text' | 'pg-typed';

export type VerdictKind = 'MATCH' | 'DIVERGED' | 'INCONCLUSIVE';

export type DifferenceKind = 'missing' | 'extra' | 'different';

export interface SampleKey {
  /** Key column → value. */
  key: Record<string, string>;
  kind: DifferenceKind;
  /** The first differing column (kind `different`). */
  column?: string;
}

export interface DifferingRange {
  range: KeyRange;
  missing: number;
  extra: number;
  different: number;
}

/** A table's verdict as stored in the control plane (`ControlPlane.putReconcileVerdict`). */
export interface ReconcileVerdict {
  sink: string;
  source: string;
  table: string;
  verdict: VerdictKind;
  /** Why, for INCONCLUSIVE (and a short summary otherwise). */
  reason: string;
  at: string;
  durationMs: number;
  key: string[];
  sourceRows: number | null;
  sinkRows: number | null;
  /** The ranges this run checked (at most two: from the cursor to the end, then from the start). */
  covered: KeyRange[];
  coveredRows: number;
  /** Whether this run checked the whole key space. */
  fullCoverage: boolean;
  differing: DifferingRange[];
  /** Confirmed differing keys (all of them up to `maxSampleKeys`). */
  sampleKeys: SampleKey[];
  diverged: { missing: number; extra: number; different: number };
  /** Keys that kept changing on a side through every re-check. */
  unsettled: number;
  /** Keys that differed at first and agreed on a re-check (in flight). */
  settled: number;
  problems: string[];
  /** Columns compared; columns of one side only are listed in `problems` or `notCompared`. */
  columns: string[];
  notCompared: string[];
  /** Where the next run starts (null: at the beginning). */
  nextCursor: KeyTuple | null;
  /** What it cost: summaries per side, rows read at leaves and re-checks; and the row hash both sides used. */
  cost: { summaries: number; leafRows: number; recheckRows: number; bisections: number; hashScheme?: HashScheme };
}

/** A verdict that compared nothing yet: INCONCLUSIVE for `reason`, every count zero, resuming at `nextCursor`. */
export function inconclusiveVerdict(o: {
  sink: string;
  source: string;
  table: string;
  key: readonly string[];
  at: string;
  reason: string;
  nextCursor: ReconcileVerdict['nextCursor'];
}): ReconcileVerdict {
  return {
    sink: o.sink,
    source: o.source,
    table: o.table,
    verdict: 'INCONCLUSIVE',
    reason: o.reason,
    at: o.at,
    durationMs: 0,
    key: [...o.key],
    sourceRows: null,
    sinkRows: null,
    covered: [],
    coveredRows: 0,
    fullCoverage: false,
    differing: [],
    sampleKeys: [],
    diverged: { missing: 0, extra: 0, different: 0 },
    unsettled: 0,
    settled: 0,
    problems: [],
    columns: [],
    notCompared: [],
    nextCursor: o.nextCursor,
    cost: { summaries: 0, leafRows: 0, recheckRows: 0, bisections: 0 },
  };
}
