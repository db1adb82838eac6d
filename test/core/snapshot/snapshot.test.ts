/**
 * The pure parts of the snapshot (docs/snapshot.md): keyset chunk queries, positions, records,
 * progress, the pacer, and the request / run / bootstrap logic over the in-memory control plane
 * (a collaborator double; the DynamoDB adapter is tested in test/adapters/control-plane-dynamodb/snapshots.test.ts).
 */
import { describe, expect, it } from 'vitest';
import {
  chunkCopyQuery,
  chunkQuery,
  chunkRecords,
  cursorAfter,
  encodeChunkRecords,
  formatEta,
  parseCopyText,
  rowToColumns,
  snapshotPosition,
  SnapshotTableError,
  type ChunkRead,
  type SnapshotTableShape,
} from '../../../lambda/core/snapshot/snapshot.ts';
import {
  AdaptivePacer,
  addedLatencyPct,
  budgetRatio,
  DEFAULT_SOURCE_BUDGET,
  FixedPacer,
  probeNoiseFloorMs,
  quantile,
} from '../../../lambda/core/snapshot/snapshot-pacer.ts';
import { bootstrapFromCopy } from '../../../lambda/core/snapshot/snapshot-bootstrap.ts';
import { planSnapshots, requestSnapshot, runPendingSnapshots, runTableSnapshot, type SnapshotReader } from '../../../lambda/core/snapshot/snapshot-worker.ts';
import { BootstrapGapError, sweepPosition } from '../../../lambda/core/snapshot/snapshot.ts';
import { makePosition } from '../../../lambda/core/shared/position.ts';
import { maskValue, NO_COLUMN_RULES } from '../../../lambda/core/tables/masking.ts';
import { decodeSlotRecord } from '../../../lambda/core/capture/slot-decoder.ts';
import { validateTableConfig } from '../../../lambda/core/tables/table-config.ts';
import { isPackedSlotRecord, packedRowRecord, validatePackedHeader, validateSlotRecord, type SlotRecord } from '../../../lambda/core/capture/slot-record.ts';
import { parseJsonExact } from '../../../lambda/core/shared/json-exact.ts';
import type { SnapshotRawRecord } from '../../../lambda/core/snapshot/snapshot.ts';
import { MemoryControlPlane } from '../../helpers/memory-control-plane.ts';

/** The rows of published records, each as the per-row record it stands for (a packed record's rows in order; the sweep as it is). */
function perRow(records: readonly SnapshotRawRecord[]): SlotRecord[] {
  return records.flatMap((raw) => {
    const parsed = parseJsonExact(raw.data);
    if (!isPackedSlotRecord(parsed)) return [validateSlotRecord(parsed)];
    const p = validatePackedHeader(parsed);
    return p.rows.map((_, i) => packedRowRecord(p, i));
  });
}

const SHAPE: SnapshotTableShape = {
  table: 'public.t',
  columns: [
    { name: 'a', type: 'integer', typeOid: 23 },
    { name: 'b', type: 'text', typeOid: 25 },
    { name: 'ok', type: 'boolean', typeOid: 16 },
    { name: 'n', type: 'numeric', typeOid: 1700 },
    { name: 'bits', type: 'bit varying', typeOid: 1562 },
    { name: 'email', type: 'text', typeOid: 25 },
  ],
  key: ['a', 'b'],
};

