/**
 * The example app (`bin/example-app.ts`, what `cdk synth` runs): a Dev and a Prod stage and the
 * DMS service roles once per account, synthesized once with CDK's built-in CloudFormation
 * validation on; each stage's template is checked against the "done" list of the construct
 * library (alarms wired to the stage's topic, the dashboard's panels, what differs per
 * environment) and compared with its committed snapshot (asset hashes normalised).
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { App, Stack, Stage } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as sns from 'aws-cdk-lib/aws-sns';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { buildExampleApp, ENVIRONMENTS, type ExampleApp } from '../../bin/example-app.ts';
import { CdcSource, ChangeLog, PipelineDashboard } from '../../lib/index.ts';
import { parseJsonProperty, policyDocuments, resourcesOf } from './helpers.ts';

type TemplateJson = { Resources: Record<string, { Type: string; Properties: Record<string, unknown> }> };

let outdir: string;
let example: ExampleApp;
const synthesized = new Map<string, { json: TemplateJson; template: Template }>();

/** The synthesized template of a stack, from the cloud assembly its stage wrote. */
function templateOf(stack: Stack): { json: TemplateJson; template: Template } {
  const json = JSON.parse(fs.readFileSync(path.join(Stage.of(stack)!.outdir, stack.templateFile), 'utf8')) as TemplateJson;
  return { json, template: Template.fromJSON(json) };
}

beforeAll(() => {
  outdir = fs.mkdtempSync(path.join(os.tmpdir(), 'cdc-example-'));
  example = buildExampleApp(new App({ outdir }));
  example.app.synth();
  for (const [name, stage] of Object.entries(example.stages)) synthesized.set(name, templateOf(stage.pipeline));
});

afterAll(() => {
  fs.rmSync(outdir, { recursive: true, force: true });
});

/** Replaces what differs between machines or builds: asset hashes. */
function normalise(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value).replace(/[0-9a-f]{64}/g, '[ASSET-HASH]'));
}

/** Every `validation-report.json` under the cloud assembly (the app's and each stage's). */
function validationReports(dir: string): string[] {
  return fs
    .readdirSync(dir, { recursive: true, encoding: 'utf8' })
    .filter((f) => path.basename(f) === 'validation-report.json')
    .map((f) => path.join(dir, f));
}

test('CloudFormation validation reports nothing unacknowledged', () => {
  const reports = validationReports(outdir);
  expect(reports.length).toBeGreaterThan(0);
  for (const file of reports) {
    const report = JSON.parse(fs.readFileSync(file, 'utf8')) as { pluginReports: Array<{ pluginName: string; violations: unknown[] }> };
    for (const plugin of report.pluginReports) expect(plugin.violations, `${file} ${plugin.pluginName}`).toEqual([]);
  }
});

describe('the DMS service roles', () => {
  test('are a stack of their own, once per account, and in no stage', () => {
    expect(example.dmsServiceRoles.map((s) => s.stackName)).toEqual(['CdcDmsServiceRoles']);
    const roles = resourcesOf(templateOf(example.dmsServiceRoles[0]!).template, 'AWS::IAM::Role').map(([, r]) => r.Properties.RoleName);
    expect(roles.sort()).toEqual(['dms-cloudwatch-logs-role', 'dms-vpc-role']);
    for (const name of ['Dev', 'Prod']) {
      const names = resourcesOf(synthesized.get(name)!.template, 'AWS::IAM::Role').map(([, r]) => r.Properties.RoleName);
      expect(
        names.filter((n) => typeof n === 'string' && n.startsWith('dms-')),
        name,
      ).toEqual([]);
    }
  });

  test('one stack per distinct account when the stages name theirs, none with createDmsServiceRoles=false', () => {
    const split = buildExampleApp(new App({ context: { devAccount: '111111111111', prodAccount: '222222222222', prodRegion: 'eu-west-1' } }));
    expect(split.dmsServiceRoles.map((s) => [s.stackName, s.account])).toEqual([
      ['CdcDmsServiceRoles-111111111111', '111111111111'],
      ['CdcDmsServiceRoles-222222222222', '222222222222'],
    ]);
    const shared = buildExampleApp(new App({ context: { devAccount: '111111111111', prodAccount: '111111111111' } }));
    expect(shared.dmsServiceRoles).toHaveLength(1);
    expect(buildExampleApp(new App({ context: { createDmsServiceRoles: 'false' } })).dmsServiceRoles).toEqual([]);
  });
});

