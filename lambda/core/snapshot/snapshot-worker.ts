/**
 * The snapshot worker's logic over injected ports (docs/snapshot.md): requests, the chunk loop,
 * resumption, pacing and progress. The reader (lambda/adapters/snapshot-postgres.ts) speaks SQL;
 * records go to the raw stream through `publish` (the normalizer registers, versions and
 * validates them like every other record); state goes to the control plane.
 *
 * Per chunk: ask the pacer → (pause) → read the chunk behind the visibility fence → build the
 * masked records (packed: many rows per record, docs/snapshot.md "Packed records") → publish them and wait until every one is accepted → record the chunk and the
 * cursor after it in ONE conditional control-plane transaction. A crash anywhere before that
 * transaction leaves the cursor where it was: the chunk is read again (with a new watermark)
 * and published again, which is harmless (a duplicate at a higher position carries a value at
 * least as new). A chunk is never recorded as done before all of its records are in the stream.
 * A run is never restarted from the start by a crash: only a new request starts a new run.
 */
import type { AuditEntry, ControlPlane, TableRecord } from '../shared/control-plane.ts';
import type { ColumnRules } from '../tables/masking.ts';
import type { Pacer, PressureReading } from './snapshot-pacer.ts';
import { CdcError } from '../shared/errors.ts';
import { pollWatermark, snapshotRunSpace, type PollSnapshotReader } from '../capture/poll-snapshot.ts';
import { isPollSpace, PositionSpaceMismatchError, type PollSpace, type PositionSpace } from '../shared/position-space.ts';
import {
  afterChunk,
  packChunkSteps,
  snapshotRawRecord,
  chunkEndKey,
  chunkRowCount,
  newSnapshotState,
  snapshotPending,
  snapshotPosition,
  sweepRecord,
  type ChunkRead,
  type KeyCursor,
  type SnapshotChunkRecord,
  type SnapshotRawRecord,
  type SnapshotReason,
  type SnapshotState,
  type SnapshotTableShape,
  type ThrottleState,
} from './snapshot.ts';

/** Reads the source (lambda/adapters/snapshot-postgres.ts). */
export interface SnapshotReader extends Partial<PollSnapshotReader> {
  describe(table: string): Promise<SnapshotTableShape>;
  estimateRows(table: string): Promise<number>;
  /** One chunk behind the visibility fence (see the adapter's module comment). */
  readChunk(shape: SnapshotTableShape, startAfter: KeyCursor | null, limit: number): Promise<ChunkRead>;
}

/** Metrics of the worker (EMF on Lambda and locally). */
export interface SnapshotMetrics {
  progress(state: SnapshotState): void;
}

export interface RequestSnapshotInput {
  source: string;
  table: string;
  reason: SnapshotReason;
  /** Who asks (`operator:<id>`, `snapshot-planner`, …): goes into the audit entry. */
  actor: string;
  now?: Date;
}

export type RequestSnapshotOutcome = { outcome: 'requested'; state: SnapshotState } | { outcome: 'refused'; reason: string; state: SnapshotState | null };

/**
 * The entry point to (re-)snapshot a table: writes a `requested` run, conditional on the stored
 * run being unchanged since it was read, so of two concurrent requests exactly one wins; refuses
 * (audited) while a run is requested or running. A worker picks the run up (`runTableSnapshot`).
 */
export async function requestSnapshot(controlPlane: ControlPlane, input: RequestSnapshotInput): Promise<RequestSnapshotOutcome> {
  const now = input.now ?? new Date();
  const previous = await controlPlane.getSnapshot(input.source, input.table);
  const audit = (outcome: 'done' | 'refused', detail: Record<string, unknown>): AuditEntry => ({
    at: now.toISOString(),
    actor: input.actor,
    action: 'request-snapshot',
    source: input.source,
    table: input.table,
    outcome,
    detail: { reason: input.reason, ...detail },
  });
  if (snapshotPending(previous)) {
    const reason = `a snapshot (run ${previous!.run}, ${previous!.status}) is already ${previous!.status === 'requested' ? 'requested' : 'running'}`;
    await controlPlane.appendAudit(audit('refused', { refusal: reason }));
    return { outcome: 'refused', reason, state: previous };
  }
  const state = newSnapshotState(input.source, input.table, input.reason, input.actor, now, previous);
  const ok = await controlPlane.putSnapshot(state, previous?.version ?? null, audit('done', { run: state.run }));
  if (!ok) {
    const reason = 'another request for this table was written at the same time';
    await controlPlane.appendAudit(audit('refused', { refusal: reason }));
    return { outcome: 'refused', reason, state: await controlPlane.getSnapshot(input.source, input.table) };
  }
  return { outcome: 'requested', state };
}

