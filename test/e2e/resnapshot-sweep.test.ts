/**
 * A re-snapshot after a gap removes the keys deleted while history was lost (docs/snapshot.md,
 * "Re-snapshot"), on real parts: a real source (embedded PostgreSQL) read by the built-in slot
 * capture, the snapshot worker with the PostgreSQL reader, the normalizer, and the warehouse
 * applier into a second embedded database (see `slot-pipeline.ts`; the control plane is the
 * in-memory double of the port, the Kinesis hops are in-process hand-offs).
 *
 * The gap: changes made while history was lost (deletes, an update, an insert) never reach the
 * sink. The table is marked `needs-resnapshot` and re-snapshotted while a live workload runs
 * between chunks: a key deleted in the gap is inserted again after the run started, a key in an
 * already-read range is deleted, keys beyond the cursor are inserted and updated. Before the
 * sweep is applied the sink still serves the keys deleted in the gap (the defect); after it the
 * sink equals the source row by row, whichever shard applies first, and late redeliveries of
 * pre-gap events resurrect nothing.
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import type { TableConfig } from '../../lambda/core/tables/table-config.ts';
import { NO_COLUMN_RULES } from '../../lambda/core/tables/masking.ts';
import { PostgresSnapshotReader } from '../../lambda/adapters/snapshot-postgres.ts';
import { snapshotStreamRecords, sweepPosition } from '../../lambda/core/snapshot/snapshot.ts';
import { FixedPacer } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import { requestSnapshot, runTableSnapshot, type SnapshotReader } from '../../lambda/core/snapshot/snapshot-worker.ts';
import { slotPipeline } from './slot-pipeline.ts';

let cluster: PostgresCluster;

beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  cluster = await startPostgres({ fast: true });
}, 120_000);

afterAll(async () => {
  await cluster?.stop();
});

const sha = (s: string) => createHash('sha256').update(s).digest('hex');

describe('re-snapshot after a gap, into the warehouse', () => {
  for (const mode of ['soft', 'hard'] as const) {
    it(`${mode} delete: keys deleted during the gap are removed by the re-snapshot's sweep; live changes during the run survive`, async () => {
      const tables: TableConfig[] = [{ table: 'public.t', deleteMode: mode, mask: [], exclude: [] }];
      const p = await slotPipeline(cluster, 'CREATE TABLE t (id int PRIMARY KEY, v text)', tables, 'resnap');
      const reader = new PostgresSnapshotReader({ primary: { connectionString: cluster.url(p.id) }, fencePollMs: 5 });
      try {
        await p.src.query("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 60) g");
        const preGap = await p.drain();
        await p.apply(preGap);

        // The gap: these changes are lost (drained and dropped, as a lost slot drops them).
        await p.src.query("DELETE FROM t WHERE id IN (5, 17, 33, 60); UPDATE t SET v = 'gap' WHERE id = 2; INSERT INTO t VALUES (61, 'gap insert')");
        await p.drain();
        await p.controlPlane.setTableState(p.id, 'public.t', 'needs-resnapshot', 'HISTORY_GAP: test', {
          at: new Date().toISOString(),
          actor: 'test',
          action: 'needs-resnapshot',
          source: p.id,
          table: 'public.t',
          outcome: 'done',
          detail: {},
        });

        // The re-snapshot, with live changes between its chunks.
        expect((await requestSnapshot(p.controlPlane, { source: p.id, table: 'public.t', reason: 'resnapshot', actor: 'operator:test' })).outcome).toBe(
          'requested',
        );
        const live = [
          "INSERT INTO t VALUES (5, 'back after the run started')",
          "DELETE FROM t WHERE id = 3; UPDATE t SET v = 'live' WHERE id = 40",
          "INSERT INTO t VALUES (100, 'beyond the cursor'); UPDATE t SET v = 'live 2' WHERE id = 59",
          'DELETE FROM t WHERE id = 61',
        ];
        let reads = 0;
        const withWorkload: SnapshotReader = {
          describe: (t) => reader.describe(t),
          estimateRows: (t) => reader.estimateRows(t),
          readChunk: async (shape, after, limit) => {
            const read = await reader.readChunk(shape, after, limit);
            const change = live[reads++];
            if (change) await p.src.query(change);
            return read;
          },
        };
        const outcome = await runTableSnapshot({
          controlPlane: p.controlPlane,
          reader: withWorkload,
          publish: async (records) => p.publishRaw(snapshotStreamRecords(records, sha)),
          pacer: new FixedPacer(15),
          source: p.id,
          table: 'public.t',
          rules: NO_COLUMN_RULES,
          owner: 'test',
        });
        expect(outcome).toBe('done');
        const run = (await p.controlPlane.getSnapshot(p.id, 'public.t'))!;
        expect((await p.controlPlane.getTable(p.id, 'public.t'))!.state).toBe('active');

        const events = await p.drain();
        const sweep = events.filter((e) => e.op === 'truncate');
        expect(sweep).toHaveLength(1);
        expect(sweep[0]).toMatchObject({ capture: 'snapshot', txId: null, position: sweepPosition(run.firstLowWatermark!) });
        const snapshotted = events.filter((e) => e.capture === 'snapshot' && e.op !== 'truncate');
        const streamed = events.filter((e) => e.capture !== 'snapshot');
        expect(snapshotted.length).toBeGreaterThan(50);
        expect(streamed.length).toBeGreaterThan(0);
        // Every chunk row sorts above the sweep, every pre-gap event below it.
        expect(snapshotted.every((e) => e.position > sweep[0]!.position)).toBe(true);
        expect(preGap.every((e) => e.position < sweep[0]!.position)).toBe(true);

        const source = async () => (await p.src.query<{ id: number; v: string }>('SELECT id, v FROM t ORDER BY id')).rows;
        const sink = async () => p.rows(`SELECT id::int AS id, v FROM ${p.id}_public.t ORDER BY id`);

        // Chunk rows first (another shard), then the live events: the keys deleted in the gap are still served.
        await p.apply(snapshotted, 1);
        await p.apply(streamed, 0);
        const stale = (await sink()).map((r) => r.id as number).filter((id) => [17, 33, 60].includes(id));
        expect(stale, 'without the sweep the gap deletes stay in the sink').toEqual([17, 33, 60]);

        // The sweep: now the sink is the source, row by row.
        await p.apply(sweep, 1);
        expect(await sink()).toEqual(await source());
        if (mode === 'soft') {
          const tomb = await p.rows(
            `SELECT id::int AS id, _cdc_position AS pos FROM ${p.id}_public._cdc_mirror_t WHERE _cdc_deleted AND id IN (17, 33, 60) ORDER BY id`,
          );
          expect(tomb).toEqual([17, 33, 60].map((id) => ({ id, pos: sweep[0]!.position })));
        }

        // Late redeliveries (the pre-gap load, the chunk rows, the sweep again) change nothing,
        // through either applier: the one that cached the table's shape before the sweep has the
        // truncate guard too (it is created with the table, docs/truncate.md).
        await p.apply(preGap.slice(0, 30), 0);
        await p.apply([...sweep, ...preGap.slice(30), ...snapshotted.slice(0, 10)], 1);
        await p.apply(preGap.slice(30), 0);
        expect(await sink()).toEqual(await source());
      } finally {
        await reader.close();
        await p.close();
      }
    }, 180_000);
  }

  it('the sweep arriving before the chunk rows and the live events (another shard first) ends the same', async () => {
    const tables: TableConfig[] = [{ table: 'public.t', deleteMode: 'soft', mask: [], exclude: [] }];
    const p = await slotPipeline(cluster, 'CREATE TABLE t (id int PRIMARY KEY, v text)', tables, 'resnapfirst');
    const reader = new PostgresSnapshotReader({ primary: { connectionString: cluster.url(p.id) }, fencePollMs: 5 });
    try {
      await p.src.query("INSERT INTO t SELECT g, 'v' || g FROM generate_series(1, 30) g");
      await p.apply(await p.drain());
      await p.src.query('DELETE FROM t WHERE id IN (4, 25)');
      await p.drain();
      await p.controlPlane.setTableState(p.id, 'public.t', 'needs-resnapshot', 'HISTORY_GAP: test', {
        at: new Date().toISOString(),
        actor: 'test',
        action: 'needs-resnapshot',
        source: p.id,
        table: 'public.t',
        outcome: 'done',
        detail: {},
      });
      await requestSnapshot(p.controlPlane, { source: p.id, table: 'public.t', reason: 'resnapshot', actor: 'operator:test' });
      let reads = 0;
      const outcome = await runTableSnapshot({
        controlPlane: p.controlPlane,
        reader: {
          describe: (t) => reader.describe(t),
          estimateRows: (t) => reader.estimateRows(t),
          readChunk: async (shape, after, limit) => {
            const read = await reader.readChunk(shape, after, limit);
            if (reads++ === 0) await p.src.query("INSERT INTO t VALUES (4, 'again'); DELETE FROM t WHERE id = 1");
            return read;
          },
        },
        publish: async (records) => p.publishRaw(snapshotStreamRecords(records, sha)),
        pacer: new FixedPacer(8),
        source: p.id,
        table: 'public.t',
        rules: NO_COLUMN_RULES,
        owner: 'test',
      });
      expect(outcome).toBe('done');
      const events = await p.drain();
      const sweep = events.filter((e) => e.op === 'truncate');
      await p.apply(sweep, 1);
      await p.apply(events.filter((e) => e.op !== 'truncate').reverse(), 0);
      expect(await p.rows(`SELECT id::int AS id, v FROM ${p.id}_public.t ORDER BY id`)).toEqual((await p.src.query('SELECT id, v FROM t ORDER BY id')).rows);
    } finally {
      await reader.close();
      await p.close();
    }
  }, 180_000);
});
