/** What the local poller (local/poller.ts) makes of a failing record: bad input or not, and what it is about. */
import { InvalidRecordError, UnknownOperationError, UnsafeIdentifierError } from '../lambda/core/shared/errors.ts';

/**
 * Whether an error a handler threw means bad input: one of the platform's named errors for a
 * record that does not have the documented shape, or a Powertools full-batch failure whose
 * record errors all are. Anything else (a database, DynamoDB or Kinesis error, a timeout) is an
 * infrastructure error and is retried without limit.
 */
export function isBadInputError(err: unknown): boolean {
  const bad = (e: unknown): boolean => e instanceof InvalidRecordError || e instanceof UnknownOperationError || e instanceof UnsafeIdentifierError;
  if (bad(err)) return true;
  const children = (err as { name?: string; recordErrors?: unknown[] } | null)?.recordErrors;
  return (err as { name?: string } | null)?.name === 'FullBatchFailureError' && Array.isArray(children) && children.length > 0 && children.every(bad);
}

/** Best effort: the source and table a raw or change record is about (both formats carry them). */
export function aboutRecord(text: string): { source: string | null; table: string | null } {
  try {
    const v = JSON.parse(text) as Record<string, unknown>;
    return {
      source: typeof v.source === 'string' ? v.source : null,
      table: typeof v.table === 'string' ? v.table : null,
    };
  } catch {
    return { source: null, table: null };
  }
}
