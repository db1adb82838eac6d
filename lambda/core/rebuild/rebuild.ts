/**
 * Rebuild of one table of a warehouse sink into shadow objects (docs/rebuild.md): names, SQL
 * text and decisions, pure. The pg adapter (lambda/adapters/warehouse-rebuild-pg.ts) runs the
 * statements; the rebuild itself (lambda/core/rebuild/rebuild-workflow.ts, over lambda/adapters/rebuilder.ts) replays the table's history through the
 * live apply code (`PgWarehouse.applyTable` with the shadow as its target), so the shadow is
 * built by exactly the code that builds the live table.
 *
 * Objects, in the table's own warehouse schema (lambda/core/warehouse/warehouse-sql.ts has the layout):
 * - shadow: view `_cdc_rb_<table>` and its platform tables named after it like any view's
 *   (`_cdc_mirror__cdc_rb_orders`, `_cdc_changelog__cdc_rb_orders`, …; lambda/core/warehouse/warehouse-names.ts).
 *   Same schema, so the swap is a rename inside one schema, which PostgreSQL and Redshift both do
 *   inside a transaction.
 * - retired: the live objects after a swap, named the same way after view `_cdc_old_<table>`,
 *   dropped once the diff is stored.
 * - diff: `_cdc_diff_<table>`, one row per differing key of the last rebuild (kept).
 * Source tables whose names start with `_cdc_` are refused at registration, so none of these
 * can be a source table's object (docs/architecture.md §5.4, "Names").
 *
 * The swap, in ONE transaction: lock the live delta, changelog and mirror against writers
 * (readers go on), let the caller bring the shadow up to what the live tables hold (changelog
 * and delta), then rename live → retired and shadow → live for every object (the delta too), and
 * repoint the view with `CREATE OR REPLACE VIEW` over the new base and delta
 * (`createOverlayViewSql`, docs/warehouse-apply.md; or drop and create it when the column list
 * changed). Until COMMIT a reader of the view sees the old table whole; after it, the new one
 * whole. A diff compares mirrors, so both sides' deltas are merged into their mirrors before it
 * (the merge keeps what the view shows).
 */
import type { Position } from '../shared/position.ts';
import { randomUUID } from 'node:crypto';
import type { ActiveRebuild, ControlPlane } from '../shared/control-plane.ts';
import { CdcColumn, platformTables, qualified, type WarehouseTable } from '../warehouse/warehouse-sql.ts';
import { fitIdentifier, platformName } from '../warehouse/warehouse-names.ts';
import { assertCarriedIdentifier, quoteIdent, splitTableId } from '../shared/identifiers.ts';

export const SHADOW_PREFIX = '_cdc_rb_';
export const RETIRED_PREFIX = '_cdc_old_';

/** The objects of `t` under a name prefix (same schema). */
export function prefixedTable(t: WarehouseTable, prefix: string): WarehouseTable {
  const { table } = splitTableId(t.tableId);
  const view = assertCarriedIdentifier(fitIdentifier(`${prefix}${table}`), 'warehouse name', true);
  return { ...t, ...platformTables(view), view };
}

export const shadowTable = (t: WarehouseTable): WarehouseTable => prefixedTable(t, SHADOW_PREFIX);
export const retiredTable = (t: WarehouseTable): WarehouseTable => prefixedTable(t, RETIRED_PREFIX);

/** The table kept with the last rebuild's differing keys. */
export function diffTableName(t: WarehouseTable): string {
  return platformName('diff', splitTableId(t.tableId).table);
}

/** The physical tables of a table's layout (not the view), as (what, name) pairs. */
export function physicalTables(
  t: WarehouseTable,
): Array<{ part: 'changelog' | 'mirror' | 'deletedKeys' | 'truncations' | 'handover' | 'delta' | 'watermark'; name: string }> {
  // The delta (a view of the changelog above the watermark; a table in the layout before one
  // write per event) first: it is dropped before the tables it reads.
  return [
    { part: 'delta', name: t.delta },
    { part: 'changelog', name: t.changelog },
    { part: 'watermark', name: t.watermark },
    { part: 'mirror', name: t.mirror },
    { part: 'deletedKeys', name: t.deletedKeys },
    { part: 'truncations', name: t.truncations },
    { part: 'handover', name: t.handover },
  ];
}

/** Which of the names exist (one round trip; both warehouses). */
export function existingTablesSql(schema: string, names: readonly string[]): { text: string; values: string[] } {
  const params = names.map((_, i) => `$${i + 2}`).join(', ');
  return {
    text: `SELECT table_name, table_type FROM information_schema.tables WHERE table_schema = $1 AND table_name IN (${params})`,
    values: [schema, ...names],
  };
}

