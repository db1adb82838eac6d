/**
 * Benchmark, rebuild from the archive (docs/rebuild.md): a seeded history of one table (the
 * apply bench's `public.items`: initial snapshot rows, then 70 % updates, 20 % inserts, 10 %
 * deletes) mixed with as many events of another table, published to kinesalite and archived by
 * the archive copier in the by-table layout. The rebuild (`Rebuilder`, unthrottled) replays the
 * table from the archive and the stream into shadow objects through the live apply code and
 * swaps them in. Against a reference measured in the same run on the same cluster:
 *
 * - the physical reference of `bench:apply` (issue 27's "same reference"): COPY of every event the
 *   rebuild writes into an empty keyed changelog (the warehouse's own, with its indexes) plus COPY
 *   of the final rows into an empty table with its primary key, in events/s (bench/lib/physical.ts);
 * - `COPY` of the table's final rows into an empty table (the machine's limit for writing them).
 *
 * And PostgreSQL's share of a rebuild alone, against the same reference: the statements a rebuild
 * cannot do without (the history's changelog rows COPYed, the fold, the diff), timed with no Node
 * work, so the figure is the best any rebuild that writes the changelog reaches on this machine.
 *
 * Figures: events per second into the shadow (whole rebuild wall time, and apply time only), with
 * the portable INSERT stage loader and with the PostgreSQL COPY stage loader; how many archive
 * objects the per-table replay read of all the archive holds.
 *
 *     npm run bench:rebuild [-- --events 100000 --quick --batch 5000 --profile]
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { PerformanceObserver } from 'node:perf_hooks';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { from as copyFrom, to as copyTo } from 'pg-copy-streams';
import { CreateStreamCommand, PutRecordsCommand } from '@aws-sdk/client-kinesis';
import type { KinesisStreamEvent } from 'aws-lambda';
import { kinesisClient } from '../lambda/adapters/aws-clients.ts';
import { readChangeLog, type LogRecord } from '../lambda/adapters/change-log-reader.ts';
import { copyStageLoader, insertStageLoader, type StageLoader } from '../lambda/adapters/warehouse-pg.ts';
import type { ChangeEvent } from '../lambda/core/shared/event.ts';
import { createArchiveCopier } from '../lambda/core/rebuild/archive.ts';
import { quoteIdent } from '../lambda/core/shared/identifiers.ts';
import { diffSql } from '../lambda/core/rebuild/rebuild.ts';
import { newlinePieces } from '../lambda/core/shared/utf8.ts';
import { foldIntoEmptySql, warehouseTable } from '../lambda/core/warehouse/warehouse-sql.ts';
import { FolderArchive } from '../local/archive.ts';
import { startKinesalite } from '../local/kinesis.ts';
import { startPostgres } from '../local/postgres.ts';
import { Rebuilder } from '../lambda/adapters/rebuilder.ts';
import { ReplayReader } from '../lambda/adapters/replay-reader.ts';
import { MemoryControlPlane } from '../test/helpers/memory-control-plane.ts';
import {
  BENCH_SOURCE,
  BENCH_TABLE,
  DEFAULT_HISTORY,
  copyLine,
  generateHistory,
  historyEvents,
  itemsTableSql,
  registerBenchTable,
  snapshotEvents,
} from './lib/history.ts';
import { copyLines } from './lib/pg.ts';
import { physicalReference } from './lib/physical.ts';
import { clusterCpuMs, cpuProfile, postmasterOf, threadCpuMs } from './lib/profile.ts';
import { argValue, runIfMain, nowMs, numberArg, rateRow, Recorder, type BenchResult } from './lib/report.ts';

const OTHER_TABLE = 'public.noise';
const ROOT = path.resolve(path.dirname(new URL(import.meta.url).pathname), '..');

function kinesisEvent(records: readonly LogRecord[]): KinesisStreamEvent {
  return {
    Records: records.map((r) => ({
      eventID: `${r.shardId}:${r.sequenceNumber}`,
      eventSource: 'aws:kinesis',
      eventVersion: '1.0',
      eventName: 'aws:kinesis:record',
      invokeIdentityArn: 'arn',
      awsRegion: 'local',
      eventSourceARN: 'arn:aws:kinesis:local:000000000000:stream/bench',
      kinesis: {
        kinesisSchemaVersion: '1.0',
        partitionKey: 'k',
        sequenceNumber: r.sequenceNumber,
        data: Buffer.from(r.text).toString('base64'),
        approximateArrivalTimestamp: (r.arrivedAt ?? new Date()).getTime() / 1000,
      },
    })),
  } as KinesisStreamEvent;
}

export async function run(): Promise<BenchResult> {
  const quick = argValue('quick') !== undefined;
  const profile = argValue('profile') !== undefined;
  const events = numberArg('events', quick ? 20_000 : 100_000);
  // Events per shadow apply (the rebuild's `batchSize`).
  const batchSize = numberArg('batch', 5000);
  const options = { ...DEFAULT_HISTORY, events, keys: Math.ceil(events / 2), initial: Math.ceil(events / 4) };
  const rec = new Recorder('rebuild', { events, quick, history: options, otherTableEvents: events, archiveBatch: 2000, shards: 2, batchSize });
  const dir = mkdtempSync(path.join(os.tmpdir(), 'cdc-bench-rebuild-'));
  const [cluster, kin] = await Promise.all([startPostgres(), startKinesalite()]);
  const kinesis = kinesisClient(kin.endpoint);
  try {
    await cluster.createDatabase('dw');
    const pool = new pg.Pool({ connectionString: cluster.url('dw'), max: 4 });
    const h = generateHistory(options);
    const mine: ChangeEvent[] = [...snapshotEvents(h), ...historyEvents(h)];
    const noise = mine.map((e) => ({ ...e, table: OTHER_TABLE }));
    // Interleave the two tables, as a busy source's change log does.
    const all: ChangeEvent[] = [];
    for (let i = 0; i < mine.length; i++) all.push(mine[i]!, noise[i]!);

    // Publish, then archive everything (the copier, by-table layout).
    const stream = 'bench-rebuild';
    await kinesis.send(new CreateStreamCommand({ StreamName: stream, ShardCount: 2 }));
    for (let i = 0; i < all.length; i += 500) {
      await kinesis.send(
        new PutRecordsCommand({
          StreamName: stream,
          Records: all.slice(i, i + 500).map((e) => ({ PartitionKey: `${e.table}|${JSON.stringify(e.key)}`, Data: Buffer.from(JSON.stringify(e)) })),
        }),
      );
    }
    const archive = new FolderArchive(path.join(dir, 'archive'));
    const copy = createArchiveCopier({ archive, layout: 'by-table' });
    let batch: LogRecord[] = [];
    for await (const page of readChangeLog(kinesis, stream)) {
      for (const r of page) {
        if (batch.length > 0 && batch[0]!.shardId !== r.shardId) {
          await copy(kinesisEvent(batch));
          batch = [];
        }
        batch.push(r);
        if (batch.length >= 2000) {
          await copy(kinesisEvent(batch));
          batch = [];
        }
      }
    }
    if (batch.length > 0) await copy(kinesisEvent(batch));
    const totalObjects = (await archive.list('change-log/tables/')).length;

    const cp = new MemoryControlPlane();
    await registerBenchTable(cp);
    await cp.advanceSinkProgress(
      'warehouse',
      BENCH_SOURCE,
      BENCH_TABLE,
      mine.reduce((m, e) => (e.position > m ? e.position : m), mine[0]!.position),
    );

    // Reference: COPY of the final rows into an empty table; the median of three (one COPY of a
    // few thousand rows takes tens of milliseconds, so a single one swings with the machine's load).
    const copyRuns: number[] = [];
    for (let i = 0; i < 3; i++) {
      const c = await pool.connect();
      try {
        await c.query(itemsTableSql(`public.copy_ref_${i}`));
        const t0 = nowMs();
        await copyLines(c, `public.copy_ref_${i}`, h.finalRows.map(copyLine));
        copyRuns.push(nowMs() - t0);
      } finally {
        c.release();
      }
    }
    const copyMs = [...copyRuns].sort((a, b) => a - b)[1]!;
    const copyRate = h.finalRows.length / (copyMs / 1000);
    rec.add(
      rateRow('COPY of the final rows (reference)', copyRate, 'rows/s', null, null, {
        note: `${h.finalRows.length} rows in ${Math.round(copyMs)} ms (median of ${copyRuns.map((m) => Math.round(m)).join(', ')} ms)`,
      }),
    );

    // The physical reference: every event of the table (the shadow starts empty) COPYed into a keyed changelog, plus the final rows; median of three.
    const physRuns = await physicalReference(cluster.url('dw'), h, [], mine, 3);
    const physRate = [...physRuns].sort((a, b) => a - b)[1]!;
    rec.add(
      rateRow('physical reference: COPY of every event into a keyed changelog + COPY of the final rows', physRate, 'events/s', null, null, {
        note: `${mine.length} events and ${h.finalRows.length} final rows (median of ${physRuns.map(Math.round).join(', ')} events/s)`,
      }),
    );

    const loaders: Array<{ name: string; loader: StageLoader }> = [
      { name: 'INSERT stage loader (portable)', loader: insertStageLoader },
      { name: 'COPY stage loader (PostgreSQL)', loader: copyStageLoader },
    ];
    const runs: Record<string, unknown>[] = [];
    // Warm-up (not timed): the first rebuild makes the live table, so the timed ones swap over one and diff against it as in use.
    for (const l of [{ name: 'warm-up', loader: insertStageLoader }, ...loaders]) {
      const p = new pg.Pool({ connectionString: cluster.url('dw'), max: 4 });
      // Where the time goes: the rebuild's steps, timed from one to the next, with this process's CPU and the warehouse cluster's (from /proc).
      const postmaster = await postmasterOf(p);
      const phases: Array<{ step: string; at: number; cpu: number; server: number }> = [];
      const cpuNow = (): number => {
        const u = process.cpuUsage();
        return (u.user + u.system) / 1000;
      };
      const step = async (name: string): Promise<void> => void phases.push({ step: name, at: nowMs(), cpu: cpuNow(), server: clusterCpuMs(postmaster) });
      const rebuilder = new Rebuilder({
        controlPlane: cp,
        pool: p,
        reader: new ReplayReader({ archive, kinesis, stream }),
        warehouse: { loader: l.loader },
        duty: 1,
        batchSize,
        step,
      });
      const checked = await rebuilder.check({ source: BENCH_SOURCE, table: BENCH_TABLE, sink: 'warehouse' });
      if (checked.refusal !== null) throw new Error(`rebuild refused: ${checked.refusal.reason}`);
      // The garbage collector's pauses in the rebuild (this process's main thread).
      let gcMs = 0;
      const gc = new PerformanceObserver((list) => {
        for (const e of list.getEntries()) gcMs += e.duration;
      });
      gc.observe({ entryTypes: ['gc'] });
      const t0 = nowMs();
      const cpu0 = process.cpuUsage();
      const threads0 = threadCpuMs();
      const server0 = clusterCpuMs(postmaster);
      const go = () => rebuilder.run({ source: BENCH_SOURCE, table: BENCH_TABLE, sink: 'warehouse', rehearse: false, actor: 'bench' }, checked.history);
      // `--profile`: the COPY loader's rebuild under the CPU profiler (sampled self time by function; the profiler's own work included).
      const profiled = profile && l.loader === copyStageLoader ? await cpuProfile(ROOT, go) : null;
      const report = profiled ? profiled.result : await go();
      if (profiled) {
        process.stdout.write(`[rebuild] profile of the COPY loader's rebuild, self time: ${profiled.profile.totalMs} ms\n`);
        for (const f of profiled.profile.byFunction) process.stdout.write(`  ${String(f.ms).padStart(6)} ms  ${f.fn}\n`);
      }
      const wall = nowMs() - t0;
      const serverMs = Math.round(clusterCpuMs(postmaster) - server0);
      gc.disconnect();
      phases.push({ step: 'end', at: t0 + wall, cpu: cpuNow(), server: clusterCpuMs(postmaster) });
      // A step that comes several times (`apply-batch`, after each batch of the bulk) is the sum of its stretches: wall / process CPU / PostgreSQL CPU, ms.
      const phaseMs: Record<string, number> = {};
      const phaseCpu: Record<string, [number, number, number]> = {};
      for (const [i, ph] of phases.slice(0, -1).entries()) {
        const next = phases[i + 1]!;
        phaseMs[ph.step] = (phaseMs[ph.step] ?? 0) + next.at - ph.at;
        const was = phaseCpu[ph.step] ?? [0, 0, 0];
        phaseCpu[ph.step] = [was[0] + next.at - ph.at, was[1] + next.cpu - ph.cpu, was[2] + next.server - ph.server];
      }
      for (const k of Object.keys(phaseMs)) phaseMs[k] = Math.round(phaseMs[k]!);
      const byStep = Object.entries(phaseCpu)
        .map(([k, v]) => `${k} ${v.map(Math.round).join('/')}`)
        .join(', ');
      const cpu = process.cpuUsage(cpu0);
      const cpuMs = Math.round((cpu.user + cpu.system) / 1000);
      // This process's CPU in the rebuild's wall time: near the wall time, the rebuild is bound by its own Node work (docs/performance-log.md, "A streamed replay for the rebuild: tried, not kept").
      process.stdout.write(
        `[rebuild] ${l.name}: ${Math.round(wall)} ms (process CPU ${cpuMs} ms of which GC pauses ${Math.round(gcMs)} ms, PostgreSQL CPU ${serverMs} ms); by step, wall/process CPU/PostgreSQL CPU ms: ${byStep}\n`,
      );
      const threads1 = threadCpuMs();
      if (threads0 !== null && threads1 !== null)
        process.stdout.write(
          `[rebuild] ${l.name}, process CPU by thread: main ${Math.round(threads1.main - threads0.main)} ms, other threads ${Math.round(threads1.others - threads0.others)} ms\n`,
        );
      await p.end();
      if (l.name === 'warm-up') continue;
      const rate = report.run.events / (wall / 1000);
      const applyRate = report.run.events / (report.applyMs / 1000);
      rec.add(
        rateRow(
          `rebuild from the archive, ${l.name}: events into the shadow (whole rebuild), against the physical reference`,
          rate,
          'events/s',
          physRate,
          'physical reference',
          {
            target: '≥ 0.5× physical reference',
            met: rate / physRate >= 0.5,
            note: `${report.run.events} events in ${Math.round(wall)} ms`,
          },
        ),
      );
      rec.add(
        rateRow(`rebuild from the archive, ${l.name}: events into the shadow (whole rebuild)`, rate, 'events/s', copyRate, 'COPY of the final rows', {
          target: '≥ 0.5× COPY',
          met: rate / copyRate >= 0.5,
          note: `${report.run.events} events in ${Math.round(wall)} ms`,
        }),
      );
      rec.add(
        rateRow(`rebuild from the archive, ${l.name}: events into the shadow (apply time only)`, applyRate, 'events/s', copyRate, 'COPY of the final rows', {
          note: `apply ${Math.round(report.applyMs)} ms of ${Math.round(wall)} ms`,
        }),
      );
      runs.push({
        loader: l.name,
        wallMs: wall,
        cpuMs,
        gcMs,
        serverCpuMs: serverMs,
        phaseMs,
        phaseCpu,
        applyMs: report.applyMs,
        events: report.run.events,
        stats: report.stats,
        diff: report.run.diff,
      });
      if (l.loader === insertStageLoader) {
        rec.add({
          measure: 'per-table replay: archive objects read of all objects (two tables)',
          figure: report.stats.objectsRead,
          unit: 'objects',
          reference: totalObjects,
          referenceLabel: 'objects in the archive',
          ratio: totalObjects / Math.max(1, report.stats.objectsRead),
          note: `${report.stats.keysListed} keys listed, ${report.stats.markersRead} batch markers read for their digests; a batch-layout archive would read all ${totalObjects / 2} batch objects whole`,
        });
      }
    }
    rec.details.runs = runs;

    // Reference: PostgreSQL's share of a rebuild alone, no Node work (docs/performance-log.md, "Ceilings of the last two goals"):
    // the history's changelog rows COPYed into an empty changelog, the fold into an empty mirror,
    // the diff against the live mirror; the statements the rebuild runs, one after the other.
    const share = await postgresShare(pool, 3);
    const shareMs = [...share.runs].sort((a, b) => a.total - b.total)[1]!;
    const shareRate = share.events / (shareMs.total / 1000);
    rec.add(
      rateRow('PostgreSQL alone: changelog COPY + fold + diff of the rebuild (no Node work)', shareRate, 'events/s', copyRate, 'COPY of the final rows', {
        note: `the best a rebuild that writes the changelog can reach here; ${share.events} changelog rows: COPY ${Math.round(shareMs.copy)} + fold ${Math.round(shareMs.fold)} + diff ${Math.round(shareMs.diff)} ms (median of ${share.runs.map((r) => Math.round(r.total)).join(', ')} ms)`,
      }),
    );
    rec.details.postgresShare = share;
    await pool.end();
    return rec.finish();
  } finally {
    kinesis.destroy();
    await kin.stop();
    await cluster.stop();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * PostgreSQL's share of a rebuild with no Node work: the live changelog (the last rebuild's) is
 * read out as COPY text (not timed), then, `runs` times: COPY into an empty copy of the changelog
 * (its indexes too), the rebuild's fold (`foldIntoEmptySql`, the merge into an empty base, with the rebuild's planner
 * setting) into an empty copy of the mirror, and the rebuild's diff (`diffSql`) of that mirror
 * against the live one, which must find nothing.
 */
