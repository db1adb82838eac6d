/**
 * The drain's stall detection (local/caught-up.ts; docs/local.md, "Bounded runs (`--duration`)"): a
 * stage that makes no progress for `stallMs` stops the wait with its name; a normalizer in the
 * middle of one long batch (its acknowledged records do not move) is not stalled while what it
 * publishes is consumed downstream. Over stage doubles: the real stages run in the e2e tests.
 */
import { describe, expect, it } from 'vitest';
import { waitCaughtUp, type CaughtUpStages } from '../../local/caught-up.ts';

/** A consumer double: caught up once `caughtUp` is set; `recordsDone` as the test moves it. */
function consumer(): { caughtUp: boolean; stats: { recordsDone: number }; caughtUpSince(t: number): boolean } {
  const c = { caughtUp: false, stats: { recordsDone: 0 }, caughtUpSince: () => c.caughtUp };
  return c;
}

function stages() {
  const normalizer = consumer();
  const sink = consumer();
  const archive = consumer();
  const s: CaughtUpStages = {
    snapshots: null,
    polls: null,
    capture: { caughtUpSince: () => true, stats: { records: 0, state: 'running' } },
    normalizer,
    archive,
    sinks: [{ sinkId: 'dw', name: 'warehouse applier', consumer: sink }],
    replayers: [],
  };
  return { s, normalizer, sink, archive };
}

describe('waiting for the sinks: stalls', () => {
  it('a normalizer whose one batch outlasts the stall bound is not stalled while the sinks consume what it publishes', async () => {
    const { s, normalizer, sink, archive } = stages();
    const feeding = setInterval(() => {
      sink.stats.recordsDone += 100;
      archive.stats.recordsDone += 100;
    }, 50);
    setTimeout(() => {
      normalizer.stats.recordsDone += 15;
      normalizer.caughtUp = sink.caughtUp = archive.caughtUp = true;
    }, 1_200);
    try {
      await expect(waitCaughtUp(s, 400)).resolves.toBeUndefined();
    } finally {
      clearInterval(feeding);
    }
  });

  it('a normalizer that moves nothing, with nothing moving downstream, is named after the stall bound', async () => {
    const { s } = stages();
    await expect(waitCaughtUp(s, 1_000)).rejects.toThrow('the normalizer did not catch up: no progress for 1 s');
  });
});
