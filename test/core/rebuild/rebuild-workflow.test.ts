/**
 * The rebuild workflow (lambda/core/rebuild/rebuild-workflow.ts) over in-memory ports
 * (rebuild-fakes.ts): a rebuild replays the history into the shadow and swaps it in, so the live
 * table ends as the history leaves it whatever it held before; a rehearsal leaves it alone; the
 * diff names exactly the keys live had wrong; refusals and a failed rebuild are recorded.
 * Randomized over seeds (seed and count printed).
 */
import { describe, expect, it } from 'vitest';
import { RebuildWorkflow } from '../../../lambda/core/rebuild/rebuild-workflow.ts';
import type { RebuildRequest } from '../../../lambda/core/rebuild/rebuild-ports.ts';
import { warehouseTable } from '../../../lambda/core/warehouse/warehouse-sql.ts';
import type { ChangeEvent } from '../../../lambda/core/shared/event.ts';
import { applyTo, controlWithTable, lcg, event, memoryReplay, memoryTarget, memoryWarehouse, SINK, SOURCE, TABLE, type Mirrors } from './rebuild-fakes.ts';
import type { DiffResult } from '../../../lambda/core/rebuild/rebuild.ts';
import type { HistoryCheck } from '../../../lambda/core/rebuild/replay.ts';

const live = warehouseTable(SOURCE, TABLE);
const request = (rehearse: boolean): RebuildRequest => ({ source: SOURCE, table: TABLE, sink: SINK, rehearse, actor: 'test' });

function randomHistory(rand: (n: number) => number, n: number): ChangeEvent[] {
  const out: ChangeEvent[] = [];
  for (let i = 0; i < n; i++) out.push(event(100 + i, rand(8), rand(5) === 0 ? null : `v${rand(100)}`));
  return out;
}

async function setup(history: ChangeEvent[], batchSize: number, duty: number) {
  const mirrors: Mirrors = new Map();
  const expected = new Map();
  applyTo(expected, history);
  // Live as the history left it, then damaged: one row changed, one row that no event made.
  const damaged = new Map(expected);
  const [firstKey, firstRow] = [...damaged.entries()][0] ?? [];
  if (firstKey) damaged.set(firstKey, { ...firstRow!, value: 'wrong' });
  damaged.set(JSON.stringify({ id: 999 }), { position: history[0]!.position, value: 'stray' });
  mirrors.set(live.mirror, damaged);
  const controlPlane = await controlWithTable(history.at(-1)!.position);
  const kept: DiffResult[] = [];
  const workflow = new RebuildWorkflow({
    controlPlane,
    replay: memoryReplay(history, []),
    warehouse: () => memoryWarehouse(mirrors),
    target: (t) => memoryTarget(mirrors, t, kept),
    batchSize,
    duty,
    now: () => new Date(),
  });
  return { mirrors, expected, controlPlane, kept, workflow, changedKey: firstKey };
}

/** The history a check allowed (a refusal fails the test, naming it). */
function historyOf(check: Awaited<ReturnType<RebuildWorkflow['check']>>): HistoryCheck {
  if (check.refusal !== null) throw new Error(`refused: ${check.refusal.reason}`);
  return check.history;
}

describe('RebuildWorkflow', () => {
  it('a swap leaves the live table as the history does, and its diff names the damaged keys', async () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1_000_000);
    const runs = 40;
    console.log(`rebuild-workflow: seed ${seed}, ${runs} runs`);
    const rand = lcg(seed);
    for (let run = 0; run < runs; run++) {
      const history = randomHistory(rand, 5 + rand(60));
      const { mirrors, expected, controlPlane, kept, workflow, changedKey } = await setup(history, 1 + rand(10), rand(2) === 0 ? 1 : 0.5);
      const check = await workflow.check(request(false));
      expect(check.refusal).toBeNull();
      const report = await workflow.run(request(false), historyOf(check));
      expect(mirrors.get(live.mirror)).toEqual(expected);
      expect(mirrors.has(`_cdc_rb_${live.mirror}`)).toBe(false);
      expect(report.run).toMatchObject({ outcome: 'done', mode: 'swap', events: history.length });
      const diff = kept.at(-1)!;
      expect(diff.extra).toBe(1);
      expect(diff.changed).toBe(changedKey ? 1 : 0);
      expect(await controlPlane.getActiveRebuild(SINK)).toMatchObject({ state: 'finished' });
      expect((await controlPlane.listRebuilds(SINK)).map((r) => r.outcome)).toEqual(['done']);
    }
  });

  it('a rehearsal diffs but leaves the live table and drops the shadow', async () => {
    const history = randomHistory(lcg(7), 30);
    const { mirrors, workflow } = await setup(history, 4, 1);
    const before = structuredClone(mirrors.get(live.mirror));
    const check = await workflow.check(request(true));
    const report = await workflow.run(request(true), historyOf(check));
    expect(report.run.mode).toBe('rehearsal');
    expect(report.diff.map((d) => d.kind).sort()).toEqual(['changed', 'extra']);
    expect(mirrors.get(live.mirror)).toEqual(before);
    expect([...mirrors.keys()]).toEqual([live.mirror]);
  });

  it('refuses a table that is not registered, and a second rebuild of the sink', async () => {
    const { workflow } = await setup(randomHistory(lcg(3), 10), 4, 1);
    expect((await workflow.check({ ...request(false), table: 'public.other' })).refusal).toMatchObject({ code: 'HISTORY_INCOMPLETE' });
    const begun = await workflow.begin(request(false));
    expect(begun).toHaveProperty('id');
    expect((await workflow.check(request(false))).refusal).toMatchObject({ code: 'REBUILD_RUNNING' });
    expect(await workflow.begin(request(false))).toMatchObject({ refusal: { code: 'REBUILD_RUNNING' } });
  });

  it('abandon records the rebuild failed, once, and frees the slot', async () => {
    const { workflow, controlPlane } = await setup(randomHistory(lcg(5), 10), 4, 1);
    const begun = (await workflow.begin(request(false))) as { id: string };
    const run = await workflow.abandon(request(false), begun.id, 'gave up');
    expect(run).toMatchObject({ outcome: 'failed', error: 'gave up', events: 0 });
    await workflow.abandon(request(false), begun.id, 'gave up again');
    expect((await controlPlane.listRebuilds(SINK)).map((r) => r.error)).toEqual(['gave up']);
    expect(await controlPlane.getActiveRebuild(SINK)).toMatchObject({ state: 'finished' });
    const audited = (await controlPlane.listAudit()).filter((a) => a.action === 'rebuild');
    expect(audited).toEqual([
      {
        at: run.finishedAt,
        actor: request(false).actor,
        action: 'rebuild',
        source: run.source,
        table: run.table,
        outcome: 'done',
        detail: { sink: SINK, mode: 'swap', result: 'failed', error: 'gave up', id: begun.id },
      },
    ]);
    expect(Object.keys(audited[0]!.detail)).toEqual(['sink', 'mode', 'result', 'error', 'id']);
  });
});