describe('chunk planning', () => {
  it('pages by a row comparison on the composite key, values as parameters', () => {
    expect(chunkQuery(SHAPE, null, 100)).toEqual({
      text: 'SELECT "a", "b", "ok", "n", "bits", "email" FROM "public"."t" ORDER BY "a", "b" LIMIT 100',
      values: [],
    });
    expect(chunkQuery(SHAPE, ['3', "it's"], 10)).toEqual({
      text: 'SELECT "a", "b", "ok", "n", "bits", "email" FROM "public"."t" WHERE ("a", "b") > ($1, $2) ORDER BY "a", "b" LIMIT 10',
      values: ['3', "it's"],
    });
    expect(chunkQuery({ ...SHAPE, key: ['a'] }, ['7'], 5).text).toContain('WHERE "a" > $1 ORDER BY "a" LIMIT 5');
  });

  it('refuses a table without a key, a cursor of the wrong width and unsafe names', () => {
    expect(() => chunkQuery({ ...SHAPE, key: [] }, null, 1)).toThrow(SnapshotTableError);
    expect(() => chunkQuery(SHAPE, ['1'], 1)).toThrow(/cursor has 1 values, the key has 2/);
    expect(() => chunkQuery({ ...SHAPE, table: 'public.t.drop' }, null, 1)).toThrow(/schema\.table/);
    // Any name PostgreSQL accepts is carried, double-quoted with `"` doubled (docs/onboarding.md, "Names").
    expect(chunkQuery({ ...SHAPE, table: 'public.t"; drop' }, null, 1).text).toContain('FROM "public"."t""; drop"');
  });

  it('the COPY form inlines the cursor as escaped string literals; COPY text output parses back to the values', () => {
    expect(chunkCopyQuery(SHAPE, null, 100)).toBe('COPY (SELECT "a", "b", "ok", "n", "bits", "email" FROM "public"."t" ORDER BY "a", "b" LIMIT 100) TO STDOUT');
    expect(chunkCopyQuery(SHAPE, ['3', "it's a \\ $1"], 10)).toBe(
      `COPY (SELECT "a", "b", "ok", "n", "bits", "email" FROM "public"."t" WHERE ("a", "b") > (E'3', E'it''s a \\\\ $1') ORDER BY "a", "b" LIMIT 10) TO STDOUT`,
    );
    expect(() => chunkCopyQuery(SHAPE, ['1'], 1)).toThrow(/cursor has 1 values, the key has 2/);
    expect(parseCopyText('', 2)).toEqual([]);
    expect(parseCopyText('1\ta\\tb\\nc\\\\d\n2\t\\N\n3\t\n', 2)).toEqual([
      ['1', 'a\tb\nc\\d'],
      ['2', null],
      ['3', ''],
    ]);
    expect(parseCopyText('x\\by\\fz\\rw\\vq\\.\n', 1)).toEqual([['x\by\fz\rw\vq.']]);
    expect(() => parseCopyText('1\t2\n3\n', 2, 'public.t chunk')).toThrow(/public\.t chunk: row 2 has 1 fields, expected 2/);
    expect(() => parseCopyText('1\t2', 2)).toThrow(/does not end with a newline/);
  });

  it('the cursor is the last row key, in key order', () => {
    expect(
      cursorAfter(SHAPE, [
        ['1', 'x', 't', '1', '1', null],
        ['2', 'y', 'f', '2', '0', null],
      ]),
    ).toEqual(['2', 'y']);
    expect(cursorAfter(SHAPE, [])).toBeNull();
  });
});

