/**
 * Benchmark: the snapshot (docs/snapshot.md).
 *
 * 1. Read rate, unthrottled: the worker (`runTableSnapshot` with the Postgres reader: visibility
 *    fence per chunk, keyset chunks of `--chunk` rows streamed with COPY, one chunk read ahead,
 *    records and their JSON as the publishers send it; an in-memory control plane, no stream)
 *    over a table, against `COPY (SELECT … ORDER BY key) TO STDOUT` of the same table in the same
 *    run. Goal ≥ 0.5× COPY.
 * 2. The source's p99 write latency under a fixed workload (single-row updates, each its own
 *    commit, at a fixed rate) without a snapshot and with a throttled snapshot (the worker with
 *    the adaptive pacer against the default budget, fed by the probe) running over the same
 *    table, run after run. Goal ≤ +10 %.
 *
 *     npm run bench:snapshot [-- --rows 200000 --seconds 20 --rate 200 --chunk 20000]
 */
import pg from 'pg';
import { to as copyTo } from 'pg-copy-streams';
import { PostgresPressureProbe, PostgresSnapshotReader } from '../lambda/adapters/snapshot-postgres.ts';
import { createHash } from 'node:crypto';
import {
  chunkEndKey,
  chunkRecords,
  chunkRowCount,
  encodeChunkRecords,
  packChunkRecords,
  parseCopyText,
  snapshotPartitionKey,
  snapshotStreamRecords,
  type ChunkRead,
  type KeyCursor,
} from '../lambda/core/snapshot/snapshot.ts';
import { AdaptivePacer, FixedPacer, type Pacer } from '../lambda/core/snapshot/snapshot-pacer.ts';
import { requestSnapshot, runTableSnapshot } from '../lambda/core/snapshot/snapshot-worker.ts';
import { MemoryControlPlane } from '../test/helpers/memory-control-plane.ts';
import { NO_COLUMN_RULES } from '../lambda/core/tables/masking.ts';
import { startPostgres } from '../local/postgres.ts';
import { exec, serverVersion } from './lib/pg.ts';
import { runIfMain, median, numberArg, percentile, rateRow, Recorder, sleep, timeRow, type BenchResult } from './lib/report.ts';

const say = (text: string): void => void process.stdout.write(`[snapshot] ${text}\n`);
const TABLE = 'public.snap';
const sha256 = (s: string): string => createHash('sha256').update(s).digest('hex');

async function copyReference(url: string): Promise<{ seconds: number; bytes: number }> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  try {
    const t0 = performance.now();
    const stream = c.query(copyTo(`COPY (SELECT * FROM ${TABLE} ORDER BY id) TO STDOUT`));
    let bytes = 0;
    for await (const chunk of stream) bytes += (chunk as Buffer).length;
    return { seconds: (performance.now() - t0) / 1000, bytes };
  } finally {
    await c.end();
  }
}

/**
 * The worker itself (`runTableSnapshot`) over the whole table: fence + COPY-streamed keyset
 * chunks of `chunk` rows with one read ahead, records, their JSON (`encodeChunkRecords`, what the
 * publishers send), chunk items in an in-memory control plane; no stream.
 */
async function snapshotRead(url: string, chunk: number): Promise<{ seconds: number; rows: number; bytes: number; chunks: number; records: number }> {
  const reader = new PostgresSnapshotReader({ primary: { connectionString: url }, fencePollMs: 1 });
  const controlPlane = new MemoryControlPlane();
  try {
    await requestSnapshot(controlPlane, { source: 'bench', table: TABLE, reason: 'initial', actor: 'bench' });
    let bytes = 0;
    let published = 0;
    const t0 = performance.now();
    const outcome = await runTableSnapshot({
      controlPlane,
      reader,
      // What the publishers send: partition key + JSON per record (`snapshotStreamRecords`).
      publish: async (records) => {
        for (const r of snapshotStreamRecords(records, sha256)) bytes += r.data.length + r.partitionKey.length;
        published += records.length;
      },
      pacer: new FixedPacer(chunk),
      source: 'bench',
      table: TABLE,
      rules: NO_COLUMN_RULES,
      owner: 'bench',
    });
    const seconds = (performance.now() - t0) / 1000;
    const s = (await controlPlane.getSnapshot('bench', TABLE))!;
    if (outcome !== 'done') throw new Error(`snapshot run ended ${outcome}`);
    return { seconds, rows: s.rowsDone, bytes, chunks: s.chunksDone, records: published };
  } finally {
    await reader.close();
  }
}