/** The entry `existing` sets hold for a name that is a view (besides the name itself). */
export const viewEntry = (name: string): string => `view:${name}`;

/** Drops every object of `t` (a shadow left by a crashed rebuild, or retired objects). */
export function dropTableSetSql(t: WarehouseTable, existing: ReadonlySet<string>): string[] {
  const out: string[] = [];
  if (existing.has(t.view)) out.push(`DROP VIEW ${qualified(t.schema, t.view)}`);
  for (const p of physicalTables(t))
    if (existing.has(p.name)) out.push(`DROP ${existing.has(viewEntry(p.name)) ? 'VIEW' : 'TABLE'} ${qualified(t.schema, p.name)}`);
  return out;
}

/**
 * Locks the live delta, changelog and mirror against writers; readers (ACCESS SHARE) go on.
 * The delta first: every writer of the table takes it first (an append writes only the delta;
 * the merge and the full apply lock it in EXCLUSIVE mode before they touch the mirror or the
 * changelog, docs/warehouse-apply.md), so the swap waits for a writer at the delta and the two
 * cannot deadlock; then the changelog before the mirror, the order of an apply without a delta
 * (a layout from before the delta). `withDelta` false: the table has no delta yet.
 */
export function lockLiveSql(t: WarehouseTable, withDelta = true): string {
  const tables = [...(withDelta ? [t.delta] : []), t.changelog, t.mirror];
  return `LOCK TABLE ${tables.map((n) => qualified(t.schema, n)).join(', ')} IN EXCLUSIVE MODE`;
}

/**
 * Locks the live view (and, through it, the mirror) for the renames: readers of the view wait
 * for the commit and then read the new table. Taken after the catch-up, so readers wait only for
 * the renames.
 */
export function lockViewSql(t: WarehouseTable): string {
  return `LOCK TABLE ${qualified(t.schema, t.view)} IN ACCESS EXCLUSIVE MODE`;
}

/** The highest position a changelog holds (null when empty). */
export function maxPositionSql(schema: string, changelog: string): string {
  return `SELECT MAX(${quoteIdent(CdcColumn.POSITION)}) AS p FROM ${qualified(schema, changelog)}`;
}

/**
 * The highest position a table holds: over its changelog (every merged event) and its delta
 * (the appended ones not merged yet, docs/warehouse-apply.md); null when both are empty.
 * `withDelta` false: the table has no delta yet.
 */
export function livePositionSql(t: WarehouseTable, withDelta = true): string {
  if (!withDelta) return maxPositionSql(t.schema, t.changelog);
  const pos = quoteIdent(CdcColumn.POSITION);
  return `SELECT MAX(x.p) AS p FROM (SELECT MAX(${pos}) AS p FROM ${qualified(t.schema, t.changelog)} UNION ALL SELECT MAX(${pos}) AS p FROM ${qualified(t.schema, t.delta)}) x`;
}

/**
 * The renames of the swap: every live physical table → retired, every shadow one → live. An
 * object only the live side has is retired (a shadow rebuilt from the whole history has every
 * object the history needs); one only the shadow has becomes live.
 */
export function swapRenamesSql(live: WarehouseTable, shadow: WarehouseTable, retired: WarehouseTable, existing: ReadonlySet<string>): string[] {
  const out: string[] = [];
  const l = physicalTables(live);
  const s = physicalTables(shadow);
  const r = physicalTables(retired);
  for (let i = 0; i < l.length; i++) {
    if (existing.has(l[i]!.name)) out.push(`ALTER TABLE ${qualified(live.schema, l[i]!.name)} RENAME TO ${quoteIdent(r[i]!.name)}`);
    if (existing.has(s[i]!.name)) out.push(`ALTER TABLE ${qualified(live.schema, s[i]!.name)} RENAME TO ${quoteIdent(l[i]!.name)}`);
  }
  // PostgreSQL: the changelog's append-order index keeps its name through a table rename; it moves with its table's name.
  out.push(`ALTER INDEX IF EXISTS ${qualified(live.schema, live.appendOrder)} RENAME TO ${quoteIdent(retired.appendOrder)}`);
  out.push(`ALTER INDEX IF EXISTS ${qualified(live.schema, shadow.appendOrder)} RENAME TO ${quoteIdent(live.appendOrder)}`);
  return out;
}

