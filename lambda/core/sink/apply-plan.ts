/**
 * Collapse of one table's micro-batch into sink writes (docs/architecture.md §5.4, invariants 2, 7 and 11). Pure.
 *
 * Input: the table's events of one batch (any order, duplicates allowed) and what the sink holds
 * for their keys (position and deleted flag, read inside the apply transaction). Output: the
 * distinct events for the changelog and at most one mirror write per key.
 *
 * Per key: events at or below the stored position are dropped (they are already reflected, or
 * superseded; invariant 2). The rest are folded in position order:
 * - `insert` / `snapshot`: a full image; columns absent from it are NULL. A primary-key change
 *   arrives as a `delete` of the old key and an `insert` of the new key at the same position;
 *   when that insert lists `missing` columns (an unchanged TOAST value under the default replica
 *   identity), their values are taken from the old key's row when it is known for certain: a
 *   value the sink keeps for it (`donors`, written when the old key's delete, marked
 *   `handover`, was applied first), the old key's delete at that position in this batch (its
 *   state just before is the stored row plus this batch's earlier events), or a tombstone of the
 *   old key at exactly that position. Otherwise the insert and every later event of its key are
 *   `held` (never written with a NULL) and planned again with later batches until the values are
 *   known (docs/primary-key-changes.md).
 * - `update`: the delivered columns merged onto the row; columns absent from `after` are left
 *   untouched (invariant 11). With no live row underneath (absent, deleted, or deleted earlier in
 *   the batch) there is nothing to merge onto, and the update becomes a full image.
 * - `delete`: a tombstone that keeps the values it had.
 * - `truncate` (table level, empty key): every row of the table below its position is gone
 *   (the SQL tombstones or removes them before the row writes run). The table's truncate
 *   position T is the highest of the stored one (`truncatedAt`) and the batch's truncates; per
 *   key, only events above max(stored position, T) apply, and a key whose stored row is below T
 *   starts from nothing (its row was truncated). So a late older event never resurrects a
 *   truncated row, and a later insert applies.
 *
 * A write is `full` (every data column is written, NULL where not in `values`) or a merge (only
 * the columns in `values`). The SQL runs one UPDATE per distinct column set.
 */
import type { ChangeEvent, Row } from '../shared/event.ts';
import { keyText } from '../shared/event.ts';
import type { Position } from '../shared/position.ts';

/** What the sink holds for a key: the highest position over mirror and deleted-keys, and whether that is a deletion. */
export interface StoredState {
  position: Position;
  deleted: boolean;
}

/** A full stored mirror row (values as text), for recovering the missing columns of a primary-key change. */
export interface StoredRow {
  position: Position;
  deleted: boolean;
  values: Row;
}

/** The write for one key: the collapsed result of its events above the stored position. */
export interface MirrorWrite {
  key: Row;
  keyText: string;
  position: Position;
  deleted: boolean;
  /** Commit time of the delete, for tombstones. */
  deletedAt: string | null;
  /** True: every data column is written (NULL where absent from `values`); false: only `values`' columns. */
  full: boolean;
  values: Row;
}

export interface TablePlan {
  /** Distinct row events (by position + key), in position order: what the changelog must hold. */
  events: ChangeEvent[];
  /** Distinct truncate events of the batch, in position order (recorded in the truncations table). */
  truncates: ChangeEvent[];
  /** The newest truncate of the batch when it is above the stored truncate position: the SQL empties the mirror at it first. */
  truncate: ChangeEvent | null;
  /** One write per key that has events above its stored position. */
  writes: MirrorWrite[];
  /** Events above their key's stored position: newly reflected by this apply. */
  fresh: ChangeEvent[];
  /**
   * Events the sink must keep holding: a primary-key change's insert whose undelivered columns
   * are not known yet, and every later event of that key (applied once they are known).
   */
  held: ChangeEvent[];
  /** Handed-over values the sink must keep (after this apply) for inserts not applied yet. */
  donors: Donor[];
  /**
   * Handovers this plan completed from the old key's values (its stored row and its events in
   * this batch), not from a kept donor. A sink that applies a batch atomically (the warehouse)
   * needs nothing more; a sink whose writes can fail one by one (the search index) keeps them as
   * donors first, so an insert whose write failed can still be completed after the old key's
   * later events were written (docs/search.md, "Primary-key changes").
   */
  completed: Donor[];
  /** Highest position among `events` (null when empty). */
  maxPosition: Position | null;
}

