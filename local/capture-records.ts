/**
 * The slot capture's records (local/capture.ts): decoded transactions with their leaf partitions'
 * changes named by their root (docs/partitioned-tables.md), turned into slot records (`cdc-slot/1`,
 * lambda/core/capture/slot-record.ts) for the captured tables with the column rules applied, then
 * into the raw records the capture publishes (DMS records), with each record's partition key on
 * the raw stream.
 */
import { createHash } from 'node:crypto';
import type { ColumnRules } from '../lambda/core/tables/masking.ts';
import { ruled } from './capture-columns.ts';
import type { PoisonChange } from './capture-poison.ts';
import { InvalidRecordError } from '../lambda/core/shared/errors.ts';
import { buildSlotRecord, type SlotChange, type SlotColumn, type SlotRecord } from '../lambda/core/capture/slot-record.ts';
import type { DecodedTransaction } from '../lambda/core/capture/logical-text.ts';
import type { TableConfigIndex } from '../lambda/core/tables/table-config.ts';
import { partitionKeyOf, type Row } from '../lambda/core/shared/event.ts';
import { keyValueText } from '../lambda/core/shared/json-exact.ts';
import type { CatalogType } from './catalog.ts';
import type { RawRecord } from './raw-publisher.ts';
import { dmsExpresses, dmsRecordText, dmsTableDefOf, type DmsPrevious } from '../lambda/core/capture/dms-record.ts';
import { changesToRoots, type PartialTruncate, type PartitionTree } from '../lambda/core/tables/partitions.ts';

function sha256(s: string): string {
  return createHash('sha256').update(s).digest('hex');
}

/**
 * A decoded transaction whose changes of leaf partitions name their root (`toRoots`); `indexes`
 * holds each change's index in the transaction as decoded, where a change was dropped or merged
 * (a truncate of a root's leaves: lambda/core/tables/partitions.ts).
 */
export interface RootedTransaction extends DecodedTransaction {
  indexes?: readonly number[];
}

/**
 * Maps every change of a leaf partition to its root (lambda/core/tables/partitions.ts,
 * docs/partitioned-tables.md), columns in the root's order where `types` knows it. A truncate of
 * some of a root's leaves is dropped and reported to `onPartialTruncate`.
 */
export function toRoots(
  transactions: readonly DecodedTransaction[],
  tree: PartitionTree,
  types: ReadonlyMap<string, ReadonlyMap<string, CatalogType>>,
  onPartialTruncate: (p: PartialTruncate) => void,
): RootedTransaction[] {
  if (tree.rootOf.size === 0) return transactions as RootedTransaction[];
  return transactions.map((tx) => {
    if (!tx.changes.some((c) => tree.rootOf.has(c.table))) return tx;
    const { changes, partial } = changesToRoots(tree, tx.changes, (root) => {
      const t = types.get(root);
      return t ? [...t.keys()] : undefined;
    });
    partial.forEach(onPartialTruncate);
    return {
      ...tx,
      changes: changes.map(({ change }) => (change.table === `${change.schema}.${change.name}` ? change : { ...change, ...splitTableIdLoose(change.table) })),
      indexes: changes.map((c) => c.index),
    };
  });
}

/** `schema.table` as its two parts (a root's name comes from the catalog: it has one dot). */
function splitTableIdLoose(table: string): { schema: string; name: string } {
  const dot = table.indexOf('.');
  return { schema: table.slice(0, dot), name: table.slice(dot + 1) };
}

/**
 * Turns decoded transactions into raw records for the captured tables (masking applied). The
 * index of a record is the change's index in its transaction, so positions do not depend on
 * which tables are captured.
 */
export function transactionsToRecords(
  sourceId: string,
  transactions: readonly RootedTransaction[],
  tables: TableConfigIndex,
  keys: ReadonlyMap<string, string[]>,
  types?: ReadonlyMap<string, ReadonlyMap<string, CatalogType>>,
  onInvalid?: (p: PoisonChange) => void,
  captured?: ReadonlySet<string>,
): SlotRecord[] {
  const out: SlotRecord[] = [];
  // What each table's records are built with, looked up once per call (plain loops, no closure per change: docs/performance-log.md, "35. The slot capture's work per change").
  const per = new Map<string, { rules: ColumnRules; key: readonly string[]; types: ReadonlyMap<string, CatalogType> | undefined } | null>();
  for (const tx of transactions) {
    const at = { source: sourceId, xid: tx.xid, commitLsn: tx.commitLsn, commitTs: tx.commitTs };
    for (let i = 0; i < tx.changes.length; i++) {
      const change = tx.changes[i]!;
      const index = tx.indexes?.[i] ?? i;
      let t = per.get(change.table);
      if (t === undefined) {
        t =
          !tables.has(change.table) || (captured !== undefined && !captured.has(change.table))
            ? null
            : { rules: tables.columnRules(change.table), key: keys.get(change.table) ?? [], types: types?.get(change.table) };
        per.set(change.table, t);
      }
      if (t === null) continue;
      const { rules, key, types: tableTypes } = t;
      try {
        out.push(
          buildSlotRecord(
            at,
            index,
            {
              table: change.table,
              op: change.op,
              columns: ruled(change.columns, rules, tableTypes),
              oldKey: ruled(change.oldKey, rules, tableTypes),
              unchanged: change.unchanged.length === 0 ? [] : change.unchanged.filter((u) => !rules.exclude.includes(u)),
              ...(change.unchanged.length > 0 ? { unchangedTypes: unchangedTypesOf(change, rules, tableTypes) } : {}),
            },
            key,
          ),
        );
      } catch (err) {
        // A change that cannot be built goes to `onInvalid` (a dead letter: local/capture-poison.ts) when it is given.
        if (!onInvalid || !(err instanceof InvalidRecordError)) throw err;
        onInvalid({ tx, index, change, error: err });
      }
    }
  }
  return out;
}

