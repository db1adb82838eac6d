/**
 * The search sink's pure planning (docs/search.md): index names per table, documents, mappings
 * from the schema registry, the bulk plan of one table's micro-batch, and the classification of
 * per-item bulk results. No I/O: the adapter (lambda/adapters/search-opensearch.ts) speaks the
 * wire protocol, the handler (lambda/handlers/search-applier.ts) wires the two.
 *
 * Layout, per captured table (`<p>` = prefix, default `cdc`):
 * - `<p>.<source>.<schema>.<table>.v000001`: the concrete index (a rebuild writes `.v000002`, then
 *   moves the aliases in one `_aliases` call);
 * - alias `<p>.<source>.<schema>.<table>`: for readers, filtered to live documents (tombstones
 *   hidden: `cdc_meta.deleted: false`);
 * - alias `<p>.<source>.<schema>.<table>.all`: unfiltered, the applier's write alias (tombstones
 *   visible);
 * - index `<p>.<source>.<schema>.<table>.deleted` (hard-delete tables only): one versioned
 *   tombstone per deleted key, which OpenSearch never garbage-collects (it is a document, not a
 *   delete marker), so a late older event cannot resurrect a hard-deleted key after `gc_deletes`.
 *
 * Documents are keyed by `documentId(key)` = `keyText(key)` (the platform's one key text; a SHA-256
 * of it when longer than OpenSearch's 512-byte id limit) and hold the data columns plus
 * `cdc_meta` (position, deleted, deleted_at, key, applied_at). Every write is a full `index` with
 * `version_type: external` and the position's version (search-version.ts): OpenSearch versions
 * `index` and `delete` but not `update`, so an event with absent columns (invariant 11) is merged
 * here onto the stored document read just before (`planSearchWrites`), and the merged image is
 * indexed with the event's version: a concurrent newer write makes it a version conflict
 * (stale, harmless), never a lost column.
 */
import { createHash } from 'node:crypto';
import { handoverId, planTable, type StoredRow, type StoredState, type TablePlan } from '../sink/apply-plan.ts';
import type { ColumnDef, DeleteMode, SchemaVersion } from '../shared/control-plane.ts';
import { CdcError, UnsafeIdentifierError } from '../shared/errors.ts';
import { keyText, type ChangeEvent, type JsonValue, type Row } from '../shared/event.ts';
import { assertPosition, type Position } from '../shared/position.ts';
import { describeValue as describe, isPlainObject } from '../shared/json-shape.ts';
import { encodeVersion } from './search-version.ts';
import { splitTableId } from '../shared/identifiers.ts';
import { searchFieldRefusal, searchNamePart } from '../../../contracts/search-index-names.ts';

/** The field of every document that holds the platform's bookkeeping. A source column of this name is refused. */
export const META_FIELD = 'cdc_meta';
/** Default prefix of index and alias names. */
export const DEFAULT_INDEX_PREFIX = 'cdc';
/** OpenSearch's limit on `_id`. */
const MAX_ID_BYTES = 512;

// ---------------------------------------------------------------------------------------------
// Names

export interface SearchNames {
  /** Readers' alias (live documents only). */
  alias: string;
  /** The applier's alias (every document, tombstones included). */
  all: string;
  /** Hard-delete tombstones of the table. */
  deleted: string;
  /**
   * Handover donors of the table (docs/search.md, "Primary-key changes"): the old key's values of
   * a primary-key change whose insert did not deliver them, kept until that insert takes them.
   */
  handover: string;
  /** The concrete index of a generation (1 for the first). */
  index(generation: number): string;
}

const NAME_PART = /^[a-z_][a-z0-9_]{0,62}$/;
const PREFIX = /^[a-z][a-z0-9_-]{0,31}$/;

/**
 * Index and alias names of a table: the schema and table names written as index-name parts
 * (`searchNamePart`, docs/search.md, "Index names"), so any carried name has one. Refuses a prefix
 * or source id OpenSearch cannot hold as it is, and a table id that is not `schema.table`.
 */