/**
 * The reader alone (fence + COPY-streamed keyset chunk, its rows counted and its last key read as
 * the worker does), chunk after chunk: what the source and the wire cost, without records or JSON.
 */
async function readerRead(url: string, chunk: number): Promise<{ seconds: number; rows: number }> {
  const reader = new PostgresSnapshotReader({ primary: { connectionString: url }, fencePollMs: 1 });
  try {
    const shape = await reader.describe(TABLE);
    const t0 = performance.now();
    let cursor: KeyCursor | null = null;
    let rows = 0;
    for (;;) {
      const read = await reader.readChunk(shape, cursor, chunk);
      const n = chunkRowCount(read);
      rows += n;
      cursor = chunkEndKey(shape, read) ?? cursor;
      if (n < chunk) break;
    }
    return { seconds: (performance.now() - t0) / 1000, rows };
  } finally {
    await reader.close();
  }
}

/**
 * Where the worker's time goes besides the reader: the chunks are read once (untimed), then each
 * step is timed over all of them, for both record forms: packed (`packChunkRecords` from the COPY
 * text + the publishers' `snapshotStreamRecords`: one partition key per record; and, for
 * comparison, parsed into rows first and packed from them) and per-row, as before
 * (`chunkRecords`, `encodeChunkRecords`, a partition key per row).
 */
async function encodeProfile(url: string, chunk: number): Promise<Record<string, number>> {
  const reader = new PostgresSnapshotReader({ primary: { connectionString: url }, fencePollMs: 1 });
  const reads: ChunkRead[] = [];
  let shape;
  try {
    shape = await reader.describe(TABLE);
    let cursor: KeyCursor | null = null;
    for (;;) {
      const read = await reader.readChunk(shape, cursor, chunk);
      reads.push(read);
      cursor = chunkEndKey(shape, read) ?? cursor;
      if (chunkRowCount(read) < chunk) break;
    }
  } finally {
    await reader.close();
  }
  const time = (f: () => void): number => {
    const t0 = performance.now();
    f();
    return performance.now() - t0;
  };
  const out: Record<string, number> = {};
  const packed = reads.map(() => [] as ReturnType<typeof packChunkRecords>);
  out.packedRecordsMs = time(() => reads.forEach((r, i) => (packed[i] = packChunkRecords('bench', shape, r, NO_COLUMN_RULES))));
  out.packedKeysMs = time(() => packed.forEach((p) => snapshotStreamRecords(p, sha256)));
  // The same packed records the way they were made before §17: the COPY text parsed into rows, then packed from them.
  out.packedFromParsedRowsMs = time(() =>
    reads.forEach((r) =>
      packChunkRecords(
        'bench',
        shape,
        { lowWatermark: r.lowWatermark, readAt: r.readAt, rows: parseCopyText(r.copyText ?? '', shape.columns.length) },
        NO_COLUMN_RULES,
      ),
    ),
  );
  out.packedRecords = packed.reduce((n, p) => n + p.length, 0);
  out.packedBytes = packed.reduce((n, p) => n + p.reduce((m, r) => m + r.data.length, 0), 0);
  const perRow = reads.map(() => [] as ReturnType<typeof chunkRecords>);
  out.perRowRecordsMs = time(() => reads.forEach((r, i) => (perRow[i] = chunkRecords('bench', shape, r, NO_COLUMN_RULES))));
  let bytes = 0;
  out.perRowJsonMs = time(() => perRow.forEach((p) => encodeChunkRecords(p).forEach((t) => (bytes += t.length))));
  out.perRowBytes = bytes;
  out.perRowKeysMs = time(() => perRow.forEach((p) => p.forEach((r) => snapshotPartitionKey(r, sha256))));
  for (const k of Object.keys(out)) out[k] = Math.round(out[k]!);
  return out;
}