const eventId = (e: ChangeEvent): string => `${e.position}|${keyText(e.key)}`;
const byPosition = (a: ChangeEvent, b: ChangeEvent): number => (a.position < b.position ? -1 : a.position > b.position ? 1 : 0);

/**
 * The distinct events (first delivery of each position + key wins), in position order (stable:
 * events at one position keep their order of first delivery). Linear in the batch (docs/performance-log.md,
 * "Two pieces of Node work that grew faster than their input"): a batch in strictly increasing position order (the usual live batch, every replay batch)
 * is distinct as it is, found by one comparison per event; otherwise a stable sort by position
 * puts every event's deliveries next to each other, first delivery first, and keys are compared
 * only within a run of events at one position (a duplicate, the two halves of a primary-key
 * change, or the rows of a snapshot chunk, which all share the chunk's position), through a set
 * once a run has a second event.
 */
export function distinctEvents(events: readonly ChangeEvent[]): ChangeEvent[] {
  let i = 1;
  while (i < events.length && events[i - 1]!.position < events[i]!.position) i++;
  if (i >= events.length) return events.slice();
  const sorted = events.slice().sort(byPosition);
  const out: ChangeEvent[] = [];
  let run: { position: Position; first: ChangeEvent; keys: Set<string> | null } | null = null;
  for (const e of sorted) {
    if (run === null || e.position !== run.position) {
      run = { position: e.position, first: e, keys: null };
      out.push(e);
      continue;
    }
    run.keys ??= new Set([keyText(run.first.key)]);
    const k = keyText(e.key);
    if (run.keys.has(k)) continue;
    run.keys.add(k);
    out.push(e);
  }
  return out;
}

/** The old key of a primary-key change's insert (from its before image), or null if it is not one. */
export function oldKeyOf(e: ChangeEvent, keyColumns: readonly string[]): Row | null {
  if ((e.op !== 'insert' && e.op !== 'snapshot') || e.before === null) return null;
  const old: Row = {};
  for (const k of keyColumns) {
    const v = e.before[k];
    if (v === undefined || v === null || typeof v === 'object') return null;
    old[k] = v;
  }
  return keyText(old) === keyText(e.key) ? null : old;
}

/**
 * Keys whose full stored rows the plan needs: the old keys of primary-key-change inserts with
 * missing columns, and the keys of deletes that hand columns over.
 */
export function oldKeysNeeded(events: readonly ChangeEvent[], keyColumns: readonly string[]): Row[] {
  const out = new Map<string, Row>();
  for (const e of events) {
    if (e.op === 'delete' && (e.handover?.length ?? 0) > 0) out.set(keyText(e.key), e.key);
    if (e.missing.length === 0) continue;
    const old = oldKeyOf(e, keyColumns);
    if (old) out.set(keyText(old), old);
  }
  return [...out.values()];
}

/** A delete that hands columns over to its primary-key change's insert. */
function isHanding(e: ChangeEvent): boolean {
  return e.op === 'delete' && (e.handover?.length ?? 0) > 0;
}

/** Whether applying these events involves handovers (a delete that hands columns over, or an insert that lacks columns). */
export function needsHandover(events: readonly ChangeEvent[]): boolean {
  return events.some((e) => (e.op === 'delete' && (e.handover?.length ?? 0) > 0) || ((e.op === 'insert' || e.op === 'snapshot') && e.missing.length > 0));
}

interface FoldState {
  live: boolean;
  deleted: boolean;
  deletedAt: string | null;
  full: boolean;
  values: Row;
}

function step(s: FoldState, e: ChangeEvent, fill: (e: ChangeEvent) => Row): void {
  switch (e.op) {
    case 'insert':
    case 'snapshot':
      s.values = { ...fill(e), ...(e.after ?? {}) };
      s.full = true;
      s.live = true;
      s.deleted = false;
      s.deletedAt = null;
      return;
    case 'update':
      if (s.live) {
        s.values = { ...s.values, ...(e.after ?? {}) };
      } else {
        s.values = { ...(e.after ?? {}) };
        s.full = true;
        s.live = true;
        s.deleted = false;
        s.deletedAt = null;
      }
      return;
    case 'delete':
      s.live = false;
      s.deleted = true;
      s.deletedAt = e.commitTs;
      return;
    case 'truncate':
      throw new RangeError('truncate events are not folded per key');
  }
}

