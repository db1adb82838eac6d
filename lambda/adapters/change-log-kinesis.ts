/**
 * Publishes change events to the change log, a Kinesis stream (docs/architecture.md §5.1): one JSON event per
 * record, partition key = source + table + primary key (`partitionKeyOf`, hashed with SHA-256
 * when longer than Kinesis allows).
 *
 * Order. Kinesis keeps the order of records per shard as they arrive, but PutRecords neither
 * guarantees the order inside one call nor all-or-nothing: some entries can fail while later ones
 * succeed. On a partial failure this publisher re-sends EVERYTHING from the first failed entry
 * onward, in order. A key whose later event had already succeeded then sees it twice (once
 * before and once after the re-sent earlier event); the last copy of every event comes after
 * every earlier event, so a position-ordered consumer that ignores lower-or-equal positions
 * ends in the right state. Duplicates are harmless downstream; reordering would not be.
 * Failures are retried with exponential backoff and jitter, a bounded number of times without
 * progress, then `ChangeLogPublishError` is thrown.
 *
 * Limits: at most 500 entries and 5 MiB (data + partition keys) per call; at most 1 MiB per
 * record (`ChangeLogRecordTooLargeError`, checked before anything is sent).
 */
import { createHash } from 'node:crypto';
import { PutRecordsCommand, type KinesisClient, type PutRecordsRequestEntry } from '@aws-sdk/client-kinesis';
import { CdcError } from '../core/shared/errors.ts';
import { partitionKeyOf, type ChangeEvent } from '../core/shared/event.ts';
import type { ClaimCheck } from '../core/shared/payload-store.ts';

export const PUT_RECORDS_MAX_ENTRIES = 500;
export const PUT_RECORDS_MAX_BYTES = 5 * 1024 * 1024;
export const MAX_RECORD_BYTES = 1024 * 1024;

/** An event ready for the stream: its partition key and JSON bytes. */
export interface EncodedEvent {
  partitionKey: string;
  data: Uint8Array;
  /** `source/table@position`, for error messages. */
  label: string;
}

/** An event whose record would exceed the stream's record size limit. Bad input: dead-letter it. */
export class ChangeLogRecordTooLargeError extends CdcError {
  constructor(
    readonly label: string,
    readonly bytes: number,
    readonly limit: number,
  ) {
    super('RECORD_TOO_LARGE', `change event ${label} is ${bytes} bytes as a stream record, above the ${limit}-byte limit`);
  }
}

/** PutRecords kept failing. `published` events (a prefix of the input, in order) are known to be on the stream. */
export class ChangeLogPublishError extends CdcError {
  constructor(
    message: string,
    readonly published: number,
    readonly total: number,
    override readonly cause?: unknown,
  ) {
    super('CHANGE_LOG_PUBLISH_FAILED', message);
  }
}

/** SHA-256 of a text, hex-encoded: the hash `partitionKeyOf` uses for long keys. */
export function sha256Hex(text: string): string {
  return createHash('sha256').update(text, 'utf8').digest('hex');
}

/** Encodes one event as a stream record. Throws `ChangeLogRecordTooLargeError` when it would not fit. */
export function encodeChangeEvent(event: ChangeEvent, maxRecordBytes = MAX_RECORD_BYTES): EncodedEvent {
  const partitionKey = partitionKeyOf(event, sha256Hex);
  const data = Buffer.from(JSON.stringify(event), 'utf8');
  const label = `${event.source}/${event.table}@${event.position}`;
  const bytes = recordBytes({ partitionKey, data });
  if (bytes > maxRecordBytes) throw new ChangeLogRecordTooLargeError(label, bytes, maxRecordBytes);
  return { partitionKey, data, label };
}

/** Encodes the claim check of an event stored out of line: the event's partition key, the small pointer as data. */
export function encodeClaimCheck(claim: ClaimCheck, maxRecordBytes = MAX_RECORD_BYTES): EncodedEvent {
  const partitionKey = partitionKeyOf(claim, sha256Hex);
  const data = Buffer.from(JSON.stringify(claim), 'utf8');
  const label = `${claim.source}/${claim.table}@${claim.position} (claim check)`;
  const bytes = recordBytes({ partitionKey, data });
  if (bytes > maxRecordBytes) throw new ChangeLogRecordTooLargeError(label, bytes, maxRecordBytes);
  return { partitionKey, data, label };
}

function recordBytes(r: { partitionKey: string; data: Uint8Array }): number {
  return r.data.byteLength + Buffer.byteLength(r.partitionKey, 'utf8');
}

export interface KinesisChangeLogOptions {
  /** Consecutive failed attempts (without any progress) before giving up. @default 8 */
  maxAttempts?: number;
  /** First backoff delay; doubles per attempt, with jitter. @default 100 */
  baseDelayMs?: number;
  /** Largest backoff delay. @default 5000 */
  maxDelayMs?: number;
  /** Record size limit of the stream. @default 1 MiB */
  maxRecordBytes?: number;
  /** How to wait between attempts (tests pass a fast one). @default setTimeout */
  sleep?: (ms: number) => Promise<void>;
}

