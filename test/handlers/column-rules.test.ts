/**
 * Late masking rules on AWS (docs/masking.md, "Adding a rule to a live table"): the
 * `Custom::CdcColumnRules` step of the DMS task lifecycle handler, run directly with the
 * `ColumnRules` properties two synthesized versions of a `CdcSource` really carry, against the
 * DynamoDB control plane on DynamoDB Local. A mask or exclude added to a registered table without
 * `acknowledgeLateRules` fails the update (the CloudFormation response is FAILED with the reason,
 * checked on a local HTTP server standing in for the pre-signed URL) and is audited; the rollback
 * CloudFormation then sends is not refused again; with the acknowledgement the table is marked
 * and the starter step (after the functions changed) requests its re-snapshot.
 *
 * The DMS API has no local stand-in: `RunningTask` answers for a task that runs and is left alone.
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import { randomUUID } from 'node:crypto';
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';
import { Template } from 'aws-cdk-lib/assertions';
import { afterAll, beforeAll, beforeEach, describe, expect, test } from 'vitest';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { LATE_COLUMN_RULES, LATE_RULES_ACTION } from '../../lambda/core/tables/late-rules.ts';
import { POSITION_ZERO } from '../../lambda/core/shared/position.ts';
import { createTaskLifecycleHandler } from '../../lambda/handlers/task-lifecycle.ts';
import {
  parseColumnRules,
  REVERT_ACKNOWLEDGEMENT,
  runLifecycle,
  type DmsPort,
  type LifecycleDeps,
  type TaskState,
} from '../../lambda/core/capture/task-lifecycle.ts';
import { CapturedTable } from '../../lib/index.ts';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { fixture, onlyResource, ordersSource } from '../constructs/helpers.ts';

const TASK_ARN = 'arn:aws:dms:eu-west-1:111111111111:task:ABCDEFGHIJKLMNOP';

/** Stands in for the DMS API (no local stand-in exists): one task that runs. */
class RunningTask implements DmsPort {
  readonly calls: string[] = [];
  async findTask(): Promise<TaskState | undefined> {
    return { arn: TASK_ARN, identifier: 'orders-cdc', status: 'running' };
  }
  async startTask(): Promise<void> {
    this.calls.push('start');
  }
  async stopTask(): Promise<void> {
    this.calls.push('stop');
  }
}

let ddb: DynamoDbLocal;
let client: DynamoDBClient;
let controlPlane: DynamoDbControlPlane;

beforeAll(async () => {
  ddb = await startDynamoDbLocal();
  client = dynamoDbClient(ddb.endpoint);
}, 120_000);
afterAll(async () => {
  client?.destroy();
  await ddb?.stop();
});
beforeEach(async () => {
  const name = `ctl-${randomUUID()}`;
  await createControlTable(client, name);
  controlPlane = new DynamoDbControlPlane(client, name);
});

function deps(log: string[] = []): LifecycleDeps {
  return {
    dms: new RunningTask(),
    openSlots: async () => {
      throw new Error('the column-rules step must not open the source');
    },
    sleep: async () => undefined,
    remainingMs: () => 600_000,
    pollMs: 1,
    log: (m) => log.push(m),
    controlPlane,
  };
}

/** The `ColumnRules` property a `CdcSource` with these tables synthesizes (and its resource's other properties). */
function synthesizedProps(tables: CapturedTable[]): Record<string, string> {
  const f = fixture();
  ordersSource(f, { tables });
  const resource = onlyResource(Template.fromStack(f.stack), 'Custom::CdcColumnRules');
  const { ServiceToken: _token, ...props } = resource.Properties as Record<string, unknown>;
  return props as Record<string, string>;
}

function event(
  requestType: 'Create' | 'Update' | 'Delete',
  props: Record<string, string>,
  oldProps?: Record<string, string>,
  responseUrl = 'http://127.0.0.1:1/unused',
): CloudFormationCustomResourceEvent {
  const base = {
    ServiceToken: 'arn:aws:lambda:eu-west-1:111111111111:function:lifecycle',
    ResponseURL: responseUrl,
    StackId: 'arn:aws:cloudformation:eu-west-1:111111111111:stack/Test/1',
    RequestId: randomUUID(),
    LogicalResourceId: 'OrdersColumnRules',
    ResourceType: 'Custom::CdcColumnRules',
    ResourceProperties: { ServiceToken: 'x', ...props },
  };
  if (requestType === 'Create') return { ...base, RequestType: 'Create' };
  if (requestType === 'Update')
    return { ...base, RequestType: 'Update', PhysicalResourceId: 'orders/column-rules', OldResourceProperties: { ServiceToken: 'x', ...(oldProps ?? props) } };
  return { ...base, RequestType: 'Delete', PhysicalResourceId: 'orders/column-rules' };
}

