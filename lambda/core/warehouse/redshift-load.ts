/**
 * What the Redshift loader stages (docs/warehouse-apply.md, "Redshift: the load"). Pure: events
 * to changelog rows, rows to CSV parts sized for COPY, the manifest, the cadence.
 *
 * Format: gzip-compressed CSV. CSV because it keeps NULL (an unquoted empty field) apart from
 * an empty string (`""`) without `EMPTYASNULL`, takes VARBYTE as hex and SUPER as JSON text,
 * and does not repeat column names per row (JSON does, and COPY's `FORMAT JSON 'auto'` matches
 * them by folded name); gzip because COPY decompresses it in parallel per object.
 */
import { CdcError } from '../shared/errors.ts';
import type { ChangeEvent } from '../shared/event.ts';
import { csvBody } from './warehouse-sql.ts';
import type { RedshiftTable, TruncationRow } from './redshift-sql.ts';
import { REDSHIFT_MAX_ROW_BYTES, RedshiftValueRefusedError, stageValues, type RedshiftColumn, type ValuePolicy } from './redshift-types.ts';

/** Redshift asks for objects of 1 MB to 1 GB compressed; a part is cut at this many bytes of CSV (about 2-8 MB compressed). */
export const PART_TARGET_BYTES = 32 * 1024 * 1024;

/** An event the loader cannot take as it is: a partial update or a primary-key change's insert the writer did not complete. */
export class NotLoadableError extends CdcError {
  constructor(table: string, position: string, why: string) {
    super(
      'REDSHIFT_NOT_LOADABLE',
      `${table} at ${position}: ${why}; the Redshift loader appends full images, plain deletes and truncates only (docs/warehouse-apply.md, "Redshift: the load")`,
    );
  }
}

/**
 * The insert half of a primary-key change that lacks columns, whose old key's delete half is not loaded yet
 * (it is another shard's): the old key's image before the change is not known yet. Transient: the batch is
 * delivered again (docs/primary-key-changes.md; docs/warehouse-apply.md, "Redshift: the applier").
 */
export class KeyChangePendingError extends CdcError {
  constructor(table: string, position: string, oldKey: string) {
    super(
      'REDSHIFT_KEY_CHANGE_PENDING',
      `${table} at ${position}: the insert half of a primary-key change lacks columns and its old key ${oldKey}'s delete half is not loaded yet; delivered again`,
    );
  }
}

/** The insert half of a primary-key change that cannot be completed: the old key had no row before it (a dead letter; reconciliation finds the row). */
export class KeyChangeIncompleteError extends CdcError {
  constructor(table: string, position: string, why: string) {
    super('REDSHIFT_KEY_CHANGE_INCOMPLETE', `${table} at ${position}: the insert half of a primary-key change lacks columns and cannot be completed: ${why}`);
  }
}

/** Whether the loader takes `e` as it is: a full image (insert, snapshot, update without missing columns), a plain delete or a truncate. */
export function loadable(e: ChangeEvent): boolean {
  if (e.op === 'truncate') return true;
  if (e.missing.length > 0 || (e.handover?.length ?? 0) > 0) return false;
  return e.op === 'delete' || e.after !== null;
}

/** One staged changelog row: the CSV fields in `changelogColumns` order except the load id (prepended at load time). */
export interface StagedRow {
  fields: (string | null)[];
}

/** What became of one event: a changelog row, a row of the table's truncations (docs/truncate.md), or why it is refused. */
export type StagedEvent = { row: StagedRow } | { truncation: TruncationRow } | { refused: Error };

/**
 * The markers (`column:reason`) of the values a completed event took from the warehouse (a partial update's
 * absent columns, a key change's insert half's missing ones) where the warehouse holds them as NULL with a
 * marker: the event carries NULL, and its row carries the marker on (docs/warehouse-apply.md, "Redshift: types
 * and values it cannot hold"). By event; an event without any is absent.
 */
export type InheritedMarks = ReadonlyMap<ChangeEvent, readonly string[]>;

/** A held event (docs/primary-key-changes.md, "On Redshift") and, for an insert half, its old key's staged texts. */
export interface Held {
  event: ChangeEvent;
  oldKey: readonly string[] | null;
}

