/**
 * Primary-key changes crossing shards on Redshift, random histories (docs/primary-key-changes.md, "On Redshift"):
 * appliers standing for 2 or 3 shards of one sink, in one process and on the AWS path (test/helpers/redshift-shards.ts).
 * A history over a few keys (inserts, full and partial updates without the note, deletes, primary-key changes whose
 * insert half lacks the note) is cut by key into shards; a shard carries each key's events in position order, and in
 * half the runs interleaves its keys in any order (two sources on one change log, a partial PutRecords re-send), so
 * an insert half can wait for a delete half standing behind another shard's waiting insert half. Batches of random
 * size go to random shards, in turn or at once; a batch is sometimes delivered again whole (a lost checkpoint); in one
 * process the loader's session fails at random statements. Seed and runs printed (`CDC_PROPERTY_SEED`,
 * `CDC_PROPERTY_RUNS`).
 *
 * After every delivery: no view row has a NULL note (no history writes one: a NULL would be a missing column
 * written as NULL) and every shown note is one its key had. At the end: every shard is through within a bounded
 * number of deliveries (no redelivery loop), the view equals the model row by row, merged too, the handover table
 * is empty, and nothing was dead-lettered.
 */
import { describe, expect, it } from 'vitest';
import type { DeleteMode } from '../../lambda/core/shared/control-plane.ts';
import { ENVELOPE_VERSION, type ChangeEvent, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';
import { seededRandom } from '../../local/seeded-random.ts';
import { useRedshiftFixture } from '../helpers/redshift-fixture.ts';
import { shardedSinks, TABLE, type Sink, type ViewRows } from '../helpers/redshift-shards.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 8);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const SHARDS = 3;
/** Deliveries per run before the test calls it a redelivery loop (a run has at most about 60 records). */
const MAX_DELIVERIES = 400;

interface History {
  /** Per shard, the records in the order it carries them. */
  shards: ChangeEvent[][];
  /** The view at the end, by key. */
  model: ViewRows;
  /** Every note each key ever had. */
  notes: Map<number, Set<string>>;
  keyChanges: number;
}

function history(rand: () => number, source: string, shards: number, interleave: boolean): History {
  const cur = new Map<number, { note: string; amount: string } | null>();
  const notes = new Map<number, Set<string>>();
  const events: ChangeEvent[] = [];
  let keyChanges = 0;
  const event = (i: number, op: ChangeEvent['op'], id: number, after: Row | null, o: Partial<ChangeEvent> = {}): ChangeEvent => ({
    v: ENVELOPE_VERSION,
    source,
    table: TABLE,
    op,
    key: { id },
    after,
    before: null,
    missing: [],
    position: makePosition(BigInt(i) * 0x100n, 0),
    commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, i)).toISOString(),
    txId: String(i),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
    ...o,
  });
  const set = (id: number, row: { note: string; amount: string } | null): void => {
    cur.set(id, row);
    if (row !== null) notes.set(id, (notes.get(id) ?? new Set()).add(row.note));
  };
  for (let i = 1; i <= 40; i++) {
    const id = 1 + Math.floor(rand() * 6);
    const row = cur.get(id) ?? null;
    const amount = (Math.floor(rand() * 100000) / 100).toFixed(2);
    const r = rand();
    const free = [1, 2, 3, 4, 5, 6, 7, 8].filter((k) => (cur.get(k) ?? null) === null);
    if (row !== null && r < 0.3 && free.length > 0) {
      const to = free[Math.floor(rand() * free.length)]!;
      events.push(event(i, 'delete', id, null, { before: { id }, handover: ['note'] }));
      events.push(event(i, 'insert', to, { id: to, amount }, { before: { id }, missing: ['note'] }));
      set(id, null);
      set(to, { note: row.note, amount });
      keyChanges++;
    } else if (row !== null && r < 0.4) {
      events.push(event(i, 'delete', id, null));
      set(id, null);
    } else if (row !== null && r < 0.7) {
      events.push(event(i, 'update', id, { id, amount }, { missing: ['note'] }));
      set(id, { note: row.note, amount });
    } else {
      // Notes are never NULL here: a NULL in the view is a missing column written as NULL.
      const note = `n${i}:${'x'.repeat(Math.floor(rand() * 3) * 10_000)}`;
      events.push(event(i, row === null ? 'insert' : 'update', id, { id, note, amount }));
      set(id, { note, amount });
    }
  }
  // By key: a key's events stay in position order on its shard (source + table + key is the partition key).
  const byKey = new Map<number, ChangeEvent[]>();
  for (const e of events) byKey.set(Number(e.key.id), [...(byKey.get(Number(e.key.id)) ?? []), e]);
  const out: ChangeEvent[][] = Array.from({ length: shards }, () => []);
  const shardOf = (k: number): number => (k * 7 + 3) % shards;
  if (!interleave) for (const e of events) out[shardOf(Number(e.key.id))]!.push(e);
  else {
    const queues = [...byKey.entries()].map(([k, es]) => ({ k, es: [...es] }));
    while (queues.some((q) => q.es.length > 0)) {
      const open = queues.filter((q) => q.es.length > 0);
      const q = open[Math.floor(rand() * open.length)]!;
      out[shardOf(q.k)]!.push(q.es.shift()!);
    }
  }
  const model: ViewRows = {};
  for (const [k, v] of [...cur].sort((a, b) => a[0] - b[0])) if (v !== null) model[k] = { note: v.note, amount: v.amount };
  return { shards: out, model, notes, keyChanges };
}

