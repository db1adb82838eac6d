/**
 * Capture by pattern (docs/onboarding.md): pattern matching and overlap (randomized against a
 * brute-force reference, seed printed, `CDC_PROPERTY_SEED` replays), rule resolution, the
 * conflicts refused, the catalog scan's verdicts over the control-plane port, and late rules.
 */
import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { findRuleConflict, matchesTablePattern, patternContains, tablePatternsOverlap } from '../../../contracts/table-config.ts';
import { resolveByRules, TableConfigError, TableConfigIndex, validateTableSettings } from '../../../lambda/core/tables/table-config.ts';
import { scanTables, type DiscoveryDeps } from '../../../lambda/core/tables/discovery.ts';
import { enforceLateRules, LateRulesRefusedError } from '../../../lambda/core/tables/late-rules.ts';
import type { TableFact } from '../../../lambda/core/operator/doctor-facts.ts';
import { MemoryControlPlane } from '../../helpers/memory-control-plane.ts';

const SEED = Number(process.env.CDC_PROPERTY_SEED ?? Math.floor(Math.random() * 2 ** 31));
const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 500);

/** Reference: a glob as a regular expression over a tiny alphabet. */
function reference(glob: string): RegExp {
  return new RegExp(
    `^${glob
      .split('*')
      .map((p) => p.replace(/[.$]/g, '\\$&'))
      .join('[^.]*')}$`,
  );
}
const part = fc.stringMatching(/^[ab_*]{0,4}$/);
const word = fc.stringMatching(/^[ab_]{0,5}$/);

describe('table patterns', () => {
  it(`match, overlap and containment agree with a brute-force reference (seed ${SEED}, ${RUNS} runs)`, () => {
    console.log(`table patterns: seed ${SEED}, ${RUNS} runs (CDC_PROPERTY_SEED to replay)`);
    // Every word over {a, b, _} up to length 7: the reference universe. Two globs of ≤ 4 characters
    // hold ≤ 6 literal characters between them, and a word matching both never needs more than
    // those (5 was too short: `*ab_` and `ba_*` first meet in `ba_ab_`; CDC_PROPERTY_SEED=1059522029).
    const words: string[] = [''];
    for (let n = 1; n <= 7; n++) for (const w of words.filter((x) => x.length === n - 1)) for (const c of 'ab_') words.push(w + c);
    fc.assert(
      fc.property(part, part, word, (g1, g2, w) => {
        const p1 = `s.${g1}`;
        const p2 = `s.${g2}`;
        expect(matchesTablePattern(p1, `s.${w}`)).toBe(reference(g1).test(w));
        // Overlap: some word matches both.
        const [r1, r2] = [reference(g1), reference(g2)];
        const both = words.some((x) => r1.test(x) && r2.test(x));
        expect(tablePatternsOverlap(p1, p2)).toBe(both);
        // Containment is sufficient: when claimed, every word of the inner is in the outer.
        if (patternContains(p1, p2)) expect(words.filter((x) => r2.test(x)).every((x) => r1.test(x))).toBe(true);
      }),
      { seed: SEED, numRuns: RUNS },
    );
  });

  it('never crosses the period and compares schema and table separately', () => {
    expect(matchesTablePattern('public.*', 'public.orders')).toBe(true);
    expect(matchesTablePattern('public.*', 'sales.orders')).toBe(false);
    expect(matchesTablePattern('*.orders', 'sales.orders')).toBe(true);
    expect(matchesTablePattern('public.audit_*', 'public.audit_log')).toBe(true);
    expect(matchesTablePattern('public.audit_*', 'public.auditlog')).toBe(false);
    expect(tablePatternsOverlap('public.*', 'sales.*')).toBe(false);
  });
});

