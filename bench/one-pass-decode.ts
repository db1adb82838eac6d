/**
 * Measurement for the append's decode in one pass (docs/performance-log.md, "57. The applier's
 * decode in one pass"): per event of the bench history, the CPU of today's path (`JSON.parse` +
 * `validateChangeEvent`, then the changelog's COPY text, `changelogCopyText`) against the one
 * pass (`decodeAppendable`, then `appendableCopyText`), in one process, alternated round by
 * round (`--pairs`), batches of `--batch` events as the applier appends them; medians. Each
 * round's COPY bytes are hashed: both sides must give the same digest (checked).
 *
 *     npx tsx bench/one-pass-decode.ts [--events 100000 --batch 10000 --pairs 12]
 */
import { createHash } from 'node:crypto';
import { appendableCopyText } from '../lambda/adapters/warehouse-pg-append-text.ts';
import { changelogCopyText } from '../lambda/adapters/warehouse-pg-copy-text.ts';
import { decodeAppendable, type AppendableEvent } from '../lambda/core/sink/appendable-event.ts';
import { validateChangeEvent, type ChangeEvent } from '../lambda/core/shared/event.ts';
import { CdcColumn, CHANGELOG_CDC_COLUMNS } from '../lambda/core/warehouse/warehouse-sql.ts';
import { DEFAULT_HISTORY, generateHistory, historyEvents, ITEM_COLUMNS, snapshotEvents } from './lib/history.ts';
import { loadAverage, median, numberArg, runIfMain } from './lib/report.ts';

const cpuMs = (): number => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};

interface Round {
  decode: number;
  copy: number;
  digest: string;
}

/** One side's round over all batches: the decode's CPU, the COPY text's CPU, the bytes' digest. */
function round<E>(
  batches: readonly string[][],
  decode: (t: string) => E,
  copy: (es: E[], columns: string[], at: string) => Iterable<Buffer>,
  columns: string[],
): Round {
  const h = createHash('sha256');
  let decodeMs = 0;
  let copyMs = 0;
  const at = '2026-12-07T05:00:00.000Z';
  for (const b of batches) {
    const t0 = cpuMs();
    const events = b.map(decode);
    const t1 = cpuMs();
    for (const chunk of copy(events, columns, at)) h.update(chunk);
    decodeMs += t1 - t0;
    copyMs += cpuMs() - t1;
  }
  return { decode: decodeMs, copy: copyMs, digest: h.digest('hex') };
}

const todayDecode = (t: string): ChangeEvent => validateChangeEvent(JSON.parse(t));
const onePassDecode = (t: string): AppendableEvent => {
  const a = decodeAppendable(t);
  if (a === null) throw new Error(`the one pass fell back on a bench event: ${t}`);
  return a;
};

export async function run(): Promise<void> {
  const n = numberArg('events', 100_000);
  const batchSize = numberArg('batch', 10_000);
  const pairs = numberArg('pairs', 12);
  const h = generateHistory({ ...DEFAULT_HISTORY, events: n, keys: Math.ceil(n / 2), initial: Math.ceil(n / 4) });
  const texts = [...snapshotEvents(h), ...historyEvents(h)].map((e) => JSON.stringify(e));
  const batches: string[][] = [];
  for (let i = 0; i < texts.length; i += batchSize) batches.push(texts.slice(i, i + batchSize));
  const columns = [...ITEM_COLUMNS.map((c) => c.name), ...CHANGELOG_CDC_COLUMNS.map((c) => c.name)].filter((c) => c !== CdcColumn.SEQ);
  console.log(`${texts.length} events, batch ${batchSize}, ${pairs} pairs alternated after a warm-up; load ${loadAverage().join(' ')}`);
  const today: Round[] = [];
  const onePass: Round[] = [];
  for (let p = -1; p < pairs; p++) {
    const a = round(batches, todayDecode, changelogCopyText, columns);
    const b = round(batches, onePassDecode, appendableCopyText, columns);
    if (a.digest !== b.digest) throw new Error(`pair ${p}: the COPY bytes differ (${a.digest} against ${b.digest})`);
    if (p < 0) continue;
    today.push(a);
    onePass.push(b);
  }
  const us = (ms: number): string => ((ms * 1000) / texts.length).toFixed(2);
  const line = (name: string, rs: Round[]): void => {
    const d = median(rs.map((r) => r.decode));
    const c = median(rs.map((r) => r.copy));
    const t = median(rs.map((r) => r.decode + r.copy));
    console.log(`  ${name}: decode ${us(d)} µs, COPY text ${us(c)} µs, both ${us(t)} µs per event (medians)`);
  };
  line('today (JSON.parse + validateChangeEvent, changelogCopyText)', today);
  line('one pass (decodeAppendable, appendableCopyText)', onePass);
  const ratios = today.map((a, i) => (a.decode + a.copy) / (onePass[i]!.decode + onePass[i]!.copy));
  console.log(
    `  today / one pass per pair: median ${median(ratios).toFixed(2)}x (${Math.min(...ratios).toFixed(2)}-${Math.max(...ratios).toFixed(2)}); same bytes in every pair; load ${loadAverage().join(' ')}`,
  );
}

runIfMain(import.meta.url, run);
