/**
 * Which records of a change-log batch to report as failed (docs/operations.md, "Blast radius of
 * one table"). A table whose apply failed fails its own records from its first failed one on, so
 * that its per-key order is kept; the records of other tables are not reported (they applied, and
 * if the event source re-delivers them from the lowest failed sequence number, the position guard
 * makes that harmless). A failed record that belongs to no table (its dead letter could not be
 * stored) fails every record from it on, as before.
 */
import { compareSequenceNumbers } from './apply-plan.ts';

export function failuresPerTable(records: ReadonlyArray<{ sequenceNumber: string; table: string | null }>, failed: ReadonlySet<string>): string[] {
  const firstOf = new Map<string | null, string>();
  for (const r of records) {
    if (!failed.has(r.sequenceNumber)) continue;
    const first = firstOf.get(r.table);
    if (first === undefined || compareSequenceNumbers(r.sequenceNumber, first) < 0) firstOf.set(r.table, r.sequenceNumber);
  }
  const global = firstOf.get(null);
  return records
    .filter((r) => {
      if (global !== undefined && compareSequenceNumbers(r.sequenceNumber, global) >= 0) return true;
      const first = r.table === null ? undefined : firstOf.get(r.table);
      return first !== undefined && compareSequenceNumbers(r.sequenceNumber, first) >= 0;
    })
    .map((r) => r.sequenceNumber);
}
