/**
 * Polling without a gap (docs/polling.md "What each mode guarantees"), randomized against a real
 * embedded PostgreSQL with the real reader (`PostgresSnapshotReader.readPollPage`) and pass
 * (`pollPass`):
 *
 * Per seed, four writer sessions run random transactions on two tables for a while: short ones
 * (one statement, autocommit) and long ones (BEGIN, a statement, a pause, more statements, COMMIT
 * or sometimes ROLLBACK), interleaved, so transactions commit out of the order in which they took
 * their poll values. Every transaction makes the same inserts and updates on both tables: one is
 * polled by a modified-at column (`timestamptz`, set by a trigger to `clock_timestamp()`, bounded
 * by the open-transaction horizon), the other by a transaction-id column (`xid8`, set by a trigger
 * to `pg_current_xact_id()`, bounded by the page snapshot's xmin). Both are polled again and again
 * while the writers run, with random page sizes; then, once the writers are done, a final poll.
 * Each poller publishes into a sink that keeps invariant 2's rule (a write whose position is not
 * higher than the stored one for the key changes nothing; a truncate at a position deletes every
 * key below it). Each sink must equal its source table row by row, values compared by type (the
 * integer as a number, the text as text).
 *
 * In the middle of the writing, a few rows are deleted at the source (polling never sees a delete)
 * and each table is re-snapshotted by the real snapshot worker (`runTableSnapshot`, in small
 * chunks, its records into the same sink) while the writers and the pollers go on
 * (docs/polling.md "Re-snapshot of a polled table"): its rows and sweep take the poll space's
 * bound, so the deleted rows go and every later polled change wins over the run's rows.
 *
 * Count and seed: `CDC_POLL_PROPERTY_RUNS` (default 8) and `CDC_PROPERTY_SEED` (default random),
 * both printed, with how many transactions committed after one that started later.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { PostgresSnapshotReader } from '../../lambda/adapters/snapshot-postgres.ts';
import { pollPass, type PollCursor } from '../../lambda/core/capture/poll.ts';
import { FixedPacer } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import { decodeSlotRecord } from '../../lambda/core/capture/slot-decoder.ts';
import type { SlotRecord } from '../../lambda/core/capture/slot-record.ts';
import { newSnapshotState } from '../../lambda/core/snapshot/snapshot.ts';
import { runTableSnapshot } from '../../lambda/core/snapshot/snapshot-worker.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

const RUNS = Number(process.env.CDC_POLL_PROPERTY_RUNS ?? 8);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const WRITERS = 4;
const WRITE_MS = 1200;
const MARGIN_MS = 100;
const TABLES = [
  { table: 'stamped', pollColumn: 'updated_at' },
  { table: 'xided', pollColumn: 'cdc_xid' },
] as const;

let cluster: PostgresCluster;
let url: string;
let admin: pg.Client;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  await cluster.createDatabase('src');
  url = cluster.url('src');
  admin = new pg.Client({ connectionString: url });
  await admin.connect();
  await admin.query(`
    CREATE TABLE stamped (id int PRIMARY KEY, val int NOT NULL, note text, updated_at timestamptz NOT NULL DEFAULT clock_timestamp());
    CREATE FUNCTION stamp() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.updated_at := clock_timestamp(); RETURN NEW; END $$;
    CREATE TRIGGER zz_stamp BEFORE INSERT OR UPDATE ON stamped FOR EACH ROW EXECUTE FUNCTION stamp();
    CREATE TABLE xided (id int PRIMARY KEY, val int NOT NULL, note text, cdc_xid xid8);
    CREATE FUNCTION cdc_poll_xid() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.cdc_xid := pg_current_xact_id(); RETURN NEW; END $$;
    CREATE TRIGGER zz_cdc_poll_xid BEFORE INSERT OR UPDATE ON xided FOR EACH ROW EXECUTE FUNCTION cdc_poll_xid();
    CREATE INDEX ON stamped (updated_at, id);
    CREATE INDEX ON xided (cdc_xid, id);`);
}, 120_000);

afterAll(async () => {
  await admin?.end().catch(() => undefined);
  await cluster?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * A sink keeping invariant 2's rule per key: the write with the highest position wins; an equal or
 * lower one changes nothing; a truncate (the re-snapshot's sweep) turns every key below its
 * position into a tombstone at it.
 */
