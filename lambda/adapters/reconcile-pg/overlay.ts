/**
 * Whether a warehouse sink's view is exactly the applier's base+delta view, and reads through its
 * second form once it is (docs/reconcile.md, "Counting the base+delta view"): the catalog read of
 * its shape, the check against `createOverlayViewSql`, and reads guarded by the view's version.
 * One per side (lambda/adapters/reconcile-pg.ts); decided once per run, checked on every read.
 */
import type pg from 'pg';
import {
  CdcColumn,
  createOverlayViewSql,
  overlayAggregateSql,
  qualified,
  type OverlayGuards,
  type WarehouseTable,
} from '../../core/warehouse/warehouse-sql.ts';
import { columnTypes, type Queryable } from './catalog.ts';

/** The temporary view `verifyOverlay` prints the applier's definition with (rolled back at once). */
const OVERLAY_PROBE = '"_cdc_reconcile_overlay_probe"';

/** md5 of the definition of a table's view as PostgreSQL prints it (names are checked plain identifiers). */
function viewDefSql(t: WarehouseTable): string {
  return `md5(pg_get_viewdef(CAST('${qualified(t.schema, t.view)}' AS regclass)))`;
}

/**
 * Which version of a table's view is in place: the view's OID and the transaction that last wrote
 * its rule (`pg_rewrite.xmin`). `CREATE OR REPLACE VIEW` rewrites the rule (a new xmin), `DROP` and
 * `CREATE` make a new OID, so within a run it changes exactly when the definition may have changed,
 * and reading it is one catalog lookup instead of printing the definition.
 */
function viewVersionSql(t: WarehouseTable): string {
  return `(SELECT CAST(r.ev_class AS text) || '/' || CAST(r.xmin AS text) FROM pg_rewrite r WHERE r.ev_class = CAST('${qualified(t.schema, t.view)}' AS regclass) AND r.rulename = '_RETURN')`;
}

/**
 * The warehouse view verified to be the applier's base+delta view (`createOverlayViewSql`) for
 * these mirror columns, key and guards: counts and range summaries then use the view's second
 * form (`overlayAggregateSql`, docs/reconcile.md "Counting the base+delta view").
 */
export interface OverlayForm extends OverlayShape {
  /** The view's version as verified (`viewVersionSql`): every read checks it is still that one. */
  version: string;
}

/** What the second form is built from, read from the catalog before the view is verified (see `OverlayForm`). */
export interface OverlayShape {
  table: WarehouseTable;
  mirrorColumns: string[];
  guards: OverlayGuards;
  /** Every column the view shows has the same type in the mirror and the delta, so a row hash is the same over either (sums may use the form). */
  sameTypes: boolean;
}

/** The applier's base+delta view of one warehouse table, as one reconciliation side reads it. */
export class OverlayView {
  private form: Promise<OverlayForm | null> | null = null;
  /** The catalog read `form` starts from (the count starts from it too, without waiting for the check). */
  private shapeRead: Promise<OverlayShape | null> | null = null;
  /** What `form` resolved to (undefined while it is being verified): summaries do not wait for it. */
  settled: OverlayForm | null | undefined = undefined;

  constructor(
    readonly table: WarehouseTable,
    /** The walk's session: the check runs on it. */
    private readonly client: Queryable,
    /** The count's session: the catalog read runs on it. */
    private readonly countClient: Queryable,
    private readonly key: readonly string[],
  ) {}

  /**
   * Whether the view this side reads is exactly the view the applier makes over the base and the
   * delta (`createOverlayViewSql` for the mirror's columns in order, the key, and the guards of the
   * optional tables that exist): PostgreSQL prints that definition (`pg_get_viewdef` of a temporary
   * view made from it, rolled back) and the view's, and they must be the same text. Decided once
   * per side (a run); each read then checks the view still is that one (`overlayRead`). Anything
   * else (the view over the mirror alone, a view someone changed, no right to make a temporary
   * view) reads through the view.
   */
  plan(): Promise<OverlayForm | null> {
    if (!this.form) {
      this.settled = undefined;
      const pending = this.shape()
        .then((shape) => (shape ? this.verify(shape) : null))
        .catch(() => null);
      this.form = pending;
      void pending.then((f) => {
        if (this.form === pending) this.settled = f;
      });
    }
    return this.form;
  }

  /** The catalog read of the view's second form (on the count session): the tables' kinds, the mirror's columns, the guards. Null: not the applier's layout. */
  shape(): Promise<OverlayShape | null> {
    return (this.shapeRead ??= this.readShape(this.table).catch(() => null));
  }

