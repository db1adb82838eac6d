/**
 * Outages delay, they never skip (docs/failures.md, "Control plane down during capture
 * checkpointing or during apply"): the whole local pipeline runs while its control plane
 * (DynamoDB Local, a real Java process) is stopped, with a bulk change still being applied by
 * the sink and changes (and heartbeats) still being committed on the source, so both the
 * capture's checkpointing and the appliers meet the outage.
 *
 * What must hold:
 * - the capture keeps running and retries (no loud stop, no skip); the slot is never confirmed
 *   past the checkpoint that is durable in the control plane (while it is down the slot does not
 *   move at all, though the source's WAL does);
 * - the sink's poller (mid-write when the outage begins) stalls and retries without limit, and so
 *   does the normalizer when raw records were left for it; nothing is dead-lettered;
 * - when DynamoDB Local is back (same port, same data) everything resumes by itself and the
 *   row-by-row verdict matches.
 *
 * The outage lasts `CDC_CP_OUTAGE_SECONDS` (default 8) seconds.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { startLocalStack, type LocalStack } from '../../local/stack.ts';
import { LocalPipeline } from '../../local/pipeline.ts';
import { MetricsCollector } from '../../local/metrics.ts';
import { renderStatusLine } from '../../local/status.ts';
import { captureCheckpointName } from '../../local/capture.ts';
import { compareLsn } from '../../local/slot.ts';
import { parseStoredSlotReport, slotReportCheckpoint } from '../../lambda/core/capture/slot-monitor.ts';
import { compareSourceAndWarehouse, formatVerdict } from '../../local/verdict.ts';
import { stackPorts, verdictDiagnostics } from '../helpers/verdict-diagnostics.ts';
import type { TableConfig } from '../../lambda/core/tables/table-config.ts';
import { until } from '../local/helpers.ts';
import { readShards } from '../helpers/kinesis-read.ts';

const OUTAGE_MS = Number(process.env.CDC_CP_OUTAGE_SECONDS ?? 8) * 1000;
const TABLES: TableConfig[] = [{ table: 'public.items', deleteMode: 'soft', mask: [], exclude: [] }];
const BULK = 1_000;
const T0 = Date.now();
/** Phase times on stdout with CDC_TEST_PHASES=1 (where a slow run spends its time). */
const phase = (what: string): void => void (process.env.CDC_TEST_PHASES && console.log(`[${((Date.now() - T0) / 1000).toFixed(1)} s] ${what}`));

let dir: string;
let stack: LocalStack | null = null;
let pipeline: LocalPipeline | null = null;
let restarted: DynamoDbLocal | null = null;
let source: pg.Client;

beforeAll(async () => {
  process.env.POWERTOOLS_LOG_LEVEL = 'CRITICAL';
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-cp-outage-'));
  stack = await startLocalStack({ stateDir: path.join(dir, 'state'), source: 'demo', fast: true });
  source = new pg.Client({ connectionString: stack.sourceUrl });
  source.on('error', () => undefined);
  await source.connect();
  await source.query('CREATE TABLE IF NOT EXISTS public.items (id int PRIMARY KEY, name text NOT NULL, qty int)');
}, 240_000);

afterAll(async () => {
  await pipeline?.stop().catch(() => undefined);
  await source?.end().catch(() => undefined);
  await restarted?.stop().catch(() => undefined);
  await stack?.stop().catch(() => undefined);
  if (dir) await rm(dir, { recursive: true, force: true });
}, 120_000);

async function slotLsn(slot: string): Promise<string> {
  const r = await source.query<{ lsn: string }>('SELECT confirmed_flush_lsn::text AS lsn FROM pg_replication_slots WHERE slot_name = $1', [slot]);
  return r.rows[0]!.lsn;
}

