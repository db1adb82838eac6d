/**
 * A batch of several tables on Redshift (docs/warehouse-apply.md, "Redshift: the applier"): the
 * writer prepares the tables one after another and hands them to the loader together
 * (`RedshiftWarehouse.applyTables`), so the batch waits for ONE load, not one per table; a table
 * whose value the column's policy refuses has that as its own outcome (the apply isolates it and
 * dead-letters the event) while the other tables load. Through the Redshift stand-in on embedded
 * PostgreSQL, a folder as S3, the in-process loader.
 */
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { RedshiftLoader } from '../../lambda/adapters/redshift-loader.ts';
import { RedshiftWarehouse } from '../../lambda/adapters/warehouse-redshift.ts';
import type { ChangeRecord } from '../../lambda/handlers/warehouse-applier.ts';
import type { ColumnDef } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { LEDGER_TABLE, rsQualified } from '../../lambda/core/warehouse/redshift-sql.ts';
import { warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { FolderArchive } from '../../local/archive.ts';
import { RedshiftStandIn } from '../../local/redshift-standin.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { useRedshiftFixture } from '../helpers/redshift-fixture.ts';
import { applyWhileLoading, quietApplier, registerTables } from '../helpers/registered-applier.ts';

const TABLES = ['public.a', 'public.b', 'public.c'];
const COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'code', type: 'varchar(4)', nullable: true },
];

describe('a batch of several tables on Redshift', () => {
  const f = useRedshiftFixture({ database: 'rsb', clients: 1 });
  let client: pg.Client;
  let pool: pg.Pool;
  let folder: string;
  beforeAll(() => void ([client, pool, folder] = [f.clients[0]!, f.pool, f.folder]));

  /** Applies one batch of `events` through the applier over a fresh loader; the loads it took and the dead letters it wrote. */
  async function applyOneBatch(sourceId: string, events: ChangeEvent[]): Promise<{ loads: number; deadLetters: number; failed: string[] }> {
    const store = new FolderArchive(folder);
    const standIn = new RedshiftStandIn({ client, store, bucket: 'staging' });
    const ledgerSchema = `${sourceId}_loads`;
    const loader = new RedshiftLoader({
      session: { query: (q) => standIn.query(q) },
      store,
      bucket: 'staging',
      prefix: `cdc/${sourceId}/`,
      roleArn: 'arn:aws:iam::123456789012:role/cdc-copy',
      ledgerSchema,
    });
    const memory = new MemoryControlPlane();
    await registerTables(memory, sourceId, TABLES, COLUMNS);
    const applier = quietApplier(memory, pool, new RedshiftWarehouse({ loader }));
    const records: ChangeRecord[] = events.map((e, i) => ({ sequenceNumber: String(1000 + i), origin: `s/shard-0/${1000 + i}`, text: JSON.stringify(e) }));
    // The loader's cadence, squeezed: a load whenever anything is queued, until the batch's apply returns.
    const outcome = await applyWhileLoading(applier, records, () => loader.flush());
    const loads = Number((await client.query(`SELECT count(*) AS n FROM ${rsQualified(ledgerSchema, LEDGER_TABLE)}`)).rows[0].n);
    return { loads, deadLetters: (await memory.listDeadLetters()).length, failed: outcome.failed };
  }

  const event = (sourceId: string, table: string, id: number, code: string): ChangeEvent => ({
    v: ENVELOPE_VERSION,
    source: sourceId,
    table,
    op: 'insert',
    key: { id },
    before: null,
    after: { id, code },
    missing: [],
    position: makePosition(BigInt(id) * 0x100n, 0),
    commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, id)).toISOString(),
    txId: String(id),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  });

  const codes = async (sourceId: string, table: string): Promise<string[]> => {
    const t = warehouseTable(sourceId, table);
    return (await client.query(`SELECT code FROM ${rsQualified(t.schema, t.view)} ORDER BY id`)).rows.map((r: { code: string }) => r.code);
  };

  it('waits for one load for the whole batch, not one per table', async () => {
    const events = TABLES.flatMap((table, n) => [event('s1', table, 10 * n + 1, `${n}a`), event('s1', table, 10 * n + 2, `${n}b`)]);
    const r = await applyOneBatch('s1', events);
    expect(r.failed).toEqual([]);
    expect(r.loads, 'one load carried the three tables').toBe(1);
    for (const [n, table] of TABLES.entries()) expect(await codes('s1', table)).toEqual([`${n}a`, `${n}b`]);
  }, 120_000);

  it('a refused value is its own table outcome: that event is dead-lettered, the other tables load', async () => {
    // varchar(4) holds at most 16 bytes on Redshift (docs/warehouse-apply.md, "Redshift: types and values it cannot hold").
    const events = [event('s2', 'public.a', 1, 'ok'), event('s2', 'public.b', 2, 'x'.repeat(40)), event('s2', 'public.c', 3, 'ok')];
    const r = await applyOneBatch('s2', events);
    expect(r.failed).toEqual([]);
    expect(r.deadLetters).toBe(1);
    expect(await codes('s2', 'public.a')).toEqual(['ok']);
    expect(await codes('s2', 'public.c')).toEqual(['ok']);
  }, 120_000);
});
