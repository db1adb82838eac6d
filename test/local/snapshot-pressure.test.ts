/**
 * The source-pressure probe against a real PostgreSQL (docs/snapshot.md, "The budget"): its
 * probe writes are timed by the server's clock, so what slows the client (its event loop blocked
 * while a probe is in flight, processes burning the machine's CPU) is not read as the source's
 * pressure and the pacer stays at full speed; a source whose commits genuinely take longer under
 * concurrent writes (group commit: `commit_delay` with other transactions open) is, and the pacer
 * slows and pauses.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { PostgresPressureProbe, SERVER_TIMED_PROBE_SQL, serverTimedProbe } from '../../lambda/adapters/snapshot-postgres.ts';
import {
  AdaptivePacer,
  addedLatencyPct,
  DEFAULT_SOURCE_BUDGET,
  PROBE_QUANTILE,
  quantile,
  type PressureReading,
} from '../../lambda/core/snapshot/snapshot-pacer.ts';

/** fsync off: the client test isolates what the client adds; the disk of a shared machine varies by milliseconds. */
let fast: PostgresCluster;
/** fsync on: group commit (`commit_delay`) only delays commits that flush. */
let durable: PostgresCluster;
const clients: pg.Client[] = [];
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function connect(url: string): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url });
  c.on('error', () => undefined);
  await c.connect();
  clients.push(c);
  return c;
}

/** Blocks this process's event loop for `ms` (a worker packing a chunk, a busy `cdc local`). */
function blockEventLoop(ms: number): void {
  const end = performance.now() + ms;
  while (performance.now() < end);
}

/** Ten chunks of 1,000 rows read in 50 ms each, with a pressure reading after each; the pacer's last decision. */
async function paceTenChunks(read: () => Promise<PressureReading>): Promise<{ pacer: AdaptivePacer; states: string[]; readings: (number | null)[] }> {
  const pacer = new AdaptivePacer({ initialChunk: 1000 });
  const states: string[] = [];
  const readings: (number | null)[] = [];
  for (let i = 0; i < 10; i++) {
    const pressure = await read();
    readings.push(pressure.addedWriteLatencyPct);
    pacer.record({ rows: pacer.next().chunkSize, readMs: 50, busyMs: 100, pressure });
    states.push(pacer.next().state);
  }
  return { pacer, states, readings };
}

beforeAll(async () => {
  [fast, durable] = await Promise.all([startPostgres({ fast: true }), startPostgres({ fast: false })]);
}, 120_000);

afterAll(async () => {
  for (const c of clients) await c.end().catch(() => undefined);
  await fast?.stop();
  await durable?.stop();
});