class Sink {
  readonly rows = new Map<number, { position: string; val: number; note: string | null; deleted?: true }>();
  apply(records: readonly (SlotRecord | string)[]): void {
    for (const r of records) {
      const d = decodeSlotRecord(JSON.parse(typeof r === 'string' ? r : JSON.stringify(r)));
      if (d.kind !== 'changes') throw new Error(`a polled or snapshot record decoded as ${d.kind}`);
      for (const c of d.changes) {
        if (c.op === 'truncate') {
          for (const [id, had] of this.rows) if (had.position < c.position) this.rows.set(id, { position: c.position, val: 0, note: null, deleted: true });
          continue;
        }
        const after = c.after!;
        const id = Number(after.id);
        const had = this.rows.get(id);
        if (had && had.position >= c.position) continue;
        this.rows.set(id, { position: c.position, val: Number(after.val), note: after.note === null ? null : String(after.note) });
      }
    }
  }
  live(): Map<number, { val: number; note: string | null }> {
    return new Map([...this.rows].filter(([, v]) => !v.deleted).map(([k, v]) => [k, { val: v.val, note: v.note }]));
  }
}

/** One table's poller: its own reader, cursor and sink. */
function poller(table: string, pollColumn: string) {
  const reader = new PostgresSnapshotReader({ primary: { connectionString: url }, pollHorizonMarginMs: MARGIN_MS, applicationName: `poll-${table}` });
  const sink = new Sink();
  const cursors = new Map<string, PollCursor>();
  let pages = 0;
  const pass = (pageSize: number) =>
    pollPass({
      source: 'src',
      tables: [{ table: `public.${table}`, pollColumn, rules: { mask: [], exclude: [] } }],
      reader,
      cursors: { get: async (t) => cursors.get(t) ?? null, put: async (t, c) => void cursors.set(t, c) },
      publish: async (records) => sink.apply(records),
      pacerFor: () => new FixedPacer(pageSize),
      onPage: () => void pages++,
    });
  /** A re-snapshot of the table by the snapshot worker, its records into the same sink; returns its row count. */
  const resnapshot = async (chunk: number) => {
    const controlPlane = new MemoryControlPlane();
    const t = `public.${table}`;
    // Its own connection (a poll page and a chunk each hold a transaction), with the poller's margin.
    const own = new PostgresSnapshotReader({ primary: { connectionString: url }, pollHorizonMarginMs: MARGIN_MS, applicationName: `snapshot-${table}` });
    await controlPlane.putSnapshot(newSnapshotState('src', t, 'resnapshot', 'test', new Date(), null), null, null);
    const outcome = await runTableSnapshot({
      controlPlane,
      reader: own,
      publish: async (records) => sink.apply(records.map((r) => r.data)),
      pacer: new FixedPacer(chunk),
      source: 'src',
      table: t,
      rules: { mask: [], exclude: [] },
      pollColumnOf: () => pollColumn,
      owner: 'test',
    }).finally(() => own.close());
    if (outcome !== 'done') throw new Error(`re-snapshot of ${t}: ${outcome}`);
    return (await controlPlane.getSnapshot('src', t))!.rowsDone;
  };
  return { table, sink, pass, resnapshot, pages: () => pages, close: () => reader.close() };
}

interface Txn {
  started: number;
  ended: number;
}

/** One writer: random short and long transactions on both tables until `until`. */
async function writer(
  c: pg.Client,
  rand: () => number,
  nextId: () => number,
  until: number,
  log: Txn[],
  seq: () => number,
): Promise<{ committed: number; failed: number }> {
  let committed = 0;
  let failed = 0;
  const statement = async () => {
    const n = rand();
    if (n < 0.3) {
      const id = nextId();
      const val = Math.floor(rand() * 1000);
      for (const t of TABLES) await c.query(`INSERT INTO ${t.table} (id, val, note) VALUES ($1, $2, $3)`, [id, val, `ins ${id}`]);
    } else {
      const id = 1 + Math.floor(rand() * 30);
      const delta = 1 + Math.floor(rand() * 9);
      for (const t of TABLES) await c.query(`UPDATE ${t.table} SET val = val + $2, note = $3 WHERE id = $1`, [id, delta, `upd ${delta}`]);
    }
  };
  while (Date.now() < until) {
    const started = seq();
    try {
      if (rand() < 0.5) {
        await c.query('BEGIN');
        await statement();
        log.push({ started, ended: -1 });
        const me = log.at(-1)!;
        await c.query('COMMIT');
        me.ended = seq();
      } else {
        await c.query('BEGIN');
        await statement();
        await sleep(10 + rand() * 240);
        const more = Math.floor(rand() * 3);
        for (let i = 0; i < more; i++) await statement();
        if (rand() < 0.1) {
          await c.query('ROLLBACK');
          continue;
        }
        log.push({ started, ended: -1 });
        const me = log.at(-1)!;
        await c.query('COMMIT');
        me.ended = seq();
      }
      committed++;
    } catch {
      // A deadlock between two long transactions: one is rolled back (the source's truth is what committed).
      failed++;
      await c.query('ROLLBACK').catch(() => undefined);
    }
  }
  return { committed, failed };
}

