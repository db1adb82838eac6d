/**
 * A slot-path pipeline in one process for end-to-end tests: a real source database (embedded
 * PostgreSQL) read by the built-in slot capture, the normalizer, and warehouse appliers into a
 * second embedded database. The capture's publisher and the change log are in-process hand-offs
 * (the Kinesis hops are tested elsewhere); the control plane is the in-memory double of the port.
 * `apply` takes an applier index, so a test can play two shards' appliers (separate instances).
 */
import { expect } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import type { PostgresCluster } from '../../local/postgres.ts';
import { SlotCapture } from '../../local/capture.ts';
import type { RawRecord } from '../../local/raw-publisher.ts';
import { TableConfigIndex, type TableConfig } from '../../lambda/core/tables/table-config.ts';
import { Normalizer } from '../../lambda/core/capture/normalize.ts';
import { readCatalogTypes } from '../../lambda/core/shared/catalog-types.ts';
import { readPublishedPartitionTree } from '../../lambda/core/tables/partitions.ts';
import { validateChangeEvent, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { createWarehouseApplier, type ChangeRecord, type WarehouseApplier } from '../../lambda/handlers/warehouse-applier.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { until } from '../local/helpers.ts';

let n = 0;
const quiet = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

/** One source database, its capture, a normalizer and an applier into a fresh warehouse database. */
export async function slotPipeline(cluster: PostgresCluster, schema: string, tables: TableConfig[], prefix = 'p') {
  const id = `${prefix}${++n}`;
  await cluster.createDatabase(id);
  await cluster.createDatabase(`${id}_dw`);
  const src = new pg.Client({ connectionString: cluster.url(id) });
  src.on('error', () => undefined);
  await src.connect();
  await src.query(schema);
  const dw = new pg.Pool({ connectionString: cluster.url(`${id}_dw`), max: 2 });
  dw.on('error', () => undefined);
  const controlPlane = new MemoryControlPlane();
  const raw: RawRecord[] = [];
  const capture = new SlotCapture({
    source: id,
    sourceUrl: cluster.url(id),
    tables: new TableConfigIndex(tables),
    controlPlane,
    publish: async (r) => void raw.push(...r),
    idleMs: 20,
  });
  const log: ChangeEvent[] = [];
  const normalizer = new Normalizer<string>({
    source: id,
    tables: new TableConfigIndex(tables),
    controlPlane,
    changeLog: {
      encode: (e) => JSON.stringify(e),
      publishEncoded: async (records) => void log.push(...records.map((t) => validateChangeEvent(JSON.parse(t)))),
    },
    metrics: { count: () => undefined, milliseconds: () => undefined },
    logger: quiet,
    // The capture writes DMS records (docs/local.md, "DMS records"): types, keys and partitions as the normalizer reads them on AWS.
    catalogTypes: (t) => readCatalogTypes(controlPlane, id, t),
    partitionTree: () => readPublishedPartitionTree(controlPlane, id),
  });
  // One pool per applier, as each Lambda container (one per shard) has its own.
  const pools = [0, 1].map(() => {
    const pool = new pg.Pool({ connectionString: cluster.url(`${id}_dw`), max: 2 });
    pool.on('error', () => undefined);
    return pool;
  });
  const appliers: WarehouseApplier[] = pools.map((pool) =>
    createWarehouseApplier({
      controlPlane: controlPlane,
      pool,
      sinkId: 'wh',
      metrics: new Metrics({ namespace: 'test' }),
      logger: new Logger({ logLevel: 'ERROR' }),
    }),
  );
  let seq = 0;
  let normalized = 0;
  await capture.start();
  /** Waits until the capture has published everything committed so far, normalizes it and returns the new events. */
  const drain = async (): Promise<ChangeEvent[]> => {
    const since = Date.now();
    await until('the capture to catch up', () => capture.caughtUpSince(since), 30_000);
    const batch = normalizer.startBatch();
    const fresh = raw.slice(normalized);
    normalized = raw.length;
    const before = log.length;
    for (const r of fresh) await batch.add({ text: r.data, origin: r.label });
    await batch.flush();
    return log.slice(before);
  };
  const apply = async (events: readonly ChangeEvent[], shard = 0) => {
    const records: ChangeRecord[] = events.map((e) => ({ sequenceNumber: String(++seq), origin: `log/shard-${shard}/${seq}`, text: JSON.stringify(e) }));
    const out = await appliers[shard]!.applyRecords(records);
    expect(out.failed, JSON.stringify([...out.reasons])).toEqual([]);
    expect(await controlPlane.listDeadLetters(), 'dead letters').toEqual([]);
    return out;
  };
  const rows = async (sql: string) => (await dw.query(sql)).rows;
  const close = async () => {
    await capture.stop();
    await src.end();
    await dw.end();
    for (const pool of pools) await pool.end();
  };
  /** Hands records to the raw stream next to the capture's (the snapshot worker's publisher). */
  const publishRaw = async (records: readonly RawRecord[]) => void raw.push(...records);
  return { id, src, drain, apply, rows, close, controlPlane, publishRaw };
}
