/**
 * Reconciliation (docs/reconcile.md): is a sink's copy of a captured table the source's table?
 * Pure logic over two `ReconcileSide`s (the source and one sink); adapters read the databases
 * (lambda/adapters/reconcile-pg.ts: the source and the warehouse sink; a search sink plugs in with
 * its own side, see docs/reconcile.md "The sink interface").
 *
 * How one run decides, per table:
 * 1. Preconditions: the table is `active` and the sink holds nothing back (a paused table's sink
 *    is behind on purpose): otherwise INCONCLUSIVE, with why.
 * 2. Row counts of both sides (the whole table; the cheap part). A run that walks the whole key
 *    space takes them from its segments, which partition it (no separate count); a run over part
 *    of a larger table counts both sides whole, alongside the walk (docs/reconcile.md "Cost and
 *    the source budget").
 * 3. Checksums over primary-key ranges (data-diff style): the source is walked in key order in
 *    segments whose size the snapshot worker's pacer decides (lambda/core/snapshot/snapshot-pacer.ts, the
 *    same source budget); each segment `(after, upTo]` is summarised on both sides (the source's
 *    `summarizeFirst` reads the next N rows and their last key in one go, and the sink summarises a
 *    segment while the source reads the next; else a key walk, then both at the same time), as a
 *    row count plus the exact sum of a row hash (`HashScheme`: PostgreSQL's typed hashes
 *    when both sides are PostgreSQL, else 60 bits of an MD5 of the row's text). A run checks at most `rowsPerRun` source rows,
 *    starting at the table's cursor (kept in the control plane with the verdict), so successive
 *    runs rotate over the whole key space; a table no larger than `rowsPerRun` is checked whole
 *    every run. Segments partition the key space, so a key that exists only in the sink (before
 *    the first, between, or after the last source key) falls in one of them.
 * 4. A segment whose summaries differ is split in two at the median key of the side holding more
 *    rows (bisection; the right half's summary is the parent's minus the left's, so a split costs
 *    one summary per side), down to `leafRows` rows, where both sides' rows are read and compared
 *    column by column (`sameValue` of lambda/core/shared/same-value.ts, by each column's class from its
 *    registered type; masked columns masked with the masking module's `maskValue` and compared as
 *    text; excluded columns never read). The hash is only a filter: a hash that differs for a type's
 *    text (a `real` read back as `double precision`) narrows to rows that then compare equal.
 * 5. In flight is not divergence. A differing key is a *suspect*: it is read again on both sides
 *    after `settleMs` and after the sink's stable point has passed the previous read: the sink
 *    must have applied a heartbeat (invariant 10) that the source committed after that read
 *    (`clock` on the source side, `appliedThrough` on the sink side; INCONCLUSIVE when the sink
 *    does not get there within `maxLagMs`). A table in its own position space (a polled one,
 *    docs/architecture.md §5.2) waits for its `stablePoint` instead: the poll cursor and the
 *    sink's applied position past the table's highest poll value at that read. A key is confirmed diverged only when, through
 *    `CONFIRMING_RECHECKS` consecutive re-checks, neither side changed (same source values, same
 *    sink values and position) and they still differ; a key that now agrees was in flight; a key that changed on
 *    either side is re-checked again, up to `settleRounds` times, and is reported as unsettled
 *    (INCONCLUSIVE when nothing else diverged) if it never holds still.
 *
 * Verdicts: MATCH (every checked range agrees and the counts agree), DIVERGED (confirmed keys or
 * structural problems such as an excluded column present in the sink; with the differing ranges
 * and sample keys), INCONCLUSIVE (with why: table paused, keys still changing, counts differ
 * outside the ranges this run checked, a side unreadable).
 */
import { applyColumnRules, type ColumnRules } from '../tables/masking.ts';
import { compareClasses, sameValue, type CompareClass } from '../shared/same-value.ts';
import type { JsonValue } from '../shared/event.ts';
import type { Pacer, PressureReading } from '../snapshot/snapshot-pacer.ts';
import type { ControlPlane } from '../shared/control-plane.ts';
import type { Position } from '../shared/position.ts';
import type { KeyTuple, KeyRange, HashScheme, VerdictKind, DifferenceKind, DifferingRange, ReconcileVerdict } from './reconcile-verdict.ts';
import { inconclusiveVerdict } from './reconcile-verdict.ts';
export type { KeyTuple, KeyRange, HashScheme, VerdictKind, DifferenceKind, SampleKey, DifferingRange, ReconcileVerdict } from './reconcile-verdict.ts';

/** A range's row count and the exact sum (decimal text) of its rows' hashes (`HashScheme`). */
export interface RangeSummary {
  rows: number;
  checksum: string;
}

/** One row as a side reads it for a leaf comparison: compared columns as text. */
export interface SideRow {
  key: KeyTuple;
  values: Record<string, string | null>;
  /** The sink's stored position of the row (null on the source, or when the sink keeps none). */
  position: string | null;
}

