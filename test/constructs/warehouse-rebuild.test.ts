import { Duration } from 'aws-cdk-lib';
import { Stack } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { describe, expect, test } from 'vitest';
import { ChangeLog, ControlPlane, WarehouseConnection, WarehouseRebuild, WarehouseSink, type WarehouseRebuildProps } from '../../lib/index.ts';
import { addApiEndpoints, fixture, type Fixture, newApp, onlyResource, ordersSource, policyDocuments, resourcesOf, WAREHOUSE_PEER } from './helpers.ts';

function build(f: Fixture, overrides: Partial<WarehouseRebuildProps> = {}) {
  const orders = ordersSource(f);
  const sink = new WarehouseSink(f.stack, 'Warehouse', {
    controlPlane: f.controlPlane,
    changeLog: f.log,
    sources: [orders],
    vpc: f.vpc,
    connection: WarehouseConnection.postgres({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
  });
  const rebuild = new WarehouseRebuild(f.stack, 'Rebuild', { controlPlane: f.controlPlane, changeLog: f.log, sink, vpc: f.vpc, ...overrides });
  return { sink, rebuild, t: Template.fromStack(f.stack) };
}

type Fn = { Properties: { Environment?: { Variables: Record<string, unknown> }; Timeout?: number; VpcConfig?: unknown; Role?: unknown } };
const fnById = (t: Template, prefix: string): Fn => {
  const found = resourcesOf(t, 'AWS::Lambda::Function').filter(([id]) => id.startsWith(prefix));
  expect(found.map(([id]) => id)).toHaveLength(1);
  return found[0]![1] as unknown as Fn;
};
const statementsOf = (t: Template, rolePrefix: string) =>
  policyDocuments(t)
    .filter((d) => JSON.stringify(d.doc).length > 0 && d.where.startsWith(rolePrefix))
    .flatMap((d) => d.doc.Statement);
const actionsOf = (s: Record<string, unknown>): string[] => [s.Action].flat() as string[];

describe('WarehouseRebuild', () => {
  test('the operator function serves rebuild, may write the REBUILD# items, knows the sink’s worker and state machine; the status function does not', () => {
    const f = fixture();
    const { t } = build(f);
    const operator = fnById(t, 'ControlOperatorApiOperator');
    const env = operator.Properties.Environment!.Variables;
    expect(env.CDC_OPERATOR_ACTIONS).toBe('status,pause,resume,resnapshot,audit,rebuild');
    const workers = JSON.stringify(env.CDC_REBUILD_WORKERS);
    expect(workers).toContain('{\\"warehouse\\":{\\"worker\\":\\"');
    expect(workers).toMatch(/"Ref":"RebuildWorker[0-9A-F]+"/);
    expect(workers).toMatch(/"Ref":"RebuildStateMachine[0-9A-F]+"/);
    const status = fnById(t, 'ControlOperatorApiStatus');
    expect(status.Properties.Environment!.Variables.CDC_OPERATOR_ACTIONS).toBe('status,audit');
    expect(status.Properties.Environment!.Variables.CDC_REBUILD_WORKERS).toBeUndefined();
    const op = statementsOf(t, 'ControlOperatorApiOperatorServiceRole');
    const write = op.find((s) => actionsOf(s).includes('dynamodb:UpdateItem'))!;
    expect((write.Condition as Record<string, Record<string, string[]>>)['ForAllValues:StringLike']!['dynamodb:LeadingKeys']).toEqual([
      'SOURCE#*',
      'SINK#*',
      'AUDIT',
      'REBUILD#*',
    ]);
    expect(op.some((s) => actionsOf(s).includes('lambda:InvokeFunction') && JSON.stringify(s.Resource).includes('RebuildWorker'))).toBe(true);
    expect(op.some((s) => actionsOf(s).includes('states:StartExecution') && JSON.stringify(s.Resource).includes('RebuildStateMachine'))).toBe(true);
    // The status function may start nothing.
    const st = statementsOf(t, 'ControlOperatorApiStatusServiceRole');
    expect(st.flatMap(actionsOf).filter((a) => /lambda:Invoke|states:|dynamodb:(Put|Update|Delete)/.test(a))).toEqual([]);
  });

  test('without a WarehouseRebuild the operator function has no rebuild worker (a rebuild is refused, REBUILD_NOT_AVAILABLE)', () => {
    const f = fixture();
    const t = Template.fromStack(f.stack);
    expect(fnById(t, 'ControlOperatorApiOperator').Properties.Environment!.Variables.CDC_REBUILD_WORKERS).toBe('{}');
  });

  test('the worker runs in the VPC for up to 15 minutes a slice, reads the archive under its prefix and the stream, writes only its sink’s rebuild and progress items', () => {
    const f = fixture();
    const { t } = build(f);
    const worker = fnById(t, 'RebuildWorker');
    expect(worker.Properties.VpcConfig).toBeDefined();
    expect(worker.Properties.Timeout).toBe(900);
    // Its log group on the change log's (the platform's) key.
    expect(onlyResource(t, 'AWS::Logs::LogGroup', 'RebuildWorkerLogGroup').Properties.KmsKeyId).toEqual(f.stack.resolve(f.log.encryptionKey!.keyArn));
    // And the state machine's execution log group.
    expect(onlyResource(t, 'AWS::Logs::LogGroup', 'RebuildExecutions').Properties.KmsKeyId).toEqual(f.stack.resolve(f.log.encryptionKey!.keyArn));
    expect(worker.Properties.Environment!.Variables).toMatchObject({
      CDC_SINK_ID: 'warehouse',
      CDC_ARCHIVE_PREFIX: 'change-log/',
      POWERTOOLS_SERVICE_NAME: 'cdc-rebuild-worker',
    });
    expect(JSON.stringify(worker.Properties.Environment!.Variables.CDC_ARCHIVE_BUCKET)).toContain('LogArchive');
    const s = statementsOf(t, 'RebuildWorkerServiceRole');
    const all = s.flatMap(actionsOf);
    expect(all.filter((a) => /^s3:(Put|Delete)/.test(a))).toEqual([]);
    const gets = s.filter((x) => actionsOf(x).includes('s3:GetObject')).map((x) => JSON.stringify(x.Resource));
    // By default the by-table archive the change log's archive copier writes (docs/rebuild.md).
    expect(gets.some((r) => r.includes('LogArchive') && r.includes('/change-log/*'))).toBe(true);
    expect(gets.every((r) => r.includes('/change-log/*') || r.includes('/claims/*'))).toBe(true);
    const list = s.find((x) => actionsOf(x).includes('s3:ListBucket'))!;
    expect(list.Condition).toEqual({ StringLike: { 's3:prefix': ['change-log/*'] } });
    expect(all).toEqual(expect.arrayContaining(['kinesis:GetRecords', 'kinesis:GetShardIterator']));
    const update = s.find((x) => actionsOf(x).includes('dynamodb:UpdateItem'))!;
    expect((update.Condition as Record<string, Record<string, string[]>>)['ForAllValues:StringLike']!['dynamodb:LeadingKeys']).toEqual([
      'REBUILD#warehouse',
      'SINK#warehouse',
    ]);
  });

  test('the state machine loops the slice until done, retries a failed slice, records the rebuild failed when it gives up; logged and traced; an alarm on failed executions', () => {
    const f = fixture();
    const { t } = build(f);
    const [[, sm]] = resourcesOf(t, 'AWS::StepFunctions::StateMachine') as Array<[string, { Properties: Record<string, unknown> }]> as [
      [string, { Properties: Record<string, unknown> }],
    ];
    const definition = JSON.stringify(sm.Properties.DefinitionString);
    const text = definition.replace(/\\"/g, '"');
    expect(text).toContain('"StartAt":"Slice"');
    expect(text).toMatch(/"Slice":\{"Next":"Done\?"/);
    expect(text).toContain('{"ErrorEquals":["States.ALL"],"IntervalSeconds":30,"MaxAttempts":4');
    expect(text).toMatch(/"Catch":\[\{"ErrorEquals":\["States.ALL"\],"ResultPath":"\$.error","Next":"Abandon"\}\]/);
    expect(text).toMatch(/"Done\?":\{"Type":"Choice","Choices":\[\{"Variable":"\$.result.done","BooleanEquals":true,"Next":"Rebuilt"\}\],"Default":"Slice"\}/);
    expect(text).toMatch(/"Abandon":\{"Next":"Failed"/);
    expect(text).toContain('"op":"slice"');
    expect(text).toContain('"op":"abandon"');
    expect(sm.Properties.StateMachineType).toBe('STANDARD');
    expect(sm.Properties.TracingConfiguration).toEqual({ Enabled: true });
    expect((sm.Properties.LoggingConfiguration as { Level: string }).Level).toBe('ALL');
    const alarms = resourcesOf(t, 'AWS::CloudWatch::Alarm').filter(([id]) => id.startsWith('RebuildFailedAlarm'));
    expect(alarms).toHaveLength(1);
    expect(alarms[0]![1].Properties).toMatchObject({ MetricName: 'ExecutionsFailed', Namespace: 'AWS/States', Threshold: 0 });
  });

  test("archivePrefix: the archive copier's prefix by default, as given when set; without a copier Firehose's changes/ with a warning that every rebuild is refused", () => {
    const f = fixture();
    const { t } = build(f, { archivePrefix: 'mine/' });
    expect(fnById(t, 'RebuildWorker').Properties.Environment!.Variables.CDC_ARCHIVE_PREFIX).toBe('mine/');
    expect(Annotations.fromStack(f.stack).findWarning('*', Match.stringLikeRegexp('archive copier'))).toEqual([]);

    const app = newApp();
    const stack = new Stack(app, 'NoCopier');
    const vpc = new ec2.Vpc(stack, 'Vpc', { maxAzs: 2, natGateways: 1 });
    addApiEndpoints(vpc);
    const controlPlane = new ControlPlane(stack, 'Control');
    const log = new ChangeLog(stack, 'Log', { archiveCopierEnabled: false });
    const g = {
      ...f,
      app,
      stack,
      vpc,
      controlPlane,
      log,
      sourceSecret: secretsmanager.Secret.fromSecretNameV2(stack, 'SourceSecret', 'source'),
      heartbeatSecret: secretsmanager.Secret.fromSecretNameV2(stack, 'HeartbeatSecret', 'heartbeat'),
      warehouseSecret: secretsmanager.Secret.fromSecretNameV2(stack, 'WarehouseSecret', 'warehouse'),
    };
    const { t: without } = build(g);
    expect(fnById(without, 'RebuildWorker').Properties.Environment!.Variables.CDC_ARCHIVE_PREFIX).toBe('changes/');
    const warnings = Annotations.fromStack(stack).findWarning('/NoCopier/Rebuild', Match.stringLikeRegexp('no archive copier'));
    expect(warnings.map((w) => String(w.entry.data))).toEqual([expect.stringMatching(/every rebuild is refused HISTORY_INCOMPLETE/)]);
  });

  test('bad input is refused naming it: archivePrefix, sliceTimeout, a second rebuild of one sink', () => {
    expect(() => build(fixture(), { archivePrefix: 'changes' })).toThrow(/archivePrefix must be empty or end with '\/'/);
    expect(() => build(fixture(), { sliceTimeout: Duration.minutes(2) })).toThrow(/sliceTimeout must be between 5 and 15 minutes/);
    const f = fixture();
    const { sink } = build(f);
    expect(() => new WarehouseRebuild(f.stack, 'Again', { controlPlane: f.controlPlane, changeLog: f.log, sink, vpc: f.vpc })).toThrow(
      /sink warehouse already has a rebuild worker/,
    );
  });
});
