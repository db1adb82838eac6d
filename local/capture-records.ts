/**
 * The slot capture's records (local/capture.ts): decoded transactions with their leaf partitions'
 * changes named by their root (docs/partitioned-tables.md), turned into raw records (`cdc-slot/1`,
 * lambda/core/capture/slot-record.ts) for the captured tables with the column rules applied, and
 * each record's partition key on the raw stream.
 */
import { createHash } from 'node:crypto';
import type { ColumnRules } from '../lambda/core/tables/masking.ts';
import { ruled } from './capture-columns.ts';
import { pushOrReport, type PoisonChange } from './capture-poison.ts';
import { buildSlotRecord, type SlotChange, type SlotRecord } from '../lambda/core/capture/slot-record.ts';
import type { DecodedTransaction } from '../lambda/core/capture/logical-text.ts';
import type { TableConfigIndex } from '../lambda/core/tables/table-config.ts';
import { partitionKeyOf, type Row } from '../lambda/core/shared/event.ts';
import type { CatalogType } from './catalog.ts';
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
  source: string,
  transactions: readonly RootedTransaction[],
  tables: TableConfigIndex,
  keys: ReadonlyMap<string, string[]>,
  types?: ReadonlyMap<string, ReadonlyMap<string, CatalogType>>,
  onInvalid?: (p: PoisonChange) => void,
  captured?: ReadonlySet<string>,
): SlotRecord[] {
  const out: SlotRecord[] = [];
  for (const tx of transactions) {
    tx.changes.forEach((change, i) => {
      const index = tx.indexes?.[i] ?? i;
      if (!tables.has(change.table) || (captured !== undefined && !captured.has(change.table))) return;
      const rules = tables.columnRules(change.table);
      const key = keys.get(change.table) ?? [];
      // A change that cannot be built goes to `onInvalid` (a dead letter: local/capture-poison.ts) when it is given.
      pushOrReport(out, onInvalid, tx, index, change, () =>
        buildSlotRecord(
          { source, xid: tx.xid, commitLsn: tx.commitLsn, commitTs: tx.commitTs },
          index,
          {
            table: change.table,
            op: change.op,
            columns: ruled(change.columns, rules, types?.get(change.table)),
            oldKey: ruled(change.oldKey, rules, types?.get(change.table)),
            unchanged: change.unchanged.filter((u) => !rules.exclude.includes(u)),
            ...(change.unchanged.length > 0 ? { unchangedTypes: unchangedTypesOf(change, rules, types?.get(change.table)) } : {}),
          },
          key,
        ),
      );
    });
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
  const key: Row = {};
  for (const k of r.key) {
    const c = tuple?.find((x) => x.name === k);
    if (c) key[k] = c.value;
  }
  return partitionKeyOf({ source: r.source, table: r.table, key }, sha256);
}