/** What a side can tell about its copy of the table. */
export interface SideShape {
  /** Whether the table (or the sink's view of it) exists. */
  exists: boolean;
  /** Its columns (data and key), without the platform's own. */
  columns: string[];
  /** Each column's type as the side names it (PostgreSQL's `format_type`), when the side knows types. */
  types?: Record<string, string>;
  /**
   * How each key column orders (`number`, `text`, `time`, …; see `keyOrderClass`): both sides
   * must order keys alike, or ranges would not hold the same keys.
   */
  keyOrder: string[];
}

/**
 * The ordering class of a key column's type: integers and numerics order as numbers, text-like
 * types (and uuid, whose text orders as its bytes) by code unit ("C" collation), dates and
 * timestamps by time. A key whose class differs between the sides (a source `numeric` carried
 * as text) cannot be compared by ranges.
 */
export function keyOrderClass(type: string): string {
  const t = type.toLowerCase();
  if (/^(smallint|integer|bigint|int[248]?|numeric.*|decimal.*)$/.test(t)) return 'number';
  if (/^(text|character varying.*|varchar.*|character.*|char.*|uuid|name|citext)$/.test(t)) return 'text';
  if (/^(date|timestamp.*)$/.test(t)) return t.startsWith('date') ? 'date' : t.includes('with time zone') || t === 'timestamptz' ? 'timestamptz' : 'timestamp';
  return t;
}

/** The scheme every side can compute. */
export const BASE_HASH_SCHEME: HashScheme = 'md5-text';

/** The per-type hash a column gets under `pg-typed` (see `HashScheme`). */
export type HashClass = 'int' | 'numeric' | 'timestamptz' | 'timestamp' | 'uuid' | 'jsonb' | 'text';

/**
 * The hash class of a PostgreSQL type under `pg-typed`: the classes whose hash is equal for equal
 * values across the types the warehouse maps a source type to (`integer` → `bigint`,
 * `numeric(12,2)` → `numeric(38,2)`: PostgreSQL's integer hashes agree across widths and its
 * numeric hash ignores the display scale); everything else hashes its text.
 */
export function hashClassOf(type: string | undefined): HashClass {
  const t = (type ?? '').toLowerCase();
  if (/^(smallint|integer|bigint|int[248]?)$/.test(t)) return 'int';
  if (/^(numeric|decimal)(\(.*\))?$/.test(t)) return 'numeric';
  if (/^timestamp(\(\d+\))? with time zone$|^timestamptz$/.test(t)) return 'timestamptz';
  if (/^timestamp(\(\d+\))?( without time zone)?$/.test(t)) return 'timestamp';
  if (t === 'uuid') return 'uuid';
  if (t === 'jsonb') return 'jsonb';
  return 'text';
}

/** How the sides hash from now on: the scheme, and (for `pg-typed`) each compared column's class. */
export interface RowHashing {
  scheme: HashScheme;
  classes: Record<string, HashClass>;
}

/**
 * One side of a comparison: the source's table, or a sink's copy of it. Both sides of a
 * comparison hash a row the same way (`HashScheme`: by default `rowHashText` and the first 60 bits
 * of its MD5); the source side hashes masked columns masked.
 */
export interface ReconcileSide {
  readonly label: string;
  /** The hash schemes this side can compute, preferred first. @default ['md5-text'] */
  readonly hashSchemes?: readonly HashScheme[];
  shape(): Promise<SideShape>;
  /** The columns to compare and hash from now on, and how to hash them (the core decides both from both shapes). */
  useColumns(columns: readonly string[], hashing?: RowHashing): void;
  countAll(): Promise<number>;
  /**
   * The table's row count as the database estimates it (catalog statistics), or null when it has
   * none: a hint only, deciding whether a run is likely to cover the whole table (its counts then
   * come from the walk) or should count both sides alongside it. Never part of a verdict.
   */
  estimateRows?(): Promise<number | null>;
  /** The summary of `range`. */
  summarize(range: KeyRange): Promise<RangeSummary>;
  /** The key at 0-based `offset` in key order within `range`, or null. */
  keyAt(range: KeyRange, offset: number): Promise<KeyTuple | null>;
  /**
   * The summary of the first `limit` rows of `range` in key order, with the key of the last of
   * them; `last` null when the range holds fewer than `limit` rows (the summary is then the whole
   * range's). One read for `keyAt(range, limit - 1)` and the summary up to that key: a source side
   * that has it lets the walk read each segment once and overlap the sink's summary of a segment
   * with its own read of the next (docs/reconcile.md, step 4). Optional.
   */
  summarizeFirst?(range: KeyRange, limit: number): Promise<{ summary: RangeSummary; last: KeyTuple | null }>;
  /** Every row of `range` (a leaf: at most a few hundred rows). */
  rows(range: KeyRange): Promise<SideRow[]>;
  /** The rows with these keys (absent keys are left out). */
  rowsByKey(keys: readonly KeyTuple[]): Promise<SideRow[]>;
  /** Source: the source's clock now (ms since the epoch), the time heartbeats are stamped with. */
  clock?(): Promise<number>;
  /**
   * Sink: the source commit time (ms) of the newest heartbeat the sink has applied (invariant 10),
   * or null when it has none: the sink's stable point.
   */
  appliedThrough?(): Promise<number | null>;
}

