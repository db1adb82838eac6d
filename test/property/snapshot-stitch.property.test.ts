/**
 * Stitching a chunked snapshot with the live stream, against a real PostgreSQL (docs/snapshot.md).
 *
 * Property: for every seed, a table with existing rows (composite primary key) is snapshotted in
 * random-sized chunks by the real reader (`PostgresSnapshotReader`, visibility fence included)
 * while three sessions run random inserts, updates, deletes and primary-key changes; some seeds
 * also hold a transaction in the commit/visibility gap (its commit record is in the WAL, it is
 * not yet visible: a synchronous commit waiting for a standby that does not exist) and release it
 * at a random moment. The stream is the real logical slot (test_decoding) turned into records by
 * the capture's own `transactionsToRecords`; the chunks become the packed records the worker
 * publishes (`packChunkRecords`, a random byte budget so a chunk spans several records); both are
 * decoded by the real slot decoder. Every event is then delivered in a random order to a sink
 * that keeps invariant 2's rule (a write whose position is not higher than the stored one for the
 * key changes nothing; deletes leave a tombstone at their position). The sink must equal the
 * source row by row.
 *
 * Half of the runs are a **re-snapshot after a gap** (docs/snapshot.md, "Re-snapshot"): the sink
 * starts from the table's pre-gap history, then random changes are lost (their stream dropped),
 * and the snapshot's last chunk carries the sweep (`sweepRecord`); the sink keeps the truncate
 * rule, and some pre-gap events are delivered again, late, in the shuffled mix. Keys deleted in
 * the gap must be gone, everything else equal to the source.
 *
 * Count and seed: `CDC_SNAPSHOT_PROPERTY_RUNS` (default 200) and `CDC_PROPERTY_SEED` (default
 * random), both printed. The deterministic test of the commit/visibility trap is below the property.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { transactionsToRecords } from '../../local/capture-records.ts';
import { groupTransactions, type SlotRow } from '../../lambda/core/capture/logical-text.ts';
import { TableConfigIndex } from '../../lambda/core/tables/table-config.ts';
import { decodeSlotRecord } from '../../lambda/core/capture/slot-decoder.ts';
import { keyText, type Row } from '../../lambda/core/shared/event.ts';
import { chunkRecords, cursorAfter, packChunkRecords, sweepRecord, type KeyCursor } from '../../lambda/core/snapshot/snapshot.ts';
import { parseJsonExact } from '../../lambda/core/shared/json-exact.ts';
import { NO_COLUMN_RULES } from '../../lambda/core/tables/masking.ts';
import { PostgresSnapshotReader } from '../../lambda/adapters/snapshot-postgres.ts';
import type { SlotRecord } from '../../lambda/core/capture/slot-record.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import type { DecodedChange } from '../../lambda/core/capture/decoded.ts';

const RUNS = Number(process.env.CDC_SNAPSHOT_PROPERTY_RUNS ?? 200);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const SOURCE = 'src';
const SLOT = 'stitch';

let cluster: PostgresCluster;
let url: string;
let admin: pg.Client;

beforeAll(async () => {
  // A synchronous standby that never connects: a session that asks for synchronous_commit=on
  // writes its commit record and then waits, invisible, until its wait is cancelled. Every
  // other session commits with synchronous_commit=local (the database default below).
  cluster = await startPostgres({ fast: true });
  url = cluster.url('postgres');
  admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query('ALTER DATABASE postgres SET synchronous_commit = local');
  await admin.query('SET synchronous_commit = local');
  await admin.query(`ALTER SYSTEM SET synchronous_standby_names = 'phantom_standby'`);
  await admin.query('SELECT pg_reload_conf()');
  await admin.query(`SELECT pg_create_logical_replication_slot($1, 'test_decoding')`, [SLOT]);
}, 120_000);

afterAll(async () => {
  await admin?.end().catch(() => undefined);
  await cluster?.stop();
});

async function client(): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: url, options: '-c synchronous_commit=local' });
  await c.connect();
  return c;
}

/** Everything the slot has for `table`, as decoded changes (the capture's conversion and the slot decoder). */
async function drainStream(table: string): Promise<DecodedChange[]> {
  const r = await admin.query<SlotRow>(
    `SELECT lsn::text AS lsn, xid::text AS xid, data FROM pg_logical_slot_get_changes($1, NULL, NULL, 'include-xids', '1', 'include-timestamp', '1', 'skip-empty-xacts', '1')`,
    [SLOT],
  );
  const { transactions } = groupTransactions(r.rows);
  const tables = new TableConfigIndex([{ table, deleteMode: 'soft', mask: [], exclude: [] }]);
  const records = transactionsToRecords(SOURCE, transactions, tables, new Map([[table, ['a', 'b']]]));
  return records.flatMap((rec) => decodeEvents(rec));
}