async function register(table: string, columns: string[]): Promise<void> {
  const at = new Date().toISOString();
  await controlPlane.registerTable(
    { source: 'orders', table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
    {
      source: 'orders',
      table,
      version: 1,
      columns: columns.map((name) => ({ name, type: 'character varying', nullable: true })),
      key: ['id'],
      effectivePosition: POSITION_ZERO,
      registeredAt: at,
    },
    { at, actor: 'test', action: 'register-table', source: 'orders', table, outcome: 'done', detail: {} },
  );
}

const starterEvent = (): CloudFormationCustomResourceEvent => {
  const props = { Action: 'start-task', TaskArn: TASK_ARN, TaskIdentifier: 'orders-cdc', ConfigHash: 'bbbb', StartPosition: '0/16B3748', SourceId: 'orders' };
  return {
    ...event('Update', props, { ...props, ConfigHash: 'aaaa' }),
    LogicalResourceId: 'OrdersTaskStarter',
    ResourceType: 'Custom::CdcReplicationTaskStarter',
  };
};

const BEFORE = [CapturedTable.of('public.customers', { mask: ['email'] }), CapturedTable.of('public.orders')];

describe('Custom::CdcColumnRules', () => {
  test('a mask added to a captured table without acknowledgement fails the update, names table, column and how to acknowledge, and is audited; the rollback is not refused', async () => {
    await register('public.customers', ['id', 'email', 'phone']);
    const before = synthesizedProps(BEFORE);
    const after = synthesizedProps([CapturedTable.of('public.customers', { mask: ['email', 'phone'] }), CapturedTable.of('public.orders')]);
    expect(before.SourceId).toBe('orders');
    await runLifecycle(event('Create', before), deps());

    // Through the handler: CloudFormation gets FAILED with the reason, and rolls back.
    const responses: Array<Record<string, unknown>> = [];
    const server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c) => (body += c));
      req.on('end', () => {
        responses.push(JSON.parse(body) as Record<string, unknown>);
        res.end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    try {
      const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/response`;
      await createTaskLifecycleHandler(deps())(event('Update', after, before, url));
    } finally {
      await new Promise((r) => server.close(r));
    }
    expect(responses).toHaveLength(1);
    expect(responses[0]!.Status).toBe('FAILED');
    expect(responses[0]!.PhysicalResourceId).toBe('orders/column-rules');
    const reason = String(responses[0]!.Reason);
    expect(reason).toContain('public.customers: mask phone added while the table is captured');
    expect(reason).toContain('existing change-log records, archive files and sink rows of public.customers still hold the clear values of phone');
    expect(reason).toContain('CapturedTable option acknowledgeLateRules');
    expect(reason).not.toContain('mask email');

    const audit = (await controlPlane.listAudit('orders')).filter((a) => a.action === LATE_RULES_ACTION);
    expect(audit).toHaveLength(1);
    expect(audit[0]).toMatchObject({
      table: 'public.customers',
      outcome: 'refused',
      actor: 'dms-task-lifecycle',
      detail: { addedMask: ['phone'], addedExclude: [] },
    });
    expect((await controlPlane.getTable('orders', 'public.customers'))!.state).toBe('active');

    // CloudFormation's rollback: an update from the refused properties back to the previous ones.
    await expect(runLifecycle(event('Update', before, after), deps())).resolves.toEqual({ physicalResourceId: 'orders/column-rules' });
    // And the refused change is refused again when deployed again (the rules in force did not move).
    await expect(runLifecycle(event('Update', after, before), deps())).rejects.toThrow(/public\.customers: mask phone added while the table is captured/);
    expect((await controlPlane.listAudit('orders')).filter((a) => a.action === LATE_RULES_ACTION && a.outcome === 'refused')).toHaveLength(2);
  });

  test('with acknowledgeLateRules the update passes: audited with what was left behind, the table marked; the starter then requests its re-snapshot once', async () => {
    await register('public.customers', ['id', 'email', 'ssn']);
    const before = synthesizedProps(BEFORE);
    const after = synthesizedProps([
      CapturedTable.of('public.customers', { mask: ['email'], exclude: ['ssn'], acknowledgeLateRules: 'privacy review 42' }),
      CapturedTable.of('public.orders'),
    ]);
    await runLifecycle(event('Create', before), deps());
    const log: string[] = [];
    await runLifecycle(event('Update', after, before), deps(log));
    expect(log).toContain('late column rules acknowledged: table marked needs-resnapshot');

    const t = (await controlPlane.getTable('orders', 'public.customers'))!;
    expect(t.state).toBe('needs-resnapshot');
    expect(t.stateReason).toMatch(
      new RegExp(
        `^${LATE_COLUMN_RULES}: exclude ssn added \\(acknowledged: privacy review 42\\); existing change-log records, archive files and sink rows of public.customers still hold the clear values of ssn`,
      ),
    );
    const entry = (await controlPlane.listAudit('orders')).find((a) => a.action === LATE_RULES_ACTION)!;
    expect(entry).toMatchObject({
      outcome: 'done',
      detail: {
        addedExclude: ['ssn'],
        acknowledgement: 'privacy review 42',
        needsResnapshot: true,
        needsSinkRebuild: true,
        from: 'active',
        to: 'needs-resnapshot',
      },
    });
    // Not yet requested: the snapshot worker still runs with the old rules until the deployment changes it.
    expect(await controlPlane.getSnapshot('orders', 'public.customers')).toBeNull();

    // The starter step, ordered after the functions: requests it, and only once.
    const dms = new RunningTask();
    await runLifecycle(starterEvent(), { ...deps(), dms });
    expect(dms.calls).toEqual([]);
    const run = (await controlPlane.getSnapshot('orders', 'public.customers'))!;
    expect(run).toMatchObject({ status: 'requested', reason: 'resnapshot', requestedBy: 'dms-task-lifecycle' });
    await runLifecycle(starterEvent(), deps());
    expect((await controlPlane.getSnapshot('orders', 'public.customers'))!.run).toBe(run.run);
    expect((await controlPlane.listAudit('orders')).filter((a) => a.action === 'request-snapshot')).toHaveLength(1);
  });

  test('not late: a table never registered, a newly captured table, a removed rule, a masked column now excluded', async () => {
    await register('public.customers', ['id', 'email']);
    const before = synthesizedProps(BEFORE);
    await runLifecycle(event('Create', before), deps());
    // public.orders is declared but was never registered (no event yet): nothing is in the log.
    const after = synthesizedProps([
      CapturedTable.of('public.customers', { exclude: ['email'] }),
      CapturedTable.of('public.orders', { mask: ['note'] }),
      CapturedTable.of('public.items', { mask: ['name'] }),
    ]);
    await runLifecycle(event('Update', after, before), deps());
    const back = synthesizedProps([CapturedTable.of('public.customers'), CapturedTable.of('public.orders')]);
    await runLifecycle(event('Update', back, after), deps());
    expect((await controlPlane.listAudit('orders')).filter((a) => a.action === LATE_RULES_ACTION)).toEqual([]);
    expect((await controlPlane.getTable('orders', 'public.customers'))!.state).toBe('active');
  });

  test('a rule (CapturedTable.matching) that gains a mask: refused for the matched tables that have the column, acknowledged on the rule', async () => {
    await register('sales.orders', ['id', 'card_holder']);
    await register('sales.refunds', ['id', 'amount']);
    await register('sales.audit_log', ['id', 'card_holder']);
    const rule = (o: Parameters<typeof CapturedTable.matching>[1]) =>
      synthesizedProps([CapturedTable.of('public.customers'), CapturedTable.matching('sales.*', { exclude: ['sales.audit_*'], ...o })]);
    const before = rule({});
    await runLifecycle(event('Create', before), deps());
    const masked = rule({ mask: ['card_holder'] });
    const message = await runLifecycle(event('Update', masked, before), deps()).then(
      () => 'accepted',
      (e: Error) => e.message,
    );
    expect(message).toMatch(/sales\.orders: mask card_holder added while the table is captured/);
    // sales.refunds has no card_holder (nothing leaks), sales.audit_log is excluded by the rule.
    expect(message).not.toMatch(/sales\.refunds|sales\.audit_log/);

    const acked = rule({ mask: ['card_holder'], acknowledgeLateRules: 'ticket 9' });
    await runLifecycle(event('Update', before, masked), deps()); // the rollback
    await runLifecycle(event('Update', acked, before), deps());
    expect((await controlPlane.getTable('orders', 'sales.orders'))!.state).toBe('needs-resnapshot');
    expect((await controlPlane.getTable('orders', 'sales.refunds'))!.state).toBe('active');
    expect((await controlPlane.getTable('orders', 'sales.audit_log'))!.state).toBe('active');
  });

  test('a rule that refuses many tables: the reason stays within what CloudFormation shows and names as many as fit; every one is audited', async () => {
    for (let i = 0; i < 50; i++) await register(`sales.customer_payment_method_archive_${String(i).padStart(2, '0')}`, ['id', 'card_holder']);
    const before = synthesizedProps([CapturedTable.of('public.customers'), CapturedTable.matching('sales.*')]);
    await runLifecycle(event('Create', before), deps());
    const after = synthesizedProps([CapturedTable.of('public.customers'), CapturedTable.matching('sales.*', { mask: ['card_holder'] })]);
    const reason = await runLifecycle(event('Update', after, before), deps()).then(
      () => 'accepted',
      (e: Error) => e.message,
    );
    expect(reason.length).toBeLessThanOrEqual(3000);
    expect(reason).toMatch(
      /^source orders: 50 captured tables got a mask or exclude without acknowledgement; .* acknowledgeLateRules .* Tables: sales\.customer_payment_method_archive_00 \(mask card_holder\); sales\.customer_payment_method_archive_01 \(mask card_holder\)/,
    );
    expect(reason).toMatch(/; and \d+ more \(each in the audit log: cdc audit\)$/);
    const named = reason.match(/sales\.customer_payment_method_archive_\d\d/g)!.length;
    expect(Number(/and (\d+) more/.exec(reason)![1]) + named).toBe(50);
    expect((await controlPlane.listAudit('orders')).filter((a) => a.action === LATE_RULES_ACTION && a.outcome === 'refused')).toHaveLength(50);
  });

  test('a rollback after an accepted update returns to the previous rules: accepted and audited as such, never stuck in UPDATE_ROLLBACK_FAILED', async () => {
    await register('public.customers', ['id', 'email', 'phone']);
    const a = synthesizedProps([CapturedTable.of('public.customers', { mask: ['email'] })]);
    const b = synthesizedProps([CapturedTable.of('public.customers', { mask: ['phone'], acknowledgeLateRules: 'swap, ticket 3' })]);
    const unacked = synthesizedProps([CapturedTable.of('public.customers', { mask: ['phone'] })]);
    await runLifecycle(event('Create', a), deps());
    // A refused swap (phone masked, email no longer): its rollback masks email "again", which was never unmasked in force.
    await expect(runLifecycle(event('Update', unacked, a), deps())).rejects.toThrow(/public\.customers: mask phone added/);
    await expect(runLifecycle(event('Update', a, unacked), deps())).resolves.toEqual({ physicalResourceId: 'orders/column-rules' });
    await runLifecycle(event('Update', b, a), deps());
    // A later resource failed: CloudFormation rolls this one back to A, which masks email again.
    await runLifecycle(event('Update', a, b), deps());
    const entries = (await controlPlane.listAudit('orders')).filter((e) => e.action === LATE_RULES_ACTION);
    expect(entries.map((e) => [e.outcome, (e.detail as { acknowledgement?: string }).acknowledgement])).toEqual([
      ['refused', undefined],
      ['done', 'swap, ticket 3'],
      ['done', REVERT_ACKNOWLEDGEMENT],
    ]);
    // Going forward again to B (now from A) needs B's own acknowledgement, which it has.
    await runLifecycle(event('Update', b, a), deps());
    await expect(runLifecycle(event('Update', a, unacked), deps())).rejects.toThrow(/public\.customers: mask email added/);
  });

  test('bad properties are named; create and delete touch nothing in the source', async () => {
    expect(() => parseColumnRules('{"tables": [', 'ColumnRules')).toThrow(/^ColumnRules: not valid JSON/);
    expect(() => parseColumnRules('{"tables": [{"table": "public.a", "mask": "email", "exclude": []}], "rules": []}', 'ColumnRules')).toThrow(
      'ColumnRules: tables[0].mask: expected an array of strings',
    );
    expect(() =>
      parseColumnRules(
        '{"tables": [], "rules": [{"match": "public.*", "excludeTables": [], "mask": [], "exclude": [], "acknowledgeLateRules": " "}]}',
        'ColumnRules',
      ),
    ).toThrow('ColumnRules: rules[0].acknowledgeLateRules: expected a non-empty text');
    await expect(runLifecycle(event('Create', { Action: 'check-column-rules', SourceId: 'orders' }), deps())).rejects.toThrow(
      'resource property ColumnRules is missing',
    );
    const props = synthesizedProps(BEFORE);
    await expect(runLifecycle(event('Create', props), { ...deps(), controlPlane: undefined })).rejects.toThrow(
      /no control plane \(CDC_CONTROL_TABLE\) to read the captured tables of source orders/,
    );
    expect(await runLifecycle(event('Delete', props), deps())).toEqual({ physicalResourceId: 'orders/column-rules' });
  });
});