export function searchNames(prefix: string, sourceId: string, table: string): SearchNames {
  if (!PREFIX.test(prefix)) throw new UnsafeIdentifierError(prefix, `search index prefix must match ${PREFIX.source}`);
  if (!NAME_PART.test(sourceId)) throw new UnsafeIdentifierError(sourceId, `source id must match ${NAME_PART.source} to name a search index`);
  const { schema, table: name } = splitTableId(table);
  const alias = `${prefix}.${sourceId}.${searchNamePart(schema)}.${searchNamePart(name)}`;
  return {
    alias,
    all: `${alias}.all`,
    deleted: `${alias}.deleted`,
    handover: `${alias}.handover`,
    index: (generation) => `${alias}.v${String(generation).padStart(6, '0')}`,
  };
}

/** The document id of a primary key: `keyText(key)`, or `sha256:<hex>` of it when longer than 512 bytes. */
export function documentId(key: Row): string {
  const text = keyText(key);
  if (Buffer.byteLength(text, 'utf8') <= MAX_ID_BYTES) return text;
  return `sha256:${createHash('sha256').update(text, 'utf8').digest('hex')}`;
}

// ---------------------------------------------------------------------------------------------
// Served tables

export interface SearchTableConfig {
  source: string;
  table: string;
  deleteMode: DeleteMode;
}

/** A search-sink configuration that cannot be used; `field` names the entry and field. */
export class SearchConfigError extends CdcError {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super('INVALID_SEARCH_CONFIG', `${field}: ${message}`);
  }
}

/** Validates the tables a search sink serves (`CDC_SEARCH_TABLES`: `[{"source","table","deleteMode"}]`). */
export function validateSearchTables(value: unknown, origin = 'CDC_SEARCH_TABLES'): SearchTableConfig[] {
  if (!Array.isArray(value)) throw new SearchConfigError(origin, `expected a JSON array of {source, table, deleteMode}, got ${describe(value)}`);
  const seen = new Set<string>();
  return value.map((v, i) => {
    const at = `${origin}[${i}]`;
    if (!isPlainObject(v)) throw new SearchConfigError(at, `expected an object, got ${describe(v)}`);
    for (const k of Object.keys(v))
      if (!['source', 'table', 'deleteMode'].includes(k)) throw new SearchConfigError(`${at}.${k}`, 'unknown field (known: source, table, deleteMode)');
    if (typeof v.source !== 'string' || !NAME_PART.test(v.source))
      throw new SearchConfigError(`${at}.source`, `expected a source id, got ${describe(v.source)}`);
    if (typeof v.table !== 'string' || !/^[^.]+\.[^.]+$/.test(v.table))
      throw new SearchConfigError(`${at}.table`, `expected 'schema.table', got ${describe(v.table)}`);
    const mode = v.deleteMode ?? 'soft';
    if (mode !== 'soft' && mode !== 'hard') throw new SearchConfigError(`${at}.deleteMode`, `expected soft or hard, got ${describe(mode)}`);
    const k = `${v.source}/${v.table}`;
    if (seen.has(k)) throw new SearchConfigError(`${at}.table`, `${k} is listed twice`);
    seen.add(k);
    return { source: v.source, table: v.table, deleteMode: mode };
  });
}

// ---------------------------------------------------------------------------------------------
// Mappings

export type FieldMapping = Record<string, JsonValue>;

/** The `cdc_meta` mapping (fixed). */
export const META_MAPPING: FieldMapping = {
  properties: {
    position: { type: 'keyword' },
    deleted: { type: 'boolean' },
    deleted_at: { type: 'keyword' },
    key: { type: 'keyword' },
    applied_at: { type: 'date' },
  },
};

const INT = /^(int[1248]?|int16|int32|int64|smallint|integer|bigint|(small|big)?serial[248]?)$/;
const FLOAT = /^(real|float[48]?|real[48]|double precision|double|float\(\d+\))$/;
const NUMERIC = /^(numeric|decimal)(\(.*\))?$/;
const STRING = /^(text|varchar|character varying|string|wstring|clob|nclob|char|character|bpchar|citext|name)(\(\d+\))?$/;

