/**
 * What every sink checks before it applies a table's events (docs/architecture.md §5.4; the
 * warehouse applier and the search applier share it, so the two cannot drift apart):
 * - the table's batch is admitted, dead-lettered (the source or table id is not a plain
 *   identifier, or the table is not registered) or held (the table is paused or needs a
 *   re-snapshot, or this sink holds it from an earlier failure; docs/operations.md);
 * - each event names only columns of its schema version, through the sink's own column rule, and
 *   carries the version's whole primary key (a truncate carries no key and no before image);
 * - a change-log record is decoded the same way by every sink, an event stored out of line (a
 *   claim check, docs/large-records.md) read back whole from the payload store.
 * No I/O of its own: the control plane and the payload store are ports.
 */
import type { ControlPlane, SchemaVersion, TableRecord } from '../shared/control-plane.ts';
import { InvalidRecordError, UnsafeIdentifierError } from '../shared/errors.ts';
import { validateChangeEvent, type ChangeEvent } from '../shared/event.ts';
import { assertPlainIdentifier, splitTableId } from '../shared/identifiers.ts';
import { appendableOf } from './lazy-event.ts';
import { isClaimCheck, PayloadRefError, resolveClaim, validateClaimCheck, type PayloadStore } from '../shared/payload-store.ts';

/**
 * Decodes one change-log record into its event: JSON, a claim check read back from `payloads`,
 * then validated. Bad input throws a `CdcError` naming what is wrong (the caller dead-letters the
 * record); a payload store that cannot be read throws its own error (retried, not dead-lettered).
 * An event carried inline is returned at once (no promise: the appliers decode every record on
 * the critical path); only a claim check returns a promise, as it reads the payload store.
 */
export function decodeChangeRecord(text: string, payloads: PayloadStore | undefined, sinkId: string): ChangeEvent | Promise<ChangeEvent> {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (e) {
    throw new InvalidRecordError('event', `not JSON: ${(e as Error).message}`);
  }
  return isClaimCheck(parsed) ? readClaimed(parsed, payloads, sinkId) : validateChangeEvent(parsed);
}

async function readClaimed(parsed: unknown, payloads: PayloadStore | undefined, sinkId: string): Promise<ChangeEvent> {
  const claim = validateClaimCheck(parsed);
  if (!payloads) throw new PayloadRefError(claim.claim.ref, `cannot be read: sink ${sinkId} has no payload store configured`);
  const stored = await resolveClaim(payloads, claim);
  let event: unknown;
  try {
    event = JSON.parse(stored);
  } catch (e) {
    throw new InvalidRecordError('claim', `the stored event ${claim.claim.ref} is not JSON: ${(e as Error).message}`);
  }
  return validateChangeEvent(event);
}

/** The admission of one table's batch to a sink. */
export type TableAdmission<T> =
  { verdict: 'apply'; target: T; table: TableRecord } | { verdict: 'dead-letter'; error: Error } | { verdict: 'hold'; why: string };

export interface AdmissionRequest<T> {
  sinkId: string;
  source: string;
  table: string;
  /** The resume replay of a held range: the sink's own hold does not apply (docs/operations.md). */
  replayHeld: boolean;
  /** The sink's names for the table (throws for a name it cannot take). */
  target: () => T;
}

/** Decides whether a sink applies, dead-letters or holds a table's batch. */
export async function admitTable<T>(cp: Pick<ControlPlane, 'getTable' | 'getSinkProgress'>, r: AdmissionRequest<T>): Promise<TableAdmission<T>> {
  let target: T;
  try {
    assertPlainIdentifier(r.source, 'source id');
    splitTableId(r.table);
    target = r.target();
  } catch (err) {
    return { verdict: 'dead-letter', error: err as Error };
  }
  const rec = await cp.getTable(r.source, r.table);
  if (!rec) return { verdict: 'dead-letter', error: new UnsafeIdentifierError(r.table, `not a registered table of source ${r.source}`) };
  const progress = r.replayHeld ? null : await cp.getSinkProgress(r.sinkId, r.source, r.table);
  if (rec.state === 'paused' || rec.state === 'needs-resnapshot' || (progress?.heldFrom ?? null) !== null) {
    return { verdict: 'hold', why: progress?.heldFrom ? `held since ${progress.heldFrom}` : `table is ${rec.state}` };
  }
  return { verdict: 'apply', target, table: rec };
}

