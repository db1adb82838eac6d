/**
 * The merge policy of a warehouse sink: when a table's delta is merged into its base, and when that
 * merge stops appends (docs/warehouse-apply.md, "The merge"). Pure; the apply
 * (lambda/core/warehouse/warehouse-apply.ts) follows it.
 */
import { InvalidRecordError } from '../shared/errors.ts';

/**
 * When the delta of a table is merged into its base (docs/warehouse-apply.md, "The merge"): when it
 * holds `maxRows` rows or its oldest row is `maxAgeMs` old, whichever comes first. The view shows
 * every change at once either way: the thresholds bound how much the view overlays at query time.
 */
export interface MergePolicy {
  /** Rows in the delta at which it is merged. @default 50,000 */
  maxRows: number;
  /** Age of the delta's oldest row at which it is merged, ms. @default 60,000 (the schedule runs every minute) */
  maxAgeMs: number;
  /** The applier merges a due delta right after its append (false: only `mergeDue`, e.g. a separate worker). @default true */
  inline: boolean;
}

export const DEFAULT_MERGE_POLICY: MergePolicy = { maxRows: 50_000, maxAgeMs: 60_000, inline: true };

/** Checks a merge policy (values from configuration): clear errors naming the setting. */
export function validateMergePolicy(p: Partial<MergePolicy>, where: string): MergePolicy {
  const out = { ...DEFAULT_MERGE_POLICY, ...p };
  if (!Number.isInteger(out.maxRows) || out.maxRows < 0)
    throw new InvalidRecordError('maxRows', `${where}: the merge row threshold must be a whole number ≥ 0, got ${p.maxRows}`);
  if (!Number.isFinite(out.maxAgeMs) || out.maxAgeMs < 0)
    throw new InvalidRecordError('maxAgeMs', `${where}: the merge age threshold must be a number of milliseconds ≥ 0, got ${p.maxAgeMs}`);
  return out;
}

/**
 * A delta this many times `maxRows` is merged with appends stopped (docs/warehouse-apply.md,
 * "Merges do not stop appends"): where appends outpace merges, each merge would start on a larger
 * delta than the last; stopping them for that merge empties it, so the delta stays within about
 * this many times `maxRows` plus what arrives during one merge.
 */
export const MERGE_BACKPRESSURE_FACTOR = 2;

/** Whether a merge of a delta of `rows` rows stops appends (`MERGE_BACKPRESSURE_FACTOR`). */
export function stopsAppends(p: MergePolicy, rows: number): boolean {
  return p.maxRows > 0 && rows >= MERGE_BACKPRESSURE_FACTOR * p.maxRows;
}

/** Whether a delta is due for a merge. */
export function mergeDueFor(p: MergePolicy, rows: number, oldest: number | null, now: number): boolean {
  if (rows <= 0) return false;
  return rows >= p.maxRows || (oldest !== null && now - oldest >= p.maxAgeMs);
}
