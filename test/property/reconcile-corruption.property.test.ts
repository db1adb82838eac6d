/**
 * Randomized: reconciliation finds every corrupted value of the value classes that a type-blind
 * comparison blessed, in a warehouse mirror and in a search index, and only those
 * (docs/reconcile.md, "How values compare").
 *
 * One table goes through the real slot capture (embedded PostgreSQL) into the warehouse (the real
 * applier, a second database) and the search index (the real search applier, the search stand-in).
 * Its columns hold the values at risk: a zip code with leading zeros and a decimal-looking code with
 * a trailing zero (text), a double precision that is often -0 or 0, a jsonb with an integer beyond
 * 2^53, compact JSON in a text column, '' or NULL in a text column, and a numeric.
 *
 * Each run (a seed) corrupts 1–5 random keys, each in one way chosen at random among those the row
 * admits: leading zeros stripped, a trailing zero stripped, -0 and 0 swapped, the big integer
 * through a double, spaces inside the JSON of the text column, NULL for '' (or '' for NULL). The
 * warehouse copy is corrupted in its mirror and delta tables (behind the platform's back), the
 * search copy through documents applied at a newer position. `reconcileTables` (column types from
 * the schema registry the pipeline filled, the real PostgreSQL and search sides) must say DIVERGED
 * naming exactly the corrupted keys and columns. Then the values are put back, and a few other keys
 * re-spelled without changing their value (jsonb whitespace and member order; in the search copy
 * also a numeric or a float as a JSON number instead of its text): MATCH, every run.
 *
 * `CDC_PROPERTY_SEED` and `CDC_PROPERTY_RUNS` replay a run; both are printed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { SearchStandIn } from '../../local/search-standin.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import type { TableConfig } from '../../lambda/core/tables/table-config.ts';
import type { ChangeEvent, JsonValue } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { pgSourceSide, pgWarehouseSide, prepareReconcileSession } from '../../lambda/adapters/reconcile-pg.ts';
import { searchSinkSide } from '../../lambda/adapters/reconcile-search.ts';
import { OpenSearchIndex, searchClient } from '../../lambda/adapters/search-opensearch.ts';
import { createSearchApplier } from '../../lambda/handlers/search-applier.ts';
import { reconcileTables, type ReconcileVerdict } from '../../lambda/core/reconcile/reconcile.ts';
import { FixedPacer } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import { slotPipeline } from '../e2e/slot-pipeline.ts';

const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 40);
const ROWS = 150;
const TABLE = 'public.v';
const COLUMNS = ['zip', 'code', 'f', 'doc', 'raw', 'note', 'amount'] as const;
type Column = (typeof COLUMNS)[number];
type Values = Record<Column, string | null>;

const FLOATS = ['-0', '0', '0.5', '-2.25', '1e-05'];
const big = (id: number): bigint => 2n ** 53n + BigInt(2 * id + 1); // odd: a double cannot hold it

/** The source row `id` (PostgreSQL's text of each value). */
function sourceRow(id: number): Values {
  return {
    zip: `${'0'.repeat(1 + (id % 3))}${100 + id}`,
    code: `${id}.${id % 9}0`,
    f: FLOATS[id % FLOATS.length]!,
    doc: `{"n": ${big(id)}, "s": "s${id}"}`,
    raw: `[${id},${id + 1},{"a":"${id}"}]`,
    note: id % 2 === 1 ? '' : null,
    amount: `${id}.50`,
  };
}

interface Corruption {
  kind: string;
  column: Column;
  /** The corrupted value as the warehouse holds it (text) and as a search document holds it (JSON). */
  text: string | null;
  json: JsonValue;
}

/** The corruptions row `id` admits (see the module comment). */
function corruptions(id: number): Corruption[] {
  const r = sourceRow(id);
  const out: Corruption[] = [];
  const zip = r.zip!.replace(/^0+/, '');
  out.push({ kind: 'leading zeros', column: 'zip', text: zip, json: zip });
  const code = r.code!.slice(0, -1);
  out.push({ kind: 'trailing zero', column: 'code', text: code, json: code });
  if (r.f === '-0') out.push({ kind: '-0 as 0', column: 'f', text: '0', json: 0 });
  if (r.f === '0') out.push({ kind: '0 as -0', column: 'f', text: '-0', json: '-0' });
  const doc = `{"n": ${Number(big(id))}, "s": "s${id}"}`;
  out.push({ kind: 'json big integer through a double', column: 'doc', text: doc, json: doc });
  const raw = r.raw!.replace(/,/g, ', ');
  out.push({ kind: 'json spacing in a text column', column: 'raw', text: raw, json: raw });
  out.push(r.note === null ? { kind: "'' for NULL", column: 'note', text: '', json: '' } : { kind: "NULL for ''", column: 'note', text: null, json: null });
  return out;
}