describe('positions and records', () => {
  it('a chunk row sorts below every change at or after its low watermark and above every change before it', () => {
    const p = snapshotPosition('2/7C007178');
    expect(p < makePosition('2/7C007178', 0)).toBe(true);
    expect(p > makePosition('2/7C007177', 5)).toBe(true);
    expect(snapshotPosition('0/0')).toBe(makePosition(0n, 0));
  });

  it('values come out as the capture prints them; masking and exclusion use the one column-rules function', () => {
    const cols = rowToColumns(SHAPE, ['1', "o'k", 't', '1.10', '101', 'x@example.com']);
    expect(cols.map((c) => c.value)).toEqual([1, "o'k", true, '1.10', '101', 'x@example.com']);
    const read: Pick<ChunkRead, 'lowWatermark' | 'rows' | 'readAt'> = {
      lowWatermark: '0/16B3748',
      rows: [['1', 'x', null, null, null, 'x@example.com']],
      readAt: '2026-12-01T00:00:00.000000Z',
    };
    const [rec] = chunkRecords('src', SHAPE, read, { mask: ['email'], exclude: ['bits'] });
    expect(rec!.op).toBe('snapshot');
    expect(rec!.columns!.map((c) => c.name)).toEqual(['a', 'b', 'ok', 'n', 'email']);
    expect(rec!.columns!.find((c) => c.name === 'email')!.value).toBe(maskValue('x@example.com'));
    const d = decodeSlotRecord(JSON.parse(JSON.stringify(rec)));
    if (d.kind !== 'changes') throw new Error('not changes');
    expect(d.changes[0]).toMatchObject({ op: 'snapshot', capture: 'snapshot', txId: null, key: { a: 1, b: 'x' }, position: snapshotPosition('0/16B3748') });
    expect(() => chunkRecords('src', SHAPE, read, { mask: ['a'], exclude: [] })).toThrow(/keys are never masked/);
  });

  it('the chunk encoder writes exactly what JSON.stringify writes, over many random rows (seeded)', () => {
    const seed = Number(process.env.CDC_PROPERTY_SEED ?? Math.floor(Math.random() * 2 ** 31));
    const count = Number(process.env.CDC_ENCODER_COUNT ?? 300);
    let x = seed;
    const rand = () => (x = (Math.imul(x, 1103515245) + 12345) >>> 0) / 2 ** 32;
    const pieces = ['a', "'", '"', '\\', '\n', '\t', '\u0001', 'é', '😀', '\u2028', ' ', '</script>', '0'];
    const str = () => Array.from({ length: Math.floor(rand() * 8) }, () => pieces[Math.floor(rand() * pieces.length)]).join('');
    const rows = Array.from({ length: count }, (_, i) => [
      String(i - 150),
      str(),
      rand() < 0.3 ? null : rand() < 0.5 ? 't' : 'f',
      rand() < 0.3 ? null : (rand() * 1e6 - 5e5).toFixed(3),
      rand() < 0.5 ? '1010' : null,
      rand() < 0.3 ? null : str(),
    ]);
    for (const rules of [NO_COLUMN_RULES, { mask: ['email'], exclude: ['bits'] }]) {
      const recs = chunkRecords('src', SHAPE, { lowWatermark: '0/16B3748', rows, readAt: '2026-12-01T00:00:00.000000Z' }, rules);
      const fast = encodeChunkRecords(recs);
      recs.forEach((r, i) => expect(fast[i], `seed ${seed} row ${i}`).toBe(JSON.stringify(r)));
    }
    // A record that does not fit the chunk's template is encoded by JSON.stringify itself.
    const recs = chunkRecords('src', SHAPE, { lowWatermark: '0/16B3748', rows: rows.slice(0, 3), readAt: '2026-12-01T00:00:00.000000Z' }, NO_COLUMN_RULES);
    const odd = [recs[0]!, { ...recs[1]!, columns: recs[1]!.columns!.slice(1) }, { ...recs[2]!, table: 'public.u' }];
    expect(encodeChunkRecords(odd)).toEqual(odd.map((r) => JSON.stringify(r)));
    console.log(`chunk encoder: ${count} rows × 2 rule sets, seed ${seed} (CDC_PROPERTY_SEED, CDC_ENCODER_COUNT)`);
  });

  it("a value that is not its type's output text is refused naming the table and column", () => {
    expect(() => rowToColumns(SHAPE, ['x1', 'b', null, null, null, null])).toThrow(/public\.t: column a \(integer\): expected an integer/);
  });

  it('formats an ETA', () => {
    expect([formatEta(null), formatEta(42), formatEta(190), formatEta(7500)]).toEqual(['unknown', '42 s', '3 min 10 s', '2 h 05 min']);
  });

  it('the table config takes a snapshot opt-out and checks its type', () => {
    expect(validateTableConfig([{ table: 'public.t', snapshot: false }])[0]!.snapshot).toBe(false);
    expect(() => validateTableConfig([{ table: 'public.t', snapshot: 'no' }])).toThrow(/CDC_TABLE_CONFIG\[0\]\.snapshot: expected true or false/);
  });
});

