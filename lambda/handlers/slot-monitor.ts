/**
 * Slot monitor (docs/failures.md): on a schedule, reads every replication slot of the source
 * with a read-only monitoring identity, assesses retained WAL and headroom
 * (lambda/core/capture/slot-monitor.ts), and publishes `SlotRetainedBytes` and `SlotHeadroomBytes` of the
 * capture slot and `SlotForeignInactiveBytes` (Embedded Metric Format) for the alarms; each
 * slot that is not `ok` is logged at warn (foreign inactive) or error (alarm, lost) level.
 *
 * A slot monitor that cannot reach the source throws, so the failure shows in the function's
 * errors, and the headroom metric goes missing, which its alarm treats as breaching.
 *
 * Configuration (environment): `CDC_SOURCE_ID`, `CDC_SLOT_NAME`, `CDC_SOURCE_URL` or
 * `CDC_SOURCE_SECRET_ARN` (the monitoring secret), `CDC_SLOT_WAL_BUDGET_BYTES` (optional),
 * `CDC_CONTROL_TABLE` (optional: where the latest report is kept for `cdc status`).
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import type { Context } from 'aws-lambda';
import pg from 'pg';
import { EnvName } from '../../contracts/env.ts';
import { MetricDimension, MetricName, METRICS_NAMESPACE } from '../../contracts/metrics.ts';
import { readMaxSlotWalKeepSize, readSlotFacts } from '../adapters/source-facts-pg.ts';
import { sourceConnectionFromEnvironment } from '../adapters/source-postgres.ts';
import { CdcError } from '../core/shared/errors.ts';
import { isSourceId } from '../core/shared/event.ts';
import { assessSlots, slotReportCheckpoint, storedSlotReport, type SlotReport } from '../core/capture/slot-monitor.ts';
import type { ControlPlane } from '../core/shared/control-plane.ts';
import { dynamoDbClient } from '../adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../adapters/control-plane-dynamodb.ts';

const SERVICE = 'cdc-slot-monitor';

export interface SlotMonitorDeps {
  source: string;
  slot: string;
  /** The source's declared WAL budget in bytes. */
  walBudgetBytes?: number | null;
  connection: pg.ClientConfig | (() => Promise<pg.ClientConfig>);
  logger?: Logger;
  metrics?: Metrics;
  /**
   * Where the latest report is kept for `cdc status` (the control plane: a checkpoint item of
   * consumer `slot-monitor:<source>`). A failed write is logged, never hides the metrics.
   */
  store?: Pick<ControlPlane, 'putCheckpoint'>;
  /** @default () => new Date() */
  now?: () => Date;
}

export type SlotMonitorHandler = (event?: unknown, context?: Context) => Promise<SlotReport>;

/** Reads the slot facts of one source over a fresh connection (read-only). */
export async function readSlotReport(client: Pick<pg.ClientBase, 'query'>, o: { slot: string; walBudgetBytes?: number | null }): Promise<SlotReport> {
  const [slots, maxKeep] = [await readSlotFacts(client), await readMaxSlotWalKeepSize(client)];
  return assessSlots(slots, { ownSlot: o.slot, maxSlotWalKeepSizeBytes: maxKeep, walBudgetBytes: o.walBudgetBytes ?? null });
}

/** Publishes a report as the contract metrics (the capture slot's retained bytes and headroom, the foreign inactive bytes). */
export function addSlotMetrics(metrics: Metrics, report: SlotReport): void {
  if (report.own?.retainedBytes !== null && report.own?.retainedBytes !== undefined)
    metrics.addMetric(MetricName.SLOT_RETAINED_BYTES, MetricUnit.Bytes, report.own.retainedBytes);
  if (report.own?.headroomBytes !== null && report.own?.headroomBytes !== undefined)
    metrics.addMetric(MetricName.SLOT_HEADROOM_BYTES, MetricUnit.Bytes, report.own.headroomBytes);
  metrics.addMetric(MetricName.SLOT_FOREIGN_INACTIVE_BYTES, MetricUnit.Bytes, report.foreignInactiveBytes);
}

