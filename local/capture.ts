/**
 * The built-in slot capture: the local stand-in for DMS. It reads a logical replication slot
 * (`test_decoding`) and publishes one raw record (`cdc-slot/1`, lambda/core/capture/slot-record.ts) per
 * row change to the raw stream, where DMS would publish on AWS.
 *
 * Read → publish → ack:
 * 1. read whole committed transactions (bounded; a transaction over the caps stops the capture
 *    with `TransactionTooLargeError` before memory runs out). By default they stream over a
 *    replication connection (local/slot-stream.ts: PostgreSQL decodes once and keeps decoding while
 *    the capture publishes); `read: 'peek'` peeks them with SQL instead (local/slot.ts);
 * 2. apply the column rules (mask, exclude) with the one shared function, build and validate the
 *    records (local/capture-records.ts), publish them and wait until every one was accepted;
 * 3. record the capture checkpoint (commit LSN of the last published transaction) in the control
 *    plane, then move the slot to it (a standby status update whose effect is confirmed on the
 *    slot, or `pg_replication_slot_advance`). A transaction is never split across an acknowledgement.
 *
 * Loud stop, never a silent gap (invariant 3). The checkpoint is written before the slot moves,
 * so the slot's confirmed position is never ahead of it in normal operation. On start, and
 * whenever a peek fails: if the slot we recorded is gone, invalidated, or confirmed ahead of our
 * checkpoint, history since the checkpoint cannot be supplied: the capture marks its tables
 * `needs-resnapshot` (with audit entries) and stops with `HistoryGapError`. It never re-creates a
 * slot it recorded as its own. On the very first start it creates the slot (on its own, apart
 * from any DDL) and records it.
 */
import pg from 'pg';
import { CdcError, HistoryGapError, InvalidRecordError } from '../lambda/core/shared/errors.ts';
import { checkIdentity, checkSlotResume, recordAcked, type ContinuityContext } from './capture-continuity.ts';
import { deadLetterChanges, refreshKeys, undecodable, type PoisonChange, type PoisonContext } from './capture-poison.ts';
import { leavesOf, tablesOf, toRoots } from './capture-records.ts';
import { batchChanges, batchRawRecords } from './capture-transcode.ts';
import type { DmsPrevious } from '../lambda/core/capture/dms-record.ts';
import { publishCatalogTypes } from '../lambda/core/shared/catalog-types.ts';
import type { DecodedTransaction } from '../lambda/core/capture/logical-text.ts';
import type { TableConfigIndex } from '../lambda/core/tables/table-config.ts';
import type { ControlPlane, AuditEntry } from '../lambda/core/shared/control-plane.ts';
import {
  advanceSlot,
  checkSourceReady,
  compareLsn,
  createSlot,
  peekTransactions,
  readSlot,
  slotInvalidated,
  waitSlotReleased,
  type SlotStatus,
} from './slot.ts';
import { SlotInUseError, SourceNotReadyError, TransactionTooLargeError } from './errors.ts';
import { CANONICAL_OUTPUT_SETTINGS, SlotStream } from './slot-stream.ts';
import { awaitTransactionsVisible, captureKeyOf, type CatalogType } from './catalog.ts';
import { CatalogAhead } from './catalog-ahead.ts';
import { CaptureCheckpoints } from './capture-checkpoints.ts';
import { publishPartitionTree, type PartialTruncate, type PartitionTree } from '../lambda/core/tables/partitions.ts';
import { PartitionWatch } from './partitions.ts';
import type { RawPublisher } from './raw-publisher.ts';

