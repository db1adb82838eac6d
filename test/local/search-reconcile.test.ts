/**
 * Reconciliation of the search sink (docs/reconcile.md, "The search sink") against a real embedded
 * PostgreSQL source and the search stand-in, with documents written by the real search applier:
 * two tables, `people` (integer key, a masked and an excluded column, numbers, NULLs, tombstones
 * of deleted rows) and `pairs` (composite key: integer and text, with non-ASCII text), plus the
 * source's heartbeat table, whose document is the sink's stable point (a background loop beats the
 * source and applies each beat, as the pipeline would).
 *
 * 1. After a clean run (every row applied) both tables MATCH, on summaries alone, through the
 *    readers' alias (tombstones hidden), the verdicts stored in the control plane; small pages
 *    force several search requests per range.
 * 2. Documents changed, deleted and added behind the platform's back (directly in the index, with
 *    a higher external version): DIVERGED naming exactly those keys and kinds in each table (exit
 *    code 1), and MATCH again once the document is put back.
 * 3. A key that differs only because its change is in flight (the source changed; the applier
 *    applies it once the reconciler, having found the key differing, waits for the sink's stable
 *    point) is not reported: it settles.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { SearchStandIn } from '../../local/search-standin.ts';
import { reconcileDatabases } from '../../local/reconcile.ts';
import { OpenSearchIndex, searchClient } from '../../lambda/adapters/search-opensearch.ts';
import { createSearchApplier } from '../../lambda/handlers/search-applier.ts';
import { maskValue, NO_COLUMN_RULES } from '../../lambda/core/tables/masking.ts';
import { ENVELOPE_VERSION, type ChangeEvent, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { reconcileTable, verdictExitCode, type ReconcileVerdict } from '../../lambda/core/reconcile/reconcile.ts';
import { pgSourceSide, prepareReconcileSession } from '../../lambda/adapters/reconcile-pg.ts';
import { searchSinkSide } from '../../lambda/adapters/reconcile-search.ts';
import { FixedPacer } from '../../lambda/core/snapshot/snapshot-pacer.ts';
import { documentId, searchNames } from '../../lambda/core/search/search-plan.ts';
import { encodeVersion } from '../../lambda/core/search/search-version.ts';
import type { ColumnDef } from '../../lambda/core/shared/control-plane.ts';
import type { TableConfig } from '../../lambda/core/tables/table-config.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

const SOURCE = 'rsrch';
const BASE = 0x100000000n;
let cluster: PostgresCluster;
let standin: SearchStandIn;
let index: OpenSearchIndex;
let src: pg.Client;
const controlPlane = new MemoryControlPlane();
let lsn = 0;
let seq = 0;

const TABLES: TableConfig[] = [
  { table: 'public.people', deleteMode: 'soft', mask: ['email'], exclude: ['ssn'] },
  { table: 'public.pairs', deleteMode: 'soft', mask: [], exclude: [] },
];
const COLUMNS: Record<string, ColumnDef[]> = {
  'public.people': [
    { name: 'id', type: 'integer', nullable: false },
    { name: 'email', type: 'text', nullable: true },
    { name: 'amount', type: 'numeric(10,2)', nullable: true },
    { name: 'note', type: 'text', nullable: true },
  ],
  'public.pairs': [
    { name: 'region', type: 'integer', nullable: false },
    { name: 'code', type: 'text', nullable: false },
    { name: 'v', type: 'bigint', nullable: true },
  ],
  'public.cdc_heartbeat': [
    { name: 'source_id', type: 'text', nullable: false },
    { name: 'beat_at', type: 'timestamp with time zone', nullable: false },
  ],
};
const KEYS: Record<string, string[]> = { 'public.people': ['id'], 'public.pairs': ['region', 'code'], 'public.cdc_heartbeat': ['source_id'] };

let applier: ReturnType<typeof createSearchApplier>;

function ev(table: string, op: ChangeEvent['op'], key: Row, after: Row | null): ChangeEvent {
  const n = ++lsn;
  return {
    v: ENVELOPE_VERSION,
    source: SOURCE,
    table,
    op,
    key,
    after,
    before: op === 'delete' ? key : null,
    missing: [],
    position: makePosition(BASE + BigInt(n), 0),
    commitTs: new Date().toISOString(),
    txId: String(n),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  };
}

async function apply(events: ChangeEvent[]): Promise<void> {
  const out = await applier.applyRecords(events.map((e) => ({ sequenceNumber: String(++seq), origin: `t/${seq}`, text: JSON.stringify(e) })));
  expect(out.failed).toEqual([]);
}

/** The source rows of a table as the capture would carry them (text values, masked columns masked, excluded left out). */
async function rowsAsEvents(table: string): Promise<ChangeEvent[]> {
  const config = TABLES.find((t) => t.table === table)!;
  const cols = COLUMNS[table]!.map((c) => c.name);
  const res = await src.query(
    `SELECT ${cols.map((c) => `CAST(${c} AS text) AS ${c}`).join(', ')}, ${KEYS[table]!.map((k, i) => `${k} AS k${i}`).join(', ')} FROM ${table}`,
  );
  return res.rows.map((r) => {
    const after: Row = {};
    for (const c of cols) after[c] = config.mask.includes(c) ? maskValue(r[c]) : r[c];
    for (const c of COLUMNS[table]!) if (c.type === 'integer' && after[c.name] !== null) after[c.name] = Number(after[c.name]);
    const key = Object.fromEntries(KEYS[table]!.map((k) => [k, after[k]!]));
    return ev(table, 'snapshot', key, after);
  });
}