async function sourceRows(table: string): Promise<Map<number, { val: number; note: string | null }>> {
  const r = await admin.query<{ id: number; val: number; note: string | null }>(`SELECT id, val, note FROM ${table} ORDER BY id`);
  return new Map(r.rows.map((x) => [x.id, { val: x.val, note: x.note }]));
}

describe('polling without a gap (randomized)', () => {
  it(`converges row by row under concurrent writers committing out of order, with a re-snapshot in the middle (${RUNS} runs)`, async () => {
    console.log(`poll commit-order property: seed ${SEED}, runs ${RUNS} (CDC_PROPERTY_SEED / CDC_POLL_PROPERTY_RUNS)`);
    for (let run = 0; run < RUNS; run++) {
      const seed = SEED + run;
      const rand = seededRandom(seed);
      await admin.query('TRUNCATE stamped, xided');
      for (const t of TABLES) await admin.query(`INSERT INTO ${t.table} (id, val, note) SELECT g, g, 'init' FROM generate_series(1, 30) g`);
      const pollers = TABLES.map((t) => poller(t.table, t.pollColumn));
      const clients = await Promise.all(
        Array.from({ length: WRITERS }, async () => {
          const c = new pg.Client({ connectionString: url });
          await c.connect();
          return c;
        }),
      );
      let id = 1000;
      let clock = 0;
      const log: Txn[] = [];
      const until = Date.now() + WRITE_MS;
      try {
        let writing = true;
        const writes = Promise.all(
          clients.map((c, i) =>
            writer(
              c,
              seededRandom(seed * 31 + i),
              () => ++id,
              until,
              log,
              () => ++clock,
            ),
          ),
        ).finally(() => {
          writing = false;
        });
        const polls = (async () => {
          while (writing) {
            for (const p of pollers) await p.pass(1 + Math.floor(rand() * 12));
            await sleep(rand() * 20);
          }
        })();
        // In the middle: deletes the pollers never see, then a re-snapshot of each table while writers and pollers go on.
        const resnapshots = (async () => {
          await sleep(WRITE_MS * (0.3 + rand() * 0.3));
          const gone = Array.from({ length: 1 + Math.floor(rand() * 4) }, () => 1 + Math.floor(rand() * 30));
          // One transaction on both tables; a deadlock with a writer's long transaction rolls it back: try again.
          for (let attempt = 1; ; attempt++) {
            try {
              await admin.query('BEGIN');
              for (const t of TABLES) await admin.query(`DELETE FROM ${t.table} WHERE id = ANY($1::int[])`, [gone]);
              await admin.query('COMMIT');
              break;
            } catch (e) {
              await admin.query('ROLLBACK');
              if (attempt >= 20) throw e;
            }
          }
          return Promise.all(pollers.map((p) => p.resnapshot(1 + Math.floor(rand() * 8))));
        })();
        const [done, , snapRows] = await Promise.all([writes, polls, resnapshots]);
        await sleep(MARGIN_MS + 50);
        for (const p of pollers) {
          await p.pass(50);
          await p.pass(50);
        }
        // Transactions that committed after one that started later: the order keyset polling used to lose.
        const outOfOrder = log.filter((a) => log.some((b) => b.started > a.started && b.ended > 0 && b.ended < a.ended)).length;
        const committed = done.reduce((s, d) => s + d.committed, 0);
        const failed = done.reduce((s, d) => s + d.failed, 0);
        for (const p of pollers) {
          const src = await sourceRows(p.table);
          const got = p.sink.live();
          const wrong = [...src]
            .filter(([k, v]) => got.get(k)?.val !== v.val || got.get(k)?.note !== v.note)
            .map(([k, v]) => `${k}: source ${JSON.stringify(v)} sink ${JSON.stringify(got.get(k) ?? null)}`);
          const extra = [...got.keys()].filter((k) => !src.has(k));
          expect({ wrong, extra }, `seed ${seed} ${p.table}: ${wrong.length} rows differ`).toEqual({ wrong: [], extra: [] });
          expect(got.size).toBe(src.size);
        }
        console.log(
          `  seed ${seed}: ${committed} transactions committed (${outOfOrder} after a later-started one), ${failed} rolled back by deadlock, ${pollers.map((p, i) => `${p.table} ${p.sink.live().size} rows in ${p.pages()} pages, re-snapshot ${snapRows[i]} rows`).join(', ')}: converged`,
        );
      } finally {
        for (const c of clients) await c.end().catch(() => undefined);
        for (const p of pollers) await p.close();
      }
    }
  }, 120_000);
});
