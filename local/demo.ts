/**
 * The demo of `cdc local --demo`: a small schema that exercises what the platform promises, and
 * a steady workload against it.
 *
 * - `public.customers`: `email` is masked, `ssn` is excluded (neither ever enters the log in clear).
 * - `public.orders`: a foreign key to customers (`ON UPDATE CASCADE ON DELETE CASCADE`, so the
 *   source itself produces cascaded deletes and key updates).
 * - `public.documents`: `body` holds more than 2 KB of text stored out of line (TOAST), and most
 *   updates leave it unchanged, so the capture reports it as not delivered (absent is not null).
 *
 * `cdc local --demo` starts from a schema that already holds rows (`DEMO_SEED_ROWS`): the snapshot
 * copies them (with progress and ETA in the live status) while the stream and the workload run.
 *
 * The workload runs short transactions mixing inserts, updates, deletes and primary-key changes
 * at a target rate. It is seeded, and on a restart it reloads the ids it can touch from the tables.
 */
import pg from 'pg';
import type { TableConfig } from '../lambda/core/tables/table-config.ts';
import { seededRandom } from './seeded-random.ts';

/** Captured-table settings of the demo. */
export const DEMO_TABLES: TableConfig[] = [
  { table: 'public.customers', deleteMode: 'soft', mask: ['email'], exclude: ['ssn'] },
  { table: 'public.orders', deleteMode: 'soft', mask: [], exclude: [] },
  { table: 'public.documents', deleteMode: 'soft', mask: [], exclude: [] },
];

/** DDL of the demo schema (idempotent). */
export const DEMO_SCHEMA_SQL = `
CREATE TABLE IF NOT EXISTS public.customers (
  id          bigint PRIMARY KEY,
  name        text NOT NULL,
  email       text NOT NULL,
  ssn         text,
  tier        text NOT NULL DEFAULT 'standard',
  updated_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS public.orders (
  id           bigint PRIMARY KEY,
  customer_id  bigint NOT NULL REFERENCES public.customers (id) ON UPDATE CASCADE ON DELETE CASCADE,
  amount       numeric(12, 2) NOT NULL,
  status       text NOT NULL,
  placed_at    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS public.documents (
  id        integer PRIMARY KEY,
  title     text NOT NULL,
  body      text NOT NULL,
  revision  integer NOT NULL DEFAULT 1
);
ALTER TABLE public.documents ALTER COLUMN body SET STORAGE EXTERNAL;
`;

/** Rows the demo schema starts with (so `npm start` shows a snapshot, docs/snapshot.md). */
export const DEMO_SEED_ROWS = { customers: 5_000, orders: 10_000, documents: 100 };

/**
 * Creates the demo schema. With `seed` (the default for `cdc local --demo`), an empty schema is
 * first filled with rows that exist before the capture starts, which the snapshot then copies
 * while the workload runs; without it the tables start empty.
 */
export async function createDemoSchema(sourceUrl: string, options: { seed?: boolean } = {}): Promise<void> {
  const client = new pg.Client({ connectionString: sourceUrl });
  client.on('error', () => undefined); // a connection the server ends fails the next query, which throws
  await client.connect();
  try {
    await client.query(DEMO_SCHEMA_SQL);
    if (options.seed) {
      const n = DEMO_SEED_ROWS;
      const empty = (await client.query('SELECT NOT EXISTS (SELECT 1 FROM public.customers) AS e')).rows[0].e as boolean;
      if (empty) {
        await client.query(`
          INSERT INTO public.customers (id, name, email, ssn, tier)
            SELECT g, 'Seeded Customer ' || g, 'seeded.' || g || '@example.com',
                   lpad((100 + g % 899)::text, 3, '0') || '-' || lpad((10 + g % 89)::text, 2, '0') || '-' || lpad((1000 + g % 8999)::text, 4, '0'),
                   CASE WHEN g % 5 = 0 THEN 'gold' ELSE 'standard' END
              FROM generate_series(1, ${n.customers}) g;
          INSERT INTO public.orders (id, customer_id, amount, status)
            SELECT g, 1 + g % ${n.customers}, (g % 50000) / 100.0, (ARRAY['placed','paid','packed','shipped','delivered'])[1 + g % 5]
              FROM generate_series(1, ${n.orders}) g;
          INSERT INTO public.documents (id, title, body)
            SELECT g, 'Seeded document ' || g, (SELECT string_agg(md5(g::text || i::text), ' ') FROM generate_series(1, 80) i)
              FROM generate_series(1, ${n.documents}) g;
          ANALYZE public.customers; ANALYZE public.orders; ANALYZE public.documents;`);
      }
    }
  } finally {
    await client.end();
  }
}

