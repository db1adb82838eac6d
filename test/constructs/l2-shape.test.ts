/**
 * The L2 shape of the public constructs (like aws-cdk-lib's own, e.g. aws-kinesis Stream):
 * `IResource` interfaces with `from…Attributes` importers that take their account and region from
 * the ARN, change logs compared by ARN rather than object identity, metrics keyed by an
 * `ICdcSource`, duration checks that let tokens through, and clear errors for JavaScript callers
 * that leave out a required prop.
 */
import { CfnParameter, Duration, Stack, Token } from 'aws-cdk-lib';
import { Match, Template } from 'aws-cdk-lib/assertions';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as secretsmanager from 'aws-cdk-lib/aws-secretsmanager';
import { describe, expect, test } from 'vitest';
import {
  CapturedTable,
  CdcSource,
  ChangeLog,
  ControlPlane,
  SourceDatabase,
  WarehouseConnection,
  WarehouseSink,
  type CdcSourceProps,
  type WarehouseSinkProps,
} from '../../lib/index.ts';
import { addApiEndpoints, DATABASE_PEER, fixture, newApp, ordersSource, WAREHOUSE_PEER } from './helpers.ts';

const LOG_ARN = 'arn:aws:kinesis:eu-central-1:222222222222:stream/cdc-change-log';
const TABLE_ARN = 'arn:aws:dynamodb:eu-central-1:222222222222:table/cdc-control';