export interface PlanInput {
  events: readonly ChangeEvent[];
  keyColumns: readonly string[];
  /** Stored state per key text; a key not in the map has nothing stored. */
  stored: ReadonlyMap<string, StoredState>;
  /** Full stored rows per key text for the keys `oldKeysNeeded` named (absent = no row). */
  storedRows?: ReadonlyMap<string, StoredRow>;
  /** The highest truncate position the sink holds for the table (null: never truncated). */
  truncatedAt?: Position | null;
  /** Handed-over values the sink keeps, by `handoverId(old key, position)` (see `Donor`). */
  donors?: ReadonlyMap<string, Row>;
  /** Events the sink holds (not yet applied) because an insert before them lacked columns; planned again with the batch. */
  held?: readonly ChangeEvent[];
}

/**
 * Values of the old key of a primary-key change just before the change, for the columns its
 * insert did not deliver: kept by the sink until that insert (on another shard) takes them.
 */
export interface Donor {
  /** The old key. */
  key: Row;
  position: Position;
  values: Row;
}

/** The id of a handover: old key + position of the primary-key change. */
export function handoverId(oldKey: Row, position: Position): string {
  return `${keyText(oldKey)}\u0000${position}`;
}

/** Plans one table's batch. See the module comment for the rules. */
export function planTable(input: PlanInput): TablePlan {
  const all = distinctEvents([...input.events, ...(input.held ?? [])]);
  const events = all.filter((e) => e.op !== 'truncate');
  const truncates = all.filter((e) => e.op === 'truncate');
  const storedTruncate = input.truncatedAt ?? null;
  const newest = truncates.length > 0 ? truncates[truncates.length - 1]! : null;
  const truncate = newest && (storedTruncate === null || newest.position > storedTruncate) ? newest : null;
  /** The table's truncate position after this batch (null: none). */
  const floor: Position | null = truncate ? truncate.position : storedTruncate;
  // A stored row below the truncate position is gone (tombstoned or removed by the truncate).
  const storedFor = (k: string): StoredState | undefined => {
    const s = input.stored.get(k);
    if (floor === null) return s;
    if (!s || s.position < floor) return { position: floor, deleted: true };
    return s;
  };
  const storedRows = new Map<string, StoredRow>();
  for (const [k, r] of input.storedRows ?? new Map<string, StoredRow>()) if (floor === null || r.position > floor) storedRows.set(k, r);
  const donorsIn = new Map<string, Row>();
  for (const [id, v] of input.donors ?? new Map<string, Row>()) if (floor === null || id.slice(-24) > floor) donorsIn.set(id, v);
  const perKey = new Map<string, ChangeEvent[]>();
  for (const e of events) {
    const k = keyText(e.key);
    const list = perKey.get(k);
    if (list) list.push(e);
    else perKey.set(k, [e]);
  }
  /** Handovers this plan used (from the sink's donors or from the old key's events in this batch). */
  const consumed = new Set<string>();
  const completed: Donor[] = [];

  /**
   * The old key's values just before position `p`, and which columns are known for certain:
   * from the stored row and the old key's events of this batch below `p` (an insert among them
   * that lacked columns contributes what `resolve` recovered for it).
   */
  const valuesBefore = (oldKey: string, p: Position): { values: Row; known: (c: string) => boolean } | null => {
    const row = storedRows.get(oldKey);
    const stored = storedFor(oldKey);
    if (row && row.position === p && row.deleted) return { values: row.values, known: () => true };
    const storedPos = [row?.position, stored?.position].reduce<Position | null>((m, x) => (x !== undefined && (m === null || x > m) ? x : m), null);
    if (storedPos !== null && storedPos >= p) return null;
    const list = perKey.get(oldKey) ?? [];
    if (!list.some((x) => x.position === p && x.op === 'delete')) return null;
    // Fold the old key up to (not including) p, tracking which columns are certain.
    let live = false;
    let values: Row = {};
    let knownAll = false;
    const known = new Set<string>();
    const unknown = new Set<string>();
    if (row && !row.deleted) {
      live = true;
      values = { ...row.values };
      knownAll = true;
    }
    for (const x of list) {
      if (x.position >= p) break;
      if (storedPos !== null && x.position <= storedPos) continue;
      const after = x.after ?? {};
      if (x.op === 'insert' || x.op === 'snapshot') {
        const got = x.missing.length > 0 ? resolve(x) : {};
        live = true;
        values = { ...(got ?? {}), ...after };
        knownAll = true;
        unknown.clear();
        if (got === null) for (const c of x.missing) unknown.add(c);
      } else if (x.op === 'update') {
        if (!live) {
          live = true;
          values = {};
          knownAll = false;
          known.clear();
        }
        values = { ...values, ...after };
        for (const c of Object.keys(after)) {
          known.add(c);
          unknown.delete(c);
        }
      } else if (x.op === 'delete') {
        live = false;
      }
    }
    if (!live) return null;
    return { values, known: (c) => (knownAll ? !unknown.has(c) : known.has(c)) };
  };

  /**
   * The undelivered columns of an insert, recovered: from a donor the sink keeps, or from its
   * old key's row just before it; null when they are not known yet (the insert is then held).
   */
  const resolved = new Map<string, Row | null>();
  const resolving = new Set<string>();
  function resolve(e: ChangeEvent): Row | null {
    const id = eventId(e);
    if (resolved.has(id)) return resolved.get(id)!;
    if (resolving.has(id)) return null;
    resolving.add(id);
    let out: Row | null = null;
    const old = oldKeyOf(e, input.keyColumns);
    if (old) {
      const hid = handoverId(old, e.position);
      const donor = donorsIn.get(hid);
      if (donor && e.missing.every((c) => c in donor)) {
        out = Object.fromEntries(e.missing.map((c) => [c, donor[c]!]));
        consumed.add(hid);
      } else {
        const before = valuesBefore(keyText(old), e.position);
        if (before && e.missing.every((c) => before.known(c))) {
          out = Object.fromEntries(e.missing.map((c) => [c, before.values[c] ?? null]));
          consumed.add(hid);
          completed.push({ key: old, position: e.position, values: out });
        }
      }
    }
    resolving.delete(id);
    resolved.set(id, out);
    return out;
  }

  // A held chain that its key's stored row has overtaken (a later full image of the key took the
  // append path; docs/primary-key-changes.md, "Chains overtaken by a full image") is never
  // written, but a delete in it that hands columns over still owes the new key's insert its
  // values. Fold the chain for them (they become donors, as if the sink had kept them); a chain
  // whose insert cannot be completed yet stays held up to that delete until it can.
  const heldIds = new Set((input.held ?? []).map(eventId));
  const stillHeld: ChangeEvent[] = [];
  for (const [k, list] of perKey) {
    const stored = storedFor(k);
    if (!stored || heldIds.size === 0) continue;
    // A truncate ends what was held below it: the rows are gone, nothing is owed (the donors below it are dropped above too).
    const chain = list.filter((e) => e.position <= stored.position && heldIds.has(eventId(e)) && (floor === null || e.position > floor));
    let end = -1;
    chain.forEach((e, i) => {
      if (isHanding(e)) end = i;
    });
    if (end < 0) continue;
    const owed = chain.slice(0, end + 1);
    const s: FoldState = { live: false, deleted: false, deletedAt: null, full: false, values: {} };
    let whole = false; // a full image was folded: the values are certain
    for (const e of owed) {
      if ((e.op === 'insert' || e.op === 'snapshot') && e.missing.length > 0 && resolve(e) === null) {
        stillHeld.push(...owed);
        break;
      }
      if (isHanding(e) && whole && s.live) {
        const hid = handoverId(e.key, e.position);
        if (!donorsIn.has(hid)) donorsIn.set(hid, Object.fromEntries(e.handover!.map((c) => [c, s.values[c] ?? null])));
      }
      step(s, e, (x) => (x.missing.length > 0 ? (resolve(x) ?? {}) : {}));
      if (e.op === 'insert' || e.op === 'snapshot') whole = true;
    }
  }

  const writes: MirrorWrite[] = [];
  const fresh: ChangeEvent[] = [];
  const held: ChangeEvent[] = [];
  const handing: ChangeEvent[] = [];
  for (const [k, list] of perKey) {
    const stored = storedFor(k);
    const todo = stored ? list.filter((e) => e.position > stored.position) : list;
    if (todo.length === 0) continue;
    const s: FoldState = { live: stored ? !stored.deleted : false, deleted: stored?.deleted ?? false, deletedAt: null, full: false, values: {} };
    let last: ChangeEvent | null = null;
    for (const e of todo) {
      if (held.length > 0 && keyText(held[held.length - 1]!.key) === k) {
        held.push(e); // the key is held from an earlier event: everything after it waits too
        continue;
      }
      if ((e.op === 'insert' || e.op === 'snapshot') && e.missing.length > 0 && resolve(e) === null) {
        held.push(e);
        continue;
      }
      step(s, e, (x) => (x.missing.length > 0 ? (resolve(x) ?? {}) : {}));
      fresh.push(e);
      last = e;
      if (e.op === 'delete' && (e.handover?.length ?? 0) > 0) handing.push(e);
    }
    if (last)
      writes.push({
        key: last.key,
        keyText: k,
        position: last.position,
        deleted: s.deleted,
        deletedAt: s.deleted ? s.deletedAt : null,
        full: s.full,
        values: s.values,
      });
  }
  // Handovers to keep: the sink's that nothing used, and those of this batch's applied deletes whose insert was not planned here.
  const donors: Donor[] = [];
  for (const [hid, values] of donorsIn) {
    if (consumed.has(hid)) continue;
    const sep = hid.lastIndexOf('\u0000');
    donors.push({ key: Object.fromEntries(JSON.parse(hid.slice(0, sep)) as [string, Row[string]][]), position: hid.slice(sep + 1), values });
  }
  for (const d of handing) {
    const hid = handoverId(d.key, d.position);
    if (consumed.has(hid) || donorsIn.has(hid)) continue;
    const before = valuesBefore(keyText(d.key), d.position);
    if (!before || !d.handover!.every((c) => before.known(c))) continue; // the old row is not known: its insert stays held (docs/primary-key-changes.md)
    donors.push({ key: d.key, position: d.position, values: Object.fromEntries(d.handover!.map((c) => [c, before.values[c] ?? null])) });
  }
  held.push(...stillHeld);
  for (const t of truncates) if (storedTruncate === null || t.position > storedTruncate) fresh.push(t);
  fresh.sort(byPosition);
  return { events, truncates, truncate, writes, fresh, held, donors, completed, maxPosition: all.length > 0 ? all[all.length - 1]!.position : null };
}

