/** The slot monitor of a CdcSource: scheduled function in the VPC with the monitoring secret, its alarms (on by default, injected actions, threshold from the budget). */
import { Size } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import * as sns from 'aws-cdk-lib/aws-sns';
import * as actions from 'aws-cdk-lib/aws-cloudwatch-actions';
import { describe, expect, test } from 'vitest';
import { SourceDatabase, CapturedTable } from '../../lib/index.ts';
import { DATABASE_PEER, fixture, ordersSource, resourcesOf } from './helpers.ts';

const MIB = 1024 * 1024;

describe('CdcSource slot monitor', () => {
  test('a function every minute in the VPC, reading the source with the monitoring secret only', () => {
    const f = fixture();
    const monitoring = secretsmanager.Secret.fromSecretNameV2(f.stack, 'MonitorSecret', 'monitor');
    const source = ordersSource(f, {
      database: SourceDatabase.postgres({
        databaseName: 'orders',
        secret: f.sourceSecret,
        heartbeatSecret: f.heartbeatSecret,
        monitoringSecret: monitoring,
        peer: DATABASE_PEER,
      }),
      slotName: 'orders_slot',
      slotWalBudget: Size.gibibytes(4),
    });
    const t = Template.fromStack(f.stack);
    const [id, fn] = resourcesOf(t, 'AWS::Lambda::Function').find(([k]) => k.startsWith('OrdersSlotMonitor'))!;
    expect(f.stack.resolve(source.slotMonitor.functionName)).toEqual({ Ref: id });
    expect((fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables).toMatchObject({
      CDC_SOURCE_ID: 'orders',
      CDC_SLOT_NAME: 'orders_slot',
      CDC_SOURCE_SECRET_ARN: f.stack.resolve(monitoring.secretArn),
      CDC_SLOT_WAL_BUDGET_BYTES: String(4 * 1024 * MIB),
    });
    expect(fn.Properties.VpcConfig).toMatchObject({
      SecurityGroupIds: [{ 'Fn::GetAtt': [expect.stringMatching(/^OrdersSlotMonitorSecurityGroup/), 'GroupId'] }],
    });
    t.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      Targets: [Match.objectLike({ Arn: { 'Fn::GetAtt': [Match.stringLikeRegexp('^OrdersSlotMonitor'), 'Arn'] } })],
    });
    // Its role reads the monitoring secret and not the capture secret.
    const policies = resourcesOf(t, 'AWS::IAM::Policy').filter(([k]) => k.startsWith('OrdersSlotMonitor'));
    const text = JSON.stringify(policies.map(([, p]) => p.Properties.PolicyDocument));
    expect(text).toContain('secret:monitor');
    expect(text).not.toContain('secret:source');
    // Its latest report is kept in the control plane for cdc status: PutItem on that one item's partition only.
    expect((fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables.CDC_CONTROL_TABLE).toEqual(
      f.stack.resolve(f.controlPlane.controlPlaneTableName),
    );
    const dynamo = policies
      .flatMap(([, p]) => (p.Properties.PolicyDocument as { Statement: Array<{ Effect: string; Action: string | string[]; Condition?: unknown }> }).Statement)
      .filter((st) => st.Effect === 'Allow' && [st.Action].flat().some((a) => a.startsWith('dynamodb:')));
    expect(dynamo.map((st) => [[st.Action].flat(), st.Condition])).toEqual([
      [['dynamodb:PutItem'], { 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['CHECKPOINT#slot-monitor:orders'] } }],
    ]);
  });

  test('alarms on by default: headroom below 20% of the budget (missing data breaches), foreign inactive slots; with the injected actions', () => {
    const f = fixture();
    const topic = new sns.Topic(f.stack, 'Topic');
    const source = ordersSource(f, { slotWalBudget: Size.mebibytes(1000), alarmActions: [new actions.SnsAction(topic)] });
    const t = Template.fromStack(f.stack);
    const topicRef = f.stack.resolve(topic.topicArn);
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      AlarmName: 'Test-orders-slot-headroom',
      Namespace: 'CdcPlatform',
      MetricName: 'SlotHeadroomBytes',
      Dimensions: [{ Name: 'Source', Value: 'orders' }],
      Statistic: 'Minimum',
      ComparisonOperator: 'LessThanOrEqualToThreshold',
      Threshold: 1000 * MIB - Math.ceil(1000 * MIB * 0.8),
      TreatMissingData: 'breaching',
      AlarmActions: [topicRef],
      OKActions: [topicRef],
    });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      AlarmName: 'Test-orders-foreign-inactive-slots',
      MetricName: 'SlotForeignInactiveBytes',
      ComparisonOperator: 'GreaterThanOrEqualToThreshold',
      Threshold: 16 * MIB,
      AlarmActions: [topicRef],
    });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      AlarmName: 'Test-orders-source-discontinuity',
      MetricName: 'SourceDiscontinuities',
      Threshold: 0,
      AlarmActions: [topicRef],
    });
    // The lifecycle function records a slot that replaces another in the control plane.
    const lifecycle = resourcesOf(t, 'AWS::Lambda::Function').find(([k]) => k.startsWith('OrdersTaskLifecycle'))![1];
    expect((lifecycle.Properties.Environment as { Variables: Record<string, unknown> }).Variables.CDC_CONTROL_TABLE).toEqual(
      f.stack.resolve(f.controlPlane.controlPlaneTableName),
    );
    t.hasResourceProperties('Custom::CdcReplicationSlot', { SourceId: 'orders' });
    expect(f.stack.resolve((source.metricSlotRetainedBytes() as cloudwatch.Metric).metricName)).toBe('SlotRetainedBytes');
    expect(source.metricSlotHeadroomBytes().statistic).toBe('Minimum');
  });

  test('no alarms when alarms are off; the budget must hold at least one WAL segment', () => {
    const f = fixture();
    ordersSource(f, { alarmsEnabled: false });
    const names = resourcesOf(Template.fromStack(f.stack), 'AWS::CloudWatch::Alarm').map(([, a]) => a.Properties.MetricName);
    expect(names).not.toContain('SlotHeadroomBytes');
    expect(names).not.toContain('SlotForeignInactiveBytes');
    const g = fixture();
    expect(() => ordersSource(g, { slotWalBudget: Size.mebibytes(8), tables: [CapturedTable.of('public.a')] })).toThrow(
      /slotWalBudget must be at least 16 MiB/,
    );
  });
});
