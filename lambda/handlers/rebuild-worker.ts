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
import type { ControlPlane, RebuildCheckpoint, RebuildRun } from '../core/shared/control-plane.ts';
import { CdcError, ConfigurationError } from '../core/shared/errors.ts';
import type { PayloadStore } from '../core/shared/payload-store.ts';
import type { RebuildRefusal } from '../core/rebuild/rebuild.ts';
import type { Archive } from '../core/rebuild/archive.ts';
import { S3Archive } from '../adapters/archive-s3.ts';
import { Rebuilder, type RebuildRequest } from '../adapters/rebuilder.ts';
import { ReplayReader } from '../adapters/replay-reader.ts';
import { poolFromEnvironment } from '../runtime/warehouse-pool.ts';

/** Time a slice leaves itself for the catch-up, swap, diff and record after its last batch. */
export const SLICE_MARGIN_MS = 4 * 60_000;

export type RebuildWorkerEvent =
  | { op: 'check'; request: { source: string; table: string; sink: string; from?: string } }
  | { op: 'slice'; id: string; request: RebuildRequest }
  | { op: 'abandon'; id: string; request: RebuildRequest; error?: unknown };

export type RebuildWorkerResult =
  | { refusal: RebuildRefusal | null }
  | { id: string; done: false; checkpoint: RebuildCheckpoint }
  | { id: string; done: true; outcome: 'done' | 'failed'; run: RebuildRun };

export interface RebuildWorkerDeps {
  sink: string;
  control: ControlPlane;
  pool: pg.Pool;
  archive: Archive;
  /** The replay reader's key prefix in the archive. @default 'change-log/' */
  archivePrefix?: string;
  kinesis: KinesisClient;
  stream: string;
  payloads?: PayloadStore;
  /** @default SLICE_MARGIN_MS */
  marginMs?: number;
  /** Events per shadow apply (tests: small, to make many batches). */
  batchSize?: number;
  duty?: number;
  /** Crash injection for tests (see `RebuildDeps.step`). */
  step?: (name: string) => void | Promise<void>;
  logger?: Pick<Logger, 'info' | 'warn' | 'error'>;
}

function text(v: unknown, what: string): string {
  if (typeof v !== 'string' || v === '') throw new CdcError('INVALID_REQUEST', `${what} must be a non-empty string, got ${JSON.stringify(v)}`);
  return v;
}

/** Checks an event's request (the operator function and the state machine send them; bad input names the field). */
export function parseRebuildRequest(v: unknown, sink: string): RebuildRequest {
  if (typeof v !== 'object' || v === null) throw new CdcError('INVALID_REQUEST', `request must be an object, got ${JSON.stringify(v)}`);
  const o = v as Record<string, unknown>;
  const r: RebuildRequest = {
    source: text(o.source, 'request.source'),
    table: text(o.table, 'request.table'),
    sink: text(o.sink, 'request.sink'),
    rehearse: o.rehearse === true,
    actor: typeof o.actor === 'string' && o.actor !== '' ? o.actor : 'operator',
  };
  if (o.from !== undefined && o.from !== null) r.from = text(o.from, 'request.from');
  if (r.sink !== sink) throw new CdcError('INVALID_REQUEST', `request.sink is ${r.sink}, but this rebuild worker serves sink ${sink}`);
  return r;
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
    control: deps.control,
    pool: deps.pool,
    reader,
    ...(deps.batchSize !== undefined ? { batchSize: deps.batchSize } : {}),
    ...(deps.duty !== undefined ? { duty: deps.duty } : {}),
    ...(deps.step ? { step: deps.step } : {}),
  });
  const log = deps.logger;
  return async (event, timeLeftMs = () => Number.POSITIVE_INFINITY) => {
    const op = (event as { op?: unknown })?.op;
    const e = event as { id?: unknown; request?: unknown; error?: unknown };
    if (op === 'check') {
      const r = parseRebuildRequest({ ...(e.request as object), rehearse: false, actor: 'check' }, deps.sink);
      const out = await rebuilder.check(r);
      return { refusal: out.refusal };
    }
    if (op === 'slice') {
      const id = text(e.id, 'id');
      const r = parseRebuildRequest(e.request, deps.sink);
      const out = await rebuilder.slice(r, id, { timeLeftMs, marginMs: deps.marginMs ?? SLICE_MARGIN_MS });
      if (!out.done) {
        log?.info('rebuild slice ended, more to do', { id, table: r.table, events: out.checkpoint.events, slices: out.checkpoint.slices });
        return { id, done: false, checkpoint: out.checkpoint };
      }
      log?.info('rebuild done', { id, table: r.table, mode: out.report.run.mode, durationMs: out.report.run.durationMs, diff: out.report.run.diff });
      return { id, done: true, outcome: 'done', run: out.report.run };
    }
    if (op === 'abandon') {
      const id = text(e.id, 'id');
      const r = parseRebuildRequest(e.request, deps.sink);
      const error = typeof e.error === 'string' ? e.error : JSON.stringify(e.error ?? 'the state machine gave up on a slice');
      const run = await rebuilder.abandon(r, id, error);
      log?.error('rebuild abandoned', { id, table: r.table, error });
      return { id, done: true, outcome: 'failed', run };
    }
    throw new CdcError('INVALID_REQUEST', `op must be check, slice or abandon, got ${JSON.stringify(op)}`);
  };
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
    control: new DynamoDbControlPlane(dynamoDbClient(), env(EnvName.CONTROL_TABLE), payloads),
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
