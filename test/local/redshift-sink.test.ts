/**
 * `cdc local --warehouse-engine redshift`'s sink (local/redshift-sink.ts): the loader on its own cadence behind the
 * applier, and what it says. A primary-key change whose insert half lacks a column, whose old key never had a row: the
 * insert half is held (its delete half is not loaded yet), the delete half's load finds no image to complete it from,
 * drops it and says so where `cdc local` reports errors (docs/primary-key-changes.md, "On Redshift"); nothing of the new
 * key shows, and the handover table ends empty. Embedded PostgreSQL as the Redshift stand-in, a folder as S3.
 */
import { describe, expect, it } from 'vitest';
import { numberedEvent } from '../helpers/numbered-event.ts';
import type { ChangeEvent, Row } from '../../lambda/core/shared/event.ts';
import { rsQualified } from '../../lambda/core/warehouse/redshift-sql.ts';
import { warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import type { ChangeRecord } from '../../lambda/handlers/warehouse-applier.ts';
import { FolderArchive } from '../../local/archive.ts';
import { startLocalRedshiftSink } from '../../local/redshift-sink.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { useRedshiftFixture } from '../helpers/redshift-fixture.ts';
import { COLUMNS, TABLE } from '../helpers/redshift-shards.ts';
import { quietApplier, registerTables } from '../helpers/registered-applier.ts';

const SOURCE = 'ls';

const ev = (n: number, op: ChangeEvent['op'], key: Row, after: Row | null, o: Partial<ChangeEvent> = {}): ChangeEvent =>
  numberedEvent(TABLE, SOURCE, n, op, key, after, o);

describe("cdc local's Redshift sink", () => {
  const f = useRedshiftFixture({ database: 'rsls', clients: 1, utc: true });

  it('says so when a held key change cannot be completed (its old key had no row), and shows nothing of it', async () => {
    const errors: string[] = [];
    const sink = await startLocalRedshiftSink({
      warehouseUrl: f.cluster.url('rsls'),
      store: new FolderArchive(f.folder),
      sinkId: 'warehouse',
      freshnessTargetMs: 3_000,
      onError: (where, err) => errors.push(`${where}: ${(err as Error).message}`),
    });
    try {
      const memory = new MemoryControlPlane();
      await registerTables(memory, SOURCE, [TABLE], COLUMNS);
      const applier = quietApplier(memory, f.pool, sink.warehouse);
      let seq = 0;
      const deliver = async (events: ChangeEvent[]): Promise<string[]> =>
        (await applier.applyRecords(events.map((e): ChangeRecord => ({ sequenceNumber: String(++seq), origin: `s/shard-0/${seq}`, text: JSON.stringify(e) }))))
          .failed;
      expect(await deliver([ev(1, 'insert', { id: 5 }, { id: 5, note: 'kept', amount: '1.00' })])).toEqual([]);
      // UPDATE … SET id = 2 WHERE id = 1, the note unchanged; key 1 never had a row.
      expect(await deliver([ev(2, 'insert', { id: 2 }, { id: 2, amount: '2.00' }, { before: { id: 1 }, missing: ['note'] })])).toEqual([]);
      expect(errors).toEqual([]);
      expect(await deliver([ev(2, 'delete', { id: 1 }, null, { before: { id: 1 }, handover: ['note'] })])).toEqual([]);
      const t = warehouseTable(SOURCE, TABLE);
      const client = f.clients[0]!;
      // id is a bigint on Redshift: pg returns it as text.
      expect((await client.query(`SELECT id, note FROM ${rsQualified(t.schema, t.view)} ORDER BY id`)).rows).toEqual([{ id: '5', note: 'kept' }]);
      expect(Number((await client.query(`SELECT COUNT(*) AS n FROM ${rsQualified(t.schema, t.handover)}`)).rows[0].n)).toBe(0);
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatch(/^redshift loader: primary-key change in flight: its old key had no row before it/);
    } finally {
      await sink.stop();
    }
  }, 120_000);
});