const FIRST = ['Ada', 'Grace', 'Alan', 'Edsger', 'Barbara', 'Donald', 'Frances', 'Ken', 'Leslie', 'Margaret', 'Niklaus', 'Radia'];
const LAST = ['Lovelace', 'Hopper', 'Turing', 'Dijkstra', 'Liskov', 'Knuth', 'Allen', 'Thompson', 'Lamport', 'Hamilton', 'Wirth', 'Perlman'];
const STATUSES = ['placed', 'paid', 'packed', 'shipped', 'delivered', 'returned'];
const WORDS = [
  'ledger',
  'replica',
  'commit',
  'offset',
  'mirror',
  'tombstone',
  'snapshot',
  'heartbeat',
  'position',
  'watermark',
  'shard',
  'archive',
  'schema',
  'column',
  'slot',
  'change',
];

/** Text of about `bytes` characters that does not compress below the TOAST threshold. */
export function documentBody(rand: () => number, bytes = 2600): string {
  const parts: string[] = [];
  let n = 0;
  while (n < bytes) {
    const w = `${WORDS[Math.floor(rand() * WORDS.length)]}-${Math.floor(rand() * 1e9).toString(36)}`;
    parts.push(w);
    n += w.length + 1;
  }
  return parts.join(' ');
}

export interface WorkloadStats {
  transactions: number;
  inserts: number;
  updates: number;
  deletes: number;
  keyChanges: number;
  errors: number;
  lastError: string | null;
}

export interface WorkloadOptions {
  sourceUrl: string;
  /** Transactions per second. @default 20 */
  rate?: number;
  seed?: number;
  onError?: (err: unknown) => void;
}

/** A running workload: `stop()` lets the transaction in flight finish. */
export interface Workload {
  readonly stats: WorkloadStats;
  stop(): Promise<void>;
}

interface Ids {
  customers: number[];
  orders: number[];
  documents: number[];
  next: { customers: number; orders: number; documents: number };
}

async function loadIds(client: pg.Client): Promise<Ids> {
  const ids = async (table: string): Promise<number[]> => (await client.query(`SELECT id FROM public.${table} ORDER BY id`)).rows.map((r) => Number(r.id));
  const customers = await ids('customers');
  const orders = await ids('orders');
  const documents = await ids('documents');
  const next = (xs: number[]): number => (xs.length ? Math.max(...xs) : 0) + 1;
  return { customers, orders, documents, next: { customers: next(customers), orders: next(orders), documents: next(documents) } };
}

function pick<T>(rand: () => number, xs: readonly T[]): T | undefined {
  return xs.length === 0 ? undefined : xs[Math.floor(rand() * xs.length)];
}

function removeId(xs: number[], id: number): void {
  const i = xs.indexOf(id);
  if (i >= 0) xs.splice(i, 1);
}

