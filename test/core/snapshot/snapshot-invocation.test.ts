/**
 * One invocation of the snapshot worker (lambda/core/snapshot/snapshot-invocation.ts) over the
 * in-memory control plane and a reader that must not be reached: the catalog step publishes the
 * types of captured tables not registered yet (the heartbeat table too), first snapshots are
 * requested for configured tables, nothing is read once the time left is under the reserve, and
 * the stall age is reported once per invocation.
 */
import { describe, expect, it } from 'vitest';
import { createSnapshotInvocation, stallAgeSeconds } from '../../../lambda/core/snapshot/snapshot-invocation.ts';
import { DEFAULT_SOURCE_BUDGET } from '../../../lambda/core/snapshot/snapshot-pacer.ts';
import type { SnapshotReader } from '../../../lambda/core/snapshot/snapshot-worker.ts';
import { readCatalogTypes } from '../../../lambda/core/shared/catalog-types.ts';
import type { SnapshotState } from '../../../lambda/core/snapshot/snapshot-state.ts';
import { MemoryControlPlane } from '../../helpers/memory-control-plane.ts';

const unreachable = new Proxy({} as SnapshotReader, {
  get: (_t, name) => () => {
    throw new Error(`the reader was called (${String(name)}) with no time left`);
  },
});

describe('createSnapshotInvocation', () => {
  it('publishes catalog types, requests first snapshots, reads nothing without time, and reports the stall age', async () => {
    const controlPlane = new MemoryControlPlane();
    const stall: number[] = [];
    const logs: string[] = [];
    const described: string[] = [];
    const invocation = createSnapshotInvocation({
      source: 'shop',
      tables: [{ table: 'public.items', key: ['id'], deleteMode: 'soft', mask: [], exclude: [] }],
      controlPlane,
      reader: unreachable,
      publish: async () => {
        throw new Error('nothing to publish');
      },
      budget: DEFAULT_SOURCE_BUDGET,
      metrics: { progress: () => undefined },
      stallAge: (s) => void stall.push(s),
      logger: { info: (m) => void logs.push(m), debug: () => undefined },
      owner: 'test',
      catalog: {
        describe: async (t) => (described.push(t), t === 'public.gone' ? null : { table: t, columns: [{ name: 'id', type: 'bigint' }], key: ['id'] }),
        catalogTables: ['public.cdc_heartbeat', 'public.gone'],
      },
    });
    expect(await invocation(() => 0)).toEqual({});
    expect(described.sort()).toEqual(['public.cdc_heartbeat', 'public.gone', 'public.items']);
    expect(await readCatalogTypes(controlPlane, 'shop', 'public.items')).toMatchObject({ key: ['id'] });
    expect(await readCatalogTypes(controlPlane, 'shop', 'public.gone')).toBeNull();
    expect((await controlPlane.listSnapshots('shop')).map((s) => [s.table, s.status])).toEqual([['public.items', 'requested']]);
    expect(logs).toEqual(['Published catalog types of tables not registered yet', 'Requested first snapshots']);
    expect(stall).toHaveLength(1);
    expect(stall[0]).toBeGreaterThanOrEqual(0);
    // The next invocation publishes nothing new and requests nothing again.
    await invocation(() => 0);
    expect(logs).toHaveLength(2);
    expect(stall).toHaveLength(2);
  });

  it('the stall age is the oldest running or requested snapshot, 0 when none runs', () => {
    const at = (status: string, updatedAt: string) => ({ status, updatedAt }) as SnapshotState;
    const now = Date.parse('2026-01-01T00:10:00Z');
    expect(stallAgeSeconds([], now)).toBe(0);
    expect(stallAgeSeconds([at('done', '2026-01-01T00:00:00Z')], now)).toBe(0);
    expect(stallAgeSeconds([at('running', '2026-01-01T00:09:00Z'), at('requested', '2026-01-01T00:05:00Z')], now)).toBe(300);
  });
});
