/**
 * Load requests: the rendezvous between a warehouse sink's appliers and its one loader function on
 * AWS (docs/warehouse-apply.md, "Redshift: the applier"). Pure: the request's shape, what an
 * applier waiting on it concludes, which claims are stale and where they go back to, and how the
 * claimed objects group into one manifest per table and column list.
 *
 * A request's life: `pending` (the applier staged its objects and wrote it) → `claimed` (the loader
 * took it, conditionally) → `loaded` (after the COMMIT of the load whose ledger names it) or
 * `failed` (with the reason). An applier that stops waiting marks its pending request `abandoned`.
 * The request is not a queue: losing it only delays a retry, because the applier's batch is not
 * acknowledged until the request says `loaded`.
 */
import { CdcError } from '../shared/errors.ts';
import type { RedshiftTable, TruncationRow } from './redshift-sql.ts';
import type { RedshiftCadence } from './redshift-load.ts';

export type LoadRequestState = 'pending' | 'claimed' | 'loaded' | 'failed' | 'abandoned';

/** One table's staged objects in a request: the objects hold its rows without a load id (`csvParts(null, …)`). */
export interface RequestTable {
  table: RedshiftTable;
  /** The schema version the columns are of (the loader keeps the newest it has seen per table, for its merges). */
  schemaVersion: number;
  /** Object keys in the staging bucket, each with its compressed length (the manifest's `content_length`). */
  objects: { key: string; bytes: number }[];
  rows: number;
  /** The table's truncates in the batch (a few small rows: carried in the request, inserted by the load; docs/truncate.md). */
  truncations?: TruncationRow[];
  /**
   * The table's held events (docs/primary-key-changes.md, "On Redshift"): objects of handover rows, COPYed into its
   * handover table. Present (maybe empty) when the applier made the table's handover table: the load completes held events.
   */
  held?: { objects: { key: string; bytes: number }[]; rows: number };
}

export interface LoadRequest {
  sinkId: string;
  /** Unique per request (a batch that is retried is staged again under a new one). */
  requestId: string;
  state: LoadRequestState;
  tables: RequestTable[];
  /** Epoch ms. */
  createdAt: number;
  /** Epoch ms after which the applier no longer waits (below its function's timeout): the loader leaves a pending request past it. */
  deadline: number;
  /** Epoch ms of the claim, and the invocation that claimed it. */
  claimedAt?: number;
  claimedBy?: string;
  /** The load that committed it. */
  loadId?: number;
  /** Why the load failed (for the apply's hold and dead-letter logic). */
  reason?: string;
  /** The SQLSTATE the warehouse failed the request's load with, alone (absent: no SQL error, e.g. the connection). */
  sqlState?: string;
  /** A request of several tables that failed alone: the table (`schema.view`, lower case) whose COPY failed on its own, if one did. */
  failedTable?: string;
}

/** What a waiting applier concludes from the request's item (null: it is gone). */
export type RequestVerdict =
  { kind: 'wait' } | { kind: 'loaded'; loadId: number } | { kind: 'failed'; reason: string; sqlState?: string; failedTable?: string };

export function requestVerdict(r: LoadRequest | null, now: number): RequestVerdict {
  if (r === null) return { kind: 'failed', reason: 'the load request is gone from the control plane' };
  if (r.state === 'loaded') return { kind: 'loaded', loadId: r.loadId ?? 0 };
  if (r.state === 'failed')
    return {
      kind: 'failed',
      reason: r.reason ?? 'the load failed',
      ...(r.sqlState ? { sqlState: r.sqlState } : {}),
      ...(r.failedTable ? { failedTable: r.failedTable } : {}),
    };
  if (r.state === 'abandoned') return { kind: 'failed', reason: 'the load request was abandoned' };
  if (now >= r.deadline) return { kind: 'failed', reason: `no load committed the request before its deadline (${new Date(r.deadline).toISOString()})` };
  return { kind: 'wait' };
}

/**
 * A load of a request that failed or was not made in time. Without a SQLSTATE the batch is
 * delivered again (and staged again); with one, the writer classifies it as the apply's hold and
 * dead-letter logic needs (`RedshiftWarehouse.classifyError`).
 */
export class LoadRequestFailedError extends CdcError {
  constructor(
    readonly requestId: string,
    readonly reason: string,
    readonly sqlState?: string,
    /** A request of several tables: the one whose COPY failed on its own (`schema.view`, lower case), if one did. */
    readonly failedTable?: string,
  ) {
    super('REDSHIFT_LOAD_FAILED', `load request ${requestId}: ${reason}${sqlState ? ` (SQLSTATE ${sqlState})` : ''}${failedTable ? ` in ${failedTable}` : ''}`);
  }
}

/**
 * A table of a batch whose load request failed because of another of its tables (`failedTable`):
 * nothing of the batch loaded; this table is delivered again (transient), the other is held or
 * isolated by its own error (docs/warehouse-apply.md, "Redshift: the applier").
 */
