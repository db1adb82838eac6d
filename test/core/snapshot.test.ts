/**
 * The pure parts of the snapshot (docs/snapshot.md): keyset chunk queries, positions, records,
 * progress, the pacer, and the request / run / bootstrap logic over the in-memory control plane
 * (a collaborator double; the DynamoDB adapter is tested in test/adapters/control-plane-dynamodb.test.ts).
 */
import { describe, expect, it } from 'vitest';
import { chunkQuery, chunkRecords, cursorAfter, formatEta, rowToColumns, snapshotPosition, SnapshotTableError, type ChunkRead, type SnapshotTableShape } from '../../lambda/core/snapshot.ts';
import { AdaptivePacer, budgetRatio, DEFAULT_SOURCE_BUDGET } from '../../lambda/core/snapshot-pacer.ts';
import { bootstrapFromCopy, planSnapshots, requestSnapshot, runTableSnapshot, type SnapshotReader } from '../../lambda/core/snapshot-worker.ts';
import { BootstrapGapError } from '../../lambda/core/snapshot.ts';
import { makePosition } from '../../lambda/core/position.ts';
import { maskValue, NO_COLUMN_RULES } from '../../lambda/core/masking.ts';
import { decodeSlotRecord } from '../../lambda/core/slot-decoder.ts';
import { validateTableConfig } from '../../lambda/core/table-config.ts';
import type { SlotRecord } from '../../lambda/core/slot-record.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

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
    expect(chunkQuery(SHAPE, null, 100)).toEqual({ text: 'SELECT "a", "b", "ok", "n", "bits", "email" FROM "public"."t" ORDER BY "a", "b" LIMIT 100', values: [] });
    expect(chunkQuery(SHAPE, ['3', "it's"], 10)).toEqual({ text: 'SELECT "a", "b", "ok", "n", "bits", "email" FROM "public"."t" WHERE ("a", "b") > ($1, $2) ORDER BY "a", "b" LIMIT 10', values: ['3', "it's"] });
    expect(chunkQuery({ ...SHAPE, key: ['a'] }, ['7'], 5).text).toContain('WHERE "a" > $1 ORDER BY "a" LIMIT 5');
  });

  it('refuses a table without a key, a cursor of the wrong width and unsafe names', () => {
    expect(() => chunkQuery({ ...SHAPE, key: [] }, null, 1)).toThrow(SnapshotTableError);
    expect(() => chunkQuery(SHAPE, ['1'], 1)).toThrow(/cursor has 1 values, the key has 2/);
    expect(() => chunkQuery({ ...SHAPE, table: 'public.t; drop' }, null, 1)).toThrow(/table name/);
  });

  it('the cursor is the last row key, in key order', () => {
    expect(cursorAfter(SHAPE, [['1', 'x', 't', '1', '1', null], ['2', 'y', 'f', '2', '0', null]])).toEqual(['2', 'y']);
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
    const read: Pick<ChunkRead, 'lowWatermark' | 'rows' | 'readAt'> = { lowWatermark: '0/16B3748', rows: [['1', 'x', null, null, null, 'x@example.com']], readAt: '2026-12-01T00:00:00.000000Z' };
    const [rec] = chunkRecords('src', SHAPE, read, { mask: ['email'], exclude: ['bits'] });
    expect(rec!.op).toBe('snapshot');
    expect(rec!.columns!.map((c) => c.name)).toEqual(['a', 'b', 'ok', 'n', 'email']);
    expect(rec!.columns!.find((c) => c.name === 'email')!.value).toBe(maskValue('x@example.com'));
    const d = decodeSlotRecord(JSON.parse(JSON.stringify(rec)));
    if (d.kind !== 'changes') throw new Error('not changes');
    expect(d.changes[0]).toMatchObject({ op: 'snapshot', capture: 'snapshot', txId: null, key: { a: 1, b: 'x' }, position: snapshotPosition('0/16B3748') });
    expect(() => chunkRecords('src', SHAPE, read, { mask: ['a'], exclude: [] })).toThrow(/keys are never masked/);
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
  it('grows additively while under budget and fast, never past the target rate or the maximum', () => {
    const p = new AdaptivePacer({ initialChunk: 1000, increaseRows: 500, maxChunk: 2500 });
    p.record({ rows: 1000, readMs: 50, pressure: calm });
    expect(p.next()).toEqual({ chunkSize: 1500, pauseMs: 0, state: 'full-speed' });
    p.record({ rows: 1500, readMs: 50, pressure: calm });
    p.record({ rows: 2000, readMs: 50, pressure: calm });
    p.record({ rows: 2500, readMs: 50, pressure: calm });
    expect(p.next().chunkSize).toBe(2500);
    const q = new AdaptivePacer({ initialChunk: 1000, targetChunkMs: 500 });
    q.record({ rows: 1000, readMs: 450, pressure: null });
    expect(q.next().chunkSize).toBe(1111); // the rate says ~1111 rows fit 500 ms: less than +500
  });

  it('decreases multiplicatively over budget and pauses at the hard threshold', () => {
    const p = new AdaptivePacer({ initialChunk: 1000, pauseMs: 1234 });
    p.record({ rows: 1000, readMs: 10, pressure: { addedWriteLatencyPct: 15, addedCpuPct: null, activeSessions: 0 } });
    expect(p.next()).toEqual({ chunkSize: 500, pauseMs: 0, state: 'slowed' });
    p.record({ rows: 500, readMs: 10, pressure: { addedWriteLatencyPct: 1, addedCpuPct: 12, activeSessions: 0 } });
    expect(p.next()).toEqual({ chunkSize: 250, pauseMs: 1234, state: 'paused' });
    p.record({ rows: 250, readMs: 10, pressure: calm });
    expect(p.next().pauseMs).toBe(0);
  });

  it('a slow chunk shrinks to the target time', () => {
    const p = new AdaptivePacer({ initialChunk: 1000, targetChunkMs: 500 });
    p.record({ rows: 1000, readMs: 2000, pressure: null });
    expect(p.next()).toMatchObject({ chunkSize: 250, state: 'slowed' });
  });

  it('budget ratio is the worse of latency and CPU', () => {
    expect(budgetRatio({ addedWriteLatencyPct: 5, addedCpuPct: 5, activeSessions: 0 }, DEFAULT_SOURCE_BUDGET)).toBe(1);
    expect(budgetRatio(null, DEFAULT_SOURCE_BUDGET)).toBe(0);
  });
});

