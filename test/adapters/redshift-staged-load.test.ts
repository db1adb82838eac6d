/**
 * The Redshift loader function and its appliers (docs/warehouse-apply.md, "Redshift: the applier"),
 * against real parts: load requests in the control table on DynamoDB Local, staged objects in a
 * folder (the S3 stand-in), the Redshift stand-in on embedded PostgreSQL. Several shard appliers
 * (2 to 4) stage concurrently through `createWarehouseApplier` with the `RedshiftWarehouse` over a
 * `RedshiftStagingSubmitter`; the loader is invoked in-process through the invoke port, one
 * invocation at a time (reserved concurrency 1), and by a ticker standing in for its schedule.
 *
 * Crashes are injected at random (seed printed): an applier dies after staging its objects, or after
 * recording its request; the loader dies after a claim, after the COPYs before the COMMIT, or after
 * the COMMIT before marking. After every batch, each shard's part of the view equals the model of
 * its history up to at least every record the batch acknowledged (nothing acknowledged before its
 * load committed); at the end, merged, the whole view equals the model.
 */
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbLoadRequests } from '../../lambda/adapters/control-plane-dynamodb/load-requests.ts';
import { StagedRedshiftLoader } from '../../lambda/adapters/redshift-staged-loader.ts';
import { RedshiftStagingSubmitter } from '../../lambda/adapters/redshift-staging-submitter.ts';
import type { RedshiftSession } from '../../lambda/adapters/redshift-loader.ts';
import { RedshiftWarehouse, redshiftTableOf } from '../../lambda/adapters/warehouse-redshift.ts';
import type { ChangeRecord } from '../../lambda/handlers/warehouse-applier.ts';
import type { Archive } from '../../lambda/core/rebuild/archive.ts';
import type { ColumnDef, DeleteMode } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { LoadRequestFailedError } from '../../lambda/core/warehouse/redshift-requests.ts';
import { rsQualified } from '../../lambda/core/warehouse/redshift-sql.ts';
import { copyStageName } from '../../lambda/core/warehouse/redshift-staged-sql.ts';
import { warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { FolderArchive } from '../../local/archive.ts';
import { type DynamoDbLocal } from '../../local/dynamodb.ts';
import { RedshiftStandIn } from '../../local/redshift-standin.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { quietApplier } from '../helpers/registered-applier.ts';
import { useRedshiftFixture } from '../helpers/redshift-fixture.ts';
import { redshiftProblems } from '../helpers/redshift-grammar.ts';
import { rng } from '../helpers/rng.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 3);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const TABLE = 'public.items';
const BUCKET = 'staging';
const ROLE = 'arn:aws:iam::123456789012:role/cdc-copy';
const COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'note', type: 'text', nullable: true },
  { name: 'amount', type: 'numeric(10,2)', nullable: true },
];
const EVENTS_PER_SHARD = 30;
/** How long an applier waits for its load (the deadline), and the loader's timeout (a claim older is stale). */
const WAIT_MS = 1500;
const LOADER_TIMEOUT_MS = 500;

interface ModelRow {
  note: string | null;
  amount: string | null;
}

/** The injected crash points, counted. */
const CRASHES = [
  'applier: after staging',
  'applier: after the request',
  'loader: after the claim',
  'loader: after COPY, before COMMIT',
  'loader: after COMMIT, before marking',
];