/** Beats the source's heartbeat and applies the beat to the search sink, as the pipeline would. */
async function beat(): Promise<void> {
  const r = await src.query(`UPDATE public.cdc_heartbeat SET beat_at = now() WHERE source_id = $1 RETURNING CAST(beat_at AS text) AS at`, [SOURCE]);
  await apply([ev('public.cdc_heartbeat', 'update', { source_id: SOURCE }, { source_id: SOURCE, beat_at: r.rows[0].at })]);
}

beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  cluster = await startPostgres({ fast: true });
  standin = new SearchStandIn();
  index = new OpenSearchIndex(searchClient({ node: await standin.start() }));
  await cluster.createDatabase(SOURCE);
  src = new pg.Client({ connectionString: cluster.url(SOURCE) });
  await src.connect();
  await src.query("SET TimeZone = 'UTC'");
  await src.query(`
    CREATE TABLE public.people (id int PRIMARY KEY, email text, ssn text, amount numeric(10,2), note text);
    INSERT INTO public.people SELECT g, 'user' || g || '@example.com', 'ssn' || g, round(g * 1.37, 2), CASE WHEN g % 5 = 0 THEN NULL ELSE 'note ' || g END FROM generate_series(1, 700) g;
    CREATE TABLE public.pairs (region int, code text, v bigint, PRIMARY KEY (region, code));
    INSERT INTO public.pairs SELECT g % 9, 'c' || lpad((g / 9)::text, 4, '0') || CASE WHEN g % 4 = 0 THEN 'é' ELSE '' END, g * 1000003 FROM generate_series(1, 450) g;
    CREATE TABLE public.cdc_heartbeat (source_id text PRIMARY KEY, beat_at timestamptz NOT NULL);
    INSERT INTO public.cdc_heartbeat VALUES ('${SOURCE}', now());`);
  const at = new Date().toISOString();
  for (const table of Object.keys(COLUMNS)) {
    await controlPlane.registerTable(
      { source: SOURCE, table, state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
      { source: SOURCE, table, version: 1, columns: COLUMNS[table]!, key: KEYS[table]!, effectivePosition: makePosition(BASE, 0), registeredAt: at },
      { at, actor: 'test', action: 'register-table', source: SOURCE, table, outcome: 'done', detail: {} },
    );
  }
  applier = createSearchApplier({
    controlPlane: controlPlane,
    search: index,
    sinkId: 'search',
    metrics: new Metrics({ namespace: 'test' }),
    logger: new Logger({ logLevel: 'CRITICAL' }),
  });
  // The clean run: every row, plus rows that were deleted since (tombstones the readers' alias hides).
  await apply([...(await rowsAsEvents('public.people')), ...(await rowsAsEvents('public.pairs'))]);
  await apply([
    ev('public.people', 'insert', { id: 9001 }, { id: 9001, email: maskValue('gone@x'), amount: '1.00', note: 'gone' }),
    ev('public.people', 'delete', { id: 9001 }, null),
  ]);
  await beat();
}, 120_000);