/** What a load carries of a table besides its events: the markers their values carry on, and the events its handover table takes. */
export interface LoadExtras {
  inherited?: InheritedMarks;
  held?: readonly Held[];
}

/** One table's events as a loader takes them. */
export interface LoadItem extends LoadExtras {
  r: RedshiftTable;
  events: readonly ChangeEvent[];
}

/**
 * The changelog row of `e` (its fields after `_cdc_load`): platform columns, key, data. A value
 * Redshift cannot hold meets its column's policy (`stageValues`); a refusal is returned, not
 * thrown, so the rest of the table goes on. `inherited` are the markers of values `e` took from
 * the warehouse (`InheritedMarks`).
 */
export function stageEvent(
  e: ChangeEvent,
  key: readonly RedshiftColumn[],
  data: readonly RedshiftColumn[],
  policyOf: (column: string) => ValuePolicy,
  appliedAt: Date,
  inherited: readonly string[] = [],
): StagedEvent {
  if (!loadable(e)) return { refused: new NotLoadableError(e.table, e.position, `a ${e.op}${e.missing.length > 0 ? ` without ${e.missing.join(', ')}` : ''}`) };
  if (e.op === 'truncate')
    return { truncation: { position: e.position, commitTs: e.commitTs, txId: e.txId, schemaVersion: e.schemaVersion, appliedAt: appliedAt.toISOString() } };
  try {
    const k = stageValues(e.table, key, e.key, policyOf);
    const d = e.op === 'delete' ? { values: data.map(() => null), unheld: null } : stageValues(e.table, data, e.after ?? {}, policyOf);
    const marks = [k.unheld, d.unheld].filter((x) => x !== null);
    if (e.op !== 'delete') marks.push(...inherited);
    fitRow(e.table, data, d.values, marks, policyOf, e.key);
    const unheld = marks.join(',') || null;
    return {
      row: {
        fields: [
          e.position,
          e.op,
          e.commitTs,
          String(e.schemaVersion),
          e.txId,
          e.synthetic ? 'true' : 'false',
          unheld,
          appliedAt.toISOString(),
          ...k.values,
          ...d.values,
        ],
      },
    };
  } catch (err) {
    return { refused: err as Error };
  }
}

/** A part is not cut below this many bytes of CSV (about 1 MB compressed, Redshift's smallest advised object). */
export const PART_MIN_BYTES = 4 * 1024 * 1024;

/** How a table's rows of one load are cut into objects. */
export interface PartOptions {
  /** The cluster's slices (nodes × slices per node): with enough bytes, the part count is a multiple of it, so every slice loads. @default 1 */
  slices?: number;
  /** @default PART_TARGET_BYTES */
  targetBytes?: number;
  /** @default PART_MIN_BYTES */
  minBytes?: number;
}

/** How many parts `bytes` of CSV become: `ceil(bytes / target)`, raised to a multiple of `slices` when every part keeps `minBytes`. */
export function partCount(bytes: number, o: PartOptions = {}): number {
  const slices = Math.max(1, Math.floor(o.slices ?? 1));
  const target = o.targetBytes ?? PART_TARGET_BYTES;
  const min = o.minBytes ?? PART_MIN_BYTES;
  let n = Math.max(1, Math.ceil(bytes / target));
  const up = Math.ceil(n / slices) * slices;
  if (bytes / up >= min) n = up;
  return n;
}

const fieldBytes = (f: string | null): number => (f === null ? 1 : Buffer.byteLength(f, 'utf8') + 3);

/**
 * COPY loads a row of at most `REDSHIFT_MAX_ROW_BYTES`: while the row is larger, its largest data
 * value meets its column's policy with the reason `row-too-long` (refused: the event is a dead
 * letter; null-with-marker: NULL and marked), so no load fails on one row.
 */