export class BatchPartnerFailedError extends CdcError {
  constructor(requestId: string, failedTable: string) {
    super('REDSHIFT_LOAD_FAILED', `load request ${requestId}: not loaded because ${failedTable}, loaded with it, failed; delivered again`);
  }
}

/** The id a request names a table by (`failedTable`): `schema.view`, lower case. */
export function requestTableId(r: RedshiftTable): string {
  return `${r.t.schema}.${r.t.view}`.toLowerCase();
}

/** The SQLSTATE of an error the warehouse raised (five digits or capitals), else undefined. */
export function sqlStateOf(err: unknown): string | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code) ? code : undefined;
}

/**
 * A claim is stale when the invocation that made it cannot be running any more: its claim is older
 * than the loader function's timeout. Only then may another invocation decide where it goes.
 */
export function staleClaim(r: LoadRequest, now: number, loaderTimeoutMs: number): boolean {
  return r.state === 'claimed' && (r.claimedAt ?? 0) + loaderTimeoutMs <= now;
}

/** Where a stale claim goes: `loaded` when the ledger names the request (its load committed), else back to `pending`. */
export function recoveredState(requestId: string, committed: ReadonlySet<string>): 'loaded' | 'pending' {
  return committed.has(requestId) ? 'loaded' : 'pending';
}

/** Whether the loader takes a pending request now: one whose applier still waits. */
export function claimable(r: LoadRequest, now: number): boolean {
  return r.state === 'pending' && r.deadline > now;
}

/** One COPY of a load: a table's objects of one column list, over all the claimed requests, and their truncates (no COPY when it has no objects). */
export interface CopyGroup {
  table: RedshiftTable;
  objects: { key: string; bytes: number }[];
  rows: number;
  truncations: TruncationRow[];
  /** Objects of held events (handover rows), and whether a request of the group says the table has its handover table. */
  held: { key: string; bytes: number }[];
  handover: boolean;
}

const columnsOf = (r: RedshiftTable): string => JSON.stringify([r.t.schema, r.t.view, r.hard, r.key, r.data]);

/** The claimed requests' objects grouped per table and column list (requests of two schema versions of a table are two COPYs), in first-seen order. */
export function copyGroups(requests: readonly LoadRequest[]): CopyGroup[] {
  const groups = new Map<string, CopyGroup>();
  for (const q of requests) {
    for (const t of q.tables) {
      const id = columnsOf(t.table);
      const g = groups.get(id) ?? { table: t.table, objects: [], rows: 0, truncations: [], held: [], handover: false };
      g.objects.push(...t.objects);
      g.rows += t.rows;
      g.truncations.push(...(t.truncations ?? []));
      g.held.push(...(t.held?.objects ?? []));
      g.handover ||= t.held !== undefined;
      groups.set(id, g);
    }
  }
  return [...groups.values()];
}

/** The newest table definition per table (by schema version) among requests: the loader's merges use them. */
export function newestTables(requests: readonly LoadRequest[]): { table: RedshiftTable; schemaVersion: number }[] {
  const out = new Map<string, { table: RedshiftTable; schemaVersion: number }>();
  for (const q of requests) {
    for (const t of q.tables) {
      const id = `${t.table.t.schema}.${t.table.t.view}`.toLowerCase();
      const have = out.get(id);
      if (have === undefined || have.schemaVersion < t.schemaVersion) out.set(id, { table: t.table, schemaVersion: t.schemaVersion });
    }
  }
  return [...out.values()];
}

/** Whether a merge is due: none yet, or the last one at least `mergeEveryMs` ago (`redshiftCadence`). */
export function mergeDue(lastMergeAt: number | null, now: number, mergeEveryMs: number): boolean {
  return lastMergeAt === null || now - lastMergeAt >= mergeEveryMs;
}

/** The applier's deadline: `waitMs` from now, which must leave `marginMs` of the function's timeout for the apply's own work. */
export function requestDeadline(now: number, waitMs: number, functionTimeoutMs: number, marginMs = 30_000): number {
  if (waitMs <= 0 || waitMs + marginMs > functionTimeoutMs)
    throw new RangeError(`the wait for a load (${waitMs} ms) must be positive and leave ${marginMs} ms of the applier's timeout (${functionTimeoutMs} ms)`);
  return now + waitMs;
}

/** The longest a load request recorded while the loader runs waits for the loader's next load (ms). */
export const LOAD_GAP_MS = 1_000;

/**
 * How long the loader function waits after a load before it claims again: requests recorded
 * meanwhile ride one load (a group commit). At most `LOAD_GAP_MS`, however long the cadence:
 * `loadEveryMs` bounds the time between loads (freshness), and every applier waiting on a request
 * holds its shard, so a shard carries up to a batch per gap and load, not per `loadEveryMs`
 * (docs/warehouse-apply.md, "Redshift: the applier").
 */
export function loadGapMs(cadence: RedshiftCadence): number {
  return Math.min(cadence.loadEveryMs, LOAD_GAP_MS);
}
