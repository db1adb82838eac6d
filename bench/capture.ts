/**
 * Benchmark 3, capture: how fast the local slot capture (`local/capture.ts`: read whole
 * transactions from a `test_decoding` slot, parse, apply column rules, build and validate raw
 * records, publish, checkpoint, move the slot) reads a backlog, against PostgreSQL decoding the
 * same changes alone: `pg_logical_slot_get_changes` on another slot, counting rows and bytes.
 * Both read paths of the capture are measured in the same run, each on its own slot: `stream`
 * (the default: a replication connection, local/slot-stream.ts) and `peek` (SQL peek, then
 * `pg_replication_slot_advance`).
 *
 * All slots exist before the workload, so all decode exactly the same WAL. The workload is the
 * apply benchmark's seeded history (updates, inserts and deletes in transactions of 100),
 * replayed server side. The first slot read after the workload is slower than the next (the
 * WAL is then in the page cache), so the order rotates between runs and medians are reported.
 *
 * The capture publishes to a counting publisher (no Kinesis): the figure is the capture's own
 * rate. One more run publishes to kinesalite (in its own process, as `cdc local` runs it), to show what the
 * stand-in costs. The control plane is the in-memory test double (one checkpoint write per peek).
 *
 *     npm run bench:capture [-- --events 200000 --runs 2 --profile]
 *
 * `--profile` adds a run with CPU profiles of both captures, apart from the timed runs.
 *
 * The protocol floor (`floor`, its own slot, in the same rotation): the same WAL read over the
 * streaming replication protocol exactly as the capture opens it (`pg`'s replication connection,
 * the capture's session settings and `START_REPLICATION` options, local/slot-stream.ts) doing
 * nothing with the messages but counting them and their bytes: no text decoding, no grouping, no
 * parsing, no records, no publishing, no checkpoint, no acknowledgement. Then, untimed for the
 * read and timed on its own, the test_decoding parse of the same lines (UTF-8 text, the rows as
 * the stream builds them, `groupTransactions`): what the capture's parser alone costs. Both are
 * ratios of the same run's `pg_logical_slot_get_changes` reference: if the floor is below the
 * goal's 0.5×, no capture over this protocol reaches it.
 *
 * The client reference (`recvlogical`, its own slot, in the same rotation): PostgreSQL's own
 * streaming client, `pg_recvlogical`, reading the same WAL with the same plugin, options and
 * session settings up to the same end and writing the text to a file (bench/lib/recvlogical.ts).
 * The capture (stream) is held against it: ≥ 0.7× (issue "Rehearse the deployment, not a
 * lookalike…", scope 5). Left out, with the reason printed, where pg_recvlogical is not found.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { CreateStreamCommand, DescribeStreamSummaryCommand } from '@aws-sdk/client-kinesis';
import { kinesisClient } from '../lambda/adapters/aws-clients.ts';
import { TableConfigIndex } from '../lambda/core/tables/table-config.ts';
import { groupTransactions, type SlotRow } from '../lambda/core/capture/logical-text.ts';
import { SlotCapture } from '../local/capture.ts';
import { kinesisRawPublisher, type RawPublisher, type RawRecord } from '../local/raw-publisher.ts';
import { CANONICAL_OUTPUT_SETTINGS, formatLsn, lsnToBigInt, SLOT_READ_OPTIONS, statusUpdate } from '../local/slot-stream.ts';
import { SLOT_PLUGIN } from '../local/slot.ts';
import { startKinesaliteProcess } from '../local/kinesis.ts';
import { startPostgres, type PostgresCluster } from '../local/postgres.ts';
import { MemoryControlPlane } from '../test/helpers/memory-control-plane.ts';
import { BENCH_TABLE, DEFAULT_HISTORY, generateHistory, type History } from './lib/history.ts';
import { exec, one, serverVersion } from './lib/pg.ts';
import { cpuProfile, processCpuMs, type ProfileSummary } from './lib/profile.ts';
import { createItems, prepareReplay, replay } from './lib/replay.ts';
import { findRecvlogical, recvlogicalRead, type RecvlogicalRead } from './lib/recvlogical.ts';
import { runIfMain, median, numberArg, rateRow, Recorder, sleep, type BenchResult } from './lib/report.ts';

/** Row-change records among published ones (a table's definition before its first rows is a DMS control record: docs/local.md, "DMS records"). */
function rowChanges(records: readonly RawRecord[]): number {
  let n = 0;
  for (const r of records) if (!r.label.endsWith(':table-def')) n++;
  return n;
}

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const say = (text: string): void => void process.stdout.write(`[capture] ${text}\n`);
const SOURCE = 'bench';
const REF_SLOT = 'bench_ref';
const SLOTS = { stream: 'bench_capture', peek: 'bench_capture_peek' } as const;
/** The protocol floor's slot (created before the workload, with the reference's). */
const FLOOR_SLOT = 'bench_floor';
/** pg_recvlogical's slot (test_decoding, created before the workload). */
const RECV_SLOT = 'bench_recv';
const RECVLOGICAL = findRecvlogical();
/**
 * The same floor with the `pgoutput` plugin (binary protocol, the other path issue 14 names), and
 * its own reference: `pg_logical_slot_get_binary_changes` over a pgoutput slot, counting alone.
 * Both read the bench table's publication; both slots exist before the workload.
 */
