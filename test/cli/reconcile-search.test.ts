/**
 * `cdc reconcile --sink search` on a stopped `cdc local` state folder (docs/reconcile.md, "The
 * search sink"): the control plane is the folder's DynamoDB Local data, the search sink is the one
 * `cdc local` recorded (`search/sink.json`), and its index is the stand-in's saved state
 * (`search/standin.json`), served by `cdc reconcile` for the duration. Documents are written by the
 * real search applier; the source is an embedded PostgreSQL. Exit 0 and MATCH for a faithful
 * index, the verdict stored in the folder's control plane; `--search` and `--warehouse` together
 * are a usage error (exit 2).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtemp, rm, writeFile, mkdir } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import pg from 'pg';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { SearchStandIn } from '../../local/search-standin.ts';
import { standInDataFile, writeSearchSinkRecord, openLocalControl } from '../../local/reconcile.ts';
import { startDynamoDbLocal } from '../../local/dynamodb.ts';
import { CONTROL_TABLE } from '../../local/stack.ts';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbControlPlane } from '../../lambda/adapters/control-plane-dynamodb.ts';
import { createControlTable } from '../../lambda/adapters/control-plane-dynamodb/control-table.ts';
import { OpenSearchIndex, searchClient } from '../../lambda/adapters/search-opensearch.ts';
import { createSearchApplier } from '../../lambda/handlers/search-applier.ts';
import { maskValue } from '../../lambda/core/tables/masking.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import type { ReconcileVerdict } from '../../lambda/core/reconcile/reconcile.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { parseReconcileArgs } from '../../bin/cli/reconcile.ts';
import { runCdc } from '../helpers/cdc-cli.ts';

const SOURCE = 'clisrc';
let cluster: PostgresCluster;
let dir: string;
const state = () => path.join(dir, 'state');

beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  dir = await mkdtemp(path.join(os.tmpdir(), 'cdc-cli-reconcile-search-'));
  cluster = await startPostgres({ fast: true });
  await cluster.createDatabase(SOURCE);
  const src = new pg.Client({ connectionString: cluster.url(SOURCE) });
  await src.connect();
  await src.query(`CREATE TABLE public.people (id int PRIMARY KEY, email text, ssn text, n bigint);
    INSERT INTO public.people SELECT g, 'u' || g || '@x', 'ssn' || g, g * 10 FROM generate_series(1, 300) g`);
  const rows = (await src.query('SELECT id, email, CAST(n AS text) AS n FROM public.people')).rows as Array<{ id: number; email: string; n: string }>;
  await src.end();

  // The folder as a stopped cdc local leaves it: state.json, the control plane's data, the search sink record and the stand-in's index.
  await mkdir(state(), { recursive: true });
  await writeFile(
    path.join(state(), 'state.json'),
    JSON.stringify({
      version: 1,
      createdAt: new Date().toISOString(),
      postgresDataDir: null,
      embeddedSource: false,
      ports: { postgres: null, dynamodb: 1, kinesis: 1 },
      pids: { dynamodb: null },
      streams: { raw: 'r', changeLog: 'c' },
      source: null,
    }),
  );
  const at = new Date().toISOString();
  const columns = [
    { name: 'id', type: 'integer', nullable: false },
    { name: 'email', type: 'text', nullable: true },
    { name: 'n', type: 'bigint', nullable: true },
  ];
  const register = async (cp: MemoryControlPlane | DynamoDbControlPlane) =>
    cp.registerTable(
      { source: SOURCE, table: 'public.people', state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
      { source: SOURCE, table: 'public.people', version: 1, columns, key: ['id'], effectivePosition: makePosition(0x100000000n, 0), registeredAt: at },
      { at, actor: 'test', action: 'register-table', source: SOURCE, table: 'public.people', outcome: 'done', detail: {} },
    );
  const d = await startDynamoDbLocal({ dbPath: path.join(state(), 'dynamodb') });
  const dynamo = dynamoDbClient(d.endpoint);
  await createControlTable(dynamo, CONTROL_TABLE);
  await register(new DynamoDbControlPlane(dynamo, CONTROL_TABLE));
  dynamo.destroy();
  await d.stop();

  const standin = new SearchStandIn({ dataFile: standInDataFile(state()) });
  await mkdir(path.dirname(standInDataFile(state())), { recursive: true });
  const index = new OpenSearchIndex(searchClient({ node: await standin.start() }));
  const cp = new MemoryControlPlane();
  await register(cp);
  const applier = createSearchApplier({
    controlPlane: cp,
    search: index,
    sinkId: 'search',
    metrics: new Metrics({ namespace: 'test' }),
    logger: new Logger({ logLevel: 'CRITICAL' }),
  });
  const events: ChangeEvent[] = rows.map((r, i) => ({
    v: ENVELOPE_VERSION,
    source: SOURCE,
    table: 'public.people',
    op: 'snapshot',
    key: { id: r.id },
    after: { id: r.id, email: maskValue(r.email), n: r.n },
    before: null,
    missing: [],
    position: makePosition(0x100000000n + BigInt(i + 1), 0),
    commitTs: at,
    txId: String(i),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  }));
  const out = await applier.applyRecords(events.map((e, i) => ({ sequenceNumber: String(i + 1), origin: `t/${i}`, text: JSON.stringify(e) })));
  expect(out.failed).toEqual([]);
  index.client.close();
  await standin.stop();
  // The stand-in of the last run listened here; it is gone now (cdc local is stopped).
  await writeSearchSinkRecord(state(), { sinkId: 'search', url: 'http://127.0.0.1:9' });
  await writeFile(path.join(dir, 'tables.json'), JSON.stringify([{ table: 'public.people', mask: ['email'], exclude: ['ssn'] }]));
}, 180_000);

afterAll(async () => {
  await cluster?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe('cdc reconcile --sink search', () => {
  it('reconciles the recorded search sink from the stand-in saved index while cdc local is stopped', async () => {
    const r = await runCdc([
      'reconcile',
      '--sink',
      'search',
      '--source',
      cluster.url(SOURCE),
      '--source-id',
      SOURCE,
      '--table-config',
      path.join(dir, 'tables.json'),
      '--settle',
      '300ms',
      '--json',
      '--state-dir',
      state(),
    ]);
    expect(r.code, `${r.out}\n${r.err}`).toBe(0);
    const parsed = JSON.parse(r.out) as { exitCode: number; verdicts: ReconcileVerdict[] };
    expect(parsed.verdicts.map((v) => [v.sink, v.table, v.verdict, v.sourceRows, v.sinkRows, v.cost.hashScheme])).toEqual([
      ['search', 'public.people', 'MATCH', 300, 300, 'md5-text'],
    ]);
    // The verdict is in the folder's control plane, under the search sink.
    const local = await openLocalControl(state());
    try {
      expect((await local.controlPlane.getReconcileVerdict('search', SOURCE, 'public.people'))?.verdict).toBe('MATCH');
    } finally {
      await local.close();
    }
  }, 180_000);

  it('refuses --search with --warehouse (exit 2)', async () => {
    const r = await runCdc(['reconcile', '--search', 'http://127.0.0.1:9', '--warehouse', 'postgres://x/y', '--state-dir', state()]);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/--search and --warehouse exclude each other/);
  });

  it("takes --source-budget as the pacer's write-latency budget, and refuses one that is not a positive percentage (exit 2)", async () => {
    expect(parseReconcileArgs(['--source-budget', '25']).budgetLatencyPct).toBe(25);
    expect(parseReconcileArgs([]).budgetLatencyPct).toBeUndefined();
    for (const bad of ['0', '-5', 'lots']) {
      const r = await runCdc(['reconcile', '--source-budget', bad, '--state-dir', state()]);
      expect(r.code, bad).toBe(2);
      expect(r.err).toMatch(/--source-budget expects a positive percentage/);
    }
    expect((await runCdc(['reconcile', '--help'])).out).toContain('--source-budget PCT');
  });
});
