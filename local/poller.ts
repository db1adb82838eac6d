/**
 * The local stand-in for Lambda's Kinesis event source mapping: one poller per consumer
 * (normalizer, each sink, the archive copier), each with its own checkpoints in the control plane.
 *
 * Semantics (as on AWS):
 * - Per shard, records are read from the checkpoint (`AFTER_SEQUENCE_NUMBER`), or from
 *   `TRIM_HORIZON`/`LATEST` the first time; one batch per shard is in flight at a time, so a
 *   shard's records reach the handler in order. While the handler runs a batch, the next one is
 *   read (at most one batch ahead), as Lambda's pollers read ahead of the invocations.
 * - An idle shard is polled every `idleMs`; with `watchPuts`, read at once when records are put on
 *   it through the client watched, and polled every `maxIdleMs` otherwise (local/read-pacing.ts).
 * - A batch holds up to `batchSize` records; with a batching window the poller waits up to that
 *   long for a full batch. The payload stays under Lambda's 6 MB invocation limit.
 * - The handler gets a `KinesisStreamEvent` (built by lambda/adapters/kinesis-event.ts).
 * - Success: checkpoint after the last record. The checkpoint only moves after success. With
 *   `checkpointIntervalMs` the position is written at most that long after it was acknowledged
 *   (local/checkpoint-schedule.ts), and always before a stop or a caught-up answer.
 * - Partial batch failure (`batchItemFailures`): checkpoint before the lowest failed sequence
 *   number and retry from it. An unknown or empty item identifier fails the whole batch.
 * - Thrown error: with bisect on, the batch is split in two and each half is retried on its own
 *   (a split does not count as a retry); otherwise, and for a single record, the batch is retried.
 * - Outages delay, they never skip (docs/local.md, "Outages"). A failure is either bad input or
 *   an infrastructure error. The handlers dead-letter records they cannot decode or apply
 *   themselves, so what reaches the poller as a reported batch item failure or a thrown error is
 *   an infrastructure error (the warehouse, DynamoDB or Kinesis unreachable, throttled, timing
 *   out): it is retried without limit, with exponential backoff up to `maxBackoffMs`, and the
 *   stall shows in `stats` (`stalledSince`, `lastError`) for the live status. Only a thrown
 *   bad-input error (`isBadInput`: the platform's named invalid-record errors) is retried
 *   `maxRetries` times on the record bisect isolated, then dead-lettered with its own code and
 *   the checkpoint moves past it.
 * - With `fanout`, the records come from one read of the stream shared with the stream's other
 *   consumers (local/fanout.ts); everything above still holds per consumer.
 * - A closed shard (after a split or merge) is read to its end and checkpointed as `SHARD_END`;
 *   a child shard starts only after its parents ended.
 */
import { ListShardsCommand, DescribeStreamSummaryCommand, type KinesisClient, type Shard, type _Record } from '@aws-sdk/client-kinesis';
import type { KinesisStreamBatchResponse, KinesisStreamEvent } from 'aws-lambda';
import type { ControlPlane, DeadLetter } from '../lambda/core/shared/control-plane.ts';
import { CdcError } from '../lambda/core/shared/errors.ts';
import { toKinesisStreamEvent } from '../lambda/adapters/kinesis-event.ts';
import { ShardTips } from './shard-tips.ts';
import { KinesisCursor, type ShardCursor, type StreamFanout } from './fanout.ts';
import type { PutShards } from './kinesis.ts';
import { CheckpointSchedule } from './checkpoint-schedule.ts';
import { Wakeup } from './wakeup.ts';
import { ReadPacer } from './read-pacing.ts';
import { aboutRecord, isBadInputError } from './poller-errors.ts';

export { isBadInputError };

/** Checkpoint value of a shard that was read to its end. */
export const SHARD_END = 'SHARD_END';

