/**
 * The (re-)snapshot of a polled table, in its poll space (docs/polling.md "Re-snapshot of a polled
 * table", docs/architecture.md §5.2). Pure logic: which space a run takes its positions in, the
 * query for the highest poll position the table ever had, and the run's watermark in that space.
 *
 * A log-captured table's snapshot stitches with the log (lambda/core/snapshot.ts): its rows sit
 * just below the low watermark's LSN. A polled table has no log: its rows' positions come from its
 * poll column, and every later change of a row has a higher poll value than any value the table
 * holds when the run starts (the poll column's contract, docs/polling.md). So the run takes
 * H = max(highest poll position of the table's rows, the poller's cursor) once, when it starts, and
 * uses the poll watermark H + 1 where the log run uses its first low watermark:
 * - every row the run reads gets position (H, 0xffffffff): above every position the sink holds
 *   for the table (each came from a poll value ≤ H), below every later polled change (> H);
 * - the sweep that closes the run is a truncate at (H, 0xfffffffe): every key the sink still holds
 *   from before the run and the run did not read (a row deleted at the source, which polling never
 *   sees) becomes a tombstone; every key the run read, and every later polled change, is above it;
 * - a row the poller skipped (its value committed behind the cursor) is read by the run with its
 *   current value and wins over the stale one.
 * The poller's own cursor is not moved: rows it reads again up to H sit below the sweep and change
 * nothing; the run's read is the cursor reset (it starts from an empty cursor of its own).
 */
import { CdcError } from './errors.ts';
import { quoteIdent, splitTableId } from './identifiers.ts';
import { pollColumnKind, type PollCursor } from './poll.ts';
import { formatLsn } from './position.ts';
import { assertSpace, pollSpace, recordedSpace, PositionSpaceMismatchError, type PositionSpace } from './position-space.ts';
import type { SnapshotTableShape } from './snapshot.ts';

/** What the snapshot worker needs besides chunks to snapshot a polled table (lambda/adapters/snapshot-postgres.ts). */
export interface PollSnapshotReader {
  /**
   * The highest poll position number (`pollQuery`'s `pos`: a version, or epoch microseconds) of
   * the table's rows and of `cursorValue` (the poller's cursor's poll value, null: none), as
   * decimal text, or null when there is neither.
   */
  pollHighest(shape: SnapshotTableShape, pollColumn: string, cursorValue: string | null): Promise<string | null>;
}

/** The position-number expression of a poll column of this kind (the same as `pollQuery`'s). */
export function positionNumber(kind: 'version' | 'timestamp', expr: string): string {
  return kind === 'timestamp' ? `floor(extract(epoch FROM ${expr}) * 1000000)::bigint` : `(${expr})::bigint`;
}

/** The query behind `PollSnapshotReader.pollHighest`: one row, column `h` (text or null); parameter $1 the cursor value or null. */
export function pollHighestQuery(shape: SnapshotTableShape, pollColumn: string, cursorValue: string | null): { text: string; values: (string | null)[] } {
  const kind = pollColumnKind(shape, pollColumn);
  const col = shape.columns.find((c) => c.name === pollColumn)!;
  const { schema, table } = splitTableId(shape.table);
  const rows = `(SELECT max(${positionNumber(kind, quoteIdent(pollColumn))}) FROM ${quoteIdent(schema)}.${quoteIdent(table)})`;
  // The cursor is the column's output text: cast back through the column's type (without modifier).
  const cursor = positionNumber(kind, `$1::text::${col.type}`);
  return { text: `SELECT greatest(${rows}, ${cursor})::text AS h`, values: [cursorValue] };
}

/** The run's watermark in the poll space from the highest poll position number (`pollHighest`). */
export function pollWatermark(highest: string | null): string {
  const h = highest === null ? 0n : BigInt(highest);
  if (h < 0n) throw new CdcError('POLL_TABLE_UNSUPPORTED', `the highest poll value ${highest} is negative; positions of a polled table come from it and cannot be negative`);
  return formatLsn(h + 1n);
}

/** The poll value of a poller's cursor (its first element), or null. */
export function cursorPollValue(cursor: PollCursor | null): string | null {
  return cursor?.[0] ?? null;
}

/**
 * The space a snapshot run of this table takes its positions in: the poll column's when the table
 * is configured polled, else `wal`. Refuses (`PositionSpaceMismatchError`) when the table is
 * recorded in another space (a polled table snapshotted without its poll column, a log table
 * configured polled, a poll column whose kind changed), or when the run already took its
 * watermark in another space.
 */
export function snapshotRunSpace(table: string, record: { capture?: 'log' | 'poll'; positionSpace?: PositionSpace } | null, shape: SnapshotTableShape, pollColumn: string | undefined, run: { positionSpace?: PositionSpace; firstLowWatermark: string | null }): PositionSpace {
  const configured: PositionSpace = pollColumn === undefined ? 'wal' : pollSpace(pollColumnKind(shape, pollColumn));
  const recorded = recordedSpace(record, configured);
  if (recorded !== null) assertSpace(`snapshot of ${table} (recorded in the control plane)`, recorded, configured);
  const runSpace = run.positionSpace ?? (run.firstLowWatermark === null ? configured : 'wal');
  if (runSpace !== configured) throw new PositionSpaceMismatchError(`snapshot run of ${table} (its watermark is taken)`, configured, runSpace);
  return configured;
}
