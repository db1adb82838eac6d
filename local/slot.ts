/**
 * Logical replication slot I/O over plain SQL (the local capture's side of PostgreSQL):
 * readiness checks with errors that say what to change, slot status, creation, a bounded peek
 * that returns whole committed transactions, and the acknowledgement (`pg_replication_slot_advance`).
 *
 * The text of `test_decoding` is parsed by lambda/core/capture/logical-text.ts; this module only moves rows.
 */
import type pg from 'pg';
import { groupTransactions, type DecodedTransaction, type SlotRow } from '../lambda/core/capture/logical-text.ts';
import { SourceNotReadyError, TransactionTooLargeError } from './errors.ts';
import { gatherSourceFacts } from '../lambda/adapters/source-facts-pg.ts';
import { CheckId, type CheckResult } from '../lambda/core/operator/doctor-results.ts';
import { runChecks } from '../lambda/core/operator/doctor.ts';

/** The output plugin the local capture reads (what DMS uses on a PostgreSQL source without pglogical). */
export const SLOT_PLUGIN = 'test_decoding';

/** What PostgreSQL reports about a slot. */
export interface SlotStatus {
  name: string;
  plugin: string;
  database: string | null;
  /** Where the slot's consumer has acknowledged up to (`X/Y`). */
  confirmedFlushLsn: string | null;
  restartLsn: string | null;
  /** `reserved`, `extended`, `unreserved` or `lost` (lost: the WAL is gone). */
  walStatus: string | null;
  /** PostgreSQL 17+: why the slot was invalidated (`wal_removed`, `rows_removed`, …), else null. */
  invalidationReason: string | null;
  active: boolean;
  activePid: number | null;
  /** WAL the slot keeps from being recycled, in bytes. */
  retainedBytes: number | null;
}

/** True when PostgreSQL can no longer supply the slot's history. */
export function slotInvalidated(s: SlotStatus): boolean {
  return s.walStatus === 'lost' || s.invalidationReason !== null || (s.restartLsn === null && s.confirmedFlushLsn === null);
}

type Queryable = Pick<pg.ClientBase, 'query'>;

/**
 * Checks that the connected database can be captured: `wal_level = logical`, a user with the
 * replication privilege (or superuser, or RDS's `rds_replication` role), a free slot, and for the
 * streaming read a free WAL sender. These
 * are the server-level checks of `cdc doctor` (lambda/core/operator/doctor.ts), run on the same facts.
 * Throws `SourceNotReadyError` saying exactly what to change.
 */
export async function checkSourceReady(client: Queryable, opts: { needFreeSlot: boolean; needWalSender?: boolean }): Promise<void> {
  const wanted = new Set<string>([
    CheckId.WAL_LEVEL,
    CheckId.REPLICATION_GRANT,
    ...(opts.needFreeSlot ? [CheckId.REPLICATION_SLOTS] : []),
    // The streaming read holds a WAL sender, as DMS does.
    ...(opts.needWalSender ? [CheckId.WAL_SENDERS] : []),
  ]);
  const failed = runChecks(await gatherSourceFacts(client, { tables: [] })).filter((r) => r.status === 'FAIL' && wanted.has(r.check));
  if (failed.length > 0) throw sourceNotReady(failed);
}

/** The named error for failed pre-flight checks: each check's finding with its fix. */
export function sourceNotReady(failed: readonly CheckResult[]): SourceNotReadyError {
  return new SourceNotReadyError(failed.map((r) => `${r.subject ? `${r.subject}: ` : ''}${r.message}. Fix: ${r.fix}`).join('; '));
}

/** Reads a slot's status, or null when there is no slot of that name. */
export async function readSlot(client: Queryable, name: string): Promise<SlotStatus | null> {
  // to_jsonb keeps this working across versions (invalidation_reason exists from PostgreSQL 17).
  const res = await client.query(
    `SELECT to_jsonb(s) AS j,
            CASE WHEN s.restart_lsn IS NULL THEN NULL ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::text END AS retained
       FROM pg_replication_slots s WHERE s.slot_name = $1`,
    [name],
  );
  const row = res.rows[0] as { j: Record<string, unknown>; retained: string | null } | undefined;
  if (!row) return null;
  const j = row.j;
  const str = (v: unknown): string | null => (typeof v === 'string' ? v : null);
  return {
    name,
    plugin: String(j.plugin),
    database: str(j.database),
    confirmedFlushLsn: str(j.confirmed_flush_lsn),
    restartLsn: str(j.restart_lsn),
    walStatus: str(j.wal_status),
    invalidationReason: str(j.invalidation_reason),
    active: j.active === true,
    activePid: typeof j.active_pid === 'number' ? j.active_pid : null,
    retainedBytes: row.retained === null ? null : Number(row.retained),
  };
}

/**
 * After a stop, waits (up to `timeoutMs`) until the slot is no longer held by a session of `pids`
 * (a capture's): PostgreSQL ends a walsender or a peek session a moment after its client closes,
 * and a capture started right after would find the slot active and refuse (`SlotInUseError`).
 */
