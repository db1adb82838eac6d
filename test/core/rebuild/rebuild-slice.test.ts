/**
 * One slice of a rebuild (lambda/core/rebuild/rebuild-slice.ts) over in-memory ports
 * (rebuild-fakes.ts): a slice stops after a batch once its time is below the margin and the next
 * goes on from the checkpoint, so slices of any length end where one long run does; events that
 * reach the stream while the rebuild runs are caught up by the swap; a slice of a rebuild that no
 * longer holds the sink's slot fails without touching anything. Randomized over seeds (seed and
 * count printed).
 */
import { describe, expect, it } from 'vitest';
import { RebuildFailedError, rebuildSlice } from '../../../lambda/core/rebuild/rebuild-slice.ts';
import { claimRebuildSlot, type DiffResult } from '../../../lambda/core/rebuild/rebuild.ts';
import type { RebuildPorts, RebuildRequest } from '../../../lambda/core/rebuild/rebuild-ports.ts';
import { warehouseTable } from '../../../lambda/core/warehouse/warehouse-sql.ts';
import type { ChangeEvent } from '../../../lambda/core/shared/event.ts';
import { applyTo, controlWithTable, event, lcg, memoryReplay, memoryTarget, memoryWarehouse, SINK, SOURCE, TABLE, type Mirrors } from './rebuild-fakes.ts';

const live = warehouseTable(SOURCE, TABLE);
const request: RebuildRequest = { source: SOURCE, table: TABLE, sink: SINK, rehearse: false, actor: 'test' };

async function setup(
  archive: ChangeEvent[],
  stream: ChangeEvent[],
  batchSize: number,
  step?: (name: string) => void,
  streamed?: { chunk: number; outOfOrder?: number },
) {
  const mirrors: Mirrors = new Map([[live.mirror, new Map()]]);
  const controlPlane = await controlWithTable(archive.at(-1)!.position);
  const kept: DiffResult[] = [];
  const ports: RebuildPorts = {
    controlPlane,
    replay: memoryReplay(archive, stream, streamed),
    warehouse: () => memoryWarehouse(mirrors),
    target: (t) => memoryTarget(mirrors, t, kept),
    batchSize,
    duty: 1,
    now: () => new Date(),
    ...(step ? { step } : {}),
  };
  const begun = (await claimRebuildSlot(controlPlane, request, 'rb-1', new Date())) as { id: string };
  return { mirrors, controlPlane, ports, id: begun.id };
}

