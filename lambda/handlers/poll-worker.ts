/**
 * Poll worker (docs/polling.md): the polling fallback on AWS for the tables configured
 * `capture: 'poll'` (a source or table without log access). A schedule starts it every minute; each
 * invocation runs one pass over the polled tables (lambda/core/capture/poll.ts): every table read from its
 * cursor (a control-plane checkpoint) in (poll column, key) order, paged and paused by the snapshot
 * worker's pacer against the source budget, each page published to the raw stream as
 * `cdc-slot/1` records with `capture: "poll"` before its cursor moves. The normalizer registers,
 * transforms and validates them like every other record. It stops taking pages 60 s before its
 * time is up; the next invocation resumes at the cursor.
 *
 * Configuration (environment): `CDC_SOURCE_ID`, `CDC_TABLE_CONFIG`, `CDC_CONTROL_TABLE`,
 * `CDC_RAW_STREAM`, `CDC_SOURCE_URL` or `CDC_SOURCE_SECRET_ARN`, optional
 * `CDC_SNAPSHOT_REPLICA_SECRET_ARN` (pages are read from the replica), `CDC_SNAPSHOT_BUDGET`.
 */
import { recordedSpace } from '../core/shared/position-space.ts';
import { createHash } from 'node:crypto';
import { Logger } from '@aws-lambda-powertools/logger';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Context } from 'aws-lambda';
import pg from 'pg';
import { EnvName } from '../../contracts/env.ts';
import { dynamoDbClient, kinesisClient } from '../adapters/aws-clients.ts';
import { KinesisChangeLog } from '../adapters/change-log-kinesis.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { PostgresPressureProbe, PostgresSnapshotReader } from '../adapters/snapshot-postgres.ts';
import { replicaConnectionFromEnvironment, sourceConnectionFromEnvironment } from '../adapters/source-postgres.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { CdcError } from '../core/shared/errors.ts';
import { checkpointCursorStore, pollPass, type PollReader } from '../core/capture/poll.ts';
import { AdaptivePacer, type PressureReading, type SourceBudget } from '../core/snapshot/snapshot-pacer.ts';
import { snapshotPartitionKey } from '../core/snapshot/snapshot.ts';
import type { SlotRecord } from '../core/capture/slot-record.ts';
import { parseTableConfig, type TableConfig } from '../core/tables/table-config.ts';
import { parseBudget } from '../runtime/environment.ts';

const SERVICE = 'cdc-poll-worker';

export interface PollWorkerDeps {
  source: string;
  tables: TableConfig[];
  controlPlane: ControlPlane;
  reader: PollReader;
  publish: (records: SlotRecord[]) => Promise<void>;
  budget: SourceBudget;
  pressure?: { calibrate(): Promise<unknown>; read(): Promise<PressureReading> };
  logger: Pick<Logger, 'info' | 'debug'>;
}

/** One invocation: one pass over the polled tables while `timeLeftMs()` stays above `reserveMs`. Returns rows read per table. */
export function createPollWorker(d: PollWorkerDeps): (timeLeftMs: () => number, reserveMs?: number) => Promise<Record<string, number>> {
  const polled = d.tables.filter((t) => t.capture === 'poll');
  const cursors = checkpointCursorStore(d.controlPlane, d.source);
  let calibrated = false;
  return async (timeLeftMs, reserveMs = 60_000) => {
    if (polled.length === 0) return {};
    if (d.pressure && !calibrated) {
      await d.pressure.calibrate();
      calibrated = true;
    }
    const rows = await pollPass({
      source: d.source,
      tables: polled.map((t) => ({ table: t.table, pollColumn: t.pollColumn!, rules: { mask: t.mask, exclude: t.exclude } })),
      reader: d.reader,
      cursors,
      spaceOf: async (t) => recordedSpace(await d.controlPlane.getTable(d.source, t)),
      publish: d.publish,
      pacerFor: () => new AdaptivePacer({ budget: d.budget }),
      ...(d.pressure ? { pressure: () => d.pressure!.read() } : {}),
      shouldStop: () => timeLeftMs() < reserveMs,
      onPage: (table, p) => d.logger.debug('Poll page', { table, rows: p.rows, pages: p.pages, throttle: p.throttle, horizon: p.horizon ?? null }),
    });
    const out = Object.fromEntries(rows);
    d.logger.info('Poll pass', { rows: out });
    return out;
  };
}

// Module scope: created once per execution environment.
const secrets = new SecretsManagerClient({});
let fromEnv: ReturnType<typeof createPollWorker> | undefined;

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new CdcError('INVALID_CONFIG', `environment variable ${name} is not set`);
  return v;
}

/** The Lambda entry point (scheduled). */
export async function handler(_event: unknown, context: Context): Promise<Record<string, number>> {
  if (!fromEnv) {
    const endpoint = process.env[EnvName.AWS_ENDPOINT];
    const log = new KinesisChangeLog(kinesisClient(endpoint), env(EnvName.RAW_STREAM));
    const primary = await sourceConnectionFromEnvironment({ secrets, applicationName: SERVICE });
    const replica = await replicaConnectionFromEnvironment({ secrets, applicationName: `${SERVICE}-replica` });
    let probeClient: pg.Client | null = null;
    const probe = new PostgresPressureProbe(async () => {
      if (!probeClient) {
        probeClient = new pg.Client(primary);
        await probeClient.connect();
      }
      return probeClient;
    });
    const sha = (s: string) => createHash('sha256').update(s).digest('hex');
    fromEnv = createPollWorker({
      source: env(EnvName.SOURCE_ID),
      tables: parseTableConfig(process.env[EnvName.TABLE_CONFIG]),
      controlPlane: new DynamoDbControlPlane(dynamoDbClient(endpoint), env(EnvName.CONTROL_TABLE)),
      reader: new PostgresSnapshotReader({ primary, ...(replica ? { replica } : {}), applicationName: SERVICE }),
      publish: (records) =>
        log.publishEncoded(
          records.map((r) => ({
            partitionKey: snapshotPartitionKey(r, sha),
            data: Buffer.from(JSON.stringify(r), 'utf8'),
            label: `${r.source}/${r.table}@poll`,
          })),
        ),
      budget: parseBudget(process.env[EnvName.SNAPSHOT_BUDGET]),
      pressure: { calibrate: () => probe.calibrate(), read: () => probe.read() },
      logger: new Logger({ serviceName: SERVICE }),
    });
  }
  return fromEnv(() => context.getRemainingTimeInMillis());
}
