/**
 * The polling fallback (docs/polling.md): capture for a table without log access, by reading it in
 * (poll column, primary key) order past a cursor. Pure logic: the page query, the position and
 * commit time of a polled row, the raw records, and one pass over the polled tables through
 * injected ports (reader, publish, cursor store, the snapshot worker's pacer).
 *
 * What polling can and cannot see (docs/architecture.md, "Capture methods", and why it is only a fallback):
 * - a polled row is the row's current state when it was read: an `update` with every column
 *   (`capture: "poll"`, no transaction id, no before image). Intermediate versions between two
 *   reads are not seen;
 * - **deletes are not observable**: a deleted row is simply not returned again. The table record
 *   carries `capture: 'poll'` and status says "deletes not observable" (close the gap in the source
 *   schema with a soft-delete column);
 * - ordering is the poll column's, not the log's: the position of a polled row is derived from its
 *   poll column (microseconds since the epoch for a timestamp) or, for a transaction-id column,
 *   from the reading snapshot's xmin; either way a later version of a row has a higher position
 *   (docs/polling.md). Positions of a polled table are not comparable with the log positions of
 *   other tables; sinks only compare positions per key (invariant 2), which is what they need.
 *
 * Never a gap (docs/polling.md "What each mode guarantees"): a page never reads past a value that a
 * transaction still open on the source could yet commit. A timestamp page is bounded by the
 * **horizon** (`POLL_HORIZON_SQL`: below the start of every open transaction, read before the
 * page's snapshot); a transaction-id page by its own snapshot's xmin. An integer version column
 * cannot be bounded (a sequence value says nothing about when its transaction commits) and is
 * refused with the safe alternatives.
 *
 * A pass reads each polled table page by page; each page's size and pauses come from the
 * snapshot worker's pacer (`AdaptivePacer`, lambda/core/snapshot/snapshot-pacer.ts) against the same source
 * budget. Per page: read → publish every record and wait until the stream accepted them → store the
 * cursor after the page. A crash before the cursor is stored reads the page again (the same rows at
 * the same positions, or newer ones: harmless to every sink).
 */
import { CdcError } from '../shared/errors.ts';
import { quoteIdent, splitTableId } from '../shared/identifiers.ts';
import type { ColumnRules } from '../tables/masking.ts';
import { formatLsn, makePosition, type Position } from '../shared/position.ts';
import { assertSpace, pollSpace, type PollColumnKind, type PositionSpace } from '../shared/position-space.ts';
import type { Pacer, PressureReading } from '../snapshot/snapshot-pacer.ts';
import { rowToColumns, ruleColumns, type SnapshotTableShape } from '../snapshot/snapshot.ts';
import { buildSlotRecord, validateSlotRecord, type SlotRecord } from './slot-record.ts';

/** A table that cannot be polled as configured (no such poll column, an unsupported type). */
export class PollTableError extends CdcError {
  constructor(
    readonly table: string,
    reason: string,
  ) {
    super('POLL_TABLE_UNSUPPORTED', `${table}: ${reason}`);
  }
}

/** The message status and docs give for every polled table. */
export const POLL_DELETES_INVISIBLE = 'deletes not observable (polled table: a deleted row is not seen; use a soft-delete column in the source)';

/** Type names (`format_type`) of the poll columns each kind accepts. */
const TIMESTAMP_TYPES = new Set(['timestamp with time zone', 'timestamp without time zone']);
const XID_TYPES = new Set(['xid8']);
const INTEGER_TYPES = new Set(['smallint', 'integer', 'bigint']);

export type { PollColumnKind } from '../shared/position-space.ts';

/** Why an integer version column is refused, with the safe alternatives (docs/polling.md). */
export const POLL_VERSION_REFUSED =
  'an integer version (a sequence value) is taken before its transaction commits, and nothing bounds it: a transaction that took a lower value and commits after a page read past a higher one would be skipped for good. ' +
  'Poll by a timestamptz modified-at column set by the server clock (a BEFORE INSERT OR UPDATE trigger with clock_timestamp()), or by a transaction-id column (xid8, set by a trigger to pg_current_xact_id()), or capture the table from the log (docs/polling.md)';

/** The kind of a poll column of type `type` (`format_type` text), or a `PollTableError` naming why it cannot order `table` without a gap. */
export function pollColumnKindOf(table: string, column: string, type: string): PollColumnKind {
  if (TIMESTAMP_TYPES.has(type)) return 'timestamp';
  if (XID_TYPES.has(type)) return 'xid';
  if (INTEGER_TYPES.has(type)) throw new PollTableError(table, `poll column ${column} is ${type}: ${POLL_VERSION_REFUSED}`);
  throw new PollTableError(
    table,
    `poll column ${column} is ${type}; a modified-at column must be a timestamp or timestamptz, a transaction-id column xid8 (docs/polling.md)`,
  );
}

