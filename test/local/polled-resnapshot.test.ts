/**
 * A re-snapshot of a polled table takes its positions in the table's poll space (docs/polling.md
 * "Re-snapshot of a polled table", docs/architecture.md §5.2), on embedded PostgreSQL with the real
 * reader, poller, snapshot worker, operator, normalizer and warehouse applier (in-memory control
 * plane, as the e2e helpers use). Before position spaces, the snapshot gave a polled table's rows
 * log positions: a version-polled table's later changes lost to them (stale forever), a
 * timestamp-polled table's rows and sweep sorted below every polled row (deleted rows stayed,
 * skipped rows stayed wrong). Integer versions are refused now (docs/polling.md); the gap-free
 * transaction-id mode (`xid8` set by a trigger to `pg_current_xact_id()`) takes their place here.
 */
import { createHash } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { PostgresSnapshotReader } from '../../lambda/adapters/snapshot-postgres.ts';
import { checkpointCursorStore, pollPass } from '../../lambda/core/capture/poll.ts';
import { FixedPacer } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import { runTableSnapshot } from '../../lambda/core/snapshot/snapshot-worker.ts';
import { snapshotStreamRecords } from '../../lambda/core/snapshot/snapshot.ts';
import { Normalizer } from '../../lambda/core/capture/normalize.ts';
import { TableConfigIndex, type TableConfig } from '../../lambda/core/tables/table-config.ts';
import { controlPlaneSnapshots, Operator } from '../../lambda/core/operator/operator.ts';
import { PositionSpaceMismatchError } from '../../lambda/core/shared/position-space.ts';
import { pgPollStablePoint } from '../../lambda/adapters/poll-stable-point-pg.ts';
import { createWarehouseApplier } from '../../lambda/handlers/warehouse-applier.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { rng as mulberry32 } from '../helpers/rng.ts';

let cluster: PostgresCluster;
let dw: pg.Pool;
const sha = (s: string) => createHash('sha256').update(s).digest('hex');
const quiet = { debug: () => undefined, info: () => undefined, warn: () => undefined, error: () => undefined };

beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  cluster = await startPostgres({ fast: true });
  await cluster.createDatabase('src');
  await cluster.createDatabase('dw');
  dw = new pg.Pool({ connectionString: cluster.url('dw'), max: 2 });
}, 120_000);
afterAll(async () => {
  await dw?.end();
  await cluster?.stop();
});

/** The whole path of one source's polled tables: poller → normalizer → warehouse applier, and the snapshot worker. */
function pipeline(sourceId: string, tables: TableConfig[]) {
  const controlPlane = new MemoryControlPlane();
  const raw: string[] = [];
  const events: string[] = [];
  const normalizer = new Normalizer<string>({
    source: sourceId,
    tables: new TableConfigIndex(tables),
    controlPlane,
    changeLog: { encode: (e) => JSON.stringify(e), publishEncoded: async (r) => void events.push(...r) },
    metrics: { count: () => undefined, milliseconds: () => undefined },
    logger: quiet,
  });
  const applier = createWarehouseApplier({
    controlPlane: controlPlane,
    pool: dw,
    sinkId: 'wh',
    metrics: new Metrics({ namespace: 't' }),
    logger: new Logger({ logLevel: 'ERROR' }),
  });
  // No margin below the clock: these tests' writes are sequential (docs/polling.md, the horizon).
  const reader = new PostgresSnapshotReader({ primary: { connectionString: cluster.url('src') }, fencePollMs: 5, pollHorizonMarginMs: 0 });
  let seq = 0;
  const pollColumnOf = (t: string) => tables.find((x) => x.table === t)?.pollColumn;
  return {
    controlPlane,
    reader,
    async flow() {
      const batch = normalizer.startBatch();
      for (const data of raw.splice(0)) await batch.add({ text: data, origin: `raw/shard-0/${++seq}` });
      await batch.flush();
      const out = await applier.applyRecords(events.splice(0).map((text) => ({ sequenceNumber: String(++seq), origin: `log/shard-0/${seq}`, text })));
      expect(out.failed).toEqual([]);
      expect(await controlPlane.listDeadLetters()).toEqual([]);
    },
    poll: () =>
      pollPass({
        source: sourceId,
        tables: tables.map((t) => ({ table: t.table, pollColumn: t.pollColumn!, rules: { mask: [], exclude: [] } })),
        reader,
        cursors: checkpointCursorStore(controlPlane, sourceId),
        publish: async (records) => void raw.push(...records.map((r) => JSON.stringify(r))),
        pacerFor: () => new FixedPacer(7),
      }),
    async resnapshot(table: string, chunk = 100, between?: () => Promise<void>) {
      const op = new Operator({ controlPlane, settings: { changeLogRetentionMs: 86_400_000 }, snapshots: controlPlaneSnapshots(controlPlane) });
      const r = await op.resnapshot('operator:test', { source: sourceId, table });
      expect(r, JSON.stringify(r)).toMatchObject({ outcome: 'done' });
      const outcome = await runTableSnapshot({
        controlPlane,
        reader,
        publish: async (recs) => {
          raw.push(...snapshotStreamRecords(recs, sha).map((x) => x.data));
          await between?.();
        },
        pacer: new FixedPacer(chunk),
        source: sourceId,
        table,
        rules: { mask: [], exclude: [] },
        pollColumnOf,
        owner: 'test',
      });
      expect(outcome).toBe('done');
      expect((await controlPlane.getTable(sourceId, table))?.state).toBe('active');
    },
    close: () => reader.close(),
  };
}

