/**
 * Random change histories for property tests of the sink appliers.
 *
 * A history is generated as abstract actions on a few keys of one or two source tables, then
 * SIMULATED like a real source would run them (so the final state is known): an action that
 * does not fit the current state is turned into one that does (an insert of an existing key
 * becomes an update, and so on). The simulation emits the change events a capture would publish:
 * one position per row change (commit LSN + index in the transaction), a primary-key change as a
 * `delete` of the old key and an `insert` of the new key at the same position, and an update that
 * leaves the TOAST-able column `b` unchanged without it (absent from `after`, listed in
 * `missing`), when the history allows absent columns. A primary-key change that leaves `b`
 * unchanged then does the same on its insert half (the value exists only under the old key, as
 * with test_decoding under the default replica identity), and its delete half names `b` in
 * `handover` (as the decoders mark it). A `truncate` empties a table (one event, empty key).
 *
 * Delivery then models the shards of a Kinesis stream read by event source mappings: first
 * deliveries keep per-key (partition key) order but interleave keys arbitrarily, so the two
 * halves of a primary-key change (different partition keys, so different shards) and a
 * truncate (its own partition key) arrive in either order relative to each other and to the
 * other keys' events (for histories with full images
 * only, the order of first deliveries is arbitrary, per key too); duplicates and replays of
 * already delivered events appear at any later point; batch boundaries are random; and a batch
 * can be delivered again right after it was applied (a crash between sink commit and ack).
 * All random choices come from one array of numbers, so fast-check shrinks a failure towards
 * in-order, one-event batches.
 */
import fc from 'fast-check';
import { ENVELOPE_VERSION, keyText, type ChangeEvent, type JsonValue, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import type { ColumnDef } from '../../lambda/core/shared/control-plane.ts';

/** A source table of the model. */
export interface ModelTable {
  table: string;
  key: string[];
  columns: ColumnDef[];
  /** Key values by key slot (0–3). */
  keys: Row[];
}

export const MODEL_TABLES: readonly ModelTable[] = [
  {
    table: 'public.items',
    key: ['id'],
    columns: [
      { name: 'id', type: 'integer', nullable: false },
      { name: 'a', type: 'integer', nullable: true },
      { name: 'b', type: 'text', nullable: true },
      { name: 'c', type: 'character varying(20)', nullable: true },
    ],
    keys: [{ id: 1 }, { id: 2 }, { id: 3 }, { id: 4 }],
  },
  {
    table: 'public.pairs',
    key: ['k1', 'k2'],
    columns: [
      { name: 'k1', type: 'integer', nullable: false },
      { name: 'k2', type: 'text', nullable: false },
      { name: 'a', type: 'bigint', nullable: true },
      { name: 'b', type: 'text', nullable: true },
    ],
    keys: [
      { k1: 1, k2: 'x' },
      { k1: 1, k2: 'y' },
      { k1: 2, k2: 'x' },
      { k1: 2, k2: "o'q" },
    ],
  },
];

/** The TOAST-able column of every model table (the one an update may leave undelivered). */
export const TOAST_COLUMN = 'b';

export type Action =
  | { t: 'insert'; tbl: number; k: number; vals: JsonValue[]; omitNulls: boolean }
  | { t: 'update'; tbl: number; k: number; vals: JsonValue[]; change: boolean[]; keepB: boolean }
  | { t: 'delete'; tbl: number; k: number }
  | { t: 'pk'; tbl: number; k: number; k2: number; vals: JsonValue[]; change: boolean[]; keepB: boolean }
  | { t: 'truncate'; tbl: number };

export interface History {
  /** Use the second table too. */
  twoTables: boolean;
  /** Updates may leave column `b` undelivered (absent columns). When false, every image is full. */
  absentColumns: boolean;
  transactions: Action[][];
  /** Random choices for the delivery. */
  choices: number[];
}

const valueArb = fc.oneof(
  { weight: 1, arbitrary: fc.constant(null) },
  { weight: 3, arbitrary: fc.integer({ min: -3, max: 3 }) },
  { weight: 3, arbitrary: fc.constantFrom('x', 'y', 'zz', 'a\tb', 'é"\\') },
);
/** Values for the two data columns; integer columns get integers, text columns text. */
const textArb = valueArb.map((v) => (v === null ? null : String(v)));
const valsArb = fc.tuple(fc.option(fc.integer({ min: -5, max: 5 }), { nil: null }), textArb, textArb);
/** Key slots, biased to the first one so that one key sees many changes. */
const slot = fc.oneof({ weight: 2, arbitrary: fc.constant(0) }, { weight: 3, arbitrary: fc.integer({ min: 0, max: 3 }) });
const tblArb = fc.integer({ min: 0, max: 1 });
const changeArb = fc.tuple(fc.boolean(), fc.boolean(), fc.boolean());

export const actionArb: fc.Arbitrary<Action> = fc.oneof(
  { weight: 3, arbitrary: fc.record({ t: fc.constant('insert' as const), tbl: tblArb, k: slot, vals: valsArb, omitNulls: fc.boolean() }) },
  { weight: 5, arbitrary: fc.record({ t: fc.constant('update' as const), tbl: tblArb, k: slot, vals: valsArb, change: changeArb, keepB: fc.boolean() }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('delete' as const), tbl: tblArb, k: slot }) },
  {
    weight: 3,
    arbitrary: fc.record({
      t: fc.constant('pk' as const),
      tbl: tblArb,
      k: slot,
      k2: fc.integer({ min: 0, max: 3 }),
      vals: valsArb,
      change: changeArb,
      keepB: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('truncate' as const), tbl: tblArb }) },
);

