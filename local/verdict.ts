/**
 * The verdict of a bounded run: every captured table of the source compared with its warehouse
 * view row by row (and, with `compareSourceAndSearch`, with its search index document by document). Masked columns are compared masked (the source value through the same
 * `maskValue` the capture uses), excluded columns must be absent from the warehouse, and every
 * key must be present exactly once on both sides.
 *
 * Warehouse names come from lambda/core/warehouse/warehouse-sql.ts (`warehouseTable`): schema
 * `<source>_<schema>`, the view named after the table (over `_cdc_mirror_<table>` and the unmerged
 * `_cdc_delta_<table>`, docs/warehouse-apply.md): rows are read through the view.
 *
 * Values are compared by their PostgreSQL text (both sessions in UTC, ISO dates) with the one
 * comparison of reconciliation (lambda/core/shared/same-value.ts), by the class of the column's type:
 * the type the schema registry holds for it when a control plane is given (`control`), else the
 * source catalog's. Numeric columns by exact decimal value (`12.5` = `12.50`, so a column typed
 * differently in the warehouse still compares by value), JSON columns by structure, everything
 * else byte for byte (docs/reconcile.md, "How values compare").
 */
import pg from 'pg';
import { compareClasses, sameValue, type CompareClass } from '../lambda/core/shared/same-value.ts';
import { registeredTypes } from '../lambda/core/reconcile/reconcile.ts';
import type { ControlPlane } from '../lambda/core/shared/control-plane.ts';
import { maskValue } from '../lambda/core/tables/masking.ts';
import { quoteIdent, splitTableId } from '../lambda/core/shared/identifiers.ts';
import { warehouseTable } from '../lambda/core/warehouse/warehouse-sql.ts';
import type { TableConfig } from '../lambda/core/tables/table-config.ts';
import { columnsOf, columnTypesOf, primaryKeyOf } from './catalog.ts';
import { documentValueText } from '../lambda/core/reconcile/reconcile-rows.ts';
import { DEFAULT_INDEX_PREFIX, searchNames } from '../lambda/core/search/search-plan.ts';
import type { OpenSearchIndex } from '../lambda/adapters/search-opensearch.ts';

export interface TableVerdict {
  table: string;
  sourceRows: number;
  warehouseRows: number;
  /** Keys in the source but not in the warehouse. */
  missing: number;
  /** Keys in the warehouse but not in the source. */
  extra: number;
  /** Keys on both sides with a differing value. */
  different: number;
  /** Keys that appear more than once in the warehouse view. */
  duplicates: number;
  /** Structural problems (no warehouse view, an excluded column present, …). */
  problems: string[];
  /** A few examples of differences, for humans. */
  examples: string[];
  match: boolean;
  /**
   * Set when the table differs but its sink had not caught up when a bounded run's drain bound
   * ran out: the difference may be events not yet applied, so the table is not compared (never
   * DIVERGED; docs/local.md, "Bounded runs (`--duration`)").
   */
  notCompared?: { pendingEvents: number; snapshotRowsLeft: number };
}

export interface Verdict {
  match: boolean;
  tables: TableVerdict[];
  /** What the source was compared with (`warehouse` when absent; `search index` for the search sink). */
  sink?: string;
}

export interface CompareOptions {
  sourceUrl: string;
  warehouseUrl: string;
  /** Source id (the warehouse schema is `<source>_<schema>`). */
  source: string;
  tables: readonly TableConfig[];
  /** How many example differences to keep per table. @default 5 */
  examples?: number;
  /** The control plane whose schema registry types the columns (else the source catalog does). */
  controlPlane?: ControlPlane;
  /** The sink's id: a table it holds is named with why, and does not match (needs `control`). */
  sink?: string;
}

/**
 * What to say of a table the sink holds (docs/operations.md, "Blast radius of one table"): since
 * when, from which position, why (the sink's last `hold-table` audit entry, or the table's pause),
 * and the command that replays it. Null when the sink holds nothing of the table.
 */
export async function sinkHoldProblem(controlPlane: ControlPlane, sink: string, sourceId: string, table: string): Promise<string | null> {
  const progress = await controlPlane.getSinkProgress(sink, sourceId, table);
  if (!progress?.heldFrom) return null;
  const audit = await controlPlane.listAudit(sourceId, table, progress.heldAt ?? undefined);
  const entry = audit.filter((e) => e.action === 'hold-table' && e.detail.sink === sink).at(-1);
  const why = typeof entry?.detail.reason === 'string' ? `: ${entry.detail.reason}` : ' (the table is paused or needs a re-snapshot)';
  return `held by sink ${sink} since ${progress.heldAt ?? 'unknown'} from position ${progress.heldFrom}${why}; its changes from there are not applied: fix the cause, then cdc resume ${table}`;
}

