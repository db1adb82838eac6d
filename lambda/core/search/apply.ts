/**
 * The search apply: change-log records → a search index (the port lambda/core/search/search-index.ts), one index per captured table behind an alias,
 * versioned by position (docs/search.md; invariants 2, 7, 10, 11, 12).
 *
 * Per batch, shaped like the warehouse apply (lambda/core/warehouse/warehouse-apply.ts):
 * - each record is decoded and validated; a record that fails is a dead letter (counts as processed);
 * - records are grouped by (source, table); a table this sink does not serve is skipped (its
 *   records count as processed); an unregistered table or a name that cannot be an index name
 *   or is not in the event's schema version is dead-lettered;
 * - a table that is paused or needs a re-snapshot, or that this sink already holds, is held
 *   (`holdSinkTable` with the first held position, `EventsHeld`), exactly as the warehouse does;
 *   so is a table whose registered schema the index cannot hold (`SearchMappingConflictError`)
 *   and a table with a position the external version cannot encode (`PositionNotEncodableError`:
 *   a loud stop, never a wrap);
 * - the table's index is created on first use (mapping from the registered schema versions);
 *   fields of a compatible added column are added before the first document that has them;
 * - the stored documents (and hard-delete tombstones) of the batch's keys are read, the batch is
 *   planned (lambda/core/search/search-plan.ts) and written in ONE `_bulk` request with external
 *   versions. Per item: applied or version conflict (already applied / stale) = success;
 *   throttling or unavailability = retried here with backoff, then reported as batch item
 *   failures (never dead-lettered); anything else = the key's records are dead letters with the
 *   reason (the table becomes degraded), the rest of the batch applies;
 * - `truncate`: the table's index records the truncation position (`_meta.cdc.truncatedAt`, so
 *   an event from before it can never write again), then — after a refresh, so that every
 *   acknowledged write is visible — every live document below it gets a delete (tombstone) at the
 *   truncate's version. An applier that wrote rows reads the horizon again after its bulk and
 *   sweeps again if a truncate recorded through another applier is above any of them;
 * - a primary-key change whose insert lacks columns (an unchanged TOAST value) takes them from the
 *   old key's document, its delete in the batch, or a handover donor (`<alias>.handover`, written
 *   in its own bulk before the delete when the delete is applied first); otherwise its records and
 *   every later one of its key are reported failed and delivered again, never indexed without
 *   the values (docs/search.md, "Primary-key changes");
 * - only after the bulk response are the records acknowledged and the high-water mark advanced;
 * - heartbeat events (table `<schema>.cdc_heartbeat`) are indexed like any table and give
 *   `EndToEndLag` = time of the bulk response − source commit time.
 *
 * The handler (lambda/handlers/search-applier.ts) wires it to Kinesis, OpenSearch and Powertools
 * and turns each batch's outcome (`bySource`, `applyErrors`) into metrics.
 */
import { HEARTBEAT_TABLE } from '../../../contracts/env.ts';
import { failuresFrom } from '../sink/apply-plan.ts';
import { batchBook, describeError, maxPosition, groupByTable, schemaReader, validItems } from '../sink/sink-batch.ts';
import type { ControlPlane, DeleteMode, SchemaVersion } from '../shared/control-plane.ts';
import { CdcError } from '../shared/errors.ts';
import { keyText, type ChangeEvent, type Row } from '../shared/event.ts';
import { assertPlainIdentifier } from '../shared/identifiers.ts';
import { FoldedNameError, foldsIntoBy } from '../shared/name-folding.ts';
import { admitTable } from '../sink/sink-admission.ts';
import type { PayloadStore } from '../shared/payload-store.ts';
import {
  assertSearchColumn,
  bulkBody,
  classifyBulkItem,
  DEFAULT_INDEX_PREFIX,
  desiredProperties,
  documentId,
  donorsToRead,
  donorValuesOf,
  keysToRead,
  mappingDiff,
  planSearchWrites,
  SearchDocumentRejectedError,
  SearchMappingConflictError,
  searchNames,
  storedDocOf,
  type IndexMeta,
  type SearchNames,
  type SearchOp,
  type SearchTableConfig,
  type StoredDoc,
} from './search-plan.ts';
import { encodeVersion, PositionNotEncodableError, searchBaseLsn } from './search-version.ts';
import { SearchRequestRejectedError, SearchUnavailableError, type SearchIndex } from './search-index.ts';
import type { ApplyLog, ApplyOptions, BatchOutcome, ChangeRecord, SourceCounts } from '../warehouse/warehouse-apply.ts';

