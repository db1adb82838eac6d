/**
 * The streamed replay's order (lambda/core/rebuild/replay-order.ts) against the sorted replay's
 * (`mergeReplay` over the archive's objects in listing order, then the stream), over random
 * histories: 1–4 shards, events of two tables, runs of events at one position (a snapshot
 * chunk), records delivered twice, objects of random sizes listed in an order that interleaves the
 * shards at random, a stream part after the archive, a random range. Every run drives
 * `ReplayOrder` as the replay reader does (the shard it names next, each object's events, `take`
 * after each, `finish` with the stream's) and checks:
 * - when each shard's records are in position order, the streamed replay never stops and hands
 *   over exactly the sorted replay's events, in its order (the same objects, first deliveries kept);
 * - when they are not (adjacent records of a shard swapped), it hands over exactly those events or
 *   stops with `ReplayOrderError`, never anything else; and every chunk is handed over in order.
 * `CDC_REPLAY_ORDER_RUNS` (default 1,000) and `CDC_PROPERTY_SEED` (default random, printed).
 */
import { describe, expect, it } from 'vitest';
import type { ChangeEvent } from '../../../lambda/core/shared/event.ts';
import { makePosition } from '../../../lambda/core/shared/position.ts';
import { mergeReplay, type ReplayRange } from '../../../lambda/core/rebuild/replay.ts';
import { ReplayOrder, ReplayOrderError } from '../../../lambda/core/rebuild/replay-order.ts';
import { seededRandom } from '../../../local/seeded-random.ts';
import { replayEvent as event } from '../../helpers/replay-events.ts';

const RUNS = Number(process.env.CDC_REPLAY_ORDER_RUNS ?? 1000);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);

interface Obj {
  shard: string;
  events: ChangeEvent[];
}

/** One random history: objects in listing order, the stream's records in the order the reader reads them, the range. */
function history(rand: () => number, disorder: boolean): { shards: string[]; objects: Obj[]; tail: ChangeEvent[]; range: ReplayRange } {
  const shards = Array.from({ length: 1 + Math.floor(rand() * 4) }, (_, i) => `shardId-${i}`);
  const perShard = new Map<string, ChangeEvent[]>(shards.map((s) => [s, []]));
  let lsn = 0x100n;
  const n = Math.floor(rand() * 300);
  for (let i = 0; i < n; i++) {
    lsn += BigInt(Math.floor(rand() * 3));
    const table = rand() < 0.7 ? 'public.a' : 'public.b';
    const e = event(table, Math.floor(rand() * 15), makePosition(lsn, 0), i);
    // Records of one key go to one shard (the change log's partition key); a redelivery repeats one.
    const list = perShard.get(shards[(e.key.id as number) % shards.length]!)!;
    list.push(e);
    if (rand() < 0.08) list.push({ ...e }); // another object: which delivery is kept shows
  }
  if (disorder)
    for (const list of perShard.values())
      for (let k = Math.floor(rand() * 3); k >= 0 && list.length > 1; k--) {
        const i = Math.floor(rand() * (list.length - 1));
        [list[i], list[i + 1]] = [list[i + 1]!, list[i]!];
      }
  // Each shard: objects of 1–15 records, then (maybe) a stream part.
  const queues: Obj[][] = [];
  const tail: ChangeEvent[] = [];
  for (const [shard, list] of perShard) {
    const archived = rand() < 0.3 ? Math.floor(rand() * (list.length + 1)) : list.length;
    const objs: Obj[] = [];
    for (let i = 0; i < archived;) {
      const size = 1 + Math.floor(rand() * 15);
      objs.push({ shard, events: list.slice(i, Math.min(i + size, archived)) });
      i += size;
    }
    // Sometimes an object holds none of the table's records.
    if (rand() < 0.2) objs.splice(Math.floor(rand() * (objs.length + 1)), 0, { shard, events: [] });
    queues.push(objs);
    tail.push(...list.slice(archived));
  }
  // The listing interleaves the shards at random, each shard's objects in their order.
  const objects: Obj[] = [];
  while (queues.some((q) => q.length > 0)) {
    const live = queues.filter((q) => q.length > 0);
    objects.push(live[Math.floor(rand() * live.length)]!.shift()!);
  }
  const pick = (): string => makePosition(0x100n + BigInt(Math.floor(rand() * Number(lsn - 0x100n + 1n))), 0);
  const range = { source: 'src', table: 'public.a', from: rand() < 0.6 ? '0'.repeat(24) : pick(), to: rand() < 0.6 ? 'f'.repeat(24) : pick() };
  return { shards, objects, tail, range };
}

