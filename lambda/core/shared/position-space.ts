/**
 * Position spaces (docs/architecture.md §5.2): where a table's positions come from, decided by
 * how the table is captured and recorded on its table record when it is registered.
 *
 * - `wal`: the source's log (commit LSN + index; lambda/core/shared/position.ts). One order over every
 *   log-captured table of the source: the snapshot's stitching, the heartbeat's continuity and the
 *   DMS control records' effective position all live here.
 * - `poll-timestamp`, `poll-xid`: a polled table (docs/polling.md), its positions those of its poll
 *   pages: microseconds since the epoch of the row's modified-at value, or, for a transaction-id
 *   column, the xmin of the snapshot of the page that read the row (never the row's own id). A poll
 *   space is the table's own: its positions compare only with positions of the same table. Its
 *   continuity is the poll cursor's; its re-snapshot and sweep take their position in the same
 *   space (lambda/core/capture/poll-snapshot.ts).
 *
 * Positions of two spaces never meet: every place that compares positions of more than one table,
 * or a position with a watermark, asks for the space first, and an attempt to mix them is the
 * named `PositionSpaceMismatchError`.
 */
import { CdcError } from './errors.ts';

export const POSITION_SPACES = ['wal', 'poll-timestamp', 'poll-xid'] as const;
/** One of `POSITION_SPACES`. */
export type PositionSpace = (typeof POSITION_SPACES)[number];

/**
 * How the poll column orders rows: a timestamp (modified-at, bounded by the horizon) or a
 * transaction id (`xid8` set by a trigger to `pg_current_xact_id()`, bounded by the snapshot's xmin).
 * Defined here, beside the spaces it maps to, so this module needs nothing of the poll capture.
 */
export type PollColumnKind = 'timestamp' | 'xid';

/** How a poll column orders rows (`PollColumnKind`), as a space. */
export type PollSpace = Exclude<PositionSpace, 'wal'>;

/** Positions of two spaces were about to be compared or mixed: refused, never guessed. */
export class PositionSpaceMismatchError extends CdcError {
  constructor(
    readonly what: string,
    readonly expected: PositionSpace,
    readonly actual: PositionSpace,
  ) {
    super(
      'POSITION_SPACE_MISMATCH',
      `${what}: positions of space ${actual} cannot be compared with or mixed into space ${expected} (docs/architecture.md §5.2: a log position, a polled time and a polled page's xmin do not compare)`,
    );
  }
}

export function isPositionSpace(v: unknown): v is PositionSpace {
  return typeof v === 'string' && (POSITION_SPACES as readonly string[]).includes(v);
}

export function isPollSpace(space: PositionSpace): space is PollSpace {
  return space !== 'wal';
}

/** The space of a poll column of this kind. */
export function pollSpace(kind: PollColumnKind): PollSpace {
  return kind === 'xid' ? 'poll-xid' : 'poll-timestamp';
}

/** The poll column kind of a poll space. */
export function pollKindOf(space: PollSpace): PollColumnKind {
  return space === 'poll-xid' ? 'xid' : 'timestamp';
}

const TIMESTAMP_TYPE = /^timestamp(\(\d+\))?( with(out)? time zone)?$/;

/**
 * The recorded space of a table record. A record registered before spaces were recorded has none:
 * a log-captured one is `wal`; a polled one's space is then told by its poll column (`fallback`),
 * or null when the caller cannot tell.
 */
export function recordedSpace(
  record: { capture?: 'log' | 'poll'; positionSpace?: PositionSpace } | null,
  fallback: PositionSpace | null = null,
): PositionSpace | null {
  if (record?.positionSpace) return record.positionSpace;
  if (record && (record.capture ?? 'log') === 'log') return 'wal';
  return fallback;
}

/** Throws `PositionSpaceMismatchError` unless `actual` is `expected`. */
export function assertSpace(what: string, expected: PositionSpace, actual: PositionSpace): void {
  if (expected !== actual) throw new PositionSpaceMismatchError(what, expected, actual);
}

/** The poll space of a poll column of this source type, or null when the type cannot be polled (an integer version is refused, lambda/core/capture/poll.ts). */
export function pollSpaceOfType(type: string | null): PollSpace | null {
  const t = (type ?? '').trim().toLowerCase();
  if (TIMESTAMP_TYPE.test(t)) return 'poll-timestamp';
  if (t === 'xid8') return 'poll-xid';
  return null;
}

/** Whether a table record is in a poll space (recorded, or a polled table registered before spaces were recorded). */
export function isPolledRecord(record: { capture?: 'log' | 'poll'; positionSpace?: PositionSpace }): boolean {
  return record.positionSpace ? isPollSpace(record.positionSpace) : record.capture === 'poll';
}
