/**
 * Heartbeat writer (invariant 10): upserts the source's row in `<schema>.cdc_heartbeat` with
 * `beat_at = now()` on the source database, so that a heartbeat change flows through capture,
 * normalizer and every sink even when no captured table changes; the sink appliers turn
 * heartbeat events into end-to-end lag. An idle table and a stalled pipeline look different.
 *
 * A schedule starts the Lambda every minute; one invocation writes `CDC_HEARTBEAT_BEATS` beats
 * 10 s apart on one connection, creating the table on first use. A failed beat is logged and the
 * next beat reconnects; an invocation with any failed beat ends in `HeartbeatFailedError`, so
 * the failure shows in the function's errors as well as in the lag.
 *
 * Configuration (environment): `CDC_SOURCE_ID`, `CDC_SOURCE_URL` or `CDC_SOURCE_SECRET_ARN`,
 * `CDC_HEARTBEAT_SCHEMA` (default `public`), `CDC_HEARTBEAT_BEATS` (default 6).
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Context } from 'aws-lambda';
import { DEFAULT_HEARTBEAT_SCHEMA, EnvName, ServiceName } from '../../contracts/env.ts';
import { MetricDimension, MetricName, METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import { sourceConnectionFromEnvironment } from '../adapters/source-postgres.ts';
import { HeartbeatWriter } from '../adapters/heartbeat-pg.ts';
import { CdcError, ConfigurationError } from '../core/shared/errors.ts';

const SERVICE = ServiceName.HEARTBEAT_WRITER;
export const DEFAULT_HEARTBEAT_BEATS = 6;
export const DEFAULT_HEARTBEAT_INTERVAL_MS = 10_000;

/** One or more beats of an invocation failed. */
export class HeartbeatFailedError extends CdcError {
  constructor(
    readonly failed: number,
    readonly attempted: number,
    lastError: string,
  ) {
    super('HEARTBEAT_FAILED', `${failed} of ${attempted} heartbeats failed; last error: ${lastError}`);
  }
}

export interface HeartbeatHandlerDeps {
  writer: HeartbeatWriter;
  /** Beats per invocation. @default 6 */
  beats?: number;
  /** Time from one beat's start to the next one's. @default 10 000 ms */
  intervalMs?: number;
  logger?: Logger;
  metrics?: Metrics;
  sleep?: (ms: number) => Promise<void>;
}

export interface HeartbeatResult {
  written: number;
  failed: number;
}

export type HeartbeatHandler = (event?: unknown, context?: Context) => Promise<HeartbeatResult>;

/** Builds the heartbeat handler from explicit dependencies (the local pipeline and tests use it). */
export function createHeartbeatHandler(deps: HeartbeatHandlerDeps): HeartbeatHandler {
  const beats = deps.beats ?? DEFAULT_HEARTBEAT_BEATS;
  if (!Number.isInteger(beats) || beats < 1)
    throw new ConfigurationError(`${EnvName.HEARTBEAT_BEATS}: expected a positive integer, got ${JSON.stringify(deps.beats)}`);
  const interval = deps.intervalMs ?? DEFAULT_HEARTBEAT_INTERVAL_MS;
  const sleep = deps.sleep ?? ((ms: number) => new Promise<void>((r) => setTimeout(r, ms)));
  const { writer } = deps;
  const logger = deps.logger ?? new Logger({ serviceName: SERVICE, persistentKeys: { source: writer.source } });
  // Powertools adds a `service` dimension; the platform's metrics carry exactly the dimensions of contracts/metrics.ts.
  const metrics = deps.metrics ?? new Metrics({ namespace: METRICS_NAMESPACE, serviceName: SERVICE });
  metrics.clearDefaultDimensions();
  metrics.setDefaultDimensions({ [MetricDimension.SOURCE]: writer.source });

  return async (_event, context) => {
    if (context) logger.addContext(context);
    let written = 0;
    let failed = 0;
    let lastError = '';
    try {
      for (let i = 0; i < beats; i++) {
        const started = Date.now();
        try {
          await writer.beat();
          written++;
          metrics.addMetric(MetricName.HEARTBEATS_WRITTEN, MetricUnit.Count, 1);
          logger.debug('Heartbeat written', { beat: i + 1 });
        } catch (e) {
          failed++;
          lastError = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
          logger.error('Heartbeat failed; the next beat reconnects', { beat: i + 1, error: lastError, table: writer.table });
        }
        if (i < beats - 1) await sleep(Math.max(0, interval - (Date.now() - started)));
      }
    } finally {
      await writer.close();
      if (metrics.hasStoredMetrics()) metrics.publishStoredMetrics();
    }
    if (failed > 0) throw new HeartbeatFailedError(failed, beats, lastError);
    return { written, failed };
  };
}

function beatsFromEnv(): number {
  const raw = process.env[EnvName.HEARTBEAT_BEATS];
  if (raw === undefined || raw.trim() === '') return DEFAULT_HEARTBEAT_BEATS;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < 1) throw new ConfigurationError(`${EnvName.HEARTBEAT_BEATS}: expected a positive integer, got ${JSON.stringify(raw)}`);
  return n;
}

// Module scope: created once per execution environment.
const secrets = new SecretsManagerClient({});
let fromEnv: HeartbeatHandler | undefined;

/** The Lambda entry point, configured from the environment (built on the first invocation). */
export const handler: HeartbeatHandler = async (event, context) => {
  if (!fromEnv) {
    const sourceId = process.env[EnvName.SOURCE_ID];
    if (!sourceId) throw new ConfigurationError(`environment variable ${EnvName.SOURCE_ID} is not set`);
    const writer = new HeartbeatWriter({
      source: sourceId,
      schema: process.env[EnvName.HEARTBEAT_SCHEMA] || DEFAULT_HEARTBEAT_SCHEMA,
      connection: () => sourceConnectionFromEnvironment({ secrets, applicationName: SERVICE }),
    });
    fromEnv = createHeartbeatHandler({ writer, beats: beatsFromEnv() });
  }
  return fromEnv(event, context);
};
