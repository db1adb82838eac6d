/**
 * The PostgreSQL dialect's native types through the real warehouse applier into embedded
 * PostgreSQL (docs/warehouse-apply.md, "Dialects"): a text of 1 MB, a JSON document of 1 MB and a
 * bytea of 1 MB arrive intact, through the append (COPY) and through the full apply, before and
 * after the merge; values are compared by their type in SQL, not by their look.
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
import { createOverlayViewSql, createPendingViewSql, qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

const SINK = 'wh';
const COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 't', type: 'text', nullable: true },
  { name: 'j', type: 'jsonb', nullable: true },
  { name: 'js', type: 'json', nullable: true },
  { name: 'b', type: 'bytea', nullable: true },
  { name: 'u', type: 'uuid', nullable: true },
  { name: 'n', type: 'numeric', nullable: true },
  { name: 'a', type: 'integer[]', nullable: true },
];
const MB = 1 << 20;

let cluster: PostgresCluster;
beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  cluster = await startPostgres({ fast: true });
}, 120_000);
afterAll(async () => cluster?.stop());

/** A deterministic 1 MB text of mixed characters (backslashes, tabs, newlines, two-byte characters). */
function bigText(seed: number): string {
  const parts = ['abc', '\\', '\t', '\n', 'é', '"', "'", 'NULL', ' '];
  let s = '';
  let x = seed;
  while (s.length < MB) {
    x = (x * 1103515245 + 12345) & 0x7fffffff;
    s += parts[x % parts.length];
  }
  return s.slice(0, MB);
}

