/**
 * A primary-key change that leaves a TOAST value unchanged, end to end on the slot path (real
 * source, slot capture, normalizer, warehouse appliers on embedded PostgreSQL). test_decoding
 * does not deliver the unchanged value under the default replica identity, so the new key's
 * insert lacks it; the old key's delete and the new key's insert have different partition keys,
 * so two shards' appliers apply them in either order, or at the same time. In every order the
 * new row ends with the value, and it is never visible with a NULL in its place.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { slotPipeline } from './slot-pipeline.ts';

let cluster: PostgresCluster;

beforeAll(async () => {
  process.env.POWERTOOLS_METRICS_DISABLED = 'true';
  cluster = await startPostgres({ fast: true });
}, 120_000);

afterAll(async () => {
  await cluster?.stop();
});

const BODY = 'lorem ipsum '.repeat(2000); // 24 KB: stored out of line (TOAST)
const SCHEMA = 'CREATE TABLE docs (id int PRIMARY KEY, title text, body text); ALTER TABLE docs ALTER COLUMN body SET STORAGE EXTERNAL;';

describe('primary-key change with an unchanged TOAST value across shards', () => {
  for (const mode of ['soft', 'hard'] as const) {
    for (const order of ['insert first', 'delete first', 'at the same time', 'insert first, its update by another container'] as const) {
      it(`${mode} delete, ${order}: the new row gets the value, never a NULL`, async () => {
        const p = await slotPipeline(cluster, SCHEMA, [{ table: 'public.docs', deleteMode: mode, mask: [], exclude: [] }], 'pkt');
        try {
          await p.src.query('INSERT INTO docs VALUES (1, $1, $2), (5, $3, $2)', ['one', BODY, 'five']);
          await p.apply(await p.drain());
          await p.src.query("UPDATE docs SET id = 2, title = 'two' WHERE id = 1");
          await p.src.query("UPDATE docs SET title = 'two again' WHERE id = 2");
          const events = await p.drain();
          const ins = events.find((e) => e.op === 'insert')!;
          const del = events.find((e) => e.op === 'delete')!;
          const upd = events.find((e) => e.op === 'update')!;
          expect(ins.missing).toEqual(['body']);
          expect(del.handover).toEqual(['body']);
          // Shard of the new key: its insert, then its update. Shard of the old key: the delete.
          const view = () => p.rows(`SELECT id::int AS id, title, body IS NULL AS null_body, length(body) AS len FROM ${p.id}_public.docs ORDER BY id`);
          if (order === 'insert first') {
            await p.apply([ins], 0);
            await p.apply([upd], 0);
            // Held until the old key's value is known: not visible, and certainly not with a NULL.
            expect(await view()).toEqual([
              { id: 1, title: 'one', null_body: false, len: BODY.length },
              { id: 5, title: 'five', null_body: false, len: BODY.length },
            ]);
            await p.apply([del], 1);
          } else if (order === 'delete first') {
            await p.apply([del], 1);
            // The old key is gone; its value is kept for the new key's insert.
            expect((await view()).map((r) => r.id)).toEqual([5]);
            await p.apply([ins, upd], 0);
          } else if (order === 'at the same time') {
            await Promise.all([p.apply([ins], 0).then(() => p.apply([upd], 0)), p.apply([del], 1)]);
          } else {
            // The insert is held by one applier process; the key's next batch goes to another that
            // cached the table's shape before the handover table existed (Lambda may switch containers).
            await p.apply([ins], 1);
            await p.apply([upd], 0);
            expect((await view()).map((r) => r.id)).toEqual([1, 5]);
            await p.apply([del], 1);
          }
          expect(await view()).toEqual([
            { id: 2, title: 'two again', null_body: false, len: BODY.length },
            { id: 5, title: 'five', null_body: false, len: BODY.length },
          ]);
          expect(await p.rows(`SELECT count(*)::int AS n FROM ${p.id}_public._cdc_handover_docs`)).toEqual([{ n: 0 }]);
          // A replay of everything changes nothing.
          await p.apply([del, ins, upd], 0);
          expect(await view()).toEqual([
            { id: 2, title: 'two again', null_body: false, len: BODY.length },
            { id: 5, title: 'five', null_body: false, len: BODY.length },
          ]);
        } finally {
          await p.close();
        }
      }, 120_000);
    }
  }
});