describe('adaptive pacer', () => {
  const calm = { addedWriteLatencyPct: 2, addedCpuPct: null, activeSessions: 1 };
  const over = { addedWriteLatencyPct: 15, addedCpuPct: null, activeSessions: 0 };
  it('chunk size follows the target chunk time: grows additively while fast, never past the target rate or the maximum', () => {
    const p = new AdaptivePacer({ initialChunk: 1000, increaseRows: 500, maxChunk: 2500 });
    p.record({ rows: 1000, readMs: 50, pressure: calm });
    expect(p.next()).toEqual({ chunkSize: 1500, pauseMs: 0, state: 'full-speed', readAhead: true });
    p.record({ rows: 1500, readMs: 50, pressure: calm });
    p.record({ rows: 2000, readMs: 50, pressure: calm });
    p.record({ rows: 2500, readMs: 50, pressure: calm });
    expect(p.next().chunkSize).toBe(2500);
    const q = new AdaptivePacer({ initialChunk: 1000, targetChunkMs: 500 });
    q.record({ rows: 1000, readMs: 450, pressure: null });
    expect(q.next().chunkSize).toBe(1111); // the rate says ~1111 rows fit 500 ms: less than the increase
    const r = new AdaptivePacer({ initialChunk: 1000, targetChunkMs: 500 });
    r.record({ rows: 1000, readMs: 2000, pressure: null });
    expect(r.next()).toMatchObject({ chunkSize: 250, state: 'full-speed' }); // a slow chunk shrinks to the target time
  });

  it('pressure drives the delay between chunks: the rest ratio doubles over budget, holds near it, halves to zero under it', () => {
    const p = new AdaptivePacer({ initialChunk: 1000, increaseRows: 0, pressureWeight: 1 });
    p.record({ rows: 1000, readMs: 80, busyMs: 100, pressure: over });
    expect(p.next()).toEqual({ chunkSize: 1000, pauseMs: 25, state: 'slowed', readAhead: false }); // 0.25 × 100 ms; the chunk size is not cut
    p.record({ rows: 1000, readMs: 80, busyMs: 100, pressure: over });
    expect([p.restRatio(), p.next().pauseMs]).toEqual([0.5, 50]);
    for (let i = 0; i < 10; i++) p.record({ rows: 1000, readMs: 80, busyMs: 100, pressure: over });
    expect([p.restRatio(), p.next().pauseMs]).toEqual([32, 3200]); // capped: the snapshot keeps 1/33 of its time
    p.record({ rows: 1000, readMs: 80, busyMs: 100, pressure: { ...calm, addedWriteLatencyPct: 7 } });
    expect(p.restRatio()).toBe(32); // between relaxBelow and the budget: hold
    const ratios: number[] = [];
    for (let i = 0; i < 12; i++) {
      p.record({ rows: 1000, readMs: 80, busyMs: 100, pressure: calm });
      ratios.push(p.restRatio());
    }
    expect(ratios.slice(0, 4)).toEqual([16, 8, 4, 2]);
    expect(ratios.at(-1)).toBe(0);
    expect(p.next()).toEqual({ chunkSize: 1000, pauseMs: 0, state: 'full-speed', readAhead: true });
  });

  it('smooths the pressure: one high reading under the hard threshold does not slow a calm snapshot', () => {
    const p = new AdaptivePacer({ initialChunk: 1000 });
    p.record({ rows: 1000, readMs: 10, pressure: calm });
    p.record({ rows: 1000, readMs: 10, pressure: { ...calm, addedWriteLatencyPct: 17 } }); // smoothed: (2 + 17) / 2 / 10 < 1
    expect(p.next().state).toBe('full-speed');
  });

  it('pauses at the hard threshold, halves the chunk and rests afterwards', () => {
    const p = new AdaptivePacer({ initialChunk: 1000, pauseMs: 1234, increaseRows: 0 });
    p.record({ rows: 1000, readMs: 10, busyMs: 100, pressure: { addedWriteLatencyPct: 1, addedCpuPct: 12, activeSessions: 0 } });
    expect(p.next()).toEqual({ chunkSize: 500, pauseMs: 1234 + 100, state: 'paused', readAhead: false });
    p.record({ rows: 500, readMs: 10, busyMs: 100, pressure: calm });
    // The smoothed ratio is still over budget ((0.2 + 2.4) / 2): the rest doubles once more, then relaxes.
    expect(p.next()).toMatchObject({ pauseMs: 200, state: 'slowed' });
    p.record({ rows: 500, readMs: 10, busyMs: 100, pressure: calm }); // smoothed 0.75: hold
    p.record({ rows: 500, readMs: 10, busyMs: 100, pressure: calm }); // smoothed < 0.5: halve
    expect(p.next()).toMatchObject({ pauseMs: 100, state: 'slowed' });
  });

  it('the probe statistic on a noisy disk: a median that moved less than the baseline spread is no pressure; one that moved past it is', () => {
    // An idle server on a busy machine: flushes at 0.8 ms mostly, 3-5 ms at the 90th percentile (docs/snapshot.md, "The budget").
    const baseline = Array.from({ length: 20 }, (_, i) => (i % 10 === 9 ? 4 : i % 10 === 8 ? 3.2 : 0.8));
    expect(probeNoiseFloorMs(baseline)).toBeCloseTo(2.4, 6);
    expect(probeNoiseFloorMs([0.2, 0.21, 0.22])).toBe(1); // a quiet disk: the fixed floor
    expect(
      addedLatencyPct(
        baseline,
        baseline.map((x) => x + 2),
      ),
    ).toBe(0);
    expect(
      addedLatencyPct(
        baseline,
        baseline.map((x) => x + 10),
      ),
    ).toBeGreaterThan(2 * DEFAULT_SOURCE_BUDGET.writeLatencyPct);
  });

  it('the probe statistic: rare slow probes and sub-millisecond jitter are no pressure; a source slowed by milliseconds is (the crawl at 20-50 rows/s)', () => {
    const baseline = Array.from({ length: 20 }, (_, i) => 0.2 + (i % 5) * 0.02); // 0.20 … 0.28 ms: a local commit
    const window = Array.from({ length: 50 }, (_, i) => 0.2 + (i % 5) * 0.02);
    expect(quantile([3, 1, 2], 0.5)).toBe(2);
    expect(addedLatencyPct(baseline, window)).toBe(0);
    // Slow probes among many (a checkpoint, another tenant, the worker's own event loop): what the 99th percentile of 50 read as 5000 %.
    const someSlow = [...window.slice(10), ...Array.from({ length: 10 }, () => 25)];
    expect(addedLatencyPct(baseline, someSlow)).toBe(0);
    // Jitter below the floor: twice the baseline, yet 0.2 ms.
    expect(
      addedLatencyPct(
        baseline,
        window.map((x) => x * 2),
      ),
    ).toBe(0);
    // A source whose commits take milliseconds longer: over budget at once.
    expect(
      addedLatencyPct(
        baseline,
        window.map((x) => x + 2),
      ),
    ).toBeGreaterThan(2 * DEFAULT_SOURCE_BUDGET.writeLatencyPct);
    expect(addedLatencyPct([], window)).toBeNull();
    // Fed to the pacer chunk after chunk, the slow probes leave the snapshot at full speed and growing.
    const p = new AdaptivePacer({ initialChunk: 1000 });
    for (let i = 0; i < 10; i++)
      p.record({
        rows: p.next().chunkSize,
        readMs: 10,
        pressure: { addedWriteLatencyPct: addedLatencyPct(baseline, someSlow), addedCpuPct: null, activeSessions: 0 },
      });
    expect(p.next()).toMatchObject({ state: 'full-speed', pauseMs: 0 });
    expect(p.next().chunkSize).toBeGreaterThan(1000);
  });

  it('a fixed pacer reads ahead unless it pauses', () => {
    expect(new FixedPacer(10).next()).toEqual({ chunkSize: 10, pauseMs: 0, state: 'full-speed', readAhead: true });
    expect(new FixedPacer(10, 5).next().readAhead).toBe(false);
  });

  it('budget ratio is the worse of latency and CPU', () => {
    expect(budgetRatio({ addedWriteLatencyPct: 5, addedCpuPct: 5, activeSessions: 0 }, DEFAULT_SOURCE_BUDGET)).toBe(1);
    expect(budgetRatio(null, DEFAULT_SOURCE_BUDGET)).toBe(0);
  });
});

