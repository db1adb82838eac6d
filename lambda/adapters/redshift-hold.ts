/**
 * The applier's side of primary-key changes held on Redshift (docs/primary-key-changes.md, "On Redshift"): before
 * `RedshiftWarehouse` completes a batch, the events that cannot be completed yet are taken out of it (`planHolds`)
 * and go to the table's handover table with the batch's load, so the batch never waits for another shard.
 *
 * Reads, only for a batch with an event that lacks columns: the table's held keys (what this shard's earlier batches
 * held; another shard's later events of those keys come through this shard, after that load committed), and for each
 * insert half whose delete half is not in the batch, whether that delete half is loaded.
 */
import type { ChangeEvent, JsonValue } from '../core/shared/event.ts';
import { isInsertHalf, loadedQuestions, planHolds } from '../core/warehouse/redshift-handover.ts';
import type { Held } from '../core/warehouse/redshift-load.ts';
import { heldKeysSql } from '../core/warehouse/redshift-handover-sql.ts';
import { type RedshiftTable } from '../core/warehouse/redshift-sql.ts';
import { keyChangeDeleteSql } from '../core/warehouse/redshift-key-sql.ts';

/** The batch's events sorted as the writer completes them: by position, at one position an insert half before its delete half. */
function sorted(events: readonly ChangeEvent[]): ChangeEvent[] {
  const rank = (e: ChangeEvent): number => (e.op === 'delete' ? 1 : 0);
  return [...events].sort((a, b) => (a.position < b.position ? -1 : a.position > b.position ? 1 : rank(a) - rank(b)));
}

/** The batch's events to complete and load (`pass`, in the batch's order) and the ones to hold. */
export async function holdBack(
  r: RedshiftTable,
  events: readonly ChangeEvent[],
  read: (text: string) => Promise<Record<string, unknown>[]>,
  keyOf: (row: Readonly<Record<string, JsonValue>>) => readonly string[],
): Promise<{ pass: readonly ChangeEvent[]; held: Held[] }> {
  const lacking = events.some((e) => e.op !== 'delete' && e.missing.length > 0);
  if (!lacking) return { pass: events, held: [] };
  const ordered = sorted(events);
  const heldInTable = new Map<string, string[]>();
  for (const row of await read(heldKeysSql(r))) {
    const k = JSON.stringify(r.key.map((_, i) => String(row[`k${i}`])));
    heldInTable.set(k, [...(heldInTable.get(k) ?? []), String(row.at_pos)]);
  }
  const loaded = new Set<string>();
  if (ordered.some(isInsertHalf)) {
    for (const [at, oldKey] of loadedQuestions(ordered, keyOf)) {
      const n = Number((await read(keyChangeDeleteSql(r, oldKey, at.slice(at.lastIndexOf('@') + 1))))[0]?.n ?? 0);
      if (n > 0) loaded.add(at);
    }
  }
  const { pass, held } = planHolds(ordered, keyOf, heldInTable, loaded);
  if (held.length === 0) return { pass: events, held };
  const kept = new Set(pass);
  return { pass: events.filter((e) => kept.has(e)), held };
}
