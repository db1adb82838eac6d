/**
 * The Redshift stand-in and the Redshift loader through it (embedded PostgreSQL, a folder as the
 * S3 stand-in): the stand-in enforces what the dialect relies on (byte-length VARCHAR, one MERGE
 * match per target row, folded names, the loader's COPY only), and the loader's path (gzip CSV
 * objects, one COPY … MANIFEST per table, the watermark merge) keeps the view equal to a model of
 * the history, randomized over seeds, with merges at random points and loads crashed midway.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { gzipSync } from 'node:zlib';
import path from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { RedshiftLoader, type RedshiftSession } from '../../lambda/adapters/redshift-loader.ts';
import type { ChangeEvent, JsonValue } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { COPY_FORMAT, createTableSql, mergeSql, RedshiftTypeChangeError, rsQualified, type RedshiftTable } from '../../lambda/core/warehouse/redshift-sql.ts';
import { redshiftColumn, RedshiftValueRefusedError, UNHELD_COLUMN } from '../../lambda/core/warehouse/redshift-types.ts';
import { warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { FolderArchive } from '../../local/archive.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { RedshiftStandIn, StandInUnsupportedError } from '../../local/redshift-standin.ts';
import { redshiftProblems } from '../helpers/redshift-grammar.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 12);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const ROLE = 'arn:aws:iam::123456789012:role/cdc-copy';

function table(sourceId: string, hard: boolean): RedshiftTable {
  return {
    t: warehouseTable(sourceId, 'public.orders'),
    key: [redshiftColumn('id', 'integer')],
    data: [redshiftColumn('note', 'varchar(4)'), redshiftColumn('doc', 'jsonb'), redshiftColumn('blob', 'bytea'), redshiftColumn('amount', 'numeric(10,2)')],
    hard,
  };
}

let seq = 0;
function event(sourceId: string, op: ChangeEvent['op'], id: number, pos: bigint, after: Record<string, JsonValue> | null): ChangeEvent {
  return {
    v: 1,
    source: sourceId,
    table: 'public.orders',
    op,
    key: { id },
    after: op === 'delete' ? null : { id, ...after },
    before: null,
    missing: [],
    position: makePosition(pos, 0),
    commitTs: new Date(1_700_000_000_000 + Number(pos)).toISOString(),
    txId: String(++seq),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  };
}

describe('Redshift stand-in and loader (embedded PostgreSQL)', () => {
  let cluster: PostgresCluster;
  let client: pg.Client;
  let folder: string;
  let store: FolderArchive;
  let session: RedshiftStandIn;

  beforeAll(async () => {
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('rs');
    client = new pg.Client({ connectionString: cluster.url('rs') });
    await client.connect();
    folder = await mkdtemp(path.join(os.tmpdir(), 'cdc-rs-s3-'));
    store = new FolderArchive(folder);
    session = new RedshiftStandIn({ client, store, bucket: 'staging' });
  });

  afterAll(async () => {
    await client?.end();
    await cluster?.stop();
    if (folder) await rm(folder, { recursive: true, force: true });
  });

  const loader = (s: RedshiftSession = session, statements?: string[]): RedshiftLoader =>
    new RedshiftLoader({
      session: s,
      store,
      bucket: 'staging',
      prefix: 'cdc/',
      roleArn: ROLE,
      ledgerSchema: 'cdc_loader',
      onStatement: (q) => statements?.push(q),
    });

  it('VARCHAR(n) holds n bytes, not n characters; SUPER and VARBYTE are limited too', async () => {
    await session.query('CREATE TABLE public.bytes_t (v varchar(4), b varbyte(2), s super)');
    await session.query("INSERT INTO public.bytes_t (v) VALUES ('abcd')");
    await expect(session.query("INSERT INTO public.bytes_t (v) VALUES ('ééé')")).rejects.toThrow(/rs_varchar_4/);
    await expect(session.query("INSERT INTO public.bytes_t (b) VALUES (decode('aabbcc', 'hex'))")).rejects.toThrow(/rs_varbyte_2/);
    await session.query(`INSERT INTO public.bytes_t (s) VALUES ('{"a":[1,2]}')`);
  });

  it('folds quoted names to lower case: "Orders" and "orders" are one table, "A" and "a" one column', async () => {
    await session.query('CREATE TABLE public."Folded" (x bigint)');
    await expect(session.query('CREATE TABLE public."folded" (x bigint)')).rejects.toThrow(/already exists/);
    await expect(session.query('CREATE TABLE public.cols_t ("A" bigint, "a" bigint)')).rejects.toThrow(/more than once/);
    // A literal is not a name: its case stays.
    expect((await session.query('SELECT \'MiXeD\' AS "V"')).rows[0]).toEqual({ v: 'MiXeD' });
  });

  it('a MERGE whose target row matches two source rows fails, as in Redshift', async () => {
    await session.query('CREATE TABLE public.m_t (k bigint, v bigint)');
    await session.query('CREATE TABLE public.m_s (k bigint, v bigint)');
    await session.query('INSERT INTO public.m_t VALUES (1, 0)');
    await session.query('INSERT INTO public.m_s VALUES (1, 1), (1, 2)');
    await expect(
      session.query(
        'MERGE INTO public.m_t USING public.m_s s ON m_t.k = s.k WHEN MATCHED THEN UPDATE SET v = s.v WHEN NOT MATCHED THEN INSERT (k, v) VALUES (s.k, s.v)',
      ),
    ).rejects.toThrow(/more than one|second time/);
  });

  it('a COPY of an object with a row over 4 MB fails, naming the object', async () => {
    await store.put('raw/big.csv.gz', gzipSync(`"${'x'.repeat(4 * 1024 * 1024 + 1)}"\n`));
    await store.put('raw/big.manifest', JSON.stringify({ entries: [{ url: 's3://staging/raw/big.csv.gz', mandatory: true }] }));
    await session.query('CREATE TABLE public.row_t (v super)');
    await expect(session.query(`COPY public.row_t (v) FROM 's3://staging/raw/big.manifest' IAM_ROLE '${ROLE}' MANIFEST ${COPY_FORMAT}`)).rejects.toThrow(
      /raw\/big\.csv\.gz: a row of/,
    );
  });

  it("runs only the loader's COPY: FROM STDIN, a missing MANIFEST or another format are refused", async () => {
    await expect(session.query('COPY public.m_t (k) FROM STDIN')).rejects.toThrow(StandInUnsupportedError);
    await expect(session.query(`COPY public.m_t (k) FROM 's3://staging/x' IAM_ROLE '${ROLE}' FORMAT AS CSV`)).rejects.toThrow(StandInUnsupportedError);
  });

  it('loads values through gzip CSV objects: NULL and empty text apart, JSON, hex bytes, exact numerics; a refused value is a dead letter, a marked one NULL plus its marker', async () => {
    const r = table('vals', false);
    const statements: string[] = [];
    const l = new RedshiftLoader({
      session,
      store,
      bucket: 'staging',
      prefix: 'cdc/',
      roleArn: ROLE,
      ledgerSchema: 'cdc_loader',
      onStatement: (q) => statements.push(q),
      policyOf: (_t, c) => (c === 'amount' ? 'null-with-marker' : 'refuse-row'),
    });
    const events = [
      event('vals', 'insert', 1, 10n, { note: '', doc: '{"a": [1, "x"]}', blob: '\\x00ff', amount: '12345678.90' }),
      event('vals', 'insert', 2, 11n, { note: null, doc: null, blob: null, amount: null }),
      event('vals', 'insert', 3, 12n, { note: 'ééé', doc: null, blob: null, amount: '1' }), // 6 bytes in varchar(16)? no: varchar(4)*4 = 16 bytes, holds
      event('vals', 'insert', 4, 13n, { note: 'x'.repeat(17), doc: null, blob: null, amount: '1' }), // 17 bytes > 16: refused
      event('vals', 'insert', 5, 14n, { note: 'ok', doc: null, blob: null, amount: 'NaN' }), // NaN: null and mark
    ];
    const pending = l.submit(r, events, new Date('2026-12-06T00:00:00Z'));
    await l.flush();
    const receipt = await pending;
    expect(receipt.loaded).toBe(4);
    expect(receipt.refused.map((x) => [x.event.key.id, (x.error as RedshiftValueRefusedError).column, (x.error as RedshiftValueRefusedError).reason])).toEqual([
      [4, 'note', 'too-long'],
    ]);
    expect(statements.filter((s) => s.startsWith('COPY'))).toHaveLength(1);
    // What the loader really sent passes the Redshift grammar check (the stand-in ran it).
    for (const s of statements) expect(redshiftProblems(s), s).toEqual([]);
    const view = async () =>
      (await client.query(`SELECT id, note, doc, encode(blob, 'hex') AS blob, amount, ${UNHELD_COLUMN} FROM ${rsQualified(r.t.schema, r.t.view)} ORDER BY id`))
        .rows as Record<string, unknown>[];
    const expected = [
      { id: '1', note: '', doc: { a: [1, 'x'] }, blob: '00ff', amount: '12345678.90', _cdc_unheld: null },
      { id: '2', note: null, doc: null, blob: null, amount: null, _cdc_unheld: null },
      { id: '3', note: 'ééé', doc: null, blob: null, amount: '1.00', _cdc_unheld: null },
      { id: '5', note: 'ok', doc: null, blob: null, amount: null, _cdc_unheld: 'amount:nan' },
    ];
    expect(await view()).toEqual(expected);
    await l.merge();
    for (const s of statements) expect(redshiftProblems(s), s).toEqual([]);
    expect(await view()).toEqual(expected);
    expect(Number((await client.query(`SELECT count(*) AS n FROM ${rsQualified(r.t.schema, r.t.mirror)}`)).rows[0].n)).toBe(4);
  });

  it(`keeps the view equal to the model through loads, merges at random points and crashed loads (${RUNS} runs, seed ${SEED})`, async () => {
    console.log(`redshift-standin: ${RUNS} runs, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
    const rand = seededRandom(SEED);
    for (let run = 0; run < RUNS; run++) {
      const hard = rand() < 0.5;
      const r = table(`p${run}`, hard);
      // A session that fails the nth statement after arming: a crash between any two statements of a load or merge.
      let failAt = -1;
      const crashing: RedshiftSession = {
        query: async (q) => {
          if (failAt === 0 && q !== 'ROLLBACK') {
            failAt = -1;
            throw new Error('injected crash');
          }
          if (failAt > 0) failAt--;
          return session.query(q);
        },
      };
      const l = loader(crashing);
      const model = new Map<number, { pos: bigint; deleted: boolean; note: string | null }>();
      const history: ChangeEvent[] = [];
      let pos = 100n;
      for (let step = 0; step < 8; step++) {
        const batch: ChangeEvent[] = [];
        for (let i = 0; i < 1 + Math.floor(rand() * 12); i++) {
          const id = 1 + Math.floor(rand() * 6);
          const late = rand() < 0.2 && history.length > 0;
          // A late or redelivered older event: any earlier event delivered again.
          if (late) {
            batch.push(history[Math.floor(rand() * history.length)]!);
            continue;
          }
          pos += 1n + BigInt(Math.floor(rand() * 3));
          const del = rand() < 0.25;
          const e = event(
            r.t.source,
            del ? 'delete' : rand() < 0.5 ? 'insert' : 'update',
            id,
            pos,
            del ? null : { note: rand() < 0.2 ? null : `n${pos % 97n}`, doc: null, blob: null, amount: null },
          );
          batch.push(e);
          history.push(e);
        }
        const crash = rand() < 0.25;
        if (crash) failAt = Math.floor(rand() * 6);
        const submitted = l.submit(r, batch);
        const flushed = l.flush().catch(() => null);
        const ok = await submitted.then(
          () => true,
          () => false,
        );
        await flushed;
        failAt = -1;
        if (!ok) {
          // The batch's checkpoint did not move: it is delivered again.
          const again = l.submit(r, batch);
          await l.flush();
          await again;
        }
        for (const e of batch) {
          const id = e.key.id as number;
          const cur = model.get(id);
          const p = BigInt(`0x${e.position}`);
          if (cur && cur.pos >= p) continue;
          model.set(id, { pos: p, deleted: e.op === 'delete', note: e.op === 'delete' ? null : ((e.after?.note ?? null) as string | null) });
        }
        if (rand() < 0.4) {
          if (rand() < 0.3) failAt = Math.floor(rand() * 8);
          await l.merge().catch(() => undefined);
          failAt = -1;
        }
        const got = (await client.query(`SELECT id, note FROM ${rsQualified(r.t.schema, r.t.view)} ORDER BY id`)).rows.map(
          (x: { id: string; note: string | null }) => [Number(x.id), x.note],
        );
        const want = [...model.entries()]
          .filter(([, v]) => !v.deleted)
          .sort(([a], [b]) => a - b)
          .map(([id, v]) => [id, v.note]);
        expect(got, `seed ${SEED} run ${run} step ${step} (${hard ? 'hard' : 'soft'})`).toEqual(want);
      }
    }
  }, 120_000);

  it('evolves a table: an added column and a wider VARCHAR; another type change is refused and changes nothing', async () => {
    const v1 = table('evo', false);
    const l = loader();
    const first = l.submit(v1, [event('evo', 'insert', 1, 10n, { note: 'abcd', doc: null, blob: null, amount: '1' })]);
    await l.flush();
    await first;
    const v2: RedshiftTable = { ...v1, data: [redshiftColumn('note', 'varchar(50)'), ...v1.data.slice(1), redshiftColumn('extra', 'integer')] };
    await l.evolve(v1, v2);
    const second = l.submit(v2, [event('evo', 'insert', 2, 11n, { note: 'x'.repeat(150), doc: null, blob: null, amount: '2', extra: 7 })]);
    await l.flush();
    expect((await second).refused).toEqual([]);
    await l.merge();
    const rows = (await client.query(`SELECT id, length(note) AS n, extra FROM ${rsQualified(v2.t.schema, v2.t.view)} ORDER BY id`)).rows;
    expect(rows).toEqual([
      { id: '1', n: 4, extra: null },
      { id: '2', n: 150, extra: '7' },
    ]);
    // A new process knows no table until it registers it; then it merges what the old one left.
    const fresh = loader();
    expect((await fresh.merge()).tables).toBe(0);
    await fresh.register(v2);
    await l.flush();
    const third = l.submit(v2, [event('evo', 'update', 1, 12n, { note: 'after', doc: null, blob: null, amount: '3', extra: 8 })]);
    await l.flush();
    await third;
    expect((await fresh.merge()).tables).toBe(1);
    expect(Number((await client.query(`SELECT count(*) AS n FROM ${rsQualified(v2.t.schema, v2.t.mirror)} WHERE note = 'after'`)).rows[0].n)).toBe(1);
    const v3: RedshiftTable = { ...v2, data: v2.data.map((c) => (c.name === 'amount' ? redshiftColumn('amount', 'text') : c)) };
    await expect(l.evolve(v2, v3)).rejects.toThrow(RedshiftTypeChangeError);
  });

  it('a text, a JSON document and a bytea of 1 MB each: held where Redshift holds them (JSON), refused or marked where it does not (text, bytea)', async () => {
    const r: RedshiftTable = {
      t: warehouseTable('big', 'public.docs'),
      key: [redshiftColumn('id', 'integer')],
      data: [redshiftColumn('body', 'text'), redshiftColumn('doc', 'jsonb'), redshiftColumn('bin', 'bytea')],
      hard: false,
    };
    const mb = 1024 * 1024;
    const doc = JSON.stringify({ a: 'j'.repeat(mb - 10) });
    const bin = `\\x${'ab'.repeat(mb)}`;
    const ev = (id: number, after: Record<string, JsonValue>): ChangeEvent => ({ ...event('big', 'insert', id, BigInt(id), after), table: 'public.docs' });
    for (const policy of ['refuse-row', 'null-with-marker'] as const) {
      const l = new RedshiftLoader({
        session,
        store,
        bucket: 'staging',
        prefix: `big-${policy}/`,
        roleArn: ROLE,
        ledgerSchema: 'cdc_loader',
        policyOf: () => policy,
      });
      const base = policy === 'refuse-row' ? 0 : 10;
      const p = l.submit(r, [
        ev(base + 1, { body: null, doc, bin: null }),
        ev(base + 2, { body: 't'.repeat(mb), doc: null, bin: null }),
        ev(base + 3, { body: null, doc: null, bin }),
      ]);
      await l.flush();
      const receipt = await p;
      const got = (
        await client.query(
          `SELECT id, octet_length(doc ->> 'a') AS doc, body IS NULL AS no_body, bin IS NULL AS no_bin, _cdc_unheld FROM ${rsQualified(r.t.schema, r.t.view)} WHERE id > ${base} AND id < ${base + 10} ORDER BY id`,
        )
      ).rows;
      if (policy === 'refuse-row') {
        expect(
          receipt.refused.map((x) => [x.event.key.id, (x.error as RedshiftValueRefusedError).column, (x.error as RedshiftValueRefusedError).reason]),
        ).toEqual([
          [2, 'body', 'too-long'],
          [3, 'bin', 'too-long'],
        ]);
        expect(got).toEqual([{ id: '1', doc: mb - 10, no_body: true, no_bin: true, _cdc_unheld: null }]);
      } else {
        expect(receipt.refused).toEqual([]);
        expect(got).toEqual([
          { id: '11', doc: mb - 10, no_body: true, no_bin: true, _cdc_unheld: null },
          { id: '12', doc: null, no_body: true, no_bin: true, _cdc_unheld: 'body:too-long' },
          { id: '13', doc: null, no_body: true, no_bin: true, _cdc_unheld: 'bin:too-long' },
        ]);
      }
    }
  });

  it('refuses a table whose columns fold into one name', () => {
    const r = { ...table('fold', false), data: [redshiftColumn('Note', 'text'), redshiftColumn('note', 'text')] };
    expect(() => createTableSql(r)).toThrow(/one column in Redshift/);
    expect(mergeSql(table('fold', true), 3).some((s) => s.startsWith('MERGE INTO'))).toBe(true);
  });
});