/** What a Lambda handler for Kinesis returns. */
export type StreamHandler = (event: KinesisStreamEvent) => Promise<KinesisStreamBatchResponse | void | undefined>;

export interface PollerOptions {
  /** Consumer name: the checkpoint owner and the dead letters' stage (`normalizer`, a sink id, `archive`). */
  consumer: string;
  kinesis: KinesisClient;
  streamName: string;
  controlPlane: Pick<ControlPlane, 'getCheckpoint' | 'putCheckpoint' | 'putDeadLetter'>;
  /**
   * The handler, or a function that builds one per shard. On AWS every concurrent invocation has
   * its own execution environment (module state, Powertools' BatchProcessor, metrics buffer);
   * shards are polled concurrently here, so a handler with such state must be built per shard.
   */
  handler: StreamHandler | { perShard: (shardId: string) => StreamHandler };
  /** Records per invocation (1–10000). @default 100 */
  batchSize?: number;
  /** Longest wait for a full batch, in ms (MaximumBatchingWindowInSeconds). @default 0 */
  batchWindowMs?: number;
  /** Retries of a record that fails as bad input (see `isBadInput`) before it goes to the dead letters; infrastructure errors are retried without limit. @default 2 */
  maxRetries?: number;
  /** Whether a thrown error means bad input rather than an infrastructure error. @default isBadInputError */
  isBadInput?: (err: unknown) => boolean;
  /** Longest backoff between retries of an infrastructure error, in ms. @default 5000 */
  maxBackoffMs?: number;
  /** Split a batch in two when the handler throws. @default true */
  bisectOnError?: boolean;
  /** Where to start on a shard without checkpoint. @default TRIM_HORIZON */
  startingPosition?: 'TRIM_HORIZON' | 'LATEST';
  /** Wait between polls of an idle shard, in ms (Lambda polls about once a second). @default 200 */
  idleMs?: number;
  /** With `watchPuts`: the wait between reads of a shard with nothing noticed to read, in ms (local/read-pacing.ts). @default 1000 */
  maxIdleMs?: number;
  /** First retry backoff, doubled per retry up to `maxBackoffMs`. @default 100 */
  retryBackoffMs?: number;
  /** How often the shard list is re-read (to follow splits and merges), in ms. @default 10000 */
  shardRefreshMs?: number;
  /**
   * Subscribes to notice of records put on the stream: `cdc local`'s publishers share one client
   * (`LocalStack.puts`), so an idle shard is read as soon as something was put instead of at its
   * next poll. Returns the unsubscribe function. @default polls only
   */
  watchPuts?: (listener: (put: PutShards | null) => void) => () => void;
  /** Called for errors the poller recovers from (read errors, handler errors before a retry). */
  onError?: (err: unknown, where: string) => void;
  /**
   * Reads through this stream's fan-out (one GetRecords for every consumer of the stream,
   * docs/local.md, "One read of the change log for every consumer") instead of with its own
   * iterators. Needs `startingPosition` TRIM_HORIZON. @default own iterators
   */
  fanout?: StreamFanout;
  /**
   * Writes a shard's acknowledged position at most this long after it was acknowledged, instead of
   * after every batch (docs/local.md, "Checkpoints written at most once a second"); always on stop
   * and before `caughtUpSince` answers yes. @default 0 (after every batch, as Lambda's own checkpoint)
   */
  checkpointIntervalMs?: number;
  /** With `checkpointIntervalMs`: writes at the latest after this many batches. @default 100 */
  checkpointEveryBatches?: number;
}

/** Counters of one poller, for the live status. */
export interface PollerStats {
  consumer: string;
  /** Records handed to the handler and acknowledged (including those that went to dead letters). */
  recordsDone: number;
  batches: number;
  retries: number;
  deadLetters: number;
  /** Per shard: how far behind the stream's tip the last read was (ms), as Lambda's IteratorAge. */
  millisBehind: Record<string, number>;
  /** When the last batch was acknowledged (epoch ms), or null. */
  lastAckAt: number | null;
  /** Since when a batch has been failing with an infrastructure error and retried (epoch ms), or null when nothing is stalled. */
  stalledSince: number | null;
  /** The last infrastructure error, while stalled. */
  lastError: string | null;
}

