/** The local event-source poller's checkpoints in the control plane (docs/architecture.md §5.3): one sequence number per consumer and shard. */
import { PutItemCommand } from '@aws-sdk/client-dynamodb';
import { key, nonEmpty, toItem, type ControlTable } from './control-table.ts';

export async function getCheckpoint(t: ControlTable, consumer: string, shardId: string): Promise<string | null> {
  const item = await t.get(key.checkpoint(consumer, shardId));
  return item && typeof item.sequenceNumber === 'string' ? item.sequenceNumber : null;
}

export async function putCheckpoint(t: ControlTable, consumer: string, shardId: string, sequenceNumber: string): Promise<void> {
  nonEmpty(sequenceNumber, 'sequenceNumber');
  await t.client.send(
    new PutItemCommand({
      TableName: t.tableName,
      Item: toItem({ ...key.checkpoint(consumer, shardId), kind: 'checkpoint', consumer, shardId, sequenceNumber, updatedAt: new Date().toISOString() }),
    }),
  );
}