/**
 * The OpenSearch field of a source column type (docs/search.md, "Mappings"): integers → `long`,
 * floating point and numeric → `double` (the source value is kept exactly in `_source`),
 * `boolean`, `date`, strings → `text` with a `keyword` sub-field, `json`/`jsonb` → an object that
 * is stored but not indexed, everything else (timestamps, uuid, unknown) → `keyword`.
 * PostgreSQL's timestamp text (`2026-01-01 10:00:00.5+00`) is not one of OpenSearch's date
 * formats, so timestamps stay exact `keyword`s rather than be refused.
 * The `double` and `date` fields are `ignore_malformed`: a value they cannot index (`NaN`,
 * `±Infinity`, a date `infinity`, BC or past year 9999) is kept exactly in the document's
 * `_source` and left out of the field's index (docs/types.md), never refused row by row.
 */
export function fieldMappingOf(type: string | null): FieldMapping {
  const t = (type ?? '').trim().toLowerCase().replace(/\s+/g, ' ');
  if (INT.test(t)) return { type: 'long' };
  if (FLOAT.test(t) || NUMERIC.test(t)) return { type: 'double', ignore_malformed: true };
  if (t === 'boolean' || t === 'bool') return { type: 'boolean' };
  if (t === 'date') return { type: 'date', format: 'strict_date', ignore_malformed: true };
  if (STRING.test(t)) return { type: 'text', fields: { keyword: { type: 'keyword', ignore_above: 256 } } };
  if (t === 'json' || t === 'jsonb') return { type: 'object', enabled: false };
  return { type: 'keyword', ignore_above: 8191 };
}

/** Refuses a column whose name collides with the bookkeeping field or cannot be a document field (`searchFieldRefusal`). */
export function assertSearchColumn(name: string, table: string): void {
  if (name === META_FIELD) throw new UnsafeIdentifierError(name, `column of ${table} collides with the search sink's ${META_FIELD} field`);
  const refusal = searchFieldRefusal(name);
  if (refusal !== null) throw new UnsafeIdentifierError(name, `column of ${table} cannot be a search field: ${refusal}`);
}

/** The fields a table's documents need: every column of the given schema versions (the newest version's type wins), plus `cdc_meta`. */
export function desiredProperties(schemas: readonly SchemaVersion[]): Record<string, FieldMapping> {
  const byColumn = new Map<string, ColumnDef>();
  for (const s of [...schemas].sort((a, b) => a.version - b.version)) for (const c of s.columns) byColumn.set(c.name, c);
  const out: Record<string, FieldMapping> = {};
  for (const [name, c] of byColumn) {
    assertSearchColumn(name, schemas[0]?.table ?? 'the table');
    out[name] = fieldMappingOf(c.type);
  }
  out[META_FIELD] = META_MAPPING;
  return out;
}

export interface MappingConflict {
  field: string;
  current: JsonValue;
  desired: JsonValue;
}

/** What must be added to `current` (an index's `properties`) to hold `desired`, and which existing fields would have to change type. */
export function mappingDiff(
  current: Record<string, unknown>,
  desired: Record<string, FieldMapping>,
): { add: Record<string, FieldMapping>; conflicts: MappingConflict[] } {
  const add: Record<string, FieldMapping> = {};
  const conflicts: MappingConflict[] = [];
  for (const [field, want] of Object.entries(desired)) {
    const have = current[field];
    if (have === undefined) {
      add[field] = want;
      continue;
    }
    const haveType = isPlainObject(have) ? (have.type ?? (have.properties ? 'object' : null)) : null;
    const wantType = want.type ?? (want.properties ? 'object' : null);
    // A keyword field (what a column of unknown type gets) takes every scalar value as its text:
    // a type learned later keeps it (a compatible change, docs/search.md "Mappings"). An object
    // (json) cannot go into a keyword field.
    if (haveType === 'keyword' && wantType !== 'object') continue;
    if (haveType !== wantType) conflicts.push({ field, current: (haveType ?? null) as JsonValue, desired: (wantType ?? null) as JsonValue });
  }
  return { add, conflicts };
}

