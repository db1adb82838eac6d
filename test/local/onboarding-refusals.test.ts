/**
 * What cannot be carried is refused at onboarding, by name (docs/types.md, "What is refused, and
 * where"; docs/onboarding.md): a virtual generated column (PostgreSQL 18: never stored, never in
 * the WAL) and a `numeric(p,s)` no warehouse type holds exactly make the catalog scan mark the
 * table ineligible, with the column and the fix in the audit entry; the same table with those
 * columns in the rule's exclude list is captured, and `cdc doctor`'s checks pass it too.
 * Against the embedded PostgreSQL's real catalog.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { gatherSourceFacts, listSourceTables, readTableFact } from '../../lambda/adapters/source-facts-pg.ts';
import { CheckId } from '../../lambda/core/operator/doctor-results.ts';
import { runChecks } from '../../lambda/core/operator/doctor.ts';
import { scanTables, type DiscoveryDeps } from '../../lambda/core/tables/discovery.ts';
import type { TableRule } from '../../lambda/core/tables/table-config.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import type { SinkProfile } from '../../lambda/core/tables/sink-profile.ts';
import { doctorSource } from '../../bin/cli/doctor.ts';

let cluster: PostgresCluster;
let client: pg.Client;
let names: pg.Client;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  await cluster.createDatabase('app');
  client = new pg.Client({ connectionString: cluster.url('app') });
  await client.connect();
  await client.query(`
    CREATE TABLE public.film (id int PRIMARY KEY, length int, length_hours numeric GENERATED ALWAYS AS (length / 60.0) VIRTUAL, rating_stored int GENERATED ALWAYS AS (length * 2) STORED);
    CREATE TABLE public.ledger (id int PRIMARY KEY, amount numeric(50,2), rounded numeric(5,-2), fine numeric(38,4), free numeric);
    CREATE TABLE public.plain (id int PRIMARY KEY, note text);`);
  await cluster.createDatabase('names');
  names = new pg.Client({ connectionString: cluster.url('names') });
  await names.connect();
  await names.query(`
    CREATE TABLE "Orders" ("OrderId" int PRIMARY KEY, "CustomerName" text, "Total with tax" numeric(12,2));
    CREATE TABLE orders (id int PRIMARY KEY, note text);
    CREATE SCHEMA "Sales Dept";
    CREATE TABLE "Sales Dept"."Big Ledger" (id int PRIMARY KEY, amount numeric(50,2), rounded numeric(5,-2));
    CREATE TABLE "a.b" (id int PRIMARY KEY);
    CREATE TABLE "back\\slash" (id int PRIMARY KEY);
    CREATE TABLE "Zoë ""quoted""" (id int PRIMARY KEY, "dotted.col" text);`);
}, 120_000);

afterAll(async () => {
  await names?.end();
  await client?.end();
  await cluster?.stop();
});

function deps(controlPlane: MemoryControlPlane, rule: TableRule, captured: Set<string>): DiscoveryDeps {
  return {
    controlPlane,
    source: 'app',
    rules: [rule],
    declared: new Set(),
    listTables: () => listSourceTables(client),
    tableFact: (t, k) => readTableFact(client, t, k),
    user: 'postgres',
    capture: (c) => void captured.add(c.table),
    release: (t) => void captured.delete(t),
  };
}

describe('onboarding refuses by name what cannot be carried', () => {
  it('marks a table with a virtual generated column or a numeric beyond the warehouse ineligible, naming the columns and the fix', async () => {
    const controlPlane = new MemoryControlPlane();
    const captured = new Set<string>();
    const { result } = await scanTables(
      deps(controlPlane, { match: 'public.*', excludeTables: [], deleteMode: 'soft', mask: [], exclude: [] }, captured),
      null,
    );
    expect(result.verdicts.map((v) => [v.table, v.verdict])).toEqual([
      ['public.film', 'ineligible'],
      ['public.ledger', 'ineligible'],
      ['public.plain', 'captured'],
    ]);
    expect([...captured]).toEqual(['public.plain']);
    const film = result.verdicts[0]!.reasons.join(' ');
    expect(film).toMatch(/column_types: public\.film has virtual generated columns \(length_hours\)/);
    expect(film).toMatch(/fix: exclude them from capture/);
    // A stored generated column is in the WAL: carried, not named.
    expect(film).not.toMatch(/rating_stored/);
    const ledger = result.verdicts[1]!.reasons.join(' ');
    expect(ledger).toMatch(/amount numeric\(50,2\): precision 50 is beyond the warehouse's 38 digits/);
    expect(ledger).toMatch(/rounded numeric\(5,-2\): scale -2 is outside 0\.\.5/);
    expect(ledger).not.toMatch(/fine|free/);
    // The refusal is in the audit log, by table, with the reasons.
    const audit = (await controlPlane.listAudit('app')).filter((e) => e.action === 'table-ineligible');
    expect(audit.map((e) => e.table).sort()).toEqual(['public.film', 'public.ledger']);
    expect(String((audit.find((e) => e.table === 'public.film')!.detail.reasons as string[])[0])).toMatch(/length_hours/);
    expect(await controlPlane.getSnapshot('app', 'public.film')).toBeNull();
  });

  it('captures the same tables once the rule excludes those columns', async () => {
    const controlPlane = new MemoryControlPlane();
    const captured = new Set<string>();
    const { result } = await scanTables(
      deps(controlPlane, { match: 'public.*', excludeTables: [], deleteMode: 'soft', mask: [], exclude: ['length_hours', 'amount', 'rounded'] }, captured),
      null,
    );
    expect(result.verdicts.map((v) => [v.table, v.verdict])).toEqual([
      ['public.film', 'captured'],
      ['public.ledger', 'captured'],
      ['public.plain', 'captured'],
    ]);
    expect(result.captured.find((c) => c.table === 'public.film')!.exclude).toEqual(['length_hours', 'amount', 'rounded']);
  });

  it("cdc doctor's checks of a declared table honour its exclude list", async () => {
    const checksOf = async (exclude: string[]): Promise<Array<[string, string]>> =>
      runChecks(
        await gatherSourceFacts(client, {
          tables: [
            { table: 'public.film', exclude },
            { table: 'public.ledger', exclude },
          ],
        }),
      )
        .filter((r) => r.check === CheckId.COLUMN_TYPES)
        .map((r) => [r.subject ?? '', r.status]);
    expect(await checksOf([])).toEqual([
      ['public.film', 'FAIL'],
      ['public.ledger', 'FAIL'],
    ]);
    expect(await checksOf(['length_hours', 'amount', 'rounded'])).toEqual([
      ['public.film', 'PASS'],
      ['public.ledger', 'PASS'],
    ]);
  });
});

describe('names as applications write them: carried, or refused by name at onboarding (docs/onboarding.md, "Names")', () => {
  const RULE: TableRule = { match: '*.*', excludeTables: [], deleteMode: 'soft', mask: [], exclude: [] };
  const BACKSLASH = 'public.back\\slash';
  const scan = async (sinks: SinkProfile, controlPlane = new MemoryControlPlane()) => {
    const captured = new Set<string>();
    const { result } = await scanTables(
      {
        ...deps(controlPlane, RULE, captured),
        source: 'names',
        listTables: () => listSourceTables(names),
        tableFact: (t, k) => readTableFact(names, t, k),
        sinks,
      },
      null,
    );
    return { result, captured, controlPlane, verdict: new Map(result.verdicts.map((v) => [v.table, [v.verdict, v.reasons.join(' ')] as const])) };
  };

  it('lists every table of the catalog, whatever its name', async () => {
    expect(await listSourceTables(names)).toEqual(
      expect.arrayContaining(['public.Orders', 'public.orders', 'Sales Dept.Big Ledger', 'public.a.b', BACKSLASH, 'public.Zoë "quoted"']),
    );
  });

  it('a PostgreSQL warehouse carries every name but one holding . or \\, and numeric(50,2) and numeric(5,-2) too', async () => {
    const { verdict, captured, controlPlane } = await scan({ warehouse: 'postgres', search: false });
    expect([...captured].sort()).toEqual(['Sales Dept.Big Ledger', 'public.Orders', 'public.Zoë "quoted"', 'public.orders']);
    expect(verdict.get('public.a.b')).toEqual([
      'ineligible',
      expect.stringMatching(/^table_name: public\.a\.b: schema and table names holding '\.' are not carried .*fix: rename/),
    ]);
    expect(verdict.get(BACKSLASH)).toEqual([
      'ineligible',
      expect.stringMatching(/^table_name: table name "back\\\\slash" .* cannot be carried: it holds '\\'/),
    ]);
    const audit = (await controlPlane.listAudit('names')).filter((e) => e.action === 'table-ineligible').map((e) => e.table);
    expect(audit.sort()).toEqual(['public.a.b', BACKSLASH]);
  });

  it('on Redshift the second of "Orders" and orders is refused by name, and so is numeric(50,2)', async () => {
    const { verdict, captured } = await scan({ warehouse: 'redshift', search: false });
    expect([...captured].sort()).toEqual(['public.Orders', 'public.Zoë "quoted"']);
    expect(verdict.get('public.orders')).toEqual([
      'ineligible',
      expect.stringMatching(
        /table_name: public\.orders and public\.Orders \(registered first\) would be one table in the warehouse: Redshift folds quoted names to lower case/,
      ),
    ]);
    expect(verdict.get('Sales Dept.Big Ledger')).toEqual(['ineligible', expect.stringMatching(/amount numeric\(50,2\): Redshift: precision 50 is beyond/)]);
  });

  it('the table registered first is the one carried, whichever sorts first', async () => {
    const controlPlane = new MemoryControlPlane();
    const at = '2026-01-01T00:00:00.000Z';
    const table = 'public.orders';
    await controlPlane.registerTable(
      { source: 'names', table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
      {
        source: 'names',
        table,
        version: 1,
        columns: [{ name: 'id', type: 'integer', nullable: false }],
        key: ['id'],
        effectivePosition: '0/0',
        registeredAt: at,
      },
      { at, actor: 'test', action: 'register-table', source: 'names', table, outcome: 'done', detail: {} },
    );
    const { verdict } = await scan({ warehouse: 'redshift', search: false }, controlPlane);
    expect(verdict.get('public.orders')?.[0]).toBe('captured');
    expect(verdict.get('public.Orders')).toEqual(['ineligible', expect.stringMatching(/public\.Orders and public\.orders \(registered first\)/)]);
  });

  it('a search sink refuses the second of two names its lower-case index names fold, and a column it cannot hold as a field', async () => {
    const { verdict, captured } = await scan({ warehouse: 'postgres', search: true });
    expect([...captured].sort()).toEqual(['Sales Dept.Big Ledger', 'public.Orders']);
    expect(verdict.get('public.orders')?.[1]).toMatch(/would be one table in the search: search index names are lower case/);
    expect(verdict.get('public.Zoë "quoted"')?.[1]).toMatch(/cannot hold as document fields \("dotted\.col": it holds '\.'/);
  });

  it('cdc doctor names the same refusals, per warehouse engine', async () => {
    const checks = async (sinks: SinkProfile) =>
      (await doctorSource({ sourceUrl: cluster.url('names'), tables: [], rules: [RULE], sinks }))
        .filter((r) => r.check === CheckId.TABLE_RULE)
        .map((r) => [r.subject, r.status, r.message] as const);
    const pgChecks = await checks({ warehouse: 'postgres', search: false });
    expect(pgChecks.filter((c) => c[1] !== 'PASS').map((c) => c[0])).toEqual(['public.a.b', BACKSLASH]);
    const rs = await checks({ warehouse: 'redshift', search: false });
    expect(rs.filter((c) => c[1] !== 'PASS').map((c) => c[0])).toEqual(['Sales Dept.Big Ledger', 'public.a.b', BACKSLASH, 'public.orders']);
    expect(rs.find((c) => c[0] === 'public.orders')![2]).toMatch(
      /not captured \(ineligible\): table_name: public\.orders and public\.Orders \(registered first\)/,
    );
  });
});
