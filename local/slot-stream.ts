/**
 * The streaming read of a logical replication slot (`test_decoding`): a replication connection
 * (`replication=database`) runs `START_REPLICATION SLOT … LOGICAL` and PostgreSQL streams the
 * decoded rows as CopyBoth messages while the capture parses and publishes earlier ones, so the
 * server's decoding and the capture's work overlap and the WAL is decoded once (the SQL peek
 * decodes it again for `pg_replication_slot_advance`: docs/performance-log.md, "Capture over the streaming replication protocol").
 *
 * The messages (PostgreSQL's streaming replication protocol):
 * - XLogData `w`: dataStart (int64), walEnd (int64), send time (int64), then one line of
 *   test_decoding text; dataStart is the LSN the SQL functions report for the row;
 * - primary keepalive `k`: the server's WAL end (how far it has decoded), send time, and whether
 *   it wants a reply now;
 * - standby status update `r` (sent by us): written, flushed and applied positions, our clock, and
 *   whether we want a reply. Only the flushed position moves the slot: it is only ever the commit
 *   LSN of a transaction whose records were published and checkpointed (`acknowledge`).
 *
 * The rows are grouped into whole transactions as they arrive; a transaction over the caps stops
 * the stream with `TransactionTooLargeError` before more of it is kept. Complete transactions wait
 * in a bounded buffer: over `highWaterRows` the socket is paused (PostgreSQL then waits on it).
 * The text is parsed by lambda/core/capture/logical-text.ts, the same parser as the SQL peek.
 */
import pg from 'pg';
import { groupTransactions, type DecodedTransaction, type SlotRow } from '../lambda/core/capture/logical-text.ts';
import { TransactionTooLargeError } from './errors.ts';
import { SLOT_PLUGIN } from './slot.ts';
import { atOrPast, batchEnd, RowBytes, type StreamRow } from './stream-rows.ts';

export { formatLsn } from './stream-rows.ts';

/** The options the capture reads its slot with, on both paths (xids, commit times, no empty transactions). */
export const SLOT_READ_OPTIONS: ReadonlyArray<readonly [string, string]> = [
  ['include-xids', '1'],
  ['include-timestamp', '1'],
  ['skip-empty-xacts', '1'],
];

/**
 * The session settings the capture decodes with: test_decoding prints values with the decoding
 * session's settings, so the text is made canonical (UTC, ISO dates, shortest exact floats)
 * whatever the server's defaults, and a value, and the hash of a masked one, is the same on every
 * run and on both read paths.
 */
export const CANONICAL_OUTPUT_SETTINGS = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1";

/** Microseconds between the Unix epoch and PostgreSQL's (2000-01-01). */
const PG_EPOCH_US = 946_684_800_000_000n;
/** Time between unsolicited status updates (PostgreSQL's wal_sender_timeout is 60 s by default). */
const STATUS_INTERVAL_MS = 10_000;

/** An LSN (`X/Y`) as a number. */
export function lsnToBigInt(lsn: string): bigint {
  const m = /^([0-9A-Fa-f]{1,8})\/([0-9A-Fa-f]{1,8})$/.exec(lsn);
  if (!m) throw new Error(`not an LSN: ${JSON.stringify(lsn)}`);
  return (BigInt(`0x${m[1]}`) << 32n) | BigInt(`0x${m[2]}`);
}

function quoteIdent(name: string): string {
  return `"${name.replace(/"/g, '""')}"`;
}

function quoteLiteral(value: string): string {
  return `'${value.replace(/'/g, "''")}'`;
}

/** A standby status update message (`r`). */
export function statusUpdate(write: bigint, flush: bigint, replyRequested: boolean, nowMs = Date.now()): Buffer {
  const b = Buffer.alloc(34);
  b.write('r', 0, 'latin1');
  b.writeBigUInt64BE(write, 1);
  b.writeBigUInt64BE(flush, 9);
  b.writeBigUInt64BE(flush, 17);
  b.writeBigInt64BE(BigInt(nowMs) * 1000n - PG_EPOCH_US, 25);
  b.writeUInt8(replyRequested ? 1 : 0, 33);
  return b;
}

/** What `pg`'s client does not declare: its connection (the CopyBoth messages) and the backend's pid. */
interface RawConnection {
  on(event: 'copyData', listener: (msg: { chunk: Buffer }) => void): void;
  sendCopyFromChunk(chunk: Buffer): void;
  stream: { pause(): void; resume(): void; destroy(): void };
}