/** Builds the handler from explicit dependencies (the local pipeline and tests use it). */
export function createSlotMonitorHandler(deps: SlotMonitorDeps): SlotMonitorHandler {
  if (!isSourceId(deps.source)) throw new CdcError('INVALID_CONFIG', `source id must be a lower-case identifier, got ${JSON.stringify(deps.source)}`);
  const logger = deps.logger ?? new Logger({ serviceName: SERVICE, persistentKeys: { source: deps.source, slot: deps.slot } });
  const metrics = deps.metrics ?? new Metrics({ namespace: METRICS_NAMESPACE, serviceName: SERVICE });
  metrics.clearDefaultDimensions();
  metrics.setDefaultDimensions({ [MetricDimension.SOURCE]: deps.source });
  return async (_event, context) => {
    if (context) logger.addContext(context);
    const config = typeof deps.connection === 'function' ? await deps.connection() : deps.connection;
    const client = new pg.Client({ application_name: SERVICE, ...config });
    client.on('error', () => undefined);
    await client.connect();
    try {
      // Read-only on purpose: the monitoring identity needs no write privilege anywhere.
      await client.query('SET SESSION CHARACTERISTICS AS TRANSACTION READ ONLY');
      const report = await readSlotReport(client, { slot: deps.slot, walBudgetBytes: deps.walBudgetBytes ?? null });
      addSlotMetrics(metrics, report);
      for (const r of report.slots) {
        if (r.level === 'lost' || r.level === 'alarm')
          logger.error(r.message, { slot: r.slot, slotLevel: r.level, retainedBytes: r.retainedBytes, headroomBytes: r.headroomBytes, walStatus: r.walStatus });
        else if (r.level === 'warn') logger.warn(r.message, { slot: r.slot, slotLevel: r.level, retainedBytes: r.retainedBytes });
      }
      if (!report.own) logger.error(`the capture slot ${deps.slot} does not exist on the source`, { slot: deps.slot });
      if (deps.store) {
        const [consumer, shard] = slotReportCheckpoint(deps.source);
        const stored = storedSlotReport(deps.source, deps.slot, report, (deps.now ?? (() => new Date()))());
        await deps.store.putCheckpoint(consumer, shard, JSON.stringify(stored)).catch((e: unknown) =>
          logger.error('could not keep the slot report in the control plane (cdc status shows the previous one, with its time)', {
            error: e instanceof Error ? e.message : String(e),
          }),
        );
      }
      return report;
    } finally {
      await client.end().catch(() => undefined);
      if (metrics.hasStoredMetrics()) metrics.publishStoredMetrics();
    }
  };
}

function budgetFromEnv(): number | null {
  const raw = process.env[EnvName.SLOT_WAL_BUDGET_BYTES];
  if (raw === undefined || raw.trim() === '') return null;
  const n = Number(raw);
  if (!Number.isSafeInteger(n) || n <= 0)
    throw new CdcError('INVALID_CONFIG', `${EnvName.SLOT_WAL_BUDGET_BYTES}: expected a positive integer of bytes, got ${JSON.stringify(raw)}`);
  return n;
}

// Module scope: created once per execution environment.
const secrets = new SecretsManagerClient({});
let fromEnv: SlotMonitorHandler | undefined;

/** The Lambda entry point, configured from the environment (built on the first invocation). */
export const handler: SlotMonitorHandler = async (event, context) => {
  if (!fromEnv) {
    const sourceId = process.env[EnvName.SOURCE_ID];
    const slot = process.env[EnvName.SLOT_NAME];
    if (!sourceId) throw new CdcError('INVALID_CONFIG', `environment variable ${EnvName.SOURCE_ID} is not set`);
    if (!slot) throw new CdcError('INVALID_CONFIG', `environment variable ${EnvName.SLOT_NAME} is not set`);
    fromEnv = createSlotMonitorHandler({
      source: sourceId,
      slot,
      walBudgetBytes: budgetFromEnv(),
      // The control table, when the stack gives one: the latest report for `cdc status`.
      ...(process.env[EnvName.CONTROL_TABLE] ? { store: new DynamoDbControlPlane(dynamoDbClient(), process.env[EnvName.CONTROL_TABLE]!) } : {}),
      connection: () => sourceConnectionFromEnvironment({ secrets, applicationName: SERVICE }),
    });
  }
  return fromEnv(event, context);
};
