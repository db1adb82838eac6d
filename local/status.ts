/**
 * The live status of `cdc local`: a pure function from what the pipeline collected to lines of
 * text, and a small writer that redraws them in place on a terminal and prints plain periodic
 * lines otherwise (CI logs, pipes).
 */
import { POLL_DELETES_INVISIBLE } from '../lambda/core/capture/poll.ts';

export interface SinkStatus {
  sink: string;
  /** End-to-end lag measured on the latest heartbeat (source commit → sink commit), ms. */
  lagMs: number | null;
  /** When the latest heartbeat lag was measured (epoch ms). */
  lagAt: number | null;
  lagP50Ms: number | null;
  lagP99Ms: number | null;
  eventsPerSecond: number;
  deadLetters: number;
  /**
   * After a restart: the largest lag of heartbeats committed before this run started and applied
   * in it. It includes the time the pipeline was down, so p50/p99 leave those heartbeats out
   * (their window starts at the resume) and this shows them apart. @default none
   */
  carriedLagMs?: number | null;
}

export interface ConsumerStatus {
  consumer: string;
  recordsPerSecond: number;
  /** Largest MillisBehindLatest across shards (Lambda's IteratorAge). */
  behindMs: number;
  retries: number;
  deadLetters: number;
  /** How long a batch has been failing with an infrastructure error and retried (ms), or null: outages delay, they never skip. */
  stalledMs?: number | null;
  /** The last infrastructure error while stalled. */
  lastError?: string | null;
}

export interface TableStatus {
  table: string;
  state: string;
  reason: string | null;
  /** `poll` for a polled table: its deletes are not observable (docs/polling.md). */
  capture?: 'poll';
  /** The sinks that hold its events now (paused, or stopped by an error a retry will not fix; docs/operations.md). @default none */
  heldBy?: string[];
}

/** One replication slot of the source as the slot monitor saw it (lambda/core/capture/slot-monitor.ts). */
export interface SlotStatusLine {
  slot: string;
  ours: boolean;
  active: boolean;
  walStatus: string | null;
  /** `confirmed_flush_lsn`: how far the slot's consumer confirmed. @default unknown */
  confirmedLsn?: string | null;
  retainedBytes: number | null;
  headroomBytes: number | null;
  level: string;
}

/** One table's snapshot run (docs/snapshot.md "Reading the progress"). */
export interface SnapshotStatusLine {
  table: string;
  status: string;
  rowsDone: number;
  estimatedRows: number;
  rowsPerSecond: number;
  etaSeconds: number | null;
  throttle: string;
  chunkSize: number;
  /** Milliseconds since the run last wrote progress. */
  sinceUpdateMs: number;
  error: string | null;
}

export interface StatusSnapshot {
  now: number;
  startedAt: number;
  source: string;
  /** Where things are (state folder, warehouse URL without password, archive location). */
  where: string[];
  capture: {
    state: 'starting' | 'running' | 'stopped' | 'failed';
    transactions: number;
    records: number;
    recordsPerSecond: number;
    /** Raw records the normalizer read with its DMS decoder (metric `DmsRecordsDecoded`; docs/local.md, "DMS records"). @default 0 */
    dmsDecoded?: number;
    lastCommitLsn: string | null;
    slotRetainedBytes: number | null;
    error: string | null;
  };
  workload: { transactions: number; transactionsPerSecond: number; errors: number } | null;
  consumers: ConsumerStatus[];
  sinks: SinkStatus[];
  tables: TableStatus[];
  /** Every replication slot of the source (the capture's first), from the slot monitor. */
  slots?: SlotStatusLine[];
  /** Snapshot runs that are requested, running, or finished recently. @default none */
  snapshots?: SnapshotStatusLine[];
  /** Tables the capture rules match but do not capture (excluded, ineligible, dropped), each with its reason (docs/onboarding.md). @default none */
  notCaptured?: Array<{ table: string; verdict: string; reason: string }>;
  deadLetters: number;
  /** Recent problems (retried errors, handler error logs), newest last, with their time. */
  problems: Array<{ at: number; text: string }>;
  /** A line to show at the bottom (what to do next, e.g. "Ctrl-C to stop"). */
  hint: string | null;
}