/** Column-set signature of a write: `*` for full writes, else its sorted column names. */
export function setSignature(w: MirrorWrite): string {
  return w.full ? '*' : Object.keys(w.values).sort().join(',');
}

/**
 * Compares Kinesis sequence numbers (decimal strings of up to 128 bits): by length, then
 * lexicographically, which is numeric order for numbers without leading zeros. An event of an
 * aggregate is named `<sequence number>.<sub-sequence number>` (contracts/change-log-record.ts):
 * ordered by sequence number, then sub-sequence number; the plain sequence number before its sub-records.
 */
export function compareSequenceNumbers(a: string, b: string): number {
  const da = a.indexOf('.');
  const db = b.indexOf('.');
  if (da < 0 && db < 0) {
    if (a.length !== b.length) return a.length - b.length;
    return a < b ? -1 : a > b ? 1 : 0;
  }
  const sa = da < 0 ? a : a.slice(0, da);
  const sb = db < 0 ? b : b.slice(0, db);
  if (sa.length !== sb.length) return sa.length - sb.length;
  if (sa !== sb) return sa < sb ? -1 : 1;
  return (da < 0 ? -1 : Number(a.slice(da + 1))) - (db < 0 ? -1 : Number(b.slice(db + 1)));
}

/**
 * The records to report as failed: every record at or after the first failed one in sequence
 * order. Kinesis retries from the lowest reported sequence number anyway; reporting the rest too
 * keeps the response honest about what will be delivered again and keeps per-key order.
 */
export function failuresFrom(sequenceNumbers: readonly string[], failed: ReadonlySet<string>): string[] {
  let first: string | null = null;
  for (const s of failed) if (first === null || compareSequenceNumbers(s, first) < 0) first = s;
  if (first === null) return [];
  return sequenceNumbers.filter((s) => compareSequenceNumbers(s, first) >= 0);
}

/** Converts a JSON value to a text parameter (objects as JSON text; values are never spliced into SQL). */
export function toParam(v: Row[string] | undefined): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v === 'string') return v;
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  return JSON.stringify(v);
}

/**
 * The plan an append reports (a warehouse that appends the batch to its changelog and lets the
 * view and the merge apply the position guard): every distinct event is in the delta, and an
 * append carries no handover (its events lack no column).
 */
export function appendedPlan(events: ChangeEvent[]): TablePlan {
  return {
    events,
    truncates: [],
    truncate: null,
    writes: [],
    fresh: events,
    held: [],
    donors: [],
    completed: [],
    maxPosition: events.reduce<string | null>((m, e) => (m === null || e.position > m ? e.position : m), null),
  };
}
