import { Duration, Stack } from 'aws-cdk-lib';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import { Construct } from 'constructs';
import type { IMonitoredSource } from './cdc-source.ts';
import { platformAlarmOf } from './private/alarms.ts';
import { fail } from './private/validate.ts';
import type { IReconciler } from './reconciler.ts';
import type { IMonitoredSearchSink } from './search-sink.ts';
import type { IMonitoredWarehouseSink } from './warehouse-sink.ts';

/** Properties of a `PipelineDashboard`. */
export interface PipelineDashboardProps {
  /**
   * Name of the dashboard (letters, digits, `-` and `_`).
   * @default - a name CloudFormation generates
   */
  readonly dashboardName?: string;
  /**
   * The sources to show: replication slot WAL and headroom, DMS latency, snapshot progress and
   * ETA, normalizer iterator age.
   * @default - no source panels
   */
  readonly sources?: IMonitoredSource[];
  /**
   * The warehouse sinks to show: end-to-end lag against the freshness target, events per
   * second, dead letters, iterator age, merges.
   * @default - no warehouse sink panels
   */
  readonly warehouseSinks?: IMonitoredWarehouseSink[];
  /**
   * The search sinks to show: end-to-end lag against the freshness target, events per second,
   * dead letters, iterator age.
   * @default - no search sink panels
   */
  readonly searchSinks?: IMonitoredSearchSink[];
  /**
   * The reconcilers whose verdicts and coverage to show, for the sinks above they reconcile.
   * @default - no reconciliation panels
   */
  readonly reconcilers?: IReconciler[];
  /**
   * The alarms of the alarm-status panel.
   * @default - every alarm the platform's constructs created in the dashboard's stack, at synthesis (so constructs added after the dashboard are included)
   */
  readonly alarms?: cloudwatch.IAlarm[];
  /**
   * The time range the dashboard opens with.
   * @default Duration.hours(3)
   */
  readonly defaultInterval?: Duration;
}

/** Width of the dashboard grid (CloudWatch's 24 columns). */
const FULL = 24;
/** Height of a graph panel. */
const GRAPH_HEIGHT = 6;
/** The most alarms one alarm-status widget shows (CloudWatch's limit). */
const ALARMS_PER_WIDGET = 100;
/** Red of the freshness-target annotation (CloudWatch's alarm red). */
const TARGET_COLOR = '#d62728';

/**
 * One CloudWatch dashboard for a pipeline (docs/operations.md, "Dashboard"): the alarm states;
 * per sink the end-to-end lag (p50 and p99 per source against the freshness target), events per
 * second, dead letters and apply errors, iterator age and, for a warehouse sink, the merges; per
 * source the replication slot's retained WAL and headroom, DMS latency, snapshot progress and ETA
 * per table, normalizer iterator age; reconciliation verdicts and coverage per sink. Every panel is
 * built from the constructs' own `metric*` methods, so it follows what they deploy.
 */
export class PipelineDashboard extends Construct {
  /** The dashboard. */
  readonly dashboard: cloudwatch.Dashboard;

  constructor(scope: Construct, id: string, props: PipelineDashboardProps = {}) {
    super(scope, id);
    const sources = props.sources ?? [];
    const warehouseSinks = props.warehouseSinks ?? [];
    const searchSinks = props.searchSinks ?? [];
    if (sources.length + warehouseSinks.length + searchSinks.length === 0)
      fail(this, 'a pipeline dashboard needs at least one of sources, warehouseSinks, searchSinks');
    this.dashboard = new cloudwatch.Dashboard(this, 'Resource', {
      dashboardName: props.dashboardName,
      defaultInterval: props.defaultInterval ?? Duration.hours(3),
    });
    this.dashboard.addWidgets(
      new cloudwatch.TextWidget({
        markdown: `# CDC pipeline ${Stack.of(this).stackName}\nEnd-to-end lag per sink is the health number: source commit to sink commit, measured on heartbeats every 10 s. Red lines are freshness targets.`,
        width: FULL,
        height: 2,
      }),
    );
    this.dashboard.addWidgets(new AlarmStatusPanel(this, props.alarms));
    for (const sink of warehouseSinks) this.addSink(sink, 'Warehouse', warehouseMetrics(sink));
    for (const sink of searchSinks) this.addSink(sink, 'Search', searchMetrics(sink));
    for (const source of sources) this.addSource(source);
    this.addReconciliation(props.reconcilers ?? [], [...warehouseSinks, ...searchSinks]);
  }

