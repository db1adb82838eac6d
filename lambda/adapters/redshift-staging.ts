/**
 * Staged objects for Redshift's `COPY … MANIFEST` (docs/warehouse-apply.md, "Redshift: the load"):
 * one table's rows as gzip CSV parts (`csvParts`: sized for Redshift, a multiple of the cluster's
 * slices when large enough) and the manifests over them. The in-process loader and the applier
 * that stages for the loader function (docs/warehouse-apply.md, "Redshift: the applier") both write
 * through here, so the objects follow one set of rules.
 */
import { gzipSync } from 'node:zlib';
import type { Archive } from '../core/rebuild/archive.ts';
import { csvParts, manifest, type PartOptions, type StagedRow } from '../core/warehouse/redshift-load.ts';

/** One object written: its key in the bucket, its `s3://` URL and its compressed length (the manifest's `content_length`). */
export interface StagedPart {
  key: string;
  url: string;
  bytes: number;
}

/** Where staged objects go: the store of the staging prefix and the bucket it is (keys are object keys in it). */
export interface StagingPlace {
  store: Archive;
  bucket: string;
}

/** The name of a table's folder in a load or a request: its index there and its folded view name. */
export function tableFolder(index: number, view: string): string {
  return `t${index}-${view.toLowerCase()}`;
}

/** Writes `rows` as gzip CSV parts `<folder>/part-NNNN.csv.gz` (`loadId`: see `csvParts`); durable when it resolves. */
export async function putParts(
  place: StagingPlace,
  folder: string,
  loadId: number | null,
  rows: readonly StagedRow[],
  o: PartOptions = {},
): Promise<StagedPart[]> {
  const out: StagedPart[] = [];
  for (const [j, text] of csvParts(loadId, rows, o).entries()) {
    const body = gzipSync(text);
    const key = `${folder}/part-${String(j).padStart(4, '0')}.csv.gz`;
    await place.store.put(key, body);
    out.push({ key, url: `s3://${place.bucket}/${key}`, bytes: body.length });
  }
  return out;
}

/** Writes the manifest `key` over `parts` (every entry mandatory, with its length) and returns its `s3://` URL. */
export async function putManifest(place: StagingPlace, key: string, parts: readonly { url: string; bytes: number }[]): Promise<string> {
  await place.store.put(key, JSON.stringify(manifest(parts)));
  return `s3://${place.bucket}/${key}`;
}