export interface SearchApplyDeps {
  controlPlane: ControlPlane;
  search: SearchIndex;
  /** Sink id: offsets, holds and dead-letter stage. */
  sinkId: string;
  /** Tables served (with their delete mode); the heartbeat table is always served. @default every registered table, with its registered delete mode */
  tables?: readonly SearchTableConfig[];
  /** Index name prefix. @default 'cdc' */
  prefix?: string;
  log: ApplyLog;
  /** Attempts of a bulk whose items are throttled or unavailable, before they are reported as failures. @default 4 */
  bulkAttempts?: number;
  /** First backoff between attempts, doubled each time. @default 200 */
  backoffMs?: number;
  /** Where events stored out of line are read back (claim checks, docs/large-records.md). @default - none: such a record is dead-lettered, named */
  payloads?: PayloadStore;
  now?: () => Date;
  /** @default a timer */
  sleep?: (ms: number) => Promise<void>;
  /**
   * How many batches of one shard the event source mapping runs at once (the sink's
   * `parallelizationFactor`): above 1, a hold records `parallelBatches`, so its resume replay
   * leaves no lane behind (docs/operations.md, "How a resume replays"). @default 1
   */
  parallelizationFactor?: number;
}

/** A batch's outcome, with what the metrics need: counts per source and the table batches that failed or were held on an error. */
export interface SearchApplyOutcome extends BatchOutcome {
  bySource: Map<string, SourceCounts>;
  applyErrors: number;
}

export interface SearchApply {
  applyRecords(records: readonly ChangeRecord[], options?: ApplyOptions): Promise<SearchApplyOutcome>;
  /** Forgets cached index state (a test that rebuilds indexes underneath). */
  clearCache(): void;
}

interface Item {
  record: ChangeRecord;
  event: ChangeEvent;
}

interface IndexState {
  meta: IndexMeta;
  properties: Record<string, unknown>;
  /** The handover donor index is known to exist (created on first need). */
  handoverReady?: boolean;
}

const wait = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));
const eventId = (e: ChangeEvent): string => `${e.position}|${keyText(e.key)}`;

