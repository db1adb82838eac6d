/**
 * A pause takes effect at the warehouse sink within the table records' bound (docs/architecture.md,
 * "Table records kept for at most a second"), on the real parts: the DynamoDB control plane on
 * DynamoDB Local, the operator function (the path `cdc pause` takes on AWS) and the warehouse
 * applier on embedded PostgreSQL.
 *
 * Randomized over seeds (`CDC_PROPERTY_RUNS`, default 3, from `CDC_PROPERTY_SEED`, default random;
 * both printed): batches of one event each, at random intervals, while the operator pauses the
 * table at a random moment. Every batch that starts `TABLE_RECORD_MAX_AGE_MS` or more after the
 * pause was answered holds its event; every batch that ended before the pause was asked applied
 * its; the warehouse holds exactly the events of the batches that applied (none of a batch after
 * the pause plus the bound); and the applier read the table record fewer times than it ran batches.
 * A second test: an event of a schema version newer than the kept record (a breaking change, which
 * pauses the table before its version is registered) is held at once, within the bound.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { startDynamoDbLocal, type DynamoDbLocal } from '../../local/dynamodb.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { createWarehouseApplier, type ChangeRecord, type WarehouseApplier } from '../../lambda/handlers/warehouse-applier.ts';
import { createOperatorHandler } from '../../lambda/handlers/operator.ts';
import { TABLE_RECORD_MAX_AGE_MS } from '../../lambda/core/shared/kept-table-records.ts';
import type { AuditEntry, ColumnDef, ControlPlane } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { EnvName } from '../../contracts/env.ts';
import { operatorCall } from '../helpers/operator-call.ts';
import { testAudit } from '../helpers/audit-entry.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 3);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const SOURCE = 'bound';
const SINK = 'warehouse';
const ONCALL = 'arn:aws:sts::111111111111:assumed-role/cdc-oncall/bob';
const COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'note', type: 'text', nullable: true },
];
const pos = (n: number): string => makePosition(BigInt(n) * 0x100n, 0);
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const audit = (action: string, table: string): AuditEntry => testAudit(SOURCE, action, table);

function record(table: string, n: number, schemaVersion = 1): ChangeRecord {
  const event: ChangeEvent = {
    v: ENVELOPE_VERSION,
    source: SOURCE,
    table,
    op: 'insert',
    key: { id: n },
    after: { id: n, note: `n${n}` },
    before: null,
    missing: [],
    position: pos(n),
    commitTs: new Date().toISOString(),
    txId: String(1000 + n),
    schemaVersion,
    capture: 'slot',
    synthetic: false,
  };
  return { sequenceNumber: String(10_000_000 + n), origin: `changes/shardId-000000000000/${10_000_000 + n}`, text: JSON.stringify(event) };
}

/** The control plane with the table-record reads that reach it counted. */
function countingReads(inner: ControlPlane): { controlPlane: ControlPlane; reads: () => number } {
  let n = 0;
  const controlPlane = new Proxy(inner, {
    get(target, prop, receiver) {
      const v = Reflect.get(target, prop, receiver) as unknown;
      if (typeof v !== 'function') return v;
      if (prop === 'getTable')
        return (...args: unknown[]) => {
          n++;
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      return (v as (...a: unknown[]) => unknown).bind(target);
    },
  });
  return { controlPlane, reads: () => n };
}

describe('a pause at the warehouse sink, within the table records bound (DynamoDB Local, embedded PostgreSQL)', () => {
  let ddb: DynamoDbLocal;
  let cluster: PostgresCluster;
  let pool: pg.Pool;
  let cp: DynamoDbControlPlane;

  beforeAll(async () => {
    [ddb, cluster] = await Promise.all([startDynamoDbLocal(), startPostgres({ fast: true })]);
    await cluster.createDatabase('wh');
    pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 4 });
    pool.on('error', () => undefined);
    const client = dynamoDbClient(ddb.endpoint);
    await createControlTable(client, 'control');
    cp = new DynamoDbControlPlane(client, 'control');
  }, 120_000);

  afterAll(async () => {
    await pool?.end();
    await Promise.all([cluster?.stop(), ddb?.stop()]);
  });

  async function register(table: string): Promise<void> {
    const at = new Date().toISOString();
    await cp.registerTable(
      { source: SOURCE, table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
      { source: SOURCE, table, version: 1, columns: COLUMNS, key: ['id'], effectivePosition: pos(0), registeredAt: at },
      audit('register-table', table),
    );
  }

  function applier(controlPlane: ControlPlane): WarehouseApplier {
    return createWarehouseApplier({
      controlPlane,
      pool,
      sinkId: SINK,
      metrics: new Metrics({ namespace: 'test' }),
      logger: new Logger({ serviceName: 'test', logLevel: 'SILENT' }),
      merge: { inline: false },
    });
  }

  async function idsInWarehouse(table: string): Promise<number[]> {
    const t = warehouseTable(SOURCE, table);
    const res = await pool.query<{ id: number }>(`SELECT id FROM ${qualified(t.schema, t.view)} ORDER BY id`);
    return res.rows.map((r) => Number(r.id));
  }

  it('an operator pause holds every batch that starts the bound after it was answered; none of their events reaches the warehouse (randomized)', async () => {
    console.log(`pause bound: ${RUNS} seeds from ${SEED} (replay with CDC_PROPERTY_SEED=${SEED}); bound ${TABLE_RECORD_MAX_AGE_MS} ms`);
    const operator = createOperatorHandler({
      controlPlane: cp,
      env: { [EnvName.CHANGE_LOG_RETENTION_MS]: String(24 * 3_600_000) },
      logger: { info: () => undefined, warn: () => undefined },
    });
    for (let run = 0; run < RUNS; run++) {
      const seed = SEED + run;
      const rand = seededRandom(seed);
      const table = `public.t${seed}`;
      await register(table);
      const counted = countingReads(cp);
      const a = applier(counted.controlPlane);
      const batches: { n: number; start: number; end: number; applied: number; held: number }[] = [];
      const pauseAfter = 200 + rand() * 1_300;
      const t0 = performance.now();
      let pause: { asked: number; answered: number } | null = null;
      const pausing = (async () => {
        await sleep(pauseAfter);
        const asked = performance.now();
        const res = await operator(operatorCall(ONCALL, { action: 'pause', table, durationMs: 600_000, reason: 'maintenance' }));
        pause = { asked, answered: performance.now() };
        expect(res).toMatchObject({ ok: true, result: { outcome: 'done', action: 'pause' } });
      })();
      for (let n = 1; ; n++) {
        const start = performance.now();
        if (pause !== null && start > (pause as { answered: number }).answered + TABLE_RECORD_MAX_AGE_MS + 600) break;
        if (start - t0 > 20_000) throw new Error(`seed ${seed}: the pause was not answered in 20 s`);
        const o = await a.applyRecords([record(table, n)]);
        expect(o.failed, `seed ${seed}: batch ${n} failed`).toEqual([]);
        batches.push({ n, start, end: performance.now(), applied: o.applied, held: o.held });
        await sleep(rand() * 120);
      }
      await pausing;
      const { asked, answered } = pause!;
      const after = batches.filter((b) => b.start >= answered + TABLE_RECORD_MAX_AGE_MS);
      const before = batches.filter((b) => b.end < asked);
      const applied = batches.filter((b) => b.applied === 1).map((b) => b.n);
      const firstHeld = batches.find((b) => b.held === 1);
      console.log(
        `seed ${seed}: ${batches.length} batches, pause answered after ${Math.round(answered - t0)} ms (took ${Math.round(answered - asked)} ms); ` +
          `first held batch started ${firstHeld ? Math.round(firstHeld.start - answered) : 'never'} ms after it; ${after.length} batches after the bound; ` +
          `${counted.reads()} table-record reads reached DynamoDB`,
      );
      expect(after.length, `seed ${seed}: batches after the pause plus the bound`).toBeGreaterThanOrEqual(3);
      for (const b of after) expect({ seed, batch: b.n, applied: b.applied, held: b.held }).toEqual({ seed, batch: b.n, applied: 0, held: 1 });
      for (const b of before) expect({ seed, batch: b.n, applied: b.applied }).toEqual({ seed, batch: b.n, applied: 1 });
      // Once held, held: the sink keeps holding the table (docs/operations.md, "Table states").
      for (const b of batches.filter((x) => firstHeld !== undefined && x.n > firstHeld.n))
        expect({ seed, batch: b.n, held: b.held }).toEqual({ seed, batch: b.n, held: 1 });
      expect(await idsInWarehouse(table), `seed ${seed}: the warehouse holds the applied batches' events only`).toEqual(applied);
      expect(counted.reads(), `seed ${seed}: table-record reads against ${batches.length} batches`).toBeLessThan(batches.length);
    }
  }, 180_000);

  it('an event of a schema version the kept record does not name is held at once when the table was paused for it', async () => {
    const table = 'public.breaking';
    await register(table);
    const a = applier(cp);
    expect(await a.applyRecords([record(table, 1)])).toMatchObject({ applied: 1, held: 0, failed: [] });
    // What the normalizer does on a breaking change: pause the table, then register the version (another process).
    await cp.setTableState(SOURCE, table, 'paused', 'SCHEMA_BREAKING: column note dropped (schema version 2)', audit('pause-table', table));
    const at = new Date().toISOString();
    expect(
      await cp.addSchemaVersion(
        { source: SOURCE, table, version: 2, columns: COLUMNS.slice(0, 1), key: ['id'], effectivePosition: pos(2), registeredAt: at },
        audit('add-schema-version', table),
      ),
    ).toBe(true);
    const breaking = record(table, 2, 2);
    const started = performance.now();
    const o = await a.applyRecords([{ ...breaking, text: breaking.text.replace(`,"note":"n2"`, '') }]);
    expect(performance.now() - started).toBeLessThan(TABLE_RECORD_MAX_AGE_MS);
    expect(o).toMatchObject({ applied: 0, held: 1, failed: [] });
    expect(await idsInWarehouse(table)).toEqual([1]);
    expect(await cp.getSinkProgress(SINK, SOURCE, table)).toMatchObject({ heldFrom: pos(2) });
  });
});
