/**
 * Archive integrity (docs/rebuild.md, "Archive integrity"; docs/deploy.md, "The archive"): the
 * archive copier records the SHA-256 of each table object of a batch in the batch's marker, and a
 * replay checks every by-table object it reads against that digest before using any of its
 * records. Pure: hashing and comparison only; reading is the replay reader's.
 */
import { createHash } from 'node:crypto';
import { CdcError } from '../shared/errors.ts';

/** Hex SHA-256 of an archive object's bytes as stored (gzip or not). */
export function archiveDigest(body: string | Buffer): string {
  return createHash('sha256').update(body).digest('hex');
}

/**
 * An archive object whose bytes are not the bytes the copier wrote: rewritten after the fact (or
 * corrupted). The replay stops: nothing of a tampered object may reach a rebuilt table.
 */
export class ArchiveObjectTamperedError extends CdcError {
  constructor(
    /** The object's key (with the archive prefix). */
    readonly key: string,
    /** The marker that recorded its digest (with the archive prefix). */
    readonly marker: string,
    readonly expected: string,
    readonly actual: string,
  ) {
    super(
      'ARCHIVE_OBJECT_TAMPERED',
      `archive object ${key} was changed after it was written: its SHA-256 is ${actual}, the batch marker ${marker} recorded ${expected}. ` +
        'The replay stopped before using any of its records; restore the version the copier wrote (the bucket keeps every version while Object Lock retains it) and find who wrote the new one (docs/deploy.md, "The archive")',
    );
  }
}

/** A batch marker's body that cannot be read as one. */
export class ArchiveMarkerError extends CdcError {
  constructor(
    readonly marker: string,
    why: string,
  ) {
    super('INVALID_ARCHIVE_MARKER', `batch marker ${marker}: ${why}`);
  }
}

/**
 * The digests a marker body records, by table folder (`tables/<source>/<table>/` or
 * `tables/_other/`); null for a marker written before digests were recorded (its batch's objects
 * cannot be verified).
 */
export function markerDigests(marker: string, body: string): ReadonlyMap<string, string> | null {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    throw new ArchiveMarkerError(marker, 'is not JSON');
  }
  if (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed)) throw new ArchiveMarkerError(marker, 'is not a JSON object');
  const digests = (parsed as { digests?: unknown }).digests;
  if (digests === undefined) return null;
  if (digests === null || typeof digests !== 'object' || Array.isArray(digests)) throw new ArchiveMarkerError(marker, 'digests is not an object');
  const out = new Map<string, string>();
  for (const [folder, d] of Object.entries(digests)) {
    if (typeof d !== 'string' || !/^[0-9a-f]{64}$/.test(d)) throw new ArchiveMarkerError(marker, `digests[${JSON.stringify(folder)}] is not a hex SHA-256`);
    out.set(folder, d);
  }
  return out;
}

/**
 * Checks an object's bytes against the digest its marker recorded for its folder. Throws
 * `ArchiveObjectTamperedError` on a mismatch, and also when the marker records digests but none
 * for this folder (an object its batch never wrote).
 */
export function verifyArchiveObject(key: string, folder: string, body: Buffer, marker: string, digests: ReadonlyMap<string, string>): void {
  const expected = digests.get(folder);
  const actual = archiveDigest(body);
  if (expected === undefined) throw new ArchiveObjectTamperedError(key, marker, `no digest for ${folder} (the batch wrote no object there)`, actual);
  if (expected !== actual) throw new ArchiveObjectTamperedError(key, marker, expected, actual);
}
