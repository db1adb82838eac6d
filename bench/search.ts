/**
 * Benchmark: the search applier into the search stand-in (local/search-standin.ts, run in its own
 * process). The stand-in is NOT OpenSearch: its figures say what the applier's own work (decode,
 * plan, read stored documents, build the bulk body, classify results) costs next to the
 * stand-in's raw `_bulk` rate; they say nothing about an OpenSearch cluster (docs/performance.md).
 *
 * - reference: the final documents written by plain `_bulk` requests of 1,000 `index` actions
 *   with external versions, straight into an empty index of the same mapping (no applier);
 * - figure: the seeded history (snapshot rows + 70 % updates, 20 % inserts, 10 % deletes,
 *   bench/lib/history.ts) through the REAL search applier's Lambda handler in Kinesis batches of
 *   1,000, with the in-memory control plane; checked at the end (live documents = final rows).
 *
 *     npm run bench -- --only search [--quick]     or     tsx bench/search.ts [--events N]
 */
import { spawn, type ChildProcess } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import type { KinesisStreamEvent } from 'aws-lambda';
import { toKinesisStreamEvent } from '../lambda/adapters/kinesis-event.ts';
import { OpenSearchIndex, searchClient } from '../lambda/adapters/search-opensearch.ts';
import type { ChangeEvent } from '../lambda/core/shared/event.ts';
import { bulkBody, createIndexBody, desiredProperties, documentId, META_FIELD, searchNames, type SearchOp } from '../lambda/core/search/search-plan.ts';
import { encodeVersion } from '../lambda/core/search/search-version.ts';
import { createSearchApplier } from '../lambda/handlers/search-applier.ts';
import { MemoryControlPlane } from '../test/helpers/memory-control-plane.ts';
import { BENCH_SOURCE, BENCH_TABLE, DEFAULT_HISTORY, generateHistory, historyEvents, registryEntries, snapshotEvents } from './lib/history.ts';
import { argValue, runIfMain, nowMs, numberArg, rateRow, Recorder, type BenchResult } from './lib/report.ts';

const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const BATCH = 1000;
const say = (t: string): void => void process.stdout.write(`[search] ${t}\n`);

async function startStandIn(): Promise<{ url: string; child: ChildProcess }> {
  const child = spawn(process.execPath, [...process.execArgv, path.join(ROOT, 'local', 'search-standin.ts')], { stdio: ['ignore', 'pipe', 'inherit'] });
  const url = await new Promise<string>((resolve, reject) => {
    let buf = '';
    child.stdout!.on('data', (d: Buffer) => {
      buf += d.toString('utf8');
      const m = /listening (\S+)/.exec(buf);
      if (m) resolve(m[1]!);
    });
    child.on('exit', (code) => reject(new Error(`the stand-in exited (${code}) before listening`)));
  });
  return { url, child };
}

