/**
 * TRUNCATE end to end on the slot path: a real source (embedded PostgreSQL) read by the built-in
 * slot capture, the normalizer, and the warehouse applier into a second embedded database. The
 * capture's publisher and the change log are in-process hand-offs (the Kinesis hops are tested
 * elsewhere); the control plane is the in-memory double of the port (see `slot-pipeline.ts`).
 *
 * A captured TRUNCATE (plain, CASCADE through a foreign key, and of several tables at once)
 * empties the table in the warehouse at its position, in both delete modes, and a later insert
 * applies. A late, older event delivered after the truncate (a replay, or a record that raced
 * through another shard) never resurrects a truncated row.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import type { TableConfig } from '../../lambda/core/tables/table-config.ts';
import { slotPipeline } from './slot-pipeline.ts';

let cluster: PostgresCluster;

beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  cluster = await startPostgres({ fast: true });
}, 120_000);

afterAll(async () => {
  await cluster?.stop();
});

const pipeline = (schema: string, tables: TableConfig[]) => slotPipeline(cluster, schema, tables, 'trunc');

describe('TRUNCATE on the slot path, into the warehouse', () => {
  for (const mode of ['soft', 'hard'] as const) {
    it(`${mode} delete: a truncate empties the table at its position; a later insert applies; an older late event is dropped`, async () => {
      const p = await pipeline('CREATE TABLE logs (id int PRIMARY KEY, msg text); CREATE TABLE other (id int PRIMARY KEY, v text);', [
        { table: 'public.logs', deleteMode: mode, mask: [], exclude: [] },
        { table: 'public.other', deleteMode: mode, mask: [], exclude: [] },
      ]);
      try {
        await p.src.query("INSERT INTO logs SELECT g, 'm' || g FROM generate_series(1, 100) g; INSERT INTO other VALUES (1, 'kept')");
        const loaded = await p.drain();
        await p.apply(loaded);
        expect(await p.rows(`SELECT count(*)::int AS n FROM ${p.id}_public.logs`)).toEqual([{ n: 100 }]);

        await p.src.query("TRUNCATE logs; INSERT INTO logs VALUES (7, 'after')");
        const after = await p.drain();
        expect(after.map((e) => e.op)).toEqual(['truncate', 'insert']);
        await p.apply(after);
        expect(await p.rows(`SELECT id::int AS id, msg FROM ${p.id}_public.logs ORDER BY id`)).toEqual([{ id: 7, msg: 'after' }]);
        // The other table is untouched.
        expect(await p.rows(`SELECT id::int AS id, v FROM ${p.id}_public.other`)).toEqual([{ id: 1, v: 'kept' }]);
        const mirror = await p.rows(`SELECT count(*)::int AS n, count(*) FILTER (WHERE _cdc_deleted)::int AS dead FROM ${p.id}_public._cdc_mirror_logs`);
        expect(mirror).toEqual(mode === 'soft' ? [{ n: 100, dead: 99 }] : [{ n: 1, dead: 0 }]);
        if (mode === 'soft') {
          // Tombstones at the truncate's position.
          const t = after[0]!.position;
          expect(await p.rows(`SELECT DISTINCT _cdc_position AS p FROM ${p.id}_public._cdc_mirror_logs WHERE _cdc_deleted`)).toEqual([{ p: t }]);
        }

        // Late, older events (the first load delivered again, in two batches, and the truncate again): nothing comes back.
        await p.apply(loaded.slice(0, 50));
        await p.apply([...loaded.slice(50), after[0]!]);
        expect(await p.rows(`SELECT id::int AS id, msg FROM ${p.id}_public.logs ORDER BY id`)).toEqual([{ id: 7, msg: 'after' }]);
        expect(await p.rows(`SELECT _cdc_position AS p FROM ${p.id}_public._cdc_truncations_logs`)).toEqual([{ p: after[0]!.position }]);
      } finally {
        await p.close();
      }
    }, 120_000);
  }

  it('TRUNCATE … CASCADE and a multi-table TRUNCATE empty every captured table they reach; a truncate and rows in one batch apply in position order', async () => {
    const p = await pipeline(
      'CREATE TABLE parents (id int PRIMARY KEY); CREATE TABLE children (id int PRIMARY KEY, parent int REFERENCES parents(id)); CREATE TABLE a (id int PRIMARY KEY); CREATE TABLE b (id int PRIMARY KEY);',
      ['parents', 'children', 'a', 'b'].map((t) => ({ table: `public.${t}`, deleteMode: 'soft' as const, mask: [], exclude: [] })),
    );
    try {
      await p.src.query(
        'INSERT INTO parents SELECT generate_series(1, 5); INSERT INTO children SELECT g, g FROM generate_series(1, 5) g; INSERT INTO a SELECT generate_series(1, 3); INSERT INTO b SELECT generate_series(1, 3)',
      );
      await p.src.query('TRUNCATE parents CASCADE');
      await p.src.query('INSERT INTO a VALUES (10); TRUNCATE a, b; INSERT INTO b VALUES (20)');
      // Everything in one batch: loads, truncates and the rows after them.
      const events = await p.drain();
      expect(
        events
          .filter((e) => e.op === 'truncate')
          .map((e) => e.table)
          .sort(),
      ).toEqual(['public.a', 'public.b', 'public.children', 'public.parents']);
      await p.apply(events);
      const count = async (t: string) => (await p.rows(`SELECT count(*)::int AS n FROM ${p.id}_public.${t}`))[0].n as number;
      expect(await count('parents')).toBe(0);
      expect(await count('children')).toBe(0);
      expect(await count('a')).toBe(0);
      expect(await p.rows(`SELECT id::int AS id FROM ${p.id}_public.b`)).toEqual([{ id: 20 }]);
    } finally {
      await p.close();
    }
  }, 120_000);
});
