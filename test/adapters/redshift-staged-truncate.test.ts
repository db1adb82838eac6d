/**
 * Truncates and primary-key changes on the AWS path of the Redshift sink (docs/truncate.md; docs/primary-key-changes.md;
 * docs/warehouse-apply.md, "Redshift: the applier"): shard appliers (`createWarehouseApplier` with the
 * `RedshiftWarehouse` over a `RedshiftStagingSubmitter`) record load requests in the control table on DynamoDB Local,
 * and the loader function (`StagedRedshiftLoader`) loads them into the Redshift stand-in on embedded PostgreSQL, with
 * a folder as S3.
 *
 * - A truncate mid-stream, in both delete modes: rows before it (merged, and pending), the truncate (its load crashed
 *   once between the COPY and the COMMIT, then recovered), its batch delivered again, rows after it, and late older
 *   events below it; the view at every step, the base after the merge (soft: tombstones at the truncate; hard: rows
 *   and remembered deletions below it gone).
 * - A primary-key change whose insert half lacks an unchanged TOAST value, its two halves on two shards: the insert
 *   first is held in the handover table (its batch goes through), and the delete half's load completes it.
 */
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { numberedEvent } from '../helpers/numbered-event.ts';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbLoadRequests } from '../../lambda/adapters/control-plane-dynamodb/load-requests.ts';
import { StagedRedshiftLoader } from '../../lambda/adapters/redshift-staged-loader.ts';
import { RedshiftLoader } from '../../lambda/adapters/redshift-loader.ts';
import { RedshiftStagingSubmitter } from '../../lambda/adapters/redshift-staging-submitter.ts';
import { RedshiftWarehouse, redshiftTableOf } from '../../lambda/adapters/warehouse-redshift.ts';
import type { ChangeRecord } from '../../lambda/handlers/warehouse-applier.ts';
import type { ColumnDef, DeleteMode } from '../../lambda/core/shared/control-plane.ts';
import type { ChangeEvent, Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { createTableSql, rsQualified } from '../../lambda/core/warehouse/redshift-sql.ts';
import { warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { FolderArchive } from '../../local/archive.ts';
import { RedshiftStandIn } from '../../local/redshift-standin.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { quietApplier, registerTables } from '../helpers/registered-applier.ts';
import { useRedshiftFixture } from '../helpers/redshift-fixture.ts';
import { redshiftProblems } from '../helpers/redshift-grammar.ts';

const TABLE = 'public.items';
const BUCKET = 'staging';
const ROLE = 'arn:aws:iam::123456789012:role/cdc-copy';
const COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'note', type: 'text', nullable: true },
  { name: 'amount', type: 'numeric(10,2)', nullable: true },
];

/** Event `n` of TABLE (`numberedEvent`, position n × 0x100 + `sub`). */
const ev = (source: string, n: number, op: ChangeEvent['op'], key: Row, after: Row | null, o: Partial<ChangeEvent> = {}, sub = 0): ChangeEvent =>
  numberedEvent(TABLE, source, n, op, key, after, o, sub);

