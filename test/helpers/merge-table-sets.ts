/**
 * Table sets for the tests that merge the same delta rows two ways and compare every row
 * (test/adapters/merge-empty-base.test.ts, test/adapters/merge-plans.test.ts): one table
 * `public.t` with a composite key (`k1` integer, `k2` text) and two data columns, whose warehouse
 * objects the live apply code makes (mirror, changelog, delta, truncations and, for a table that
 * was hard once, deleted keys), in as many sources (warehouse schemas) as asked.
 */
import type pg from 'pg';
import type { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import type { DeleteMode, SchemaVersion } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import {
  insertNewValuesSql,
  lockDeltaSql,
  mergeSql,
  qualified,
  warehouseTable,
  type MergeSqlOptions,
  type WarehouseTable,
} from '../../lambda/core/warehouse/warehouse-sql.ts';
import { pendingBoundsSql } from '../../lambda/core/warehouse/watermark-sql.ts';

export const TABLE = 'public.t';
export const KEY = ['k1', 'k2'];
/** The delta's (and the changelog's) columns, in the order the tests write their rows. */
export const DELTA_COLUMNS = [
  '_cdc_position',
  '_cdc_op',
  '_cdc_commit_ts',
  '_cdc_schema_version',
  '_cdc_tx_id',
  '_cdc_synthetic',
  '_cdc_missing',
  '_cdc_applied_at',
  'k1',
  'k2',
  'v1',
  'v2',
];
const RAW = { getTypeParser: () => (v: string) => v } as unknown as pg.CustomTypesConfig;

/** A delete-mode shape: the mode merges run in, and whether the table has a deleted-keys table (it was hard once). */
export type Shape = { name: string; mode: DeleteMode; madeHard: boolean };
export const SHAPES: Shape[] = [
  { name: 'soft', mode: 'soft', madeHard: false },
  { name: 'soft, with a deleted-keys table', mode: 'soft', madeHard: true },
  { name: 'hard', mode: 'hard', madeHard: true },
];

/** Makes the table's warehouse objects in each source (one event applied by `warehouse`) and returns them. */
export async function makeTableSets(warehouse: PgWarehouse, sources: readonly string[], shape: Shape): Promise<WarehouseTable[]> {
  const out: WarehouseTable[] = [];
  for (const sourceId of sources) {
    const schema = schemaOf(sourceId);
    const e: ChangeEvent = {
      v: ENVELOPE_VERSION,
      source: sourceId,
      table: TABLE,
      op: 'insert',
      key: { k1: 0, k2: 'a' },
      after: { k1: 0, k2: 'a', v1: 'x', v2: 1 },
      before: null,
      missing: [],
      position: makePosition(1n, 0),
      commitTs: new Date(0).toISOString(),
      txId: null,
      schemaVersion: 1,
      capture: 'slot',
      synthetic: false,
    };
    await warehouse.applyTable({
      source: sourceId,
      table: TABLE,
      deleteMode: shape.madeHard ? 'hard' : 'soft',
      schemas: new Map([[1, schema]]),
      events: [e],
      appliedAt: new Date(0),
    });
    out.push(warehouseTable(sourceId, TABLE));
  }
  return out;
}

/** The table's schema version `version` in `source`: `k1`, `k2`, `v1`, `v2`, then the `added` text columns. */
export function schemaOf(sourceId: string, version = 1, added: readonly string[] = []): SchemaVersion {
  return {
    source: sourceId,
    table: TABLE,
    version,
    columns: [
      { name: 'k1', type: 'integer' },
      { name: 'k2', type: 'text' },
      { name: 'v1', type: 'text' },
      { name: 'v2', type: 'integer' },
      ...added.map((name) => ({ name, type: 'text' })),
    ],
    key: KEY,
    effectivePosition: '0'.repeat(24),
    registeredAt: new Date(0).toISOString(),
  } as SchemaVersion;
}

/** The base tables of a set: mirror, changelog, truncations and, when the table has them, deleted keys. */
export function baseTables(t: WarehouseTable, shape: Shape): string[] {
  return [t.mirror, t.changelog, t.truncations, ...(shape.madeHard ? [t.deletedKeys] : [])];
}

/** Empties the base tables and the delta. */
export async function resetTables(pool: pg.Pool, t: WarehouseTable, shape: Shape): Promise<void> {
  await pool.query([...baseTables(t, shape), t.delta].map((x) => `DELETE FROM ${qualified(t.schema, x)}`).join('; '));
}

/** Every row of the base tables and the delta, as text, sorted per table (keyed by the table's name without its first two characters, so two sets compare equal); without the append order, which differs between sets. */
export async function dumpTables(pool: pg.Pool, t: WarehouseTable, shape: Shape): Promise<Record<string, unknown>> {
  const out: Record<string, unknown> = {};
  for (const x of [...baseTables(t, shape), t.delta]) {
    const res = await pool.query({ text: `SELECT * FROM ${qualified(t.schema, x)}`, types: RAW });
    out[x.slice(2)] = res.rows.map((r: Record<string, unknown>) => JSON.stringify({ ...r, _cdc_seq: undefined })).sort();
  }
  return out;
}

/** Inserts rows (`DELTA_COLUMNS` order) into a table of the set shaped like the changelog; a row whose event the table holds already is skipped (the first delivery stays). */
export async function insertRows(pool: pg.Pool, t: WarehouseTable, table: string, columns: readonly string[], rows: (string | null)[][]): Promise<void> {
  for (let i = 0; i < rows.length; i += 100) {
    const chunk = rows.slice(i, i + 100);
    await pool.query(insertNewValuesSql(qualified(t.schema, table), columns, chunk.length), chunk.flat());
  }
}

/** Appends rows (`DELTA_COLUMNS` order) as the applier's append does: into the changelog, above the watermark (a redelivered event is skipped). */
export async function appendDelta(pool: pg.Pool, t: WarehouseTable, rows: (string | null)[][]): Promise<void> {
  await insertRows(pool, t, t.changelog, DELTA_COLUMNS, rows);
}

/** The portable merge (`mergeSql`) in one transaction, appends kept out, over every changelog row above the watermark. */
export async function portableMerge(client: pg.ClientBase, t: WarehouseTable, o: Omit<MergeSqlOptions, 'pending'>, setup = ''): Promise<void> {
  await client.query(`BEGIN; ${setup}${lockDeltaSql(t, 'postgres')}`);
  try {
    const b = (await client.query<{ from: string; to: string }>(pendingBoundsSql(t))).rows[0]!;
    for (const sql of mergeSql(t, { ...o, pending: { from: String(b.from), to: String(b.to) } })) await client.query(sql);
    await client.query('COMMIT');
  } catch (err) {
    await client.query('ROLLBACK');
    throw err;
  }
}

/** A timestamp `ms` after 2026-01-01. */
export const ts = (ms: number): string => new Date(Date.UTC(2026, 0, 1) + ms).toISOString();
