/**
 * In-memory ports for the rebuild workflow's tests (lambda/core/rebuild/rebuild-ports.ts): a
 * warehouse of mirrors (key → row and position) with the live apply's upsert/delete rule, the
 * rebuild objects over it (shadow, retired, swap by renaming), and a history split between an
 * archive part and a stream part. These are doubles of COLLABORATORS; the PostgreSQL ports are
 * tested with the real rebuild (test/local/rebuild.test.ts, test/handlers/rebuild-worker.test.ts).
 */
import { ENVELOPE_VERSION, type ChangeEvent } from '../../../lambda/core/shared/event.ts';
import { makePosition, type Position } from '../../../lambda/core/shared/position.ts';
import type { RebuildReplay, RebuildTarget, RebuildWarehouse } from '../../../lambda/core/rebuild/rebuild-ports.ts';
import { retiredTable, shadowTable, type DiffResult, type DiffRow } from '../../../lambda/core/rebuild/rebuild.ts';
import { inRange, type ReplayRange, type ReplayStats } from '../../../lambda/core/rebuild/replay.ts';
import { ReplayOrderError } from '../../../lambda/core/rebuild/replay-order.ts';
import type { TableBatch } from '../../../lambda/core/warehouse/warehouse-port.ts';
import type { WarehouseTable } from '../../../lambda/core/warehouse/warehouse-sql.ts';
import { MemoryControlPlane } from '../../helpers/memory-control-plane.ts';
import { rng as seededRandom } from '../../helpers/rng.ts';

export const SOURCE = 'shop';
export const TABLE = 'public.items';
export const SINK = 'wh';

type Row = { position: Position; value: string };
/** Mirrors by name: `key → row`. */
export type Mirrors = Map<string, Map<string, Row>>;

export function event(lsn: number, id: number, value: string | null): ChangeEvent {
  return {
    v: ENVELOPE_VERSION,
    source: SOURCE,
    table: TABLE,
    op: value === null ? 'delete' : 'update',
    key: { id },
    after: value === null ? null : { id, v: value },
    before: null,
    missing: [],
    position: makePosition(BigInt(lsn), 0),
    commitTs: '2026-01-01T00:00:00.000Z',
    txId: String(lsn),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  } as ChangeEvent;
}

/** Applies events to a mirror as the live apply leaves it: the newest position per key wins; a delete removes the row. */
export function applyTo(mirror: Map<string, Row>, events: readonly ChangeEvent[]): void {
  for (const e of events) {
    const k = JSON.stringify(e.key);
    const had = mirror.get(k);
    if (had && had.position > e.position) continue;
    if (e.after === null) mirror.delete(k);
    else mirror.set(k, { position: e.position, value: String(e.after.v) });
  }
}

export function memoryWarehouse(mirrors: Mirrors): RebuildWarehouse & { applied: number; merges: number } {
  const w = {
    applied: 0,
    merges: 0,
    async applyTable(batch: TableBatch) {
      const name = batch.target!.mirror;
      if (!mirrors.has(name)) mirrors.set(name, new Map());
      applyTo(mirrors.get(name)!, batch.events);
      w.applied += batch.events.length;
    },
    async merge() {
      w.merges++;
    },
    forgetShapes() {},
  };
  return w;
}

function highest(m: Map<string, Row> | undefined): Position | null {
  let p: Position | null = null;
  for (const r of m?.values() ?? []) if (p === null || r.position > p) p = r.position;
  return p;
}

export function memoryTarget(mirrors: Mirrors, live: WarehouseTable, kept: DiffResult[]): RebuildTarget {
  const shadow = shadowTable(live);
  const retired = retiredTable(live);
  return {
    live,
    shadow,
    retired,
    async dropLeftovers() {
      mirrors.delete(shadow.mirror);
      mirrors.delete(retired.mirror);
    },
    async livePosition() {
      return highest(mirrors.get(live.mirror));
    },
    async shadowExists() {
      return mirrors.has(shadow.mirror);
    },
    async retiredPosition() {
      return mirrors.has(retired.mirror) ? highest(mirrors.get(retired.mirror)) : null;
    },
    async diff(upTo, _client, a = live, b = shadow) {
      const A = mirrors.get(a.mirror) ?? new Map<string, Row>();
      const B = mirrors.get(b.mirror) ?? new Map<string, Row>();
      const rows: DiffRow[] = [];
      for (const k of new Set([...A.keys(), ...B.keys()])) {
        const x = A.get(k);
        const y = B.get(k);
        if ((x && x.position > upTo) || (y && y.position > upTo)) continue;
        const kind = !x ? 'missing' : !y ? 'extra' : x.value !== y.value ? 'changed' : null;
        if (kind) rows.push({ kind, key: JSON.parse(k), livePosition: x?.position ?? null, shadowPosition: y?.position ?? null });
      }
      const count = (kind: string) => rows.filter((r) => r.kind === kind).length;
      return { rows, missing: count('missing'), extra: count('extra'), changed: count('changed') };
    },
    async keepDiff(id, diff) {
      kept.push(diff);
      return `${live.schema}._cdc_diff_${id}`;
    },
    async swap(catchUp) {
      const p = highest(mirrors.get(live.mirror));
      await catchUp(p);
      mirrors.set(retired.mirror, mirrors.get(live.mirror) ?? new Map());
      mirrors.set(live.mirror, mirrors.get(shadow.mirror)!);
      mirrors.delete(shadow.mirror);
      return p;
    },
    async dropRetired() {
      mirrors.delete(retired.mirror);
    },
  };
}