export const historyArb: fc.Arbitrary<History> = fc.record({
  twoTables: fc.boolean(),
  absentColumns: fc.boolean(),
  transactions: fc.array(fc.array(actionArb, { minLength: 1, maxLength: 3 }), { minLength: 1, maxLength: 8 }),
  choices: fc.array(fc.nat({ max: 1_000_000 }), { minLength: 40, maxLength: 160 }),
});

/** The result of simulating a history on a source. */
export interface Simulated {
  events: ChangeEvent[];
  /** Final rows per table id, by key text (live rows only), with every column. */
  final: Map<string, Map<string, Row>>;
  /** Per table id and key text: the position of the last event of the key. */
  lastPosition: Map<string, Map<string, string>>;
  /** Per table id: the position of its last truncate (absent: never truncated). */
  truncatedAt: Map<string, string>;
  tables: ModelTable[];
}

const dataColumns = (t: ModelTable): string[] => t.columns.map((c) => c.name).filter((c) => !t.key.includes(c));

/** Runs the history on a simulated source and returns the events it publishes, in source order. */
export interface SimulateOptions {
  /**
   * Whether a primary-key change may leave `b` undelivered on its insert half (the sink must
   * carry it over from the old key, docs/primary-key-changes.md). @default true
   */
  keyChangeHandover?: boolean;
  /** Whether `truncate` actions are simulated (when false they are skipped). @default true */
  truncates?: boolean;
}

export function simulate(h: History, sourceId: string, startLsn = 0x1_0000_0000n, options: SimulateOptions = {}): Simulated {
  const tables = h.twoTables ? [...MODEL_TABLES] : [MODEL_TABLES[0]!];
  const state = new Map<string, Map<string, Row>>(tables.map((t) => [t.table, new Map()]));
  const lastPosition = new Map<string, Map<string, string>>(tables.map((t) => [t.table, new Map()]));
  const truncatedAt = new Map<string, string>();
  const events: ChangeEvent[] = [];
  let lsn = startLsn;
  let xid = 1000;
  let clock = Date.parse('2026-01-01T00:00:00Z');
  for (const tx of h.transactions) {
    lsn += 0x100n;
    xid++;
    clock += 1000;
    let index = 0;
    const commitTs = new Date(clock).toISOString();
    const emit = (t: ModelTable, e: Pick<ChangeEvent, 'op' | 'key' | 'after' | 'before' | 'missing' | 'handover'>, idx: number): void => {
      const position = makePosition(lsn, idx);
      events.push({
        v: ENVELOPE_VERSION,
        source: sourceId,
        table: t.table,
        ...e,
        position,
        commitTs,
        txId: String(xid),
        schemaVersion: 1,
        capture: 'slot',
        synthetic: false,
      });
      lastPosition.get(t.table)!.set(keyText(e.key), position);
    };
    for (const a of tx) {
      const t = tables[a.tbl % tables.length]!;
      const rows = state.get(t.table)!;
      if (a.t === 'truncate') {
        if (options.truncates === false) continue;
        rows.clear();
        const position = makePosition(lsn, index++);
        events.push({
          v: ENVELOPE_VERSION,
          source: sourceId,
          table: t.table,
          op: 'truncate',
          key: {},
          after: null,
          before: null,
          missing: [],
          position,
          commitTs,
          txId: String(xid),
          schemaVersion: 1,
          capture: 'slot',
          synthetic: false,
        });
        truncatedAt.set(t.table, position);
        continue;
      }
      const key = t.keys[a.k]!;
      const kt = keyText(key);
      const cur = rows.get(kt);
      const data = dataColumns(t);
      const fromVals = (vals: JsonValue[]): Row => Object.fromEntries(data.map((c, i) => [c, vals[i] ?? null]));
      if (!cur && a.t !== 'delete') {
        // insert, or an update / key change of an absent key: an insert
        const row: Row = { ...key, ...fromVals(a.vals) };
        rows.set(kt, row);
        const after: Row = { ...row };
        if (a.t === 'insert' && a.omitNulls) for (const c of data) if (after[c] === null) delete after[c];
        emit(t, { op: 'insert', key, after, before: null, missing: [] }, index++);
        continue;
      }
      if (!cur) continue; // delete of an absent key
      if (a.t === 'delete') {
        rows.delete(kt);
        emit(t, { op: 'delete', key, after: null, before: { ...key }, missing: [] }, index++);
        continue;
      }
      // A key change with `keepB` leaves the TOAST column unchanged (the case that needs the old key's value).
      const change = a.t === 'insert' ? data.map(() => true) : a.t === 'pk' && a.keepB ? a.change.map((c, i) => c && data[i] !== TOAST_COLUMN) : a.change;
      const next: Row = { ...cur };
      data.forEach((c, i) => {
        if (change[i]) next[c] = a.vals[i] ?? null;
      });
      if (a.t === 'update' || a.t === 'insert') {
        rows.set(kt, next);
        const after: Row = { ...next };
        const missing: string[] = [];
        if (h.absentColumns && a.t === 'update' && a.keepB && next[TOAST_COLUMN] === cur[TOAST_COLUMN]) {
          delete after[TOAST_COLUMN];
          missing.push(TOAST_COLUMN);
        }
        emit(t, { op: 'update', key, after, before: null, missing }, index++);
        continue;
      }
      // Primary-key change k → k2 (only onto a free key; otherwise it is an update of k).
      const key2 = t.keys[a.k2]!;
      const kt2 = keyText(key2);
      if (kt2 === kt || rows.has(kt2)) {
        rows.set(kt, next);
        emit(t, { op: 'update', key, after: { ...next }, before: null, missing: [] }, index++);
        continue;
      }
      rows.delete(kt);
      const moved: Row = { ...next, ...key2 };
      rows.set(kt2, moved);
      const idx = index++;
      const after: Row = { ...moved };
      const missing: string[] = [];
      if (h.absentColumns && (options.keyChangeHandover ?? true) && !change[data.indexOf(TOAST_COLUMN)]) {
        delete after[TOAST_COLUMN];
        missing.push(TOAST_COLUMN);
      }
      emit(t, { op: 'delete', key, after: null, before: { ...key }, missing: [], ...(missing.length > 0 ? { handover: [...missing] } : {}) }, idx);
      emit(t, { op: 'insert', key: key2, after, before: { ...key }, missing }, idx);
    }
  }
  return { events, final: state, lastPosition, truncatedAt, tables };
}