/** The poll column's kind, or a `PollTableError` naming why it cannot order the table. */
export function pollColumnKind(shape: SnapshotTableShape, pollColumn: string): PollColumnKind {
  const c = shape.columns.find((x) => x.name === pollColumn);
  if (!c) throw new PollTableError(shape.table, `has no column ${JSON.stringify(pollColumn)} to poll by`);
  return pollColumnKindOf(shape.table, pollColumn, c.type);
}

/**
 * A timestamp-polled page cannot be bounded: the reading role may not see other sessions'
 * transaction starts (`pg_stat_activity.xact_start`), so polling refuses to start (docs/polling.md).
 */
export class PollHorizonPrivilegeError extends CdcError {
  constructor(
    readonly table: string,
    readonly role: string,
  ) {
    super(
      'POLL_HORIZON_PRIVILEGE',
      `${table}: role ${JSON.stringify(role)} may not see other sessions' open transactions (pg_stat_activity.xact_start), so a timestamp poll page cannot be bounded below them and polling refuses to start; GRANT pg_read_all_stats TO ${JSON.stringify(role)}; (docs/polling.md)`,
    );
  }
}

/**
 * The horizon of a timestamp-polled page, in two statements run in order on the primary, each in
 * its own transaction, before the page's snapshot (docs/polling.md "Timestamp columns"):
 *
 * 1. `POLL_CLOCK_SQL`: the server clock `c`, and whether this role may see every session's
 *    `xact_start` (superuser or `pg_read_all_stats`);
 * 2. `POLL_HORIZON_SQL` with `$1 = c`, `$2 = margin (seconds)`: `least(c - margin, min(xact_start))`
 *    over the database's other open transactions (autovacuum's excepted: it writes no row), or
 *    `-infinity` while a prepared transaction of the database exists (its start is unknown).
 *
 * Every transaction open at step 2 is counted (its start is ≥ the horizon); every one not yet open
 * starts after `c`; a value a transaction writes from the server clock (`now()`,
 * `statement_timestamp()`, `clock_timestamp()`) is at or after its start. So no row that commits
 * after the page's snapshot can carry a poll value below the horizon, and the page reads only
 * below it. Read in one statement, the clock could be taken after the activity: hence two. The
 * margin covers the instant between a transaction taking its start time and publishing it.
 */
export const POLL_CLOCK_SQL = `SELECT clock_timestamp()::text AS clock, current_user::text AS role, pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS privileged`;
export const POLL_HORIZON_SQL = `SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_prepared_xacts WHERE database = current_database()) THEN '-infinity'::timestamptz
            ELSE least($1::timestamptz - make_interval(secs => $2::float8), min(a.xact_start)) END::text AS horizon
       FROM pg_stat_activity a
      WHERE a.datid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND a.pid <> pg_backend_pid() AND a.xact_start IS NOT NULL
        AND a.backend_type NOT IN ('autovacuum worker', 'autovacuum launcher')`;

/** Margin below the server clock a horizon keeps (`POLL_CLOCK_SQL`), seconds. */
export const DEFAULT_POLL_HORIZON_MARGIN_S = 1;

/** The cursor after a page: the poll column's text, then the key values' texts (as PostgreSQL printed them). */
export type PollCursor = string[];

/**
 * The page query: rows whose (poll column, key) is after the cursor and below the page's bound, in
 * that order, at most `limit`. The bound: for a timestamp column the `horizon` (`POLL_HORIZON_SQL`,
 * read before this query's transaction; `$1`), for a transaction-id column the xmin of the query's
 * own snapshot (every transaction below it has ended, docs/polling.md). Rows whose poll column is
 * NULL are never read. Besides the table's columns it selects the row's position number (`pos`:
 * epoch microseconds of a timestamp, the snapshot's xmin for a transaction id) and commit time
 * (`ts`: the poll column in ISO-8601 UTC for a timestamp, the read time for a transaction id).
 */