/** Builds the search apply from its ports (the handler lambda/handlers/search-applier.ts and `cdc local` wire it). */
export function createSearchApply(deps: SearchApplyDeps): SearchApply {
  const { controlPlane: cp, sinkId, log: logger, search } = deps;
  assertPlainIdentifier(sinkId, 'sink id');
  const prefix = deps.prefix ?? DEFAULT_INDEX_PREFIX;
  const now = deps.now ?? (() => new Date());
  const attempts = deps.bulkAttempts ?? 4;
  const backoffMs = deps.backoffMs ?? 200;
  const sleep = deps.sleep ?? wait;
  const served = deps.tables ? new Map(deps.tables.map((t) => [`${t.source}\u0000${t.table}`, t])) : null;
  const schemaOf = schemaReader(cp, assertSearchColumn);
  const indexCache = new Map<string, IndexState>();
  /** Tables whose index names fold into no table registered before them (docs/onboarding.md, "Names"). */
  const unfolded = new Set<string>();

  /** The table's index, created or extended so that it holds every column of `schemas`. */
  async function prepareIndex(sourceId: string, table: string, names: SearchNames, schemas: SchemaVersion[], hard: boolean): Promise<IndexState> {
    const desired = desiredProperties(schemas);
    let state = indexCache.get(names.all);
    if (!state) {
      const versions = await cp.listSchemaVersions(sourceId, table);
      const first =
        versions.reduce<string | null>((m, v) => (m === null || v.effectivePosition < m ? v.effectivePosition : m), null) ?? schemas[0]!.effectivePosition;
      const t = await search.tableIndex(names, desired, { baseLsn: searchBaseLsn(first), truncatedAt: null }, hard);
      state = { meta: t.meta, properties: t.properties };
      if (t.created) logger.info('search index created', { source: sourceId, table, index: t.index, baseLsn: t.meta.baseLsn.toString(16) });
      indexCache.set(names.all, state);
    }
    const diff = mappingDiff(state.properties, desired);
    if (diff.conflicts.length > 0) throw new SearchMappingConflictError(names.all, diff.conflicts);
    if (Object.keys(diff.add).length > 0) {
      await search.addFields(names, diff.add);
      state.properties = { ...state.properties, ...diff.add };
      logger.info('search mapping extended', { source: sourceId, table, fields: Object.keys(diff.add) });
    }
    return state;
  }

  async function applyRecords(records: readonly ChangeRecord[], options: ApplyOptions = {}): Promise<SearchApplyOutcome> {
    const { failed, counts, countFor, deadLetter, hold, holdAudited } = batchBook({
      controlPlane: cp,
      sinkId,
      now,
      log: logger,
      parallelBatches: (deps.parallelizationFactor ?? 1) > 1,
      catchUp: options.catchUp === true,
    });
    let applyErrors = 0;

    const groups = await groupByTable(records, { payloads: deps.payloads, sinkId, deadLetter });

    for (const items of groups.values()) {
      const { source: sourceId, table } = items[0]!.event;
      try {
        await applyGroup(sourceId, table, items);
      } catch (err) {
        applyErrors++;
        logger.error('table batch not applied; its records will be retried', { source: sourceId, table, error: describeError(err) });
        for (const i of items) if (!failed.has(i.record.sequenceNumber)) failed.set(i.record.sequenceNumber, describeError(err));
      }
    }

    async function applyGroup(sourceId: string, table: string, items: Item[]): Promise<void> {
      const isHeartbeat = table.split('.')[1] === HEARTBEAT_TABLE;
      const config = served?.get(`${sourceId}\u0000${table}`);
      if (served && !config && !isHeartbeat) return; // not served by this sink: processed, nothing to do
      const admission = await admitTable(cp, {
        sinkId,
        source: sourceId,
        table,
        replayHeld: options.replayHeld === true,
        target: () => searchNames(prefix, sourceId, table),
      });
      if (admission.verdict === 'dead-letter') {
        for (const i of items) await deadLetter(i.record, sourceId, table, admission.error);
        return;
      }
      if (admission.verdict === 'hold') {
        await hold(sourceId, table, items, admission.why);
        return;
      }
      const { target: names, table: rec } = admission;
      // Index names are lower case: the second of two tables whose names differ only in case is refused, never served through the first's index.
      if (!isHeartbeat && !unfolded.has(`${sourceId}\u0000${table}`)) {
        const first = await foldsIntoBy(cp, sourceId, table, (s, t) => searchNames(prefix, s, t).alias);
        if (first !== null) {
          const err = new FoldedNameError(sourceId, table, first, 'search index names are lower case');
          await holdAudited(sourceId, table, items, { reason: describeError(err), hint: `leave ${table} out of this sink, or rename it at the source` });
          return;
        }
        unfolded.add(`${sourceId}\u0000${table}`);
      }
      const deleteMode: DeleteMode = config?.deleteMode ?? rec.deleteMode;
      const { valid, schemas } = await validItems(sourceId, table, items, { schemaOf, assertColumn: assertSearchColumn, deadLetter });
      if (valid.length === 0) return;
      const schemaList = [...schemas.values()];
      let state: IndexState;
      try {
        state = await prepareIndex(sourceId, table, names, schemaList, deleteMode === 'hard');
        for (const i of valid) encodeVersion(i.event.position, state.meta.baseLsn);
      } catch (err) {
        if (
          err instanceof SearchMappingConflictError ||
          err instanceof PositionNotEncodableError ||
          err instanceof SearchRequestRejectedError ||
          (err instanceof CdcError && err.code === 'SEARCH_INDEX_FOREIGN')
        ) {
          logger.error('table held for this search sink', { source: sourceId, table, code: err.code, error: err.message });
          await hold(sourceId, table, valid, err.message);
          return;
        }
        throw err;
      }
      const keyColumns = schemaList.sort((a, b) => b.version - a.version)[0]!.key;

      // Truncates first: record the horizon, then tombstone every live document below it.
      const truncates = valid.filter((i) => i.event.op === 'truncate');
      const rows = valid.filter((i) => i.event.op !== 'truncate');
      /**
       * Tombstones every live document at the truncate position `at` (a document above it, from a
       * later event, keeps its own version: the delete is a version conflict). The refresh makes
       * every write acknowledged before it visible to the listing (OpenSearch search is near-real-time).
       */
      const sweep = async (at: string, by: Item): Promise<boolean> => {
        await retrying(sourceId, table, () => search.refresh(names));
        const gone: ChangeEvent[] = [];
        for await (const d of search.listDocuments(names)) {
          const key: Row = {};
          for (const k of keyColumns) key[k] = d.values[k] ?? null;
          const { handover: _handover, ...envelope } = by.event; // a sweep's delete hands nothing over
          gone.push({ ...envelope, op: 'delete', key, after: null, before: null, missing: [], position: at });
        }
        if (gone.length === 0) return true;
        return writeBatch(
          sourceId,
          table,
          names,
          state,
          deleteMode,
          keyColumns,
          gone.map((event) => ({ record: by.record, event })),
          true,
        );
      };
      if (truncates.length > 0) {
        const at = maxPosition(truncates);
        if (state.meta.truncatedAt === null || state.meta.truncatedAt < at) {
          await search.setMeta(names, { ...state.meta, truncatedAt: at });
          state.meta = { ...state.meta, truncatedAt: at };
        }
        const last = truncates.find((i) => i.event.position === at)!;
        if (!(await sweep(at, last))) {
          // The rows of this batch were not written either: every one is reported failed (a row
          // before the truncate in the batch would otherwise be acknowledged unwritten).
          for (const i of rows)
            if (!failed.has(i.record.sequenceNumber))
              failed.set(i.record.sequenceNumber, `not applied: the truncate at ${at} of ${table} was not applied first`);
          return;
        }
        countFor(sourceId).applied += truncates.length;
      }
      let ok = rows.length === 0 ? true : await writeBatch(sourceId, table, names, state, deleteMode, keyColumns, rows, false);
      if (ok && rows.length > 0) {
        // A truncate applied meanwhile through another applier (another shard: a truncate has its
        // own partition key) may have swept before these writes were visible, with a horizon this
        // applier's cached `_meta` did not know yet. Read the horizon again after the writes: if it
        // is above any of them, sweep again at it (docs/search.md, "Truncate"). Either the truncate's
        // horizon was recorded before this read (then this sweep removes what the batch wrote
        // below it), or after it, and then the truncate's own sweep, which refreshes first, sees them.
        const current = await retrying(sourceId, table, () => search.readMeta(names));
        const horizon = current?.truncatedAt ?? null;
        if (horizon !== null && (state.meta.truncatedAt === null || state.meta.truncatedAt < horizon)) {
          state.meta = { ...state.meta, truncatedAt: horizon };
          if (rows.some((i) => i.event.position < horizon)) ok = await sweep(horizon, rows[0]!);
        }
      }
      if (ok) await cp.advanceSinkProgress(sinkId, sourceId, table, maxPosition(valid));
    }

    /** Runs a request, retrying it with backoff while OpenSearch is throttling or unavailable. */
    async function retrying<T>(sourceId: string, table: string, f: () => Promise<T>): Promise<T> {
      for (let attempt = 1; ; attempt++) {
        try {
          return await f();
        } catch (err) {
          if (!(err instanceof SearchUnavailableError) || attempt >= attempts) throw err;
          logger.warn('search unavailable; retrying', { source: sourceId, table, attempt, error: err.message });
          await sleep(backoffMs * 2 ** (attempt - 1));
        }
      }
    }

    /** Reads, plans and writes one table's events; returns whether every record was acknowledged. */
    async function writeBatch(
      sourceId: string,
      table: string,
      names: SearchNames,
      state: IndexState,
      deleteMode: DeleteMode,
      keyColumns: readonly string[],
      items: Item[],
      synthetic: boolean,
    ): Promise<boolean> {
      const keys = keysToRead(items.map((i) => i.event));
      const idToKey = new Map(keys.map((k) => [documentId(k), keyText(k)]));
      const ids = [...idToKey.keys()];
      const docs = await retrying(sourceId, table, () => search.readStored(names.all, ids));
      const tombs = deleteMode === 'hard' ? await retrying(sourceId, table, () => search.readStored(names.deleted, ids)) : new Map<string, unknown>();
      const stored = new Map<string, { doc?: StoredDoc; tombstone?: StoredDoc }>();
      for (const [id, kt] of idToKey) {
        const d = docs.get(id);
        const t = tombs.get(id);
        if (d === undefined && t === undefined) continue;
        stored.set(kt, { ...(d !== undefined ? { doc: storedDocOf(id, d) } : {}), ...(t !== undefined ? { tombstone: storedDocOf(id, t) } : {}) });
      }
      const ensureHandover = async (): Promise<void> => {
        if (state.handoverReady) return;
        await retrying(sourceId, table, () => search.ensureHandoverIndex(names, state.meta));
        state.handoverReady = true;
      };
      // Donors kept for the batch's key-change inserts that lack columns (docs/search.md, "Primary-key changes").
      const wanted = donorsToRead(
        items.map((i) => i.event),
        keyColumns,
      );
      const donors = new Map<string, Row>();
      if (wanted.length > 0) {
        await ensureHandover();
        const found = await retrying(sourceId, table, () =>
          search.readStored(
            names.handover,
            wanted.map((w) => w.docId),
          ),
        );
        for (const w of wanted) {
          const v = donorValuesOf(found.get(w.docId));
          if (v) donors.set(w.id, v);
        }
      }
      const plan = planSearchWrites({ events: items.map((i) => i.event), keyColumns, deleteMode, stored, meta: state.meta, appliedAt: now(), donors });
      if (plan.ops.some((o) => o.target === 'handover')) await ensureHandover();
      const heldIds = new Set(plan.held.map(eventId));
      if (heldIds.size > 0) {
        logger.info("primary-key change in flight: events wait until the old key's values are known (applied on another shard)", {
          source: sourceId,
          table,
          events: heldIds.size,
          first: plan.held[0]!.position,
        });
      }
      // Bulk, retrying throttled / unavailable items (only those) with backoff.
      const rejected = new Map<string, string>();
      const retryable = new Map<string, string>();
      let respondedAt = Date.now();
      const runBulk = async (ops: SearchOp[]): Promise<void> => {
        let pending = ops;
        for (let attempt = 1; pending.length > 0; attempt++) {
          let results: unknown[];
          try {
            results = await search.bulk(names, bulkBody(pending, names), pending.length);
          } catch (err) {
            if (!(err instanceof SearchUnavailableError) || attempt >= attempts) throw err;
            logger.warn('search bulk unavailable; retrying', { source: sourceId, table, attempt, error: err.message });
            await sleep(backoffMs * 2 ** (attempt - 1));
            continue;
          }
          respondedAt = Date.now();
          const again: SearchOp[] = [];
          for (const op of pending) retryable.delete(op.keyText);
          results.forEach((r, n) => {
            const op = pending[n]!;
            const c = classifyBulkItem(r);
            if (c.kind === 'reject') rejected.set(op.keyText, c.reason);
            else if (c.kind === 'retry') {
              again.push(op);
              retryable.set(op.keyText, c.reason);
            }
          });
          if (again.length === 0 || attempt >= attempts) break;
          logger.warn('search bulk items throttled or unavailable; retrying them', { source: sourceId, table, attempt, items: again.length });
          await sleep(backoffMs * 2 ** (attempt - 1));
          pending = again;
        }
      };
      // Handover donors first, in their own bulk: a key change's delete is written only once the
      // donor its insert needs is stored (a delete written without it could never be completed).
      const donorOps = plan.ops.filter((o) => o.target === 'handover');
      await runBulk(donorOps);
      const blockedKeys = new Set([...donorOps.map((o) => o.keyText)].filter((k) => retryable.has(k) || rejected.has(k)));
      await runBulk(plan.ops.filter((o) => o.target !== 'handover' && !blockedKeys.has(o.keyText)));
      if (synthetic) {
        if (rejected.size > 0 || retryable.size > 0) {
          const why = [...rejected.values(), ...retryable.values()][0]!;
          for (const i of items) failed.set(i.record.sequenceNumber, `truncate not applied: ${why}`);
          applyErrors++;
          return false;
        }
        return true;
      }
      const freshIds = new Set(plan.table.fresh.map(eventId));
      const done = new Set<string>();
      let allOk = true;
      const c = countFor(sourceId);
      for (const i of items) {
        const kt = keyText(i.event.key);
        if (heldIds.has(eventId(i.event))) {
          // Not written: delivered again until the old key's values are known (never indexed without them).
          failed.set(i.record.sequenceNumber, `primary-key change in flight: waits for the old key's values (position ${i.event.position})`);
          allOk = false;
          continue;
        }
        if (retryable.has(kt)) {
          failed.set(i.record.sequenceNumber, `search unavailable: ${retryable.get(kt)}`);
          allOk = false;
          continue;
        }
        if (rejected.has(kt) && freshIds.has(eventId(i.event))) {
          if (!done.has(i.record.sequenceNumber))
            await deadLetter(i.record, sourceId, table, new SearchDocumentRejectedError(documentId(i.event.key), rejected.get(kt)!));
          done.add(i.record.sequenceNumber);
          continue;
        }
        c.applied++;
      }
      if (retryable.size > 0) applyErrors++;
      if (table.split('.')[1] === HEARTBEAT_TABLE) {
        for (const e of plan.table.fresh)
          if (!retryable.has(keyText(e.key)) && !rejected.has(keyText(e.key))) c.lag.push(Math.max(0, respondedAt - Date.parse(e.commitTs)));
      }
      return allOk;
    }

    const seqs = records.map((r) => r.sequenceNumber);
    const reported = failuresFrom(seqs, new Set(failed.keys()));
    const reasons = new Map<string, string>();
    const first = reported[0];
    for (const s of reported) reasons.set(s, failed.get(s) ?? `comes after ${first}, which failed`);
    let total = { applied: 0, held: 0, dead: 0 };
    for (const c of counts.values()) total = { applied: total.applied + c.applied, held: total.held + c.held, dead: total.dead + c.dead };
    return { failed: reported, reasons, applied: total.applied, held: total.held, deadLettered: total.dead, bySource: counts, applyErrors };
  }

  return { applyRecords, clearCache: () => indexCache.clear() };
}