/** Lambda's invocation payload limit is 6 MB; records are base64 inside JSON. */
const MAX_PAYLOAD_BYTES = 5_500_000;

class StopRequested extends Error {}

/** One run of a shard (from its checkpoint): what its reader and its deliverer share. */
interface ShardRun {
  readonly shardId: string;
  /** Records read and not yet taken into a batch, in stream order. */
  readonly buffer: _Record[];
  /** Where the reader is: the next records after the last one read. */
  readonly cursor: ShardCursor;
  /** The reader reached the end of a closed shard. */
  shardEnd: boolean;
  /** A batch is with the handler (taken from the buffer, not yet acknowledged). */
  inFlight: boolean;
  /** The run is over (stopped, or the deliverer failed): the reader returns. */
  abort: boolean;
  /** The error that stopped the reader, for the deliverer to rethrow. */
  readError: { err: unknown } | null;
  /** Wakes the reader: room in the buffer, records put on the stream, the run is over, a caught-up check. */
  readonly readerWake: Wakeup;
  /** When the reader reads next (put notices, idle waits). */
  readonly pacer: ReadPacer;
  /** Wakes the deliverer: records read, the reader stopped. */
  readonly delivererWake: Wakeup;
}

type InvokeOutcome = { kind: 'ok' } | { kind: 'partial'; index: number; reason: string } | { kind: 'error'; reason: string; badInput: boolean; code: string };

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

function describeError(err: unknown): string {
  if (err instanceof Error) return `${err.name}: ${err.message}`;
  return String(err);
}

/** One event source mapping: call `start()`, later `stop()` (lets the batch in flight finish). */
export class Poller {
  private readonly o: Required<Omit<PollerOptions, 'onError' | 'watchPuts' | 'fanout' | 'checkpointIntervalMs' | 'checkpointEveryBatches'>> &
    Pick<PollerOptions, 'onError' | 'watchPuts' | 'fanout'>;
  /** What each shard acknowledged and has not written yet, and when to write it. */
  private readonly checkpoints: CheckpointSchedule;
  /** In-flight deliveries currently failing with an infrastructure error (bisect can run two in turn). */
  private stalled = 0;
  private stopping = false;
  private streamArn = '';
  private readonly running = new Map<string, Promise<void>>();
  private readonly ended = new Set<string>();
  private refresher: Promise<void> | null = null;
  private wake: (() => void) | null = null;
  private failure: unknown = null;
  /** Per shard: how far its reads reached the end, and what is acknowledged (`caughtUpSince`). */
  private readonly tips = new Map<string, ShardTips>();
  private readonly handlers = new Map<string, StreamHandler>();
  /** The shards running now. */
  private readonly shardRuns = new Set<ShardRun>();
  private unwatch: (() => void) | null = null;
  readonly stats: PollerStats;

