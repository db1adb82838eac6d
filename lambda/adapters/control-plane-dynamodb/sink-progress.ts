/**
 * A sink's progress per table in the control plane (docs/architecture.md §5.3): the applied high-water mark
 * that only rises and the hold that keeps the lowest held position (condition expressions on the
 * item, not read-then-write), and the release of a hold (docs/operations.md).
 */
import { ConditionalCheckFailedException, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { assertPosition, type Position } from '../../core/shared/position.ts';
import { mergeHeldShards } from '../../core/operator/operator-decisions.ts';
import type { AuditEntry, SinkTableProgress } from '../../core/shared/control-plane.ts';
import { auditPut } from './audit.ts';
import { key, toItem, transactionFailed, type ControlTable, type Plain } from './control-table.ts';

const SINK_NAMES = { '#sink': 'sink', '#source': 'source', '#table': 'table', '#kind': 'kind', '#updated': 'updatedAt' };

export async function getSinkProgress(t: ControlTable, sink: string, sourceId: string, table: string): Promise<SinkTableProgress | null> {
  const item = await t.get(key.sink(sink, sourceId, table));
  return item ? sinkProgressFromItem(item) : null;
}

export async function advanceSinkProgress(t: ControlTable, sink: string, sourceId: string, table: string, appliedPosition: Position): Promise<void> {
  assertPosition(appliedPosition, 'appliedPosition');
  await conditionalUpdate(
    t,
    key.sink(sink, sourceId, table),
    'SET #applied = :p, #sink = :sink, #source = :source, #table = :table, #kind = :kind, #updated = :now',
    'attribute_not_exists(#applied) OR #applied < :p',
    { ...SINK_NAMES, '#applied': 'appliedPosition' },
    { ':p': appliedPosition, ...sinkValues(sink, sourceId, table) },
  );
}

export async function holdSinkTable(
  t: ControlTable,
  sink: string,
  sourceId: string,
  table: string,
  fromPosition: Position,
  shards?: Readonly<Record<string, string>>,
  parallelBatches = false,
): Promise<void> {
  assertPosition(fromPosition, 'fromPosition');
  const k = key.sink(sink, sourceId, table);
  // One conditional write of the held position, the per-shard first held sequence numbers and
  // the hold count, conditional on what was read (optimistic, retried on a concurrent hold or
  // release): the resume replay reads them at once and releases only if the count did not move,
  // so a hold recorded during a replay is never released unreplayed (docs/operations.md).
  for (let attempt = 1; ; attempt++) {
    const item = await t.get(k);
    const cur = item ? sinkProgressFromItem(item) : null;
    const count = cur?.holdCount ?? 0;
    const oldHeld = cur?.heldFrom ?? null;
    const held = oldHeld !== null && oldHeld < fromPosition ? oldHeld : fromPosition;
    const merged = shards !== undefined ? mergeHeldShards(cur?.heldFromShards, shards) : (cur?.heldFromShards ?? null);
    const conditions = [count > 0 ? '#holds = :count' : 'attribute_not_exists(#holds)', oldHeld !== null ? '#held = :oldHeld' : 'attribute_not_exists(#held)'];
    try {
      await t.client.send(
        new UpdateItemCommand({
          TableName: t.tableName,
          Key: toItem(k),
          UpdateExpression: `SET #held = :p, #heldAt = if_not_exists(#heldAt, :now), #holds = :next, #sink = :sink, #source = :source, #table = :table, #kind = :kind, #updated = :now${merged !== null ? ', #shards = :shards' : ''}${parallelBatches ? ', #parallel = :parallel' : ''}`,
          ConditionExpression: conditions.join(' AND '),
          ExpressionAttributeNames: {
            ...SINK_NAMES,
            '#held': 'heldFrom',
            '#heldAt': 'heldAt',
            '#holds': 'holdCount',
            ...(merged !== null ? { '#shards': 'heldFromShards' } : {}),
            ...(parallelBatches ? { '#parallel': 'parallelBatches' } : {}),
          },
          ExpressionAttributeValues: toItem({
            ':p': held,
            ':next': count + 1,
            ...sinkValues(sink, sourceId, table),
            ...(count > 0 ? { ':count': count } : {}),
            ...(oldHeld !== null ? { ':oldHeld': oldHeld } : {}),
            ...(merged !== null ? { ':shards': merged } : {}),
            ...(parallelBatches ? { ':parallel': true } : {}),
          }),
        }),
      );
      return;
    } catch (e) {
      if (!(e instanceof ConditionalCheckFailedException) || attempt >= 50) throw e;
    }
  }
}

/** The resume replay's progress on the current hold, conditional on the hold (docs/operations.md, "How a resume replays"). */
export async function noteReplayProgress(
  t: ControlTable,
  sink: string,
  sourceId: string,
  table: string,
  through: Readonly<Record<string, string>>,
): Promise<boolean> {
  return conditionalUpdate(
    t,
    key.sink(sink, sourceId, table),
    'SET #through = :through, #updated = :now',
    'attribute_exists(#held)',
    { '#through': 'replayedThrough', '#updated': 'updatedAt', '#held': 'heldFrom' },
    { ':through': { ...through }, ':now': new Date().toISOString() },
  );
}

export async function releaseSinkTable(t: ControlTable, sink: string, sourceId: string, table: string, audit: AuditEntry): Promise<void> {
  const outcome = await t.transact([
    {
      Update: {
        TableName: t.tableName,
        Key: toItem(key.sink(sink, sourceId, table)),
        UpdateExpression:
          'SET #sink = :sink, #source = :source, #table = :table, #kind = :kind, #updated = :now REMOVE #held, #heldAt, #shards, #parallel, #through',
        ExpressionAttributeNames: {
          ...SINK_NAMES,
          '#held': 'heldFrom',
          '#heldAt': 'heldAt',
          '#shards': 'heldFromShards',
          '#parallel': 'parallelBatches',
          '#through': 'replayedThrough',
        },
        ExpressionAttributeValues: toItem(sinkValues(sink, sourceId, table)),
      },
    },
    auditPut(t, audit),
  ]);
  if (!outcome.ok) throw transactionFailed('releaseSinkTable', outcome.reasons);
}

export async function listSinkProgress(t: ControlTable, sink?: string): Promise<SinkTableProgress[]> {
  if (sink !== undefined) return (await t.query({ pk: `SINK#${sink}`, skPrefix: 'TABLE#' })).map(sinkProgressFromItem);
  // All sinks (the operator status, on demand): sink ids are not listed anywhere, so a scan for the kind.
  const out = (await t.scanKind('sink-progress')).map(sinkProgressFromItem);
  return out.sort((a, b) => (a.sink + a.source + a.table < b.sink + b.source + b.table ? -1 : 1));
}

export async function completeSinkRelease(
  t: ControlTable,
  sink: string,
  sourceId: string,
  table: string,
  expected: { heldFrom: Position; holdCount: number },
  audit: AuditEntry,
): Promise<boolean> {
  const outcome = await t.transact([
    {
      Update: {
        TableName: t.tableName,
        Key: toItem(key.sink(sink, sourceId, table)),
        UpdateExpression: 'SET #released = :now, #updated = :now REMOVE #held, #heldAt, #shards, #parallel, #through',
        ConditionExpression: expected.holdCount > 0 ? '#held = :held AND #holds = :holds' : '#held = :held AND attribute_not_exists(#holds)',
        ExpressionAttributeNames: {
          '#released': 'releasedAt',
          '#updated': 'updatedAt',
          '#held': 'heldFrom',
          '#heldAt': 'heldAt',
          '#holds': 'holdCount',
          '#shards': 'heldFromShards',
          '#parallel': 'parallelBatches',
          '#through': 'replayedThrough',
        },
        ExpressionAttributeValues: toItem({
          ':now': new Date().toISOString(),
          ':held': expected.heldFrom,
          ...(expected.holdCount > 0 ? { ':holds': expected.holdCount } : {}),
        }),
      },
    },
    auditPut(t, audit),
  ]);
  if (outcome.ok) return true;
  if (outcome.reasons[0] === 'ConditionalCheckFailed') return false;
  throw transactionFailed('completeSinkRelease', outcome.reasons);
}

export async function clearReleaseRequest(t: ControlTable, sink: string, sourceId: string, table: string): Promise<boolean> {
  return conditionalUpdate(t, key.sink(sink, sourceId, table), 'REMOVE #release', 'attribute_exists(pk) AND attribute_not_exists(#held)', {
    '#release': 'releaseRequested',
    '#held': 'heldFrom',
  });
}

function sinkValues(sink: string, sourceId: string, table: string): Plain {
  return { ':sink': sink, ':source': sourceId, ':table': table, ':kind': 'sink-progress', ':now': new Date().toISOString() };
}

/** One UpdateItem under `condition`: true when it was written, false when the condition did not hold. */
async function conditionalUpdate(
  t: ControlTable,
  k: { pk: string; sk: string },
  update: string,
  condition: string,
  names: Record<string, string>,
  values?: Plain,
): Promise<boolean> {
  try {
    await t.client.send(
      new UpdateItemCommand({
        TableName: t.tableName,
        Key: toItem(k),
        UpdateExpression: update,
        ConditionExpression: condition,
        ExpressionAttributeNames: names,
        ...(values ? { ExpressionAttributeValues: toItem(values) } : {}),
      }),
    );
    return true;
  } catch (e) {
    if (e instanceof ConditionalCheckFailedException) return false;
    throw e;
  }
}

function shardMapFromItem(v: unknown): Record<string, string> | null {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return null;
  const out: Record<string, string> = {};
  for (const [shard, seq] of Object.entries(v as Plain)) if (typeof seq === 'string') out[shard] = seq;
  return out;
}

function sinkProgressFromItem(item: Plain): SinkTableProgress {
  return {
    sink: String(item.sink),
    source: String(item.source),
    table: String(item.table),
    appliedPosition: typeof item.appliedPosition === 'string' ? item.appliedPosition : null,
    heldFrom: typeof item.heldFrom === 'string' ? item.heldFrom : null,
    heldAt: typeof item.heldAt === 'string' ? item.heldAt : null,
    holdCount: typeof item.holdCount === 'number' ? item.holdCount : 0,
    releaseRequested: typeof item.releaseRequested === 'string' ? item.releaseRequested : null,
    releasedAt: typeof item.releasedAt === 'string' ? item.releasedAt : null,
    heldFromShards: shardMapFromItem(item.heldFromShards),
    parallelBatches: item.parallelBatches === true,
    replayedThrough: shardMapFromItem(item.replayedThrough),
  };
}
