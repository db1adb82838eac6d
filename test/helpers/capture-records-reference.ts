/**
 * The slot capture's raw records as local/capture-records.ts built them before
 * docs/performance-log.md §37 (a partition key's text and a record's label written whole for every
 * record): the reference the randomized equivalence test holds `rawRecordsOf` to, byte for byte.
 */
import { createHash } from 'node:crypto';
import { dmsExpresses, dmsRecordText, dmsTableDefOf, type DmsPrevious } from '../../lambda/core/capture/dms-record.ts';
import type { SlotColumn, SlotRecord } from '../../lambda/core/capture/slot-record.ts';
import { partitionKeyOf, type Row } from '../../lambda/core/shared/event.ts';
import { keyValueText } from '../../lambda/core/shared/json-exact.ts';
import type { RawBatchContext } from '../../local/capture-records.ts';
import type { RawRecord } from '../../local/raw-publisher.ts';

function sha256(s: string): string {
  return createHash('sha256').update(s).digest('hex');
}

export function referenceRawPartitionKey(r: SlotRecord): string {
  const tuple = r.op === 'delete' ? r.oldKey : r.columns;
  if (r.key.length === 1 && r.key[0] !== '__proto__') {
    const k = r.key[0]!;
    let c: SlotColumn | undefined;
    if (tuple !== null) {
      for (let i = 0; i < tuple.length && c === undefined; i++) if (tuple[i]!.name === k) c = tuple[i];
    }
    const text = c === undefined ? '[]' : JSON.stringify([[k, c.value === null || typeof c.value === 'object' ? c.value : keyValueText(c.value)]]);
    const pk = `${r.source}/${r.table}/${text}`;
    return pk.length <= 256 ? pk : `${r.source}/${sha256(pk)}`;
  }
  const key: Row = {};
  for (const k of r.key) {
    const c = tuple?.find((x) => x.name === k);
    if (c) key[k] = c.value;
  }
  return partitionKeyOf({ source: r.source, table: r.table, key }, sha256);
}

export function referenceRawRecordsOf(records: readonly SlotRecord[], ctx: RawBatchContext): RawRecord[] {
  const { types, leaves, shapes, last } = ctx;
  const now = new Date();
  const out: RawRecord[] = [];
  let xid: string | null = null;
  let previous = last.dms;
  let lastDms: SlotRecord | null = null;
  const checked = new Map<string, readonly { name: string; type: string }[]>();
  const kept = new Map<string, string[] | null>();
  for (let i = 0; i < records.length; i++) {
    const r = records[i]!;
    const label = `${r.source}/${r.table}@${r.commitLsn}#${r.index}`;
    if (!dmsExpresses(r)) {
      out.push({ partitionKey: referenceRawPartitionKey(r), data: JSON.stringify(r), label });
      continue;
    }
    if (r.xid !== xid) {
      if (xid !== null && lastDms !== null) previous = { transactionId: Number(lastDms.xid), recordId: lastDms.index };
      xid = r.xid;
    }
    const partitionKey = referenceRawPartitionKey(r);
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
  if (lastDms !== null) last.dms = { transactionId: Number(lastDms.xid), recordId: lastDms.index } satisfies DmsPrevious;
  return out;
}

function sameShape(a: readonly { name: string; type: string }[] | undefined, b: readonly { name: string; type: string }[]): boolean {
  if (a === undefined || a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i]!.name !== b[i]!.name || a[i]!.type !== b[i]!.type) return false;
  return true;
}