  constructor(options: PollerOptions) {
    const batchSize = options.batchSize ?? 100;
    if (!Number.isInteger(batchSize) || batchSize < 1 || batchSize > 10_000)
      throw new RangeError(`batchSize must be an integer in [1, 10000], got ${batchSize}`);
    if (options.fanout && options.startingPosition === 'LATEST')
      throw new RangeError(`poller ${options.consumer}: a fan-out reads from TRIM_HORIZON; startingPosition LATEST needs the poller's own iterators`);
    this.o = {
      batchSize,
      batchWindowMs: options.batchWindowMs ?? 0,
      maxRetries: options.maxRetries ?? 2,
      isBadInput: options.isBadInput ?? isBadInputError,
      maxBackoffMs: options.maxBackoffMs ?? 5_000,
      bisectOnError: options.bisectOnError ?? true,
      startingPosition: options.startingPosition ?? 'TRIM_HORIZON',
      idleMs: options.idleMs ?? 200,
      maxIdleMs: options.maxIdleMs ?? 1000,
      retryBackoffMs: options.retryBackoffMs ?? 100,
      shardRefreshMs: options.shardRefreshMs ?? 10_000,
      consumer: options.consumer,
      kinesis: options.kinesis,
      streamName: options.streamName,
      controlPlane: options.controlPlane,
      handler: options.handler,
      onError: options.onError,
      watchPuts: options.watchPuts,
      fanout: options.fanout,
    };
    this.checkpoints = new CheckpointSchedule({ intervalMs: options.checkpointIntervalMs ?? 0, everyBatches: options.checkpointEveryBatches ?? 100 });
    this.stats = {
      consumer: options.consumer,
      recordsDone: 0,
      batches: 0,
      retries: 0,
      deadLetters: 0,
      millisBehind: {},
      lastAckAt: null,
      stalledSince: null,
      lastError: null,
    };
  }

  /** Starts polling every shard of the stream. Resolves once polling has begun. */
  async start(): Promise<void> {
    const summary = await this.o.kinesis.send(new DescribeStreamSummaryCommand({ StreamName: this.o.streamName }));
    this.streamArn = summary.StreamDescriptionSummary?.StreamARN ?? `arn:aws:kinesis:local:000000000000:stream/${this.o.streamName}`;
    // Before the shards start: a put after a shard's first read began is noticed.
    this.unwatch =
      this.o.watchPuts?.((put) => {
        for (const run of this.shardRuns) {
          if (put !== null && !put.has(run.shardId)) continue;
          run.pacer.notice(put?.get(run.shardId) ?? null);
          run.readerWake.notify();
        }
      }) ?? null;
    await this.refreshShards();
    this.refresher = this.refreshLoop();
  }

  /**
   * Stops: no new batch starts; a batch in flight finishes (or, if it is failing, is left
   * unacknowledged for the next run). Resolves when every shard loop has returned.
   */
  async stop(): Promise<void> {
    this.stopping = true;
    this.wake?.();
    this.unwatch?.();
    for (const run of this.shardRuns) {
      run.readerWake.notify();
      run.delivererWake.notify();
    }
    await this.refresher;
    await Promise.all([...this.running.values()]);
  }

  /**
   * Whether every record put on the stream before `time` (epoch ms) has been handled and
   * acknowledged: each open shard had a read that started after `time` and found nothing new, and
   * every record read before it is acknowledged (`ShardTips`).
   */
  caughtUpSince(time: number): boolean {
    if (this.running.size === 0) return false;
    let caughtUp = true;
    for (const shardId of this.running.keys()) {
      if (this.ended.has(shardId) || this.tips.get(shardId)?.caughtUpSince(time)) continue;
      caughtUp = false;
      // A reader waiting for a put notice reads now: the answer needs a read that started after `time`.
      for (const run of this.shardRuns) if (run.shardId === shardId) run.readerWake.notify();
      // The tips learn of a position once it is written: one acknowledged and not written yet is written now.
      if (this.checkpoints.ask(shardId)) for (const run of this.shardRuns) if (run.shardId === shardId) run.delivererWake.notify();
    }
    return caughtUp;
  }

  /** The last error that made a shard restart from its checkpoint, if any. */
  get error(): unknown {
    return this.failure;
  }

  private async refreshLoop(): Promise<void> {
    while (!this.stopping) {
      await new Promise<void>((r) => {
        const t = setTimeout(r, this.o.shardRefreshMs);
        this.wake = () => {
          clearTimeout(t);
          r();
        };
      });
      if (this.stopping) return;
      try {
        await this.refreshShards();
      } catch (err) {
        this.o.onError?.(err, `listing shards of ${this.o.streamName}`);
      }
    }
  }

