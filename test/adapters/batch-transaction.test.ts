/**
 * One transaction per batch (docs/warehouse-apply.md, "One transaction per batch"): the tables of a
 * batch are written by `PgWarehouse.applyTables` in ONE PostgreSQL transaction, each under a
 * savepoint, through the real applier (`createWarehouseApplier(...).applyRecords`).
 *
 * Randomized over seeds (count and seed printed; `CDC_BATCH_TXN_RUNS`, `CDC_BATCH_TXN_SEED`): a
 * batch of 2–4 tables (appends, and on one table a truncate, which takes the full apply), in a
 * random order of records, where one random table's writes fail inside the shared transaction:
 * - `persistent` (a trigger raising SQLSTATE P0001, an error a retry will not fix): that table is
 *   held for the sink with a `hold-table` audit entry, and the others commit;
 * - `value` (a trigger refusing one value with SQLSTATE 22023): that one record is a dead letter,
 *   the table's other records apply (one at a time), the others commit;
 * - `transient` (SQLSTATE 40001): that table's records are reported failed and apply when
 *   delivered again; the others commit once.
 * Every table that committed in the shared transaction holds its batch's changelog rows under one
 * transaction id (`xmin`), the same for all of them, and nothing of the failing table's batch is
 * written in it.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { createWarehouseApplier, type ChangeRecord } from '../../lambda/handlers/warehouse-applier.ts';
import { ENVELOPE_VERSION, type ChangeEvent, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

const RUNS = Number(process.env.CDC_BATCH_TXN_RUNS ?? 12);
const SEED = process.env.CDC_BATCH_TXN_SEED !== undefined ? Number(process.env.CDC_BATCH_TXN_SEED) : Math.floor(Math.random() * 0x7fffffff);
const SINK = 'wh';
const KINDS = ['persistent', 'value', 'transient'] as const;
type Kind = (typeof KINDS)[number];
/** The SQLSTATE each kind's trigger raises. */
const STATE: Record<Kind, string> = { persistent: 'P0001', value: '22023', transient: '40001' };

