/**
 * The PostgreSQL sides of a reconciliation (docs/reconcile.md): the source table, and the
 * warehouse sink's view of it (lambda/core/warehouse/warehouse-sql.ts names it: schema `<source>_<schema>`,
 * the view named after the table, tombstones hidden). The algorithm is lambda/core/reconcile/reconcile.ts;
 * this file only speaks SQL.
 *
 * Both sides hash a row in SQL the same way (`HashScheme`, lambda/core/reconcile/reconcile.ts), and a
 * range's summary is the exact (`numeric`) sum of its rows' hashes:
 * - `pg-typed` (two PostgreSQL sides): each compared column through PostgreSQL's hash function of
 *   its class (`hashint8extended` of the value as `bigint`, `hash_numeric_extended`,
 *   `timestamptz_hash_extended`, `timestamp_hash_extended`, `uuid_hash_extended`,
 *   `jsonb_hash_extended`, or `hashtextextended` of its text), seeded with the column's position,
 *   a NULL as a constant of its position, combined with XOR (`#`). No value is converted to text
 *   unless its class is `text`: a fraction of the cost of `md5-text` (docs/performance-log.md, "Reconciliation of a matching table");
 * - `md5-text` (the scheme every side has): the MD5 of `rowHashText` of the compared columns'
 *   text (each value through `quote_nullable`, joined by `,`), of which the first 60 bits count.
 * On the source, a masked column is hashed masked: the SQL form
 * of the masking module's `maskValue` (lower-case hex SHA-256 of the value's text; NULL stays
 * NULL), so the source's summary matches the masked copy in the sink; leaf rows are read raw and
 * masked by `maskValue` itself (lambda/core/tables/masking.ts), and a test checks the two forms agree.
 *
 * Keys are compared as row values (`(k1, k2) > ($1, $2)`) and text-like key columns with
 * `COLLATE "C"` on both sides, so both order keys alike whatever each database's collation (a
 * `uuid` takes none: its byte order is its text's "C" order).
 * Sessions use UTC and ISO dates, like the local verdict (local/verdict.ts), so times compare.
 * Every identifier is checked and quoted; values are parameters.
 *
 * Redshift: the SQL here is PostgreSQL's (`md5`, row-value comparison, `bit(60)` casts); running
 * it against a Redshift warehouse is not tested.
 */
import type pg from 'pg';
import { DEFAULT_HEARTBEAT_SCHEMA, HEARTBEAT_TABLE } from '../../contracts/env.ts';
import { quoteIdent, splitTableId } from '../core/shared/identifiers.ts';
import {
  BASE_HASH_SCHEME,
  keyOrderClass,
  type HashClass,
  type HashScheme,
  type KeyRange,
  type KeyTuple,
  type RangeSummary,
  type ReconcileSide,
  type RowHashing,
  type SideRow,
  type SideShape,
} from '../core/reconcile/reconcile.ts';
import {
  RESERVED_PREFIX,
  warehouseTable,
  CdcColumn,
  createOverlayViewSql,
  overlayAggregateSql,
  qualified,
  type OverlayGuards,
  type WarehouseTable,
} from '../core/warehouse/warehouse-sql.ts';

type Queryable = Pick<pg.ClientBase, 'query'>;

/** The session settings both sides read with (see the module comment). */
export const RECONCILE_SESSION_SQL = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1";

/** The SQL form of `maskValue` (lambda/core/tables/masking.ts) for a column expression. */
export function maskSql(expr: string): string {
  return `encode(sha256(convert_to(${expr}, 'UTF8')), 'hex')`;
}