/** The ids of transactions as their BEGIN lines give them (a row list without one has none). */
function xidsOf(transactions: readonly StreamRow[][]): number[] {
  const out: number[] = [];
  for (const tx of transactions) if (tx[0]!.begins('BEGIN')) out.push(Number(tx[0]!.xid));
  return out;
}

/** How long `endReplicationClient` waits for the server to see the connection off before it drops the socket. */
const END_WAIT_MS = 2_000;

/**
 * Ends a replication connection, whatever state its socket is in. A failed stream pauses its
 * socket (nothing more is read), and `pg`'s `end()` resolves only once the socket has ended, which
 * a paused socket never reports: the socket is read again first, and if the end still does not
 * come within `END_WAIT_MS` (a server that is gone without a word), it is destroyed.
 */
async function endReplicationClient(client: pg.Client): Promise<void> {
  const socket = (client as unknown as { connection: RawConnection }).connection.stream;
  try {
    socket.resume();
  } catch {
    // the socket is already gone
  }
  let timer: NodeJS.Timeout | undefined;
  const gaveUp = new Promise<void>((resolve) => {
    timer = setTimeout(() => {
      try {
        socket.destroy();
      } catch {
        // already destroyed
      }
      resolve();
    }, END_WAIT_MS);
    timer.unref();
  });
  await Promise.race([client.end().catch(() => undefined), gaveUp]);
  clearTimeout(timer);
}

export interface SlotStreamOptions {
  url: string;
  slot: string;
  /** Where to start: the capture's checkpoint (the slot's confirmed position). */
  startLsn: string;
  applicationName: string;
  /** A single transaction with more row changes than this stops the stream. */
  maxTxRows: number;
  /** A single transaction with more bytes of decoded text than this stops the stream. */
  maxTxBytes: number;
  /** Rows of complete transactions kept before the socket is paused. */
  highWaterRows: number;
}

/**
 * One replication connection streaming a slot. `take` hands out whole transactions in commit
 * order; `acknowledge` moves the slot; `reached` tells when the server has sent everything up to
 * a WAL position. Any failure (connection lost, server error, a transaction over the caps) is
 * kept and thrown by the next `take` once the transactions received before it were handed out.
 */
export class SlotStream {
  /** The walsender's process id (what `pg_replication_slots.active_pid` shows while streaming). */
  readonly pid: number;
  /** Complete transactions received (monotonic): their rows, and the count handed out by `take`. */
  private complete: StreamRow[][] = [];
  /** The received rows' bytes (local/stream-rows.ts). */
  private readonly rowBytes = new RowBytes();
  private completeRows = 0;
  private received = 0;
  private taken = 0;
  /** Rows of the transaction in progress and its size. */
  private open: StreamRow[] | null = null;
  private openBytes = 0;
  private openXid = '';
  /** Highest WAL position the server has said it sent everything up to (keepalive or row), as its two 32-bit halves. */
  private sentHi = 0;
  private sentLo = 0;
  /** The flushed position last reported (the last acknowledged commit). */
  private flushed: bigint;
  private failure: Error | null = null;
  private paused = false;
  private closed = false;
  private wake: (() => void) | null = null;
  private keepaliveWaiters: Array<() => void> = [];
  private reachedWaiters: Array<{ lsn: bigint; resolve: (received: number) => void }> = [];
  private readonly timer: NodeJS.Timeout;

  private constructor(
    private readonly client: pg.Client,
    private readonly o: SlotStreamOptions,
  ) {
    this.pid = (client as unknown as { processID: number }).processID;
    this.flushed = lsnToBigInt(o.startLsn);
    this.timer = setInterval(() => this.sendStatus(false), STATUS_INTERVAL_MS);
    this.timer.unref();
  }