export interface CaptureOptions {
  /** Source id. */
  source: string;
  sourceUrl: string;
  /** Slot name. @default `cdc_<source>` */
  slot?: string;
  /** Captured tables (including the heartbeat table) with their column rules and keys. */
  tables: TableConfigIndex;
  controlPlane: ControlPlane;
  publish: RawPublisher;
  /** Caps on one transaction. @default 1 000 000 rows, 1 GiB */
  maxTxRows?: number;
  maxTxBytes?: number;
  /**
   * How the slot is read: `stream`, over a replication connection (`START_REPLICATION`, the slot
   * moved by standby status updates), or `peek`, with SQL (`pg_logical_slot_peek_changes`, then
   * `pg_replication_slot_advance`). The records, checkpoints and stops are the same. @default 'stream'
   */
  read?: 'stream' | 'peek';
  /** Rows per batch published and acknowledged together (whole transactions). @default 5000 */
  peekChanges?: number;
  /** Wait when the slot has nothing new, ms. @default 100 */
  idleMs?: number;
  /**
   * Streaming: the longest a published batch's position waits before the checkpoint is written and
   * the slot moved, in ms, and the most batches before it is (local/capture-checkpoints.ts; docs/local.md,
   * "The capture's checkpoint written at most once a second"). The SQL peek writes after every batch. @default 1000, 100
   */
  checkpointIntervalMs?: number;
  checkpointEveryBatches?: number;
  /** Transient errors (connection lost, …) the capture retries. */
  onError?: (err: unknown) => void;
  /**
   * The partition trees the capture maps leaf partitions' changes to their roots with (shared
   * with the pipeline's watch, local/partitions.ts). @default a watch of the capture's own, read
   * only when a batch holds a change of a table that is not captured or is a partition
   */
  partitions?: PartitionWatch;
}

export interface CaptureStats {
  state: 'starting' | 'running' | 'stopped' | 'failed';
  transactions: number;
  records: number;
  /** Commit LSN of the last acknowledged transaction. */
  lastCommitLsn: string | null;
  lastCommitTs: string | null;
  slotRetainedBytes: number | null;
  error: Error | null;
}

/** Checkpoint owner name in the control plane. */
export function captureCheckpointName(sourceId: string): string {
  return `capture:${sourceId}`;
}

/** Checkpoint value while the slot is being created (a crash then leaves a slot we may adopt). */
const CREATING = 'creating';
const ACTOR = 'capture';

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** A running slot capture. `start()` prepares (and may throw a named error); `done` settles when it stops. */
export class SlotCapture {
  readonly slot: string;
  readonly stats: CaptureStats = {
    state: 'starting',
    transactions: 0,
    records: 0,
    lastCommitLsn: null,
    lastCommitTs: null,
    slotRetainedBytes: null,
    error: null,
  };
  private client: pg.Client | null = null;
  /** The replication connection (`read: 'stream'`), and the walsender pids this capture has had. */
  private stream: SlotStream | null = null;
  private readonly ownPids = new Set<number>();
  /** A caught-up check in flight: started at `at` (epoch ms); `received` once the stream has sent the WAL flushed then. */
  private probe: { at: number; received: number | null } | null = null;
  private lastProbeAt = 0;
  /** The failure of a caught-up check's query, thrown by the next round. */
  private probeFailure: Error | null = null;
  /** The stream's acknowledgement of the last checkpoint, still in flight (settled before the next checkpoint). */
  private pendingAck: Promise<void> | null = null;
  private stopping = false;
  private keys = new Map<string, string[]>();
  /** The shape (column names and types) of each table's last table definition published (`dmsTableDefOf`). */
  private shapes = new Map<string, string>();
  /** The task id control records are partitioned by (DMS: the task's resource id). */
  private get taskId(): string {
    return `cdc-local-${this.o.source}`;
  }
  /** The last DMS record published (its transaction names it as the previous one). */
  private lastDms: DmsPrevious | null = null;
  private readonly catalogAhead = new CatalogAhead();
  /** Tables whose catalog types this capture published (lambda/core/shared/catalog-types.ts). */
  private readonly catalogPublished = new Set<string>();
  /** The partition tree this capture last published. */
  private treePublished: PartitionTree | null = null;
  /** The checkpoint written last (the slot is there or where it was moved before). */
  private checkpoint: string | null = null;
  private readonly marks: CaptureCheckpoints;
  private loop: Promise<void> | null = null;
  /** When the last peek that found nothing new started (epoch ms). */
  private emptyPeekAt = 0;
  private readonly o: Required<Omit<CaptureOptions, 'slot' | 'onError' | 'partitions' | 'checkpointIntervalMs' | 'checkpointEveryBatches'>> &
    Pick<CaptureOptions, 'onError'>;
  /** The partition trees (docs/partitioned-tables.md). */
  private readonly partitions: PartitionWatch;
  /** The tree the last batch was mapped with (a new reading may have queued re-snapshots to request). */
  private partitionsSeen: PartitionTree | null = null;
  /** Application name of the capture's connections. */
  private readonly appName: string;

