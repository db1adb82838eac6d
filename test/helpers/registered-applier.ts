/**
 * The warehouse applier as the writer tests drive it: tables registered in a control plane at
 * schema version 1, and `createWarehouseApplier` over a writer with silent logs and metrics and no
 * inline merges.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import type pg from 'pg';
import { createWarehouseApplier, type BatchOutcome, type ChangeRecord } from '../../lambda/handlers/warehouse-applier.ts';
import type { ColumnDef, ControlPlane, DeleteMode } from '../../lambda/core/shared/control-plane.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import type { Warehouse } from '../../lambda/core/warehouse/warehouse-port.ts';

/** Registers each of `tables` of `source` as active at version 1 with `columns`, keyed by `id`, at `at` (default now). */
export async function registerTables(
  cp: ControlPlane,
  source: string,
  tables: readonly string[],
  columns: ColumnDef[],
  deleteMode: DeleteMode = 'soft',
  at = new Date().toISOString(),
): Promise<void> {
  for (const table of tables)
    await cp.registerTable(
      { source, table, state: 'active', currentVersion: 1, deleteMode, preImage: 'key', stateReason: null, updatedAt: at },
      { source, table, version: 1, columns, key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: at },
      { at, actor: 'test', action: 'register-table', source, table, outcome: 'done', detail: {} },
    );
}

/** The sink `sinkId`'s applier over `writer`. */
export function quietApplier(controlPlane: ControlPlane, pool: pg.Pool, writer: Warehouse, sinkId = 'warehouse'): ReturnType<typeof createWarehouseApplier> {
  return createWarehouseApplier({
    controlPlane,
    pool,
    sinkId,
    metrics: new Metrics({ namespace: 'test' }),
    logger: new Logger({ serviceName: 'test', logLevel: 'SILENT' }),
    writer,
    merge: { inline: false },
  });
}

/**
 * Applies `records` through `applier` while an in-process loader loads (its cadence squeezed: `flush` runs until the
 * apply returns, which it does only once the load carrying the batch has committed); the batch's outcome.
 */
export async function applyWhileLoading(
  applier: Pick<ReturnType<typeof createWarehouseApplier>, 'applyRecords'>,
  records: readonly ChangeRecord[],
  flush: () => Promise<unknown>,
): Promise<BatchOutcome> {
  const pending = applier.applyRecords(records);
  let settled = false;
  void pending.finally(() => (settled = true)).catch(() => undefined);
  while (!settled) {
    await flush();
    await new Promise((r) => setTimeout(r, 2));
  }
  return pending;
}