  private async readShape(t: WarehouseTable): Promise<OverlayShape | null> {
    const rels = await this.countClient.query(
      'SELECT c.relname AS name, c.relkind AS kind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = ANY($2)',
      [t.schema, [t.view, t.mirror, t.delta, t.deletedKeys, t.truncations]],
    );
    const kind = new Map(rels.rows.map((r) => [String(r.name), String(r.kind)]));
    // The delta is a view of the changelog (docs/warehouse-apply.md, "Objects per captured table"), or a table in the layout before it.
    if (kind.get(t.view) !== 'v' || kind.get(t.mirror) !== 'r' || (kind.get(t.delta) !== 'v' && kind.get(t.delta) !== 'r')) return null;
    const guards: OverlayGuards = { deletedKeys: kind.get(t.deletedKeys) === 'r', truncations: kind.get(t.truncations) === 'r' };
    const mirror = await columnTypes(this.countClient, { schema: t.schema, name: t.mirror });
    const delta = new Map((await columnTypes(this.countClient, { schema: t.schema, name: t.delta })).map((c) => [c.name, c.type]));
    const mirrorColumns = mirror.map((c) => c.name);
    const sameTypes = mirror.filter((c) => c.name !== CdcColumn.DELETED && c.name !== CdcColumn.DELETED_AT).every((c) => delta.get(c.name) === c.type);
    return { table: t, mirrorColumns, guards, sameTypes };
  }

  /**
   * The check itself, on the walk's session (so that the count, on its own session, need not wait
   * for it): the view is exactly `createOverlayViewSql` for the shape's columns and guards.
   */
  private async verify(shape: OverlayShape): Promise<OverlayForm | null> {
    const t = shape.table;
    const create = createOverlayViewSql(t, shape.mirrorColumns, this.key, shape.guards);
    const prefix = `CREATE OR REPLACE VIEW ${qualified(t.schema, t.view)} AS `;
    if (!create.startsWith(prefix)) return null;
    // One simple query, so one implicit transaction: made, printed and dropped at once, and on an
    // error (no right to make a temporary view) rolled back whole, leaving the session as it was.
    const probe = `pg_temp.${OVERLAY_PROBE}`;
    try {
      const res = (await this.client.query(
        `DROP VIEW IF EXISTS ${probe}; CREATE TEMP VIEW ${OVERLAY_PROBE} AS ${create.slice(prefix.length)}; ` +
          `SELECT md5(pg_get_viewdef(CAST('${probe}' AS regclass))) AS expected, ${viewDefSql(t)} AS actual, ${viewVersionSql(t)} AS version; DROP VIEW ${probe}`,
      )) as unknown as pg.QueryResult[];
      const { expected, actual, version } = res[2]!.rows[0] as { expected: string; actual: string; version: string | null };
      if (expected !== actual || version === null || !/^\d+\/\d+$/.test(version)) return null;
      return { ...shape, version };
    } catch {
      return null;
    }
  }

  /**
   * The whole-table count through the second form of `shape`, not yet verified, with the view's
   * version as the statement's snapshot saw it (`countAll` decides whether to take it). Null when
   * it failed (the session is left usable).
   */
  async countBesideCheck(shape: OverlayShape): Promise<{ n: number; version: string | null } | null> {
    try {
      const res = (await this.countClient.query(
        `BEGIN; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; SELECT a.n, ${viewVersionSql(shape.table)} AS "_cdc_version" FROM (${overlayAggregateSql(shape.table, shape.mirrorColumns, this.key, shape.guards)}) a; COMMIT`,
      )) as unknown as pg.QueryResult[];
      const row = res[3]!.rows[0] as { n: unknown; _cdc_version: string | null };
      return { n: Number(row.n), version: row._cdc_version };
    } catch {
      await this.countClient.query('ROLLBACK').catch(() => undefined);
      return null;
    }
  }

  /**
   * One read of the view's second form: ONE simple query (atomic on its session, whatever else the
   * run sends on it; values are inlined as literals, so it takes no parameters) whose SELECT reads
   * nothing unless the view is still the verified one. Its condition reads the view's version
   * (`viewVersionSql`) in the statement's own snapshot, the snapshot its three terms read the
   * tables in, and a version never comes back once replaced: so when it matches, the view had the
   * verified definition at that snapshot, and the read equals the view there (the tables it names
   * are locked from parse to end, so a rebuild's renames cannot slip in between). When it does not
   * match (a column added, a guard table made, a rebuild's swap), the side verifies again, once, and
   * otherwise reads through the view (null).
   *
   * Hash and merge joins are off for the statement (`SET LOCAL`): the form's point is that the
   * delta's keys probe the base by its primary key, and the planner, pricing thousands of probes
   * above one scan, would otherwise hash-join the delta with the whole base (docs/performance-log.md, "Reconciliation through the base+delta view").
   */
  async read(client: Queryable, form: OverlayForm, sql: (f: OverlayForm) => string, again = true): Promise<Record<string, unknown> | null> {
    let row: Record<string, unknown> | undefined;
    try {
      const res = (await client.query(
        `BEGIN; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off; SELECT a.* FROM (${sql(form)}) a WHERE ${viewVersionSql(form.table)} = '${form.version}'; COMMIT`,
      )) as unknown as pg.QueryResult[];
      row = res[3]!.rows[0] as Record<string, unknown> | undefined;
    } catch (err) {
      // The failed statement left the transaction open and aborted: end it, so the session stays usable.
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
    if (row) return row;
    if (!again) return null;
    this.form = null;
    this.shapeRead = null;
    const fresh = await this.plan();
    return fresh ? this.read(client, fresh, sql, false) : null;
  }
}
