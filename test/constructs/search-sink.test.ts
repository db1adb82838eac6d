import { Duration } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as cloudwatchActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as opensearch from 'aws-cdk-lib/aws-opensearchservice';
import * as sns from 'aws-cdk-lib/aws-sns';
import { describe, expect, test } from 'vitest';
import { CapturedTable, DeleteMode, SearchSink, type SearchSinkProps } from '../../lib/index.ts';
import { fixture, ordersSource, resourcesOf, type Fixture } from './helpers.ts';

const ENDPOINT = 'https://vpc-search-abcdefghijklmnop.eu-west-1.es.amazonaws.com';

function sink(f: Fixture, overrides: Partial<SearchSinkProps> = {}): SearchSink {
  const orders = ordersSource(f);
  return new SearchSink(f.stack, 'Search', {
    controlPlane: f.controlPlane,
    changeLog: f.log,
    sources: [orders],
    domain: opensearch.Domain.fromDomainEndpoint(f.stack, 'Domain', ENDPOINT),
    ...overrides,
  });
}

describe('SearchSink', () => {
  test('its own event source mapping: partial batch failures, bisect, on-failure destination, retried without limit', () => {
    const f = fixture();
    const s = sink(f);
    const t = Template.fromStack(f.stack);
    const mapping = resourcesOf(t, 'AWS::Lambda::EventSourceMapping').find(([id]) => id.startsWith('SearchApplier'))![1];
    expect(mapping.Properties).toMatchObject({
      EventSourceArn: f.stack.resolve(f.log.stream.streamArn),
      FunctionResponseTypes: ['ReportBatchItemFailures'],
      BisectBatchOnFunctionError: true,
      MaximumRetryAttempts: -1,
      MaximumRecordAgeInSeconds: -1,
      StartingPosition: 'TRIM_HORIZON',
      BatchSize: 1000,
      ParallelizationFactor: 1,
      DestinationConfig: { OnFailure: { Destination: f.stack.resolve(s.deadLetterQueue.queueArn) } },
    });
    expect(s.sinkId).toBe('search');
  });

  test('environment: endpoint, served tables with their delete modes (capture default or override), prefix', () => {
    const f = fixture();
    sink(f, { tables: [{ table: 'public.customers' }, { table: 'public.orders', deletes: DeleteMode.HARD }], indexPrefix: 'idx' });
    const t = Template.fromStack(f.stack);
    const fn = resourcesOf(t, 'AWS::Lambda::Function').find(([id]) => id.startsWith('SearchApplier'))![1];
    const env = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(env.CDC_SEARCH_ENDPOINT).toBe('vpc-search-abcdefghijklmnop.eu-west-1.es.amazonaws.com');
    expect(JSON.parse(env.CDC_SEARCH_TABLES as string)).toEqual([
      { source: 'orders', table: 'public.customers', deleteMode: 'soft' },
      { source: 'orders', table: 'public.orders', deleteMode: 'hard' },
    ]);
    expect(env).toMatchObject({ CDC_SINK_ID: 'search', CDC_SEARCH_INDEX_PREFIX: 'idx' });
    expect(fn.Properties.VpcConfig).toBeUndefined();
  });

  test('least privilege: es:ESHttp* on the served tables’ index paths only (and the heartbeat’s), never the whole domain', () => {
    const f = fixture();
    const s = sink(f, { tables: [{ table: 'public.customers' }] });
    expect(s.indexPaths).toEqual(['cdc.orders.public.customers', 'cdc.orders.public.cdc_heartbeat']);
    const t = Template.fromStack(f.stack);
    const statements = Object.values(t.findResources('AWS::IAM::Policy'))
      .filter((p) => JSON.stringify(p.Properties.Roles).includes('SearchApplierServiceRole'))
      .flatMap((p) => p.Properties.PolicyDocument.Statement as Array<{ Action: string | string[]; Resource: unknown }>);
    const es = statements.filter((st) => JSON.stringify(st.Action).includes('es:'));
    expect(es).toHaveLength(1);
    expect(es[0]!.Action).toEqual(['es:ESHttpGet', 'es:ESHttpHead', 'es:ESHttpPost', 'es:ESHttpPut']);
    const resources = JSON.stringify(es[0]!.Resource);
    for (const p of [
      '/cdc.orders.public.customers"',
      '/cdc.orders.public.customers/*"',
      '/cdc.orders.public.customers.*"',
      '/cdc.orders.public.cdc_heartbeat.*"',
    ])
      expect(resources).toContain(p);
    expect(resources).not.toContain('public.orders');
    expect(resources).not.toMatch(/domain\/search-abcdefghijklmnop\/\*"|domain\/[^/"]+"/);
  });

  test('reads events stored out of line and keeps whole dead letters: the payload bucket in its environment, get on claims/ and put on its own dead-letters/ only', () => {
    const f = fixture();
    expect(f.controlPlane.payloadBucket).toBeDefined();
    const s = sink(f);
    const t = Template.fromStack(f.stack);
    const [, fn] = resourcesOf(t, 'AWS::Lambda::Function').find(([id]) => id.startsWith('SearchApplier'))!;
    const env = (fn.Properties.Environment as { Variables: Record<string, unknown> }).Variables;
    expect(env.CDC_PAYLOAD_BUCKET).toEqual(f.stack.resolve(f.controlPlane.payloadBucket!.bucketName));
    const statements = Object.values(t.findResources('AWS::IAM::Policy'))
      .filter((p) => JSON.stringify(p.Properties.Roles).includes('SearchApplierServiceRole'))
      .flatMap((p) => p.Properties.PolicyDocument.Statement as Array<{ Action: string | string[]; Resource: unknown }>);
    const s3 = statements.filter((st) => JSON.stringify(st.Action).includes('s3:'));
    expect(s3.map((st) => [st.Action, JSON.stringify(st.Resource).match(/"\/([^"]*)"/)?.[1]])).toEqual([
      ['s3:PutObject', `dead-letters/${s.sinkId}/*`],
      ['s3:GetObject', 'claims/*'],
    ]);
  });

  test('in a VPC: its own security group, connections on 443', () => {
    const f = fixture();
    const s = sink(f, { vpc: f.vpc });
    const t = Template.fromStack(f.stack);
    const fn = resourcesOf(t, 'AWS::Lambda::Function').find(([id]) => id.startsWith('SearchApplier'))![1];
    expect(fn.Properties.VpcConfig).toMatchObject({ SecurityGroupIds: [{ 'Fn::GetAtt': [expect.stringMatching(/^SearchSecurityGroup/), 'GroupId'] }] });
    expect(s.connections.defaultPort?.toString()).toBe('443');
  });

  test('alarms on by default with injected actions: lag vs freshness target per source (silence breaching), dead letters, errors, queue, iterator age', () => {
    const f = fixture();
    const topic = new sns.Topic(f.stack, 'Topic');
    const s = sink(f, { freshnessTarget: Duration.minutes(1), alarmActions: [new cloudwatchActions.SnsAction(topic)] });
    expect(s.alarms).toHaveLength(5);
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'EndToEndLag',
      Namespace: 'CdcPlatform',
      Dimensions: Match.arrayWith([
        { Name: 'Sink', Value: 'search' },
        { Name: 'Source', Value: 'orders' },
      ]),
      Threshold: 60_000,
      TreatMissingData: 'breaching',
      AlarmActions: [{ Ref: Match.stringLikeRegexp('^Topic') }],
      OKActions: [{ Ref: Match.stringLikeRegexp('^Topic') }],
    });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', { MetricName: 'DeadLetters', Dimensions: Match.arrayWith([{ Name: 'Stage', Value: 'search' }]) });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', { MetricName: 'ApplyErrors', Dimensions: [{ Name: 'Sink', Value: 'search' }] });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', { MetricName: 'IteratorAge', Namespace: 'AWS/Lambda' });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', { MetricName: 'ApproximateNumberOfMessagesVisible' });
    expect(f.stack.resolve(s.metricEventsApplied('orders').dimensions)).toEqual({ Sink: 'search', Source: 'orders' });
  });

  test('alarms can be switched off', () => {
    const f = fixture();
    expect(sink(f, { alarmsEnabled: false }).alarms).toEqual([]);
    expect(
      Template.fromStack(f.stack).findResources('AWS::CloudWatch::Alarm', {
        Properties: { MetricName: 'EndToEndLag', Dimensions: Match.arrayWith([{ Name: 'Sink', Value: 'search' }]) },
      }),
    ).toEqual({});
  });

  test('refuses, naming what is wrong: a table no source captures, two tables whose index names fold together, an empty source list, a too-small freshness target', () => {
    expect(() => sink(fixture(), { tables: [{ table: 'public.nope' }] })).toThrow(/public\.nope is not captured by any source/);
    expect(() => sink(fixture(), { freshnessTarget: Duration.seconds(10) })).toThrow(/freshnessTarget must be at least 30 seconds/);
    expect(() => sink(fixture(), { sources: [] })).toThrow(/sources must not be empty/);
    const f = fixture();
    // A mixed-case name is carried (docs/search.md, "Index names"); its lower-case twin beside it is refused by name.
    const upper = ordersSource(f, { tables: [CapturedTable.of('public.Customers')] }, 'Upper');
    expect(sink(f, { sources: [upper] }).indexPaths).toContain('cdc.upper.public.customers');
    const g = fixture();
    const twins = ordersSource(g, { tables: [CapturedTable.of('public.Customers'), CapturedTable.of('public.customers')] }, 'Twins');
    expect(() => sink(g, { sources: [twins] })).toThrow(/public\.customers cannot be indexed beside public\.Customers: index names are lower case/);
  });
});