  private async refreshShards(): Promise<void> {
    const shards: Shard[] = [];
    let token: string | undefined;
    do {
      const out = await this.o.kinesis.send(new ListShardsCommand(token ? { NextToken: token } : { StreamName: this.o.streamName }));
      shards.push(...(out.Shards ?? []));
      token = out.NextToken;
    } while (token);
    const known = new Set(shards.map((s) => s.ShardId!));
    for (const shard of shards) {
      const id = shard.ShardId!;
      if (this.running.has(id) || this.stopping) continue;
      // A child starts after its parents ended (or were trimmed away).
      const parents = [shard.ParentShardId, shard.AdjacentParentShardId].filter((p): p is string => !!p && known.has(p));
      const waiting = await Promise.all(
        parents.map(async (p) => this.ended.has(p) || (await this.o.controlPlane.getCheckpoint(this.o.consumer, p)) === SHARD_END),
      );
      if (waiting.some((done) => !done)) continue;
      this.running.set(id, this.superviseShard(id));
    }
  }

  /** The shard's reader, from `after`: through the fan-out, or with the poller's own iterator. */
  private cursor(shardId: string, after: string | null): ShardCursor {
    if (this.o.fanout) return this.o.fanout.cursor(shardId, after);
    return new KinesisCursor(this.o.kinesis, this.o.streamName, shardId, after, this.o.startingPosition);
  }

  /**
   * Runs a shard until the poller stops or the shard ended. An unexpected error (the control
   * plane or the stream unreachable while starting the shard, …) restarts the shard from its
   * checkpoint after a backoff: records read but not acknowledged are simply read again.
   */
  private async superviseShard(shardId: string): Promise<void> {
    let backoff = this.o.retryBackoffMs;
    while (!this.stopping) {
      try {
        await this.runShard(shardId);
        return;
      } catch (err) {
        if (err instanceof StopRequested) return;
        this.failure = err;
        this.o.onError?.(err, `${this.o.consumer} on ${shardId} (restarting from its checkpoint)`);
        await sleep(backoff);
        backoff = Math.min(backoff * 2, 5_000);
      }
    }
  }

  /**
   * Runs one shard: a reader fetches records ahead into the shard's buffer (at most one batch
   * ahead) while the handler runs the current batch, so a batch's GetRecords is not on the
   * handler's path; the batches still go to the handler one at a time, in order, and the
   * checkpoint moves only after the handler succeeded (`deliver`). An error of either half stops
   * both, and the shard restarts from its checkpoint (`superviseShard`): records read ahead but
   * not acknowledged are read again.
   */
  private async runShard(shardId: string): Promise<void> {
    // A position the shard's last run acknowledged and could not write yet is written first.
    await this.flushCheckpoint(shardId, true);
    const checkpoint = await this.o.controlPlane.getCheckpoint(this.o.consumer, shardId);
    if (checkpoint === SHARD_END) {
      this.ended.add(shardId);
      return;
    }
    if (!this.tips.has(shardId)) this.tips.set(shardId, new ShardTips(checkpoint));
    const cursor = this.cursor(shardId, checkpoint);
    await cursor.open();
    const s: ShardRun = {
      shardId,
      buffer: [],
      cursor,
      shardEnd: false,
      inFlight: false,
      abort: false,
      readError: null,
      readerWake: new Wakeup(),
      delivererWake: new Wakeup(),
      pacer: new ReadPacer({ idleMs: this.o.idleMs, maxIdleMs: this.o.maxIdleMs, notices: this.o.watchPuts !== undefined }),
    };
    this.shardRuns.add(s);
    const reader = this.readAhead(s).catch((err: unknown) => {
      s.readError = { err };
      s.delivererWake.notify();
    });
    try {
      await this.deliverShard(s);
    } finally {
      s.abort = true;
      s.readerWake.notify();
      await reader;
      this.shardRuns.delete(s);
      // Stopped (or failed): what was acknowledged is written; stopped while the control plane is unreachable, it is delivered again next run.
      await this.flushCheckpoint(shardId, true).catch((err: unknown) => {
        if (!(err instanceof StopRequested)) throw err;
      });
    }
  }