  private addSink(sink: IMonitoredWarehouseSink | IMonitoredSearchSink, kind: 'Warehouse' | 'Search', metrics: SinkMetrics): void {
    const name = `${kind.toLowerCase()} sink ${sink.sinkId}`;
    const target = sink.freshnessTarget;
    const sourceIds = metrics.sourceIds;
    this.dashboard.addWidgets(heading(`## ${kind} sink \`${sink.sinkId}\` — freshness target ${target.toHumanString()}`));
    const percentiles = sourceIds.flatMap((sourceId) =>
      [50, 99].map((p) => metrics.lag(sourceId, { statistic: cloudwatch.Stats.p(p), period: Duration.minutes(1), label: `${sourceId} p${p}` })),
    );
    const widgets: cloudwatch.IWidget[] = [
      graph(`${name}: end-to-end lag (ms)`, percentiles, {
        width: 12,
        leftAnnotations: [{ value: target.toMilliseconds(), label: `freshness target ${target.toHumanString()}`, color: TARGET_COLOR }],
      }),
      graph(
        `${name}: events applied per second`,
        sourceIds.map((sourceId, i) => perSecond(`e${i}`, metrics.applied(sourceId), sourceId)),
      ),
      graph(`${name}: applier iterator age (ms)`, [sink.metricIteratorAge({ label: 'iterator age (max)' })]),
      graph(
        `${name}: dead letters and apply errors`,
        [
          ...sourceIds.map((sourceId) => metrics.deadLetters(sourceId, { label: `${sourceId} dead letters` })),
          sink.deadLetterQueue.metricApproximateNumberOfMessagesVisible({
            statistic: cloudwatch.Stats.MAXIMUM,
            period: Duration.minutes(1),
            label: 'on-failure queue (messages)',
          }),
          sink.metricApplyErrors({ label: 'apply errors (retried batches)' }),
        ],
        { width: 12 },
      ),
    ];
    if (metrics.merges) widgets.push(metrics.merges(name));
    this.dashboard.addWidgets(...widgets);
  }

  private addSource(source: IMonitoredSource): void {
    this.dashboard.addWidgets(heading(`## Source \`${source.sourceId}\` — slot \`${source.slotName}\``));
    this.dashboard.addWidgets(
      graph(`source ${source.sourceId}: slot WAL (bytes)`, [
        source.metricSlotRetainedBytes({ label: 'retained WAL' }),
        source.metricSlotHeadroomBytes({ label: 'headroom' }),
      ]),
      graph(`source ${source.sourceId}: DMS latency (s)`, [
        source.metricCdcLatencySource({ label: 'CDCLatencySource (reading the WAL)' }),
        source.metricCdcLatencyTarget({ label: 'CDCLatencyTarget (writing the raw stream)' }),
      ]),
      graph(`source ${source.sourceId}: normalizer iterator age (ms)`, [source.metricNormalizerIteratorAge({ label: 'iterator age (max)' })], { width: 4 }),
      graph(`source ${source.sourceId}: snapshot rows done per table`, [source.metricSnapshotRowsDone()], { width: 4 }),
      graph(`source ${source.sourceId}: snapshot ETA per table (s)`, [source.metricSnapshotEta()], { width: 4 }),
    );
  }

  private addReconciliation(reconcilers: IReconciler[], sinks: Array<IMonitoredWarehouseSink | IMonitoredSearchSink>): void {
    // Each reconciled sink once (the metrics are the sink's, whichever reconciler reports them).
    const pairs = sinks.flatMap((s) => {
      const r = reconcilers.find((x) => x.sinkIds.includes(s.sinkId));
      return r ? [[r, s] as const] : [];
    });
    if (pairs.length === 0) return;
    const hourly = { period: Duration.hours(1) };
    this.dashboard.addWidgets(heading('## Reconciliation — verdicts per run (hourly maximum) and coverage'));
    this.dashboard.addWidgets(
      graph(
        'reconciliation verdicts: tables DIVERGED and INCONCLUSIVE',
        pairs.flatMap(([r, s]) => [
          r.metricDivergedTables(s, { ...hourly, label: `${s.sinkId} diverged tables` }),
          r.metricInconclusiveTables(s, { ...hourly, label: `${s.sinkId} inconclusive tables` }),
        ]),
        { width: 12 },
      ),
      graph(
        'reconciliation coverage: tables without a decided verdict in their tier period',
        pairs.map(([r, s]) => r.metricCoverageGaps(s, { ...hourly, label: `${s.sinkId} coverage gaps` })),
        { width: 12 },
      ),
    );
  }
}

/**
 * The alarm states, as one or more alarm-status widgets across the dashboard. The alarms are
 * collected when the dashboard body is rendered (synthesis), so platform constructs created after
 * the dashboard are included.
 */
class AlarmStatusPanel implements cloudwatch.IWidget {
  readonly width = FULL;
  readonly warnings?: string[];
  readonly warningsV2?: { [id: string]: string };
  private rendered?: cloudwatch.AlarmStatusWidget[];

