/**
 * Property: whatever the delivery (duplicates, reordering, replays, random batch boundaries, a
 * batch delivered again after its bulk response, i.e. a crash before the ack, and bulks that fail
 * part-way with the failed suffix delivered again), the search index ends equal to the source's
 * final state.
 *
 * Each history (test/helpers/histories.ts: inserts, updates with and without the TOAST column,
 * deletes, primary-key changes, on one or two tables) is simulated on a model source and
 * delivered in batches through the real search applier (`createSearchApplier(...).applyRecords`,
 * what the Lambda handler calls) into the search stand-in over HTTP, then checked:
 * - the readers' alias holds exactly the source's live rows (every column; absent = null) and
 *   each document's `cdc_meta.position` is its key's last position;
 * - soft mode: every gone key has a tombstone document at its delete's position, hidden by the
 *   alias filter; hard mode: no document for a gone key, and a tombstone in the side index at
 *   its last position.
 * Histories include truncates and primary-key changes whose insert lacks the TOAST column (the
 * applier completes it from the old key's document, the batch or a handover donor, or reports it
 * failed until it can): a failed record stalls its partition key, as a shard waits on AWS, and is
 * delivered again after later deliveries (docs/search.md, "Primary-key changes").
 * The control plane is the in-memory double. Runs and seed: `CDC_PROPERTY_RUNS` (default 1,000,
 * split over the two delete modes) and `CDC_PROPERTY_SEED` (default random); both are printed.
 * `CDC_PROPERTY_NO_SHRINK=1` reports the first counterexample without shrinking it (faster).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { createSearchApplier, type SearchApplier } from '../../lambda/handlers/search-applier.ts';
import type { ChangeRecord } from '../../lambda/handlers/warehouse-applier.ts';
import { OpenSearchIndex, searchClient } from '../../lambda/adapters/search-opensearch.ts';
import type { ChangeEvent, JsonValue, Row } from '../../lambda/core/shared/event.ts';
import type { DeleteMode } from '../../lambda/core/shared/control-plane.ts';
import { documentId, META_FIELD, searchNames } from '../../lambda/core/search/search-plan.ts';
import { SearchStandIn } from '../../local/search-standin.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';
import { deliveries, historyArb, MODEL_TABLES, simulate, type ModelTable } from '../helpers/histories.ts';

const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 1000);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);
const SINK = 'search';
const TIMEOUT_MS = 30 * 60_000;

const norm = (v: JsonValue | undefined): JsonValue => (v === undefined ? null : v);

describe('search applier: random histories into the search stand-in', () => {
  const standin = new SearchStandIn();
  let index: OpenSearchIndex;
  const started = Date.now();
  let histories = 0;

  beforeAll(async () => {
    process.env.POWERTOOLS_METRICS_DISABLED = 'true';
    const url = await standin.start();
    index = new OpenSearchIndex(searchClient({ node: url }));
    console.log(`search property: ${RUNS} histories, seed ${SEED} (replay with CDC_PROPERTY_SEED=${SEED} CDC_PROPERTY_RUNS=${RUNS})`);
  });

  afterAll(async () => {
    index?.client.close();
    await standin.stop();
    const secs = (Date.now() - started) / 1000;
    console.log(`search property: ${histories} histories applied and checked in ${secs.toFixed(1)} s, seed ${SEED}`);
  });

  for (const mode of ['soft', 'hard'] as const satisfies readonly DeleteMode[]) {
    it(
      `${mode} delete: the index equals the source's final state`,
      async () => {
        const sourceId = `${mode}src`;
        const cp = new MemoryControlPlane();
        const at = new Date().toISOString();
        for (const t of MODEL_TABLES) {
          await cp.registerTable(
            { source: sourceId, table: t.table, state: 'active', currentVersion: 1, deleteMode: mode, preImage: 'key', stateReason: null, updatedAt: at },
            { source: sourceId, table: t.table, version: 1, columns: t.columns, key: t.key, effectivePosition: '000000010000000000000000', registeredAt: at },
            { at, actor: 'test', action: 'register-table', source: sourceId, table: t.table, outcome: 'done', detail: {} },
          );
        }
        const applier = createSearchApplier({
          controlPlane: cp,
          search: index,
          sinkId: SINK,
          metrics: new Metrics({ namespace: 'test' }),
          logger: new Logger({ logLevel: 'CRITICAL' }),
          backoffMs: 1,
          bulkAttempts: 1,
        });
        let seq = 0;
        let runs = 0;
        const t0 = Date.now();
        await fc.assert(
          fc.asyncProperty(historyArb, async (h) => {
            // Each history starts from no index at all (the applier creates them again).
            for (const t of MODEL_TABLES) {
              const n = searchNames('cdc', sourceId, t.table);
              for (const name of [n.index(1), n.deleted, n.handover]) await fetch(`${standin.url}/${name}`, { method: 'DELETE' });
            }
            applier.clearCache();
            cp.resetSinkProgress();
            const sim = simulate(h, sourceId);
            let step = 0;
            // A key-change insert that waits for its old key's values is reported failed, and its
            // shard stalls: it and every later event of its partition key come again later, after
            // the other deliveries (the old key's delete, on another shard, among them).
            let blocked: ChangeEvent[] = [];
            const partition = (e: ChangeEvent) => `${e.table}|${JSON.stringify(e.key)}`;
            const deliver = async (events: ChangeEvent[]): Promise<void> => {
              const c = h.choices[step++ % h.choices.length] ?? 0;
              // Sometimes the bulk fails part-way: some items are throttled (the applier does not
              // retry them here), the rest applied. The records from the first failed one are
              // delivered again, as the event source mapping does, until none fails.
              if (c % 4 === 1) standin.inject({ scope: 'item', status: 429, times: 1 + (c % 3) });
              try {
                await deliverOnce(events);
              } finally {
                standin.clearInjections(); // an injection no bulk consumed (all dropped) does not carry over
              }
            };
            const deliverOnce = async (events: ChangeEvent[]): Promise<void> => {
              let pending = events;
              for (let tries = 0; pending.length > 0; tries++) {
                const base = (seq += 100);
                const outcome = await apply(applier, pending, base);
                if (outcome.deadLettered > 0) throw new Error(`dead letters: ${JSON.stringify([...outcome.reasons])}`);
                if (outcome.failed.length === 0) return;
                const rest = pending.slice(Number(outcome.failed[0]) - base - 1);
                if ([...outcome.reasons.values()].some((r) => r.includes('primary-key change in flight'))) {
                  blocked.push(...rest);
                  return;
                }
                if (tries > 10) throw new Error(`batch not applied after retries: ${JSON.stringify([...outcome.reasons])}`);
                pending = rest;
              }
            };
            const retryBlocked = async (): Promise<void> => {
              const again = blocked;
              blocked = [];
              if (again.length > 0) await deliver(again);
            };
            for (const b of deliveries(sim.events, h)) {
              for (let n = 0; n < (b.redeliver ? 2 : 1); n++) {
                const stalled = new Set(blocked.map(partition));
                const now = b.events.filter((e) => !stalled.has(partition(e)));
                blocked.push(...b.events.filter((e) => stalled.has(partition(e))));
                if (now.length > 0) await deliver(now);
                await retryBlocked();
              }
            }
            for (let round = 0; blocked.length > 0; round++) {
              if (round > 20)
                throw new Error(
                  `events still waiting after the whole history: ${blocked.map((e) => `${e.op} ${JSON.stringify(e.key)} @${e.position}`).join(', ')}`,
                );
              await retryBlocked();
            }
            standin.clearInjections();
            for (const t of sim.tables)
              await check(sourceId, mode, t, sim.final.get(t.table)!, sim.lastPosition.get(t.table)!, sim.truncatedAt.get(t.table) ?? null);
            histories++;
            runs++;
          }),
          { numRuns: Math.ceil(RUNS / 2), seed: SEED, endOnFailure: process.env.CDC_PROPERTY_NO_SHRINK === '1' },
        );
        console.log(`search property (${mode} delete): ${runs} histories in ${((Date.now() - t0) / 1000).toFixed(1)} s, seed ${SEED}`);
      },
      TIMEOUT_MS,
    );
  }

  async function apply(applier: SearchApplier, events: readonly ChangeEvent[], base: number) {
    const records: ChangeRecord[] = events.map((e, i) => ({
      sequenceNumber: String(base + i + 1),
      origin: `test/shard-0/${base + i + 1}`,
      text: JSON.stringify(e),
    }));
    return applier.applyRecords(records);
  }

  async function check(
    sourceId: string,
    mode: DeleteMode,
    t: ModelTable,
    final: Map<string, Row>,
    last: Map<string, string>,
    truncatedAt: string | null,
  ): Promise<void> {
    const names = searchNames('cdc', sourceId, t.table);
    const columns = t.columns.map((c) => c.name);
    const live = new Map<string, Row>();
    if (last.size > 0) for await (const d of index.listDocuments(names, 3)) live.set(d.id, d.values);
    const expected = new Map([...final].map(([k, row]) => [documentId(JSON.parse(k) === null ? {} : keyOf(k)), row]));
    expect([...live.keys()].sort(), `live documents of ${t.table}`).toEqual([...expected.keys()].sort());
    for (const [id, row] of expected) {
      const doc = live.get(id)!;
      expect(Object.fromEntries(columns.map((c) => [c, norm(doc[c])])), `document ${id} of ${t.table}`).toEqual(
        Object.fromEntries(columns.map((c) => [c, norm(row[c])])),
      );
    }
    const ids = [...last.keys()].map((k) => documentId(keyOf(k)));
    if (ids.length === 0) return;
    const all = await index.readStored(names.all, ids);
    const tombs = mode === 'hard' ? await index.readStored(names.deleted, ids) : new Map<string, unknown>();
    for (const [k, position] of last) {
      const id = documentId(keyOf(k));
      const meta = (all.get(id) as Record<string, Record<string, unknown>> | undefined)?.[META_FIELD];
      if (final.has(k)) {
        expect(meta, `cdc_meta of ${id}`).toMatchObject({ position, deleted: false });
      } else {
        // A key gone by a later truncate is tombstoned at its own delete or at the truncate,
        // depending on which of the two (different partition keys) the sink applied first.
        // If the truncate came first, the older events of the key were dropped and it has no document at all.
        const truncated = truncatedAt !== null && truncatedAt > position;
        const tomb = mode === 'soft' ? meta : (tombs.get(id) as Record<string, Record<string, unknown>> | undefined)?.[META_FIELD];
        if (mode === 'hard') expect(meta, `hard-deleted ${id} has no document`).toBeUndefined();
        if (truncated && tomb === undefined) continue;
        expect(tomb, `${mode} tombstone of ${id}`).toMatchObject({ deleted: true });
        // At its delete, or — for a key gone by a later truncate — at or below the last truncate:
        // the index's truncation horizon (truncatedAt) drops every event below it, so a tombstone
        // left by an earlier truncate (the later events of the key arrived after the last truncate
        // and were dropped) is as final as one at the truncate itself.
        const at = tomb!.position as string;
        expect(at === position || (truncated && at <= truncatedAt), `${mode} tombstone position of ${id}: ${at}`).toBe(true);
      }
    }
  }
});

function keyOf(k: string): Row {
  return Object.fromEntries(JSON.parse(k) as [string, JsonValue][]);
}
