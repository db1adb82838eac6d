/**
 * The warehouse side of a rebuild over `pg` (docs/rebuild.md): drop a shadow left behind, read
 * what the live table holds, diff live against shadow, keep the diff, and swap the shadow in
 * atomically. SQL text is in lambda/core/rebuild/rebuild.ts; the shadow itself is written by the live
 * apply code (`PgWarehouse.applyTable` with `target`), not here.
 */
import type pg from 'pg';
import { CdcColumn, createOverlayViewSql, createViewSql, qualified, type WarehouseTable } from '../core/warehouse/warehouse-sql.ts';
import { quoteIdent } from '../core/shared/identifiers.ts';
import { guardPoolClients } from './pg-pool.ts';
import {
  createDiffTableSql,
  diffSql,
  diffTableName,
  dropTableSetSql,
  existingTablesSql,
  livePositionSql,
  lockLiveSql,
  lockViewSql,
  physicalTables,
  retiredTable,
  shadowTable,
  swapRenamesSql,
  viewEntry,
  visibleColumns,
  type DiffResult,
  type DiffRow,
} from '../core/rebuild/rebuild.ts';
import type { Position } from '../core/shared/position.ts';

export type { DiffResult } from '../core/rebuild/rebuild.ts';

const RAW_TEXT = { getTypeParser: () => (value: string) => value } as unknown as pg.CustomTypesConfig;

async function existing(client: pg.ClientBase, t: WarehouseTable): Promise<Set<string>> {
  const names = [t.view, ...physicalTables(t).map((p) => p.name)];
  const q = existingTablesSql(t.schema, names);
  const res = await client.query<{ table_name: string; table_type: string }>(q.text, q.values);
  return new Set(res.rows.flatMap((r) => (r.table_type === 'VIEW' ? [r.table_name, viewEntry(r.table_name)] : [r.table_name])));
}

async function columnsOf(client: pg.ClientBase, schema: string, table: string): Promise<string[]> {
  const res = await client.query<{ column_name: string }>(
    'SELECT column_name FROM information_schema.columns WHERE table_schema = $1 AND table_name = $2 ORDER BY ordinal_position',
    [schema, table],
  );
  return res.rows.map((r) => r.column_name);
}

export class PgRebuildTarget {
  readonly live: WarehouseTable;
  readonly shadow: WarehouseTable;
  readonly retired: WarehouseTable;

  constructor(
    private readonly pool: pg.Pool,
    live: WarehouseTable,
  ) {
    guardPoolClients(pool);
    this.live = live;
    this.shadow = shadowTable(live);
    this.retired = retiredTable(live);
  }

