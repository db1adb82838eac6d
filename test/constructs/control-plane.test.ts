import { Duration, RemovalPolicy, Stack } from 'aws-cdk-lib';
import * as cloudwatchActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as sns from 'aws-cdk-lib/aws-sns';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as kms from 'aws-cdk-lib/aws-kms';
import { describe, expect, test } from 'vitest';
import { ControlPlane } from '../../lib/index.ts';
import { newApp } from './helpers.ts';
import { OPERATOR_API_STAGE, OPERATOR_ROUTES } from '../../contracts/operator-routes.ts';

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

  test("the operator and status functions and the API access log are on the control plane's key, whose policy lets CloudWatch Logs of the region use it", () => {
    const stack = new Stack(newApp(), 'S');
    const controlPlane = new ControlPlane(stack, 'Control');
    const t = Template.fromStack(stack);
    const keyArn = stack.resolve(controlPlane.encryptionKey.keyArn);
    const groups = Object.entries(t.findResources('AWS::Logs::LogGroup'));
    expect(groups.map(([id]) => id).sort()).toEqual([
      expect.stringMatching(/^ControlOperatorApiApiAccessLogs/),
      expect.stringMatching(/^ControlOperatorApiOperatorLogGroup/),
      expect.stringMatching(/^ControlOperatorApiStatusLogGroup/),
    ]);
    for (const [id, g] of groups) expect((g as { Properties: { KmsKeyId?: unknown } }).Properties.KmsKeyId, id).toEqual(keyArn);
    t.hasResourceProperties('AWS::KMS::Key', {
      KeyPolicy: {
        Statement: Match.arrayWith([
          Match.objectLike({
            Sid: 'AllowCloudWatchLogsOfThisAccount',
            Principal: { Service: { 'Fn::Join': ['', ['logs.', { Ref: 'AWS::Region' }, '.amazonaws.com']] } },
          }),
        ]),
      },
    });
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
    const controlPlane = new ControlPlane(stack, 'Control');
    const role = new iam.Role(stack, 'Role', { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com') });
    controlPlane.grantReadWriteData(role);
    Template.fromStack(stack).hasResourceProperties('AWS::IAM::Policy', {
      PolicyDocument: {
        Statement: Match.arrayWith([
          Match.objectLike({
            Action: Match.arrayWith(['dynamodb:Query', 'dynamodb:PutItem']),
            Resource: Match.arrayWith([stack.resolve(controlPlane.table.tableArn)]),
          }),
          Match.objectLike({ Action: Match.arrayWith(['kms:Decrypt', 'kms:Encrypt']), Resource: stack.resolve(controlPlane.encryptionKey.keyArn) }),
        ]),
      },
    });
  });

  test('an imported control plane grants on the given table', () => {
    const stack = new Stack(newApp(), 'S');
    const controlPlane = ControlPlane.fromControlPlaneAttributes(stack, 'Imported', { tableArn: 'arn:aws:dynamodb:eu-west-1:111111111111:table/cdc-control' });
    expect(controlPlane.controlPlaneTableName).toBe('cdc-control');
    const role = new iam.Role(stack, 'Role', { assumedBy: new iam.ServicePrincipal('lambda.amazonaws.com') });
    controlPlane.grantReadData(role);
    Template.fromStack(stack).hasResourceProperties('AWS::IAM::Policy', {
      PolicyDocument: {
        Statement: Match.arrayWith([Match.objectLike({ Resource: Match.arrayWith(['arn:aws:dynamodb:eu-west-1:111111111111:table/cdc-control']) })]),
      },
    });
  });
});

