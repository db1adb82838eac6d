/**
 * Benchmark: two pieces of Node work on the platform's hot paths, each against a reference run
 * in the same process (docs/performance-log.md, "Two pieces of Node work that grew faster than their input"). Best of `--rounds`.
 *
 * 1. Reading an archive object's lines (the replay of a rebuild, lambda/adapters/replay-reader.ts):
 *    `utf8Lines`, which decodes in pieces of 64 KiB, against decoding the whole object into one
 *    string and splitting it. Objects of 1,000 of the apply bench's events (about 430 KiB).
 * 2. `distinctEvents` (every apply, warehouse and search, and every replay) over a batch of
 *    snapshot rows, whose chunks put all their rows at one position, against the same rows in
 *    chunks of 10. A ratio near 1 means the cost does not grow with the rows at one position (it
 *    grew with their square before 2026-12-02).
 *
 *     npm run bench:hot-paths [-- --rounds 5 --chunk 1000]
 */
import { distinctEvents } from '../lambda/core/sink/apply-plan.ts';
import type { ChangeEvent } from '../lambda/core/shared/event.ts';
import { makePosition } from '../lambda/core/shared/position.ts';
import { utf8Lines } from '../lambda/core/shared/utf8.ts';
import { DEFAULT_HISTORY, generateHistory, historyEvents, snapshotEvents } from './lib/history.ts';
import { runIfMain, nowMs, numberArg, rateRow, Recorder, type BenchResult } from './lib/report.ts';

const say = (text: string): void => void process.stdout.write(`[hot-paths] ${text}\n`);

/** Best rate (items per second) of `rounds` runs of `work`, which handles `items` items. */
function best(rounds: number, items: number, work: () => number): number {
  let top = 0;
  let sink = 0;
  for (let r = 0; r < rounds; r++) {
    const t0 = nowMs();
    sink += work();
    top = Math.max(top, items / ((nowMs() - t0) / 1000));
  }
  if (sink < 0) throw new Error('unreachable');
  return top;
}

export async function run(): Promise<BenchResult> {
  const rounds = numberArg('rounds', 5);
  const chunk = numberArg('chunk', 1000);
  const rec = new Recorder('hot-paths', { rounds, chunk, history: { ...DEFAULT_HISTORY, events: 100_000 } });
  const h = generateHistory({ ...DEFAULT_HISTORY, events: 100_000, keys: 50_000, initial: 25_000 });
  const events = [...snapshotEvents(h), ...historyEvents(h)];

  // 1. Archive objects of 1,000 events each, as the archive copier writes them (one JSON event per line).
  const lines = events.map((e) => JSON.stringify(e));
  const objects: Buffer[] = [];
  for (let i = 0; i < lines.length; i += 1000) objects.push(Buffer.from(`${lines.slice(i, i + 1000).join('\n')}\n`));
  const whole = (): number =>
    objects.reduce(
      (n, b) =>
        n +
        b
          .toString('utf8')
          .split('\n')
          .filter((l) => l.length > 0).length,
      0,
    );
  const pieces = (): number => objects.reduce((n, b) => n + utf8Lines(b).length, 0);
  if (whole() !== pieces()) throw new Error('utf8Lines and the whole decode disagree');
  const wholeRate = best(rounds, lines.length, whole);
  const piecesRate = best(rounds, lines.length, pieces);
  say(
    `archive lines (${objects.length} objects of ${Math.round(objects[0]!.length / 1024)} KiB): pieces ${Math.round(piecesRate)} lines/s, whole ${Math.round(wholeRate)} lines/s`,
  );
  rec.add(
    rateRow(
      `archive object lines, decoded in 64 KiB pieces (objects of ${Math.round(objects[0]!.length / 1024)} KiB)`,
      piecesRate,
      'lines/s',
      wholeRate,
      'the whole object decoded at once',
    ),
  );

  // 2. A batch of 10,000 snapshot rows in chunks of `chunk` rows at one position each, against the same rows at distinct positions.
  const rows = snapshotEvents(h).slice(0, 10_000);
  const chunked: ChangeEvent[] = rows.map((e, i) => ({ ...e, position: makePosition(0x1000n + BigInt(Math.floor(i / chunk)), 0xffffffff) }));
  const small: ChangeEvent[] = rows.map((e, i) => ({ ...e, position: makePosition(0x1000n + BigInt(Math.floor(i / 10)), 0xffffffff) }));
  if (distinctEvents(chunked).length !== rows.length || distinctEvents(small).length !== rows.length) throw new Error('distinctEvents dropped distinct events');
  const chunkedRate = best(rounds, rows.length, () => distinctEvents(chunked).length);
  const smallRate = best(rounds, rows.length, () => distinctEvents(small).length);
  say(
    `distinctEvents: ${rows.length} snapshot rows in chunks of ${chunk} at one position ${Math.round(chunkedRate)} events/s, in chunks of 10 ${Math.round(smallRate)} events/s`,
  );
  rec.add(
    rateRow(
      `distinctEvents over ${rows.length} snapshot rows, chunks of ${chunk} rows at one position`,
      chunkedRate,
      'events/s',
      smallRate,
      'the same rows in chunks of 10',
    ),
  );
  return rec.finish();
}

runIfMain(import.meta.url, run);