describe('control plane down during capture checkpointing and during apply', () => {
  it('retries everywhere, never moves the slot past the durable checkpoint, dead-letters nothing, and converges when it is back', async () => {
    const errors: Array<{ where: string; text: string }> = [];
    pipeline = new LocalPipeline({
      stack: stack!,
      source: 'demo',
      tables: TABLES,
      sinkId: 'warehouse',
      collector: new MetricsCollector(),
      heartbeatMs: 500,
      onError: (where, e) => errors.push({ where, text: e instanceof Error ? `${e.name}: ${e.message}` : String(e) }),
    });
    await pipeline.start();
    phase('started');
    await source.query("INSERT INTO items SELECT g, 'item ' || g, g FROM generate_series(1, 50) g");
    await pipeline.waitCaughtUp(120_000);
    phase('caught up');
    const slot = pipeline.capture.slot;
    const checkpoint = () => stack!.controlPlane.getCheckpoint(captureCheckpointName('demo'), slot);

    // A bulk change the sink is in the middle of applying when the control plane goes away: a
    // warehouse session locks the sink's delta table, so the applier's write waits on it.
    const warehouse = new pg.Client({ connectionString: stack!.warehouseUrl });
    warehouse.on('error', () => undefined);
    await warehouse.connect();
    await warehouse.query('BEGIN');
    await warehouse.query('LOCK TABLE demo_public._cdc_delta_items IN EXCLUSIVE MODE'); // the apply appends to the delta (docs/warehouse-apply.md)
    const normalizedBefore = pipeline.pollers.normalizer.stats.recordsDone;
    await source.query(`INSERT INTO items SELECT g, 'bulk ' || g, g FROM generate_series(1001, ${1000 + BULK}) g`);
    await until('the bulk change on the change log', () => pipeline!.pollers.normalizer.stats.recordsDone >= normalizedBefore + BULK, 120_000);
    const waiting = async () =>
      (await warehouse.query<{ n: number }>("SELECT count(*)::int AS n FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()"))
        .rows[0]!.n > 0;
    await until('the applier waiting in the middle of its write', waiting, 60_000);
    const sinkAtStop = pipeline.pollers.sink.stats.recordsDone;
    const { port } = stack!.dynamodb;
    await stack!.dynamodb.stop();
    const downAt = Date.now();
    phase('ddb stopped');
    // The applier's write goes through now; recording its progress in the control plane cannot.
    await warehouse.query('COMMIT');
    await warehouse.end();

    // The capture meets the outage at its next checkpoint (heartbeats commit every 500 ms).
    await until('the capture failing to checkpoint', () => errors.some((e) => e.where === 'capture'), 60_000);
    const frozen = await slotLsn(slot);
    phase('capture failed');
    let n = 50;
    while (Date.now() - downAt < OUTAGE_MS) {
      n++;
      await source.query('INSERT INTO items VALUES ($1, $2, $1)', [n, `item ${n}`]);
      await source.query('UPDATE items SET qty = qty + 1000 WHERE id = $1', [n - 25]);
      if (n % 3 === 0) await source.query('DELETE FROM items WHERE id = $1', [n - 40]);
      await new Promise((r) => setTimeout(r, 300));
    }

    // While down: the source's WAL moved on, the slot did not; nothing stopped, everything retries.
    const wal = (await source.query<{ lsn: string }>('SELECT pg_current_wal_lsn()::text AS lsn')).rows[0]!.lsn;
    expect(compareLsn(wal, frozen)).toBeGreaterThan(0);
    expect(await slotLsn(slot)).toBe(frozen);
    expect(pipeline.capture.stats.state).toBe('running');
    expect(pipeline.capture.stats.lastCommitLsn).toBe(frozen);
    expect(errors.filter((e) => e.where === 'capture').length).toBeGreaterThan(1);
    // The normalizer meets the outage only if raw records were left for it (the capture may have
    // met it first, in an idle moment, and published nothing since): records it has read but
    // cannot checkpoint show as a stall (local/poller.ts, ack).
    const rawPut = [...(await readShards(stack!.kinesis, stack!.streams.raw)).values()].reduce((n, r) => n + r.length, 0);
    phase(`raw records ${rawPut}, normalized ${pipeline.pollers.normalizer.stats.recordsDone}`);
    if (rawPut > pipeline.pollers.normalizer.stats.recordsDone) {
      await until('the normalizer showing its stall', () => pipeline!.pollers.normalizer.stats.stalledSince !== null, 30_000);
    }
    const consumerStats = (name: string) => pipeline!.snapshot().consumers.find((c) => c.consumer === name)!;
    const sink = consumerStats('warehouse');
    expect(sink.stalledMs, JSON.stringify(sink)).not.toBeNull();
    expect(sink.lastError).toBeTruthy();
    expect(pipeline.pollers.sink.stats.recordsDone).toBe(sinkAtStop);
    expect(pipeline.pollers.sink.stats.deadLetters + pipeline.pollers.normalizer.stats.deadLetters).toBe(0);

    // Back on the same port with the same data: the durable checkpoint is at or past the frozen slot.
    phase('outage over');
    restarted = await startDynamoDbLocal({ port, dbPath: path.join(stack!.stateDir, 'dynamodb') });
    expect(compareLsn((await checkpoint())!, frozen)).toBeGreaterThanOrEqual(0);
    // The slot is never confirmed past the durable checkpoint (slot read first: the checkpoint only grows).
    const moved = async (): Promise<boolean> => {
      const s = await slotLsn(slot);
      const c = (await checkpoint())!;
      expect(compareLsn(s, c), `slot ${s} vs checkpoint ${c}`).toBeLessThanOrEqual(0);
      return compareLsn(s, frozen) > 0;
    };
    phase('ddb back');
    await until('the slot moving on after the outage', moved, 120_000);
    phase('slot moved');
    await pipeline.waitCaughtUp(180_000);
    phase('caught up again');
    await until('stalls cleared', () => pipeline!.pollers.sink.stats.stalledSince === null && pipeline!.pollers.normalizer.stats.stalledSince === null, 60_000);

    const verdict = await compareSourceAndWarehouse({ sourceUrl: stack!.sourceUrl, warehouseUrl: stack!.warehouseUrl, source: 'demo', tables: TABLES });
    expect(
      verdict.match,
      verdict.match
        ? ''
        : [
            ...formatVerdict(verdict),
            ...(await verdictDiagnostics({
              controlPlane: stack!.controlPlane,
              warehouseUrl: stack!.warehouseUrl,
              source: 'demo',
              tables: TABLES.map((t) => t.table),
              ports: stackPorts(stack!),
            })),
          ].join('\n'),
    ).toBe(true);
    const rows = await source.query<{ n: number }>('SELECT count(*)::int AS n FROM items');
    expect(verdict.tables[0]!.warehouseRows).toBe(rows.rows[0]!.n);
    expect(await stack!.controlPlane.listDeadLetters()).toEqual([]);
    expect((await stack!.controlPlane.getTable('demo', 'public.items'))!.state).toBe('active');
    expect(pipeline.capture.stats.state).toBe('running');
    // The local slot monitor keeps its report in the control plane for cdc status (it kept measuring through the outage).
    const [consumer, shard] = slotReportCheckpoint('demo');
    await until(
      'a slot report after the outage',
      async () => {
        const text = await stack!.controlPlane.getCheckpoint(consumer, shard);
        return text !== null && Date.parse(parseStoredSlotReport(text, 'report').at) > downAt + OUTAGE_MS;
      },
      60_000,
    );
    const stored = parseStoredSlotReport((await stack!.controlPlane.getCheckpoint(consumer, shard))!, 'report');
    expect(stored.stop).toBeNull();
    expect(stored.slots.find((k) => k.ours)).toMatchObject({ slot, level: 'ok' });
    // And cdc local's own status shows the capture slot's retained WAL and headroom.
    await until(
      'the live status showing the slot',
      () => (pipeline!.snapshot().slots ?? []).some((k) => k.ours && k.retainedBytes !== null && k.headroomBytes !== null),
      30_000,
    );
    expect(renderStatusLine(pipeline.snapshot())).toMatch(/slot retains [0-9.]+ (B|KiB|MiB), headroom [0-9.]+ MiB/);
  }, 420_000);
});
