/**
 * The drain bound of a bounded `cdc local` run (docs/local.md, "Bounded runs (`--duration`)"): a
 * sink that caught up keeps its verdict; on a sink that had not, a table that differs is not
 * compared (with the events not yet applied), never DIVERGED, and a table that matches still
 * matches. Randomized over verdicts (seed and count printed), plus the lines, the --json outcome and
 * the flag.
 */
import { describe, expect, it } from 'vitest';
import { boundVerdict, DEFAULT_MAX_DRAIN_MS, notComparedTables, onlyNotCompared, type SinkAtDrainEnd } from '../../bin/cli/local-drain.ts';
import { finishReport, type LocalReport } from '../../bin/cli/local-report.ts';
import { parseLocalArgs } from '../../bin/cli/local-args.ts';
import { formatVerdict, type TableVerdict, type Verdict } from '../../local/verdict.ts';
import { rng as random } from '../helpers/rng.ts';

function table(name: string, over: Partial<TableVerdict> = {}): TableVerdict {
  return {
    table: name,
    sourceRows: 10,
    warehouseRows: 10,
    missing: 0,
    extra: 0,
    different: 0,
    duplicates: 0,
    problems: [],
    examples: [],
    match: true,
    ...over,
  };
}

const behind = (pendingEvents: number, left: Record<string, number> = {}): SinkAtDrainEnd => ({
  caughtUp: false,
  pendingEvents,
  snapshotRowsLeft: new Map(Object.entries(left)),
});

describe('the verdict when the drain bound is reached', () => {
  it('randomized: caught up keeps the verdict; behind turns every differing table into not compared and keeps every match', () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1_000_000);
    const runs = 300;
    console.log(`drain bound verdicts: seed ${seed}, ${runs} cases`);
    const next = random(seed);
    for (let i = 0; i < runs; i++) {
      const tables = Array.from({ length: 1 + Math.floor(next() * 5) }, (_, j) => {
        const missing = next() < 0.4 ? Math.floor(next() * 50) : 0;
        const different = next() < 0.3 ? Math.floor(next() * 5) : 0;
        const problems = next() < 0.1 ? ['no warehouse view'] : [];
        return table(`public.t${j}`, { missing, different, problems, match: missing === 0 && different === 0 && problems.length === 0 });
      });
      const verdict: Verdict = { match: tables.every((t) => t.match), tables };
      const caughtUp = next() < 0.3;
      const pending = Math.floor(next() * 10_000);
      const left = Object.fromEntries(tables.filter(() => next() < 0.3).map((t) => [t.table, Math.floor(next() * 20_000)]));
      const at: SinkAtDrainEnd = { ...behind(pending, left), caughtUp };
      const out = boundVerdict(verdict, at);
      const where = `seed ${seed} case ${i}`;
      if (caughtUp) {
        expect(out, where).toBe(verdict);
        continue;
      }
      expect(out.tables.length, where).toBe(tables.length);
      for (const [j, t] of out.tables.entries()) {
        const before = tables[j]!;
        if (before.match) expect(t, where).toBe(before);
        else {
          expect(t.match, where).toBe(false);
          expect(t.notCompared, where).toEqual({ pendingEvents: Math.max(pending, left[t.table] ?? 0), snapshotRowsLeft: left[t.table] ?? 0 });
          // What was compared so far is kept (counts, problems), only the reading changes.
          expect({ ...t, notCompared: undefined }, where).toEqual({ ...before, notCompared: undefined });
        }
      }
      expect(out.match, where).toBe(verdict.match);
      expect(notComparedTables(out).length, where).toBe(tables.filter((t) => !t.match).length);
      expect(onlyNotCompared(out), where).toBe(!verdict.match);
      // Never DIVERGED: the lines say not compared, never FAIL, and the --json outcome is incomplete.
      const lines = formatVerdict(out);
      expect(lines.join('\n'), where).not.toMatch(/FAIL|MISMATCH/);
      const report: LocalReport = { outcome: 'stopped', exitCode: 1, source: 'local', measured: null, verdicts: [{ sink: 'warehouse', ...out }] };
      expect(finishReport(report, out.match ? 0 : 1).outcome, where).toBe(verdict.match ? 'match' : 'incomplete');
    }
  });

  it('names the table, the events not yet applied and the snapshot rows still to read', () => {
    const verdict: Verdict = {
      match: false,
      tables: [table('public.pgbench_accounts', { warehouseRows: 320_000, missing: 180_000, match: false }), table('public.pgbench_branches')],
    };
    const lines = formatVerdict(boundVerdict(verdict, behind(190_000, { 'public.pgbench_accounts': 150_000 })));
    expect(lines).toEqual([
      'verdict: NOT COMPLETE (1 table not compared)',
      '  open public.pgbench_accounts: not compared: 190000 events not yet applied to warehouse; its snapshot had 150000 rows still to read (so far source 10 rows, warehouse 320000 rows)',
      '  ok   public.pgbench_branches: source 10 rows, warehouse 10 rows',
    ]);
  });

  it('a sink that caught up is compared as always: a difference there is DIVERGED (MISMATCH, exit 1)', () => {
    const verdict: Verdict = { match: false, tables: [table('public.a', { missing: 1, match: false })] };
    const out = boundVerdict(verdict, { ...behind(5), caughtUp: true });
    expect(formatVerdict(out)[0]).toBe('verdict: MISMATCH');
    const report: LocalReport = {
      outcome: 'stopped',
      exitCode: 1,
      source: 'local',
      measured: null,
      verdicts: [
        { sink: 'warehouse', ...out },
        { sink: 'search', ...boundVerdict({ ...verdict, sink: 'search index' }, behind(5)) },
      ],
    };
    expect(finishReport(report, 1).outcome).toBe('diverged');
  });
});

describe('--max-drain', () => {
  it('defaults to 30 minutes, reads a time, needs --duration', () => {
    expect(DEFAULT_MAX_DRAIN_MS).toBe(30 * 60_000);
    expect(parseLocalArgs(['--demo', '--duration', '20s']).maxDrainMs).toBe(DEFAULT_MAX_DRAIN_MS);
    expect(parseLocalArgs(['--demo', '--duration', '20s', '--max-drain', '2m']).maxDrainMs).toBe(120_000);
    expect(() => parseLocalArgs(['--demo', '--max-drain', '2m'])).toThrow(/--max-drain bounds the drain of a bounded run: it needs --duration/);
    expect(() => parseLocalArgs(['--demo', '--duration', '20s', '--max-drain', 'soon'])).toThrow(/--max-drain expects a time like 60s, 5m or 1h, got 'soon'/);
  });
});
