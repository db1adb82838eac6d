/**
 * Measurement for the rebuild's bulk (docs/rebuild.md, "What it does", step 3): would the
 * archive's parse on a second thread (node:worker_threads) take the per-event work off the one
 * Node thread that bounds the bulk (docs/performance-log.md, "42. The rebuild's bulk streams from
 * the replay")? Not the rebuild's code: a harness over the same functions.
 *
 * 1. The per-event work on one thread, CPU per step over the bench history's events (125,000 for
 *    `--events 100000`, in objects of 1,000 lines): the split into lines, `JSON.parse`,
 *    `validateChangeEvent`, the changelog's COPY line (`changelogLineWriter`), and what each
 *    hand-over between threads costs: the events as objects (a structured clone:
 *    `v8.serialize` on the sending side, `v8.deserialize` on the receiving one), or only the
 *    positions and key texts with the COPY lines as one transferred buffer.
 * 2. The bulk itself, into a fresh shadow's changelog on an embedded PostgreSQL (batches of
 *    `--batch`, two in flight, the first one alone as the rebuild does): `in-thread` parses on
 *    the main thread and appends through `PgWarehouse.applyTable` (`freshShadow`), as the rebuild
 *    does today; `thread` parses and writes the COPY lines on a worker thread and the main thread
 *    COPYs the buffers. Alternated (`--pairs`), each run's wall, process CPU (every thread), the
 *    main thread's CPU and PostgreSQL's CPU; both changelogs must hold the same rows (checked).
 *    The order (lambda/core/rebuild/replay-order.ts) and the admission are left out of both.
 *
 *     npx tsx bench/rebuild-thread.ts [--events 100000 --batch 5000 --pairs 3 --young-mb 0]
 */
import { readFileSync } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { deserialize, serialize } from 'node:v8';
import { Worker } from 'node:worker_threads';
import pg from 'pg';
import { from as copyFrom } from 'pg-copy-streams';
import { PgWarehouse } from '../lambda/adapters/warehouse-pg.ts';
import { changelogLineWriter } from '../lambda/adapters/warehouse-pg-copy-text.ts';
import { keyText, validateChangeEvent, type ChangeEvent } from '../lambda/core/shared/event.ts';
import { quoteIdent } from '../lambda/core/shared/identifiers.ts';
import { utf8Lines } from '../lambda/core/shared/utf8.ts';
import { warehouseTable, type WarehouseTable } from '../lambda/core/warehouse/warehouse-sql.ts';
import { startPostgres } from '../local/postgres.ts';
import { BENCH_SOURCE, BENCH_TABLE, DEFAULT_HISTORY, generateHistory, historyEvents, registryEntries, snapshotEvents } from './lib/history.ts';
import { clusterCpuMs, postmasterOf } from './lib/profile.ts';
import type { FromThread, ToThread } from './lib/replay-parse-thread.ts';
import { median, numberArg, runIfMain } from './lib/report.ts';

const LINES_PER_OBJECT = 1000;
const cpuMs = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
/** The main thread's CPU (its task's counters; Linux). */
function mainThreadCpuMs(): number {
  const st = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
  const f = st.slice(st.lastIndexOf(')') + 2).split(' ');
  return ((Number(f[11]) + Number(f[12])) * 1000) / 100;
}

/** Median CPU of `f` over five rounds after one warm-up. */
function stepCpu(name: string, events: number, f: () => void): void {
  f();
  const ms: number[] = [];
  for (let k = 0; k < 5; k++) {
    const t = cpuMs();
    f();
    ms.push(cpuMs() - t);
  }
  const m = median(ms);
  console.log(`  ${name}: ${m.toFixed(0)} ms CPU (${((m * 1000) / events).toFixed(2)} µs per event)`);
}

function perStep(bodies: readonly Buffer[], columns: string[], events: number): void {
  console.log(`1. per-event work on one thread, ${events} events, median of 5 rounds:`);
  let lines: string[][] = [];
  let parsed: unknown[][] = [];
  let evs: ChangeEvent[][] = [];
  stepCpu('split into lines (utf8Lines)', events, () => void (lines = bodies.map((b) => utf8Lines(b))));
  stepCpu('JSON.parse', events, () => void (parsed = lines.map((l) => l.map((x) => JSON.parse(x) as unknown))));
  stepCpu('validateChangeEvent', events, () => void (evs = parsed.map((l) => l.map((x) => validateChangeEvent(x)))));
  const write = changelogLineWriter(columns, new Date().toISOString());
  stepCpu('COPY lines (changelogLineWriter), one buffer per object', events, () => void evs.map((l) => Buffer.from(l.map(write).join(''))));
  stepCpu('keyText', events, () => evs.forEach((l) => l.forEach((e) => keyText(e.key))));
  let cloned: Buffer[] = [];
  stepCpu('events as objects, sending side (v8.serialize)', events, () => void (cloned = evs.map((l) => serialize(l))));
  stepCpu('events as objects, receiving side (v8.deserialize)', events, () => cloned.forEach((s) => deserialize(s)));
  const light = evs.map((l) => serialize({ positions: l.map((e) => e.position), keys: l.map((e) => keyText(e.key)), ends: new Uint32Array(l.length) }));
  stepCpu('positions and key texts, receiving side (v8.deserialize)', events, () => light.forEach((s) => deserialize(s)));
}