  constructor(options: CaptureOptions) {
    this.slot = options.slot ?? `cdc_${options.source}`;
    this.o = {
      source: options.source,
      sourceUrl: options.sourceUrl,
      tables: options.tables,
      controlPlane: options.controlPlane,
      publish: options.publish,
      maxTxRows: options.maxTxRows ?? 1_000_000,
      maxTxBytes: options.maxTxBytes ?? 1024 ** 3,
      read: options.read ?? 'stream',
      peekChanges: options.peekChanges ?? 5000,
      idleMs: options.idleMs ?? 100,
      onError: options.onError,
    };
    this.appName = `cdc-local-capture-${options.source}`;
    const streaming = this.o.read === 'stream';
    this.marks = new CaptureCheckpoints(streaming ? (options.checkpointIntervalMs ?? 1000) : 0, streaming ? (options.checkpointEveryBatches ?? 100) : 1);
    this.partitions =
      options.partitions ??
      new PartitionWatch({
        source: options.source,
        sourceUrl: options.sourceUrl,
        controlPlane: options.controlPlane,
        index: options.tables,
        ...(options.onError ? { onError: options.onError } : {}),
      });
  }

  /** Resolves when the capture stopped (after `stop()`); rejects with the named error of a loud stop. */
  get done(): Promise<void> {
    return this.loop ?? Promise.resolve();
  }

