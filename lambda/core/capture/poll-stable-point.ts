/**
 * Reconcile's stable point for a polled table (docs/reconcile.md step 5, docs/polling.md): a
 * polled table's changes reach a sink through its poll cursor, not the log, so the heartbeat says
 * nothing about them (docs/architecture.md §5.2). A mark is the table's highest poll position at a
 * read; the sink has passed it once the poller's cursor is at or past it (every row visible at the
 * read was published) and the sink applied a position of the table at or past it.
 */
import { pollPosition, type PollCursor } from './poll.ts';
import { makePosition, POSITION_ZERO, type Position } from '../shared/position.ts';
import type { StablePoint } from '../reconcile/reconcile.ts';

export interface PollStablePointDeps {
  table: string;
  /** The table's highest poll position number now (decimal text), null when it has no row (the source). */
  highest(): Promise<string | null>;
  /** The poller's cursor of the table (the control plane's checkpoint), null before its first page. */
  cursor(): Promise<PollCursor | null>;
  /** The position number of a cursor's poll value (decimal text; the source converts the column's text). */
  positionOf(pollValue: string): Promise<string>;
  /** The highest position the sink applied for the table (its progress in the control plane), or null. */
  applied(): Promise<Position | null>;
}

export function pollStablePoint(d: PollStablePointDeps): StablePoint {
  return {
    what: 'the poll cursor',
    async mark() {
      const h = await d.highest();
      return h === null ? POSITION_ZERO : pollPosition(h, d.table);
    },
    async passed(mark) {
      const cursor = await d.cursor();
      if (mark === POSITION_ZERO) return true;
      if (!cursor?.[0]) return false;
      const at = makePosition(BigInt(await d.positionOf(cursor[0])), 0);
      if (at < mark) return false;
      const applied = await d.applied();
      return applied !== null && applied >= mark;
    },
  };
}

/** `{ stablePoint }` for a polled table's configuration (made by `make`), `{}` for any other. */
export async function pollPoint<C extends { table: string; capture?: 'log' | 'poll'; pollColumn?: string }>(
  config: C | undefined,
  make: (c: C) => Promise<StablePoint>,
): Promise<{ stablePoint?: StablePoint }> {
  return config?.capture === 'poll' && config.pollColumn !== undefined ? { stablePoint: await make(config) } : {};
}