/**
 * The types of a change's unchanged TOAST columns, as `ruled` types delivered columns: the
 * catalog's modifier added, a masked column `text`, an excluded one left out.
 */
function unchangedTypesOf(change: SlotChange, rules: ColumnRules, types: ReadonlyMap<string, CatalogType> | undefined): Record<string, string> {
  const printed = change.unchanged.flatMap((name) => {
    const type = change.unchangedTypes?.[name] ?? types?.get(name)?.full;
    return type ? [{ name, type, value: null }] : [];
  });
  return Object.fromEntries((ruled(printed, rules, types) ?? []).map((c) => [c.name, c.type]));
}

/**
 * The leaf partition each rooted change came from, by `xid#index` (only changes of partitions):
 * DMS names a partitioned table's change by its leaf (docs/partitioned-tables.md).
 */
export function leavesOf(decoded: readonly DecodedTransaction[], rooted: readonly RootedTransaction[]): Map<string, string> {
  const out = new Map<string, string>();
  rooted.forEach((tx, t) => {
    if (tx.indexes === undefined) return;
    tx.changes.forEach((c, i) => {
      const index = tx.indexes![i]!;
      const leaf = decoded[t]!.changes[index]!.table;
      if (leaf !== c.table) out.set(`${tx.xid}#${index}`, leaf);
    });
  });
  return out;
}

/** The raw stream partition key of a record: source + table + (new, or for deletes old) key. */
export function rawPartitionKey(r: SlotRecord): string {
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

/** What `rawRecordsOf` builds a batch's raw records with. */
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

/**
 * The raw records of a batch of the slot capture (local/capture.ts): a DMS record for each row
 * change (lambda/core/capture/dms-record.ts, docs/local.md "DMS records"), named by its leaf
 * partition as DMS names it; a truncate stays a `cdc-slot/1` record (DMS delivers none:
 * docs/truncate.md).
 */
export function rawRecordsOf(records: readonly SlotRecord[], ctx: RawBatchContext): RawRecord[] {
  const { types, leaves, shapes, last } = ctx;
  const now = new Date();
  const out: RawRecord[] = [];
  let xid: string | null = null;
  let previous = last.dms;
  // The last DMS record written (its transaction and index name it as the previous one: `prev-transaction-*`).
  let lastDms: SlotRecord | null = null;
  // Per table, once per batch: the row image's columns last checked against the published shape, and the catalog's columns kept.
  const checked = new Map<string, readonly { name: string; type: string }[]>();
  const kept = new Map<string, string[] | null>();
  // A record's label is `source/table@commitLsn#index`: the text before the index made once per transaction and table.
  let labelOf: SlotRecord | null = null;
  let labelPrefix = '';
  for (let i = 0; i < records.length; i++) {
    const r = records[i]!;
    if (labelOf === null || r.table !== labelOf.table || r.commitLsn !== labelOf.commitLsn || r.source !== labelOf.source) {
      labelOf = r;
      labelPrefix = `${r.source}/${r.table}@${r.commitLsn}#`;
    }
    const label = labelPrefix + r.index;
    if (!dmsExpresses(r)) {
      out.push({ partitionKey: rawPartitionKey(r), data: JSON.stringify(r), label });
      continue;
    }
    // Every record of a transaction names the previous transaction's last record.
    if (r.xid !== xid) {
      if (xid !== null && lastDms !== null) previous = { transactionId: Number(lastDms.xid), recordId: lastDms.index };
      xid = r.xid;
    }
    const partitionKey = rawPartitionKey(r);
    // A row image naming every column whose shape this capture has not published: its table definition first, as DMS sends one.
    // (Its shape text is made only when the columns differ from the last image of the table checked in this batch.)
    if (r.op !== 'delete' && r.unchanged.length === 0 && !sameShape(checked.get(r.table), r.columns!)) {
      const shape = JSON.stringify(r.columns!.map((c) => [c.name, c.type]));
      checked.set(r.table, r.columns!);
      if (shapes.get(r.table) !== shape) {
        const control = dmsTableDefOf(r.table, r.columns!, r.key, shapes.has(r.table) ? 'change-columns' : 'create-table', { now, taskId: ctx.taskId });
        out.push({ partitionKey, data: JSON.stringify(control), label: `${label}:table-def` });
        shapes.set(r.table, shape);
      }
    }
    let columns = kept.get(r.table);
    if (columns === undefined) {
      const rules = ctx.tables.columnRules(r.table);
      const catalog = types.get(r.table);
      columns = catalog === undefined ? null : [...catalog.keys()].filter((c) => !rules.exclude.includes(c));
      kept.set(r.table, columns);
    }
    const table = leaves.size === 0 ? r.table : (leaves.get(`${r.xid}#${r.index}`) ?? r.table);
    out.push({ partitionKey, data: dmsRecordText(r, { now, columns, previous, table }), label });
    lastDms = r;
  }
  if (lastDms !== null) last.dms = { transactionId: Number(lastDms.xid), recordId: lastDms.index };
  return out;
}

/** Whether two row images name the same columns with the same types, in the same order. */
function sameShape(a: readonly { name: string; type: string }[] | undefined, b: readonly { name: string; type: string }[]): boolean {
  if (a === undefined || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i]!.name !== b[i]!.name || a[i]!.type !== b[i]!.type) return false;
  return true;
}
