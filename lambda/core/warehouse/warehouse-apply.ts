/**
 * The warehouse apply: change-log records in, a warehouse sink's tables out. Pure orchestration
 * over injected ports (control plane, `Warehouse` of ./warehouse-port.ts, payload store, log); the Lambda handler
 * (`lambda/handlers/warehouse-applier.ts`) is a thin shell that wires it and emits the metrics
 * from the outcome (docs/warehouse-apply.md).
 *
 * Per batch (docs/architecture.md §5.4; invariants 2, 7, 10, 11, 12):
 * - each record is decoded and validated (`validateChangeEvent`); a record that fails goes to the
 *   dead letters with its reason and counts as processed;
 * - records are grouped by (source, table). Per table: the table and its schema versions are
 *   read from the control plane; a table or column name that is not a plain identifier or not in
 *   the registry's schema version is refused (`UnsafeIdentifierError`) and its records are dead
 *   letters, while other tables of the batch still apply;
 * - a table that is paused or needs a re-snapshot (its record as read at most a second ago:
 *   docs/architecture.md, "Table records kept for at most a second"), or that this sink already
 *   holds, is not applied: the sink records the first held position (`holdSinkTable`) so a resume can replay
 *   from it, counts it as held, and treats the records as processed. Holding goes on until the
 *   hold is released, because applying newer events first would make the replayed older ones
 *   look stale (the position guard would drop them); the resume replay applies the held range
 *   with `applyRecords(records, { replayHeld: true })` while the live path keeps holding;
 * - the tables' events are written by the writer in ONE warehouse transaction per batch where the
 *   engine allows it (`Warehouse.applyTables`, an error about one table leaves it out and the
 *   others commit: docs/warehouse-apply.md, "One transaction per batch"), else one per table
 *   (`Warehouse.applyTable`): appended to the table's delta on the critical path when they
 *   are full images and plain deletes (visible in the view at COMMIT), or applied to the base
 *   after merging the delta (truncates, primary-key changes whose insert lacks columns, partial
 *   updates); only after COMMIT is its high-water mark advanced and its records reported done;
 * - after an append, the table's delta is merged when the merge policy says it is due (rows or
 *   age; `MergePolicy`), unless merges run elsewhere (`inline: false`); `mergeDue` merges every
 *   table whose delta is due (the schedule's event);
 * - heartbeat events (table `<schema>.cdc_heartbeat`) are applied like any table and also give
 *   the end-to-end lag = commit time of the sink transaction − source commit time;
 * - a database error fails the table's records; the response fails that table's records at or
 *   after its first failed one in sequence order (per-key order is kept), and no record of
 *   another table. A value the warehouse refuses is isolated by applying that table's events
 *   one at a time; the refused event is a dead letter. An error about the table that a retry
 *   will not fix (a constraint, a missing object, a revoked privilege) holds the table for this
 *   sink with an audit entry, so the shard moves on and the other tables keep flowing; `cdc
 *   resume` replays the held range once the cause is fixed (docs/operations.md).
 *
 * Where the tables are: `targetOf` names each table's warehouse objects (default
 * `warehouseTable(source, table)`), so a rebuild can replay through this same path into shadow
 * objects (another schema).
 */
import { failuresPerTable } from '../sink/batch-failures.ts';
import { batchBook, describeError, maxPosition, groupByTable, schemaReader, validItems, type SourceCounts } from '../sink/sink-batch.ts';
import type { ControlPlane, DeleteMode, SchemaVersion } from '../shared/control-plane.ts';
import { UnsafeIdentifierError } from '../shared/errors.ts';
import type { ChangeEvent } from '../shared/event.ts';
import { assertPlainIdentifier, isHeartbeatTable } from '../shared/identifiers.ts';
import { FoldedNameError, foldsInto } from '../shared/name-folding.ts';
import { keepTableRecords } from '../shared/kept-table-records.ts';
import { admitTable, checkEventColumns as checkColumnsOf } from '../sink/sink-admission.ts';
import type { PayloadStore } from '../shared/payload-store.ts';
import { assertSourceColumn, warehouseTable, type WarehouseTable } from './warehouse-sql.ts';
import type { MergeTarget, TableApplyResult, TableOutcome, Warehouse } from './warehouse-port.ts';
import { mergeDueFor, stopsAppends, validateMergePolicy, type MergePolicy } from './merge-policy.ts';

