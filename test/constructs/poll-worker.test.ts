/**
 * The polling fallback on AWS (docs/polling.md): a `CdcSource` with a table captured by
 * `CaptureMode.POLL` deploys a scheduled poll worker in the VPC (one at a time, least privilege:
 * its own cursors, writing the raw stream, reading the source secret), keeps the polled table out
 * of the DMS table mappings, passes `capture`/`pollColumn` and the transforms to the handlers, and
 * refuses a polled table without a poll column at synth time. Without polled tables there is no
 * poll worker.
 */
import { Match, Template } from 'aws-cdk-lib/assertions';
import { Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { describe, expect, test } from 'vitest';
import { parseTableConfig } from '../../lambda/core/tables/table-config.ts';
import { CapturedTable, CaptureMode } from '../../lib/index.ts';
import { fixture, onlyResource, ordersSource, parseJsonProperty, policyDocuments, resourcesOf } from './helpers.ts';

const TABLES = [
  CapturedTable.of('public.customers', {
    transforms: { rename: { email_address: 'email' }, coerce: { score: 'numeric(10,2)' }, tenant: { column: 'tenant', value: '{source}' } },
  }),
  CapturedTable.of('public.legacy_orders', { capture: CaptureMode.POLL, pollColumn: 'updated_at', primaryKey: ['order_no'] }),
];

function pollerOf(t: Template): { id: string; props: Record<string, unknown> } | undefined {
  const found = resourcesOf(t, 'AWS::Lambda::Function').find(([i]) => i.startsWith('OrdersPollWorker'));
  return found ? { id: found[0], props: found[1].Properties } : undefined;
}

describe('CdcSource poll worker', () => {
  test('scheduled every minute in the VPC with the source security group, one at a time; the polled table is not in the DMS mappings', () => {
    const f = fixture();
    const source = ordersSource(f, { tables: TABLES });
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      Targets: [
        Match.objectLike({
          Arn: { 'Fn::GetAtt': [Match.stringLikeRegexp('^OrdersPollWorker'), 'Arn'] },
          RetryPolicy: { MaximumRetryAttempts: 0, MaximumEventAgeInSeconds: 60 },
        }),
      ],
    });
    const { props } = pollerOf(t)!;
    expect(source.pollWorker).toBeDefined();
    expect(props.ReservedConcurrentExecutions).toBe(1);
    expect(props.VpcConfig).toMatchObject({ SecurityGroupIds: [{ 'Fn::GetAtt': [expect.stringMatching(/^OrdersPollWorkerSecurityGroup/), 'GroupId'] }] });
    const env = (props.Environment as { Variables: Record<string, string> }).Variables;
    expect(env).toMatchObject({ CDC_SOURCE_ID: 'orders', CDC_SOURCE_SECRET_ARN: f.stack.resolve(f.sourceSecret.secretArn) });
    const config = parseTableConfig(env.CDC_TABLE_CONFIG);
    expect(config.find((c) => c.table === 'public.legacy_orders')).toMatchObject({ capture: 'poll', pollColumn: 'updated_at', key: ['order_no'] });
    expect(config.find((c) => c.table === 'public.customers')!.transforms).toEqual({
      rename: { email_address: 'email' },
      coerce: { score: 'numeric(10,2)' },
      tenant: { column: 'tenant', value: '{source}' },
    });
    const task = onlyResource(t, 'AWS::DMS::ReplicationTask');
    const rules = (parseJsonProperty(task.Properties.TableMappings) as { rules: Array<{ 'object-locator': { 'table-name': string } }> }).rules;
    const named = new Set(rules.map((r) => r['object-locator']['table-name']));
    expect(named.has('customers')).toBe(true);
    expect(named.has('legacy_orders')).toBe(false);
  });

  test('least privilege: only its own cursors in the control table, writing the raw stream, reading the source secret', () => {
    const f = fixture();
    ordersSource(f, { tables: TABLES });
    const t = Template.fromStack(f.stack);
    const docs = policyDocuments(t).filter((d) => d.where.startsWith('OrdersPollWorker'));
    const statements = docs.flatMap((d) => d.doc.Statement).filter((s) => s.Effect === 'Allow');
    const actions = new Set(statements.flatMap((s) => [s.Action].flat() as string[]));
    expect(actions.has('kinesis:PutRecords')).toBe(true);
    expect(actions.has('kinesis:GetRecords')).toBe(false);
    expect(actions.has('secretsmanager:GetSecretValue')).toBe(true);
    expect([...actions].filter((a) => a.startsWith('dynamodb:')).sort()).toEqual(['dynamodb:GetItem', 'dynamodb:PutItem', 'dynamodb:Query']);
    const keys = statements.filter((s) => [s.Action].flat().some((a) => String(a).startsWith('dynamodb:'))).map((s) => JSON.stringify(s.Condition));
    expect(keys.every((k) => k.includes('CHECKPOINT#poll-orders'))).toBe(true);
    expect([...actions].some((a) => a === '*' || a.endsWith(':*'))).toBe(false);
    Validations.of(f.vpc).acknowledge({ id: 'AwsSolutions-VPC7', reason: 'test fixture vpc; flow logs are the application’s choice' });
    const report = new AwsSolutionsChecks(f.app).validateScope(f.stack);
    expect(report.violations.map((v) => `${v.ruleName}: ${v.violatingResources.map((r) => r.constructPath).join(', ')}`)).toEqual([]);
  });

  test('errors alarm with injected actions; no poll worker without polled tables', () => {
    const f = fixture();
    ordersSource(f, { tables: TABLES });
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'Errors',
      EvaluationPeriods: 15,
      Dimensions: [{ Name: 'FunctionName', Value: { Ref: Match.stringLikeRegexp('^OrdersPollWorker') } }],
    });
    expect(TABLES.map((x) => [x.tableId, x.deletesObservable])).toEqual([
      ['public.customers', true],
      ['public.legacy_orders', false],
    ]);
    const g = fixture();
    const plain = ordersSource(g);
    expect(plain.pollWorker).toBeUndefined();
    expect(pollerOf(Template.fromStack(g.stack))).toBeUndefined();
  });

  test("the poll worker's resources match the committed snapshot (asset hashes normalised), cdk-nag clean", async () => {
    const f = fixture();
    ordersSource(f, { tables: TABLES });
    const template = Template.fromStack(f.stack).toJSON() as { Resources: Record<string, unknown> };
    // Everything the poll worker adds (function, role, policy, log group, schedule, its permission, alarm).
    const pinned = Object.fromEntries(Object.entries(template.Resources).filter(([id]) => id.startsWith('OrdersPoll')));
    const kinds = new Set(Object.values(pinned).map((r) => (r as { Type: string }).Type));
    for (const kind of [
      'AWS::Lambda::Function',
      'AWS::IAM::Role',
      'AWS::IAM::Policy',
      'AWS::Logs::LogGroup',
      'AWS::Events::Rule',
      'AWS::Lambda::Permission',
      'AWS::CloudWatch::Alarm',
    ])
      expect(kinds, kind).toContain(kind);
    const normalised = JSON.parse(JSON.stringify(pinned).replace(/[0-9a-f]{64}/g, '[ASSET-HASH]')) as unknown;
    await expect(`${JSON.stringify(normalised, null, 1)}\n`).toMatchFileSnapshot('./__snapshots__/poll-worker.template.json');
    Validations.of(f.vpc).acknowledge({ id: 'AwsSolutions-VPC7', reason: 'test fixture vpc; flow logs are the application’s choice' });
    const report = new AwsSolutionsChecks(f.app).validateScope(f.stack);
    expect(report.violations.map((v) => `${v.ruleName}: ${v.violatingResources.map((r) => r.constructPath).join(', ')}`)).toEqual([]);
  });

  test('synth-time errors name the table and the setting', () => {
    expect(() => ordersSource(fixture(), { tables: [CapturedTable.of('public.t', { capture: CaptureMode.POLL })] })).toThrow(
      /public\.t: a polled table needs pollColumn/,
    );
    expect(() => ordersSource(fixture(), { tables: [CapturedTable.of('public.t', { pollColumn: 'x' })] })).toThrow(
      /public\.t: pollColumn is only for capture: CaptureMode\.POLL/,
    );
    expect(() => ordersSource(fixture(), { tables: [CapturedTable.of('public.t', { transforms: { coerce: { a: 'int' } } })] })).toThrow(
      /public\.t: transforms\.coerce\.a: expected a sink type/,
    );
    expect(() => ordersSource(fixture(), { tables: [CapturedTable.of('public.t', { mask: ['e'], transforms: { coerce: { e: 'bigint' } } })] })).toThrow(
      /transforms\.coerce\.e: the column is masked/,
    );
  });
});
