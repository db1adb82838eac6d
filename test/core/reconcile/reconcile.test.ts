/**
 * The reconciliation core (lambda/core/reconcile/reconcile.ts, docs/reconcile.md) over in-memory sides
 * (lambda/core/reconcile/reconcile-rows.ts, which hashes as the SQL sides do; test/adapters/reconcile-pg.test.ts
 * runs the same core against real PostgreSQL).
 *
 * The randomized test: a random table (single or composite key, numeric or text), a random
 * corruption of the sink copy (changed values, deleted rows, rows the source never had), random
 * budgets and leaf sizes; the verdict must name exactly the corrupted keys, with their kind, and a
 * matching table must cost a handful of summaries. The source reads its segments either way (one
 * `summarizeFirst` per segment with the sink's summary trailing, or a key walk and a summary) and
 * the walk starts at a random cursor. Runs: `CDC_RECONCILE_RUNS` (default 400);
 * seed: `CDC_PROPERTY_SEED` (default random); both printed.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import {
  coverageGaps,
  reconcileTable,
  verdictExitCode,
  type KeyTuple,
  type ReconcileSide,
  type SideRow,
  type StablePoint,
} from '../../../lambda/core/reconcile/reconcile.ts';
import { MemoryReconcileSide } from '../../../lambda/core/reconcile/reconcile-rows.ts';
import { FixedPacer, type Pacer } from '../../../lambda/core/snapshot/snapshot-pacer.ts';
import { maskValue, NO_COLUMN_RULES } from '../../../lambda/core/tables/masking.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const RUNS = Number(process.env.CDC_RECONCILE_RUNS ?? 400);

const noSleep = async (): Promise<void> => undefined;

function side(label: string, key: string[], columns: string[], keyOrder: string[], rows: SideRow[], masked: string[] = []): MemoryReconcileSide {
  return new MemoryReconcileSide({ label, key, columns, keyOrder, rows, masked });
}

const row = (key: KeyTuple, values: Record<string, string | null>, position: string | null = null): SideRow => ({ key, values, position });

describe('reconcileTable, randomized bisection', () => {
  it(`finds exactly the differing keys (seed ${SEED}, ${RUNS} runs)`, async () => {
    console.log(`reconcile bisection property: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED})`);
    let checkedRuns = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.record({
          n: fc.integer({ min: 0, max: 1200 }),
          composite: fc.boolean(),
          textKey: fc.boolean(),
          changes: fc.array(fc.record({ at: fc.nat(), kind: fc.constantFrom('different', 'missing', 'extra') }), { maxLength: 12 }),
          leafRows: fc.integer({ min: 1, max: 300 }),
          chunk: fc.integer({ min: 32, max: 1500 }),
          nullable: fc.boolean(),
          // The source's estimate of its size: exact, none, stale low or stale high (a hint only).
          estimate: fc.constantFrom<number | null | 'exact'>('exact', null, 0, 1e9),
          // The source reads a segment in one call (`summarizeFirst`, the sink's summary trailing one segment) or as a key walk and a summary.
          firstSummaries: fc.boolean(),
          // Where the previous run stopped (the walk wraps round to it).
          cursorAt: fc.option(fc.nat(), { nil: null }),
        }),
        async (p) => {
          checkedRuns++;
          const key = p.composite ? ['a', 'b'] : ['id'];
          const columns = [...key, 'v', 'w'];
          const keyOrder = key.map(() => (p.textKey ? 'text' : 'number'));
          const keyOf = (i: number): KeyTuple => {
            const part = (x: number): string => (p.textKey ? `k${String(x).padStart(3, '0')}` : String(x));
            return p.composite ? [part(Math.floor(i / 7)), part(i % 7)] : [part(i * 3)];
          };
          const valuesOf = (i: number): Record<string, string | null> => {
            const k = keyOf(i);
            return { ...Object.fromEntries(key.map((c, j) => [c, k[j]!])), v: `v${i}`, w: p.nullable && i % 5 === 0 ? null : String(i % 11) };
          };
          const src = new Map<string, SideRow>();
          for (let i = 0; i < p.n; i++) src.set(JSON.stringify(keyOf(i)), row(keyOf(i), valuesOf(i)));
          const snk = new Map([...src].map(([id, r]) => [id, { ...r, values: { ...r.values } }]));
          const expected = new Map<string, string>();
          for (const c of p.changes) {
            if (c.kind === 'extra') {
              const i = p.n + (c.at % 50) + 1; // a key the source never had (past the end or, composite, between)
              const id = JSON.stringify(keyOf(i));
              snk.set(id, row(keyOf(i), valuesOf(i)));
              expected.set(id, 'extra');
            } else if (p.n > 0) {
              const i = c.at % p.n;
              const id = JSON.stringify(keyOf(i));
              if (expected.has(id)) continue;
              if (c.kind === 'missing') snk.delete(id);
              else snk.get(id)!.values.v = 'corrupted';
              expected.set(id, c.kind);
            }
          }
          const sourceSide = new MemoryReconcileSide({
            label: 'source',
            key,
            columns,
            keyOrder,
            rows: [...src.values()],
            estimate: p.estimate,
            firstSummaries: p.firstSummaries,
          });
          const sinkSide = side('sink', key, columns, keyOrder, [...snk.values()]);
          const v = await reconcileTable({
            sink: 'wh',
            source: 's',
            table: 'public.t',
            key,
            rules: NO_COLUMN_RULES,
            sourceSide,
            sinkSide,
            cursor: p.cursorAt !== null && p.n > 0 ? keyOf(p.cursorAt % p.n) : null,
            leafRows: p.leafRows,
            pacer: new FixedPacer(p.chunk),
            settleMs: 0,
            sleep: noSleep,
            maxSampleKeys: 1000,
          });
          const found = new Map(v.sampleKeys.map((s) => [JSON.stringify(key.map((k) => s.key[k]!)), s.kind]));
          expect(found).toEqual(expected);
          expect(v.verdict).toBe(expected.size > 0 ? 'DIVERGED' : 'MATCH');
          expect(v.fullCoverage).toBe(true);
          // The whole table was walked: the counts are the walk's, and exact.
          expect([v.sourceRows, v.sinkRows]).toEqual([src.size, snk.size]);
          // No count(*) when the estimate says the table fits the run (0 or exact here), else one per side.
          const counted = p.estimate === null || p.estimate === 1e9 ? 1 : undefined;
          expect([sourceSide.calls.get('countAll'), sinkSide.calls.get('countAll')]).toEqual([counted, counted]);
          if (expected.size === 0) {
            // A matching table costs one summary per segment and side, nothing more.
            expect(v.cost.bisections).toBe(0);
            expect(v.cost.leafRows).toBe(0);
          }
          // Each segment read once on the source with `summarizeFirst`; else a key walk per segment.
          if (p.firstSummaries) {
            expect(sourceSide.calls.get('summarizeFirst')).toBeGreaterThan(0);
            if (expected.size === 0) expect(sourceSide.calls.get('keyAt')).toBeUndefined(); // only a bisection walks keys
          } else {
            expect(sourceSide.calls.get('summarizeFirst')).toBeUndefined();
            expect(sourceSide.calls.get('keyAt')).toBeGreaterThan(0);
          }
        },
      ),
      { seed: SEED, numRuns: RUNS },
    );
    expect(checkedRuns).toBeGreaterThanOrEqual(RUNS);
  });
});

describe('reconcileTable', () => {
  const key = ['id'];
  const columns = ['id', 'v', 'email'];
  const rows = (n: number, f: (i: number) => Record<string, string | null> = (i) => ({ id: String(i), v: `v${i}`, email: `u${i}@x` })): SideRow[] =>
    Array.from({ length: n }, (_, i) => row([String(i)], f(i)));

  it('rotates its sampled ranges with the cursor so coverage moves over the whole table', async () => {
    const src = rows(1000);
    const snk = rows(1000).map((r) => (r.key[0] === '777' ? { ...r, values: { ...r.values, v: 'bad' } } : r));
    let cursor: KeyTuple | null = null;
    const seen: string[] = [];
    let foundAt = -1;
    for (let run = 0; run < 6; run++) {
      const v = await reconcileTable({
        sink: 'wh',
        source: 's',
        table: 'public.t',
        key,
        rules: NO_COLUMN_RULES,
        cursor,
        rowsPerRun: 300,
        pacer: new FixedPacer(100),
        settleMs: 0,
        sleep: noSleep,
        sourceSide: side('source', key, columns, ['number'], src),
        sinkSide: side('sink', key, columns, ['number'], snk),
      });
      seen.push(`${v.covered.map((r) => `${r.after?.[0] ?? '-'}..${r.upTo?.[0] ?? '+'}`).join(' ')} ${v.verdict}`);
      expect(v.coveredRows).toBeLessThanOrEqual(300);
      if (v.verdict === 'DIVERGED' && foundAt < 0) {
        foundAt = run;
        expect(v.sampleKeys).toEqual([{ key: { id: '777' }, kind: 'different', column: 'v' }]);
      }
      cursor = v.nextCursor;
    }
    // 1000 rows in runs of 300: the run that reaches id 777 is the third.
    expect(foundAt, seen.join('\n')).toBe(2);
    expect(seen[0]).toMatch(/^-\.\.299 INCONCLUSIVE|^-\.\.299 MATCH/);
    // The fourth run wraps: from 899 to the end, then from the start.
    expect(seen[3]).toMatch(/^899\.\.\+ -\.\./);
  });

  it('takes its counts from the walk when it covers the whole table, and counts both sides whole alongside a partial walk', async () => {
    const src = rows(1000);
    const snk = rows(1000).filter((r) => r.key[0] !== '900'); // missing, past the first run's ranges
    const run = (rowsPerRun: number, estimate: number | null | 'exact' = 'exact') => {
      const sourceSide = new MemoryReconcileSide({ label: 'source', key, columns, keyOrder: ['number'], rows: src, estimate });
      const sinkSide = side('sink', key, columns, ['number'], snk);
      const verdict = reconcileTable({
        sink: 'wh',
        source: 's',
        table: 'public.t',
        key,
        rules: NO_COLUMN_RULES,
        cursor: null,
        rowsPerRun,
        pacer: new FixedPacer(100),
        settleMs: 0,
        sleep: noSleep,
        sourceSide,
        sinkSide,
      });
      return verdict.then((v) => ({ v, counts: [sourceSide.calls.get('countAll') ?? 0, sinkSide.calls.get('countAll') ?? 0] }));
    };
    // Whole table in one run: no count(*) on either side; the counts are the segments' sums, and
    // the missing row is found by its range.
    const whole = await run(2000);
    expect(whole.counts).toEqual([0, 0]);
    expect(whole.v).toMatchObject({ verdict: 'DIVERGED', fullCoverage: true, sourceRows: 1000, sinkRows: 999, covered: [{ after: null, upTo: null }] });
    expect(whole.v.sampleKeys).toEqual([{ key: { id: '900' }, kind: 'missing' }]);
    // Part of the table: both sides counted once, whole, so the difference outside the checked
    // ranges keeps the verdict from MATCH.
    const part = await run(300);
    expect(part.counts).toEqual([1, 1]);
    expect(part.v).toMatchObject({ verdict: 'INCONCLUSIVE', fullCoverage: false, coveredRows: 300, sourceRows: 1000, sinkRows: 999 });
    expect(part.v.reason).toMatch(/row counts differ \(source 1000, sink 999\)/);
    // A stale estimate (the table looked small): the walk stops short of the whole table, so the
    // counts run after it, and the verdict is the same.
    const stale = await run(300, 10);
    expect(stale.counts).toEqual([1, 1]);
    expect(stale.v).toMatchObject({ verdict: 'INCONCLUSIVE', sourceRows: 1000, sinkRows: 999 });
    // No estimate: counted, as a partial run.
    const none = await run(2000, null);
    expect(none.counts).toEqual([1, 1]);
    expect(none.v).toMatchObject({ verdict: 'DIVERGED', sourceRows: 1000, sinkRows: 999 });
  });

  it('walks a table that fits the run whole from any cursor (the counts come from the walk)', async () => {
    const src = rows(250);
    const snk = rows(250).map((r) => (r.key[0] === '10' ? { ...r, values: { ...r.values, v: 'bad' } } : r));
    const sourceSide = side('source', key, columns, ['number'], src);
    const sinkSide = side('sink', key, columns, ['number'], snk);
    const v = await reconcileTable({
      sink: 'wh',
      source: 's',
      table: 'public.t',
      key,
      rules: NO_COLUMN_RULES,
      cursor: ['120'],
      rowsPerRun: 300,
      pacer: new FixedPacer(100),
      settleMs: 0,
      sleep: noSleep,
      sourceSide,
      sinkSide,
    });
    expect(v).toMatchObject({
      verdict: 'DIVERGED',
      fullCoverage: true,
      coveredRows: 250,
      sourceRows: 250,
      sinkRows: 250,
      nextCursor: null,
      covered: [{ after: null, upTo: null }],
    });
    expect(v.sampleKeys).toEqual([{ key: { id: '10' }, kind: 'different', column: 'v' }]);
    expect(sourceSide.calls.get('countAll')).toBeUndefined();
  });

  it('compares masked columns masked (the masking module) and refuses an excluded column in the sink', async () => {
    const src = rows(50);
    const snkMasked = rows(50, (i) => ({ id: String(i), v: `v${i}`, email: maskValue(`u${i}@x`) }));
    const rules = { mask: ['email'], exclude: [] };
    const ok = await reconcileTable({
      sink: 'wh',
      source: 's',
      table: 'public.t',
      key,
      rules,
      cursor: null,
      pacer: new FixedPacer(20),
      settleMs: 0,
      sleep: noSleep,
      sourceSide: side('source', key, columns, ['number'], src, ['email']),
      sinkSide: side('sink', key, columns, ['number'], snkMasked),
    });
    expect(ok.verdict).toBe('MATCH');
    expect(ok.cost.leafRows).toBe(0); // the source hashes masked: summaries agree without reading rows
    const plain = await reconcileTable({
      sink: 'wh',
      source: 's',
      table: 'public.t',
      key,
      rules,
      cursor: null,
      pacer: new FixedPacer(20),
      settleMs: 0,
      sleep: noSleep,
      maxSampleKeys: 100,
      sourceSide: side('source', key, columns, ['number'], src, ['email']),
      sinkSide: side('sink', key, columns, ['number'], src),
    });
    expect(plain.verdict).toBe('DIVERGED');
    expect(plain.diverged.different).toBe(50);
    const excluded = await reconcileTable({
      sink: 'wh',
      source: 's',
      table: 'public.t',
      key,
      rules: { mask: [], exclude: ['email'] },
      cursor: null,
      pacer: new FixedPacer(20),
      settleMs: 0,
      sleep: noSleep,
      sourceSide: side('source', key, columns, ['number'], src),
      sinkSide: side('sink', key, columns, ['number'], src),
    });
    expect(excluded.verdict).toBe('DIVERGED');
    expect(excluded.problems).toEqual(['excluded column email is present in sink']);
    expect(excluded.columns).toEqual(['id', 'v']);
  });

  /** A side whose rows a test swaps while the core waits (a sink catching up, a hot key). */
  class Swappable implements ReconcileSide {
    label = 'sink';
    cols: readonly string[] = [];
    constructor(public current: MemoryReconcileSide) {}
    swap(next: MemoryReconcileSide): void {
      next.useColumns(this.cols);
      this.current = next;
    }
    shape = () => this.current.shape();
    useColumns = (c: readonly string[]) => {
      this.cols = c;
      this.current.useColumns(c);
    };
    countAll = () => this.current.countAll();
    summarize = (r: Parameters<ReconcileSide['summarize']>[0]) => this.current.summarize(r);
    keyAt = (r: Parameters<ReconcileSide['keyAt']>[0], o: number) => this.current.keyAt(r, o);
    rows = (r: Parameters<ReconcileSide['rows']>[0]) => this.current.rows(r);
    rowsByKey = (k: readonly KeyTuple[]) => this.current.rowsByKey(k);
  }

  it('does not report a row that is in flight: it settles on the re-check', async () => {
    const src = rows(100);
    const behind = rows(100).map((r) => (r.key[0] === '42' ? { ...r, values: { ...r.values, v: 'old' }, position: 'p1' } : r));
    const sink = new Swappable(side('sink', key, columns, ['number'], behind));
    let waited = 0;
    const v = await reconcileTable({
      sink: 'wh',
      source: 's',
      table: 'public.t',
      key,
      rules: NO_COLUMN_RULES,
      cursor: null,
      pacer: new FixedPacer(30),
      settleMs: 1234,
      sleep: async (ms) => {
        waited += ms;
        sink.swap(
          side(
            'sink',
            key,
            columns,
            ['number'],
            src.map((r) => (r.key[0] === '42' ? { ...r, position: 'p2' } : r)),
          ),
        );
      },
      sourceSide: side('source', key, columns, ['number'], src),
      sinkSide: sink,
    });
    expect(v.verdict).toBe('MATCH');
    expect(v.settled).toBe(1);
    expect(waited).toBe(1234);
  });

  it("a polled table's re-check waits for its stable point (the poll cursor), never the heartbeat", async () => {
    const src = rows(50);
    const behind = () =>
      new Swappable(
        side(
          'sink',
          key,
          columns,
          ['number'],
          src.map((r) => (r.key[0] === '7' ? { ...r, values: { ...r.values, v: 'old' }, position: 'p1' } : r)),
        ),
      );
    // The heartbeat says the sink is caught up; a polled table must not believe it.
    const heartbeat = (s: ReconcileSide) => Object.assign(s, { clock: async () => 1e15, appliedThrough: async () => 2e15 });
    let cursorAt = 0;
    const point: StablePoint = {
      what: 'the poll cursor',
      mark: async () => '000000000000000500000000',
      passed: async (m) => cursorAt >= Number.parseInt(m.slice(0, 16), 16),
    };
    let t = 0;
    const sink = behind();
    const v = await reconcileTable({
      sink: 'wh',
      source: 's',
      table: 'public.t',
      key,
      rules: NO_COLUMN_RULES,
      cursor: null,
      pacer: new FixedPacer(30),
      settleMs: 10,
      maxLagMs: 60_000,
      now: () => t,
      sleep: async (ms) => {
        t += ms;
        if (t >= 1000 && cursorAt === 0) {
          // The poller reads past the mark, and the sink applies it.
          cursorAt = 5;
          sink.swap(
            side(
              'sink',
              key,
              columns,
              ['number'],
              src.map((r) => (r.key[0] === '7' ? { ...r, position: 'p2' } : r)),
            ),
          );
        }
      },
      sourceSide: heartbeat(side('source', key, columns, ['number'], src)),
      sinkSide: heartbeat(sink),
      stablePoint: point,
    });
    expect([v.verdict, v.settled]).toEqual(['MATCH', 1]);
    expect(t).toBeGreaterThanOrEqual(1000);

    // The cursor never gets there: INCONCLUSIVE, saying what it waited for.
    t = 0;
    cursorAt = -1;
    const stuck = await reconcileTable({
      sink: 'wh',
      source: 's',
      table: 'public.t',
      key,
      rules: NO_COLUMN_RULES,
      cursor: null,
      pacer: new FixedPacer(30),
      settleMs: 10,
      maxLagMs: 5000,
      now: () => t,
      sleep: async (ms) => void (t += ms),
      sourceSide: heartbeat(side('source', key, columns, ['number'], src)),
      sinkSide: heartbeat(behind()),
      stablePoint: point,
    });
    expect(stuck.verdict).toBe('INCONCLUSIVE');
    expect(stuck.reason).toMatch(/did not get past the poll cursor at 000000000000000500000000/);
  });

  it('a key that keeps changing is INCONCLUSIVE, never DIVERGED', async () => {
    const src = rows(20);
    let n = 0;
    const sink = new Swappable(
      side(
        'sink',
        key,
        columns,
        ['number'],
        src.map((r) => (r.key[0] === '3' ? { ...r, values: { ...r.values, v: 'x0' }, position: 'p0' } : r)),
      ),
    );
    const v = await reconcileTable({
      sink: 'wh',
      source: 's',
      table: 'public.t',
      key,
      rules: NO_COLUMN_RULES,
      cursor: null,
      pacer: new FixedPacer(30),
      settleMs: 1,
      settleRounds: 4,
      sleep: async () => {
        n++;
        sink.swap(
          side(
            'sink',
            key,
            columns,
            ['number'],
            src.map((r) => (r.key[0] === '3' ? { ...r, values: { ...r.values, v: `x${n}` }, position: `p${n}` } : r)),
          ),
        );
      },
      sourceSide: side('source', key, columns, ['number'], src),
      sinkSide: sink,
    });
    expect(v.verdict).toBe('INCONCLUSIVE');
    expect(v.unsettled).toBe(1);
    expect(n).toBe(4);
    expect(verdictExitCode([v])).toBe(3);
  });

  it('is INCONCLUSIVE with why when the table is held, and when keys order differently on the two sides', async () => {
    const src = rows(5);
    const held = await reconcileTable({
      sink: 'wh',
      source: 's',
      table: 'public.t',
      key,
      rules: NO_COLUMN_RULES,
      cursor: null,
      pacer: new FixedPacer(30),
      sleep: noSleep,
      blockedBy: 'table is paused',
      sourceSide: side('source', key, columns, ['number'], src),
      sinkSide: side('sink', key, columns, ['number'], src),
    });
    expect([held.verdict, held.reason]).toEqual(['INCONCLUSIVE', 'table is paused']);
    const order = await reconcileTable({
      sink: 'wh',
      source: 's',
      table: 'public.t',
      key,
      rules: NO_COLUMN_RULES,
      cursor: null,
      pacer: new FixedPacer(30),
      sleep: noSleep,
      sourceSide: side('source', key, columns, ['number'], src),
      sinkSide: side('sink', key, columns, ['text'], src),
    });
    expect(order.verdict).toBe('INCONCLUSIVE');
    expect(order.reason).toMatch(/order differently/);
  });

  it('asks the shared pacer before every segment and pauses when it says so', async () => {
    const asked: number[] = [];
    const pauses: number[] = [];
    const pacer: Pacer = {
      next: () => ({ chunkSize: 40, pauseMs: asked.length === 1 ? 250 : 0, state: asked.length === 1 ? 'paused' : 'full-speed' }),
      record: (s) => void asked.push(s.rows),
    };
    const src = rows(100);
    await reconcileTable({
      sink: 'wh',
      source: 's',
      table: 'public.t',
      key,
      rules: NO_COLUMN_RULES,
      cursor: null,
      pacer,
      sleep: async (ms) => void pauses.push(ms),
      sourceSide: side('source', key, columns, ['number'], src),
      sinkSide: side('sink', key, columns, ['number'], src),
    });
    expect(asked).toEqual([40, 40, 20]);
    expect(pauses).toEqual([250]);
  });
});