/** A reader over an in-memory table (a collaborator double: the real reader is tested against PostgreSQL). */
function memoryReader(rows: string[][], failAt: number | null = null): SnapshotReader & { reads: number } {
  const shape: SnapshotTableShape = {
    table: 'public.t',
    columns: [
      { name: 'id', type: 'integer', typeOid: 23 },
      { name: 'v', type: 'text', typeOid: 25 },
    ],
    key: ['id'],
  };
  const r = {
    reads: 0,
    describe: async () => shape,
    estimateRows: async () => rows.length,
    readChunk: async (_s: SnapshotTableShape, after: string[] | null, limit: number): Promise<ChunkRead> => {
      r.reads++;
      if (failAt !== null && r.reads === failAt) throw new Error('connection lost');
      const from = after === null ? 0 : rows.findIndex((x) => Number(x[0]) > Number(after[0]));
      const slice = from < 0 ? [] : rows.slice(from, from + limit);
      return {
        lowWatermark: `0/${(0x1000 + r.reads).toString(16)}`,
        fenceXid: String(700 + r.reads),
        rows: slice,
        readAt: new Date().toISOString(),
        fenceWaitMs: 0,
        readMs: 1,
        fromReplica: false,
      };
    },
  };
  return r;
}

describe('requests, runs and resume', () => {
  const rows = Array.from({ length: 23 }, (_, i) => [String(i + 1), `v${i + 1}`]);
  const fixed = { next: () => ({ chunkSize: 5, pauseMs: 0, state: 'full-speed' as const }), record: () => undefined };

  it('two concurrent requests: exactly one wins, the other is refused and audited', async () => {
    const controlPlane = new MemoryControlPlane();
    const [a, b] = await Promise.all([
      requestSnapshot(controlPlane, { source: 's', table: 'public.t', reason: 'resnapshot', actor: 'op:a' }),
      requestSnapshot(controlPlane, { source: 's', table: 'public.t', reason: 'resnapshot', actor: 'op:b' }),
    ]);
    expect([a.outcome, b.outcome].sort()).toEqual(['refused', 'requested']);
    const audit = await controlPlane.listAudit('s', 'public.t');
    expect(audit.map((x) => x.outcome).sort()).toEqual(['done', 'refused']);
  });

  it('plans first snapshots for configured tables only once, honouring the opt-out', async () => {
    const controlPlane = new MemoryControlPlane();
    expect(await planSnapshots(controlPlane, 's', [{ table: 'public.a' }, { table: 'public.b', snapshot: false }], 'planner')).toEqual(['public.a']);
    expect(await planSnapshots(controlPlane, 's', [{ table: 'public.a' }, { table: 'public.c' }], 'planner')).toEqual(['public.c']);
    expect((await controlPlane.getSnapshot('s', 'public.c'))!.reason).toBe('added');
  });

  it('publishes before recording; a crash mid-run resumes at the first incomplete chunk and never restarts the table', async () => {
    const controlPlane = new MemoryControlPlane();
    await requestSnapshot(controlPlane, { source: 's', table: 'public.t', reason: 'initial', actor: 'planner' });
    const published: SlotRecord[][] = [];
    const reader = memoryReader(rows, 3);
    const run = (r: SnapshotReader) =>
      runTableSnapshot({
        controlPlane,
        reader: r,
        publish: async (recs) => void published.push(perRow(recs)),
        pacer: fixed,
        source: 's',
        table: 'public.t',
        rules: NO_COLUMN_RULES,
        owner: 'w1',
      });
    await expect(run(reader)).rejects.toThrow('connection lost');
    let s = (await controlPlane.getSnapshot('s', 'public.t'))!;
    expect([s.status, s.chunksDone, s.rowsDone, s.cursor]).toEqual(['running', 2, 10, ['10']]);
    // Another worker cannot take a live lease; the same owner (the restarted process) resumes.
    expect(
      await runTableSnapshot({
        controlPlane,
        reader: memoryReader(rows),
        publish: async () => undefined,
        pacer: fixed,
        source: 's',
        table: 'public.t',
        rules: NO_COLUMN_RULES,
        owner: 'w2',
      }),
    ).toBe('busy');
    expect(await run(memoryReader(rows))).toBe('done');
    s = (await controlPlane.getSnapshot('s', 'public.t'))!;
    expect([s.status, s.rowsDone, s.chunksDone]).toEqual(['done', 23, 5]);
    const chunks = await controlPlane.listSnapshotChunks('s', 'public.t', s.run);
    expect(chunks.map((c) => [c.index, c.startAfter, c.endKey, c.rows])).toEqual([
      [0, null, ['5'], 5],
      [1, ['5'], ['10'], 5],
      [2, ['10'], ['15'], 5],
      [3, ['15'], ['20'], 5],
      [4, ['20'], ['23'], 3],
    ]);
    const keys = published.flat().map((r) => r.columns![0]!.value);
    expect(new Set(keys).size).toBe(23);
    expect((await controlPlane.listAudit('s', 'public.t')).map((a) => a.action)).toEqual([
      'request-snapshot',
      'start-snapshot',
      'resume-snapshot',
      'finish-snapshot',
    ]);
  });

  it('with one chunk read ahead: the next read starts before the chunk is published, chunks are still recorded in order, and a crash resumes the same way', async () => {
    const controlPlane = new MemoryControlPlane();
    await requestSnapshot(controlPlane, { source: 's', table: 'public.t', reason: 'initial', actor: 'planner' });
    const events: string[] = [];
    const traced = (r: SnapshotReader & { reads: number }): SnapshotReader => ({
      ...r,
      readChunk: async (shape, after, limit) => {
        events.push(`read after ${after?.[0] ?? '-'}`);
        return r.readChunk(shape, after, limit);
      },
    });
    const run = (r: SnapshotReader) =>
      runTableSnapshot({
        controlPlane,
        reader: r,
        publish: async (recs) => void events.push(`publish ${perRow(recs)[0]!.columns![0]!.value}`),
        pacer: new FixedPacer(5),
        source: 's',
        table: 'public.t',
        rules: NO_COLUMN_RULES,
        owner: 'w1',
      });
    await expect(run(traced(memoryReader(rows, 3)))).rejects.toThrow('connection lost');
    expect(events).toEqual(['read after -', 'read after 5', 'publish 1', 'read after 10', 'publish 6']);
    let s = (await controlPlane.getSnapshot('s', 'public.t'))!;
    expect([s.status, s.chunksDone, s.rowsDone, s.cursor]).toEqual(['running', 2, 10, ['10']]);
    events.length = 0;
    expect(await run(traced(memoryReader(rows)))).toBe('done');
    s = (await controlPlane.getSnapshot('s', 'public.t'))!;
    expect([s.status, s.rowsDone, s.chunksDone]).toEqual(['done', 23, 5]);
    const chunks = await controlPlane.listSnapshotChunks('s', 'public.t', s.run);
    expect(chunks.map((c) => [c.index, c.startAfter, c.endKey, c.rows])).toEqual([
      [0, null, ['5'], 5],
      [1, ['5'], ['10'], 5],
      [2, ['10'], ['15'], 5],
      [3, ['15'], ['20'], 5],
      [4, ['20'], ['23'], 3],
    ]);
    // The last chunk (3 rows of 5) reads nothing ahead.
    expect(events.filter((e) => e.startsWith('read'))).toEqual(['read after 10', 'read after 15', 'read after 20']);
  });

  it('a finished re-snapshot brings a needs-resnapshot table back to active', async () => {
    const controlPlane = new MemoryControlPlane();
    await controlPlane.registerTable(
      {
        source: 's',
        table: 'public.t',
        state: 'needs-resnapshot',
        currentVersion: 1,
        deleteMode: 'soft',
        preImage: 'key',
        stateReason: 'HISTORY_GAP',
        updatedAt: new Date().toISOString(),
      },
      { source: 's', table: 'public.t', version: 1, columns: [], key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: new Date().toISOString() },
      { at: new Date().toISOString(), actor: 't', action: 'register', source: 's', table: 'public.t', outcome: 'done', detail: {} },
    );
    await requestSnapshot(controlPlane, { source: 's', table: 'public.t', reason: 'resnapshot', actor: 'op' });
    // The last chunk fails once after its records were published: the retry publishes the sweep again, at the same position.
    const published: SlotRecord[][] = [];
    let failOnce = true;
    const publish = async (raw: SnapshotRawRecord[]) => {
      const recs = perRow(raw);
      published.push(recs);
      if (recs.some((r) => r.op === 'truncate') && failOnce) {
        failOnce = false;
        throw new Error('stream unavailable');
      }
    };
    await expect(
      runTableSnapshot({ controlPlane, reader: memoryReader(rows), publish, pacer: fixed, source: 's', table: 'public.t', rules: NO_COLUMN_RULES, owner: 'w' }),
    ).rejects.toThrow('stream unavailable');
    expect(
      await runTableSnapshot({
        controlPlane,
        reader: memoryReader(rows),
        publish,
        pacer: fixed,
        source: 's',
        table: 'public.t',
        rules: NO_COLUMN_RULES,
        owner: 'w',
      }),
    ).toBe('done');
    expect((await controlPlane.getTable('s', 'public.t'))!.state).toBe('active');
    const run = (await controlPlane.getSnapshot('s', 'public.t'))!;
    const sweeps = published.flat().filter((r) => r.op === 'truncate');
    expect(sweeps).toHaveLength(2);
    for (const sw of sweeps) {
      expect(makePosition(sw.commitLsn, sw.index)).toBe(sweepPosition(run.firstLowWatermark!));
      expect(sw.xid).toBe('0');
      const d = decodeSlotRecord(JSON.parse(JSON.stringify(sw)));
      expect(d.kind === 'changes' && d.changes[0]).toMatchObject({ op: 'truncate', capture: 'snapshot', txId: null });
    }
    // The sweep is the last record of the last chunk; every chunk row sorts above it.
    expect(published.at(-1)!.at(-1)!.op).toBe('truncate');
    const chunkRows = published.flat().filter((r) => r.op === 'snapshot');
    expect(chunkRows.every((r) => makePosition(r.commitLsn, r.index) > sweepPosition(run.firstLowWatermark!))).toBe(true);
  });

  it('a first snapshot publishes no sweep (only a re-snapshot has stale keys to remove)', async () => {
    const controlPlane = new MemoryControlPlane();
    await requestSnapshot(controlPlane, { source: 's', table: 'public.t', reason: 'initial', actor: 'planner' });
    const published: SlotRecord[] = [];
    expect(
      await runTableSnapshot({
        controlPlane,
        reader: memoryReader(rows),
        publish: async (recs) => void published.push(...perRow(recs)),
        pacer: fixed,
        source: 's',
        table: 'public.t',
        rules: NO_COLUMN_RULES,
        owner: 'w',
      }),
    ).toBe('done');
    expect(published.filter((r) => r.op !== 'snapshot')).toEqual([]);
    expect(published).toHaveLength(23);
  });

  it('bootstrap from a trusted copy: accepted when the log reaches back to the copy, refused with a named error otherwise', async () => {
    const controlPlane = new MemoryControlPlane();
    await expect(bootstrapFromCopy(controlPlane, { source: 's', table: 'public.t', copyLsn: '0/1000', logStartLsn: '0/2000', actor: 'op' })).rejects.toThrow(
      BootstrapGapError,
    );
    expect(await controlPlane.getSnapshot('s', 'public.t')).toBeNull();
    const ok = await bootstrapFromCopy(controlPlane, { source: 's', table: 'public.t', copyLsn: '0/3000', logStartLsn: '0/2000', actor: 'op' });
    expect(ok.copyPosition).toBe(snapshotPosition('0/3000'));
    expect((await controlPlane.getSnapshot('s', 'public.t'))!).toMatchObject({ status: 'done', reason: 'bootstrap' });
    expect(await planSnapshots(controlPlane, 's', [{ table: 'public.t' }], 'planner')).toEqual([]);
    expect((await controlPlane.listAudit('s', 'public.t')).map((a) => `${a.action}:${a.outcome}`)).toEqual([
      'bootstrap-from-copy:refused',
      'bootstrap-from-copy:done',
    ]);
  });
});

