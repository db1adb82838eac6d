/** Reconciliation verdicts in the control plane (docs/reconcile.md): the latest per sink and table, JSON in `body`. */
import { PutItemCommand, ScanCommand } from '@aws-sdk/client-dynamodb';
import { unmarshall } from '@aws-sdk/util-dynamodb';
import { ControlPartition } from '../../../contracts/control-plane-keys.ts';
import type { ReconcileVerdict } from '../../core/reconcile/reconcile.ts';
import { key, nonEmpty, sortableTime, toItem, type ControlTable, type Item, type Plain } from './control-table.ts';

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

export async function getReconcileVerdict(t: ControlTable, sink: string, source: string, table: string): Promise<ReconcileVerdict | null> {
  const item = await t.get(key.verdict(sink, source, table));
  return item ? (JSON.parse(String(item.body)) as ReconcileVerdict) : null;
}

export async function listReconcileVerdicts(t: ControlTable, sink?: string): Promise<ReconcileVerdict[]> {
  let items: Plain[];
  if (sink !== undefined) items = await t.query({ pk: ControlPartition.verdicts(sink), skPrefix: 'TABLE#' });
  else {
    // All sinks (coverage across sinks): sink ids are not listed anywhere, so a scan for the kind.
    items = [];
    let start: Item | undefined;
    do {
      const page = await t.client.send(
        new ScanCommand({
          TableName: t.tableName,
          ConsistentRead: true,
          FilterExpression: '#kind = :kind',
          ExpressionAttributeNames: { '#kind': 'kind' },
          ExpressionAttributeValues: toItem({ ':kind': 'reconcile-verdict' }),
          ...(start ? { ExclusiveStartKey: start } : {}),
        }),
      );
      for (const i of page.Items ?? []) items.push(unmarshall(i));
      start = page.LastEvaluatedKey;
    } while (start);
  }
  const key3 = (v: ReconcileVerdict): string => `${v.sink}\u0000${v.source}\u0000${v.table}`;
  return items.map((i) => JSON.parse(String(i.body)) as ReconcileVerdict).sort((a, b) => (key3(a) < key3(b) ? -1 : key3(a) > key3(b) ? 1 : 0));
}
