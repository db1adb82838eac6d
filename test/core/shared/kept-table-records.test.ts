/**
 * Table records kept for at most a second (lambda/core/shared/kept-table-records.ts;
 * docs/architecture.md, "Table records kept for at most a second"), randomized over seeds with a
 * clock the test moves: tables changed by another process (state changes, new versions), by this
 * process through the kept port (a state change, a registration that loses), reads racing those
 * writes, events naming the current version (`atLeast`), and reads in between. Every read equals,
 * by value, the table's record as it was at some moment less than the bound ago, and never one
 * from before a write this process made through the port; after `atLeast(v)` the record read
 * names version v or later; a table without a record is never kept, nor a record that is not
 * active (a read returning one returns the record as it is now). And the cut is real: a read of an
 * active record repeated with the clock unchanged and nothing written does not reach the control plane.
 *
 * Seeds: `CDC_PROPERTY_RUNS` (default 300) from `CDC_PROPERTY_SEED` (default random), both printed.
 */
import { isDeepStrictEqual } from 'node:util';
import { describe, expect, it } from 'vitest';
import { keepTableRecords, TABLE_RECORD_MAX_AGE_MS } from '../../../lambda/core/shared/kept-table-records.ts';
import type { AuditEntry, SchemaVersion, TableRecord, TableState } from '../../../lambda/core/shared/control-plane.ts';
import { seededRandom } from '../../../local/seeded-random.ts';
import { MemoryControlPlane } from '../../helpers/memory-control-plane.ts';
import { testAudit } from '../../helpers/audit-entry.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 300);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const SOURCE = 'demo';
const TABLES = ['public.a', 'public.b', 'public.c'];
const STATES: TableState[] = ['active', 'paused', 'degraded', 'needs-resnapshot'];

const audit = (action: string, table: string): AuditEntry => testAudit(SOURCE, action, table);

function schema(table: string, version: number): SchemaVersion {
  return {
    source: SOURCE,
    table,
    version,
    columns: [{ name: 'id', type: 'integer', nullable: false }],
    key: ['id'],
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
    deleteMode: 'soft',
    preImage: 'key',
    stateReason: null,
    updatedAt: new Date().toISOString(),
  };
}

/** The in-memory control plane, its table reads answered a macrotask late when `slow` (so a read can still be in flight when a write settled). */
class SlowReads extends MemoryControlPlane {
  slow = false;
  override async getTable(sourceId: string, table: string): Promise<TableRecord | null> {
    const r = await super.getTable(sourceId, table);
    if (this.slow) await new Promise((resolve) => setImmediate(resolve));
    return r;
  }
}

/** One table's records over time: each as read right after the change that made it, with the clock then. */
interface Seen {
  seq: number;
  at: number;
  record: TableRecord;
}

