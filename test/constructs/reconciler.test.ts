import { Duration, Resource } from 'aws-cdk-lib';
import { Template } from 'aws-cdk-lib/assertions';
import * as cloudwatchActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as sns from 'aws-cdk-lib/aws-sns';
import { Validations } from 'aws-cdk-lib';
import { AwsSolutionsChecks } from 'cdk-nag';
import { describe, expect, test } from 'vitest';
import * as opensearch from 'aws-cdk-lib/aws-opensearchservice';
import {
  Reconciler,
  SearchSink,
  WarehouseConnection,
  WarehouseSink,
  type IReconcilableSource,
  type IReconciledSink,
  type ReconcilerProps,
} from '../../lib/index.ts';
import { fixture, ordersSource, parseJsonProperty, policyDocuments, resourcesOf, type Fixture, WAREHOUSE_PEER } from './helpers.ts';

function build(f: Fixture, overrides: Partial<ReconcilerProps> = {}, warehouseSg?: ec2.ISecurityGroup) {
  const orders = ordersSource(f);
  const warehouse = new WarehouseSink(f.stack, 'Warehouse', {
    controlPlane: f.controlPlane,
    changeLog: f.log,
    sources: [orders],
    vpc: f.vpc,
    connection: WarehouseConnection.postgres({
      secret: f.warehouseSecret,
      ...(warehouseSg ? { securityGroup: warehouseSg, port: 5439 } : { peer: WAREHOUSE_PEER }),
    }),
    freshnessTarget: Duration.minutes(2),
  });
  const r = new Reconciler(f.stack, 'Reconciler', { controlPlane: f.controlPlane, sources: [orders], sinks: [warehouse], vpc: f.vpc, ...overrides });
  return { orders, warehouse, r, t: Template.fromStack(f.stack) };
}

const reconcilerFunctions = (t: Template) => resourcesOf(t, 'AWS::Lambda::Function').filter(([id]) => id.startsWith('ReconcilerFunction'));