/** Per schema version (the registry's object): its column names, its primary key, and per column rule and table the names that passed both checks. */
interface ColumnCheckCache {
  known: Set<string>;
  key: Set<string>;
  passed: Map<(name: string, table: string) => void, Map<string, Set<string>>>;
}
const columnChecks = new WeakMap<SchemaVersion, ColumnCheckCache>();

/** One name not checked yet for this schema version and table: the sink's rule, then the version's columns; remembered when it passes. */
function checkColumn(
  e: ChangeEvent,
  schema: SchemaVersion,
  known: Set<string>,
  passed: Set<string>,
  assertColumn: (name: string, table: string) => void,
  name: string,
  where: string,
): void {
  assertColumn(name, e.table);
  if (!known.has(name))
    throw new UnsafeIdentifierError(name, `${where} names a column that is not in schema version ${schema.version} of ${e.source}/${e.table}`);
  passed.add(name);
}

/**
 * Refuses names that are not columns of the event's schema version (or that the sink's
 * `assertColumn` refuses), and an event without the version's whole primary key.
 * `assertColumn` must be a pure rule of the name and table (every sink's is): a name it passed
 * once for a table is not asked again for the same schema version, which keeps the per-event
 * cost to a set lookup per column (the rebuild checks every event of a table's history).
 */
export function checkEventColumns(e: ChangeEvent, schema: SchemaVersion, assertColumn: (name: string, table: string) => void): void {
  let cache = columnChecks.get(schema);
  if (!cache) columnChecks.set(schema, (cache = { known: new Set(schema.columns.map((c) => c.name)), key: new Set(schema.key), passed: new Map() }));
  const { known } = cache;
  let byTable = cache.passed.get(assertColumn);
  if (!byTable) cache.passed.set(assertColumn, (byTable = new Map()));
  let passed = byTable.get(e.table);
  if (!passed) byTable.set(e.table, (passed = new Set()));
  // A lazy event's names come from its one-pass decode (the same names in the same order, without parsing its images).
  const shape = appendableOf(e)?.shape;
  const keyCols = shape ? shape.keyNames : Object.keys(e.key);
  for (const k of keyCols) if (!passed.has(k)) checkColumn(e, schema, known, passed, assertColumn, k, 'key');
  if (shape) {
    if (shape.afterNames) for (const c of shape.afterNames) if (!passed.has(c)) checkColumn(e, schema, known, passed, assertColumn, c, 'after');
  } else if (e.after) for (const c in e.after) if (Object.hasOwn(e.after, c) && !passed.has(c)) checkColumn(e, schema, known, passed, assertColumn, c, 'after');
  for (const c of e.missing) if (!passed.has(c)) checkColumn(e, schema, known, passed, assertColumn, c, 'missing');
  if (e.op === 'truncate') {
    // A truncate is table-level (never a lazy event): no key, no images (docs/truncate.md).
    if (keyCols.length > 0 || e.before !== null) throw new InvalidRecordError('key', `a truncate of ${e.table} carries no key and no before image`);
    return;
  }
  // Object keys are distinct: as many as the key has, each one of the key's, is the key (sorted lists equal).
  let whole = keyCols.length === schema.key.length;
  for (const k of keyCols) whole &&= cache.key.has(k);
  if (!whole) {
    const want = [...schema.key].sort();
    throw new InvalidRecordError(
      'key',
      `expected the primary key (${want.join(', ')}) of ${e.table} schema version ${schema.version}, got (${[...keyCols].sort().join(', ')})`,
    );
  }
}
