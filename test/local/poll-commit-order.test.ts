/**
 * Keyset polling and transactions that commit out of cursor order (docs/polling.md "What each mode
 * guarantees"), against a real embedded PostgreSQL with the real reader (`PostgresSnapshotReader`)
 * and pass (`pollPass`):
 *
 * - transaction A takes its poll value (a modified-at from the clock, `now()`, or a transaction id)
 *   and stays open; B takes a later value and commits; a pass runs; A commits; later passes run.
 *   A's row must arrive. Before the horizon, the first pass read B and moved the cursor past A's
 *   value, and A's row was lost for good;
 * - an integer version column is refused by name, with the safe alternatives;
 * - a prepared transaction holds the timestamp horizon until it ends;
 * - a role that cannot see other sessions' transactions is refused (`POLL_HORIZON_PRIVILEGE`), and
 *   `cdc doctor`'s checks fail it with the grant; with `pg_read_all_stats` both pass;
 * - the SQL of docs/polling.md (both column recipes, the horizon query) runs as written, and a
 *   table set up by it is polled by either column.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { PostgresSnapshotReader } from '../../lambda/adapters/snapshot-postgres.ts';
import { gatherSourceFacts } from '../../lambda/adapters/source-facts-pg.ts';
import { runChecks } from '../../lambda/core/operator/doctor.ts';
import { pollPass, type PollCursor, type PollReader } from '../../lambda/core/capture/poll.ts';
import { FixedPacer } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import type { SlotRecord } from '../../lambda/core/capture/slot-record.ts';

const MARGIN_MS = 200;

let cluster: PostgresCluster;
let url: string;
let admin: pg.Client;
const open: pg.Client[] = [];

async function client(u = url): Promise<pg.Client> {
  const c = new pg.Client({ connectionString: u });
  await c.connect();
  open.push(c);
  return c;
}

beforeAll(async () => {
  cluster = await startPostgres({ fast: true, settings: { max_prepared_transactions: 4 } });
  await cluster.createDatabase('src');
  url = cluster.url('src');
  admin = await client();
  await admin.query(`
    CREATE SEQUENCE versions;
    CREATE TABLE versioned (id int PRIMARY KEY, note text, v bigint NOT NULL);
    CREATE TABLE stamped (id int PRIMARY KEY, note text, updated_at timestamptz NOT NULL DEFAULT clock_timestamp());
    CREATE TABLE stamped_now (id int PRIMARY KEY, note text, updated_at timestamp NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'));
    CREATE TABLE xided (id int PRIMARY KEY, note text, cdc_xid xid8);
    CREATE FUNCTION xided_poll_xid() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN NEW.cdc_xid := pg_current_xact_id(); RETURN NEW; END $$;
    CREATE TRIGGER zz_cdc_poll_xid BEFORE INSERT OR UPDATE ON xided FOR EACH ROW EXECUTE FUNCTION xided_poll_xid();
    ALTER TABLE xided ENABLE ALWAYS TRIGGER zz_cdc_poll_xid;
    INSERT INTO versioned SELECT g, 'init', nextval('versions') FROM generate_series(1, 5) g;
    INSERT INTO stamped (id, note) SELECT g, 'init' FROM generate_series(1, 5) g;
    INSERT INTO stamped_now (id, note) SELECT g, 'init' FROM generate_series(1, 5) g;
    INSERT INTO xided (id, note) SELECT g, 'init' FROM generate_series(1, 5) g;`);
}, 120_000);

afterAll(async () => {
  for (const c of open) await c.end().catch(() => undefined);
  await cluster?.stop();
});

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** A pass function over one table with an in-memory cursor store, and what it published (the newest note per id). */
function poller(table: string, pollColumn: string, reader: PollReader, key = 'id') {
  const published: SlotRecord[] = [];
  const cursors = new Map<string, PollCursor>();
  const pass = () =>
    pollPass({
      source: 'demo',
      tables: [{ table: `public.${table}`, pollColumn, rules: { mask: [], exclude: [] } }],
      reader,
      cursors: { get: async (t) => cursors.get(t) ?? null, put: async (t, c) => void cursors.set(t, c) },
      publish: async (r) => void published.push(...r),
      pacerFor: () => new FixedPacer(100),
    });
  const notes = () => {
    const last = new Map<number, string>();
    for (const r of published) last.set(Number(r.columns!.find((c) => c.name === key)!.value), String(r.columns!.find((c) => c.name === 'note')!.value));
    return last;
  };
  return { pass, notes };
}

