/**
 * Primary-key changes held on Redshift (docs/primary-key-changes.md, "On Redshift"). Pure.
 *
 * The insert half of a primary-key change that lacks columns (an unchanged TOAST value), whose old key's delete
 * half is not loaded yet, is held: the applier stages it into `_cdc_handover_<t>` with its batch's load and lets
 * the batch through (`planHolds`), and so every later event of its new key that cannot be completed without it (a
 * partial update; an insert half whose old key is held). The loader completes held events in a later load's
 * transaction, the first whose changelog holds what they need (`resolveHeld`): the old key's delete half, and
 * nothing held of the old key before the change. Loads are serial, so no two shards wait on each other.
 */
import { plainEvent } from '../sink/lazy-event.ts';
import type { ChangeEvent, JsonValue } from '../shared/event.ts';
import { stageEvent, type Held, type StagedRow } from './redshift-load.ts';
import type { RedshiftColumn, ValuePolicy } from './redshift-types.ts';

/** The insert half of a primary-key change that lacks columns (the applier completes it from its old key). */
export function isInsertHalf(e: ChangeEvent): boolean {
  return e.missing.length > 0 && e.op !== 'update' && e.op !== 'delete' && e.op !== 'truncate';
}

/** A held event's handover row (`handoverColumns` order): its changelog row with its absent columns NULL, what it lacks, its old key (JSON) or NULL. */
export function stageHeld(
  e: ChangeEvent,
  key: readonly RedshiftColumn[],
  data: readonly RedshiftColumn[],
  policyOf: (column: string) => ValuePolicy,
  appliedAt: Date,
  oldKey: readonly string[] | null,
): { row: StagedRow } | { refused: Error } {
  const after: Record<string, JsonValue> = { ...(e.after ?? {}) };
  for (const m of e.missing) after[m] = null;
  const s = stageEvent({ ...plainEvent(e), after, missing: [], handover: [] }, key, data, policyOf, appliedAt);
  if ('refused' in s) return s;
  if (!('row' in s)) throw new Error(`${e.table} at ${e.position}: a ${e.op} is never held`);
  return { row: { fields: [...s.row.fields, e.missing.join(','), oldKey === null ? null : JSON.stringify(oldKey)] } };
}

/** What the batch's insert halves ask before they are planned: whether the old key's delete half is loaded (`<old key id>@<position>`). */
export function loadedQuestions(
  events: readonly ChangeEvent[],
  keyOf: (row: Readonly<Record<string, JsonValue>>) => readonly string[],
): Map<string, readonly string[]> {
  const deletes = new Set(events.filter((e) => (e.handover?.length ?? 0) > 0).map((e) => `${idOf(keyOf, e.key)}@${e.position}`));
  const out = new Map<string, readonly string[]>();
  for (const e of events) {
    if (!isInsertHalf(e)) continue;
    const old = oldKeyOf(keyOf, e);
    if (old !== null && !deletes.has(`${JSON.stringify(old)}@${e.position}`)) out.set(`${JSON.stringify(old)}@${e.position}`, old);
  }
  return out;
}

/** A key's staged texts as one id; null when it cannot be one (a null key column, a value Redshift cannot hold: the completion says why). */
function idOf(keyOf: (row: Readonly<Record<string, JsonValue>>) => readonly string[], row: Readonly<Record<string, JsonValue>> | null): string | null {
  try {
    return row === null ? null : JSON.stringify(keyOf(row));
  } catch {
    return null;
  }
}

/** An insert half's old key as staged texts, when it names one (else the completion decides). */
function oldKeyOf(keyOf: (row: Readonly<Record<string, JsonValue>>) => readonly string[], e: ChangeEvent): readonly string[] | null {
  const id = idOf(keyOf, e.before ?? null);
  return id === null ? null : (JSON.parse(id) as string[]);
}