/** Single-row updates at `rate` per second for `seconds`; returns each commit's latency (ms). */
async function writeWorkload(url: string, rows: number, rate: number, seconds: number): Promise<number[]> {
  const c = new pg.Client({ connectionString: url });
  await c.connect();
  const latencies: number[] = [];
  try {
    const end = Date.now() + seconds * 1000;
    let next = Date.now();
    let i = 0;
    while (Date.now() < end) {
      const t0 = performance.now();
      await c.query('UPDATE public.snap SET a = a + 1 WHERE id = $1', [1 + ((i++ * 7919) % rows)]);
      latencies.push(performance.now() - t0);
      next += 1000 / rate;
      const wait = next - Date.now();
      if (wait > 0) await sleep(wait);
    }
  } finally {
    await c.end();
  }
  return latencies;
}

/** The throttled snapshot, run after run until `stop`: the worker with its reader, adaptive pacer and probe. */
async function throttledSnapshot(
  url: string,
  stop: () => boolean,
): Promise<{ rows: number; states: Record<string, number>; restRatios: number[]; chunkSizes: number[] }> {
  let probeClient: pg.Client | null = null;
  const probe = new PostgresPressureProbe(async () => {
    if (!probeClient) {
      probeClient = new pg.Client({ connectionString: url });
      await probeClient.connect();
    }
    return probeClient;
  });
  const reader = new PostgresSnapshotReader({ primary: { connectionString: url } });
  const controlPlane = new MemoryControlPlane();
  const states: Record<string, number> = {};
  const restRatios: number[] = [];
  const chunkSizes: number[] = [];
  let rows = 0;
  try {
    await probe.calibrate(20);
    const adaptive = new AdaptivePacer();
    // The worker's pacer, with its decisions counted.
    const pacer: Pacer = {
      next: () => {
        const d = adaptive.next();
        states[d.state] = (states[d.state] ?? 0) + 1;
        restRatios.push(adaptive.restRatio());
        chunkSizes.push(d.chunkSize);
        return d;
      },
      record: (sample) => adaptive.record(sample),
    };
    while (!stop()) {
      await requestSnapshot(controlPlane, { source: 'bench', table: TABLE, reason: 'resnapshot', actor: 'bench' });
      let before = 0;
      await runTableSnapshot({
        controlPlane,
        reader,
        publish: async (records) => void snapshotStreamRecords(records, sha256),
        pacer,
        pressure: () => probe.read(1),
        source: 'bench',
        table: TABLE,
        rules: NO_COLUMN_RULES,
        owner: 'bench',
        shouldStop: stop,
        onState: (s) => {
          rows += s.rowsDone - before;
          before = s.rowsDone;
        },
      });
    }
  } finally {
    await reader.close();
    await (probeClient as pg.Client | null)?.end();
  }
  return { rows, states, restRatios, chunkSizes };
}

