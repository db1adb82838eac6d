/**
 * Where payloads too large for their carrier are kept whole (docs/large-records.md):
 * - a dead letter's record over what one control-plane item holds (DynamoDB's 400 KB item limit);
 * - a change event over the change log's record limit (1 MiB on Kinesis): the event is stored
 *   here and the log carries a claim check (`ClaimCheck`) that appliers resolve.
 * On AWS an encrypted S3 bucket (`lambda/adapters/payload-store-s3.ts`); locally the archive
 * interface (a folder, or s3rver). A port: no I/O here.
 */
import { createHash } from 'node:crypto';
import { CdcError, InvalidRecordError } from './errors.ts';
import { isPlainObject, describeValue as describe } from './json-shape.ts';
import { assertPosition, type Position } from './position.ts';

export interface PayloadStore {
  /** Stores `body` under `key` (a relative object key) and returns a reference that `get` reads back. Durable when it resolves. */
  put(key: string, body: Buffer): Promise<string>;
  /** The bytes a reference from `put` names. Refuses a reference outside this store (`PayloadRefError`). */
  get(ref: string): Promise<Buffer>;
}

/** A payload reference that does not name an object of this store. */
export class PayloadRefError extends CdcError {
  constructor(ref: string, why: string) {
    super('PAYLOAD_REF', `payload reference ${JSON.stringify(ref)} ${why}`);
  }
}

/** The stored payload is not the one the reference promised (size or SHA-256 differ). */
export class PayloadMismatchError extends CdcError {
  constructor(ref: string, why: string) {
    super('PAYLOAD_MISMATCH', `payload ${ref} ${why}`);
  }
}

export const sha256 = (body: Buffer | string): string => createHash('sha256').update(body).digest('hex');

/**
 * The change-log record that stands for an event stored out of line: the event's identity (so
 * partitioning, ordering and dead letters still work) and where its JSON is. It is not a change
 * event (no `op`), so a consumer that does not resolve claim checks refuses it loudly instead of
 * applying something partial.
 */
export interface ClaimCheck {
  v: 1;
  claim: { ref: string; bytes: number; sha256: string };
  source: string;
  table: string;
  key: Record<string, string | number | boolean>;
  position: Position;
}

/** True when a parsed change-log record is a claim check. */
export function isClaimCheck(value: unknown): boolean {
  return isPlainObject(value) && isPlainObject(value.claim) && !('op' in value);
}

/** Checks a parsed claim check, naming the field that is wrong. */
export function validateClaimCheck(value: unknown): ClaimCheck {
  if (!isPlainObject(value) || !isPlainObject(value.claim)) throw new InvalidRecordError('claim', `expected a claim check, got ${describe(value)}`);
  const c = value.claim;
  if (typeof c.ref !== 'string' || c.ref === '') throw new InvalidRecordError('claim.ref', `expected a payload reference, got ${describe(c.ref)}`);
  if (typeof c.bytes !== 'number' || !Number.isInteger(c.bytes) || c.bytes < 0)
    throw new InvalidRecordError('claim.bytes', `expected a byte count, got ${describe(c.bytes)}`);
  if (typeof c.sha256 !== 'string' || !/^[0-9a-f]{64}$/.test(c.sha256))
    throw new InvalidRecordError('claim.sha256', `expected 64 hex digits, got ${describe(c.sha256)}`);
  if (typeof value.source !== 'string' || typeof value.table !== 'string') throw new InvalidRecordError('claim', 'a claim check names its source and table');
  return {
    v: 1,
    claim: { ref: c.ref, bytes: c.bytes, sha256: c.sha256 },
    source: value.source,
    table: value.table,
    key: (value.key ?? {}) as ClaimCheck['key'],
    position: assertPosition(value.position),
  };
}

/** Reads a claim check's payload back and checks it is the promised one; returns its text. */
export async function resolveClaim(store: PayloadStore, claim: ClaimCheck): Promise<string> {
  const body = await store.get(claim.claim.ref);
  if (body.byteLength !== claim.claim.bytes)
    throw new PayloadMismatchError(claim.claim.ref, `is ${body.byteLength} bytes, the claim check says ${claim.claim.bytes}`);
  if (sha256(body) !== claim.claim.sha256) throw new PayloadMismatchError(claim.claim.ref, 'does not have the SHA-256 the claim check names');
  return body.toString('utf8');
}

/** Object key of an event stored out of line: by source, table and position (stable, so a retry overwrites). */
export function claimKey(sourceId: string, table: string, position: Position, digest: string): string {
  return `claims/${sourceId}/${table.replace(/[^A-Za-z0-9_.-]/g, '_')}/${position}-${digest.slice(0, 16)}.json`;
}

/** Object key of a dead letter's whole record. */
export function deadLetterKey(stage: string, at: string, id: string): string {
  return `dead-letters/${stage.replace(/[^A-Za-z0-9_.-]/g, '_')}/${at.replace(/[^0-9TZ]/g, '')}-${id}.txt`;
}
