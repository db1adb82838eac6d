/**
 * The type catalogue (docs/types.md): a table per type family of PostgreSQL's data types (and the
 * common extensions the embedded server ships) with edge values, through the real parts: the
 * snapshot worker with the PostgreSQL reader, the built-in slot capture (test_decoding), the
 * normalizer, the warehouse applier into a second embedded database and the search applier into
 * the search stand-in (see `slot-pipeline.ts`; the control plane is the in-memory double).
 *
 * Each table's rows are snapshotted, then changed through the slot (inserts of every value under
 * new keys, updates that rotate the values between rows, a delete). Then the warehouse view must
 * equal the source column by column as text (`::text` on both sides, one session setting), and
 * the search index must equal it by the type-aware comparator (`compareSourceAndSearch`).
 */
import { createHash } from 'node:crypto';
import { mkdtempSync, rmSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { SearchStandIn } from '../../local/search-standin.ts';
import { compareSourceAndSearch } from '../../local/verdict.ts';
import { OpenSearchIndex, searchClient } from '../../lambda/adapters/search-opensearch.ts';
import { createSearchApplier } from '../../lambda/handlers/search-applier.ts';
import { PostgresSnapshotReader } from '../../lambda/adapters/snapshot-postgres.ts';
import { snapshotStreamRecords } from '../../lambda/core/snapshot/snapshot.ts';
import { FixedPacer } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import { requestSnapshot, runTableSnapshot } from '../../lambda/core/snapshot/snapshot-worker.ts';
import { NO_COLUMN_RULES } from '../../lambda/core/tables/masking.ts';
import type { ChangeEvent } from '../../lambda/core/shared/event.ts';
import type { TableConfig } from '../../lambda/core/tables/table-config.ts';
import { catalogueCases, catalogueSchema, type CatalogueCase } from '../fixtures/type-catalogue.ts';
import { CheckId } from '../../lambda/core/operator/doctor-results.ts';
import { runChecks } from '../../lambda/core/operator/doctor.ts';
import { gatherSourceFacts } from '../../lambda/adapters/source-facts-pg.ts';
import { pgSourceSide, pgWarehouseSide, prepareReconcileSession } from '../../lambda/adapters/reconcile-pg.ts';
import { searchSinkSide } from '../../lambda/adapters/reconcile-search.ts';
import { reconcileTables, type ReconcileVerdict } from '../../lambda/core/reconcile/reconcile.ts';
import type { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { slotPipeline } from './slot-pipeline.ts';

let cluster: PostgresCluster;
let dir: string;
let standin: SearchStandIn;
let index: OpenSearchIndex;

beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  dir = mkdtempSync(path.join(os.tmpdir(), 'cdc-type-catalogue-'));
  cluster = await startPostgres({ fast: true });
  standin = new SearchStandIn({ dataFile: path.join(dir, 'standin.json') });
  index = new OpenSearchIndex(searchClient({ node: await standin.start() }));
}, 120_000);

afterAll(async () => {
  index?.client.close();
  await standin?.stop();
  await cluster?.stop();
  if (dir) rmSync(dir, { recursive: true, force: true });
});

/** Reconciles every table through `reconcileTables` against one sink (docs/reconcile.md). */
async function reconcileAll(
  controlPlane: MemoryControlPlane,
  sourceId: string,
  tables: readonly TableConfig[],
  sink: 'warehouse' | 'search',
): Promise<ReconcileVerdict[]> {
  const src = new pg.Client({ connectionString: cluster.url(sourceId) });
  const wh = new pg.Client({ connectionString: cluster.url(`${sourceId}_dw`) });
  await src.connect();
  await wh.connect();
  try {
    await prepareReconcileSession(src);
    await prepareReconcileSession(wh);
    return await reconcileTables({
      controlPlane,
      source: sourceId,
      sink,
      pacer: new FixedPacer(100),
      settleMs: 0,
      sleep: async () => undefined,
      tables: tables.map((t) => ({ table: t.table, key: ['id'], rules: { mask: [], exclude: t.exclude } })),
      sides: async (t) => ({
        source: pgSourceSide(src, t.table, t.key, []),
        sink:
          sink === 'warehouse'
            ? pgWarehouseSide(wh, sourceId, t.table, t.key, { stablePoint: false })
            : searchSinkSide(index, { prefix: 'cdc', source: sourceId, table: t.table, key: t.key, label: sink, stablePoint: false }),
      }),
    });
  } finally {
    await src.end();
    await wh.end();
  }
}