/** A field type the index already holds differently: the table is held for this sink until its index is rebuilt. */
export class SearchMappingConflictError extends CdcError {
  constructor(
    readonly index: string,
    readonly conflicts: readonly MappingConflict[],
  ) {
    super(
      'SEARCH_MAPPING_CONFLICT',
      `index ${index} cannot hold the registered schema: ${conflicts.map((c) => `${c.field} is ${JSON.stringify(c.current)}, the schema needs ${JSON.stringify(c.desired)}`).join('; ')}. ` +
        'OpenSearch cannot change a field type in place: rebuild the index (docs/search.md, "Mappings")',
    );
  }
}

/**
 * The `_meta` the applier records on an index: the base LSN of its versions, and the position of
 * the latest `truncate` applied (events below it never write again).
 */
export interface IndexMeta {
  baseLsn: bigint;
  truncatedAt: Position | null;
}

/** The mapping `_meta` of an index (`{ cdc: { baseLsn: "<hex>", truncatedAt?: "<position>" } }`). */
export function indexMetaJson(meta: IndexMeta): JsonValue {
  return { cdc: { baseLsn: meta.baseLsn.toString(16).padStart(16, '0'), ...(meta.truncatedAt !== null ? { truncatedAt: meta.truncatedAt } : {}) } };
}

/** Reads `_meta.cdc` of an index mapping; throws naming the index when it is not the applier's. */
export function parseIndexMeta(index: string, meta: unknown): IndexMeta {
  const cdc = isPlainObject(meta) ? meta.cdc : undefined;
  const base = isPlainObject(cdc) ? cdc.baseLsn : undefined;
  if (typeof base !== 'string' || !/^[0-9a-f]{16}$/.test(base)) {
    throw new CdcError(
      'SEARCH_INDEX_FOREIGN',
      `index ${index} has no _meta.cdc.baseLsn: it was not created by the search sink; remove it or choose another prefix`,
    );
  }
  const t = isPlainObject(cdc) ? cdc.truncatedAt : undefined;
  return { baseLsn: BigInt(`0x${base}`), truncatedAt: typeof t === 'string' ? assertPosition(t, `${index} _meta.cdc.truncatedAt`) : null };
}

/** The body of the create-index request of a table's first (or next) generation. */
export function createIndexBody(
  names: SearchNames,
  properties: Record<string, FieldMapping>,
  meta: IndexMeta,
  settings: Record<string, JsonValue> = {},
): JsonValue {
  return {
    settings: { index: settings },
    mappings: { dynamic: 'strict', _meta: indexMetaJson(meta), properties },
    aliases: {
      [names.alias]: { filter: { term: { [`${META_FIELD}.deleted`]: false } } },
      [names.all]: { is_write_index: true },
    },
  };
}

/** The field of a handover donor document that holds the handed-over values (not indexed). */
export const HANDOVER_FIELD = 'cdc_handover';

/** The body of a table's handover donor index (one document per donor, see `handoverDocId`). */
export function createHandoverIndexBody(meta: IndexMeta, settings: Record<string, JsonValue> = {}): JsonValue {
  return {
    settings: { index: settings },
    mappings: {
      dynamic: 'strict',
      _meta: indexMetaJson(meta),
      properties: { [META_FIELD]: META_MAPPING, [HANDOVER_FIELD]: { type: 'object', enabled: false } as unknown as FieldMapping },
    },
  };
}

/** The document id of a handover donor: the old key's document id and the key change's position. */
export function handoverDocId(oldKey: Row, position: Position): string {
  const text = `${keyText(oldKey)}@${position}`;
  if (Buffer.byteLength(text, 'utf8') <= MAX_ID_BYTES) return text;
  return `sha256:${createHash('sha256').update(text, 'utf8').digest('hex')}`;
}

/** Reads a stored handover donor document's values (null when it is not one). */
export function donorValuesOf(source: unknown): Row | null {
  if (!isPlainObject(source)) return null;
  const v = source[HANDOVER_FIELD];
  return isPlainObject(v) ? (v as Row) : null;
}