/** The change log on a Kinesis stream, addressed by name. */
export class KinesisChangeLog {
  private readonly maxAttempts: number;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly maxRecordBytes: number;
  private readonly sleep: (ms: number) => Promise<void>;

  constructor(
    private readonly client: KinesisClient,
    private readonly stream: string,
    options: KinesisChangeLogOptions = {},
  ) {
    if (!stream) throw new CdcError('INVALID_ARGUMENT', 'the change-log stream name is empty');
    this.maxAttempts = options.maxAttempts ?? 8;
    this.baseDelayMs = options.baseDelayMs ?? 100;
    this.maxDelayMs = options.maxDelayMs ?? 5_000;
    this.maxRecordBytes = options.maxRecordBytes ?? MAX_RECORD_BYTES;
    this.sleep = options.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms)));
  }

  /** Encodes an event for this stream (see `encodeChangeEvent`). */
  encode(event: ChangeEvent): EncodedEvent {
    return encodeChangeEvent(event, this.maxRecordBytes);
  }

  /** Encodes a claim check for this stream (see `encodeClaimCheck`). */
  encodeClaim(claim: ClaimCheck): EncodedEvent {
    return encodeClaimCheck(claim, this.maxRecordBytes);
  }

  /** Publishes events in order. Throws `ChangeLogRecordTooLargeError` before sending anything if one does not fit. */
  async publish(events: readonly ChangeEvent[]): Promise<void> {
    await this.publishEncoded(events.map((e) => this.encode(e)));
  }

  /** Publishes encoded events in order (see the module comment for the retry rule). */
  async publishEncoded(records: readonly EncodedEvent[]): Promise<void> {
    for (const r of records) {
      const bytes = recordBytes(r);
      if (bytes > this.maxRecordBytes) throw new ChangeLogRecordTooLargeError(r.label, bytes, this.maxRecordBytes);
    }
    let start = 0;
    let failures = 0;
    while (start < records.length) {
      const end = this.chunkEnd(records, start);
      const entries: PutRecordsRequestEntry[] = [];
      for (let i = start; i < end; i++) entries.push({ PartitionKey: records[i]!.partitionKey, Data: records[i]!.data });
      let firstFailed: number;
      let why: string;
      let cause: unknown;
      try {
        const out = await this.client.send(new PutRecordsCommand({ StreamName: this.stream, Records: entries }));
        const results = out.Records ?? [];
        if ((out.FailedRecordCount ?? 0) === 0 && results.length === entries.length) {
          start = end;
          failures = 0;
          continue;
        }
        const idx = results.length === entries.length ? results.findIndex((r) => r.ErrorCode !== undefined && r.ErrorCode !== null) : 0;
        firstFailed = idx < 0 ? 0 : idx;
        const failed = results[firstFailed];
        why = failed?.ErrorCode
          ? `${failed.ErrorCode}: ${failed.ErrorMessage ?? ''}`.trim()
          : `the response listed ${results.length} results for ${entries.length} entries`;
      } catch (e) {
        // A request the service refuses as such (no stream, no permission, bad input) fails the same way again.
        if (isPermanent(e)) throw new ChangeLogPublishError(`PutRecords to ${this.stream} was refused: ${errorText(e)}`, start, records.length, e);
        // Otherwise nothing is known about this call: re-send all of it.
        firstFailed = 0;
        why = errorText(e);
        cause = e;
      }
      if (firstFailed > 0) failures = 0;
      start += firstFailed;
      failures++;
      if (failures >= this.maxAttempts) {
        throw new ChangeLogPublishError(
          `PutRecords to ${this.stream} failed ${failures} times in a row; ${start} of ${records.length} events are published, the first unpublished is ${records[start]!.label}. Last error: ${why}`,
          start,
          records.length,
          cause,
        );
      }
      await this.sleep(this.backoff(failures));
    }
  }

  private chunkEnd(records: readonly EncodedEvent[], start: number): number {
    let bytes = 0;
    let end = start;
    while (end < records.length && end - start < PUT_RECORDS_MAX_ENTRIES) {
      const b = recordBytes(records[end]!);
      if (end > start && bytes + b > PUT_RECORDS_MAX_BYTES) break;
      bytes += b;
      end++;
    }
    return end;
  }

  private backoff(failures: number): number {
    const exp = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** (failures - 1));
    return exp / 2 + (Math.random() * exp) / 2;
  }
}

const THROTTLING = new Set(['ProvisionedThroughputExceededException', 'LimitExceededException', 'KMSThrottlingException', 'ThrottlingException']);

/** A client-side fault that is not throttling: retrying cannot help. */
function isPermanent(e: unknown): boolean {
  const err = e as { $fault?: string; name?: string };
  return err?.$fault === 'client' && !THROTTLING.has(err.name ?? '');
}

function errorText(e: unknown): string {
  return e instanceof Error ? `${e.name}: ${e.message}` : String(e);
}