/** A stream of choices with a default of 0 when exhausted (0 means "the simplest option"). */
export class Choices {
  private i = 0;
  constructor(private readonly values: readonly number[]) {}
  next(): number {
    return this.values[this.i++] ?? 0;
  }
  /** An integer in [0, n). */
  below(n: number): number {
    return n <= 1 ? 0 : this.next() % n;
  }
  /** True about once in `n` times (never when the choices are exhausted). */
  chance(n: number): boolean {
    return this.next() % n === 1;
  }
}

/** One delivery to the applier: the events of one batch, and whether it is delivered again right after (a crash before the ack). */
export interface Delivery {
  events: ChangeEvent[];
  redeliver: boolean;
}

/** Turns a history's events into batches as a Kinesis consumer with retries and replays would see them. */
export function deliveries(events: readonly ChangeEvent[], h: Pick<History, 'absentColumns' | 'choices'>): Delivery[] {
  const c = new Choices(h.choices);
  // First deliveries.
  let first: ChangeEvent[];
  if (!h.absentColumns && c.chance(2)) {
    // Full images only: any order, per key too.
    first = [...events];
    for (let i = first.length - 1; i > 0; i--) {
      const j = c.below(i + 1);
      [first[i], first[j]] = [first[j]!, first[i]!];
    }
  } else {
    // Per partition key (table + key) in source order; keys interleaved at random.
    const queues = new Map<string, ChangeEvent[]>();
    for (const e of events) {
      const k = `${e.table}|${keyText(e.key)}`;
      const q = queues.get(k);
      if (q) q.push(e);
      else queues.set(k, [e]);
    }
    const live = [...queues.values()];
    first = [];
    while (live.length > 0) {
      const i = c.below(live.length);
      const q = live[i]!;
      first.push(q.shift()!);
      if (q.length === 0) live.splice(i, 1);
    }
  }
  // Interleave duplicates and replays of anything already delivered.
  const stream: ChangeEvent[] = [];
  for (const e of first) {
    if (stream.length > 0 && c.chance(3)) {
      const from = c.below(stream.length);
      const len = 1 + c.below(Math.min(4, stream.length - from));
      stream.push(...stream.slice(from, from + len));
    }
    stream.push(e);
    if (c.chance(6)) stream.push(e);
  }
  if (stream.length > 0 && c.chance(3)) stream.push(...stream.slice(c.below(stream.length)));
  // Batches.
  const out: Delivery[] = [];
  for (let i = 0; i < stream.length;) {
    const size = 1 + c.below(6);
    out.push({ events: stream.slice(i, i + size), redeliver: c.chance(5) });
    i += size;
  }
  return out;
}

/** The model tables' columns as the schema registry would hold them (version 1). */
export function schemaColumns(t: ModelTable): ColumnDef[] {
  return t.columns.map((c) => ({ ...c }));
}
