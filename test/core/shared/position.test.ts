import fc from 'fast-check';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { comparePositions, describePosition, formatLsn, makePosition, parseLsn, POSITION_ZERO } from '../../../lambda/core/shared/position.ts';
import { startPostgres, type PostgresCluster } from '../../../local/postgres.ts';

const MAX_LSN = (1n << 64n) - 1n;
const MAX_INDEX = 0xffffffff;

/** LSNs from the whole range, plus a few shared values so that ties on the LSN (same transaction) are common. */
const lsnArb = fc.oneof(
  fc.bigInt({ min: 0n, max: MAX_LSN }),
  fc.constantFrom(0n, 1n, 0x27c007178n, 0xffffffffn, 0x100000000n, MAX_LSN),
  fc.bigInt({ min: 0n, max: 0xffffn }),
);
const indexArb = fc.oneof(fc.integer({ min: 0, max: MAX_INDEX }), fc.integer({ min: 0, max: 20 }));
const entriesArb = fc.array(fc.tuple(lsnArb, indexArb), { minLength: 1, maxLength: 200 });

/** The meaning of the order: commit LSN first, then index within the transaction. */
function semanticCompare(a: [bigint, number], b: [bigint, number]): number {
  if (a[0] !== b[0]) return a[0] < b[0] ? -1 : 1;
  return a[1] - b[1];
}

describe('position (pure)', () => {
  it('string order of positions is (commit LSN, index) order', () => {
    fc.assert(
      fc.property(entriesArb, (entries) => {
        const bySemantics = [...entries].sort(semanticCompare).map(([l, i]) => makePosition(l, i));
        const byString = entries.map(([l, i]) => makePosition(l, i)).sort();
        const byCompare = entries.map(([l, i]) => makePosition(l, i)).sort(comparePositions);
        expect(byString).toEqual(bySemantics);
        expect(byCompare).toEqual(bySemantics);
      }),
      { numRuns: 300 },
    );
  });

  it('LSN text round-trips, with or without leading zeros', () => {
    fc.assert(
      fc.property(lsnArb, indexArb, (lsn, index) => {
        const text = formatLsn(lsn);
        expect(parseLsn(text)).toBe(lsn);
        const [hi, lo] = text.split('/') as [string, string];
        expect(parseLsn(`${hi.padStart(8, '0')}/${lo.padStart(8, '0')}`)).toBe(lsn); // DMS writes 00000002/7C007178
        expect(parseLsn(text.toLowerCase())).toBe(lsn);
        const p = makePosition(text, index);
        expect(p).toMatch(/^[0-9a-f]{24}$/);
        expect(describePosition(p)).toEqual({ commitLsn: text, index });
        expect(p >= POSITION_ZERO).toBe(true);
      }),
      { numRuns: 500 },
    );
  });
});

describe('position order in PostgreSQL', () => {
  let cluster: PostgresCluster;
  let client: pg.Client;
  let linguistic: string[] = [];

  beforeAll(async () => {
    cluster = await startPostgres({ fast: true });
    const admin = new pg.Client({ connectionString: cluster.url('postgres') });
    await admin.connect();
    // A database whose default collation is linguistic (ICU, en-US), not byte order.
    await admin.query(`CREATE DATABASE positions TEMPLATE template0 ENCODING 'UTF8' LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'`);
    await admin.end();
    client = new pg.Client({ connectionString: cluster.url('positions') });
    await client.connect();
    await client.query('CREATE TABLE pos (p text NOT NULL, pv varchar(24) NOT NULL, lsn pg_lsn NOT NULL, idx bigint NOT NULL)');
    const coll = await client.query<{ collname: string }>(
      `SELECT collname FROM pg_collation WHERE collname IN ('en-US-x-icu', 'und-x-icu', 'de-DE-x-icu', 'sv-SE-x-icu') ORDER BY 1`,
    );
    linguistic = coll.rows.map((r) => r.collname);
  });

  afterAll(async () => {
    await client?.end();
    await cluster?.stop();
  });

  it('the database default collation is a linguistic one', async () => {
    const r = await client.query<{ provider: string; locale: string }>(
      `SELECT datlocprovider AS provider, datlocale AS locale FROM pg_database WHERE datname = current_database()`,
    );
    expect(r.rows[0]).toEqual({ provider: 'i', locale: 'en-US' });
    expect(linguistic).toContain('en-US-x-icu');
  });

  it('positions sort the same in TypeScript and in SQL: default collation, COLLATE "C", ICU collations, varchar', async () => {
    await fc.assert(
      fc.asyncProperty(entriesArb, async (entries) => {
        const positions = entries.map(([l, i]) => makePosition(l, i));
        const expected = [...positions].sort();
        await client.query('TRUNCATE pos');
        await client.query(`INSERT INTO pos SELECT p, p, l::pg_lsn, i FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(p, l, i)`, [
          positions,
          entries.map(([l]) => formatLsn(l)),
          entries.map(([, i]) => i),
        ]);
        const order = async (sql: string): Promise<string[]> => (await client.query<{ p: string }>(sql)).rows.map((r) => r.p);
        expect(await order('SELECT p FROM pos ORDER BY p')).toEqual(expected);
        expect(await order('SELECT p FROM pos ORDER BY p COLLATE "C"')).toEqual(expected);
        expect(await order('SELECT pv AS p FROM pos ORDER BY pv')).toEqual(expected);
        for (const c of linguistic) expect(await order(`SELECT p FROM pos ORDER BY p COLLATE "${c}"`)).toEqual(expected);
        // and the same as PostgreSQL's own order of (commit LSN, index)
        expect(await order('SELECT p FROM pos ORDER BY lsn, idx')).toEqual(expected);
        // comparisons in SQL agree too (what an applier's "stored position < new position" relies on)
        const pairs = await client.query<{ lt: number }>(
          `SELECT count(*)::int AS lt FROM pos a JOIN pos b ON a.p < b.p WHERE (a.lsn, a.idx) >= (b.lsn, b.idx)`,
        );
        expect(pairs.rows[0]!.lt).toBe(0);
      }),
      { numRuns: 100 },
    );
  });

  it("formatLsn prints an LSN the way PostgreSQL's pg_lsn does", async () => {
    const samples = fc.sample(lsnArb, 200);
    const r = await client.query<{ t: string }>('SELECT l::pg_lsn::text AS t FROM unnest($1::text[]) AS u(l)', [samples.map((l) => formatLsn(l))]);
    expect(r.rows.map((row) => row.t)).toEqual(samples.map((l) => formatLsn(l)));
    const back = await client.query<{ t: string }>(`SELECT ('00000002/7C007178'::pg_lsn)::text AS t`);
    expect(parseLsn(back.rows[0]!.t)).toBe(parseLsn('00000002/7C007178'));
  });
});