export async function runSearchBench(): Promise<BenchResult> {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  const quick = argValue('quick') !== undefined;
  const events = numberArg('events', quick ? 20_000 : 100_000);
  const opts = { ...DEFAULT_HISTORY, events, keys: Math.max(1000, Math.round(events / 2)), initial: Math.round(events * 0.3) };
  const h = generateHistory(opts);
  const all: ChangeEvent[] = [...snapshotEvents(h), ...historyEvents(h)];
  const rec = new Recorder('search', { history: opts, batch: BATCH, events: all.length, server: 'search stand-in (not OpenSearch), own process' });
  const { url, child } = await startStandIn();
  const index = new OpenSearchIndex(searchClient({ node: url }));
  try {
    const reg = registryEntries();
    // Reference: raw _bulk of the final documents into an index of the same mapping.
    const refNames = searchNames('ref', BENCH_SOURCE, BENCH_TABLE);
    await index.client.indices.create({
      index: refNames.index(1),
      body: createIndexBody(refNames, desiredProperties([reg.schema]), { baseLsn: 0n, truncatedAt: null }) as never,
    });
    const finalPos = '000000020000000000000000';
    const ops: SearchOp[] = h.finalRows.map((r) => ({
      action: 'index',
      target: 'all',
      id: documentId({ id: r.id }),
      version: encodeVersion(finalPos, 0n),
      document: {
        ...r,
        [META_FIELD]: { position: finalPos, deleted: false, deleted_at: null, key: documentId({ id: r.id }), applied_at: new Date().toISOString() },
      },
      keyText: documentId({ id: r.id }),
      position: finalPos,
    }));
    const bodies: string[] = [];
    for (let i = 0; i < ops.length; i += BATCH) bodies.push(bulkBody(ops.slice(i, i + BATCH), refNames));
    const t0 = nowMs();
    for (const b of bodies) {
      const res = await fetch(`${url}/${refNames.all}/_bulk`, { method: 'POST', body: b, headers: { 'content-type': 'application/x-ndjson' } });
      const j = (await res.json()) as { errors: boolean };
      if (j.errors) throw new Error('reference bulk had item errors');
    }
    const rawRate = ops.length / ((nowMs() - t0) / 1000);
    say(`raw _bulk: ${ops.length} documents at ${rawRate.toFixed(0)}/s`);

    // The applier.
    const cp = new MemoryControlPlane();
    await cp.registerTable(reg.table, reg.schema, {
      at: reg.table.updatedAt,
      actor: 'bench',
      action: 'register',
      source: BENCH_SOURCE,
      table: BENCH_TABLE,
      outcome: 'done',
      detail: {},
    });
    const applier = createSearchApplier({
      controlPlane: cp,
      search: index,
      sinkId: 'search',
      metrics: new Metrics({ namespace: 'bench' }),
      logger: new Logger({ logLevel: 'ERROR' }),
    });
    const batches: KinesisStreamEvent[] = [];
    for (let i = 0; i < all.length; i += BATCH) {
      batches.push(
        toKinesisStreamEvent(
          all
            .slice(i, i + BATCH)
            .map((e, j) => ({ SequenceNumber: String(1_000_000 + i + j), PartitionKey: JSON.stringify(e.key), Data: Buffer.from(JSON.stringify(e), 'utf8') })),
          { streamArn: 'arn:aws:kinesis:us-east-1:000000000000:stream/cdc-change-log', shardId: 'shardId-000000000000' },
        ),
      );
    }
    const t1 = nowMs();
    for (const b of batches) {
      const r = await applier.handler(b);
      if (r.batchItemFailures.length > 0) throw new Error(`batch failed: ${JSON.stringify(r.batchItemFailures[0])}`);
    }
    const seconds = (nowMs() - t1) / 1000;
    const rate = all.length / seconds;
    const names = searchNames('cdc', BENCH_SOURCE, BENCH_TABLE);
    const count = await index.countDocuments(names);
    const verified = count === h.finalRows.length;
    say(`applier: ${all.length} events in ${seconds.toFixed(1)} s (${rate.toFixed(0)}/s); ${count} live documents, ${h.finalRows.length} expected`);
    if (!verified) throw new Error(`the index holds ${count} live documents, expected ${h.finalRows.length}`);
    rec.add(
      rateRow('search stand-in: raw _bulk of the final documents (no applier), 1,000 per request', rawRate, 'docs/s', null, null, {
        note: `${ops.length} documents; the stand-in is not OpenSearch`,
      }),
    );
    rec.add(
      rateRow(
        'search applier into the stand-in, batch 1,000 (Lambda handler, in-memory control plane)',
        rate,
        'events/s',
        rawRate,
        'stand-in raw _bulk docs/s',
        {
          note: `${all.length} events (${h.initialRows.length} snapshot rows + ${h.changes.length} changes), verified ${verified}; the stand-in is not OpenSearch`,
        },
      ),
    );
    rec.details.verified = verified;
  } finally {
    index.client.close();
    child.kill('SIGTERM');
  }
  return rec.finish();
}

runIfMain(import.meta.url, runSearchBench);