  /** The reader half of a shard: keeps up to one batch of records read ahead in the buffer. */
  private async readAhead(s: ShardRun): Promise<void> {
    let readBackoff = this.o.retryBackoffMs;
    while (!s.cursor.ended && !this.stopping && !s.abort) {
      const room = this.o.batchSize - s.buffer.length;
      if (room <= 0) {
        // A batch is waiting for the handler: read on when the deliverer takes it.
        await s.readerWake.wait(this.o.idleMs);
        continue;
      }
      // Whatever woke the reader so far, this read looks at; what comes during it wakes the next.
      s.readerWake.clear();
      s.pacer.beforeRead();
      let out;
      try {
        out = await s.cursor.read(room);
        readBackoff = this.o.retryBackoffMs;
      } catch (err) {
        if (s.abort) return;
        // The cursor renewed an expired iterator: read again at once.
        if ((err as { name?: string }).name === 'ExpiredIteratorException') continue;
        this.o.onError?.(err, `reading ${this.o.streamName}/${s.shardId}`);
        await sleep(readBackoff);
        readBackoff = Math.min(readBackoff * 2, 5_000);
        continue;
      }
      if (s.abort) return;
      this.stats.millisBehind[s.shardId] = out.millisBehind;
      const records = out.records;
      if (records.length > 0) {
        s.buffer.push(...records);
        s.delivererWake.notify();
        // At the shard's end: the next read waits for a put notice (or the idle wait).
        const wait = s.pacer.afterRead(records.length, out.atEnd, s.cursor.lastRead);
        if (wait > 0) await s.readerWake.wait(wait);
        continue;
      }
      // Nothing new: the shard's end as of the read's start is the last record read (caught up once it is acknowledged).
      this.tips.get(s.shardId)?.tipRead(out.emptyReadAt ?? 0, s.cursor.lastRead);
      if (s.cursor.ended) break;
      // Until the next poll, or until records are put on the stream (`watchPuts`).
      const wait = s.pacer.afterRead(0, out.atEnd, s.cursor.lastRead);
      if (wait > 0) await s.readerWake.wait(wait);
    }
    if (s.cursor.ended && !s.abort) s.shardEnd = true;
    s.delivererWake.notify();
  }

  /** The handler half of a shard: batches from the buffer, one at a time, in order. */
  private async deliverShard(s: ShardRun): Promise<void> {
    while (!this.stopping) {
      const windowEnds = Date.now() + this.o.batchWindowMs;
      // Wait for a batch: full, or the window is over, or (window 0) anything at all.
      for (;;) {
        if (this.stopping) return;
        if (s.readError) throw s.readError.err;
        if (s.buffer.length >= this.o.batchSize || (s.buffer.length === 0 && s.shardEnd)) break;
        const now = Date.now();
        if (s.buffer.length > 0 && now >= windowEnds) break;
        // An acknowledged position that waited long enough (or that a caught-up check asked for) is written while the shard waits.
        await this.flushCheckpoint(s.shardId, false);
        const due = this.checkpoints.dueIn(s.shardId) ?? Infinity;
        await s.delivererWake.wait(Math.min(s.buffer.length > 0 ? windowEnds - Date.now() : this.o.idleMs, due));
      }
      if (s.buffer.length === 0) {
        // The shard was read to its end and every record of it was acknowledged.
        this.checkpoints.drop(s.shardId);
        await this.o.controlPlane.putCheckpoint(this.o.consumer, s.shardId, SHARD_END);
        this.ended.add(s.shardId);
        return;
      }
      const batch = this.takeBatch(s.buffer);
      s.inFlight = true;
      // A full buffer stopped the reader: there is room now (a reader at the shard's end waits for a put, not for this).
      if (s.buffer.length + batch.length >= this.o.batchSize) s.readerWake.notify();
      try {
        await this.deliver(s.shardId, batch, 0);
      } catch (err) {
        if (err instanceof StopRequested) return;
        throw err;
      } finally {
        s.inFlight = false;
      }
      this.failure = null;
    }
  }