/**
 * Where a sink must have got to, in the table's position space, before a suspect key is read again
 * (step 5): a mark taken at a read, and whether the sink has passed it.
 */
export interface StablePoint {
  /** What is waited for, for the INCONCLUSIVE reason (`the poll cursor`). */
  what: string;
  mark(): Promise<Position>;
  passed(mark: Position): Promise<boolean>;
}

export interface ReconcileTableOptions {
  sink: string;
  source: string;
  table: string;
  key: readonly string[];
  rules: ColumnRules;
  /**
   * The table's column types as the schema registry holds them (its current schema version):
   * they decide how values compare (lambda/core/shared/same-value.ts). A column the registry does not
   * type (none registered yet, a capture that did not say) takes the source catalog's type
   * (`SideShape.types`), else compares as text.
   */
  types?: Readonly<Record<string, string | null>>;
  sourceSide: ReconcileSide;
  sinkSide: ReconcileSide;
  /** The cursor of the previous run (null: start at the beginning). */
  cursor: KeyTuple | null;
  /** Source rows checked per run at most. @default 100000 */
  rowsPerRun?: number;
  /** Rows at or below which a differing range is compared row by row. @default 256 */
  leafRows?: number;
  /** Wait before re-reading suspect keys, ms: longer than the sink's lag. @default 5000 */
  settleMs?: number;
  /** Re-checks of differing keys at most (at least `CONFIRMING_RECHECKS`). @default 4 */
  settleRounds?: number;
  /** How long a re-check waits for the sink's stable point to pass the first read before giving up (INCONCLUSIVE). @default 120000 */
  maxLagMs?: number;
  /** Confirmed keys kept as samples. @default 20 */
  maxSampleKeys?: number;
  /** The source budget's pacer: segment size and pauses (shared with the snapshot worker). */
  pacer: Pacer;
  /** Source pressure after each segment (null: none measured). */
  pressure?: () => Promise<PressureReading | null>;
  /** Why the table cannot be compared now (paused, held), or null. */
  blockedBy?: string | null;
  /**
   * What re-checks wait for instead of the heartbeat (step 5), for a table whose positions are not
   * the log's: a polled table's poll cursor (lambda/core/capture/poll-stable-point.ts, docs/polling.md).
   */
  stablePoint?: StablePoint;
  sleep?: (ms: number) => Promise<void>;
  now?: () => number;
}

/**
 * The text one row's hash is computed from: each value as PostgreSQL's `quote_nullable` writes it
 * (`NULL`, or the text in single quotes with quotes doubled, and with backslashes doubled behind an
 * `E` when it has any), joined by `,`. Unambiguous, and one text conversion per value in SQL.
 */
