import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { DecodedChange } from '../../../lambda/core/capture/decoded.ts';
import { validateChangeEvent } from '../../../lambda/core/shared/event.ts';
import { makePosition } from '../../../lambda/core/shared/position.ts';
import { decodeSlotRecord } from '../../../lambda/core/capture/slot-decoder.ts';
import { buildSlotRecord } from '../../../lambda/core/capture/slot-record.ts';
import {
  groupTransactions,
  parseTestDecodingLine,
  pgTimestampToIso,
  TestDecodingParseError,
  type DecodedTransaction,
  type SlotRow,
  type TestDecodingChange,
} from '../../../lambda/core/capture/logical-text.ts';
import { startPostgres, type PostgresCluster } from '../../../local/postgres.ts';

describe('test_decoding lines (text only)', () => {
  it('parses BEGIN and COMMIT with and without xids and timestamps', () => {
    expect(parseTestDecodingLine('BEGIN 754')).toEqual({ kind: 'begin', xid: '754' });
    expect(parseTestDecodingLine('BEGIN')).toEqual({ kind: 'begin', xid: null });
    expect(parseTestDecodingLine('COMMIT 754 (at 2026-11-29 12:00:00.123456+00)')).toEqual({
      kind: 'commit',
      xid: '754',
      commitTs: '2026-11-29T12:00:00.123456Z',
    });
    expect(parseTestDecodingLine('COMMIT 754')).toEqual({ kind: 'commit', xid: '754', commitTs: null });
  });

  it('converts PostgreSQL timestamps with any offset to UTC with microseconds', () => {
    expect(pgTimestampToIso('2026-11-29 13:05:21.19569+00')).toBe('2026-11-29T13:05:21.195690Z');
    expect(pgTimestampToIso('2026-11-29 18:35:21+05:30')).toBe('2026-11-29T13:05:21.000000Z');
    expect(pgTimestampToIso('2026-11-29 05:05:21.5-08')).toBe('2026-11-29T13:05:21.500000Z');
    expect(pgTimestampToIso('2027-01-01 00:30:00.000001+01')).toBe('2026-12-31T23:30:00.000001Z');
    expect(() => pgTimestampToIso('Sun Nov 29 13:05:21 2026 UTC')).toThrow(/^commitTs: expected a timestamp/);
  });

  it('parses values of every printed shape', () => {
    const line = `table public.t: INSERT: id[integer]:-1 s[text]:'it''s\nmulti line' n[text]:null q[text]:'null' b[bigint]:9007199254740993 c[bigint]:-42 d[numeric]:1.10 f[double precision]:-1.5e-07 g[real]:Infinity ok[boolean]:false bits[bit varying]:B'101' arr[integer[]]:'{1,2}'`;
    const r = parseTestDecodingLine(line);
    expect(r).toEqual({
      kind: 'change',
      change: {
        schema: 'public',
        name: 't',
        table: 'public.t',
        op: 'insert',
        columns: [
          { name: 'id', type: 'integer', value: -1 },
          { name: 's', type: 'text', value: "it's\nmulti line" },
          { name: 'n', type: 'text', value: null },
          { name: 'q', type: 'text', value: 'null' },
          { name: 'b', type: 'bigint', value: '9007199254740993' },
          { name: 'c', type: 'bigint', value: -42 },
          { name: 'd', type: 'numeric', value: '1.10' },
          { name: 'f', type: 'double precision', value: '-1.5e-07' },
          { name: 'g', type: 'real', value: 'Infinity' },
          { name: 'ok', type: 'boolean', value: false },
          { name: 'bits', type: 'bit varying', value: '101' },
          { name: 'arr', type: 'integer[]', value: '{1,2}' },
        ],
        oldKey: null,
        unchanged: [],
      },
    });
  });

  it('carries a whole float of 2^53 or more as its text, so the event keeps it instead of refusing it as an integer that lost digits', () => {
    const line = `table public.t: INSERT: id[integer]:1 f[double precision]:1e+20 g[real]:3.4028235e+38 h[double precision]:9007199254740991 i[double precision]:-1.5e+300 j[real]:1.5`;
    const r = parseTestDecodingLine(line);
    if (r.kind !== 'change') throw new Error('expected a change');
    const values = Object.fromEntries(r.change.columns!.map((col) => [col.name, col.value]));
    // 2^53 - 1 is still an exact integer number; 1.5 is a fraction; the others are whole numbers beyond 2^53.
    expect(values).toEqual({ id: 1, f: '1e+20', g: '3.4028235e+38', h: 9007199254740991, i: '-1.5e+300', j: 1.5 });
    const event = {
      v: 1,
      source: 's',
      table: 'public.t',
      op: 'insert',
      key: { id: 1 },
      after: values,
      before: null,
      position: makePosition('0/10', 0),
      commitTs: '2026-12-01T00:00:00.000000Z',
      capture: 'slot',
      schemaVersion: 1,
    };
    expect(() => validateChangeEvent(event)).not.toThrow();
    expect(() => validateChangeEvent({ ...event, after: { ...values, g: 3.4028235e38 } })).toThrow(/after\.g: integer .* is beyond 2\^53/);
  });

  it('carries a float whose JavaScript spelling differs (-0, 17 digits, another exponent) as its exact text', () => {
    const line = `table public.t: INSERT: id[integer]:1 a[double precision]:-0 b[double precision]:0 c[double precision]:0.10000000000000001 d[real]:1e-05 e[double precision]:0.1 f[double precision]:-0.0`;
    const r = parseTestDecodingLine(line);
    if (r.kind !== 'change') throw new Error('expected a change');
    const values = Object.fromEntries(r.change.columns!.map((col) => [col.name, col.value]));
    expect(values).toEqual({ id: 1, a: '-0', b: 0, c: '0.10000000000000001', d: '1e-05', e: 0.1, f: '-0.0' });
    // What JSON carries: the text, sign included; an event refuses a -0 number (JSON would write 0).
    expect(JSON.parse(JSON.stringify(values)).a).toBe('-0');
    const event = {
      v: 1,
      source: 's',
      table: 'public.t',
      op: 'insert',
      key: { id: 1 },
      after: values,
      before: null,
      position: makePosition('0/10', 0),
      commitTs: '2026-12-01T00:00:00.000000Z',
      capture: 'slot',
      schemaVersion: 1,
    };
    expect(() => validateChangeEvent(event)).not.toThrow();
    expect(() => validateChangeEvent({ ...event, after: { ...values, a: -0 } })).toThrow(/after\.a: -0 as a JSON number/);
  });

  it('is not fooled by section keywords inside values or quoted names', () => {
    const r = parseTestDecodingLine(
      `table "my ""s"".x"."T: 1": UPDATE: old-key: "new-tuple:"[text]:' new-tuple: k[text]:''x''' new-tuple: "new-tuple:"[text]:'b' "x y"[text]:unchanged-toast-datum`,
    );
    expect(r).toEqual({
      kind: 'change',
      change: {
        schema: 'my "s".x',
        name: 'T: 1',
        table: 'my "s".x.T: 1',
        op: 'update',
        columns: [{ name: 'new-tuple:', type: 'text', value: 'b' }],
        oldKey: [{ name: 'new-tuple:', type: 'text', value: " new-tuple: k[text]:'x'" }],
        unchanged: ['x y'],
        unchangedTypes: { 'x y': 'text' },
      },
    });
  });

  it('parses TRUNCATE of several tables with its flags, DELETE without data, and messages', () => {
    expect(parseTestDecodingLine('table public.a, public."B": TRUNCATE: restart_seqs cascade')).toMatchObject({
      kind: 'truncate',
      restartSeqs: true,
      cascade: true,
      changes: [
        { table: 'public.a', op: 'truncate' },
        { table: 'public.B', op: 'truncate' },
      ],
    });
    expect(parseTestDecodingLine('table public.nopk: DELETE: (no-tuple-data)')).toMatchObject({ kind: 'change', change: { op: 'delete', oldKey: null } });
    expect(parseTestDecodingLine('message: transactional: 0 prefix: p, sz: 3 content:a b')).toEqual({
      kind: 'message',
      transactional: false,
      prefix: 'p',
      content: 'a b',
    });
  });

  it('refuses lines it does not understand, saying where', () => {
    const bad = [
      'ROLLBACK 5',
      'table public.t INSERT: id[integer]:1',
      'table public.t: UPSERT: id[integer]:1',
      "table public.t: INSERT: id[integer]:'1",
      'table public.t: INSERT: id[integer]:1x',
      'table public.t: INSERT: t[text]:abc',
      'table public.t: INSERT: id[integer:1',
      'table public.t: INSERT: (no-tuple-data)',
      'table public.t: INSERT: big[text]:unchanged-toast-datum',
      'table public.t, public.u: INSERT: id[integer]:1',
      'table public.t: TRUNCATE: sideways',
    ];
    for (const line of bad) {
      expect(() => parseTestDecodingLine(line), line).toThrow(TestDecodingParseError);
    }
    expect(() => parseTestDecodingLine('table public.t: INSERT: id[integer]:1x')).toThrow(/expected an integer, got "1x" at offset/);
  });

  it('groups rows into committed transactions and leaves an unfinished one', () => {
    const rows: SlotRow[] = [
      { lsn: '0/10', xid: '5', data: 'BEGIN 5' },
      { lsn: '0/11', xid: '5', data: 'table public.t: INSERT: id[integer]:1' },
      { lsn: '0/20', xid: '5', data: 'COMMIT 5 (at 2026-01-01 00:00:00+00)' },
      { lsn: '0/21', xid: null, data: 'message: transactional: 0 prefix: p, sz: 1 content:x' },
      { lsn: '0/30', xid: '6', data: 'BEGIN 6' },
      { lsn: '0/31', xid: '6', data: 'table public.t: DELETE: id[integer]:1' },
    ];
    const { transactions, consumed } = groupTransactions(rows);
    expect(consumed).toBe(4);
    expect(transactions).toHaveLength(1);
    expect(transactions[0]).toMatchObject({ xid: '5', commitLsn: '0/20', commitTs: '2026-01-01T00:00:00.000000Z' });
    expect(() => groupTransactions([rows[1]!])).toThrow(/outside a transaction/);
    expect(() => groupTransactions([rows[0]!, rows[0]!])).toThrow(/BEGIN inside transaction 5/);
    expect(() => groupTransactions([rows[0]!, { lsn: '0/20', xid: '5', data: 'COMMIT 5' }])).toThrow(/include-timestamp/);
    expect(() => groupTransactions([{ lsn: '0/20', xid: '5', data: 'BEGIN' }])).toThrow(/include-xids/);
  });
});

