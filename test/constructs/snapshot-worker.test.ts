/**
 * The snapshot worker a `CdcSource` deploys (docs/snapshot.md): a scheduled function in the VPC
 * with the source security group, one at a time, least-privilege grants, the table config with
 * per-table opt-outs, the source budget and optional read replica, and its two alarms.
 */
import { Duration } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { describe, expect, test } from 'vitest';
import { parseTableConfig } from '../../lambda/core/tables/table-config.ts';
import { parseBudget } from '../../lambda/runtime/environment.ts';
import { CapturedTable, SourceDatabase } from '../../lib/index.ts';
import { DATABASE_PEER, fixture, ordersSource, policyDocuments, resourcesOf } from './helpers.ts';

function workerOf(t: Template): { id: string; props: Record<string, unknown> } {
  const [id, r] = resourcesOf(t, 'AWS::Lambda::Function').find(([i]) => i.startsWith('OrdersSnapshotWorker'))!;
  return { id, props: r.Properties };
}

describe('CdcSource snapshot worker', () => {
  test('scheduled every minute, in the VPC with the source security group, one at a time, 15 minutes per invocation', () => {
    const f = fixture();
    ordersSource(f);
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      Targets: [
        Match.objectLike({
          Arn: { 'Fn::GetAtt': [Match.stringLikeRegexp('^OrdersSnapshotWorker'), 'Arn'] },
          RetryPolicy: { MaximumRetryAttempts: 0, MaximumEventAgeInSeconds: 60 },
        }),
      ],
    });
    const { props } = workerOf(t);
    expect(props.Timeout).toBe(900);
    expect(props.ReservedConcurrentExecutions).toBe(1);
    expect(props.VpcConfig).toMatchObject({ SecurityGroupIds: [{ 'Fn::GetAtt': [expect.stringMatching(/^OrdersSnapshotWorkerSecurityGroup/), 'GroupId'] }] });
    const env = (props.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(env).toMatchObject({
      CDC_SOURCE_ID: 'orders',
      CDC_SOURCE_SECRET_ARN: f.stack.resolve(f.sourceSecret.secretArn),
      CDC_RAW_STREAM: { Ref: expect.stringMatching(/^OrdersRawStream/) },
    });
    expect(env.CDC_SNAPSHOT_BUDGET).toBeUndefined();
    expect(env.CDC_SNAPSHOT_REPLICA_SECRET_ARN).toBeUndefined();
  });

  test('least privilege: the control table, writing the raw stream, reading the source secret; nothing else', () => {
    const f = fixture();
    ordersSource(f);
    const t = Template.fromStack(f.stack);
    const docs = policyDocuments(t).filter((d) => d.where.startsWith('OrdersSnapshotWorker'));
    const actions = new Set(docs.flatMap((d) => d.doc.Statement.flatMap((s) => [s.Action].flat() as string[])));
    expect([...actions].filter((a) => a.startsWith('kinesis:')).sort()).toEqual(
      ['kinesis:DescribeStream', 'kinesis:ListShards', 'kinesis:PutRecord', 'kinesis:PutRecords'].filter((a) => actions.has(a)),
    );
    expect(actions.has('kinesis:GetRecords')).toBe(false);
    expect([...actions].some((a) => a.startsWith('dynamodb:'))).toBe(true);
    expect(actions.has('secretsmanager:GetSecretValue')).toBe(true);
    expect([...actions].some((a) => a === '*' || a.endsWith(':*'))).toBe(false);
  });

  test('per-table opt-out, source budget and read replica reach the worker', () => {
    const f = fixture();
    const replica = secretsmanager.Secret.fromSecretNameV2(f.stack, 'Replica', 'replica');
    ordersSource(f, {
      database: SourceDatabase.postgres({
        databaseName: 'orders',
        secret: f.sourceSecret,
        heartbeatSecret: f.heartbeatSecret,
        snapshotBudget: { writeLatencyPercent: 5 },
        readReplicaSecret: replica,
        peer: DATABASE_PEER,
      }),
      tables: [CapturedTable.of('public.customers'), CapturedTable.of('public.orders', { snapshot: false })],
    });
    const t = Template.fromStack(f.stack);
    const env = (workerOf(t).props.Environment as { Variables: Record<string, string> }).Variables;
    const tables = parseTableConfig(env.CDC_TABLE_CONFIG);
    expect(tables.find((x) => x.table === 'public.orders')!.snapshot).toBe(false);
    expect(tables.find((x) => x.table === 'public.customers')!.snapshot).toBeUndefined();
    expect(parseBudget(env.CDC_SNAPSHOT_BUDGET)).toEqual({ writeLatencyPct: 5, cpuPct: 5 });
    expect(env.CDC_SNAPSHOT_REPLICA_SECRET_ARN).toEqual(f.stack.resolve(replica.secretArn));
  });

  test('alarms: errors for 15 minutes, and no progress for the stall threshold, with injected actions; off with alarmsEnabled false', () => {
    const f = fixture();
    const source = ordersSource(f, { alarmSnapshotStallThreshold: Duration.minutes(20) });
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      Namespace: 'CdcPlatform',
      MetricName: 'SnapshotStallAge',
      Dimensions: [{ Name: 'Source', Value: 'orders' }],
      Threshold: 1200,
      Statistic: 'Maximum',
    });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'Errors',
      EvaluationPeriods: 15,
      Dimensions: [{ Name: 'FunctionName', Value: { Ref: Match.stringLikeRegexp('^OrdersSnapshotWorker') } }],
    });
    expect(source.snapshotWorker).toBeDefined();
    const g = fixture();
    const quiet = ordersSource(g, { alarmsEnabled: false });
    expect(quiet.alarms).toHaveLength(0);
  });

  test('a bad budget is refused with the setting named', () => {
    expect(() => parseBudget('{"writeLatencyPct": -1}')).toThrow(/CDC_SNAPSHOT_BUDGET\.writeLatencyPct: expected a positive number/);
    expect(() => parseBudget('nope')).toThrow(/CDC_SNAPSHOT_BUDGET: not valid JSON/);
    expect(parseBudget(undefined)).toEqual({ writeLatencyPct: 10, cpuPct: 5 });
  });

  test('with the RDS instance named: its CloudWatch metrics pace the snapshot (GetMetricData only), no unacknowledged cdk-nag finding', () => {
    const f = fixture();
    ordersSource(f, {
      database: SourceDatabase.postgres({
        databaseName: 'orders',
        secret: f.sourceSecret,
        heartbeatSecret: f.heartbeatSecret,
        instanceIdentifier: 'orders-db',
        peer: DATABASE_PEER,
      }),
    });
    const t = Template.fromStack(f.stack);
    const env = (workerOf(t).props.Environment as { Variables: Record<string, string> }).Variables;
    expect(env.CDC_SNAPSHOT_DB_INSTANCE).toBe('orders-db');
    const docs = policyDocuments(t).filter((d) => d.where.startsWith('OrdersSnapshotWorker'));
    const cw = docs.flatMap((d) => d.doc.Statement).filter((s) => [s.Action].flat().some((a) => String(a).startsWith('cloudwatch:')));
    expect(cw.map((s) => s.Action)).toEqual(['cloudwatch:GetMetricData']);
    Validations.of(f.vpc).acknowledge({ id: 'AwsSolutions-VPC7', reason: 'test fixture vpc; flow logs are the application’s choice' });
    const report = new AwsSolutionsChecks(f.app).validateScope(f.stack);
    expect(report.violations.map((v) => `${v.ruleName}: ${v.violatingResources.map((r) => r.constructPath).join(', ')}`)).toEqual([]);
  });
});