describe('ControlPlane operator API', () => {
  const policiesOf = (t: Template, rolePrefix: string) =>
    Object.values(t.findResources('AWS::IAM::Policy')).filter((p) =>
      JSON.stringify((p as { Properties: { Roles: unknown } }).Properties.Roles).includes(rolePrefix),
    ) as Array<{ Properties: { PolicyDocument: { Statement: Array<{ Action: string | string[]; Condition?: unknown; Resource: unknown }> } } }>;
  const actionsOf = (policies: ReturnType<typeof policiesOf>) =>
    policies.flatMap((p) => p.Properties.PolicyDocument.Statement.flatMap((s) => (Array.isArray(s.Action) ? s.Action : [s.Action])));

  test('two functions behind one IAM-authorized REST API: one POST resource per action, read class to the status function', () => {
    const stack = new Stack(newApp(), 'S');
    const controlPlane = new ControlPlane(stack, 'Control', { changeLogRetention: Duration.days(7), pauseBudgets: { orders: Duration.hours(6) } });
    const t = Template.fromStack(stack);
    t.resourceCountIs('AWS::Lambda::Function', 2);
    t.resourceCountIs('AWS::Lambda::Url', 0);
    t.resourceCountIs('AWS::ApiGateway::RestApi', 1);
    t.resourceCountIs('AWS::ApiGatewayV2::Api', 0);
    t.hasResourceProperties('AWS::Lambda::Function', {
      Environment: {
        Variables: Match.objectLike({
          CDC_OPERATOR_ACTIONS: 'status,pause,resume,resnapshot,audit,rebuild',
          CDC_CHANGE_LOG_RETENTION_MS: String(7 * 86_400_000),
          CDC_PAUSE_BUDGETS: JSON.stringify({ orders: 6 * 3_600_000 }),
        }),
      },
    });
    t.hasResourceProperties('AWS::Lambda::Function', { Environment: { Variables: Match.objectLike({ CDC_OPERATOR_ACTIONS: 'status,audit' }) } });
    // Every method: POST, AWS_IAM, Lambda proxy; read routes reach the status function, the others the operator function.
    const methods = Object.values(t.findResources('AWS::ApiGateway::Method')) as Array<{
      Properties: { HttpMethod: string; AuthorizationType: string; ResourceId: unknown; Integration: { Type: string; Uri: unknown } };
    }>;
    expect(methods).toHaveLength(OPERATOR_ROUTES.length);
    const resources = t.findResources('AWS::ApiGateway::Resource') as Record<string, { Properties: { PathPart: string; ParentId: unknown } }>;
    const pathOf = (id: unknown): string => {
      const ref = (id as { Ref?: string }).Ref;
      const r = ref ? resources[ref] : undefined;
      return r ? `${pathOf(r.Properties.ParentId)}/${r.Properties.PathPart}` : '';
    };
    const statusFn = (stack.resolve(controlPlane.statusFunction.functionArn) as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
    const operatorFn = (stack.resolve(controlPlane.operatorFunction.functionArn) as { 'Fn::GetAtt': [string, string] })['Fn::GetAtt'][0];
    const seen = methods.map((m) => {
      expect(m.Properties).toMatchObject({ HttpMethod: 'POST', AuthorizationType: 'AWS_IAM', Integration: { Type: 'AWS_PROXY' } });
      const target = JSON.stringify(m.Properties.Integration.Uri);
      return [pathOf(m.Properties.ResourceId), target.includes(statusFn) ? 'status' : target.includes(operatorFn) ? 'operator' : '?'];
    });
    expect(seen.sort()).toEqual(OPERATOR_ROUTES.map((r) => [r.path, r.actionClass === 'read' ? 'status' : 'operator']).sort());
    // Only API Gateway may invoke the functions, per method (no test-invoke, no other principal).
    const permissions = Object.values(t.findResources('AWS::Lambda::Permission')) as Array<{ Properties: { Principal: string; SourceArn: unknown } }>;
    expect(permissions).toHaveLength(OPERATOR_ROUTES.length);
    for (const p of permissions) expect(p.Properties.Principal).toBe('apigateway.amazonaws.com');
    t.hasResourceProperties('AWS::ApiGateway::Stage', {
      StageName: OPERATOR_API_STAGE,
      AccessLogSetting: Match.objectLike({ Format: Match.stringLikeRegexp('identity.userArn') }),
      MethodSettings: [Match.objectLike({ LoggingLevel: 'ERROR', DataTraceEnabled: false })],
    });
    const outputs = Object.keys(t.findOutputs('*'));
    expect(outputs.filter((o) => o.includes('OperatorApiUrl'))).toHaveLength(1);
    expect(outputs.filter((o) => o.includes('FunctionName'))).toEqual([]);
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
    for (const a of statusActions)
      expect(a, a).not.toMatch(/^dynamodb:(PutItem|UpdateItem|DeleteItem|BatchWriteItem|ConditionCheckItem)$|^kms:(Encrypt|GenerateDataKey)/);
    expect(statusActions).toEqual(expect.arrayContaining(['dynamodb:GetItem', 'dynamodb:Query', 'dynamodb:Scan', 'kms:Decrypt']));
  });

  test('grantReadStatus, grantOperate and grantDestructiveActions grant execute-api:Invoke on the routes of their classes only', () => {
    const stack = new Stack(newApp(), 'S');
    const controlPlane = new ControlPlane(stack, 'Control');
    const viewer = new iam.Role(stack, 'Viewer', { assumedBy: new iam.AccountRootPrincipal() });
    const oncall = new iam.Role(stack, 'Oncall', { assumedBy: new iam.AccountRootPrincipal() });
    const admin = new iam.Role(stack, 'Admin', { assumedBy: new iam.AccountRootPrincipal() });
    controlPlane.grantReadStatus(viewer);
    controlPlane.grantOperate(oncall);
    controlPlane.grantDestructiveActions(admin);
    const t = Template.fromStack(stack);
    const invokeRoutes = (role: string): string[] =>
      policiesOf(t, role)
        .flatMap((p) => p.Properties.PolicyDocument.Statement)
        .flatMap((s) => {
          const actions = Array.isArray(s.Action) ? s.Action : [s.Action];
          expect(actions.filter((a) => a.startsWith('lambda:'))).toEqual([]);
          if (!actions.includes('execute-api:Invoke')) return [];
          return (Array.isArray(s.Resource) ? s.Resource : [s.Resource]).map((r) => {
            // arn:…:execute-api:REGION:ACCOUNT:API/STAGE/POST/PATH, with the API id a Ref of the RestApi.
            const parts = (r as { 'Fn::Join': [string, unknown[]] })['Fn::Join'][1];
            expect(JSON.stringify(parts)).toContain(JSON.stringify(stack.resolve(controlPlane.operatorApi.restApiId)));
            const tail = parts.at(-1) as string;
            expect(tail.startsWith(`/${OPERATOR_API_STAGE}/POST/`), tail).toBe(true);
            return tail.slice(`/${OPERATOR_API_STAGE}/POST`.length);
          });
        })
        .sort();
    const paths = (...classes: string[]) =>
      OPERATOR_ROUTES.filter((r) => classes.includes(r.actionClass))
        .map((r) => r.path)
        .sort();
    expect(invokeRoutes('Viewer')).toEqual(paths('read'));
    expect(invokeRoutes('Oncall')).toEqual(paths('read', 'operate'));
    expect(invokeRoutes('Oncall')).not.toContain('/destructive/accept-schema');
    expect(invokeRoutes('Admin')).toEqual(paths('destructive'));
    // Every route is in exactly one class; no wildcard resource anywhere.
    expect([...paths('read'), ...paths('operate'), ...paths('destructive')].sort()).toEqual(OPERATOR_ROUTES.map((r) => r.path).sort());
  });

  test('an errors alarm per function with the injected actions, none when alarms are off', () => {
    const stack = new Stack(newApp(), 'S');
    const topic = new sns.Topic(stack, 'Topic');
    const controlPlane = new ControlPlane(stack, 'Control', { alarmActions: [new cloudwatchActions.SnsAction(topic)] });
    expect(controlPlane.alarms).toHaveLength(2);
    const t = Template.fromStack(stack);
    t.resourcePropertiesCountIs(
      'AWS::CloudWatch::Alarm',
      { MetricName: 'Errors', Namespace: 'AWS/Lambda', Threshold: 0, AlarmActions: [stack.resolve(topic.topicArn)] },
      2,
    );
    const quiet = new Stack(newApp(), 'Q');
    new ControlPlane(quiet, 'Control', { alarmsEnabled: false });
    Template.fromStack(quiet).resourceCountIs('AWS::CloudWatch::Alarm', 0);
  });
});