describe('Reconciler', () => {
  test('one function per source and sink in the VPC, configured with the source tables, the sink, the tiers and the settle time', () => {
    const f = fixture();
    const { t } = build(f, { rowsPerRun: 5000 });
    const fns = reconcilerFunctions(t);
    expect(fns).toHaveLength(1);
    const fn = fns[0]![1];
    expect(fn.Properties.VpcConfig).toBeDefined();
    const env = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(env).toMatchObject({
      CDC_SOURCE_ID: 'orders',
      CDC_SINK_ID: 'warehouse',
      CDC_RECONCILE_ROWS_PER_RUN: '5000',
      CDC_RECONCILE_SETTLE_MS: '120000',
      POWERTOOLS_SERVICE_NAME: 'cdc-reconciler',
    });
    expect(JSON.parse(env.CDC_RECONCILE_TIERS as string)).toEqual([{ name: 'default', periodMs: 86_400_000, tables: ['*'] }]);
    const tables = JSON.parse(env.CDC_TABLE_CONFIG as string) as Array<{ table: string; mask: string[]; exclude: string[] }>;
    expect(tables.find((x) => x.table === 'public.customers')).toMatchObject({ mask: ['email'], exclude: ['ssn'] });
  });

  test('a schedule per tier, each invoking the function with its tier', () => {
    const f = fixture();
    const { t } = build(f, {
      tiers: [
        { name: 'hot', every: Duration.hours(1), tables: ['public.orders'] },
        { name: 'rest', every: Duration.days(1) },
      ],
    });
    const rules = resourcesOf(t, 'AWS::Events::Rule').filter(([id]) => id.startsWith('ReconcilerSchedule'));
    expect(rules.map(([, r]) => r.Properties.ScheduleExpression).sort()).toEqual(['rate(1 day)', 'rate(1 hour)']);
    const inputs = rules
      .map(([, r]) => JSON.parse((r.Properties.Targets as Array<{ Input: string }>)[0]!.Input))
      .map((i) => i.tier)
      .sort();
    expect(inputs).toEqual(['hot', 'rest']);
  });

  test('alarms on divergence and on coverage per sink, on by default, with the injected actions', () => {
    const f = fixture();
    const topic = new sns.Topic(f.stack, 'Topic');
    const { r, t } = build(f, { alarmActions: [new cloudwatchActions.SnsAction(topic)], tiers: [{ name: 'hot', every: Duration.hours(1) }] });
    expect(r.alarms).toHaveLength(2);
    const alarms = resourcesOf(t, 'AWS::CloudWatch::Alarm').filter(([id]) => id.startsWith('Reconciler'));
    const byMetric = Object.fromEntries(alarms.map(([, a]) => [a.Properties.MetricName, a.Properties]));
    expect(byMetric.ReconcileDivergedTables).toMatchObject({
      Threshold: 0,
      ComparisonOperator: 'GreaterThanThreshold',
      TreatMissingData: 'notBreaching',
      Dimensions: [{ Name: 'Sink', Value: 'warehouse' }],
      Period: 3600,
    });
    expect(byMetric.ReconcileCoverageGaps).toMatchObject({ Threshold: 0, TreatMissingData: 'breaching', Period: 3600, Namespace: 'CdcPlatform' });
    for (const a of alarms) expect(a[1].Properties.AlarmActions).toEqual([f.stack.resolve(topic.topicArn)]);
    const off = fixture();
    expect(build(off, { alarmsEnabled: false }).r.alarms).toEqual([]);
  });

  test('least privilege: its verdict partition to write; table states, sink progress and verdicts to read; both secrets', () => {
    const f = fixture();
    const { t } = build(f);
    const docs = policyDocuments(t).filter((d) => d.where.startsWith('ReconcilerFunction'));
    const text = JSON.stringify(docs);
    expect(text).toContain('VERDICT#warehouse');
    expect(text).toContain('SOURCE#orders');
    expect(text).toContain('SINK#warehouse');
    const writes = docs.flatMap((d) => d.doc.Statement).filter((s) => JSON.stringify(s.Action).includes('dynamodb:PutItem'));
    expect(JSON.stringify(writes)).not.toContain('SOURCE#orders');
    expect(text).not.toMatch(/"dynamodb:\*"/);
    expect(text).toContain('secretsmanager:GetSecretValue');
  });

  test('admits itself on the warehouse port when the connection names a security group', () => {
    const f = fixture();
    const sg = new ec2.SecurityGroup(f.stack, 'WarehouseSg', { vpc: f.vpc });
    const { t } = build(f, {}, sg);
    const ingress = resourcesOf(t, 'AWS::EC2::SecurityGroupIngress').filter(([id]) => id.startsWith('Reconciler'));
    expect(ingress.map(([, i]) => [i.Properties.FromPort, i.Properties.Description])).toEqual([[5439, 'Reconciler orders-warehouse: warehouse warehouse']]);
  });

  /** The warehouse fixture plus a search sink of the orders source that indexes two tables. */
  function buildWithSearch(f: Fixture, overrides: Partial<ReconcilerProps> = {}) {
    const orders = ordersSource(f);
    const search = new SearchSink(f.stack, 'Search', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [orders],
      vpc: f.vpc,
      domain: opensearch.Domain.fromDomainEndpoint(f.stack, 'Domain', 'https://vpc-s-abcdefghijklmnop.eu-west-1.es.amazonaws.com'),
      tables: [{ table: 'public.customers' }],
    });
    const r = new Reconciler(f.stack, 'Reconciler', { controlPlane: f.controlPlane, sources: [orders], sinks: [search], vpc: f.vpc, ...overrides });
    return { search, r, t: Template.fromStack(f.stack) };
  }

  test('a search sink: its function reads the index (endpoint and prefix), no warehouse secret, alarms per sink', () => {
    const f = fixture();
    const { r, t } = buildWithSearch(f);
    const fns = reconcilerFunctions(t);
    expect(fns).toHaveLength(1);
    const env = (fns[0]![1].Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(env).toMatchObject({
      CDC_SOURCE_ID: 'orders',
      CDC_SINK_ID: 'search',
      CDC_SEARCH_ENDPOINT: 'vpc-s-abcdefghijklmnop.eu-west-1.es.amazonaws.com',
      CDC_SEARCH_INDEX_PREFIX: 'cdc',
      CDC_RECONCILE_SETTLE_MS: '300000',
    });
    expect(env.CDC_WAREHOUSE_SECRET_ARN).toBeUndefined();
    expect(Object.keys(r.functions)).toEqual(['orders/search']);
    const alarms = resourcesOf(t, 'AWS::CloudWatch::Alarm').filter(([id]) => id.startsWith('Reconciler'));
    expect(alarms.map(([, a]) => [a.Properties.MetricName, (a.Properties.Dimensions as Array<{ Value: string }>)[0]!.Value]).sort()).toEqual([
      ['ReconcileCoverageGaps', 'search'],
      ['ReconcileDivergedTables', 'search'],
    ]);
  });

  test("a search sink: es:ESHttpGet and es:ESHttpPost only, on the source's index paths only (its tables and its heartbeat table)", () => {
    const f = fixture();
    const { t } = buildWithSearch(f);
    const statements = policyDocuments(t)
      .filter((d) => d.where.startsWith('ReconcilerFunction'))
      .flatMap((d) => d.doc.Statement)
      .filter((st) => JSON.stringify(st.Action).includes('es:'));
    expect(statements).toHaveLength(1);
    expect(statements[0]!.Action).toEqual(['es:ESHttpGet', 'es:ESHttpPost']);
    const resources = JSON.stringify(statements[0]!.Resource);
    for (const p of ['cdc.orders.public.customers', 'cdc.orders.public.cdc_heartbeat'])
      for (const suffix of ['"', '/*"', '.*"']) expect(resources).toContain(`/${p}${suffix}`);
    expect(resources).not.toContain('cdc.orders.public.orders');
    const secrets = JSON.stringify(policyDocuments(t).filter((d) => d.where.startsWith('ReconcilerFunction')));
    expect(secrets).not.toContain('WarehouseSecret');
  });

  test('a search sink: cdk-nag AwsSolutions has no unacknowledged findings', () => {
    const f = fixture();
    buildWithSearch(f);
    Validations.of(f.vpc).acknowledge({ id: 'AwsSolutions-VPC7', reason: 'test fixture vpc; flow logs are the application’s choice' });
    const report = new AwsSolutionsChecks(f.app).validateScope(f.stack);
    expect(report.violations.map((v) => `${v.severity} ${v.ruleName}: ${v.violatingResources.map((r) => r.constructPath).join(', ')}`)).toEqual([]);
  });

  test('refuses a sink that serves none of its sources', () => {
    const f = fixture();
    const orders = ordersSource(f);
    const search = new SearchSink(f.stack, 'Search', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [orders],
      domain: opensearch.Domain.fromDomainEndpoint(f.stack, 'Domain', 'https://search-s-abcdefghijklmnop.eu-west-1.es.amazonaws.com'),
    });
    const other = ordersSource(f, { sourceId: 'billing' }, 'Billing');
    expect(() => new Reconciler(f.stack, 'Reconciler', { controlPlane: f.controlPlane, sources: [other], sinks: [search], vpc: f.vpc })).toThrow(
      /sink search serves none of the sources \(billing\); it serves orders/,
    );
  });

  test('takes its sources and sinks through interfaces; fails on a sink that is neither a warehouse nor a search sink', () => {
    const f = fixture();
    const orders = ordersSource(f);
    const source: IReconcilableSource = orders;
    class OddSink extends Resource implements IReconciledSink {
      readonly sinkId = 'odd';
      readonly freshnessTarget = Duration.minutes(5);
      readonly sourceIds = ['orders'];
    }
    const sink: IReconciledSink = new OddSink(f.stack, 'Odd');
    expect(() => new Reconciler(f.stack, 'Reconciler', { controlPlane: f.controlPlane, sources: [source], sinks: [sink], vpc: f.vpc })).toThrow(
      /Test\/Reconciler: sink odd is neither a warehouse sink \(warehouseConnection\) nor a search sink \(searchIndex\)/,
    );
  });

  test('refuses bad props by name', () => {
    expect(() => build(fixture(), { tiers: [{ name: 'hot', every: Duration.minutes(1) }] })).toThrow(/tier hot: every must be between 5 minutes and 7 days/);
    expect(() =>
      build(fixture(), {
        tiers: [
          { name: 'a', every: Duration.hours(1) },
          { name: 'b', every: Duration.hours(2) },
        ],
      }),
    ).toThrow(/only one tier may take the remaining tables/);
    expect(() => build(fixture(), { tiers: [] })).toThrow(/tiers must not be empty/);
  });

  test('cdk-nag AwsSolutions: no unacknowledged findings at its defaults', () => {
    const f = fixture();
    build(f);
    Validations.of(f.vpc).acknowledge({ id: 'AwsSolutions-VPC7', reason: 'test fixture vpc; flow logs are the application’s choice' });
    const report = new AwsSolutionsChecks(f.app).validateScope(f.stack);
    expect(report.violations.map((v) => `${v.severity} ${v.ruleName}: ${v.violatingResources.map((r) => r.constructPath).join(', ')}`)).toEqual([]);
  });

  test('the template asks for its tiers as JSON the handler parses', async () => {
    const { parseTiers } = await import('../../lambda/runtime/environment.ts');
    const f = fixture();
    const { t } = build(f, { tiers: [{ name: 'hot', every: Duration.hours(1), tables: ['public.orders'] }] });
    const env = (reconcilerFunctions(t)[0]![1].Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(parseTiers(env.CDC_RECONCILE_TIERS as string)).toEqual([{ name: 'hot', periodMs: 3_600_000, tables: ['public.orders'] }]);
    expect(() => parseTiers('[{"name":"x","periodMs":0,"tables":["*"]}]')).toThrow(/CDC_RECONCILE_TIERS\[0\]\.periodMs/);
    void parseJsonProperty;
  });
});