describe('the Redshift loader function: concurrent appliers, crashes anywhere (DynamoDB Local, stand-in)', () => {
  const f = useRedshiftFixture({ database: 'rsl', clients: 6, dynamo: true, utc: true });
  const clients = f.clients;
  let ddb: DynamoDbLocal;
  let pool: pg.Pool;
  let folder: string;
  beforeAll(() => void ([ddb, pool, folder] = [f.ddb, f.pool, f.folder]));

  it(`every batch ends loaded as the model says, none acknowledged before its load commits (${RUNS} runs, seed ${SEED})`, async () => {
    console.log(`redshift-staged-load: ${RUNS} runs, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
    const rand = rng(SEED);
    const store = new FolderArchive(folder);
    const crashes = new Map(CRASHES.map((c) => [c, 0]));
    const statements: string[] = [];
    let loads = 0;
    let recovered = 0;
    for (let run = 0; run < RUNS; run++) {
      const sourceId = `s${run}`;
      const sinkId = `wh${run}`;
      const prefix = `cdc/${sinkId}/`;
      const shards = 2 + Math.floor(rand() * 3);
      const mode: DeleteMode = rand() < 0.5 ? 'hard' : 'soft';
      const crashRate = 0.06 + rand() * 0.08;
      const ddbClient = dynamoDbClient(ddb.endpoint);
      const requests = new DynamoDbLoadRequests(ddbClient, 'control', sinkId);
      const memory = new MemoryControlPlane();
      const at = new Date().toISOString();
      await memory.registerTable(
        { source: sourceId, table: TABLE, state: 'active', currentVersion: 1, deleteMode: mode, preImage: 'key', stateReason: null, updatedAt: at },
        { source: sourceId, table: TABLE, version: 1, columns: COLUMNS, key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: at },
        { at, actor: 'test', action: 'register-table', source: sourceId, table: TABLE, outcome: 'done', detail: {} },
      );
      let loaderCrashRate = crashRate;
      // A crash point not hit yet in this test is tried more often, so every one is hit whatever the seed and run count.
      const rate = (base: number, ...points: string[]): number => (base > 0 && points.some((p) => crashes.get(p) === 0) ? Math.max(base, 0.3) : base);
      const crash = (what: string): never => {
        crashes.set(what, crashes.get(what)! + 1);
        throw new Error(`injected: ${what}`);
      };

      // The loader function: one invocation at a time; a crash kills the invocation (its session's transaction is rolled back, as a dropped connection is).
      const loaderStandIn = new RedshiftStandIn({ client: clients[0]!, store, bucket: BUCKET });
      let queue: Promise<void> = Promise.resolve();
      const invocation = async (mergeEveryMs: number): Promise<void> => {
        let dead = false;
        const alive = (): void => {
          if (dead) throw new Error('the invocation is dead');
        };
        const session: RedshiftSession = {
          query: async (q) => {
            alive();
            statements.push(q);
            if (q === 'COMMIT' && rand() < rate(loaderCrashRate, 'loader: after COPY, before COMMIT', 'loader: after COMMIT, before marking')) {
              dead = true;
              if (rand() < 0.5) crash('loader: after COPY, before COMMIT');
              await loaderStandIn.query(q);
              crash('loader: after COMMIT, before marking');
            }
            return loaderStandIn.query(q);
          },
        };
        const loaderRequests = new Proxy(requests, {
          get(target, prop) {
            const v = Reflect.get(target, prop, target) as unknown;
            if (typeof v !== 'function') return v;
            return async (...args: unknown[]) => {
              alive();
              const out = await (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
              if (prop === 'move' && args[2] === 'claimed' && out === true && rand() < rate(loaderCrashRate, 'loader: after the claim')) {
                dead = true;
                crash('loader: after the claim');
              }
              return out;
            };
          },
        });
        const loader = new StagedRedshiftLoader({
          session,
          requests: loaderRequests,
          place: { store, bucket: BUCKET },
          prefix,
          roleArn: ROLE,
          ledgerSchema: `${sinkId}_loads`,
          cadence: { loadEveryMs: 20, mergeEveryMs },
          loaderTimeoutMs: LOADER_TIMEOUT_MS,
        });
        try {
          const r = await loader.invoke(LOADER_TIMEOUT_MS - 100);
          loads += r.loads;
          recovered += r.recovered;
        } catch {
          // The invocation died: its connection is gone, so is its transaction.
          await clients[0]!.query('ROLLBACK');
        }
      };
      const invoke = (mergeEveryMs = 200 + Math.floor(rand() * 400)): Promise<void> => (queue = queue.then(() => invocation(mergeEveryMs)));
      // The schedule, squeezed: stranded requests and merges happen with no traffic too.
      let ticking = true;
      const ticker = (async () => {
        while (ticking) {
          await invoke();
          await new Promise((r) => setTimeout(r, 100));
        }
      })();

      // The shards: keys are routed by id, so each shard's keys are its own.
      const histories: { records: ChangeRecord[]; events: ChangeEvent[] }[] = [];
      for (let s = 0; s < shards; s++) {
        const model = new Map<number, ModelRow | null>();
        const events: ChangeEvent[] = [];
        for (let i = 1; i <= EVENTS_PER_SHARD; i++) {
          const id = s + shards * Math.floor(rand() * 5);
          const cur = model.get(id) ?? null;
          const r = rand();
          const row: ModelRow = { note: rand() < 0.2 ? null : `n${s}.${i}'"\n,é`, amount: (Math.floor(rand() * 100000) / 100).toFixed(2) };
          const base = {
            v: ENVELOPE_VERSION,
            source: sourceId,
            table: TABLE,
            key: { id } as Row,
            before: null,
            missing: [] as string[],
            position: makePosition(BigInt(i) * 0x100n + BigInt(s), 0),
            commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
            txId: `${s}.${i}`,
            schemaVersion: 1,
            capture: 'slot' as const,
            synthetic: false,
          };
          let e: ChangeEvent;
          if (cur !== null && r < 0.2) {
            e = { ...base, op: 'delete', after: null };
            model.set(id, null);
          } else if (cur !== null && r < 0.4) {
            e = { ...base, op: 'update', after: { id, amount: row.amount }, missing: ['note'] };
            model.set(id, { ...row, note: cur.note });
          } else {
            e = { ...base, op: cur === null ? 'insert' : 'update', after: { id, ...row } };
            model.set(id, row);
          }
          events.push(e);
        }
        histories.push({
          events,
          records: events.map((e, i) => ({ sequenceNumber: String(1000 + i), origin: `s/shard-${s}/${1000 + i}`, text: JSON.stringify(e) })),
        });
      }
      const expected = (events: readonly ChangeEvent[]): Map<number, ModelRow> => {
        const m = new Map<number, ModelRow | null>();
        for (const e of events) {
          const prev = m.get(Number(e.key.id)) ?? null;
          if (e.op === 'delete') m.set(Number(e.key.id), null);
          else {
            const a = e.after!;
            m.set(Number(e.key.id), {
              note: e.missing.includes('note') ? (prev?.note ?? null) : ((a.note as string | null) ?? null),
              amount: (a.amount as string | null) ?? null,
            });
          }
        }
        return new Map([...m].filter((x): x is [number, ModelRow] => x[1] !== null));
      };
      const t = warehouseTable(sourceId, TABLE);
      const view = async (shard?: number): Promise<Map<number, ModelRow>> => {
        const exists = await clients[5]!.query(
          'SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2',
          [t.schema, t.view],
        );
        if (exists.rowCount === 0) return new Map();
        const rows = (await clients[5]!.query(`SELECT id, note, amount FROM ${rsQualified(t.schema, t.view)}`)).rows as {
          id: string;
          note: string | null;
          amount: string | null;
        }[];
        return new Map(
          rows.filter((r) => shard === undefined || Number(r.id) % shards === shard).map((r) => [Number(r.id), { note: r.note, amount: r.amount }]),
        );
      };
      const same = (a: Map<number, ModelRow>, b: Map<number, ModelRow>): boolean => JSON.stringify([...a].sort()) === JSON.stringify([...b].sort());

      const deliver = async (s: number): Promise<void> => {
        const { records, events } = histories[s]!;
        // An applier per shard, each with its own session; its staging store and request writes may crash.
        const session = new RedshiftStandIn({ client: clients[1 + s]!, store, bucket: BUCKET });
        const crashingStore: Archive = {
          location: store.location,
          get: (k) => store.get(k),
          list: (p, a) => store.list(p, a),
          put: async (k, body) => {
            await store.put(k, body);
            if (rand() < rate(crashRate / 2, 'applier: after staging')) crash('applier: after staging');
          },
        };
        const applierRequests = new Proxy(requests, {
          get(target, prop) {
            const v = Reflect.get(target, prop, target) as unknown;
            if (typeof v !== 'function') return v;
            return async (...args: unknown[]) => {
              const out = await (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
              if (prop === 'put' && rand() < rate(crashRate, 'applier: after the request')) crash('applier: after the request');
              return out;
            };
          },
        });
        const submitter = new RedshiftStagingSubmitter({
          session: { query: async (q) => (statements.push(q), session.query(q)) },
          requests: applierRequests,
          place: { store: crashingStore, bucket: BUCKET },
          prefix,
          invokeLoader: async () => void invoke(),
          waitMs: WAIT_MS,
          pollMs: 20,
        });
        const applier = quietApplier(memory, pool, new RedshiftWarehouse({ loader: submitter }), sinkId);
        let checkpoint = 0;
        let delivered = 0;
        while (checkpoint < records.length) {
          const batch = records.slice(checkpoint, checkpoint + 1 + Math.floor(rand() * 8));
          delivered = Math.max(delivered, checkpoint + batch.length);
          const outcome = await applier.applyRecords(batch);
          const firstFailed = outcome.failed.length === 0 ? batch.length : batch.findIndex((r) => outcome.failed.includes(r.sequenceNumber));
          // Acknowledged: everything before the first failed record. Its load has committed, so the view holds at least that much of the shard's history.
          const acked = checkpoint + firstFailed;
          const seen = await view(s);
          const ok = Array.from({ length: delivered - acked + 1 }, (_, k) => acked + k).some((k) => same(expected(events.slice(0, k)), seen));
          expect(ok, `run ${run} shard ${s}: after acknowledging ${acked} of ${records.length}, the view is ${JSON.stringify([...seen])}`).toBe(true);
          checkpoint = acked;
        }
      };
      await Promise.all(histories.map((_, s) => deliver(s)));
      ticking = false;
      await ticker;
      // A last invocation, not crashed, with the merge due: everything merged, the view is the whole history.
      loaderCrashRate = 0;
      await invoke(0);
      for (let s = 0; s < shards; s++) expect([...(await view(s))].sort(), `run ${run} shard ${s}, merged`).toEqual([...expected(histories[s]!.events)].sort());
      const pendingRows = await clients[5]!.query(
        `SELECT COUNT(*) AS n FROM ${rsQualified(t.schema, t.changelog)} c WHERE c._cdc_load > (SELECT merged_load FROM ${rsQualified(t.schema, '_cdc_watermarks')} w WHERE w.table_name = $1)`,
        [t.view.toLowerCase()],
      );
      expect(Number(pendingRows.rows[0].n), `run ${run}: the final merge absorbed every load`).toBe(0);
      expect(memory.calls.get('putDeadLetter') ?? 0).toBe(0);
    }
    console.log(`redshift-staged-load: ${loads} loads, ${recovered} stale claims recovered; crashes ${JSON.stringify(Object.fromEntries(crashes))}`);
    for (const c of CRASHES) expect(crashes.get(c), `no crash was injected ${c}`).toBeGreaterThan(0);
    expect(recovered).toBeGreaterThan(0);
    const problems = [...new Set(statements)].flatMap((s) => redshiftProblems(s).map((p) => `${p}: ${s.slice(0, 160)}`));
    expect(problems).toEqual([]);
  }, 300_000);

  /** Two appliers' sides of sink `sinkId` (sessions 1 and 2) with a table each, registered; `event` an insert of key 1. */
  async function twoAppliers(sinkId: string, source: string, firstTable: string, secondTable: string) {
    const requests = new DynamoDbLoadRequests(dynamoDbClient(ddb.endpoint), 'control', sinkId);
    const store = new FolderArchive(folder);
    const version = { source, table: '', version: 1, columns: COLUMNS, key: ['id'], effectivePosition: makePosition(0n, 0), registeredAt: '' };
    const first = redshiftTableOf(warehouseTable(source, firstTable), version, false);
    const second = redshiftTableOf(warehouseTable(source, secondTable), version, false);
    const submitter = (i: number): RedshiftStagingSubmitter =>
      new RedshiftStagingSubmitter({
        session: new RedshiftStandIn({ client: clients[i]!, store, bucket: BUCKET }),
        requests,
        place: { store, bucket: BUCKET },
        prefix: `cdc/${sinkId}/`,
        invokeLoader: async () => undefined,
        waitMs: 10_000,
        pollMs: 20,
      });
    const [a, b] = [submitter(1), submitter(2)];
    await a.register(first);
    await b.register(second);
    const event = (table: string): ChangeEvent => ({
      v: ENVELOPE_VERSION,
      source,
      table,
      key: { id: 1 },
      before: null,
      missing: [],
      op: 'insert',
      after: { id: 1, note: 'x', amount: '1.00' },
      position: makePosition(0x100n, 0),
      commitTs: new Date(Date.UTC(2026, 0, 1)).toISOString(),
      txId: '1',
      schemaVersion: 1,
      capture: 'slot',
      synthetic: false,
    });
    return { requests, store, a, b, first, second, event };
  }

  it('a request the warehouse refuses fails alone, with its SQLSTATE, for the apply to isolate or hold; the others in its load commit', async () => {
    const { requests, store, a, b, first: good, second: bad, event } = await twoAppliers('refuse', 'rf', 'public.good', 'public.bad');
    const loaded = a.submit(good, [event('public.good')]);
    const refused = b.submit(bad, [event('public.bad')]).then(
      () => null,
      (e: unknown) => e,
    );
    while ((await requests.list()).length < 2) await new Promise((r) => setTimeout(r, 20));
    const standIn = new RedshiftStandIn({ client: clients[0]!, store, bucket: BUCKET });
    let badCopies = 0;
    const loader = new StagedRedshiftLoader({
      session: {
        query: async (q) => {
          if (q.startsWith('COPY') && q.includes(copyStageName(bad))) {
            badCopies++;
            throw Object.assign(new Error('value too long for type character varying(8)'), { code: '22001' });
          }
          return standIn.query(q);
        },
      },
      requests,
      place: { store, bucket: BUCKET },
      prefix: 'cdc/refuse/',
      roleArn: ROLE,
      ledgerSchema: 'refuse_loads',
      cadence: { loadEveryMs: 20, mergeEveryMs: 3_600_000 },
      loaderTimeoutMs: 60_000,
    });
    const run = await loader.invoke(5_000);
    expect(run).toMatchObject({ loads: 1, requests: 2, failed: 1 });
    // Tried together first (the refused COPY failed the whole load), then each alone.
    expect(badCopies).toBe(2);
    expect((await loaded).loaded).toBe(1);
    const err = await refused;
    expect(err).toBeInstanceOf(LoadRequestFailedError);
    expect((err as LoadRequestFailedError).sqlState).toBe('22001');
    const writer = new RedshiftWarehouse({ loader: b });
    expect(writer.classifyError(err)).toEqual({ kind: 'value-rejected' });
    expect(writer.classifyError(new LoadRequestFailedError('r', 'relation does not exist', '42P01'))).toEqual({ kind: 'persistent', code: '42P01' });
    expect(writer.classifyError(new LoadRequestFailedError('r', 'no load committed the request before its deadline'))).toBeNull();
    const rows = async (r: typeof good): Promise<number> =>
      Number((await clients[5]!.query(`SELECT COUNT(*) AS n FROM ${rsQualified(r.t.schema, r.t.view)}`)).rows[0].n);
    expect([await rows(good), await rows(bad)]).toEqual([1, 0]);
    // Both answered, both deleted by their appliers.
    expect(await requests.list()).toEqual([]);
  }, 60_000);
  it('a request recorded while the loader runs waits a gap of at most a second for the next load, not loadEveryMs', async () => {
    const { requests, store, a, b, first, second, event } = await twoAppliers('gap', 'gp', 'public.first', 'public.second');
    const one = a.submit(first, [event('public.first')]);
    while ((await requests.list()).length < 1) await new Promise((r) => setTimeout(r, 20));
    let two: Promise<unknown> | null = null;
    const slept: number[] = [];
    const loader = new StagedRedshiftLoader({
      session: new RedshiftStandIn({ client: clients[0]!, store, bucket: BUCKET }),
      requests,
      place: { store, bucket: BUCKET },
      prefix: 'cdc/gap/',
      roleArn: ROLE,
      ledgerSchema: 'gap_loads',
      // A freshness target of 5 minutes: a load at least every 100 s.
      cadence: { loadEveryMs: 100_000, mergeEveryMs: 3_600_000 },
      loaderTimeoutMs: 600_000,
      // The second request is recorded while the loader waits after its first load.
      sleep: async (ms) => {
        slept.push(ms);
        if (two === null) {
          two = b.submit(second, [event('public.second')]);
          while ((await requests.list()).filter((r) => r.state === 'pending').length < 1) await new Promise((r) => setTimeout(r, 20));
        }
      },
    });
    const run = await loader.invoke(300_000);
    expect(run).toMatchObject({ loads: 2, requests: 2, failed: 0 });
    expect(slept.length).toBeGreaterThan(0);
    for (const ms of slept) expect(ms, 'the wait between two loads').toBeLessThanOrEqual(1_000);
    await Promise.all([one, two]);
  }, 60_000);
});