function duration(ms: number): string {
  const s = Math.floor(ms / 1000);
  const m = Math.floor(s / 60);
  const h = Math.floor(m / 60);
  if (h > 0) return `${h}h${String(m % 60).padStart(2, '0')}m`;
  if (m > 0) return `${m}m${String(s % 60).padStart(2, '0')}s`;
  return `${s}s`;
}

/** Milliseconds as a short human text (`850 ms`, `2.4 s`, `3m05s`); `-` for none. */
export function formatMs(ms: number | null): string {
  if (ms === null || !Number.isFinite(ms)) return '-';
  if (ms < 1000) return `${Math.round(ms)} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)} s`;
  return duration(ms);
}

/** Bytes as a short human text (`512 B`, `3.5 KiB`, `12.0 MiB`); `-` for none. */
export function formatBytes(n: number | null): string {
  return bytes(n);
}

function bytes(n: number | null): string {
  if (n === null) return '-';
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KiB`;
  return `${(n / 1024 / 1024).toFixed(1)} MiB`;
}

function rate(n: number): string {
  return n >= 100 ? n.toFixed(0) : n.toFixed(1);
}

function table(rows: string[][]): string[] {
  const widths: number[] = [];
  for (const r of rows) r.forEach((c, i) => (widths[i] = Math.max(widths[i] ?? 0, c.length)));
  return rows.map((r) => `  ${r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ')}`.trimEnd());
}

/** Renders the full status as lines (no colours, no control characters). */
export function renderStatus(s: StatusSnapshot): string[] {
  const lines: string[] = [];
  lines.push(`cdc local — source ${s.source} — up ${duration(s.now - s.startedAt)}`);
  for (const w of s.where) lines.push(`  ${w}`);
  lines.push('');
  const c = s.capture;
  lines.push(
    `capture  ${c.state}  ${c.transactions} tx, ${c.records} records (${rate(c.recordsPerSecond)}/s)  DMS-decoded ${c.dmsDecoded ?? 0}  acked ${c.lastCommitLsn ?? '-'}  slot retains ${bytes(c.slotRetainedBytes)}`,
  );
  if (c.error) lines.push(`  ERROR ${c.error}`);
  if (s.workload)
    lines.push(
      `workload ${s.workload.transactions} tx (${rate(s.workload.transactionsPerSecond)}/s)${s.workload.errors ? `, ${s.workload.errors} errors` : ''}`,
    );
  lines.push('');
  if (s.sinks.length > 0) {
    lines.push('sinks (end-to-end lag from the heartbeat)');
    lines.push(
      ...table([
        ['sink', 'lag now', 'p50', 'p99', 'events/s', 'dead letters'],
        ...s.sinks.map((k) => [
          k.sink,
          k.lagMs === null
            ? 'waiting for heartbeat'
            : `${formatMs(k.lagMs)}${k.lagAt !== null && s.now - k.lagAt > 15_000 ? ` (stale ${formatMs(s.now - k.lagAt)})` : ''}`,
          formatMs(k.lagP50Ms),
          formatMs(k.lagP99Ms),
          rate(k.eventsPerSecond),
          String(k.deadLetters),
        ]),
      ]),
    );
    for (const k of s.sinks) {
      if (k.carriedLagMs != null)
        lines.push(
          `  ${k.sink}: heartbeats committed before this run started arrived with up to ${formatMs(k.carriedLagMs)} lag (it includes the downtime); p50/p99 count this run's heartbeats only`,
        );
    }
    lines.push('');
  }
  if (s.consumers.length > 0) {
    lines.push('pollers');
    lines.push(
      ...table([
        ['consumer', 'records/s', 'behind', 'retries', 'dead letters'],
        ...s.consumers.map((p) => [p.consumer, rate(p.recordsPerSecond), formatMs(p.behindMs), String(p.retries), String(p.deadLetters)]),
      ]),
    );
    for (const p of s.consumers) {
      if (p.stalledMs != null)
        lines.push(`  ${p.consumer} STALLED for ${formatMs(p.stalledMs)}, retrying without limit (nothing is skipped): ${p.lastError ?? ''}`);
    }
    lines.push('');
  }
  if (s.slots && s.slots.length > 0) {
    lines.push('slots (retained WAL, headroom before max_slot_wal_keep_size or the WAL budget)');
    lines.push(
      ...table([
        ['slot', 'owner', 'active', 'wal_status', 'confirmed', 'retained', 'headroom', 'level'],
        ...s.slots.map((k) => [
          k.slot,
          k.ours ? 'capture' : 'other',
          k.active ? 'yes' : 'no',
          k.walStatus ?? '-',
          k.confirmedLsn ?? '-',
          bytes(k.retainedBytes),
          bytes(k.headroomBytes),
          k.level,
        ]),
      ]),
    );
    lines.push('');
  }
  if (s.snapshots && s.snapshots.length > 0) {
    lines.push('snapshots (rows done / estimated, rate, ETA, throttle)');
    lines.push(...table(s.snapshots.map(snapshotCells)));
    lines.push('');
  }
  if (s.notCaptured && s.notCaptured.length > 0) {
    lines.push('not captured (capture rules, docs/onboarding.md)');
    lines.push(...table(s.notCaptured.map((t) => [t.table, t.verdict, t.reason])));
    lines.push('');
  }
  if (s.tables.length > 0) {
    lines.push('tables');
    lines.push(
      ...table(
        s.tables.map((t) => [
          t.table,
          t.state,
          [t.heldBy?.length ? `held by ${t.heldBy.join(', ')}` : null, t.reason, t.capture === 'poll' ? `capture poll: ${POLL_DELETES_INVISIBLE}` : null]
            .filter((x) => x)
            .join('; '),
        ]),
      ),
    );
    lines.push('');
  }
  lines.push(`dead letters: ${s.deadLetters}`);
  if (s.problems.length > 0) {
    lines.push('', 'recent problems (details in logs/handlers.log)');
    for (const p of s.problems) lines.push(`  ${formatMs(s.now - p.at)} ago  ${p.text}`);
  }
  if (s.hint) lines.push(s.hint);
  return lines;
}

function eta(seconds: number | null): string {
  return seconds === null || !Number.isFinite(seconds) ? 'ETA unknown' : `ETA ${formatMs(seconds * 1000)}`;
}

function snapshotCells(x: SnapshotStatusLine): string[] {
  const pct = x.estimatedRows > 0 ? ` (${Math.min(100, (100 * x.rowsDone) / x.estimatedRows).toFixed(0)}%)` : '';
  return [
    x.table,
    x.status,
    `${x.rowsDone}/${x.estimatedRows}${pct}`,
    `${rate(x.rowsPerSecond)} rows/s`,
    x.status === 'running' ? eta(x.etaSeconds) : x.status === 'done' ? 'done' : '-',
    `${x.status === 'running' ? explainThrottle(x.throttle) : x.throttle}${x.chunkSize ? ` (chunk ${x.chunkSize})` : ''}`,
    x.error ? `ERROR ${x.error}` : x.status === 'running' && x.sinceUpdateMs > 30_000 ? `no progress for ${formatMs(x.sinceUpdateMs)}` : '',
  ];
}

/** One line for logs that are not a terminal. */
export function renderStatusLine(s: StatusSnapshot): string {
  const sinks = s.sinks
    .map(
      (k) =>
        `${k.sink} lag ${formatMs(k.lagMs)} (p99 ${formatMs(k.lagP99Ms)}${k.carriedLagMs != null ? `; up to ${formatMs(k.carriedLagMs)} before the resume, downtime included` : ''}) ${rate(k.eventsPerSecond)} ev/s`,
    )
    .join('; ');
  const states = new Map<string, number>();
  for (const t of s.tables) states.set(t.state, (states.get(t.state) ?? 0) + 1);
  const held = s.tables.filter((t) => t.heldBy?.length).map((t) => `${t.table} by ${t.heldBy!.join(', ')}`);
  const tables = [...states].map(([k, n]) => `${n} ${k}`).join(', ') + (held.length > 0 ? ` (held: ${held.join('; ')})` : '');
  return (
    `[${duration(s.now - s.startedAt)}] capture ${s.capture.state} ${s.capture.records} records (${rate(s.capture.recordsPerSecond)}/s), DMS-decoded ${s.capture.dmsDecoded ?? 0}` +
    (s.workload ? `; workload ${s.workload.transactions} tx` : '') +
    (sinks ? `; ${sinks}` : '') +
    `; tables ${tables || 'none yet'}; dead letters ${s.deadLetters}` +
    s.consumers
      .filter((p) => p.stalledMs != null)
      .map((p) => `; ${p.consumer} STALLED for ${formatMs(p.stalledMs ?? 0)}`)
      .join('') +
    (s.slots?.some((k) => k.ours)
      ? `; slot retains ${bytes(s.slots.find((k) => k.ours)!.retainedBytes)}, headroom ${bytes(s.slots.find((k) => k.ours)!.headroomBytes)}`
      : '') +
    (s.slots?.some((k) => k.level !== 'ok')
      ? `; SLOT ${s.slots
          .filter((k) => k.level !== 'ok')
          .map((k) => `${k.slot} ${k.level}`)
          .join(', ')}`
      : '') +
    (s.snapshots ?? [])
      .filter((x) => x.status === 'running' || x.status === 'requested')
      .map(
        (x) =>
          `; snapshot ${x.table} ${x.rowsDone}/${x.estimatedRows} rows ${rate(x.rowsPerSecond)}/s ${eta(x.etaSeconds)} ${explainThrottle(x.throttle, true)}`,
      )
      .join('') +
    (s.notCaptured && s.notCaptured.length > 0
      ? `; not captured: ${s.notCaptured.map((t) => `${t.table} ${t.verdict}`).join(', ')} (reasons: cdc status)`
      : '') +
    (s.problems.length > 0 ? `; ${s.problems.length} recent problem(s), last: ${s.problems[s.problems.length - 1]!.text}` : '') +
    (s.capture.error ? `; ERROR ${s.capture.error}` : '')
  );
}

/**
 * Snapshot rates and ETAs from a moving window of rows done over wall time (`MovingRate`), in
 * place of the worker's per-chunk rate: a snapshot that rests between chunks shows the rate it
 * really makes, and its ETA follows from that.
 */
export class SnapshotWindow {
  private readonly rates = new Map<string, MovingRate>();

  constructor(private readonly windowMs = 30_000) {}

  apply(s: StatusSnapshot): StatusSnapshot {
    if (!s.snapshots) return s;
    const snapshots = s.snapshots.map((x) => {
      if (x.status !== 'running') return x;
      let r = this.rates.get(x.table);
      if (!r) this.rates.set(x.table, (r = new MovingRate(this.windowMs)));
      const perSecond = r.add(s.now, x.rowsDone);
      if (perSecond === null) return x;
      const ms = etaMs(Math.max(0, x.estimatedRows - x.rowsDone), perSecond);
      return { ...x, rowsPerSecond: perSecond, etaSeconds: ms === null ? null : ms / 1000 };
    });
    return { ...s, snapshots };
  }
}

/** Writes the status: redrawn in place on a terminal, a plain line every `plainEveryMs` otherwise. */
export class StatusWriter {
  private drawn = 0;
  private lastPlain = 0;

  constructor(
    private readonly write: (text: string) => void,
    private readonly tty: boolean,
    private readonly plainEveryMs = 10_000,
    /** Terminal width: longer lines are cut, so that a wrapped line cannot break the redraw. */
    private readonly columns: () => number | undefined = () => undefined,
  ) {}

  update(s: StatusSnapshot, force = false): void {
    if (this.tty) {
      const width = this.columns();
      const lines = renderStatus(s).map((l) => (width && l.length >= width ? `${l.slice(0, Math.max(1, width - 2))}…` : l));
      // Up to the first line drawn last time, clear to the end of the screen, draw again.
      const up = this.drawn > 0 ? `\x1b[${this.drawn}F\x1b[J` : '';
      this.write(`${up}${lines.join('\n')}\n`);
      this.drawn = lines.length;
    } else if (force || s.now - this.lastPlain >= this.plainEveryMs) {
      this.lastPlain = s.now;
      this.write(`${renderStatusLine(s)}\n`);
    }
  }

  /** Text written after this is not overwritten by the next update. */
  release(): void {
    this.drawn = 0;
  }
}

/**
 * A rate over a moving window (events/s, rows/s): what the screen shows now, not an average since
 * the start, so that a pause or a burst shows within one window. Fed with a growing total and the
 * time it was read (an injected clock in tests).
 */
export class MovingRate {
  private readonly samples: Array<[number, number]> = [];

  constructor(readonly windowMs = 30_000) {}

  /** Records the total at `at` (epoch ms) and returns the rate per second over the window, or null before two readings. */
  add(at: number, total: number): number | null {
    this.samples.push([at, total]);
    // Keep one reading at or before the window's start, so the window is always covered.
    while (this.samples.length > 2 && this.samples[1]![0] <= at - this.windowMs) this.samples.shift();
    return this.rate();
  }

  /** Per second over the window (from the oldest reading kept to the newest), or null before two readings. */
  rate(): number | null {
    if (this.samples.length < 2) return null;
    const [t0, v0] = this.samples[0]!;
    const [t1, v1] = this.samples[this.samples.length - 1]!;
    return t1 > t0 ? (Math.max(0, v1 - v0) * 1000) / (t1 - t0) : null;
  }
}

/** The time to do `left` at `perSecond`: 0 when nothing is left, null when nothing moves. */
export function etaMs(left: number, perSecond: number | null): number | null {
  if (left <= 0) return 0;
  if (perSecond === null || perSecond <= 0) return null;
  return (left / perSecond) * 1000;
}

/**
 * What a snapshot's throttle state means, for the status (docs/snapshot.md, "The budget"); `short`
 * for the one-line status of logs.
 */
export function explainThrottle(throttle: string, short = false): string {
  switch (throttle) {
    case 'paused':
      return short
        ? "paused (the source's probe commits over 2x the budget)"
        : "paused: the source's probe commits were slower than twice the budget allows (the pacer reads the write latency the source's own clock measures, so the client's load does not count; a disk shared with other processes does), so the snapshot rests between small chunks";
    case 'slowed':
      return short
        ? "slowed (the source's probe commits over the budget)"
        : "slowed: the source's probe commits were over the budget, so the snapshot rests between chunks";
    case 'fenced':
      return short ? 'fenced (waiting for the capture)' : 'fenced: waiting for the capture to pass the chunk fence (the capture is behind)';
    default:
      return throttle;
  }
}

/** One sink's part of a drain: what is left for it and how fast it goes. */
export interface DrainSink {
  sink: string;
  /** Events it still has to apply (about: counted since this run started), snapshot rows not yet read included. */
  left: number;
  /** Events it applied per second over the moving window, or null before two readings. */
  perSecond: number | null;
  /** Its poller's iterator age (how far behind the change log's tip its last read was), ms. */
  behindMs: number;
}

/** One progress line while a bounded run waits for the sinks (every 10 s, so a drain is never silent). */
export function renderDrainLine(p: {
  elapsedMs: number;
  windowMs: number;
  snapshotRowsLeft: number;
  snapshotPerSecond: number | null;
  sinks: DrainSink[];
}): string {
  const per = (r: number | null): string => (r === null ? 'rate unknown' : `${rate(r)}/s`);
  const eta = (left: number, r: number | null): string => {
    const ms = etaMs(left, r);
    return ms === null ? 'ETA unknown (no progress in the window)' : `ETA ${formatMs(ms)}`;
  };
  const parts = p.sinks.map((k) => `${k.sink} ${k.left} events left, ${per(k.perSecond)}, ${eta(k.left, k.perSecond)}, iterator age ${formatMs(k.behindMs)}`);
  if (p.snapshotRowsLeft > 0)
    parts.unshift(`snapshot ${p.snapshotRowsLeft} rows left to read, ${per(p.snapshotPerSecond)}, ${eta(p.snapshotRowsLeft, p.snapshotPerSecond)}`);
  return `draining for ${formatMs(p.elapsedMs)} (rates over the last ${formatMs(p.windowMs)}): ${parts.join('; ') || 'nothing left'}`;
}
