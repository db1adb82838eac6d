/**
 * Publishes change events to a Kinesis stream (docs/architecture.md §5.1): each event is a JSON
 * text with partition key = source + table + primary key (`partitionKeyOf`, hashed with SHA-256
 * when longer than Kinesis allows), put as a record of its own or, on the change log, packed with
 * others bound for the same shard (`aggregate`, below).
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
 *
 * Aggregation (`aggregate`, the change log only: the raw stream stays one record per change). Events
 * bound for the same shard are packed into KPL aggregates (lambda/core/shared/change-log-aggregates.ts),
 * put with an explicit hash key in that shard's range and naming it in their partition key. The shard
 * map comes from ListShards and is kept; PutRecords reports the shard each entry landed on, and an
 * aggregate that landed elsewhere (the map was stale: a split, a merge, on-demand scaling) counts as
 * a failed entry: the map is listed again and everything from it on is planned and put again, by the
 * rule above. Consumers skip the misplaced aggregate (contracts/change-log-record.ts).
 */
import { createHash } from 'node:crypto';
import { ListShardsCommand, PutRecordsCommand, type KinesisClient, type PutRecordsRequestEntry, type Shard } from '@aws-sdk/client-kinesis';
import {
  DEFAULT_AGGREGATE_LIMITS,
  openShardRanges,
  planUnits,
  type AggregateLimits,
  type PutUnit,
  type ShardRange,
} from '../core/shared/change-log-aggregates.ts';
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
  /**
   * Pack events bound for the same shard into KPL aggregates (the change log, docs/architecture.md
   * "5.1 The change event"); never for the raw stream, whose records are one change each. @default false
   */
  aggregate?: boolean;
  /** Bounds of one aggregate. @default 50 KiB and 1,000 events */
  aggregateLimits?: Partial<AggregateLimits>;
}

/** The change log on a Kinesis stream, addressed by name. */
export class KinesisChangeLog {
  private readonly maxAttempts: number;
  private readonly baseDelayMs: number;
  private readonly maxDelayMs: number;
  private readonly maxRecordBytes: number;
  private readonly sleep: (ms: number) => Promise<void>;
  private readonly aggregation: boolean;
  private readonly limits: AggregateLimits;
  private ranges: ShardRange[] | null = null;

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
    this.aggregation = options.aggregate ?? false;
    this.limits = { ...DEFAULT_AGGREGATE_LIMITS, ...options.aggregateLimits };
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
    /** Indexes of the events not known to be on the stream, in order. */
    let pending = records.map((_, i) => i);
    let failures = 0;
    while (pending.length > 0) {
      const units = this.aggregation
        ? planUnits(records, pending, await this.shardMap(), this.limits)
        : pending.map((i): PutUnit => ({ partitionKey: records[i]!.partitionKey, data: records[i]!.data, members: [i] }));
      let sent = 0;
      let why = '';
      let cause: unknown;
      let misplaced = false;
      while (sent < units.length) {
        const end = chunkEnd(units, sent);
        const entries: PutRecordsRequestEntry[] = [];
        for (let i = sent; i < end; i++) {
          const u = units[i]!;
          entries.push(
            u.explicitHashKey === undefined
              ? { PartitionKey: u.partitionKey, Data: u.data }
              : { PartitionKey: u.partitionKey, ExplicitHashKey: u.explicitHashKey, Data: u.data },
          );
        }
        let firstFailed: number;
        try {
          const out = await this.client.send(new PutRecordsCommand({ StreamName: this.stream, Records: entries }));
          const results = out.Records ?? [];
          firstFailed = results.length === entries.length ? results.findIndex((r) => r.ErrorCode !== undefined && r.ErrorCode !== null) : 0;
          if (firstFailed < 0) firstFailed = entries.length;
          // An aggregate that landed on another shard than it was meant for (the shard map is stale) counts as failed.
          for (let k = 0; k < firstFailed; k++) {
            const meant = units[sent + k]!.shardId;
            const landed = results[k]!.ShardId;
            if (meant !== undefined && landed !== undefined && landed !== meant) {
              firstFailed = k;
              misplaced = true;
              why = `an aggregate meant for ${meant} landed on ${landed}: the shard map was stale`;
              break;
            }
          }
          if (firstFailed === entries.length) {
            sent = end;
            failures = 0;
            continue;
          }
          const failed = results[firstFailed];
          if (!misplaced)
            why = failed?.ErrorCode
              ? `${failed.ErrorCode}: ${failed.ErrorMessage ?? ''}`.trim()
              : `the response listed ${results.length} results for ${entries.length} entries`;
        } catch (e) {
          // A request the service refuses as such (no stream, no permission, bad input) fails the same way again.
          if (isPermanent(e))
            throw new ChangeLogPublishError(
              `PutRecords to ${this.stream} was refused: ${errorText(e)}`,
              publishedPrefix(units, sent, records.length),
              records.length,
              e,
            );
          // Otherwise nothing is known about this call: re-send all of it.
          firstFailed = 0;
          why = errorText(e);
          cause = e;
        }
        sent += firstFailed;
        break;
      }
      if (sent === units.length) return;
      // Everything from the first failed unit on is put again, in order (planned again: the map may have changed).
      const rest = units
        .slice(sent)
        .flatMap((u) => u.members)
        .sort((a, b) => a - b);
      if (rest.length < pending.length) failures = 0;
      pending = rest;
      if (misplaced) this.ranges = null;
      failures++;
      if (failures >= this.maxAttempts) {
        const published = publishedPrefix(units, sent, records.length);
        throw new ChangeLogPublishError(
          `PutRecords to ${this.stream} failed ${failures} times in a row; ${published} of ${records.length} events are published, the first unpublished is ${records[pending[0]!]!.label}. Last error: ${why}`,
          published,
          records.length,
          cause,
        );
      }
      await this.sleep(this.backoff(failures));
    }
  }

  /** The open shards' hash key ranges, listed once and again after an aggregate landed elsewhere. */
  private async shardMap(): Promise<ShardRange[]> {
    if (this.ranges) return this.ranges;
    const shards: Shard[] = [];
    let token: string | undefined;
    do {
      const page = await this.client.send(new ListShardsCommand(token ? { NextToken: token } : { StreamName: this.stream }));
      shards.push(...(page.Shards ?? []));
      token = page.NextToken;
    } while (token);
    this.ranges = openShardRanges(shards);
    return this.ranges;
  }

  private backoff(failures: number): number {
    const exp = Math.min(this.maxDelayMs, this.baseDelayMs * 2 ** (failures - 1));
    return exp / 2 + (Math.random() * exp) / 2;
  }
}

/** The end of the PutRecords call that starts at unit `start` (at most 500 entries and 5 MiB). */
function chunkEnd(units: readonly PutUnit[], start: number): number {
  let bytes = 0;
  let end = start;
  while (end < units.length && end - start < PUT_RECORDS_MAX_ENTRIES) {
    const u = units[end]!;
    const b = recordBytes(u) + (u.explicitHashKey?.length ?? 0);
    if (end > start && bytes + b > PUT_RECORDS_MAX_BYTES) break;
    bytes += b;
    end++;
  }
  return end;
}

/** How many events from the start of the input are on the stream when units before `sent` are. */
function publishedPrefix(units: readonly PutUnit[], sent: number, total: number): number {
  let first = total;
  for (let i = sent; i < units.length; i++) first = Math.min(first, units[i]!.members[0]!);
  return first;
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