describe('coverageGaps', () => {
  it('counts captured tables with no decided verdict within their tier period', () => {
    const now = Date.parse('2026-12-01T12:00:00Z');
    const tiers = [
      { name: 'hot', periodMs: 3_600_000, tables: ['public.orders'] },
      { name: 'rest', periodMs: 86_400_000, tables: ['*'] },
    ];
    const tables = [
      { source: 's', table: 'public.orders' },
      { source: 's', table: 'public.customers' },
      { source: 's', table: 'public.items' },
    ];
    const gaps = coverageGaps(
      tables,
      ['wh'],
      [
        { sink: 'wh', source: 's', table: 'public.orders', verdict: 'MATCH', at: '2026-12-01T10:30:00Z' }, // 90 min: older than the hot tier's hour
        { sink: 'wh', source: 's', table: 'public.customers', verdict: 'DIVERGED', at: '2026-12-01T01:00:00Z' },
        { sink: 'wh', source: 's', table: 'public.items', verdict: 'INCONCLUSIVE', at: '2026-12-01T11:59:00Z' }, // undecided: not covered
      ],
      tiers,
      now,
    );
    expect(gaps.map((g) => [g.table, g.tier])).toEqual([
      ['public.orders', 'hot'],
      ['public.items', 'rest'],
    ]);
  });
});
