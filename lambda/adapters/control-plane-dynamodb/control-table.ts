/**
 * The DynamoDB plumbing of the control plane (docs/architecture.md §5.3): the table's creation, the item
 * keys (the layout is in lambda/adapters/control-plane-dynamodb.ts), strongly consistent reads,
 * queries followed to their last page, and transactions retried when a concurrent one cancelled them.
 */
import { randomUUID } from 'node:crypto';
import {
  CreateTableCommand,
  DescribeTableCommand,
  GetItemCommand,
  QueryCommand,
  ResourceInUseException,
  ScanCommand,
  TransactionCanceledException,
  TransactWriteItemsCommand,
  waitUntilTableExists,
  type AttributeValue,
  type DynamoDBClient,
  type QueryCommandInput,
  type TransactWriteItem,
} from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { ControlPartition } from '../../../contracts/control-plane-keys.ts';
import { CdcError } from '../../core/shared/errors.ts';
import type { PayloadStore } from '../../core/shared/payload-store.ts';

export type Item = Record<string, AttributeValue>;
export type Plain = Record<string, unknown>;

export const TRANSACTION_ATTEMPTS = 6;

export const key = {
  sources: () => ({ pk: ControlPartition.SOURCES }),
  source: (sourceId: string) => ({ pk: ControlPartition.SOURCES, sk: `SOURCE#${sourceId}` }),
  table: (sourceId: string, table: string) => ({ pk: ControlPartition.source(sourceId), sk: `TABLE#${table}` }),
  schema: (sourceId: string, table: string, version: number) => ({ pk: ControlPartition.schema(sourceId, table), sk: `V#${String(version).padStart(9, '0')}` }),
  sink: (sink: string, sourceId: string, table: string) => ({ pk: ControlPartition.sink(sink), sk: `TABLE#${sourceId}#${table}` }),
  checkpoint: (consumer: string, shardId: string) => ({ pk: ControlPartition.checkpoint(consumer), sk: `SHARD#${shardId}` }),
  audit: (at: string) => ({ pk: ControlPartition.AUDIT, sk: `${sortableTime(at)}#${randomUUID()}` }),
  deadLetter: (stage: string, at: string) => ({ pk: ControlPartition.deadLetters(stage), sk: `${sortableTime(at)}#${randomUUID()}` }),
  deadLetterStage: (stage: string) => ({ pk: ControlPartition.DEAD_LETTER_STAGES, sk: `STAGE#${stage}` }),
  snapshot: (sourceId: string, table: string) => ({ pk: ControlPartition.source(sourceId), sk: `SNAPSHOT#${table}` }),
  verdict: (sink: string, sourceId: string, table: string) => ({ pk: ControlPartition.verdicts(sink), sk: `TABLE#${sourceId}#${table}` }),
  snapshotChunk: (sourceId: string, table: string, run: string, index: number) => ({
    pk: ControlPartition.snapshotChunks(sourceId, table),
    sk: `RUN#${run}#C#${String(index).padStart(9, '0')}`,
  }),
  rebuild: (sink: string, sourceId: string, table: string, at: string, id: string) => ({
    pk: ControlPartition.rebuilds(sink),
    sk: `${sourceId}#${table}#${sortableTime(at)}#${id}`,
  }),
  activeRebuild: (sink: string) => ({ pk: ControlPartition.rebuilds(sink), sk: 'ACTIVE' }),
};

/** ISO-8601 in UTC with milliseconds, so that string order is time order whatever form the caller used. */
export function sortableTime(at: string): string {
  const t = Date.parse(at);
  if (Number.isNaN(t)) throw new CdcError('INVALID_ARGUMENT', `expected an ISO-8601 time, got ${JSON.stringify(at)}`);
  return new Date(t).toISOString();
}

export function toItem(value: Plain): Item {
  return marshall(value, { removeUndefinedValues: true });
}

export function nonEmpty(value: string, what: string): string {
  if (typeof value !== 'string' || value === '') throw new CdcError('INVALID_ARGUMENT', `${what} must be a non-empty string, got ${JSON.stringify(value)}`);
  return value;
}

export type TransactOutcome = { ok: true } | { ok: false; reasons: string[] };

/** Creates the control table (pk/sk strings, on-demand) if it does not exist, and waits until it is active. */
export async function createControlTable(client: DynamoDBClient, name: string): Promise<void> {
  try {
    await client.send(
      new CreateTableCommand({
        TableName: name,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [
          { AttributeName: 'pk', AttributeType: 'S' },
          { AttributeName: 'sk', AttributeType: 'S' },
        ],
        KeySchema: [
          { AttributeName: 'pk', KeyType: 'HASH' },
          { AttributeName: 'sk', KeyType: 'RANGE' },
        ],
      }),
    );
  } catch (e) {
    if (!(e instanceof ResourceInUseException)) throw e;
    const described = await client.send(new DescribeTableCommand({ TableName: name }));
    const schema = described.Table?.KeySchema ?? [];
    const ok =
      schema.length === 2 &&
      schema.some((k) => k.AttributeName === 'pk' && k.KeyType === 'HASH') &&
      schema.some((k) => k.AttributeName === 'sk' && k.KeyType === 'RANGE');
    if (!ok) throw new CdcError('INVALID_CONTROL_TABLE', `table ${name} exists but its key is not pk (HASH) + sk (RANGE): ${JSON.stringify(schema)}`);
  }
  await waitUntilTableExists({ client, maxWaitTime: 120, minDelay: 1, maxDelay: 5 }, { TableName: name });
}

