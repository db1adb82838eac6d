/**
 * A run of one reconciliation tier (lambda/core/reconcile/reconcile-run.ts) over in-memory sides
 * (MemoryReconcileSide) and the in-memory control plane: it reconciles exactly the tier's tables
 * (never the heartbeat table), takes undeclared keys from the catalog, reports rows checked per
 * table and the sink's summary, and refuses a tier that does not exist, naming the tiers.
 */
import { describe, expect, it } from 'vitest';
import { reconcileTier, type ReconcileRunMetrics, type ReconcileSessions } from '../../../lambda/core/reconcile/reconcile-run.ts';
import { MemoryReconcileSide } from '../../../lambda/core/reconcile/reconcile-rows.ts';
import type { SideRow } from '../../../lambda/core/reconcile/reconcile.ts';
import type { TableConfig } from '../../../lambda/core/tables/table-config.ts';
import { MemoryControlPlane } from '../../helpers/memory-control-plane.ts';

const rowsOf = (n: number, change?: number): SideRow[] =>
  Array.from({ length: n }, (_, i) => ({ key: [String(i + 1)], values: { id: String(i + 1), v: i + 1 === change ? 'other' : `v${i + 1}` }, position: null }));

function setup() {
  const keysAsked: string[] = [];
  const sided: string[] = [];
  const sessions: ReconcileSessions = {
    async primaryKey(table) {
      keysAsked.push(table);
      return ['id'];
    },
    async sides(t) {
      sided.push(t.table);
      expect(t.key).toEqual(['id']);
      const side = (label: string, rows: SideRow[]) =>
        new MemoryReconcileSide({ label, key: ['id'], columns: ['id', 'v'], keyOrder: ['number'], rows, masked: [] });
      return { source: side('source', rowsOf(30)), sink: side('wh', rowsOf(30, t.table === 'public.b' ? 7 : undefined)) };
    },
  };
  const summary: Parameters<ReconcileRunMetrics['sinkSummary']>[0][] = [];
  const checked: Array<[string, number]> = [];
  const logs: string[] = [];
  const log = (level: string) => (message: string, detail: Record<string, unknown>) => logs.push(`${level} ${message} ${String(detail.table ?? '')}`);
  const deps = {
    source: 'shop',
    sink: 'wh',
    tables: <TableConfig[]>[
      { table: 'public.a', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] },
      { table: 'public.b', deleteMode: 'soft', mask: [], exclude: [] },
      { table: 'public.c', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] },
      { table: 'cdc.cdc_heartbeat', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] },
    ],
    tiers: [
      { name: 'hot', periodMs: 60_000, tables: ['public.a', 'public.b'] },
      { name: 'cold', periodMs: 3_600_000, tables: ['*'] },
    ],
    controlPlane: new MemoryControlPlane(),
    sessions: async () => sessions,
    budget: { writeLatencyPct: 10, cpuPct: 5 },
    settleMs: 1,
    heartbeatSchema: 'cdc',
    metrics: { rowsChecked: (t: string, n: number) => void checked.push([t, n]), sinkSummary: (s: (typeof summary)[0]) => void summary.push(s) },
    logger: { info: log('info'), warn: log('warn'), error: log('error') },
  };
  return { deps, keysAsked, sided, summary, checked, logs };
}

describe('reconcileTier', () => {
  it("reconciles the tier's tables, keys from the catalog where undeclared, and reports them", async () => {
    const { deps, keysAsked, sided, summary, checked, logs } = setup();
    const out = await reconcileTier(deps, { tier: 'hot' });
    expect(out.tier).toBe('hot');
    expect(out.verdicts.map((v) => [v.table, v.verdict])).toEqual([
      ['public.a', 'MATCH'],
      ['public.b', 'DIVERGED'],
    ]);
    expect(keysAsked).toEqual(['public.b']);
    expect(sided).toEqual(expect.arrayContaining(['public.a', 'public.b']));
    expect(sided).not.toContain('public.c');
    expect(checked.map(([t]) => t)).toEqual(['public.a', 'public.b']);
    expect(summary).toHaveLength(1);
    expect(summary[0]).toMatchObject({ divergedTables: 1, divergedKeys: 1, inconclusiveTables: 0 });
    // public.c (tier cold) has no decided verdict yet: a coverage gap; the heartbeat table is never one.
    expect(out.coverageGaps).toBe(summary[0]!.coverageGaps);
    expect(out.coverageGaps).toBe(1);
    expect(logs).toContain('error Reconciliation verdict public.b');
    expect(await deps.controlPlane.listReconcileVerdicts('wh')).toHaveLength(2);
  });

  it('stores an INCONCLUSIVE verdict naming the error for a table whose sink side cannot be read, every count zero', async () => {
    const { deps } = setup();
    const sessions = await deps.sessions();
    const sidesOf = sessions.sides.bind(sessions);
    sessions.sides = async (t, config) => {
      const s = await sidesOf(t, config);
      if (t.table !== 'public.b') return s;
      const broken = new Proxy(s.sink, {
        get: (target, p) =>
          typeof Reflect.get(target, p) === 'function'
            ? () => {
                throw new Error('connection reset');
              }
            : Reflect.get(target, p),
      });
      return { ...s, sink: broken };
    };
    const out = await reconcileTier(deps, { tier: 'hot' });
    expect(out.verdicts.map((v) => [v.table, v.verdict])).toEqual([
      ['public.a', 'MATCH'],
      ['public.b', 'INCONCLUSIVE'],
    ]);
    expect(await deps.controlPlane.getReconcileVerdict('wh', 'shop', 'public.b')).toMatchObject({
      sink: 'wh',
      source: 'shop',
      verdict: 'INCONCLUSIVE',
      reason: 'could not read: connection reset',
      durationMs: 0,
      key: ['id'],
      sourceRows: null,
      sinkRows: null,
      covered: [],
      coveredRows: 0,
      fullCoverage: false,
      diverged: { missing: 0, extra: 0, different: 0 },
      nextCursor: null,
      cost: { summaries: 0, leafRows: 0, recheckRows: 0, bisections: 0 },
    });
  });

  it('runs the first tier when the event names none, and never the heartbeat table', async () => {
    const { deps, sided } = setup();
    deps.tiers = [{ name: 'all', periodMs: 60_000, tables: ['*'] }];
    const out = await reconcileTier(deps, {});
    expect(out.tier).toBe('all');
    expect(new Set(sided)).toEqual(new Set(['public.a', 'public.b', 'public.c']));
  });

  it('refuses a tier that does not exist, naming the tiers, before opening a session', async () => {
    const { deps } = setup();
    let opened = false;
    deps.sessions = async () => {
      opened = true;
      throw new Error('not expected');
    };
    await expect(reconcileTier(deps, { tier: 'warm' })).rejects.toThrow("no reconciliation tier 'warm' (tiers: hot, cold)");
    expect(opened).toBe(false);
  });
});
