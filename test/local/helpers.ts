/** Helpers for the tests of the local pipeline. */
import { SLOT_RECORD_FORMAT, validateSlotRecord, type SlotColumn, type SlotRecord } from '../../lambda/core/capture/slot-record.ts';
import type { JsonValue } from '../../lambda/core/shared/event.ts';
import { formatLsn, parseLsn } from '../../lambda/core/shared/position.ts';
import type { KinesisStreamEvent } from 'aws-lambda';
import type { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

/** Polls `check` until it is true; throws naming `what` after `timeoutMs` (a deadline, not a timing assertion). */
export async function until(what: string, check: () => boolean | Promise<boolean>, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * What a raw record the capture published says, in the slot record's shape, so the capture's
 * tests check transactions, positions and values whatever the record format: a DMS record
 * (lambda/core/capture/dms-record.ts) is read by its metadata and images; a `cdc-slot/1` record
 * (a truncate) as it is. DMS records carry no types, key or unchanged-column list: `type` is
 * `''`, `key` and `unchanged` are empty; a delete's old image leaves out the nulls DMS writes for
 * the columns it does not know.
 */
/** `capturedView` of a raw record, or nothing for a DMS control record (a table definition, no row change). */
export function capturedViews(text: string, sourceId = ''): SlotRecord[] {
  const r = JSON.parse(text) as { metadata?: Record<string, unknown> };
  return r.metadata?.['record-type'] === 'control' ? [] : [capturedView(text, sourceId)];
}

export function capturedView(text: string, sourceId = ''): SlotRecord {
  const r = JSON.parse(text) as Record<string, unknown>;
  if (r.format === SLOT_RECORD_FORMAT) return validateSlotRecord(r);
  const meta = r.metadata as Record<string, string | number>;
  const data = r.data as Record<string, JsonValue>;
  const before = r['before-image'] as Record<string, JsonValue> | undefined;
  const cols = (row: Record<string, JsonValue>, dropNulls = false): SlotColumn[] =>
    Object.entries(row)
      .filter(([, v]) => !dropNulls || v !== null)
      .map(([name, value]) => ({ name, type: '', value }));
  const op = meta.operation as 'insert' | 'update' | 'delete';
  const lsn = String(meta['stream-position']).split('.')[0]!;
  return {
    format: SLOT_RECORD_FORMAT,
    source: sourceId,
    xid: String(meta['transaction-id']),
    commitLsn: formatLsn(parseLsn(lsn)),
    commitTs: String(meta['commit-timestamp']),
    index: Number(meta['transaction-record-id']),
    table: `${meta['schema-name']}.${meta['table-name']}`,
    op,
    key: [],
    columns: op === 'delete' ? null : cols(data),
    oldKey: op === 'delete' ? cols(data, true) : before !== undefined && Object.keys(before).length > 0 ? cols(before) : null,
    unchanged: [],
  };
}

/** The data of a Kinesis event's records, as text (the poller tests' handlers). */
export function values(event: KinesisStreamEvent): string[] {
  return event.Records.map((r) => Buffer.from(r.kinesis.data, 'base64').toString('utf8'));
}

/** A control plane that can crash: from then on every write fails (reads still work, as after a restart). */
export class CrashableControl {
  crashed = false;
  constructor(private readonly inner: MemoryControlPlane) {}
  getCheckpoint(consumer: string, shardId: string): Promise<string | null> {
    return this.inner.getCheckpoint(consumer, shardId);
  }
  async putCheckpoint(consumer: string, shardId: string, sequenceNumber: string): Promise<void> {
    if (this.crashed) throw new Error('crashed');
    await this.inner.putCheckpoint(consumer, shardId, sequenceNumber);
  }
  async putDeadLetter(): Promise<void> {
    throw new Error('no record here is bad input');
  }
}