afterAll(async () => {
  await src?.end();
  index?.client.close();
  await standin?.stop();
  await cluster?.stop();
});

/** Beats every 100 ms while `f` runs (the sink's stable point moves on, as with a running pipeline). */
async function whileBeating<T>(f: () => Promise<T>): Promise<T> {
  let stop = false;
  const loop = (async () => {
    while (!stop) {
      await beat();
      await new Promise((r) => setTimeout(r, 100));
    }
  })();
  try {
    return await f();
  } finally {
    stop = true;
    await loop;
  }
}

const reconcile = (tables = TABLES, pageSize?: number) =>
  whileBeating(() =>
    reconcileDatabases({
      controlPlane,
      sourceUrl: cluster.url(SOURCE),
      search: { index, ...(pageSize ? { pageSize } : {}) },
      source: SOURCE,
      sink: 'search',
      tables,
      fixedSegment: 200,
      leafRows: 16,
      settleMs: 300,
    }),
  );

/** Writes a document straight into the index (behind the platform's back), above every version the applier wrote. */
async function tamper(table: string, key: Row, doc: Record<string, unknown> | null): Promise<void> {
  const names = searchNames('cdc', SOURCE, table);
  const version = encodeVersion(makePosition(BASE + 1_000_000n + BigInt(++lsn), 0), BASE & ~0xffffffffn);
  const action =
    doc === null
      ? { delete: { _index: names.all, _id: documentId(key), version: Number(version), version_type: 'external' } }
      : { index: { _index: names.all, _id: documentId(key), version: Number(version), version_type: 'external' } };
  const body = [JSON.stringify(action), ...(doc ? [JSON.stringify(doc)] : [])].join('\n') + '\n';
  const res = (await index.client.bulk({ body: body as never })).body as { errors: boolean; items: unknown[] };
  expect(res.errors, JSON.stringify(res.items)).toBe(false);
}