const sha = (s: string) => createHash('sha256').update(s).digest('hex');
const SESSION = "SET TimeZone = 'UTC'; SET DateStyle = 'ISO, YMD'; SET IntervalStyle = 'postgres'; SET extra_float_digits = 1";

/** The changes made through the slot after the snapshot: every value again under a new key, values rotated between rows, one delete. */
function changes(c: CatalogueCase): string[] {
  const n = c.values.length;
  const cols = c.columns ?? 'id, v';
  const sel = c.columns ? c.columns.replace(/^id, /, '') : 'v';
  return [
    `INSERT INTO ${c.name} (${cols}) SELECT id + 100, ${sel} FROM ${c.name}`,
    // Rotate: row i takes the value of row i+1 (the last takes the first's).
    `UPDATE ${c.name} t SET (${sel}) = (SELECT ${sel} FROM ${c.name} s WHERE s.id = t.id % ${n} + 1) WHERE t.id <= ${n}`,
    `DELETE FROM ${c.name} WHERE id = 101`,
  ];
}

describe('type catalogue', () => {
  it('every type family with edge values: snapshot, then changes; warehouse equal as text, search equal by type', async () => {
    const probe = new pg.Client({ connectionString: cluster.url('postgres') });
    await probe.connect();
    const version = (await probe.query<{ v: string }>("SELECT current_setting('server_version_num') AS v")).rows[0]!.v;
    const available = new Set((await probe.query<{ name: string }>('SELECT name FROM pg_available_extensions')).rows.map((r) => r.name));
    await probe.end();
    const cases = catalogueCases(Number(version), available);
    console.log(
      `type catalogue: PostgreSQL ${version}, ${cases.length} tables, extensions ${['hstore', 'citext', 'ltree', 'isn'].filter((e) => available.has(e)).join(', ') || 'none'}`,
    );

    const tables: TableConfig[] = cases.map((c) => ({ table: `public.${c.name}`, deleteMode: 'soft', mask: [], exclude: c.exclude ?? [] }));
    const p = await slotPipeline(cluster, catalogueSchema(cases, Number(version), available), tables, 'types');
    const reader = new PostgresSnapshotReader({ primary: { connectionString: cluster.url(p.id) }, fencePollMs: 5 });
    const search = createSearchApplier({
      controlPlane: p.controlPlane,
      search: index,
      sinkId: 'search',
      metrics: new Metrics({ namespace: 'test' }),
      logger: new Logger({ logLevel: 'CRITICAL' }),
    });
    let seq = 0;
    const toSearch = async (events: readonly ChangeEvent[]) => {
      const out = await search.applyRecords(events.map((e) => ({ sequenceNumber: String(++seq), origin: `s/${seq}`, text: JSON.stringify(e) })));
      expect(out.failed, JSON.stringify([...out.reasons])).toEqual([]);
      const dead = (await p.controlPlane.listDeadLetters()).map((d) => `${d.stage} ${d.table}: ${d.reason.slice(0, 240)}`);
      expect(dead, dead.join('\n')).toEqual([]);
    };
    try {
      // The snapshot of every table (its rows were written before the slot existed).
      for (const t of tables) {
        expect((await requestSnapshot(p.controlPlane, { source: p.id, table: t.table, reason: 'initial', actor: 'operator:test' })).outcome).toBe('requested');
        const outcome = await runTableSnapshot({
          controlPlane: p.controlPlane,
          reader,
          publish: async (r) => p.publishRaw(snapshotStreamRecords(r, sha)),
          pacer: new FixedPacer(50),
          source: p.id,
          table: t.table,
          rules: NO_COLUMN_RULES,
          owner: 'test',
        });
        expect(outcome, t.table).toBe('done');
      }
      const snap = await p.drain();
      expect(snap.filter((e) => e.capture === 'snapshot' && e.op !== 'truncate').length).toBe(cases.reduce((s, c) => s + c.values.length, 0));
      await p.apply(snap);
      await toSearch(snap);

      // Changes through the slot.
      for (const c of cases) for (const sql of changes(c)) await p.src.query(sql);
      const live = await p.drain();
      expect(live.filter((e) => e.capture === 'dms').length).toBeGreaterThan(cases.length * 3);
      await p.apply(live);
      await toSearch(live);

      // The warehouse: column by column, as text.
      const src = new pg.Client({ connectionString: cluster.url(p.id) });
      const dw = new pg.Client({ connectionString: cluster.url(`${p.id}_dw`) });
      await src.connect();
      await dw.connect();
      await src.query(SESSION);
      await dw.query(SESSION);
      const diffs: string[] = [];
      try {
        for (const c of cases) {
          const cols = (c.compare ?? c.columns ?? 'id, v').split(', ');
          // A value's text as PostgreSQL writes it (its type's output function, what the capture
          // carries): `format('%s', …)`. The `::text` cast differs for two types: it trims
          // `character(n)`'s padding and always adds an `inet` host's `/32` or `/128`.
          const select = cols.map((x, j) => `CASE WHEN ${x}::text IS NULL THEN NULL ELSE format('%s', ${x}) END AS c${j}`).join(', ');
          const a = (await src.query({ text: `SELECT ${select} FROM ${c.name} ORDER BY id`, rowMode: 'array' })).rows as (string | null)[][];
          const b = (await dw.query({ text: `SELECT ${select} FROM ${p.id}_public.${c.name} ORDER BY id`, rowMode: 'array' })).rows as (string | null)[][];
          if (a.length !== b.length) diffs.push(`${c.name} (${c.type}): ${a.length} source rows, ${b.length} warehouse rows`);
          for (let i = 0; i < Math.min(a.length, b.length); i++) {
            for (let j = 0; j < cols.length; j++) {
              if (a[i]![j] !== b[i]![j])
                diffs.push(
                  `${c.name} (${c.type}) id ${a[i]![0]} ${cols[j]}: source ${JSON.stringify(a[i]![j]?.slice(0, 80))}, warehouse ${JSON.stringify(b[i]![j]?.slice(0, 80))}`,
                );
            }
          }
        }
      } finally {
        await src.end();
        await dw.end();
      }
      expect(diffs, diffs.join('\n')).toEqual([]);
      // A virtual generated column is not stored and not in the WAL: `cdc doctor` fails it by name,
      // and with the fix it names (exclude it) the warehouse has no such column (docs/types.md).
      if (cases.some((c) => c.name === 'virt')) {
        const checks = runChecks(await gatherSourceFacts(p.src, { tables: [{ table: 'public.virt' }] }));
        const verdict = checks.find((r) => r.check === CheckId.COLUMN_TYPES && r.subject === 'public.virt');
        expect(verdict, JSON.stringify(checks)).toMatchObject({ status: 'FAIL' });
        expect(verdict!.message).toContain('(half)');
        expect(
          await p.rows(
            `SELECT column_name FROM information_schema.columns WHERE table_schema = '${p.id}_public' AND table_name = 'virt' AND left(column_name, 5) <> '_cdc_' ORDER BY 1`,
          ),
        ).toEqual([{ column_name: 'id' }, { column_name: 'v' }]);
      }

      // The search index: by the type-aware comparator.
      const verdict = await compareSourceAndSearch({
        sourceUrl: cluster.url(p.id),
        search: index,
        source: p.id,
        tables,
        controlPlane: p.controlPlane,
        examples: 3,
      });
      const bad = verdict.tables.filter((t) => !t.match).map((t) => `${t.table}: ${[...t.problems, ...t.examples].join('; ')}`);
      expect(bad, bad.join('\n')).toEqual([]);
      expect(verdict.tables.every((t) => t.sourceRows > 0)).toBe(true);

      // Reconciliation (the deployed backstop): source against each sink, column types from the registry.
      for (const sink of ['warehouse', 'search'] as const) {
        const rs = await reconcileAll(p.controlPlane, p.id, tables, sink);
        const off = rs.filter((v) => v.verdict !== 'MATCH').map((v) => `${sink} ${v.table}: ${v.verdict} ${JSON.stringify(v).slice(0, 300)}`);
        expect(off, off.join('\n')).toEqual([]);
        expect(rs).toHaveLength(tables.length);
      }
    } finally {
      await p.close();
    }
  }, 240_000);
});