/** Columns the view shows, from the mirror's columns in table order (the same rule as `createViewSql`). */
export function visibleColumns(mirrorColumns: readonly string[]): string[] {
  return mirrorColumns.filter((c) => c !== CdcColumn.DELETED && c !== CdcColumn.DELETED_AT);
}

/**
 * A differing key between the live mirror and the shadow: `missing` (the shadow has the row, live
 * does not), `extra` (live has a row the history never produced), `changed` (both, a value or
 * the tombstone flag differs).
 */
export type DiffKind = 'missing' | 'extra' | 'changed';

export interface DiffRow {
  kind: DiffKind;
  key: Record<string, string | null>;
  livePosition: string | null;
  shadowPosition: string | null;
}

/** Summary of a diff: counts per kind and the rows (all of them; the caller keeps samples). */
export interface DiffResult {
  rows: DiffRow[];
  missing: number;
  extra: number;
  changed: number;
}

/**
 * The diff of two mirrors of one table, as three statements that select
 * `kind, <key columns>, live_position, shadow_position`, keys in key order: rows missing from
 * `a` (live), rows only `a` has, and rows whose data columns or tombstone flag differ. Keys
 * whose position on either side is above `upTo` are left out (in flight: the other side has not
 * seen their newest event yet). `$1` is `upTo`.
 */
export function diffSql(schema: string, live: string, shadow: string, key: readonly string[], data: readonly string[]): string {
  const L = qualified(schema, live);
  const S = qualified(schema, shadow);
  const pos = quoteIdent(CdcColumn.POSITION);
  const keyJoin = key.map((k) => `l.${quoteIdent(k)} = s.${quoteIdent(k)}`).join(' AND ');
  const differs = [...data, CdcColumn.DELETED]
    .map(
      (c) =>
        `(l.${quoteIdent(c)} <> s.${quoteIdent(c)} OR (l.${quoteIdent(c)} IS NULL AND s.${quoteIdent(c)} IS NOT NULL) OR (l.${quoteIdent(c)} IS NOT NULL AND s.${quoteIdent(c)} IS NULL))`,
    )
    .join(' OR ');
  const keyCols = (alias: string): string => key.map((k) => `${alias}.${quoteIdent(k)}`).join(', ');
  const parts = [
    `SELECT 'missing' AS kind, ${keyCols('s')}, CAST(NULL AS varchar(24)) AS live_position, s.${pos} AS shadow_position FROM ${S} s WHERE s.${pos} <= $1 AND NOT EXISTS (SELECT 1 FROM ${L} l WHERE ${keyJoin})`,
    `SELECT 'extra' AS kind, ${keyCols('l')}, l.${pos} AS live_position, CAST(NULL AS varchar(24)) AS shadow_position FROM ${L} l WHERE l.${pos} <= $1 AND NOT EXISTS (SELECT 1 FROM ${S} s WHERE ${keyJoin})`,
    `SELECT 'changed' AS kind, ${keyCols('l')}, l.${pos} AS live_position, s.${pos} AS shadow_position FROM ${L} l JOIN ${S} s ON ${keyJoin} WHERE l.${pos} <= $1 AND s.${pos} <= $1 AND (${differs || 'FALSE'})`,
  ];
  return parts.join(' UNION ALL ');
}

/** The diff table: kind, rebuild id, key columns as text, both positions. */
export function createDiffTableSql(schema: string, name: string, key: readonly string[]): string[] {
  return [
    `DROP TABLE IF EXISTS ${qualified(schema, name)}`,
    `CREATE TABLE ${qualified(schema, name)} (${quoteIdent('_cdc_rebuild')} varchar(64) NOT NULL, ${quoteIdent('_cdc_kind')} varchar(16) NOT NULL, ${key.map((k) => `${quoteIdent(k)} varchar(65535)`).join(', ')}, ${quoteIdent('_cdc_live_position')} varchar(24), ${quoteIdent('_cdc_shadow_position')} varchar(24))`,
  ];
}

// ---------------------------------------------------------------------------------------------
// Decisions

/** Why a rebuild is refused (the operator audits it and exits 3). */
export interface RebuildRefusal {
  code: 'HISTORY_INCOMPLETE' | 'TABLE_NOT_ACTIVE' | 'TABLE_HELD' | 'NO_SINK_PROGRESS' | 'INVALID_FROM' | 'REBUILD_RUNNING';
  reason: string;
  hint: string;
}

