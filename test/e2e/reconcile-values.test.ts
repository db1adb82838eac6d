/**
 * Values through the real slot capture (embedded PostgreSQL, test_decoding) into the warehouse
 * (the real applier, a second database) and the search index (the real search applier, the search
 * stand-in), and what reconciliation and the local verdict say of them (docs/reconcile.md, "How
 * values compare"; docs/exact-numbers.md).
 *
 * 1. The reproduction of the review of 2026-12-06 (`reconcile-false-match`): a warehouse that lost
 *    a jsonb big integer's precision, a text zip code's leading zeros and a text column's JSON
 *    formatting was reported MATCH by the reconciler and the local verdict. Now both report it, the
 *    reconciler naming the key and the first differing column, with each column's type taken from
 *    the schema registry the pipeline filled.
 * 2. A `double precision` `-0` (and other floats whose JavaScript spelling differs from
 *    PostgreSQL's) arrives as itself in the warehouse and in the search document (it arrived as `0`:
 *    the decoder made it a JavaScript -0, which JSON writes `0`), and both reconcile MATCH.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { SearchStandIn } from '../../local/search-standin.ts';
import type { TableConfig } from '../../lambda/core/tables/table-config.ts';
import type { ChangeEvent } from '../../lambda/core/shared/event.ts';
import { pgSourceSide, pgWarehouseSide, prepareReconcileSession } from '../../lambda/adapters/reconcile-pg.ts';
import { searchSinkSide } from '../../lambda/adapters/reconcile-search.ts';
import { OpenSearchIndex, searchClient } from '../../lambda/adapters/search-opensearch.ts';
import { createSearchApplier } from '../../lambda/handlers/search-applier.ts';
import { reconcileTables, type ReconcileVerdict } from '../../lambda/core/reconcile/reconcile.ts';
import { FixedPacer } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import { documentId, searchNames } from '../../lambda/core/search/search-plan.ts';
import { compareSourceAndSearch, compareSourceAndWarehouse, formatVerdict } from '../../local/verdict.ts';
import type { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { slotPipeline } from './slot-pipeline.ts';

let cluster: PostgresCluster;
let standin: SearchStandIn;
let index: OpenSearchIndex;
beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  cluster = await startPostgres({ fast: true });
  standin = new SearchStandIn();
  index = new OpenSearchIndex(searchClient({ node: await standin.start() }));
}, 120_000);
afterAll(async () => {
  index?.client.close();
  await standin?.stop();
  await cluster?.stop();
});

type Sink = 'warehouse' | 'search';

/** Reconciles one table through `reconcileTables` (column types from the pipeline's schema registry). */
async function reconcile(controlPlane: MemoryControlPlane, sourceId: string, table: string, sink: Sink): Promise<ReconcileVerdict> {
  const src = new pg.Client({ connectionString: cluster.url(sourceId) });
  const wh = new pg.Client({ connectionString: cluster.url(`${sourceId}_dw`) });
  await src.connect();
  await wh.connect();
  try {
    await prepareReconcileSession(src);
    await prepareReconcileSession(wh);
    const [v] = await reconcileTables({
      controlPlane,
      source: sourceId,
      sink,
      pacer: new FixedPacer(100),
      settleMs: 0,
      sleep: async () => undefined,
      tables: [{ table, key: ['id'], rules: { mask: [], exclude: [] } }],
      sides: async (t) => ({
        source: pgSourceSide(src, t.table, t.key, []),
        sink:
          sink === 'warehouse'
            ? pgWarehouseSide(wh, sourceId, t.table, t.key, { stablePoint: false })
            : searchSinkSide(index, { prefix: 'cdc', source: sourceId, table: t.table, key: t.key, label: sink, stablePoint: false }),
      }),
    });
    return v!;
  } finally {
    await src.end();
    await wh.end();
  }
}