const PGOUTPUT = {
  floorSlot: 'bench_floor_pgoutput',
  refSlot: 'bench_ref_pgoutput',
  publication: 'bench_floor_pub',
  options: [
    ['proto_version', '1'],
    ['publication_names', 'bench_floor_pub'],
  ] as ReadonlyArray<readonly [string, string]>,
} as const;
type Reader = 'reference' | 'stream' | 'peek' | 'floor' | 'pgoutput' | 'reference-pgoutput' | 'recvlogical';

interface CaptureFigures {
  seconds: number;
  records: number;
  bytes: number;
  recordsPerSecond: number;
  /** This process's CPU during the capture's read, every thread (the capture, V8's garbage collection and compiler). */
  cpuMs: number;
  /** Of it, the main thread's (the capture's own work; the rest is V8's and libuv's threads); null where /proc is not readable. */
  mainThreadCpuMs: number | null;
  publisher: string;
  profile?: ProfileSummary;
}

interface CaptureRun {
  order: Reader[];
  changes: number;
  reference: { seconds: number; rows: number; bytes: number; changesPerSecond: number };
  capture: CaptureFigures;
  peek?: CaptureFigures;
  floor?: FloorFigures;
  pgoutput?: { floor: Omit<FloorFigures, 'parse'>; reference: { seconds: number; rows: number; changesPerSecond: number } };
  recvlogical?: RecvlogicalRead & { changesPerSecond: number };
}

interface FloorFigures {
  /** The read alone: connect, settings, START_REPLICATION, messages counted until the server has sent the WAL flushed before the read. */
  seconds: number;
  /** CPU during the read (from START_REPLICATION to the end): this process's, and the walsender's (null where /proc is not readable). */
  clientCpuMs: number;
  walsenderCpuMs: number | null;
  /** XLogData messages (every test_decoding line: BEGIN, COMMIT and row changes). */
  messages: number;
  /** Of those, row changes (lines starting `table`). */
  changes: number;
  /** Bytes of test_decoding text (the messages without their 25-byte header). */
  bytes: number;
  changesPerSecond: number;
  /** The test_decoding parse of the same lines, timed apart (their bytes read again, untimed): UTF-8 text of each line, the rows as the stream builds them, `groupTransactions`. */
  parse: { seconds: number; transactions: number; changes: number; changesPerSecond: number };
}

/**
 * One read of `slot` over a replication connection opened as the capture opens it
 * (local/slot-stream.ts: `replication: 'database'`, the canonical output settings, the plugin
 * check, `START_REPLICATION SLOT … LOGICAL <confirmed position> (<the capture's options>)`) until
 * the server has sent everything flushed before the read (a row or a keepalive at or past that
 * position: the capture's own "caught up" test). `onRow` sees each XLogData message; the slot is
 * never acknowledged, so it does not move and can be read again.
 */
