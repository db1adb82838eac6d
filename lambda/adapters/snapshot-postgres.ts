/**
 * The snapshot reader on PostgreSQL (docs/snapshot.md): table shape from the catalog, a row
 * estimate from planner statistics, and one chunk per call with the visibility fence:
 *
 * 1. on the primary, in one short transaction: `pg_current_wal_insert_lsn()` (the low watermark
 *    L0), then `pg_current_xact_id()` (a transaction id X assigned after L0 was read); commit;
 * 2. on the read endpoint (the primary or a replica): wait until no transaction with an id ≤ X
 *    that may have written this database is still running (every transaction whose commit
 *    record precedes L0 is then visible) and, on a replica, until it has replayed past L0;
 * 3. read the chunk in a REPEATABLE READ READ ONLY transaction (its snapshot is taken by its
 *    first statement, after step 2): the keyset query from lambda/core/snapshot/snapshot.ts streamed as
 *    `COPY (…) TO STDOUT` (text format: each value its type's output text, the same text a
 *    SELECT returns), in the capture's canonical session settings.
 *
 * Never a lock stronger than the ACCESS SHARE of a plain SELECT; no transaction spans more than
 * one chunk. The source's pressure is measured apart (`PostgresPressureProbe`).
 */
import { HORIZON_MICROS_SQL, horizonBound, POLL_XMIN_SQL } from '../core/capture/poll-snapshot.ts';
import pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';
import {
  chunkCopyQuery,
  copyChunkRead,
  SnapshotFenceTimeoutError,
  SnapshotTableError,
  type ChunkRead,
  type KeyCursor,
  type SnapshotColumn,
  type SnapshotTableShape,
} from '../core/snapshot/snapshot.ts';
import { addedLatencyPct, PROBE_QUANTILE, quantile, type PressureReading } from '../core/snapshot/snapshot-pacer.ts';
import { CdcError } from '../core/shared/errors.ts';
import { quoteIdent, splitTableId } from '../core/shared/identifiers.ts';
import { PRIMARY_KEY_COLUMNS_SQL } from './source-facts-pg.ts';
import type { SnapshotReader } from '../core/snapshot/snapshot-worker.ts';
import {
  DEFAULT_POLL_HORIZON_MARGIN_S,
  POLL_CLOCK_SQL,
  POLL_HORIZON_SQL,
  PollHorizonPrivilegeError,
  pollColumnKind,
  pollQuery,
  type PollCursor,
  type PollPage,
  type PollReader,
} from '../core/capture/poll.ts';

/** Every column as PostgreSQL's output text (the poll page converts values itself, lambda/core/capture/poll.ts). */
const RAW_TEXT = { getTypeParser: () => (v: string) => v };

/** The capture's canonical session settings (local/capture.ts): the same text for the same value on both paths. */
export const CANONICAL_SESSION = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1";

export interface PostgresSnapshotReaderOptions {
  /** The primary (fence and catalog). */
  primary: pg.ClientConfig;
  /** A read replica to read chunks from. @default the primary */
  replica?: pg.ClientConfig;
  /** Give up a chunk after waiting this long for older transactions. @default 600000 (10 min) */
  fenceTimeoutMs?: number;
  /** @default 10 */
  fencePollMs?: number;
  /** Called with each fence commit's round trip as the client times it, ms (not a probe sample: docs/snapshot.md, "The budget"). */
  onProbe?: (ms: number) => void;
  applicationName?: string;
  /** How far below the server clock a timestamp poll page's horizon stays (docs/polling.md). @default 1000 */
  pollHorizonMarginMs?: number;
}

/**
 * Runs a multi-statement simple query (`BEGIN; SELECT …; …`: one round trip, the statements in
 * order) and returns the result of each statement after the first, in order.
 */
