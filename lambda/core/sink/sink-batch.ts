/**
 * What both sink applies (lambda/core/warehouse/warehouse-apply.ts, lambda/core/search/apply.ts)
 * do the same way with a batch's records: describe an error, name its code, find a group's
 * lowest and highest position, and put a record aside as a dead letter (docs/failures.md).
 */
import type { AuditEntry, ControlPlane } from '../shared/control-plane.ts';
import { CdcError } from '../shared/errors.ts';

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
}): (record: DeadLetterRecord, source: string | null, table: string | null, err: unknown) => Promise<void> {
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
