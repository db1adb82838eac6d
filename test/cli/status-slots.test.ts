/**
 * Slot columns in `cdc status` (docs/doctor.md, "The slot monitor"; docs/operations.md): the slot
 * monitor's handler runs against embedded PostgreSQL with real replication slots (the capture's
 * and an inactive one of another tool pinning WAL) and keeps its report in the control plane
 * (DynamoDB Local); `cdc status` through the operator handler shows per slot its owner, active
 * or not, wal_status, confirmed position, retained WAL, headroom, level and age, in human and
 * `--json` output, and the named stop once the capture's slot is gone or invalidated.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { PassThrough } from 'node:stream';
import pg from 'pg';
import { main } from '../../bin/cli/main.ts';
import { setDoorOpener } from '../../bin/cli/operator.ts';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import type { TableRecord } from '../../lambda/core/shared/control-plane.ts';
import type { StatusReport } from '../../lambda/core/operator/operator.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { assessSlots, parseStoredSlotReport, slotReportCheckpoint, storedSlotReport } from '../../lambda/core/capture/slot-monitor.ts';
import type { SlotFact } from '../../lambda/core/operator/doctor-facts.ts';
import { createOperatorHandler } from '../../lambda/handlers/operator.ts';
import { createSlotMonitorHandler } from '../../lambda/handlers/slot-monitor.ts';
import { EnvName } from '../../contracts/env.ts';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';

const MIB = 1024 ** 2;
let cluster: PostgresCluster;
let ddb: DynamoDbLocal;
let cp: DynamoDbControlPlane;
let sql: pg.Client;

async function run(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const stdout = new PassThrough();
  const stderr = new PassThrough();
  let out = '';
  let err = '';
  stdout.on('data', (d: Buffer) => (out += d.toString()));
  stderr.on('data', (d: Buffer) => (err += d.toString()));
  const code = await main([...args, '--actor', 'tester'], { stdin: new PassThrough(), stdout, stderr });
  return { code, out, err };
}

async function register(sourceId: string, table: string): Promise<void> {
  const at = new Date().toISOString();
  const rec: TableRecord = {
    source: sourceId,
    table,
    state: 'active',
    currentVersion: 1,
    deleteMode: 'soft',
    preImage: 'key',
    stateReason: null,
    updatedAt: at,
  };
  await cp.registerTable(
    rec,
    {
      source: sourceId,
      table,
      version: 1,
      columns: [{ name: 'id', type: 'integer', nullable: false }],
      key: ['id'],
      effectivePosition: makePosition(1n, 0),
      registeredAt: at,
    },
    { at, actor: 'test', action: 'register', source: sourceId, table, outcome: 'done', detail: {} },
  );
}

beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  const [c, d] = await Promise.all([startPostgres({ fast: true }), startDynamoDbLocal()]);
  cluster = c;
  ddb = d;
  await cluster.createDatabase('shop');
  sql = new pg.Client({ connectionString: cluster.url('shop') });
  await sql.connect();
  const client = dynamoDbClient(ddb.endpoint);
  await createControlTable(client, 'cdc-control');
  cp = new DynamoDbControlPlane(client, 'cdc-control');
  await register('shop', 'public.orders');
  await register('other', 'public.things');
  const handler = createOperatorHandler({
    controlPlane: cp,
    env: { [EnvName.CHANGE_LOG_RETENTION_MS]: String(24 * 3_600_000) },
    logger: { info: () => undefined, warn: () => undefined },
  });
  setDoorOpener(async () => ({
    running: true,
    invoke: async (path: string, body: unknown) =>
      JSON.parse(JSON.stringify(await handler({ path, caller: 'tester', body: JSON.parse(JSON.stringify(body)) }))),
    close: async () => undefined,
  }));
}, 180_000);

afterAll(async () => {
  setDoorOpener(null);
  await sql?.end().catch(() => undefined);
  await ddb?.stop();
  await cluster?.stop();
});

describe('cdc status: the replication slots of each source', () => {
  it('shows every slot with its confirmed position, retained WAL and headroom, in human and --json output; the named stop once the capture slot is gone', async () => {
    // The capture's slot, and another tool's slot left inactive while WAL is written after it.
    await sql.query("SELECT pg_create_logical_replication_slot('cdc_shop', 'test_decoding')");
    await sql.query("SELECT pg_create_logical_replication_slot('old_tool', 'test_decoding')");
    await sql.query('CREATE TABLE junk AS SELECT g, repeat(md5(g::text), 20) AS pad FROM generate_series(1, 40000) g');
    const monitor = createSlotMonitorHandler({
      source: 'shop',
      slot: 'cdc_shop',
      walBudgetBytes: 1024 * MIB,
      connection: { connectionString: cluster.url('shop') },
      store: cp,
      logger: { error: () => undefined, warn: () => undefined, addContext: () => undefined } as never,
    });
    const measured = await monitor();
    const facts = (
      await sql.query<{ slot_name: string; lsn: string }>('SELECT slot_name, confirmed_flush_lsn::text AS lsn FROM pg_replication_slots ORDER BY slot_name')
    ).rows;
    const lsnOf = (s: string) => facts.find((f) => f.slot_name === s)!.lsn;

    const json = await run('status', '--json');
    expect(json.code, json.err).toBe(0);
    const report = JSON.parse(json.out) as StatusReport;
    const shop = report.slots!.find((s) => s.source === 'shop')!;
    expect(shop.problem).toBeNull();
    expect(shop.report!.stop).toBeNull();
    const own = shop.report!.slots.find((s) => s.slot === 'cdc_shop')!;
    expect(own).toMatchObject({ ours: true, active: false, confirmedLsn: lsnOf('cdc_shop'), level: 'ok', limitBytes: 1024 * MIB });
    expect(own.retainedBytes).toBe(measured.own!.retainedBytes);
    expect(own.retainedBytes!).toBeGreaterThan(16 * MIB);
    expect(own.headroomBytes).toBe(1024 * MIB - own.retainedBytes!);
    const other = shop.report!.slots.find((s) => s.slot === 'old_tool')!;
    expect(other).toMatchObject({ ours: false, active: false, confirmedLsn: lsnOf('old_tool'), level: 'warn' });
    expect(shop.report!.foreignInactiveBytes).toBe(other.retainedBytes);
    // A source whose monitor has not reported says so rather than showing nothing.
    expect(report.slots!.find((s) => s.source === 'other')).toEqual({ source: 'other', report: null, problem: expect.stringMatching(/not reported/) });

    const human = await run('status');
    if (process.env.CDC_TEST_SHOW) console.log(human.out);
    expect(human.code, human.err).toBe(0);
    const header = human.out.split('\n').find((l) => l.startsWith('SOURCE  SLOT'))!;
    expect(header.split(/\s{2,}/)).toEqual(['SOURCE', 'SLOT', 'OWNER', 'ACTIVE', 'WAL STATUS', 'CONFIRMED', 'RETAINED', 'HEADROOM', 'LEVEL', 'MEASURED']);
    const row = (slot: string) =>
      human.out
        .split('\n')
        .find((l) => l.startsWith('shop') && l.split(/\s+/)[1] === slot)!
        .split(/\s{2,}/);
    expect(row('cdc_shop').slice(0, 6)).toEqual(['shop', 'cdc_shop', 'capture', 'no', own.walStatus ?? '-', lsnOf('cdc_shop')]);
    expect(row('cdc_shop')[6]).toMatch(/^\d+\.\d MiB$/);
    expect(row('cdc_shop')[7]).toMatch(/^\d+\.\d MiB$/);
    expect(row('cdc_shop')[8]).toBe('ok');
    expect(row('old_tool').slice(2, 4)).toEqual(['other', 'no']);
    expect(row('old_tool')[8]).toBe('warn');
    expect(human.out).toMatch(/WARN shop: slot old_tool \(not the capture's\): inactive.*pg_drop_replication_slot\('old_tool'\)/);
    expect(human.out).toMatch(/slots of other: unknown: the slot monitor has not reported/);

    // The capture's slot is dropped: the next report carries the named stop.
    await sql.query("SELECT pg_drop_replication_slot('cdc_shop')");
    await monitor();
    const gone = JSON.parse((await run('status', '--json')).out) as StatusReport;
    expect(gone.slots!.find((s) => s.source === 'shop')!.report!.stop).toMatch(/^HISTORY_GAP: the capture slot "cdc_shop" does not exist/);
    const goneHuman = (await run('status')).out;
    expect(goneHuman).toMatch(/^shop\s+cdc_shop\s+capture\s+-\s+missing\s+-\s+-\s+-\s+lost\s+/m);
    expect(goneHuman).toMatch(/STOP shop slot cdc_shop: HISTORY_GAP: the capture slot "cdc_shop" does not exist on the source/);
    // One table's status (of source shop) shows only that source's slots.
    const one = JSON.parse((await run('status', 'public.orders', '--json')).out) as StatusReport;
    expect(one.slots!.map((s) => s.source)).toEqual(['shop']);
  }, 120_000);

  it('names an invalidated capture slot as a stop, and an unreadable stored report as a problem (never a guess)', async () => {
    const fact = (o: Partial<SlotFact>): SlotFact => ({
      name: 'cdc_shop',
      slotType: 'logical',
      plugin: 'test_decoding',
      database: 'shop',
      active: false,
      walStatus: 'reserved',
      invalidationReason: null,
      restartLsn: '0/1',
      confirmedFlushLsn: '0/2',
      retainedBytes: 10,
      safeWalBytes: null,
      ...o,
    });
    const lost = storedSlotReport(
      'shop',
      'cdc_shop',
      assessSlots([fact({ walStatus: 'lost', invalidationReason: 'wal_removed' })], { ownSlot: 'cdc_shop', maxSlotWalKeepSizeBytes: MIB }),
      new Date(),
    );
    expect(lost.stop).toMatch(/^HISTORY_GAP: capture slot cdc_shop was invalidated \(wal_status lost, reason wal_removed\)/);
    expect(storedSlotReport('shop', 'cdc_shop', assessSlots([fact({})], { ownSlot: 'cdc_shop', maxSlotWalKeepSizeBytes: MIB }), new Date()).stop).toBeNull();
    expect(parseStoredSlotReport(JSON.stringify(lost), 'x')).toEqual(lost);
    expect(() => parseStoredSlotReport('{', 'item a/b')).toThrow(/item a\/b: the stored slot report is not JSON/);
    expect(() => parseStoredSlotReport(JSON.stringify({ ...lost, level: 'fine' }), 'item a/b')).toThrow(/no valid level/);
    const [consumer, shard] = slotReportCheckpoint('other');
    await cp.putCheckpoint(consumer, shard, JSON.stringify({ ...lost, slots: 'nope' }));
    const r = JSON.parse((await run('status', '--json')).out) as StatusReport;
    expect(r.slots!.find((s) => s.source === 'other')).toEqual({
      source: 'other',
      report: null,
      problem: 'control plane item slot-monitor:other/report: the stored slot report has no valid slots',
    });
  });
});