export function rowHashText(values: readonly (string | null)[]): string {
  return values
    .map((v) => {
      if (v === null) return 'NULL';
      const q = v.replace(/'/g, "''");
      return v.includes('\\') ? `E'${q.replace(/\\/g, '\\\\')}'` : `'${q}'`;
    })
    .join(',');
}

/** Compares key tuples the way both sides order them (each part: numbers numerically, else by code unit). */
export function compareKeys(a: KeyTuple, b: KeyTuple, numeric: readonly boolean[]): number {
  for (let i = 0; i < a.length; i++) {
    const x = a[i]!;
    const y = b[i]!;
    if (x === y) continue;
    if (numeric[i]) {
      const d = BigInt(x) - BigInt(y);
      if (d !== 0n) return d < 0n ? -1 : 1;
      continue;
    }
    return x < y ? -1 : 1;
  }
  return 0;
}

const keyId = (k: KeyTuple): string => JSON.stringify(k);
const sameSummary = (a: RangeSummary, b: RangeSummary): boolean => a.rows === b.rows && a.checksum === b.checksum;
const minus = (a: RangeSummary, b: RangeSummary): RangeSummary => ({ rows: a.rows - b.rows, checksum: (BigInt(a.checksum) - BigInt(b.checksum)).toString() });

interface Suspect {
  key: KeyTuple;
  range: KeyRange;
  source: SideRow | null;
  sink: SideRow | null;
  /** Consecutive re-checks in which neither side changed and they still differed. */
  still: number;
}

/** Re-checks a suspect must hold still through before it is confirmed (docs/reconcile.md "Rows in flight"). */
export const CONFIRMING_RECHECKS = 2;

/** The first column whose values differ by its class (masked source values already masked), or null. */
function firstDifference(
  source: SideRow | null,
  sink: SideRow | null,
  columns: readonly string[],
  classes: Readonly<Record<string, CompareClass>>,
): { kind: DifferenceKind; column?: string } | null {
  if (source === null && sink === null) return null;
  if (source === null) return { kind: 'extra' };
  if (sink === null) return { kind: 'missing' };
  for (const c of columns) if (!sameValue(classes[c] ?? 'text', source.values[c] ?? null, sink.values[c] ?? null)) return { kind: 'different', column: c };
  return null;
}

const sameRow = (a: SideRow | null, b: SideRow | null): boolean =>
  a === null || b === null ? a === b : a.position === b.position && JSON.stringify(a.values) === JSON.stringify(b.values);

/** Applies the column rules to source rows read raw (masked columns hashed by the masking module). */
function ruled(rows: SideRow[], rules: ColumnRules): SideRow[] {
  if (rules.mask.length === 0) return rows;
  return rows.map((r) => ({ ...r, values: applyColumnRules(r.values as Record<string, JsonValue>, rules) as Record<string, string | null> }));
}

/**
 * The row hashing of a comparison: the first of the source's schemes the sink can compute too
 * (`md5-text` when they share no other); under `pg-typed`, a column's class is its type's when
 * both sides' types are of that class, else `text`, and a masked column is `text` (its masked text).
 */
export function chooseHashing(
  source: ReconcileSide,
  sink: ReconcileSide,
  srcShape: SideShape,
  snkShape: SideShape,
  columns: readonly string[],
  masked: readonly string[],
): RowHashing {
  const sinkSchemes = sink.hashSchemes ?? [BASE_HASH_SCHEME];
  const scheme = (source.hashSchemes ?? [BASE_HASH_SCHEME]).find((s) => sinkSchemes.includes(s)) ?? BASE_HASH_SCHEME;
  const classes: Record<string, HashClass> = {};
  for (const c of columns) {
    const a = hashClassOf(srcShape.types?.[c]);
    const b = hashClassOf(snkShape.types?.[c]);
    classes[c] = masked.includes(c) || a !== b ? 'text' : a;
  }
  return { scheme, classes };
}

/** Reconciles one table of one sink (see the module comment). */
export async function reconcileTable(o: ReconcileTableOptions): Promise<ReconcileVerdict> {
  const now = o.now ?? Date.now;
  const sleep = o.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const rowsPerRun = o.rowsPerRun ?? 100_000;
  const leafRows = o.leafRows ?? 256;
  const settleMs = o.settleMs ?? 5000;
  const settleRounds = Math.max(o.settleRounds ?? 4, CONFIRMING_RECHECKS);
  const maxSamples = o.maxSampleKeys ?? 20;
  const started = now();
  const v = inconclusiveVerdict({
    sink: o.sink,
    source: o.source,
    table: o.table,
    key: o.key,
    at: new Date(started).toISOString(),
    reason: '',
    nextCursor: o.cursor,
  });
  const done = (verdict: VerdictKind, reason: string): ReconcileVerdict => {
    v.verdict = verdict;
    v.reason = reason;
    v.durationMs = now() - started;
    return v;
  };
  if (o.key.length === 0) return done('INCONCLUSIVE', `table ${o.table} has no primary key: declare one with the table's key setting`);
  if (o.blockedBy) return done('INCONCLUSIVE', o.blockedBy);

  // Structure: excluded columns must be absent from the sink; compare the columns both hold.
  const [srcShape, snkShape] = await Promise.all([o.sourceSide.shape(), o.sinkSide.shape()]);
  if (!srcShape.exists) return done('INCONCLUSIVE', `source table ${o.table} does not exist`);
  if (!snkShape.exists) {
    const rows = await o.sourceSide.countAll();
    v.sourceRows = rows;
    if (rows === 0) return done('MATCH', 'the source table is empty and the sink has not created it yet');
    return done('DIVERGED', `${o.sinkSide.label} has no copy of ${o.table} while the source has ${rows} row(s)`);
  }
  for (const ex of o.rules.exclude) if (snkShape.columns.includes(ex)) v.problems.push(`excluded column ${ex} is present in ${o.sinkSide.label}`);
  const missingKey = o.key.filter((k) => !snkShape.columns.includes(k));
  if (missingKey.length > 0) return done('DIVERGED', `${o.sinkSide.label} lacks key column(s) ${missingKey.join(', ')}`);
  const orderMismatch = o.key.filter((_, i) => srcShape.keyOrder[i] !== snkShape.keyOrder[i]);
  if (orderMismatch.length > 0) {
    return done(
      'INCONCLUSIVE',
      `key column(s) ${orderMismatch.join(', ')} order differently in the source (${srcShape.keyOrder.join(', ')}) and ${o.sinkSide.label} (${snkShape.keyOrder.join(', ')}): key ranges cannot be compared`,
    );
  }
  const wanted = srcShape.columns.filter((c) => !o.rules.exclude.includes(c));
  v.columns = wanted.filter((c) => snkShape.columns.includes(c));
  // A source column the sink does not have yet (added, no event for it since): not compared, said so.
  v.notCompared = wanted.filter((c) => !snkShape.columns.includes(c));
  const hashing = chooseHashing(o.sourceSide, o.sinkSide, srcShape, snkShape, v.columns, o.rules.mask);
  v.cost.hashScheme = hashing.scheme;
  o.sourceSide.useColumns(v.columns, hashing);
  o.sinkSide.useColumns(v.columns, hashing);
  // How each column's values compare: by its registered type (docs/reconcile.md, "How values compare").
  const compareAs = compareClasses(v.columns, o.types, srcShape.types, o.rules.mask);

  // 2. Counts. A table the source estimates within `rowsPerRun` is walked whole, and its counts
  // are the sums of the segments' counts (the segments partition the key space): no count(*) at
  // all. Otherwise (or with no estimate) both sides count the whole table while the walk runs (a
  // side with a connection of its own for counts overlaps them; docs/performance-log.md, "Reconciliation and rebuild, issue 12's performance pass").
  const estimate = o.sourceSide.estimateRows ? await o.sourceSide.estimateRows() : null;
  let counting: Promise<[number, number]> | null = null;
  const countBoth = (): Promise<[number, number]> => {
    if (!counting) {
      counting = Promise.all([o.sourceSide.countAll(), o.sinkSide.countAll()]);
      counting.catch(() => undefined); // awaited below; a failure is reported from there
    }
    return counting;
  };
  if (estimate === null || estimate > rowsPerRun) void countBoth();
  let sinkCovered = 0;

  // 3. Walk segments from the cursor; a table that fits the budget is checked whole.
  const cursor = o.cursor;
  const suspects = new Map<string, Suspect>();
  const bisect = async (range: KeyRange, src: RangeSummary, snk: RangeSummary): Promise<void> => {
    if (sameSummary(src, snk)) return;
    if (Math.max(src.rows, snk.rows) <= leafRows || (src.rows <= 1 && snk.rows <= 1)) {
      const [a, b] = await Promise.all([o.sourceSide.rows(range), o.sinkSide.rows(range)]);
      v.cost.leafRows += a.length + b.length;
      const srcRows = new Map(ruled(a, o.rules).map((r) => [keyId(r.key), r]));
      const snkRows = new Map(b.map((r) => [keyId(r.key), r]));
      for (const id of new Set([...srcRows.keys(), ...snkRows.keys()])) {
        const s = srcRows.get(id) ?? null;
        const k = snkRows.get(id) ?? null;
        if (firstDifference(s, k, v.columns, compareAs)) suspects.set(id, { key: (s ?? k)!.key, range, source: s, sink: k, still: 0 });
      }
      return;
    }
    v.cost.bisections++;
    const bySource = src.rows >= snk.rows;
    const side = bySource ? o.sourceSide : o.sinkSide;
    const n = bySource ? src.rows : snk.rows;
    const mid = await side.keyAt(range, Math.floor(n / 2) - 1);
    if (mid === null) throw new Error(`${side.label}: no key at offset ${Math.floor(n / 2) - 1} of a range it counted ${n} rows in`);
    const left: KeyRange = { after: range.after, upTo: mid };
    const right: KeyRange = { after: mid, upTo: range.upTo };
    const [ls, lk] = await Promise.all([o.sourceSide.summarize(left), o.sinkSide.summarize(left)]);
    v.cost.summaries += 2;
    await bisect(left, ls, lk);
    await bisect(right, minus(src, ls), minus(snk, lk));
  };

  let after: KeyTuple | null = cursor;
  let bound: KeyTuple | null = null;
  let wrapped = cursor === null;
  // With `summarizeFirst`, the sink summarises (and, on a difference, bisects) each segment while
  // the source reads the next one: at most one such step in flight.
  let trailing: Promise<void> | null = null;
  const finish = async (range: KeyRange, seg: RangeSummary): Promise<void> => {
    const snk = await o.sinkSide.summarize(range);
    v.cost.summaries++;
    sinkCovered += snk.rows;
    await bisect(range, seg, snk);
  };
  while (v.coveredRows < rowsPerRun) {
    const decision = o.pacer.next();
    if (decision.pauseMs > 0) await sleep(decision.pauseMs);
    const limit = Math.max(1, Math.min(decision.chunkSize, rowsPerRun - v.coveredRows));
    const t0 = now();
    let range: KeyRange;
    let seg: RangeSummary;
    let toEnd: boolean;
    if (o.sourceSide.summarizeFirst) {
      // The segment is the next `limit` source rows: one read gives its summary and its last key.
      const first = await o.sourceSide.summarizeFirst({ after, upTo: bound }, limit);
      toEnd = first.last === null;
      range = { after, upTo: toEnd ? bound : first.last };
      seg = first.summary;
      v.cost.summaries++;
      o.pacer.record({ rows: seg.rows, readMs: now() - t0, pressure: o.pressure ? await o.pressure() : null });
      if (trailing) await trailing;
      const step = finish(range, seg);
      step.catch(() => undefined); // awaited before the next step or after the walk; a failure is reported from there
      trailing = step;
    } else {
      // The segment's last key (an index walk of `limit` keys); none: the rest up to the bound is shorter than a segment.
      const edge = await o.sourceSide.keyAt({ after, upTo: bound }, limit - 1);
      toEnd = edge === null;
      range = { after, upTo: toEnd ? bound : edge };
      // Both sides summarise the same range at the same time (two databases, or two sessions of one).
      const source = o.sourceSide.summarize(range).then((x) => ({ x, ms: now() - t0 }));
      const [{ x, ms: readMs }, snk] = await Promise.all([source, o.sinkSide.summarize(range)]);
      seg = x;
      v.cost.summaries += 2;
      o.pacer.record({ rows: seg.rows, readMs, pressure: o.pressure ? await o.pressure() : null });
      await bisect(range, seg, snk);
      sinkCovered += snk.rows;
    }
    v.coveredRows += seg.rows;
    const last = v.covered.at(-1);
    if (last && last.upTo !== null && range.after !== null && keyId(last.upTo) === keyId(range.after)) last.upTo = range.upTo;
    else v.covered.push({ ...range });
    if (!toEnd) {
      after = range.upTo;
      continue;
    }
    if (wrapped) {
      // Back where this run started: the whole key space is checked.
      v.fullCoverage = true;
      after = null;
      break;
    }
    wrapped = true;
    after = null;
    bound = cursor;
  }
  if (trailing) await trailing;
  v.nextCursor = v.fullCoverage ? null : after;
  if (v.fullCoverage) {
    // The whole key space, in segments that partition it: the counts are the segments' sums.
    if (counting) await counting; // started on a stale estimate: its figures are older than the walk's
    v.covered = [{ after: null, upTo: null }];
    v.sourceRows = v.coveredRows;
    v.sinkRows = sinkCovered;
  } else {
    [v.sourceRows, v.sinkRows] = await countBoth();
  }
  const sourceRows = v.sourceRows;
  const sinkRows = v.sinkRows;

  // 5. Re-check suspects until they hold still: each re-read waits `settleMs` and, when the sides
  // say, until the sink has applied a heartbeat the source committed after the previous read.
  let pending = [...suspects.values()];
  const confirmed: Array<Suspect & { kind: DifferenceKind; column?: string }> = [];
  const maxLagMs = o.maxLagMs ?? 120_000;
  const point = o.stablePoint ?? null;
  let readAt = pending.length > 0 && !point && o.sourceSide.clock ? await o.sourceSide.clock() : null;
  let mark = pending.length > 0 && point ? await point.mark() : null;
  let lagging: string | null = null;
  for (let round = 0; round < settleRounds && pending.length > 0; round++) {
    await sleep(settleMs);
    if (point && mark !== null) {
      // A table in its own position space (a polled one): its stable point, never the heartbeat.
      const deadline = now() + maxLagMs;
      let passed = await point.passed(mark);
      while (!passed && now() < deadline) {
        await sleep(Math.min(500, settleMs || 500));
        passed = await point.passed(mark);
      }
      if (!passed) {
        lagging = `${o.sinkSide.label} did not get past ${point.what} at ${mark} (the first read) within ${maxLagMs} ms: ${pending.length} differing key(s) not judged`;
        break;
      }
      mark = await point.mark();
    } else if (readAt !== null && o.sinkSide.appliedThrough) {
      const deadline = now() + maxLagMs;
      let through = await o.sinkSide.appliedThrough();
      // The sink must have applied a heartbeat committed at least `settleMs` after the read: a
      // margin for change-log shards that run behind the heartbeat's.
      const target = readAt + settleMs;
      while ((through === null || through < target) && now() < deadline) {
        await sleep(Math.min(500, settleMs || 500));
        through = await o.sinkSide.appliedThrough();
      }
      if (through === null || through < target) {
        lagging = `${o.sinkSide.label} did not apply a heartbeat newer than the first read within ${maxLagMs} ms (${through === null ? 'no heartbeat applied' : `${Math.round(readAt - through)} ms behind`}): ${pending.length} differing key(s) not judged`;
        break;
      }
      readAt = await o.sourceSide.clock!();
    }
    const keys = pending.map((s) => s.key);
    const [a, b] = await Promise.all([o.sourceSide.rowsByKey(keys), o.sinkSide.rowsByKey(keys)]);
    v.cost.recheckRows += a.length + b.length;
    const srcRows = new Map(ruled(a, o.rules).map((r) => [keyId(r.key), r]));
    const snkRows = new Map(b.map((r) => [keyId(r.key), r]));
    const next: Suspect[] = [];
    for (const s of pending) {
      const id = keyId(s.key);
      const src = srcRows.get(id) ?? null;
      const snk = snkRows.get(id) ?? null;
      const diff = firstDifference(src, snk, v.columns, compareAs);
      if (!diff) {
        v.settled++;
        continue;
      }
      const still = sameRow(src, s.source) && sameRow(snk, s.sink) ? s.still + 1 : 0;
      if (still >= CONFIRMING_RECHECKS) confirmed.push({ ...s, ...diff });
      else next.push({ ...s, source: src, sink: snk, still });
    }
    pending = next;
  }
  v.unsettled = pending.length;

  const ranges = new Map<string, DifferingRange>();
  for (const c of confirmed) {
    v.diverged[c.kind]++;
    const rid = keyId([JSON.stringify(c.range.after), JSON.stringify(c.range.upTo)]);
    const r = ranges.get(rid) ?? { range: c.range, missing: 0, extra: 0, different: 0 };
    r[c.kind]++;
    ranges.set(rid, r);
  }
  v.differing = [...ranges.values()];
  v.sampleKeys = confirmed.slice(0, maxSamples).map((c) => ({
    key: Object.fromEntries(o.key.map((k, i) => [k, c.key[i]!])),
    kind: c.kind,
    ...(c.column !== undefined ? { column: c.column } : {}),
  }));

  const n = confirmed.length;
  if (n > 0 || v.problems.length > 0) {
    const parts = [`${v.diverged.missing} missing, ${v.diverged.extra} extra, ${v.diverged.different} different`];
    if (v.problems.length > 0) parts.push(...v.problems);
    if (v.unsettled > 0) parts.push(`${v.unsettled} more key(s) ${lagging ? 'not judged (sink lagging)' : 'still changing'}`);
    return done('DIVERGED', parts.join('; '));
  }
  if (lagging) return done('INCONCLUSIVE', lagging);
  if (v.unsettled > 0)
    return done(
      'INCONCLUSIVE',
      `${v.unsettled} key(s) differed and kept changing through ${settleRounds} re-check(s) ${settleMs} ms apart: in flight or hot; the next run checks them again`,
    );
  if (!v.fullCoverage && sourceRows !== sinkRows) {
    return done(
      'INCONCLUSIVE',
      `row counts differ (source ${sourceRows}, ${o.sinkSide.label} ${sinkRows}) and the ${v.coveredRows} row(s) checked this run agree: the difference is in flight or in ranges the next runs check`,
    );
  }
  if (v.fullCoverage && sourceRows !== sinkRows && v.settled === 0) {
    // Every range agreed, yet the counts differ: rows moved between the counts and the walk.
    return done(
      'INCONCLUSIVE',
      `row counts differ (source ${sourceRows}, ${o.sinkSide.label} ${sinkRows}) although every range agreed: the table changed while it was read`,
    );
  }
  return done(
    'MATCH',
    `${v.coveredRows} of ${sourceRows} source row(s) checked${v.fullCoverage ? ' (whole table)' : ''}${v.settled > 0 ? `; ${v.settled} key(s) were in flight and settled` : ''}`,
  );
}

// ---------------------------------------------------------------------------------------------
// Coverage (docs/reconcile.md "Coverage")

/** A group of tables reconciled on one schedule, each needing a decided verdict within `periodMs`. */
export interface ReconcileTier {
  name: string;
  periodMs: number;
  /** Table ids (`schema.table`) of this tier; `*` = every captured table not named by another tier. */
  tables: string[];
}

/** The tier a table belongs to: the first that names it, else the first with `*`, else none. */
export function tierOf(table: string, tiers: readonly ReconcileTier[]): ReconcileTier | null {
  return tiers.find((t) => t.tables.includes(table)) ?? tiers.find((t) => t.tables.includes('*')) ?? null;
}

/**
 * Captured tables with no decided verdict (MATCH or DIVERGED) within their tier's period, per
 * sink: the coverage gap. A table no tier covers counts as a gap too (nothing will ever check it).
 */
export function coverageGaps(
  tables: ReadonlyArray<{ source: string; table: string }>,
  sinks: readonly string[],
  verdicts: readonly Pick<ReconcileVerdict, 'sink' | 'source' | 'table' | 'verdict' | 'at'>[],
  tiers: readonly ReconcileTier[],
  now: number,
): Array<{ sink: string; source: string; table: string; lastDecidedAt: string | null; tier: string | null }> {
  const decided = new Map<string, string>();
  for (const v of verdicts) {
    if (v.verdict === 'INCONCLUSIVE') continue;
    const id = `${v.sink}\u0000${v.source}\u0000${v.table}`;
    const prev = decided.get(id);
    if (!prev || prev < v.at) decided.set(id, v.at);
  }
  const gaps = [];
  for (const sink of sinks) {
    for (const t of tables) {
      const tier = tierOf(t.table, tiers);
      const at = decided.get(`${sink}\u0000${t.source}\u0000${t.table}`) ?? null;
      if (!tier || at === null || now - Date.parse(at) > tier.periodMs)
        gaps.push({ sink, source: t.source, table: t.table, lastDecidedAt: at, tier: tier?.name ?? null });
    }
  }
  return gaps;
}

/** The verdict as lines for a terminal. */
export function formatReconcileVerdict(v: ReconcileVerdict): string[] {
  const lines = [`${v.verdict.padEnd(12)} ${v.source}/${v.table} (${v.sink}): ${v.reason}`];
  if (v.sourceRows !== null)
    lines.push(`             rows: source ${v.sourceRows}, sink ${v.sinkRows ?? '-'}; checked ${v.coveredRows}${v.fullCoverage ? ' (whole table)' : ''}`);
  for (const d of v.differing.slice(0, 10)) {
    lines.push(
      `             range (${d.range.after ? d.range.after.join(',') : '-inf'} .. ${d.range.upTo ? d.range.upTo.join(',') : '+inf'}]: ${d.missing} missing, ${d.extra} extra, ${d.different} different`,
    );
  }
  for (const s of v.sampleKeys) {
    const key = Object.entries(s.key)
      .map(([k, x]) => `${k}=${x}`)
      .join(',');
    lines.push(
      `             key ${key}: ${s.kind === 'missing' ? 'missing in the sink' : s.kind === 'extra' ? 'in the sink but not in the source' : `${s.column} differs`}`,
    );
  }
  for (const c of v.notCompared) lines.push(`             column ${c} not compared (the sink has no such column yet)`);
  return lines;
}

// ---------------------------------------------------------------------------------------------
// A run over tables (the handler's and `cdc reconcile`'s body)

export interface TableToReconcile {
  table: string;
  key: readonly string[];
  rules: ColumnRules;
  /** Column types; absent: read from the schema registry (`registeredTypes`). */
  types?: Readonly<Record<string, string | null>>;
}

/** The column types of a table's current registered schema version, or undefined when none is registered. */
export async function registeredTypes(controlPlane: ControlPlane, sourceId: string, table: string): Promise<Record<string, string | null> | undefined> {
  const record = await controlPlane.getTable(sourceId, table);
  if (!record) return undefined;
  const schema = await controlPlane.getSchemaVersion(sourceId, table, record.currentVersion);
  return schema ? Object.fromEntries(schema.columns.map((c) => [c.name, c.type])) : undefined;
}

export interface ReconcileRunOptions extends Pick<
  ReconcileTableOptions,
  'rowsPerRun' | 'leafRows' | 'settleMs' | 'settleRounds' | 'maxSampleKeys' | 'pacer' | 'pressure' | 'sleep' | 'now'
> {
  controlPlane: ControlPlane;
  source: string;
  sink: string;
  tables: readonly TableToReconcile[];
  /** The two sides of one table (the caller's adapters). */
  sides: (t: TableToReconcile) => Promise<{ source: ReconcileSide; sink: ReconcileSide; stablePoint?: StablePoint; close?: () => Promise<void> }>;
  /** Stop starting tables when this says so (a Lambda's time running out). */
  shouldStop?: () => boolean;
  onVerdict?: (v: ReconcileVerdict) => void;
}

/**
 * Why a table cannot be compared now, from the control plane: not `active` (paused, needing a
 * re-snapshot), or the sink holds its changes back; null when it can be.
 */
export async function blockedReason(controlPlane: ControlPlane, sink: string, sourceId: string, table: string): Promise<string | null> {
  const record = await controlPlane.getTable(sourceId, table);
  if (record && record.state !== 'active' && record.state !== 'degraded')
    return `table is ${record.state}${record.stateReason ? ` (${record.stateReason})` : ''}: the sink is behind on purpose`;
  const progress = await controlPlane.getSinkProgress(sink, sourceId, table);
  if (progress?.heldFrom) return `sink ${sink} holds the table's changes from position ${progress.heldFrom} (a resume replays them): not comparable until then`;
  return null;
}

/** Reconciles each table in turn, storing each verdict (with its cursor) in the control plane. */
export async function reconcileTables(o: ReconcileRunOptions): Promise<ReconcileVerdict[]> {
  const out: ReconcileVerdict[] = [];
  for (const t of o.tables) {
    if (o.shouldStop?.()) break;
    const previous = await o.controlPlane.getReconcileVerdict(o.sink, o.source, t.table);
    const blockedBy = await blockedReason(o.controlPlane, o.sink, o.source, t.table);
    const types = t.types ?? (await registeredTypes(o.controlPlane, o.source, t.table));
    let verdict: ReconcileVerdict;
    const sides = await o.sides(t);
    try {
      verdict = await reconcileTable({
        ...o,
        table: t.table,
        key: t.key,
        rules: t.rules,
        ...(types ? { types } : {}),
        sourceSide: sides.source,
        sinkSide: sides.sink,
        cursor: previous?.nextCursor ?? null,
        blockedBy,
        ...(sides.stablePoint ? { stablePoint: sides.stablePoint } : {}),
      });
    } catch (e) {
      const at = new Date((o.now ?? Date.now)()).toISOString();
      verdict = inconclusiveVerdict({
        sink: o.sink,
        source: o.source,
        table: t.table,
        key: t.key,
        at,
        reason: `could not read: ${(e as Error).message}`,
        nextCursor: previous?.nextCursor ?? null,
      });
    } finally {
      await sides.close?.();
    }
    await o.controlPlane.putReconcileVerdict(verdict);
    o.onVerdict?.(verdict);
    out.push(verdict);
  }
  return out;
}

/** The exit code of a set of verdicts: 1 when any DIVERGED, else 3 when any INCONCLUSIVE (or none), else 0. */
export function verdictExitCode(verdicts: readonly Pick<ReconcileVerdict, 'verdict'>[]): 0 | 1 | 3 {
  if (verdicts.some((v) => v.verdict === 'DIVERGED')) return 1;
  if (verdicts.length === 0 || verdicts.some((v) => v.verdict === 'INCONCLUSIVE')) return 3;
  return 0;
}
