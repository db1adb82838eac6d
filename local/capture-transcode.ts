/**
 * The slot capture's batch path without a slot record where none is needed (docs/performance-log.md,
 * "47. The slot capture: DMS records written from the parsed change"): a change of a captured table
 * with no masked or excluded column, no unchanged TOAST value and the images its operation carries,
 * its names and types well formed, is written to its DMS record straight from the parsed change
 * (its columns as the parser made them, the catalog's type modifiers read where the table
 * definition needs them); every other change becomes its slot record as before
 * (local/capture-records.ts). Both go through the same writer (local/raw-records.ts), so the raw
 * records are the same, byte for byte and in the same order, as `transactionsToRecords` then
 * `rawRecordsOf` write them (test/local/capture-transcode-equivalence.test.ts).
 *
 * The first step (`batchChanges`) decides and builds what can fail before anything is published,
 * as `transactionsToRecords` does (a change that breaks a record's rules is a dead letter); the
 * second (`batchRawRecords`) writes the texts.
 */
import { InvalidRecordError } from '../lambda/core/shared/errors.ts';
import type { TestDecodingChange } from '../lambda/core/capture/logical-text.ts';
import { TABLE_ID, type SlotColumn, type SlotRecord } from '../lambda/core/capture/slot-record.ts';
import type { TableConfigIndex } from '../lambda/core/tables/table-config.ts';
import type { CatalogType } from './catalog.ts';
import type { PoisonChange } from './capture-poison.ts';
import { capturedTable, slotRecordOf, type CapturedTable, type RootedTransaction } from './capture-records.ts';
import type { RawRecord } from './raw-publisher.ts';
import { RawWriter, type RawBatchContext, type RawSource } from './raw-records.ts';

/**
 * A batch's changes of the captured tables, in order (`batchChanges`): each a slot record, or the
 * parsed change itself where its DMS record is written from it; with its transaction, index in the
 * transaction and table key.
 */
export interface BatchChanges {
  source: string;
  items: Array<SlotRecord | TestDecodingChange>;
  /** The tables of `items`, each once (what the catalog is published for before them). */
  tables: Set<string>;
  transactions: RootedTransaction[];
  indexes: number[];
  keys: Array<readonly string[]>;
}

/** A captured table whose changes may be written without their slot record. */
interface Table extends CapturedTable {
  direct: boolean;
}

/**
 * The captured changes of a batch, as `transactionsToRecords` selects them; a change it would
 * refuse goes to `onInvalid` as there (or is thrown without it).
 */
export function batchChanges(
  sourceId: string,
  transactions: readonly RootedTransaction[],
  tables: TableConfigIndex,
  keys: ReadonlyMap<string, string[]>,
  types: ReadonlyMap<string, ReadonlyMap<string, CatalogType>>,
  onInvalid: ((p: PoisonChange) => void) | undefined,
  captured: ReadonlySet<string> | undefined,
): BatchChanges {
  const out: BatchChanges = { source: sourceId, items: [], tables: new Set(), transactions: [], indexes: [], keys: [] };
  let lastTable: string | null = null;
  const per = new Map<string, Table | null>();
  for (const tx of transactions) {
    let at: { source: string; xid: string; commitLsn: string; commitTs: string } | null = null;
    for (let i = 0; i < tx.changes.length; i++) {
      const change = tx.changes[i]!;
      const index = tx.indexes?.[i] ?? i;
      let t = per.get(change.table);
      if (t === undefined) {
        const c = capturedTable(change.table, tables, keys, types, captured);
        // Written out, not spread: one shape for every batch's tables (a spread's object took a new shape each batch, and the optimized loop was thrown away).
        t = c === null ? null : { rules: c.rules, key: c.key, types: c.types, direct: writesDirectly(change.table, c) };
        per.set(change.table, t);
      }
      if (t === null) continue;
      let item: SlotRecord | TestDecodingChange = change;
      if (!t.direct || !plainChange(change)) {
        at ??= { source: sourceId, xid: tx.xid, commitLsn: tx.commitLsn, commitTs: tx.commitTs };
        try {
          item = slotRecordOf(at, index, change, t);
        } catch (err) {
          // As `transactionsToRecords`: a dead letter (local/capture-poison.ts) when `onInvalid` is given.
          if (!onInvalid || !(err instanceof InvalidRecordError)) throw err;
          onInvalid({ tx, index, change, error: err });
          continue;
        }
      }
      out.items.push(item);
      if (change.table !== lastTable) out.tables.add((lastTable = change.table));
      out.transactions.push(tx);
      out.indexes.push(index);
      out.keys.push(t.key);
    }
  }
  return out;
}

