/**
 * Snapshot worker (docs/snapshot.md): requests a first snapshot for every configured table that
 * has none, then works through the source's pending runs chunk by chunk until the invocation's
 * time is nearly up. A schedule starts it every minute; the run's cursor and lease live in the
 * control plane, so the next invocation resumes at the first incomplete chunk (a snapshot runs
 * as long as it needs, in Lambda-sized pieces, and a crashed invocation loses at most the chunk
 * it was reading).
 *
 * Chunk rows go to the raw stream as packed `cdc-slot/1` records with op `snapshot` (many rows
 * per record, lambda/core/capture/slot-record.ts, docs/snapshot.md "Packed records"); the normalizer
 * expands them and registers, versions and validates each row like every other record.
 *
 * Configuration (environment): `CDC_SOURCE_ID`, `CDC_TABLE_CONFIG`, `CDC_CONTROL_TABLE`,
 * `CDC_RAW_STREAM`, `CDC_SOURCE_URL` or `CDC_SOURCE_SECRET_ARN`, optional
 * `CDC_SNAPSHOT_REPLICA_SECRET_ARN`, `CDC_SNAPSHOT_BUDGET`, `CDC_SNAPSHOT_DB_INSTANCE` (the RDS
 * instance whose CloudWatch metrics join the pressure probe; the role then needs
 * `cloudwatch:GetMetricData`).
 */