async function replicationRead(
  url: string,
  slot: string,
  onRow: (chunk: Buffer) => void,
  decoder: { plugin: string; options: ReadonlyArray<readonly [string, string]> } = { plugin: SLOT_PLUGIN, options: SLOT_READ_OPTIONS },
): Promise<{ seconds: number; clientCpuMs: number; walsenderCpuMs: number | null }> {
  const t0 = performance.now();
  const client = new pg.Client({ connectionString: url, replication: 'database', application_name: 'cdc-bench-floor' } as pg.ClientConfig);
  await client.connect();
  try {
    await client.query(CANONICAL_OUTPUT_SETTINGS);
    const at = (
      await client.query(
        `SELECT plugin, confirmed_flush_lsn::text AS start, pg_current_wal_flush_lsn()::text AS target FROM pg_replication_slots WHERE slot_name = '${slot}'`,
      )
    ).rows[0] as { plugin: string; start: string; target: string } | undefined;
    if (!at || at.plugin !== decoder.plugin) throw new Error(`slot ${slot} is missing or not ${decoder.plugin}`);
    const start = lsnToBigInt(at.start);
    const target = lsnToBigInt(at.target);
    const conn = (client as unknown as { connection: { on(e: 'copyData', l: (m: { chunk: Buffer }) => void): void; sendCopyFromChunk(b: Buffer): void } })
      .connection;
    const options = decoder.options.map(([k, v]) => `"${k}" '${v}'`).join(', ');
    // Where the read's time goes: this process (the driver's parsing of the messages) and the walsender (decoding and sending).
    const walsender = (client as unknown as { processID: number }).processID;
    const cpu0 = process.cpuUsage();
    const w0 = processCpuMs(walsender);
    await new Promise<void>((resolve, reject) => {
      conn.on('copyData', ({ chunk }) => {
        if (chunk[0] === 0x77 /* w: XLogData */) {
          onRow(chunk);
          if (chunk.readBigUInt64BE(1) >= target) resolve();
        } else if (chunk[0] === 0x6b /* k: keepalive */) {
          if (chunk.readBigUInt64BE(1) >= target) resolve();
          // Answered as the capture answers one, without moving the slot (flushed stays where it started).
          if (chunk[17] === 1) conn.sendCopyFromChunk(statusUpdate(start, start, false));
        }
      });
      client.query(`START_REPLICATION SLOT "${slot}" LOGICAL ${at.start} (${options})`).then(() => reject(new Error('the replication stream ended')), reject);
    });
    const seconds = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    const w1 = processCpuMs(walsender);
    return { seconds, clientCpuMs: (cpu.user + cpu.system) / 1000, walsenderCpuMs: w0 !== null && w1 !== null ? w1 - w0 : null };
  } finally {
    await client.end().catch(() => undefined);
  }
}

/**
 * The protocol floor: one timed replication read of `slot` that only counts the messages, the
 * row changes among them (one byte looked at) and their bytes. Then the parse, timed on its own:
 * a second, untimed read of the same slot copies each message's text bytes (the driver reuses
 * its buffer), and the timed part makes the rows as the stream does (UTF-8 text, the LSN) and
 * runs the capture's parser over them (`groupTransactions`).
 */
async function floorRead(url: string, slot: string): Promise<FloorFigures> {
  let messages = 0;
  let changes = 0;
  let bytes = 0;
  const read = await replicationRead(url, slot, (chunk) => {
    messages++;
    bytes += chunk.length - 25;
    if (chunk[25] === 0x74 /* 't': "table …" */) changes++;
  });
  const kept: Array<{ hi: number; lo: number; text: Buffer }> = [];
  await replicationRead(url, slot, (chunk) => kept.push({ hi: chunk.readUInt32BE(1), lo: chunk.readUInt32BE(5), text: Buffer.from(chunk.subarray(25)) }));
  const p0 = performance.now();
  const rows: SlotRow[] = [];
  let xid = '';
  for (const k of kept) {
    const data = k.text.toString('utf8');
    if (data.startsWith('BEGIN')) xid = data.slice(6);
    rows.push({ lsn: formatLsn(k.hi, k.lo), xid, data });
  }
  const grouped = groupTransactions(rows);
  const parseSeconds = (performance.now() - p0) / 1000;
  const parsedChanges = grouped.transactions.reduce((n, t) => n + t.changes.length, 0);
  return {
    seconds: read.seconds,
    clientCpuMs: read.clientCpuMs,
    walsenderCpuMs: read.walsenderCpuMs,
    messages,
    changes,
    bytes,
    changesPerSecond: changes / read.seconds,
    parse: { seconds: parseSeconds, transactions: grouped.transactions.length, changes: parsedChanges, changesPerSecond: parsedChanges / parseSeconds },
  };
}

/**
 * The protocol floor with pgoutput: one timed replication read of the pgoutput slot counting its
 * messages and, among them, the row changes (`I`, `U`, `D` messages; Begin, Commit, Relation and
 * the rest are counted as messages only). No parse: pgoutput's binary rows would need a decoder the
 * capture does not have.
 */
async function pgoutputFloorRead(url: string): Promise<Omit<FloorFigures, 'parse'>> {
  let messages = 0;
  let changes = 0;
  let bytes = 0;
  const read = await replicationRead(
    url,
    PGOUTPUT.floorSlot,
    (chunk) => {
      messages++;
      bytes += chunk.length - 25;
      const kind = chunk[25];
      if (kind === 0x49 /* I */ || kind === 0x55 /* U */ || kind === 0x44 /* D */) changes++;
    },
    { plugin: 'pgoutput', options: PGOUTPUT.options },
  );
  return {
    seconds: read.seconds,
    clientCpuMs: read.clientCpuMs,
    walsenderCpuMs: read.walsenderCpuMs,
    messages,
    changes,
    bytes,
    changesPerSecond: changes / read.seconds,
  };
}