describe('source-pressure probe (real PostgreSQL)', () => {
  it('a slowed client is not source pressure: with the event loop blocked during every probe and CPU burners running, the pacer stays at full speed', async () => {
    const plain = await connect(fast.url('postgres'));
    // The probe's client: every query blocks the event loop for 30 ms once sent, so the answer
    // waits in the socket; the round trip as the client sees it is recorded beside the probe.
    const slowed = await connect(fast.url('postgres'));
    const roundTrips: number[] = [];
    let blockMs = 0;
    const query = slowed.query.bind(slowed) as (text: string) => Promise<unknown>;
    (slowed as unknown as { query: (text: string) => Promise<unknown> }).query = async (text: string) => {
      const t0 = performance.now();
      const p = query(text);
      if (blockMs > 0) blockEventLoop(blockMs);
      const r = await p;
      if (text === SERVER_TIMED_PROBE_SQL) roundTrips.push(performance.now() - t0);
      return r;
    };
    const probe = new PostgresPressureProbe(async () => slowed);
    await probe.calibrate(20);
    const calmRoundTrips = roundTrips.splice(0);

    blockMs = 30;
    const burners: ChildProcess[] = [0, 1].map(() => spawn(process.execPath, ['-e', 'for (;;) {}'], { stdio: 'ignore' }));
    try {
      await sleep(200);
      const { pacer, states, readings } = await paceTenChunks(() => probe.read(2));
      console.log(
        `client slowed: probe round trips median ${quantile(calmRoundTrips, PROBE_QUANTILE).toFixed(2)} ms calm, ${quantile(roundTrips, PROBE_QUANTILE).toFixed(2)} ms slowed; server-timed readings ${JSON.stringify(readings)}; pacer ${JSON.stringify(states)}`,
      );
      // What a client-timed probe would have read: far over the hard threshold (the crawl of issue "paused").
      expect(addedLatencyPct(calmRoundTrips, roundTrips)!).toBeGreaterThan(2 * DEFAULT_SOURCE_BUDGET.writeLatencyPct);
      expect(quantile(roundTrips, PROBE_QUANTILE)).toBeGreaterThanOrEqual(30);
      // What the server-timed probe reads: nothing added, and the pacer never rests.
      expect(readings).toEqual(Array(10).fill(0));
      expect(states).toEqual(Array(10).fill('full-speed'));
      expect(pacer.next()).toMatchObject({ state: 'full-speed', pauseMs: 0, readAhead: true });
      expect(pacer.next().chunkSize).toBeGreaterThan(1000);
    } finally {
      blockMs = 0;
      for (const b of burners) b.kill('SIGKILL');
    }
    // The probe's duration is the server's: under a millisecond for a local commit, whatever the client did.
    expect(await serverTimedProbe(plain)).toBeLessThan(30);
  }, 60_000);

  it('a source whose commits slow under concurrent writes is pressure: the pacer slows and pauses, and reads calm again once the load stops', async () => {
    const admin = await connect(durable.url('postgres'));
    // Group commit: a commit with other write transactions open waits 10 ms for them before flushing.
    // Set in the probe's own session (the committing backend decides whether to wait), so it holds
    // from the next statement on; a reloaded server setting reaches a backend at a moment of its own.
    await admin.query('SET commit_delay = 10000');
    await admin.query('SET commit_siblings = 1');
    await admin.query('CREATE TABLE public.w (id bigserial PRIMARY KEY, v text)');
    try {
      const probe = new PostgresPressureProbe(async () => admin);
      const base = await probe.calibrate(20); // no other writer open: no delay

      // The source's own workload: three sessions that keep a write transaction open.
      let stop = false;
      const writers = await Promise.all([0, 1, 2].map(() => connect(durable.url('postgres'))));
      const rounds = [0, 0, 0];
      const load = writers.map(async (w, i) => {
        while (!stop) {
          await w.query(`BEGIN; INSERT INTO public.w (v) SELECT md5(g::text) FROM generate_series(1, 100) g; SELECT pg_sleep(0.02 + ${i} * 0.007); COMMIT`);
          rounds[i] = (rounds[i] ?? 0) + 1;
        }
      });
      // The load is on once every writer has gone round twice: on a busy machine a fixed wait could end
      // before the sessions hold a transaction open, and the first probe would read an idle source.
      while (rounds.some((r) => r < 2)) await sleep(20);
      // The reading is the median of the window's probes: a few probes under load first, so that it
      // speaks of the loaded source rather than of the calm one before (a noisy baseline on a busy
      // machine raises the noise floor, and two samples can still straddle it).
      for (let i = 0; i < 3; i++) await probe.read(2);
      const loaded = await paceTenChunks(() => probe.read(2));
      stop = true;
      await Promise.all(load);
      console.log(
        `source loaded: baseline ${base.toFixed(3)} ms; readings ${JSON.stringify(loaded.readings.map((x) => Math.round(x ?? -1)))}; pacer ${JSON.stringify(loaded.states)}`,
      );
      expect(loaded.readings.every((x) => x !== null && x > 2 * DEFAULT_SOURCE_BUDGET.writeLatencyPct)).toBe(true);
      expect(loaded.states).toContain('paused');
      expect(loaded.states.every((s) => s !== 'full-speed')).toBe(true);
      expect(loaded.pacer.next().pauseMs).toBeGreaterThan(0);
      expect(loaded.pacer.next().readAhead).toBe(false);

      // The load stops: once the window holds calm probes again, the readings fall back under the hard threshold.
      const calm = await paceTenChunks(() => probe.read(5));
      console.log(`load stopped: readings ${JSON.stringify(calm.readings.map((x) => Math.round(x ?? -1)))}`);
      expect(calm.readings.slice(-3).every((x) => x !== null && x < 2 * DEFAULT_SOURCE_BUDGET.writeLatencyPct)).toBe(true);
    } finally {
      await admin.query('RESET commit_delay');
      await admin.query('RESET commit_siblings');
    }
  }, 60_000);
});