export function pollQuery(
  shape: SnapshotTableShape,
  pollColumn: string,
  cursor: PollCursor | null,
  limit: number,
  horizon: string | null = null,
): { text: string; values: string[] } {
  if (shape.key.length === 0) throw new PollTableError(shape.table, 'has no primary key; a polled table is read in (poll column, key) order');
  if (!Number.isInteger(limit) || limit < 1) throw new CdcError('INVALID_ARGUMENT', `page limit must be a positive integer, got ${limit}`);
  const kind = pollColumnKind(shape, pollColumn);
  if (kind === 'timestamp' && horizon === null)
    throw new CdcError('INVALID_ARGUMENT', `${shape.table}: a timestamp poll page needs its horizon (docs/polling.md)`);
  const order = [pollColumn, ...shape.key].map(quoteIdent);
  if (cursor !== null && cursor.length !== order.length)
    throw new CdcError('INVALID_ARGUMENT', `${shape.table}: poll cursor has ${cursor.length} values, expected ${order.length}`);
  const { schema, table } = splitTableId(shape.table);
  const pc = quoteIdent(pollColumn);
  const isTz = shape.columns.find((c) => c.name === pollColumn)!.type === 'timestamp with time zone';
  const xmin = 'pg_snapshot_xmin(pg_current_snapshot())';
  const pos = kind === 'timestamp' ? `floor(extract(epoch FROM ${pc}) * 1000000)::bigint::text` : `${xmin}::text`;
  const ts =
    kind === 'timestamp'
      ? `to_char(${isTz ? `${pc} AT TIME ZONE 'UTC'` : pc}, 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`
      : `to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"')`;
  // A `timestamp without time zone` is compared as UTC wall-clock time (docs/polling.md).
  const bound = kind === 'timestamp' ? `${pc} < ${isTz ? '$1::timestamptz' : "($1::timestamptz AT TIME ZONE 'UTC')"}` : `${pc} < ${xmin}`;
  const values = kind === 'timestamp' ? [horizon!] : [];
  const after = cursor === null ? '' : ` AND (${order.join(', ')}) > (${order.map((_, i) => `$${values.length + i + 1}`).join(', ')})`;
  return {
    // Output names of the two computed columns cannot clash with the table's (ORDER BY would be ambiguous).
    text: `SELECT ${shape.columns.map((c) => quoteIdent(c.name)).join(', ')}, ${pos} AS "?cdc_poll_position", ${ts} AS "?cdc_poll_time" FROM ${quoteIdent(schema)}.${quoteIdent(table)} WHERE ${pc} IS NOT NULL AND ${bound}${after} ORDER BY ${order.join(', ')} LIMIT ${limit}`,
    values: [...values, ...(cursor ?? [])],
  };
}

/** What one page read returned: each row the table's column texts, then `pos` and `ts` (see `pollQuery`). */
export interface PollPage {
  rows: (string | null)[][];
  /** Read time, ms. */
  readMs: number;
  /** The timestamp horizon the page was bounded by (a timestamp column; `-infinity` while a prepared transaction holds it). */
  horizon?: string;
}

/** The position of a polled row from its position number (epoch microseconds, or the reading snapshot's xmin). */
export function pollPosition(pos: string, table: string): Position {
  const n = BigInt(pos);
  if (n < 0n) throw new PollTableError(table, `poll column value ${pos} is negative; positions of a polled table come from it and cannot be negative`);
  return makePosition(n, 0);
}

/**
 * The raw records of a page (format `cdc-slot/1`, op `update`, `capture: "poll"`), masked and
 * excluded with the table's column rules by the snapshot path's own functions, so a value is the
 * same bytes as on the log and snapshot paths.
 */
export function pollRecords(sourceId: string, shape: SnapshotTableShape, page: Pick<PollPage, 'rows'>, rules: ColumnRules): SlotRecord[] {
  const n = shape.columns.length;
  return page.rows.map((r) => {
    const pos = r[n];
    const ts = r[n + 1];
    if (pos === null || pos === undefined || ts === null || ts === undefined)
      throw new CdcError('INTERNAL', `${shape.table}: a polled row without its position or time`);
    const position = pollPosition(pos, shape.table);
    const tx = { source: sourceId, xid: '0', commitLsn: formatLsn(BigInt(`0x${position.slice(0, 16)}`)), commitTs: ts };
    const record = buildSlotRecord(
      tx,
      0,
      { table: shape.table, op: 'update', columns: ruleColumns(rowToColumns(shape, r.slice(0, n)), rules), oldKey: null, unchanged: [] },
      shape.key,
    );
    return validateSlotRecord({ ...record, capture: 'poll' });
  });
}

/** The cursor after a page's last row, or the given one for an empty page. */
export function pollCursorAfter(shape: SnapshotTableShape, pollColumn: string, page: Pick<PollPage, 'rows'>, previous: PollCursor | null): PollCursor | null {
  const last = page.rows.at(-1);
  if (!last) return previous;
  const at = (name: string) => {
    const i = shape.columns.findIndex((c) => c.name === name);
    const v = last[i];
    if (v === null || v === undefined) throw new CdcError('INTERNAL', `${shape.table}: ${name} is null in a polled row`);
    return v;
  };
  return [at(pollColumn), ...shape.key.map(at)];
}

/** Reads pages of a polled table (lambda/adapters/snapshot-postgres.ts `PostgresSnapshotReader`). */
export interface PollReader {
  describe(table: string): Promise<SnapshotTableShape>;
  readPollPage(shape: SnapshotTableShape, pollColumn: string, cursor: PollCursor | null, limit: number): Promise<PollPage>;
}

