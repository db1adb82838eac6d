import { Duration, Resource, Size, Stack, Validations, type IResource } from 'aws-cdk-lib';
import * as iam from 'aws-cdk-lib/aws-iam';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as events from 'aws-cdk-lib/aws-events';
import * as targets from 'aws-cdk-lib/aws-events-targets';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type { Construct } from 'constructs';
import { ControlPartition, pollConsumerId } from '../contracts/control-plane-keys.ts';
import { EnvName, ServiceName } from '../contracts/env.ts';
import { MetricDimension, MetricName } from '../contracts/metrics.ts';
import { AwsApiEgress } from './aws-api-egress.ts';
import type * as opensearch from 'aws-cdk-lib/aws-opensearchservice';
import type { IReconcilableSource } from './cdc-source.ts';
import type { IControlPlane } from './control-plane.ts';
import { createAlarm } from './private/alarms.ts';
import { allowDatabase, ownSecurityGroup } from './private/function-network.ts';
import { snapshotBudgetEnvironment, sourceConnectedFunction } from './private/source-connection.ts';
import { platformMetric } from './private/platform-metric.ts';
import { encryptLogGroup } from './private/platform-key.ts';
import { tableConfigEntries } from './private/table-mappings.ts';
import { checkIntegerRange, checkLowerIdent, checkRequiredProps, fail, isKnownDuration } from './private/validate.ts';
import type { WarehouseConnection } from './warehouse-connection.ts';
import { nagText } from './private/nag-text.ts';

/** A group of tables reconciled on one schedule (docs/reconcile.md, "Coverage"). */
export interface ReconcileTierProps {
  /** The tier's name (a lower-case identifier), in logs and the schedule's input. */
  readonly name: string;
  /** How often its tables are reconciled; a table with no decided verdict for longer counts against coverage. */
  readonly every: Duration;
  /**
   * The tables of the tier (`schema.table`), or `['*']` for every captured table no other tier names.
   * @default ['*']
   */
  readonly tables?: string[];
}

/** A search sink's index as a `Reconciler` reads it. */
export interface ReconciledSearchIndex {
  /** The domain the sink indexes into. */
  readonly domain: opensearch.IDomain;
  /** The index path prefixes the sink writes. */
  readonly indexPaths: string[];
  /** The prefix of the sink's index and alias names. */
  readonly indexPrefix: string;
}

/**
 * A sink a `Reconciler` compares with its sources: a warehouse sink (it has a
 * `warehouseConnection`) or a search sink (it has a `searchIndex`) of this app.
 */
export interface IReconciledSink extends IResource {
  /** The sink id. */
  readonly sinkId: string;
  /** The end-to-end lag objective (the default settle time of a differing key). */
  readonly freshnessTarget: Duration;
  /** The ids of the sources whose tables it serves. */
  readonly sourceIds: string[];
  /**
   * How a warehouse sink reaches its warehouse.
   * @default - not a warehouse sink
   */
  readonly warehouseConnection?: WarehouseConnection;
  /**
   * A search sink's index.
   * @default - not a search sink
   */
  readonly searchIndex?: ReconciledSearchIndex;
}

/** @deprecated use `IReconciledSink` (a `WarehouseSink` or a `SearchSink`) */
export type ReconciledSink = IReconciledSink;