/** One control table: its client, its name, and where dead letters' records too large for an item are kept whole. */
export class ControlTable {
  constructor(
    readonly client: DynamoDBClient,
    readonly tableName: string,
    /** Where dead letters' records too large for an item are kept whole. */
    readonly payloads?: PayloadStore,
  ) {}

  async get(k: { pk: string; sk: string }): Promise<Plain | null> {
    const out = await this.client.send(new GetItemCommand({ TableName: this.tableName, Key: toItem(k), ConsistentRead: true }));
    return out.Item ? unmarshall(out.Item) : null;
  }

  async query(q: {
    pk: string;
    skPrefix?: string;
    skFrom?: string;
    filter?: { expression: string; names: Record<string, string>; values: Plain } | undefined;
  }): Promise<Plain[]> {
    const names: Record<string, string> = { '#pk': 'pk', ...(q.filter?.names ?? {}) };
    const values: Plain = { ':pk': q.pk, ...(q.filter?.values ?? {}) };
    let condition = '#pk = :pk';
    if (q.skPrefix !== undefined && q.skFrom !== undefined)
      throw new CdcError('INVALID_ARGUMENT', 'a query takes a sort-key prefix or a lower bound, not both');
    if (q.skPrefix !== undefined) {
      names['#sk'] = 'sk';
      values[':prefix'] = q.skPrefix;
      condition += ' AND begins_with(#sk, :prefix)';
    }
    if (q.skFrom !== undefined) {
      names['#sk'] = 'sk';
      values[':from'] = q.skFrom;
      condition += ' AND #sk >= :from';
    }
    const input: QueryCommandInput = {
      TableName: this.tableName,
      KeyConditionExpression: condition,
      ExpressionAttributeNames: names,
      ExpressionAttributeValues: toItem(values),
      ConsistentRead: true,
      ...(q.filter ? { FilterExpression: q.filter.expression } : {}),
    };
    const out: Plain[] = [];
    let start: Item | undefined;
    do {
      const page = await this.client.send(new QueryCommand({ ...input, ...(start ? { ExclusiveStartKey: start } : {}) }));
      for (const i of page.Items ?? []) out.push(unmarshall(i));
      start = page.LastEvaluatedKey;
    } while (start);
    return out;
  }

  /**
   * Every item of one `kind`, across partitions (a scan followed to its last page): for listings
   * over all sinks, whose ids are not listed anywhere.
   */
  async scanKind(kind: string): Promise<Plain[]> {
    const out: Plain[] = [];
    let start: Item | undefined;
    do {
      const page = await this.client.send(
        new ScanCommand({
          TableName: this.tableName,
          ConsistentRead: true,
          FilterExpression: '#kind = :kind',
          ExpressionAttributeNames: { '#kind': 'kind' },
          ExpressionAttributeValues: toItem({ ':kind': kind }),
          ...(start ? { ExclusiveStartKey: start } : {}),
        }),
      );
      for (const i of page.Items ?? []) out.push(unmarshall(i));
      start = page.LastEvaluatedKey;
    } while (start);
    return out;
  }

  /**
   * Runs one transaction. A failed condition comes back as the per-item cancellation reasons;
   * a cancellation caused by a concurrent transaction on the same items is retried.
   */
  async transact(items: TransactWriteItem[]): Promise<TransactOutcome> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.client.send(new TransactWriteItemsCommand({ TransactItems: items }));
        return { ok: true };
      } catch (e) {
        if (!(e instanceof TransactionCanceledException)) throw e;
        const reasons = (e.CancellationReasons ?? []).map((r) => r.Code ?? 'None');
        const retryable = reasons.some((r) => r === 'TransactionConflict' || r === 'ThrottlingError' || r === 'ProvisionedThroughputExceeded');
        if (reasons.includes('ConditionalCheckFailed') || !retryable || attempt >= TRANSACTION_ATTEMPTS) return { ok: false, reasons };
        await new Promise((r) => setTimeout(r, 25 * 2 ** attempt * (0.5 + Math.random())));
      }
    }
  }
}

export function transactionFailed(operation: string, reasons: string[]): CdcError {
  return new CdcError(
    'CONTROL_PLANE_TRANSACTION_FAILED',
    `${operation}: DynamoDB cancelled the transaction (reasons per item: ${reasons.join(', ') || 'none given'})`,
  );
}
