/**
 * Property: pause and resume never skip, reorder or lose an event (docs/operations.md, "How a
 * resume replays"). Random histories over many seeds: events of a paused table and a neighbour on
 * several shards, live consumers per shard in one to three lanes (a `parallelizationFactor` above
 * 1: each lane a subset of the keys in order, lagging the others at random), operator pauses and resumes through the real operator
 * core, the real resume replay (`createHeldRangeReplayer`), every control-plane call a point where
 * the scheduler may switch to another flow (so a live batch can read the hold before a release and
 * write after it), and crashes: a live consumer dying between any two of its steps (reads, hold,
 * sink write, progress) or between its write and its checkpoint (the batch is re-delivered), and a
 * replay pass dying before or after any chunk.
 *
 * Checked per key: every event the sink accepted (passed the position guard) came in strictly
 * increasing position order, and the accepted positions are exactly the key's events — so no
 * event was skipped because a newer one of its key was applied first (which would lose an
 * undelivered column, invariant 11), and the final value is the last event's.
 *
 * The sink is a model of the warehouse applier's per-table rule (hold when the table is paused or
 * this sink holds it, unless replaying; else apply with the position guard and advance the
 * high-water mark): the rule and the replay protocol are what is under test, the SQL apply is
 * tested on PostgreSQL elsewhere. The control plane is the in-memory double (same conditions as
 * the DynamoDB adapter, which test/core/operator/operator.test.ts runs on DynamoDB Local).
 *
 * Runs and seed: `CDC_REPLAY_PROPERTY_RUNS` (default 400) and `CDC_PROPERTY_SEED` (default
 * random), both printed so a failure can be replayed.
 */
import { describe, expect, it } from 'vitest';
import type { ControlPlane } from '../../lambda/core/shared/control-plane.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { Operator, stateOnlySnapshots } from '../../lambda/core/operator/operator.ts';
import { heldShardsOf } from '../../lambda/core/operator/operator-decisions.ts';
import { createHeldRangeReplayer, ReplayIncompleteError } from '../../lambda/core/sink/held-range-replay.ts';
import type { ApplyOptions, BatchOutcome, ChangeRecord } from '../../lambda/handlers/warehouse-applier.ts';
import type { LogRecord } from '../../lambda/adapters/change-log-reader.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

const RUNS = Number(process.env.CDC_REPLAY_PROPERTY_RUNS ?? 400);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const SINK = 'warehouse';
const SOURCE = 'prop';
const TABLES = ['public.paused', 'public.neighbour'];

class Crash extends Error {}

interface Ev {
  source: string;
  table: string;
  key: number;
  position: string;
}

/** Wraps every control-plane method so that each call may yield to other flows (random interleaving). */
function interleaved(cp: MemoryControlPlane, rand: () => number): ControlPlane {
  return new Proxy(cp, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function') return v;
      return async (...args: unknown[]) => {
        for (let i = Math.floor(rand() * 4); i > 0; i--) await Promise.resolve();
        if (rand() < 0.3) await new Promise((r) => setImmediate(r));
        return (v as (...a: unknown[]) => unknown).apply(target, args);
      };
    },
  }) as unknown as ControlPlane;
}