const stats = (events: number): ReplayStats => ({
  objectsRead: 1,
  bytesRead: 0,
  keysListed: 1,
  legacyObjects: 0,
  verifiedObjects: 1,
  unverifiedObjects: 0,
  markersRead: 1,
  archiveRecords: events,
  streamRecords: 0,
  events,
  invalid: 0,
  shards: [],
});

/**
 * The archive's events, then the stream's: `stream` may grow while the rebuild runs (live writes).
 * `streamed`: the replay streams too, in chunks of `chunk` events; with `outOfOrder`, it hands over
 * the events from that index on first, then stops with `ReplayOrderError` (a shard whose records
 * turned out not to be in position order).
 */
export function memoryReplay(archive: ChangeEvent[], stream: ChangeEvent[], streamed?: { chunk: number; outOfOrder?: number }): RebuildReplay {
  const sorted = (range: ReplayRange): ChangeEvent[] =>
    [...archive, ...stream].filter((e) => inRange(e, range)).sort((a, b) => (a.position < b.position ? -1 : 1));
  const streamOf = async function* (range: ReplayRange) {
    const events = sorted(range);
    const cut = streamed!.outOfOrder;
    const from = cut === undefined ? events : events.slice(cut);
    for (let i = 0; i < from.length; i += streamed!.chunk) yield from.slice(i, i + streamed!.chunk);
    if (cut !== undefined) throw new ReplayOrderError('s', events[0]!.position, events.at(-1)!.position);
    return { stats: stats(events.length), resume: new Map([['s', String(stream.length)]]) };
  };
  return {
    ...(streamed ? { stream: streamOf } : {}),
    async checkHistory() {
      return { coverage: new Map(), gaps: [], objects: [], keysListed: 1, unplaced: [], markers: new Map() };
    },
    async read(range: ReplayRange) {
      const events = sorted(range);
      return { events, stats: stats(events.length), resume: new Map([['s', String(stream.length)]]) };
    },
    async readStream(range: ReplayRange, start: ReadonlyMap<string, string | null>) {
      const from = Number(start.get('s') ?? 0);
      return { events: stream.slice(from).filter((e) => inRange(e, range)), resume: new Map([['s', String(stream.length)]]) };
    },
  };
}

/** A control plane with the table registered (version 1: `id` key, `v` text) and the sink's progress at `applied`. */
export async function controlWithTable(applied: Position): Promise<MemoryControlPlane> {
  const cp = new MemoryControlPlane();
  const at = '2026-01-01T00:00:00.000Z';
  const audit = { at, actor: 'test', action: 'register', source: SOURCE, table: TABLE, outcome: 'done' } as const;
  await cp.registerTable(
    { source: SOURCE, table: TABLE, state: 'active', currentVersion: 1, deleteMode: 'hard', preImage: 'key', stateReason: null, updatedAt: at },
    {
      source: SOURCE,
      table: TABLE,
      version: 1,
      columns: [
        { name: 'id', type: 'integer', nullable: false },
        { name: 'v', type: 'text', nullable: true },
      ],
      key: ['id'],
      effectivePosition: makePosition(1n, 0),
      registeredAt: at,
    },
    audit as never,
  );
  await cp.advanceSinkProgress(SINK, SOURCE, TABLE, applied);
  return cp;
}

/** A seeded generator of integers below `n`: the tests' mulberry32 (local/seeded-random.ts), its 32 bits taken modulo `n`. */
export function lcg(seed: number): (n: number) => number {
  const next = seededRandom(seed);
  return (n) => (next() * 4294967296) % n;
}