/** The body of the hard-delete tombstone index. */
export function createTombstoneIndexBody(meta: IndexMeta, settings: Record<string, JsonValue> = {}): JsonValue {
  return { settings: { index: settings }, mappings: { dynamic: 'strict', _meta: indexMetaJson(meta), properties: { [META_FIELD]: META_MAPPING } } };
}

// ---------------------------------------------------------------------------------------------
// Documents

export interface DocMeta {
  position: Position;
  deleted: boolean;
  deleted_at: string | null;
  key: string;
  applied_at: string;
}

/** A stored document as the plan sees it. */
export interface StoredDoc {
  position: Position;
  deleted: boolean;
  values: Row;
}

/** Reads a stored document's `_source`; throws naming the document when it lacks valid `cdc_meta`. */
export function storedDocOf(id: string, source: unknown): StoredDoc {
  if (!isPlainObject(source)) throw new CdcError('SEARCH_DOCUMENT_FOREIGN', `document ${id} has no _source object`);
  const meta = source[META_FIELD];
  if (!isPlainObject(meta) || typeof meta.position !== 'string' || typeof meta.deleted !== 'boolean') {
    throw new CdcError('SEARCH_DOCUMENT_FOREIGN', `document ${id} has no valid ${META_FIELD}: it was not written by the search sink`);
  }
  assertPosition(meta.position, `${id}.${META_FIELD}.position`);
  const values: Row = {};
  for (const [k, v] of Object.entries(source)) if (k !== META_FIELD) values[k] = v as JsonValue;
  return { position: meta.position, deleted: meta.deleted, values };
}

// ---------------------------------------------------------------------------------------------
// The bulk plan of one table's batch

/** One bulk action. `target` says which index: the table's write alias, or its tombstone index. */
export interface SearchOp {
  action: 'index' | 'delete';
  target: 'all' | 'deleted' | 'handover';
  id: string;
  version: bigint;
  /** Full document (index actions). */
  document: Record<string, JsonValue> | null;
  /** The key this op writes (one key may need two ops: a hard delete and its tombstone). */
  keyText: string;
  position: Position;
}

export interface SearchPlanInput {
  events: readonly ChangeEvent[];
  keyColumns: readonly string[];
  deleteMode: DeleteMode;
  /** Stored documents by key text: the live/soft document behind the write alias, and (hard mode) the tombstone. */
  stored: ReadonlyMap<string, { doc?: StoredDoc; tombstone?: StoredDoc }>;
  meta: IndexMeta;
  appliedAt: Date;
  /**
   * Handover donors the sink keeps for the batch's key-change inserts, by `handoverId(old key,
   * position)` (read from the handover index by `handoverDocId`). @default none
   */
  donors?: ReadonlyMap<string, Row>;
}

export interface SearchPlan {
  ops: SearchOp[];
  /** The underlying per-key plan (fresh events). */
  table: TablePlan;
  /**
   * Events that wait (docs/search.md, "Primary-key changes"): a key-change insert whose
   * undelivered columns neither the batch, the stored old-key document nor a kept donor knew, and
   * every later event of its key. Nothing is written for them (never a column as null or absent);
   * the applier reports their records as failed, so they come again (after the old key's delete,
   * applied on another shard, has left its donor).
   */
  held: ChangeEvent[];
}

/** The old keys of the batch's key-change inserts that lack columns, with the handover ids their donors would have. */
export function donorsToRead(events: readonly ChangeEvent[], keyColumns: readonly string[]): Array<{ id: string; docId: string }> {
  const out = new Map<string, string>();
  for (const e of events) {
    if ((e.op !== 'insert' && e.op !== 'snapshot') || e.missing.length === 0 || !e.before) continue;
    const old: Row = {};
    let ok = true;
    for (const k of keyColumns) {
      const v = e.before[k];
      if (v === undefined || v === null || typeof v === 'object') ok = false;
      else old[k] = v;
    }
    if (ok) out.set(handoverId(old, e.position), handoverDocId(old, e.position));
  }
  return [...out].map(([id, docId]) => ({ id, docId }));
}