export async function waitSlotReleased(connect: () => Promise<pg.Client>, slot: string, pids: ReadonlySet<number>, timeoutMs = 10_000): Promise<void> {
  if (pids.size === 0) return;
  let client: pg.Client;
  try {
    client = await connect();
  } catch {
    return; // the source is gone: nothing holds the slot for us to wait for
  }
  try {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const status = await readSlot(client, slot);
      if (!status?.active || status.activePid === null || !pids.has(status.activePid) || Date.now() > deadline) return;
      await new Promise((r) => setTimeout(r, 25));
    }
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * Creates a logical slot with `test_decoding` and returns its consistent point (`X/Y`). Must run
 * outside any transaction that has written (PostgreSQL refuses otherwise): call it on its own.
 */
export async function createSlot(client: Queryable, name: string): Promise<string> {
  const res = await client.query('SELECT lsn::text AS lsn FROM pg_create_logical_replication_slot($1, $2)', [name, SLOT_PLUGIN]);
  return String(res.rows[0].lsn);
}

/** Acknowledges everything up to `lsn` (the end of the last fully published transaction). Returns the slot's new position. */
export async function advanceSlot(client: Queryable, name: string, lsn: string): Promise<string> {
  const res = await client.query('SELECT end_lsn::text AS lsn FROM pg_replication_slot_advance($1, $2::pg_lsn)', [name, lsn]);
  return String(res.rows[0].lsn);
}

/** Compares two LSNs in text form (`X/Y`): negative, zero or positive. */
export function compareLsn(a: string, b: string): number {
  const v = (s: string): bigint => {
    const m = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/.exec(s);
    if (!m) throw new Error(`not an LSN: ${JSON.stringify(s)}`);
    return (BigInt(`0x${m[1]}`) << 32n) | BigInt(`0x${m[2]}`);
  };
  const x = v(a);
  const y = v(b);
  return x < y ? -1 : x > y ? 1 : 0;
}

export interface PeekOptions {
  /** Stop decoding after about this many rows (PostgreSQL finishes the transaction it is in). */
  maxChanges: number;
  /** Rows per FETCH from the server-side cursor. @default 1000 */
  fetchRows?: number;
  /** A single transaction with more row changes than this stops the capture. */
  maxTxRows: number;
  /** A single transaction with more bytes of decoded text than this stops the capture. */
  maxTxBytes: number;
}

export interface PeekResult {
  /** Whole committed transactions, in commit order. */
  transactions: DecodedTransaction[];
  /** Rows read (including BEGIN/COMMIT lines). */
  rows: number;
  /** Rows after the last COMMIT (a transaction whose end was not in this peek); not returned, re-read next time. */
  leftover: number;
}

/**
 * Peeks the slot without consuming it (`pg_logical_slot_peek_changes` with xids and commit
 * timestamps), reading through a cursor so that memory stays bounded: rows are grouped into
 * whole transactions as they arrive, and a transaction that grows past `maxTxRows` or
 * `maxTxBytes` throws `TransactionTooLargeError` before more of it is read. Nothing is acked here.
 */
export async function peekTransactions(client: pg.ClientBase, slot: string, opts: PeekOptions): Promise<PeekResult> {
  const fetchRows = opts.fetchRows ?? 1000;
  const transactions: DecodedTransaction[] = [];
  let rows = 0;
  // Rows of the transaction still open at the end of the last fetch, and the open transaction's size.
  let open: SlotRow[] = [];
  let txXid: string | null = null;
  let txRows = 0;
  let txBytes = 0;
  const caps = { maxTxRows: opts.maxTxRows, maxTxBytes: opts.maxTxBytes };
  await client.query('BEGIN READ ONLY');
  try {
    await client.query(
      `DECLARE cdc_peek NO SCROLL CURSOR FOR
         SELECT lsn::text AS lsn, xid::text AS xid, data
           FROM pg_logical_slot_peek_changes($1, NULL, $2, 'include-xids', '1', 'include-timestamp', '1', 'skip-empty-xacts', '1')`,
      [slot, opts.maxChanges > 0 ? opts.maxChanges : null],
    );
    for (;;) {
      const res = await client.query(`FETCH ${fetchRows} FROM cdc_peek`);
      const fetched = res.rows as SlotRow[];
      if (fetched.length === 0) break;
      rows += fetched.length;
      let lastCommit = -1;
      for (let i = 0; i < fetched.length; i++) {
        const row = fetched[i]!;
        if (row.data.startsWith('BEGIN')) {
          txXid = row.xid;
          txRows = 0;
          txBytes = 0;
        } else if (row.data.startsWith('COMMIT')) {
          lastCommit = i;
        } else {
          txRows++;
          txBytes += Buffer.byteLength(row.data);
          if (txRows > opts.maxTxRows || txBytes > opts.maxTxBytes) throw new TransactionTooLargeError(txXid ?? row.xid, txRows, txBytes, caps);
        }
      }
      if (lastCommit >= 0) {
        transactions.push(...groupTransactions(open.concat(fetched.slice(0, lastCommit + 1))).transactions);
        open = fetched.slice(lastCommit + 1);
      } else {
        for (const r of fetched) open.push(r);
      }
    }
    await client.query('CLOSE cdc_peek');
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  }
  return { transactions, rows, leftover: open.length };
}
