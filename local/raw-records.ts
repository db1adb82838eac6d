/**
 * The raw records of a batch of the slot capture (local/capture.ts): a DMS record for each row
 * change (lambda/core/capture/dms-record.ts, docs/local.md "DMS records"), named by its leaf
 * partition as DMS names it, a table definition before a row image of a shape not published yet; a
 * truncate stays a `cdc-slot/1` record (DMS delivers none: docs/truncate.md). Each record's
 * partition key on the raw stream is its source, table and key.
 *
 * `RawWriter` writes them one record at a time from a slot record, or from the same fields of a
 * change written without its slot record (local/capture-transcode.ts): one loop for both, so both
 * write the same bytes.
 */
import { createHash } from 'node:crypto';
import { dmsExpresses, dmsRecordText, dmsTableDefOf, type DmsPrevious, type DmsSource } from '../lambda/core/capture/dms-record.ts';
import type { SlotColumn, SlotRecord } from '../lambda/core/capture/slot-record.ts';
import { partitionKeyOf, type Row } from '../lambda/core/shared/event.ts';
import { keyValueText } from '../lambda/core/shared/json-exact.ts';
import type { TableConfigIndex } from '../lambda/core/tables/table-config.ts';
import type { CatalogType } from './catalog.ts';
import { fullType, ruled } from './capture-columns.ts';
import type { RawRecord } from './raw-publisher.ts';

function sha256(s: string): string {
  return createHash('sha256').update(s).digest('hex');
}

/** What a batch's raw records are built with. */
export interface RawBatchContext {
  types: ReadonlyMap<string, ReadonlyMap<string, CatalogType>>;
  /** The leaf partition of each rooted change (`leavesOf`). */
  leaves: ReadonlyMap<string, string>;
  /** The shape (column names and types) of each table's last table definition published; updated with the ones this batch adds. */
  shapes: Map<string, string>;
  /** The last DMS record published (its transaction names it as the previous one); updated to this batch's last. */
  last: { dms: DmsPrevious | null };
  tables: TableConfigIndex;
  /** The task id control records are partitioned by (DMS: the task's resource id). */
  taskId: string;
}

/** The fields a raw record is written from: a slot record's. */
export type RawSource = DmsSource & Pick<SlotRecord, 'source' | 'key'>;

/** The raw stream partition key of a record: source + table + (new, or for deletes old) key. */
export function rawPartitionKey(r: Pick<SlotRecord, 'source' | 'table' | 'op' | 'key' | 'columns' | 'oldKey'>): string {
  const tuple = r.op === 'delete' ? r.oldKey : r.columns;
  // One key column (the usual case): its text as `keyText` writes it, without the row object and the sort.
  if (r.key.length === 1 && r.key[0] !== '__proto__') {
    const k = r.key[0]!;
    let c: SlotColumn | undefined;
    if (tuple !== null) {
      for (let i = 0; i < tuple.length && c === undefined; i++) if (tuple[i]!.name === k) c = tuple[i];
    }
    const value = c === undefined ? undefined : c.value === null || typeof c.value === 'object' ? c.value : keyValueText(c.value);
    // `JSON.stringify([[k, value]])` written around the value's JSON, the text before it made once per table (docs/performance-log.md §37).
    const pk = value === undefined ? `${r.source}/${r.table}/[]` : `${keyPrefix(r.source, r.table, k)}${JSON.stringify(value)}]]`;
    return pk.length <= 256 ? pk : `${r.source}/${sha256(pk)}`;
  }
  const key: Row = {};
  for (const k of r.key) {
    const c = tuple?.find((x) => x.name === k);
    if (c) key[k] = c.value;
  }
  return partitionKeyOf({ source: r.source, table: r.table, key }, sha256);
}

/** The partition key's text before a one-column key's value (`source/table/[["k",`), kept for the next record of the same table. */
const lastKey = { source: '', table: '', column: '', prefix: '' };

function keyPrefix(source: string, table: string, column: string): string {
  const l = lastKey;
  if (l.source !== source || l.table !== table || l.column !== column) {
    l.source = source;
    l.table = table;
    l.column = column;
    l.prefix = `${source}/${table}/[[${JSON.stringify(column)},`;
  }
  return l.prefix;
}

