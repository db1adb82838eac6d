/**
 * What the merge schedule reads to decide a merge is due (docs/warehouse-apply.md, "When a merge is
 * due"): on PostgreSQL `PgWarehouse.deltaStats` reads the distance from the watermark to the highest
 * append order and the first unmerged row's `_cdc_applied_at`, two index steps, instead of counting
 * the delta. Randomized against the count of the delta view, in real PostgreSQL: per run a table
 * gets appends, batches delivered again (their COPY fails on the changelog's key and the fallback
 * inserts nothing or only the new events: the identity's values they took are gaps), full applies
 * (an update without every column: the watermark moves to the end) and merges by this process or
 * another, in random order, soft and hard delete modes. After every step:
 * - the rows are never fewer than the delta holds, and 0 exactly when it holds none;
 * - with no gap between the watermark and the highest append order, they are exactly what it holds
 *   (a merge moves the watermark to the highest append order: gaps above it stay until rows come after them);
 * - `oldest` is the lowest `_cdc_applied_at` of the delta (null when it is empty).
 *
 * Runs and seed: `CDC_PROPERTY_RUNS` (default 12 per mode) and `CDC_PROPERTY_SEED` (default random), printed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import pg from 'pg';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { PgWarehouse } from '../../lambda/adapters/warehouse-pg.ts';
import type { DeleteMode, SchemaVersion } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { qualified, warehouseTable } from '../../lambda/core/warehouse/warehouse-sql.ts';
import { seededRandom } from '../../local/seeded-random.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 12);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const TABLE = 'public.t';
const at = new Date(0).toISOString();

const version = (sourceId: string): SchemaVersion => ({
  source: sourceId,
  table: TABLE,
  version: 1,
  key: ['k'],
  effectivePosition: '0'.repeat(24),
  registeredAt: at,
  columns: [
    { name: 'k', type: 'integer', nullable: false },
    { name: 'v', type: 'text', nullable: true },
  ],
});

describe('deltaStats on PostgreSQL: the append-order distance against the count (embedded PostgreSQL)', () => {
  let cluster: PostgresCluster;
  let pool: pg.Pool;
  let otherPool: pg.Pool;
  let lsn = 0x1000n;
  const next = (): string => makePosition((lsn += 8n), 0);

  beforeAll(async () => {
    cluster = await startPostgres({ fast: true });
    await cluster.createDatabase('wh');
    pool = new pg.Pool({ connectionString: cluster.url('wh'), max: 2 });
    otherPool = new pg.Pool({ connectionString: cluster.url('wh'), max: 1 });
    console.log(`delta-stats: ${RUNS} runs per mode, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
  }, 120_000);

  afterAll(async () => {
    await pool?.end();
    await otherPool?.end();
    await cluster?.stop();
  });

  for (const mode of ['soft', 'hard'] as DeleteMode[]) {
    it(`${mode} delete mode: never fewer rows than the delta holds, exact without gaps, 0 when empty; oldest is the delta's`, async () => {
      for (let run = 0; run < RUNS; run++) {
        const random = seededRandom(SEED + run * 7919 + (mode === 'hard' ? 1 : 0));
        const int = (n: number): number => Math.floor(random() * n);
        const sourceId = `ds_${mode}_${run}`;
        const t = warehouseTable(sourceId, TABLE);
        const target = { source: sourceId, table: TABLE, deleteMode: mode, key: ['k'] };
        const writer = new PgWarehouse(pool);
        const other = new PgWarehouse(otherPool);
        const apply = (events: ChangeEvent[]) =>
          writer.applyTable({ source: sourceId, table: TABLE, deleteMode: mode, schemas: new Map([[1, version(sourceId)]]), events, appliedAt: new Date() });
        const event = (op: ChangeEvent['op'], k: number, missing: string[] = []): ChangeEvent => ({
          v: ENVELOPE_VERSION,
          source: sourceId,
          table: TABLE,
          op,
          key: { k },
          after: op === 'delete' ? null : missing.length > 0 ? { k } : { k, v: `v${int(1000)}` },
          before: null,
          missing,
          position: next(),
          commitTs: at,
          txId: null,
          schemaVersion: 1,
          capture: 'slot',
          synthetic: false,
        });
        const fresh = (): ChangeEvent[] => Array.from({ length: 1 + int(12) }, () => event((['insert', 'update', 'delete'] as const)[int(3)]!, int(8)));

        // Before the table exists: nothing pending, from a writer that knows nothing of it.
        expect(await writer.deltaStats(target)).toEqual({ rows: 0, oldest: null });
        const delivered: ChangeEvent[][] = [];
        // `gaps`: identity values no row holds lie between the watermark and the highest append order;
        // `open`: such values lie above every row (a delivery again that inserted nothing new last), so the next append puts a gap under its rows.
        let gaps = false;
        let open = false;
        const steps: string[] = [];
        for (let step = 0; step < 14; step++) {
          const roll = int(10);
          if (roll < 4 || delivered.length === 0) {
            const batch = fresh();
            delivered.push(batch);
            expect((await apply(batch)).mode).toBe('append');
            if (open) gaps = true;
            open = false;
            steps.push(`append ${batch.length}`);
          } else if (roll < 6) {
            // Delivered again (whole, or with new events after it): the failed COPY's identity values are gaps.
            const again = delivered[int(delivered.length)]!;
            const batch = int(2) === 0 ? again : [...again, ...fresh()];
            expect((await apply(batch)).mode).toBe('append');
            gaps = true;
            open = true;
            steps.push(`again ${batch.length}`);
          } else if (roll < 7) {
            // An update without every column: the full apply, which absorbs everything and moves the watermark to the end.
            expect((await apply([event('update', int(8), ['v'])])).mode).toBe('apply');
            // Its own event is appended after any open gap, and absorbed with it.
            gaps = false;
            open = false;
            steps.push('full apply');
          } else {
            await (int(2) === 0 ? writer : other).merge(target);
            gaps = false;
            steps.push('merge');
          }
          const want = (
            await pool.query<{ n: string; oldest: Date | null }>(`SELECT COUNT(*) AS n, MIN("_cdc_applied_at") AS oldest FROM ${qualified(t.schema, t.delta)}`)
          ).rows[0]!;
          const n = Number(want.n);
          const got = await (int(2) === 0 ? writer : other).deltaStats(target);
          const where = `seed ${SEED}, run ${run}, ${mode}, after ${steps.join(', ')}`;
          expect(got.rows, where).toBeGreaterThanOrEqual(n);
          if (n === 0) expect(got, where).toEqual({ rows: 0, oldest: null });
          if (!gaps) expect(got.rows, where).toBe(n);
          expect(got.oldest, where).toBe(want.oldest === null ? null : new Date(want.oldest).getTime());
        }
      }
    }, 300_000);
  }
});