/** The gap-free transaction-id recipe (docs/polling.md): an `xid8` column set by a trigger to `pg_current_xact_id()`. */
const xidTable = (name: string) => `CREATE TABLE ${name} (id int PRIMARY KEY, note text, cdc_xid xid8);
  CREATE FUNCTION ${name}_xid() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.cdc_xid := pg_current_xact_id(); RETURN NEW; END $$;
  CREATE TRIGGER zz_cdc_poll_xid BEFORE INSERT OR UPDATE ON ${name} FOR EACH ROW EXECUTE FUNCTION ${name}_xid();`;

const sinkRows = async (schema: string, table: string) =>
  (await dw.query(`SELECT id, note FROM ${schema}.${table} ORDER BY id`)).rows.map((r) => `${r.id}=${r.note}`);

describe('re-snapshot of a polled table', () => {
  it('removes deleted rows, and later polled changes win (transaction-id and timestamp polled)', async () => {
    const src = new pg.Client({ connectionString: cluster.url('src') });
    await src.connect();
    await src.query(`${xidTable('versioned')}
      CREATE TABLE stamped (id int PRIMARY KEY, note text, updated_at timestamptz NOT NULL DEFAULT clock_timestamp());
      INSERT INTO versioned (id, note) SELECT g, 'init' FROM generate_series(1, 3) g;
      INSERT INTO stamped (id, note) SELECT g, 'init' FROM generate_series(1, 3) g;`);
    const tables: TableConfig[] = [
      { table: 'public.versioned', capture: 'poll', pollColumn: 'cdc_xid', deleteMode: 'soft', mask: [], exclude: [] },
      { table: 'public.stamped', capture: 'poll', pollColumn: 'updated_at', deleteMode: 'soft', mask: [], exclude: [] },
    ];
    const p = pipeline('demo', tables);
    try {
      await p.poll();
      await p.flow();
      expect((await p.controlPlane.getTable('demo', 'public.versioned'))?.positionSpace).toBe('poll-xid');
      expect((await p.controlPlane.getTable('demo', 'public.stamped'))?.positionSpace).toBe('poll-timestamp');

      // Between polls: a delete (never observable by polling) and a change committed out of order (the poller waits for it, docs/polling.md).
      await src.query('DELETE FROM stamped WHERE id = 3');
      await src.query('DELETE FROM versioned WHERE id = 3');
      const slow = new pg.Client({ connectionString: cluster.url('src') });
      await slow.connect();
      await slow.query("BEGIN; UPDATE stamped SET note = 'late', updated_at = clock_timestamp() WHERE id = 1; UPDATE versioned SET note = 'late' WHERE id = 1");
      await src.query("UPDATE stamped SET note = 'B', updated_at = clock_timestamp() WHERE id = 2");
      await src.query("UPDATE versioned SET note = 'B' WHERE id = 2");
      await p.poll();
      await slow.query('COMMIT');
      await slow.end();
      await p.poll();
      await p.flow();
      for (const t of ['stamped', 'versioned']) expect(await sinkRows('demo_public', t)).toEqual(['1=late', '2=B', '3=init']); // the delete, as polling sees it

      for (const t of tables) await p.resnapshot(t.table);
      await p.flow();
      for (const t of ['stamped', 'versioned']) expect(await sinkRows('demo_public', t)).toEqual(['1=late', '2=B']);

      // Later changes of both tables win over the re-snapshot's rows.
      await src.query("UPDATE versioned SET note = 'changed after resnapshot' WHERE id = 1");
      await src.query("UPDATE stamped SET note = 'changed after resnapshot', updated_at = clock_timestamp() WHERE id = 2");
      await src.query("INSERT INTO versioned (id, note) VALUES (4, 'new')");
      await p.poll();
      await p.flow();
      expect(await sinkRows('demo_public', 'versioned')).toEqual(['1=changed after resnapshot', '2=B', '4=new']);
      expect(await sinkRows('demo_public', 'stamped')).toEqual(['1=late', '2=changed after resnapshot']);

      // The snapshot's audit says which space and bound it took.
      const marks = (await p.controlPlane.listAudit('demo')).filter((a) => a.action === 'poll-snapshot-watermark');
      expect(marks.map((a) => a.detail.positionSpace).sort()).toEqual(['poll-timestamp', 'poll-xid']);
    } finally {
      await p.close();
      await src.end();
    }
  }, 180_000);

  const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
  const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 16);
  it(`property: over ${RUNS} seeds from ${SEED}, polling with inserts, updates, deletes and out-of-order commits, and a re-snapshot in the middle with changes and polls during it, converges row by row`, async () => {
    console.log(`polled re-snapshot property: ${RUNS} seeds from ${SEED} (CDC_PROPERTY_SEED, CDC_PROPERTY_RUNS)`);
    const src = new pg.Client({ connectionString: cluster.url('src') });
    const slow = new pg.Client({ connectionString: cluster.url('src') });
    await src.connect();
    await slow.connect();
    try {
      for (let run = 0; run < RUNS; run++) {
        const seed = (SEED + run) >>> 0;
        const rnd = mulberry32(seed);
        const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rnd() * xs.length)]!;
        const kind = run % 2 === 0 ? 'xid' : 'timestamp';
        const name = `p${run}_${kind}`;
        const pc = kind === 'xid' ? 'cdc_xid' : 'updated_at';
        // The transaction-id column is set by its trigger; the timestamp one by each statement.
        const touch = kind === 'xid' ? '' : ', updated_at = clock_timestamp()';
        await src.query(
          kind === 'xid' ? xidTable(name) : `CREATE TABLE ${name} (id int PRIMARY KEY, note text, updated_at timestamptz NOT NULL DEFAULT clock_timestamp())`,
        );
        const p = pipeline(`s${run}`, [{ table: `public.${name}`, capture: 'poll', pollColumn: pc, deleteMode: 'soft', mask: [], exclude: [] }]);
        let counter = 0;
        const ids = async () => (await src.query<{ id: number }>(`SELECT id FROM ${name}`)).rows.map((r) => r.id);
        const change = async (deletes: boolean) => {
          const present = await ids();
          const r = rnd();
          if (present.length === 0 || r < 0.35)
            await src.query(`INSERT INTO ${name} (id, note) VALUES ($1, $2) ON CONFLICT (id) DO UPDATE SET note = EXCLUDED.note${touch}`, [
              Math.floor(rnd() * 40),
              `i${++counter}`,
            ]);
          else if (deletes && r < 0.55) await src.query(`DELETE FROM ${name} WHERE id = $1`, [pick(present)]);
          else await src.query(`UPDATE ${name} SET note = $2${touch} WHERE id = $1`, [pick(present), `u${++counter}`]);
        };
        /** A change whose poll value is taken before a poll pass and that commits after it (out of order): the poller must wait for it, never skip it. */
        const skipped = async () => {
          const present = await ids();
          if (present.length < 2) return;
          const late = pick(present);
          await slow.query('BEGIN');
          await slow.query(`UPDATE ${name} SET note = $2${touch} WHERE id = $1`, [late, `late${++counter}`]);
          // A later value committed first (another row: the late one holds its row lock).
          await src.query(`UPDATE ${name} SET note = $2${touch} WHERE id = $1`, [pick(present.filter((x) => x !== late)), `u${++counter}`]);
          await p.poll();
          await slow.query('COMMIT');
        };
        try {
          // Rows before the first pass, so the table is registered (the operator re-snapshots registered tables only).
          await src.query(`INSERT INTO ${name} (id, note) SELECT g, 'first' FROM generate_series(0, 4) g`);
          await p.poll();
          await p.flow();
          for (let i = 0; i < 12; i++) await change(true);
          await p.poll();
          await p.flow();
          // Before: deletes and skipped commits, which polling cannot see.
          for (let round = 0; round < 4; round++) {
            for (let i = 0, n = 1 + Math.floor(rnd() * 5); i < n; i++) await change(true);
            if (rnd() < 0.5) await skipped();
            await p.poll();
            if (rnd() < 0.7) await p.flow();
          }
          // The re-snapshot, in small chunks, with changes (no deletes: a delete of a row it already read is not observable) and polls between them.
          // The sinks hold a needs-resnapshot table's events (docs/snapshot.md): they flow once the run made it active again.
          await p.resnapshot(`public.${name}`, 1 + Math.floor(rnd() * 6), async () => {
            for (let i = 0, n = Math.floor(rnd() * 3); i < n; i++) await change(false);
            if (rnd() < 0.4) await p.poll();
          });
          // After: changes and polls.
          for (let round = 0; round < 3; round++) {
            for (let i = 0, n = Math.floor(rnd() * 4); i < n; i++) await change(false);
            await p.poll();
            if (rnd() < 0.5) await p.flow();
          }
          await p.poll();
          await p.flow();
          const source = (await src.query(`SELECT id, note FROM ${name} ORDER BY id`)).rows.map((r) => `${r.id}=${r.note}`);
          expect({ seed, kind, rows: await sinkRows(`s${run}_public`, name) }).toEqual({ seed, kind, rows: source });
        } finally {
          await p.close();
        }
      }
    } finally {
      await slow.end();
      await src.end();
    }
  }, 300_000);

  it("reconcile's stable point for a polled table is its poll cursor and the sink's progress, not the heartbeat (timestamp and transaction id)", async () => {
    const src = new pg.Client({ connectionString: cluster.url('src') });
    await src.connect();
    await src.query(`${xidTable('sp_v')}
      CREATE TABLE sp_t (id int PRIMARY KEY, note text, updated_at timestamptz NOT NULL DEFAULT clock_timestamp());
      INSERT INTO sp_v (id, note) VALUES (1, 'a'), (2, 'b'); INSERT INTO sp_t (id, note) VALUES (1, 'a'), (2, 'b');`);
    const tables: TableConfig[] = [
      { table: 'public.sp_v', capture: 'poll', pollColumn: 'cdc_xid', deleteMode: 'soft', mask: [], exclude: [] },
      { table: 'public.sp_t', capture: 'poll', pollColumn: 'updated_at', deleteMode: 'soft', mask: [], exclude: [] },
    ];
    const p = pipeline('stable', tables);
    try {
      const points = await Promise.all(
        tables.map((t) =>
          pgPollStablePoint({ client: src, controlPlane: p.controlPlane, source: 'stable', sink: 'wh', table: t.table, pollColumn: t.pollColumn! }),
        ),
      );
      const firsts = await Promise.all(points.map((x) => x.mark()));
      for (const [i, point] of points.entries()) expect(await point.passed(firsts[i]!)).toBe(false); // nothing polled yet
      await p.poll();
      for (const [i, point] of points.entries()) expect(await point.passed(firsts[i]!)).toBe(false); // read, not applied
      await p.flow();
      for (const [i, point] of points.entries()) expect(await point.passed(firsts[i]!)).toBe(true);
      for (const [i, t] of tables.entries()) {
        const point = points[i]!;
        const first = firsts[i]!;
        await src.query(`UPDATE ${t.table} SET note = 'c'${t.pollColumn === 'cdc_xid' ? '' : ', updated_at = clock_timestamp()'} WHERE id = 1`);
        const second = await point.mark();
        expect(second > first).toBe(true);
        expect(await point.passed(second)).toBe(false);
        await p.poll();
        await p.flow();
        expect(await point.passed(second)).toBe(true);
      }
    } finally {
      await p.close();
      await src.end();
    }
  }, 120_000);

  it('refuses a run of a polled table that would take log positions, and fails it by name', async () => {
    const src = new pg.Client({ connectionString: cluster.url('src') });
    await src.connect();
    await src.query(`${xidTable('refused')} INSERT INTO refused (id, note) VALUES (1, 'a');`);
    const tables: TableConfig[] = [{ table: 'public.refused', capture: 'poll', pollColumn: 'cdc_xid', deleteMode: 'soft', mask: [], exclude: [] }];
    const p = pipeline('refusal', tables);
    try {
      await p.poll();
      await p.flow();
      const op = new Operator({
        controlPlane: p.controlPlane,
        settings: { changeLogRetentionMs: 86_400_000 },
        snapshots: controlPlaneSnapshots(p.controlPlane),
      });
      expect((await op.resnapshot('operator:test', { source: 'refusal', table: 'public.refused' })).outcome).toBe('done');
      // No poll column given: the run would stitch with the log.
      const run = runTableSnapshot({
        controlPlane: p.controlPlane,
        reader: p.reader,
        publish: async () => undefined,
        pacer: new FixedPacer(10),
        source: 'refusal',
        table: 'public.refused',
        rules: { mask: [], exclude: [] },
        owner: 'test',
      });
      await expect(run).rejects.toBeInstanceOf(PositionSpaceMismatchError);
      const state = await p.controlPlane.getSnapshot('refusal', 'public.refused');
      expect(state?.status).toBe('failed');
      expect(state?.error).toMatch(/^POSITION_SPACE_MISMATCH: .*space wal .* space poll-xid/);
    } finally {
      await p.close();
      await src.end();
    }
  }, 120_000);
});