interface Bulk {
  pool: pg.Pool;
  warehouse: PgWarehouse;
  bodies: readonly Buffer[];
  batch: number;
}

const tableBatch = (target: WarehouseTable, events: ChangeEvent[]) => ({
  source: BENCH_SOURCE,
  table: BENCH_TABLE,
  deleteMode: 'soft' as const,
  schemas: new Map([[1, registryEntries().schema]]),
  events,
  appliedAt: new Date(),
  target,
  freshShadow: true,
});

/** Today's bulk: parse on this thread, append through the live apply code, two batches in flight after the first. */
async function inThread(b: Bulk, t: WarehouseTable): Promise<void> {
  const flight: Array<Promise<unknown>> = [];
  const fresh: ChangeEvent[] = [];
  let first = true;
  const launch = async (chunk: ChangeEvent[]): Promise<void> => {
    if (first) {
      first = false;
      await b.warehouse.applyTable(tableBatch(t, chunk));
      return;
    }
    if (flight.length >= 2) await flight.shift();
    flight.push(b.warehouse.applyTable(tableBatch(t, chunk)));
  };
  for (const body of b.bodies) {
    for (const line of utf8Lines(body)) fresh.push(validateChangeEvent(JSON.parse(line)));
    while (fresh.length >= b.batch) await launch(fresh.splice(0, b.batch));
  }
  if (fresh.length > 0) await launch(fresh.splice(0));
  await Promise.all(flight);
}

async function copyInto(pool: pg.Pool, t: WarehouseTable, columns: readonly string[], chunks: Buffer[]): Promise<void> {
  const c = await pool.connect();
  try {
    await c.query('BEGIN');
    await pipeline(
      Readable.from(chunks),
      c.query(copyFrom(`COPY ${quoteIdent(t.schema)}.${quoteIdent(t.changelog)} (${columns.map(quoteIdent).join(', ')}) FROM STDIN`)),
    );
    await c.query('COMMIT');
  } finally {
    c.release();
  }
}

/** The bulk with the parse and the COPY text on `thread`: the first batch through the live code (it makes the shadow), then COPY of the thread's buffers. */
async function onThread(b: Bulk, t: WarehouseTable, thread: Worker): Promise<void> {
  const first: ChangeEvent[] = [];
  let next = 0;
  while (first.length < b.batch && next < b.bodies.length) for (const line of utf8Lines(b.bodies[next++]!)) first.push(validateChangeEvent(JSON.parse(line)));
  await b.warehouse.applyTable(tableBatch(t, first));
  const columns = await changelogColumns(b.pool, t);
  thread.postMessage({ columns, appliedAt: new Date().toISOString() } satisfies ToThread);
  const waiting = new Map<number, (m: FromThread) => void>();
  const onMessage = (m: FromThread): void => {
    waiting.get(m.id)?.(m);
    waiting.delete(m.id);
  };
  thread.on('message', onMessage);
  const send = (i: number): Promise<FromThread> =>
    new Promise((resolve) => {
      waiting.set(i, resolve);
      const body = Buffer.from(b.bodies[i]!);
      const ab = body.buffer.slice(body.byteOffset, body.byteOffset + body.length);
      thread.postMessage({ id: i, body: ab } satisfies ToThread, [ab]);
    });
  const ahead: Array<Promise<FromThread>> = [];
  for (; next < b.bodies.length && ahead.length < 4; next++) ahead.push(send(next));
  const flight: Array<Promise<unknown>> = [];
  const positions: string[] = [];
  const keys: string[] = [];
  let chunks: Buffer[] = [];
  let held = 0;
  try {
    while (ahead.length > 0) {
      const got = await ahead.shift()!;
      if (next < b.bodies.length) ahead.push(send(next++));
      // The order's inputs (here one shard in position order: nothing to merge).
      for (let j = 0; j < got.positions.length; j++) {
        positions.push(got.positions[j]!);
        keys.push(got.keys[j]!);
      }
      chunks.push(Buffer.from(got.copy, 0, got.ends[got.ends.length - 1] ?? 0));
      held += got.positions.length;
      if (held >= b.batch || ahead.length === 0) {
        if (flight.length >= 2) await flight.shift();
        flight.push(copyInto(b.pool, t, columns, chunks));
        chunks = [];
        held = 0;
      }
    }
    await Promise.all(flight);
  } finally {
    thread.off('message', onMessage);
  }
}