/**
 * Which of the batch's events (sorted as the writer completes them: by position, an insert half before its delete
 * half) are held, and which go on to be completed and loaded. `heldInTable`: the positions held per key id;
 * `loaded`: the insert halves' old keys whose delete half is loaded (`loadedQuestions`).
 * - a partial update of a key with an event held before it is held;
 * - an insert half is held when its old key has an event held before it, or when its delete half is neither in the
 *   batch nor loaded (even with an image of the old key in the batch);
 * - a full image of a key ends what is held before it for this batch (later partial updates complete from it);
 *   a truncate ends everything held below it.
 */
export function planHolds(
  events: readonly ChangeEvent[],
  keyOf: (row: Readonly<Record<string, JsonValue>>) => readonly string[],
  heldInTable: ReadonlyMap<string, readonly string[]>,
  loaded: ReadonlySet<string>,
): { pass: ChangeEvent[]; held: Held[] } {
  const deletes = new Set(events.filter((e) => (e.handover?.length ?? 0) > 0).map((e) => `${idOf(keyOf, e.key)}@${e.position}`));
  /** Per key with an event in the batch so far: whether it is held. */
  const state = new Map<string, boolean>();
  let truncatedAt = '';
  const heldBefore = (k: string, at: string): boolean => (state.has(k) ? state.get(k)! : (heldInTable.get(k) ?? []).some((q) => q > truncatedAt && q < at));
  const pass: ChangeEvent[] = [];
  const held: Held[] = [];
  for (const e of events) {
    if (e.op === 'truncate') {
      state.clear();
      truncatedAt = e.position;
      pass.push(e);
      continue;
    }
    const k = idOf(keyOf, e.key);
    if (k === null) {
      pass.push(e);
      continue;
    }
    const old = isInsertHalf(e) ? oldKeyOf(keyOf, e) : null;
    const o = old === null ? null : JSON.stringify(old);
    const hold =
      e.op === 'update' && e.missing.length > 0
        ? heldBefore(k, e.position)
        : // The batch's own image of the old key is its image just before the change only with the delete half in the batch or
          // loaded: a shard carrying two sources (or a re-send) may bring the old key's later events below the change after it.
          o !== null && (heldBefore(o, e.position) || (!deletes.has(`${o}@${e.position}`) && !loaded.has(`${o}@${e.position}`)));
    // A full image, a delete, or an event completed now: the key's later events in the batch complete from it.
    state.set(k, hold);
    if (hold) held.push({ event: e, oldKey: old });
    else pass.push(e);
  }
  return { pass, held };
}

/** A held row as the loader reads it back (`heldRowsSql`). */
export interface HeldRow {
  key: readonly string[];
  position: string;
  op: string;
  missing: readonly string[];
  oldKey: readonly string[] | null;
  unheld: string | null;
}

/** A changelog row of a key the held rows name (`keyRowsSql`), oldest first. */
export interface KeyRow {
  key: readonly string[];
  position: string;
  op: string;
  unheld: string | null;
}

/** What the loader does with a held event in this load. */
export type HeldStep =
  | { kind: 'complete'; row: HeldRow; donor: { key: readonly string[]; position: string } | null; unheld: string | null }
  | { kind: 'drop'; row: HeldRow; why: 'loaded' | 'overtaken' | 'truncated' | 'incomplete' };

/** The markers of `own` and, of `donor`'s, those of the columns taken from it. */
function markers(own: string | null, donor: string | null, taken: readonly string[]): string | null {
  const names = new Set(taken.map((m) => m.toLowerCase()));
  const inherited = (donor ?? '').split(',').filter((m) => m !== '' && names.has(m.slice(0, m.lastIndexOf(':')).toLowerCase()));
  return [...(own ?? '').split(',').filter((m) => m !== ''), ...inherited].join(',') || null;
}

/**
 * The held rows' fate in a load, after its COPYs (docs/primary-key-changes.md, "On Redshift"), in the order the
 * statements run (a completion may be the next one's donor). Repeated until nothing changes:
 * - at or below the newest truncate (`truncatedAt`): dropped (the rows were emptied);
 * - an event of a key with an earlier one still held waits for it;
 * - its own key's changelog has it already (a redelivered batch completed it): dropped; its key's next row after it
 *   is a full image: dropped (the position guard), unless a held insert half names it as its old key after it (its
 *   image is that one's donor). A delete next keeps it: it may be a key change's delete half whose insert half,
 *   still to come, takes its image;
 * - an insert half completes once its old key's delete half is in the changelog and nothing of the old key before
 *   it is held: from the old key's newest row below it; none, or a delete: dropped as incomplete (reconciliation
 *   finds the row; the caller logs it);
 * - a partial update completes from its key's newest row below it (none, or a delete: its absent columns NULL,
 *   as an update over no row is everywhere).
 * Everything else stays held.
 */