/** The capture's part, done here by hand: primary-key columns from the catalog. */
async function primaryKey(client: pg.Client, table: string): Promise<string[]> {
  const [schema, name] = table.split('.') as [string, string];
  const r = await client.query<{ attname: string }>(
    `SELECT a.attname FROM pg_index i
       JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
       JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
       JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
      WHERE i.indisprimary AND n.nspname = $1 AND c.relname = $2 ORDER BY k.ord`,
    [schema, name],
  );
  return r.rows.map((row) => row.attname);
}

describe('test_decoding output of a real PostgreSQL', () => {
  let cluster: PostgresCluster;
  let client: pg.Client;
  let transactions: DecodedTransaction[];
  let rows: SlotRow[];
  const BIG = Array.from({ length: 600 }, (_, i) => `chunk-${i}`).join('|'); // > 2 KB, stored out of line
  const TRICKY = 'it\'s a "quote"\nsecond line\twith tab \\ backslash \' new-tuple: id[integer]:9 ünïcødé';

  beforeAll(async () => {
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('src');
    client = new pg.Client({ connectionString: cluster.url('src') });
    await client.connect();
    await client.query(`SELECT pg_create_logical_replication_slot('cdc_test', 'test_decoding')`);
    await client.query(`CREATE TABLE public.t1 (
      id integer PRIMARY KEY, v text, big text, n numeric, b bigint, small bigint, f double precision, r real,
      ok boolean, arr integer[], j jsonb, ts timestamptz, bits bit(4), "x y" text, "user" integer, s smallint, nul text)`);
    await client.query(`ALTER TABLE public.t1 ALTER COLUMN big SET STORAGE EXTERNAL`);
    await client.query(`CREATE SCHEMA "My Schema"`);
    await client.query(`CREATE TABLE "My Schema"."Odd Name" (k text PRIMARY KEY, "we""ird" integer, big text)`);
    await client.query(`ALTER TABLE "My Schema"."Odd Name" ALTER COLUMN big SET STORAGE EXTERNAL`);
    await client.query(`ALTER TABLE "My Schema"."Odd Name" REPLICA IDENTITY FULL`);
    await client.query(`CREATE TABLE public.nopk (a integer)`);

    // 1: insert of every shape
    await client.query(
      `INSERT INTO public.t1 VALUES (1, $1, $2, 1.10, 9007199254740993, 42, 'NaN', 1.5, true, '{1,2}', '{"a": [1, "x"]}',
       '2026-11-29 12:00:00.5+00', B'1010', 'sp ace', 7, -3, NULL)`,
      [TRICKY, BIG],
    );
    // 2: update that leaves the TOAST value unchanged
    await client.query(`UPDATE public.t1 SET v = 'z' WHERE id = 1`);
    // 3: key change (still unchanged TOAST), and a second row in the same transaction
    await client.query('BEGIN');
    await client.query(`UPDATE public.t1 SET id = 2 WHERE id = 1`);
    await client.query(`INSERT INTO public.t1 (id, v) VALUES (3, 'three')`);
    await client.query('COMMIT');
    // 4: delete (default replica identity: the key)
    await client.query(`DELETE FROM public.t1 WHERE id = 3`);
    // 5-8: REPLICA IDENTITY FULL on an odd name
    await client.query(`INSERT INTO "My Schema"."Odd Name" VALUES ('k1', NULL, $1)`, [BIG]);
    await client.query(`UPDATE "My Schema"."Odd Name" SET "we""ird" = 5`);
    await client.query(`UPDATE "My Schema"."Odd Name" SET k = 'k2'`);
    await client.query(`DELETE FROM "My Schema"."Odd Name"`);
    // 9-10: a table without a key
    await client.query(`INSERT INTO public.nopk VALUES (1)`);
    await client.query(`DELETE FROM public.nopk`);
    // 11: truncate of two tables
    await client.query(`TRUNCATE public.t1, "My Schema"."Odd Name"`);

    const peek = async (timeZone: string): Promise<SlotRow[]> => {
      await client.query(`SET TimeZone = '${timeZone}'`);
      const r = await client.query<SlotRow>(
        `SELECT lsn::text AS lsn, xid::text AS xid, data FROM pg_logical_slot_peek_changes('cdc_test', NULL, NULL, 'include-xids', '1', 'include-timestamp', '1')`,
      );
      return r.rows;
    };
    rows = await peek('UTC');
    const kolkata = groupTransactions(await peek('Asia/Kolkata')).transactions;
    ({ transactions } = groupTransactions(rows));
    expect(kolkata.map((t) => t.commitTs)).toEqual(transactions.map((t) => t.commitTs));
  });

  afterAll(async () => {
    await client?.end();
    await cluster?.stop();
  });

  const dml = (): DecodedTransaction[] => transactions.filter((t) => t.changes.length > 0);
  const only = (i: number): TestDecodingChange => {
    const t = dml()[i]!;
    expect(t.changes).toHaveLength(i === 2 ? 2 : 1);
    return t.changes[0]!;
  };

  it('every row parses and every transaction is complete', () => {
    expect(rows.length).toBeGreaterThan(30);
    expect(groupTransactions(rows).consumed).toBe(rows.length);
    expect(dml()).toHaveLength(11);
    for (const t of transactions) {
      expect(Date.parse(t.commitTs)).toBeGreaterThan(Date.now() - 3_600_000);
      expect(t.commitLsn).toMatch(/^[0-9A-F]+\/[0-9A-F]+$/);
    }
    // commit LSNs grow with commit order
    const lsns = transactions.map((t) => makePosition(t.commitLsn, 0));
    expect([...lsns].sort()).toEqual(lsns);
  });

  it('maps the values of an insert to JSON', () => {
    const c = only(0);
    expect(c).toMatchObject({ schema: 'public', name: 't1', table: 'public.t1', op: 'insert', oldKey: null, unchanged: [] });
    const values = Object.fromEntries(c.columns!.map((col) => [col.name, col.value]));
    expect(values).toEqual({
      id: 1,
      v: TRICKY,
      big: BIG,
      n: '1.10',
      b: '9007199254740993',
      small: 42,
      f: 'NaN',
      r: 1.5,
      ok: true,
      arr: '{1,2}',
      j: '{"a": [1, "x"]}',
      ts: '2026-11-29 12:00:00.5+00',
      bits: '1010',
      'x y': 'sp ace',
      user: 7,
      s: -3,
      nul: null,
    });
    expect(c.columns!.map((col) => col.type)).toEqual([
      'integer',
      'text',
      'text',
      'numeric',
      'bigint',
      'bigint',
      'double precision',
      'real',
      'boolean',
      'integer[]',
      'jsonb',
      'timestamp with time zone',
      'bit',
      'text',
      'integer',
      'smallint',
      'text',
    ]);
  });

  it('an update that leaves a TOAST value unchanged marks it, without a value', () => {
    const c = only(1);
    expect(c.op).toBe('update');
    expect(c.oldKey).toBeNull();
    expect(c.unchanged).toEqual(['big']);
    expect(c.unchangedTypes).toEqual({ big: 'text' });
    expect(c.columns!.map((col) => col.name)).not.toContain('big');
    expect(c.columns!.find((col) => col.name === 'v')!.value).toBe('z');
  });

  it('a key change carries the old key; two changes of one transaction keep their order', () => {
    const t = dml()[2]!;
    const [upd, ins] = t.changes as [TestDecodingChange, TestDecodingChange];
    expect(upd).toMatchObject({ op: 'update', oldKey: [{ name: 'id', type: 'integer', value: 1 }], unchanged: ['big'] });
    expect(upd.columns![0]).toEqual({ name: 'id', type: 'integer', value: 2 });
    expect(ins).toMatchObject({ op: 'insert', columns: expect.arrayContaining([{ name: 'id', type: 'integer', value: 3 }]) });
  });

  it('a delete under the default replica identity carries the key only', () => {
    expect(only(3)).toMatchObject({ op: 'delete', columns: null, oldKey: [{ name: 'id', type: 'integer', value: 3 }] });
  });

  it('REPLICA IDENTITY FULL and quoted names: the old image is the whole row (nulls left out)', () => {
    expect(only(4)).toMatchObject({ schema: 'My Schema', name: 'Odd Name', table: 'My Schema.Odd Name', op: 'insert' });
    expect(only(4).columns!.map((c) => c.name)).toEqual(['k', 'we"ird', 'big']);
    const upd = only(5);
    expect(upd.oldKey).toEqual([
      { name: 'k', type: 'text', value: 'k1' },
      { name: 'big', type: 'text', value: BIG },
    ]);
    expect(upd.unchanged).toEqual(['big']);
    expect(only(6).oldKey!.map((c) => c.name)).toEqual(['k', 'we"ird', 'big']);
    expect(only(7)).toMatchObject({
      op: 'delete',
      oldKey: [
        { name: 'k', value: 'k2' },
        { name: 'we"ird', value: 5 },
        { name: 'big', value: BIG },
      ],
    });
  });

  it('a delete on a table without replica identity has no key data', () => {
    expect(only(9)).toMatchObject({ table: 'public.nopk', op: 'delete', oldKey: null });
  });

  it('a truncate of two tables is one change per table', () => {
    const t = dml()[10]!;
    expect(t.changes.map((c) => [c.table, c.op])).toEqual([
      ['public.t1', 'truncate'],
      ['My Schema.Odd Name', 'truncate'],
    ]);
  });

  it('slot records built from the parse decode to the right canonical changes', async () => {
    const events: DecodedChange[] = [];
    const refused: string[] = [];
    for (const t of transactions) {
      for (const [index, change] of t.changes.entries()) {
        const key = await primaryKey(client, change.table);
        try {
          const record = buildSlotRecord({ source: 'src', xid: t.xid, commitLsn: t.commitLsn, commitTs: t.commitTs }, index, change, key);
          const result = decodeSlotRecord(JSON.parse(JSON.stringify(record)));
          if (result.kind !== 'changes') throw new Error(result.kind);
          events.push(...result.changes);
        } catch (e) {
          refused.push(`${change.table} ${change.op}: ${(e as Error).message}`);
        }
      }
    }
    // The keyless table: its insert decodes with no key, its delete has no old key; both refused loudly.
    expect(refused).toHaveLength(2);
    expect(refused.every((r) => r.startsWith('public.nopk'))).toBe(true);
    for (const e of events) if (e.op !== 'truncate') validateChangeEvent({ ...e, schemaVersion: 1 });
    expect(events.map((e) => `${e.table} ${e.op} ${JSON.stringify(e.key)} missing=${e.missing.join(',')}`)).toEqual([
      'public.t1 insert {"id":1} missing=',
      'public.t1 update {"id":1} missing=big',
      'public.t1 delete {"id":1} missing=',
      'public.t1 insert {"id":2} missing=big',
      'public.t1 insert {"id":3} missing=',
      'public.t1 delete {"id":3} missing=',
      'My Schema.Odd Name insert {"k":"k1"} missing=',
      'My Schema.Odd Name update {"k":"k1"} missing=',
      'My Schema.Odd Name delete {"k":"k1"} missing=',
      'My Schema.Odd Name insert {"k":"k2"} missing=',
      'My Schema.Odd Name delete {"k":"k2"} missing=',
      'public.t1 truncate {} missing=',
      'My Schema.Odd Name truncate {} missing=',
    ]);
    // REPLICA IDENTITY FULL supplies the unchanged TOAST value from the old image.
    expect(events[7]!.after).toEqual({ k: 'k1', 'we"ird': 5, big: BIG });
    const positions = events.map((e) => e.position);
    expect([...positions].sort()).toEqual(positions);
    expect(events[2]!.position).toBe(events[3]!.position); // key change: one position, two keys
    expect(events[4]!.position > events[3]!.position).toBe(true); // next record of the same transaction
  });
});
