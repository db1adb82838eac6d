/**
 * The control-plane grants of the constructs (dynamodb:LeadingKeys per handler, docs/deploy.md
 * "What each function may do") checked against the requests the DynamoDB adapter really sends.
 * Every control-plane call the normalizer and the applier make (lambda/core/capture/normalize.ts,
 * lambda/handlers/warehouse-applier.ts) runs against DynamoDB Local through a client that records
 * each request, including each item of a TransactWriteItems; every recorded (action, partition
 * key) must be allowed by the role's statements in the synthesized template, and none denied. A
 * layout change in the adapter that the grants do not follow fails here, not in production.
 * DynamoDB Local has no IAM, so the policy is evaluated by the small evaluator below (Allow with
 * `ForAllValues:StringLike`, Deny with `ForAnyValue:StringEquals`, the only shapes the grants use).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { Template } from 'aws-cdk-lib/assertions';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import type { SchemaVersion, TableRecord } from '../../lambda/core/shared/control-plane.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { WarehouseConnection, WarehouseSink } from '../../lib/index.ts';
import { fixture, ordersSource, resourcesOf, WAREHOUSE_PEER } from '../constructs/helpers.ts';

type Statement = { Effect: string; Action: string | string[]; Condition?: Record<string, Record<string, string[]>> };
type Request = { action: string; pk: string };

let ddb: DynamoDbLocal;
let plain: DynamoDBClient;
let recording: DynamoDBClient;
let requests: Request[] = [];

/** The (action, partition key) pairs a DynamoDB command stands for, as IAM authorizes them. */
function requestsOf(command: string, input: Record<string, unknown>): Request[] {
  const pk = (key: unknown): string => (key as Record<string, { S?: string }> | undefined)?.pk?.S ?? '<none>';
  switch (command) {
    case 'GetItemCommand':
      return [{ action: 'dynamodb:GetItem', pk: pk(input.Key) }];
    case 'PutItemCommand':
      return [{ action: 'dynamodb:PutItem', pk: pk(input.Item) }];
    case 'UpdateItemCommand':
      return [{ action: 'dynamodb:UpdateItem', pk: pk(input.Key) }];
    case 'DeleteItemCommand':
      return [{ action: 'dynamodb:DeleteItem', pk: pk(input.Key) }];
    case 'QueryCommand':
      return [{ action: 'dynamodb:Query', pk: (input.ExpressionAttributeValues as Record<string, { S: string }>)[':pk']!.S }];
    case 'TransactWriteItemsCommand':
      return (input.TransactItems as Array<Record<string, { Item?: unknown; Key?: unknown }>>).map((item) => {
        const [kind, body] = Object.entries(item)[0]!;
        const action = { Put: 'dynamodb:PutItem', Update: 'dynamodb:UpdateItem', Delete: 'dynamodb:DeleteItem', ConditionCheck: 'dynamodb:ConditionCheckItem' }[
          kind
        ]!;
        return { action, pk: pk(body.Item ?? body.Key) };
      });
    default:
      return [{ action: `dynamodb:${command.replace(/Command$/, '')}`, pk: '<none>' }];
  }
}

const like = (pattern: string, value: string): boolean =>
  new RegExp(
    `^${pattern
      .split('*')
      .map((p) => p.replace(/[.+?^${}()|[\]\\]/g, '\\$&'))
      .join('.*')}$`,
  ).test(value);
const actionsOf = (s: Statement): string[] => (Array.isArray(s.Action) ? s.Action : [s.Action]);

/** Whether the statements allow the request (an explicit deny wins). */
function allowed(statements: Statement[], r: Request): boolean {
  const denied = statements.some(
    (s) => s.Effect === 'Deny' && actionsOf(s).includes(r.action) && (s.Condition?.['ForAnyValue:StringEquals']?.['dynamodb:LeadingKeys'] ?? []).includes(r.pk),
  );
  if (denied) return false;
  return statements.some((s) => {
    if (s.Effect !== 'Allow' || !actionsOf(s).includes(r.action)) return false;
    const keys = s.Condition?.['ForAllValues:StringLike']?.['dynamodb:LeadingKeys'];
    return keys !== undefined && keys.some((k) => like(k, r.pk));
  });
}

