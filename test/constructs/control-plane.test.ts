import { Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as cloudwatchActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as sns from 'aws-cdk-lib/aws-sns';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import { describe, expect, test } from 'vitest';
import { ControlPlane } from '../../lib/index.ts';
import { newApp } from './helpers.ts';

describe('ControlPlane', () => {
  test('default table: pk/sk strings, on demand, PITR, customer-managed key with rotation, retained', () => {
    const stack = new Stack(newApp(), 'S');
    new ControlPlane(stack, 'Control');
    const t = Template.fromStack(stack);
    t.resourceCountIs('AWS::DynamoDB::Table', 1);
    t.hasResource('AWS::DynamoDB::Table', {
      Properties: {
        KeySchema: [
          { AttributeName: 'pk', KeyType: 'HASH' },
          { AttributeName: 'sk', KeyType: 'RANGE' },
        ],
        AttributeDefinitions: Match.arrayWith([
          { AttributeName: 'pk', AttributeType: 'S' },
          { AttributeName: 'sk', AttributeType: 'S' },
        ]),
        BillingMode: 'PAY_PER_REQUEST',
        PointInTimeRecoverySpecification: { PointInTimeRecoveryEnabled: true },
        SSESpecification: { SSEEnabled: true, SSEType: 'KMS', KMSMasterKeyId: Match.anyValue() },
        TimeToLiveSpecification: Match.absent(),
      },
      DeletionPolicy: 'Retain',
      UpdateReplacePolicy: 'Retain',
    });
    t.hasResource('AWS::KMS::Key', { Properties: { EnableKeyRotation: true }, DeletionPolicy: 'Retain' });
  });

  test('a given key and removal policy are used', () => {
    const stack = new Stack(newApp(), 'S');
    const key = new kms.Key(stack, 'MyKey');
    new ControlPlane(stack, 'Control', { encryptionKey: key, removalPolicy: RemovalPolicy.DESTROY });
    const t = Template.fromStack(stack);
    t.resourceCountIs('AWS::KMS::Key', 1);
    t.hasResource('AWS::DynamoDB::Table', {
      Properties: { SSESpecification: { KMSMasterKeyId: stack.resolve(key.keyArn) } },
      DeletionPolicy: 'Delete',
    });
  });

  test('grantReadWriteData covers the table and its key', () => {
    const stack = new Stack(newApp(), 'S');
    const control = new ControlPlane(stack, 'Control');
    const role = new iam.Role(stack, 'Role', { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com') });
    control.grantReadWriteData(role);
    Template.fromStack(stack).hasResourceProperties('AWS::IAM::Policy', {
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({ Action: Match.arrayWith(['dynamodb:Query', 'dynamodb:PutItem']), Resource: Match.arrayWith([stack.resolve(control.table.tableArn)]) }),
          Match.objectLike({ Action: Match.arrayWith(['kms:Decrypt', 'kms:Encrypt']), Resource: stack.resolve(control.encryptionKey.keyArn) }),
        ]),
      },
    });
  });

  test('an imported control plane grants on the given table', () => {
    const stack = new Stack(newApp(), 'S');
    const control = ControlPlane.fromControlPlaneAttributes(stack, 'Imported', { tableArn: 'arn:aws:dynamodb:eu-west-1:111111111111:table/cdc-control' });
    expect(control.controlPlaneTableName).toBe('cdc-control');
    const role = new iam.Role(stack, 'Role', { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com') });
    control.grantReadData(role);
    Template.fromStack(stack).hasResourceProperties('AWS::IAM::Policy', {
      PolicyDocument: { Statement: Match.arrayWith([Match.objectLike({ Resource: Match.arrayWith(['arn:aws:dynamodb:eu-west-1:111111111111:table/cdc-control']) })]) },
    });
  });
});

describe('ControlPlane operator API', () => {
  const policiesOf = (t: Template, rolePrefix: string) =>
    Object.values(t.findResources('AWS::IAM::Policy')).filter((p) => JSON.stringify((p as { Properties: { Roles: unknown } }).Properties.Roles).includes(rolePrefix)) as Array<{ Properties: { PolicyDocument: { Statement: Array<{ Action: string | string[]; Condition?: unknown; Resource: unknown }> } } }>;
  const actionsOf = (policies: ReturnType<typeof policiesOf>) => policies.flatMap((p) => p.Properties.PolicyDocument.Statement.flatMap((s) => (Array.isArray(s.Action) ? s.Action : [s.Action])));

  test('two functions invoked through IAM only (no URL, no resource policy), configured with the retention and budgets', () => {
    const stack = new Stack(newApp(), 'S');
    new ControlPlane(stack, 'Control', { changeLogRetention: Duration.days(7), pauseBudgets: { orders: Duration.hours(6) } });
    const t = Template.fromStack(stack);
    t.resourceCountIs('AWS::Lambda::Function', 2);
    t.resourceCountIs('AWS::Lambda::Url', 0);
    t.resourceCountIs('AWS::Lambda::Permission', 0);
    t.resourceCountIs('AWS::ApiGateway::RestApi', 0);
    t.resourceCountIs('AWS::ApiGatewayV2::Api', 0);
    t.hasResourceProperties('AWS::Lambda::Function', {
      Environment: { Variables: Match.objectLike({ CDC_OPERATOR_ACTIONS: 'status,pause,resume,resnapshot,audit,rebuild', CDC_CHANGE_LOG_RETENTION_MS: String(7 * 86_400_000), CDC_PAUSE_BUDGETS: JSON.stringify({ orders: 6 * 3_600_000 }) }) },
    });
    t.hasResourceProperties('AWS::Lambda::Function', { Environment: { Variables: Match.objectLike({ CDC_OPERATOR_ACTIONS: 'status,audit' }) } });
    const outputs = Object.keys(t.findOutputs('*'));
    expect(outputs.filter((o) => o.includes('OperatorFunctionName'))).toHaveLength(1);
    expect(outputs.filter((o) => o.includes('StatusFunctionName'))).toHaveLength(1);
  });

  test('least privilege: the operator writes only table, sink, audit and rebuild-slot items; the status function cannot write at all', () => {
    const stack = new Stack(newApp(), 'S');
    new ControlPlane(stack, 'Control');
    const t = Template.fromStack(stack);
    const operator = policiesOf(t, 'ControlOperatorApiOperatorServiceRole');
    const status = policiesOf(t, 'ControlOperatorApiStatusServiceRole');
    expect(operator.length).toBeGreaterThan(0);
    expect(status.length).toBeGreaterThan(0);
    const write = operator.flatMap((p) => p.Properties.PolicyDocument.Statement).find((s) => JSON.stringify(s.Action).includes('dynamodb:UpdateItem'))!;
    expect(write.Condition).toEqual({ 'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': ['SOURCE#*', 'SINK#*', 'AUDIT', 'REBUILD#*'] } });
    for (const forbidden of ['dynamodb:DeleteItem', 'dynamodb:BatchWriteItem', 'dynamodb:*']) expect(actionsOf(operator)).not.toContain(forbidden);
    const statusActions = actionsOf(status);
    for (const a of statusActions) expect(a, a).not.toMatch(/^dynamodb:(PutItem|UpdateItem|DeleteItem|BatchWriteItem|ConditionCheckItem)$|^kms:(Encrypt|GenerateDataKey)/);
    expect(statusActions).toEqual(expect.arrayContaining(['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:Scan', 'kms:Decrypt']));
  });

  test('grantOperate and grantReadStatus grant lambda:InvokeFunction on different functions', () => {
    const stack = new Stack(newApp(), 'S');
    const control = new ControlPlane(stack, 'Control');
    const oncall = new iam.Role(stack, 'Oncall', { assumedBy: new iam.AccountRootPrincipal() });
    const viewer = new iam.Role(stack, 'Viewer', { assumedBy: new iam.AccountRootPrincipal() });
    control.grantOperate(oncall);
    control.grantReadStatus(viewer);
    const t = Template.fromStack(stack);
    const invokeTargets = (role: string) =>
      policiesOf(t, role)
        .flatMap((p) => p.Properties.PolicyDocument.Statement)
        .filter((s) => JSON.stringify(s.Action).includes('lambda:InvokeFunction'))
        .map((s) => JSON.stringify(s.Resource));
    const op = stack.resolve(control.operatorFunction.functionArn) as { 'Fn::GetAtt': [string, string] };
    const st = stack.resolve(control.statusFunction.functionArn) as { 'Fn::GetAtt': [string, string] };
    expect(invokeTargets('Oncall').join()).toContain(op['Fn::GetAtt'][0]);
    expect(invokeTargets('Oncall').join()).not.toContain(st['Fn::GetAtt'][0]);
    expect(invokeTargets('Viewer').join()).toContain(st['Fn::GetAtt'][0]);
    expect(invokeTargets('Viewer').join()).not.toContain(op['Fn::GetAtt'][0]);
  });

  test('an errors alarm per function with the injected actions, none when alarms are off', () => {
    const stack = new Stack(newApp(), 'S');
    const topic = new sns.Topic(stack, 'Topic');
    const control = new ControlPlane(stack, 'Control', { alarmActions: [new cloudwatchActions.SnsAction(topic)] });
    expect(control.alarms).toHaveLength(2);
    const t = Template.fromStack(stack);
    t.resourcePropertiesCountIs('AWS::CloudWatch::Alarm', { MetricName: 'Errors', Namespace: 'AWS/Lambda', Threshold: 0, AlarmActions: [stack.resolve(topic.topicArn)] }, 2);
    const quiet = new Stack(newApp(), 'Q');
    new ControlPlane(quiet, 'Control', { alarmsEnabled: false });
    Template.fromStack(quiet).resourceCountIs('AWS::CloudWatch::Alarm', 0);
  });
});
