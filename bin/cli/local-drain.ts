/**
 * The drain bound of a bounded `cdc local` run (docs/local.md, "Bounded runs (`--duration`)"):
 * after time is up the run waits for the sinks at most `--max-drain`; a sink that had not caught
 * up by then is still compared, but a table of it that differs is reported as not compared (its
 * rows may merely not be applied yet), with the events the sink had not applied, never as
 * DIVERGED. A sink that caught up is compared as always.
 */
import type { TableVerdict, Verdict } from '../../local/verdict.ts';

/** How long a bounded run waits for the sinks after time is up, unless `--max-drain` says otherwise. */
export const DEFAULT_MAX_DRAIN_MS = 30 * 60_000;

/** Where one sink stood when the drain ended. */
export interface SinkAtDrainEnd {
  /** Every stage up to this sink's applier caught up before the bound. */
  caughtUp: boolean;
  /** Events produced in this run (records captured, snapshot rows read and still to read) that the sink had not applied. */
  pendingEvents: number;
  /** Per table: snapshot rows still to read. */
  snapshotRowsLeft: ReadonlyMap<string, number>;
}

/**
 * The verdict of one sink given where it stood at the drain's end: unchanged when it caught up;
 * else every table that differs becomes not compared (`notCompared`; its problems, a hold
 * included, are still listed), and the verdict matches only if every table does.
 */
export function boundVerdict(verdict: Verdict, at: SinkAtDrainEnd): Verdict {
  if (at.caughtUp) return verdict;
  const tables = verdict.tables.map((t): TableVerdict => {
    if (t.match) return t;
    const snapshotRowsLeft = at.snapshotRowsLeft.get(t.table) ?? 0;
    return { ...t, notCompared: { pendingEvents: Math.max(at.pendingEvents, snapshotRowsLeft), snapshotRowsLeft } };
  });
  return { ...verdict, tables, match: tables.every((t) => t.match) };
}

/** Tables of a verdict reported as not compared. */
export function notComparedTables(verdict: Verdict): TableVerdict[] {
  return verdict.tables.filter((t) => t.notCompared);
}

/** Whether a verdict differs only by tables not compared (no table DIVERGED). */
export function onlyNotCompared(verdict: Verdict): boolean {
  return !verdict.match && verdict.tables.every((t) => t.match || t.notCompared);
}
