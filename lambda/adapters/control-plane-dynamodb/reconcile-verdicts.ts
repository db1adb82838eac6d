/** Reconciliation verdicts in the control plane (docs/reconcile.md): the latest per sink and table, JSON in `body`. */
import { PutItemCommand } from '@aws-sdk/client-dynamodb';
import { ControlPartition } from '../../../contracts/control-plane-keys.ts';
import type { ReconcileVerdict } from '../../core/reconcile/reconcile.ts';
import { key, nonEmpty, sortableTime, toItem, type ControlTable } from './control-table.ts';

export async function putReconcileVerdict(t: ControlTable, verdict: ReconcileVerdict): Promise<void> {
  nonEmpty(verdict.sink, 'verdict.sink');
  nonEmpty(verdict.source, 'verdict.source');
  nonEmpty(verdict.table, 'verdict.table');
  sortableTime(verdict.at);
  await t.client.send(
    new PutItemCommand({
      TableName: t.tableName,
      Item: toItem({
        ...key.verdict(verdict.sink, verdict.source, verdict.table),
        kind: 'reconcile-verdict',
        verdict: verdict.verdict,
        at: verdict.at,
        body: JSON.stringify(verdict),
      }),
    }),
  );
}

export async function getReconcileVerdict(t: ControlTable, sink: string, sourceId: string, table: string): Promise<ReconcileVerdict | null> {
  const item = await t.get(key.verdict(sink, sourceId, table));
  return item ? (JSON.parse(String(item.body)) as ReconcileVerdict) : null;
}

export async function listReconcileVerdicts(t: ControlTable, sink?: string): Promise<ReconcileVerdict[]> {
  // All sinks (coverage across sinks): sink ids are not listed anywhere, so a scan for the kind.
  const items = sink !== undefined ? await t.query({ pk: ControlPartition.verdicts(sink), skPrefix: 'TABLE#' }) : await t.scanKind('reconcile-verdict');
  const key3 = (v: ReconcileVerdict): string => `${v.sink}\u0000${v.source}\u0000${v.table}`;
  return items.map((i) => JSON.parse(String(i.body)) as ReconcileVerdict).sort((a, b) => (key3(a) < key3(b) ? -1 : key3(a) > key3(b) ? 1 : 0));
}