/** The streamed replay over the history as the replay reader drives it; the chunks concatenated. */
function streamed(h: { shards: string[]; objects: Obj[]; tail: ChangeEvent[]; range: ReplayRange }): ChangeEvent[] {
  const queues = new Map<string, number[]>();
  for (const [i, o] of h.objects.entries()) queues.set(o.shard, [...(queues.get(o.shard) ?? []), i]);
  // Every shard of the history may have a stream part (the reader names the stream's shards).
  const order = new ReplayOrder(
    h.range,
    h.objects.map((o) => o.shard),
    h.shards,
  );
  const out: ChangeEvent[] = [];
  const hand = (chunk: ChangeEvent[]): void => {
    // Every chunk is in order and after everything before it.
    for (const e of chunk) {
      if (out.length > 0) expect(e.position >= out[out.length - 1]!.position).toBe(true);
      out.push(e);
    }
  };
  for (let shard = order.nextShard(); shard !== null; shard = order.nextShard()) {
    const i = queues.get(shard)!.shift()!;
    // The reader passes the table's events, in or out of the range.
    order.add(
      shard,
      i,
      h.objects[i]!.events.filter((e) => e.table === h.range.table),
    );
    hand(order.take());
  }
  hand(order.finish(h.tail.filter((e) => e.table === h.range.table)));
  return out;
}

describe('streamed replay order (property)', () => {
  it(`hands over the sorted replay's events in its order, or stops with ReplayOrderError when a shard is out of order (${RUNS} runs)`, () => {
    console.log(`replay order property: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED})`);
    const rand = seededRandom(SEED);
    let stopped = 0;
    let disordered = 0;
    let streamedEvents = 0;
    for (let run = 0; run < RUNS; run++) {
      const where = `run ${run} seed ${SEED}`;
      const disorder = rand() < 0.3;
      if (disorder) disordered++;
      const h = history(rand, disorder);
      const want = mergeReplay([h.objects.flatMap((o) => o.events), mergeReplay([h.tail], h.range)], h.range);
      let got: ChangeEvent[];
      try {
        got = streamed(h);
      } catch (err) {
        expect(err, where).toBeInstanceOf(ReplayOrderError);
        expect(disorder, `${where}: in-order shards never stop the streamed replay`).toBe(true);
        stopped++;
        continue;
      }
      // The same events, the same objects (which delivery was kept), in the same order.
      expect(got.length, where).toBe(want.length);
      for (const [i, e] of got.entries()) expect(e, `${where}, event ${i}`).toBe(want[i]);
      streamedEvents += got.length;
    }
    console.log(`replay order property: ${disordered} runs with shards out of order, ${stopped} stopped; ${streamedEvents} events handed over`);
    expect(streamedEvents).toBeGreaterThan(0);
    if (RUNS >= 200) expect(stopped).toBeGreaterThan(0);
  });

  it('names the shard and the positions when an event comes below what was handed over', () => {
    const range = { source: 'src', table: 'public.a', from: '0'.repeat(24), to: 'f'.repeat(24) };
    const late = new ReplayOrder(range, ['s0', 's0', 's1', 's1'], []);
    late.add('s0', 0, [event('public.a', 1, makePosition(0x30n, 0), 1)]);
    late.add('s1', 2, [event('public.a', 2, makePosition(0x40n, 0), 2)]);
    // Shard s0 may still hold 0x30: nothing is final yet.
    expect(late.take()).toEqual([]);
    late.add('s0', 1, [event('public.a', 3, makePosition(0x50n, 0), 3)]);
    expect(late.take().map((e) => e.after!.v)).toEqual([1]);
    // A redelivery of what was handed over is dropped; another event below it stops the stream.
    expect(() => late.add('s1', 3, [event('public.a', 1, makePosition(0x30n, 0), 1)])).not.toThrow();
    expect(late.take()).toEqual([]);
    const err = (() => {
      try {
        late.finish([event('public.a', 3, makePosition(0x20n, 0), 3)]);
        return null;
      } catch (e) {
        return e;
      }
    })();
    expect(err).toBeInstanceOf(ReplayOrderError);
    expect(String(err)).toContain(`an event at ${makePosition(0x20n, 0)} in shard stream comes after events up to ${makePosition(0x30n, 0)} were handed over`);
  });
});
