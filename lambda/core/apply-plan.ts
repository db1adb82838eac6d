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
 *   identity), their values are taken from the old key's row when it is known for certain: the
 *   old key's delete at that position is in this batch (its state just before is the stored row
 *   plus this batch's earlier events), or the sink holds the old key as a tombstone at exactly
 *   that position (soft delete keeps the last values). Otherwise they stay NULL and are reported
 *   in `unresolved` so the applier can say so.
 * - `update`: the delivered columns merged onto the row; columns absent from `after` are left
 *   untouched (invariant 11). With no live row underneath (absent, deleted, or deleted earlier in
 *   the batch) there is nothing to merge onto, and the update becomes a full image.
 * - `delete`: a tombstone that keeps the values it had.
 *
 * A write is `full` (every data column is written, NULL where not in `values`) or a merge (only
 * the columns in `values`). The SQL runs one UPDATE per distinct column set.
 */
import { CdcError } from './errors.ts';
import type { ChangeEvent, Row } from './event.ts';
import { keyText } from './event.ts';
import type { Position } from './position.ts';

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

/** Columns of a primary-key change's insert that could not be recovered from the old key. */
export interface Unresolved {
  event: ChangeEvent;
  columns: string[];
}

export interface TablePlan {
  /** Distinct events (by position + key), in position order: what the changelog must hold. */
  events: ChangeEvent[];
  /** One write per key that has events above its stored position. */
  writes: MirrorWrite[];
  /** Events above their key's stored position: newly reflected by this apply. */
  fresh: ChangeEvent[];
  unresolved: Unresolved[];
  /** Highest position among `events` (null when empty). */
  maxPosition: Position | null;
}

const eventId = (e: ChangeEvent): string => `${e.position}|${keyText(e.key)}`;
const byPosition = (a: ChangeEvent, b: ChangeEvent): number => (a.position < b.position ? -1 : a.position > b.position ? 1 : 0);

/** The distinct events (first delivery of each position + key wins), in position order. */
export function distinctEvents(events: readonly ChangeEvent[]): ChangeEvent[] {
  const seen = new Map<string, ChangeEvent>();
  for (const e of events) if (!seen.has(eventId(e))) seen.set(eventId(e), e);
  return [...seen.values()].sort(byPosition);
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

/** Old keys whose full stored rows the plan needs: those of primary-key-change inserts with missing columns. */
export function oldKeysNeeded(events: readonly ChangeEvent[], keyColumns: readonly string[]): Row[] {
  const out = new Map<string, Row>();
  for (const e of events) {
    if (e.missing.length === 0) continue;
    const old = oldKeyOf(e, keyColumns);
    if (old) out.set(keyText(old), old);
  }
  return [...out.values()];
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
}

/** Plans one table's batch. See the module comment for the rules. */
export function planTable(input: PlanInput): TablePlan {
  const events = distinctEvents(input.events);
  const storedRows = input.storedRows ?? new Map<string, StoredRow>();
  const perKey = new Map<string, ChangeEvent[]>();
  for (const e of events) {
    const k = keyText(e.key);
    const list = perKey.get(k);
    if (list) list.push(e);
    else perKey.set(k, [e]);
  }
  const unresolved: Unresolved[] = [];

  /** The old key's values just before position `p`, and which columns are known for certain. */
  const valuesBefore = (oldKey: string, p: Position): { values: Row; known: (c: string) => boolean } | null => {
    const row = storedRows.get(oldKey);
    const stored = input.stored.get(oldKey);
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
        live = true;
        values = { ...after };
        knownAll = true;
        unknown.clear();
        for (const c of x.missing) unknown.add(c);
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

  const fill = (e: ChangeEvent): Row => {
    if (e.missing.length === 0) return {};
    const old = oldKeyOf(e, input.keyColumns);
    const before = old ? valuesBefore(keyText(old), e.position) : null;
    const out: Row = {};
    const lost: string[] = [];
    for (const c of e.missing) {
      if (before && before.known(c)) out[c] = before.values[c] ?? null;
      else lost.push(c);
    }
    if (lost.length > 0) unresolved.push({ event: e, columns: lost });
    return out;
  };

  const writes: MirrorWrite[] = [];
  const fresh: ChangeEvent[] = [];
  for (const [k, list] of perKey) {
    const stored = input.stored.get(k);
    const todo = stored ? list.filter((e) => e.position > stored.position) : list;
    if (todo.length === 0) continue;
    const s: FoldState = { live: stored ? !stored.deleted : false, deleted: stored?.deleted ?? false, deletedAt: null, full: false, values: {} };
    for (const e of todo) {
      step(s, e, fill);
      fresh.push(e);
    }
    const last = todo[todo.length - 1]!;
    writes.push({ key: last.key, keyText: k, position: last.position, deleted: s.deleted, deletedAt: s.deleted ? s.deletedAt : null, full: s.full, values: s.values });
  }
  fresh.sort(byPosition);
  return { events, writes, fresh, unresolved, maxPosition: events.length > 0 ? events[events.length - 1]!.position : null };
}

/** Column-set signature of a write: `*` for full writes, else its sorted column names. */
export function setSignature(w: MirrorWrite): string {
  return w.full ? '*' : Object.keys(w.values).sort().join(',');
}

/**
 * Compares Kinesis sequence numbers (decimal strings of up to 128 bits): by length, then
 * lexicographically, which is numeric order for numbers without leading zeros.
 */
export function compareSequenceNumbers(a: string, b: string): number {
  if (a.length !== b.length) return a.length - b.length;
  return a < b ? -1 : a > b ? 1 : 0;
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

/** An operation a sink does not apply (refused by name, never guessed). */
export class UnsupportedOperationError extends CdcError {
  constructor(
    readonly operation: string,
    readonly sink: string,
    hint: string,
  ) {
    super('UNSUPPORTED_OPERATION', `${operation} is not applied by ${sink}: ${hint}`);
  }
}
