/**
 * The PostgreSQL sides of a reconciliation (docs/reconcile.md): the source table, and the
 * warehouse sink's view of it (lambda/core/warehouse-sql.ts names it: schema `<source>_<schema>`,
 * the view named after the table, tombstones hidden). The algorithm is lambda/core/reconcile.ts;
 * this file only speaks SQL.
 *
 * Both sides hash a row in SQL the same way (`HashScheme`, lambda/core/reconcile.ts), and a
 * range's summary is the exact (`numeric`) sum of its rows' hashes:
 * - `pg-typed` (two PostgreSQL sides): each compared column through PostgreSQL's hash function of
 *   its class (`hashint8extended` of the value as `bigint`, `hash_numeric_extended`,
 *   `timestamptz_hash_extended`, `timestamp_hash_extended`, `uuid_hash_extended`,
 *   `jsonb_hash_extended`, or `hashtextextended` of its text), seeded with the column's position,
 *   a NULL as a constant of its position, combined with XOR (`#`). No value is converted to text
 *   unless its class is `text`: a fraction of the cost of `md5-text` (docs/performance.md §8);
 * - `md5-text` (the scheme every side has): the MD5 of `rowHashText` of the compared columns'
 *   text (each value through `quote_nullable`, joined by `,`), of which the first 60 bits count.
 * On the source, a masked column is hashed masked: the SQL form
 * of the masking module's `maskValue` (lower-case hex SHA-256 of the value's text; NULL stays
 * NULL), so the source's summary matches the masked copy in the sink; leaf rows are read raw and
 * masked by `maskValue` itself (lambda/core/masking.ts), and a test checks the two forms agree.
 *
 * Keys are compared as row values (`(k1, k2) > ($1, $2)`) and text-like key columns with
 * `COLLATE "C"` on both sides, so both order keys alike whatever each database's collation.
 * Sessions use UTC and ISO dates, like the local verdict (local/verdict.ts), so times compare.
 * Every identifier is checked and quoted; values are parameters.
 *
 * Redshift: the SQL here is PostgreSQL's (`md5`, row-value comparison, `bit(60)` casts); running
 * it against a Redshift warehouse is not tested.
 */
import type pg from 'pg';
import { DEFAULT_HEARTBEAT_SCHEMA, HEARTBEAT_TABLE } from '../../contracts/env.ts';
import { quoteIdent, splitTableId } from '../core/identifiers.ts';
import { BASE_HASH_SCHEME, keyOrderClass, type HashClass, type HashScheme, type KeyRange, type KeyTuple, type RangeSummary, type ReconcileSide, type RowHashing, type SideRow, type SideShape } from '../core/reconcile.ts';
import { RESERVED_PREFIX, warehouseTable, CdcColumn } from '../core/warehouse-sql.ts';

type Queryable = Pick<pg.ClientBase, 'query'>;

/** The session settings both sides read with (see the module comment). */
export const RECONCILE_SESSION_SQL = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1";

/** The SQL form of `maskValue` (lambda/core/masking.ts) for a column expression. */
export function maskSql(expr: string): string {
  return `encode(sha256(convert_to(${expr}, 'UTF8')), 'hex')`;
}

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
      return `hashtextextended(CAST(${expr} AS text), ${seed})`;
  }
}