function decodeEvents(rec: SlotRecord): DecodedChange[] {
  const d = decodeSlotRecord(JSON.parse(JSON.stringify(rec)));
  if (d.kind !== 'changes') throw new Error(`unexpected ${d.kind}`);
  return d.changes;
}

/**
 * Invariant 2's rule on a map: the highest position per key wins; a delete leaves a tombstone.
 * A truncate at P (docs/truncate.md) makes every key stored below P a tombstone at P, and no
 * write at or below the highest truncate applies afterwards.
 */
function applyAll(
  events: DecodedChange[],
  sink = new Map<string, { position: string; row: Row | null }>(),
): Map<string, { position: string; row: Row | null }> {
  let horizon = '';
  for (const e of events) {
    if (e.op === 'truncate') {
      for (const [k, v] of sink) if (v.position < e.position) sink.set(k, { position: e.position, row: null });
      if (e.position > horizon) horizon = e.position;
      continue;
    }
    if (e.position <= horizon) continue;
    const k = keyText(e.key);
    const stored = sink.get(k);
    if (stored && stored.position >= e.position) continue;
    sink.set(k, { position: e.position, row: e.op === 'delete' ? null : { ...(stored?.row ?? {}), ...e.after! } });
  }
  return sink;
}

async function sourceRows(c: pg.Client, table: string): Promise<Map<string, Row>> {
  const r = await c.query(`SELECT a, b, v FROM ${table}`);
  return new Map(r.rows.map((x: { a: number; b: string; v: number | null }) => [keyText({ a: x.a, b: x.b }), { a: x.a, b: x.b, v: x.v }]));
}

function live(sink: Map<string, { position: string; row: Row | null }>): Map<string, Row> {
  const out = new Map<string, Row>();
  for (const [k, v] of sink) if (v.row) out.set(k, v.row);
  return out;
}