/** A text value as a string constant whatever `standard_conforming_strings` says (`E'…'`, backslashes and quotes doubled); untyped, like a parameter. */
function sqlLiteral(v: string): string {
  return `E'${v.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
}

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
 * Below this many rows in the base (its planner estimate), range summaries read through the view:
 * the second form's fixed cost per statement (the view's lock, its version, a three-term plan:
 * a few ms) is then more than what it saves per row (docs/performance-log.md, "Reconciliation through the base+delta view"). Counts always use it.
 */
export const OVERLAY_SUMMARY_MIN_ROWS = 50_000;

interface Relation {
  schema: string;
  name: string;
}

export interface PgSideOptions {
  client: Queryable;
  /** What the side is called in verdicts (`source`, `warehouse`). */
  label: string;
  key: readonly string[];
  /** The columns to compare, decided by the caller from both shapes; set before the first read. */
  columns?: readonly string[];
  /** Columns hashed masked (source only). */
  masked?: readonly string[];
  /**
   * A second session for the whole-table count, so that it runs alongside the range walk on
   * `client` instead of before it (docs/reconcile.md "Cost and the source budget"). @default client
   */
  countClient?: Queryable;
}

/**
 * The warehouse view verified to be the applier's base+delta view (`createOverlayViewSql`) for
 * these mirror columns, key and guards: counts and range summaries then use the view's second
 * form (`overlayAggregateSql`, docs/reconcile.md "Counting the base+delta view").
 */
interface OverlayForm extends OverlayShape {
  /** The view's version as verified (`viewVersionSql`): every read checks it is still that one. */
  version: string;
}

/** What the second form is built from, read from the catalog before the view is verified (see `OverlayForm`). */
interface OverlayShape {
  table: WarehouseTable;
  mirrorColumns: string[];
  guards: OverlayGuards;
  /** Every column the view shows has the same type in the mirror and the delta, so a row hash is the same over either (sums may use the form). */
  sameTypes: boolean;
}

/**
 * A value's text as PostgreSQL writes it (its type's output function), what the capture carries
 * and a sink's text column holds: the `::text` cast differs for `character(n)` (it trims the
 * padding) and an `inet` host (it adds `/32` or `/128`) (docs/types.md). NULL stays NULL (tested on
 * the text: a composite of NULL fields `IS NULL` yet has a text).
 */
function outputText(expr: string): string {
  return `CASE WHEN CAST(${expr} AS text) IS NULL THEN NULL ELSE format('%s', ${expr}) END`;
}

/** `pg-typed`: PostgreSQL's hash of a column expression of a class, seeded with `seed` (see the module comment). */
function typedHash(cls: HashClass, expr: string, seed: number): string {
  switch (cls) {
    case 'int':
      return `hashint8extended(CAST(${expr} AS bigint), ${seed})`;
    case 'numeric':
      return `hash_numeric_extended(CAST(${expr} AS numeric), ${seed})`;
    case 'timestamptz':
      return `timestamptz_hash_extended(${expr}, ${seed})`;
    case 'timestamp':
      return `timestamp_hash_extended(${expr}, ${seed})`;
    case 'uuid':
      return `uuid_hash_extended(${expr}, ${seed})`;
    case 'jsonb':
      return `jsonb_hash_extended(${expr}, ${seed})`;
    case 'text':
      return `hashtextextended(${outputText(expr)}, ${seed})`;
  }
}

/** A relation's columns with their types (`format_type`), in column order. */
async function columnTypes(client: Queryable, rel: Relation): Promise<Array<{ name: string; type: string }>> {
  const res = await client.query(
    `SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type FROM pg_attribute a
       JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> 'v' ORDER BY a.attnum`,
    [rel.schema, rel.name],
  );
  return res.rows.map((r) => ({ name: String(r.name), type: String(r.type) }));
}

/**
 * Key order classes (`keyOrderClass`) whose `max` aggregate orders exactly as `ORDER BY` does (the
 * type's default btree order). Besides, text and character keys (under `COLLATE "C"` in both);
 * not uuid, `name` or `citext` (no `max`, or not in that order), nor any other type.
 */
const MAX_ORDERED_KEYS = new Set(['number', 'date', 'timestamp', 'timestamptz']);

/** One PostgreSQL relation as a reconciliation side. */
export class PgReconcileSide implements ReconcileSide {
  readonly label: string;
  readonly hashSchemes: readonly HashScheme[] = ['pg-typed', BASE_HASH_SCHEME];
  private hashing: RowHashing = { scheme: BASE_HASH_SCHEME, classes: {} };
  private readonly client: Queryable;
  private readonly countClient: Queryable;
  private readonly key: readonly string[];
  private columns: readonly string[];
  private readonly masked: readonly string[];
  private textKey: boolean[] = [];
  /** A one-column key whose `max` is its last in key order (`MAX_ORDERED_KEYS`): `summarizeFirst` reads it without a window. */
  private maxOrderedKey = false;
  private readonly position: boolean;

  /** The warehouse table whose view this side reads, when it may be the base+delta view (see `OverlayForm`). */
  private readonly overlay: WarehouseTable | null;
  private overlayForm: Promise<OverlayForm | null> | null = null;
  /** The catalog read `overlayForm` starts from (the count starts from it too, without waiting for the check). */
  private overlayShapeRead: Promise<OverlayShape | null> | null = null;
  /** What `overlayForm` resolved to (undefined while it is being verified): summaries do not wait for it. */
  private settledForm: OverlayForm | null | undefined = undefined;
  /** The base's planner estimate (`pg_class.reltuples` of the mirror; -1: never analysed, or no base), read by `shape`. */
  private baseRows = -1;
  private readonly overlaySummaryMinRows: number;

  /** The sink's heartbeat view (its stable point), when this side is a sink. */
  private readonly heartbeat: { rel: Relation; source: string } | null;

  constructor(
    private readonly rel: Relation,
    o: PgSideOptions & { position?: boolean; heartbeat?: { rel: Relation; source: string }; overlay?: WarehouseTable; overlaySummaryMinRows?: number },
  ) {
    this.overlay = o.overlay ?? null;
    this.overlaySummaryMinRows = o.overlaySummaryMinRows ?? OVERLAY_SUMMARY_MIN_ROWS;
    this.heartbeat = o.heartbeat ?? null;
    if (this.heartbeat) this.appliedThrough = () => this.heartbeatApplied();
    this.label = o.label;
    this.client = o.client;
    this.countClient = o.countClient ?? o.client;
    this.key = o.key;
    this.columns = o.columns ?? [];
    this.masked = o.masked ?? [];
    this.position = o.position ?? false;
  }

  useColumns(columns: readonly string[], hashing?: RowHashing): void {
    this.columns = columns;
    if (hashing) this.hashing = hashing;
  }

  private get from(): string {
    return `${quoteIdent(this.rel.schema)}.${quoteIdent(this.rel.name)}`;
  }

  private k(i: number): string {
    return `${quoteIdent(this.key[i]!)}${this.textKey[i] ? ' COLLATE "C"' : ''}`;
  }

  private get keyList(): string {
    return this.key.map((_, i) => this.k(i)).join(', ');
  }

  private get keyRow(): string {
    return this.key.length === 1 ? this.k(0) : `(${this.keyList})`;
  }

  /** A key tuple as parameters (pushed on `values`), or with `values` null as literals in the text. */
  private param(values: unknown[] | null, tuple: KeyTuple): string {
    if (tuple.length !== this.key.length) throw new RangeError(`key of ${tuple.length} value(s) for a key of ${this.key.length} column(s)`);
    const refs = tuple.map((v) => {
      if (values === null) return sqlLiteral(v);
      values.push(v);
      return `$${values.length}`;
    });
    return refs.length === 1 ? refs[0]! : `(${refs.join(', ')})`;
  }

  /** The range as a condition on the key columns (unqualified), or null for the whole key space. */
  private condition(range: KeyRange, values: unknown[] | null): string | null {
    const parts: string[] = [];
    if (range.after) parts.push(`${this.keyRow} > ${this.param(values, range.after)}`);
    if (range.upTo) parts.push(`${this.keyRow} <= ${this.param(values, range.upTo)}`);
    return parts.length ? parts.join(' AND ') : null;
  }

  private where(range: KeyRange, values: unknown[]): string {
    const c = this.condition(range, values);
    return c ? `WHERE ${c}` : '';
  }

  /** The per-row hash expression (see the module comment). */
  hashSql(): string {
    if (this.hashing.scheme === 'pg-typed') {
      const parts = this.columns.map((c, i) => {
        const col = quoteIdent(c);
        const h = this.masked.includes(c) ? `hashtextextended(${maskSql(outputText(col))}, ${i})` : typedHash(this.hashing.classes[c] ?? 'text', col, i);
        return `COALESCE(${h}, ${-1 - i})`;
      });
      return parts.length ? `(${parts.join(' # ')})` : 'CAST(0 AS bigint)';
    }
    const parts = this.columns.map((c) =>
      this.masked.includes(c) ? `quote_nullable(${maskSql(outputText(quoteIdent(c)))})` : `quote_nullable(${outputText(quoteIdent(c))})`,
    );
    const text = parts.length ? parts.join(` || ',' || `) : "''";
    return `CAST(CAST('x' || substr(md5(${text}), 1, 15) AS bit(60)) AS bigint)`;
  }

  private keyText(): string {
    return this.key.map((k, i) => `CAST(${quoteIdent(k)} AS text) AS "_k${i}"`).join(', ');
  }

  private tuple(row: Record<string, unknown>): KeyTuple {
    return this.key.map((_, i) => String(row[`_k${i}`]));
  }

  async shape(): Promise<SideShape> {
    const cols = await columnTypes(this.client, this.rel);
    const own = cols.filter((c) => !c.name.toLowerCase().startsWith(RESERVED_PREFIX));
    const keyTypes = this.key.map((k) => cols.find((c) => c.name === k)?.type ?? 'absent');
    const keyOrder = keyTypes.map(keyOrderClass);
    // Text-ordered keys compare byte-wise (`COLLATE "C"`) on both sides. A uuid orders by its bytes,
    // which is its text's "C" order already, and takes no collation (a COLLATE on it is an error).
    this.textKey = keyOrder.map((c, i) => c === 'text' && keyTypes[i]!.toLowerCase() !== 'uuid');
    this.maxOrderedKey =
      this.key.length === 1 && (MAX_ORDERED_KEYS.has(keyOrder[0]!) || (this.textKey[0]! && /^(text|character.*|varchar.*|char.*)$/i.test(keyTypes[0]!)));
    if (this.overlay && cols.length > 0) {
      const base = await this.client.query('SELECT CAST(c.reltuples AS float8) AS n FROM pg_class c WHERE c.oid = to_regclass($1)', [
        qualified(this.overlay.schema, this.overlay.mirror),
      ]);
      this.baseRows = base.rows.length ? Number(base.rows[0].n) : -1;
      // A base big enough for its summaries to use the view's second form: verify it now, beside the run's first reads.
      if (this.baseRows >= this.overlaySummaryMinRows) void this.overlayPlan();
    }
    return { exists: cols.length > 0, columns: own.map((c) => c.name), keyOrder, types: Object.fromEntries(own.map((c) => [c.name, c.type])) };
  }

  /**
   * `count(*)` of the relation. On the applier's base+delta view, its second form
   * (`overlayAggregateSql`: the base's live rows, minus those a newer delta row supersedes, plus the
   * delta's visible rows; see `overlayRead`). Otherwise through the relation: a view over the base
   * and the delta that is not exactly the applier's anti-joins every base row against the delta,
   * and with a delta the planner estimates at one row (empty, or just merged) it picks a nested
   * loop that scans the delta once per base row, several times the cost of a hash anti join over a
   * whole table (docs/performance-log.md, "Reconciliation and rebuild, issue 12's performance pass"); so that count runs with nested loops off, for this
   * statement only (`SET LOCAL`).
   */
  async countAll(): Promise<number> {
    const shape = await this.overlayShape();
    if (shape) {
      // The count does not wait for the view's check (`verifyOverlay`, on the walk's session): it
      // runs beside it and returns the view's version as its own snapshot saw it, and it is taken
      // only when the check verified that very version for the same columns and guards (the
      // soundness argument of `overlayRead`, with the comparison made after the statement instead
      // of inside it). Otherwise it is thrown away and the count read again, guarded, or through the view.
      const [counted, form] = await Promise.all([this.countBesideCheck(shape), this.overlayPlan()]);
      if (form && counted && counted.version === form.version && form.mirrorColumns === shape.mirrorColumns && form.guards === shape.guards) return counted.n;
      if (form) {
        const row = await this.overlayRead(this.countClient, form, (f) => overlayAggregateSql(f.table, f.mirrorColumns, this.key, f.guards));
        if (row) return Number(row.n);
      }
    }
    try {
      const res = (await this.countClient.query(
        `BEGIN; SET LOCAL enable_nestloop = off; SELECT count(*) AS n FROM ${this.from}; COMMIT`,
      )) as unknown as pg.QueryResult[];
      return Number(res[2]!.rows[0].n);
    } catch (err) {
      // The failed statement left the transaction open and aborted: end it, so the session stays usable.
      await this.countClient.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  }

  /**
   * Whether the view this side reads is exactly the view the applier makes over the base and the
   * delta (`createOverlayViewSql` for the mirror's columns in order, the key, and the guards of the
   * optional tables that exist): PostgreSQL prints that definition (`pg_get_viewdef` of a temporary
   * view made from it, rolled back) and the view's, and they must be the same text. Decided once
   * per side (a run); each read then checks the view still is that one (`overlayRead`). Anything
   * else (the view over the mirror alone, a view someone changed, no right to make a temporary
   * view) reads through the view.
   */
  private overlayPlan(): Promise<OverlayForm | null> {
    if (!this.overlay) return Promise.resolve(null);
    if (!this.overlayForm) {
      this.settledForm = undefined;
      const pending = this.overlayShape()
        .then((shape) => (shape ? this.verifyOverlay(shape) : null))
        .catch(() => null);
      this.overlayForm = pending;
      void pending.then((f) => {
        if (this.overlayForm === pending) this.settledForm = f;
      });
    }
    return this.overlayForm;
  }

  /** The catalog read of the view's second form (on the count session): the tables' kinds, the mirror's columns, the guards. Null: not the applier's layout. */
  private overlayShape(): Promise<OverlayShape | null> {
    if (!this.overlay) return Promise.resolve(null);
    return (this.overlayShapeRead ??= this.readOverlayShape(this.overlay).catch(() => null));
  }

  private async readOverlayShape(t: WarehouseTable): Promise<OverlayShape | null> {
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
  private async verifyOverlay(shape: OverlayShape): Promise<OverlayForm | null> {
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
  private async countBesideCheck(shape: OverlayShape): Promise<{ n: number; version: string | null } | null> {
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
  private async overlayRead(client: Queryable, form: OverlayForm, sql: (f: OverlayForm) => string, again = true): Promise<Record<string, unknown> | null> {
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
    this.overlayForm = null;
    this.overlayShapeRead = null;
    const fresh = await this.overlayPlan();
    return fresh ? this.overlayRead(client, fresh, sql, false) : null;
  }

  /** The planner's estimate (`pg_class.reltuples`), null when never analysed; a view has none (a hint, see `ReconcileSide`). */
  async estimateRows(): Promise<number | null> {
    const res = await this.client.query(
      `SELECT CAST(c.reltuples AS float8) AS n, c.relkind AS kind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2`,
      [this.rel.schema, this.rel.name],
    );
    const row = res.rows[0];
    if (!row || (String(row.kind) !== 'r' && String(row.kind) !== 'p')) return null;
    const n = Number(row.n);
    return n >= 0 ? n : null;
  }

  async summarize(range: KeyRange): Promise<RangeSummary> {
    // Through the form once it is verified (verification runs on this session from `shape` on;
    // until it is done, through the view: the two are equal).
    const form = this.baseRows >= this.overlaySummaryMinRows ? this.settledForm : null;
    if (form?.sameTypes) {
      const where = this.condition(range, null);
      const hash = this.hashSql();
      const row = await this.overlayRead(this.client, form, (f) =>
        f.sameTypes
          ? overlayAggregateSql(f.table, f.mirrorColumns, this.key, f.guards, { sum: hash, ...(where ? { where } : {}) })
          : 'SELECT 0 AS n, 0 AS s WHERE false',
      );
      if (row) return { rows: Number(row.n), checksum: String(row.s) };
    }
    const values: unknown[] = [];
    const res = await this.client.query(
      `SELECT count(*) AS n, CAST(COALESCE(sum(${this.hashSql()}), 0) AS text) AS s FROM ${this.from} ${this.where(range, values)}`,
      values,
    );
    return { rows: Number(res.rows[0].n), checksum: String(res.rows[0].s) };
  }

  /**
   * The first `limit` rows of the range in key order, summarised in one statement with the key of
   * the `limit`-th (`ReconcileSide.summarizeFirst`): the segment's key walk and its summary in one
   * index scan. The key is cast to text for that one row only.
   */
  async summarizeFirst(range: KeyRange, limit: number): Promise<{ summary: RangeSummary; last: KeyTuple | null }> {
    const values: unknown[] = [];
    const where = this.where(range, values);
    values.push(limit);
    const n = `$${values.length}`;
    // A one-column key whose `max` follows the key order: the last of the first `limit` rows is
    // their max, read without numbering the rows (a window costs about as much as the hashing).
    const res = this.maxOrderedKey
      ? await this.client.query(
          `SELECT count(*) AS n, CAST(COALESCE(sum(q."_cdc_h"), 0) AS text) AS s, CAST(max(q.${this.k(0)}) AS text) AS "_k0" FROM ` +
            `(SELECT ${quoteIdent(this.key[0]!)}, ${this.hashSql()} AS "_cdc_h" FROM ${this.from} ${where} ORDER BY ${this.keyList} LIMIT ${n}) q`,
          values,
        )
      : await this.client.query(
          `SELECT count(*) AS n, CAST(COALESCE(sum(q."_cdc_h"), 0) AS text) AS s, ${this.key.map((k, i) => `max(CASE WHEN q."_cdc_rn" = ${n} THEN CAST(q.${quoteIdent(k)} AS text) END) AS "_k${i}"`).join(', ')} FROM ` +
            `(SELECT ${this.key.map((k) => quoteIdent(k)).join(', ')}, ${this.hashSql()} AS "_cdc_h", row_number() OVER (ORDER BY ${this.keyList}) AS "_cdc_rn" FROM ${this.from} ${where} ORDER BY ${this.keyList} LIMIT ${n}) q`,
          values,
        );
    const row = res.rows[0];
    const rows = Number(row.n);
    return { summary: { rows, checksum: String(row.s) }, last: rows < limit ? null : this.tuple(row) };
  }

  async keyAt(range: KeyRange, offset: number): Promise<KeyTuple | null> {
    const values: unknown[] = [];
    const where = this.where(range, values);
    values.push(offset);
    const res = await this.client.query(
      `SELECT ${this.keyText()} FROM ${this.from} ${where} ORDER BY ${this.keyList} OFFSET $${values.length} LIMIT 1`,
      values,
    );
    return res.rows.length ? this.tuple(res.rows[0]) : null;
  }

  private select(): string {
    const cols = this.columns.map((c, i) => `${outputText(quoteIdent(c))} AS "_c${i}"`);
    if (this.position) cols.push(`${quoteIdent(CdcColumn.POSITION)} AS "_pos"`);
    return [this.keyText(), ...cols].join(', ');
  }

  private toRow(r: Record<string, unknown>): SideRow {
    const values: Record<string, string | null> = {};
    this.columns.forEach((c, i) => (values[c] = r[`_c${i}`] === null ? null : String(r[`_c${i}`])));
    return { key: this.tuple(r), values, position: this.position && r._pos != null ? String(r._pos) : null };
  }

  async rows(range: KeyRange): Promise<SideRow[]> {
    const values: unknown[] = [];
    const res = await this.client.query(`SELECT ${this.select()} FROM ${this.from} ${this.where(range, values)} ORDER BY ${this.keyList}`, values);
    return res.rows.map((r) => this.toRow(r));
  }

  /** The database's clock, ms since the epoch (the clock heartbeats are stamped with on the source). */
  async clock(): Promise<number> {
    const res = await this.client.query('SELECT CAST(extract(epoch FROM clock_timestamp()) * 1000 AS float8) AS t');
    return Number(res.rows[0].t);
  }

  /** Set on a sink side with a heartbeat view (see `pgWarehouseSide`). */
  readonly appliedThrough?: () => Promise<number | null>;

  private async heartbeatApplied(): Promise<number | null> {
    const h = this.heartbeat!;
    const res = await this.client
      .query(`SELECT CAST(extract(epoch FROM beat_at) * 1000 AS float8) AS t FROM ${quoteIdent(h.rel.schema)}.${quoteIdent(h.rel.name)} WHERE source_id = $1`, [
        h.source,
      ])
      .catch((e: { code?: string }) => {
        if (e.code === '42P01') return { rows: [] }; // no heartbeat applied yet: no view
        throw e;
      });
    return res.rows.length ? Number(res.rows[0].t) : null;
  }

  async rowsByKey(keys: readonly KeyTuple[]): Promise<SideRow[]> {
    const out: SideRow[] = [];
    for (let i = 0; i < keys.length; i += 500) {
      const values: unknown[] = [];
      const list = keys.slice(i, i + 500).map((k) => this.param(values, k));
      const res = await this.client.query(`SELECT ${this.select()} FROM ${this.from} WHERE ${this.keyRow} IN (${list.join(', ')})`, values);
      out.push(...res.rows.map((r) => this.toRow(r)));
    }
    return out;
  }
}

/** The source table `schema.table` as a side; masked columns hash masked. */
export function pgSourceSide(
  client: Queryable,
  tableId: string,
  key: readonly string[],
  masked: readonly string[],
  o: { countClient?: Queryable } = {},
): PgReconcileSide {
  const { schema, table } = splitTableId(tableId);
  return new PgReconcileSide({ schema, name: table }, { client, label: 'source', key, masked, ...(o.countClient ? { countClient: o.countClient } : {}) });
}

/**
 * The warehouse sink's view of a source table as a side (rows carry `_cdc_position`). Its stable
 * point is the source's heartbeat row as the warehouse holds it (`<source>_<schema>.cdc_heartbeat`).
 */
export function pgWarehouseSide(
  client: Queryable,
  source: string,
  tableId: string,
  key: readonly string[],
  o: {
    label?: string;
    heartbeatSchema?: string;
    stablePoint?: boolean;
    countClient?: Queryable;
    /** Base rows (its planner estimate) from which range summaries use the view's second form. @default OVERLAY_SUMMARY_MIN_ROWS */
    overlaySummaryMinRows?: number;
  } = {},
): PgReconcileSide {
  const t = warehouseTable(source, tableId);
  const hb = warehouseTable(source, `${o.heartbeatSchema ?? DEFAULT_HEARTBEAT_SCHEMA}.${HEARTBEAT_TABLE}`);
  const heartbeat = o.stablePoint === false ? {} : { heartbeat: { rel: { schema: hb.schema, name: hb.view }, source } };
  return new PgReconcileSide(
    { schema: t.schema, name: t.view },
    {
      client,
      label: o.label ?? 'warehouse',
      key,
      position: true,
      overlay: t,
      ...(o.overlaySummaryMinRows !== undefined ? { overlaySummaryMinRows: o.overlaySummaryMinRows } : {}),
      ...heartbeat,
      ...(o.countClient ? { countClient: o.countClient } : {}),
    },
  );
}

/** Opens the session settings on a client (see the module comment). */
export async function prepareReconcileSession(client: Queryable): Promise<void> {
  await client.query(RECONCILE_SESSION_SQL);
}