describe('rebuildSlice', () => {
  it('slices that run out of time go on from the checkpoint and end as one run would', async () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1_000_000);
    const runs = 40;
    console.log(`rebuild-slice: seed ${seed}, ${runs} runs`);
    const rand = lcg(seed);
    for (let run = 0; run < runs; run++) {
      const n = 10 + rand(80);
      const archive = Array.from({ length: n }, (_, i) => event(100 + i, rand(10), rand(6) === 0 ? null : `v${rand(50)}`));
      const batchSize = 1 + rand(8);
      const { mirrors, controlPlane, ports, id } = await setup(archive, [], batchSize);
      // A slice's time is up after `budget` batches.
      let slices = 0;
      let out;
      do {
        const budget = 1 + rand(4);
        let batches = 0;
        ports.step = (name) => void (name === 'apply-batch' && batches++);
        out = await rebuildSlice(ports, request, id, { timeLeftMs: () => (batches >= budget ? 0 : 1e9), marginMs: 1 });
        slices++;
        expect(slices).toBeLessThan(n + 2);
        if (!out.done) expect((await controlPlane.getActiveRebuild(SINK))!.checkpoint).toEqual(out.checkpoint);
      } while (!out.done);
      const expected = new Map();
      applyTo(expected, archive);
      expect(mirrors.get(live.mirror)).toEqual(expected);
      // The event at the checkpoint is applied again by the next slice (harmless: invariant 2), and counted again.
      expect(out.report.run.events).toBeGreaterThanOrEqual(n);
      expect(out.report.run.events).toBeLessThanOrEqual(n + slices - 1);
      expect(out.report.run.outcome).toBe('done');
      expect((await controlPlane.listRebuilds(SINK))[0]!.events).toBe(out.report.run.events);
    }
  });

  it('a streamed replay applies as the sorted one does; one whose order cannot hold starts the shadow again and replays sorted, in any slice', async () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1_000_000);
    const runs = 60;
    console.log(`rebuild-slice streamed: seed ${seed}, ${runs} runs`);
    const rand = lcg(seed);
    for (let run = 0; run < runs; run++) {
      const where = `run ${run} seed ${seed}`;
      const n = 10 + rand(80);
      const archive = Array.from({ length: n }, (_, i) => event(100 + i, rand(10), rand(6) === 0 ? null : `v${rand(50)}`));
      // Out of order: the later events come first and are applied (and checkpointed) before the stream stops.
      const outOfOrder = rand(2) === 0 ? 1 + rand(n - 1) : undefined;
      const streamed = { chunk: 1 + rand(20), ...(outOfOrder !== undefined ? { outOfOrder } : {}) };
      const { mirrors, controlPlane, ports, id } = await setup(archive, [], 1 + rand(8), undefined, streamed);
      const dropped: string[] = [];
      const target = ports.target;
      ports.target = (t) => {
        const made = target(t);
        return {
          ...made,
          dropLeftovers: async () => {
            dropped.push('drop');
            await made.dropLeftovers();
          },
        };
      };
      let out;
      let slices = 0;
      do {
        const budget = 1 + rand(4);
        let batches = 0;
        ports.step = (name) => void (name === 'apply-batch' && batches++);
        out = await rebuildSlice(ports, request, id, { timeLeftMs: () => (batches >= budget ? 0 : 1e9), marginMs: 1 });
        expect(++slices, where).toBeLessThan(3 * n);
      } while (!out.done);
      const expected = new Map();
      applyTo(expected, archive);
      expect(mirrors.get(live.mirror), where).toEqual(expected);
      // The checkpoint of the streamed applies was dropped with the shadow: every event is in the count of the sorted replay.
      expect(out.report.run.events, where).toBeGreaterThanOrEqual(n);
      // The first slice's leftovers, and once more for the fallback, which later slices remember (they replay sorted).
      expect(dropped, where).toEqual(outOfOrder !== undefined ? ['drop', 'drop'] : ['drop']);
      expect((await controlPlane.listRebuilds(SINK))[0]!.outcome, where).toBe('done');
    }
  });

  it('the swap catches up events that reached the stream while the rebuild ran', async () => {
    const archive = Array.from({ length: 20 }, (_, i) => event(100 + i, i % 5, `a${i}`));
    const stream: ChangeEvent[] = [];
    const { mirrors, ports, id } = await setup(archive, stream, 3, (name) => {
      // A live write after the bulk was read, and another while the swap holds the live table.
      if (name === 'catch-up') stream.push(event(200, 1, 'late'));
      if (name === 'swap') stream.push(event(201, 7, 'during-swap'));
    });
    const out = await rebuildSlice(ports, request, id);
    expect(out.done).toBe(true);
    const rows = mirrors.get(live.mirror)!;
    expect(rows.get(JSON.stringify({ id: 1 }))!.value).toBe('late');
    expect(rows.get(JSON.stringify({ id: 7 }))!.value).toBe('during-swap');
    if (!out.done) throw new Error('the rebuild did not finish in one slice');
    const { run } = out.report;
    const audited = (await ports.controlPlane.listAudit()).filter((a) => a.action === 'rebuild');
    expect(audited).toHaveLength(1);
    expect(audited[0]).toMatchObject({ at: run.finishedAt, actor: 'test', source: SOURCE, table: TABLE, outcome: 'done' });
    expect(Object.keys(audited[0]!.detail)).toEqual(['sink', 'mode', 'id', 'durationMs', 'events', 'slices', 'diff', 'diffTable', 'caughtUpTo']);
    expect(audited[0]!.detail).toMatchObject({ sink: SINK, mode: 'swap', id, durationMs: run.durationMs, events: run.events, caughtUpTo: run.caughtUpTo });
  });

  it('a slice of a rebuild that lost the slot fails and changes nothing', async () => {
    const archive = Array.from({ length: 5 }, (_, i) => event(100 + i, i, `a${i}`));
    const { mirrors, ports } = await setup(archive, [], 2);
    await expect(rebuildSlice(ports, request, 'rb-other')).rejects.toThrow(RebuildFailedError);
    await expect(rebuildSlice(ports, request, 'rb-other')).rejects.toThrow(/no longer holds the rebuild slot/);
    expect([...mirrors.keys()]).toEqual([live.mirror]);
    expect(mirrors.get(live.mirror)!.size).toBe(0);
  });
});
