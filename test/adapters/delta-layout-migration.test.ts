/**
 * The move from the layout before one write per event (a delta TABLE the appends went to, a
 * changelog without append order) to the changelog-with-watermark layout (docs/warehouse-apply.md,
 * "The layout before one write per event"), through the real applier into embedded PostgreSQL: a
 * warehouse left by the old layout, with merged history, unmerged delta rows (a redelivered one
 * among them) and soft-deleted keys, keeps showing the same rows, and after the next batch and a
 * merge its base and changelog are exactly what the new layout would have made.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { createWarehouseApplier } from '../../lambda/handlers/warehouse-applier.ts';
import type { ColumnDef } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { toDeltaTableLayout } from '../helpers/delta-table-layout.ts';

const COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'v', type: 'text', nullable: true },
];
const TABLE = 'public.m';

let cluster: PostgresCluster;
beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  cluster = await startPostgres({ fast: true });
}, 120_000);
afterAll(async () => cluster?.stop());

describe('the delta-table layout moves to the changelog with a watermark', () => {
  for (const mode of ['soft', 'hard'] as const) {
    it(`${mode} delete: the view shows the same rows before and after the move, and the base and changelog end exact`, async () => {
      await cluster.createDatabase(`mig${mode}`);
      const pool = new pg.Pool({ connectionString: cluster.url(`mig${mode}`), max: 3 });
      pool.on('error', () => undefined);
      try {
        const cp = new MemoryControlPlane();
        const at = new Date().toISOString();
        await cp.registerTable(
          { source: 'demo', table: TABLE, state: 'active', currentVersion: 1, deleteMode: mode, preImage: 'key', stateReason: null, updatedAt: at },
          { source: 'demo', table: TABLE, version: 1, columns: COLUMNS, key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: at },
          { at, actor: 'test', action: 'register-table', source: 'demo', table: TABLE, outcome: 'done', detail: {} },
        );
        const applier = () =>
          createWarehouseApplier({
            controlPlane: cp,
            pool,
            sinkId: 'wh',
            metrics: new Metrics({ namespace: 'test' }),
            logger: new Logger({ logLevel: 'SILENT' }),
            merge: { inline: false },
          });
        let p = 0;
        let seq = 0;
        const delivered: ChangeEvent[] = [];
        const ev = (op: 'insert' | 'update' | 'delete', id: number, v: string | null): ChangeEvent => {
          p++;
          const e: ChangeEvent = {
            v: ENVELOPE_VERSION,
            source: 'demo',
            table: TABLE,
            op,
            key: { id },
            after: op === 'delete' ? null : ({ id, v } as Row),
            before: null,
            missing: [],
            position: makePosition(BigInt(p) * 0x100n, 0),
            commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, p)).toISOString(),
            txId: String(p),
            schemaVersion: 1,
            capture: 'slot',
            synthetic: false,
          };
          delivered.push(e);
          return e;
        };
        const apply = async (a: ReturnType<typeof applier>, events: ChangeEvent[]) => {
          const out = await a.applyRecords(events.map((e) => ({ sequenceNumber: String(++seq), origin: `log/shard-0/${seq}`, text: JSON.stringify(e) })));
          expect(out.failed).toEqual([]);
        };
        const t = warehouseTable('demo', TABLE);
        const q = (n: string) => qualified(t.schema, n);
        const view = async () => (await pool.query(`SELECT id::int AS id, v, _cdc_position FROM ${q(t.view)} ORDER BY id`)).rows;

        // A history, part merged, part not.
        const old = applier();
        await apply(old, [ev('insert', 1, 'a'), ev('insert', 2, 'b'), ev('insert', 3, 'c'), ev('insert', 4, 'd')]);
        await old.mergeDue({ force: true });
        const merged = delivered[1]!;
        const pending = [ev('update', 2, 'b2'), ev('delete', 3, null), ev('insert', 5, 'e')];
        await apply(old, pending);
        const before = await view();
        expect(before.map((r) => r.id)).toEqual([1, 2, 4, 5]);

        // Made into the old layout: the unmerged events in a delta TABLE, not in the changelog, which
        // has no append order; one of them delivered twice, and a merged event delivered again.
        await toDeltaTableLayout(pool, t, ['id'], mode === 'hard');
        await pool.query(`INSERT INTO ${q(t.delta)} SELECT * FROM ${q(t.delta)} WHERE id = 2`);
        await pool.query(`INSERT INTO ${q(t.delta)} SELECT * FROM ${q(t.changelog)} WHERE "_cdc_position" = $1`, [merged.position]);
        expect(await view(), 'the old layout shows the same rows').toEqual(before);
        expect((await pool.query(`SELECT count(*)::int AS n FROM ${q(t.delta)}`)).rows[0].n).toBe(5);

        // A new process's first batch moves it; the view never changes but for the batch.
        const next = applier();
        await apply(next, [ev('insert', 6, 'f')]);
        const kinds = (
          await pool.query(
            `SELECT c.relname, c.relkind::text AS k FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = ANY($2)`,
            [t.schema, [t.delta, t.watermark, t.appendOrder]],
          )
        ).rows;
        expect(Object.fromEntries(kinds.map((r) => [r.relname, r.k]))).toEqual({ [t.delta]: 'v', [t.watermark]: 'r', [t.appendOrder]: 'i' });
        const after = await view();
        expect(after.filter((r) => r.id !== 6)).toEqual(before);
        expect(after.map((r) => r.id)).toEqual([1, 2, 4, 5, 6]);

        await next.mergeDue({ force: true });
        expect(await view(), 'after the merge').toEqual(after);
        const mirror = (await pool.query(`SELECT id::int AS id, v, _cdc_deleted FROM ${q(t.mirror)} ORDER BY id`)).rows;
        const live = [1, 2, 4, 5, 6].map((id) => ({ id, v: { 1: 'a', 2: 'b2', 4: 'd', 5: 'e', 6: 'f' }[id], _cdc_deleted: false }));
        expect(mirror).toEqual(mode === 'soft' ? [...live.slice(0, 2), { id: 3, v: 'c', _cdc_deleted: true }, ...live.slice(2)] : live);
        // Every delivered event exactly once in the changelog.
        const changelog = (await pool.query(`SELECT "_cdc_position" AS p, "_cdc_op" AS op, id::int AS id FROM ${q(t.changelog)} ORDER BY 1`)).rows;
        expect(changelog).toEqual(delivered.map((e) => ({ p: e.position, op: e.op, id: e.key.id })));
        expect((await pool.query(`SELECT count(*)::int AS n FROM ${q(t.delta)}`)).rows[0].n).toBe(0);
      } finally {
        await pool.end();
      }
    }, 120_000);
  }
});
