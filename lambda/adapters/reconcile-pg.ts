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
import { BASE_HASH_SCHEME, keyOrderClass } from '../core/reconcile/reconcile.ts';
import type { HashClass, HashScheme, KeyRange, KeyTuple, RangeSummary, ReconcileSide, RowHashing, SideRow, SideShape } from '../core/reconcile/reconcile.ts';
import { RESERVED_PREFIX, warehouseTable, CdcColumn, overlayAggregateSql, qualified, type WarehouseTable } from '../core/warehouse/warehouse-sql.ts';
import { columnTypes, type Queryable, type Relation } from './reconcile-pg/catalog.ts';
import { OverlayView, type OverlayForm, type OverlayShape } from './reconcile-pg/overlay.ts';

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

/**
 * Below this many rows in the base (its planner estimate), range summaries read through the view:
 * the second form's fixed cost per statement (the view's lock, its version, a three-term plan:
 * a few ms) is then more than what it saves per row (docs/performance-log.md, "Reconciliation through the base+delta view"). Counts always use it.
 */
export const OVERLAY_SUMMARY_MIN_ROWS = 50_000;

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

  /** The warehouse table's view this side reads, when it may be the base+delta view (see `OverlayView`). */
  private readonly overlay: OverlayView | null;
  /** The base's planner estimate (`pg_class.reltuples` of the mirror; -1: never analysed, or no base), read by `shape`. */
  private baseRows = -1;
  private readonly overlaySummaryMinRows: number;

  /** The sink's heartbeat view (its stable point), when this side is a sink. */
  private readonly heartbeat: { rel: Relation; source: string } | null;

  constructor(
    private readonly rel: Relation,
    o: PgSideOptions & { position?: boolean; heartbeat?: { rel: Relation; source: string }; overlay?: WarehouseTable; overlaySummaryMinRows?: number },
  ) {
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
    this.overlay = o.overlay ? new OverlayView(o.overlay, this.client, this.countClient, this.key) : null;
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
        qualified(this.overlay.table.schema, this.overlay.table.mirror),
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
      const [counted, form] = await Promise.all([this.overlay!.countBesideCheck(shape), this.overlayPlan()]);
      if (form && counted && counted.version === form.version && form.mirrorColumns === shape.mirrorColumns && form.guards === shape.guards) return counted.n;
      if (form) {
        const row = await this.overlay!.read(this.countClient, form, (f) => overlayAggregateSql(f.table, f.mirrorColumns, this.key, f.guards));
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

  /** The view's second form once verified (see `OverlayView.plan`), or null. */
  private overlayPlan(): Promise<OverlayForm | null> {
    if (!this.overlay) return Promise.resolve(null);
    return this.overlay.plan();
  }

  /** The catalog read of the view's second form (see `OverlayView.shape`), or null. */
  private overlayShape(): Promise<OverlayShape | null> {
    if (!this.overlay) return Promise.resolve(null);
    return this.overlay.shape();
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
    const form = this.baseRows >= this.overlaySummaryMinRows ? this.overlay?.settled : null;
    if (form?.sameTypes) {
      const where = this.condition(range, null);
      const hash = this.hashSql();
      const row = await this.overlay!.read(this.client, form, (f) =>
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
  sourceId: string,
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
  const t = warehouseTable(sourceId, tableId);
  const hb = warehouseTable(sourceId, `${o.heartbeatSchema ?? DEFAULT_HEARTBEAT_SCHEMA}.${HEARTBEAT_TABLE}`);
  const heartbeat = o.stablePoint === false ? {} : { heartbeat: { rel: { schema: hb.schema, name: hb.view }, source: sourceId } };
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
