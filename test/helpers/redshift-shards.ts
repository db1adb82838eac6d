/**
 * Appliers standing for the shards of one Redshift sink (docs/warehouse-apply.md, "Redshift: the applier"), over the
 * Redshift stand-in on embedded PostgreSQL with a folder as S3, on both ports: in one process (one `RedshiftLoader`
 * behind every shard's applier, as `cdc local --warehouse-engine redshift` runs it) and on the AWS path (a
 * `RedshiftStagingSubmitter` per shard, load requests in the control table on DynamoDB Local, the loader function
 * `StagedRedshiftLoader` invoked in-process, one invocation at a time). The table is `public.items` (id, note, amount).
 */
import { expect } from 'vitest';
import { dynamoDbClient } from '../../lambda/adapters/aws-clients.ts';
import { DynamoDbLoadRequests } from '../../lambda/adapters/control-plane-dynamodb/load-requests.ts';
import { RedshiftLoader, type RedshiftSession } from '../../lambda/adapters/redshift-loader.ts';
import { StagedRedshiftLoader } from '../../lambda/adapters/redshift-staged-loader.ts';
import { RedshiftStagingSubmitter } from '../../lambda/adapters/redshift-staging-submitter.ts';
import { RedshiftWarehouse } from '../../lambda/adapters/warehouse-redshift.ts';
import type { ChangeRecord } from '../../lambda/handlers/warehouse-applier.ts';
import type { ColumnDef, DeleteMode } from '../../lambda/core/shared/control-plane.ts';
import type { ChangeEvent } from '../../lambda/core/shared/event.ts';
import { rsQualified } from '../../lambda/core/warehouse/redshift-sql.ts';
import { warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { FolderArchive } from '../../local/archive.ts';
import { RedshiftStandIn } from '../../local/redshift-standin.ts';
import { MemoryControlPlane } from './memory-control-plane.ts';
import { applyWhileLoading, quietApplier, registerTables } from './registered-applier.ts';
import type { RedshiftFixture } from './redshift-fixture.ts';

export const TABLE = 'public.items';
export const COLUMNS: ColumnDef[] = [
  { name: 'id', type: 'integer', nullable: false },
  { name: 'note', type: 'text', nullable: true },
  { name: 'amount', type: 'numeric(10,2)', nullable: true },
];
const BUCKET = 'staging';
/** How often a shard's records are delivered (`run`) before a test calls it a redelivery loop. */
export const ROUNDS = 6;
const ROLE = 'arn:aws:iam::123456789012:role/cdc-copy';

export type ViewRows = Record<number, { note: string | null; amount: string | null }>;

export interface Sink {
  /** Delivers `events` as one batch to shard `s`; the sequence numbers that failed (the shard delivers them again). */
  deliver(s: number, events: readonly ChangeEvent[]): Promise<string[]>;
  view(): Promise<ViewRows>;
  /** Rows in the handover table. */
  handover(): Promise<number>;
  /** Changelog rows of `id` at `position`. */
  loaded(id: number, position: string): Promise<number>;
  statements: string[];
  memory: MemoryControlPlane;
  /**
   * The loader's session fails the `n`th statement from now (after running it when `ran`), once: in one process the load
   * fails; on AWS the loader function's invocation dies there, and a later one (the schedule's) recovers its claim.
   */
  crashAt?: (n: number, ran: boolean) => { hit: () => boolean };
  /** In one process: the loader's session fails each statement with this probability (after running it, half the time). */
  failRate?: (rate: number, rand: () => number) => void;
  /** Merges the table (in one process; on AWS the loader function merges on its own cadence). */
  merge(): Promise<void>;
}

/**
 * The sinks of fixture `f` with `shards` appliers each. `f` has 2 + `shards` clients: the loader's session, a reader,
 * and one session per shard's submitter (AWS path); with `dynamo` for the AWS path.
 */
export function shardedSinks(f: RedshiftFixture, shards: number) {
  async function common(source: string, mode: DeleteMode): Promise<{ memory: MemoryControlPlane; store: FolderArchive; statements: string[] }> {
    const memory = new MemoryControlPlane();
    await registerTables(memory, source, [TABLE], COLUMNS, mode);
    return { memory, store: new FolderArchive(f.folder), statements: [] };
  }

  function reads(source: string): Pick<Sink, 'view' | 'handover' | 'loaded'> {
    const t = warehouseTable(source, TABLE);
    const reader = f.clients[1]!;
    return {
      view: async () => {
        // Before the first load that made the table (a session failure can undo it), there is no view: nothing shows.
        const exists = await reader.query('SELECT 1 FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2', [
          t.schema,
          t.view,
        ]);
        if (exists.rowCount === 0) return {};
        const rows = (await reader.query(`SELECT id, note, amount FROM ${rsQualified(t.schema, t.view)} ORDER BY id`)).rows as {
          id: string;
          note: string | null;
          amount: string | null;
        }[];
        return Object.fromEntries(rows.map((r) => [Number(r.id), { note: r.note, amount: r.amount }]));
      },
      handover: async () => Number((await reader.query(`SELECT COUNT(*) AS n FROM ${rsQualified(t.schema, t.handover)}`)).rows[0].n),
      loaded: async (id, position) =>
        Number(
          (await reader.query(`SELECT COUNT(*) AS n FROM ${rsQualified(t.schema, t.changelog)} WHERE id = $1 AND _cdc_position = $2`, [id, position])).rows[0]
            .n,
        ),
    };
  }

  /** In one process: every shard's applier over one writer and one loader (its cadence squeezed: it loads while a batch waits). */
  async function inProcess(source: string, mode: DeleteMode): Promise<Sink> {
    const { memory, store, statements } = await common(source, mode);
    const standIn = new RedshiftStandIn({ client: f.clients[0]!, store, bucket: BUCKET });
    let crash: { left: number; ran: boolean; hit: boolean } | null = null;
    let random: { rate: number; rand: () => number } | null = null;
    const session: RedshiftSession = {
      query: async (q) => {
        statements.push(q);
        const now = crash !== null && !crash.hit && --crash.left === 0;
        if (now) crash!.hit = true;
        if (now || (random !== null && q !== 'ROLLBACK' && random.rand() < random.rate)) {
          // Before the statement ran, or after it ran and before its reply arrived.
          if (now ? crash!.ran : random!.rand() < 0.5) await standIn.query(q);
          throw new Error('injected: the loader session failed');
        }
        return standIn.query(q);
      },
    };
    const loader = new RedshiftLoader({ session, store, bucket: BUCKET, prefix: `cdc/${source}/`, roleArn: ROLE, ledgerSchema: `${source}_loads` });
    const writer = new RedshiftWarehouse({ loader });
    const appliers = Array.from({ length: shards }, () => quietApplier(memory, f.pool, writer));
    let seq = 0;
    return {
      ...reads(source),
      statements,
      memory,
      deliver: async (s, events) => {
        const records: ChangeRecord[] = events.map((e) => ({ sequenceNumber: String(++seq), origin: `s/shard-${s}/${seq}`, text: JSON.stringify(e) }));
        return (await applyWhileLoading(appliers[s]!, records, () => loader.flush().catch(() => undefined))).failed;
      },
      crashAt: (n, ran) => {
        const c = { left: n, ran, hit: false };
        crash = c;
        return { hit: () => c.hit };
      },
      failRate: (rate, rand) => void (random = rate > 0 ? { rate, rand } : null),
      merge: async () => void (await loader.merge()),
    };
  }

  /** On AWS: a submitter per shard on its own session, the loader function invoked in-process (one invocation at a time). */
  async function onAws(source: string, mode: DeleteMode): Promise<Sink> {
    const { memory, store, statements } = await common(source, mode);
    const sinkId = `sink_${source}`;
    const requests = new DynamoDbLoadRequests(dynamoDbClient(f.ddb.endpoint), 'control', sinkId);
    const loaderStandIn = new RedshiftStandIn({ client: f.clients[0]!, store, bucket: BUCKET });
    let crash: { left: number; ran: boolean; hit: boolean } | null = null;
    let queue: Promise<unknown> = Promise.resolve();
    /** One invocation of the loader function. One that crashes dies there: nothing more of it runs, its claim waits for recovery. */
    const invoke = (): Promise<unknown> =>
      (queue = queue.then(async () => {
        let dead = false;
        const alive = (): void => {
          if (dead) throw new Error('the invocation is dead');
        };
        const loaderRequests = new Proxy(requests, {
          get(target, prop) {
            const v = Reflect.get(target, prop, target) as unknown;
            if (typeof v !== 'function') return v;
            return (...args: unknown[]) => {
              alive();
              return (v as (...a: unknown[]) => Promise<unknown>).apply(target, args);
            };
          },
        });
        const session: RedshiftSession = {
          query: async (q) => {
            alive();
            statements.push(q);
            if (crash !== null && !crash.hit && --crash.left === 0) {
              crash.hit = dead = true;
              if (crash.ran) await loaderStandIn.query(q);
              throw new Error('injected: the loader function died');
            }
            return loaderStandIn.query(q);
          },
        };
        await new StagedRedshiftLoader({
          session,
          requests: loaderRequests,
          place: { store, bucket: BUCKET },
          prefix: `cdc/${sinkId}/`,
          roleArn: ROLE,
          ledgerSchema: `${sinkId}_loads`,
          cadence: { loadEveryMs: 20, mergeEveryMs: 3_600_000 },
          loaderTimeoutMs: 300,
        })
          .invoke(200)
          // The invocation died: its connection is gone, and so is its transaction.
          .catch(() => f.clients[0]!.query('ROLLBACK'));
      }));
    const appliers = Array.from({ length: shards }, (_, s) => {
      const session = new RedshiftStandIn({ client: f.clients[2 + s]!, store, bucket: BUCKET });
      const submitter = new RedshiftStagingSubmitter({
        session: { query: (q) => (statements.push(q), session.query(q)) },
        requests,
        place: { store, bucket: BUCKET },
        prefix: `cdc/${sinkId}/`,
        invokeLoader: async () => void invoke(),
        waitMs: 20_000,
        pollMs: 20,
      });
      return quietApplier(memory, f.pool, new RedshiftWarehouse({ loader: submitter }), sinkId);
    });
    let seq = 0;
    return {
      ...reads(source),
      statements,
      memory,
      deliver: async (s, events) => {
        const records: ChangeRecord[] = events.map((e) => ({ sequenceNumber: String(++seq), origin: `s/shard-${s}/${seq}`, text: JSON.stringify(e) }));
        // The schedule's invocations: a claim whose invocation died is recovered by a later one.
        let waiting = true;
        const ticker = (async () => {
          while (waiting) {
            await new Promise((r) => setTimeout(r, 100));
            if (waiting && crash?.hit) await invoke();
          }
        })();
        const outcome = await appliers[s]!.applyRecords(records);
        waiting = false;
        await ticker;
        return outcome.failed;
      },
      crashAt: (n, ran) => {
        const c = { left: n, ran, hit: false };
        crash = c;
        return { hit: () => c.hit };
      },
      merge: () => Promise.resolve(),
    };
  }

  /**
   * Delivers each shard's records as Kinesis does, the shards in turn (or all at once with `together`): a batch from
   * the shard's checkpoint, again from the first failed record. Returns the deliveries each shard took; throws after
   * ROUNDS (a redelivery loop).
   */
  async function run(sink: Sink, perShard: readonly (readonly ChangeEvent[])[], together = false): Promise<number[]> {
    const left = perShard.map((s) => [...s]);
    const rounds = perShard.map(() => 0);
    const step = async (s: number): Promise<void> => {
      if (left[s]!.length === 0) return;
      rounds[s]!++;
      const failed = await sink.deliver(s, left[s]!);
      left[s] = failed.length === 0 ? [] : left[s]!.slice(left[s]!.length - failed.length);
    };
    for (let r = 0; r < ROUNDS && left.some((l) => l.length > 0); r++) {
      if (together) await Promise.all(perShard.map((_, s) => step(s)));
      else for (let s = 0; s < perShard.length; s++) await step(s);
    }
    expect(
      left.map((l) => l.length),
      `records still failing after ${ROUNDS} deliveries per shard (a redelivery loop)`,
    ).toEqual(perShard.map(() => 0));
    return rounds;
  }

  return { inProcess, onAws, run };
}