describe('native PostgreSQL types', () => {
  it('a text, a JSON document and a bytea of 1 MB each arrive intact (append, full apply, merge)', async () => {
    await cluster.createDatabase('types1');
    const pool = new pg.Pool({ connectionString: cluster.url('types1'), max: 3 });
    pool.on('error', () => undefined);
    try {
      const cp = new MemoryControlPlane();
      const at = new Date().toISOString();
      const table = 'public.big';
      await cp.registerTable(
        { source: 'demo', table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
        { source: 'demo', table, version: 1, columns: COLUMNS, key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: at },
        { at, actor: 'test', action: 'register-table', source: 'demo', table, outcome: 'done', detail: {} },
      );
      const applier = createWarehouseApplier({
        controlPlane: cp,
        pool,
        sinkId: SINK,
        metrics: new Metrics({ namespace: 'test' }),
        logger: new Logger({ logLevel: 'SILENT' }),
        merge: { maxRows: 1_000_000 },
      });
      let p = 0;
      let seq = 0;
      const ev = (op: 'insert' | 'update', key: Row, after: Row, missing: string[] = []): ChangeEvent => {
        p++;
        return {
          v: ENVELOPE_VERSION,
          source: 'demo',
          table,
          op,
          key,
          after,
          before: null,
          missing,
          position: makePosition(BigInt(p) * 0x100n, 0),
          commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, p)).toISOString(),
          txId: String(p),
          schemaVersion: 1,
          capture: 'slot',
          synthetic: false,
        };
      };
      const apply = async (events: ChangeEvent[]) => {
        const out = await applier.applyRecords(events.map((e) => ({ sequenceNumber: String(++seq), origin: `log/shard-0/${seq}`, text: JSON.stringify(e) })));
        expect(out.failed, 'failed records').toEqual([]);
        expect(out.deadLettered, 'dead letters').toBe(0);
      };
      const values = (id: number) => {
        const text = bigText(id);
        const json = JSON.stringify({ id, doc: bigText(id + 7).slice(0, MB - 40) });
        const bytes = Buffer.from(bigText(id + 3).slice(0, MB), 'latin1');
        return {
          id,
          t: text,
          j: json,
          js: ` ${json}`,
          b: `\\x${bytes.toString('hex')}`,
          u: '00000000-0000-0000-0000-00000000000' + String(id),
          n: '123456789012345678901234567890123456789012.5',
          a: '{1,NULL,3}',
        };
      };
      const v = values(1);
      const w = values(2);
      await apply([ev('insert', { id: 1 }, v)]); // append (COPY)
      await apply([ev('insert', { id: 2 }, { ...w, t: 'old' }), ev('update', { id: 2 }, { id: 2, t: w.t }, ['j', 'js', 'b', 'u', 'n', 'a'])]); // an update lacking columns: the full apply
      const t = warehouseTable('demo', table);
      const check = async (id: number, want: ReturnType<typeof values>, when: string) => {
        const r = (
          await pool.query(
            `SELECT t = $2 AS t, j = CAST($3 AS jsonb) AS j, js::text = $4 AS js, b = CAST($5 AS bytea) AS b, length(b) AS blen, u = CAST($6 AS uuid) AS u, n = CAST($7 AS numeric) AS n, a = CAST($8 AS bigint[]) AS a ` +
              `FROM ${qualified(t.schema, t.view)} WHERE id = $1`,
            [id, want.t, want.j, want.js, want.b, want.u, want.n, want.a],
          )
        ).rows[0];
        expect(r, `${when}: row ${id}`).toEqual({ t: true, j: true, js: true, b: true, blen: MB, u: true, n: true, a: true });
      };
      await check(1, v, 'before the merge');
      await check(2, w, 'before the merge');
      const types = (
        await pool.query(
          `SELECT column_name, data_type FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`,
          [t.schema, t.mirror],
        )
      ).rows;
      expect(Object.fromEntries(types.map((r) => [r.column_name, r.data_type]))).toMatchObject({
        id: 'bigint',
        t: 'text',
        j: 'jsonb',
        js: 'json',
        b: 'bytea',
        u: 'uuid',
        n: 'numeric',
        a: 'ARRAY',
      });
      await applier.mergeDue({ force: true });
      await check(1, v, 'after the merge');
      await check(2, w, 'after the merge');
    } finally {
      await pool.end();
    }
  }, 120_000);

  it('a column an earlier version made as varchar(65535) is widened to text at the next apply, and a 1 MB text then arrives', async () => {
    await cluster.createDatabase('types2');
    const pool = new pg.Pool({ connectionString: cluster.url('types2'), max: 3 });
    pool.on('error', () => undefined);
    try {
      const cp = new MemoryControlPlane();
      const at = new Date().toISOString();
      const table = 'public.old';
      const columns: ColumnDef[] = [
        { name: 'id', type: 'integer', nullable: false },
        { name: 't', type: 'text', nullable: true },
      ];
      await cp.registerTable(
        { source: 'demo', table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
        { source: 'demo', table, version: 1, columns, key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: at },
        { at, actor: 'test', action: 'register-table', source: 'demo', table, outcome: 'done', detail: {} },
      );
      const applier = () =>
        createWarehouseApplier({
          controlPlane: cp,
          pool,
          sinkId: SINK,
          metrics: new Metrics({ namespace: 'test' }),
          logger: new Logger({ logLevel: 'SILENT' }),
          merge: { maxRows: 1_000_000 },
        });
      let p = 0;
      const ev = (id: number, t: string): ChangeEvent => {
        p++;
        return {
          v: ENVELOPE_VERSION,
          source: 'demo',
          table,
          op: 'insert',
          key: { id },
          after: { id, t },
          before: null,
          missing: [],
          position: makePosition(BigInt(p) * 0x100n, 0),
          commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, p)).toISOString(),
          txId: String(p),
          schemaVersion: 1,
          capture: 'slot',
          synthetic: false,
        };
      };
      const apply = async (a: ReturnType<typeof applier>, e: ChangeEvent) =>
        a.applyRecords([{ sequenceNumber: String(p), origin: `log/shard-0/${p}`, text: JSON.stringify(e) }]);
      expect((await apply(applier(), ev(1, 'small'))).failed).toEqual([]);
      const t = warehouseTable('demo', table);
      const q = (n: string) => qualified(t.schema, n);
      const mirrorCols = (
        await pool.query(`SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, [
          t.schema,
          t.mirror,
        ])
      ).rows.map((r) => String(r.column_name));
      const changelogCols = (
        await pool.query(`SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position`, [
          t.schema,
          t.changelog,
        ])
      ).rows
        .map((r) => String(r.column_name))
        .filter((c) => c !== '_cdc_seq');
      // What an earlier version made: the text column as varchar(65535).
      await pool.query(
        `BEGIN; DROP VIEW ${q(t.view)}; DROP VIEW ${q(t.delta)}; ALTER TABLE ${q(t.mirror)} ALTER COLUMN t TYPE varchar(65535); ALTER TABLE ${q(t.changelog)} ALTER COLUMN t TYPE varchar(65535); ` +
          `${createPendingViewSql(t, changelogCols)}; ${createOverlayViewSql(t, mirrorCols, ['id'], { deletedKeys: false, truncations: true })}; COMMIT`,
      );
      const big = bigText(9);
      const out = await apply(applier(), ev(2, big));
      expect(out.failed).toEqual([]);
      expect(out.deadLettered).toBe(0);
      const r = (await pool.query(`SELECT t = $1 AS same, length(t) AS n FROM ${q(t.view)} WHERE id = 2`, [big])).rows[0];
      expect(r).toEqual({ same: true, n: MB });
      const types = (
        await pool.query(`SELECT table_name, data_type FROM information_schema.columns WHERE table_schema = $1 AND column_name = 't' ORDER BY 1`, [t.schema])
      ).rows;
      expect(types.filter((x) => x.table_name === t.mirror || x.table_name === t.changelog).map((x) => x.data_type)).toEqual(['text', 'text']);
    } finally {
      await pool.end();
    }
  }, 120_000);
});