describe('what differs per environment', () => {
  test('retention, freshness targets, instance sizes and the NAT gateways follow the stage props (the archive: each stage’s own test below)', () => {
    for (const name of ['Dev', 'Prod'] as const) {
      const props = ENVIRONMENTS[name];
      const { template } = synthesized.get(name)!;
      const streams = resourcesOf(template, 'AWS::Kinesis::Stream');
      for (const [id, s] of streams) expect(s.Properties.RetentionPeriodHours, `${name} ${id}`).toBe(props.retention.toHours());
      for (const [id, i] of resourcesOf(template, 'AWS::DMS::ReplicationInstance')) {
        expect([i.Properties.ReplicationInstanceClass, i.Properties.MultiAZ], `${name} ${id}`).toEqual([props.replicationInstanceClass, props.multiAz]);
      }
      const lag = resourcesOf(template, 'AWS::CloudWatch::Alarm').filter(([, a]) => a.Properties.MetricName === 'EndToEndLag');
      expect(lag.map(([id, a]) => [id.startsWith('Search') ? 'search' : 'warehouse', a.Properties.Threshold]).sort(), name).toEqual(
        [
          ['search', props.searchFreshnessTarget.toMilliseconds()],
          ['warehouse', props.warehouseFreshnessTarget.toMilliseconds()],
          ['warehouse', props.warehouseFreshnessTarget.toMilliseconds()],
        ].sort(),
      );
      expect(resourcesOf(template, 'AWS::EC2::NatGateway'), name).toHaveLength(props.natGateways);
    }
    expect(ENVIRONMENTS.Dev.retention.toHours()).not.toBe(ENVIRONMENTS.Prod.retention.toHours());
    expect(ENVIRONMENTS.Dev.replicationInstanceClass).not.toBe(ENVIRONMENTS.Prod.replicationInstanceClass);
  });

  test('a prod alarm topic given by ARN is the one every prod alarm notifies', () => {
    const arn = 'arn:aws:sns:eu-west-1:222222222222:on-call';
    const { stages } = buildExampleApp(new App({ context: { prodAlarmTopicArn: arn, createDmsServiceRoles: 'false' } }));
    const template = Template.fromStack(stages.Prod.pipeline);
    expect(template.findResources('AWS::SNS::Topic')).toEqual({});
    const alarms = resourcesOf(template, 'AWS::CloudWatch::Alarm');
    expect(alarms.length).toBeGreaterThan(20);
    for (const [id, a] of alarms) expect([a.Properties.AlarmActions, a.Properties.OKActions], id).toEqual([[arn], [arn]]);
  });
});