describe('table records kept for at most a second', () => {
  it('every read is the record of less than the bound ago, never older than an own write; atLeast and unregistered tables read again (randomized)', async () => {
    console.log(`kept table records: ${RUNS} seeds from ${SEED} (replay with CDC_PROPERTY_SEED=${SEED})`);
    let gets = 0;
    let reads = 0;
    for (let run = 0; run < RUNS; run++) {
      const seed = SEED + run;
      const rand = seededRandom(seed);
      const pick = (n: number): number => Math.floor(rand() * n);
      const cp = new SlowReads();
      let now = 0;
      const kept = keepTableRecords(cp, { clock: () => now });
      const history = new Map<string, Seen[]>();
      /** Per table, the first entry of its history a read may return (an own write forgets what came before). */
      const minSeq = new Map<string, number>();
      let seq = 0;
      const note = async (table: string): Promise<void> => {
        const r = await cp.getTable(SOURCE, table);
        if (r) history.get(table)!.push({ seq: ++seq, at: now, record: r });
      };
      for (const t of TABLES) {
        history.set(t, []);
        await cp.registerTable(record(t), schema(t, 1), audit('register-table', t));
        await note(t);
      }
      const ownWrite = (): void => {
        for (const t of TABLES) minSeq.set(t, history.get(t)!.at(-1)!.seq);
      };
      const check = (table: string, got: TableRecord | null, why: string): void => {
        const h = history.get(table)!;
        const from = minSeq.get(table) ?? 0;
        const allowed = h.filter((e, i) => e.seq >= from && (i === h.length - 1 || h[i + 1]!.at > now - TABLE_RECORD_MAX_AGE_MS));
        // A record that is not active is never kept: a read returning one returns the table's record as it is now.
        const ok = got !== null && got.state !== 'active' ? isDeepStrictEqual(h.at(-1)!.record, got) : allowed.some((e) => isDeepStrictEqual(e.record, got));
        if (!ok)
          throw new Error(
            `seed ${seed}, ${why}: read ${JSON.stringify(got)} of ${table} at ${now} ms is none of the records of the last ${TABLE_RECORD_MAX_AGE_MS} ms since the last own write: ${JSON.stringify(allowed)}`,
          );
      };
      const steps = 20 + pick(60);
      for (let step = 0; step < steps; step++) {
        const table = TABLES[pick(TABLES.length)]!;
        const op = pick(12);
        const read = async (why: string): Promise<TableRecord | null> => {
          const got = await kept.controlPlane.getTable(SOURCE, table);
          gets++;
          check(table, got, why);
          return got;
        };
        if (op <= 2) {
          now += pick(600);
        } else if (op === 3) {
          await cp.setTableState(SOURCE, table, STATES[pick(STATES.length)]!, 'elsewhere', audit('set-state', table));
          await note(table);
        } else if (op === 4) {
          const current = (await cp.getTable(SOURCE, table))!.currentVersion;
          await cp.addSchemaVersion(schema(table, current + 1), audit('add-schema-version', table));
          await note(table);
        } else if (op === 5) {
          await kept.controlPlane.setTableState(SOURCE, table, STATES[pick(STATES.length)]!, 'own', audit('set-state', table));
          await note(table);
          ownWrite();
          await read('a read after an own write');
        } else if (op === 6) {
          // A registration that loses (the table exists): the process learns its record moved on.
          expect(await kept.controlPlane.registerTable(record(table), schema(table, 1), audit('register-table', table))).toBe(false);
          ownWrite();
          await read('a read after a lost registration');
        } else if (op === 7) {
          // A read racing an own write: the read may be old, but it must not be kept.
          cp.slow = true;
          const racing = kept.controlPlane.getTable(SOURCE, table);
          const write = kept.controlPlane.setTableState(SOURCE, table, STATES[pick(STATES.length)]!, 'own', audit('set-state', table));
          await write;
          expect(await racing).not.toBeNull();
          cp.slow = false;
          await note(table);
          ownWrite();
          await read('a read after a read that raced an own write');
        } else if (op === 8) {
          const current = (await cp.getTable(SOURCE, table))!.currentVersion;
          kept.atLeast(SOURCE, table, current);
          const got = await read('a read after atLeast');
          expect(got!.currentVersion, `seed ${seed}: after atLeast(${current})`).toBeGreaterThanOrEqual(current);
        } else {
          const first = await read('a read');
          // The cut: the same read of an active record again, with nothing written and the clock unchanged, is answered from what was kept; any other is read again.
          const n = kept.reads;
          await read('a repeated read');
          if (first?.state === 'active') expect(kept.reads, `seed ${seed}: a repeated read of an active record reached the control plane`).toBe(n);
          else expect(kept.reads, `seed ${seed}: a repeated read of a ${first?.state} record was answered from what was kept`).toBe(n + 1);
        }
      }
      // A table without a record is not kept: registered a moment later, it is read at once.
      expect(await kept.controlPlane.getTable(SOURCE, 'public.late')).toBeNull();
      await cp.registerTable(record('public.late'), schema('public.late', 1), audit('register-table', 'public.late'));
      expect(await kept.controlPlane.getTable(SOURCE, 'public.late')).toEqual(await cp.getTable(SOURCE, 'public.late'));
      gets += 2;
      reads += kept.reads;
    }
    console.log(`kept table records: ${gets} reads asked, ${reads} reached the control plane`);
    expect(reads).toBeLessThan(gets);
  });

  it('passes every other call through to the port, with its result', async () => {
    const cp = new MemoryControlPlane();
    const kept = keepTableRecords(cp, { clock: () => 0 });
    await kept.controlPlane.registerTable(record('public.a'), schema('public.a', 1), audit('register-table', 'public.a'));
    await kept.controlPlane.putCheckpoint('c', 's', '42');
    expect(await kept.controlPlane.getCheckpoint('c', 's')).toBe('42');
    expect(await kept.controlPlane.listSchemaVersions(SOURCE, 'public.a')).toEqual([schema('public.a', 1)]);
    expect(await kept.controlPlane.getTable(SOURCE, 'public.a')).toEqual(await cp.getTable(SOURCE, 'public.a'));
  });
});
