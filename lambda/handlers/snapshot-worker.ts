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
import { Metrics } from '@aws-lambda-powertools/metrics';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Context } from 'aws-lambda';
import { DEFAULT_HEARTBEAT_SCHEMA, EnvName, HEARTBEAT_TABLE } from '../../contracts/env.ts';
import { METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import { dynamoDbClient, kinesisClient } from '../adapters/aws-clients.ts';
import { KinesisChangeLog } from '../adapters/change-log-kinesis.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { lazyCatalogSession, PostgresSnapshotReader, pressureProbeOver } from '../adapters/snapshot-postgres.ts';
import { CloudWatchPressureProbe, cloudWatchGetMetricData, combinePressure } from '../adapters/snapshot-cloudwatch.ts';
import { CloudWatchClient } from '@aws-sdk/client-cloudwatch';
import { replicaConnectionFromEnvironment, sourceConnectionFromEnvironment } from '../adapters/source-postgres.ts';
import { CdcError } from '../core/shared/errors.ts';
import { snapshotStreamRecords } from '../core/snapshot/snapshot.ts';
import { createSnapshotInvocation, type SnapshotInvocationDeps } from '../core/snapshot/snapshot-invocation.ts';
import { parseBudget } from '../runtime/environment.ts';
import { emfSnapshotMetrics, emfStallAge } from '../runtime/metrics.ts';
import type { RunOutcome } from '../core/snapshot/snapshot-worker.ts';
import { parseTableConfig, parseTableRules } from '../core/tables/table-config.ts';
import { listSourceTables, readCatalogColumnTypes, readPartitionTree, readTableFact } from '../adapters/source-facts-pg.ts';

const SERVICE = 'cdc-snapshot-worker';

/** What the worker needs: the invocation's ports, with Powertools metrics and logger (tests build it over the local stand-ins). */
export interface SnapshotWorkerDeps extends Omit<SnapshotInvocationDeps, 'metrics' | 'stallAge' | 'logger'> {
  metrics: Metrics;
  logger: Logger;
}

/** One invocation: plan, then run pending chunks while `timeLeftMs()` stays above `reserveMs` (lambda/core/snapshot/snapshot-invocation.ts). */
export function createSnapshotWorker(d: SnapshotWorkerDeps): (timeLeftMs: () => number, reserveMs?: number) => Promise<Record<string, RunOutcome>> {
  return createSnapshotInvocation({ ...d, metrics: emfSnapshotMetrics(d.metrics), stallAge: emfStallAge(d.metrics, d.source), logger: d.logger });
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
    const sourceId = env(EnvName.SOURCE_ID);
    const endpoint = process.env[EnvName.AWS_ENDPOINT];
    const log = new KinesisChangeLog(kinesisClient(endpoint), env(EnvName.RAW_STREAM));
    const primary = await sourceConnectionFromEnvironment({ secrets, applicationName: SERVICE });
    const replica = await replicaConnectionFromEnvironment({ secrets, applicationName: `${SERVICE}-replica` });
    // The fence commits are not probe samples: a fence read ahead runs while the worker packs the chunk
    // before it, so its round trip includes the worker's own time (docs/snapshot.md, "The budget").
    const reader = new PostgresSnapshotReader({ primary, ...(replica ? { replica } : {}) });
    const probe = pressureProbeOver(primary);
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
    const catalog = lazyCatalogSession(primary);
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
      source: sourceId,
      // The heartbeat table is the platform's own: nothing to onboard.
      tables: parseTableConfig(process.env[EnvName.TABLE_CONFIG]).filter((t) => t.table !== heartbeatTable),
      catalog: {
        describe: async (t) => readCatalogColumnTypes(await catalog(), t),
        catalogTables: [heartbeatTable],
        partitionTree: async () => readPartitionTree(await catalog()),
      },
      controlPlane: new DynamoDbControlPlane(dynamoDbClient(endpoint), env(EnvName.CONTROL_TABLE)),
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
