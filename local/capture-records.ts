/**
 * The slot capture's records (local/capture.ts): decoded transactions with their leaf partitions'
 * changes named by their root (docs/partitioned-tables.md), turned into slot records (`cdc-slot/1`,
 * lambda/core/capture/slot-record.ts) for the captured tables with the column rules applied, then
 * into the raw records the capture publishes (DMS records, local/raw-records.ts).
 */
import type { ColumnRules } from '../lambda/core/tables/masking.ts';
import { ruled } from './capture-columns.ts';
import type { PoisonChange } from './capture-poison.ts';
import { InvalidRecordError } from '../lambda/core/shared/errors.ts';
import { buildSlotRecord, type SlotChange, type SlotRecord, type SlotTransaction } from '../lambda/core/capture/slot-record.ts';
import type { DecodedTransaction } from '../lambda/core/capture/logical-text.ts';
import type { TableConfigIndex } from '../lambda/core/tables/table-config.ts';
import type { CatalogType } from './catalog.ts';
import type { RawRecord } from './raw-publisher.ts';
import { RawWriter, type RawBatchContext } from './raw-records.ts';
import { changesToRoots, type PartialTruncate, type PartitionTree } from '../lambda/core/tables/partitions.ts';

export type { RawBatchContext } from './raw-records.ts';

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

/** What a captured table's records are built with: its column rules, key and catalog types. */
export interface CapturedTable {
  rules: ColumnRules;
  key: readonly string[];
  types: ReadonlyMap<string, CatalogType> | undefined;
}

/** What `table`'s records are built with, or null when the batch does not capture it. */
export function capturedTable(
  table: string,
  tables: TableConfigIndex,
  keys: ReadonlyMap<string, string[]>,
  types: ReadonlyMap<string, ReadonlyMap<string, CatalogType>> | undefined,
  captured: ReadonlySet<string> | undefined,
): CapturedTable | null {
  if (!tables.has(table) || (captured !== undefined && !captured.has(table))) return null;
  return { rules: tables.columnRules(table), key: keys.get(table) ?? [], types: types?.get(table) };
}

/** The slot record of a change of a captured table, its column rules applied; throws `InvalidRecordError` for one that breaks a record's rules. */
export function slotRecordOf(at: SlotTransaction, index: number, change: SlotChange, t: CapturedTable): SlotRecord {
  const { rules, key, types } = t;
  return buildSlotRecord(
    at,
    index,
    {
      table: change.table,
      op: change.op,
      columns: ruled(change.columns, rules, types),
      oldKey: ruled(change.oldKey, rules, types),
      unchanged: change.unchanged.length === 0 ? [] : change.unchanged.filter((u) => !rules.exclude.includes(u)),
      ...(change.unchanged.length > 0 ? { unchangedTypes: unchangedTypesOf(change, rules, types) } : {}),
    },
    key,
  );
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
  const per = new Map<string, CapturedTable | null>();
  for (const tx of transactions) {
    const at = { source: sourceId, xid: tx.xid, commitLsn: tx.commitLsn, commitTs: tx.commitTs };
    for (let i = 0; i < tx.changes.length; i++) {
      const change = tx.changes[i]!;
      const index = tx.indexes?.[i] ?? i;
      let t = per.get(change.table);
      if (t === undefined) {
        t = capturedTable(change.table, tables, keys, types, captured);
        per.set(change.table, t);
      }
      if (t === null) continue;
      try {
        out.push(slotRecordOf(at, index, change, t));
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
 * The tables the changes of `transactions` name, each once, found in one pass (not one array per
 * change). A small function of its own: the capture's async batch step then has no loop over
 * every change for the optimizing compiler to compile on each start (docs/performance-log.md,
 * "50. The slot capture: less optimizing compilation per start").
 */
export function tablesOf(transactions: readonly DecodedTransaction[]): Set<string> {
  const named = new Set<string>();
  let last: string | null = null;
  for (const t of transactions) {
    const changes = t.changes;
    for (let i = 0; i < changes.length; i++) {
      const table = changes[i]!.table;
      if (table !== last) named.add((last = table));
    }
  }
  return named;
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

/**
 * The raw records of a batch of slot records (local/raw-records.ts): a DMS record for each row
 * change, named by its leaf partition as DMS names it; a truncate stays a `cdc-slot/1` record
 * (DMS delivers none: docs/truncate.md).
 */
export function rawRecordsOf(records: readonly SlotRecord[], ctx: RawBatchContext): RawRecord[] {
  const writer = new RawWriter(ctx);
  for (let i = 0; i < records.length; i++) writer.add(records[i]!);
  return writer.finish();
}