/** The keys whose stored documents the plan needs: every key of the batch, and the old keys of key-change inserts. */
export function keysToRead(events: readonly ChangeEvent[]): Row[] {
  const out = new Map<string, Row>();
  for (const e of events) {
    out.set(keyText(e.key), e.key);
    if ((e.op === 'insert' || e.op === 'snapshot') && e.before) {
      const old: Row = {};
      let ok = true;
      for (const k of Object.keys(e.key)) {
        const v = e.before[k];
        if (v === undefined || v === null || typeof v === 'object') ok = false;
        else old[k] = v;
      }
      if (ok) out.set(keyText(old), old);
    }
  }
  return [...out.values()];
}

/**
 * Plans a table's batch (see the module comment). Per key, events at or below the stored
 * position (document or tombstone, whichever is higher) are dropped; the rest collapse into one
 * write (`planTable`, the same fold as the warehouse). A write that merges (absent columns) is
 * completed with the stored document's values. Events below the index's truncation position
 * (`meta.truncatedAt`) are dropped: the truncate deleted everything before it. Throws `PositionNotEncodableError` if any
 * event's position is outside the version window (the table is then held, nothing is written).
 */
export function planSearchWrites(input: SearchPlanInput): SearchPlan {
  for (const e of input.events) encodeVersion(e.position, input.meta.baseLsn);
  const horizon = input.meta.truncatedAt;
  const events = horizon === null ? input.events : input.events.filter((e) => e.position >= horizon);
  const stored = new Map<string, StoredState>();
  const storedRows = new Map<string, StoredRow>();
  for (const [k, s] of input.stored) {
    const d = s.doc;
    const t = s.tombstone;
    const top = d && t ? (t.position > d.position ? t : d) : (d ?? t);
    if (top) stored.set(k, { position: top.position, deleted: top.deleted });
    if (d) storedRows.set(k, { position: d.position, deleted: d.deleted, values: d.values });
  }
  const donorsIn = input.donors ?? new Map<string, Row>();
  const table = planTable({ events, keyColumns: input.keyColumns, stored, storedRows, donors: donorsIn });
  const appliedAt = input.appliedAt.toISOString();
  const ops: SearchOp[] = [];
  // Donors to keep: a key change's delete applied before its insert (another shard) leaves the
  // old key's values for the insert (written once; a donor already kept is not written again).
  // A handover completed in this batch is kept too: the bulk's items succeed or fail one by one,
  // so the insert's write may fail while the old key's later events are written, and its retry
  // could then no longer read the old key's values (docs/search.md, "Primary-key changes").
  for (const d of [...table.donors, ...table.completed]) {
    const hid = handoverId(d.key, d.position);
    if (donorsIn.has(hid)) continue;
    const meta: DocMeta = { position: d.position, deleted: true, deleted_at: null, key: keyText(d.key), applied_at: appliedAt };
    ops.push({
      action: 'index',
      target: 'handover',
      id: handoverDocId(d.key, d.position),
      version: encodeVersion(d.position, input.meta.baseLsn),
      document: { [HANDOVER_FIELD]: d.values as unknown as JsonValue, [META_FIELD]: meta as unknown as JsonValue },
      keyText: keyText(d.key),
      position: d.position,
    });
  }
  for (const w of table.writes) {
    const version = encodeVersion(w.position, input.meta.baseLsn);
    const id = documentId(w.key);
    const under = input.stored.get(w.keyText)?.doc;
    const values: Row = w.full ? { ...w.values } : { ...(under?.values ?? {}), ...w.values };
    const meta: DocMeta = { position: w.position, deleted: w.deleted, deleted_at: w.deleted ? w.deletedAt : null, key: w.keyText, applied_at: appliedAt };
    if (w.deleted && input.deleteMode === 'hard') {
      ops.push({ action: 'delete', target: 'all', id, version, document: null, keyText: w.keyText, position: w.position });
      ops.push({
        action: 'index',
        target: 'deleted',
        id,
        version,
        document: { [META_FIELD]: meta as unknown as JsonValue },
        keyText: w.keyText,
        position: w.position,
      });
    } else {
      ops.push({
        action: 'index',
        target: 'all',
        id,
        version,
        document: { ...values, ...w.key, [META_FIELD]: meta as unknown as JsonValue },
        keyText: w.keyText,
        position: w.position,
      });
    }
  }
  // Hard mode: a tombstone above a still-live document means an earlier bulk recorded the
  // tombstone but not the delete (one of the two items failed and was retried): finish it.
  if (input.deleteMode === 'hard') {
    const planned = new Set(ops.map((o) => o.keyText));
    for (const [k, s] of input.stored) {
      if (planned.has(k) || !s.doc || !s.tombstone || s.doc.deleted || s.tombstone.position <= s.doc.position) continue;
      const key = keyOfText(k);
      ops.push({
        action: 'delete',
        target: 'all',
        id: documentId(key),
        version: encodeVersion(s.tombstone.position, input.meta.baseLsn),
        document: null,
        keyText: k,
        position: s.tombstone.position,
      });
    }
  }
  return { ops, table, held: table.held };
}