/** Writes a batch's raw records in order (`add` per record, then `finish`). */
export class RawWriter {
  private readonly out: RawRecord[] = [];
  private readonly now = new Date();
  private xid: string | null = null;
  private previous: DmsPrevious | null;
  /** The last DMS record written (its transaction and index name it as the previous one: `prev-transaction-*`). */
  private lastXid: string | null = null;
  private lastIndex = 0;
  /** Per table, once per batch: the row image's columns last checked against the published shape, and the catalog's columns kept. */
  private readonly checked = new Map<string, readonly { name: string; type: string }[]>();
  private readonly kept = new Map<string, string[] | null>();
  /** A record's label is `source/table@commitLsn#index`: the text before the index made once per transaction and table. */
  private readonly label = { source: '', table: '', commitLsn: '', prefix: '', made: false };

  constructor(private readonly ctx: RawBatchContext) {
    this.previous = ctx.last.dms;
  }

  /**
   * Writes the raw records of one record. `types`: the catalog's types its columns' printed types
   * are completed with, as `ruled` completes them (a change written without its slot record);
   * undefined when its columns carry them already (a slot record).
   */
  add(r: RawSource, types?: ReadonlyMap<string, CatalogType>): void {
    const { ctx, out } = this;
    const label = this.labelPrefix(r) + r.index;
    if (!dmsExpresses(r)) {
      out.push({ partitionKey: rawPartitionKey(r), data: JSON.stringify(r), label });
      return;
    }
    // Every record of a transaction names the previous transaction's last record.
    if (r.xid !== this.xid) {
      if (this.xid !== null && this.lastXid !== null) this.previous = { transactionId: Number(this.lastXid), recordId: this.lastIndex };
      this.xid = r.xid;
    }
    const partitionKey = rawPartitionKey(r);
    // A row image naming every column whose shape this capture has not published: its table definition first, as DMS sends one.
    // (Its shape text is made only when the columns differ from the last image of the table checked in this batch.)
    if (r.op !== 'delete' && r.unchanged.length === 0 && !sameShape(this.checked.get(r.table), r.columns!, types)) {
      const columns = types === undefined ? r.columns! : ruled(r.columns, ctx.tables.columnRules(r.table), types)!;
      const shape = JSON.stringify(columns.map((c) => [c.name, c.type]));
      this.checked.set(r.table, columns);
      if (ctx.shapes.get(r.table) !== shape) {
        const control = dmsTableDefOf(r.table, columns, r.key, ctx.shapes.has(r.table) ? 'change-columns' : 'create-table', {
          now: this.now,
          taskId: ctx.taskId,
        });
        out.push({ partitionKey, data: JSON.stringify(control), label: `${label}:table-def` });
        ctx.shapes.set(r.table, shape);
      }
    }
    let columns = this.kept.get(r.table);
    if (columns === undefined) {
      const rules = ctx.tables.columnRules(r.table);
      const catalog = ctx.types.get(r.table);
      columns = catalog === undefined ? null : [...catalog.keys()].filter((c) => !rules.exclude.includes(c));
      this.kept.set(r.table, columns);
    }
    const table = ctx.leaves.size === 0 ? r.table : (ctx.leaves.get(`${r.xid}#${r.index}`) ?? r.table);
    out.push({ partitionKey, data: dmsRecordText(r, { now: this.now, columns, previous: this.previous, table }), label });
    this.lastXid = r.xid;
    this.lastIndex = r.index;
  }

  /** The batch's raw records; the last DMS record written becomes the context's last. */
  finish(): RawRecord[] {
    if (this.lastXid !== null) this.ctx.last.dms = { transactionId: Number(this.lastXid), recordId: this.lastIndex };
    return this.out;
  }

  private labelPrefix(r: RawSource): string {
    const l = this.label;
    if (!l.made || r.table !== l.table || r.commitLsn !== l.commitLsn || r.source !== l.source) {
      l.made = true;
      l.source = r.source;
      l.table = r.table;
      l.commitLsn = r.commitLsn;
      l.prefix = `${r.source}/${r.table}@${r.commitLsn}#`;
    }
    return l.prefix;
  }
}

/**
 * Whether two row images name the same columns with the same types, in the same order; the types
 * of `b` completed from `types` as `ruled` completes them, where given.
 */
function sameShape(
  a: readonly { name: string; type: string }[] | undefined,
  b: readonly SlotColumn[],
  types: ReadonlyMap<string, CatalogType> | undefined,
): boolean {
  if (a === undefined || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) {
    const c = b[i]!;
    if (a[i]!.name !== c.name || a[i]!.type !== (types === undefined ? c.type : fullType(c, types.get(c.name)))) return false;
  }
  return true;
}