async function session(url: string): Promise<pg.Client> {
  const client = new pg.Client({ connectionString: url, application_name: 'cdc-local-verdict' });
  // A connection the server ends fails the comparison's next query (a named error), not the process.
  client.on('error', () => undefined);
  await client.connect();
  await client.query("SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1");
  return client;
}

/** How each compared column's values compare (see the module comment); masked columns as their masked text. */
async function compareAs(
  src: pg.Client,
  controlPlane: ControlPlane | undefined,
  sourceId: string,
  config: TableConfig,
  columns: readonly string[],
): Promise<Record<string, CompareClass>> {
  const registered = controlPlane ? await registeredTypes(controlPlane, sourceId, config.table) : undefined;
  const catalog = (await columnTypesOf(src, [config.table])).get(config.table);
  return compareClasses(columns, registered, catalog ? Object.fromEntries([...catalog].map(([c, t]) => [c, t.full])) : undefined, config.mask);
}

type Rows = Map<string, Record<string, string | null>>;

async function readRows(client: pg.Client, schema: string, table: string, columns: string[], key: string[]): Promise<{ rows: Rows; duplicates: number }> {
  // Each value's text as PostgreSQL writes it (its type's output function: what the capture
  // carries), `format('%s', …)`: the `::text` cast trims `character(n)`'s padding and adds an
  // `inet` host's `/32` or `/128` (docs/types.md). The NULL test is on the text: a composite of
  // NULL fields `IS NULL`, yet has the text `(,)`.
  const select = columns
    .map((c) => `CASE WHEN ${quoteIdent(c)}::text IS NULL THEN NULL ELSE format('%s', ${quoteIdent(c)}) END AS ${quoteIdent(c)}`)
    .join(', ');
  const res = await client.query({ text: `SELECT ${select} FROM ${quoteIdent(schema)}.${quoteIdent(table)}`, rowMode: 'array' });
  const rows: Rows = new Map();
  let duplicates = 0;
  const keyIdx = key.map((k) => columns.indexOf(k));
  for (const raw of res.rows as (string | null)[][]) {
    const k = JSON.stringify(keyIdx.map((i) => raw[i]));
    if (rows.has(k)) duplicates++;
    const row: Record<string, string | null> = {};
    columns.forEach((c, i) => (row[c] = raw[i] ?? null));
    rows.set(k, row);
  }
  return { rows, duplicates };
}

function short(v: string | null): string {
  if (v === null) return 'null';
  return JSON.stringify(v.length > 40 ? `${v.slice(0, 40)}…` : v);
}

/** A table's verdict before anything is compared. */
function emptyTableVerdict(table: string): TableVerdict {
  return { table, sourceRows: 0, warehouseRows: 0, missing: 0, extra: 0, different: 0, duplicates: 0, problems: [], examples: [], match: false };
}

/** The source table's columns and key (declared, else its primary key); null, with the problem named in `v`, when it has none. */
async function sourceColumnsAndKey(src: pg.Client, config: TableConfig, v: TableVerdict): Promise<{ columns: string[]; key: string[] } | null> {
  const { schema, table } = splitTableId(config.table);
  const columns = await columnsOf(src, schema, table);
  if (columns.length === 0) {
    v.problems.push(`source table ${config.table} does not exist`);
    return null;
  }
  const key = config.key ?? (await primaryKeyOf(src, schema, table));
  if (key.length === 0) {
    v.problems.push(`source table ${config.table} has no primary key (declare one with the table's key setting)`);
    return null;
  }
  return { columns, key };
}