/** One change-log record as the applier sees it. */
export interface ChangeRecord {
  /** Kinesis sequence number (the batch-failure identifier). */
  sequenceNumber: string;
  /** Where it was read: `<stream>/<shard>/<sequence number>` (kept with a dead letter). */
  origin: string;
  /** The record's payload text (a JSON change event). */
  text: string;
}

/** Minimal log port (Powertools' Logger fits). */
export interface ApplyLog {
  info(message: string, detail?: Record<string, unknown>): void;
  warn(message: string, detail?: Record<string, unknown>): void;
  error(message: string, detail?: Record<string, unknown>): void;
}

export interface WarehouseApplyDeps {
  controlPlane: ControlPlane;
  writer: Warehouse;
  /** Sink id: offsets, holds, dead-letter stage and metric dimension. */
  sinkId: string;
  log: ApplyLog;
  /** @default DEFAULT_MERGE_POLICY */
  merge?: Partial<MergePolicy>;
  /** Clock for `_cdc_applied_at` and dead-letter times. @default () => new Date() */
  now?: () => Date;
  /** Where events stored out of line are read back from (claim checks on the change log; docs/large-records.md). */
  payloads?: PayloadStore;
  /** The warehouse objects of a table. @default warehouseTable(source, table) */
  targetOf?: (sourceId: string, table: string) => WarehouseTable;
  /**
   * How many batches of one shard the event source mapping runs at once (the sink's
   * `parallelizationFactor`): above 1, a hold records `parallelBatches`, so its resume replay
   * leaves no lane behind (docs/operations.md, "How a resume replays"). @default 1
   */
  parallelizationFactor?: number;
}

export type { SourceCounts } from '../sink/sink-batch.ts';

/** One deferred merge of a table's delta: what it merged, or why it failed. */
export interface MergeDone {
  source: string;
  table: string;
  rows: number;
  ms: number;
  /** The delta was at twice its threshold, so appends were stopped for this merge (`stopsAppends`). */
  appendsStopped: boolean;
  /** Set when the merge failed: nothing changed, the view still shows every change, and it is tried again. */
  error?: string;
}

/** What happened to a batch. */
export interface BatchOutcome {
  /** Sequence numbers to report as failed: each failed table's records at or after its first failed one. */
  failed: string[];
  /** Why each record failed (records after the first failure say so). */
  reasons: Map<string, string>;
  /** Valid events of applied tables (written, or recognised as already applied). */
  applied: number;
  held: number;
  deadLettered: number;
}

/** A batch's outcome with what the handler needs for its metrics. */
export interface ApplyOutcome extends BatchOutcome {
  /** Per source (`unknown` for records whose source could not be read). */
  bySource: Map<string, SourceCounts>;
  /** Table batches that failed or were held on an error (the `ApplyErrors` metric). */
  applyErrors: number;
  /** Merges run after the appends of this batch (failed ones with their `error`). */
  merges: MergeDone[];
}

/** Options of one `applyRecords` call. */
export interface ApplyOptions {
  /**
   * Apply tables that this sink holds (its `heldFrom` is set) as long as the table itself is
   * active: for the resume replay, which re-applies the held range from the log while the live
   * path keeps holding, and releases the hold when it has caught up. @default false
   */
  replayHeld?: boolean;
  /**
   * With `replayHeld`: records before their shard's first held one, which the resume replay of a
   * hold recorded with `parallelBatches` applies so that no lane is left behind (docs/operations.md,
   * "How a resume replays"). Already-applied ones are dropped as duplicates; one that cannot be
   * applied is not dead-lettered a second time (its live consumer does that). @default false
   */
  catchUp?: boolean;
}

export interface WarehouseApply {
  applyRecords(records: readonly ChangeRecord[], options?: ApplyOptions): Promise<ApplyOutcome>;
  /**
   * Merges the delta of every registered table whose delta is due (`MergePolicy`; `force`: any
   * non-empty delta). Errors are logged per table and the others still merge.
   */
  mergeDue(options?: { force?: boolean; source?: string }): Promise<MergeDone[]>;
  /** Merges one table's delta now. */
  mergeTable(sourceId: string, table: string): Promise<MergeDone>;
  readonly mergePolicy: MergePolicy;
}