  /** Drops shadow and retired objects left by an earlier rebuild (one that crashed, or a rehearsal). Live is not touched. */
  async dropLeftovers(): Promise<string[]> {
    const client = await this.pool.connect();
    try {
      const statements = [
        ...dropTableSetSql(this.shadow, await existing(client, this.shadow)),
        ...dropTableSetSql(this.retired, await existing(client, this.retired)),
      ];
      if (statements.length > 0) await client.query(`BEGIN; ${statements.join('; ')}; COMMIT`);
      return statements;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
  }

  /** The highest position the live table holds, in its changelog or its unmerged delta (null: no live table, or empty). */
  async livePosition(): Promise<Position | null> {
    const client = await this.pool.connect();
    try {
      const has = await existing(client, this.live);
      if (!has.has(this.live.changelog)) return null;
      const res = await client.query<{ p: string | null }>(livePositionSql(this.live, has.has(this.live.delta)));
      return res.rows[0]?.p ?? null;
    } finally {
      client.release();
    }
  }

  /** Whether the shadow mirror exists (a resumed rebuild: before the swap it does, after it it does not). */
  async shadowExists(): Promise<boolean> {
    const client = await this.pool.connect();
    try {
      return (await existing(client, this.shadow)).has(this.shadow.mirror);
    } finally {
      client.release();
    }
  }

  /** The highest position the retired changelog holds: where the live table stood at the swap (null: none). */
  async retiredPosition(): Promise<Position | null> {
    const client = await this.pool.connect();
    try {
      const has = await existing(client, this.retired);
      if (!has.has(this.retired.changelog)) return null;
      const res = await client.query<{ p: string | null }>(livePositionSql(this.retired, has.has(this.retired.delta)));
      return res.rows[0]?.p ?? null;
    } finally {
      client.release();
    }
  }

  /**
   * Live versus shadow mirror, keys whose positions are at or below `upTo` (see `diffSql`). The
   * mirrors only: the caller merges both sides' deltas first (lambda/core/rebuild/rebuild-slice.ts), or a change
   * still in a delta would count as a difference.
   */
  async diff(upTo: Position, client?: pg.ClientBase, live: WarehouseTable = this.live, shadow: WarehouseTable = this.shadow): Promise<DiffResult> {
    const c = client ?? (await this.pool.connect());
    try {
      const liveCols = await columnsOf(c, live.schema, live.mirror);
      const shadowCols = await columnsOf(c, shadow.schema, shadow.mirror);
      if (shadowCols.length === 0) return { rows: [], missing: 0, extra: 0, changed: 0 };
      const cdc = new Set<string>(Object.values(CdcColumn));
      const key = await this.keyColumns(c, shadow);
      const data = shadowCols.filter((x) => !cdc.has(x) && !key.includes(x) && liveCols.includes(x));
      if (liveCols.length === 0) {
        // No live table at all: everything the shadow holds is missing from live.
        const res = await c.query({
          text: `SELECT ${key.map(quoteIdent).join(', ')}, ${quoteIdent(CdcColumn.POSITION)} AS p FROM ${qualified(shadow.schema, shadow.mirror)} WHERE ${quoteIdent(CdcColumn.POSITION)} <= $1`,
          values: [upTo],
          types: RAW_TEXT,
        });
        const rows = (res.rows as Record<string, string | null>[]).map((r) => ({
          kind: 'missing' as const,
          key: Object.fromEntries(key.map((k) => [k, r[k] ?? null])),
          livePosition: null,
          shadowPosition: r.p ?? null,
        }));
        return { rows, missing: rows.length, extra: 0, changed: 0 };
      }
      const res = await c.query({ text: diffSql(live.schema, live.mirror, shadow.mirror, key, data), values: [upTo], types: RAW_TEXT });
      const rows: DiffRow[] = (res.rows as Record<string, string | null>[]).map((r) => ({
        kind: r.kind as DiffRow['kind'],
        key: Object.fromEntries(key.map((k) => [k, r[k] ?? null])),
        livePosition: r.live_position ?? null,
        shadowPosition: r.shadow_position ?? null,
      }));
      return {
        rows,
        missing: rows.filter((r) => r.kind === 'missing').length,
        extra: rows.filter((r) => r.kind === 'extra').length,
        changed: rows.filter((r) => r.kind === 'changed').length,
      };
    } finally {
      if (!client) (c as pg.PoolClient).release();
    }
  }

  /** Keeps the diff in the table's diff table (replacing the last rebuild's). */
  async keepDiff(rebuildId: string, diff: DiffResult): Promise<string> {
    const client = await this.pool.connect();
    const name = diffTableName(this.live);
    try {
      const key = await this.keyColumns(client, this.shadow).catch(async () => this.keyColumns(client, this.live));
      await client.query('BEGIN');
      for (const sql of createDiffTableSql(this.live.schema, name, key)) await client.query(sql);
      const cols = ['_cdc_rebuild', '_cdc_kind', ...key, '_cdc_live_position', '_cdc_shadow_position'];
      const per = Math.max(1, Math.floor(30_000 / cols.length));
      for (let i = 0; i < diff.rows.length; i += per) {
        const chunk = diff.rows.slice(i, i + per);
        const values: (string | null)[] = [];
        const tuples = chunk.map((r, j) => {
          values.push(rebuildId, r.kind, ...key.map((k) => r.key[k] ?? null), r.livePosition, r.shadowPosition);
          return `(${cols.map((_, c) => `$${j * cols.length + c + 1}`).join(', ')})`;
        });
        await client.query(`INSERT INTO ${qualified(this.live.schema, name)} (${cols.map(quoteIdent).join(', ')}) VALUES ${tuples.join(', ')}`, values);
      }
      await client.query('COMMIT');
      return `${this.live.schema}.${name}`;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
  }

  /**
   * Swaps the shadow in (see lambda/core/rebuild/rebuild.ts): in one transaction, locks the live tables
   * against writers (delta first), reads the live position P (changelog and delta), calls
   * `catchUp(P)` (which must bring the shadow up to P through the apply code, on other
   * connections), renames (the deltas too), repoints the view over the new base and delta,
   * commits. Returns P. A failure rolls back: the live table is untouched.
   */
  async swap(catchUp: (upTo: Position | null) => Promise<void>): Promise<Position | null> {
    const client = await this.pool.connect();
    try {
      await client.query('BEGIN');
      const liveHas = await existing(client, this.live);
      const liveDelta = liveHas.has(this.live.delta);
      if (liveHas.has(this.live.mirror) && liveHas.has(this.live.changelog)) await client.query(lockLiveSql(this.live, liveDelta));
      const p = liveHas.has(this.live.changelog)
        ? ((await client.query<{ p: string | null }>(livePositionSql(this.live, liveDelta))).rows[0]?.p ?? null)
        : null;
      await catchUp(p);
      // The view before the tables, the order in which a reader of the view takes them: a reader
      // that holds the view and waits for the mirror would otherwise deadlock with the renames.
      if (liveHas.has(this.live.view)) await client.query(lockViewSql(this.live));
      const shadowHas = await existing(client, this.shadow);
      if (!shadowHas.has(this.shadow.mirror)) throw new Error(`the shadow ${this.shadow.schema}.${this.shadow.mirror} does not exist: nothing was rebuilt`);
      const both = new Set([...liveHas, ...shadowHas]);
      for (const sql of swapRenamesSql(this.live, this.shadow, this.retired, both)) await client.query(sql);
      const mirrorCols = await columnsOf(client, this.live.schema, this.live.mirror);
      const visible = visibleColumns(mirrorCols);
      // The view the apply code makes (lambda/adapters/warehouse-pg.ts): base + delta overlay when
      // the new tables have a delta (with the guards of the optional tables they have), else the mirror's.
      const newHas = await existing(client, this.live);
      const viewSql = newHas.has(this.live.delta)
        ? createOverlayViewSql(this.live, mirrorCols, await this.keyColumns(client, this.live), {
            deletedKeys: newHas.has(this.live.deletedKeys),
            truncations: newHas.has(this.live.truncations),
          })
        : createViewSql(this.live, mirrorCols);
      const liveViewCols = liveHas.has(this.live.view) ? await columnsOf(client, this.live.schema, this.live.view) : [];
      if (liveViewCols.length > 0 && liveViewCols.join(',') !== visible.join(','))
        await client.query(`DROP VIEW ${qualified(this.live.schema, this.live.view)}`);
      await client.query(viewSql);
      if (shadowHas.has(this.shadow.view)) await client.query(`DROP VIEW ${qualified(this.shadow.schema, this.shadow.view)}`);
      await client.query('COMMIT');
      return p;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
  }

  /** Drops the retired objects (after their diff is kept). */
  async dropRetired(): Promise<void> {
    const client = await this.pool.connect();
    try {
      const statements = dropTableSetSql(this.retired, await existing(client, this.retired));
      if (statements.length > 0) await client.query(`BEGIN; ${statements.join('; ')}; COMMIT`);
    } finally {
      client.release();
    }
  }

  /** Row count of a table set's view (base and delta; tests and reports). */
  async visibleRows(t: WarehouseTable = this.live): Promise<number> {
    const res = await this.pool.query<{ n: string }>(`SELECT COUNT(*) AS n FROM ${qualified(t.schema, t.view)}`);
    return Number(res.rows[0]?.n ?? 0);
  }

  /** The mirror's primary-key columns, from the catalog. */
  private async keyColumns(client: pg.ClientBase, t: WarehouseTable): Promise<string[]> {
    const res = await client.query<{ column_name: string }>(
      `SELECT k.column_name FROM information_schema.table_constraints c JOIN information_schema.key_column_usage k ON k.constraint_name = c.constraint_name AND k.table_schema = c.table_schema AND k.table_name = c.table_name
       WHERE c.table_schema = $1 AND c.table_name = $2 AND c.constraint_type = 'PRIMARY KEY' ORDER BY k.ordinal_position`,
      [t.schema, t.mirror],
    );
    if (res.rows.length === 0) throw new Error(`${t.schema}.${t.mirror} has no primary key`);
    return res.rows.map((r) => r.column_name);
  }
}
