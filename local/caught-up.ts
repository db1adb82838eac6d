/**
 * When a local pipeline has caught up (docs/local.md, "Bounded runs (`--duration`)"): everything
 * committed on the source before the wait began has reached every sink and the archive. Each stage
 * waits for the one before it (snapshots idle, a poll pass, the capture, the normalizer, then the
 * sinks and the archive copier together, then the resumed tables' replays); a stage that makes no
 * progress for `stallMs` stops the wait with an error naming it, so a slow machine still finishes
 * and a stuck stage does not wait forever.
 */

/** A wait given up because a stop was asked for (Ctrl-C, SIGTERM: docs/local.md, "Stopping"). */
export class StopRequestedError extends Error {
  constructor() {
    super('a stop was requested');
    this.name = 'StopRequestedError';
  }
}

/** `work`, or a StopRequestedError as soon as `abort` fires; a rejection of work given up is dropped. */
export function untilAborted<T>(work: Promise<T>, abort: AbortSignal | undefined): Promise<T> {
  if (!abort) return work;
  work.catch(() => undefined);
  if (abort.aborted) return Promise.reject(new StopRequestedError());
  return new Promise<T>((resolve, reject) => {
    const onAbort = (): void => reject(new StopRequestedError());
    abort.addEventListener('abort', onAbort, { once: true });
    work.then(resolve, reject).finally(() => abort.removeEventListener('abort', onAbort));
  });
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/** A stream consumer as the wait sees it (local/poller.ts). */
interface Consumer {
  caughtUpSince(time: number): boolean;
  readonly stats: { readonly recordsDone: number };
}

/** The stages of a running pipeline the wait watches. */
export interface CaughtUpStages {
  snapshots: { waitIdle(stallMs: number): Promise<void> } | null;
  polls: { passedSince(time: number): boolean; lines(): ReadonlyArray<{ rows: number }> } | null;
  capture: { caughtUpSince(time: number): boolean; readonly stats: { readonly records: number; readonly state: string; readonly error?: unknown } };
  normalizer: Consumer;
  archive: Consumer;
  /** Each sink's applier, with the sink's id. */
  sinks: ReadonlyArray<{ sinkId: string; name: string; consumer: Consumer }>;
  replayers: ReadonlyArray<{ pending(): Promise<number> }>;
}

/**
 * Waits until the stages have caught up with what was committed when it began. `onSinkCaughtUp`
 * hears each sink (its id) whose applier caught up, so a wait aborted by a bounded run's drain
 * bound knows which sinks did.
 */
export async function waitCaughtUp(s: CaughtUpStages, stallMs: number, abort?: AbortSignal, onSinkCaughtUp?: (sinkId: string) => void): Promise<void> {
  const aborted = (): void => {
    if (abort?.aborted) throw new StopRequestedError();
  };
  const stalled = (name: string) => new Error(`the ${name} did not catch up: no progress for ${Math.round(stallMs / 1000)} s`);
  const stage = async (name: string, done: (t: number) => boolean, progress: () => number, since: number): Promise<number> => {
    let seen = progress();
    let deadline = Date.now() + stallMs;
    while (!done(since)) {
      aborted();
      if (s.capture.stats.state === 'failed') throw s.capture.stats.error ?? new Error('capture failed');
      const now = progress();
      if (now !== seen) [seen, deadline] = [now, Date.now() + stallMs];
      if (Date.now() > deadline) throw stalled(name);
      await sleep(50);
    }
    return Date.now();
  };
  // Progress of a consumer: the records it acknowledged, and those its consumers downstream did.
  const consumer = (name: string, c: Consumer, since: number, downstream: readonly Consumer[] = []): Promise<number> =>
    stage(
      name,
      (t) => c.caughtUpSince(t),
      () => [c, ...downstream].reduce((n, d) => n + d.stats.recordsDone, 0),
      since,
    );
  if (s.snapshots) await untilAborted(s.snapshots.waitIdle(stallMs), abort);
  const t0 = Date.now();
  // Polled tables: a whole poll pass that started after now (docs/polling.md).
  const polls = s.polls;
  if (polls)
    await stage(
      'poller',
      (t) => polls.passedSince(t),
      () => polls.lines().reduce((n, l) => n + l.rows, 0),
      t0,
    );
  const t1 = await stage(
    'capture',
    (t) => s.capture.caughtUpSince(t),
    () => s.capture.stats.records,
    t0,
  );
  // The normalizer acknowledges a batch when all of it is published, and a batch of packed snapshot
  // records can be 40,000 events that take minutes on a busy machine; it publishes them as it goes
  // (every 1,000 events), so the sinks and the archive copier reading them is its progress too.
  const t2 = await consumer('normalizer', s.normalizer, t1, [...s.sinks.map((k) => k.consumer), s.archive]);
  await Promise.all([
    ...s.sinks.map((k) => consumer(k.name, k.consumer, t2).then(() => onSinkCaughtUp?.(k.sinkId))),
    consumer('archive copier', s.archive, t2),
  ]);
  // A resumed table is caught up once its held range is replayed.
  let pending = Infinity;
  let deadline = Date.now() + stallMs;
  for (;;) {
    aborted();
    const now = (await Promise.all(s.replayers.map((r) => r.pending()))).reduce((a, b) => a + b, 0);
    if (now === 0) return;
    if (now < pending) [pending, deadline] = [now, Date.now() + stallMs];
    if (Date.now() > deadline) throw stalled('resume replay');
    await sleep(200);
  }
}
