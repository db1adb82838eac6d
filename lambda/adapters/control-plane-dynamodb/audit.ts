/**
 * The audit log of the control plane (docs/architecture.md §5.3): one partition, read in time order; an entry
 * is written alone or as the last item of the transaction whose state change it records.
 */
import { PutItemCommand, type TransactWriteItem } from '@aws-sdk/client-dynamodb';
import { ControlPartition } from '../../../contracts/control-plane-keys.ts';
import { CdcError } from '../../core/shared/errors.ts';
import type { AuditEntry } from '../../core/shared/control-plane.ts';
import { key, nonEmpty, sortableTime, toItem, type ControlTable, type Plain } from './control-table.ts';

export function auditPut(t: ControlTable, entry: AuditEntry): TransactWriteItem {
  if (entry.outcome !== 'done' && entry.outcome !== 'refused')
    throw new CdcError('INVALID_ARGUMENT', `audit outcome must be 'done' or 'refused', got ${JSON.stringify(entry.outcome)}`);
  nonEmpty(entry.actor, 'audit.actor');
  nonEmpty(entry.action, 'audit.action');
  return {
    Put: {
      TableName: t.tableName,
      Item: toItem({
        ...key.audit(entry.at),
        kind: 'audit',
        at: entry.at,
        actor: entry.actor,
        action: entry.action,
        source: entry.source,
        table: entry.table,
        outcome: entry.outcome,
        detail: JSON.stringify(entry.detail ?? {}),
      }),
      ConditionExpression: 'attribute_not_exists(pk)',
    },
  };
}

export async function appendAudit(t: ControlTable, entry: AuditEntry): Promise<void> {
  const put = auditPut(t, entry).Put!;
  await t.client.send(new PutItemCommand({ TableName: put.TableName, Item: put.Item, ConditionExpression: put.ConditionExpression }));
}

export async function listAudit(t: ControlTable, sourceId?: string, table?: string, since?: string): Promise<AuditEntry[]> {
  const filters: string[] = [];
  const names: Record<string, string> = {};
  const values: Plain = {};
  if (sourceId !== undefined) {
    filters.push('#source = :source');
    names['#source'] = 'source';
    values[':source'] = sourceId;
  }
  if (table !== undefined) {
    filters.push('#table = :table');
    names['#table'] = 'table';
    values[':table'] = table;
  }
  // The sort key starts with the entry's time: `since` is a key condition (only that part of the log is read).
  const items = await t.query({
    pk: ControlPartition.AUDIT,
    ...(since !== undefined ? { skFrom: sortableTime(since) } : {}),
    filter: filters.length ? { expression: filters.join(' AND '), names, values } : undefined,
  });
  return items.map(auditFromItem);
}

function auditFromItem(i: Plain): AuditEntry {
  let detail: Record<string, unknown> = {};
  try {
    detail = JSON.parse(String(i.detail)) as Record<string, unknown>;
  } catch {
    detail = { unreadable: String(i.detail) };
  }
  return {
    at: String(i.at),
    actor: String(i.actor),
    action: String(i.action),
    source: typeof i.source === 'string' ? i.source : null,
    table: typeof i.table === 'string' ? i.table : null,
    outcome: i.outcome === 'refused' ? 'refused' : 'done',
    detail,
  };
}
