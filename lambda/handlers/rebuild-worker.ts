/**
 * Rebuild worker Lambda (docs/rebuild.md, "On AWS"): rebuilds one table of one warehouse sink
 * into a shadow and swaps it in, in slices that each fit one invocation. It runs the rebuild of
 * `cdc rebuild` (lambda/adapters/rebuilder.ts `Rebuilder`: the replay reader over the archive in S3 and the
 * change-log stream, the live apply code into the shadow), with its checkpoint in the control
 * plane, so a slice that stops (time, or a crash) is gone on from by the next one.
 *
 * Events:
 * - `{ "op": "check", "request": { source, table, sink, from? } }` → `{ refusal }`: whether the
 *   rebuild may run (table state, the sink's hold, another rebuild under way, the history in the
 *   archive). The operator function invokes it synchronously before it starts a rebuild.
 * - `{ "op": "slice", "id", "request" }` → `{ id, done, outcome?, checkpoint?, run? }`: one slice;
 *   the rebuild's state machine invokes it until `done`. An error is thrown (the state machine
 *   retries the slice, which goes on from the checkpoint).
 * - `{ "op": "abandon", "id", "request", "error" }` → `{ id, done: true, outcome: "failed" }`: the
 *   state machine gave up on the slice; the run is recorded failed (audited) and the sink's
 *   rebuild slot freed.
 *
 * Configuration (environment): `CDC_CONTROL_TABLE`, `CDC_SINK_ID`, `CDC_WAREHOUSE_SECRET_ARN` (or
 * `CDC_WAREHOUSE_URL`), `CDC_CHANGE_LOG_STREAM`, `CDC_ARCHIVE_BUCKET`, optional
 * `CDC_ARCHIVE_PREFIX` and `CDC_PAYLOAD_BUCKET` (events stored out of line).
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { S3Client } from '@aws-sdk/client-s3';
import type { KinesisClient } from '@aws-sdk/client-kinesis';
import type { Context } from 'aws-lambda';
import type pg from 'pg';
import { EnvName, ServiceName } from '../../contracts/env.ts';
import { dynamoDbClient, kinesisClient } from '../adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';
import { S3PayloadStore } from '../adapters/payload-store-s3.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { ConfigurationError } from '../core/shared/errors.ts';
import type { PayloadStore } from '../core/shared/payload-store.ts';
import { runRebuildInvocation, type RebuildWorkerEvent, type RebuildWorkerResult } from '../core/rebuild/rebuild-invocation.ts';
import type { Archive } from '../core/rebuild/archive.ts';
import { S3Archive } from '../adapters/archive-s3.ts';
import { Rebuilder } from '../adapters/rebuilder.ts';
import { ReplayReader } from '../adapters/replay-reader.ts';
import { poolFromEnvironment } from '../runtime/warehouse-pool.ts';

export type { RebuildWorkerEvent, RebuildWorkerResult } from '../core/rebuild/rebuild-invocation.ts';

export interface RebuildWorkerDeps {
  sink: string;
  controlPlane: ControlPlane;
  pool: pg.Pool;
  archive: Archive;
  /** The replay reader's key prefix in the archive. @default 'change-log/' */
  archivePrefix?: string;
  kinesis: KinesisClient;
  stream: string;
  payloads?: PayloadStore;
  /** @default SLICE_MARGIN_MS (lambda/core/rebuild/rebuild-invocation.ts) */
  marginMs?: number;
  /** Events per shadow apply (tests: small, to make many batches). */
  batchSize?: number;
  duty?: number;
  /** Crash injection for tests (see `RebuildDeps.step`). */
  step?: (name: string) => void | Promise<void>;
  logger?: Pick<Logger, 'info' | 'warn' | 'error'>;
}

/** The worker over explicit dependencies (tests run it in process against the local stand-ins). */
export function createRebuildWorker(deps: RebuildWorkerDeps): (event: RebuildWorkerEvent, timeLeftMs?: () => number) => Promise<RebuildWorkerResult> {
  const reader = new ReplayReader({
    archive: deps.archive,
    ...(deps.archivePrefix !== undefined ? { prefix: deps.archivePrefix } : {}),
    kinesis: deps.kinesis,
    stream: deps.stream,
    ...(deps.payloads ? { payloads: deps.payloads } : {}),
  });
  const rebuilder = new Rebuilder({
    controlPlane: deps.controlPlane,
    pool: deps.pool,
    reader,
    ...(deps.batchSize !== undefined ? { batchSize: deps.batchSize } : {}),
    ...(deps.duty !== undefined ? { duty: deps.duty } : {}),
    ...(deps.step ? { step: deps.step } : {}),
  });
  return (event, timeLeftMs) => runRebuildInvocation(rebuilder, deps, event, timeLeftMs);
}

const logger = new Logger({ serviceName: process.env[EnvName.POWERTOOLS_SERVICE_NAME] ?? ServiceName.REBUILD_WORKER });
let built: Promise<ReturnType<typeof createRebuildWorker>> | undefined;

function env(name: string): string {
  const v = process.env[name];
  if (!v) throw new ConfigurationError(`environment variable ${name} is not set`);
  return v;
}

async function fromEnvironment(): Promise<ReturnType<typeof createRebuildWorker>> {
  const s3 = new S3Client({});
  const payloadBucket = process.env[EnvName.PAYLOAD_BUCKET];
  const payloads = payloadBucket ? new S3PayloadStore(s3, payloadBucket, '', process.env[EnvName.PAYLOAD_KMS_KEY_ARN] || undefined) : undefined;
  return createRebuildWorker({
    sink: env(EnvName.SINK_ID),
    controlPlane: new DynamoDbControlPlane(dynamoDbClient(), env(EnvName.CONTROL_TABLE), payloads),
    pool: await poolFromEnvironment(),
    archive: new S3Archive(s3, env(EnvName.ARCHIVE_BUCKET)),
    archivePrefix: process.env[EnvName.ARCHIVE_PREFIX] || 'change-log/',
    kinesis: kinesisClient(),
    stream: env(EnvName.CHANGE_LOG_STREAM),
    ...(payloads ? { payloads } : {}),
    logger,
  });
}

/** Lambda entry point (the operator function's check; the rebuild state machine's slices). */
export const handler = async (event: RebuildWorkerEvent, context: Context): Promise<RebuildWorkerResult> => {
  logger.addContext(context);
  built ??= fromEnvironment();
  const worker = await built.catch((err: unknown) => {
    built = undefined;
    throw err;
  });
  return worker(event, () => context.getRemainingTimeInMillis());
};
