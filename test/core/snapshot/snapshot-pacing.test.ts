/**
 * The snapshot's pace on a busy client and its stop (docs/snapshot.md, "The budget"; docs/local.md,
 * "Stopping"): a chunk is sized by the time its rows took, not its round trips, so a snapshot of a
 * calm source read from a slow client still finishes in few chunks; and a run resting between
 * chunks returns as soon as a stop is signalled. Counted in chunks and decisions, not wall time
 * (speed targets do not belong in unit tests); the stop's bound is seconds against a ten-minute rest.
 */
import { describe, expect, it } from 'vitest';
import { AdaptivePacer, rowsTimeMs, type Pacer, type PacerDecision } from '../../../lambda/core/snapshot/snapshot-pacer.ts';
import { requestSnapshot, runTableSnapshot, sleepUnlessAborted, type SnapshotReader } from '../../../lambda/core/snapshot/snapshot-worker.ts';
import type { ChunkRead, SnapshotTableShape } from '../../../lambda/core/snapshot/snapshot.ts';
import { NO_COLUMN_RULES } from '../../../lambda/core/tables/masking.ts';
import { MemoryControlPlane } from '../../helpers/memory-control-plane.ts';

const SHAPE: SnapshotTableShape = {
  table: 'public.accounts',
  columns: [
    { name: 'aid', type: 'integer', typeOid: 23 },
    { name: 'abalance', type: 'integer', typeOid: 23 },
  ],
  key: ['aid'],
};

/**
 * A table of `n` rows (keys 1..n) read as from a busy client: every read spends `roundTripMs` in
 * round trips whatever its size, and `perRowMs` per row on the source (a collaborator double: the
 * real reader and its round-trip timing are tested against PostgreSQL in test/local/snapshot.test.ts).
 */
function busyClientReader(n: number, roundTripMs: number, perRowMs: number): SnapshotReader & { limits: number[] } {
  const r = {
    limits: [] as number[],
    describe: async () => SHAPE,
    estimateRows: async () => n,
    readChunk: async (_s: SnapshotTableShape, after: string[] | null, limit: number): Promise<ChunkRead> => {
      r.limits.push(limit);
      const from = after === null ? 1 : Number(after[0]) + 1;
      const rows: string[][] = [];
      for (let k = from; k <= n && rows.length < limit; k++) rows.push([String(k), String(k % 97)]);
      return {
        lowWatermark: `0/${(0x1000 + r.limits.length).toString(16)}`,
        fenceXid: String(700 + r.limits.length),
        rows,
        readAt: new Date().toISOString(),
        fenceWaitMs: 0,
        readMs: roundTripMs + rows.length * perRowMs,
        roundTripMs,
        fromReplica: false,
      };
    },
  };
  return r;
}