describe('one transaction per batch (PostgreSQL)', () => {
  let cluster: PostgresCluster;
  let pool: pg.Pool;

  beforeAll(async () => {
    process.env.POWERTOOLS_METRICS_DISABLED = 'true';
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('wh');
    pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 3 });
    pool.on('error', () => undefined);
    // Which top-level transaction wrote each changelog (a row's xmin is its savepoint's subtransaction, so a trigger tells).
    await pool.query(
      'CREATE TABLE public._test_tx (tbl text, xid text); ' +
        'CREATE FUNCTION public._test_tx() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ' +
        "INSERT INTO public._test_tx VALUES (TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME, pg_current_xact_id()::text); RETURN NULL; END $$",
    );
    console.log(`batch transaction: ${RUNS} runs, seed ${SEED} (replay with CDC_BATCH_TXN_SEED=${SEED} CDC_BATCH_TXN_RUNS=${RUNS})`);
  }, 120_000);

  afterAll(async () => {
    await pool?.end();
    await cluster?.stop();
  });

  it("a failing table is rolled back to its savepoint; the batch's other tables commit in one transaction", async () => {
    const rnd = seededRandom(SEED);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
    const seen: Record<Kind, number> = { persistent: 0, value: 0, transient: 0 };
    // Every kind in every three runs (their order drawn per block): 12 runs of free draws missed a
    // kind about once in 40 seeds, and the check below then failed though nothing was wrong.
    let block: Kind[] = [];
    for (let run = 0; run < RUNS; run++) {
      const sourceId = `bt${run}`;
      const n = 2 + Math.floor(rnd() * 3);
      const tables = Array.from({ length: n }, (_, i) => `public.t${i}`);
      const failing = Math.floor(rnd() * n);
      if (block.length === 0) block = [...KINDS].sort(() => rnd() - 0.5);
      const kind = block.pop()!;
      seen[kind]++;
      const truncating = Math.floor(rnd() * n);
      const where = `run ${run} (seed ${SEED}): ${n} tables, ${tables[failing]} fails (${kind}), ${tables[truncating]} truncates`;
      const cp = new MemoryControlPlane();
      const at = new Date().toISOString();
      for (const table of tables) {
        await cp.registerTable(
          { source: sourceId, table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
          {
            source: sourceId,
            table,
            version: 1,
            columns: [
              { name: 'id', type: 'integer', nullable: false },
              { name: 'v', type: 'text', nullable: true },
            ],
            key: ['id'],
            effectivePosition: '0'.repeat(24),
            registeredAt: at,
          },
          { at, actor: 'test', action: 'register-table', source: sourceId, table, outcome: 'done', detail: {} },
        );
      }
      const applier = createWarehouseApplier({
        controlPlane: cp,
        pool,
        sinkId: SINK,
        metrics: new Metrics({ namespace: 'test' }),
        logger: new Logger({ logLevel: 'CRITICAL' }),
        merge: { inline: false },
      });
      let lsn = 0x1000n;
      let seq = 0;
      const events = (rows: number, truncateIn: number | null, bad: number | null): ChangeEvent[] => {
        const queues: ChangeEvent[][] = [];
        for (const [ti, table] of tables.entries()) {
          lsn += 0x100n;
          let index = 0;
          const q: ChangeEvent[] = [];
          if (ti === truncateIn) q.push(event(sourceId, table, 'truncate', null, null, makePosition(lsn, index++)));
          for (let r = 0; r < rows; r++) {
            const id = run * 1000 + ti * 100 + Math.floor(rnd() * 100);
            q.push(event(sourceId, table, 'insert', id, ti === failing && r === bad ? 'bad' : `v${id}`, makePosition(lsn, index++)));
          }
          queues.push(q);
        }
        // Records of the tables interleaved at random (each table's own order kept: positions rise).
        const out: ChangeEvent[] = [];
        for (let left = queues.filter((q) => q.length > 0); left.length > 0; left = queues.filter((q) => q.length > 0)) out.push(pick(left).shift()!);
        return out;
      };
      const tableOfSeq = new Map<string, string>();
      const apply = (list: readonly ChangeEvent[]) =>
        applier.applyRecords(
          list.map((e): ChangeRecord => {
            const sequenceNumber = String(++seq);
            tableOfSeq.set(sequenceNumber, e.table);
            return { sequenceNumber, origin: `test/shard-0/${seq}`, text: JSON.stringify(e) };
          }),
        );

      // The sink's tables are made by a first batch (no failure yet).
      const warm = await apply(events(2, null, null));
      expect(warm.failed, where).toEqual([]);
      const t = tables.map((table) => warehouseTable(sourceId, table));
      const f = t[failing]!;
      const condition = kind === 'value' ? `NEW.v = 'bad'` : 'true';
      await pool.query(
        `CREATE FUNCTION ${qualified(f.schema, '_test_refuse')}() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN ` +
          `IF ${condition} THEN RAISE EXCEPTION 'refused by the test' USING ERRCODE = '${STATE[kind]}'; END IF; RETURN NEW; END $$; ` +
          `CREATE TRIGGER _test_refuse BEFORE INSERT ON ${qualified(f.schema, f.changelog)} FOR EACH ROW EXECUTE FUNCTION ${qualified(f.schema, '_test_refuse')}()`,
      );
      for (const x of t)
        await pool.query(`CREATE TRIGGER _test_tx AFTER INSERT ON ${qualified(x.schema, x.changelog)} FOR EACH STATEMENT EXECUTE FUNCTION public._test_tx()`);
      await pool.query('DELETE FROM public._test_tx');
      const before = await Promise.all(t.map((x) => count(x.changelog, x.schema)));
      const rows = 3 + Math.floor(rnd() * 4);
      const batch = events(rows, truncating, kind === 'value' ? Math.floor(rnd() * rows) : null);
      const out = await apply(batch);
      const after = await Promise.all(t.map((x) => count(x.changelog, x.schema)));
      /** Changelog rows each table's batch adds (its inserts: a truncate is recorded in the truncations table), and its records. */
      const perTable = tables.map((table) => batch.filter((e) => e.table === table && e.op === 'insert').length);
      const records = tables.map((table) => batch.filter((e) => e.table === table).length);

      // The other tables committed whole, in one transaction.
      const written = (await pool.query<{ tbl: string; xid: string }>('SELECT tbl, xid FROM public._test_tx')).rows;
      const xids = new Set<string>();
      for (const [i, x] of t.entries()) {
        if (i === failing) continue;
        expect(after[i]! - before[i]!, `${where}: ${tables[i]} committed its batch`).toBe(perTable[i]);
        const mine = written.filter((w) => w.tbl === `${x.schema}.${x.changelog}`);
        expect(mine.length, `${where}: ${tables[i]} wrote its changelog`).toBeGreaterThan(0);
        for (const w of mine) xids.add(w.xid);
      }
      expect(xids.size, `${where}: the tables that committed did so in one transaction`).toBe(1);
      const progress = await cp.getSinkProgress(SINK, sourceId, tables[failing]!);
      const audits = (await cp.listAudit(sourceId, tables[failing])).filter((a) => a.action === 'hold-table');
      const failedTables = new Set(out.failed.map((s) => tableOfSeq.get(s)));
      if (kind === 'persistent') {
        expect(after[failing], `${where}: nothing of the held table written`).toBe(before[failing]);
        expect(out.failed, where).toEqual([]);
        expect(out.held, where).toBe(records[failing]);
        expect(progress?.heldFrom, `${where}: the table is held`).not.toBeNull();
        expect(
          audits.map((a) => a.detail.sqlState),
          where,
        ).toEqual(['P0001']);
      } else if (kind === 'value') {
        // Its other records apply one at a time; the refused one is a dead letter.
        expect(out.failed, where).toEqual([]);
        expect(out.deadLettered, where).toBe(1);
        expect(after[failing]! - before[failing]!, `${where}: the table's other records applied`).toBe(perTable[failing]! - 1);
        expect(progress?.heldFrom ?? null, where).toBeNull();
      } else {
        expect([...failedTables], `${where}: only the failing table's records are retried`).toEqual([tables[failing]]);
        expect(after[failing], where).toBe(before[failing]);
        await pool.query(`DROP TRIGGER _test_refuse ON ${qualified(f.schema, f.changelog)}`);
        const again = await apply(batch);
        expect(again.failed, `${where}: delivered again`).toEqual([]);
        const last = await Promise.all(t.map((x) => count(x.changelog, x.schema)));
        // Delivered again, the committed tables keep their first delivery (each event once) and the failed one gets its batch.
        for (const [i] of t.entries()) expect(last[i]! - before[i]!, `${where}: ${tables[i]} after the redelivery`).toBe(perTable[i]);
      }
    }
    console.log(`batch transaction: ${RUNS} runs (${JSON.stringify(seen)}), seed ${SEED}`);
    if (RUNS >= 12) for (const k of KINDS) expect(seen[k], `runs of kind ${k}`).toBeGreaterThan(0);
  }, 600_000);

  async function count(table: string, schema: string): Promise<number> {
    return Number((await pool.query<{ n: string }>(`SELECT count(*) AS n FROM ${qualified(schema, table)}`)).rows[0]!.n);
  }
});

function event(sourceId: string, table: string, op: 'insert' | 'truncate', id: number | null, v: string | null, position: string): ChangeEvent {
  const key: Row = id === null ? {} : { id };
  return {
    v: ENVELOPE_VERSION,
    source: sourceId,
    table,
    op,
    key,
    after: op === 'truncate' ? null : { id, v },
    before: null,
    missing: [],
    position,
    commitTs: '2026-12-06T00:00:00.000Z',
    txId: '1',
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  };
}