  /** Takes up to batchSize records from the front of the buffer, keeping the payload under Lambda's limit. */
  private takeBatch(buffer: _Record[]): _Record[] {
    let bytes = 0;
    let n = 0;
    while (n < buffer.length && n < this.o.batchSize) {
      const size = Math.ceil(((buffer[n]!.Data?.length ?? 0) * 4) / 3) + 600;
      if (n > 0 && bytes + size > MAX_PAYLOAD_BYTES) break;
      bytes += size;
      n++;
    }
    return buffer.splice(0, n);
  }

  private handlerOf(shardId: string): StreamHandler {
    const h = this.o.handler;
    if (typeof h === 'function') return h;
    let built = this.handlers.get(shardId);
    if (!built) {
      built = h.perShard(shardId);
      this.handlers.set(shardId, built);
    }
    return built;
  }

  private async invoke(shardId: string, records: _Record[]): Promise<InvokeOutcome> {
    let response: KinesisStreamBatchResponse | void | undefined;
    try {
      response = await this.handlerOf(shardId)(toKinesisStreamEvent(records, { streamArn: this.streamArn, shardId }));
    } catch (err) {
      return { kind: 'error', reason: describeError(err), badInput: this.o.isBadInput(err), code: err instanceof CdcError ? err.code : 'BAD_INPUT' };
    }
    const failures = response?.batchItemFailures ?? [];
    if (failures.length === 0) return { kind: 'ok' };
    let lowest = Infinity;
    for (const f of failures) {
      const id = f?.itemIdentifier;
      const index = typeof id === 'string' && id !== '' ? records.findIndex((r) => r.SequenceNumber === id) : -1;
      if (index < 0)
        return {
          kind: 'error',
          reason: `the handler reported a failure with an unknown item identifier ${JSON.stringify(id)}; the whole batch counts as failed`,
          badInput: false,
          code: 'INVALID_RESPONSE',
        };
      lowest = Math.min(lowest, index);
    }
    return {
      kind: 'partial',
      index: lowest,
      reason: `the handler reported ${failures.length} failed record(s), the first at sequence number ${records[lowest]!.SequenceNumber}`,
    };
  }

  /**
   * Delivers records until they are acknowledged, or (bad input only) dead-lettered; throws
   * StopRequested if stopped while failing. Infrastructure errors are retried without limit.
   */
  private async deliver(shardId: string, records: _Record[], retriesSoFar: number): Promise<void> {
    let rest = records;
    let retries = retriesSoFar;
    let failures = 0;
    let stalledHere = false;
    try {
      for (;;) {
        const outcome = await this.invoke(shardId, rest);
        if (outcome.kind === 'ok') {
          await this.ack(shardId, rest);
          return;
        }
        if (outcome.kind === 'partial') {
          if (outcome.index > 0) {
            await this.ack(shardId, rest.slice(0, outcome.index));
            rest = rest.slice(outcome.index);
            retries = 0; // progress: retries count per failing record
            failures = 0;
          }
        } else if (this.o.bisectOnError && rest.length > 1) {
          this.o.onError?.(new Error(outcome.reason), `${this.o.consumer} on ${shardId}: splitting a batch of ${rest.length}`);
          const half = Math.ceil(rest.length / 2);
          await this.deliver(shardId, rest.slice(0, half), retries);
          await this.deliver(shardId, rest.slice(half), retries);
          return;
        }
        if (outcome.kind === 'error' && outcome.badInput) {
          retries++;
          if (retries > this.o.maxRetries) {
            await this.deadLetter(shardId, rest, outcome.code, `bad input, refused ${retries} times: ${outcome.reason}`);
            await this.ack(shardId, rest);
            return;
          }
        } else {
          // An infrastructure error: wait and retry, however long the outage lasts.
          if (!stalledHere) {
            stalledHere = true;
            this.stalled++;
          }
          this.stats.stalledSince ??= Date.now();
          this.stats.lastError = outcome.reason;
        }
        failures++;
        this.stats.retries++;
        this.o.onError?.(new Error(outcome.reason), `${this.o.consumer} on ${shardId}: retry ${failures}`);
        if (this.stopping) throw new StopRequested();
        await sleep(Math.min(this.o.retryBackoffMs * 2 ** Math.min(failures - 1, 30), this.o.maxBackoffMs));
        if (this.stopping) throw new StopRequested();
      }
    } finally {
      if (stalledHere) this.unstall();
    }
  }