interface Item {
  record: ChangeRecord;
  event: ChangeEvent;
}

/** A table's records admitted and validated in a batch: what its write needs. */
interface Ready {
  source: string;
  table: string;
  deleteMode: DeleteMode;
  schemas: Map<number, SchemaVersion>;
  items: Item[];
  target: WarehouseTable;
  /** The primary key of its newest schema version. */
  key: readonly string[];
}

/** Builds the warehouse apply from its ports. */
export function createWarehouseApply(deps: WarehouseApplyDeps): WarehouseApply {
  const { controlPlane: cp, sinkId, log, writer } = deps;
  assertPlainIdentifier(sinkId, 'sink id');
  const now = deps.now ?? (() => new Date());
  const policy = validateMergePolicy(deps.merge ?? {}, `merge policy of sink ${sinkId}`);
  const targetOf = deps.targetOf ?? ((sourceId: string, table: string) => warehouseTable(sourceId, table));
  const schemaOf = schemaReader(cp, assertSourceColumn);
  /** The admission's table records, kept for at most a second (docs/architecture.md, "Table records kept for at most a second"). */
  const keptRecords = keepTableRecords(cp);
  /**
   * The highest heartbeat position whose lag this process reported, per table: an append does not
   * read what the sink holds, so a redelivered heartbeat is recognised here (once per heartbeat).
   */
  const heartbeatSeen = new Map<string, string>();
  /** Tables this process found clear of a folding clash (the first of two never becomes the second). */
  const unfolded = new Set<string>();

  /** The merge target of a registered table (its key from its current schema version). */
  async function mergeTargetOf(sourceId: string, table: string): Promise<MergeTarget | null> {
    const rec = await cp.getTable(sourceId, table);
    if (!rec) return null;
    const schema = await schemaOf(sourceId, table, rec.currentVersion);
    return { source: sourceId, table, deleteMode: rec.deleteMode, key: schema.key, target: targetOf(sourceId, table) };
  }

  /** Merges a table's delta; `rows`: what it holds as far as the caller knows (a large delta stops appends for its merge). */
  async function runMerge(target: MergeTarget, rows = 0): Promise<MergeDone> {
    const stop = stopsAppends(policy, rows);
    const r = await writer.merge(target, stop ? { stopAppends: true } : undefined);
    if (r.rows > 0) log.info('delta merged into the base', { source: target.source, table: target.table, rows: r.rows, ms: r.ms, appendsStopped: stop });
    return { source: target.source, table: target.table, rows: r.rows, ms: r.ms, appendsStopped: stop };
  }

  /** A deferred merge that may fail: a failure is logged and returned (it is tried again on the next append or schedule). */
  async function tryMerge(target: MergeTarget, rows: number): Promise<MergeDone> {
    const t0 = Date.now();
    try {
      return await runMerge(target, rows);
    } catch (err) {
      return failedMerge(target.source, target.table, t0, stopsAppends(policy, rows), err);
    }
  }

  /** A deferred merge that failed (nothing changed): logged, and returned with its error. */
  function failedMerge(sourceId: string, table: string, t0: number, appendsStopped: boolean, err: unknown): MergeDone {
    log.error('delta merge failed; the view still shows every change, the merge is tried again', { source: sourceId, table, error: describeError(err) });
    return { source: sourceId, table, rows: 0, ms: Date.now() - t0, appendsStopped, error: describeError(err) };
  }

  async function applyRecords(records: readonly ChangeRecord[], options: ApplyOptions = {}): Promise<ApplyOutcome> {
    const appliedAt = now();
    const { failed, counts, countFor, deadLetter, hold, holdAudited } = batchBook({
      controlPlane: cp,
      sinkId,
      now,
      log,
      parallelBatches: (deps.parallelizationFactor ?? 1) > 1,
      catchUp: options.catchUp === true,
    });
    const merges: MergeDone[] = [];
    let applyErrors = 0;
    /** Tables appended to in this batch, for the merge check after the batch. */
    const appended = new Map<string, MergeTarget & { pending: { rows: number; since: number | null } }>();

    // Decode and validate; group by (source, table) in order of first appearance.
    // The one-pass decode (lambda/core/sink/appendable-event.ts): most records become lazy events, appended from their text.
    const groups = await groupByTable(records, { payloads: deps.payloads, sinkId, deadLetter, onePass: true });

    /** The records of a table that is not applied now: retried (reported failed). */
    function failGroup(sourceId: string, table: string, items: readonly Item[], err: unknown): void {
      applyErrors++;
      log.error('table batch not applied; its records will be retried', { source: sourceId, table, error: describeError(err) });
      for (const i of items) if (!failed.has(i.record.sequenceNumber)) failed.set(i.record.sequenceNumber, describeError(err));
    }

    // Admission and validation per table, then the tables' writes: in one warehouse transaction
    // when the writer can (`applyTables`), else one per table.
    const ready: Ready[] = [];
    // Whether the warehouse folds names is the warehouse's, not a table's: an error asking it (the
    // warehouse unreachable) fails every table of the batch, as an error of the batch's transaction
    // does, and no table of the batch is written without the others (docs/warehouse-apply.md, "One
    // transaction per batch").
    const folds = await writer.foldsNames().then(
      (f) => f,
      (err: unknown) => {
        for (const items of groups.values()) failGroup(items[0]!.event.source, items[0]!.event.table, items, err);
        return null;
      },
    );
    for (const items of folds === null ? [] : groups.values()) {
      const { source: sourceId, table } = items[0]!.event;
      try {
        const r = await admitGroup(sourceId, table, items);
        if (r) ready.push(r);
      } catch (err) {
        failGroup(sourceId, table, items, err);
      }
    }
    if (writer.applyTables && ready.length > 1) {
      let outcomes: TableOutcome[] | null = null;
      try {
        outcomes = await writer.applyTables(
          ready.map((r) => ({
            source: r.source,
            table: r.table,
            deleteMode: r.deleteMode,
            schemas: r.schemas,
            events: r.items.map((i) => i.event),
            appliedAt,
            target: r.target,
          })),
        );
      } catch (err) {
        for (const r of ready) failGroup(r.source, r.table, r.items, err);
      }
      for (const [n, r] of outcomes ? ready.entries() : []) {
        const o = outcomes![n]!;
        try {
          if ('result' in o) await recordApplied(r, r.items, o.result);
          else await onWriteError(r, o.error);
        } catch (err) {
          failGroup(r.source, r.table, r.items, err);
        }
      }
    } else {
      for (const r of ready) {
        try {
          await writeGroup(r);
        } catch (err) {
          failGroup(r.source, r.table, r.items, err);
        }
      }
    }

    /** Admits a table's records (hold, dead letters, names, schema versions); the ones to write, or null when none is. */
    async function admitGroup(sourceId: string, table: string, items: Item[]): Promise<Ready | null> {
      // An event of a version the kept record does not name proves it stale: read it again.
      keptRecords.atLeast(
        sourceId,
        table,
        items.reduce((v, i) => Math.max(v, i.event.schemaVersion), 0),
      );
      const admission = await admitTable(keptRecords.controlPlane, {
        sinkId,
        source: sourceId,
        table,
        replayHeld: options.replayHeld === true,
        target: () => targetOf(sourceId, table),
      });
      if (admission.verdict === 'dead-letter') {
        for (const i of items) await deadLetter(i.record, sourceId, table, admission.error);
        return null;
      }
      if (admission.verdict === 'hold') {
        await hold(sourceId, table, items, admission.why);
        return null;
      }
      const { target, table: rec } = admission;
      // A warehouse that folds names refuses the second of two tables it would make one (docs/onboarding.md, "Names").
      if (!unfolded.has(`${sourceId}\u0000${table}`) && folds) {
        const first = await foldsInto(cp, sourceId, table, targetOf);
        if (first !== null) {
          await holdOnError(sourceId, table, items, new FoldedNameError(sourceId, table, first), 'NAME_FOLDS');
          return null;
        }
      }
      unfolded.add(`${sourceId}\u0000${table}`);
      const { valid, schemas } = await validItems(sourceId, table, items, { schemaOf, assertColumn: assertSourceColumn, deadLetter });
      if (valid.length === 0) return null;
      const newest = [...schemas.values()].reduce((a, b) => (b.version > a.version ? b : a));
      return { source: sourceId, table, deleteMode: rec.deleteMode, schemas, items: valid, target, key: newest.key };
    }

    /** Writes one admitted table in its own transaction. */
    async function writeGroup(r: Ready): Promise<void> {
      try {
        await applyItems(r);
      } catch (err) {
        await onWriteError(r, err);
      }
    }

    /** What a write error of an admitted table does: hold it, isolate the refused value, or (transient) throw, so its records are retried. */
    async function onWriteError(r: Ready, err: unknown): Promise<void> {
      const { source: sourceId, table, items } = r;
      const kind = writer.classifyError(err);
      if (kind?.kind === 'type-conflict') {
        log.error('warehouse column type conflict; table held for this sink', { source: sourceId, table, error: kind.message });
        await hold(sourceId, table, items, kind.message);
      } else if (kind?.kind === 'value-rejected') {
        await isolate(r);
      } else if (kind?.kind === 'persistent') {
        await holdOnError(sourceId, table, items, err, kind.code);
      } else {
        throw err;
      }
    }

    /** Holds a table this sink cannot write (an error a retry will not fix), audited, so the shard moves on. */
    async function holdOnError(sourceId: string, table: string, items: Item[], err: unknown, code: string): Promise<void> {
      applyErrors++;
      log.error('warehouse refuses writes to this table; table held for this sink (fix it, then cdc resume)', {
        source: sourceId,
        table,
        sqlState: code,
        error: describeError(err),
      });
      await holdAudited(sourceId, table, items, {
        reason: describeError(err),
        hint: `fix the warehouse table, then cdc resume ${table}`,
        detail: { sqlState: code },
      });
    }

    async function applyItems(r: Ready): Promise<void> {
      const { source: sourceId, table, deleteMode, schemas, items, target } = r;
      const result = await writer.applyTable({ source: sourceId, table, deleteMode, schemas, events: items.map((i) => i.event), appliedAt, target });
      await recordApplied(r, items, result);
    }

    /** After a table's write committed: its high-water mark, counts, the merge check, heartbeat lag, logs. */
    async function recordApplied(
      r: Pick<Ready, 'source' | 'table' | 'deleteMode' | 'key' | 'target'>,
      items: readonly Item[],
      result: TableApplyResult,
    ): Promise<void> {
      const { source: sourceId, table, deleteMode, key, target } = r;
      await cp.advanceSinkProgress(sinkId, sourceId, table, maxPosition(items));
      const c = countFor(sourceId);
      c.applied += items.length;
      if (result.mode === 'append') appended.set(`${sourceId}\u0000${table}`, { source: sourceId, table, deleteMode, key, target, pending: result.pending });
      else appended.delete(`${sourceId}\u0000${table}`);
      if (isHeartbeatTable(table)) {
        const k = `${sourceId}\u0000${table}`;
        let seen = heartbeatSeen.get(k) ?? '';
        for (const e of result.plan.fresh) {
          if (e.position <= seen) continue;
          c.lag.push(Math.max(0, result.committedAt - Date.parse(e.commitTs)));
          seen = e.position;
        }
        heartbeatSeen.set(k, seen);
      }
      if (result.plan.held.length > 0 || result.plan.donors.length > 0) {
        // A primary-key change whose insert lacks columns (an unchanged TOAST value) waits for the
        // old key's row, applied on another shard; nothing is written as NULL meanwhile.
        log.info("primary-key change in flight: events held until the old key's values are known", {
          source: sourceId,
          table,
          heldEvents: result.plan.held.length,
          heldKeys: new Set(result.plan.held.map((e) => JSON.stringify(e.key))).size,
          handedOver: result.plan.donors.length,
        });
      }
      if (result.ddl.length > 0) log.info('warehouse DDL applied', { source: sourceId, table, statements: result.ddl });
    }

    /** Applies the table's events one at a time, so that the one the warehouse refuses becomes a dead letter. */
    async function isolate(r: Ready): Promise<void> {
      const { source: sourceId, table, items } = r;
      const ordered = [...items].sort((a, b) => (a.event.position < b.event.position ? -1 : a.event.position > b.event.position ? 1 : 0));
      for (let n = 0; n < ordered.length; n++) {
        const i = ordered[n]!;
        try {
          await applyItems({ ...r, items: [i] });
        } catch (err) {
          const kind = writer.classifyError(err);
          if (kind?.kind === 'value-rejected') {
            await deadLetter(i.record, sourceId, table, err);
            continue;
          }
          if (kind?.kind === 'persistent') {
            await holdOnError(sourceId, table, ordered.slice(n), err, kind.code);
            return;
          }
          applyErrors++;
          for (const rest of ordered.slice(n)) failed.set(rest.record.sequenceNumber, describeError(err));
          log.error('table batch not applied; its records will be retried', { source: sourceId, table, error: describeError(err) });
          return;
        }
      }
    }

    // The deferred merge, when due: after the batch's appends committed (they are visible already), so
    // a merge that fails costs nothing but the delta growing until the next try.
    if (policy.inline) {
      const at = Date.now();
      for (const m of appended.values()) {
        if (!mergeDueFor(policy, m.pending.rows, m.pending.since, at)) continue;
        merges.push(await tryMerge(m, m.pending.rows));
      }
    }

    const reported = failed.size === 0 ? [] : failuresPerTable(recordTables(records, groups), new Set(failed.keys()));
    const reasons = new Map<string, string>();
    for (const s of reported) reasons.set(s, failed.get(s) ?? 'comes after a failed record of its table');
    let total = { applied: 0, held: 0, dead: 0 };
    for (const c of counts.values()) total = { applied: total.applied + c.applied, held: total.held + c.held, dead: total.dead + c.dead };
    return { failed: reported, reasons, applied: total.applied, held: total.held, deadLettered: total.dead, bySource: counts, applyErrors, merges };
  }

  async function mergeTable(sourceId: string, table: string): Promise<MergeDone> {
    const target = await mergeTargetOf(sourceId, table);
    if (!target) throw new UnsafeIdentifierError(table, `not a registered table of source ${sourceId}`);
    return runMerge(target);
  }

  async function mergeDue(options: { force?: boolean; source?: string } = {}): Promise<MergeDone[]> {
    const out: MergeDone[] = [];
    const at = Date.now();
    for (const rec of await cp.listTables(options.source)) {
      const t0 = Date.now();
      try {
        const target = await mergeTargetOf(rec.source, rec.table);
        if (!target) continue;
        const stats = await writer.deltaStats(target);
        if (stats.rows === 0 || (!options.force && !mergeDueFor(policy, stats.rows, stats.oldest, at))) continue;
        out.push(await tryMerge(target, stats.rows));
      } catch (err) {
        // Finding the table's target or its delta failed: as much a failed merge as the merge's own error.
        out.push(failedMerge(rec.source, rec.table, t0, false, err));
      }
    }
    return out;
  }

  return { applyRecords, mergeDue, mergeTable, mergePolicy: policy };
}

/** Each record with its table's group key (null: it decoded to no event), for `failuresPerTable`; only a batch with a failure needs it. */
function recordTables(records: readonly ChangeRecord[], groups: ReadonlyMap<string, readonly Item[]>): Array<{ sequenceNumber: string; table: string | null }> {
  const tableOf = new Map<string, string>();
  for (const [k, items] of groups) for (const i of items) tableOf.set(i.record.sequenceNumber, k);
  return records.map((r) => ({ sequenceNumber: r.sequenceNumber, table: tableOf.get(r.sequenceNumber) ?? null }));
}

/**
 * The warehouse's check of every event's names against its schema version (the rebuild checks
 * replayed events with it too): `checkEventColumns` of lambda/core/sink/sink-admission.ts with the
 * warehouse's column rule.
 */
export function checkEventColumns(e: ChangeEvent, schema: SchemaVersion): void {
  checkColumnsOf(e, schema, assertSourceColumn);
}
