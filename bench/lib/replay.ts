/**
 * Replays a generated history on a PostgreSQL database, server side: the history is loaded into
 * an unlogged table `hist` and a PL/pgSQL procedure runs one statement per change against
 * `items`, committing every `txSize` changes. The client is then not the limit, and the source
 * produces exactly the WAL (and logical decoding output) of the history's transactions.
 */
import { copyLine, historyCopyLine, itemsTableSql, type History } from './history.ts';
import { copyLines, exec, withClient } from './pg.ts';

const REPLAY_SQL = `
DROP TABLE IF EXISTS hist;
DROP PROCEDURE IF EXISTS replay(int);
CREATE UNLOGGED TABLE hist (seq int PRIMARY KEY, op "char" NOT NULL, id bigint NOT NULL, customer_id bigint, status text, amount numeric(12,2), note text, updated_at timestamptz);
CREATE PROCEDURE replay(tx_size int) LANGUAGE plpgsql AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT * FROM hist ORDER BY seq LOOP
    IF r.op = 'u' THEN
      UPDATE items SET customer_id = r.customer_id, status = r.status, amount = r.amount, note = r.note, updated_at = r.updated_at WHERE id = r.id;
    ELSIF r.op = 'i' THEN
      INSERT INTO items VALUES (r.id, r.customer_id, r.status, r.amount, r.note, r.updated_at);
    ELSE
      DELETE FROM items WHERE id = r.id;
    END IF;
    IF (r.seq + 1) % tx_size = 0 THEN COMMIT; END IF;
  END LOOP;
  COMMIT;
END $$;`;

/** (Re)creates `items` holding the history's initial rows. */
export async function createItems(url: string, h: History): Promise<void> {
  await exec(url, `DROP TABLE IF EXISTS items; ${itemsTableSql('items')}`);
  await withClient(url, (c) => copyLines(c, 'items', h.initialRows.map(copyLine)));
  await exec(url, 'VACUUM ANALYZE items');
}

/** Loads the history into `hist` and (re)creates the `replay` procedure. */
export async function prepareReplay(url: string, h: History): Promise<void> {
  await exec(url, REPLAY_SQL);
  await withClient(url, (c) => copyLines(c, 'hist', h.changes.map(historyCopyLine)));
  await exec(url, 'ANALYZE hist');
}

/** Runs the history against `items` (must hold the initial rows); returns the seconds it took. */
export async function replay(url: string, h: History): Promise<number> {
  const t0 = performance.now();
  await exec(url, `CALL replay(${h.options.txSize})`);
  return (performance.now() - t0) / 1000;
}