describe.each(['Dev', 'Prod'] as const)('the %s stage', (name) => {
  let json: TemplateJson;
  let template: Template;
  let stack: Stack;
  let sources: CdcSource[];
  let log: ChangeLog;
  beforeAll(() => {
    ({ json, template } = synthesized.get(name)!);
    stack = example.stages[name].pipeline;
    sources = stack.node.findAll().filter((c): c is CdcSource => c instanceof CdcSource);
    log = stack.node.findAll().find((c): c is ChangeLog => c instanceof ChangeLog)!;
  });

  test('every alarm notifies the stage’s own topic on ALARM and OK', () => {
    const topic = example.stages[name].pipeline.alarmTopic as sns.Topic;
    const topicId = stack.getLogicalId(topic.node.defaultChild as sns.CfnTopic);
    const alarms = resourcesOf(template, 'AWS::CloudWatch::Alarm');
    expect(alarms.length).toBeGreaterThan(30);
    for (const [id, a] of alarms) {
      expect(a.Properties.AlarmActions, id).toEqual([{ Ref: topicId }]);
      expect(a.Properties.OKActions, id).toEqual([{ Ref: topicId }]);
    }
    // The other stage's topic is another resource in another stack.
    const other = example.stages[name === 'Dev' ? 'Prod' : 'Dev'].pipeline;
    expect(other.stackName).not.toBe(stack.stackName);
    expect(stack.stackName).toBe(`${name}-CdcExample`);
  });

  test('the dashboard shows every alarm of the stack and the panels of each sink, source and the reconciliation', () => {
    const dashboards = resourcesOf(template, 'AWS::CloudWatch::Dashboard');
    expect(dashboards).toHaveLength(1);
    const [, dashboard] = dashboards[0]!;
    expect(dashboard.Properties.DashboardName).toBe(`${name}-CdcExample-pipeline`);
    const parts = (dashboard.Properties.DashboardBody as { 'Fn::Join': [string, unknown[]] })['Fn::Join'][1];
    const body = JSON.parse(parts.map((p) => (typeof p === 'string' ? p : `<${(p as { 'Fn::GetAtt'?: string[] })['Fn::GetAtt']?.[0] ?? 'ref'}>`)).join('')) as {
      widgets: Array<{ type: string; properties: { title?: string; alarms?: string[]; annotations?: { horizontal: Array<{ value: number }> } } }>;
    };
    const alarmIds = resourcesOf(template, 'AWS::CloudWatch::Alarm').map(([id]) => `<${id}>`);
    expect(
      body.widgets
        .filter((w) => w.type === 'alarm')
        .flatMap((w) => w.properties.alarms!)
        .sort(),
    ).toEqual(alarmIds.sort());
    const titles = body.widgets.filter((w) => w.type === 'metric').map((w) => w.properties.title!);
    const expected = [
      ...['warehouse sink warehouse', 'search sink search'].flatMap((sink) => [
        `${sink}: end-to-end lag (ms)`,
        `${sink}: events applied per second`,
        `${sink}: applier iterator age (ms)`,
        `${sink}: dead letters and apply errors`,
      ]),
      'warehouse sink warehouse: merges (backlog)',
      ...['orders', 'billing'].flatMap((sourceId) => [
        `source ${sourceId}: slot WAL (bytes)`,
        `source ${sourceId}: DMS latency (s)`,
        `source ${sourceId}: normalizer iterator age (ms)`,
        `source ${sourceId}: snapshot rows done per table`,
        `source ${sourceId}: snapshot ETA per table (s)`,
      ]),
      'reconciliation verdicts: tables DIVERGED and INCONCLUSIVE',
      'reconciliation coverage: tables without a decided verdict in their tier period',
    ];
    expect(titles.sort()).toEqual(expected.sort());
    const annotation = (title: string) => body.widgets.find((w) => w.properties.title === title)!.properties.annotations!.horizontal.map((a) => a.value);
    expect(annotation('warehouse sink warehouse: end-to-end lag (ms)')).toEqual([ENVIRONMENTS[name].warehouseFreshnessTarget.toMilliseconds()]);
    expect(annotation('search sink search: end-to-end lag (ms)')).toEqual([ENVIRONMENTS[name].searchFreshnessTarget.toMilliseconds()]);
    expect(stack.node.findAll().filter((c) => c instanceof PipelineDashboard)).toHaveLength(1);
  });

  test('every masked column has a masking rule and every excluded column a remove-column rule', () => {
    expect(sources.map((s) => s.sourceId).sort()).toEqual(['billing', 'orders']);
    const tasks = resourcesOf(template, 'AWS::DMS::ReplicationTask');
    expect(tasks).toHaveLength(2);
    let masked = 0;
    let excluded = 0;
    for (const source of sources) {
      const [, task] = tasks.find(([id]) => id.startsWith(source.node.id))!;
      const rules = (parseJsonProperty(task.Properties.TableMappings) as { rules: Array<Record<string, unknown>> }).rules;
      const has = (action: string, schema: string, table: string, column: string): boolean =>
        rules.some(
          (r) =>
            r['rule-action'] === action &&
            JSON.stringify(r['object-locator']) === JSON.stringify({ 'schema-name': schema, 'table-name': table, 'column-name': column }),
        );
      for (const t of source.tables.filter((x) => x.pattern === undefined)) {
        for (const c of t.mask) {
          expect(has('data-masking-hash-mask', t.schemaName, t.tableName, c), `${source.sourceId} ${t.tableId}.${c} masked`).toBe(true);
          masked++;
        }
        for (const c of t.exclude) {
          expect(has('remove-column', t.schemaName, t.tableName, c), `${source.sourceId} ${t.tableId}.${c} removed`).toBe(true);
          excluded++;
        }
        expect(
          rules.some(
            (r) =>
              r['rule-type'] === 'selection' &&
              JSON.stringify(r['object-locator']) === JSON.stringify({ 'schema-name': t.schemaName, 'table-name': t.tableName }),
          ),
        ).toBe(true);
      }
      expect(rules.some((r) => r['rule-type'] === 'selection' && (r['object-locator'] as Record<string, string>)['table-name'] === 'cdc_heartbeat')).toBe(true);
    }
    // In prod the orders source captures the rest of its schema by pattern, with explicit
    // exclusions (docs/onboarding.md); in dev only the named tables.
    const [, orders] = tasks.find(([id]) => id.startsWith('Orders'))!;
    const selections = (parseJsonProperty(orders.Properties.TableMappings) as { rules: Array<Record<string, unknown>> }).rules.filter(
      (r) => r['rule-type'] === 'selection',
    );
    const pattern =
      name === 'Prod'
        ? [
            ['%', 'include'],
            ['audit[_]%', 'exclude'],
            ['schema[_]migrations', 'exclude'],
          ]
        : [];
    expect(selections.map((r) => [(r['object-locator'] as Record<string, string>)['table-name'], r['rule-action']])).toEqual([
      ['customers', 'include'],
      ['orders', 'include'],
      ['order_items', 'include'],
      ...pattern,
      ['cdc_heartbeat', 'include'],
    ]);
    expect(masked).toBe(3);
    expect(excluded).toBe(3);
    expect(sources.some((s) => s.tables.some((t) => t.deletes === 'hard'))).toBe(true);
  });

  test('every Kinesis stream is KMS-encrypted', () => {
    const streams = resourcesOf(template, 'AWS::Kinesis::Stream');
    expect(streams).toHaveLength(3);
    for (const [id, s] of streams) expect((s.Properties.StreamEncryption as { EncryptionType: string } | undefined)?.EncryptionType, id).toBe('KMS');
  });

  test('every log group is on a customer-managed key of the stack whose policy lets CloudWatch Logs of the region use it', () => {
    const keys = new Map(resourcesOf(template, 'AWS::KMS::Key'));
    const groups = resourcesOf(template, 'AWS::Logs::LogGroup');
    expect(groups.length).toBeGreaterThan(20);
    const keysUsed = new Set<string>();
    for (const [id, g] of groups) {
      const keyId = (g.Properties.KmsKeyId as { 'Fn::GetAtt'?: [string, string] } | undefined)?.['Fn::GetAtt'];
      expect(keyId?.[1], `${id} KmsKeyId`).toBe('Arn');
      const key = keys.get(keyId![0]);
      expect(key, `${id}: key ${keyId![0]} of this stack`).toBeDefined();
      expect(key!.Properties.EnableKeyRotation, keyId![0]).toBe(true);
      const statements = (key!.Properties.KeyPolicy as { Statement: Array<{ Sid?: string; Principal?: { Service?: unknown } }> }).Statement;
      const logs = statements.find((x) => x.Sid === 'AllowCloudWatchLogsOfThisAccount');
      expect(logs?.Principal?.Service, `${keyId![0]} lets CloudWatch Logs use it`).toEqual({
        'Fn::Join': ['', ['logs.', { Ref: 'AWS::Region' }, '.amazonaws.com']],
      });
      keysUsed.add(keyId![0]);
    }
    // The operator API's access log and functions on the control plane's key; the reconciler on each source's; the rebuild on the change log's.
    const keyOf = (prefix: string) =>
      new Set(groups.filter(([id]) => id.startsWith(prefix)).map(([, g]) => (g.Properties.KmsKeyId as { 'Fn::GetAtt': [string] })['Fn::GetAtt'][0]));
    expect([...keyOf('ControlOperatorApi')]).toEqual([expect.stringMatching(/^ControlKey/)]);
    expect([...keyOf('Reconciler')].sort()).toEqual([expect.stringMatching(/^BillingKey/), expect.stringMatching(/^OrdersKey/)]);
    expect([...keyOf('WarehouseRebuild')]).toEqual([expect.stringMatching(/^LogKey/)]);
    expect(keysUsed.size).toBeGreaterThanOrEqual(4);
  });

  test('every IAM role of the stage is a row of docs/deploy.md "Security: principals"', () => {
    // Logical-id pattern of each kind of role → the first cell of its row in the table.
    const rows: Array<[RegExp, string]> = [
      [/^(Orders|Billing)NormalizerServiceRole/, 'normalizer role, per source'],
      [/^(Orders|Billing)TaskLifecycleServiceRole/, 'task lifecycle role, per source'],
      [/^(Orders|Billing)HeartbeatWriterServiceRole/, 'heartbeat writer role, per source'],
      [/^(Orders|Billing)SlotMonitorFunctionServiceRole/, 'slot monitor role, per source'],
      [/^(Orders|Billing)SnapshotWorkerServiceRole/, 'snapshot worker role, per source'],
      [/^(Orders|Billing)PollWorkerServiceRole/, 'poll worker role, per polled source'],
      [/^(Orders|Billing)DmsTargetRole/, 'DMS target role, per source'],
      [/^(Orders|Billing)DmsSecretsRole/, 'DMS secrets role, per source'],
      [/^(Warehouse|Search)ApplierServiceRole/, 'applier role, per sink'],
      [/^LogArchiveDelivery(Service)?Role/, 'archive delivery roles'],
      [/^LogArchiveCopierServiceRole/, 'archive copier role'],
      [/^ReconcilerFunction\w+ServiceRole/, 'reconciler role, per source and sink'],
      [/^WarehouseRebuildWorkerServiceRole/, 'rebuild worker role, per warehouse sink'],
      [/^WarehouseRebuildStateMachineRole/, 'rebuild state machine role, per warehouse sink'],
      [/^ControlOperatorApiStatusServiceRole/, 'status function role'],
      [/^ControlOperatorApiOperatorServiceRole/, 'operator function role'],
      [/^ControlOperatorApiCloudWatchRole/, 'API Gateway CloudWatch role'],
      [/^VpcallIAMRole/, 'VPC flow-log role'],
    ];
    const doc = fs.readFileSync(new URL('../../docs/deploy.md', import.meta.url), 'utf8');
    const section = doc.slice(doc.indexOf('### Security: principals'), doc.indexOf('### Security: operators'));
    for (const [, label] of rows) expect(section, label).toContain(`| ${label} (`);
    const roles = resourcesOf(template, 'AWS::IAM::Role');
    expect(roles.length).toBeGreaterThan(20);
    for (const [id] of roles) expect(rows.filter(([re]) => re.test(id)).length, `${id} has one row`).toBe(1);
  });

  test('Firehose delivers to an S3 bucket whose lifecycle expires at archiveRetention', () => {
    const [, delivery] = resourcesOf(template, 'AWS::KinesisFirehose::DeliveryStream')[0]!;
    const bucketArn = (delivery.Properties.ExtendedS3DestinationConfiguration as { BucketARN: { 'Fn::GetAtt': [string, string] } }).BucketARN;
    const bucket = json.Resources[bucketArn['Fn::GetAtt'][0]]!;
    expect(bucket.Type).toBe('AWS::S3::Bucket');
    const rules = (bucket.Properties.LifecycleConfiguration as { Rules: Array<{ ExpirationInDays?: number; Status: string }> }).Rules;
    expect(rules.filter((r) => r.ExpirationInDays !== undefined).map((r) => r.ExpirationInDays)).toEqual([log.archiveRetention.toDays()]);
    expect(log.archiveRetention.toDays()).toBe(ENVIRONMENTS[name].archiveRetention.toDays());
  });

  test('DynamoDB has point-in-time recovery', () => {
    const tables = resourcesOf(template, 'AWS::DynamoDB::Table');
    expect(tables).toHaveLength(1);
    expect(tables[0]![1].Properties.PointInTimeRecoverySpecification).toEqual({ PointInTimeRecoveryEnabled: true });
  });

  test('every event source mapping reports batch item failures, bisects and has an on-failure destination', () => {
    const mappings = resourcesOf(template, 'AWS::Lambda::EventSourceMapping');
    // Two normalizers, the warehouse applier, the search applier and the change log's archive copier.
    expect(mappings).toHaveLength(5);
    expect(mappings.filter(([id]) => id.startsWith('LogArchiveCopier'))).toHaveLength(1);
    expect(mappings.filter(([id]) => id.startsWith('SearchApplier'))).toHaveLength(1);
    for (const [id, m] of mappings) {
      expect(m.Properties.FunctionResponseTypes, id).toEqual(['ReportBatchItemFailures']);
      expect(m.Properties.BisectBatchOnFunctionError, id).toBe(true);
      expect((m.Properties.DestinationConfig as { OnFailure?: { Destination?: unknown } } | undefined)?.OnFailure?.Destination, id).toBeDefined();
      // Outages delay, they never skip: no retry or record-age limit on any mapping.
      expect(m.Properties.MaximumRetryAttempts, id).toBe(-1);
      expect(m.Properties.MaximumRecordAgeInSeconds, id).toBe(-1);
    }
  });

  test('the search sink: its applier, its own mapping on the change log, and its alarms', () => {
    const fn = resourcesOf(template, 'AWS::Lambda::Function').filter(([id]) => id.startsWith('SearchApplier'));
    expect(fn).toHaveLength(1);
    const [, mapping] = resourcesOf(template, 'AWS::Lambda::EventSourceMapping').find(([id]) => id.startsWith('SearchApplier'))!;
    expect(mapping.Properties.FunctionName).toEqual({ Ref: fn[0]![0] });
    const searchAlarms = resourcesOf(template, 'AWS::CloudWatch::Alarm').filter(([id]) => id.startsWith('Search'));
    expect(searchAlarms.map(([, a]) => a.Properties.MetricName).sort()).toEqual([
      'ApplyErrors',
      'ApproximateNumberOfMessagesVisible',
      'DeadLetters',
      'EndToEndLag',
      'IteratorAge',
    ]);
  });

  test('alarms of the four required kinds exist: end-to-end lag, dead letters and apply errors, iterator age, DMS CDC latency', () => {
    const kinds = new Set(resourcesOf(template, 'AWS::CloudWatch::Alarm').map(([, a]) => `${a.Properties.Namespace}/${a.Properties.MetricName}`));
    for (const kind of [
      'CdcPlatform/EndToEndLag',
      'CdcPlatform/DeadLetters',
      'CdcPlatform/ApplyErrors',
      'AWS/Lambda/IteratorAge',
      'AWS/DMS/CDCLatencySource',
      'AWS/DMS/CDCLatencyTarget',
    ]) {
      expect(kinds, kind).toContain(kind);
    }
  });

  test('no policy statement allows the action "*"', () => {
    const docs = policyDocuments(template);
    expect(docs.length).toBeGreaterThan(20);
    for (const { where, doc } of docs) {
      for (const statement of doc.Statement) {
        const actions = ([] as unknown[]).concat(statement.Action ?? [], statement.NotAction ?? []);
        expect(actions, `${where}: ${JSON.stringify(statement).slice(0, 200)}`).not.toContain('*');
        expect(statement.NotAction, where).toBeUndefined();
      }
    }
  });

  test('matches the committed snapshot (asset hashes normalised)', async () => {
    await expect(`${JSON.stringify(normalise(json), null, 1)}\n`).toMatchFileSnapshot(`./__snapshots__/example-app.${name.toLowerCase()}.template.json`);
  });
});

test('the DMS service roles stack matches the committed snapshot', async () => {
  const { json } = templateOf(example.dmsServiceRoles[0]!);
  await expect(`${JSON.stringify(normalise(json), null, 1)}\n`).toMatchFileSnapshot('./__snapshots__/example-app.dms-service-roles.template.json');
});
