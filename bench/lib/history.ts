/**
 * The change history the apply benchmark replays, generated from a seed so every target (the
 * warehouse applier, PostgreSQL's logical replication, COPY) sees exactly the same rows.
 *
 * The table is the one of the performance anchors: `items (id bigint primary key, customer_id
 * bigint, status text, amount numeric(12,2), note text, updated_at timestamptz)`, about 116 bytes
 * per row as COPY text. The key space has `keys` ids; `initial` of them exist before the history
 * starts (loaded untimed into every target). The history is `events` row changes: each is an
 * update (of a live key, full new row, as test_decoding delivers it), an insert (of a key that is
 * not live) or a delete (of a live key), drawn with the given shares, grouped into transactions of
 * `txSize` changes. Positions are commit LSN + index, as the capture assigns them.
 */
import { ENVELOPE_VERSION, type ChangeEvent, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import type { ColumnDef, ControlPlane, SchemaVersion, TableRecord } from '../../lambda/core/shared/control-plane.ts';
import { seededRandom } from '../../local/seeded-random.ts';

/** The demo's seeded PRNG (mulberry32), so a history can be regenerated bit for bit. */
export { seededRandom };

export const BENCH_SOURCE = 'bench';
export const BENCH_TABLE = 'public.items';

/** The source table's columns, as the normalizer would register them. */
export const ITEM_COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'bigint', nullable: false },
  { name: 'customer_id', type: 'bigint', nullable: true },
  { name: 'status', type: 'text', nullable: true },
  { name: 'amount', type: 'numeric(12,2)', nullable: true },
  { name: 'note', type: 'text', nullable: true },
  { name: 'updated_at', type: 'timestamp with time zone', nullable: true },
];

/** DDL of the table on a plain PostgreSQL (source, subscriber, COPY target). */
export function itemsTableSql(name: string): string {
  return `CREATE TABLE ${name} (id bigint PRIMARY KEY, customer_id bigint, status text, amount numeric(12,2), note text, updated_at timestamptz)`;
}

/** One row of the table, values as the capture delivers them (numbers for integers, text otherwise). */
export interface Item {
  id: number;
  customer_id: number;
  status: string;
  amount: string;
  note: string;
  updated_at: string;
}

export type HistoryOp = 'insert' | 'update' | 'delete';

/** One change of the history. */
export interface HistoryChange {
  seq: number;
  tx: number;
  index: number;
  op: HistoryOp;
  id: number;
  /** The new row (insert, update); null for delete. */
  row: Item | null;
}

export interface HistoryOptions {
  events: number;
  keys: number;
  initial: number;
  txSize: number;
  /** Shares of updates and inserts; deletes get the rest. */
  updateShare: number;
  insertShare: number;
  seed: number;
}

export const DEFAULT_HISTORY: HistoryOptions = {
  events: 200_000,
  keys: 100_000,
  initial: 60_000,
  txSize: 100,
  updateShare: 0.7,
  insertShare: 0.2,
  seed: 20261129,
};

export interface History {
  options: HistoryOptions;
  /** Rows that exist before the history (ids 1..initial). */
  initialRows: Item[];
  changes: HistoryChange[];
  /** Rows that exist after the history, by id order. */
  finalRows: Item[];
  counts: Record<HistoryOp, number>;
  /** Distinct keys the history touches. */
  keysTouched: number;
}

const STATUSES = ['pending', 'paid', 'shipped', 'delivered', 'cancelled'];
const BASE_TIME = Date.parse('2026-01-01T00:00:00Z');

function hex(rand: () => number, n: number): string {
  let s = '';
  while (s.length < n)
    s += Math.floor(rand() * 0x100000000)
      .toString(16)
      .padStart(8, '0');
  return s.slice(0, n);
}

function makeRow(rand: () => number, id: number, t: number): Item {
  return {
    id,
    customer_id: 1 + Math.floor(rand() * 100_000),
    status: STATUSES[Math.floor(rand() * STATUSES.length)]!,
    amount: (Math.floor(rand() * 10_000_000) / 100).toFixed(2),
    note: `${hex(rand, 32)}-${hex(rand, 31)}`,
    updated_at: new Date(BASE_TIME + t * 1000).toISOString(),
  };
}

/** Generates the history (deterministic for equal options). */
export function generateHistory(options: HistoryOptions = DEFAULT_HISTORY): History {
  const o = options;
  if (o.initial > o.keys) throw new RangeError(`initial (${o.initial}) exceeds the key space (${o.keys})`);
  const rand = seededRandom(o.seed);
  const rows = new Map<number, Item>();
  // live ids and dead ids as arrays with swap-remove, plus each id's slot in its array.
  const live: number[] = [];
  const dead: number[] = [];
  const slot = new Map<number, number>();
  const initialRows: Item[] = [];
  for (let id = 1; id <= o.keys; id++) {
    if (id <= o.initial) {
      const r = makeRow(rand, id, id);
      rows.set(id, r);
      initialRows.push(r);
      slot.set(id, live.length);
      live.push(id);
    } else {
      slot.set(id, dead.length);
      dead.push(id);
    }
  }
  const move = (id: number, from: number[], to: number[]): void => {
    const i = slot.get(id)!;
    const last = from.pop()!;
    if (last !== id) {
      from[i] = last;
      slot.set(last, i);
    }
    slot.set(id, to.length);
    to.push(id);
  };
  const changes: HistoryChange[] = [];
  const counts: Record<HistoryOp, number> = { insert: 0, update: 0, delete: 0 };
  const touched = new Set<number>();
  for (let seq = 0; seq < o.events; seq++) {
    const r = rand();
    let op: HistoryOp = r < o.updateShare ? 'update' : r < o.updateShare + o.insertShare ? 'insert' : 'delete';
    if (op === 'insert' && dead.length === 0) op = 'update';
    if (op !== 'insert' && live.length === 0) op = 'insert';
    const t = o.keys + seq;
    let id: number;
    let row: Item | null = null;
    if (op === 'insert') {
      id = dead[Math.floor(rand() * dead.length)]!;
      row = makeRow(rand, id, t);
      rows.set(id, row);
      move(id, dead, live);
    } else {
      id = live[Math.floor(rand() * live.length)]!;
      if (op === 'update') {
        row = makeRow(rand, id, t);
        rows.set(id, row);
      } else {
        rows.delete(id);
        move(id, live, dead);
      }
    }
    counts[op]++;
    touched.add(id);
    changes.push({ seq, tx: Math.floor(seq / o.txSize), index: seq % o.txSize, op, id, row });
  }
  const finalRows = [...rows.values()].sort((a, b) => a.id - b.id);
  return { options: o, initialRows, changes, finalRows, counts, keysTouched: touched.size };
}