describe('reconciling the search sink', () => {
  it('MATCHes after a clean run, on summaries alone, through the readers alias', async () => {
    const verdicts = await reconcile(TABLES, 64);
    expect(verdicts.map((v) => [v.table, v.verdict, v.reason])).toEqual([
      ['public.people', 'MATCH', expect.stringContaining('700 of 700')],
      ['public.pairs', 'MATCH', expect.stringContaining('450 of 450')],
    ]);
    for (const v of verdicts) {
      expect(v.cost).toMatchObject({ hashScheme: 'md5-text', leafRows: 0, bisections: 0 });
      expect(v.fullCoverage).toBe(true);
    }
    expect(verdicts[0]!.columns).toEqual(['id', 'email', 'amount', 'note']); // ssn excluded, email masked
    expect(verdicts.map((v) => [v.sourceRows, v.sinkRows])).toEqual([
      [700, 700],
      [450, 450],
    ]); // the tombstone of 9001 is hidden
    expect(verdictExitCode(verdicts)).toBe(0);
    expect((await controlPlane.getReconcileVerdict('search', SOURCE, 'public.pairs'))?.verdict).toBe('MATCH');
  }, 120_000);

  it('names exactly the keys changed, deleted and added behind its back in each table, and MATCH once undone', async () => {
    const people = searchNames('cdc', SOURCE, 'public.people');
    const stored = await index.readStored(people.alias, [documentId({ id: 123 })]);
    const doc = stored.get(documentId({ id: 123 })) as Record<string, unknown>;
    await tamper('public.people', { id: 123 }, { ...doc, note: 'tampered' });
    await tamper('public.people', { id: 456 }, null);
    await tamper('public.people', { id: 100000 }, { ...doc, id: 100000, cdc_meta: { ...(doc.cdc_meta as object), key: '[["id","100000"]]' } });
    const pairsNames = searchNames('cdc', SOURCE, 'public.pairs');
    const pairKey = { region: 4, code: 'c0004é' };
    const pair = (await index.readStored(pairsNames.alias, [documentId(pairKey)])).get(documentId(pairKey)) as Record<string, unknown>;
    expect(pair).toBeDefined();
    await tamper('public.pairs', { region: 4, code: 'c0004é' }, { ...pair, v: '1' });

    const verdicts = await reconcile();
    const byTable = new Map(verdicts.map((v) => [v.table, v]));
    const p = byTable.get('public.people')!;
    expect(p.verdict, p.reason).toBe('DIVERGED');
    expect(p.sampleKeys.map((s) => [s.key.id, s.kind, s.column ?? null]).sort()).toEqual([
      ['100000', 'extra', null],
      ['123', 'different', 'note'],
      ['456', 'missing', null],
    ]);
    expect(p.diverged).toEqual({ missing: 1, extra: 1, different: 1 });
    const q = byTable.get('public.pairs')!;
    expect(q.verdict, q.reason).toBe('DIVERGED');
    expect(q.sampleKeys).toEqual([{ key: { region: '4', code: 'c0004é' }, kind: 'different', column: 'v' }]);
    expect(verdictExitCode(verdicts)).toBe(1);
    const stored2 = (await controlPlane.getReconcileVerdict('search', SOURCE, 'public.people')) as ReconcileVerdict;
    expect(stored2.verdict).toBe('DIVERGED');

    // Only the people table tampered with: reconciling pairs alone after the fix is MATCH.
    await tamper('public.pairs', pairKey, pair);
    const again = await reconcile([TABLES[1]!]);
    expect(again.map((v) => [v.table, v.verdict])).toEqual([['public.pairs', 'MATCH']]);
  }, 180_000);

  it('does not report a change that is in flight: it settles once the applier applies it', async () => {
    await src.query("UPDATE public.pairs SET v = 7 WHERE region = 2 AND code = 'c0010é'");
    const [event] = (await rowsAsEvents('public.pairs')).filter((e) => e.key.region === 2 && e.key.code === 'c0010é');
    expect(event).toBeDefined();
    // The applier applies the change only once the reconciler has found the key differing and
    // waits for the sink's stable point (its first re-check): the change was in flight.
    const sink = searchSinkSide(index, { prefix: 'cdc', source: SOURCE, table: 'public.pairs', key: KEYS['public.pairs']!, label: 'search' });
    const through = sink.appliedThrough!;
    let applied = false;
    Object.defineProperty(sink, 'appliedThrough', {
      value: async () => {
        if (!applied) {
          applied = true;
          await apply([{ ...event!, op: 'update' }]);
        }
        return through();
      },
    });
    const s = new pg.Client({ connectionString: cluster.url(SOURCE) });
    await s.connect();
    await prepareReconcileSession(s);
    try {
      const v = await whileBeating(() =>
        reconcileTable({
          sink: 'search',
          source: SOURCE,
          table: 'public.pairs',
          key: KEYS['public.pairs']!,
          rules: NO_COLUMN_RULES,
          cursor: null,
          pacer: new FixedPacer(200),
          leafRows: 16,
          settleMs: 300,
          sourceSide: pgSourceSide(s, 'public.pairs', KEYS['public.pairs']!, []),
          sinkSide: sink,
        }),
      );
      expect(applied).toBe(true);
      expect(v.verdict, v.reason).toBe('MATCH');
      expect(v.settled).toBe(1);
    } finally {
      await s.end();
    }
  }, 120_000);
});