/** Compares every captured table (see the module comment). */
export async function compareSourceAndWarehouse(options: CompareOptions): Promise<Verdict> {
  const maxExamples = options.examples ?? 5;
  const src = await session(options.sourceUrl);
  const wh = await session(options.warehouseUrl);
  try {
    const tables: TableVerdict[] = [];
    for (const config of options.tables) {
      const { schema, table } = splitTableId(config.table);
      const names = warehouseTable(options.source, config.table);
      const whSchema = names.schema;
      const v = emptyTableVerdict(config.table);
      tables.push(v);
      const found = await sourceColumnsAndKey(src, config, v);
      if (!found) continue;
      const { columns: srcColumns, key } = found;
      const whColumns = await columnsOf(wh, whSchema, names.view);
      if (whColumns.length === 0) {
        v.problems.push(`warehouse view ${whSchema}.${names.view} does not exist`);
        continue;
      }
      const mirrorColumns = await columnsOf(wh, whSchema, names.mirror);
      const deltaColumns = await columnsOf(wh, whSchema, names.delta);
      for (const ex of config.exclude) {
        if (whColumns.includes(ex) || mirrorColumns.includes(ex) || deltaColumns.includes(ex))
          v.problems.push(`excluded column ${ex} is present in the warehouse`);
      }
      const compared = srcColumns.filter((c) => !config.exclude.includes(c));
      const absent = compared.filter((c) => !whColumns.includes(c));
      if (absent.length > 0) v.problems.push(`warehouse view ${whSchema}.${names.view} lacks column(s) ${absent.join(', ')}`);
      const columns = compared.filter((c) => whColumns.includes(c));
      const classes = await compareAs(src, options.controlPlane, options.source, config, columns);
      const source = await readRows(src, schema, table, columns, key);
      const warehouse = await readRows(wh, whSchema, names.view, columns, key);
      v.sourceRows = source.rows.size;
      v.warehouseRows = warehouse.rows.size + warehouse.duplicates;
      v.duplicates = warehouse.duplicates;
      if (warehouse.duplicates > 0) v.examples.push(`${warehouse.duplicates} key(s) appear more than once in the warehouse view`);
      if (mirrorColumns.length > 0 && key.every((k) => mirrorColumns.includes(k))) {
        // Tombstones included: the mirror keeps exactly one row per key ever seen.
        const keyList = key.map(quoteIdent).join(', ');
        const dup = await wh.query(
          `SELECT count(*)::int AS n FROM (SELECT 1 FROM ${quoteIdent(whSchema)}.${quoteIdent(names.mirror)} GROUP BY ${keyList} HAVING count(*) > 1) d`,
        );
        const n = Number(dup.rows[0]?.n ?? 0);
        if (n > 0) {
          v.duplicates += n;
          v.examples.push(`${n} key(s) have more than one row in ${whSchema}.${names.mirror}`);
        }
      }
      for (const [k, row] of source.rows) {
        const other = warehouse.rows.get(k);
        if (!other) {
          v.missing++;
          if (v.examples.length < maxExamples) v.examples.push(`key ${k}: missing in the warehouse`);
          continue;
        }
        for (const c of columns) {
          const expected = config.mask.includes(c) ? maskValue(row[c] ?? null) : (row[c] ?? null);
          if (!sameValue(classes[c] ?? 'text', expected, other[c] ?? null)) {
            v.different++;
            if (v.examples.length < maxExamples) v.examples.push(`key ${k}: ${c} is ${short(other[c] ?? null)} in the warehouse, expected ${short(expected)}`);
            break;
          }
        }
      }
      for (const k of warehouse.rows.keys()) {
        if (!source.rows.has(k)) {
          v.extra++;
          if (v.examples.length < maxExamples) v.examples.push(`key ${k}: in the warehouse but not in the source`);
        }
      }
      const held = options.controlPlane && options.sink ? await sinkHoldProblem(options.controlPlane, options.sink, options.source, config.table) : null;
      if (held) v.problems.push(held);
      v.match = v.problems.length === 0 && v.missing === 0 && v.extra === 0 && v.different === 0 && v.duplicates === 0;
    }
    return { match: tables.length > 0 && tables.every((t) => t.match), tables };
  } finally {
    await src.end();
    await wh.end();
  }
}

/** The verdict as lines for a terminal or a CI log. */
export function formatVerdict(verdict: Verdict): string[] {
  const sink = verdict.sink ?? 'warehouse';
  const open = verdict.tables.filter((t) => t.notCompared).length;
  const diverged = verdict.tables.some((t) => !t.match && !t.notCompared);
  const outcome = verdict.match ? 'MATCH' : diverged ? 'MISMATCH' : `NOT COMPLETE (${open} table${open === 1 ? '' : 's'} not compared)`;
  const lines = [`verdict${verdict.sink ? ` (${sink})` : ''}: ${outcome}`];
  for (const t of verdict.tables) {
    const counts = `source ${t.sourceRows} rows, ${sink} ${t.warehouseRows} ${verdict.sink ? 'documents' : 'rows'}`;
    if (t.notCompared) {
      const snap = t.notCompared.snapshotRowsLeft > 0 ? `; its snapshot had ${t.notCompared.snapshotRowsLeft} rows still to read` : '';
      lines.push(`  open ${t.table}: not compared: ${t.notCompared.pendingEvents} events not yet applied to ${sink}${snap} (so far ${counts})`);
      for (const p of t.problems) lines.push(`       ${p}`);
      continue;
    }
    lines.push(
      `  ${t.match ? 'ok  ' : 'FAIL'} ${t.table}: ${counts}${t.match ? '' : `; missing ${t.missing}, extra ${t.extra}, different ${t.different}, duplicate keys ${t.duplicates}`}`,
    );
    for (const p of t.problems) lines.push(`       ${p}`);
    for (const e of t.examples) lines.push(`       ${e}`);
  }
  return lines;
}