export function resolveHeld(held: readonly HeldRow[], rows: readonly KeyRow[], truncatedAt: string): { steps: HeldStep[]; kept: HeldRow[] } {
  const id = (key: readonly string[]): string => JSON.stringify(key);
  const byKey = new Map<string, KeyRow[]>();
  for (const r of rows) byKey.set(id(r.key), [...(byKey.get(id(r.key)) ?? []), r]);
  const seen = new Set<string>();
  let remaining = [...held]
    .sort((a, b) => (a.position < b.position ? -1 : a.position > b.position ? 1 : 0))
    .filter((h) => {
      const k = `${id(h.key)}@${h.position}@${h.op}`;
      if (seen.has(k)) return false;
      seen.add(k);
      return true;
    });
  const steps: HeldStep[] = [];
  const newestBelow = (key: string, at: string): KeyRow | undefined => {
    let best: KeyRow | undefined;
    // Oldest first, so the first of two rows at one position (a redelivery) stays the one taken.
    for (const r of byKey.get(key) ?? []) if (r.position < at && (best === undefined || r.position > best.position)) best = r;
    return best;
  };
  // The key's next row after `h` is a full image: every later image of the key, and every key change from it, is that one's.
  // A delete next may be a key change's delete half whose insert half needs `h`'s image (it arrives later): `h` stays.
  const overtaken = (h: HeldRow): boolean => {
    let next: KeyRow | undefined;
    for (const r of byKey.get(id(h.key)) ?? []) if (r.position > h.position && (next === undefined || r.position < next.position)) next = r;
    return next !== undefined && next.op !== 'delete';
  };
  const settle = (step: HeldStep): void => {
    steps.push(step);
    remaining = remaining.filter((x) => x !== step.row);
    if (step.kind === 'complete') {
      const r = step.row;
      byKey.set(id(r.key), [...(byKey.get(id(r.key)) ?? []), { key: r.key, position: r.position, op: r.op, unheld: step.unheld }]);
    }
  };
  for (let changed = true; changed;) {
    changed = false;
    for (const h of [...remaining]) {
      const k = id(h.key);
      if (h.position <= truncatedAt) settle({ kind: 'drop', row: h, why: 'truncated' });
      else if (remaining.some((o) => id(o.key) === k && o.position < h.position)) continue;
      else if ((byKey.get(k) ?? []).some((r) => r.position === h.position && r.op === h.op)) settle({ kind: 'drop', row: h, why: 'loaded' });
      else if (overtaken(h) && !remaining.some((o) => o.oldKey !== null && id(o.oldKey) === k && o.position > h.position))
        settle({ kind: 'drop', row: h, why: 'overtaken' });
      else if (h.oldKey !== null) {
        const o = id(h.oldKey);
        if (!(byKey.get(o) ?? []).some((r) => r.position === h.position && r.op === 'delete')) continue;
        if (remaining.some((x) => id(x.key) === o && x.position < h.position)) continue;
        const donor = newestBelow(o, h.position);
        if (donor === undefined || donor.op === 'delete') settle({ kind: 'drop', row: h, why: 'incomplete' });
        else settle({ kind: 'complete', row: h, donor: { key: h.oldKey, position: donor.position }, unheld: markers(h.unheld, donor.unheld, h.missing) });
      } else {
        const donor = newestBelow(k, h.position);
        const live = donor !== undefined && donor.op !== 'delete' ? donor : null;
        settle({
          kind: 'complete',
          row: h,
          donor: live && { key: h.key, position: live.position },
          unheld: markers(h.unheld, live?.unheld ?? null, h.missing),
        });
      }
      changed = true;
    }
  }
  return { steps, kept: remaining };
}
