/**
 * The (re-)snapshot of a polled table, in its poll space (docs/polling.md "Re-snapshot of a polled
 * table", docs/architecture.md §5.2). Pure logic: which space a run takes its positions in, the
 * query for the run's bound H, and the run's watermark in that space.
 *
 * A log-captured table's snapshot stitches with the log (lambda/core/snapshot/snapshot.ts): its rows sit
 * just below the low watermark's LSN. A polled table has no log: the run takes one position number
 * H when it starts, on the primary, before any chunk is read, and every chunk's snapshot is taken
 * after it (each chunk is fenced, on a replica until it replayed past the fence):
 * - transaction-id column (`poll-xid`): H = the xmin of a snapshot taken at the start. Every
 *   transaction below H had ended then, so every chunk sees its writes. A poll page read before the
 *   start has xmin ≤ H (snapshot xmins do not go back), so every position the sink holds from
 *   before is ≤ (H, 0). A change no chunk saw was made by a transaction T ≥ H (else a chunk saw it),
 *   and the page that reads it has xmin > T ≥ H: position ≥ (H + 1, 0).
 * - timestamp column (`poll-timestamp`): H = the microsecond just below the horizon Z read at the
 *   start (lambda/core/capture/poll.ts `POLL_HORIZON_SQL`). Every page before the start was bounded by a
 *   horizon ≤ Z (horizons of one margin do not go back), so it read values < Z: positions ≤ (H, 0).
 *   A change no chunk saw committed after the horizon was read, so its transaction was open then or
 *   began later: its value is ≥ Z, its position ≥ (H + 1, 0).
 * So every row the run reads gets position (H, 0xffffffff) and wins over every position the sink
 * holds from before the start; the sweep that closes the run is a truncate at (H, 0xfffffffe), so
 * every key the sink holds from before and the run did not read (a row deleted at the source,
 * which polling never sees) becomes a tombstone; every change the run did not see is polled later
 * at (≥ H + 1, 0) and wins over both. The poller's cursor is not moved: rows it reads again sit at
 * their pages' positions, below or above the run's as the argument says; the run's read is the
 * cursor reset (it starts from an empty cursor of its own).
 */
import { CdcError } from '../shared/errors.ts';
import { pollColumnKind, type PollColumnKind } from './poll.ts';
import { formatLsn } from '../shared/position.ts';
import { assertSpace, pollSpace, recordedSpace, PositionSpaceMismatchError, type PositionSpace } from '../shared/position-space.ts';
import type { SnapshotTableShape } from '../snapshot/snapshot.ts';

/** What the snapshot worker needs besides chunks to snapshot a polled table (lambda/adapters/snapshot-postgres.ts). */
export interface PollSnapshotReader {
  /**
   * The run's bound H as decimal text (see above), read on the primary before any chunk: the
   * xmin of a snapshot taken now (`POLL_XMIN_SQL`), or the microsecond below the horizon read as a
   * poll page reads it (lambda/core/capture/poll.ts `POLL_CLOCK_SQL`, `POLL_HORIZON_SQL`; then
   * `HORIZON_MICROS_SQL` and `horizonBound`), with the poller's margin.
   */
  pollBound(shape: SnapshotTableShape, pollColumn: string): Promise<string>;
}

/** The xmin of a snapshot taken now: every transaction below it has ended. */
export const POLL_XMIN_SQL = 'SELECT pg_snapshot_xmin(pg_current_snapshot())::text AS h';

/** The horizon's microseconds since the epoch (`$1` the horizon text), the poll page's position number of a value at it. */
export const HORIZON_MICROS_SQL = 'SELECT floor(extract(epoch FROM $1::timestamptz) * 1000000)::bigint::text AS us';

/** H of a timestamp-polled run from the horizon's microseconds: the one below it. A horizon of `-infinity` (a prepared transaction) gives none: the run waits. */
export function horizonBound(table: string, horizon: string, micros: string | null): string {
  if (horizon === '-infinity' || micros === null)
    throw new CdcError(
      'POLL_HORIZON_HELD',
      `${table}: a prepared transaction holds the poll horizon at -infinity; the re-snapshot of a polled table takes its bound from the horizon and starts once it is resolved (docs/polling.md)`,
    );
  return (BigInt(micros) - 1n).toString();
}

/** The position-number expression of a poll column's value (a reconcile stable point compares the cursor's with it). */
export function positionNumber(kind: PollColumnKind, expr: string): string {
  return kind === 'timestamp' ? `floor(extract(epoch FROM ${expr}) * 1000000)::bigint` : `(${expr})::text::bigint`;
}

/** The run's watermark in the poll space from its bound H (`pollBound`): H + 1, so rows sit at (H, ffffffff). */
export function pollWatermark(bound: string): string {
  const h = BigInt(bound);
  if (h < 0n)
    throw new CdcError('POLL_TABLE_UNSUPPORTED', `the poll bound ${bound} is negative; positions of a polled table come from it and cannot be negative`);
  return formatLsn(h + 1n);
}

/**
 * The space a snapshot run of this table takes its positions in: the poll column's when the table
 * is configured polled, else `wal`. Refuses (`PositionSpaceMismatchError`) when the table is
 * recorded in another space (a polled table snapshotted without its poll column, a log table
 * configured polled, a poll column whose kind changed), or when the run already took its
 * watermark in another space.
 */
export function snapshotRunSpace(
  table: string,
  record: { capture?: 'log' | 'poll'; positionSpace?: PositionSpace } | null,
  shape: SnapshotTableShape,
  pollColumn: string | undefined,
  run: { positionSpace?: PositionSpace; firstLowWatermark: string | null },
): PositionSpace {
  const configured: PositionSpace = pollColumn === undefined ? 'wal' : pollSpace(pollColumnKind(shape, pollColumn));
  const recorded = recordedSpace(record, configured);
  if (recorded !== null) assertSpace(`snapshot of ${table} (recorded in the control plane)`, recorded, configured);
  const runSpace = run.positionSpace ?? (run.firstLowWatermark === null ? configured : 'wal');
  if (runSpace !== configured) throw new PositionSpaceMismatchError(`snapshot run of ${table} (its watermark is taken)`, configured, runSpace);
  return configured;
}
