/**
 * What both sink applies (lambda/core/warehouse/warehouse-apply.ts, lambda/core/search/apply.ts)
 * do the same way with a batch's records: describe an error, name its code, find a group's
 * lowest and highest position, put a record aside as a dead letter (docs/failures.md), read the
 * schema versions a table's events name and keep the events that fit theirs.
 */
import type { AuditEntry, ControlPlane, SchemaVersion } from '../shared/control-plane.ts';
import { CdcError, InvalidRecordError } from '../shared/errors.ts';
import type { ChangeEvent } from '../shared/event.ts';
import type { PayloadStore } from '../shared/payload-store.ts';
import { lazyEventOf } from './lazy-event.ts';
import { checkEventColumns, decodeChangeRecord } from './sink-admission.ts';
import { heldShardsOf } from '../operator/operator-decisions.ts';

/** An error as one line: its class and message. */
export const describeError = (err: unknown): string => (err instanceof Error ? `${err.name}: ${err.message}` : String(err));

/** The code a dead letter or a log line names: the platform's, or `APPLY_FAILED`. */
export const codeOf = (err: unknown): string => (err instanceof CdcError ? err.code : 'APPLY_FAILED');

/** Lowest position of a non-empty group of items. */
export const minPosition = (items: ReadonlyArray<{ event: { position: string } }>): string =>
  items.reduce((m, i) => (i.event.position < m ? i.event.position : m), items[0]!.event.position);

/** Highest position of a non-empty group of items. */
export const maxPosition = (items: ReadonlyArray<{ event: { position: string } }>): string =>
  items.reduce((m, i) => (i.event.position > m ? i.event.position : m), items[0]!.event.position);

/**
 * The audit entry of a table a sink holds (docs/operations.md, "Blast radius of one table"): who
 * held it, from which position, why, and what to do; `detail` adds what the sink knows more (the
 * warehouse's SQLSTATE).
 */
export function holdTableEntry(o: {
  at: Date;
  sinkId: string;
  source: string;
  table: string;
  heldFrom: string;
  reason: string;
  hint: string;
  detail?: Record<string, unknown>;
}): AuditEntry {
  return {
    at: o.at.toISOString(),
    actor: `applier:${o.sinkId}`,
    action: 'hold-table',
    source: o.source,
    table: o.table,
    outcome: 'done',
    detail: { sink: o.sinkId, heldFrom: o.heldFrom, ...o.detail, reason: o.reason, hint: o.hint },
  };
}

/** A record as a sink reads it (its batch-failure id, where it was read, its text). */
interface DeadLetterRecord {
  sequenceNumber: string;
  origin: string;
  text: string;
}

/**
 * Puts a record aside as the sink's dead letter, logged and counted (`stored`); a dead letter
 * that cannot be stored fails the record instead (`failed`), so it is retried, never lost.
 */
export function deadLetterer(o: {
  controlPlane: ControlPlane;
  sinkId: string;
  now: () => Date;
  log: { warn(message: string, data: Record<string, unknown>): void };
  stored: (source: string | null) => void;
  failed: (sequenceNumber: string, reason: string) => void;
}): DeadLetter {
  return async (record, source, table, err) => {
    try {
      await o.controlPlane.putDeadLetter({
        at: o.now().toISOString(),
        stage: o.sinkId,
        source,
        table,
        code: codeOf(err),
        reason: describeError(err),
        origin: record.origin,
        record: record.text,
        truncated: false,
      });
      o.stored(source);
      o.log.warn('record sent to dead letters', { origin: record.origin, source, table, code: codeOf(err), reason: describeError(err) });
    } catch (dlErr) {
      o.failed(record.sequenceNumber, `dead letter could not be stored: ${describeError(dlErr)}`);
    }
  };
}

/** Best effort: the source and table a record that failed validation is about. */
export function aboutRecord(text: string): { source: string | null; table: string | null } {
  try {
    const v = JSON.parse(text) as Record<string, unknown>;
    return { source: typeof v.source === 'string' ? v.source : null, table: typeof v.table === 'string' ? v.table : null };
  } catch {
    return { source: null, table: null };
  }
}