/** A relation's columns with their types (`format_type`), in column order. */
async function columnTypes(client: Queryable, rel: Relation): Promise<Array<{ name: string; type: string }>> {
  const res = await client.query(
    `SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type FROM pg_attribute a
       JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`,
    [rel.schema, rel.name],
  );
  return res.rows.map((r) => ({ name: String(r.name), type: String(r.type) }));
}

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
  private readonly position: boolean;

  /** The sink's heartbeat view (its stable point), when this side is a sink. */
  private readonly heartbeat: { rel: Relation; source: string } | null;

  constructor(
    private readonly rel: Relation,
    o: PgSideOptions & { position?: boolean; heartbeat?: { rel: Relation; source: string } },
  ) {
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

  private param(values: unknown[], tuple: KeyTuple): string {
    if (tuple.length !== this.key.length) throw new RangeError(`key of ${tuple.length} value(s) for a key of ${this.key.length} column(s)`);
    const refs = tuple.map((v) => {
      values.push(v);
      return `$${values.length}`;
    });
    return refs.length === 1 ? refs[0]! : `(${refs.join(', ')})`;
  }

  private where(range: KeyRange, values: unknown[]): string {
    const parts: string[] = [];
    if (range.after) parts.push(`${this.keyRow} > ${this.param(values, range.after)}`);
    if (range.upTo) parts.push(`${this.keyRow} <= ${this.param(values, range.upTo)}`);
    return parts.length ? `WHERE ${parts.join(' AND ')}` : '';
  }

  /** The per-row hash expression (see the module comment). */
  hashSql(): string {
    if (this.hashing.scheme === 'pg-typed') {
      const parts = this.columns.map((c, i) => {
        const col = quoteIdent(c);
        const h = this.masked.includes(c) ? `hashtextextended(${maskSql(`CAST(${col} AS text)`)}, ${i})` : typedHash(this.hashing.classes[c] ?? 'text', col, i);
        return `COALESCE(${h}, ${-1 - i})`;
      });
      return parts.length ? `(${parts.join(' # ')})` : 'CAST(0 AS bigint)';
    }
    const parts = this.columns.map((c) => (this.masked.includes(c) ? `quote_nullable(${maskSql(`CAST(${quoteIdent(c)} AS text)`)})` : `quote_nullable(${quoteIdent(c)})`));
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
    const keyOrder = this.key.map((k) => keyOrderClass(cols.find((c) => c.name === k)?.type ?? 'absent'));
    this.textKey = keyOrder.map((c) => c === 'text');
    return { exists: cols.length > 0, columns: own.map((c) => c.name), keyOrder, types: Object.fromEntries(own.map((c) => [c.name, c.type])) };
  }

  /**
   * `count(*)` of the relation. The warehouse's view over the base and the delta
   * (docs/warehouse-apply.md) anti-joins every base row against the delta; with a delta the planner
   * estimates at one row (empty, or just merged) it picks a nested loop that scans the delta once
   * per base row, several times the cost of a hash anti join over a whole table (docs/performance.md
   * §10). So the count runs with nested loops off, for this statement only (`SET LOCAL`).
   */
  async countAll(): Promise<number> {
    try {
      const res = (await this.countClient.query(`BEGIN; SET LOCAL enable_nestloop = off; SELECT count(*) AS n FROM ${this.from}; COMMIT`)) as unknown as pg.QueryResult[];
      return Number(res[2]!.rows[0].n);
    } catch (err) {
      // The failed statement left the transaction open and aborted: end it, so the session stays usable.
      await this.countClient.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
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
    const values: unknown[] = [];
    const res = await this.client.query(`SELECT count(*) AS n, CAST(COALESCE(sum(${this.hashSql()}), 0) AS text) AS s FROM ${this.from} ${this.where(range, values)}`, values);
    return { rows: Number(res.rows[0].n), checksum: String(res.rows[0].s) };
  }

  async keyAt(range: KeyRange, offset: number): Promise<KeyTuple | null> {
    const values: unknown[] = [];
    const where = this.where(range, values);
    values.push(offset);
    const res = await this.client.query(`SELECT ${this.keyText()} FROM ${this.from} ${where} ORDER BY ${this.keyList} OFFSET $${values.length} LIMIT 1`, values);
    return res.rows.length ? this.tuple(res.rows[0]) : null;
  }

  private select(): string {
    const cols = this.columns.map((c, i) => `CAST(${quoteIdent(c)} AS text) AS "_c${i}"`);
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
      .query(`SELECT CAST(extract(epoch FROM beat_at) * 1000 AS float8) AS t FROM ${quoteIdent(h.rel.schema)}.${quoteIdent(h.rel.name)} WHERE source_id = $1`, [h.source])
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
export function pgSourceSide(client: Queryable, tableId: string, key: readonly string[], masked: readonly string[], o: { countClient?: Queryable } = {}): PgReconcileSide {
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
  o: { label?: string; heartbeatSchema?: string; stablePoint?: boolean; countClient?: Queryable } = {},
): PgReconcileSide {
  const t = warehouseTable(source, tableId);
  const hb = warehouseTable(source, `${o.heartbeatSchema ?? DEFAULT_HEARTBEAT_SCHEMA}.${HEARTBEAT_TABLE}`);
  const heartbeat = o.stablePoint === false ? {} : { heartbeat: { rel: { schema: hb.schema, name: hb.view }, source } };
  return new PgReconcileSide({ schema: t.schema, name: t.view }, { client, label: o.label ?? 'warehouse', key, position: true, ...heartbeat, ...(o.countClient ? { countClient: o.countClient } : {}) });
}

/** Opens the session settings on a client (see the module comment). */
export async function prepareReconcileSession(client: Queryable): Promise<void> {
  await client.query(RECONCILE_SESSION_SQL);
}