/** A value re-spelled without changing it, for the warehouse (text) and the search copy (JSON). */
function respellings(id: number): Array<{ column: Column; text: string | null; json: JsonValue; sink: 'both' | 'search' }> {
  const r = sourceRow(id);
  const out: Array<{ column: Column; text: string | null; json: JsonValue; sink: 'both' | 'search' }> = [];
  const doc = `{ "s" : "s${id}",\n  "n" : ${big(id)}.0 }`;
  out.push({ column: 'doc', text: doc, json: doc, sink: 'both' });
  out.push({ column: 'amount', text: null, json: Number(r.amount), sink: 'search' });
  if (r.f !== '-0' && r.f !== '0') out.push({ column: 'f', text: null, json: String(Number(r.f)) === r.f ? r.f : Number(r.f), sink: 'search' });
  return out;
}

let cluster: PostgresCluster;
let standin: SearchStandIn;
let index: OpenSearchIndex;
let pipeline: Awaited<ReturnType<typeof slotPipeline>>;
let wh: pg.Client;
let applyToSearch: (events: ChangeEvent[]) => Promise<void>;
const captured = new Map<number, ChangeEvent>();
let lsn = 0x7000000000n;

beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  cluster = await startPostgres({ fast: true });
  standin = new SearchStandIn();
  index = new OpenSearchIndex(searchClient({ node: await standin.start() }));
  const tables: TableConfig[] = [{ table: TABLE, deleteMode: 'soft', mask: [], exclude: [] }];
  pipeline = await slotPipeline(
    cluster,
    'CREATE TABLE v (id int PRIMARY KEY, zip text, code text, f double precision, doc jsonb, raw text, note text, amount numeric(12,2))',
    tables,
    'corrupt',
  );
  const rows = Array.from({ length: ROWS }, (_, i) => ({ id: i + 1, ...sourceRow(i + 1) }));
  const values: unknown[] = [];
  const tuples = rows.map((r) => `(${[r.id, ...COLUMNS.map((c) => r[c])].map((v) => (values.push(v), `$${values.length}`)).join(', ')})`);
  await pipeline.src.query(`INSERT INTO v (id, ${COLUMNS.join(', ')}) VALUES ${tuples.join(', ')}`, values);
  const check = (await pipeline.src.query(`SELECT id, ${COLUMNS.map((c) => `${c}::text AS ${c}`).join(', ')} FROM v ORDER BY id`)).rows;
  expect(check.map((r) => ({ ...r }))).toEqual(rows); // the source prints what the test expects
  const events = await pipeline.drain();
  for (const e of events) captured.set(e.key.id as number, e);
  await pipeline.apply(events);
  const applier = createSearchApplier({
    controlPlane: pipeline.controlPlane,
    search: index,
    sinkId: 'search',
    metrics: new Metrics({ namespace: 'test' }),
    logger: new Logger({ logLevel: 'CRITICAL' }),
  });
  let seq = 0;
  applyToSearch = async (batch) => {
    const out = await applier.applyRecords(batch.map((e) => ({ sequenceNumber: String(++seq), origin: `log/${seq}`, text: JSON.stringify(e) })));
    expect(out.failed).toEqual([]);
  };
  await applyToSearch(events);
  wh = new pg.Client({ connectionString: cluster.url(`${pipeline.id}_dw`) });
  await wh.connect();
}, 180_000);

afterAll(async () => {
  await wh?.end();
  await pipeline?.close();
  index?.client.close();
  await standin?.stop();
  await cluster?.stop();
});