  /** Connects and starts streaming from `startLsn`. Throws what PostgreSQL answers (slot missing, in use, …). */
  static async open(o: SlotStreamOptions): Promise<SlotStream> {
    const client = new pg.Client({ connectionString: o.url, replication: 'database', application_name: o.applicationName } as pg.ClientConfig);
    let stream: SlotStream | null = null;
    client.on('error', (err) => stream?.fail(err));
    await client.connect();
    try {
      await client.query(CANONICAL_OUTPUT_SETTINGS);
      // The plugin the slot was created with decides the text; check it is the one the parser reads.
      // (A replication connection speaks the simple query protocol only: no parameters.)
      const plugin = (await client.query(`SELECT plugin FROM pg_replication_slots WHERE slot_name = ${quoteLiteral(o.slot)}`)).rows[0]?.plugin as
        string | undefined;
      if (plugin !== undefined && plugin !== SLOT_PLUGIN) throw new Error(`replication slot ${JSON.stringify(o.slot)} uses ${plugin}, not ${SLOT_PLUGIN}`);
      stream = new SlotStream(client, o);
      const s = stream;
      const conn = (client as unknown as { connection: RawConnection }).connection;
      conn.on('copyData', (msg) => s.onCopyData(msg.chunk));
      const options = SLOT_READ_OPTIONS.map(([k, v]) => `${quoteIdent(k)} ${quoteLiteral(v)}`).join(', ');
      const started = new Promise<void>((resolve, reject) => {
        (client as unknown as { connection: { once(e: 'replicationStart', l: () => void): void } }).connection.once('replicationStart', resolve);
        client.query(`START_REPLICATION SLOT ${quoteIdent(o.slot)} LOGICAL ${o.startLsn} (${options})`).then(
          () => {
            const err = new Error('the replication stream ended');
            s.fail(err);
            reject(err);
          },
          (err: Error) => {
            s.fail(err);
            reject(err);
          },
        );
      });
      await started;
      return s;
    } catch (err) {
      // A START_REPLICATION the server refused (the slot is gone, or in use) has failed the stream, which paused the socket.
      if (stream) await stream.close();
      else await endReplicationClient(client);
      throw err;
    }
  }

  private onCopyData(chunk: Buffer): void {
    if (this.closed || this.failure) return;
    const kind = chunk[0];
    if (kind === 0x77 /* w: XLogData */) {
      const hi = chunk.readUInt32BE(1);
      const lo = chunk.readUInt32BE(5);
      this.onRow(this.rowBytes.row(hi, lo, chunk, 25), chunk.length - 25);
    } else if (kind === 0x6b /* k: keepalive */) {
      this.advanceSent(chunk.readUInt32BE(1), chunk.readUInt32BE(5));
      const waiters = this.keepaliveWaiters;
      this.keepaliveWaiters = [];
      for (const w of waiters) w();
      if (chunk[17] === 1) this.sendStatus(false);
    }
  }

  private onRow(row: StreamRow, bytes: number): void {
    if (row.begins('BEGIN')) {
      this.open = [row];
      this.openBytes = 0;
      this.openXid = row.textFrom(6);
      row.xid = this.openXid;
    } else if (row.begins('COMMIT')) {
      if (this.open === null) {
        // Not ours to judge here: the parser names the broken nesting when the capture takes it.
        this.open = [];
      }
      row.xid = this.openXid;
      this.open.push(row);
      this.complete.push(this.open);
      this.completeRows += this.open.length;
      this.received++;
      this.open = null;
      if (this.completeRows >= this.o.highWaterRows && !this.paused) {
        this.paused = true;
        this.connection().stream.pause();
      }
      this.notify();
    } else if (this.open !== null) {
      row.xid = this.openXid;
      this.open.push(row);
      this.openBytes += bytes;
      const rows = this.open.length - 1;
      if (rows > this.o.maxTxRows || this.openBytes > this.o.maxTxBytes) {
        this.fail(new TransactionTooLargeError(this.openXid, rows, this.openBytes, { maxTxRows: this.o.maxTxRows, maxTxBytes: this.o.maxTxBytes }));
        return;
      }
    } else if (!row.begins('message:')) {
      // A row change outside BEGIN…COMMIT: handed to the parser, which refuses it by name.
      this.complete.push([row]);
      this.completeRows++;
      this.received++;
      this.notify();
    }
    this.advanceSent(row.hi, row.lo);
  }

  private advanceSent(hi: number, lo: number): void {
    if (hi < this.sentHi || (hi === this.sentHi && lo <= this.sentLo)) return;
    this.sentHi = hi;
    this.sentLo = lo;
    if (this.reachedWaiters.length === 0) return;
    const still: typeof this.reachedWaiters = [];
    for (const w of this.reachedWaiters) {
      if (atOrPast(hi, lo, w.lsn)) w.resolve(this.received);
      else still.push(w);
    }
    this.reachedWaiters = still;
  }

  private connection(): RawConnection {
    return (this.client as unknown as { connection: RawConnection }).connection;
  }

  private notify(): void {
    const w = this.wake;
    this.wake = null;
    w?.();
  }