/** `parallelBatches`: whether a hold says that its holder runs several batches of one shard at once (false: the defect the hold's flag mends). */
async function history(seed: number, parallelBatches = true): Promise<void> {
  const rand = seededRandom(seed);
  const mem = new MemoryControlPlane();
  const cp = interleaved(mem, rand);
  const at = new Date(Date.now() - 60_000).toISOString();
  for (const table of TABLES) {
    await mem.registerTable(
      { source: SOURCE, table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
      {
        source: SOURCE,
        table,
        version: 1,
        columns: [{ name: 'id', type: 'integer', nullable: false }],
        key: ['id'],
        effectivePosition: makePosition(0n, 0),
        registeredAt: at,
      },
      { at, actor: 'test', action: 'register', source: SOURCE, table, outcome: 'done', detail: {} },
    );
  }
  const shards = 1 + Math.floor(rand() * 3);
  // Lanes: with a parallelization factor above 1 the event source mapping runs that many batches of
  // one shard at once, each lane a subset of the partition keys in order, lagging one another.
  const lanes = 1 + Math.floor(rand() * 3);
  const keys = 2 + Math.floor(rand() * 5);
  const total = 10 + Math.floor(rand() * 40);
  const logs: LogRecord[][] = Array.from({ length: shards }, () => []);
  const events: Ev[] = [];
  for (let n = 1; n <= total; n++) {
    const table = TABLES[rand() < 0.6 ? 0 : 1]!;
    const key = Math.floor(rand() * keys);
    const e: Ev = { source: SOURCE, table, key, position: makePosition(BigInt(n) * 0x100n, 0) };
    events.push(e);
  }
  const shardOf = (e: Ev) => (e.key * 7 + (e.table === TABLES[0] ? 0 : 3)) % shards;
  // The sink model: per (table, key) the positions it accepted, in order.
  const accepted = new Map<string, string[]>();
  const stored = new Map<string, string>();
  // A live consumer may crash between any two of its steps (the batch is then delivered again).
  const step = () => {
    if (crashing && rand() < 0.04) throw new Crash('live consumer crashed between two steps');
  };
  const apply = async (recs: readonly ChangeRecord[], options: ApplyOptions = {}): Promise<BatchOutcome> => {
    let applied = 0;
    let held = 0;
    const byTable = new Map<string, Array<{ e: Ev; r: ChangeRecord }>>();
    for (const r of recs) {
      const e = JSON.parse(r.text) as Ev;
      const list = byTable.get(e.table) ?? [];
      list.push({ e, r });
      byTable.set(e.table, list);
    }
    for (const [table, items] of byTable) {
      const list = items.map((i) => i.e);
      const rec = await cp.getTable(SOURCE, table);
      if (!options.replayHeld) step();
      const progress = options.replayHeld ? null : await cp.getSinkProgress(SINK, SOURCE, table);
      if (!options.replayHeld) step();
      if (rec!.state === 'paused' || (progress?.heldFrom ?? null) !== null) {
        // The appliers' hold: the lowest position and each shard's first held sequence number.
        await cp.holdSinkTable(SINK, SOURCE, table, list.map((e) => e.position).sort()[0]!, heldShardsOf(items.map((i) => i.r)), parallelBatches && lanes > 1);
        if (!options.replayHeld) step();
        held += list.length;
        continue;
      }
      for (const e of [...list].sort((a, b) => (a.position < b.position ? -1 : 1))) {
        const k = `${e.table}/${e.key}`;
        if ((stored.get(k) ?? '') < e.position) {
          stored.set(k, e.position);
          accepted.set(k, [...(accepted.get(k) ?? []), e.position]);
        }
      }
      if (!options.replayHeld) step();
      await cp.advanceSinkProgress(
        SINK,
        SOURCE,
        table,
        list
          .map((e) => e.position)
          .sort()
          .at(-1)!,
      );
      applied += list.length;
    }
    return { failed: [], reasons: new Map(), applied, held, deadLettered: 0 };
  };

  let published = 0;
  const produce = async () => {
    for (const e of events) {
      const s = shardOf(e);
      logs[s]!.push({ shardId: `s${s}`, sequenceNumber: String(logs[s]!.length + 1).padStart(8, '0'), arrivedAt: null, text: JSON.stringify(e) });
      published++;
      for (let i = Math.floor(rand() * 3); i > 0; i--) await new Promise((r) => setImmediate(r));
    }
  };
  // Per shard and lane, the position in the shard's log up to which the lane has checkpointed.
  const laneOf = (r: LogRecord) => ((JSON.parse(r.text) as Ev).key * 5 + (JSON.parse(r.text) as Ev).table.length) % lanes;
  const checkpoints = Array.from({ length: shards }, () => new Array<number>(lanes).fill(0));
  let crashing = true;
  let producing = true;
  const consume = async (s: number, lane: number) => {
    for (;;) {
      const log = logs[s]!;
      const cp0 = checkpoints[s]![lane]!;
      const mine: number[] = [];
      for (let i = cp0; i < log.length && mine.length < 1 + Math.floor(rand() * 3); i++) if (laneOf(log[i]!) === lane) mine.push(i);
      if (mine.length === 0) {
        if (!producing && cp0 >= log.length) return;
        if (!producing) checkpoints[s]![lane] = log.length;
        // A lane may lag: it waits a few turns more than the others.
        for (let i = 1 + Math.floor(rand() * (lane + 1) * 3); i > 0; i--) await new Promise((r) => setImmediate(r));
        continue;
      }
      const batch = mine.map((i) => log[i]!);
      try {
        await apply(batch.map((r) => ({ sequenceNumber: r.sequenceNumber, origin: `changelog/${r.shardId}/${r.sequenceNumber}`, text: r.text })));
      } catch (e) {
        if (e instanceof Crash) continue; // crashed between two steps: the batch comes again
        throw e;
      }
      if (crashing && rand() < 0.1) continue; // crash between the write and the checkpoint: the batch comes again
      checkpoints[s]![lane] = mine.at(-1)! + 1;
    }
  };
  const operator = new Operator({ controlPlane: cp, settings: { changeLogRetentionMs: 86_400_000 }, snapshots: stateOnlySnapshots });
  const replayer = createHeldRangeReplayer({
    controlPlane: cp,
    sinkId: SINK,
    settleMs: 0,
    applier: {
      applyRecords: async (recs, options) => {
        if (crashing && rand() < 0.1) throw new Crash('replay crashed before a chunk');
        const out = await apply(recs, options);
        if (crashing && rand() < 0.1) throw new Crash('replay crashed after a chunk');
        return out;
      },
    },
    // As lambda/adapters/change-log-reader.ts reads: the shards `starts` names, each from its start (that record first).
    readLog: async function* (starts) {
      for (const log of logs) {
        const snapshot = log.slice();
        const shardId = `s${logs.indexOf(log)}`;
        if (starts !== null && !starts.has(shardId)) continue;
        const at = starts?.get(shardId) ?? null;
        const from = at === null ? 0 : snapshot.findIndex((r) => r.sequenceNumber >= at);
        if (from < 0) continue;
        for (let i = from; i < snapshot.length; i += 4) yield snapshot.slice(i, i + 4);
      }
    },
  });
  let operating = true;
  const operate = async () => {
    while (published < total) {
      const r = rand();
      if (r < 0.3) await operator.pause('prop', { table: TABLES[0]!, durationMs: 60_000, reason: 'prop' });
      else if (r < 0.6) await operator.resume('prop', { table: TABLES[0]! });
      for (let i = Math.floor(rand() * 6); i > 0; i--) await new Promise((r2) => setImmediate(r2));
    }
    operating = false;
  };
  const replay = async () => {
    while (operating || producing) {
      await replayer.replayPending().catch((e: unknown) => {
        // A crash, or a pause that came in during the pass (the replay then stops; the hold stays).
        if (!(e instanceof Crash) && !(e instanceof ReplayIncompleteError)) throw e;
      });
      await new Promise((r) => setImmediate(r));
    }
  };
  await Promise.all([
    produce().then(() => (producing = false)),
    ...Array.from({ length: shards * lanes }, (_, n) => consume(Math.floor(n / lanes), n % lanes)),
    operate(),
    replay(),
  ]);
  // The end of the history: the operator resumes and the replay finishes (crashes stop, so it can).
  crashing = false;
  for (let round = 0; round < 50; round++) {
    const r = await operator.resume('prop', { table: TABLES[0]! });
    if (r.outcome === 'refused' && r.code !== 'NOTHING_TO_RESUME' && r.code !== 'CONCURRENT_CHANGE') throw new Error(`resume refused: ${r.code} ${r.reason}`);
    await replayer.replayPending().catch((e: unknown) => {
      if (!(e instanceof Crash)) throw e;
    });
    const p = await mem.getSinkProgress(SINK, SOURCE, TABLES[0]!);
    if ((await mem.getTable(SOURCE, TABLES[0]!))!.state === 'active' && (p?.heldFrom ?? null) === null) break;
  }
  const p = await mem.getSinkProgress(SINK, SOURCE, TABLES[0]!);
  expect(p?.heldFrom ?? null, `seed ${seed}: still held`).toBeNull();
  for (const table of TABLES) {
    for (let key = 0; key < keys; key++) {
      const k = `${table}/${key}`;
      const want = events.filter((e) => e.table === table && e.key === key).map((e) => e.position);
      const got = accepted.get(k) ?? [];
      // Always: strictly increasing, and the key ends at its last event (the sink converges).
      expect([...got].sort(), `seed ${seed}: ${k} accepted in position order`).toEqual(got);
      expect(new Set(got).size, `seed ${seed}: ${k} accepted no event twice`).toBe(got.length);
      expect(got.at(-1), `seed ${seed}: ${k} ends at its last event`).toBe(want.at(-1));
      // No event skipped: every event of the key was accepted, in order. Before the per-shard
      // holds (docs/operations.md, "How a resume replays") a replay could apply a newer event of a
      // key whose shard had held nothing yet, ahead of an older one its lagging live consumer had
      // not reached, and the older one then lost to the position guard (seed 795758160).
      expect(got, `seed ${seed}: ${k} accepted every event in order`).toEqual(want);
    }
  }
}

describe('resume replay property', () => {
  it('finds the skip when a hold of a consumer with several lanes per shard does not say so', async () => {
    // The property's power: with the hold's `parallelBatches` left out, a replay from a held shard's
    // first held event runs ahead of a lagging lane, and some history of these seeds skips an event.
    const from = SEED + 1_000_000;
    let found: string | null = null;
    for (let i = 0; i < 4000 && found === null; i++) {
      await history(from + i, false).catch((e: unknown) => {
        found = `seed ${from + i}: ${(e as Error).message.split('\n')[0]}`;
      });
    }
    console.log(`property (resume replay), lanes without parallelBatches: ${found ?? 'no counterexample in 4000 histories'}`);
    expect(found, 'a counterexample within 4000 histories (about one history in 100 to 300 has one)').not.toBeNull();
  }, 300_000);

  it(`never skips, reorders or loses an event of a paused table (${RUNS} histories)`, async () => {
    console.log(`property (resume replay): ${RUNS} histories, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_REPLAY_PROPERTY_RUNS=${RUNS})`);
    const t0 = Date.now();
    for (let i = 0; i < RUNS; i++) await history(SEED + i);
    console.log(`property (resume replay): ${RUNS} histories checked in ${((Date.now() - t0) / 1000).toFixed(1)} s, seed ${SEED}`);
  }, 300_000);
});