/** pgoutput decoding alone: `pg_logical_slot_get_binary_changes` over its own slot, messages counted in SQL (the changes are the workload's). */
async function pgoutputReferenceRead(url: string): Promise<{ seconds: number; rows: number }> {
  const t0 = performance.now();
  const r = await one<{ n: string }>(
    url,
    `SELECT count(*)::text AS n FROM pg_logical_slot_get_binary_changes($1, NULL, NULL, ${PGOUTPUT.options.map(([k, v]) => `'${k}', '${v}'`).join(', ')})`,
    [PGOUTPUT.refSlot],
  );
  return { seconds: (performance.now() - t0) / 1000, rows: Number(r.n) };
}

/** Decodes the reference slot alone: rows and bytes of test_decoding output, with the capture's options. */
async function referenceRead(url: string): Promise<{ seconds: number; rows: number; bytes: number }> {
  const t0 = performance.now();
  const r = await one<{ n: string; bytes: string | null }>(
    url,
    `SELECT count(*)::text AS n, sum(octet_length(data))::text AS bytes
       FROM pg_logical_slot_get_changes($1, NULL, NULL, 'include-xids', '1', 'include-timestamp', '1', 'skip-empty-xacts', '1')`,
    [REF_SLOT],
  );
  return { seconds: (performance.now() - t0) / 1000, rows: Number(r.n), bytes: Number(r.bytes ?? 0) };
}

/** Runs the capture until it has read everything committed so far; returns its figures. */
function newCapture(url: string, controlPlane: MemoryControlPlane, publish: RawPublisher, read: 'stream' | 'peek'): SlotCapture {
  return new SlotCapture({
    source: SOURCE,
    sourceUrl: url,
    slot: SLOTS[read],
    read,
    tables: new TableConfigIndex([{ table: BENCH_TABLE, deleteMode: 'soft', mask: [], exclude: [] }]),
    controlPlane,
    publish,
    idleMs: 5,
  });
}

async function captureRead(
  url: string,
  controlPlane: MemoryControlPlane,
  publish: RawPublisher,
  counter: { records: number; bytes: number },
  profile: boolean,
  read: 'stream' | 'peek',
): Promise<{ seconds: number; cpuMs: number; mainThreadCpuMs: number | null; profile?: ProfileSummary }> {
  const capture = newCapture(url, controlPlane, publish, read);
  let cpuMs = 0;
  let mainThreadCpuMs: number | null = null;
  const run = async (): Promise<number> => {
    const main0 = mainThreadCpu();
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const since = Date.now();
    await capture.start();
    while (!capture.caughtUpSince(since)) {
      if (capture.stats.state === 'failed') throw capture.stats.error ?? new Error('capture failed');
      await sleep(2);
    }
    const seconds = (performance.now() - t0) / 1000;
    const cpu = process.cpuUsage(cpu0);
    cpuMs = (cpu.user + cpu.system) / 1000;
    const main1 = mainThreadCpu();
    mainThreadCpuMs = main0 === null || main1 === null ? null : main1 - main0;
    await capture.stop();
    return seconds;
  };
  counter.records = 0;
  counter.bytes = 0;
  if (profile) {
    const p = await cpuProfile(ROOT, run);
    return { seconds: p.result, cpuMs, mainThreadCpuMs, profile: p.profile };
  }
  const seconds = await run();
  return { seconds, cpuMs, mainThreadCpuMs };
}

/** This process's main thread's CPU so far (ms), from /proc; null where it is not readable. */
function mainThreadCpu(): number | null {
  try {
    const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime: fields 14 and 15 of the line, 12 and 13 after the command; in clock ticks.
    ticksPerSecond ??= Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim()) || 100;
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / ticksPerSecond;
  } catch {
    return null;
  }
}

let ticksPerSecond: number | undefined;