const reader = (u = url) => new PostgresSnapshotReader({ primary: { connectionString: u }, pollHorizonMarginMs: MARGIN_MS });

describe('polling transactions that commit out of cursor order', () => {
  const cases = [
    { table: 'stamped', pollColumn: 'updated_at', set: 'updated_at = clock_timestamp()' },
    { table: 'stamped_now', pollColumn: 'updated_at', set: "updated_at = now() AT TIME ZONE 'UTC'" },
    { table: 'xided', pollColumn: 'cdc_xid', set: 'id = id' },
  ];
  for (const k of cases) {
    it(`${k.table} (${k.pollColumn}): a row whose transaction took its value first and committed last arrives`, async () => {
      const r = reader();
      const p = poller(k.table, k.pollColumn, r);
      await p.pass();
      const a = await client();
      const b = await client();
      await a.query('BEGIN');
      await a.query(`UPDATE ${k.table} SET note = 'A (slow tx)', ${k.set} WHERE id = 1`);
      await sleep(5);
      await b.query(`UPDATE ${k.table} SET note = 'B', ${k.set} WHERE id = 2`);
      await p.pass(); // before the horizon: read B and moved the cursor past A's value
      await a.query('COMMIT');
      await sleep(MARGIN_MS + 50);
      await p.pass();
      await p.pass();
      await r.close();
      const notes = p.notes();
      expect(notes.get(2)).toBe('B');
      expect(notes.get(1), `id 1 of ${k.table} was skipped: still ${notes.get(1)} downstream`).toBe('A (slow tx)');
      expect([...notes.keys()].sort()).toEqual([1, 2, 3, 4, 5]);
    });
  }

  it("docs/polling.md's SQL runs as written: both recipes on a table, the horizon query, and polls by either column", async () => {
    const doc = readFileSync(fileURLToPath(new URL('../../docs/polling.md', import.meta.url)), 'utf8');
    const blocks = [...doc.matchAll(/```sql\n([\s\S]*?)```/g)].map((m) => m[1]!);
    expect(blocks.length).toBe(3);
    await admin.query(
      `CREATE TABLE public.legacy_orders (order_no int PRIMARY KEY, note text); INSERT INTO public.legacy_orders VALUES (1, 'before'); CREATE ROLE capture`,
    );
    for (const sql of blocks) await admin.query(sql);
    await admin.query(`INSERT INTO public.legacy_orders VALUES (2, 'after'); UPDATE public.legacy_orders SET note = 'changed' WHERE order_no = 1`);
    expect((await admin.query(`SELECT pg_has_role('capture', 'pg_read_all_stats', 'USAGE') AS ok`)).rows[0].ok).toBe(true);
    await sleep(MARGIN_MS + 50);
    for (const pollColumn of ['updated_at', 'cdc_xid']) {
      const r = reader();
      const p = poller('legacy_orders', pollColumn, r, 'order_no');
      await p.pass();
      await r.close();
      expect([...p.notes()].sort(), pollColumn).toEqual([
        [1, 'changed'],
        [2, 'after'],
      ]);
    }
  });

  it('refuses an integer version column by name, with the safe alternatives', async () => {
    const r = reader();
    const p = poller('versioned', 'v', r);
    await expect(p.pass()).rejects.toMatchObject({
      code: 'POLL_TABLE_UNSUPPORTED',
      message: expect.stringMatching(/public\.versioned: poll column v is bigint: .*clock_timestamp\(\).*xid8.*pg_current_xact_id\(\).*from the log/),
    });
    await r.close();
  });

  it('a prepared transaction holds the timestamp horizon until it ends; its row then arrives', async () => {
    const r = reader();
    const p = poller('stamped', 'updated_at', r);
    await p.pass();
    const a = await client();
    await a.query('BEGIN');
    await a.query(`UPDATE stamped SET note = 'prepared', updated_at = clock_timestamp() WHERE id = 3`);
    await a.query(`PREPARE TRANSACTION 'poll_hold'`);
    await admin.query(`UPDATE stamped SET note = 'after prepare', updated_at = clock_timestamp() WHERE id = 4`);
    await sleep(MARGIN_MS + 50);
    await p.pass();
    expect(p.notes().get(4)).not.toBe('after prepare'); // the horizon is held: nothing past it is read
    await admin.query(`COMMIT PREPARED 'poll_hold'`);
    await sleep(MARGIN_MS + 50);
    await p.pass();
    await r.close();
    expect(p.notes().get(3)).toBe('prepared');
    expect(p.notes().get(4)).toBe('after prepare');
  });

  it('refuses a role that cannot see open transactions (POLL_HORIZON_PRIVILEGE), and cdc doctor says so; pg_read_all_stats lifts both', async () => {
    await admin.query(`CREATE ROLE poller LOGIN; GRANT SELECT ON stamped, xided TO poller`);
    const asPoller = url.replace('postgres@', 'poller@').replace(/\/\/postgres(:[^@]*)?@/, '//poller@');
    expect(asPoller).toContain('poller@');
    const facts = async () => {
      const c = await client(asPoller);
      return runChecks(
        await gatherSourceFacts(c, {
          tables: [
            { table: 'public.stamped', pollColumn: 'updated_at' },
            { table: 'public.xided', pollColumn: 'cdc_xid' },
          ],
        }),
      );
    };
    const horizon = (rs: Awaited<ReturnType<typeof facts>>, table: string) => rs.find((x) => x.check === 'poll_horizon' && x.subject === table);

    const refused = reader(asPoller);
    await expect(poller('stamped', 'updated_at', refused).pass()).rejects.toMatchObject({
      code: 'POLL_HORIZON_PRIVILEGE',
      message: expect.stringContaining('GRANT pg_read_all_stats TO "poller"'),
    });
    await refused.close();
    const before = await facts();
    expect(horizon(before, 'public.stamped')).toMatchObject({ status: 'FAIL', fix: 'GRANT pg_read_all_stats TO "poller";' });
    expect(horizon(before, 'public.xided')?.status).toBe('PASS'); // a transaction-id column needs no such view
    // The write side, from the catalog: xided's trigger fires always; stamped has none (only a default), and rows never read would be NULL.
    const trigger = (table: string) => before.filter((x) => x.check === 'poll_trigger' && x.subject === table).map((x) => x.status);
    expect(trigger('public.xided')).toEqual(['PASS']);
    expect(trigger('public.stamped')).toEqual(['WARN']);
    await admin.query(
      "INSERT INTO xided (id, note) VALUES (99, 'null'); ALTER TABLE xided DISABLE TRIGGER zz_cdc_poll_xid; UPDATE xided SET cdc_xid = NULL WHERE id = 99",
    );
    expect((await facts()).filter((x) => x.check === 'poll_trigger' && x.subject === 'public.xided').map((x) => x.status)).toEqual(['FAIL', 'WARN']);
    await admin.query('DELETE FROM xided WHERE id = 99; ALTER TABLE xided ENABLE ALWAYS TRIGGER zz_cdc_poll_xid');
    const xided = reader(asPoller);
    await poller('xided', 'cdc_xid', xided).pass();
    await xided.close();

    await admin.query('GRANT pg_read_all_stats TO poller');
    expect(horizon(await facts(), 'public.stamped')?.status).toBe('PASS');
    const allowed = reader(asPoller);
    const p = poller('stamped', 'updated_at', allowed);
    await p.pass();
    await allowed.close();
    expect(p.notes().size).toBe(5);
  });
});
