/**
 * The snapshot reader against a real PostgreSQL: the same row read by the slot capture's path
 * (test_decoding in the capture's session settings → `transactionsToRecords`, masking applied)
 * and by the snapshot path (`PostgresSnapshotReader` → `chunkRecords`) gives byte-identical
 * columns — names, types and values, masked values included (invariant 4) — across many types;
 * keyset chunks over a composite text key visit every row once, in order.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { transactionsToRecords } from '../../local/capture-records.ts';
import { columnTypesOf } from '../../local/catalog.ts';
import { groupTransactions, type SlotRow } from '../../lambda/core/capture/logical-text.ts';
import { TableConfigIndex } from '../../lambda/core/tables/table-config.ts';
import { chunkRecords, cursorAfter, packChunkRecords, type KeyCursor } from '../../lambda/core/snapshot/snapshot.ts';
import { packedRowRecord, validatePackedSnapshotRecord } from '../../lambda/core/capture/slot-record.ts';
import { parseJsonExact } from '../../lambda/core/shared/json-exact.ts';
import { CANONICAL_SESSION, PostgresSnapshotReader } from '../../lambda/adapters/snapshot-postgres.ts';

let cluster: PostgresCluster;
let url: string;
let sql: pg.Client;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  url = cluster.url('postgres');
  sql = new pg.Client({ connectionString: url });
  await sql.connect();
  // A different session time zone and float setting than the capture's: the paths must not depend on them.
  await sql.query("SET TimeZone = 'America/New_York'");
}, 120_000);

afterAll(async () => {
  await sql?.end().catch(() => undefined);
  await cluster?.stop();
});

describe('snapshot reader (real PostgreSQL)', () => {
  it('a row gives byte-identical columns on the capture path and the snapshot path, masked values included', async () => {
    await sql.query(`CREATE TABLE public.kinds (
      id int PRIMARY KEY, big bigint, huge bigint, n numeric(12,3), f float8, r real, t text, vc varchar(20), ch char(4), b boolean,
      ts timestamptz, d date, tm time, iv interval, j jsonb, js json, by bytea, arr text[], ints int[], bits bit varying(8), u uuid, ip inet,
      email text, secret text, masked_n numeric, masked_ts timestamptz)`);
    await sql.query(`SELECT pg_create_logical_replication_slot('kinds', 'test_decoding')`);
    await sql.query(`INSERT INTO public.kinds VALUES
      (1, 42, 9007199254740993, 12.5, 0.1, 1.5, 'it''s "quoted"
 two lines', 'short', 'ab', true, '2026-11-29 12:00:00.123456+05:30', '2026-12-01', '13:14:15', '1 day 02:03:04', '{"b": [1, 2], "a": null}', '{"raw":  1}',
       '\\xdeadbeef', ARRAY['x', 'y z', NULL, 'q"uote'], ARRAY[1, 2], B'1011', 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11', '10.0.0.1',
       'person@example.com', 'do not ship', 3.140, '2026-01-01 00:00:00+00'),
      (2, NULL, NULL, NULL, 'NaN', '-Infinity', '', NULL, NULL, false, NULL, NULL, NULL, NULL, 'null', NULL, NULL, '{}', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
      (3, NULL, NULL, NULL, '-0', '-0', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL),
      (4, NULL, NULL, NULL, '1e-05', '1.5e+20', NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)`);
    const rules = { mask: ['email', 'masked_n', 'masked_ts'], exclude: ['secret'] };
    const tables = new TableConfigIndex([{ table: 'public.kinds', deleteMode: 'soft', mask: rules.mask, exclude: rules.exclude }]);

    // Capture path: the capture's session settings, its peek options, its record builder.
    const cap = new pg.Client({ connectionString: url });
    await cap.connect();
    await cap.query("SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1");
    const peek = await cap.query<SlotRow>(
      `SELECT lsn::text AS lsn, xid::text AS xid, data FROM pg_logical_slot_get_changes('kinds', NULL, NULL, 'include-xids', '1', 'include-timestamp', '1', 'skip-empty-xacts', '1')`,
    );
    // The catalog's full type names (with modifiers), as the capture reads them for every peek.
    const types = await columnTypesOf(cap, ['public.kinds']);
    await cap.end();
    const captured = transactionsToRecords('src', groupTransactions(peek.rows).transactions, tables, new Map([['public.kinds', ['id']]]), types);
    expect(captured).toHaveLength(4);
    // A float is carried as its exact text where JavaScript would spell it otherwise (-0 would be written 0).
    const floats = (r: (typeof captured)[number]) => r.columns!.filter((c) => c.name === 'f' || c.name === 'r').map((c) => c.value);
    expect(captured.slice(2).map(floats)).toEqual([
      ['-0', '-0'],
      ['1e-05', '1.5e+20'],
    ]);

    // Snapshot path.
    const reader = new PostgresSnapshotReader({ primary: { connectionString: url } });
    try {
      const shape = await reader.describe('public.kinds');
      const read = await reader.readChunk(shape, null, 10);
      // The read's round trips (BEGIN, COPY, COMMIT), what the pacer leaves out of a chunk's time (docs/snapshot.md, "The budget").
      expect(read.roundTripMs).toBeGreaterThan(0);
      expect(read.roundTripMs).toBeLessThanOrEqual(read.readMs);
      const snap = chunkRecords('src', shape, read, rules);
      expect(snap.map((r) => JSON.stringify(r.columns))).toEqual(captured.map((r) => JSON.stringify(r.columns)));
      expect(JSON.stringify(snap[0]!.columns)).not.toContain('person@example.com');
      expect(snap[0]!.columns!.some((c) => c.name === 'secret')).toBe(false);
      // The packed records the worker publishes carry the same values, row for row (docs/snapshot.md, "Packed records").
      const packed = packChunkRecords('src', shape, read, rules).flatMap((r) => {
        const p = validatePackedSnapshotRecord(parseJsonExact(r.data));
        return p.rows.map((_, i) => packedRowRecord(p, i));
      });
      expect(packed.map((r) => JSON.stringify(r.columns))).toEqual(captured.map((r) => JSON.stringify(r.columns)));
      expect(CANONICAL_SESSION).toContain("TimeZone = 'UTC'");
    } finally {
      await reader.close();
      await sql.query(`SELECT pg_drop_replication_slot('kinds')`);
    }
  }, 60_000);

  it('keyset chunks over a composite key with text in a non-C collation visit every row once, in key order', async () => {
    await sql.query(`CREATE TABLE public.ck (a int, b text COLLATE "en_US", v int, PRIMARY KEY (a, b))`).catch(async () => {
      await sql.query(`CREATE TABLE public.ck (a int, b text, v int, PRIMARY KEY (a, b))`);
    });
    await sql.query(
      `INSERT INTO public.ck SELECT g % 7, chr(65 + (g % 26)) || (g % 3)::text || CASE WHEN g % 2 = 0 THEN ' x' ELSE 'é' END, g FROM generate_series(1, 500) g ON CONFLICT DO NOTHING`,
    );
    const expected = (await sql.query<{ a: string; b: string }>('SELECT a::text AS a, b FROM public.ck ORDER BY a, b')).rows.map((r) => `${r.a}|${r.b}`);
    const reader = new PostgresSnapshotReader({ primary: { connectionString: url } });
    try {
      const shape = await reader.describe('public.ck');
      expect(shape.key).toEqual(['a', 'b']);
      expect(await reader.estimateRows('public.ck')).toBe(expected.length);
      const seen: string[] = [];
      let cursor: KeyCursor | null = null;
      for (let size = 1; ; size = (size % 13) + 1) {
        const read = await reader.readChunk(shape, cursor, size);
        for (const row of read.rows) seen.push(`${row[0]}|${row[1]}`);
        cursor = cursorAfter(shape, read.rows) ?? cursor;
        if (read.rows.length < size) break;
      }
      expect(seen).toEqual(expected);
    } finally {
      await reader.close();
    }
  }, 60_000);

  it('chunks are streamed with COPY: keys and values with quotes, backslashes, tabs, newlines and \\N read back exactly, one chunk per key', async () => {
    await sql.query('CREATE TABLE public.esc (k text PRIMARY KEY, v text)');
    const nasty = ["it's", 'back\\slash', 'tab\there', 'new\nline', '\\N', "E'x'", '$1', 'cr\rx', 'ü😀', ''];
    for (const [i, k] of nasty.entries()) await sql.query('INSERT INTO public.esc VALUES ($1, $2)', [k, i % 3 === 0 ? null : `${k}|${i}`]);
    const expected = (await sql.query({ text: 'SELECT k, v FROM public.esc ORDER BY k', rowMode: 'array' })).rows;
    const reader = new PostgresSnapshotReader({ primary: { connectionString: url } });
    try {
      const shape = await reader.describe('public.esc');
      const seen: unknown[] = [];
      let cursor: KeyCursor | null = null;
      for (;;) {
        const read = await reader.readChunk(shape, cursor, 1);
        seen.push(...read.rows);
        cursor = cursorAfter(shape, read.rows) ?? cursor;
        if (read.rows.length < 1) break;
      }
      expect(seen).toEqual(expected);
      expect(seen).toHaveLength(nasty.length);
    } finally {
      await reader.close();
    }
  }, 60_000);

  it('the fence waits for an older writing transaction of this database, not for one of another database', async () => {
    await cluster.createDatabase('elsewhere');
    const other = new pg.Client({ connectionString: cluster.url('elsewhere') });
    const same = new pg.Client({ connectionString: url });
    await Promise.all([other.connect(), same.connect()]);
    await sql.query('CREATE TABLE public.f (id int PRIMARY KEY)');
    const reader = new PostgresSnapshotReader({ primary: { connectionString: url }, fencePollMs: 5 });
    try {
      const shape = await reader.describe('public.f');
      await other.query('BEGIN');
      await other.query('SELECT pg_current_xact_id()');
      await reader.readChunk(shape, null, 10); // does not wait for the other database's open transaction
      await same.query('BEGIN');
      await same.query('INSERT INTO public.f VALUES (1)');
      let settled = false;
      const reading = reader.readChunk(shape, null, 10).finally(() => (settled = true));
      await new Promise((r) => setTimeout(r, 300));
      expect(settled, 'waits for the open transaction of this database').toBe(false);
      await same.query('COMMIT');
      const read = await reading;
      expect(read.rows).toEqual([['1']]);
    } finally {
      await other.query('ROLLBACK').catch(() => undefined);
      await reader.close();
      await Promise.all([other.end(), same.end()]);
    }
  }, 60_000);
});