async function oneRun(
  pgc: PostgresCluster,
  h: History,
  order: Reader[],
  publish: RawPublisher,
  counter: { records: number; bytes: number },
  publisher: string,
  profile: boolean,
): Promise<CaptureRun> {
  const url = pgc.url('src');
  await exec(
    url,
    `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name IN ('${REF_SLOT}', '${FLOOR_SLOT}', '${RECV_SLOT}', '${PGOUTPUT.floorSlot}', '${PGOUTPUT.refSlot}', '${SLOTS.stream}', '${SLOTS.peek}')`,
  );
  await createItems(url, h);
  // pgoutput reads a publication (as it stood when each change was decoded): made before the workload.
  const withPgoutput = order.includes('pgoutput') || order.includes('reference-pgoutput');
  if (withPgoutput) await exec(url, `DROP PUBLICATION IF EXISTS ${PGOUTPUT.publication}; CREATE PUBLICATION ${PGOUTPUT.publication} FOR TABLE ${BENCH_TABLE}`);
  await prepareReplay(url, h);
  // Every slot before the workload: each capture creates (and records) its own on its first start.
  const controls = { stream: new MemoryControlPlane(), peek: new MemoryControlPlane() };
  const readers = order.filter((r): r is 'stream' | 'peek' => r === 'stream' || r === 'peek');
  for (const read of readers) {
    const primer = newCapture(url, controls[read], publish, read);
    await primer.start();
    await primer.stop();
  }
  await exec(url, `SELECT pg_create_logical_replication_slot('${REF_SLOT}', 'test_decoding')`);
  if (order.includes('floor')) await exec(url, `SELECT pg_create_logical_replication_slot('${FLOOR_SLOT}', 'test_decoding')`);
  const withRecv = order.includes('recvlogical') && RECVLOGICAL.bin !== null;
  if (withRecv) await exec(url, `SELECT pg_create_logical_replication_slot('${RECV_SLOT}', 'test_decoding')`);
  if (withPgoutput)
    await exec(
      url,
      `SELECT pg_create_logical_replication_slot('${PGOUTPUT.floorSlot}', 'pgoutput'); SELECT pg_create_logical_replication_slot('${PGOUTPUT.refSlot}', 'pgoutput')`,
    );
  const seconds = await replay(url, h);
  say(`workload: ${h.changes.length} changes replayed in ${seconds.toFixed(2)} s`);
  await exec(url, 'CHECKPOINT');
  let ref: { seconds: number; rows: number; bytes: number } | null = null;
  const caps: Partial<Record<'stream' | 'peek', CaptureFigures>> = {};
  let floor: FloorFigures | undefined;
  let pgFloor: Omit<FloorFigures, 'parse'> | undefined;
  let pgRef: { seconds: number; rows: number } | undefined;
  let recv: RecvlogicalRead | undefined;
  for (const reader of order) {
    if (reader === 'recvlogical') {
      if (withRecv) recv = await recvlogicalRead(RECVLOGICAL.bin!, url, RECV_SLOT);
      continue;
    }
    if (reader === 'pgoutput') {
      pgFloor = await pgoutputFloorRead(url);
      continue;
    }
    if (reader === 'reference-pgoutput') {
      pgRef = await pgoutputReferenceRead(url);
      continue;
    }
    if (reader === 'reference') {
      ref = await referenceRead(url);
      continue;
    }
    if (reader === 'floor') {
      floor = await floorRead(url, FLOOR_SLOT);
      continue;
    }
    const cap = await captureRead(url, controls[reader], publish, counter, profile, reader);
    caps[reader] = {
      seconds: cap.seconds,
      records: counter.records,
      bytes: counter.bytes,
      recordsPerSecond: counter.records / cap.seconds,
      cpuMs: cap.cpuMs,
      mainThreadCpuMs: cap.mainThreadCpuMs,
      publisher,
      ...(cap.profile ? { profile: cap.profile } : {}),
    };
  }
  await exec(url, `SELECT pg_drop_replication_slot('${REF_SLOT}')`);
  if (order.includes('floor')) await exec(url, `SELECT pg_drop_replication_slot('${FLOOR_SLOT}')`);
  if (withRecv) await exec(url, `SELECT pg_drop_replication_slot('${RECV_SLOT}')`);
  if (withPgoutput)
    await exec(
      url,
      `SELECT pg_drop_replication_slot('${PGOUTPUT.floorSlot}'); SELECT pg_drop_replication_slot('${PGOUTPUT.refSlot}'); DROP PUBLICATION ${PGOUTPUT.publication}`,
    );
  // test_decoding prints BEGIN and COMMIT rows too; count the row changes.
  const changes = h.changes.length;
  return {
    order,
    changes,
    reference: { ...ref!, changesPerSecond: changes / ref!.seconds },
    capture: caps.stream!,
    ...(caps.peek ? { peek: caps.peek } : {}),
    ...(floor ? { floor } : {}),
    ...(recv ? { recvlogical: { ...recv, changesPerSecond: changes / recv.seconds } } : {}),
    ...(pgFloor && pgRef ? { pgoutput: { floor: pgFloor, reference: { ...pgRef, changesPerSecond: changes / pgRef.seconds } } } : {}),
  };
}

