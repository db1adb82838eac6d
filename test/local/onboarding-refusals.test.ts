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

let cluster: PostgresCluster;
let client: pg.Client;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
  await cluster.createDatabase('app');
  client = new pg.Client({ connectionString: cluster.url('app') });
  await client.connect();
  await client.query(`
    CREATE TABLE public.film (id int PRIMARY KEY, length int, length_hours numeric GENERATED ALWAYS AS (length / 60.0) VIRTUAL, rating_stored int GENERATED ALWAYS AS (length * 2) STORED);
    CREATE TABLE public.ledger (id int PRIMARY KEY, amount numeric(50,2), rounded numeric(5,-2), fine numeric(38,4), free numeric);
    CREATE TABLE public.plain (id int PRIMARY KEY, note text);`);
}, 120_000);

afterAll(async () => {
  await client?.end();
  await cluster?.stop();
});

function deps(control: MemoryControlPlane, rule: TableRule, captured: Set<string>): DiscoveryDeps {
  return {
    control,
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
    const control = new MemoryControlPlane();
    const captured = new Set<string>();
    const { result } = await scanTables(deps(control, { match: 'public.*', excludeTables: [], deleteMode: 'soft', mask: [], exclude: [] }, captured), null);
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
    const audit = (await control.listAudit('app')).filter((e) => e.action === 'table-ineligible');
    expect(audit.map((e) => e.table).sort()).toEqual(['public.film', 'public.ledger']);
    expect(String((audit.find((e) => e.table === 'public.film')!.detail.reasons as string[])[0])).toMatch(/length_hours/);
    expect(await control.getSnapshot('app', 'public.film')).toBeNull();
  });

  it('captures the same tables once the rule excludes those columns', async () => {
    const control = new MemoryControlPlane();
    const captured = new Set<string>();
    const { result } = await scanTables(
      deps(control, { match: 'public.*', excludeTables: [], deleteMode: 'soft', mask: [], exclude: ['length_hours', 'amount', 'rounded'] }, captured),
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