async function multi<R extends object[]>(c: pg.Client, text: string): Promise<{ [K in keyof R]: pg.QueryResult<R[K] & pg.QueryResultRow> }> {
  const results = (await c.query(text)) as unknown as pg.QueryResult[];
  if (!Array.isArray(results)) throw new Error(`expected one result per statement of a multi-statement query, got one result`);
  return results.slice(1) as never;
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export class PostgresSnapshotReader implements SnapshotReader, PollReader {
  private primary: pg.Client | null = null;
  private replica: pg.Client | null = null;

  constructor(private readonly o: PostgresSnapshotReaderOptions) {}

  private async connect(config: pg.ClientConfig, role: string): Promise<pg.Client> {
    const c = new pg.Client({ ...config, application_name: this.o.applicationName ?? `cdc-snapshot-${role}` });
    c.on('error', () => undefined); // a dead connection surfaces on the next query, which is retried with a new one
    await c.connect();
    await c.query(CANONICAL_SESSION);
    return c;
  }

  private async clients(): Promise<{ primary: pg.Client; read: pg.Client }> {
    this.primary ??= await this.connect(this.o.primary, 'primary');
    if (this.o.replica) this.replica ??= await this.connect(this.o.replica, 'replica');
    return { primary: this.primary, read: this.replica ?? this.primary };
  }

  /** Drops the connections (after an error, so the next call reconnects). */
  async close(): Promise<void> {
    const cs = [this.primary, this.replica];
    this.primary = null;
    this.replica = null;
    await Promise.all(cs.map((c) => c?.end().catch(() => undefined)));
  }

  async describe(tableId: string): Promise<SnapshotTableShape> {
    const { primary } = await this.clients();
    const { schema, table } = splitTableId(tableId);
    const cols = await primary.query<{ name: string; type: string; full_type: string; oid: number }>(
      `SELECT a.attname AS name, format_type(a.atttypid, NULL) AS type, format_type(a.atttypid, a.atttypmod) AS full_type, a.atttypid::int AS oid
         FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> 'v' ORDER BY a.attnum`,
      [schema, table],
    );
    if (cols.rows.length === 0) throw new SnapshotTableError(tableId, 'does not exist in the source');
    const key = await primary.query<{ name: string }>(PRIMARY_KEY_COLUMNS_SQL, [schema, table]);
    if (key.rows.length === 0) throw new SnapshotTableError(tableId, 'has no primary key; a snapshot reads in primary-key order');
    const columns: SnapshotColumn[] = cols.rows.map((r) => ({ name: r.name, type: r.type, typeOid: Number(r.oid), fullType: r.full_type }));
    return { table: tableId, columns, key: key.rows.map((r) => r.name) };
  }

  async estimateRows(tableId: string): Promise<number> {
    const { primary } = await this.clients();
    const { schema, table } = splitTableId(tableId);
    const r = await primary.query<{ reltuples: string; relpages: string }>(
      `SELECT c.reltuples::bigint::text AS reltuples, c.relpages::text AS relpages FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`,
      [schema, table],
    );
    const row = r.rows[0];
    if (!row) throw new SnapshotTableError(tableId, 'does not exist in the source');
    const tuples = Number(row.reltuples);
    if (tuples >= 0 && Number(row.relpages) > 0) return tuples;
    // Never analysed: count, unless the table is large (then the estimate grows as rows are read).
    if (Number(row.relpages) > 10_000) return 0;
    const n = await primary.query<{ n: string }>(`SELECT count(*)::text AS n FROM ${quoteIdent(schema)}.${quoteIdent(table)}`);
    return Number(n.rows[0]!.n);
  }

  /**
   * One page of a polled table (docs/polling.md, lambda/core/capture/poll.ts): the rows after the cursor in
   * (poll column, key) order and below the page's bound, read in one `REPEATABLE READ READ ONLY`
   * transaction from the read endpoint, values as their output text. A timestamp column's horizon
   * is read on the primary first (`POLL_CLOCK_SQL`, then `POLL_HORIZON_SQL`, each its own
   * transaction) and, on a replica, the page waits until it has replayed the primary's WAL as of
   * then (every transaction the horizon no longer counts is visible). A transaction-id column is
   * bounded inside the page's own snapshot. No fence: a polled table has no log to stitch with.
   */
  async readPollPage(shape: SnapshotTableShape, pollColumn: string, cursor: PollCursor | null, limit: number): Promise<PollPage> {
    const horizon = pollColumnKind(shape, pollColumn) === 'timestamp' ? await this.pollHorizon(shape.table) : null;
    const { read } = await this.clients();
    const q = pollQuery(shape, pollColumn, cursor, limit, horizon);
    const t0 = performance.now();
    await read.query('BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY');
    try {
      const rows = await read.query({ text: q.text, values: q.values, rowMode: 'array', types: RAW_TEXT });
      await read.query('COMMIT');
      return { rows: rows.rows as (string | null)[][], readMs: performance.now() - t0, ...(horizon !== null ? { horizon } : {}) };
    } catch (e) {
      await read.query('ROLLBACK').catch(() => undefined);
      throw e;
    }
  }

  /** The horizon of a timestamp page (lambda/core/capture/poll.ts `POLL_HORIZON_SQL`); refuses without the privilege to see open transactions. */
  private async pollHorizon(table: string): Promise<string> {
    const { primary } = await this.clients();
    const clock = (await primary.query<{ clock: string; role: string; privileged: boolean }>(POLL_CLOCK_SQL)).rows[0]!;
    if (!clock.privileged) throw new PollHorizonPrivilegeError(table, clock.role);
    const margin = (this.o.pollHorizonMarginMs ?? DEFAULT_POLL_HORIZON_MARGIN_S * 1000) / 1000;
    const horizon = (await primary.query<{ horizon: string }>(POLL_HORIZON_SQL, [clock.clock, margin])).rows[0]!.horizon;
    if (this.o.replica) {
      const lsn = (await primary.query<{ lsn: string }>('SELECT pg_current_wal_insert_lsn()::text AS lsn')).rows[0]!.lsn;
      await this.awaitReplay(table, lsn);
    }
    return horizon;
  }

  /** Waits until the read endpoint has replayed the primary's WAL up to `lsn` (immediate on the primary). */
  private async awaitReplay(table: string, lsn: string): Promise<void> {
    const { read } = await this.clients();
    const t0 = Date.now();
    const timeout = this.o.fenceTimeoutMs ?? 600_000;
    for (;;) {
      const r = await read.query<{ replayed: boolean }>('SELECT (NOT pg_is_in_recovery() OR pg_last_wal_replay_lsn() >= $1::pg_lsn) AS replayed', [lsn]);
      if (r.rows[0]!.replayed) return;
      if (Date.now() - t0 > timeout)
        throw new CdcError(
          'POLL_REPLICA_BEHIND',
          `${table}: the read replica did not replay the primary's WAL up to ${lsn} within ${Math.round(timeout / 1000)} s; a poll page is not read from a replica that is behind its horizon (docs/polling.md)`,
        );
      await sleep(this.o.fencePollMs ?? 10);
    }
  }

  /**
   * A polled table's re-snapshot bound H (lambda/core/capture/poll-snapshot.ts `PollSnapshotReader`), read
   * on the primary before the run's first chunk: a transaction-id column's is the xmin of a
   * snapshot taken now; a timestamp column's the microsecond below the horizon, read exactly as a
   * poll page reads it (same margin, same privilege check).
   */
  async pollBound(shape: SnapshotTableShape, pollColumn: string): Promise<string> {
    const { primary } = await this.clients();
    if (pollColumnKind(shape, pollColumn) === 'xid') return (await primary.query<{ h: string }>(POLL_XMIN_SQL)).rows[0]!.h;
    const horizon = await this.pollHorizon(shape.table);
    const micros = horizon === '-infinity' ? null : (await primary.query<{ us: string }>(HORIZON_MICROS_SQL, [horizon])).rows[0]!.us;
    return horizonBound(shape.table, horizon, micros);
  }

  /**
   * Step 1 of the fence: L0 then X, in one committed transaction, sent as one multi-statement
   * query (one round trip; the server runs the statements in order, so L0 is read before X is
   * assigned). Its round trip goes to `onProbe`; it is not a pressure sample (it writes no WAL
   * before its commit, so the commit does not wait for a flush, and the client times it).
   */
  async fence(): Promise<{ lowWatermark: string; xid: string }> {
    const { primary } = await this.clients();
    const t0 = performance.now();
    try {
      const [l0, x] = await multi<[{ l0: string }, { x: string }]>(
        primary,
        'BEGIN; SELECT pg_current_wal_insert_lsn()::text AS l0; SELECT pg_current_xact_id()::text AS x; COMMIT',
      );
      this.o.onProbe?.(performance.now() - t0);
      return { lowWatermark: l0.rows[0]!.l0, xid: x.rows[0]!.x };
    } catch (e) {
      await primary.query('ROLLBACK').catch(() => undefined);
      throw e;
    }
  }

  /**
   * Step 2: waits until every transaction with an id ≤ `xid` that could have written this
   * database has finished (and a replica has replayed past L0). After the fence's commit every
   * still-running id ≤ X is in the xip list of a fresh `pg_current_snapshot()`; an id whose
   * backend is connected to another database cannot have changed a table of this one, so it is
   * not waited for (the embedded `cdc local` keeps source and warehouse in one server). An id
   * without a visible backend (another user's session without pg_read_all_stats, a prepared
   * transaction) is waited for.
   */
  async awaitFence(table: string, fence: { lowWatermark: string; xid: string }): Promise<number> {
    const { read } = await this.clients();
    const t0 = Date.now();
    const timeout = this.o.fenceTimeoutMs ?? 600_000;
    for (;;) {
      const r = await read.query<{ waiting: number; oldest: string | null; replayed: boolean }>(
        `SELECT count(*)::int AS waiting, min(x)::text AS oldest,
                (NOT pg_is_in_recovery() OR pg_last_wal_replay_lsn() >= $2::pg_lsn) AS replayed
           FROM (SELECT x FROM pg_snapshot_xip(pg_current_snapshot()) AS x
                  WHERE x <= $1::xid8
                    AND x::xid NOT IN (SELECT backend_xid FROM pg_stat_activity
                                        WHERE backend_xid IS NOT NULL AND datid IS DISTINCT FROM (SELECT oid FROM pg_database WHERE datname = current_database()))) AS running`,
        [fence.xid, fence.lowWatermark],
      );
      const row = r.rows[0]!;
      if (row.waiting === 0 && row.replayed) return Date.now() - t0;
      if (Date.now() - t0 > timeout) throw new SnapshotFenceTimeoutError(table, row.oldest, Date.now() - t0);
      await sleep(this.o.fencePollMs ?? 10);
    }
  }

  async readChunk(shape: SnapshotTableShape, startAfter: KeyCursor | null, limit: number): Promise<ChunkRead> {
    const f = await this.fence();
    const fenceWaitMs = await this.awaitFence(shape.table, f);
    const { read } = await this.clients();
    const sql = chunkCopyQuery(shape, startAfter, limit);
    const t0 = performance.now();
    try {
      // The transaction's snapshot is taken by its first statement: the SELECT, after the fence
      // (BEGIN and it go in one round trip).
      const [at] = await multi<[{ at: string; replica: boolean; replay: string | null; lag: string | null }]>(
        read,
        `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;
         SELECT to_char(statement_timestamp() AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS at, pg_is_in_recovery() AS replica,
                pg_last_wal_replay_lsn()::text AS replay,
                CASE WHEN pg_is_in_recovery() THEN round(extract(epoch FROM now() - pg_last_xact_replay_timestamp()) * 1000)::text END AS lag`,
      );
      const opened = performance.now();
      const parts: Buffer[] = [];
      for await (const part of read.query(copyTo(sql))) parts.push(part as Buffer);
      const copied = performance.now();
      await read.query('COMMIT');
      const done = performance.now();
      // The rows stay COPY text: the worker packs them from it in one pass (lambda/core/snapshot/snapshot.ts, `packChunkRecords`).
      return copyChunkRead(
        {
          lowWatermark: f.lowWatermark,
          fenceXid: f.xid,
          readAt: at.rows[0]!.at,
          fenceWaitMs,
          readMs: done - t0,
          roundTripMs: chunkRoundTripMs(opened - t0, copied - opened, done - copied),
          fromReplica: Boolean(at.rows[0]!.replica),
          replayLsn: at.rows[0]!.replica ? at.rows[0]!.replay : null,
          replicaLagMs: at.rows[0]!.replica && at.rows[0]!.lag !== null ? Math.max(0, Number(at.rows[0]!.lag)) : null,
        },
        Buffer.concat(parts).toString('utf8'),
        shape.columns.length,
        `${shape.table} chunk`,
      );
    } catch (e) {
      await read.query('ROLLBACK').catch(() => undefined);
      throw e;
    }
  }
}

/**
 * The part of a chunk read that does not grow with its rows, ms: its three round trips (BEGIN with
 * the first SELECT, the COPY, COMMIT). The first and the last carry almost nothing, so their
 * client-timed durations are round trips; the COPY's is counted as the shorter of the two (at
 * most the COPY's whole time).
 */
export function chunkRoundTripMs(openMs: number, copyMs: number, commitMs: number): number {
  return openMs + commitMs + Math.min(openMs, commitMs, copyMs);
}

/**
 * The probe write, timed by the server's own clock (docs/snapshot.md, "The budget"): one simple
 * query of several statements, which the server parses at once and then runs back to back
 * without waiting for the client, so the interval between the two `clock_timestamp()` readings
 * is the transaction and nothing of the client: not the network, not a client process starved
 * of CPU, not its event loop busy packing a chunk.
 *
 * The transaction must flush WAL at commit the way the source's own writes do: one that only
 * takes a transaction id writes no WAL before its commit record and commits without waiting for
 * the flush. An ACCESS EXCLUSIVE lock on the probe session's own temporary table (no other
 * session can see it) writes a lock record for hot standbys (every source runs `wal_level =
 * logical`), so the commit waits for the flush (and for synchronous standbys, group commit),
 * while no table of the source is touched and logical decoding sees an empty transaction.
 */
export const SERVER_TIMED_PROBE_SQL =
  'SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text AS t0; ' +
  'BEGIN; LOCK TABLE pg_temp.cdc_pressure_probe IN ACCESS EXCLUSIVE MODE; COMMIT; ' +
  'SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint::text AS t1';

/** The session's probe table, created once per connection (a temporary table: dropped with the session). */
const PROBE_TABLE_SQL = 'CREATE TEMPORARY TABLE IF NOT EXISTS cdc_pressure_probe ()';
const probeReady = new WeakSet<pg.Client>();

/** The server-side duration (ms) of one `SERVER_TIMED_PROBE_SQL` run on `c`. */
export async function serverTimedProbe(c: pg.Client): Promise<number> {
  if (!probeReady.has(c)) {
    await c.query(PROBE_TABLE_SQL);
    probeReady.add(c);
  }
  let results: pg.QueryResult[];
  try {
    results = (await c.query(SERVER_TIMED_PROBE_SQL)) as unknown as pg.QueryResult[];
  } catch (e) {
    await c.query('ROLLBACK').catch(() => undefined);
    throw e;
  }
  if (!Array.isArray(results) || results.length !== 5)
    throw new Error(`the pressure probe expected 5 results (one per statement), got ${Array.isArray(results) ? results.length : 1}`);
  const t0 = BigInt((results[0]!.rows[0] as { t0: string }).t0);
  const t1 = BigInt((results[4]!.rows[0] as { t1: string }).t1);
  return Number(t1 - t0) / 1000;
}

/**
 * Source pressure on PostgreSQL: the latency of recent probe writes, each timed by the server's
 * clock (`serverTimedProbe`), against a baseline taken before the snapshot, compared at
 * `PROBE_QUANTILE` (`addedLatencyPct`, lambda/core/snapshot/snapshot-pacer.ts), plus the number of
 * active sessions. CPU is not visible from SQL: locally `addedCpuPct` is null (on AWS the
 * CloudWatch probe supplies it).
 */
export class PostgresPressureProbe {
  private baseline: number[] = [];
  private readonly recent: number[] = [];

  constructor(
    private readonly client: () => Promise<pg.Client>,
    private readonly window = 50,
  ) {}

  /** One probe write: a committed transaction that flushes WAL, timed by the server (`SERVER_TIMED_PROBE_SQL`). */
  private probeOnce(c: pg.Client): Promise<number> {
    return serverTimedProbe(c);
  }

  /** Takes the baseline: `samples` probe writes before the snapshot starts. Returns its `PROBE_QUANTILE`, ms. */
  async calibrate(samples = 30): Promise<number> {
    const c = await this.client();
    const xs: number[] = [];
    for (let i = 0; i < samples; i++) xs.push(await this.probeOnce(c));
    this.baseline = xs;
    return quantile(xs, PROBE_QUANTILE);
  }

  /** Adds a probe sample measured elsewhere, ms (server-timed, like the probe's own). */
  sample(ms: number): void {
    this.recent.push(ms);
    while (this.recent.length > this.window) this.recent.shift();
  }

  async read(extraProbes = 2): Promise<PressureReading> {
    const c = await this.client();
    for (let i = 0; i < extraProbes; i++) this.sample(await this.probeOnce(c));
    const active = await c.query<{ n: string }>(
      `SELECT count(*)::text AS n FROM pg_stat_activity WHERE state = 'active' AND pid <> pg_backend_pid() AND backend_type = 'client backend'`,
    );
    return { addedWriteLatencyPct: addedLatencyPct(this.baseline, this.recent), addedCpuPct: null, activeSessions: Number(active.rows[0]!.n) - 1 };
  }
}

/** The pressure probe over a session of its own to the primary, opened on first use and kept (one per execution environment). */
export function pressureProbeOver(primary: pg.ClientConfig): PostgresPressureProbe {
  let probeClient: pg.Client | null = null;
  return new PostgresPressureProbe(async () => {
    if (!probeClient) {
      probeClient = new pg.Client(primary);
      await probeClient.connect();
    }
    return probeClient;
  });
}

/** A session to the primary for catalog reads, opened on first use and kept until it fails (then opened again). */
export function lazyCatalogSession(primary: pg.ClientConfig): () => Promise<pg.Client> {
  let catalogClient: pg.Client | null = null;
  return async (): Promise<pg.Client> => {
    if (!catalogClient) {
      const c = new pg.Client(primary);
      c.on('error', () => {
        catalogClient = null;
      });
      await c.connect();
      catalogClient = c;
    }
    return catalogClient;
  };
}
