/**
 * Rebuilds in the control plane (docs/rebuild.md): one item per run, JSON in `body`, written with its audit
 * entry; and the sink's rebuild slot: one item, `state` and `heartbeatAt` as attributes for the
 * conditions, the claim as JSON in `body`.
 */
import { ConditionalCheckFailedException, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { ControlPartition } from '../../../contracts/control-plane-keys.ts';
import type { ActiveRebuild, AuditEntry, RebuildCheckpoint, RebuildRun } from '../../core/shared/control-plane.ts';
import { auditPut } from './audit.ts';
import { key, nonEmpty, sortableTime, toItem, transactionFailed, type ControlTable, type Plain } from './control-table.ts';

export async function recordRebuild(t: ControlTable, run: RebuildRun, audit: AuditEntry): Promise<void> {
  nonEmpty(run.sink, 'rebuild.sink');
  nonEmpty(run.id, 'rebuild.id');
  const outcome = await t.transact([
    {
      Put: {
        TableName: t.tableName,
        Item: toItem({
          ...key.rebuild(run.sink, run.source, run.table, run.startedAt, run.id),
          kind: 'rebuild',
          source: run.source,
          table: run.table,
          body: JSON.stringify(run),
        }),
        ConditionExpression: 'attribute_not_exists(pk)',
      },
    },
    auditPut(t, audit),
  ]);
  if (!outcome.ok) throw transactionFailed('recordRebuild', outcome.reasons);
}

export async function listRebuilds(t: ControlTable, sink: string, sourceId?: string, table?: string): Promise<RebuildRun[]> {
  const prefix = sourceId === undefined ? undefined : table === undefined ? `${sourceId}#` : `${sourceId}#${table}#`;
  const items = await t.query({ pk: ControlPartition.rebuilds(sink), ...(prefix ? { skPrefix: prefix } : {}) });
  return items
    .filter((i) => i.kind === 'rebuild')
    .map((i) => JSON.parse(String(i.body)) as RebuildRun)
    .sort((a, b) => (a.startedAt < b.startedAt ? -1 : a.startedAt > b.startedAt ? 1 : 0));
}

export async function claimRebuild(t: ControlTable, claim: ActiveRebuild, staleBefore: string, audit: AuditEntry): Promise<ActiveRebuild | null> {
  nonEmpty(claim.sink, 'rebuild.sink');
  nonEmpty(claim.id, 'rebuild.id');
  const outcome = await t.transact([
    {
      Put: {
        TableName: t.tableName,
        Item: toItem({
          ...key.activeRebuild(claim.sink),
          kind: 'rebuild-slot',
          id: claim.id,
          state: claim.state,
          heartbeatAt: sortableTime(claim.heartbeatAt),
          body: JSON.stringify(claim),
        }),
        ConditionExpression: 'attribute_not_exists(pk) OR #state = :finished OR #hb < :stale',
        ExpressionAttributeNames: { '#state': 'state', '#hb': 'heartbeatAt' },
        ExpressionAttributeValues: toItem({ ':finished': 'finished', ':stale': sortableTime(staleBefore) }),
      },
    },
    auditPut(t, audit),
  ]);
  if (outcome.ok) return null;
  if (outcome.reasons[0] === 'ConditionalCheckFailed') {
    const holder = await getActiveRebuild(t, claim.sink);
    if (holder) return holder;
  }
  throw transactionFailed('claimRebuild', outcome.reasons);
}

export async function getActiveRebuild(t: ControlTable, sink: string): Promise<ActiveRebuild | null> {
  const item = await t.get(key.activeRebuild(sink));
  return item ? (JSON.parse(String(item.body)) as ActiveRebuild) : null;
}

export async function checkpointRebuild(t: ControlTable, sink: string, id: string, checkpoint: RebuildCheckpoint, at: string): Promise<boolean> {
  for (let attempt = 0; ; attempt++) {
    const item = await t.get(key.activeRebuild(sink));
    if (!item || item.id !== id || item.state !== 'running') return false;
    const claim = { ...(JSON.parse(String(item.body)) as ActiveRebuild), checkpoint, heartbeatAt: at };
    try {
      await writeSlot(t, sink, claim, at, '', '#id = :id AND #state = :running AND #body = :old', { ':id': id, ':running': 'running', ':old': item.body });
      return true;
    } catch (e) {
      if (!(e instanceof ConditionalCheckFailedException) || attempt >= 5) throw e;
    }
  }
}

export async function releaseRebuild(t: ControlTable, sink: string, id: string, at: string): Promise<void> {
  const item = await t.get(key.activeRebuild(sink));
  if (!item || item.id !== id) return;
  const claim = { ...(JSON.parse(String(item.body)) as ActiveRebuild), state: 'finished' as const, heartbeatAt: at };
  try {
    await writeSlot(t, sink, claim, at, ', #state = :finished', '#id = :id', { ':id': id, ':finished': 'finished' });
  } catch (e) {
    if (!(e instanceof ConditionalCheckFailedException)) throw e;
  }
}

/**
 * Writes the rebuild slot of `sink`: the claim as its `body` and `at` as its heartbeat, `set` more
 * (`state`), if `condition` holds (else DynamoDB's ConditionalCheckFailedException).
 */
async function writeSlot(t: ControlTable, sink: string, claim: ActiveRebuild, at: string, set: string, condition: string, values: Plain): Promise<void> {
  await t.client.send(
    new UpdateItemCommand({
      TableName: t.tableName,
      Key: toItem(key.activeRebuild(sink)),
      UpdateExpression: `SET #body = :body, #hb = :hb${set}`,
      ConditionExpression: condition,
      ExpressionAttributeNames: { '#body': 'body', '#hb': 'heartbeatAt', '#id': 'id', '#state': 'state' },
      ExpressionAttributeValues: toItem({ ':body': JSON.stringify(claim), ':hb': sortableTime(at), ...values }),
    }),
  );
}
