/**
 * The loader's completion of held primary-key changes (docs/primary-key-changes.md, "On Redshift"), inside a
 * load's transaction after its COPYs: both loaders (the in-process `RedshiftLoader` and the loader function's
 * `StagedRedshiftLoader`) run it for every table of the load, on their one session. It reads the table's held
 * rows and the changelog rows of the keys they name, decides (`resolveHeld`), and runs one `INSERT … SELECT` per
 * completed event and one `DELETE` of everything completed or dropped, so a held event is loaded and removed in
 * one COMMIT, or neither.
 */
import { resolveHeld, type HeldRow, type KeyRow } from '../core/warehouse/redshift-handover.ts';
import { completeHeldSql, heldCountsSql, heldRowsSql, keyRowsSql, removeHeldSql } from '../core/warehouse/redshift-handover-sql.ts';
import type { RedshiftTable } from '../core/warehouse/redshift-sql.ts';

/** What one pass did to a table's held events. */
export interface HandoverPassResult {
  completed: number;
  dropped: number;
  kept: number;
}

const keyOf = (r: RedshiftTable, row: Record<string, unknown>): string[] => r.key.map((_, i) => String(row[`k${i}`]));
const tableKey = (r: RedshiftTable): string => `${r.t.schema}.${r.t.view}`.toLowerCase();
const text = (v: unknown): string | null => (v === null || v === undefined ? null : String(v));

/**
 * Per loader: which tables are known to hold nothing (the loader is the handover tables' only writer, so a table
 * it emptied or found empty stays so until it holds rows again), so a load reads only tables that may hold some.
 */
export class HandoverPass {
  private readonly empty = new Set<string>();

  constructor(private readonly log?: (message: string, detail: Record<string, unknown>) => void) {}

  /**
   * Forgets what is known: the loader function at each invocation (another container may have held rows meanwhile),
   * and both loaders when a load's transaction fails (what a pass in it emptied is held again).
   */
  forget(): void {
    this.empty.clear();
  }

  /** The table holds rows from this load on. */
  holding(r: RedshiftTable): void {
    this.empty.delete(tableKey(r));
  }

  /**
   * Runs the pass for each of a load's `tables`: the tables not known to be empty are counted in one statement first,
   * so a load whose tables hold nothing sends one read at most (none once they are known empty).
   */
  async runAll(sql: (text: string) => Promise<Record<string, unknown>[]>, tables: readonly RedshiftTable[], loadId: number): Promise<HandoverPassResult> {
    const unknown = tables.filter((r) => !this.empty.has(tableKey(r)));
    const total = { completed: 0, dropped: 0, kept: 0 };
    if (unknown.length === 0) return total;
    for (const row of await sql(heldCountsSql(unknown))) if (Number(row.n) === 0) this.empty.add(tableKey(unknown[Number(row.i)]!));
    for (const r of unknown) {
      const one = await this.run(sql, r, loadId);
      total.completed += one.completed;
      total.dropped += one.dropped;
      total.kept += one.kept;
    }
    return total;
  }

  /** Completes, drops or keeps the table's held events with load `loadId`; statements through `sql`, in the load's transaction. */
  async run(sql: (text: string) => Promise<Record<string, unknown>[]>, r: RedshiftTable, loadId: number): Promise<HandoverPassResult> {
    if (this.empty.has(tableKey(r))) return { completed: 0, dropped: 0, kept: 0 };
    const read = await sql(heldRowsSql(r));
    const held: HeldRow[] = read.map((x) => ({
      key: keyOf(r, x),
      position: String(x.at_pos),
      op: String(x.op),
      missing: (text(x.missing) ?? '').split(',').filter((m) => m !== ''),
      oldKey: text(x.old_key) === null ? null : (JSON.parse(String(x.old_key)) as string[]),
      unheld: text(x.unheld),
    }));
    if (held.length === 0) {
      this.empty.add(tableKey(r));
      return { completed: 0, dropped: 0, kept: 0 };
    }
    const keys = new Map<string, readonly string[]>();
    for (const h of held) for (const k of h.oldKey === null ? [h.key] : [h.key, h.oldKey]) keys.set(JSON.stringify(k), k);
    const rows: KeyRow[] = (await sql(keyRowsSql(r, [...keys.values()]))).map((x) => ({
      key: keyOf(r, x),
      position: String(x.at_pos),
      op: String(x.op),
      unheld: text(x.unheld),
    }));
    const { steps, kept } = resolveHeld(held, rows, String(read[0]!.truncated ?? ''));
    for (const s of steps) {
      if (s.kind === 'complete') await sql(completeHeldSql(r, loadId, s.row, s.donor, s.unheld));
      else if (s.why === 'incomplete')
        this.log?.('primary-key change in flight: its old key had no row before it; not loaded (reconciliation finds the row)', {
          table: r.t.tableId,
          position: s.row.position,
          key: s.row.key,
          oldKey: s.row.oldKey,
        });
    }
    if (steps.length > 0)
      await sql(
        removeHeldSql(
          r,
          steps.map((s) => s.row),
        ),
      );
    if (kept.length === 0) this.empty.add(tableKey(r));
    const completed = steps.filter((s) => s.kind === 'complete').length;
    return { completed, dropped: steps.length - completed, kept: kept.length };
  }
}