export async function runSnapshotBench(): Promise<BenchResult> {
  const rowsN = numberArg('rows', 200_000);
  const seconds = numberArg('seconds', 20);
  const rate = numberArg('rate', 200);
  const runs = numberArg('runs', 3);
  const chunk = numberArg('chunk', 20_000);
  const rec = new Recorder('snapshot', { rows: rowsN, seconds, rate, runs, chunk, durability: 'fsync on' });
  const pgc = await startPostgres();
  try {
    await pgc.createDatabase('src');
    const url = pgc.url('src');
    rec.settings.postgres = await serverVersion(url);
    await exec(
      url,
      `CREATE TABLE ${TABLE} (id bigint PRIMARY KEY, a int NOT NULL, b text, c numeric(12,2), d timestamptz NOT NULL DEFAULT now());
      INSERT INTO ${TABLE} SELECT g, g % 1000, md5(g::text), g / 7.0, now() - g * interval '1 second' FROM generate_series(1, ${rowsN}) g; ANALYZE ${TABLE};`,
    );
    // Warm the cache once, then alternate the order.
    await copyReference(url);
    const copyRates: number[] = [];
    const snapRates: number[] = [];
    const readerRates: number[] = [];
    for (let i = 0; i < runs; i++) {
      const order = i % 2 === 0 ? ['copy', 'snap', 'reader'] : ['reader', 'snap', 'copy'];
      for (const o of order) {
        if (o === 'copy') {
          const r = await copyReference(url);
          copyRates.push(rowsN / r.seconds);
          say(`COPY: ${Math.round(rowsN / r.seconds)} rows/s (${r.seconds.toFixed(2)} s, ${r.bytes} bytes)`);
        } else if (o === 'reader') {
          const r = await readerRead(url, chunk);
          if (r.rows !== rowsN) throw new Error(`the reader read ${r.rows} rows of ${rowsN}`);
          readerRates.push(r.rows / r.seconds);
          say(`reader alone: ${Math.round(r.rows / r.seconds)} rows/s (${r.seconds.toFixed(2)} s)`);
        } else {
          const r = await snapshotRead(url, chunk);
          if (r.rows !== rowsN) throw new Error(`snapshot read ${r.rows} rows of ${rowsN}`);
          snapRates.push(r.rows / r.seconds);
          say(`snapshot: ${Math.round(r.rows / r.seconds)} rows/s (${r.seconds.toFixed(2)} s, ${r.chunks} chunks, ${r.records} records, ${r.bytes} bytes)`);
        }
      }
    }
    rec.add(
      rateRow(
        `snapshot reader alone (fence + COPY-streamed keyset chunks of ${chunk}, counted and keyed; no records)`,
        median(readerRates),
        'rows/s',
        median(copyRates),
        'COPY (SELECT … ORDER BY id) TO STDOUT',
        { note: 'no target: shows where the time goes (the rest is records + JSON)' },
      ),
    );
    rec.add(
      rateRow(
        `snapshot read, unthrottled (the worker: fence + COPY-streamed keyset chunks of ${chunk}, one read ahead, records + JSON)`,
        median(snapRates),
        'rows/s',
        median(copyRates),
        'COPY (SELECT … ORDER BY id) TO STDOUT',
        { target: '≥ 0.5× COPY', met: median(snapRates) >= 0.5 * median(copyRates) },
      ),
    );

    const profile = await encodeProfile(url, chunk);
    say(`records and JSON, ${rowsN} rows (ms): ${JSON.stringify(profile)}`);
    rec.details.encodeProfile = profile;
    rec.add(
      timeRow(
        `packed records + JSON + partition keys for ${rowsN} rows (no reader)`,
        profile.packedRecordsMs! + profile.packedKeysMs!,
        'ms',
        profile.perRowRecordsMs! + profile.perRowJsonMs! + profile.perRowKeysMs!,
        'per-row records + JSON + a partition key per row, same rows',
        { note: `${profile.packedRecords} packed records, ${profile.packedBytes} bytes of JSON against ${profile.perRowBytes}` },
      ),
    );

    say(`write workload without a snapshot: ${rate}/s for ${seconds} s`);
    const base = await writeWorkload(url, rowsN, rate, seconds);
    say(`write workload with a throttled snapshot running`);
    let stop = false;
    const snap = throttledSnapshot(url, () => stop);
    const withSnap = await writeWorkload(url, rowsN, rate, seconds);
    stop = true;
    const s = await snap;
    const p99Base = percentile(base, 99);
    const p99With = percentile(withSnap, 99);
    say(
      `p99 write latency: ${p99Base.toFixed(2)} ms without, ${p99With.toFixed(2)} ms with (snapshot read ${s.rows} rows; pacer states ${JSON.stringify(s.states)}; rest ratio max ${Math.max(0, ...s.restRatios)}, median ${median(s.restRatios)}; chunk sizes median ${median(s.chunkSizes)})`,
    );
    rec.add(
      timeRow('source p99 write latency with a throttled snapshot running', p99With, 'ms', p99Base, 'same workload, no snapshot', {
        target: '≤ +10 %',
        met: p99With <= 1.1 * p99Base,
        note: `${rate} updates/s for ${seconds} s; snapshot read ${s.rows} rows meanwhile; pacer ${JSON.stringify(s.states)}`,
      }),
    );
    rec.details.copyRates = copyRates;
    rec.details.snapshotRates = snapRates;
    rec.details.readerRates = readerRates;
    rec.details.writeLatency = {
      base: { p50: percentile(base, 50), p99: p99Base, n: base.length },
      withSnapshot: { p50: percentile(withSnap, 50), p99: p99With, n: withSnap.length },
      pacer: s.states,
      restRatios: s.restRatios,
      chunkSizes: s.chunkSizes,
      snapshotRows: s.rows,
    };
  } finally {
    await pgc.stop();
  }
  return rec.finish();
}

runIfMain(import.meta.url, runSnapshotBench);