/** A reconciler: a `Reconciler`. */
export interface IReconciler extends IResource {
  /** The ids of the sinks it reconciles. */
  readonly sinkIds: string[];
  /** Tables of a sink whose verdict was DIVERGED (`ReconcileDivergedTables`); maximum per period by default. */
  metricDivergedTables(sink: IReconciledSink, props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Captured tables with no decided verdict within their tier's period (`ReconcileCoverageGaps`); maximum per period by default. */
  metricCoverageGaps(sink: IReconciledSink, props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Tables whose verdict was INCONCLUSIVE (`ReconcileInconclusiveTables`); maximum per period by default. */
  metricInconclusiveTables(sink: IReconciledSink, props?: cloudwatch.MetricOptions): cloudwatch.Metric;
}

/** Properties of a `Reconciler`. */
export interface ReconcilerProps {
  /** The control plane that keeps the verdicts, their cursors and the tables' states. */
  readonly controlPlane: IControlPlane;
  /** The sources whose tables are reconciled. */
  readonly sources: IReconcilableSource[];
  /**
   * The sinks each source is compared with (each must serve the source): warehouse sinks (their
   * views) and search sinks (their indexes' live documents, read with `es:ESHttpGet`/`es:ESHttpPost`
   * on the source's index paths only; a domain in the VPC is reached through the function's HTTPS
   * egress, `awsApiEgress`).
   */
  readonly sinks: IReconciledSink[];
  /** VPC from which the function reaches the sources, the warehouses and the search domains. */
  readonly vpc: ec2.IVpc;
  /**
   * Subnets of the function.
   * @default - the VPC's private subnets with egress
   */
  readonly vpcSubnets?: ec2.SubnetSelection;
  /**
   * How the function reaches AWS APIs (Secrets Manager, DynamoDB) over HTTPS.
   * @default AwsApiEgress.vpcEndpoints()
   */
  readonly awsApiEgress?: AwsApiEgress;
  /**
   * The tiers: each has its own schedule and coverage period.
   * @default - one tier `default`, every captured table once a day
   */
  readonly tiers?: ReconcileTierProps[];
  /**
   * Source rows checked per table per run at most (a bigger table is covered over several runs).
   * @default 100000
   */
  readonly rowsPerRun?: number;
  /**
   * How long a differing key is left to settle before it is read again (it must exceed the
   * sink's lag; the re-check also waits for the sink's heartbeat to pass the first read).
   * @default - the sink's freshness target
   */
  readonly settleTime?: Duration;
  /**
   * Memory of the function.
   * @default Size.mebibytes(512)
   */
  readonly memorySize?: Size;
  /**
   * Timeout of one run (tables not reached are reconciled by the next run).
   * @default Duration.minutes(15)
   */
  readonly timeout?: Duration;
  /**
   * Whether to create the alarms (divergence and coverage, per sink).
   * @default true
   */
  readonly alarmsEnabled?: boolean;
  /**
   * Actions for the alarms' ALARM and OK transitions.
   * @default - no actions
   */
  readonly alarmActions?: cloudwatch.IAlarmAction[];
}

/** The ids of the sources a sink serves. */
function servedSources(sink: IReconciledSink): string[] {
  return sink.sourceIds;
}

/** The search side of a sink (its domain and index paths), or null for a warehouse sink. */
function searchOf(sink: IReconciledSink): ReconciledSearchIndex | null {
  return sink.searchIndex ?? null;
}

/** What a sink is, in alarm descriptions. */
function kindOf(sink: IReconciledSink): string {
  return searchOf(sink) ? 'search' : 'warehouse';
}

/** A reconcile metric of `sink` (its `Sink` dimension), the maximum per minute unless `props` say otherwise. */
function sinkMaximum(scope: Construct, metricName: string, sink: IReconciledSink, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
  return platformMetric(scope, metricName, { [MetricDimension.SINK]: sink.sinkId }, { statistic: cloudwatch.Stats.MAXIMUM, ...props });
}

const DEFAULT_TIER: ReconcileTierProps = { name: 'default', every: Duration.days(1), tables: ['*'] };

/**
 * Compares each source's tables with each sink's copy (a warehouse's views, a search index's live
 * documents) on a schedule per tier (docs/reconcile.md):
 * row counts plus checksums over primary-key ranges, narrowed by bisection to the keys, rotating
 * over big tables, reading the source within the snapshot worker's budget. One function per
 * source and sink, in the VPC; verdicts in the control plane; alarms when a table diverges and
 * when a captured table has gone without a decided verdict for longer than its tier's period.
 */
export class Reconciler extends Resource implements IReconciler {
  /** The functions, one per source and sink that serves it (`<source>/<sink>`). */
  readonly functions: Record<string, lambda.IFunction> = {};
  /** The functions' security groups (one each): allow them on the databases' ports. */
  readonly connections: ec2.Connections;
  /** The alarms this construct created (empty when `alarmsEnabled` is false). */
  readonly alarms: cloudwatch.IAlarm[] = [];
  /** The tiers, with their defaults applied. */
  readonly tiers: ReconcileTierProps[];
  /** The ids of the sinks it reconciles. */
  readonly sinkIds: string[];

  constructor(scope: Construct, id: string, props: ReconcilerProps) {
    super(scope, id);
    checkRequiredProps(this, 'Reconciler', props, ['controlPlane', 'sources', 'sinks', 'vpc']);
    if (props.sources.length === 0) fail(this, 'sources must not be empty');
    if (props.sinks.length === 0) fail(this, 'sinks must not be empty');
    this.sinkIds = props.sinks.map((s) => s.sinkId);
    checkIntegerRange(this, 'rowsPerRun', props.rowsPerRun, 1, 100_000_000);
    this.tiers = (props.tiers ?? [DEFAULT_TIER]).map((t) => ({ ...t, tables: t.tables ?? ['*'] }));
    if (this.tiers.length === 0) fail(this, 'tiers must not be empty');
    const names = new Set<string>();
    for (const t of this.tiers) {
      checkLowerIdent(this, 'tier name', t.name);
      if (names.has(t.name)) fail(this, `tier ${t.name} is listed twice`);
      names.add(t.name);
      if (isKnownDuration(t.every) && (t.every.toMinutes({ integral: false }) < 5 || t.every.toDays({ integral: false }) > 7)) {
        fail(this, `tier ${t.name}: every must be between 5 minutes and 7 days, got ${t.every.toHumanString()}`);
      }
    }
    const wildcard = this.tiers.filter((t) => t.tables!.includes('*'));
    if (wildcard.length > 1) fail(this, `only one tier may take the remaining tables ('*'); ${wildcard.map((t) => t.name).join(', ')} do`);

    // One security group per function (docs/deploy.md, "Network"): HTTPS to AWS APIs, and the
    // port of its own source and of its own warehouse, nothing else.
    const awsApiEgress = props.awsApiEgress ?? AwsApiEgress.vpcEndpoints();
    const groups: ec2.ISecurityGroup[] = [];

    for (const sink of props.sinks) {
      if (!searchOf(sink) && !sink.warehouseConnection)
        fail(this, `sink ${sink.sinkId} is neither a warehouse sink (warehouseConnection) nor a search sink (searchIndex)`);
      if (!props.sources.some((source) => servedSources(sink).includes(source.sourceId))) {
        fail(
          this,
          `sink ${sink.sinkId} serves none of the sources (${props.sources.map((x) => x.sourceId).join(', ')}); it serves ${servedSources(sink).join(', ') || 'none'}`,
        );
      }
    }
    const tiersJson = JSON.stringify(this.tiers.map((t) => ({ name: t.name, periodMs: t.every.toMilliseconds(), tables: t.tables })));
    const fns: lambda.IFunction[] = [];
    for (const source of props.sources) {
      for (const sink of props.sinks) {
        const search = searchOf(sink);
        // A sink is compared with the sources it serves (a search sink may index only some).
        if (!servedSources(sink).includes(source.sourceId)) continue;
        const settle = props.settleTime ?? sink.freshnessTarget;
        const warehouse = search ? null : { connection: sink.warehouseConnection! };
        const member = `${source.sourceId}-${sink.sinkId}`;
        const securityGroup = ownSecurityGroup(
          this,
          `SecurityGroup-${member}`,
          props.vpc,
          awsApiEgress,
          `Reconciler of source ${source.sourceId} and sink ${sink.sinkId} (${this.node.path})`,
        );
        groups.push(securityGroup);
        allowDatabase(this, `Source-${member}`, securityGroup, source.database, `Reconciler ${member}: source ${source.sourceId}`, `source ${source.sourceId}`);
        if (warehouse)
          allowDatabase(
            this,
            `Warehouse-${member}`,
            securityGroup,
            warehouse.connection,
            `Reconciler ${member}: warehouse ${sink.sinkId}`,
            `warehouse ${sink.sinkId}`,
          );
        const fn = sourceConnectedFunction(
          this,
          `Function-${source.sourceId}-${sink.sinkId}`,
          {
            handlerName: 'reconciler',
            description: `Reconciles source ${source.sourceId} with ${search ? 'search' : 'warehouse'} sink ${sink.sinkId} (${this.node.path})`,
            serviceName: ServiceName.RECONCILER,
            environment: {
              [EnvName.SOURCE_ID]: source.sourceId,
              [EnvName.SINK_ID]: sink.sinkId,
              [EnvName.CONTROL_TABLE]: props.controlPlane.controlPlaneTableName,
              [EnvName.TABLE_CONFIG]: JSON.stringify(tableConfigEntries(source.tables, source.heartbeatSchema)),
              [EnvName.HEARTBEAT_SCHEMA]: source.heartbeatSchema,
              ...(warehouse
                ? { [EnvName.WAREHOUSE_SECRET_ARN]: warehouse.connection.secret.secretArn, [EnvName.WAREHOUSE_SSL_MODE]: warehouse.connection.sslMode }
                : { [EnvName.SEARCH_ENDPOINT]: search!.domain.domainEndpoint, [EnvName.SEARCH_INDEX_PREFIX]: search!.indexPrefix }),
              [EnvName.RECONCILE_TIERS]: tiersJson,
              ...(props.rowsPerRun !== undefined ? { [EnvName.RECONCILE_ROWS_PER_RUN]: String(props.rowsPerRun) } : {}),
              [EnvName.RECONCILE_SETTLE_MS]: String(settle.toMilliseconds()),
              // The same budget as the snapshot worker (docs/snapshot.md "The budget: the backfill yields").
              ...snapshotBudgetEnvironment(source.database),
            },
            memorySize: props.memorySize ?? Size.mebibytes(512),
            timeout: props.timeout ?? Duration.minutes(15),
            vpc: props.vpc,
            vpcSubnets: props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS },
            securityGroups: [securityGroup],
          },
          { database: source.database, secrets: [{ secret: source.database.secret, environmentName: EnvName.SOURCE_SECRET_ARN }] },
        );
        // Its log group on the source's key, as the source's own functions that read the same rows (docs/deploy.md, "Keys").
        encryptLogGroup(fn.logGroup, source.encryptionKey);
        if (warehouse) warehouse.connection.secret.grantRead(fn.fn);
        if (search) {
          // Reads only (mapping GET; _search, _count and _mget POSTs), on this source's index paths only
          // (each table's aliases and generations, its heartbeat table's; docs/reconcile.md "The search sink").
          const paths = search.indexPaths.filter((p) => p.startsWith(`${search.indexPrefix}.${source.sourceId}.`));
          const arn = search.domain.domainArn;
          fn.role.addToPrincipalPolicy(
            new iam.PolicyStatement({
              actions: ['es:ESHttpGet', 'es:ESHttpPost'],
              resources: paths.flatMap((p) => [`${arn}/${p}`, `${arn}/${p}/*`, `${arn}/${p}.*`]),
            }),
          );
          const arnText = nagText(Stack.of(this).resolve(arn));
          for (const p of paths) {
            for (const suffix of ['/*', '.*']) {
              Validations.of(fn).acknowledge({
                id: `AwsSolutions-IAM5[Resource::${arnText}/${p}${suffix}]`,
                reason: `index paths of one table only: its aliases, index generations and their sub-paths (${p}${suffix}), read-only`,
              });
            }
          }
        }
        props.controlPlane.grantItems(fn.fn, {
          // Table states and schema (is the table comparable?), the sink's progress (is it held? how far is a polled table?),
          // its verdicts, and the poll worker's cursors (a polled table's stable point, docs/polling.md).
          read: [
            ControlPartition.source(source.sourceId),
            ControlPartition.sink(sink.sinkId),
            ControlPartition.verdicts(sink.sinkId),
            ControlPartition.checkpoint(pollConsumerId(source.sourceId)),
          ],
          put: [ControlPartition.verdicts(sink.sinkId)],
        });
        Validations.of(fn).acknowledge(
          { id: 'AwsSolutions-IAM5[Action::kms:GenerateDataKey*]', reason: 'CDK key grant; scoped to the one key that encrypts the control plane or secret' },
          { id: 'AwsSolutions-IAM5[Action::kms:ReEncrypt*]', reason: 'CDK key grant; scoped to the one key that encrypts the control plane or secret' },
        );
        this.functions[`${source.sourceId}/${sink.sinkId}`] = fn.fn;
        fns.push(fn.fn);
      }
    }
    this.connections = new ec2.Connections({ securityGroups: groups });
    for (const tier of this.tiers) {
      new events.Rule(this, `Schedule-${tier.name}`, {
        description: `Reconciles the ${tier.name} tier every ${tier.every.toHumanString()} (${this.node.path})`,
        schedule: events.Schedule.rate(tier.every),
        targets: fns.map((fn) => new targets.LambdaFunction(fn, { event: events.RuleTargetInput.fromObject({ tier: tier.name }), retryAttempts: 0 })),
      });
    }

    if (props.alarmsEnabled ?? true) {
      // Coverage is judged over the longest tier period (at most a day, CloudWatch's longest alarm period).
      const longest = Math.min(86_400, Math.max(...this.tiers.map((t) => t.every.toSeconds())));
      const fastest = Math.min(86_400, Math.max(300, Math.min(...this.tiers.map((t) => t.every.toSeconds()))));
      for (const sink of props.sinks) {
        this.alarms.push(
          createAlarm(this, `DivergenceAlarm-${sink.sinkId}`, {
            nameSuffix: `reconcile-${sink.sinkId}-diverged`,
            description:
              `A table of ${kindOf(sink)} sink ${sink.sinkId} differs from its source (${this.node.path}): a reconciliation run confirmed keys that are missing, extra or different. ` +
              'The verdict in the control plane names the table, the ranges and sample keys (cdc reconcile --json, docs/reconcile.md); fix by rebuilding the table, never in place.',
            metric: this.metricDivergedTables(sink, { period: Duration.seconds(fastest) }),
            threshold: 0,
            evaluationPeriods: 1,
            datapointsToAlarm: 1,
            treatMissingData: cloudwatch.TreatMissingData.NOT_BREACHING,
            actions: props.alarmActions,
          }),
          createAlarm(this, `CoverageAlarm-${sink.sinkId}`, {
            nameSuffix: `reconcile-${sink.sinkId}-coverage`,
            description:
              `Captured tables of ${kindOf(sink)} sink ${sink.sinkId} have no decided reconciliation verdict within their tier's period, or the reconciler has not reported (${this.node.path}). ` +
              'Tables stay INCONCLUSIVE (paused, held, too hot, sink lagging) or the runs do not finish; the run logs list the tables.',
            metric: this.metricCoverageGaps(sink, { period: Duration.seconds(longest) }),
            threshold: 0,
            evaluationPeriods: 1,
            datapointsToAlarm: 1,
            // No report within the longest period means the reconciler is not running: a coverage gap.
            treatMissingData: cloudwatch.TreatMissingData.BREACHING,
            actions: props.alarmActions,
          }),
        );
      }
    }
  }

  metricDivergedTables(sink: IReconciledSink, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return sinkMaximum(this, MetricName.RECONCILE_DIVERGED_TABLES, sink, props);
  }

  metricCoverageGaps(sink: IReconciledSink, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return sinkMaximum(this, MetricName.RECONCILE_COVERAGE_GAPS, sink, props);
  }

  metricInconclusiveTables(sink: IReconciledSink, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return sinkMaximum(this, MetricName.RECONCILE_INCONCLUSIVE_TABLES, sink, props);
  }
}