function fitRow(
  table: string,
  data: readonly RedshiftColumn[],
  values: (string | null)[],
  marks: string[],
  policyOf: (column: string) => ValuePolicy,
  key: Record<string, unknown>,
): void {
  const size = (v: string | null): number => (v === null ? 1 : Buffer.byteLength(v, 'utf8') + 3);
  // The platform columns and the key take well under 1 KB; the data decide.
  let total = 1024 + JSON.stringify(key).length + values.reduce((n, v) => n + size(v), 0);
  while (total > REDSHIFT_MAX_ROW_BYTES) {
    let largest = 0;
    for (let i = 1; i < values.length; i++) if (size(values[i] ?? null) > size(values[largest] ?? null)) largest = i;
    const c = data[largest]!;
    const detail = `the row is ${total} bytes, COPY loads at most ${REDSHIFT_MAX_ROW_BYTES}; ${c.name} is its largest value`;
    if (policyOf(c.name) === 'refuse-row') throw new RedshiftValueRefusedError(table, c.name, 'row-too-long', detail);
    total -= size(values[largest] ?? null) - 1;
    values[largest] = null;
    marks.push(`${c.name}:row-too-long`);
  }
}

/**
 * The CSV parts of `rows`: `partCount` parts of about equal bytes. With a `loadId` (the in-process
 * loader, which knows its load before it stages) that id is the first field of every row; with
 * `null` (an applier staging for the loader function, before any load exists) the rows start at
 * the position and the loader's COPY sets the load id (docs/warehouse-apply.md, "Redshift: the applier").
 */
export function csvParts(loadId: number | null, rows: readonly StagedRow[], o: PartOptions = {}): string[] {
  const id = loadId === null ? [] : [String(loadId)];
  const idBytes = loadId === null ? 0 : String(loadId).length + 3;
  const sized = rows.map((r) => ({ fields: [...id, ...r.fields], bytes: r.fields.reduce((n, f) => n + fieldBytes(f), idBytes) }));
  const total = sized.reduce((n, r) => n + r.bytes, 0);
  const n = partCount(total, o);
  const parts: string[] = [];
  let cur: (string | null)[][] = [];
  let bytes = 0;
  for (const r of sized) {
    cur.push(r.fields);
    bytes += r.bytes;
    if (bytes >= (total * (parts.length + 1)) / n && parts.length < n - 1) {
      parts.push(csvBody(cur));
      cur = [];
    }
  }
  if (cur.length > 0 || parts.length === 0) parts.push(csvBody(cur));
  return parts;
}

/** A COPY manifest (Redshift's JSON form): every entry mandatory, so a missing object fails the load. */
export interface Manifest {
  entries: { url: string; mandatory: true; meta: { content_length: number } }[];
}

export function manifest(objects: readonly { url: string; bytes: number }[]): Manifest {
  return { entries: objects.map((o) => ({ url: o.url, mandatory: true, meta: { content_length: o.bytes } })) };
}

/** Reads a manifest back (the stand-in and the loader's recovery), naming what is wrong. */
export function parseManifest(text: string, where: string): Manifest {
  let m: unknown;
  try {
    m = JSON.parse(text);
  } catch {
    throw new CdcError('INVALID_MANIFEST', `${where}: not JSON`);
  }
  const entries = (m as { entries?: unknown }).entries;
  if (!Array.isArray(entries) || entries.length === 0) throw new CdcError('INVALID_MANIFEST', `${where}: no entries`);
  for (const [i, e] of entries.entries()) {
    if (typeof (e as { url?: unknown }).url !== 'string' || !(e as { url: string }).url.startsWith('s3://'))
      throw new CdcError('INVALID_MANIFEST', `${where}: entries[${i}].url is not an s3:// URL`);
  }
  return m as Manifest;
}

/** How often the loader loads and merges, from the sink's `freshnessTarget`. */
export interface RedshiftCadence {
  /** Most time a batch waits for its COPY: a third of the target (the COPY and the commit take the rest), 1 s to 5 min. */
  loadEveryMs: number;
  /** Time between merges: the view overlays what is not merged, so freshness does not wait for it; twice the target, 1 to 60 min. */
  mergeEveryMs: number;
}

export function redshiftCadence(freshnessTargetMs: number): RedshiftCadence {
  if (!Number.isFinite(freshnessTargetMs) || freshnessTargetMs <= 0)
    throw new RangeError(`freshnessTarget must be a positive duration, got ${freshnessTargetMs} ms`);
  const clamp = (v: number, lo: number, hi: number): number => Math.min(hi, Math.max(lo, Math.round(v)));
  return { loadEveryMs: clamp(freshnessTargetMs / 3, 1_000, 300_000), mergeEveryMs: clamp(freshnessTargetMs * 2, 60_000, 3_600_000) };
}