describe('the Redshift sink on AWS: truncates and primary-key hand-overs (DynamoDB Local, stand-in)', () => {
  const f = useRedshiftFixture({ database: 'rst', clients: 4, dynamo: true, utc: true });
  let pool: pg.Pool;
  let reader: pg.Client;
  beforeAll(() => void ([pool, reader] = [f.pool, f.clients[3]!]));

  /** A sink with its loader function (invoked in-process, one invocation at a time) and `shards` appliers. */
  async function sink(sinkId: string, source: string, mode: DeleteMode, shards: number) {
    const store = new FolderArchive(f.folder);
    const requests = new DynamoDbLoadRequests(dynamoDbClient(f.ddb.endpoint), 'control', sinkId);
    const memory = new MemoryControlPlane();
    const at = new Date().toISOString();
    await memory.registerTable(
      { source, table: TABLE, state: 'active', currentVersion: 1, deleteMode: mode, preImage: 'key', stateReason: null, updatedAt: at },
      { source, table: TABLE, version: 1, columns: COLUMNS, key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: at },
      { at, actor: 'test', action: 'register-table', source, table: TABLE, outcome: 'done', detail: {} },
    );
    const statements: string[] = [];
    const loaderStandIn = new RedshiftStandIn({ client: f.clients[0]!, store, bucket: BUCKET });
    /** Armed: the next load that inserts a truncate dies at its COMMIT (after the COPY and the INSERT, before the COMMIT). */
    const crash = { armed: false, hit: 0 };
    let queue: Promise<unknown> = Promise.resolve();
    /** One invocation of the loader function; `mergeEveryMs` 0 makes its merge due. */
    const invoke = (mergeEveryMs = 3_600_000): Promise<unknown> =>
      (queue = queue.then(async () => {
        // A dead invocation does nothing more: its claim stays until a later invocation finds it stale.
        let dead = false;
        let truncateInTransaction = false;
        const alive = (): void => {
          if (dead) throw new Error('the invocation is dead');
        };
        const loaderRequests = new Proxy(requests, {
          get(target, prop) {
            const v = Reflect.get(target, prop, target) as unknown;
            if (typeof v !== 'function') return v;
            return (...args: unknown[]) => {
              alive();
              return (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
            };
          },
        });
        const loader = new StagedRedshiftLoader({
          session: {
            query: async (q) => {
              alive();
              statements.push(q);
              if (q.startsWith('INSERT INTO') && q.includes('_cdc_truncations_')) truncateInTransaction = true;
              if (q === 'COMMIT' && crash.armed && truncateInTransaction) {
                crash.armed = false;
                crash.hit++;
                dead = true;
                throw new Error('injected: the loader died after the COPY, before the COMMIT');
              }
              if (q === 'COMMIT' || q === 'ROLLBACK') truncateInTransaction = false;
              return loaderStandIn.query(q);
            },
          },
          requests: loaderRequests,
          place: { store, bucket: BUCKET },
          prefix: `cdc/${sinkId}/`,
          roleArn: ROLE,
          ledgerSchema: `${sinkId}_loads`,
          cadence: { loadEveryMs: 20, mergeEveryMs },
          loaderTimeoutMs: 300,
        });
        await loader.invoke(200).catch(async () => {
          // The invocation died: its connection is gone, so is its transaction.
          await f.clients[0]!.query('ROLLBACK');
        });
      }));
    const appliers = Array.from({ length: shards }, (_, s) => {
      const session = new RedshiftStandIn({ client: f.clients[1 + s]!, store, bucket: BUCKET });
      const submitter = new RedshiftStagingSubmitter({
        session: { query: (q) => (statements.push(q), session.query(q)) },
        requests,
        place: { store, bucket: BUCKET },
        prefix: `cdc/${sinkId}/`,
        invokeLoader: async () => void invoke(),
        waitMs: 20_000,
        pollMs: 20,
      });
      return quietApplier(memory, pool, new RedshiftWarehouse({ loader: submitter }), sinkId);
    });
    let seq = 0;
    /** Delivers `events` as one batch to shard `s`; the records that failed (delivered again by the caller). */
    const deliver = async (s: number, events: readonly ChangeEvent[]): Promise<string[]> => {
      const records: ChangeRecord[] = events.map((e) => ({ sequenceNumber: String(++seq), origin: `s/shard-${s}/${seq}`, text: JSON.stringify(e) }));
      // A stale claim is recovered by a later invocation (the schedule's): one every 100 ms while the batch waits.
      let waiting = true;
      const ticker = (async () => {
        while (waiting) {
          await new Promise((r) => setTimeout(r, 100));
          if (waiting) await invoke();
        }
      })();
      const outcome = await appliers[s]!.applyRecords(records);
      waiting = false;
      await ticker;
      return outcome.failed;
    };
    const t = warehouseTable(source, TABLE);
    const view = async (): Promise<Record<number, { note: string | null; amount: string | null }>> => {
      const rows = (await reader.query(`SELECT id, note, amount FROM ${rsQualified(t.schema, t.view)} ORDER BY id`)).rows as {
        id: string;
        note: string | null;
        amount: string | null;
      }[];
      return Object.fromEntries(rows.map((r) => [Number(r.id), { note: r.note, amount: r.amount }]));
    };
    const rows = async (name: string, order = 'id'): Promise<Record<string, unknown>[]> =>
      (await reader.query(`SELECT * FROM ${rsQualified(t.schema, name)} ORDER BY ${order}`)).rows as Record<string, unknown>[];
    return { deliver, invoke, view, rows, crash, memory, statements, t };
  }

  for (const mode of ['soft', 'hard'] as const) {
    it(`a truncate mid-stream (${mode} mode): crashed between staging and load, delivered again, late older events below it stay out`, async () => {
      const src = `tr${mode}`;
      const { deliver, invoke, view, rows, crash, memory, statements, t } = await sink(`trunc_${mode}`, src, mode, 1);
      const row = (id: number, n: number): Row => ({ id, note: `n${n}`, amount: `${n}.00` });
      // Rows before the truncate: merged ...
      expect(
        await deliver(
          0,
          [1, 2, 3, 4].map((id) => ev(src, id, 'insert', { id }, row(id, id))),
        ),
      ).toEqual([]);
      expect(await deliver(0, [ev(src, 5, 'update', { id: 2 }, row(2, 5)), ev(src, 6, 'delete', { id: 4 }, null)])).toEqual([]);
      await invoke(0);
      // ... and pending when the truncate comes.
      expect(await deliver(0, [ev(src, 7, 'insert', { id: 5 }, row(5, 7)), ev(src, 8, 'update', { id: 3 }, row(3, 8))])).toEqual([]);
      expect(Object.keys(await view())).toEqual(['1', '2', '3', '5']);

      // The truncate: its first load dies between the COPY and the COMMIT; the claim is recovered and loaded.
      const truncate = ev(src, 9, 'truncate', {}, null);
      crash.armed = true;
      expect(await deliver(0, [truncate])).toEqual([]);
      expect(crash.hit, 'the crash was injected').toBe(1);
      expect(await view()).toEqual({});
      // Its batch delivered again (the checkpoint was lost): a second row of the truncations, nothing changes.
      expect(await deliver(0, [truncate])).toEqual([]);
      expect(await rows(t.truncations, '_cdc_load')).toHaveLength(2);
      expect(await view()).toEqual({});

      // After it: new rows show; late older events below it (another shard's, or a redelivery) stay out.
      expect(await deliver(0, [ev(src, 10, 'insert', { id: 1 }, row(1, 10)), ev(src, 11, 'insert', { id: 6 }, row(6, 11))])).toEqual([]);
      expect(await deliver(0, [ev(src, 8, 'update', { id: 3 }, row(3, 80), {}, 0x80), ev(src, 2, 'insert', { id: 7 }, row(7, 2), {}, 0x80)])).toEqual([]);
      const after = { 1: { note: 'n10', amount: '10.00' }, 6: { note: 'n11', amount: '11.00' } };
      expect(await view()).toEqual(after);

      // The merge empties the base at the truncate and lets nothing at or below it in.
      await invoke(0);
      expect(await view()).toEqual(after);
      const base = await rows(t.mirror);
      const truncatePosition = truncate.position;
      if (mode === 'soft') {
        const live = base.filter((r) => !r._cdc_deleted).map((r) => Number(r.id));
        expect(live).toEqual([1, 6]);
        const tombstones = base.filter((r) => r._cdc_deleted);
        // Key 5 was still pending at the truncate: it never reaches the base.
        expect(tombstones.map((r) => Number(r.id))).toEqual([2, 3, 4]);
        // Every row live before the truncate is a tombstone at it; the one deleted before keeps its own.
        for (const r of tombstones.filter((x) => Number(x.id) !== 4)) {
          expect(r._cdc_position).toBe(truncatePosition);
          expect((r._cdc_deleted_at as Date).toISOString()).toBe(truncate.commitTs);
        }
        expect(tombstones.find((x) => Number(x.id) === 4)!._cdc_position).toBe(makePosition(6n * 0x100n, 0));
      } else {
        expect(base.map((r) => Number(r.id))).toEqual([1, 6]);
        expect(await rows(t.deletedKeys), 'remembered deletions below the truncate go with it').toEqual([]);
      }
      // Another late event below it after the merge, then a merge: still out.
      expect(await deliver(0, [ev(src, 3, 'insert', { id: 8 }, row(8, 3), {}, 0x80)])).toEqual([]);
      await invoke(0);
      expect(await view()).toEqual(after);
      expect(memory.calls.get('putDeadLetter') ?? 0).toBe(0);
      expect(memory.calls.get('holdSinkTable') ?? 0).toBe(0);
      const problems = [...new Set(statements)].flatMap((s) => redshiftProblems(s).map((p) => `${p}: ${s.slice(0, 160)}`));
      expect(problems).toEqual([]);
    }, 120_000);
  }

  it('in one process, a table made before truncates were loaded gets its guard at first sight, and a truncate then loads', async () => {
    const src = 'old';
    const store = new FolderArchive(f.folder);
    const session = new RedshiftStandIn({ client: f.clients[0]!, store, bucket: BUCKET });
    const version = { source: src, table: TABLE, version: 1, columns: COLUMNS, key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: '' };
    const r = redshiftTableOf(warehouseTable(src, TABLE), version, false);
    const { t } = r;
    // The table as an earlier version made it: no truncations, a view that does not read them.
    for (const q of createTableSql(r)) await session.query(q);
    await session.query(`DROP VIEW ${rsQualified(t.schema, t.view)}`);
    await session.query(`DROP TABLE ${rsQualified(t.schema, t.truncations)}`);
    await session.query(`CREATE VIEW ${rsQualified(t.schema, t.view)} AS SELECT id, note, amount FROM ${rsQualified(t.schema, t.mirror)}`);
    const loader = new RedshiftLoader({ session, store, bucket: BUCKET, prefix: 'cdc/old/', roleArn: ROLE, ledgerSchema: 'old_loads' });
    const memory = new MemoryControlPlane();
    await registerTables(memory, src, [TABLE], COLUMNS);
    const applier = quietApplier(memory, pool, new RedshiftWarehouse({ loader }));
    const records = [
      ev(src, 1, 'insert', { id: 1 }, { id: 1, note: 'a', amount: '1.00' }),
      ev(src, 2, 'truncate', {}, null),
      ev(src, 3, 'insert', { id: 2 }, { id: 2, note: 'b', amount: '2.00' }),
    ].map((e, i): ChangeRecord => ({ sequenceNumber: String(i + 1), origin: `s/shard-0/${i + 1}`, text: JSON.stringify(e) }));
    const applied = applier.applyRecords(records);
    let done = false;
    void applied.finally(() => (done = true));
    while (!done) {
      await loader.flush();
      await new Promise((res) => setTimeout(res, 5));
    }
    expect((await applied).failed).toEqual([]);
    const view = async (): Promise<number[]> =>
      ((await reader.query(`SELECT id FROM ${rsQualified(t.schema, t.view)} ORDER BY id`)).rows as { id: string }[]).map((x) => Number(x.id));
    expect(await view()).toEqual([2]);
    await loader.merge();
    expect(await view()).toEqual([2]);
    expect(memory.calls.get('holdSinkTable') ?? 0).toBe(0);
  }, 60_000);

  it('a primary-key change lacking an unchanged TOAST value, its halves on two shards: the insert is held, then loaded complete with the delete', async () => {
    const src = 'pk';
    const { deliver, view, rows, memory, statements, t } = await sink('pk_change', src, 'soft', 2);
    const toast = `t${'x'.repeat(30_000)}`;
    const handover = async (): Promise<number> => (await rows(t.handover, '_cdc_position')).length;
    // Shard 0 owns key 1, shard 1 key 2.
    expect(await deliver(0, [ev(src, 1, 'insert', { id: 1 }, { id: 1, note: toast, amount: '1.00' })])).toEqual([]);
    // UPDATE … SET id = 2, amount = 2.00 WHERE id = 1: the note is not logged (unchanged TOAST value).
    const del = ev(src, 2, 'delete', { id: 1 }, null, { before: { id: 1 }, handover: ['note'] });
    const ins = ev(src, 2, 'insert', { id: 2 }, { id: 2, amount: '2.00' }, { before: { id: 1 }, missing: ['note'] });
    // The insert half first: its old key's delete half is not loaded yet, so it is held (the batch goes through), not shown.
    expect(await deliver(1, [ins])).toEqual([]);
    expect(await view()).toEqual({ 1: { note: toast, amount: '1.00' } });
    expect(await handover()).toBe(1);
    // Delivered again while held (a lost checkpoint): held twice, completed once.
    expect(await deliver(1, [ins])).toEqual([]);
    expect(await handover()).toBe(2);
    // The delete half's load completes it, with the old key's note, and empties the handover table in the same COMMIT.
    expect(await deliver(0, [del])).toEqual([]);
    expect(await view()).toEqual({ 2: { note: toast, amount: '2.00' } });
    expect(await handover()).toBe(0);
    expect((await rows(t.changelog, '_cdc_position')).filter((r) => Number(r.id) === 2)).toHaveLength(1);
    // Delivered once more (a lost checkpoint): completed from the changelog, the same row.
    expect(await deliver(1, [ins])).toEqual([]);
    expect(await view()).toEqual({ 2: { note: toast, amount: '2.00' } });
    // A held insert half whose old key never had a row: dropped when its delete half is loaded (logged), nothing shown.
    expect(await deliver(1, [ev(src, 3, 'insert', { id: 12 }, { id: 12, amount: '3.00' }, { before: { id: 11 }, missing: ['note'] })])).toEqual([]);
    expect(await handover()).toBe(1);
    expect(await deliver(0, [ev(src, 3, 'delete', { id: 11 }, null, { before: { id: 11 }, handover: ['note'] })])).toEqual([]);
    expect(await handover()).toBe(0);
    expect(await view()).toEqual({ 2: { note: toast, amount: '2.00' } });
    // An insert half whose old key never had a row cannot be completed: a dead letter that says why, the table goes on.
    expect(await deliver(0, [ev(src, 3, 'delete', { id: 9 }, null, { before: { id: 9 }, handover: ['note'] })])).toEqual([]);
    expect(await deliver(1, [ev(src, 3, 'insert', { id: 10 }, { id: 10, amount: '3.00' }, { before: { id: 9 }, missing: ['note'] })])).toEqual([]);
    expect(memory.calls.get('putDeadLetter')).toBe(1);
    expect(memory.calls.get('holdSinkTable') ?? 0).toBe(0);
    expect(await view()).toEqual({ 2: { note: toast, amount: '2.00' } });
    // The reads that completed it are Redshift's grammar.
    expect(statements.some((s) => s.includes('row_number()') && s.includes('_cdc_changelog_'))).toBe(true);
    const problems = [...new Set(statements)].flatMap((s) => redshiftProblems(s).map((p) => `${p}: ${s.slice(0, 160)}`));
    expect(problems).toEqual([]);
  }, 120_000);
});