describe('rules', () => {
  const rules = validateTableSettings(
    [
      { table: 'public.customers', mask: ['email'] },
      { match: 'public.*', excludeTables: ['public.audit_*'], deleteMode: 'hard' },
      { match: 'sales.*', mask: ['email'], key: ['order_id'] },
    ],
    'tables.json',
  );

  it('resolve a table: declared first, then the first matching rule, excluded or captured', () => {
    expect(resolveByRules(rules.rules, 'public.orders')).toMatchObject({ kind: 'rule', config: { table: 'public.orders', deleteMode: 'hard', mask: [] } });
    expect(resolveByRules(rules.rules, 'public.audit_log')).toMatchObject({ kind: 'excluded', by: 'public.audit_*' });
    expect(resolveByRules(rules.rules, 'other.x')).toEqual({ kind: 'unmatched' });
    const index = new TableConfigIndex(rules.tables, rules.rules);
    expect(index.columnRules('sales.leads')).toEqual({ mask: ['email'], exclude: [] });
    expect(index.keyColumns('sales.leads')).toEqual(['order_id']);
    expect(index.deleteMode('public.orders')).toBe('hard');
    expect(index.columnRules('public.customers')).toEqual({ mask: ['email'], exclude: [] });
    // What the capture captures now: declared and added tables only.
    expect(index.has('public.orders')).toBe(false);
    index.add({ table: 'public.orders', deleteMode: 'hard', mask: [], exclude: [], key: ['id'] });
    expect(index.has('public.orders')).toBe(true);
    index.remove('public.orders');
    expect(index.tables()).toEqual(['public.customers']);
  });

  it('refuse bad entries and conflicts naming where', () => {
    expect(() => validateTableSettings([{ match: 'public.or-ders*' }], 'f.json')).toThrow(/f\.json\[0\]\.match: expected a 'schema\.table' pattern/);
    expect(() => validateTableSettings([{ match: 'public.*', excludeTables: ['x'] }], 'f.json')).toThrow(/f\.json\[0\]\.excludeTables\[0\]/);
    expect(() => validateTableSettings([{ match: 'public.*', exlude: ['x'] }], 'f.json')).toThrow(/f\.json\[0\]\.exlude: unknown field of a table rule/);
    expect(() => validateTableSettings([{ match: 'public.*', key: ['email'], mask: ['email'] }], 'f.json')).toThrow(TableConfigError);
    expect(() => validateTableSettings([{ table: 'public.a' }, { match: 'public.*', mask: ['x'] }], 'f.json')).toThrow(
      /public\.a is declared alone but also matches rule public\.\*/,
    );
    expect(() => validateTableSettings([{ table: 'public.a' }, { table: 'public.a' }], 'f.json')).toThrow(/f\.json\[1\]\.table: public\.a is configured twice/);
    expect(() => validateTableSettings([{ table: 'public.a', acknowledgeLateRules: ' ' }], 'f.json')).toThrow(
      /acknowledgeLateRules: expected a non-empty text/,
    );
    expect(
      findRuleConflict(
        [],
        [
          { match: 'public.*', excludeTables: ['public.audit_*'], mask: [], exclude: [] },
          { match: 'public.audit_*', excludeTables: [], mask: ['who'], exclude: [] },
        ],
      ),
    ).toBeUndefined();
    expect(
      findRuleConflict(
        [],
        [
          { match: 'public.*', excludeTables: [], mask: [], exclude: [] },
          { match: 'public.audit_*', excludeTables: [], mask: ['who'], exclude: [] },
        ],
      ),
    ).toMatch(/rules public\.\* and public\.audit_\* may match the same table/);
    expect(
      findRuleConflict(
        [{ table: 'public.cdc_heartbeat', columns: ['source_id', 'beat_at'] }],
        [{ match: 'public.*', excludeTables: [], mask: ['email'], exclude: [] }],
      ),
    ).toBeUndefined();
  });
});

function fact(table: string, over: Partial<TableFact> = {}): TableFact {
  return {
    table,
    exists: true,
    primaryKey: ['id'],
    declaredKey: null,
    replicaIdentity: 'd',
    identityIndexColumns: null,
    selectGranted: true,
    columns: [
      { name: 'id', type: 'integer' },
      { name: 'email', type: 'text' },
    ],
    ...over,
  };
}