import { createHash } from 'node:crypto';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Context } from 'aws-lambda';
import pg from 'pg';
import { DEFAULT_HEARTBEAT_SCHEMA, EnvName, HEARTBEAT_TABLE } from '../../contracts/env.ts';
import { MetricDimension, MetricName, METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import { dynamoDbClient, kinesisClient } from '../adapters/aws-clients.ts';
import { KinesisChangeLog } from '../adapters/change-log-kinesis.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { PostgresPressureProbe, PostgresSnapshotReader } from '../adapters/snapshot-postgres.ts';
import { CloudWatchPressureProbe, cloudWatchGetMetricData, combinePressure } from '../adapters/snapshot-cloudwatch.ts';
import { CloudWatchClient } from '@aws-sdk/client-cloudwatch';
import { replicaConnectionFromEnvironment, sourceConnectionFromEnvironment } from '../adapters/source-postgres.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { CdcError } from '../core/shared/errors.ts';
import { snapshotStreamRecords, type SnapshotRawRecord } from '../core/snapshot/snapshot.ts';
import { publishCatalogTypes, type DescribeTable } from '../core/shared/catalog-types.ts';
import { publishPartitionTree, type PartitionTree } from '../core/tables/partitions.ts';
import { AdaptivePacer, type PressureReading, type SourceBudget } from '../core/snapshot/snapshot-pacer.ts';
import { parseBudget } from '../runtime/environment.ts';
import { emfSnapshotMetrics, stallAgeSeconds } from '../runtime/metrics.ts';
import { planSnapshots, runPendingSnapshots, type RunOutcome, type SnapshotReader } from '../core/snapshot/snapshot-worker.ts';
import { parseTableConfig, parseTableRules, TableConfigIndex, type TableConfig, type TableRule } from '../core/tables/table-config.ts';
import { scanTables, type DiscoveryRecord } from '../core/tables/discovery.ts';
import type { TableFact } from '../core/operator/doctor-facts.ts';
import { listSourceTables, readCatalogColumnTypes, readPartitionTree, readTableFact } from '../adapters/source-facts-pg.ts';

const SERVICE = 'cdc-snapshot-worker';

export interface SnapshotWorkerDeps {
  source: string;
  tables: TableConfig[];
  /**
   * Capture-by-pattern: the rules and the catalog scan that lets new tables join (docs/onboarding.md).
   * Each invocation scans first: tables that joined get their snapshot requested.
   */
  discovery?: {
    rules: readonly TableRule[];
    declared: ReadonlySet<string>;
    listTables(): Promise<string[]>;
    tableFact(table: string, key: string[] | null): Promise<TableFact>;
    user(): Promise<string>;
  };
  control: ControlPlane;
  reader: SnapshotReader;
  publish: (records: SnapshotRawRecord[]) => Promise<void>;
  budget: SourceBudget;
  pressure?: { calibrate(): Promise<unknown>; read(): Promise<PressureReading> };
  metrics: Metrics;
  logger: Logger;
  owner: string;
  /**
   * The source catalog's types of a table (null when it does not exist): published for every
   * captured table not registered yet, first thing in each invocation, so that the normalizer
   * registers a table first seen through a type-less DMS record with them
   * (lambda/core/shared/catalog-types.ts). `catalogTables` are the declared tables to publish beyond
   * `tables` (the heartbeat table); tables a capture rule matched join them. @default none published
   */
  catalog?: { describe: DescribeTable; catalogTables?: readonly string[]; partitionTree?: () => Promise<PartitionTree> };
}

/** One invocation: plan, then run pending chunks while `timeLeftMs()` stays above `reserveMs`. */
export function createSnapshotWorker(d: SnapshotWorkerDeps): (timeLeftMs: () => number, reserveMs?: number) => Promise<Record<string, RunOutcome>> {
  const index = new TableConfigIndex(d.tables, d.discovery?.rules ?? []);
  let known: Map<string, DiscoveryRecord> | null = null;
  return async (timeLeftMs, reserveMs = 90_000) => {
    if (d.discovery) {
      const disc = d.discovery;
      // On AWS the DMS task selects the tables by the same patterns: capturing needs nothing here.
      const scan = await scanTables(
        {
          control: d.control,
          source: d.source,
          rules: disc.rules,
          declared: disc.declared,
          listTables: () => disc.listTables(),
          tableFact: (t, k) => disc.tableFact(t, k),
          user: await disc.user(),
          capture: () => undefined,
          release: () => undefined,
          actor: 'snapshot-worker:discovery',
        },
        known,
      );
      known = scan.known;
      if (scan.result.changed.length > 0)
        d.logger.info('Capture rules: tables changed', {
          changed: scan.result.changed.map((r) => ({ table: r.table, verdict: r.verdict, reasons: r.reasons })),
        });
    }
    if (d.catalog) {
      // Every table a capture rule matched (the DMS task selects by the same patterns, whatever the verdict), not the dropped ones.
      const captured = [...(known?.values() ?? [])].filter((r) => r.verdict !== 'dropped').map((r) => r.table);
      const written = await publishCatalogTypes(
        d.control,
        d.source,
        [...d.tables.map((t) => t.table), ...(d.catalog.catalogTables ?? []), ...captured],
        d.catalog.describe,
      );
      if (written.length > 0) d.logger.info('Published catalog types of tables not registered yet', { tables: written });
      // The partition trees, for the normalizer to name a partition's DMS records by their root (docs/partitioned-tables.md).
      if (d.catalog.partitionTree && (await publishPartitionTree(d.control, d.source, await d.catalog.partitionTree())))
        d.logger.info('Published the partition tree', {});
    }
    const requested = await planSnapshots(d.control, d.source, d.tables, 'snapshot-planner');
    if (requested.length > 0) d.logger.info('Requested first snapshots', { tables: requested });
    const outcomes = await runPendingSnapshots({
      control: d.control,
      reader: d.reader,
      publish: d.publish,
      source: d.source,
      owner: d.owner,
      rulesOf: (t) => index.columnRules(t),
      pollColumnOf: (t) => index.get(t)?.pollColumn,
      pacerFor: () => new AdaptivePacer({ budget: d.budget }),
      beforeRun: async () => {
        await d.pressure?.calibrate();
      },
      ...(d.pressure ? { pressure: () => d.pressure!.read() } : {}),
      metrics: emfSnapshotMetrics(d.metrics),
      shouldStop: () => timeLeftMs() < reserveMs,
      onState: (s) =>
        d.logger.debug('Snapshot progress', {
          table: s.table,
          rowsDone: s.rowsDone,
          estimatedRows: s.estimatedRows,
          etaSeconds: s.etaSeconds,
          throttle: s.throttle,
        }),
    });
    const m = d.metrics.singleMetric();
    m.clearDefaultDimensions();
    m.addDimensions({ [MetricDimension.SOURCE]: d.source });
    m.addMetric(MetricName.SNAPSHOT_STALL_AGE, MetricUnit.Seconds, stallAgeSeconds(await d.control.listSnapshots(d.source), Date.now()));
    return Object.fromEntries(outcomes);
  };
}

// Module scope: created once per execution environment.
const secrets = new SecretsManagerClient({});
let fromEnv: ReturnType<typeof createSnapshotWorker> | undefined;

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new CdcError('INVALID_CONFIG', `environment variable ${name} is not set`);
  return v;
}