async function reconcile(sink: 'warehouse' | 'search'): Promise<ReconcileVerdict> {
  const src = new pg.Client({ connectionString: cluster.url(pipeline.id) });
  const dw = new pg.Client({ connectionString: cluster.url(`${pipeline.id}_dw`) });
  await src.connect();
  await dw.connect();
  try {
    await prepareReconcileSession(src);
    await prepareReconcileSession(dw);
    const [v] = await reconcileTables({
      controlPlane: pipeline.controlPlane,
      source: pipeline.id,
      sink,
      pacer: new FixedPacer(64),
      settleMs: 0,
      sleep: async () => undefined,
      tables: [{ table: TABLE, key: ['id'], rules: { mask: [], exclude: [] } }],
      sides: async (t) => ({
        source: pgSourceSide(src, t.table, t.key, []),
        sink:
          sink === 'warehouse'
            ? pgWarehouseSide(dw, pipeline.id, t.table, t.key, { stablePoint: false })
            : searchSinkSide(index, { prefix: 'cdc', source: pipeline.id, table: t.table, key: t.key, label: sink, stablePoint: false }),
      }),
    });
    return v!;
  } finally {
    await src.end();
    await dw.end();
  }
}

/** Sets a column of key `id` in the warehouse's mirror and delta (wherever the row is). */
async function setInWarehouse(id: number, column: Column, text: string | null): Promise<void> {
  const schema = `${pipeline.id}_public`;
  for (const t of ['_cdc_mirror_v', '_cdc_delta_v']) await wh.query(`UPDATE ${schema}.${t} SET ${column} = $1 WHERE id = $2`, [text, id]);
}

/** Applies to the search copy the captured row `id` with some columns replaced, at a newer position. */
async function setInSearch(changes: Array<{ id: number; column: Column; json: JsonValue }>): Promise<void> {
  const events = changes.map(({ id, column, json }) => {
    const e = captured.get(id)!;
    return { ...e, op: 'update' as const, after: { ...e.after!, [column]: json }, position: makePosition(++lsn, 0) };
  });
  await applyToSearch(events);
}

describe('reconcile finds exactly the corrupted values (randomized)', () => {
  it(`warehouse and search copies, ${RUNS} runs from seed ${SEED}`, async () => {
    console.log(`reconcile corruption property: seed ${SEED}, ${RUNS} runs, ${ROWS} rows (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
    const started = Date.now();
    const seeds = seededRandom(SEED);
    let corrupted = 0;
    for (let run = 0; run < RUNS; run++) {
      const seed = Math.floor(seeds() * 0x7fffffff);
      const rand = seededRandom(seed);
      const where = `run ${run}, seed ${seed}`;
      const keys = new Set<number>();
      const k = 1 + Math.floor(rand() * 5);
      while (keys.size < k) keys.add(1 + Math.floor(rand() * ROWS));
      const plan = [...keys]
        .sort((a, b) => a - b)
        .map((id) => {
          const options = corruptions(id);
          return { id, ...options[Math.floor(rand() * options.length)]! };
        });
      corrupted += plan.length;
      const expected = plan.map((c) => ({ key: { id: String(c.id) }, kind: 'different', column: c.column }));

      for (const c of plan) await setInWarehouse(c.id, c.column, c.text);
      await setInSearch(plan);
      for (const sink of ['warehouse', 'search'] as const) {
        const v = await reconcile(sink);
        expect(v.verdict, `${where}, ${sink}: ${v.reason}; corrupted ${JSON.stringify(plan)}`).toBe('DIVERGED');
        expect(v.sampleKeys, `${where}, ${sink}: ${JSON.stringify(plan)}`).toEqual(expected);
        expect(v.diverged).toEqual({ missing: 0, extra: 0, different: plan.length });
      }

      // Put the values back; re-spell a few other values without changing them: MATCH.
      for (const c of plan) await setInWarehouse(c.id, c.column, sourceRow(c.id)[c.column]);
      await setInSearch(plan.map((c) => ({ id: c.id, column: c.column, json: captured.get(c.id)!.after![c.column]! })));
      const others = Array.from({ length: 3 }, () => 1 + Math.floor(rand() * ROWS));
      for (const id of others) {
        const options = respellings(id);
        const r = options[Math.floor(rand() * options.length)]!;
        if (r.sink === 'both') await setInWarehouse(id, r.column, r.text);
        await setInSearch([{ id, column: r.column, json: r.json }]);
      }
      for (const sink of ['warehouse', 'search'] as const) {
        const v = await reconcile(sink);
        expect(v.verdict, `${where}, ${sink} after the repair: ${v.reason}`).toBe('MATCH');
      }
    }
    console.log(
      `reconcile corruption property: ${RUNS} runs, ${corrupted} corrupted values found in both copies, every repaired copy MATCH, ${Date.now() - started} ms`,
    );
  }, 300_000);
});