describe('the catalog scan', () => {
  it('captures eligible tables (before requesting their snapshot), names the others, marks a dropped one; audits only changes', async () => {
    const controlPlane = new MemoryControlPlane();
    let catalog = ['public.orders', 'public.audit_log', 'public.nokey', 'public.cdc_heartbeat'];
    const captured = new Set<string>();
    const order: string[] = [];
    const deps: DiscoveryDeps = {
      controlPlane,
      source: 'app',
      rules: [{ match: 'public.*', excludeTables: ['public.audit_*'], deleteMode: 'soft', mask: ['email'], exclude: [] }],
      declared: new Set(['public.cdc_heartbeat']),
      listTables: async () => catalog,
      tableFact: async (t) => (t === 'public.nokey' ? fact(t, { primaryKey: [] }) : fact(t)),
      user: 'cdc',
      capture: async (c) => {
        captured.add(c.table);
        // Stream first: the table is captured before its snapshot is requested.
        order.push(`capture ${c.table} (snapshot ${(await controlPlane.getSnapshot('app', c.table))?.status ?? 'none'})`);
      },
      release: (t) => void captured.delete(t),
    };
    const first = await scanTables(deps, null);
    expect(first.result.verdicts.map((v) => [v.table, v.verdict])).toEqual([
      ['public.audit_log', 'excluded'],
      ['public.nokey', 'ineligible'],
      ['public.orders', 'captured'],
    ]);
    expect(first.result.verdicts[1]!.reasons.join(' ')).toMatch(
      /primary_key: public\.nokey has no primary key .*fix: ALTER TABLE public\.nokey ADD PRIMARY KEY/,
    );
    expect([...captured]).toEqual(['public.orders']);
    expect(first.result.captured).toEqual([{ table: 'public.orders', key: ['id'], deleteMode: 'soft', mask: ['email'], exclude: [] }]);
    expect((await controlPlane.getSnapshot('app', 'public.orders'))?.reason).toBe('added');
    // Nothing changed: nothing audited again, no second snapshot request.
    const audited = (await controlPlane.listAudit('app')).length;
    const second = await scanTables(deps, first.known);
    expect(second.result.changed).toEqual([]);
    expect((await controlPlane.listAudit('app')).length).toBe(audited);
    // A fresh scanner (a restart) reads the verdicts back from the audit log.
    expect((await scanTables(deps, null)).result.changed).toEqual([]);
    // Dropped: released, audited, its registered table paused, its pending snapshot ended.
    await controlPlane.registerTable(
      {
        source: 'app',
        table: 'public.orders',
        state: 'active',
        currentVersion: 1,
        deleteMode: 'soft',
        preImage: 'key',
        stateReason: null,
        updatedAt: new Date().toISOString(),
      },
      { source: 'app', table: 'public.orders', version: 1, columns: [], key: ['id'], effectivePosition: '0', registeredAt: new Date().toISOString() } as never,
      { at: new Date().toISOString(), actor: 't', action: 'register-table', source: 'app', table: 'public.orders', outcome: 'done', detail: {} },
    );
    catalog = catalog.filter((t) => t !== 'public.orders');
    const third = await scanTables(deps, second.known);
    expect(third.result.changed.map((c) => [c.table, c.verdict])).toEqual([['public.orders', 'dropped']]);
    expect(captured.has('public.orders')).toBe(false);
    expect(await controlPlane.getTable('app', 'public.orders')).toMatchObject({ state: 'paused', stateReason: expect.stringMatching(/^TABLE_DROPPED: /) });
    expect((await controlPlane.getSnapshot('app', 'public.orders'))?.status).toBe('failed');
    // Every scan re-asserts what is captured (a restarted capture is filled by the first scan).
    expect(order).toEqual([
      'capture public.orders (snapshot none)',
      'capture public.orders (snapshot requested)',
      'capture public.orders (snapshot requested)',
    ]);
  });
});

describe('late rules', () => {
  it('a mask added to a registered table is refused without acknowledgement (audited), and with it marks the table and requests a re-snapshot', async () => {
    const controlPlane = new MemoryControlPlane();
    const t = { table: 'public.items', mask: [] as string[], exclude: [] as string[] };
    expect(await enforceLateRules({ controlPlane, source: 'app', tables: [t], actor: 't' })).toEqual([]);
    // Not registered yet: a new mask is no late rule.
    expect(await enforceLateRules({ controlPlane, source: 'app', tables: [{ ...t, mask: ['name'] }], actor: 't' })).toEqual([]);
    await controlPlane.registerTable(
      {
        source: 'app',
        table: 'public.items',
        state: 'active',
        currentVersion: 1,
        deleteMode: 'soft',
        preImage: 'key',
        stateReason: null,
        updatedAt: new Date().toISOString(),
      },
      { source: 'app', table: 'public.items', version: 1, columns: [], key: ['id'], effectivePosition: '0', registeredAt: new Date().toISOString() } as never,
      { at: new Date().toISOString(), actor: 't', action: 'register-table', source: 'app', table: 'public.items', outcome: 'done', detail: {} },
    );
    const late = { ...t, mask: ['name'], exclude: ['secret'] };
    await expect(enforceLateRules({ controlPlane, source: 'app', tables: [late], actor: 't' })).rejects.toThrow(LateRulesRefusedError);
    await expect(enforceLateRules({ controlPlane, source: 'app', tables: [late], actor: 't' })).rejects.toThrow(
      /public\.items: exclude secret added while the table is captured; existing change-log records, archive files and sink rows of public\.items still hold the clear values of secret/,
    );
    expect(await controlPlane.getTable('app', 'public.items')).toMatchObject({ state: 'active' });
    const done = await enforceLateRules({ controlPlane, source: 'app', tables: [{ ...late, acknowledgeLateRules: 'ticket 7' }], actor: 't' });
    expect(done).toMatchObject([{ table: 'public.items', addedMask: [], addedExclude: ['secret'], acknowledgement: 'ticket 7' }]);
    expect(await controlPlane.getTable('app', 'public.items')).toMatchObject({
      state: 'needs-resnapshot',
      stateReason: expect.stringMatching(/^LATE_COLUMN_RULES: exclude secret added \(acknowledged: ticket 7\)/),
    });
    expect((await controlPlane.getSnapshot('app', 'public.items'))?.reason).toBe('resnapshot');
    const entries = (await controlPlane.listAudit('app', 'public.items')).filter((e) => e.action === 'late-column-rules');
    expect(entries.map((e) => e.outcome)).toEqual(['refused', 'refused', 'done']);
    // Recorded now: the same rules again are not late.
    expect(await enforceLateRules({ controlPlane, source: 'app', tables: [late], actor: 't' })).toEqual([]);
  });
});