describe('chunk size on a busy client', () => {
  it('the rows-time of a read leaves out its round trips', () => {
    expect(rowsTimeMs({ readMs: 1200, fixedMs: 1150 })).toBe(50);
    expect(rowsTimeMs({ readMs: 1200 })).toBe(1200);
    expect(rowsTimeMs({ readMs: 100, fixedMs: 300 })).toBe(0);
  });

  it('a 600-row read that took 1.2 s in round trips and 6 ms on the rows grows the chunk; 1.2 s of rows shrinks it', () => {
    const slowClient = new AdaptivePacer({ initialChunk: 600 });
    slowClient.record({ rows: 600, readMs: 1206, fixedMs: 1200, busyMs: 1500, pressure: null });
    expect(slowClient.next()).toMatchObject({ chunkSize: 2600, state: 'full-speed', pauseMs: 0, readAhead: true });
    const slowRows = new AdaptivePacer({ initialChunk: 600 });
    slowRows.record({ rows: 600, readMs: 1206, fixedMs: 6, busyMs: 1500, pressure: null });
    expect(slowRows.next().chunkSize).toBe(250);
  });

  for (const [roundTripMs, perRowMs] of [
    [1_000, 0.002],
    [3_000, 0.01],
    [400, 0.004],
  ] as const) {
    it(`100,000 rows of a calm source, reads with ${roundTripMs} ms of round trips and ${perRowMs} ms a row: done in at most 16 chunks, never shrunk`, async () => {
      const controlPlane = new MemoryControlPlane();
      await requestSnapshot(controlPlane, { source: 's', table: SHAPE.table, reason: 'initial', actor: 'planner' });
      const reader = busyClientReader(100_000, roundTripMs, perRowMs);
      const outcome = await runTableSnapshot({
        controlPlane,
        reader,
        publish: async () => undefined,
        pacer: new AdaptivePacer(),
        source: 's',
        table: SHAPE.table,
        rules: NO_COLUMN_RULES,
        owner: 'w',
        pressure: async () => ({ addedWriteLatencyPct: 0, addedCpuPct: null, activeSessions: 0 }),
        sleep: async () => undefined,
        yieldToIo: async () => undefined,
      });
      expect(outcome).toBe('done');
      const s = (await controlPlane.getSnapshot('s', SHAPE.table))!;
      expect(s.rowsDone).toBe(100_000);
      // Growing by 2,000 rows a decision from 1,000; a chunk read ahead takes the size decided
      // before the chunk ahead of it was recorded, so sizes come in pairs: 2 × (1,000 + 3,000 + …
      // + 13,000) = 98,000, then one more. Shrunk by its round trips it would take about 2,000
      // chunks (the smallest chunk is 50 rows).
      expect(s.chunksDone, `chunk sizes ${reader.limits.slice(0, 30).join(', ')} …`).toBeLessThanOrEqual(16);
      for (let i = 1; i < reader.limits.length; i++) expect(reader.limits[i]).toBeGreaterThanOrEqual(reader.limits[i - 1]!);
    });
  }
});

/** A pacer that rests `pauseMs` before every chunk after the first (a snapshot slowed by the budget). */
function restingPacer(pauseMs: number): Pacer & { decisions: number } {
  const p = {
    decisions: 0,
    next(): PacerDecision {
      return { chunkSize: 10, pauseMs: p.decisions++ === 0 ? 0 : pauseMs, state: 'slowed' };
    },
    record() {},
  };
  return p;
}

describe('a stop wakes a resting snapshot', () => {
  it('a run resting 10 minutes between chunks returns "stopped" within seconds of the stop, its first chunk recorded', async () => {
    const controlPlane = new MemoryControlPlane();
    await requestSnapshot(controlPlane, { source: 's', table: SHAPE.table, reason: 'initial', actor: 'planner' });
    const stop = new AbortController();
    const pacer = restingPacer(600_000);
    let stoppedAt = 0;
    const run = runTableSnapshot({
      controlPlane,
      reader: busyClientReader(100, 0, 0),
      publish: async () => undefined,
      pacer,
      source: 's',
      table: SHAPE.table,
      rules: NO_COLUMN_RULES,
      owner: 'w',
      signal: stop.signal,
      onState: (s) => {
        // Resting: the throttle written before the pause, after the first chunk.
        if (s.chunksDone === 1 && s.throttle === 'slowed' && stoppedAt === 0)
          setTimeout(() => {
            stoppedAt = performance.now();
            stop.abort();
          }, 50);
      },
    });
    const outcome = await run;
    const took = performance.now() - stoppedAt;
    expect(outcome).toBe('stopped');
    expect(stoppedAt).toBeGreaterThan(0);
    expect(took).toBeLessThan(5_000);
    const s = (await controlPlane.getSnapshot('s', SHAPE.table))!;
    expect([s.status, s.chunksDone, s.rowsDone]).toEqual(['running', 1, 10]);
  });

  it('sleepUnlessAborted ends at the abort, or at once when already aborted, and otherwise after its time', async () => {
    const c = new AbortController();
    const t0 = performance.now();
    setTimeout(() => c.abort(), 20);
    await sleepUnlessAborted(600_000, c.signal);
    expect(performance.now() - t0).toBeLessThan(5_000);
    await sleepUnlessAborted(600_000, c.signal);
    const t1 = performance.now();
    await sleepUnlessAborted(30, new AbortController().signal);
    expect(performance.now() - t1).toBeGreaterThanOrEqual(25);
  });
});
