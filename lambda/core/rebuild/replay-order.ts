/**
 * The order of a streamed replay (docs/rebuild.md, "What it does", step 3): pure, no I/O. The
 * replay reader parses the archive's objects one shard at a time (each shard's objects in
 * sequence order) and hands them here; this module hands back the table's events in exactly the
 * order of the sorted replay (`mergeReplay`: position order, each (position, key) once, the first
 * delivery in listing order kept) as soon as no object still to be read can hold an earlier one.
 *
 * The bound: a shard's events are taken to come in position order (the change log keeps a shard's
 * records in the order they were written, and the capture writes in position order), so nothing
 * of a shard still to be read (its next objects, then its part in the stream) lies below the
 * highest position of the table's events its objects held so far; events below the lowest such
 * position over every shard are final. A shard none of whose objects held an event of the table
 * yet (or one only in the stream) holds everything back until the end. That is an assumption, and
 * it is checked, never trusted: an event that comes below a position already handed
 * over (not a duplicate of an event handed over) stops the stream with `ReplayOrderError`, and the
 * rebuild falls back to the sorted replay.
 */
import { CdcError } from '../shared/errors.ts';
import { keyText, type ChangeEvent, type Row } from '../shared/event.ts';
import type { Position } from '../shared/position.ts';
import { distinctEvents } from '../sink/apply-plan.ts';
import { inRange, type ReplayRange } from './replay.ts';

/** An event came below one already handed over: the streamed order cannot hold (the rebuild replays sorted instead). */
export class ReplayOrderError extends CdcError {
  constructor(
    readonly shard: string,
    readonly position: Position,
    readonly emitted: Position,
  ) {
    super(
      'REPLAY_OUT_OF_ORDER',
      `an event at ${position} in shard ${shard} comes after events up to ${emitted} were handed over: the shard's records are not in position order`,
    );
  }
}

/** An event with where it came from: the object's place in the listing (the stream's after every object) and its line. */
interface Placed {
  e: ChangeEvent;
  object: number;
  line: number;
}

const byPlace = (a: Placed, b: Placed): number => (a.e.position < b.e.position ? -1 : a.e.position > b.e.position ? 1 : a.object - b.object || a.line - b.line);

/** Object index given to the stream's events: after every archive object, as in `mergeReplay`. */
const STREAM = Number.MAX_SAFE_INTEGER;

export class ReplayOrder {
  /** Per shard: the highest position of the table's events parsed so far (null: none yet). */
  private readonly last = new Map<string, Position | null>();
  /** Per shard: objects still to be read. */
  private readonly left = new Map<string, number>();
  private pending: Placed[] = [];
  /** The positions and keys of everything handed over, in order (a late duplicate is looked up here; the events themselves are not held). */
  private readonly positions: Position[] = [];
  private readonly keys: Row[] = [];

  /**
   * `objects`: the shard of every object the replay will read (objects without events of the
   * table included); `streamShards`: the shards the stream part will be read from.
   */
  constructor(
    private readonly range: ReplayRange,
    objects: Iterable<string>,
    streamShards: Iterable<string>,
  ) {
    for (const shard of [...objects, ...streamShards]) this.last.set(shard, null);
    for (const shard of objects) this.left.set(shard, (this.left.get(shard) ?? 0) + 1);
  }

  /** Which shard's next object to read: the one with objects left whose events reach least far (one with none yet first). */
  nextShard(): string | null {
    let best: string | null = null;
    let at: Position | null = null;
    for (const [shard, n] of this.left) {
      if (n === 0) continue;
      const p = this.last.get(shard) ?? null;
      if (best === null || (at !== null && (p === null || p < at))) [best, at] = [shard, p];
      if (p === null) break;
    }
    return best;
  }

  /** One object's events of the table (line order; `object`: its place in the listing), read from `shard`. */
  add(shard: string, object: number, events: readonly ChangeEvent[]): void {
    const n = this.left.get(shard);
    if (n === undefined || n === 0) throw new Error(`replay order: no object of shard ${shard} is left to read`);
    this.left.set(shard, n - 1);
    let last = this.last.get(shard) ?? null;
    for (const [line, e] of events.entries()) {
      // Outside the range too, a shard's event bounds what its records still to come hold.
      if (last === null || e.position > last) last = e.position;
      if (inRange(e, this.range) && !this.late(shard, e)) this.pending.push({ e, object, line });
    }
    this.last.set(shard, last);
  }

  /** The events that are final now, in order (empty when none is). */
  take(): ChangeEvent[] {
    let bound: Position | null = null;
    for (const p of this.last.values()) {
      if (p === null) return [];
      if (bound === null || p < bound) bound = p;
    }
    if (bound === null) return [];
    const b = bound;
    const ready = this.pending.filter((x) => x.e.position < b);
    if (ready.length === 0) return [];
    this.pending = this.pending.filter((x) => x.e.position >= b);
    return this.hand(ready);
  }

  /** Once every object is read: what is left with the stream's events (`tail`, in the order read) after it. */
  finish(tail: readonly ChangeEvent[]): ChangeEvent[] {
    for (const [shard, n] of this.left) if (n > 0) throw new Error(`replay order: ${n} objects of shard ${shard} were not read`);
    const rest = this.pending;
    this.pending = [];
    for (const [line, e] of tail.entries()) if (inRange(e, this.range) && !this.late('stream', e)) rest.push({ e, object: STREAM, line });
    return this.hand(rest);
  }

  private hand(ready: Placed[]): ChangeEvent[] {
    ready.sort(byPlace);
    const out = distinctEvents(ready.map((x) => x.e));
    for (const e of out) {
      this.positions.push(e.position);
      this.keys.push(e.key);
    }
    return out;
  }

  /** True for an event at or below what was handed over that repeats an event handed over (dropped); throws for any other. */
  private late(shard: string, e: ChangeEvent): boolean {
    const n = this.positions.length;
    const top = n > 0 ? this.positions[n - 1]! : null;
    if (top === null || e.position > top) return false;
    const k = keyText(e.key);
    for (let i = firstAt(this.positions, e.position); i < n && this.positions[i] === e.position; i++) if (keyText(this.keys[i]!) === k) return true;
    throw new ReplayOrderError(shard, e.position, top);
  }
}

/** The index of the first event at or above `p` in a position-ordered list. */
function firstAt(list: readonly Position[], p: Position): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (list[mid]! < p) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
