/**
 * Alarm actions given once (`PipelineAlarmActions`, an aspect) and the pipeline dashboard
 * (`PipelineDashboard`), on the fixture's constructs: which alarms get the actions and which keep
 * their own, the nearest scope winning, and the dashboard's panels read back from its body.
 */
import { Duration, Stack, Stage } from 'aws-cdk-lib';
import { Annotations, Match, Template } from 'aws-cdk-lib/assertions';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as cloudwatchActions from 'aws-cdk-lib/aws-cloudwatch-actions';
import * as opensearch from 'aws-cdk-lib/aws-opensearchservice';
import * as sns from 'aws-cdk-lib/aws-sns';
import { describe, expect, test } from 'vitest';
import {
  ChangeLog,
  ControlPlane,
  type IMonitoredSearchSink,
  type IMonitoredSource,
  type IMonitoredWarehouseSink,
  type IReconciler,
  PipelineAlarmActions,
  PipelineDashboard,
  Reconciler,
  SearchSink,
  WarehouseConnection,
  WarehouseRebuild,
  WarehouseSink,
} from '../../lib/index.ts';
import { fixture, type Fixture, newApp, ordersSource, resourcesOf, WAREHOUSE_PEER } from './helpers.ts';

function pipeline(f: Fixture, warehouseActions?: cloudwatch.IAlarmAction[]) {
  const orders = ordersSource(f);
  const warehouse = new WarehouseSink(f.stack, 'Warehouse', {
    controlPlane: f.controlPlane,
    changeLog: f.log,
    sources: [orders],
    vpc: f.vpc,
    connection: WarehouseConnection.postgres({ secret: f.warehouseSecret, peer: WAREHOUSE_PEER }),
    freshnessTarget: Duration.minutes(2),
    ...(warehouseActions ? { alarmActions: warehouseActions } : {}),
  });
  const search = new SearchSink(f.stack, 'Search', {
    controlPlane: f.controlPlane,
    changeLog: f.log,
    sources: [orders],
    vpc: f.vpc,
    domain: opensearch.Domain.fromDomainEndpoint(f.stack, 'Domain', 'https://search-s-abcdefghijklmnop.eu-west-1.es.amazonaws.com'),
    freshnessTarget: Duration.minutes(1),
  });
  const reconciler = new Reconciler(f.stack, 'Reconciler', { controlPlane: f.controlPlane, sources: [orders], sinks: [warehouse], vpc: f.vpc });
  return { orders, warehouse, search, reconciler };
}

/** Alarm logical ids with the SNS topics (logical ids) their ALARM and OK transitions notify. */
function alarmTargets(template: Template): Array<{ id: string; alarm: string[]; ok: string[] }> {
  const refs = (v: unknown) => ((v as Array<{ Ref: string }> | undefined) ?? []).map((r) => r.Ref);
  return resourcesOf(template, 'AWS::CloudWatch::Alarm').map(([id, a]) => ({ id, alarm: refs(a.Properties.AlarmActions), ok: refs(a.Properties.OKActions) }));
}

const topicId = (f: Fixture, topic: sns.Topic) => f.stack.getLogicalId(topic.node.defaultChild as sns.CfnTopic);

