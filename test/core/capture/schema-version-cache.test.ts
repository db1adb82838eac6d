/**
 * The normalizer's schema versions kept across batches (lambda/core/capture/schema-version-cache.ts),
 * randomized over seeds: tables registered, versions added (as by this normalizer or by another
 * one on another shard, between two loads), states changed by an operator, and loads in between.
 * Every load equals what a fresh read of the control plane gives at that moment (the table record
 * and its versions, compared by value), the versions are read again exactly when one was added
 * since the table's last load, and a caller changing what it got changes nothing the next load
 * gives. A normalizer over the same control plane sees a version another normalizer added.
 *
 * Seeds: `CDC_PROPERTY_RUNS` (default 300) from `CDC_PROPERTY_SEED` (default random), both printed.
 */
import { describe, expect, it } from 'vitest';
import { SchemaVersionCache } from '../../../lambda/core/capture/schema-version-cache.ts';
import type { AuditEntry, SchemaVersion, TableRecord, TableState } from '../../../lambda/core/shared/control-plane.ts';
import { seededRandom } from '../../../local/seeded-random.ts';
import { MemoryControlPlane } from '../../helpers/memory-control-plane.ts';
import { testAudit } from '../../helpers/audit-entry.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 300);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);

const SOURCE = 'demo';
const audit = (action: string, table: string): AuditEntry => testAudit(SOURCE, action, table);

function schema(table: string, version: number, columns: number): SchemaVersion {
  return {
    source: SOURCE,
    table,
    version,
    columns: Array.from({ length: columns }, (_, i) => ({ name: `c${i}`, type: i % 2 === 0 ? 'integer' : 'text', nullable: i > 0 })),
    key: ['c0'],
    effectivePosition: `0/${(version * 16).toString(16).toUpperCase()}`,
    registeredAt: new Date(1_700_000_000_000 + version).toISOString(),
  };
}

function record(table: string): TableRecord {
  return {
    source: SOURCE,
    table,
    state: 'active',
    currentVersion: 1,
    deleteMode: 'hard',
    preImage: 'full',
    stateReason: null,
    updatedAt: new Date().toISOString(),
  };
}

/** The control plane with its version reads counted. */
class Counting extends MemoryControlPlane {
  versionReads = 0;
  override listSchemaVersions(sourceId: string, table: string): Promise<SchemaVersion[]> {
    this.versionReads++;
    return super.listSchemaVersions(sourceId, table);
  }
}

async function fresh(cp: MemoryControlPlane, table: string): Promise<{ table: TableRecord | null; versions: SchemaVersion[] }> {
  const versions = await cp.listSchemaVersions(SOURCE, table);
  return { table: await cp.getTable(SOURCE, table), versions: [...versions].sort((a, b) => a.version - b.version) };
}

describe('schema versions kept across batches', () => {
  it(`every load equals a fresh read, and reads the versions only after one was added (randomized)`, async () => {
    console.log(`schema-version cache: ${RUNS} seeds from ${SEED} (replay with CDC_PROPERTY_SEED=${SEED})`);
    let loads = 0;
    let reads = 0;
    for (let run = 0; run < RUNS; run++) {
      const seed = SEED + run;
      const rand = seededRandom(seed);
      const pick = (n: number): number => Math.floor(rand() * n);
      const cp = new Counting();
      const cache = new SchemaVersionCache();
      const tables = Array.from({ length: 1 + pick(4) }, (_, i) => `public.t${i}`);
      // Per table: whether a version was added (or the table registered) since the table's last load.
      const changed = new Map<string, boolean>();
      for (let step = 0; step < 40; step++) {
        const table = tables[pick(tables.length)]!;
        const current = await cp.getTable(SOURCE, table);
        const roll = rand();
        if (roll < 0.15) {
          if (current === null) {
            expect(await cp.registerTable(record(table), schema(table, 1, 1 + pick(4)), audit('register', table))).toBe(true);
            changed.set(table, true);
          }
        } else if (roll < 0.3 && current !== null) {
          const v = current.currentVersion + 1;
          expect(await cp.addSchemaVersion(schema(table, v, 1 + pick(6)), audit('version', table))).toBe(true);
          changed.set(table, true);
        } else if (roll < 0.4 && current !== null) {
          const states: TableState[] = ['active', 'paused', 'needs-resnapshot', 'degraded'];
          await cp.setTableState(SOURCE, table, states[pick(states.length)]!, rand() < 0.5 ? null : 'OPERATOR_PAUSE: test', audit('state', table));
        } else {
          const readsBefore = cp.versionReads;
          const got = await cache.load(cp, SOURCE, table);
          loads++;
          const readNow = cp.versionReads - readsBefore;
          reads += readNow;
          const where = `seed ${seed} step ${step} ${table}`;
          expect(got, where).toEqual(await fresh(cp, table));
          // Read again exactly when a version came (or on the first load, and while the table is not registered).
          const mustRead = changed.get(table) !== false || current === null;
          expect(readNow, `${where}: versions read ${readNow} times, a version added since the last load: ${mustRead}`).toBe(mustRead ? 1 : 0);
          changed.set(table, current === null);
          // The caller's copy is its own (the normalizer appends a version it registered).
          got.versions.push(schema(table, 999, 1));
          got.versions.reverse();
        }
      }
    }
    console.log(`schema-version cache: ${loads} loads, ${reads} reads of the versions`);
    expect(reads).toBeLessThan(loads);
  });

  it('forgets a table it read with a gap in its versions, and reads it whole again', async () => {
    const cp = new Counting();
    await cp.registerTable(record('public.t'), schema('public.t', 1, 2), audit('register', 'public.t'));
    const cache = new SchemaVersionCache();
    const gap = {
      getTable: (s: string, t: string) => cp.getTable(s, t),
      listSchemaVersions: async () => [schema('public.t', 2, 2)],
    };
    expect((await cache.load(gap, SOURCE, 'public.t')).versions.map((v) => v.version)).toEqual([2]);
    await cache.load(cp, SOURCE, 'public.t');
    expect(cp.versionReads).toBe(1);
  });
});