/**
 * Which configured tables need a first snapshot: those with no run recorded yet (a table
 * captured for the first time, or added to a running source), unless opted out. Returns the
 * reasons to request them with; tables already known get `added`, tables of a new source
 * `initial`.
 */
export function tablesToSnapshot(
  configured: readonly { table: string; snapshot?: boolean; capture?: string }[],
  runs: readonly SnapshotState[],
  registered: readonly TableRecord[],
): { table: string; reason: SnapshotReason }[] {
  const withRun = new Set(runs.map((r) => r.table));
  const anyRun = runs.length > 0 || registered.length > 0;
  // A polled table's first poll pass reads every row (docs/polling.md): no snapshot.
  return configured
    .filter((t) => t.snapshot !== false && t.capture !== 'poll' && !withRun.has(t.table))
    .map((t) => ({ table: t.table, reason: anyRun ? 'added' : 'initial' }));
}

export interface RunTableSnapshotOptions {
  controlPlane: ControlPlane;
  reader: SnapshotReader;
  /** Publishes records in order and resolves when every one was accepted. */
  publish: (records: SnapshotRawRecord[]) => Promise<void>;
  /** The most bytes of one packed record's JSON. @default PACKED_RECORD_BUDGET */
  recordBudget?: number;
  pacer: Pacer;
  source: string;
  table: string;
  rules: ColumnRules;
  /**
   * The poll column of a polled table (docs/polling.md), undefined for a log-captured one: a
   * polled table's run takes its positions in its poll space (lambda/core/capture/poll-snapshot.ts).
   */
  pollColumnOf?: (table: string) => string | undefined;
  /** This worker's id (lease owner). */
  owner: string;
  /** A lease lasts this long past each write; another worker may take over after. @default 60000 */
  leaseMs?: number;
  /** Source pressure before each pacer decision (null: none measured). */
  pressure?: () => Promise<PressureReading | null>;
  metrics?: SnapshotMetrics;
  /** Stop after this many chunks (a Lambda invocation's share; the next invocation resumes). */
  maxChunks?: number;
  /** Stop when this returns true (checked between chunks). */
  shouldStop?: () => boolean;
  /**
   * A stop: the run stops at the next chunk boundary, and a pause between chunks (the pacer's
   * rest, up to 32 × a chunk's busy time) ends at once instead of running out.
   */
  signal?: AbortSignal;
  now?: () => Date;
  sleep?: (ms: number) => Promise<void>;
  /** Called after every state write (live status). */
  onState?: (state: SnapshotState) => void;
  /** Awaited between the steps of packing a chunk, to let pending I/O run (the read ahead). @default a `setImmediate` turn of the event loop */
  yieldToIo?: () => Promise<void>;
}

export type RunOutcome = 'done' | 'more' | 'nothing-to-do' | 'busy' | 'lost-lease' | 'stopped';

const defaultSleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Sleeps `ms`, or until `signal` aborts, whichever comes first (never throws). */
export function sleepUnlessAborted(ms: number, signal: AbortSignal | undefined): Promise<void> {
  if (!signal) return defaultSleep(ms);
  if (signal.aborted) return Promise.resolve();
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(timer);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

const defaultYieldToIo = () => new Promise<void>((r) => setImmediate(r));

/**
 * Runs (or resumes) the table's requested or running snapshot until it is done, `maxChunks` were
 * read, `shouldStop` says so, or another worker holds the lease. Returns what happened. Errors of
 * the reader or the stream are thrown with the cursor untouched (the caller retries later).
 */
export async function runTableSnapshot(o: RunTableSnapshotOptions): Promise<RunOutcome> {
  const now = o.now ?? (() => new Date());
  const sleep = o.sleep ?? ((ms: number) => sleepUnlessAborted(ms, o.signal));
  const stopRequested = () => (o.signal?.aborted ?? false) || (o.shouldStop?.() ?? false);
  const leaseMs = o.leaseMs ?? 60_000;
  const yieldToIo = o.yieldToIo ?? defaultYieldToIo;
  let state = await o.controlPlane.getSnapshot(o.source, o.table);
  if (!snapshotPending(state)) return 'nothing-to-do';
  const t = now();
  if (state!.status === 'running' && state!.owner !== o.owner && state!.leaseUntil > t.getTime()) return 'busy';

  const shape = await o.reader.describe(o.table);
  // Claim (or take over) the run.
  {
    const claimed: SnapshotState = {
      ...state!,
      status: 'running',
      startedAt: state!.startedAt ?? t.toISOString(),
      estimatedRows: state!.status === 'requested' ? await o.reader.estimateRows(o.table) : state!.estimatedRows,
      owner: o.owner,
      leaseUntil: t.getTime() + leaseMs,
      updatedAt: t.toISOString(),
      version: state!.version + 1,
    };
    // Every claim is audited: a start, or a resume (after a crash, a stop, or a lease taken over).
    const audit = workerAudit(o, t, state!.status === 'requested' ? 'start-snapshot' : 'resume-snapshot', {
      run: state!.run,
      cursor: state!.cursor,
      chunksDone: state!.chunksDone,
      rowsDone: state!.rowsDone,
      previousOwner: state!.owner,
    });
    if (!(await o.controlPlane.putSnapshot(claimed, state!.version, audit))) return 'busy';
    state = claimed;
    o.onState?.(state);
  }
  // The run's position space (docs/architecture.md §5.2): a polled table's run takes its watermark
  // from its poll column once, before its first chunk (lambda/core/capture/poll-snapshot.ts).
  let space: PositionSpace;
  try {
    space = snapshotRunSpace(o.table, await o.controlPlane.getTable(o.source, o.table), shape, o.pollColumnOf?.(o.table), state!);
    if (isPollSpace(space) && state!.firstLowWatermark === null) state = await takePollWatermark(o, state!, shape, space, now(), leaseMs);
  } catch (e) {
    if (e instanceof PositionSpaceMismatchError) await failRun(o, state!, e, now());
    throw e;
  }
  if (!state) return 'lost-lease';
  const pollMark = isPollSpace(space) ? state.firstLowWatermark : null;

  let chunks = 0;
  let last = now().getTime();
  // At most one read ahead: the next chunk, read while this one is published and recorded. It is
  // used only if the cursor it started after is still the run's cursor; it is never recorded
  // before the chunk before it, so resumption is unchanged (a crash loses it like any unrecorded
  // chunk). Each chunk has its own fence, so reading it early changes nothing in the stitching.
  let ahead: { after: string; limit: number; read: Promise<ChunkRead> } | null = null;
  const keyOf = (c: KeyCursor | null) => JSON.stringify(c);
  const settle = async () => {
    if (ahead) await ahead.read.catch(() => undefined);
    ahead = null;
  };
  try {
    for (;;) {
      if (stopRequested()) return 'stopped';
      if (o.maxChunks !== undefined && chunks >= o.maxChunks) return 'more';
      const decision = o.pacer.next();
      if (decision.pauseMs > 0) {
        state = await writeThrottle(o, state!, decision.state === 'full-speed' ? 'slowed' : decision.state, now(), leaseMs);
        if (!state) return 'lost-lease';
        await sleep(decision.pauseMs);
        if (stopRequested()) return 'stopped';
      }
      const started = performance.now();
      let limit = decision.chunkSize;
      let read: ChunkRead;
      if (ahead !== null && ahead.after === keyOf(state!.cursor)) {
        limit = ahead.limit;
        read = await ahead.read;
      } else {
        await settle();
        read = await o.reader.readChunk(shape, state!.cursor, limit);
      }
      ahead = null;
      // A polled table's rows take the run's poll watermark, never the log's (lambda/core/capture/poll-snapshot.ts).
      if (pollMark !== null) read = { ...read, lowWatermark: pollMark };
      // Counted and keyed without parsing the rows when the read has them as COPY text.
      const rowCount = chunkRowCount(read);
      const finished = rowCount < limit;
      const endKey = chunkEndKey(shape, read);
      if (!finished && decision.readAhead && (o.maxChunks === undefined || chunks + 1 < o.maxChunks)) {
        const r = o.reader.readChunk(shape, endKey, decision.chunkSize);
        r.catch(() => undefined); // awaited (and its error thrown) when used
        ahead = { after: keyOf(endKey), limit: decision.chunkSize, read: r };
      }
      // The chunk's rows as packed records (docs/snapshot.md, "Packed records"), packed in steps
      // with a pause after each, in which the read ahead makes progress (docs/performance-log.md, "Snapshot read packed straight from the COPY text").
      const steps = packChunkSteps(o.source, shape, read, o.rules, o.recordBudget);
      let step = steps.next();
      while (!step.done) {
        await yieldToIo();
        step = steps.next();
      }
      const records = step.value;
      // A re-snapshot's last chunk carries the sweep (docs/snapshot.md, "Re-snapshot"), published
      // with it before the run is recorded done: a crash before that publishes it again, at the
      // same position (a replayed truncate changes nothing).
      if (finished && (state!.reason === 'resnapshot' || pollMark !== null)) {
        const sweep = sweepRecord(o.source, o.table, state!.firstLowWatermark ?? read.lowWatermark, read.readAt);
        records.push(snapshotRawRecord(sweep));
      }
      if (records.length > 0) await o.publish(records);
      const at = now();
      const chunk: SnapshotChunkRecord = {
        source: o.source,
        table: o.table,
        run: state!.run,
        index: state!.chunksDone,
        startAfter: state!.cursor,
        endKey,
        rows: rowCount,
        lowWatermark: read.lowWatermark,
        fenceXid: read.fenceXid,
        position: snapshotPosition(read.lowWatermark),
        readAt: read.readAt,
        readMs: Math.round(read.readMs),
        fenceWaitMs: Math.round(read.fenceWaitMs),
        fromReplica: read.fromReplica,
        ...(read.fromReplica ? { replayLsn: read.replayLsn ?? null, replicaLagMs: read.replicaLagMs ?? null } : {}),
        status: 'published',
        completedAt: at.toISOString(),
      };
      const throttle: ThrottleState = read.fenceWaitMs > 1000 ? 'fenced' : decision.state;
      let next: SnapshotState = {
        ...afterChunk(state!, chunk, at.getTime() - last, at, leaseMs),
        throttle,
        chunkSize: limit,
        readFrom: read.fromReplica ? 'replica' : 'primary',
        replicaLagMs: read.fromReplica ? (read.replicaLagMs ?? null) : null,
      };
      last = at.getTime();
      if (finished)
        next = {
          ...next,
          status: 'done',
          finishedAt: at.toISOString(),
          etaSeconds: 0,
          estimatedRows: next.rowsDone,
          throttle: 'idle',
          owner: null,
          leaseUntil: 0,
        };
      if (!(await o.controlPlane.completeSnapshotChunk(chunk, next, state!.version))) return 'lost-lease';
      state = next;
      chunks++;
      o.onState?.(state);
      o.metrics?.progress(state);
      if (finished) {
        await o.controlPlane.appendAudit(workerAudit(o, at, 'finish-snapshot', { run: state.run, rows: state.rowsDone, chunks: state.chunksDone }));
        await reactivateAfterResnapshot(o, state, at);
        return 'done';
      }
      const pressure = o.pressure ? await o.pressure() : null;
      o.pacer.record({ rows: rowCount, readMs: read.readMs, fixedMs: read.roundTripMs ?? 0, busyMs: performance.now() - started, pressure });
    }
  } finally {
    await settle();
  }
}

/**
 * Takes a polled table's run watermark (lambda/core/capture/poll-snapshot.ts): from the bound H read on the
 * source now, before any chunk (the xmin of a snapshot, or the microsecond below the poll horizon),
 * stored with the run before any chunk is read, so every chunk and a worker that takes the run
 * over use the same one. Null when the lease was lost.
 */
async function takePollWatermark(
  o: RunTableSnapshotOptions,
  state: SnapshotState,
  shape: SnapshotTableShape,
  space: PollSpace,
  at: Date,
  leaseMs: number,
): Promise<SnapshotState | null> {
  const pollColumn = o.pollColumnOf!(o.table)!;
  if (!o.reader.pollBound) throw new CdcError('INVALID_CONFIG', `${o.table} is polled, but the snapshot reader cannot read its poll bound (pollBound)`);
  const bound = await o.reader.pollBound(shape, pollColumn);
  const watermark = pollWatermark(bound);
  const next: SnapshotState = {
    ...state,
    firstLowWatermark: watermark,
    positionSpace: space,
    updatedAt: at.toISOString(),
    leaseUntil: at.getTime() + leaseMs,
    version: state.version + 1,
  };
  const audit = workerAudit(o, at, 'poll-snapshot-watermark', {
    run: state.run,
    positionSpace: space,
    pollColumn,
    bound,
    watermark,
    rowPosition: snapshotPosition(watermark),
  });
  if (!(await o.controlPlane.putSnapshot(next, state.version, audit))) return null;
  o.onState?.(next);
  return next;
}

/** Ends a run that cannot go on (its positions would mix spaces): `failed` with the error, audited. */
async function failRun(o: RunTableSnapshotOptions, state: SnapshotState, e: CdcError, at: Date): Promise<void> {
  const failed: SnapshotState = {
    ...state,
    status: 'failed',
    error: `${e.code}: ${e.message}`,
    finishedAt: at.toISOString(),
    owner: null,
    leaseUntil: 0,
    updatedAt: at.toISOString(),
    version: state.version + 1,
  };
  const audit = workerAudit(o, at, 'fail-snapshot', { run: state.run, code: e.code, reason: e.message }, 'refused');
  if (await o.controlPlane.putSnapshot(failed, state.version, audit)) o.onState?.(failed);
}

/** The audit entry of what this worker did to its table (docs/operations.md, "`cdc audit [TABLE] [--since TIME]`"): who (`snapshot:` and its owner id), when, what. */
function workerAudit(
  o: RunTableSnapshotOptions,
  at: Date,
  action: string,
  detail: Record<string, unknown>,
  outcome: AuditEntry['outcome'] = 'done',
): AuditEntry {
  return { at: at.toISOString(), actor: `snapshot:${o.owner}`, action, source: o.source, table: o.table, outcome, detail };
}

/** A re-snapshot that finished brings a `needs-resnapshot` table back to `active` (with its audit entry). */
async function reactivateAfterResnapshot(o: RunTableSnapshotOptions, state: SnapshotState, at: Date): Promise<void> {
  if (state.reason !== 'resnapshot') return;
  const table = await o.controlPlane.getTable(o.source, o.table);
  if (table?.state !== 'needs-resnapshot') return;
  await o.controlPlane.setTableState(
    o.source,
    o.table,
    'active',
    null,
    workerAudit(o, at, 'resnapshot-complete', { from: 'needs-resnapshot', to: 'active', run: state.run }),
  );
}

async function writeThrottle(
  o: RunTableSnapshotOptions,
  state: SnapshotState,
  throttle: ThrottleState,
  at: Date,
  leaseMs: number,
): Promise<SnapshotState | null> {
  if (state.throttle === throttle && state.leaseUntil - at.getTime() > leaseMs / 2) return state;
  const next = { ...state, throttle, updatedAt: at.toISOString(), leaseUntil: at.getTime() + leaseMs, version: state.version + 1 };
  if (!(await o.controlPlane.putSnapshot(next, state.version, null))) return null;
  o.onState?.(next);
  return next;
}

/**
 * Requests a first snapshot for every configured table that has none yet (opt-out per table
 * with `snapshot: false`), so a table added to a running source gets one without touching the
 * others. Returns the tables requested.
 */
export async function planSnapshots(
  controlPlane: ControlPlane,
  sourceId: string,
  configured: readonly { table: string; snapshot?: boolean; capture?: string }[],
  actor: string,
  now = new Date(),
): Promise<string[]> {
  const runs = await controlPlane.listSnapshots(sourceId);
  const registered = await controlPlane.listTables(sourceId);
  const out: string[] = [];
  for (const t of tablesToSnapshot(configured, runs, registered)) {
    const r = await requestSnapshot(controlPlane, { source: sourceId, table: t.table, reason: t.reason, actor, now });
    if (r.outcome === 'requested') out.push(t.table);
  }
  return out;
}

export interface RunPendingOptions extends Omit<RunTableSnapshotOptions, 'table' | 'rules' | 'pacer'> {
  rulesOf: (table: string) => ColumnRules;
  /** A pacer per run (the budget's baseline is per run), kept across the run's turns. */
  pacerFor: (table: string) => Pacer;
  /** Called before a run starts (e.g. to take the pressure baseline). */
  beforeRun?: (table: string) => Promise<void>;
  /** How long a run keeps the worker while other runs wait, ms (then the next run takes a turn). @default 10000 */
  turnMs?: number;
  /** How often a running turn looks whether other runs wait, ms. @default 2000 */
  waitingCheckMs?: number;
}

/**
 * Works through the source's pending runs one table at a time (so one snapshot never competes
 * with another for the budget), in turns: a run keeps the worker while no other run waits; when
 * others wait (requested before or while it runs), it yields after `turnMs` at a chunk boundary
 * (its cursor recorded, as at any stop) and the next takes a turn, round after round, so a long
 * or slow snapshot never holds back the others (a two-row table is copied in its first turn).
 * Each run keeps its pacer across its turns. Returns the last outcome per table touched.
 */
export async function runPendingSnapshots(o: RunPendingOptions): Promise<Map<string, RunOutcome>> {
  const outcomes = new Map<string, RunOutcome>();
  const pacers = new Map<string, Pacer>();
  const turnMs = o.turnMs ?? 10_000;
  const pendingNow = async (): Promise<SnapshotState[]> => (await o.controlPlane.listSnapshots(o.source)).filter(snapshotPending);
  const stopping = () => (o.signal?.aborted ?? false) || (o.shouldStop?.() ?? false);
  let pending = await pendingNow();
  while (pending.length > 0) {
    for (const run of pending) {
      if (stopping()) return outcomes;
      let pacer = pacers.get(run.table);
      if (!pacer) {
        await o.beforeRun?.(run.table);
        pacer = o.pacerFor(run.table);
        pacers.set(run.table, pacer);
      }
      const turn = watchOthers(pendingNow, run.table, o.waitingCheckMs ?? 2000);
      const turnEnd = Date.now() + turnMs;
      let outcome: RunOutcome;
      try {
        outcome = await runTableSnapshot({
          ...o,
          table: run.table,
          rules: o.rulesOf(run.table),
          pacer,
          shouldStop: () => stopping() || (turn.othersWaiting && Date.now() >= turnEnd),
        });
      } finally {
        await turn.stop();
      }
      outcomes.set(run.table, outcome);
      // The invocation's share is used up, or the worker is stopping.
      if (outcome === 'more' || (outcome === 'stopped' && stopping())) return outcomes;
    }
    // The next round: runs still pending (a run another worker holds, or whose lease was lost, is left to it).
    pending = (await pendingNow()).filter((r) => outcomes.get(r.table) !== 'busy' && outcomes.get(r.table) !== 'lost-lease');
  }
  return outcomes;
}

/** Whether runs other than `table`'s are pending, looked up every `everyMs` while a turn runs. */
function watchOthers(pendingNow: () => Promise<SnapshotState[]>, table: string, everyMs: number): { othersWaiting: boolean; stop: () => Promise<void> } {
  const state = { othersWaiting: false, stopped: false };
  let wake: { resolve: () => void; timer: ReturnType<typeof setTimeout> } | null = null;
  const loop = (async () => {
    while (!state.stopped) {
      try {
        state.othersWaiting = (await pendingNow()).some((r) => r.table !== table);
      } catch {
        // the next look tries again; a turn without an answer just runs on
      }
      if (state.stopped) break;
      await new Promise<void>((resolve) => (wake = { resolve, timer: setTimeout(resolve, everyMs) }));
    }
  })();
  return {
    get othersWaiting() {
      return state.othersWaiting;
    },
    stop: async () => {
      state.stopped = true;
      const w = wake as { resolve: () => void; timer: ReturnType<typeof setTimeout> } | null;
      if (w) {
        clearTimeout(w.timer);
        w.resolve();
      }
      await loop;
    },
  };
}

/** The runs still to do. */
export function snapshotPendingRuns(runs: readonly SnapshotState[]): SnapshotState[] {
  return runs.filter(snapshotPending);
}