/** A sink's column rule: throws when `name` is not a column the sink can hold. */
export type ColumnRule = (name: string, table: string) => void;

/** Reads a registered schema version: cached, every column through the sink's column rule. */
export type SchemaReader = (sourceId: string, table: string, version: number) => Promise<SchemaVersion>;

/**
 * A sink's reader of registered schema versions, cached for the life of the apply: a version that
 * is not registered throws `InvalidRecordError` (its record is dead-lettered), and each column of a
 * version passes the sink's column rule before the version is used.
 */
export function schemaReader(cp: Pick<ControlPlane, 'getSchemaVersion'>, assertColumn: ColumnRule): SchemaReader {
  const cache = new Map<string, SchemaVersion>();
  return async (sourceId, table, version) => {
    const k = `${sourceId}\u0000${table}\u0000${version}`;
    const hit = cache.get(k);
    if (hit) return hit;
    const v = await cp.getSchemaVersion(sourceId, table, version);
    if (!v) throw new InvalidRecordError('schemaVersion', `version ${version} of ${sourceId}/${table} is not registered`);
    for (const c of v.columns) assertColumn(c.name, table);
    cache.set(k, v);
    return v;
  };
}

/**
 * The items of one table whose events fit their schema version (`checkEventColumns` with the
 * sink's column rule), and those versions; an item that does not is put aside (`deadLetter`).
 */
export async function validItems<I extends { record: DeadLetterRecord; event: ChangeEvent }>(
  sourceId: string,
  table: string,
  items: readonly I[],
  o: {
    schemaOf: SchemaReader;
    assertColumn: ColumnRule;
    deadLetter: (record: DeadLetterRecord, sourceId: string, table: string, err: unknown) => Promise<void>;
  },
): Promise<{ valid: I[]; schemas: Map<number, SchemaVersion> }> {
  const valid: I[] = [];
  const schemas = new Map<number, SchemaVersion>();
  for (const i of items) {
    try {
      const schema = schemas.get(i.event.schemaVersion) ?? (await o.schemaOf(sourceId, table, i.event.schemaVersion));
      checkEventColumns(i.event, schema, o.assertColumn);
      schemas.set(schema.version, schema);
      valid.push(i);
    } catch (err) {
      if (!(err instanceof CdcError)) throw err;
      await o.deadLetter(i.record, sourceId, table, err);
    }
  }
  return { valid, schemas };
}

/** The dead-letter function of `deadLetterer`. */
export type DeadLetter = (record: DeadLetterRecord, source: string | null, table: string | null, err: unknown) => Promise<void>;

/**
 * A batch's records decoded (`decodeChangeRecord`; with `onePass`, a text the one-pass decode
 * takes as a lazy event, `lazyEventOf`) and grouped by table (`source\u0000table`), in order of first appearance; a record that does not decode is put aside (`deadLetter`), and a
 * payload store that cannot be read throws (the batch is retried, nothing dead-lettered).
 */
export async function groupByTable<R extends DeadLetterRecord>(
  records: readonly R[],
  o: { payloads: PayloadStore | undefined; sinkId: string; deadLetter: DeadLetter; onePass?: boolean },
): Promise<Map<string, Array<{ record: R; event: ChangeEvent }>>> {
  const groups = new Map<string, Array<{ record: R; event: ChangeEvent }>>();
  // The group of the record before: a batch's records mostly follow each other by table, so most
  // need no group key (a string made and hashed per record on the critical path).
  let last: { source: string; table: string; list: Array<{ record: R; event: ChangeEvent }> } | null = null;
  for (const record of records) {
    let event: ChangeEvent;
    try {
      const lazy = o.onePass === true ? lazyEventOf(record.text) : null;
      const decoded = lazy ?? decodeChangeRecord(record.text, o.payloads, o.sinkId);
      event = decoded instanceof Promise ? await decoded : decoded;
    } catch (err) {
      if (!(err instanceof CdcError)) throw err;
      const about = aboutRecord(record.text);
      await o.deadLetter(record, about.source, about.table, err);
      continue;
    }
    if (last !== null && last.source === event.source && last.table === event.table) {
      last.list.push({ record, event });
      continue;
    }
    const k = `${event.source}\u0000${event.table}`;
    let list = groups.get(k);
    if (list) list.push({ record, event });
    else groups.set(k, (list = [{ record, event }]));
    last = { source: event.source, table: event.table, list };
  }
  return groups;
}