/** The Lambda entry point (scheduled). */
export async function handler(_event: unknown, context: Context): Promise<Record<string, RunOutcome>> {
  if (!fromEnv) {
    const source = env(EnvName.SOURCE_ID);
    const endpoint = process.env[EnvName.AWS_ENDPOINT];
    const log = new KinesisChangeLog(kinesisClient(endpoint), env(EnvName.RAW_STREAM));
    const primary = await sourceConnectionFromEnvironment({ secrets, applicationName: SERVICE });
    const replica = await replicaConnectionFromEnvironment({ secrets, applicationName: `${SERVICE}-replica` });
    // The fence commits are not probe samples: a fence read ahead runs while the worker packs the chunk
    // before it, so its round trip includes the worker's own time (docs/snapshot.md, "The budget").
    const reader = new PostgresSnapshotReader({ primary, ...(replica ? { replica } : {}) });
    let probeClient: pg.Client | null = null;
    const probe = new PostgresPressureProbe(async () => {
      if (!probeClient) {
        probeClient = new pg.Client(primary);
        await probeClient.connect();
      }
      return probeClient;
    });
    const sha = (s: string) => createHash('sha256').update(s).digest('hex');
    // With the RDS instance named, its CloudWatch WriteLatency and CPUUtilization join the probe.
    const instance = process.env[EnvName.SNAPSHOT_DB_INSTANCE];
    const cw = instance ? new CloudWatchPressureProbe(cloudWatchGetMetricData(new CloudWatchClient({})), instance) : null;
    const pgProbe = probe;
    const pressure = cw
      ? {
          calibrate: async () => void (await Promise.all([pgProbe.calibrate(), cw.calibrate()])),
          read: async () => combinePressure(await pgProbe.read(), await cw.read()),
        }
      : pgProbe;
    const rules = parseTableRules(process.env[EnvName.TABLE_RULES]);
    let catalogClient: pg.Client | null = null;
    const catalog = async (): Promise<pg.Client> => {
      if (!catalogClient) {
        const c = new pg.Client(primary);
        c.on('error', () => {
          catalogClient = null;
        });
        await c.connect();
        catalogClient = c;
      }
      return catalogClient;
    };
    const declaredTables = parseTableConfig(process.env[EnvName.TABLE_CONFIG]).map((t) => t.table);
    const heartbeatTable = `${process.env[EnvName.HEARTBEAT_SCHEMA] || DEFAULT_HEARTBEAT_SCHEMA}.${HEARTBEAT_TABLE}`;
    fromEnv = createSnapshotWorker({
      ...(rules.length > 0
        ? {
            discovery: {
              rules,
              declared: new Set(declaredTables),
              listTables: async () => listSourceTables(await catalog()),
              tableFact: async (t: string, k: string[] | null) => readTableFact(await catalog(), t, k),
              user: async () => String((await (await catalog()).query('SELECT current_user AS u')).rows[0].u),
            },
          }
        : {}),
      source,
      // The heartbeat table is the platform's own: nothing to onboard.
      tables: parseTableConfig(process.env[EnvName.TABLE_CONFIG]).filter((t) => t.table !== heartbeatTable),
      catalog: {
        describe: async (t) => readCatalogColumnTypes(await catalog(), t),
        catalogTables: [heartbeatTable],
        partitionTree: async () => readPartitionTree(await catalog()),
      },
      control: new DynamoDbControlPlane(dynamoDbClient(endpoint), env(EnvName.CONTROL_TABLE)),
      reader,
      publish: (records) => log.publishEncoded(snapshotStreamRecords(records, sha).map((r) => ({ ...r, data: Buffer.from(r.data, 'utf8') }))),
      budget: parseBudget(process.env[EnvName.SNAPSHOT_BUDGET]),
      pressure,
      metrics: new Metrics({ namespace: process.env[EnvName.POWERTOOLS_METRICS_NAMESPACE] ?? METRICS_NAMESPACE, serviceName: SERVICE }),
      logger: new Logger({ serviceName: SERVICE }),
      owner: `lambda:${context.logStreamName ?? 'unknown'}`,
    });
  }
  return fromEnv(() => context.getRemainingTimeInMillis());
}