describe('PipelineAlarmActions', () => {
  test('gives its actions to every platform alarm without its own, created before or after it; a construct’s own alarmActions (even []) replace them; other alarms are left alone', () => {
    const f = fixture();
    const pager = new sns.Topic(f.stack, 'Pager');
    const data = new sns.Topic(f.stack, 'DataTeam');
    PipelineAlarmActions.applyTo(f.stack, { actions: [new cloudwatchActions.SnsAction(pager)] });
    const { warehouse } = pipeline(f, [new cloudwatchActions.SnsAction(data)]);
    const rebuild = new WarehouseRebuild(f.stack, 'Rebuild', { controlPlane: f.controlPlane, changeLog: f.log, sink: warehouse, vpc: f.vpc, alarmActions: [] });
    const own = new cloudwatch.Alarm(f.stack, 'MyOwnAlarm', { metric: warehouse.metricApplyErrors(), threshold: 1, evaluationPeriods: 1 });

    const targets = alarmTargets(Template.fromStack(f.stack));
    const pagerId = topicId(f, pager);
    const dataId = topicId(f, data);
    const ownId = f.stack.getLogicalId(own.node.defaultChild as cloudwatch.CfnAlarm);
    const rebuildIds = new Set(rebuild.alarms.map((a) => f.stack.getLogicalId((a as cloudwatch.Alarm).node.defaultChild as cloudwatch.CfnAlarm)));
    const warehouseIds = new Set(warehouse.alarms.map((a) => f.stack.getLogicalId((a as cloudwatch.Alarm).node.defaultChild as cloudwatch.CfnAlarm)));
    expect(rebuildIds.size).toBe(1);
    expect(warehouseIds.size).toBeGreaterThan(4);
    let defaulted = 0;
    for (const t of targets) {
      if (t.id === ownId || rebuildIds.has(t.id)) expect(t, t.id).toEqual({ id: t.id, alarm: [], ok: [] });
      else if (warehouseIds.has(t.id)) expect(t, t.id).toEqual({ id: t.id, alarm: [dataId], ok: [dataId] });
      else {
        expect(t, t.id).toEqual({ id: t.id, alarm: [pagerId], ok: [pagerId] });
        defaulted++;
      }
    }
    // The control plane, change log, source, search sink and reconciler alarms.
    expect(defaulted).toBeGreaterThan(15);
  });

  test('the nearest scope wins (a stack’s actions beneath its stage’s); an app’s do not reach into stages, as no CDK aspect does', () => {
    const app = newApp();
    const defaults = new Stack(app, 'Defaults');
    const fallback = new sns.Topic(defaults, 'Fallback');
    PipelineAlarmActions.applyTo(app, { actions: [new cloudwatchActions.SnsAction(fallback)] });
    const stage = new Stage(app, 'Prod');
    const pipeline = new Stack(stage, 'Pipeline');
    const stageTopic = new sns.Topic(pipeline, 'Alarms');
    PipelineAlarmActions.applyTo(stage, { actions: [new cloudwatchActions.SnsAction(stageTopic)] });
    new ControlPlane(pipeline, 'Control');
    const special = new Stack(stage, 'Special');
    const specialTopic = new sns.Topic(special, 'Alarms');
    PipelineAlarmActions.applyTo(special, { actions: [new cloudwatchActions.SnsAction(specialTopic)] });
    new ChangeLog(special, 'Log');
    const outside = new Stack(app, 'Outside');
    new ChangeLog(outside, 'Log');
    app.synth();

    const check = (stack: Stack, topic: sns.Topic): void => {
      const targets = alarmTargets(Template.fromStack(stack));
      expect(targets.length, stack.stackName).toBeGreaterThan(0);
      const ref = stack.getLogicalId(topic.node.defaultChild as sns.CfnTopic);
      for (const t of targets) expect(t, `${stack.stackName} ${t.id}`).toEqual({ id: t.id, alarm: [ref], ok: [ref] });
    };
    check(pipeline, stageTopic);
    check(special, specialTopic);
    const outsideAlarms = Template.fromStack(outside).findResources('AWS::CloudWatch::Alarm');
    expect(Object.keys(outsideAlarms).length).toBeGreaterThan(0);
    for (const [id, a] of Object.entries(outsideAlarms)) {
      // The fallback topic lives in another stack: an imported ARN.
      expect(a.Properties.AlarmActions, id).toHaveLength(1);
      expect(JSON.stringify(a.Properties.AlarmActions), id).toMatch(/Fn::ImportValue.*Fallback/);
    }
  });

  test('fails without actions', () => {
    expect(() => new PipelineAlarmActions(undefined as never)).toThrow(/^PipelineAlarmActions needs `actions`/);
  });
});