async function changelogColumns(pool: pg.Pool, t: WarehouseTable): Promise<string[]> {
  const sql = `SELECT column_name AS c FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 AND column_name <> '_cdc_seq' ORDER BY ordinal_position`;
  return (await pool.query<{ c: string }>(sql, [t.schema, t.changelog])).rows.map((r) => r.c);
}

/** The changelog's rows (every column but the append order and the apply time) as one digest. */
async function digest(pool: pg.Pool, t: WarehouseTable, columns: readonly string[]): Promise<string> {
  const cells = columns.filter((c) => c !== '_cdc_applied_at').map((c) => `coalesce(c.${quoteIdent(c)}::text, '\\N')`);
  const sql = `SELECT count(*) AS n, md5(string_agg(x, E'\\n' ORDER BY x)) AS h FROM (SELECT concat_ws(E'\\t', ${cells.join(', ')}) AS x FROM ${quoteIdent(t.schema)}.${quoteIdent(t.changelog)} c) s`;
  const r = (await pool.query<{ n: string; h: string }>(sql)).rows[0]!;
  return `${r.n} rows, md5 ${r.h}`;
}

/** A worker that runs the TypeScript thread file under tsx (the bench runs from source). */
function parseThread(youngMb: number): Worker {
  const url = new URL('./lib/replay-parse-thread.ts', import.meta.url).href;
  const code = `import('tsx/esm/api').then((m) => { m.register(); return import(${JSON.stringify(url)}); });`;
  return new Worker(code, { eval: true, ...(youngMb > 0 ? { resourceLimits: { maxYoungGenerationSizeMb: youngMb } } : {}) });
}

export async function run(): Promise<void> {
  const n = numberArg('events', 100_000);
  const batch = numberArg('batch', 5000);
  const pairs = numberArg('pairs', 3);
  const youngMb = numberArg('young-mb', 0);
  const h = generateHistory({ ...DEFAULT_HISTORY, events: n, keys: Math.ceil(n / 2), initial: Math.ceil(n / 4) });
  const events = [...snapshotEvents(h), ...historyEvents(h)];
  const bodies: Buffer[] = [];
  for (let i = 0; i < events.length; i += LINES_PER_OBJECT)
    bodies.push(
      Buffer.from(
        `${events
          .slice(i, i + LINES_PER_OBJECT)
          .map((e) => JSON.stringify(e))
          .join('\n')}\n`,
      ),
    );
  const cluster = await startPostgres();
  const thread = parseThread(youngMb);
  const pool = new pg.Pool({ connectionString: cluster.url('postgres'), max: 4 });
  try {
    const b: Bulk = { pool, warehouse: new PgWarehouse(pool), bodies, batch };
    const postmaster = await postmasterOf(pool);
    const runs: Record<'in-thread' | 'thread', number[][]> = { 'in-thread': [], thread: [] };
    let columns: string[] = [];
    const digests = new Set<string>();
    console.log(`2. the bulk, ${events.length} events, batch ${batch}, ${pairs} pairs alternated (thread's young generation: ${youngMb || 'default'} MB):`);
    for (let p = 0; p <= pairs; p++) {
      for (const v of ['thread', 'in-thread'] as const) {
        const t = warehouseTable(`${v === 'thread' ? 'w' : 'm'}${p}`, BENCH_TABLE);
        const [t0, c0, m0, s0] = [Date.now(), cpuMs(), mainThreadCpuMs(), clusterCpuMs(postmaster)];
        await (v === 'thread' ? onThread(b, t, thread) : inThread(b, t));
        const row = [Date.now() - t0, cpuMs() - c0, mainThreadCpuMs() - m0, clusterCpuMs(postmaster) - s0];
        if (columns.length === 0) columns = await changelogColumns(pool, t);
        const d = await digest(pool, t, columns);
        digests.add(d);
        if (digests.size > 1) throw new Error(`the ${v} bulk's changelog differs from the other's: ${[...digests].join(' against ')}`);
        // The first pair warms both paths up (not counted).
        if (p > 0) runs[v].push(row);
        const [wall, proc, main, server] = row.map((x) => x!.toFixed(0));
        console.log(
          `  ${p === 0 ? 'warm-up' : `pair ${p}`} ${v}: wall ${wall} ms, process CPU ${proc} ms, main thread ${main} ms, PostgreSQL ${server} ms (${d})`,
        );
      }
    }
    for (const [v, rows] of Object.entries(runs)) {
      const m = (i: number): string => median(rows.map((r) => r[i]!)).toFixed(0);
      console.log(`  median ${v}: wall ${m(0)} ms, process CPU ${m(1)} ms, main thread ${m(2)} ms, PostgreSQL ${m(3)} ms`);
    }
    perStep(bodies, columns, events.length);
  } finally {
    await thread.terminate();
    await pool.end();
    await cluster.stop();
  }
}

runIfMain(import.meta.url, run);