/** The table's registry entries (what the normalizer would have registered). */
export function registryEntries(now = new Date().toISOString()): { table: TableRecord; schema: SchemaVersion } {
  return {
    table: {
      source: BENCH_SOURCE,
      table: BENCH_TABLE,
      state: 'active',
      currentVersion: 1,
      deleteMode: 'soft',
      preImage: 'key',
      stateReason: null,
      updatedAt: now,
    },
    schema: {
      source: BENCH_SOURCE,
      table: BENCH_TABLE,
      version: 1,
      columns: ITEM_COLUMNS,
      key: ['id'],
      effectivePosition: makePosition(1n, 0),
      registeredAt: now,
    },
  };
}

/** Registers the bench table (`registryEntries`) in a control plane, with its audit entry, as every benchmark that applies it does. */
export async function registerBenchTable(cp: Pick<ControlPlane, 'registerTable'>, now?: string): Promise<void> {
  const { table, schema } = registryEntries(now);
  await cp.registerTable(table, schema, {
    at: table.updatedAt,
    actor: 'bench',
    action: 'register-table',
    source: BENCH_SOURCE,
    table: BENCH_TABLE,
    outcome: 'done',
    detail: {},
  });
}

const rowOf = (r: Item): Row => ({ id: r.id, customer_id: r.customer_id, status: r.status, amount: r.amount, note: r.note, updated_at: r.updated_at });

/** Commit LSN of history transaction `tx` (snapshot rows come before every one). */
const commitLsn = (tx: number): bigint => 0x1_0000_0000n + BigInt(tx) * 0x10000n;

/** The initial rows as `snapshot` events (positions below the history's). */
export function snapshotEvents(h: History): ChangeEvent[] {
  return h.initialRows.map((r, i) => ({
    v: ENVELOPE_VERSION,
    source: BENCH_SOURCE,
    table: BENCH_TABLE,
    op: 'snapshot',
    key: { id: r.id },
    after: rowOf(r),
    before: null,
    missing: [],
    position: makePosition(0x1000n, i),
    commitTs: new Date(BASE_TIME).toISOString(),
    txId: null,
    schemaVersion: 1,
    capture: 'snapshot',
    synthetic: false,
  }));
}

/** The history as change events, as the normalizer publishes them. */
export function historyEvents(h: History): ChangeEvent[] {
  return h.changes.map((c) => ({
    v: ENVELOPE_VERSION,
    source: BENCH_SOURCE,
    table: BENCH_TABLE,
    op: c.op,
    key: { id: c.id },
    after: c.row ? rowOf(c.row) : null,
    before: c.op === 'delete' ? { id: c.id } : null,
    missing: [],
    position: makePosition(commitLsn(c.tx), c.index),
    commitTs: new Date(BASE_TIME + 86_400_000 + c.tx * 10).toISOString(),
    txId: String(1000 + c.tx),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  }));
}

/** COPY text of a row (tab separated; the values need no escaping). */
export function copyLine(r: Item): string {
  return `${r.id}\t${r.customer_id}\t${r.status}\t${r.amount}\t${r.note}\t${r.updated_at}\n`;
}

/** COPY text of the history for a replay table `(seq, op, id, customer_id, status, amount, note, updated_at)`. */
export function historyCopyLine(c: HistoryChange): string {
  const r = c.row;
  const op = c.op === 'insert' ? 'i' : c.op === 'update' ? 'u' : 'd';
  return r
    ? `${c.seq}\t${op}\t${c.id}\t${r.customer_id}\t${r.status}\t${r.amount}\t${r.note}\t${r.updated_at}\n`
    : `${c.seq}\t${op}\t${c.id}\t\\N\t\\N\t\\N\t\\N\t\\N\n`;
}

/**
 * A fingerprint of a set of rows that every target can compute in SQL over its own table or
 * view: md5 over the rows' text in id order (`fingerprintSql`). Computed here from the model.
 */
export const fingerprintSql = (relation: string): string =>
  `SELECT count(*)::int AS n, md5(coalesce(string_agg(concat_ws('|', id, customer_id, status, amount::numeric(12,2), note, to_char(updated_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.MS"Z"')), E'\\n' ORDER BY id), '')) AS md5 FROM ${relation}`;