  constructor(
    private readonly scope: Construct,
    private readonly given: cloudwatch.IAlarm[] | undefined,
  ) {}

  get height(): number {
    return this.render().reduce((h, w) => h + w.height, 0);
  }

  position(x: number, y: number): void {
    let top = y;
    for (const w of this.render()) {
      w.position(x, top);
      top += w.height;
    }
  }

  toJson(): unknown[] {
    return this.render().flatMap((w) => w.toJson());
  }

  private render(): cloudwatch.AlarmStatusWidget[] {
    if (this.rendered) return this.rendered;
    const alarms =
      this.given ??
      Stack.of(this.scope)
        .node.findAll()
        .filter((c): c is cloudwatch.Alarm => c instanceof cloudwatch.Alarm && platformAlarmOf(c) !== undefined);
    const chunks: cloudwatch.IAlarm[][] = [];
    for (let i = 0; i < alarms.length; i += ALARMS_PER_WIDGET) chunks.push(alarms.slice(i, i + ALARMS_PER_WIDGET));
    this.rendered = chunks.map(
      (chunk, i) =>
        new cloudwatch.AlarmStatusWidget({
          title:
            chunks.length === 1
              ? `Alarms (${alarms.length})`
              : `Alarms (${i * ALARMS_PER_WIDGET + 1}–${i * ALARMS_PER_WIDGET + chunk.length} of ${alarms.length})`,
          alarms: chunk,
          width: FULL,
          // Four alarms a row, plus the title.
          height: 1 + Math.ceil(chunk.length / 4),
          sortBy: cloudwatch.AlarmStatusWidgetSortBy.STATE_UPDATED_TIMESTAMP,
        }),
    );
    return this.rendered;
  }
}

function heading(markdown: string): cloudwatch.TextWidget {
  return new cloudwatch.TextWidget({ markdown, width: FULL, height: 1, background: cloudwatch.TextWidgetBackground.TRANSPARENT });
}

function graph(
  title: string,
  left: cloudwatch.IMetric[],
  options: { width?: number; right?: cloudwatch.IMetric[]; leftAnnotations?: cloudwatch.HorizontalAnnotation[] } = {},
): cloudwatch.GraphWidget {
  return new cloudwatch.GraphWidget({
    title,
    left,
    right: options.right,
    leftAnnotations: options.leftAnnotations,
    leftYAxis: { min: 0, showUnits: false },
    width: options.width ?? 6,
    height: GRAPH_HEIGHT,
  });
}

/** A per-minute sum as a rate per second (`m / PERIOD(m)`). */
function perSecond(id: string, metric: cloudwatch.IMetric, label: string): cloudwatch.MathExpression {
  return new cloudwatch.MathExpression({ expression: `${id} / PERIOD(${id})`, usingMetrics: { [id]: metric }, label, period: Duration.minutes(1) });
}

/** What differs between the two kinds of sink: how their per-source metrics name the source, and the warehouse's merges. */
interface SinkMetrics {
  readonly sourceIds: string[];
  lag(sourceId: string, props: cloudwatch.MetricOptions): cloudwatch.IMetric;
  applied(sourceId: string): cloudwatch.IMetric;
  deadLetters(sourceId: string, props: cloudwatch.MetricOptions): cloudwatch.IMetric;
  merges?(name: string): cloudwatch.IWidget;
}

function warehouseMetrics(sink: IMonitoredWarehouseSink): SinkMetrics {
  const source = (sourceId: string) => sink.sources.find((s) => s.sourceId === sourceId)!;
  return {
    sourceIds: sink.sources.map((s) => s.sourceId),
    lag: (sourceId, props) => sink.metricEndToEndLag(source(sourceId), props),
    applied: (sourceId) => sink.metricEventsApplied(source(sourceId)),
    deadLetters: (sourceId, props) => sink.metricDeadLetters(source(sourceId), props),
    merges: (name) =>
      graph(`${name}: merges (backlog)`, [sink.metricDeltaRowsMerged({ label: 'delta rows merged' })], {
        width: 12,
        right: [sink.metricMergesStoppingAppends({ label: 'merges that stopped appends (behind)' }), sink.metricMergeErrors({ label: 'merge errors' })],
      }),
  };
}

function searchMetrics(sink: IMonitoredSearchSink): SinkMetrics {
  return {
    sourceIds: sink.sourceIds,
    lag: (sourceId, props) => sink.metricEndToEndLag(sourceId, props),
    applied: (sourceId) => sink.metricEventsApplied(sourceId),
    deadLetters: (sourceId, props) => sink.metricDeadLetters(sourceId, props),
  };
}
