import { Duration, Resource, Size, Stack, Validations, type IResource } from 'aws-cdk-lib';
import type { IReconciledSink, ReconciledSearchIndex } from './reconciler.ts';
import * as cloudwatch from 'aws-cdk-lib/aws-cloudwatch';
import * as ec2 from 'aws-cdk-lib/aws-ec2';
import * as iam from 'aws-cdk-lib/aws-iam';
import { payloadEnvironment } from './private/payloads.ts';
import type * as lambda from 'aws-cdk-lib/aws-lambda';
import type * as opensearch from 'aws-cdk-lib/aws-opensearchservice';
import type * as sqs from 'aws-cdk-lib/aws-sqs';
import type { Construct } from 'constructs';
import { EnvName, HEARTBEAT_TABLE } from '../contracts/env.ts';
import { MetricDimension, MetricName } from '../contracts/metrics.ts';
import { searchNamePart } from '../contracts/search-index-names.ts';
import { DeleteMode } from './captured-table.ts';
import type { ICdcSource } from './cdc-source.ts';
import { iteratorAgeMetric } from './private/alarms.ts';
import { CdcFunction } from './private/cdc-function.ts';
import { platformMetric } from './private/platform-metric.ts';
import { AwsApiEgress } from './aws-api-egress.ts';
import { nagText } from './private/nag-text.ts';
import { checkSinkProps, consumeChangeLog, grantApplierItems, SINK_PROP_KINDS, sinkAlarms } from './private/sink-applier.ts';
import type { ChangeLogSinkProps } from './sink-base.ts';
import { checkLowerIdent, checkPropKinds, checkRequiredProps, fail, idFromConstructId, type PropKind } from './private/validate.ts';

/** One table a `SearchSink` indexes. */
export interface SearchSinkTable {
  /** `schema.table` as captured by the source. */
  readonly table: string;
  /**
   * The source that captures it.
   * @default - the one source of the sink that captures a table of this name (an error if several do)
   */
  readonly source?: ICdcSource;
  /**
   * What the index does with a deleted row. `SOFT` keeps a versioned tombstone document that the
   * readers' alias hides; `HARD` deletes the document and keeps a versioned tombstone in the
   * table's side index, so a late older event cannot bring it back (docs/search.md).
   * @default - the table's delete mode at capture
   */
  readonly deletes?: DeleteMode;
}