  private async connect(): Promise<pg.Client> {
    const client = new pg.Client({ connectionString: this.o.sourceUrl, application_name: this.appName });
    client.on('error', (err) => this.o.onError?.(err));
    await client.connect();
    // test_decoding prints values with the decoding session's settings (local/slot-stream.ts).
    await client.query(CANONICAL_OUTPUT_SETTINGS);
    // A peek holds the slot from this session: ours, like a stream's walsender (`diagnose`, `stop`).
    this.ownPids.add((await client.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid);
    return client;
  }

  private audit(action: string, table: string | null, detail: Record<string, unknown>): AuditEntry {
    return { at: new Date().toISOString(), actor: ACTOR, action, source: this.o.source, table, outcome: 'done', detail: { slot: this.slot, ...detail } };
  }

  private continuityContext(): ContinuityContext {
    return {
      source: this.o.source,
      checkpointName: captureCheckpointName(this.o.source),
      slot: this.slot,
      controlPlane: this.o.controlPlane,
      audit: (a, t, d) => this.audit(a, t, d),
    };
  }

  private poisonContext(): PoisonContext {
    return { source: this.o.source, slot: this.slot, tables: this.o.tables, keys: this.keys, controlPlane: this.o.controlPlane, onError: this.o.onError };
  }

  /** Looks up each captured table's key (declared, else the primary key) and checks deletes will carry it. */
  private async resolveKeys(client: pg.Client, only?: readonly string[]): Promise<void> {
    for (const table of only ?? this.o.tables.tables()) this.keys.set(table, await captureKeyOf(client, table, this.o.tables.keyColumns(table)));
  }

  /** Marks every registered captured table for re-snapshot (with audit entries) and returns the error to stop with. */
  private async historyGap(message: string, detail: Record<string, unknown>): Promise<HistoryGapError> {
    const hint =
      `Changes since the capture's last checkpoint (${this.checkpoint ?? 'none'}) cannot be read any more, so every captured table needs a re-snapshot. ` +
      `The capture does not re-create the slot on its own: that would anchor at "now" and skip the gap silently. ` +
      `To start over, re-snapshot the tables (for the local demo: cdc local --reset, then run again)`;
    const error = new HistoryGapError(message, hint);
    const reason = `${error.code}: ${message}`;
    for (const table of this.o.tables.tables()) {
      try {
        const record = await this.o.controlPlane.getTable(this.o.source, table);
        if (record && record.state !== 'needs-resnapshot') {
          await this.o.controlPlane.setTableState(
            this.o.source,
            table,
            'needs-resnapshot',
            reason,
            this.audit('needs-resnapshot', table, { ...detail, reason }),
          );
        } else if (!record) {
          await this.o.controlPlane.appendAudit(this.audit('needs-resnapshot', table, { ...detail, reason, registered: false }));
        }
      } catch (err) {
        this.o.onError?.(err);
      }
    }
    await this.o.controlPlane.appendAudit(this.audit('capture-stopped', null, { ...detail, code: error.code, message })).catch((err) => this.o.onError?.(err));
    return error;
  }

  /** Explains a slot that cannot be read from: gone, invalidated, or moved by someone else. Null if it looks fine. */
  private async diagnose(status: SlotStatus | null): Promise<Error | null> {
    if (status === null) {
      return this.historyGap(`replication slot ${JSON.stringify(this.slot)} of source ${this.o.source} is gone (dropped?)`, { problem: 'slot-missing' });
    }
    if (slotInvalidated(status)) {
      return this.historyGap(
        `replication slot ${JSON.stringify(this.slot)} of source ${this.o.source} was invalidated (wal_status ${status.walStatus ?? '-'}, reason ${status.invalidationReason ?? '-'}): the WAL it needed is gone`,
        { problem: 'slot-invalidated', walStatus: status.walStatus, invalidationReason: status.invalidationReason },
      );
    }
    if (this.checkpoint && status.confirmedFlushLsn && compareLsn(status.confirmedFlushLsn, this.checkpoint) > 0) {
      return this.historyGap(
        `replication slot ${JSON.stringify(this.slot)} was acknowledged up to ${status.confirmedFlushLsn}, past the capture's checkpoint ${this.checkpoint}: another consumer took changes this capture never published`,
        { problem: 'slot-ahead', confirmedFlushLsn: status.confirmedFlushLsn, checkpoint: this.checkpoint },
      );
    }
    if (status.active && status.activePid !== null) {
      // Ours: this session (a peek), the walsender of our stream, or of one we closed that has not exited yet.
      const own = this.client ? ((await this.client.query('SELECT pg_backend_pid() AS pid')).rows[0]?.pid as number) : null;
      if (status.activePid !== own && !this.ownPids.has(status.activePid)) return new SlotInUseError(this.slot, status.activePid);
    }
    return null;
  }

  /**
   * Prepares the capture: checks the source, finds the keys, creates the slot on the first
   * start (recording it) or verifies the recorded one, then starts the loop. Throws
   * `SourceNotReadyError`, `HistoryGapError` or `SlotInUseError` instead of starting.
   */
  async start(): Promise<void> {
    const client = await this.connect();
    this.client = client;
    try {
      const name = captureCheckpointName(this.o.source);
      let checkpoint = await this.o.controlPlane.getCheckpoint(name, this.slot);
      await checkSourceReady(client, { needFreeSlot: checkpoint === null || checkpoint === CREATING, needWalSender: this.o.read === 'stream' });
      await this.resolveKeys(client);
      let status = await readSlot(client, this.slot);
      if (checkpoint === null && status !== null) {
        throw new SourceNotReadyError(
          `a replication slot named ${JSON.stringify(this.slot)} already exists, but this capture has no record of creating it (another tool's slot, or lost control state). ` +
            `Choose another slot name, or drop it (SELECT pg_drop_replication_slot('${this.slot}')) and re-snapshot`,
        );
      }
      if (checkpoint === CREATING && status !== null) {
        // We crashed after creating the slot and before recording its position: adopt it.
        checkpoint = status.confirmedFlushLsn;
        await this.o.controlPlane.putCheckpoint(name, this.slot, checkpoint!);
        await this.o.controlPlane.appendAudit(this.audit('capture-slot-adopted', null, { lsn: checkpoint }));
      } else if (checkpoint === null || checkpoint === CREATING) {
        await this.o.controlPlane.putCheckpoint(name, this.slot, CREATING);
        const lsn = await createSlot(client, this.slot);
        await this.o.controlPlane.putCheckpoint(name, this.slot, lsn);
        await this.o.controlPlane.appendAudit(this.audit('capture-slot-created', null, { lsn }));
        checkpoint = lsn;
        status = await readSlot(client, this.slot);
      }
      this.checkpoint = checkpoint;
      // Still the same cluster and timeline? (local/capture-continuity.ts)
      const identity = await checkIdentity(client, this.continuityContext());
      if (identity && 'stop' in identity) throw await this.historyGap(identity.stop.message, { problem: identity.stop.problem, ...identity.stop.detail });
      const problem = await this.diagnose(status);
      if (problem) throw problem;
      // The slot moves forward only from exactly the previous checkpoint (a crash between recording
      // the checkpoint and moving the slot: published already); behind anywhere else is a restore.
      const resume = status!.confirmedFlushLsn ? await checkSlotResume(this.continuityContext(), status!.confirmedFlushLsn, checkpoint!) : { advanceTo: null };
      if ('stop' in resume) throw await this.historyGap(resume.stop.message, { problem: resume.stop.problem, ...resume.stop.detail });
      if (resume.advanceTo) await advanceSlot(client, this.slot, resume.advanceTo);
      await recordAcked(this.continuityContext(), checkpoint!);
      this.stats.lastCommitLsn = checkpoint;
      this.stats.slotRetainedBytes = status!.retainedBytes;
      if (this.o.read === 'stream') {
        // The replication connection is opened here, so that a source refusing it is a named error, not a retry loop.
        await this.openStream(client).catch((err: Error) => {
          throw new SourceNotReadyError(
            `the capture reads its slot over a replication connection, which the source refused (${err.message}). ` +
              `Allow this user replication connections to the database (pg_hba.conf: a "replication" entry for it; RDS: the rds_replication role) and a free WAL sender (max_wal_senders), or read the slot with SQL peeks instead (cdc local --slot-read peek)`,
          );
        });
      }
    } catch (err) {
      await this.closeStream();
      this.client = null;
      await client.end().catch(() => undefined);
      this.stats.state = 'failed';
      this.stats.error = err as Error;
      throw err;
    }
    this.stats.state = 'running';
    this.loop = this.run().then(
      () => {
        this.stats.state = 'stopped';
      },
      (err: Error) => {
        this.stats.state = 'failed';
        this.stats.error = err;
        throw err;
      },
    );
    // The loop's failure is reported through `done`; keep Node from calling it unhandled meanwhile.
    this.loop.catch(() => undefined);
  }

  /**
   * Whether every transaction committed before `time` (epoch ms) has been published and
   * acknowledged: a peek that started after `time` found nothing, or (streaming) the stream had
   * sent the WAL flushed at a moment after `time` and every transaction received by then is acknowledged.
   */
  caughtUpSince(time: number): boolean {
    if (this.stats.state !== 'running') return false;
    if (this.emptyPeekAt >= time) return true;
    this.marks.ask(time); // published, not written: written by the next round
    return false;
  }

  /** Stops after the batch in flight (published batches are acknowledged; an unpublished one is re-read next run). */
  async stop(): Promise<void> {
    this.stopping = true;
    await this.loop?.catch(() => undefined);
    // A capture started right after (the next `cdc local`, a test) would otherwise find the slot active.
    await waitSlotReleased(() => this.connect(), this.slot, this.ownPids);
  }

  private async run(): Promise<void> {
    let backoff = 200;
    // `start` has just checked the slot and the source's identity.
    let lastSlotCheck = Date.now();
    try {
      while (!this.stopping) {
        try {
          if (!this.client) this.client = await this.connect();
          const moved = this.o.read === 'peek' ? await this.once(this.client) : await this.streamOnce(this.client);
          backoff = 200;
          if (Date.now() - lastSlotCheck > 5_000) {
            lastSlotCheck = Date.now();
            const status = await readSlot(this.client, this.slot);
            const problem = await this.diagnose(status);
            if (problem) throw problem;
            // A failover while running: another timeline or cluster is a loud stop (local/capture-continuity.ts).
            const identity = await checkIdentity(this.client, this.continuityContext());
            if (identity && 'stop' in identity) throw await this.historyGap(identity.stop.message, { problem: identity.stop.problem, ...identity.stop.detail });
            this.stats.slotRetainedBytes = status!.retainedBytes;
          }
          // (A stream's `take` has waited already.)
          if (!moved && this.o.read === 'peek') await sleep(this.o.idleMs);
        } catch (err) {
          // Loud stops: history is gone, a transaction is over the caps, another capture holds the
          // slot, or a record can never be published (over the stream's record size limit).
          if (err instanceof HistoryGapError || err instanceof TransactionTooLargeError || err instanceof SlotInUseError) throw err;
          if (err instanceof CdcError && err.code === 'RECORD_TOO_LARGE') throw err;
          // Output the capture cannot parse: a loud, named stop (local/capture-poison.ts), never a silent retry.
          if (err instanceof InvalidRecordError) throw await undecodable(this.poisonContext(), err);
          // A failed peek: is the slot the problem? Otherwise it is transient (connection lost, …).
          let problem: Error | null = null;
          try {
            if (!this.client) this.client = await this.connect();
            problem = await this.diagnose(await readSlot(this.client, this.slot));
          } catch {
            // could not even look: treat as transient
          }
          if (problem) throw problem;
          this.o.onError?.(err);
          await this.closeStream();
          await this.client?.end().catch(() => undefined);
          this.client = null;
          if (this.stopping) break;
          await sleep(backoff);
          backoff = Math.min(backoff * 2, 5_000);
        }
      }
      // A clean stop writes the last published position (a failure leaves it to be re-read). Without
      // a stream (lost just before), the checkpoint alone: the next start moves the slot (local/capture-continuity.ts).
      const ack = this.stream && this.client ? this.streamAck(this.client, this.stream) : null;
      await this.writeCheckpoint(ack, false).catch((err: unknown) => this.o.onError?.(err));
    } finally {
      // A clean stop acknowledges the last published batch (a failure here leaves it to be re-read).
      await this.settleAck().catch((err: unknown) => this.o.onError?.(err));
      await this.closeStream();
      await this.client?.end().catch(() => undefined);
      this.client = null;
    }
  }

  private async closeStream(): Promise<void> {
    const stream = this.stream;
    this.stream = null;
    this.probe = null;
    this.probeFailure = null;
    await stream?.close();
    // Fails at once now that the stream is closed; the next stream starts from the checkpoint and moves the slot there.
    // Failed, where the slot is may not be recorded: no checkpoint is written ahead of it, the published batches are read again.
    const moveFailed = await this.pendingAck?.then(() => false).catch(() => true);
    if (moveFailed) this.marks.drop();
    this.pendingAck = null;
  }

  /** Waits for the acknowledgement in flight, if any (throws its failure). */
  private async settleAck(): Promise<void> {
    const pending = this.pendingAck;
    if (!pending) return;
    try {
      await pending;
    } finally {
      if (this.pendingAck === pending) this.pendingAck = null;
    }
  }

  /** Opens the replication stream at the checkpoint, with the slot confirmed exactly there first. */
  private async openStream(client: pg.Client): Promise<SlotStream> {
    // Batches the lost stream published and did not checkpoint: written first, so that they are not read again.
    const batches = this.marks.take();
    if (batches) await this.o.controlPlane.putCheckpoint(captureCheckpointName(this.o.source), this.slot, batches.lsn);
    const checkpoint = (this.checkpoint = batches?.lsn ?? this.checkpoint!);
    const stream = await SlotStream.open({
      url: this.o.sourceUrl,
      slot: this.slot,
      startLsn: checkpoint,
      applicationName: this.appName,
      maxTxRows: this.o.maxTxRows,
      maxTxBytes: this.o.maxTxBytes,
      highWaterRows: 4 * this.o.peekChanges,
    });
    this.ownPids.add(stream.pid);
    this.stream = stream;
    // An acknowledgement the last stream sent may not have reached the slot: move it to the
    // checkpoint and record that, so a crash later finds the slot where local/capture-continuity.ts expects it.
    await this.acknowledge(client, stream, checkpoint);
    if (batches) this.marks.count(this.stats, batches);
    await recordAcked(this.continuityContext(), checkpoint);
    return stream;
  }

  /** Moves the slot to `lsn` through the stream and waits until the slot shows it. */
  private async acknowledge(client: pg.Client, stream: SlotStream, lsn: string): Promise<void> {
    const deadline = Date.now() + 30_000;
    for (;;) {
      await stream.acknowledge(lsn, 100);
      const confirmed = (await readSlot(client, this.slot))?.confirmedFlushLsn ?? null;
      if (confirmed !== null && compareLsn(confirmed, lsn) >= 0) return;
      if (Date.now() > deadline) throw new Error(`replication slot ${JSON.stringify(this.slot)} did not confirm ${lsn} (at ${confirmed ?? 'none'})`);
    }
  }

  /** Publishes the catalog types of the batch's tables not published by this capture yet, and the partition tree when it changed. */
  private async publishCatalog(tables: ReadonlySet<string>, types: ReadonlyMap<string, ReadonlyMap<string, CatalogType>>, tree: PartitionTree): Promise<void> {
    const fresh = new Set<string>();
    for (const t of tables) if (!this.catalogPublished.has(t) && types.has(t)) fresh.add(t);
    if (fresh.size > 0) {
      await publishCatalogTypes(this.o.controlPlane, this.o.source, [...fresh], async (table) => {
        const t = types.get(table);
        return t === undefined ? null : { table, columns: [...t].map(([name, c]) => ({ name, type: c.full })), key: this.keys.get(table) ?? [] };
      });
      for (const t of fresh) this.catalogPublished.add(t);
    }
    if (tree !== this.treePublished) {
      await publishPartitionTree(this.o.controlPlane, this.o.source, tree);
      this.treePublished = tree;
    }
  }

  /** One read → publish → ack round on the stream. Returns whether anything was acknowledged. */
  private async streamOnce(client: pg.Client): Promise<boolean> {
    const stream = this.stream ?? (await this.openStream(client));
    // Caught up? Every transaction the stream had received when it reached the probe's WAL position is acknowledged.
    if (this.probe && this.probe.received !== null && stream.counts.taken >= this.probe.received) {
      await this.settleAck();
      // Published; caught up once written too (a caught-up question asks for it to be written).
      if (this.marks.reached(this.probe.at)) this.emptyPeekAt = Math.max(this.emptyPeekAt, this.probe.at);
      this.probe = null;
    }
    if (this.marks.due()) await this.writeCheckpoint(this.streamAck(client, stream), true);
    if (this.probeFailure !== null) {
      const err = this.probeFailure;
      this.probeFailure = null;
      throw err;
    }
    if (!this.probe && Date.now() - this.lastProbeAt >= this.o.idleMs) {
      const probe: { at: number; received: number | null } = { at: Date.now(), received: null };
      this.probe = probe;
      this.lastProbeAt = probe.at;
      // Not awaited: the batch's work goes on meanwhile (a failure is thrown by the next round).
      client.query('SELECT pg_current_wal_flush_lsn()::text AS lsn').then(
        (res) => {
          if (this.probe !== probe) return;
          void stream.reached(String(res.rows[0].lsn)).then((received) => {
            probe.received = received;
          });
          stream.poke();
        },
        (err: unknown) => {
          if (this.probe !== probe) return;
          this.probe = null;
          this.probeFailure = err as Error;
        },
      );
    }
    // The batch's catalog read starts before its parse (local/catalog-ahead.ts).
    const transactions = await stream.take(this.o.peekChanges, this.o.idleMs, (xids, next) => this.catalogAhead.start(client, xids, next));
    if (transactions.length === 0) {
      await this.settleAck();
      return false;
    }
    // The slot's confirmation overlaps the next batch's work (it is settled before the next checkpoint).
    await this.publishAndAck(client, transactions, this.streamAck(client, stream), true);
    // Not idle: go on at once (the wait in `take` is the idle wait).
    return true;
  }
  /** One peek → publish → ack round. Returns whether anything was acknowledged. */
  private async once(client: pg.Client): Promise<boolean> {
    const started = Date.now();
    let peek = await peekTransactions(client, this.slot, { maxChanges: this.o.peekChanges, maxTxRows: this.o.maxTxRows, maxTxBytes: this.o.maxTxBytes });
    if (peek.transactions.length === 0 && peek.leftover > 0) {
      // A transaction's end was not in the bounded peek: read again without the bound (the caps still hold).
      peek = await peekTransactions(client, this.slot, { maxChanges: 0, maxTxRows: this.o.maxTxRows, maxTxBytes: this.o.maxTxBytes });
    }
    if (peek.transactions.length === 0) {
      if (peek.leftover === 0) this.emptyPeekAt = started;
      return false;
    }
    await this.publishAndAck(client, peek.transactions, (lsn) => advanceSlot(client, this.slot, lsn).then(() => undefined));
    return true;
  }

  /**
   * Builds, publishes and acknowledges whole transactions: the checkpoint first, then `ack` moves
   * the slot, then the move is recorded. With `deferred`, the move and its record run in the
   * background (`pendingAck`) and are settled before the next checkpoint is written, so at any
   * crash the slot is where the capture last recorded moving it or at the checkpoint
   * (local/capture-continuity.ts), as with a move made at once.
   */
  private async publishAndAck(client: pg.Client, decoded: DecodedTransaction[], ack: (lsn: string) => Promise<void>, deferred = false): Promise<void> {
    const xids = decoded.map((t) => Number(t.xid));
    const named = tablesOf(decoded);
    // A change of a table the capture has no key for (not captured, or not yet), or of a known
    // partition: read the partition trees again (after the batch is visible, so a partition created
    // or attached in it is seen), then name each leaf partition's changes by its root
    // (docs/partitioned-tables.md). (The index is asked once, below: discovery may add to it meanwhile.)
    let tree = this.partitions.tree;
    if ([...named].some((t) => !this.keys.has(t) || tree.rootOf.has(t))) {
      await awaitTransactionsVisible(client, xids);
      tree = await this.partitions.refresh(client);
    }
    const tables = new Set<string>();
    for (const t of named) tables.add(tree.rootOf.get(t) ?? t);
    // Which of them this batch captures is decided once, here: discovery adds tables that join
    // while running (docs/onboarding.md) alongside, and a table it added while this batch awaited
    // the source had no key resolved, so its changes became records with an empty key (dead
    // letters). Such a table is captured from the next batch on; the snapshot requested when it
    // joined reads what this batch holds of it, as it does for every change before it joined.
    const captured = new Set([...tables].filter((t) => this.o.tables.has(t)));
    for (const table of captured) {
      // A table that joined while running: resolve its key alone.
      if (!this.keys.has(table)) await this.resolveKeys(client, [table]);
    }
    // The batch's transactions visible first, so the catalog read sees what they committed (an ALTER … TYPE in one).
    // test_decoding prints types without modifiers: read them from the catalog (docs/schema-drift.md).
    const types = await this.catalogAhead.read(client, [...captured], xids);
    const partial: PartialTruncate[] = [];
    const peek = { transactions: toRoots(decoded, tree, types, (p) => partial.push(p)) };
    await refreshKeys(client, this.poisonContext(), peek.transactions);
    // A TRUNCATE of some of a root's partitions is no row change of the root: its copy is read again.
    for (const p of partial) this.partitions.queue(p.root, { truncated: p.leaves });
    if (partial.length > 0 || tree !== this.partitionsSeen) await this.partitions.flush();
    this.partitionsSeen = tree;
    const poison: PoisonChange[] = [];
    const records = batchChanges(this.o.source, peek.transactions, this.o.tables, this.keys, types, (p) => poison.push(p), captured);
    if (records.items.length > 0) {
      // What the normalizer reads DMS records with, as the snapshot worker publishes it on AWS: a table's catalog types and key, the partition tree.
      await this.publishCatalog(records.tables, types, tree);
      const shapes = new Map(this.shapes);
      const chain = { dms: this.lastDms };
      await this.o.publish(
        batchRawRecords(records, { types, leaves: leavesOf(decoded, peek.transactions), shapes, last: chain, tables: this.o.tables, taskId: this.taskId }),
      );
      // Published: the next batch builds on them (a failed publish is read again, and writes its table definitions again).
      this.shapes = shapes;
      this.lastDms = chain.dms;
    }
    await deadLetterChanges(this.poisonContext(), poison);
    const last = peek.transactions[peek.transactions.length - 1]!;
    if (this.marks.published(last.commitLsn, peek.transactions.length, records.items.length, last.commitTs)) await this.writeCheckpoint(ack, deferred);
  }

  /** Writes the checkpoint at the last published position and moves the slot there (with `deferred` the move settles before the next checkpoint). */
  private async writeCheckpoint(ack: ((lsn: string) => Promise<void>) | null, deferred: boolean): Promise<void> {
    const batches = this.marks.take();
    if (batches === null) return;
    // The previous move is recorded before this checkpoint is written.
    await this.settleAck();
    // Checkpoint first, then the slot: the slot is never confirmed ahead of the checkpoint.
    await this.o.controlPlane.putCheckpoint(captureCheckpointName(this.o.source), this.slot, batches.lsn);
    this.checkpoint = batches.lsn;
    if (ack === null) return;
    const move = async (): Promise<void> => {
      await ack(batches.lsn);
      // Acknowledged now: the stats say so even if recording where the slot is fails next (a control-plane outage).
      this.marks.count(this.stats, batches);
      await recordAcked(this.continuityContext(), batches.lsn); // where the slot is now (local/capture-continuity.ts)
      this.emptyPeekAt = Math.max(this.emptyPeekAt, batches.caughtAt);
    };
    if (!deferred) return move();
    const pending = move();
    pending.catch(() => undefined); // awaited by `settleAck`; keep Node from calling it unhandled meanwhile
    this.pendingAck = pending;
  }

  private streamAck(client: pg.Client, stream: SlotStream): (lsn: string) => Promise<void> {
    return (lsn) => this.acknowledge(client, stream, lsn);
  }
}