describe('primary-key changes crossing shards on Redshift: random histories (stand-in, DynamoDB Local)', () => {
  const f = useRedshiftFixture({ database: 'rshp', clients: 2 + SHARDS, dynamo: true, utc: true });
  const { inProcess, onAws } = shardedSinks(f, SHARDS);

  it(`ends equal to the model with nothing held, never shows a missing column as NULL, never loops (${RUNS} runs, seed ${SEED})`, async () => {
    console.log(`redshift-handover-property: ${RUNS} runs, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
    const rand = seededRandom(SEED);
    const totals = { keyChanges: 0, deliveries: 0, failed: 0, redeliveries: 0, held: 0, completed: 0, interleaved: 0 };
    for (let run = 0; run < RUNS; run++) {
      const source = `hp${run}`;
      const mode: DeleteMode = rand() < 0.5 ? 'hard' : 'soft';
      // One run in four on the AWS path (each of its loads is a load request and an invocation: slower).
      const aws = run % 4 === 3;
      const shards = rand() < 0.5 ? 2 : 3;
      const interleave = rand() < 0.5;
      const h = history(rand, source, shards, interleave);
      totals.keyChanges += h.keyChanges;
      if (interleave) totals.interleaved++;
      const sink: Sink = aws ? await onAws(source, mode) : await inProcess(source, mode);
      const where = `run ${run} (${aws ? 'AWS' : 'one process'}, ${mode}, ${shards} shards${interleave ? ', interleaved' : ''})`;
      const checkpoint = h.shards.map(() => 0);
      let deliveries = 0;
      while (h.shards.some((s, i) => checkpoint[i]! < s.length)) {
        expect(deliveries, `${where}: still delivering after ${MAX_DELIVERIES} batches (a redelivery loop)`).toBeLessThan(MAX_DELIVERIES);
        const open = h.shards.map((_, i) => i).filter((i) => checkpoint[i]! < h.shards[i]!.length);
        const chosen = rand() < 0.4 ? open : [open[Math.floor(rand() * open.length)]!];
        sink.failRate?.(rand() < 0.3 ? 0.05 : 0, rand);
        await Promise.all(
          chosen.map(async (s) => {
            const batch = h.shards[s]!.slice(checkpoint[s], checkpoint[s]! + 1 + Math.floor(rand() * 8));
            deliveries++;
            const failed = await sink.deliver(s, batch);
            totals.failed += failed.length;
            // From the first failed record; now and then the whole batch again (a crash before the checkpoint was written).
            if (rand() < 0.15) totals.redeliveries++;
            else checkpoint[s]! += batch.length - failed.length;
          }),
        );
        sink.failRate?.(0, rand);
        const seen = await sink.view();
        for (const [k, v] of Object.entries(seen)) {
          expect(v.note, `${where}: key ${k} shows a NULL note`).not.toBeNull();
          expect(h.notes.get(Number(k))?.has(v.note!), `${where}: key ${k} shows a note it never had`).toBe(true);
        }
        if (rand() < 0.1) await sink.merge().catch(() => undefined);
      }
      totals.deliveries += deliveries;
      totals.held += sink.statements.filter((q) => q.startsWith('COPY') && q.includes('_cdc_handover_')).length;
      totals.completed += sink.statements.filter((q) => q.startsWith('INSERT INTO') && q.includes('_cdc_handover_')).length;
      expect(await sink.view(), `${where}: the view`).toEqual(h.model);
      await sink.merge();
      expect(await sink.view(), `${where}: merged`).toEqual(h.model);
      expect(await sink.handover(), `${where}: handover table`).toBe(0);
      expect(await sink.memory.listDeadLetters(), `${where}: dead letters`).toEqual([]);
    }
    console.log(
      `redshift-handover-property: ${totals.keyChanges} key changes, ${totals.interleaved} interleaved runs, ${totals.deliveries} deliveries, ` +
        `${totals.failed} failed records, ${totals.redeliveries} whole batches again, ${totals.held} loads holding events, ${totals.completed} completions sent`,
    );
    expect(totals.keyChanges).toBeGreaterThan(0);
    expect(totals.held).toBeGreaterThan(0);
  }, 600_000);
});