/** The raw records of a batch's changes (`batchChanges`), as `rawRecordsOf` writes their slot records. */
export function batchRawRecords(batch: BatchChanges, ctx: RawBatchContext): RawRecord[] {
  const writer = new RawWriter(ctx);
  // One view reused for every change written directly: its slot record's fields, without the record (the writer keeps none of it).
  const view: RawSource = {
    source: batch.source,
    xid: '',
    commitLsn: '',
    commitTs: '',
    index: 0,
    table: '',
    op: 'insert',
    key: [],
    columns: null,
    oldKey: null,
    unchanged: [],
  };
  const { items } = batch;
  for (let i = 0; i < items.length; i++) {
    const item = items[i]!;
    if ('format' in item) {
      writer.add(item);
      continue;
    }
    const tx = batch.transactions[i]!;
    view.xid = tx.xid;
    view.commitLsn = tx.commitLsn;
    view.commitTs = tx.commitTs;
    view.index = batch.indexes[i]!;
    view.table = item.table;
    view.op = item.op;
    view.key = batch.keys[i] as string[];
    view.columns = item.columns;
    view.oldKey = item.oldKey;
    view.unchanged = item.unchanged;
    writer.add(view, ctx.types.get(item.table));
  }
  return writer.finish();
}

/**
 * Whether a table's changes may be written without their slot record: no column rule (the values
 * and names are the parsed ones), a table id and key a slot record accepts, and catalog types that
 * complete a printed type to a non-empty one.
 */
function writesDirectly(table: string, t: CapturedTable): boolean {
  if (t.rules.mask.length > 0 || t.rules.exclude.length > 0 || !TABLE_ID.test(table)) return false;
  const key = t.key;
  if (key.length === 0) return false;
  for (let i = 0; i < key.length; i++) {
    if (key[i] === '') return false;
    for (let j = 0; j < i; j++) if (key[j] === key[i]) return false;
  }
  if (t.types !== undefined) for (const c of t.types.values()) if (c.full === '') return false;
  return true;
}

/**
 * Whether a change of such a table passes every rule `buildSlotRecord` checks (so its slot record
 * would be built): an insert with the new row and no old image, an update with the new row, a
 * delete with the old image, no unchanged TOAST value, names and types non-empty and no column
 * named twice. Anything else becomes its slot record, which accepts or refuses it as before.
 */
function plainChange(change: TestDecodingChange): boolean {
  if (change.unchanged.length !== 0) return false;
  switch (change.op) {
    case 'insert':
      if (change.columns === null || change.oldKey !== null) return false;
      break;
    case 'update':
      if (change.columns === null) return false;
      break;
    case 'delete':
      if (change.columns !== null || change.oldKey === null) return false;
      break;
    default:
      return false;
  }
  return (change.columns === null || wellNamed(change.columns)) && (change.oldKey === null || wellNamed(change.oldKey));
}

/** A tuple of a few columns, each named and typed, no name twice (a longer one is left to the slot record's check). */
function wellNamed(cols: readonly SlotColumn[]): boolean {
  if (cols.length > 32) return false;
  for (let i = 0; i < cols.length; i++) {
    const c = cols[i]!;
    if (c.name === '' || c.type === '') return false;
    for (let j = 0; j < i; j++) if (cols[j]!.name === c.name) return false;
  }
  return true;
}