/** Per source: what a batch did (the handler turns it into metrics). */
export interface SourceCounts {
  applied: number;
  held: number;
  dead: number;
  /** End-to-end lag of heartbeat events, ms. */
  lag: number[];
}

/**
 * The book a sink keeps of one batch: the records that failed (retried) with why, the counts per
 * source (`countFor`; an unknown source counts as `unknown`), and the dead-letter function that
 * counts what it stores and fails what it cannot store.
 */
export function batchBook(o: {
  controlPlane: ControlPlane;
  sinkId: string;
  now: () => Date;
  log: { warn(message: string, data: Record<string, unknown>): void; info(message: string, data: Record<string, unknown>): void };
  /** The sink runs several batches of one shard at once: its holds say so (`ControlPlane.holdSinkTable`). */
  parallelBatches?: boolean;
  /**
   * A resume replay's catch-up records (`ApplyOptions.catchUp`): one that cannot be applied is not
   * dead-lettered again (the live consumer that reads it puts it aside), only logged.
   */
  catchUp?: boolean;
}): {
  failed: Map<string, string>;
  counts: Map<string, SourceCounts>;
  countFor: (source: string | null) => SourceCounts;
  deadLetter: DeadLetter;
  hold: (sourceId: string, table: string, items: readonly HeldItem[], why: string) => Promise<void>;
  holdAudited: (
    sourceId: string,
    table: string,
    items: readonly HeldItem[],
    hold: { reason: string; hint: string; detail?: Record<string, unknown> },
  ) => Promise<void>;
} {
  const failed = new Map<string, string>();
  const counts = new Map<string, SourceCounts>();
  const countFor = (source: string | null): SourceCounts => {
    const k = source ?? 'unknown';
    let c = counts.get(k);
    if (!c) counts.set(k, (c = { applied: 0, held: 0, dead: 0, lag: [] }));
    return c;
  };
  const deadLetter: DeadLetter =
    o.catchUp === true
      ? async (record, source, table, err) =>
          o.log.info('a catch-up record of a resume replay not applied; its live consumer dead-letters it', {
            origin: record.origin,
            source,
            table,
            reason: describeError(err),
          })
      : deadLetterer({
          ...o,
          stored: (source) => countFor(source).dead++,
          failed: (sequenceNumber, reason) => failed.set(sequenceNumber, reason),
        });
  /** Holds the table for this sink from the items' lowest position (docs/operations.md, "Blast radius of one table"), counted and logged. */
  const hold = async (sourceId: string, table: string, items: readonly HeldItem[], why: string): Promise<void> => {
    await o.controlPlane.holdSinkTable(o.sinkId, sourceId, table, minPosition(items), heldShardsOf(items.map((i) => i.record)), o.parallelBatches === true);
    countFor(sourceId).held += items.length;
    o.log.info('events held', { source: sourceId, table, count: items.length, from: minPosition(items), why });
  };
  /** Holds the table as `hold` does, with its audit entry (`holdTableEntry`). */
  const holdAudited = async (
    sourceId: string,
    table: string,
    items: readonly HeldItem[],
    h: { reason: string; hint: string; detail?: Record<string, unknown> },
  ) => {
    await hold(sourceId, table, items, h.reason);
    await o.controlPlane.appendAudit(holdTableEntry({ at: o.now(), sinkId: o.sinkId, source: sourceId, table, heldFrom: minPosition(items), ...h }));
  };
  return { failed, counts, countFor, deadLetter, hold, holdAudited };
}

/** An item a sink holds: its record (where it was read) and its event's position. */
type HeldItem = { record: DeadLetterRecord; event: { position: string } };
