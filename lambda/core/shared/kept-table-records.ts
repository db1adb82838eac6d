/**
 * Table records kept for a bounded time (docs/architecture.md, "Table records kept for at most a
 * second"): the normalizer and the warehouse sink read a table's record (state, current schema
 * version, delete mode) for every batch; this keeps what a read returned and answers the same
 * question from it for at most `TABLE_RECORD_MAX_AGE_MS`, so that a state change made elsewhere (an
 * operator's pause or resume, a breaking change another normalizer saw) takes effect within that
 * bound instead of from the next batch on. What keeps it from being staler than that:
 *
 * - a kept record is used only while younger than the bound (a monotonic clock);
 * - every call of the port other than the reads and writes listed in `LEAVES_RECORDS` (which change
 *   no table record) forgets every kept record, before it runs and again after it settled, whether
 *   it succeeded or not: what this process changed itself, or failed to change because the record
 *   moved on (a conditional write that lost), is read again at once;
 * - a read that was in flight while something was forgotten is not kept;
 * - `atLeast` forgets a table's record when an event names a schema version the record does not
 *   have yet: the record is stale by then (a breaking change pauses the table before its version
 *   is registered), so a sink never applies an event of a version its kept record does not know;
 * - a table with no record is never kept (it may be registered a moment later);
 * - only an `active` record is kept: a paused, degraded or re-snapshot-bound record is read again
 *   for every batch, so a resume takes effect at once. Were a paused record kept, a sink whose
 *   kept record predates a resume could hold the table again after another shard's applier
 *   released and replayed the hold: a hold nobody releases (a resume replays per shard:
 *   docs/operations.md under `cdc resume`). So the bound delays what stops applying (a pause, a re-snapshot request), never
 *   what lets it go on.
 *
 * No I/O of its own: the control plane is a port.
 */
import type { ControlPlane, TableRecord } from './control-plane.ts';

/** How long a table record read from the control plane is used again without reading it (ms). */
export const TABLE_RECORD_MAX_AGE_MS = 1_000;

/** The port's calls that change no table record: they leave the kept records as they are. */
const LEAVES_RECORDS: ReadonlySet<string> = new Set([
  'getTable',
  'listTables',
  'getSchemaVersion',
  'listSchemaVersions',
  'getSinkProgress',
  'listSinkProgress',
  'advanceSinkProgress',
  'holdSinkTable',
  'noteReplayProgress',
  'getCheckpoint',
  'putCheckpoint',
  'appendAudit',
  'listAudit',
  'listDeadLetters',
  'getSnapshot',
  'listSnapshots',
  'listSnapshotChunks',
]);

export interface KeptTableRecords {
  /** The port, its `getTable` answered from a record read at most `maxAgeMs` ago when there is one. */
  readonly controlPlane: ControlPlane;
  /** Forgets the kept record of a table when it names a schema version below `version`. */
  atLeast(sourceId: string, table: string, version: number): void;
  /** Reads of the control plane's `getTable` made so far (for the tests). */
  readonly reads: number;
}

export interface KeptTableRecordsOptions {
  /** @default TABLE_RECORD_MAX_AGE_MS */
  maxAgeMs?: number;
  /** A monotonic clock in ms. @default performance.now */
  clock?: () => number;
}

/** The port `cp` with its table records kept for at most `maxAgeMs` (module comment). */
export function keepTableRecords(cp: ControlPlane, options: KeptTableRecordsOptions = {}): KeptTableRecords {
  const maxAgeMs = options.maxAgeMs ?? TABLE_RECORD_MAX_AGE_MS;
  const clock = options.clock ?? (() => performance.now());
  const kept = new Map<string, { record: TableRecord; readAt: number }>();
  /** Raised by every forgetting of everything: a read that started before it is not kept. */
  let generation = 0;
  let reads = 0;
  const forgetAll = (): void => {
    generation++;
    kept.clear();
  };

  async function getTable(sourceId: string, table: string): Promise<TableRecord | null> {
    const k = `${sourceId}\u0000${table}`;
    const hit = kept.get(k);
    const now = clock();
    if (hit && now - hit.readAt < maxAgeMs) return { ...hit.record };
    const before = generation;
    reads++;
    const record = await cp.getTable(sourceId, table);
    if (record === null || record.state !== 'active') kept.delete(k);
    else if (generation === before) kept.set(k, { record: { ...record }, readAt: now });
    return record;
  }

  const controlPlane = new Proxy(cp, {
    get(target, prop, receiver) {
      if (prop === 'getTable') return getTable;
      const value: unknown = Reflect.get(target, prop, receiver);
      if (typeof value !== 'function') return value;
      const fn = value as (...args: unknown[]) => unknown;
      if (typeof prop === 'string' && LEAVES_RECORDS.has(prop)) return fn.bind(target);
      return (...args: unknown[]): unknown => {
        forgetAll();
        const out = fn.apply(target, args);
        if (out instanceof Promise) return out.finally(forgetAll);
        forgetAll();
        return out;
      };
    },
  });

  return {
    controlPlane,
    atLeast(sourceId, table, version) {
      const k = `${sourceId}\u0000${table}`;
      const hit = kept.get(k);
      if (!hit || hit.record.currentVersion >= version) return;
      kept.delete(k);
      generation++; // a read in flight may hold the same stale record
    },
    get reads() {
      return reads;
    },
  };
}