/** A reader over an in-memory table (a collaborator double: the real reader is tested against PostgreSQL). */
function memoryReader(rows: string[][], failAt: number | null = null): SnapshotReader & { reads: number } {
  const shape: SnapshotTableShape = { table: 'public.t', columns: [{ name: 'id', type: 'integer', typeOid: 23 }, { name: 'v', type: 'text', typeOid: 25 }], key: ['id'] };
  const r = {
    reads: 0,
    describe: async () => shape,
    estimateRows: async () => rows.length,
    readChunk: async (_s: SnapshotTableShape, after: string[] | null, limit: number): Promise<ChunkRead> => {
      r.reads++;
      if (failAt !== null && r.reads === failAt) throw new Error('connection lost');
      const from = after === null ? 0 : rows.findIndex((x) => Number(x[0]) > Number(after[0]));
      const slice = from < 0 ? [] : rows.slice(from, from + limit);
      return { lowWatermark: `0/${(0x1000 + r.reads).toString(16)}`, fenceXid: String(700 + r.reads), rows: slice, readAt: new Date().toISOString(), fenceWaitMs: 0, readMs: 1, fromReplica: false };
    },
  };
  return r;
}

describe('requests, runs and resume', () => {
  const rows = Array.from({ length: 23 }, (_, i) => [String(i + 1), `v${i + 1}`]);
  const fixed = { next: () => ({ chunkSize: 5, pauseMs: 0, state: 'full-speed' as const }), record: () => undefined };

  it('two concurrent requests: exactly one wins, the other is refused and audited', async () => {
    const control = new MemoryControlPlane();
    const [a, b] = await Promise.all([requestSnapshot(control, { source: 's', table: 'public.t', reason: 'resnapshot', actor: 'op:a' }), requestSnapshot(control, { source: 's', table: 'public.t', reason: 'resnapshot', actor: 'op:b' })]);
    expect([a.outcome, b.outcome].sort()).toEqual(['refused', 'requested']);
    const audit = await control.listAudit('s', 'public.t');
    expect(audit.map((x) => x.outcome).sort()).toEqual(['done', 'refused']);
  });

  it('plans first snapshots for configured tables only once, honouring the opt-out', async () => {
    const control = new MemoryControlPlane();
    expect(await planSnapshots(control, 's', [{ table: 'public.a' }, { table: 'public.b', snapshot: false }], 'planner')).toEqual(['public.a']);
    expect(await planSnapshots(control, 's', [{ table: 'public.a' }, { table: 'public.c' }], 'planner')).toEqual(['public.c']);
    expect((await control.getSnapshot('s', 'public.c'))!.reason).toBe('added');
  });

  it('publishes before recording; a crash mid-run resumes at the first incomplete chunk and never restarts the table', async () => {
    const control = new MemoryControlPlane();
    await requestSnapshot(control, { source: 's', table: 'public.t', reason: 'initial', actor: 'planner' });
    const published: SlotRecord[][] = [];
    const reader = memoryReader(rows, 3);
    const run = (r: SnapshotReader) => runTableSnapshot({ control, reader: r, publish: async (recs) => void published.push(recs), pacer: fixed, source: 's', table: 'public.t', rules: NO_COLUMN_RULES, owner: 'w1' });
    await expect(run(reader)).rejects.toThrow('connection lost');
    let s = (await control.getSnapshot('s', 'public.t'))!;
    expect([s.status, s.chunksDone, s.rowsDone, s.cursor]).toEqual(['running', 2, 10, ['10']]);
    // Another worker cannot take a live lease; the same owner (the restarted process) resumes.
    expect(await runTableSnapshot({ control, reader: memoryReader(rows), publish: async () => undefined, pacer: fixed, source: 's', table: 'public.t', rules: NO_COLUMN_RULES, owner: 'w2' })).toBe('busy');
    expect(await run(memoryReader(rows))).toBe('done');
    s = (await control.getSnapshot('s', 'public.t'))!;
    expect([s.status, s.rowsDone, s.chunksDone]).toEqual(['done', 23, 5]);
    const chunks = await control.listSnapshotChunks('s', 'public.t', s.run);
    expect(chunks.map((c) => [c.index, c.startAfter, c.endKey, c.rows])).toEqual([
      [0, null, ['5'], 5],
      [1, ['5'], ['10'], 5],
      [2, ['10'], ['15'], 5],
      [3, ['15'], ['20'], 5],
      [4, ['20'], ['23'], 3],
    ]);
    const keys = published.flat().map((r) => r.columns![0]!.value);
    expect(new Set(keys).size).toBe(23);
    expect((await control.listAudit('s', 'public.t')).map((a) => a.action)).toEqual(['request-snapshot', 'start-snapshot', 'resume-snapshot', 'finish-snapshot']);
  });

  it('a finished re-snapshot brings a needs-resnapshot table back to active', async () => {
    const control = new MemoryControlPlane();
    await control.registerTable(
      { source: 's', table: 'public.t', state: 'needs-resnapshot', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: 'HISTORY_GAP', updatedAt: new Date().toISOString() },
      { source: 's', table: 'public.t', version: 1, columns: [], key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: new Date().toISOString() },
      { at: new Date().toISOString(), actor: 't', action: 'register', source: 's', table: 'public.t', outcome: 'done', detail: {} },
    );
    await requestSnapshot(control, { source: 's', table: 'public.t', reason: 'resnapshot', actor: 'op' });
    expect(await runTableSnapshot({ control, reader: memoryReader(rows), publish: async () => undefined, pacer: fixed, source: 's', table: 'public.t', rules: NO_COLUMN_RULES, owner: 'w' })).toBe('done');
    expect((await control.getTable('s', 'public.t'))!.state).toBe('active');
  });

  it('bootstrap from a trusted copy: accepted when the log reaches back to the copy, refused with a named error otherwise', async () => {
    const control = new MemoryControlPlane();
    await expect(bootstrapFromCopy(control, { source: 's', table: 'public.t', copyLsn: '0/1000', logStartLsn: '0/2000', actor: 'op' })).rejects.toThrow(BootstrapGapError);
    expect(await control.getSnapshot('s', 'public.t')).toBeNull();
    const ok = await bootstrapFromCopy(control, { source: 's', table: 'public.t', copyLsn: '0/3000', logStartLsn: '0/2000', actor: 'op' });
    expect(ok.copyPosition).toBe(snapshotPosition('0/3000'));
    expect((await control.getSnapshot('s', 'public.t'))!).toMatchObject({ status: 'done', reason: 'bootstrap' });
    expect(await planSnapshots(control, 's', [{ table: 'public.t' }], 'planner')).toEqual([]);
    expect((await control.listAudit('s', 'public.t')).map((a) => `${a.action}:${a.outcome}`)).toEqual(['bootstrap-from-copy:refused', 'bootstrap-from-copy:done']);
  });
});