describe('SearchSink resume replay', () => {
  test('the applier knows the change log and a schedule runs its resume replay every minute (as the warehouse sink)', () => {
    const f = fixture();
    const s = sink(f);
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::Lambda::Function', {
      Environment: { Variables: Match.objectLike({ CDC_SINK_ID: s.sinkId, CDC_CHANGE_LOG_STREAM: f.stack.resolve(f.log.stream.streamName) }) },
    });
    t.hasResourceProperties('AWS::Events::Rule', {
      ScheduleExpression: 'rate(1 minute)',
      Targets: [
        Match.objectLike({ Arn: f.stack.resolve(s.applier.functionArn), Input: JSON.stringify({ cdcReplay: true }), RetryPolicy: { MaximumRetryAttempts: 0 } }),
      ],
    });
    // The replay reads the change log from its trim horizon: the applier's role may read the stream.
    const policies = resourcesOf(t, 'AWS::IAM::Policy').map(([, p]) => JSON.stringify(p));
    expect(policies.some((p) => p.includes('kinesis:GetShardIterator') && p.includes('kinesis:GetRecords') && p.includes('kinesis:ListShards'))).toBe(true);
  });

  test('the applier is told how many batches of one shard run at once, as for the warehouse sink', () => {
    const f = fixture();
    sink(f, { parallelizationFactor: 3 });
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::Lambda::Function', { Environment: { Variables: Match.objectLike({ CDC_PARALLELIZATION_FACTOR: '3' }) } });
    expect(Annotations.fromStack(f.stack).findWarning('*', Match.stringLikeRegexp('parallelizationFactor'))).toEqual([]);
  });
});