/** Where a polled table's cursor is kept (the control plane's checkpoints, consumer `pollConsumer(source)`). */
export interface PollCursorStore {
  get(table: string): Promise<PollCursor | null>;
  put(table: string, cursor: PollCursor): Promise<void>;
}

/** The checkpoint consumer id of a source's poller (one definition with the constructs' IAM scope). */
export { pollConsumerId as pollConsumer } from '../../../contracts/control-plane-keys.ts';
import { pollConsumerId } from '../../../contracts/control-plane-keys.ts';

/** A cursor store over the control plane's checkpoints (one item per polled table). */
export function checkpointCursorStore(
  controlPlane: {
    getCheckpoint(consumer: string, shardId: string): Promise<string | null>;
    putCheckpoint(consumer: string, shardId: string, value: string): Promise<void>;
  },
  sourceId: string,
): PollCursorStore {
  const consumer = pollConsumerId(sourceId);
  return {
    async get(table) {
      const text = await controlPlane.getCheckpoint(consumer, table);
      if (text === null) return null;
      const v: unknown = JSON.parse(text);
      if (!Array.isArray(v) || v.some((x) => typeof x !== 'string'))
        throw new CdcError('INVALID_STATE', `poll cursor of ${sourceId}/${table} is not a list of texts: ${text}`);
      return v as string[];
    },
    put: (table, cursor) => controlPlane.putCheckpoint(consumer, table, JSON.stringify(cursor)),
  };
}

export interface PollPassOptions {
  source: string;
  tables: readonly { table: string; pollColumn: string; rules: ColumnRules }[];
  reader: PollReader;
  cursors: PollCursorStore;
  /** Publishes records in order and resolves when every one was accepted. */
  publish: (records: SlotRecord[]) => Promise<void>;
  /** The snapshot worker's pacer, one per table and pass (lambda/core/snapshot/snapshot-pacer.ts). */
  pacerFor: (table: string) => Pacer;
  pressure?: () => Promise<PressureReading | null>;
  shouldStop?: () => boolean;
  sleep?: (ms: number) => Promise<void>;
  /** Called after each page with the table's progress (status). */
  onPage?: (table: string, progress: PollProgress) => void;
  /**
   * The position space recorded for a table (its table record's, lambda/core/shared/position-space.ts),
   * null when none is recorded yet. A table recorded in another space than its poll column's kind
   * gives (a log-captured table now configured polled, a poll column whose kind changed) is not
   * read: `PositionSpaceMismatchError` (docs/architecture.md §5.2).
   */
  spaceOf?: (table: string) => Promise<PositionSpace | null>;
}

export interface PollProgress {
  rows: number;
  pages: number;
  cursor: PollCursor | null;
  throttle: 'full-speed' | 'slowed' | 'paused';
  /** The horizon of the last page (a timestamp column), as PostgreSQL printed it. */
  horizon?: string;
}

const defaultSleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** One pass over the polled tables: every table read up to its end (or until `shouldStop`). Returns rows read per table. */
export async function pollPass(o: PollPassOptions): Promise<Map<string, number>> {
  const sleep = o.sleep ?? defaultSleep;
  const out = new Map<string, number>();
  for (const t of o.tables) {
    if (o.shouldStop?.()) break;
    const shape = await o.reader.describe(t.table);
    const space = pollSpace(pollColumnKind(shape, t.pollColumn));
    const recorded = o.spaceOf ? await o.spaceOf(t.table) : null;
    if (recorded !== null) assertSpace(`polling ${o.source}/${t.table} by ${t.pollColumn} (recorded in the control plane)`, recorded, space);
    const pacer = o.pacerFor(t.table);
    let cursor = await o.cursors.get(t.table);
    const progress: PollProgress = { rows: 0, pages: 0, cursor, throttle: 'full-speed' };
    for (;;) {
      if (o.shouldStop?.()) break;
      const decision = pacer.next();
      if (decision.pauseMs > 0) await sleep(decision.pauseMs);
      const page = await o.reader.readPollPage(shape, t.pollColumn, cursor, decision.chunkSize);
      const records = pollRecords(o.source, shape, page, t.rules);
      if (records.length > 0) {
        await o.publish(records);
        cursor = pollCursorAfter(shape, t.pollColumn, page, cursor);
        await o.cursors.put(t.table, cursor!);
      }
      progress.rows += page.rows.length;
      progress.pages++;
      progress.cursor = cursor;
      progress.throttle = decision.state;
      if (page.horizon !== undefined) progress.horizon = page.horizon;
      o.onPage?.(t.table, { ...progress });
      if (page.rows.length < decision.chunkSize) break;
      pacer.record({ rows: page.rows.length, readMs: page.readMs, pressure: o.pressure ? await o.pressure() : null });
    }
    out.set(t.table, progress.rows);
  }
  return out;
}