describe('importers', () => {
  test('an imported change log and control plane have the account and region of their ARN', () => {
    const stack = new Stack(newApp(), 'Consumer', { env: { account: '111111111111', region: 'us-east-1' } });
    const log = ChangeLog.fromChangeLogAttributes(stack, 'Log', { streamArn: LOG_ARN, retention: Duration.days(7) });
    const controlPlane = ControlPlane.fromControlPlaneAttributes(stack, 'Control', { tableArn: TABLE_ARN });
    expect(log.env).toEqual({ account: '222222222222', region: 'eu-central-1' });
    expect(controlPlane.env).toEqual({ account: '222222222222', region: 'eu-central-1' });
    expect(log.changeLogStreamArn).toBe(LOG_ARN);
    expect(controlPlane.controlPlaneTableArn).toBe(TABLE_ARN);
  });

  test('a sink in another stack mirrors an imported source through an imported change log with the same ARN', () => {
    const app = newApp();
    const stack = new Stack(app, 'Sinks', { env: { account: '222222222222', region: 'eu-central-1' } });
    const log = ChangeLog.fromChangeLogAttributes(stack, 'Log', { streamArn: LOG_ARN, retention: Duration.days(7) });
    const sameLogAgain = ChangeLog.fromChangeLogAttributes(stack, 'LogAgain', { streamArn: LOG_ARN, retention: Duration.days(7) });
    const controlPlane = ControlPlane.fromControlPlaneAttributes(stack, 'Control', { tableArn: TABLE_ARN });
    const source = CdcSource.fromCdcSourceAttributes(stack, 'Orders', {
      sourceId: 'orders',
      changeLog: sameLogAgain,
      tables: [CapturedTable.of('public.orders')],
      replicationTaskArn: 'arn:aws:dms:eu-central-1:333333333333:task:ABCDEFG',
    });
    expect(source.env).toEqual({ account: '333333333333', region: 'eu-central-1' });
    expect(source.heartbeatSchema).toBe('public');
    const vpc = new ec2.Vpc(stack, 'Vpc', { maxAzs: 2, natGateways: 1 });
    addApiEndpoints(vpc);
    const sink = new WarehouseSink(stack, 'Warehouse', {
      controlPlane: controlPlane,
      changeLog: log,
      sources: [source],
      vpc,
      connection: WarehouseConnection.postgres({ secret: secretsmanager.Secret.fromSecretNameV2(stack, 'Secret', 'warehouse'), peer: WAREHOUSE_PEER }),
    });
    const t = Template.fromStack(stack);
    t.hasResourceProperties('AWS::Lambda::EventSourceMapping', { EventSourceArn: LOG_ARN });
    t.hasResourceProperties('AWS::CloudWatch::Alarm', {
      MetricName: 'EndToEndLag',
      Dimensions: Match.arrayWith([
        { Name: 'Sink', Value: 'warehouse' },
        { Name: 'Source', Value: 'orders' },
      ]),
    });
    expect(sink.sources).toEqual([source]);
  });

  test('a source imported with a different change log ARN is refused by the sink', () => {
    const f = fixture();
    const a = ChangeLog.fromChangeLogAttributes(f.stack, 'A', { streamArn: LOG_ARN, retention: Duration.days(7) });
    const b = ChangeLog.fromChangeLogAttributes(f.stack, 'B', { streamArn: `${LOG_ARN}-other`, retention: Duration.days(7) });
    const source = CdcSource.fromCdcSourceAttributes(f.stack, 'Imported', { sourceId: 'imported', changeLog: b, tables: [CapturedTable.of('public.t')] });
    expect(
      () =>
        new WarehouseSink(f.stack, 'Warehouse', {
          controlPlane: f.controlPlane,
          changeLog: a,
          sources: [source],
          vpc: f.vpc,
          connection: WarehouseConnection.postgres({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
        }),
    ).toThrow(/^Test\/Warehouse: source imported \(Test\/Imported\) publishes to a different change log than this sink reads$/);
  });

  test('importers check what they are given', () => {
    const f = fixture();
    expect(() =>
      CdcSource.fromCdcSourceAttributes(f.stack, 'Bad', { sourceId: 'Not-An-Id', changeLog: f.log, tables: [CapturedTable.of('public.t')] }),
    ).toThrow(/^Test\/Bad: sourceId must match .* got "Not-An-Id"$/);
    expect(() => CdcSource.fromCdcSourceAttributes(f.stack, 'NoTables', { sourceId: 'x', changeLog: f.log, tables: [] })).toThrow(
      /^Test\/NoTables: tables must not be empty/,
    );
    expect(() => WarehouseSink.fromWarehouseSinkAttributes(f.stack, 'NoId', {} as never)).toThrow(
      /^Test\/NoId: WarehouseSink\.fromWarehouseSinkAttributes needs `sinkId`; it is required$/,
    );
  });
});

describe('metrics take an ICdcSource', () => {
  test('metricEndToEndLag of a sink, created or imported, names the sink and the source', () => {
    const f = fixture();
    const orders = ordersSource(f);
    const sink = new WarehouseSink(f.stack, 'Warehouse', {
      controlPlane: f.controlPlane,
      changeLog: f.log,
      sources: [orders],
      vpc: f.vpc,
      connection: WarehouseConnection.postgres({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
    });
    const imported = WarehouseSink.fromWarehouseSinkAttributes(f.stack, 'Remote', {
      sinkId: 'remote_dw',
      applierFunctionArn: 'arn:aws:lambda:eu-west-1:444444444444:function:applier',
    });
    expect(f.stack.resolve(sink.metricEndToEndLag(orders).dimensions)).toEqual({ Sink: 'warehouse', Source: 'orders' });
    const remote = imported.metricEndToEndLag(orders);
    expect(remote.dimensions).toEqual({ Sink: 'remote_dw', Source: 'orders' });
    expect(remote.statistic).toBe('Maximum');
    expect(imported.env).toEqual({ account: '444444444444', region: 'eu-west-1' });
    expect(sink.metricDeadLetters(orders).dimensions).toEqual({ Stage: 'warehouse', Source: 'orders' });
    expect(sink.metricEventsApplied(orders).dimensions).toEqual({ Sink: 'warehouse', Source: 'orders' });
  });
});

describe('durations that are tokens', () => {
  test('a change log whose retention is a parameter and a sink whose freshness target is one synthesize', () => {
    const f = fixture();
    const hours = new CfnParameter(f.stack, 'RetentionHours', { type: 'Number', default: 168 });
    const freshnessMs = new CfnParameter(f.stack, 'FreshnessMs', { type: 'Number', default: 60_000 });
    const log = new ChangeLog(f.stack, 'TokenLog', {
      retention: Duration.hours(hours.valueAsNumber),
      archiveBufferingInterval: Duration.seconds(Token.asNumber(hours.valueAsNumber)),
    });
    const orders = ordersSource(f, { changeLog: log, rawStreamRetention: Duration.days(2) } as Partial<CdcSourceProps>);
    new WarehouseSink(f.stack, 'Warehouse', {
      controlPlane: f.controlPlane,
      changeLog: log,
      sources: [orders],
      vpc: f.vpc,
      connection: WarehouseConnection.postgres({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
      freshnessTarget: Duration.millis(freshnessMs.valueAsNumber),
      maxRecordAge: Duration.hours(12),
    });
    const t = Template.fromStack(f.stack);
    t.hasResourceProperties('AWS::CloudWatch::Alarm', { MetricName: 'EndToEndLag', Threshold: { Ref: 'FreshnessMs' } });
  });

  test('an iterator-age threshold that cannot be derived from a token retention is asked for by name', () => {
    const f = fixture();
    const hours = new CfnParameter(f.stack, 'RetentionHours', { type: 'Number', default: 168 });
    const log = new ChangeLog(f.stack, 'TokenLog', { retention: Duration.hours(hours.valueAsNumber) });
    const orders = ordersSource(f, { changeLog: log, rawStreamRetention: Duration.days(2) } as Partial<CdcSourceProps>);
    expect(
      () =>
        new WarehouseSink(f.stack, 'Warehouse', {
          controlPlane: f.controlPlane,
          changeLog: log,
          sources: [orders],
          vpc: f.vpc,
          connection: WarehouseConnection.postgres({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
        }),
    ).toThrow(/^Test\/Warehouse: alarmIteratorAgeThreshold is required when the change-log retention is a token/);
  });
});

describe('JavaScript callers that leave out a required prop get a clear error', () => {
  test('constructs name every missing prop', () => {
    const f = fixture();
    expect(() => new CdcSource(f.stack, 'NoProps', undefined as unknown as CdcSourceProps)).toThrow(
      /^Test\/NoProps: CdcSource props are required \(controlPlane, changeLog, vpc, database, tables\)$/,
    );
    expect(() => new CdcSource(f.stack, 'Partial', { controlPlane: f.controlPlane, vpc: f.vpc } as unknown as CdcSourceProps)).toThrow(
      /^Test\/Partial: CdcSource needs `changeLog`, `database`, `tables`; they are required$/,
    );
    expect(
      () =>
        new WarehouseSink(f.stack, 'Sink', {
          controlPlane: f.controlPlane,
          changeLog: f.log,
          vpc: f.vpc,
          connection: WarehouseConnection.postgres({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
        } as unknown as WarehouseSinkProps),
    ).toThrow(/^Test\/Sink: WarehouseSink needs `sources`; it is required$/);
    expect(() => ChangeLog.fromChangeLogAttributes(f.stack, 'L', { streamArn: LOG_ARN } as never)).toThrow(
      /^Test\/L: ChangeLog\.fromChangeLogAttributes needs `retention`; it is required$/,
    );
  });

  test('factories name what is missing', () => {
    expect(() => SourceDatabase.postgres({ databaseName: 'orders', peer: DATABASE_PEER } as never)).toThrow(
      /^SourceDatabase\.postgres needs `secret`; it is required$/,
    );
    expect(() => WarehouseConnection.redshift(undefined as never)).toThrow(/^WarehouseConnection\.redshift needs options \(secret\)$/);
    expect(() => CapturedTable.of(undefined as never)).toThrow(/^CapturedTable\.of needs a table id 'schema\.table' \(a string\), got undefined$/);
  });
});
