/**
 * One entry point for raw capture records of either format: slot-capture records (they carry
 * `format: 'cdc-slot/1'`) go to the slot decoder, DMS records (they carry `metadata`) to the DMS
 * decoder. Used by the normalizer and by `cdc decode`.
 *
 * A slot record names its own source; `ctx.source` applies to DMS records, which do not.
 */
import { InvalidRecordError } from '../shared/errors.ts';
import type { DecodeResult } from './decoded.ts';
import { decodeDmsRecord, type DecodeContext } from './dms-decoder.ts';
import { decodeSlotRecord } from './slot-decoder.ts';
import { SLOT_RECORD_FORMAT } from './slot-record.ts';
import { linkKeyChanges } from '../shared/event.ts';

export type { DecodeContext } from './dms-decoder.ts';

/** Which decoder a raw record is for, or throws `InvalidRecordError` naming why neither fits. */
export function detectRecordFormat(record: unknown): 'slot' | 'dms' {
  if (typeof record !== 'object' || record === null || Array.isArray(record)) {
    throw new InvalidRecordError('record', `expected a JSON object, got ${record === null ? 'null' : Array.isArray(record) ? 'an array' : typeof record}`);
  }
  const r = record as Record<string, unknown>;
  if ('format' in r) {
    if (r.format === SLOT_RECORD_FORMAT) return 'slot';
    throw new InvalidRecordError(
      'format',
      `unknown record format ${JSON.stringify(r.format)} (this reader knows ${JSON.stringify(SLOT_RECORD_FORMAT)} and DMS records)`,
    );
  }
  if ('metadata' in r) return 'dms';
  throw new InvalidRecordError('record', `neither a slot-capture record (no "format") nor a DMS record (no "metadata")`);
}

/**
 * Decodes a raw record of either format (see the module comment). The delete half of a
 * primary-key change whose insert half lacks columns is marked with them (`linkKeyChanges`).
 */
export function decodeRawRecord(record: unknown, ctx: DecodeContext): DecodeResult {
  const result = detectRecordFormat(record) === 'slot' ? decodeSlotRecord(record) : decodeDmsRecord(record, ctx);
  return result.kind === 'changes' && result.changes.length > 1 ? { ...result, changes: linkKeyChanges(result.changes) } : result;
}