/** The key of a key text (`keyText`'s inverse). */
function keyOfText(text: string): Row {
  return Object.fromEntries(JSON.parse(text) as Array<[string, JsonValue]>);
}

/**
 * The NDJSON body of a bulk request. Versions are written as integer literals from their exact
 * `bigint` (a JavaScript number cannot hold every 63-bit version).
 */
export function bulkBody(ops: readonly SearchOp[], names: Pick<SearchNames, 'all' | 'deleted' | 'handover'>): string {
  const lines: string[] = [];
  for (const op of ops) {
    const index = op.target === 'all' ? names.all : op.target === 'deleted' ? names.deleted : names.handover;
    lines.push(
      `{"${op.action}":{"_index":${JSON.stringify(index)},"_id":${JSON.stringify(op.id)},"version":${op.version.toString()},"version_type":"external"}}`,
    );
    if (op.action === 'index') lines.push(JSON.stringify(op.document));
  }
  return `${lines.join('\n')}\n`;
}

// ---------------------------------------------------------------------------------------------
// Bulk item results

export type ItemClass =
  /** Written (or, for a delete of an absent document, the versioned delete recorded). */
  | { kind: 'applied' }
  /** A version conflict: the index already holds this position or a later one. Success. */
  | { kind: 'stale' }
  /** Throttling or unavailability: retry without loss. */
  | { kind: 'retry'; reason: string }
  /** Refused for this document (mapping, value): dead-letter the record, degrade the table. */
  | { kind: 'reject'; reason: string };

/** Classifies one item of a bulk response (`{ index: {...} }` or `{ delete: {...} }`). */
export function classifyBulkItem(item: unknown): ItemClass {
  const inner = isPlainObject(item) ? Object.values(item)[0] : undefined;
  if (!isPlainObject(inner) || typeof inner.status !== 'number') return { kind: 'retry', reason: `unreadable bulk item ${describe(item)}` };
  const status = inner.status;
  const error = isPlainObject(inner.error) ? inner.error : null;
  const type = error && typeof error.type === 'string' ? error.type : null;
  const reason = `${status}${type ? ` ${type}` : ''}${error && typeof error.reason === 'string' ? `: ${error.reason}` : ''}`;
  if (status >= 200 && status < 300) return { kind: 'applied' };
  if (status === 404 && inner.result === 'not_found' && !error) return { kind: 'applied' };
  if (status === 409 && type === 'version_conflict_engine_exception') return { kind: 'stale' };
  if (status === 429 || status >= 500) return { kind: 'retry', reason };
  return { kind: 'reject', reason };
}

/** A search write OpenSearch refused for one document: the record is dead-lettered with this reason. */
export class SearchDocumentRejectedError extends CdcError {
  constructor(id: string, reason: string) {
    super('SEARCH_DOCUMENT_REJECTED', `OpenSearch refused document ${id}: ${reason}`);
  }
}