/** Starts the demo workload against the source. */
export async function startWorkload(options: WorkloadOptions): Promise<Workload> {
  const rate = options.rate ?? 20;
  const rand = seededRandom(options.seed ?? Date.now());
  const client = new pg.Client({ connectionString: options.sourceUrl, application_name: 'cdc-local-workload' });
  // A connection the server ends (a restart, 57P01 at a shutdown) fails the next step, which is counted and retried; never the process.
  client.on('error', (err) => options.onError?.(err));
  await client.connect();
  const ids = await loadIds(client);
  const stats: WorkloadStats = { transactions: 0, inserts: 0, updates: 0, deletes: 0, keyChanges: 0, errors: 0, lastError: null };
  let stopping = false;

  const newCustomer = async (): Promise<number> => {
    const id = ids.next.customers++;
    const first = pick(rand, FIRST)!;
    const last = pick(rand, LAST)!;
    const ssn = `${100 + Math.floor(rand() * 899)}-${10 + Math.floor(rand() * 89)}-${1000 + Math.floor(rand() * 8999)}`;
    await client.query('INSERT INTO public.customers (id, name, email, ssn) VALUES ($1, $2, $3, $4)', [
      id,
      `${first} ${last}`,
      `${first}.${last}.${id}@example.com`.toLowerCase(),
      ssn,
    ]);
    ids.customers.push(id);
    stats.inserts++;
    return id;
  };

  const step = async (): Promise<void> => {
    const r = rand();
    await client.query('BEGIN');
    try {
      if (ids.customers.length < 5 || r < 0.12) {
        const c = await newCustomer();
        const n = 1 + Math.floor(rand() * 3);
        for (let i = 0; i < n; i++) {
          const id = ids.next.orders++;
          await client.query('INSERT INTO public.orders (id, customer_id, amount, status) VALUES ($1, $2, $3, $4)', [
            id,
            c,
            (rand() * 500).toFixed(2),
            'placed',
          ]);
          ids.orders.push(id);
          stats.inserts++;
        }
      } else if (r < 0.3) {
        const c = pick(rand, ids.customers)!;
        const id = ids.next.orders++;
        await client.query('INSERT INTO public.orders (id, customer_id, amount, status) VALUES ($1, $2, $3, $4)', [id, c, (rand() * 500).toFixed(2), 'placed']);
        ids.orders.push(id);
        stats.inserts++;
      } else if (r < 0.5) {
        const o = pick(rand, ids.orders);
        if (o !== undefined) {
          await client.query('UPDATE public.orders SET status = $2, amount = amount + $3 WHERE id = $1', [o, pick(rand, STATUSES)!, (rand() * 10).toFixed(2)]);
          stats.updates++;
        }
      } else if (r < 0.58) {
        const c = pick(rand, ids.customers)!;
        await client.query('UPDATE public.customers SET email = $2, tier = $3, updated_at = now() WHERE id = $1', [
          c,
          `customer.${c}.${Math.floor(rand() * 1e6)}@example.org`,
          rand() < 0.5 ? 'gold' : 'standard',
        ]);
        stats.updates++;
      } else if (r < 0.66) {
        if (ids.documents.length < 20 || rand() < 0.3) {
          const id = ids.next.documents++;
          await client.query('INSERT INTO public.documents (id, title, body) VALUES ($1, $2, $3)', [id, `Document ${id}`, documentBody(rand)]);
          ids.documents.push(id);
          stats.inserts++;
        } else {
          const d = pick(rand, ids.documents)!;
          await client.query('UPDATE public.documents SET body = $2, revision = revision + 1 WHERE id = $1', [d, documentBody(rand)]);
          stats.updates++;
        }
      } else if (r < 0.8) {
        // Most document updates leave the large body untouched: it is not delivered (unchanged TOAST).
        const d = pick(rand, ids.documents);
        if (d !== undefined) {
          await client.query('UPDATE public.documents SET title = $2, revision = revision + 1 WHERE id = $1', [
            d,
            `Document ${d} (rev ${Math.floor(rand() * 1000)})`,
          ]);
          stats.updates++;
        }
      } else if (r < 0.88) {
        const o = pick(rand, ids.orders);
        if (o !== undefined) {
          await client.query('DELETE FROM public.orders WHERE id = $1', [o]);
          removeId(ids.orders, o);
          stats.deletes++;
        }
      } else if (r < 0.92) {
        // Deleting a customer cascades to its orders in the source.
        const c = pick(rand, ids.customers);
        if (c !== undefined && ids.customers.length > 10) {
          const gone = await client.query('DELETE FROM public.orders WHERE customer_id = $1 RETURNING id', [c]);
          for (const row of gone.rows) removeId(ids.orders, Number(row.id));
          await client.query('DELETE FROM public.customers WHERE id = $1', [c]);
          removeId(ids.customers, c);
          stats.deletes += 1 + gone.rowCount!;
        }
      } else if (r < 0.97) {
        // Primary-key change of an order.
        const o = pick(rand, ids.orders);
        if (o !== undefined) {
          const id = ids.next.orders++;
          await client.query('UPDATE public.orders SET id = $2 WHERE id = $1', [o, id]);
          removeId(ids.orders, o);
          ids.orders.push(id);
          stats.keyChanges++;
        }
      } else {
        // Primary-key change of a customer: the foreign key cascades the new id to its orders.
        const c = pick(rand, ids.customers);
        if (c !== undefined) {
          const id = ids.next.customers++;
          await client.query('UPDATE public.customers SET id = $2 WHERE id = $1', [c, id]);
          removeId(ids.customers, c);
          ids.customers.push(id);
          stats.keyChanges++;
        }
      }
      await client.query('COMMIT');
      stats.transactions++;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      // The in-memory ids may be off after a failed transaction: reload them.
      Object.assign(ids, await loadIds(client));
      throw err;
    }
  };

  const loop = (async () => {
    const interval = 1000 / rate;
    let next = Date.now();
    while (!stopping) {
      try {
        await step();
      } catch (err) {
        stats.errors++;
        stats.lastError = err instanceof Error ? err.message : String(err);
        options.onError?.(err);
        await new Promise((r) => setTimeout(r, 200));
      }
      next += interval;
      const wait = next - Date.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      else if (wait < -1000) next = Date.now();
    }
  })();

  return {
    stats,
    async stop(): Promise<void> {
      stopping = true;
      await loop;
      await client.end().catch(() => undefined);
    },
  };
}