export async function runCaptureBench(): Promise<BenchResult> {
  const events = numberArg('events', DEFAULT_HISTORY.events);
  const runs = numberArg('runs', 2);
  const kinesisEvents = numberArg('kinesis-events', 50_000);
  const profile = process.argv.includes('--profile');
  const opts = { ...DEFAULT_HISTORY, events, seed: DEFAULT_HISTORY.seed + 1 };
  const rec = new Recorder('capture', {
    history: opts,
    runs,
    kinesisEvents,
    plugin: 'test_decoding',
    batchChanges: 5000,
    reads: ['stream', 'peek'],
    durability: 'fsync on',
  });
  const h = generateHistory(opts);
  const pgc = await startPostgres();
  try {
    await pgc.createDatabase('src');
    rec.settings.postgres = await serverVersion(pgc.url('postgres'));
    const counter = { records: 0, bytes: 0 };
    const counting: RawPublisher = async (records) => {
      counter.records += rowChanges(records);
      for (const r of records) counter.bytes += r.data.length;
    };
    const results: CaptureRun[] = [];
    // The order rotates: each reader is first (reading WAL not yet in the page cache) in turn.
    const orders: Reader[][] = [
      ['reference', 'recvlogical', 'floor', 'pgoutput', 'stream', 'peek', 'reference-pgoutput'],
      ['stream', 'reference-pgoutput', 'peek', 'reference', 'floor', 'pgoutput', 'recvlogical'],
      ['recvlogical', 'floor', 'stream', 'reference-pgoutput', 'pgoutput', 'peek', 'reference'],
      ['pgoutput', 'peek', 'recvlogical', 'reference', 'reference-pgoutput', 'floor', 'stream'],
    ];
    for (let i = 0; i < runs; i++) {
      const r = await oneRun(pgc, h, orders[i % orders.length]!, counting, counter, 'counting', false);
      results.push(r);
      say(
        `${r.order.join(', ')}: get_changes ${Math.round(r.reference.changesPerSecond)} changes/s (${r.reference.seconds.toFixed(2)} s); ` +
          `capture (stream) ${Math.round(r.capture.recordsPerSecond)} records/s (${r.capture.seconds.toFixed(2)} s, ${r.capture.records} records, CPU ${Math.round(r.capture.cpuMs)} ms, of it the main thread ${r.capture.mainThreadCpuMs === null ? '?' : Math.round(r.capture.mainThreadCpuMs)} ms: ${((r.capture.cpuMs * 1000) / r.capture.records).toFixed(1)} µs per record); ` +
          `capture (peek) ${Math.round(r.peek!.recordsPerSecond)} records/s (${r.peek!.seconds.toFixed(2)} s, ${r.peek!.records} records); ` +
          `protocol floor ${Math.round(r.floor!.changesPerSecond)} changes/s (${r.floor!.seconds.toFixed(2)} s, ${r.floor!.messages} messages, ${(r.floor!.bytes / 1e6).toFixed(1)} MB of text; CPU: walsender ${r.floor!.walsenderCpuMs === null ? '?' : Math.round(r.floor!.walsenderCpuMs)} ms, this process ${Math.round(r.floor!.clientCpuMs)} ms), its parse alone ${Math.round(r.floor!.parse.changesPerSecond)} changes/s (${r.floor!.parse.seconds.toFixed(2)} s)`,
      );
      for (const c of [r.capture, r.peek!]) if (c.records !== r.changes) throw new Error(`the capture published ${c.records} records for ${r.changes} changes`);
      // The floor must have read the same changes the others did, and its parse must find them all.
      if (r.floor!.changes !== r.changes || r.floor!.parse.changes !== r.changes)
        throw new Error(`the protocol floor counted ${r.floor!.changes} changes (parsed ${r.floor!.parse.changes}) for ${r.changes}`);
      const pgo = r.pgoutput!;
      say(
        `  pgoutput: protocol floor ${Math.round(pgo.floor.changesPerSecond)} changes/s (${pgo.floor.seconds.toFixed(2)} s, ${pgo.floor.messages} messages, ${(pgo.floor.bytes / 1e6).toFixed(1)} MB; CPU: walsender ${pgo.floor.walsenderCpuMs === null ? '?' : Math.round(pgo.floor.walsenderCpuMs)} ms, this process ${Math.round(pgo.floor.clientCpuMs)} ms); ` +
          `get_binary_changes alone ${Math.round(pgo.reference.changesPerSecond)} changes/s (${pgo.reference.seconds.toFixed(2)} s, ${pgo.reference.rows} messages)`,
      );
      if (pgo.floor.changes !== r.changes) throw new Error(`the pgoutput floor counted ${pgo.floor.changes} changes for ${r.changes}`);
      if (r.recvlogical) {
        say(
          `  pg_recvlogical: ${Math.round(r.recvlogical.changesPerSecond)} changes/s (${r.recvlogical.seconds.toFixed(2)} s, ${(r.recvlogical.bytes / 1e6).toFixed(1)} MB written); capture (stream) ÷ pg_recvlogical ${(r.capture.recordsPerSecond / r.recvlogical.changesPerSecond).toFixed(2)}×`,
        );
        if (r.recvlogical.changes !== r.changes) throw new Error(`pg_recvlogical wrote ${r.recvlogical.changes} changes for ${r.changes}`);
      }
    }
    if (profile) {
      // Profiled apart from the timed runs (the profiler slows the capture's process, not PostgreSQL).
      const r = await oneRun(pgc, h, ['reference', 'stream', 'peek'], counting, counter, 'counting', true);
      rec.details.profiled = { stream: r.capture.profile, peek: r.peek?.profile };
      say(
        `profiled run: capture (stream) ${Math.round(r.capture.recordsPerSecond)} records/s, (peek) ${Math.round(r.peek!.recordsPerSecond)} records/s (not in the figures)`,
      );
    }
    const ref = median(results.map((r) => r.reference.changesPerSecond));
    const cap = median(results.map((r) => r.capture.recordsPerSecond));
    const peek = median(results.map((r) => r.peek!.recordsPerSecond));
    rec.add(rateRow('pg_logical_slot_get_changes alone (test_decoding, counted in SQL)', ref, 'changes/s', null, null));
    rec.add(
      rateRow('slot capture (stream, the default) → counting publisher', cap, 'records/s', ref, 'get_changes alone', {
        note: `median of ${runs}, order rotated; this process's CPU during the read (median, every thread) ${median(results.map((r) => (r.capture.cpuMs * 1000) / r.capture.records)).toFixed(1)} µs per record`,
      }),
    );
    rec.add(
      rateRow('slot capture (peek) → counting publisher', peek, 'records/s', ref, 'get_changes alone', {
        note: `median of ${runs}, order rotated; stream ÷ peek ${(cap / peek).toFixed(2)}×`,
      }),
    );
    // The ceilings (docs/performance-log.md, "Ceilings: what this machine and the mandated stand-ins allow"): the protocol alone, and the parser alone.
    const floor = median(results.map((r) => r.floor!.changesPerSecond));
    const parse = median(results.map((r) => r.floor!.parse.changesPerSecond));
    const goal = 0.5;
    rec.add(
      rateRow(
        'ceiling: the stream protocol alone (same connection, settings and options as the capture; messages counted, nothing else)',
        floor,
        'changes/s',
        ref,
        'get_changes alone',
        {
          target: `≥ ${goal}× is needed for the capture goal`,
          met: floor >= goal * ref,
          note: `median of ${runs}, order rotated; the capture (stream) reached ${((cap / floor) * 100).toFixed(0)} % of it; CPU during the read (median): walsender ${Math.round(median(results.map((r) => r.floor!.walsenderCpuMs ?? Number.NaN)))} ms, this process ${Math.round(median(results.map((r) => r.floor!.clientCpuMs)))} ms, of ${median(results.map((r) => r.floor!.seconds)).toFixed(2)} s`,
        },
      ),
    );
    rec.add(
      rateRow('ceiling: the test_decoding parse alone (UTF-8 text + groupTransactions, no read)', parse, 'changes/s', ref, 'get_changes alone', {
        target: `≥ ${goal}× is needed for the capture goal`,
        met: parse >= goal * ref,
        note: `median of ${runs}`,
      }),
    );
    // PostgreSQL's own streaming client with the same plugin: the capture's client-work reference.
    const recvRuns = results.filter((r) => r.recvlogical);
    if (recvRuns.length > 0) {
      const recv = median(recvRuns.map((r) => r.recvlogical!.changesPerSecond));
      const perRun = recvRuns.map((r) => (r.capture.recordsPerSecond / r.recvlogical!.changesPerSecond).toFixed(2)).join(', ');
      rec.settings.recvlogical = recvRuns[0]!.recvlogical!.version;
      rec.add(
        rateRow('pg_recvlogical (test_decoding, same options and settings, text to a file)', recv, 'changes/s', ref, 'get_changes alone', {
          note: `median of ${recvRuns.length}, order rotated; ${recvRuns[0]!.recvlogical!.version}`,
        }),
      );
      rec.add(
        rateRow('slot capture (stream) against pg_recvlogical, same plugin, same run', cap, 'records/s', recv, 'pg_recvlogical', {
          target: '≥ 0.7×',
          met: cap >= 0.7 * recv,
          note: `medians; per run ${perRun}`,
        }),
      );
    } else {
      say(`pg_recvlogical not found (looked at ${(RECVLOGICAL as { looked: string }).looked}): no client reference in this run`);
      rec.details.recvlogical = `not found: ${(RECVLOGICAL as { looked: string }).looked}`;
    }
    const floorRatio = floor / ref;
    const verdictLine =
      floorRatio < goal
        ? `the stream protocol alone reads ${floorRatio.toFixed(2)}× get_changes: the capture goal (≥ ${goal}×) is UNREACHABLE over this protocol on this machine, whatever the capture does (short by ${(goal / floorRatio).toFixed(2)}×)`
        : `the stream protocol alone reads ${floorRatio.toFixed(2)}× get_changes: the protocol leaves room for the goal (≥ ${goal}×); the capture's own work per record is what is left (the parse alone: ${(parse / ref).toFixed(2)}×)`;
    say(`verdict: ${verdictLine}`);
    // pgoutput: the protocol with the binary plugin, against the same test_decoding reference (the
    // goal's) and against pgoutput's own decoding alone.
    const pgFloor = median(results.map((r) => r.pgoutput!.floor.changesPerSecond));
    const pgRef = median(results.map((r) => r.pgoutput!.reference.changesPerSecond));
    rec.add(
      rateRow(
        'ceiling: the stream protocol alone with pgoutput (messages counted, nothing else; no decoder of its rows exists in the capture)',
        pgFloor,
        'changes/s',
        ref,
        'get_changes alone (test_decoding)',
        {
          target: `≥ ${goal}× is needed for the capture goal`,
          met: pgFloor >= goal * ref,
          note: `median of ${runs}; CPU during the read (median): walsender ${Math.round(median(results.map((r) => r.pgoutput!.floor.walsenderCpuMs ?? Number.NaN)))} ms, this process ${Math.round(median(results.map((r) => r.pgoutput!.floor.clientCpuMs)))} ms, of ${median(results.map((r) => r.pgoutput!.floor.seconds)).toFixed(2)} s; pgoutput's own get_binary_changes alone: ${Math.round(pgRef)} changes/s (the floor is ${(pgFloor / pgRef).toFixed(2)}× it)`,
        },
      ),
    );
    const pgVerdict =
      pgFloor / ref < goal
        ? `with pgoutput the stream protocol alone reads ${(pgFloor / ref).toFixed(2)}× get_changes (test_decoding): a pgoutput capture could not reach the goal either (short by ${(goal / (pgFloor / ref)).toFixed(2)}×)`
        : `with pgoutput the stream protocol alone reads ${(pgFloor / ref).toFixed(2)}× get_changes (test_decoding): the protocol leaves room for the goal; a pgoutput capture's own work per change would decide`;
    say(`verdict: ${pgVerdict}`);
    rec.details.ceilings = {
      protocolFloor: floor,
      parseAlone: parse,
      reference: ref,
      goal,
      verdict: verdictLine,
      pgoutput: { protocolFloor: pgFloor, reference: pgRef, verdict: pgVerdict },
    };

    // The capture into kinesalite (the raw stream of cdc local), on a smaller history.
    const kin = await startKinesaliteProcess();
    try {
      const client = kinesisClient(kin.endpoint);
      await client.send(new CreateStreamCommand({ StreamName: 'bench-raw', ShardCount: 2 }));
      for (;;) {
        const s = await client.send(new DescribeStreamSummaryCommand({ StreamName: 'bench-raw' }));
        if (s.StreamDescriptionSummary?.StreamStatus === 'ACTIVE') break;
        await sleep(20);
      }
      const publish = kinesisRawPublisher(client, 'bench-raw');
      const kcounter = { records: 0, bytes: 0 };
      const kpublish: RawPublisher = async (records) => {
        await publish(records);
        kcounter.records += rowChanges(records);
        for (const r of records) kcounter.bytes += r.data.length;
      };
      const small = generateHistory({ ...opts, events: Math.min(events, kinesisEvents) });
      const r = await oneRun(pgc, small, ['reference', 'stream'], kpublish, kcounter, 'kinesalite in its own process (2 shards)', false);
      say(`capture → kinesalite: ${Math.round(r.capture.recordsPerSecond)} records/s (${r.capture.seconds.toFixed(2)} s)`);
      results.push(r);
      rec.add(
        rateRow(
          'slot capture → kinesalite raw stream (cdc local)',
          r.capture.recordsPerSecond,
          'records/s',
          r.reference.changesPerSecond,
          'get_changes alone',
          { note: `${r.changes} changes` },
        ),
      );
      client.destroy();
    } finally {
      await kin.stop();
    }
    rec.details.runs = results;
    rec.details.recordBytes = Math.round(results[0]!.capture.bytes / Math.max(1, results[0]!.capture.records));
  } finally {
    await pgc.stop();
  }
  return rec.finish();
}

runIfMain(import.meta.url, runCaptureBench);