/** A search sink. */
export interface ISearchSink extends IResource {
  /** The sink id. */
  readonly sinkId: string;
  /** The end-to-end lag objective. */
  readonly freshnessTarget: Duration;
  /** Source commit → index write for one source (`EndToEndLag`); maximum per minute by default. */
  metricEndToEndLag(sourceId: string, props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Events of one source this sink dead-lettered (`DeadLetters`); sum per minute by default. */
  metricDeadLetters(sourceId: string, props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Batches that failed to apply and were retried (`ApplyErrors`); sum per minute by default. */
  metricApplyErrors(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
  /** Events of one source applied (`EventsApplied`); sum per minute by default. */
  metricEventsApplied(sourceId: string, props?: cloudwatch.MetricOptions): cloudwatch.Metric;
}

/** Properties of a `SearchSink`. */
export interface SearchSinkProps extends ChangeLogSinkProps {
  /** The OpenSearch Service domain (a `Domain`, or one imported with `Domain.fromDomainEndpoint`). */
  readonly domain: opensearch.IDomain;
  /**
   * The tables to index, with their delete mode.
   * @default - every captured table of `sources`, with its capture delete mode
   */
  readonly tables?: SearchSinkTable[];
  /**
   * VPC of the applier, for a domain inside a VPC (allow `connections` on the domain's port 443).
   * @default - the applier runs outside a VPC (a domain with a public endpoint)
   */
  readonly vpc?: ec2.IVpc;
  /**
   * Prefix of the sink's index and alias names (`<prefix>.<source>.<schema>.<table>`).
   * @default 'cdc'
   */
  readonly indexPrefix?: string;
  /**
   * How long Lambda gathers records before invoking the applier (0 to 5 minutes).
   * @default Duration.seconds(2)
   */
  readonly maxBatchingWindow?: Duration;
  /**
   * Memory of the applier.
   * @default Size.mebibytes(512)
   */
  readonly memorySize?: Size;
  /**
   * Timeout of one applier invocation.
   * @default Duration.minutes(2)
   */
  readonly timeout?: Duration;
}

const SEARCH_TABLE_KINDS = { table: 'string', source: 'any', deletes: { enumOf: DeleteMode } } as const satisfies Record<keyof SearchSinkTable, PropKind>;

/** The props' kinds, for callers without the type checker (`checkPropKinds`). */
const SEARCH_SINK_PROP_KINDS = {
  ...SINK_PROP_KINDS,
  domain: 'any',
  tables: 'array',
  vpc: 'any',
  indexPrefix: 'string',
  maxBatchingWindow: 'any',
  memorySize: 'any',
  timeout: 'any',
} as const satisfies Record<keyof SearchSinkProps, PropKind>;

/** The index path prefix of one table, as the applier names it (lambda/core/search/search-plan.ts `searchNames`). */
function aliasOf(prefix: string, sourceId: string, table: string): string {
  const [schema, name] = table.split('.') as [string, string];
  return `${prefix}.${sourceId}.${searchNamePart(schema)}.${searchNamePart(name)}`;
}

/**
 * Indexes the captured tables into an OpenSearch Service domain, one index per table behind an
 * alias, versioned by the event position (docs/search.md): the applier function with its own
 * event source mapping (its own offset, partial batch failures, bisect, an on-failure queue),
 * `es:ESHttp*` on the tables' index paths only, and the alarms that say whether the index is
 * fresh: end-to-end lag per source against `freshnessTarget`, dead letters, persistent apply
 * errors, the on-failure queue and iterator age.
 */
/**
 * A search sink of this app whose panels a `PipelineDashboard` shows: reconciled, with its
 * applier's on-failure queue and iterator age.
 */
export interface IMonitoredSearchSink extends ISearchSink, IReconciledSink {
  /** The applier's on-failure queue. */
  readonly deadLetterQueue: sqs.IQueue;
  /** The applier's iterator age on the change log, milliseconds. */
  metricIteratorAge(props?: cloudwatch.MetricOptions): cloudwatch.Metric;
}

export class SearchSink extends Resource implements IMonitoredSearchSink, ec2.IConnectable {
  /** The sink id. */
  readonly sinkId: string;
  /** The end-to-end lag objective. */
  readonly freshnessTarget: Duration;
  /** The applier function. */
  readonly applier: lambda.IFunction;
  /** Records the applier's event source mapping gave up on (shard id and sequence numbers). */
  readonly deadLetterQueue: sqs.IQueue;
  /** The applier's security group (empty outside a VPC): allow it on the domain's port 443. */
  readonly connections: ec2.Connections;
  /** The alarms this construct created (empty when `alarmsEnabled` is false). */
  readonly alarms: cloudwatch.IAlarm[] = [];
  /** The index path prefixes this sink writes (`<prefix>.<source>.<schema>.<table>`), heartbeat tables included. */
  readonly indexPaths: string[];
  /** The domain it indexes into. */
  readonly domain: opensearch.IDomain;
  /** The prefix of its index and alias names. */
  readonly indexPrefix: string;
  /** The ids of the sources whose tables it indexes. */
  readonly sourceIds: string[];
  /** Its index as a `Reconciler` reads it (domain, index paths, prefix). */
  readonly searchIndex?: ReconciledSearchIndex;

  constructor(scope: Construct, id: string, props: SearchSinkProps) {
    super(scope, id);
    checkRequiredProps(this, 'SearchSink', props, ['controlPlane', 'changeLog', 'sources', 'domain']);
    checkPropKinds(this.node.path, props, SEARCH_SINK_PROP_KINDS);
    this.sinkId = checkLowerIdent(this, 'sinkId', props.sinkId ?? idFromConstructId(id));
    this.freshnessTarget = props.freshnessTarget ?? Duration.minutes(5);
    const prefix = props.indexPrefix ?? 'cdc';
    this.domain = props.domain;
    this.indexPrefix = prefix;
    if (!/^[a-z][a-z0-9_-]{0,31}$/.test(prefix))
      fail(this, `indexPrefix must be lower case letters, digits, _ or - (at most 32), starting with a letter, got '${prefix}'`);
    const maxBatchingWindow = props.maxBatchingWindow ?? Duration.seconds(2);
    this.sourceIds = checkSinkProps(this, props, 'indexes', this.freshnessTarget, maxBatchingWindow);
    if (props.vpcSubnets && !props.vpc) fail(this, 'vpcSubnets needs vpc');

    // The served tables, resolved against what the sources capture.
    const served: Array<{ source: string; table: string; deleteMode: 'soft' | 'hard' }> = [];
    const seen = new Set<string>();
    const add = (source: ICdcSource, table: string, deletes: DeleteMode): void => {
      const k = `${source.sourceId}/${table}`;
      if (seen.has(k)) fail(this, `table ${table} of source ${source.sourceId} is listed twice`);
      seen.add(k);
      served.push({ source: source.sourceId, table, deleteMode: deletes === DeleteMode.HARD ? 'hard' : 'soft' });
    };
    if (props.tables) {
      if (props.tables.length === 0) fail(this, 'tables must not be empty (omit it to index every captured table)');
      for (const [i, t] of props.tables.entries()) {
        checkPropKinds(`${this.node.path}: tables[${i}]`, t, SEARCH_TABLE_KINDS);
        const candidates = t.source ? [t.source] : props.sources.filter((s) => s.tables.some((c) => c.tableId === t.table));
        if (t.source && !props.sources.includes(t.source)) fail(this, `table ${t.table}: its source ${t.source.sourceId} is not one of this sink's sources`);
        if (candidates.length === 0) fail(this, `table ${t.table} is not captured by any source of this sink (${this.sourceIds.join(', ')})`);
        if (candidates.length > 1)
          fail(this, `table ${t.table} is captured by several sources (${candidates.map((s) => s.sourceId).join(', ')}); name its source`);
        const captured = candidates[0]!.tables.find((c) => c.tableId === t.table);
        if (!captured) fail(this, `table ${t.table} is not captured by source ${candidates[0]!.sourceId}`);
        add(candidates[0]!, t.table, t.deletes ?? captured.deletes);
      }
    } else {
      // Tables captured by a pattern (CapturedTable.matching) are not indexed unless named in `tables`.
      for (const s of props.sources) for (const c of s.tables) if (c.pattern === undefined) add(s, c.tableId, c.deletes);
    }
    const named = new Map<string, string>();
    for (const t of served) {
      if (!/^[^.]+\.[^.]+$/.test(t.table)) fail(this, `table ${t.table} cannot name a search index: a table id is schema.table, without '.' in either name`);
      const alias = aliasOf(prefix, t.source, t.table);
      const first = named.get(alias);
      if (first !== undefined)
        fail(this, `table ${t.table} cannot be indexed beside ${first}: index names are lower case, so both would be ${alias} (docs/onboarding.md, "Names")`);
      named.set(alias, t.table);
    }
    this.indexPaths = [
      ...served.map((t) => aliasOf(prefix, t.source, t.table)),
      ...props.sources.map((s) => aliasOf(prefix, s.sourceId, `${s.heartbeatSchema}.${HEARTBEAT_TABLE}`)),
    ];
    this.searchIndex = { domain: this.domain, indexPaths: this.indexPaths, indexPrefix: this.indexPrefix };

    let securityGroups: ec2.ISecurityGroup[] | undefined;
    if (props.vpc) {
      const securityGroup = new ec2.SecurityGroup(this, 'SecurityGroup', {
        vpc: props.vpc,
        description: `Search sink ${this.sinkId}: the applier (${this.node.path})`,
        allowAllOutbound: false,
      });
      (props.awsApiEgress ?? AwsApiEgress.vpcEndpoints()).applyTo(securityGroup, props.vpc);
      securityGroups = [securityGroup];
    }
    this.connections = new ec2.Connections({ securityGroups, defaultPort: ec2.Port.tcp(443) });

    const applier = new CdcFunction(this, 'Applier', {
      handlerName: 'search-applier',
      description: `Applies change events to search sink ${this.sinkId} (${this.node.path})`,
      serviceName: 'cdc-search-applier',
      environment: {
        [EnvName.SINK_ID]: this.sinkId,
        [EnvName.CONTROL_TABLE]: props.controlPlane.controlPlaneTableName,
        [EnvName.SEARCH_ENDPOINT]: props.domain.domainEndpoint,
        [EnvName.SEARCH_TABLES]: JSON.stringify(served),
        [EnvName.SEARCH_INDEX_PREFIX]: prefix,
        // The resume replay reads the held range from the change log (docs/operations.md).
        [EnvName.CHANGE_LOG_STREAM]: props.changeLog.stream.streamName,
        ...payloadEnvironment(props.controlPlane),
      },
      memorySize: props.memorySize ?? Size.mebibytes(512),
      timeout: props.timeout ?? Duration.minutes(2),
      ...(props.vpc ? { vpc: props.vpc, vpcSubnets: props.vpcSubnets ?? { subnetType: ec2.SubnetType.PRIVATE_WITH_EGRESS }, securityGroups } : {}),
    });
    this.applier = applier.fn;
    grantApplierItems(props, applier.fn, this.sinkId, this.sourceIds);
    // Least privilege on the domain: HTTP verbs the applier uses, on its tables' index paths only
    // (each table's aliases, generations `.v…`, tombstone index `.deleted`, and their sub-paths).
    applier.role.addToPrincipalPolicy(
      new iam.PolicyStatement({
        actions: ['es:ESHttpGet', 'es:ESHttpHead', 'es:ESHttpPost', 'es:ESHttpPut'],
        resources: this.indexPaths.flatMap((p) => [`${props.domain.domainArn}/${p}`, `${props.domain.domainArn}/${p}/*`, `${props.domain.domainArn}/${p}.*`]),
      }),
    );
    const consumer = consumeChangeLog(this, applier, props, {
      kind: 'search',
      sinkId: this.sinkId,
      maxBatchingWindow,
      // The platform's key (docs/deploy.md, "Keys"): the change log's, for its dead letters and the applier's logs.
      deadLetterQueueEncryptionKey: props.changeLog.encryptionKey,
      keys: 'the control plane or change log',
    });
    this.deadLetterQueue = consumer.deadLetterQueue;
    const domainArnText = nagText(Stack.of(this).resolve(props.domain.domainArn));
    for (const p of this.indexPaths) {
      for (const suffix of ['/*', '.*']) {
        Validations.of(applier).acknowledge({
          id: `AwsSolutions-IAM5[Resource::${domainArnText}/${p}${suffix}]`,
          reason: `index paths of one table only: its aliases, index generations, tombstone index and their sub-paths (${p}${suffix})`,
        });
      }
    }

    this.alarms.push(
      ...sinkAlarms(this, props, {
        label: 'Search',
        sinkId: this.sinkId,
        freshnessTarget: this.freshnessTarget,
        consumer,
        applier: applier.fn,
        endToEndLag: (source) => this.metricEndToEndLag(source.sourceId),
        deadLetters: (source) => this.metricDeadLetters(source.sourceId),
        applyErrors: this.metricApplyErrors(),
        deadLettersWhat: ' that OpenSearch refused',
        applyErrorsCause: 'batches are retried, the domain may be throttling or unreachable.',
        queueTail: '',
        iteratorMeaning: '',
      }),
    );
  }

  metricEndToEndLag(sourceId: string, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(
      this,
      MetricName.END_TO_END_LAG,
      { [MetricDimension.SINK]: this.sinkId, [MetricDimension.SOURCE]: sourceId },
      { statistic: cloudwatch.Stats.MAXIMUM, ...props },
    );
  }

  metricDeadLetters(sourceId: string, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.DEAD_LETTERS, { [MetricDimension.STAGE]: this.sinkId, [MetricDimension.SOURCE]: sourceId }, props);
  }

  metricApplyErrors(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.APPLY_ERRORS, { [MetricDimension.SINK]: this.sinkId }, props);
  }

  metricEventsApplied(sourceId: string, props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return platformMetric(this, MetricName.EVENTS_APPLIED, { [MetricDimension.SINK]: this.sinkId, [MetricDimension.SOURCE]: sourceId }, props);
  }

  /** Age of the oldest change-log record the applier reads (`AWS/Lambda IteratorAge`), milliseconds; maximum per minute by default. */
  metricIteratorAge(props?: cloudwatch.MetricOptions): cloudwatch.Metric {
    return iteratorAgeMetric(this.applier, props);
  }
}
