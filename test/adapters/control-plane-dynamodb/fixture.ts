/**
 * The DynamoDB control plane's tests share one DynamoDB Local per file and a fresh control table
 * per test: `useControlTable()` registers the hooks; `ddb`, `client`, `cp` and `tableName` are
 * live bindings the hooks set.
 */
import { afterAll, beforeAll, beforeEach } from 'vitest';
import { randomUUID } from 'node:crypto';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../../local/dynamodb.ts';
import { dynamoDbClient } from '../../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import type { AuditEntry, SchemaVersion, TableRecord } from '../../../lambda/core/shared/control-plane.ts';
import { makePosition } from '../../../lambda/core/shared/position.ts';

export let ddb: DynamoDbLocal;
export let client: DynamoDBClient;
export let cp: DynamoDbControlPlane;
export let tableName: string;

export function useControlTable(): void {
  beforeAll(async () => {
    ddb = await startDynamoDbLocal();
    client = dynamoDbClient(ddb.endpoint);
  });
  afterAll(async () => {
    client?.destroy();
    await ddb?.stop();
  });
  beforeEach(async () => {
    tableName = `ctl-${randomUUID()}`;
    await createControlTable(client, tableName);
    cp = new DynamoDbControlPlane(client, tableName);
  });
}

export const pos = (lsn: number, index = 0) => makePosition(BigInt(lsn), index);
export const now = () => new Date().toISOString();

export function tableRecord(table = 'public.orders', sourceId = 'shop'): TableRecord {
  return { source: sourceId, table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: now() };
}
export function schema(version: number, table = 'public.orders', sourceId = 'shop', extra: string[] = []): SchemaVersion {
  return {
    source: sourceId,
    table,
    version,
    columns: [
      { name: 'id', type: 'integer', nullable: false },
      { name: 'note', type: null, nullable: true },
      ...extra.map((n) => ({ name: n, type: 'text', nullable: true })),
    ],
    key: ['id'],
    effectivePosition: pos(100 * version),
    registeredAt: now(),
  };
}
export function audit(
  action: string,
  table: string | null = 'public.orders',
  source: string | null = 'shop',
  detail: Record<string, unknown> = {},
): AuditEntry {
  return { at: now(), actor: 'test', action, source, table, outcome: 'done', detail };
}