async function postgresShare(
  pool: pg.Pool,
  runs: number,
): Promise<{ events: number; runs: Array<{ copy: number; fold: number; diff: number; total: number }> }> {
  const t = warehouseTable(BENCH_SOURCE, BENCH_TABLE);
  const q = (n: string): string => `${quoteIdent(t.schema)}.${quoteIdent(n)}`;
  const c = await pool.connect();
  try {
    const columns = async (rel: string): Promise<string[]> =>
      (
        await c.query<{ attname: string }>(
          'SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum',
          [q(rel)],
        )
      ).rows.map((r) => r.attname);
    const mirrorColumns = await columns(t.mirror);
    const changelogColumns = await columns(t.changelog);
    const parts: Buffer[] = [];
    for await (const part of c.query(copyTo(`COPY ${q(t.changelog)} TO STDOUT`))) parts.push(part as Buffer);
    // The rows as 64 KiB pieces ending at a row's end, made before the clock starts (no Node work in the timed part).
    const pieces = [...newlinePieces(Buffer.concat(parts))];
    const { n: events, p: upTo } = (await c.query<{ n: string; p: string }>(`SELECT count(*) AS n, max(_cdc_position) AS p FROM ${q(t.changelog)}`)).rows[0]!;
    const out: Array<{ copy: number; fold: number; diff: number; total: number }> = [];
    const shadow = { ...t, changelog: '_bench_share_changelog', mirror: '_bench_share_mirror' };
    for (let i = 0; i < runs; i++) {
      await c.query(`DROP TABLE IF EXISTS ${q(shadow.changelog)}; DROP TABLE IF EXISTS ${q(shadow.mirror)}`);
      await c.query(
        `CREATE TABLE ${q(shadow.changelog)} (LIKE ${q(t.changelog)} INCLUDING ALL); CREATE TABLE ${q(shadow.mirror)} (LIKE ${q(t.mirror)} INCLUDING ALL)`,
      );
      const t0 = nowMs();
      await pipeline(Readable.from(pieces), c.query(copyFrom(`COPY ${q(shadow.changelog)} FROM STDIN`)));
      const t1 = nowMs();
      await c.query('BEGIN');
      await c.query('SET LOCAL enable_nestloop = off');
      for (const sql of foldIntoEmptySql(shadow, {
        key: ['id'],
        mirrorColumns,
        changelogColumns,
        hard: false,
        deletedKeys: false,
        truncations: false,
        pending: { from: '0', to: '9223372036854775807' },
      }))
        await c.query(sql);
      await c.query('COMMIT');
      const t2 = nowMs();
      const data = mirrorColumns.filter((x) => x !== 'id' && !x.startsWith('_cdc_'));
      const diff = await c.query({ text: diffSql(t.schema, t.mirror, shadow.mirror, ['id'], data), values: [upTo] });
      const t3 = nowMs();
      if (diff.rowCount !== 0) throw new Error(`PostgreSQL's share: the fold differs from the live mirror in ${diff.rowCount} rows`);
      out.push({ copy: t1 - t0, fold: t2 - t1, diff: t3 - t2, total: t3 - t0 });
    }
    await c.query(`DROP TABLE IF EXISTS ${q(shadow.changelog)}; DROP TABLE IF EXISTS ${q(shadow.mirror)}`);
    return { events: Number(events), runs: out };
  } finally {
    c.release();
  }
}

runIfMain(import.meta.url, run);
