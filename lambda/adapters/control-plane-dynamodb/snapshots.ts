/** Snapshot runs and their chunks in the control plane (docs/snapshot.md): the state is one item, JSON in `body`, guarded by `version`. */
import type { TransactWriteItem } from '@aws-sdk/client-dynamodb';
import { CdcError } from '../../core/shared/errors.ts';
import type { AuditEntry } from '../../core/shared/control-plane.ts';
import type { SnapshotChunkRecord, SnapshotState } from '../../core/snapshot/snapshot.ts';
import { auditPut } from './audit.ts';
import { key, nonEmpty, toItem, transactionFailed, type ControlTable } from './control-table.ts';

export async function getSnapshot(t: ControlTable, sourceId: string, table: string): Promise<SnapshotState | null> {
  const item = await t.get(key.snapshot(sourceId, table));
  return item ? (JSON.parse(String(item.body)) as SnapshotState) : null;
}

export async function listSnapshots(t: ControlTable, sourceId: string): Promise<SnapshotState[]> {
  const items = await t.query({ pk: `SOURCE#${sourceId}`, skPrefix: 'SNAPSHOT#' });
  return items.map((i) => JSON.parse(String(i.body)) as SnapshotState).sort((a, b) => (a.table < b.table ? -1 : a.table > b.table ? 1 : 0));
}

function snapshotPut(t: ControlTable, state: SnapshotState, expectedVersion: number | null): TransactWriteItem {
  nonEmpty(state.source, 'snapshot.source');
  nonEmpty(state.table, 'snapshot.table');
  if (!Number.isInteger(state.version) || (expectedVersion !== null && state.version <= expectedVersion)) {
    throw new CdcError('INVALID_ARGUMENT', `snapshot state version must be an integer above the expected ${expectedVersion}, got ${state.version}`);
  }
  return {
    Put: {
      TableName: t.tableName,
      Item: toItem({
        ...key.snapshot(state.source, state.table),
        kind: 'snapshot',
        source: state.source,
        table: state.table,
        version: state.version,
        status: state.status,
        body: JSON.stringify(state),
      }),
      ConditionExpression: expectedVersion === null ? 'attribute_not_exists(pk)' : '#ver = :expected',
      ...(expectedVersion === null
        ? {}
        : { ExpressionAttributeNames: { '#ver': 'version' }, ExpressionAttributeValues: toItem({ ':expected': expectedVersion }) }),
    },
  };
}

export async function putSnapshot(t: ControlTable, state: SnapshotState, expectedVersion: number | null, audit: AuditEntry | null): Promise<boolean> {
  const outcome = await t.transact(audit ? [snapshotPut(t, state, expectedVersion), auditPut(t, audit)] : [snapshotPut(t, state, expectedVersion)]);
  if (outcome.ok) return true;
  if (outcome.reasons[0] === 'ConditionalCheckFailed') return false;
  throw transactionFailed('putSnapshot', outcome.reasons);
}

export async function completeSnapshotChunk(t: ControlTable, chunk: SnapshotChunkRecord, state: SnapshotState, expectedVersion: number): Promise<boolean> {
  if (chunk.source !== state.source || chunk.table !== state.table || chunk.run !== state.run) {
    throw new CdcError(
      'INVALID_ARGUMENT',
      `chunk ${chunk.source}/${chunk.table} run ${chunk.run} does not belong to the snapshot state of ${state.source}/${state.table} run ${state.run}`,
    );
  }
  const outcome = await t.transact([
    snapshotPut(t, state, expectedVersion),
    {
      Put: {
        TableName: t.tableName,
        Item: toItem({ ...key.snapshotChunk(chunk.source, chunk.table, chunk.run, chunk.index), kind: 'snapshot-chunk', body: JSON.stringify(chunk) }),
      },
    },
  ]);
  if (outcome.ok) return true;
  if (outcome.reasons[0] === 'ConditionalCheckFailed') return false;
  throw transactionFailed('completeSnapshotChunk', outcome.reasons);
}

export async function listSnapshotChunks(t: ControlTable, sourceId: string, table: string, run: string): Promise<SnapshotChunkRecord[]> {
  const items = await t.query({ pk: `SNAPSHOT#${sourceId}#${table}`, skPrefix: `RUN#${run}#C#` });
  return items.map((i) => JSON.parse(String(i.body)) as SnapshotChunkRecord);
}