  private unstall(): void {
    this.stalled = Math.max(0, this.stalled - 1);
    if (this.stalled === 0) {
      this.stats.stalledSince = null;
      this.stats.lastError = null;
    }
  }

  /** The handler acknowledged `records` (in order after everything before them): their position is written now or later (`checkpoints`). */
  private async ack(shardId: string, records: _Record[]): Promise<void> {
    if (records.length === 0) return;
    if (this.checkpoints.acknowledged(shardId, records[records.length - 1]!.SequenceNumber!)) await this.flushCheckpoint(shardId, true);
    this.stats.recordsDone += records.length;
    this.stats.batches++;
    this.stats.lastAckAt = Date.now();
  }

  /**
   * Writes the shard's acknowledged position if it is due (or pending at all, with `force`),
   * retrying while the control plane is unreachable (if stopped meanwhile, the records are
   * delivered again next run). A shard that cannot record its checkpoint makes no progress, so the
   * retries show as a stall, as a failing batch's do.
   */
  private async flushCheckpoint(shardId: string, force: boolean): Promise<void> {
    const seq = this.checkpoints.due(shardId, force);
    if (seq === null) return;
    let backoff = this.o.retryBackoffMs;
    let stalledHere = false;
    try {
      for (;;) {
        try {
          await this.o.controlPlane.putCheckpoint(this.o.consumer, shardId, seq);
          break;
        } catch (err) {
          this.o.onError?.(err, `${this.o.consumer}: checkpoint of ${shardId}`);
          if (!stalledHere) {
            stalledHere = true;
            this.stalled++;
          }
          this.stats.stalledSince ??= Date.now();
          this.stats.lastError = `checkpoint of ${shardId}: ${describeError(err)}`;
          this.stats.retries++;
          if (this.stopping) throw new StopRequested();
          await sleep(backoff);
          backoff = Math.min(backoff * 2, 5_000);
        }
      }
    } finally {
      if (stalledHere) this.unstall();
    }
    this.checkpoints.written(shardId, seq);
    this.tips.get(shardId)?.acknowledged(seq);
  }

  private async deadLetter(shardId: string, records: _Record[], code: string, reason: string): Promise<void> {
    for (const r of records) {
      const text = Buffer.from(r.Data ?? new Uint8Array()).toString('utf8');
      const about = aboutRecord(text);
      const letter: DeadLetter = {
        at: new Date().toISOString(),
        stage: this.o.consumer,
        source: about.source,
        table: about.table,
        code,
        reason,
        origin: `${this.o.streamName}/${shardId}/${r.SequenceNumber}`,
        // Whole: the control plane keeps a large record in its payload store (docs/large-records.md).
        record: text,
        truncated: false,
      };
      await this.o.controlPlane.putDeadLetter(letter);
      this.stats.deadLetters++;
    }
  }
}
