/** Load requests (docs/warehouse-apply.md, "Redshift: the applier"): what a waiting applier concludes, stale claims, copy groups, the deadline. */
import { describe, expect, it } from 'vitest';
import {
  claimable,
  copyGroups,
  mergeDue,
  newestTables,
  recoveredState,
  requestDeadline,
  requestVerdict,
  sqlStateOf,
  staleClaim,
  type LoadRequest,
} from '../../../lambda/core/warehouse/redshift-requests.ts';
import type { RedshiftTable } from '../../../lambda/core/warehouse/redshift-sql.ts';
import { redshiftColumn } from '../../../lambda/core/warehouse/redshift-types.ts';
import { warehouseTable } from '../../../lambda/core/warehouse/warehouse-sql.ts';

const table = (name: string, columns: string[]): RedshiftTable => ({
  t: warehouseTable('s', `public.${name}`),
  key: [redshiftColumn('id', 'integer')],
  data: columns.map((c) => redshiftColumn(c, 'text')),
  hard: false,
});
const request = (id: string, over: Partial<LoadRequest> = {}): LoadRequest => ({
  sinkId: 'w',
  requestId: id,
  state: 'pending',
  tables: [],
  createdAt: 1000,
  deadline: 5000,
  ...over,
});

describe('load requests', () => {
  it('an applier waits while pending or claimed before the deadline, and fails after it, when failed, abandoned or gone', () => {
    expect(requestVerdict(request('a'), 4999)).toEqual({ kind: 'wait' });
    expect(requestVerdict(request('a', { state: 'claimed' }), 4999)).toEqual({ kind: 'wait' });
    expect(requestVerdict(request('a', { state: 'claimed' }), 5000).kind).toBe('failed');
    expect(requestVerdict(request('a', { state: 'loaded', loadId: 7 }), 9999)).toEqual({ kind: 'loaded', loadId: 7 });
    expect(requestVerdict(request('a', { state: 'failed', reason: 'COPY: value too long' }), 0)).toEqual({ kind: 'failed', reason: 'COPY: value too long' });
    expect(requestVerdict(request('a', { state: 'failed', reason: 'too long', sqlState: '22001' }), 0)).toEqual({
      kind: 'failed',
      reason: 'too long',
      sqlState: '22001',
    });
    expect(sqlStateOf(Object.assign(new Error('x'), { code: '22001' }))).toBe('22001');
    expect(sqlStateOf(Object.assign(new Error('x'), { code: 'ECONNRESET' }))).toBeUndefined();
    expect(sqlStateOf(new Error('x'))).toBeUndefined();
    expect(requestVerdict(request('a', { state: 'abandoned' }), 0).kind).toBe('failed');
    expect(requestVerdict(null, 0).kind).toBe('failed');
  });

  it('a claim is stale only once its invocation has timed out; it goes where the ledger says', () => {
    const claimed = request('a', { state: 'claimed', claimedAt: 2000 });
    expect(staleClaim(claimed, 2999, 1000)).toBe(false);
    expect(staleClaim(claimed, 3000, 1000)).toBe(true);
    expect(staleClaim(request('a'), 99999, 1000)).toBe(false);
    expect(recoveredState('a', new Set(['a']))).toBe('loaded');
    expect(recoveredState('a', new Set(['b']))).toBe('pending');
  });

  it('the loader claims only pending requests whose applier still waits', () => {
    expect(claimable(request('a'), 4999)).toBe(true);
    expect(claimable(request('a'), 5000)).toBe(false);
    expect(claimable(request('a', { state: 'claimed' }), 0)).toBe(false);
  });

  it('groups objects per table and column list, and keeps the newest definition per table', () => {
    const v1 = table('t', ['a']);
    const v2 = table('t', ['a', 'b']);
    const u = table('u', ['x']);
    const rs = [
      request('1', { tables: [{ table: v1, schemaVersion: 1, objects: [{ key: 'k1', bytes: 10 }], rows: 2 }] }),
      request('2', {
        tables: [
          { table: v1, schemaVersion: 1, objects: [{ key: 'k2', bytes: 11 }], rows: 3 },
          { table: u, schemaVersion: 4, objects: [{ key: 'k3', bytes: 12 }], rows: 1 },
        ],
      }),
      request('3', { tables: [{ table: v2, schemaVersion: 2, objects: [{ key: 'k4', bytes: 13 }], rows: 5 }] }),
    ];
    const groups = copyGroups(rs);
    expect(groups.map((g) => [g.table.t.view, g.table.data.length, g.objects.map((o) => o.key), g.rows])).toEqual([
      ['t', 1, ['k1', 'k2'], 5],
      ['u', 1, ['k3'], 1],
      ['t', 2, ['k4'], 5],
    ]);
    expect(newestTables(rs).map((x) => [x.table.t.view, x.schemaVersion, x.table.data.length])).toEqual([
      ['t', 2, 2],
      ['u', 4, 1],
    ]);
  });

  it('a merge is due first, then every mergeEveryMs; the deadline leaves room in the applier timeout', () => {
    expect(mergeDue(null, 0, 60_000)).toBe(true);
    expect(mergeDue(1000, 60_999, 60_000)).toBe(false);
    expect(mergeDue(1000, 61_000, 60_000)).toBe(true);
    expect(requestDeadline(1000, 240_000, 300_000)).toBe(241_000);
    expect(() => requestDeadline(1000, 290_000, 300_000)).toThrow(/leave 30000 ms/);
  });
});