function searchApplier(controlPlane: MemoryControlPlane) {
  const applier = createSearchApplier({
    controlPlane: controlPlane,
    search: index,
    sinkId: 'search',
    metrics: new Metrics({ namespace: 'test' }),
    logger: new Logger({ logLevel: 'CRITICAL' }),
  });
  let seq = 0;
  return async (events: readonly ChangeEvent[]) => {
    const out = await applier.applyRecords(events.map((e) => ({ sequenceNumber: String(++seq), origin: `log/${seq}`, text: JSON.stringify(e) })));
    expect(out.failed).toEqual([]);
  };
}

describe('reconcile and the local verdict compare values by their column type', () => {
  it('a warehouse that lost a json big integer, a zip code leading zero and a text column JSON spacing is DIVERGED, not MATCH', async () => {
    const tables: TableConfig[] = [{ table: 'public.t', deleteMode: 'soft', mask: [], exclude: [] }];
    const p = await slotPipeline(cluster, 'CREATE TABLE t (id int PRIMARY KEY, doc jsonb, zip text, raw text)', tables, 'rfm');
    try {
      await p.src.query(
        `INSERT INTO t VALUES (1, '{"account": 9007199254740993}', '00501', '[1,2]'), (2, '{"n": 1}', '02134', 'x'), (3, '{"n": 2}', '1.0', '')`,
      );
      await p.apply(await p.drain());
      expect((await reconcile(p.controlPlane, p.id, 'public.t', 'warehouse')).verdict).toBe('MATCH');
      // Corrupt the sink as a lossy path would: JSON.parse of a big integer, a numeric coercion of a
      // text code, re-serialised JSON text, a decimal-looking text shortened, '' turned into NULL.
      await p.rows(`UPDATE ${p.id}_public._cdc_changelog_t SET doc = '{"account": 9007199254740992}' WHERE id = 1`);
      await p.rows(`UPDATE ${p.id}_public._cdc_changelog_t SET zip = '2134' WHERE id = 2`);
      await p.rows(`UPDATE ${p.id}_public._cdc_changelog_t SET zip = '1', raw = NULL WHERE id = 3`);
      const v = await reconcile(p.controlPlane, p.id, 'public.t', 'warehouse');
      expect(v.verdict, v.reason).toBe('DIVERGED');
      expect(v.sampleKeys).toEqual([
        { key: { id: '1' }, kind: 'different', column: 'doc' },
        { key: { id: '2' }, kind: 'different', column: 'zip' },
        { key: { id: '3' }, kind: 'different', column: 'zip' },
      ]);
      const local = await compareSourceAndWarehouse({
        sourceUrl: cluster.url(p.id),
        warehouseUrl: cluster.url(`${p.id}_dw`),
        source: p.id,
        tables,
        controlPlane: p.controlPlane,
      });
      expect(local.match, formatVerdict(local).join('\n')).toBe(false);
      expect(local.tables[0]!.different).toBe(3);
      // Each corruption alone is found: the text column's JSON spacing and NULL for ''.
      await p.rows(`UPDATE ${p.id}_public._cdc_changelog_t SET doc = '{"account": 9007199254740993}', zip = '00501', raw = '[1, 2]' WHERE id = 1`);
      await p.rows(`UPDATE ${p.id}_public._cdc_changelog_t SET zip = '02134' WHERE id = 2`);
      await p.rows(`UPDATE ${p.id}_public._cdc_changelog_t SET zip = '1.0' WHERE id = 3`);
      const w = await reconcile(p.controlPlane, p.id, 'public.t', 'warehouse');
      expect(w.sampleKeys).toEqual([
        { key: { id: '1' }, kind: 'different', column: 'raw' },
        { key: { id: '3' }, kind: 'different', column: 'raw' },
      ]);
      // The same jsonb value spelled otherwise (a jsonb column keeps no spelling) is the same value.
      await p.rows(`UPDATE ${p.id}_public._cdc_changelog_t SET doc = '{ "account" : 9007199254740993.0 }', raw = '[1,2]' WHERE id = 1`);
      await p.rows(`UPDATE ${p.id}_public._cdc_changelog_t SET raw = '' WHERE id = 3`);
      const m = await reconcile(p.controlPlane, p.id, 'public.t', 'warehouse');
      expect(m.verdict, m.reason).toBe('MATCH');
      const ok = await compareSourceAndWarehouse({
        sourceUrl: cluster.url(p.id),
        warehouseUrl: cluster.url(`${p.id}_dw`),
        source: p.id,
        tables,
        controlPlane: p.controlPlane,
      });
      expect(ok.match, formatVerdict(ok).join('\n')).toBe(true);
    } finally {
      await p.close();
    }
  }, 180_000);

  it('a double precision -0 arrives as -0 in the warehouse and in the search document, and both MATCH', async () => {
    const tables: TableConfig[] = [{ table: 'public.f', deleteMode: 'soft', mask: [], exclude: [] }];
    const p = await slotPipeline(cluster, 'CREATE TABLE f (id int PRIMARY KEY, v double precision, r real)', tables, 'negz');
    const toSearch = searchApplier(p.controlPlane);
    try {
      const values: Array<[string, string]> = [
        ['-0', '-0'],
        ['0', '0'],
        ['0.1', '0.1'],
        ['1e-05', '1e-05'],
        ['-1.5e-07', '-1.5e-07'],
        ['1e+300', '1e+30'],
        ['5e-324', '1.5'],
        ['NaN', '-0'],
        ['-Infinity', 'Infinity'],
      ];
      await p.src.query(`INSERT INTO f VALUES ${values.map(([v, r], i) => `(${i + 1}, '${v}', '${r}')`).join(', ')}`);
      const events = await p.drain();
      // The event carries the text where JavaScript would spell the number otherwise.
      expect(events.find((e) => e.key.id === 1)!.after).toEqual({ id: 1, v: '-0', r: '-0' });
      await p.apply(events);
      // Search cannot index NaN / Infinity in a double field: those rows stay out of the search copy.
      await toSearch(events.filter((e) => typeof e.key.id === 'number' && e.key.id <= 7));
      const source = (await p.src.query('SELECT id, v::text AS v, r::text AS r FROM f ORDER BY id')).rows;
      const warehouse = await p.rows(`SELECT id::int AS id, v::text AS v, r::text AS r FROM ${p.id}_public.f ORDER BY id`);
      expect(warehouse).toEqual(source);
      expect(warehouse[0]).toEqual({ id: 1, v: '-0', r: '-0' });
      const docs = await index.readStored(searchNames('cdc', p.id, 'public.f').alias, [documentId({ id: 1 }), documentId({ id: 2 })]);
      const doc1 = docs.get(documentId({ id: 1 })) as Record<string, unknown>;
      expect([doc1.v, doc1.r]).toEqual(['-0', '-0']);
      expect((docs.get(documentId({ id: 2 })) as Record<string, unknown>).v).toBe(0);
      const w = await reconcile(p.controlPlane, p.id, 'public.f', 'warehouse');
      expect(w.verdict, w.reason).toBe('MATCH');
      // The search copy holds rows 1..7; reconcile the same rows.
      await p.src.query('DELETE FROM f WHERE id > 7');
      const s = await reconcile(p.controlPlane, p.id, 'public.f', 'search');
      expect(s.verdict, s.reason).toBe('MATCH');
      const local = await compareSourceAndSearch({ sourceUrl: cluster.url(p.id), search: index, source: p.id, tables, controlPlane: p.controlPlane });
      expect(local.match, formatVerdict(local).join('\n')).toBe(true);
      // And a sink holding 0 for the source's -0 is reported.
      await p.apply(await p.drain()); // the deletes, so both sides hold rows 1..7
      await p.rows(`UPDATE ${p.id}_public._cdc_changelog_f SET v = 0 WHERE id = 1; UPDATE ${p.id}_public._cdc_mirror_f SET v = 0 WHERE id = 1`);
      const d = await reconcile(p.controlPlane, p.id, 'public.f', 'warehouse');
      expect(d.verdict, d.reason).toBe('DIVERGED');
      expect(d.sampleKeys).toEqual([{ key: { id: '1' }, kind: 'different', column: 'v' }]);
    } finally {
      await p.close();
    }
  }, 180_000);
});