// ---------------------------------------------------------------------------------------------
// The search index (docs/search.md, "The verdict")

export interface CompareSearchOptions {
  sourceUrl: string;
  /** The search sink's index adapter (stand-in or a real OpenSearch). */
  search: OpenSearchIndex;
  source: string;
  tables: readonly TableConfig[];
  /** Index name prefix. @default 'cdc' */
  prefix?: string;
  examples?: number;
  /** The control plane whose schema registry types the columns (else the source catalog does). */
  controlPlane?: ControlPlane;
  /** The search sink's id: a table it holds is named with why, and does not match (needs `control`). */
  sink?: string;
}

/**
 * Compares every captured table of the source with its search index: the live documents (the
 * readers' alias, so tombstones are not counted) against the source rows, key by key and column
 * by column, masked columns compared masked, excluded columns absent from every document. A
 * document's absent field counts as null. Values compare by their column's class (see the module comment).
 */
export async function compareSourceAndSearch(options: CompareSearchOptions): Promise<Verdict> {
  const maxExamples = options.examples ?? 5;
  const src = await session(options.sourceUrl);
  try {
    const tables: TableVerdict[] = [];
    for (const config of options.tables) {
      const { schema, table } = splitTableId(config.table);
      const v = emptyTableVerdict(config.table);
      tables.push(v);
      const found = await sourceColumnsAndKey(src, config, v);
      if (!found) continue;
      const { columns: srcColumns, key } = found;
      const columns = srcColumns.filter((c) => !config.exclude.includes(c));
      const classes = await compareAs(src, options.controlPlane, options.source, config, columns);
      const source = await readRows(src, schema, table, columns, key);
      v.sourceRows = source.rows.size;
      const names = searchNames(options.prefix ?? DEFAULT_INDEX_PREFIX, options.source, config.table);
      const docs: Rows = new Map();
      if (await options.search.exists(names)) {
        for await (const d of options.search.listDocuments(names)) {
          v.warehouseRows++;
          for (const ex of config.exclude)
            if (ex in d.values && v.problems.length < maxExamples) v.problems.push(`excluded column ${ex} is present in document ${d.id}`);
          const k = JSON.stringify(key.map((c) => documentValueText(d.values[c])));
          if (docs.has(k)) v.duplicates++;
          docs.set(k, Object.fromEntries(columns.map((c) => [c, documentValueText(d.values[c])])));
        }
      } else if (v.sourceRows > 0) {
        v.problems.push(`search index ${names.alias} does not exist`);
      }
      for (const [k, row] of source.rows) {
        const other = docs.get(k);
        if (!other) {
          v.missing++;
          if (v.examples.length < maxExamples) v.examples.push(`key ${k}: missing in the search index`);
          continue;
        }
        for (const c of columns) {
          const expected = config.mask.includes(c) ? maskValue(row[c] ?? null) : (row[c] ?? null);
          if (!sameValue(classes[c] ?? 'text', expected, other[c] ?? null)) {
            v.different++;
            if (v.examples.length < maxExamples)
              v.examples.push(`key ${k}: ${c} is ${short(other[c] ?? null)} in the search index, expected ${short(expected)}`);
            break;
          }
        }
      }
      for (const k of docs.keys()) {
        if (!source.rows.has(k)) {
          v.extra++;
          if (v.examples.length < maxExamples) v.examples.push(`key ${k}: in the search index but not in the source`);
        }
      }
      const held = options.controlPlane && options.sink ? await sinkHoldProblem(options.controlPlane, options.sink, options.source, config.table) : null;
      if (held) v.problems.push(held);
      v.match = v.problems.length === 0 && v.missing === 0 && v.extra === 0 && v.different === 0 && v.duplicates === 0;
    }
    return { match: tables.length > 0 && tables.every((t) => t.match), tables, sink: 'search index' };
  } finally {
    await src.end();
  }
}