/** Throttle: the share of wall time the bulk replay may spend applying (the rest it sleeps), so live apply keeps its lag. */
export function throttleSleepMs(busyMs: number, duty: number): number {
  if (!(duty > 0) || duty >= 1) return 0;
  return Math.round((busyMs * (1 - duty)) / duty);
}

/** Checks a `--from` position given by an operator (24 hex digits). */
export function checkFromPosition(from: string): RebuildRefusal | null {
  if (/^[0-9a-f]{24}$/.test(from)) return null;
  return {
    code: 'INVALID_FROM',
    reason: `--from must be a position (24 lower-case hex digits, as cdc status prints them), got ${JSON.stringify(from)}`,
    hint: 'omit --from to rebuild from the beginning of the history',
  };
}

/** A rebuild of a table that the sink holds or that is not active would race the hold's replay or build from a history that stops. */
export function decideRebuildState(state: string, heldFrom: Position | null, table: string): RebuildRefusal | null {
  if (state === 'needs-resnapshot')
    return { code: 'HISTORY_INCOMPLETE', reason: `${table} needs a re-snapshot: its history in the log is not complete`, hint: `cdc resnapshot ${table}` };
  if (state === 'paused')
    return { code: 'TABLE_NOT_ACTIVE', reason: `${table} is paused: its sink holds its events`, hint: `cdc resume ${table}, then rebuild` };
  if (heldFrom !== null)
    return {
      code: 'TABLE_HELD',
      reason: `the sink holds ${table} from ${heldFrom} (a resume replay is pending)`,
      hint: 'wait until cdc status shows no held position, then rebuild',
    };
  return null;
}

/**
 * One rebuild per sink at a time (docs/rebuild.md, "One at a time"): two would share the
 * warehouse's spare capacity that the throttle leaves live apply, and two of one table would
 * build the same shadow objects. A slot whose runner has not reported for `staleAfterMs` (it
 * died, and the state machine gave up on it) may be taken over.
 */
export function decideRebuildSlot(
  slot: Pick<ActiveRebuild, 'id' | 'source' | 'table' | 'state' | 'heartbeatAt' | 'startedAt' | 'checkpoint'> | null,
  now: Date,
  staleAfterMs: number,
): RebuildRefusal | null {
  if (!slot || slot.state !== 'running') return null;
  if (now.getTime() - Date.parse(slot.heartbeatAt) > staleAfterMs) return null;
  const progress = slot.checkpoint ? `, ${slot.checkpoint.events} events into the shadow after ${slot.checkpoint.slices} slice(s)` : '';
  return {
    code: 'REBUILD_RUNNING',
    reason: `rebuild ${slot.id} of ${slot.source}/${slot.table} is under way on this sink (started ${slot.startedAt}, last report ${slot.heartbeatAt}${progress})`,
    hint: 'wait for it to finish (cdc status shows it; cdc audit records its end), then try again',
  };
}

/** How long a claimed rebuild slot may go without a report before another rebuild may take it over (docs/rebuild.md). */
export const REBUILD_STALE_AFTER_MS = 30 * 60_000;

/** A new rebuild's id: its start time and a random part. */
export function newRebuildId(at: Date): string {
  return `${at.toISOString().replace(/[-:.]/g, '')}-${randomUUID().slice(0, 8)}`;
}

/**
 * Claims the sink's rebuild slot for rebuild `id` of `r`, audited (`rebuild-started`): the
 * `cdc local` door and the operator function on AWS both start a rebuild through it.
 */
export async function claimRebuildSlot(
  controlPlane: ControlPlane,
  r: { source: string; table: string; sink: string; from?: Position; rehearse: boolean; actor: string },
  id: string,
  now: Date,
  staleAfterMs = REBUILD_STALE_AFTER_MS,
): Promise<{ id: string } | { refusal: RebuildRefusal }> {
  const at = now.toISOString();
  const claim: ActiveRebuild = {
    id,
    sink: r.sink,
    source: r.source,
    table: r.table,
    mode: r.rehearse ? 'rehearsal' : 'swap',
    from: r.from ?? null,
    actor: r.actor,
    startedAt: at,
    state: 'running',
    heartbeatAt: at,
    checkpoint: null,
  };
  const holder = await controlPlane.claimRebuild(claim, new Date(now.getTime() - staleAfterMs).toISOString(), {
    at,
    actor: r.actor,
    action: 'rebuild-started',
    source: r.source,
    table: r.table,
    outcome: 'done',
    detail: { sink: r.sink, id, mode: claim.mode, from: claim.from },
  });
  if (holder) return { refusal: decideRebuildSlot(holder, now, staleAfterMs)! };
  return { id };
}