describe('pending runs take turns', () => {
  /** Tables of `sizes` rows each, every chunk read taking `readMs`. */
  function tablesReader(sizes: Record<string, number>, readMs: number): SnapshotReader {
    const shapeOf = (table: string): SnapshotTableShape => ({ table, columns: [{ name: 'id', type: 'integer', typeOid: 23 }], key: ['id'] });
    let reads = 0;
    return {
      describe: async (table) => shapeOf(table),
      estimateRows: async (table) => sizes[table]!,
      readChunk: async (shape, after, limit) => {
        await new Promise((r) => setTimeout(r, readMs));
        reads++;
        const from = after === null ? 1 : Number(after[0]) + 1;
        const rows = Array.from({ length: Math.max(0, Math.min(limit, sizes[shape.table]! - from + 1)) }, (_, i) => [String(from + i)]);
        return {
          lowWatermark: `0/${(0x1000 + reads).toString(16)}`,
          fenceXid: String(700 + reads),
          rows,
          readAt: new Date().toISOString(),
          fenceWaitMs: 0,
          readMs,
          fromReplica: false,
        };
      },
    };
  }
  const run = (controlPlane: MemoryControlPlane, reader: SnapshotReader, extra: { turnMs?: number } = {}) =>
    runPendingSnapshots({
      controlPlane,
      reader,
      publish: async () => undefined,
      source: 's',
      owner: 'w',
      rulesOf: () => NO_COLUMN_RULES,
      pacerFor: () => new FixedPacer(10),
      turnMs: 100,
      waitingCheckMs: 10,
      ...extra,
    });

  it('a long snapshot yields its turn to a table waiting behind it, and resumes where it was', async () => {
    const controlPlane = new MemoryControlPlane();
    await requestSnapshot(controlPlane, { source: 's', table: 'public.big', reason: 'initial', actor: 'planner' });
    await requestSnapshot(controlPlane, { source: 's', table: 'public.small', reason: 'initial', actor: 'planner' });
    // 2000 rows in chunks of 10, 5 ms a chunk: about a second alone; the two-row table must not wait for it.
    const outcomes = await run(controlPlane, tablesReader({ 'public.big': 2000, 'public.small': 2 }, 5));
    expect(Object.fromEntries(outcomes)).toEqual({ 'public.big': 'done', 'public.small': 'done' });
    const audit = [...(await controlPlane.listAudit('s', 'public.big')), ...(await controlPlane.listAudit('s', 'public.small'))]
      .filter((a) => a.action === 'finish-snapshot')
      .sort((a, b) => a.at.localeCompare(b.at));
    expect(audit.map((a) => a.table)).toEqual(['public.small', 'public.big']);
    const big = (await controlPlane.getSnapshot('s', 'public.big'))!;
    expect([big.rowsDone, big.chunksDone]).toEqual([2000, 201]);
    const chunks = await controlPlane.listSnapshotChunks('s', 'public.big', big.run);
    // Resumed at its cursor: every chunk starts where the one before ended.
    for (let i = 1; i < chunks.length; i++) expect(chunks[i]!.startAfter).toEqual(chunks[i - 1]!.endKey);
    expect((await controlPlane.listAudit('s', 'public.big')).map((a) => a.action)).toContain('resume-snapshot');
  });

  it('a snapshot alone never yields (no resume, one claim)', async () => {
    const controlPlane = new MemoryControlPlane();
    await requestSnapshot(controlPlane, { source: 's', table: 'public.big', reason: 'initial', actor: 'planner' });
    expect(Object.fromEntries(await run(controlPlane, tablesReader({ 'public.big': 300 }, 2), { turnMs: 1 }))).toEqual({ 'public.big': 'done' });
    expect((await controlPlane.listAudit('s', 'public.big')).map((a) => a.action)).toEqual(['request-snapshot', 'start-snapshot', 'finish-snapshot']);
  });
});