/** The dashboard body with CloudFormation references replaced by `<logicalId>` (alarm ARNs) or `<Ref>`, parsed. */
function dashboardBody(template: Template): {
  widgets: Array<{ type: string; width: number; height: number; x: number; y: number; properties: Record<string, unknown> }>;
} {
  const dashboards = resourcesOf(template, 'AWS::CloudWatch::Dashboard');
  expect(dashboards).toHaveLength(1);
  const body = dashboards[0]![1].Properties.DashboardBody as string | { 'Fn::Join': [string, unknown[]] };
  const parts = typeof body === 'string' ? [body] : body['Fn::Join'][1];
  const text = parts
    .map((p) => {
      if (typeof p === 'string') return p;
      const getAtt = (p as { 'Fn::GetAtt'?: [string, string] })['Fn::GetAtt'];
      if (getAtt) return `<${getAtt[0]}>`;
      return `<${JSON.stringify(p).replace(/"/g, '')}>`;
    })
    .join('');
  return JSON.parse(text);
}

describe('PipelineDashboard', () => {
  test('has the alarm states of every platform alarm in the stack (also those created after it), and per sink, source and reconciler its panels', () => {
    const f = fixture();
    const { orders, warehouse, search, reconciler } = pipeline(f);
    new PipelineDashboard(f.stack, 'Dashboard', { sources: [orders], warehouseSinks: [warehouse], searchSinks: [search], reconcilers: [reconciler] });
    // Created after the dashboard: its alarm is on it all the same.
    const rebuild = new WarehouseRebuild(f.stack, 'Rebuild', { controlPlane: f.controlPlane, changeLog: f.log, sink: warehouse, vpc: f.vpc });
    new cloudwatch.Alarm(f.stack, 'NotThePlatforms', { metric: warehouse.metricApplyErrors(), threshold: 1, evaluationPeriods: 1 });
    const template = Template.fromStack(f.stack);
    const { widgets } = dashboardBody(template);

    const alarmWidgets = widgets.filter((w) => w.type === 'alarm');
    expect(alarmWidgets).toHaveLength(1);
    const shown = (alarmWidgets[0]!.properties.alarms as string[]).map((a) => a.replace(/^<|>$/g, ''));
    const platformAlarms = resourcesOf(template, 'AWS::CloudWatch::Alarm')
      .map(([id]) => id)
      .filter((id) => !id.startsWith('NotThePlatforms'));
    expect(shown.sort()).toEqual(platformAlarms.sort());
    expect(shown.some((id) => id.startsWith('Rebuild'))).toBe(true);
    expect(rebuild.alarms).toHaveLength(1);

    const byTitle = new Map(widgets.filter((w) => w.type === 'metric').map((w) => [w.properties.title as string, w.properties]));
    const metricsOf = (title: string) => {
      const p = byTitle.get(title);
      expect(p, `panel "${title}" among ${[...byTitle.keys()].join(' | ')}`).toBeDefined();
      return p!.metrics as unknown[][];
    };
    // Lag: p50 and p99 per source against the freshness target.
    const lag = metricsOf('warehouse sink warehouse: end-to-end lag (ms)');
    expect(lag.map((m) => [m[1], m[3], m[5], (m[6] as { stat: string }).stat])).toEqual([
      ['EndToEndLag', 'warehouse', 'orders', 'p50'],
      ['EndToEndLag', 'warehouse', 'orders', 'p99'],
    ]);
    expect(
      (byTitle.get('warehouse sink warehouse: end-to-end lag (ms)')!.annotations as { horizontal: Array<{ value: number }> }).horizontal.map((a) => a.value),
    ).toEqual([120_000]);
    expect(
      (byTitle.get('search sink search: end-to-end lag (ms)')!.annotations as { horizontal: Array<{ value: number }> }).horizontal.map((a) => a.value),
    ).toEqual([60_000]);
    // Events per second from the per-minute sum.
    expect(JSON.stringify(metricsOf('warehouse sink warehouse: events applied per second'))).toMatch(/e0 \/ PERIOD\(e0\).*EventsApplied/);
    expect(JSON.stringify(metricsOf('search sink search: dead letters and apply errors'))).toMatch(
      /DeadLetters.*ApproximateNumberOfMessagesVisible.*ApplyErrors/,
    );
    expect(JSON.stringify(metricsOf('search sink search: applier iterator age (ms)'))).toMatch(/AWS\/Lambda.*IteratorAge/);
    expect(JSON.stringify(metricsOf('warehouse sink warehouse: merges (backlog)'))).toMatch(/DeltaRowsMerged.*MergesStoppingAppends.*MergeErrors/);
    expect(byTitle.has('search sink search: merges (backlog)')).toBe(false);
    // Per source: slot WAL and headroom, DMS latency, snapshot progress and ETA of every table (a SEARCH over the Table dimension).
    expect(JSON.stringify(metricsOf('source orders: slot WAL (bytes)'))).toMatch(/SlotRetainedBytes.*SlotHeadroomBytes/);
    expect(JSON.stringify(metricsOf('source orders: DMS latency (s)'))).toMatch(/AWS\/DMS.*CDCLatencySource.*CDCLatencyTarget/);
    expect(JSON.stringify(metricsOf('source orders: snapshot rows done per table'))).toContain(
      `SEARCH('{CdcPlatform,Source,Table} MetricName=\\"SnapshotRowsDone\\" Source=\\"orders\\"', 'Maximum', 60)`,
    );
    expect(JSON.stringify(metricsOf('source orders: snapshot ETA per table (s)'))).toContain('MetricName=\\"SnapshotEta\\"');
    expect(JSON.stringify(metricsOf('source orders: normalizer iterator age (ms)'))).toMatch(/IteratorAge/);
    // Reconciliation: only the sink the reconciler reconciles.
    const verdicts = JSON.stringify(metricsOf('reconciliation verdicts: tables DIVERGED and INCONCLUSIVE'));
    expect(verdicts).toMatch(/ReconcileDivergedTables.*ReconcileInconclusiveTables/);
    expect(verdicts).not.toContain('"search"');
    expect(JSON.stringify(metricsOf('reconciliation coverage: tables without a decided verdict in their tier period'))).toMatch(/ReconcileCoverageGaps/);
    // Nothing to act on at synth: no warning on the dashboard (a math expression naming an unknown metric would be one).
    const warnings = Annotations.fromStack(f.stack)
      .findWarning('*', Match.anyValue())
      .filter((w) => w.id.includes('/Dashboard'));
    expect(warnings).toEqual([]);
    // Laid out on the 24-column grid without overlap.
    for (const w of widgets) expect(w.x + w.width, JSON.stringify(w.properties.title)).toBeLessThanOrEqual(24);
    const cells = new Set<string>();
    for (const w of widgets)
      for (let x = w.x; x < w.x + w.width; x++)
        for (let y = w.y; y < w.y + w.height; y++) {
          expect(cells.has(`${x},${y}`), `overlap at ${x},${y}`).toBe(false);
          cells.add(`${x},${y}`);
        }
  });

  test('takes its sources, sinks and reconcilers through their interfaces, and draws the same panels as from the classes', () => {
    const f = fixture();
    const { orders, warehouse, search, reconciler } = pipeline(f);
    const sources: IMonitoredSource[] = [orders];
    const warehouseSinks: IMonitoredWarehouseSink[] = [warehouse];
    const searchSinks: IMonitoredSearchSink[] = [search];
    const reconcilers: IReconciler[] = [reconciler];
    new PipelineDashboard(f.stack, 'ByInterface', { sources, warehouseSinks, searchSinks, reconcilers, alarms: [] });
    new PipelineDashboard(f.stack, 'ByClass', { sources: [orders], warehouseSinks: [warehouse], searchSinks: [search], reconcilers: [reconciler], alarms: [] });
    const bodies = Object.values(Template.fromStack(f.stack).findResources('AWS::CloudWatch::Dashboard')).map((r) =>
      JSON.stringify(r.Properties.DashboardBody),
    );
    expect(bodies).toHaveLength(2);
    expect(bodies[0]).toContain('normalizer iterator age');
    expect(bodies[0]).toBe(bodies[1]);
  });

  test('fails without anything to show', () => {
    const f = fixture();
    expect(() => new PipelineDashboard(f.stack, 'Empty')).toThrow(
      /^Test\/Empty: a pipeline dashboard needs at least one of sources, warehouseSinks, searchSinks$/,
    );
  });
});