  private fail(err: Error): void {
    if (this.failure || this.closed) return;
    this.failure = err;
    this.notify();
    for (const w of this.keepaliveWaiters) w();
    this.keepaliveWaiters = [];
    // Nothing more is read; the capture closes the connection.
    if (this.paused) return;
    this.paused = true;
    try {
      this.connection().stream.pause();
    } catch {
      // the socket is already gone
    }
  }

  private sendStatus(replyRequested: boolean): void {
    if (this.closed || this.failure) return;
    try {
      const sent = (BigInt(this.sentHi) << 32n) | BigInt(this.sentLo);
      const write = sent > this.flushed ? sent : this.flushed;
      this.connection().sendCopyFromChunk(statusUpdate(write, this.flushed, replyRequested));
    } catch (err) {
      this.fail(err as Error);
    }
  }

  /**
   * Whole transactions in commit order, about `maxChanges` rows at most (at least one
   * transaction); waits up to `waitMs` when none is complete yet. Throws the stream's failure once
   * everything received before it was handed out. `beforeParse` is told the transactions' ids
   * (their BEGIN lines') before their text is parsed, and those of the next `take`'s transactions
   * where they are known already (`batchEnd`), else null.
   */
  async take(maxChanges: number, waitMs: number, beforeParse?: (xids: number[], next: number[] | null) => void): Promise<DecodedTransaction[]> {
    if (this.complete.length === 0 && !this.failure && waitMs > 0) {
      await new Promise<void>((resolve) => {
        const t = setTimeout(() => {
          this.wake = null;
          resolve();
        }, waitMs);
        this.wake = () => {
          clearTimeout(t);
          resolve();
        };
      });
    }
    if (this.complete.length === 0) {
      if (this.failure) throw this.failure;
      return [];
    }
    const rows: SlotRow[] = [];
    const batch = this.complete.splice(0, batchEnd(this.complete, 0, maxChanges).end);
    const n = batch.length;
    for (const tx of batch) for (const row of tx) rows.push(row);
    this.completeRows -= rows.length;
    this.taken += n;
    if (this.paused && !this.failure && this.completeRows < this.o.highWaterRows / 2) {
      this.paused = false;
      this.connection().stream.resume();
    }
    if (beforeParse) {
      const next = batchEnd(this.complete, 0, maxChanges);
      beforeParse(xidsOf(batch), next.fixed ? xidsOf(this.complete.slice(0, next.end)) : null);
    }
    return groupTransactions(rows).transactions;
  }

  /** Transactions received whole so far, and handed out by `take` (both count from the stream's start). */
  get counts(): { received: number; taken: number } {
    return { received: this.received, taken: this.taken };
  }

  /**
   * Reports `lsn` (the commit LSN of the last published and checkpointed transaction) as flushed,
   * which moves the slot's confirmed position there, and asks for a reply. Resolves once a
   * keepalive arrived after it (the caller confirms the slot's position).
   */
  async acknowledge(lsn: string, waitMs = 1_000): Promise<void> {
    if (this.closed) throw new Error('the replication stream is closed');
    const v = lsnToBigInt(lsn);
    if (v > this.flushed) this.flushed = v;
    const replied = new Promise<void>((resolve) => {
      const t = setTimeout(resolve, waitMs);
      this.keepaliveWaiters.push(() => {
        clearTimeout(t);
        resolve();
      });
    });
    // The reply can be behind rows the paused socket holds: read on while waiting for it.
    if (this.paused && !this.failure) this.connection().stream.resume();
    this.sendStatus(true);
    await replied;
    if (this.paused && !this.failure && !this.closed) this.connection().stream.pause();
    if (this.failure) throw this.failure;
    if (this.closed) throw new Error('the replication stream is closed');
  }

  /** Asks the server for a keepalive now (it carries how far it has decoded). */
  poke(): void {
    this.sendStatus(true);
  }

  /**
   * Resolves, with the number of transactions received whole by then, once the server has sent
   * everything up to `lsn` (a keepalive or a row at or past it).
   */
  reached(lsn: string): Promise<number> {
    const v = lsnToBigInt(lsn);
    if (atOrPast(this.sentHi, this.sentLo, v)) return Promise.resolve(this.received);
    return new Promise((resolve) => this.reachedWaiters.push({ lsn: v, resolve }));
  }

  /** Ends the replication connection (the slot is released when the walsender exits). */
  close(): Promise<void> {
    if (this.closed) return Promise.resolve();
    this.closed = true;
    clearInterval(this.timer);
    this.notify();
    for (const w of this.keepaliveWaiters) w();
    this.keepaliveWaiters = [];
    return endReplicationClient(this.client);
  }
}