/** The DynamoDB statements of the role whose logical id starts with `prefix`, from a synthesized stack with one source and one sink. */
let template: Template | undefined;
function roleStatements(prefix: string): Statement[] {
  if (!template) {
    const f = fixture();
    const source = ordersSource(f);
    new WarehouseSink(f.stack, 'Warehouse', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [source],
      connection: WarehouseConnection.redshift({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
      vpc: f.vpc,
    });
    template = Template.fromStack(f.stack);
  }
  const out: Statement[] = [];
  for (const [, p] of resourcesOf(template, 'AWS::IAM::Policy')) {
    if (!((p.Properties.Roles as Array<{ Ref: string }>) ?? []).some((r) => r.Ref.startsWith(prefix))) continue;
    out.push(...(p.Properties.PolicyDocument as { Statement: Statement[] }).Statement.filter((s) => actionsOf(s).some((a) => a.startsWith('dynamodb:'))));
  }
  return out;
}

beforeAll(async () => {
  ddb = await startDynamoDbLocal();
  plain = dynamoDbClient(ddb.endpoint);
  recording = dynamoDbClient(ddb.endpoint);
  recording.middlewareStack.add(
    (next, context) => async (args) => {
      requests.push(...requestsOf(context.commandName ?? 'unknown', args.input as Record<string, unknown>));
      return next(args);
    },
    { step: 'initialize', name: 'recordRequests' },
  );
});

afterAll(async () => {
  plain?.destroy();
  recording?.destroy();
  await ddb?.stop();
});

const at = '2026-12-01T10:00:00.000Z';
const table = (sourceId: string, name: string, state: TableRecord['state'] = 'active'): TableRecord => ({
  source: sourceId,
  table: name,
  state,
  currentVersion: 1,
  deleteMode: 'soft',
  preImage: 'key',
  stateReason: null,
  updatedAt: at,
});
const schema = (sourceId: string, name: string, version: number): SchemaVersion => ({
  source: sourceId,
  table: name,
  version,
  columns: [{ name: 'id', type: 'integer', nullable: false }],
  key: ['id'],
  effectivePosition: makePosition(BigInt(version), 0),
  registeredAt: at,
});
const audit = (actor: string, action: string, sourceId: string, t: string) => ({
  at,
  actor,
  action,
  source: sourceId,
  table: t,
  outcome: 'done' as const,
  detail: {},
});

describe('control-plane grants cover exactly what the handlers send', () => {
  it("the normalizer's calls are all allowed by its role, and another source's partitions are not", async () => {
    const name = `ctl-${randomUUID().slice(0, 8)}`;
    await createControlTable(plain, name);
    const cp = new DynamoDbControlPlane(recording, name);
    requests = [];
    // What lambda/core/capture/normalize.ts calls: register, read back, add a version, pause, audit, dead letters (degrading and not).
    expect(
      await cp.registerTable(
        table('orders', 'public.customers'),
        schema('orders', 'public.customers', 1),
        audit('normalizer', 'register-table', 'orders', 'public.customers'),
      ),
    ).toBe(true);
    await cp.getTable('orders', 'public.customers');
    await cp.getSchemaVersion('orders', 'public.customers', 1);
    await cp.listSchemaVersions('orders', 'public.customers');
    expect(await cp.addSchemaVersion(schema('orders', 'public.customers', 2), audit('normalizer', 'add-schema-version', 'orders', 'public.customers'))).toBe(
      true,
    );
    await cp.setTableState('orders', 'public.customers', 'paused', 'breaking change', audit('normalizer', 'pause-table', 'orders', 'public.customers'));
    await cp.setTableState('orders', 'public.customers', 'active', null, audit('normalizer', 'resume-table', 'orders', 'public.customers'));
    await cp.appendAudit(audit('normalizer', 'note', 'orders', 'public.customers'));
    await cp.putDeadLetter({
      at,
      stage: 'normalizer',
      source: 'orders',
      table: 'public.customers',
      code: 'INVALID_RECORD',
      reason: 'x',
      origin: 'raw/shard/1',
      record: '{}',
      truncated: false,
    });
    await cp.putDeadLetter({
      at,
      stage: 'normalizer',
      source: 'orders',
      table: null,
      code: 'INVALID_RECORD',
      reason: 'not json',
      origin: 'raw/shard/2',
      record: 'x',
      truncated: false,
    });
    expect((await cp.getTable('orders', 'public.customers'))?.state).toBe('degraded');

    const statements = roleStatements('OrdersNormalizerServiceRole');
    const refused = requests.filter((r) => !allowed(statements, r));
    expect(refused, JSON.stringify(refused)).toEqual([]);
    expect(new Set(requests.map((r) => r.action))).toEqual(new Set(['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:PutItem', 'dynamodb:UpdateItem']));
    // The same calls for another source, or on the audit log beyond appending, are refused.
    expect(allowed(statements, { action: 'dynamodb:UpdateItem', pk: 'SOURCE#billing' })).toBe(false);
    expect(allowed(statements, { action: 'dynamodb:PutItem', pk: 'SCHEMA#billing#public.x' })).toBe(false);
    expect(allowed(statements, { action: 'dynamodb:GetItem', pk: 'SINK#warehouse' })).toBe(false);
    expect(allowed(statements, { action: 'dynamodb:UpdateItem', pk: 'AUDIT' })).toBe(false);
    expect(allowed(statements, { action: 'dynamodb:DeleteItem', pk: 'AUDIT' })).toBe(false);
    expect(allowed(statements, { action: 'dynamodb:Query', pk: 'AUDIT' })).toBe(false);
    expect(allowed(statements, { action: 'dynamodb:DeleteItem', pk: 'SOURCE#orders' })).toBe(false);
  });

  it("the applier's calls are all allowed by its role, and another sink's or source's partitions are not", async () => {
    const name = `ctl-${randomUUID().slice(0, 8)}`;
    await createControlTable(plain, name);
    // The normalizer registered the table (not the applier's requests).
    await new DynamoDbControlPlane(plain, name).registerTable(
      table('orders', 'public.orders'),
      schema('orders', 'public.orders', 1),
      audit('normalizer', 'register-table', 'orders', 'public.orders'),
    );
    const cp = new DynamoDbControlPlane(recording, name);
    requests = [];
    // What lambda/handlers/warehouse-applier.ts calls: read table and schema, progress, hold, release, dead letter (degrading).
    await cp.getTable('orders', 'public.orders');
    await cp.getSchemaVersion('orders', 'public.orders', 1);
    await cp.getSinkProgress('warehouse', 'orders', 'public.orders');
    await cp.advanceSinkProgress('warehouse', 'orders', 'public.orders', makePosition(5n, 0));
    await cp.advanceSinkProgress('warehouse', 'orders', 'public.orders', makePosition(4n, 0));
    await cp.holdSinkTable('warehouse', 'orders', 'public.orders', makePosition(6n, 0));
    await cp.releaseSinkTable('warehouse', 'orders', 'public.orders', audit('applier:warehouse', 'release-table', 'orders', 'public.orders'));
    await cp.putDeadLetter({
      at,
      stage: 'warehouse',
      source: 'orders',
      table: 'public.orders',
      code: 'VALUE_REJECTED',
      reason: 'x',
      origin: 'log/shard/1',
      record: '{}',
      truncated: false,
    });
    expect((await cp.getTable('orders', 'public.orders'))?.state).toBe('degraded');

    const statements = roleStatements('WarehouseApplierServiceRole');
    const refused = requests.filter((r) => !allowed(statements, r));
    expect(refused, JSON.stringify(refused)).toEqual([]);
    expect(allowed(statements, { action: 'dynamodb:UpdateItem', pk: 'SINK#search' })).toBe(false);
    expect(allowed(statements, { action: 'dynamodb:GetItem', pk: 'SOURCE#billing' })).toBe(false);
    expect(allowed(statements, { action: 'dynamodb:PutItem', pk: 'SOURCE#orders' })).toBe(false);
    expect(allowed(statements, { action: 'dynamodb:PutItem', pk: 'DEADLETTER#normalizer' })).toBe(false);
    expect(allowed(statements, { action: 'dynamodb:UpdateItem', pk: 'AUDIT' })).toBe(false);
  });
});