function shuffle<T>(xs: T[], rand: () => number): T[] {
  for (let i = xs.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
  return xs;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A transaction left in the commit/visibility gap: its commit record is in the WAL, it is not visible. */
async function holdInVisibilityGap(c: pg.Client, sql: string, values: unknown[]): Promise<{ pid: number; committed: Promise<unknown> }> {
  const pid = (await c.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid;
  await c.query('BEGIN');
  await c.query(sql, values);
  await c.query('SET LOCAL synchronous_commit = on');
  const committed = c.query('COMMIT').catch(() => undefined);
  // Until the backend waits for the (phantom) standby, the commit record may not be written yet.
  for (;;) {
    const w = await admin.query<{ w: string | null }>('SELECT wait_event AS w FROM pg_stat_activity WHERE pid = $1', [pid]);
    if (w.rows[0]?.w === 'SyncRep') break;
    await sleep(2);
  }
  return { pid, committed };
}

async function releaseGap(pid: number): Promise<void> {
  await admin.query('SELECT pg_cancel_backend($1)', [pid]);
}

describe('snapshot stitching (real PostgreSQL)', () => {
  it(`converges over ${RUNS} random histories (seed ${SEED})`, async () => {
    console.log(`snapshot stitching property: ${RUNS} runs, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_SNAPSHOT_PROPERTY_RUNS=${RUNS})`);
    const workers = await Promise.all([client(), client(), client()]);
    const trapClient = await client();
    const check = await client();
    const reader = new PostgresSnapshotReader({ primary: { connectionString: url, options: '-c synchronous_commit=local' }, fencePollMs: 1 });
    let traps = 0;
    let chunksRead = 0;
    let gapRuns = 0;
    try {
      for (let run = 0; run < RUNS; run++) {
        const seed = SEED + run;
        const rand = seededRandom(seed);
        const table = `public.t${run}`;
        const keyOf = () => ({ a: Math.floor(rand() * 6), b: ['x', 'y', 'z', 'Ä', 'a b'][Math.floor(rand() * 5)]! });
        await check.query(`CREATE TABLE ${table} (a int, b text, v int, PRIMARY KEY (a, b))`);
        const initial = 5 + Math.floor(rand() * 20);
        for (let i = 0; i < initial; i++) {
          const k = keyOf();
          await check.query(`INSERT INTO ${table} VALUES ($1, $2, $3) ON CONFLICT DO NOTHING`, [k.a, k.b, i]);
        }
        // Stream first: everything before this point is the "existing rows"; drop its stream.
        // In a re-snapshot run it is the sink's pre-gap state, and a gap of lost changes follows.
        const resnapshot = rand() < 0.5;
        const preGap = await drainStream(table);
        if (resnapshot) {
          const lost = 1 + Math.floor(rand() * 8);
          for (let i = 0; i < lost; i++) {
            const k = keyOf();
            const r = rand();
            if (r < 0.5) await check.query(`DELETE FROM ${table} WHERE a = $1 AND b = $2`, [k.a, k.b]);
            else if (r < 0.75) await check.query(`UPDATE ${table} SET v = -1 WHERE a = $1 AND b = $2`, [k.a, k.b]);
            else await check.query(`INSERT INTO ${table} VALUES ($1, $2, -2) ON CONFLICT DO NOTHING`, [k.a, k.b]);
          }
          await drainStream(table);
          gapRuns++;
        }

        let stop = false;
        let counter = 1000;
        const op = async (c: pg.Client) => {
          const r = rand();
          const k = keyOf();
          const v = counter++;
          if (r < 0.35) await c.query(`INSERT INTO ${table} VALUES ($1, $2, $3) ON CONFLICT (a, b) DO UPDATE SET v = EXCLUDED.v`, [k.a, k.b, v]);
          else if (r < 0.6) await c.query(`UPDATE ${table} SET v = $3 WHERE a = $1 AND b = $2`, [k.a, k.b, v]);
          else if (r < 0.8) await c.query(`DELETE FROM ${table} WHERE a = $1 AND b = $2`, [k.a, k.b]);
          else {
            const to = keyOf();
            await c.query(
              `UPDATE ${table} SET a = $3, b = $4, v = $5 WHERE a = $1 AND b = $2 AND NOT EXISTS (SELECT 1 FROM ${table} WHERE a = $3 AND b = $4)`,
              [k.a, k.b, to.a, to.b, v],
            );
          }
        };
        const writers = workers.map(async (c) => {
          while (!stop) {
            try {
              if (rand() < 0.3) {
                await c.query('BEGIN');
                await op(c);
                await op(c);
                await c.query('COMMIT');
              } else await op(c);
            } catch {
              await c.query('ROLLBACK').catch(() => undefined);
            }
            if (rand() < 0.5) await sleep(Math.floor(rand() * 3));
          }
        });
        // Some runs hold one transaction in the commit/visibility gap and release it later.
        let trap: Promise<void> = Promise.resolve();
        if (rand() < 0.3) {
          traps++;
          const k = keyOf();
          const delay = Math.floor(rand() * 20);
          trap = (async () => {
            await sleep(Math.floor(rand() * 5));
            const held = await holdInVisibilityGap(trapClient, `INSERT INTO ${table} VALUES ($1, $2, $3) ON CONFLICT (a, b) DO UPDATE SET v = EXCLUDED.v`, [
              k.a,
              k.b,
              -seed,
            ]);
            await sleep(delay);
            await releaseGap(held.pid);
            await held.committed;
          })();
        }

        const shape = await reader.describe(table);
        const snapshotEvents: DecodedChange[] = [];
        let cursor: KeyCursor | null = null;
        let firstLowWatermark: string | null = null;
        for (;;) {
          const limit = 1 + Math.floor(rand() * 7);
          const read = await reader.readChunk(shape, cursor, limit);
          chunksRead++;
          firstLowWatermark ??= read.lowWatermark;
          // As the worker publishes them: packed, several records per chunk (docs/snapshot.md, "Packed records").
          for (const rec of packChunkRecords(SOURCE, shape, read, NO_COLUMN_RULES, 200 + Math.floor(rand() * 2000))) {
            const d = decodeSlotRecord(parseJsonExact(rec.data));
            if (d.kind !== 'changes') throw new Error(`unexpected ${d.kind}`);
            snapshotEvents.push(...d.changes);
          }
          cursor = cursorAfter(shape, read.rows) ?? cursor;
          if (read.rows.length < limit) {
            if (resnapshot) snapshotEvents.push(...decodeEvents(sweepRecord(SOURCE, table, firstLowWatermark, read.readAt)));
            break;
          }
          if (rand() < 0.5) await sleep(Math.floor(rand() * 3));
        }
        await sleep(Math.floor(rand() * 5));
        stop = true;
        await Promise.all(writers);
        await trap;

        const stream = await drainStream(table);
        const late = resnapshot ? preGap.filter(() => rand() < 0.3) : [];
        const events = shuffle([...stream, ...snapshotEvents, ...late], rand);
        const sink = live(applyAll(events, resnapshot ? applyAll(preGap) : undefined));
        const expected = await sourceRows(check, table);
        const context = `run ${run} (CDC_PROPERTY_SEED=${seed} CDC_SNAPSHOT_PROPERTY_RUNS=1): ${resnapshot ? 're-snapshot after a gap, ' : ''}${stream.length} stream events, ${snapshotEvents.length} snapshot rows`;
        expect([...sink.entries()].sort(), context).toEqual([...expected.entries()].sort());
        await check.query(`DROP TABLE ${table}`);
      }
      console.log(
        `snapshot stitching property: ${RUNS} runs converged (${chunksRead} chunks, ${traps} with a transaction held in the commit/visibility gap, ${gapRuns} re-snapshots after a gap with the sweep), seed ${SEED}`,
      );
    } finally {
      await reader.close();
      await Promise.all([...workers, trapClient, check].map((c) => c.end().catch(() => undefined)));
    }
  }, 600_000);

  it('commit/visibility trap: a transaction committed in the WAL before the watermark but not yet visible never loses to the chunk row', async () => {
    const table = 'public.trap';
    const c = await client();
    const t = await client();
    const reader = new PostgresSnapshotReader({ primary: { connectionString: url, options: '-c synchronous_commit=local' }, fencePollMs: 1 });
    try {
      await c.query(`CREATE TABLE ${table} (a int, b text, v int, PRIMARY KEY (a, b))`);
      await c.query(`INSERT INTO ${table} VALUES (1, 'x', 0), (2, 'x', 0)`);
      await drainStream(table);

      // T updates (1, x) to 1 and stops between its commit record and its visibility.
      const held = await holdInVisibilityGap(t, `UPDATE ${table} SET v = 1 WHERE a = 1`, []);

      // The trap exists: the slot already decodes T, a watermark taken now lies after T's
      // commit, and a snapshot taken now does not see T.
      const lsnAfter = (await c.query<{ l: string }>('SELECT pg_current_wal_insert_lsn()::text AS l')).rows[0]!.l;
      const naive = await c.query(`SELECT v FROM ${table} WHERE a = 1`);
      expect(naive.rows[0].v).toBe(0);
      const peek = await admin.query<SlotRow>(
        `SELECT lsn::text AS lsn, xid::text AS xid, data FROM pg_logical_slot_peek_changes($1, NULL, NULL, 'include-xids', '1', 'include-timestamp', '1', 'skip-empty-xacts', '1')`,
        [SLOT],
      );
      const tTx = groupTransactions(peek.rows).transactions.find((x) => x.changes.some((ch) => ch.table === table));
      expect(tTx, 'the slot decodes T before it is visible').toBeDefined();
      const tPosition = transactionsToRecords(
        SOURCE,
        [tTx!],
        new TableConfigIndex([{ table, deleteMode: 'soft', mask: [], exclude: [] }]),
        new Map([[table, ['a', 'b']]]),
      ).map((r) => decodeEvents(r)[0]!.position)[0]!;
      // A chunk stamped at that watermark would sort after T and keep the stale 0: the trap.
      expect(makePosition(lsnAfter, 0xffffffff) > tPosition).toBe(true);

      // The reader's fence does not read while T is in the gap …
      const shape = await reader.describe(table);
      let settled = false;
      const reading = reader.readChunk(shape, null, 10).finally(() => (settled = true));
      await sleep(300);
      expect(settled, 'the chunk waits for T').toBe(false);
      // … and once T is visible, it reads T's value (or sorts below T).
      await releaseGap(held.pid);
      await held.committed;
      const read = await reading;
      const rows = chunkRecords(SOURCE, shape, read, NO_COLUMN_RULES).flatMap(decodeEvents);
      const stream = await drainStream(table);
      const r1 = rows.find((e) => e.key.a === 1)!;
      expect(r1.after!.v === 1 || r1.position < tPosition).toBe(true);
      for (const order of [
        [...stream, ...rows],
        [...rows, ...stream],
      ]) {
        expect(live(applyAll(order)).get(keyText({ a: 1, b: 'x' }))?.v).toBe(1);
      }
    } finally {
      await reader.close();
      await Promise.all([c.end(), t.end()].map((p) => p.catch(() => undefined)));
    }
  }, 60_000);
});
