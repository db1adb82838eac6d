/**
 * The normalizer: raw capture records (DMS or slot capture) in, canonical change events out to
 * the change log, in input order. Pure orchestration over injected ports (control plane, change
 * log, metrics, logger); the Lambda handler (`lambda/handlers/normalizer.ts`) is a thin shell.
 *
 * Per raw record:
 * 1. Parse and decode (`decodeRawRecord`). Key columns of DMS tables come from the table
 *    configuration, then from the registry.
 * 2. Consult the schema registry (strongly consistent reads, cached for one batch; the versions
 *    kept across batches, schema-version-cache.ts) and classify what the record shows
 *    (`schema-evolution.ts`): a table seen for the first time is registered with its first schema
 *    version (columns, types where known, key, effective position, delete mode from the
 *    configuration, pre-image); a compatible change registers the next version;
 *    a breaking change pauses that table only (state + audit entry, an error log line with the
 *    reason and the recovery hint, metric `TablesPaused`) and registers the next version too,
 *    so its events still enter the log and every sink holds them.
 * 3. Stamp each change with its schema version, validate it as a change event, buffer it.
 * Buffered events are published in input order when the buffer is large and at the end of the
 * batch (`flush`).
 *
 * Bad input is never fatal and never lost (invariant 12): a record that cannot be parsed,
 * decoded, validated or encoded goes to the dead letters with its code, reason, origin and text,
 * metric `DeadLetters` (Stage=normalizer) is raised, and processing continues with the next
 * record. Anything else (control plane or change log unavailable) is thrown: the caller fails
 * the record and everything after it, so no later event of a key overtakes an earlier one.
 *
 * Which schema version an event is read with. Versions have non-decreasing effective positions.
 * An event whose position is lower than the latest version's effective position (a replay, or a
 * record that raced through another shard) is read with the version in effect at its position
 * when it fits that version, so an old record never looks like a drop of a newer column.
 * DMS control records carry no position: a version they introduce takes effect at the highest
 * position this normalizer has seen for the source (a lower bound), or at the previous
 * version's effective position.
 *
 * Races: two normalizers (two shards) that register the same table or version race on a
 * conditional write; the loser reloads the registry and classifies again.
 */
import { CdcError, PositionRegressionError } from '../shared/errors.ts';
import { SchemaVersionCache } from './schema-version-cache.ts';
import { KeyPositions } from './key-positions.ts';
import type { ChangeEvent } from '../shared/event.ts';
import { assertSchemaVersion, validateDecodedChange } from '../shared/event.ts';
import type { AuditEntry, ColumnDef, ControlPlane, PreImage, SchemaVersion, TableRecord } from '../shared/control-plane.ts';
import type { DecodeResult, DecodedChange, DecodedControl } from './decoded.ts';
import { observe } from './observed-shape.ts';
import { decodeRawRecord, detectRecordFormat, type DecodeContext } from './decode.ts';
import { batchDecodeContext, type Registry } from './batch-decode-context.ts';
import { EMPTY_PARTITION_TREE, type PartitionTree } from '../tables/partitions.ts';
import { parseJsonExact } from '../shared/json-exact.ts';
import { applyColumnRulesToChange, applyColumnRulesToColumns } from '../tables/masking.ts';
import { maxPosition, POSITION_ZERO, type Position } from '../shared/position.ts';
import { pollSpaceOfType, PositionSpaceMismatchError, type PositionSpace } from '../shared/position-space.ts';
import { isPackedSlotRecord, packedRecordOfRow, packedRowRecord, validatePackedHeader, type PackedSnapshotRecord, type SlotRecord } from './slot-record.ts';
import { classifyControl, classifySchema, type Classification, type ObservedColumn, type ObservedShape } from '../tables/schema-evolution.ts';
import type { TableConfigIndex } from '../tables/table-config.ts';
import { claimKey, sha256, type ClaimCheck, type PayloadStore } from '../shared/payload-store.ts';
import { MetricDimension, MetricName, NORMALIZER_STAGE, type MetricNameValue } from '../../../contracts/metrics.ts';
import { checkHeartbeatContinuity, type HeartbeatContinuityDeps } from './continuity.ts';
import { isHeartbeatTable } from '../shared/identifiers.ts';
import {
  isIdentity,
  sameTransforms,
  transformChange,
  transformChangeNotice,
  transformColumns,
  transformKeyColumns,
  transformsText,
  type TableTransforms,
} from '../tables/transforms.ts';
import { TableTypesPendingError, withCatalogTypes, type CatalogTypes } from '../shared/catalog-types.ts';

/** Where events go: encode checks one event (throws a `CdcError` for bad input), publish sends them in order. */
export interface ChangeLogWriter<E> {
  encode(event: ChangeEvent): E;
  publishEncoded(records: readonly E[]): Promise<void>;
  /** Encodes the claim check of an event stored out of line (same partition key as the event). */
  encodeClaim?(claim: ClaimCheck): E;
}

/** The `CdcError` code of an event too large for one change-log record. */
export const RECORD_TOO_LARGE = 'RECORD_TOO_LARGE';

/** Metric sink. Every metric carries the Source dimension; `dimensions` adds more (its own EMF record). */
export interface NormalizerMetrics {
  count(name: MetricNameValue, value: number, dimensions?: Record<string, string>): void;
  milliseconds(name: MetricNameValue, value: number): void;
}

export interface NormalizerLogger {
  debug(message: string, extra: Record<string, unknown>): void;
  info(message: string, extra: Record<string, unknown>): void;
  warn(message: string, extra: Record<string, unknown>): void;
  error(message: string, extra: Record<string, unknown>): void;
}

/** One raw record as read from the raw stream. */
export interface RawRecord {
  /** The record payload as text (DMS JSON or a slot-capture record). */
  text: string;
  /** Where it was read: `<stream>/<shard>/<sequence number>` (kept with a dead letter). */
  origin: string;
}

export type RecordOutcome = 'buffered' | 'dead-lettered' | 'ignored' | 'control';

export interface NormalizerOptions<E> {
  /** Source id this normalizer serves. */
  source: string;
  tables: TableConfigIndex;
  controlPlane: ControlPlane;
  changeLog: ChangeLogWriter<E>;
  metrics: NormalizerMetrics;
  logger: NormalizerLogger;
  /** @default () => new Date() */
  now?: () => Date;
  /** Publish once this many events are buffered. @default 1000 */
  flushEvents?: number;
  /**
   * Where an event over the change log's record limit is stored whole; the log then carries its
   * claim check (docs/large-records.md). Without it such an event is dead-lettered.
   */
  payloads?: PayloadStore;
  /**
   * The source catalog's types of a table not registered yet (lambda/core/shared/catalog-types.ts). With
   * it, a table first seen through a record without types (a DMS data record) is registered with
   * the catalog's types, and the record is retried (`TableTypesPendingError`) until they are
   * published; without it, such a table is registered with unknown types (docs/schema-drift.md).
   * @default - none
   */
  catalogTypes?: (table: string) => Promise<CatalogTypes | null>;
  /**
   * The source's partition trees as published (lambda/core/tables/partitions.ts): a DMS record names a
   * change of a partitioned table by its leaf partition, and is decoded as a change of the root
   * (docs/partitioned-tables.md). Read again when a record names a table the last reading did not
   * know (at most every 2 s). @default - none: every table is its own
   */
  partitionTree?: () => Promise<PartitionTree | null>;
}

/** The recovery hint logged and audited with a pause. */
export const PAUSE_RECOVERY_HINT =
  'Its events keep entering the change log and every sink holds them from the first held position. ' +
  'An operator decides: re-snapshot the table into the sinks (or adapt the sink tables to the new schema version), then resume the table so the sinks replay from where they held.';

/** The normalizer could not settle a table's schema version against concurrent writers. */
export class SchemaRegistrationContendedError extends CdcError {
  constructor(sourceId: string, table: string, attempts: number) {
    super('SCHEMA_REGISTRATION_CONTENDED', `could not register the schema of ${sourceId}/${table}: lost ${attempts} races in a row to other writers`);
  }
}

const REGISTRATION_ATTEMPTS = 5;
const DECODE_PASSES = 2;

/** Decodes, registers and publishes raw records of one source. Create once; call `startBatch()` per invocation. */
export class Normalizer<E> {
  private readonly now: () => Date;
  private readonly flushEvents: number;
  /** Highest position seen for the source by this instance (effective position of DMS control records). */
  private lastPosition: Position | null = null;
  /** Per shard: what was last accepted for each key (per-key monotonicity). */
  private readonly seen = new KeyPositions();
  /** @internal Every table's schema versions, kept across batches (a version never changes once written). */
  readonly schemaVersions = new SchemaVersionCache();

  constructor(private readonly o: NormalizerOptions<E>) {
    this.now = o.now ?? (() => new Date());
    this.flushEvents = o.flushEvents ?? 1000;
  }

  /** @internal Checks that `changes` do not go backwards for their keys on the shard of `origin` and remembers them (`KeyPositions.check`). */
  checkMonotonic(origin: string, changes: readonly DecodedChange[]): PositionRegressionError | null {
    return this.seen.check(origin, changes);
  }

  /** Starts a batch: a fresh registry cache, an empty buffer. */
  startBatch(): NormalizerBatch<E> {
    return new NormalizerBatch(this, this.o, this.now, this.flushEvents);
  }

  /** @internal */
  notePosition(p: Position): void {
    if (p !== POSITION_ZERO) this.lastPosition = this.lastPosition === null ? p : maxPosition(this.lastPosition, p);
  }

  /** @internal */
  get highestPosition(): Position | null {
    return this.lastPosition;
  }
}

interface Buffered<E> {
  event: ChangeEvent;
  encoded: E;
}

/** One invocation's worth of records. */
export class NormalizerBatch<E> {
  private readonly cache = new Map<string, Registry>();
  /** Primary keys of unregistered tables as their published catalog types give them (null: none published), for DMS records that name none. */
  private readonly catalogKeys = new Map<string, string[] | null>();
  /** The published partition trees, as last read (`knowPartitionsOf`), and when (epoch ms). */
  private tree: PartitionTree = EMPTY_PARTITION_TREE;
  private treeReadAt = 0;
  /** The decode context (batch-decode-context.ts), and the tables its last decode found missing from the cache. */
  private ctx: DecodeContext | undefined;
  private readonly misses = new Set<string>();
  /** DMS records decoded since the last flush (metric `DmsRecordsDecoded`). */
  private dmsDecoded = 0;
  private buffer: Buffered<E>[] = [];
  private ordinal = -1;
  private pendingFrom: number | null = null;

  constructor(
    private readonly parent: Normalizer<E>,
    private readonly o: NormalizerOptions<E>,
    private readonly now: () => Date,
    private readonly flushEvents: number,
  ) {}

  /**
   * Ordinal (0-based, in `add` order) of the first record whose events are not known to be
   * published, or null when everything added so far is published. When processing fails, that
   * record and every later one must be retried.
   */
  get firstUnpublished(): number | null {
    return this.pendingFrom;
  }

  /** Processes one raw record. Throws only for infrastructure failures (see the module comment). */
  async add(raw: RawRecord): Promise<RecordOutcome> {
    this.ordinal++;
    if (this.pendingFrom === null) this.pendingFrom = this.ordinal;
    const outcome = await this.process(raw);
    if (this.buffer.length >= this.flushEvents) await this.flush();
    return outcome;
  }

  /** Publishes the buffered events in order. */
  async flush(): Promise<void> {
    if (this.dmsDecoded > 0) {
      this.o.metrics.count(MetricName.DMS_RECORDS_DECODED, this.dmsDecoded);
      this.dmsDecoded = 0;
    }
    if (this.buffer.length > 0) {
      await this.o.changeLog.publishEncoded(this.buffer.map((b) => b.encoded));
      const now = this.now().getTime();
      let lag = 0;
      for (const b of this.buffer) lag = Math.max(lag, now - Date.parse(b.event.commitTs));
      this.o.metrics.count(MetricName.EVENTS_PUBLISHED, this.buffer.length);
      this.o.metrics.milliseconds(MetricName.CAPTURE_LAG, Math.max(0, lag));
      this.buffer = [];
    }
    this.pendingFrom = null;
  }

  // -------------------------------------------------------------------------------------------

  private async process(raw: RawRecord): Promise<RecordOutcome> {
    let parsed: unknown;
    try {
      // Exact numbers: an int8 beyond 2^53 or a numeric keeps every digit (docs/exact-numbers.md).
      parsed = parseJsonExact(raw.text);
    } catch (e) {
      await this.deadLetter(raw, null, 'INVALID_RECORD', (e as Error).message);
      return 'dead-lettered';
    }
    if (isPackedSlotRecord(parsed)) return this.packed(raw, parsed);
    return this.one(raw, parsed);
  }

  /**
   * A packed snapshot record (lambda/core/capture/slot-record.ts): each row is processed exactly as the
   * per-row record it stands for, in row order, so it yields the same events. A row that cannot
   * be read or processed is dead-lettered alone, as a packed record of that row only (it loses
   * nothing and can be replayed), its reason naming the row; the other rows go on. A record whose
   * shared fields are bad is dead-lettered whole. An infrastructure failure is thrown as for any
   * record: the whole record is retried (its rows already buffered are not published yet, and a
   * replayed snapshot row is harmless: same position, same value).
   */
  private async packed(raw: RawRecord, parsed: unknown): Promise<RecordOutcome> {
    let p: PackedSnapshotRecord;
    try {
      p = validatePackedHeader(parsed);
    } catch (e) {
      await this.deadLetter(raw, parsed, e instanceof CdcError ? e.code : 'INVALID_RECORD', (e as Error).message);
      return 'dead-lettered';
    }
    let buffered = 0;
    let dead = 0;
    for (let i = 0; i < p.rows.length; i++) {
      // The dead letter's text, written only when one is: the record of this row alone.
      const rowRaw: RawRecord = {
        get text() {
          return JSON.stringify(packedRecordOfRow(p, i));
        },
        origin: raw.origin,
      };
      const what = `row ${i} of ${p.rows.length} of a packed snapshot record`;
      let row: SlotRecord;
      try {
        row = packedRowRecord(p, i);
      } catch (e) {
        await this.deadLetter(rowRaw, p, e instanceof CdcError ? e.code : 'INVALID_RECORD', `${what}: ${(e as Error).message}`);
        dead++;
        continue;
      }
      const outcome = await this.one(rowRaw, row, what);
      if (outcome === 'buffered') buffered++;
      else if (outcome === 'dead-lettered') dead++;
    }
    return buffered > 0 ? 'buffered' : dead > 0 ? 'dead-lettered' : 'ignored';
  }

  /** One record (or one row of a packed record, `what` naming it in a dead letter's reason). */
  private async one(raw: RawRecord, parsed: unknown, what?: string): Promise<RecordOutcome> {
    let result: DecodeResult;
    try {
      result = await this.decode(parsed);
    } catch (e) {
      if (!(e instanceof DecodeFailure)) throw e;
      await this.deadLetter(raw, parsed, e.code, e.message, what);
      return 'dead-lettered';
    }
    if (detectRecordFormat(parsed) === 'dms') this.dmsDecoded++;
    if (result.kind === 'ignored') {
      this.o.logger.debug('Record ignored', { origin: raw.origin, reason: result.reason });
      return 'ignored';
    }
    if (result.kind === 'control') {
      try {
        await this.control(result);
      } catch (e) {
        if (!(e instanceof PositionSpaceMismatchError)) throw e;
        await this.deadLetter(raw, parsed, e.code, e.message, what);
        return 'dead-lettered';
      }
      return 'control';
    }
    return this.changes(raw, parsed, result, what);
  }

  /** Reads the published partition tree again when `parsed` names a table the last reading did not know (at most every 2 s). */
  private async knowPartitionsOf(parsed: unknown): Promise<void> {
    if (!this.o.partitionTree) return;
    const name = tableNamed(parsed);
    if (name === null || this.tree.rootOf.has(name) || this.tree.standalone.has(name)) return;
    const now = this.now().getTime();
    if (now - this.treeReadAt < 2_000) return;
    this.treeReadAt = now;
    this.tree = (await this.o.partitionTree()) ?? EMPTY_PARTITION_TREE;
  }

  /** Decodes with the registry at hand; tables the cache does not hold yet are loaded and the record decoded again. */
  private async decode(parsed: unknown): Promise<DecodeResult> {
    await this.knowPartitionsOf(parsed);
    const ctx = (this.ctx ??= batchDecodeContext(
      {
        source: this.o.source,
        tables: this.o.tables,
        readsCatalog: !!this.o.catalogTypes,
        tree: () => this.tree,
        cache: this.cache,
        catalogKeys: this.catalogKeys,
      },
      this.misses,
    ));
    const misses = this.misses;
    for (let pass = 1; ; pass++) {
      misses.clear();
      let result: DecodeResult | undefined;
      let failure: unknown;
      try {
        result = decodeRawRecord(parsed, ctx);
      } catch (e) {
        failure = e;
      }
      if (misses.size > 0 && pass < DECODE_PASSES) {
        for (const t of [...misses]) {
          const reg = await this.registry(t);
          if (this.o.catalogTypes && reg.versions.length === 0 && !this.catalogKeys.has(t) && this.o.tables.get(t) !== undefined) {
            const catalog = await this.o.catalogTypes(t);
            // Retried, never dead-lettered: the types (and key) are published by the time the record comes again.
            if (catalog === null) throw new TableTypesPendingError(this.o.source, t, 'no catalog types (and so no primary key) are published for it yet');
            this.catalogKeys.set(t, catalog.key);
          }
        }
        continue;
      }
      if (result !== undefined) return result;
      const code = failure instanceof CdcError ? failure.code : 'DECODE_FAILED';
      throw new DecodeFailure(code, failure instanceof Error ? failure.message : String(failure));
    }
  }

  private async changes(
    raw: RawRecord,
    parsed: unknown,
    decoded: Extract<DecodeResult, { kind: 'changes' }>,
    what: string | undefined,
  ): Promise<RecordOutcome> {
    if (decoded.changes.length === 0) return 'ignored';
    if (decoded.changes[0]!.source !== this.o.source) {
      const named = `source: the record names source ${JSON.stringify(decoded.changes[0]!.source)}`;
      await this.deadLetter(raw, parsed, 'SOURCE_MISMATCH', `${named} but this normalizer serves ${JSON.stringify(this.o.source)}`, what);
      return 'dead-lettered';
    }
    // Excluded columns never enter the change log, even if the capture delivered them (DMS's remove-column on a Kinesis target is not documented).
    // Idempotent; masking is never redone: a masked value hashed twice would differ from every other path (docs/masking.md).
    const exclude = this.o.tables.columnRules(decoded.changes[0]!.table).exclude;
    let result = decoded;
    if (exclude.length > 0) {
      try {
        result = { ...decoded, changes: decoded.changes.map((c) => applyColumnRulesToChange(c, { mask: [], exclude })) };
      } catch (e) {
        if (!(e instanceof CdcError)) throw e;
        await this.deadLetter(raw, parsed, e.code, e.message, what);
        return 'dead-lettered';
      }
    }
    // Per-event transforms (lambda/core/tables/transforms.ts, docs/transforms.md), the ones registered for
    // this position: a replayed record is shaped as it was the first time. A value that does not
    // coerce dead-letters the record with its reason.
    const table = decoded.changes[0]!.table;
    const spec = transformsAt(await this.registry(table), decoded.changes[0]!.position, this.o.tables.transforms(table));
    const untransformed = result;
    if (!isIdentity(spec)) {
      try {
        result = { ...result, changes: result.changes.map((c) => transformChange(c, spec)) };
      } catch (e) {
        if (!(e instanceof CdcError)) throw e;
        await this.deadLetter(raw, parsed, e.code, e.message, what);
        return 'dead-lettered';
      }
    }
    const { changes } = result;
    const first = changes[0]!;
    // Shape check before the registry: once per change (the result depends on the version only in that field, stamped below on it).
    let shaped: ChangeEvent[];
    try {
      shaped = changes.map((c) => validateDecodedChange(c, 1));
    } catch (e) {
      await this.deadLetter(raw, parsed, e instanceof CdcError ? e.code : 'INVALID_RECORD', (e as Error).message, what);
      return 'dead-lettered';
    }
    // A table first seen through a record without types is registered with its catalog's types,
    // never untyped (lambda/core/shared/catalog-types.ts): checked before anything is noted, since the
    // record is retried when they are not published yet.
    let observed = observe(untransformed);
    // Only for a captured table (declared, or matched by a capture rule): the ones whose types the snapshot worker publishes.
    if (
      this.o.catalogTypes &&
      this.o.tables.get(first.table) !== undefined &&
      observed.columns.some((c) => c.type === null) &&
      (await this.registry(first.table)).versions.length === 0
    ) {
      const catalog = await this.o.catalogTypes(first.table);
      if (catalog === null) throw new TableTypesPendingError(this.o.source, first.table, 'no catalog types are published for it yet');
      const typed = withCatalogTypes(observed, catalog);
      if (typed.missing.length > 0)
        throw new TableTypesPendingError(this.o.source, first.table, `the published catalog types lack column(s) ${typed.missing.join(', ')}`);
      observed = typed.shape;
    }
    const regression = this.parent.checkMonotonic(raw.origin, changes);
    if (regression) {
      await this.deadLetter(raw, parsed, regression.code, regression.message, what);
      await this.resnapshot(first.table, regression);
      return 'dead-lettered';
    }
    // Masked columns are registered as text on every path (lambda/core/tables/masking.ts), then shaped by the transforms.
    const ruled: ObservedShape = {
      ...observed,
      columns: transformColumns(applyColumnRulesToColumns(observed.columns, this.o.tables.columnRules(first.table)), spec, (name) => ({
        name,
        type: TENANT_COLUMN_TYPE,
        nullable: null,
      })),
      key: observed.key === null ? null : transformKeyColumns(observed.key, spec),
    };
    const version = await this.resolveVersion(first.table, ruled, first.position, preImageOf(changes, ruled.key), spec);
    const stamped: Buffered<E>[] = [];
    try {
      assertSchemaVersion(version);
      for (const event of shaped) {
        event.schemaVersion = version;
        stamped.push({ event, encoded: this.encodeInLine(event) ?? (await this.storeOutOfLine(event)) });
      }
    } catch (e) {
      if (!(e instanceof CdcError)) throw e;
      await this.deadLetter(raw, parsed, e.code, e.message, what);
      return 'dead-lettered';
    }
    // The source's highest position is a log position (docs/architecture.md §5.2): a polled table's never enter it.
    if (this.o.tables.captureMode(first.table) !== 'poll') for (const c of changes) this.parent.notePosition(c.position);
    // Gap check on the heartbeat: a missed or regressed beat, another identity or timeline (lambda/core/capture/continuity.ts).
    if (isHeartbeatTable(first.table)) for (const c of changes) await checkHeartbeatContinuity(this.continuityDeps(), c.after);
    this.buffer.push(...stamped);
    return 'buffered';
  }

  /** Encodes an event as one change-log record; null when it is over the record limit and a payload store can take it whole. */
  private encodeInLine(event: ChangeEvent): E | null {
    try {
      return this.o.changeLog.encode(event);
    } catch (e) {
      if (!(e instanceof CdcError) || e.code !== RECORD_TOO_LARGE || !this.o.payloads || !this.o.changeLog.encodeClaim) throw e;
      return null;
    }
  }

  /** Stores an event over the record limit whole and encodes its claim check instead (`encodeInLine` returned null: a store and a claim encoder exist). */
  private async storeOutOfLine(event: ChangeEvent): Promise<E> {
    const body = Buffer.from(JSON.stringify(event), 'utf8');
    const digest = sha256(body);
    const ref = await this.o.payloads!.put(claimKey(event.source, event.table, event.position, digest), body);
    this.o.logger.info('Event stored out of line (claim check on the change log)', {
      table: event.table,
      position: event.position,
      bytes: body.byteLength,
      ref,
    });
    return this.o.changeLog.encodeClaim!({
      v: 1,
      claim: { ref, bytes: body.byteLength, sha256: digest },
      source: event.source,
      table: event.table,
      key: event.key as ClaimCheck['key'],
      position: event.position,
    });
  }

  private async control(control: DecodedControl): Promise<void> {
    const { table } = control;
    for (let attempt = 1; attempt <= REGISTRATION_ATTEMPTS; attempt++) {
      const reg = await this.registry(table);
      const latest = reg.versions.at(-1) ?? null;
      const observed: ObservedColumn[] | null = control.columns?.map((c) => ({ name: c.name, type: c.type, nullable: c.nullable })) ?? null;
      const spec = this.o.tables.transforms(table);
      const columns =
        observed === null
          ? null
          : transformColumns(applyColumnRulesToColumns(observed, this.o.tables.columnRules(table)), spec, (name) => ({
              name,
              type: TENANT_COLUMN_TYPE,
              nullable: true,
            }));
      const key = control.key ?? this.o.tables.keyColumns(table);
      const c = classifyControl(latest, { operation: control.operation, columns, key: key === null ? null : transformKeyColumns(key, spec) });
      this.o.logger.info('Control record', { table, operation: control.operation, classification: c.kind, reason: c.reason });
      if (c.kind === 'same') return;
      const effective = control.position ?? maxPosition(this.highestLogPosition(table, reg), latest?.effectivePosition ?? POSITION_ZERO);
      if ((await this.evolve(table, reg, latest, c, effective, 'key', `control record ${control.operation}`, spec)) !== null) return;
    }
    throw new SchemaRegistrationContendedError(this.o.source, table, REGISTRATION_ATTEMPTS);
  }

  /**
   * The highest log position seen for the source, for a control record of `table` that carries no
   * position: only a log-captured table's versions may take effect there (a polled table's
   * positions are its own space, docs/architecture.md §5.2).
   */
  private highestLogPosition(table: string, reg: Registry): Position {
    if (this.o.tables.captureMode(table) === 'poll') {
      throw new PositionSpaceMismatchError(
        `control record of ${this.o.source}/${table} without a position`,
        reg.table?.positionSpace ?? 'poll-timestamp',
        'wal',
      );
    }
    return this.parent.highestPosition ?? POSITION_ZERO;
  }

  /**
   * The position space a table is registered in (lambda/core/shared/position-space.ts): `wal` for a
   * log-captured table; for a polled one the space of its poll column's type among `columns`
   * (after renames), or null when the type does not tell (then it is told by the column at the
   * table's next snapshot).
   */
  private positionSpaceOf(table: string, columns: readonly { name: string; type: string | null }[] | null, transforms: TableTransforms): PositionSpace | null {
    if (this.o.tables.captureMode(table) !== 'poll') return 'wal';
    const pc = this.o.tables.get(table)?.pollColumn;
    if (pc === undefined || columns === null) return null;
    const name = transforms.rename?.[pc] ?? pc;
    return pollSpaceOfType(columns.find((c) => c.name === name)?.type ?? null);
  }

  /** The schema version an event at `position` is read with, registering or evolving as needed. */
  private async resolveVersion(table: string, observed: ObservedShape, position: Position, preImage: PreImage, transforms: TableTransforms): Promise<number> {
    for (let attempt = 1; attempt <= REGISTRATION_ATTEMPTS; attempt++) {
      const reg = await this.registry(table);
      const latest = reg.versions.at(-1) ?? null;
      if (latest && position <= latest.effectivePosition) {
        const era = [...reg.versions].reverse().find((v) => v.effectivePosition <= position) ?? reg.versions[0]!;
        if (sameTransforms(era.transforms, transforms) && classifySchema(era, observed).kind === 'same') return era.version;
      }
      let c = classifySchema(latest, observed);
      const transformsChanged = latest !== null && !sameTransforms(latest.transforms, transforms);
      if (c.kind === 'same' && !transformsChanged) return latest!.version;
      // Same shape, other transforms (a new tenant value): still a new version, so the position from which they apply is registered.
      if (c.kind === 'same') c = { ...c, kind: 'compatible', reason: 'the transforms changed' };
      const effective = latest ? maxPosition(position, latest.effectivePosition) : position;
      const version = await this.evolve(table, reg, latest, c, effective, preImage, 'data record', transforms);
      if (version !== null) return version;
    }
    throw new SchemaRegistrationContendedError(this.o.source, table, REGISTRATION_ATTEMPTS);
  }

  /**
   * Registers the table or its next version for a non-`same` classification; a breaking change
   * pauses the table first (so a crash in between leaves it paused, never silently active).
   * Returns the version the table now has, or null when another writer got there first (the
   * registry cache of the table is dropped; the caller classifies again).
   */
  private async evolve(
    table: string,
    reg: Registry,
    latest: SchemaVersion | null,
    c: Classification,
    effective: Position,
    preImage: PreImage,
    trigger: string,
    transforms: TableTransforms,
  ): Promise<number | null> {
    const { source: sourceId } = this.o;
    const at = this.now().toISOString();
    const shaped = isIdentity(transforms) ? {} : { transforms };
    if (latest === null) {
      // Only a new table is classified against nothing (a drop of a table never seen is `same`).
      if (c.kind !== 'compatible') throw new CdcError('INTERNAL', `unexpected ${c.kind} classification of unregistered table ${table}: ${c.reason}`);
      const schema: SchemaVersion = {
        source: sourceId,
        table,
        version: 1,
        columns: c.columns,
        key: c.key,
        effectivePosition: effective,
        registeredAt: at,
        ...shaped,
      };
      const polled = this.o.tables.captureMode(table) === 'poll';
      const space = this.positionSpaceOf(table, c.columns, transforms);
      const record: TableRecord = {
        source: sourceId,
        table,
        state: 'active',
        currentVersion: 1,
        deleteMode: this.o.tables.deleteMode(table),
        preImage,
        stateReason: null,
        updatedAt: at,
        ...(polled ? { capture: 'poll' as const } : {}),
        ...(space ? { positionSpace: space } : {}),
      };
      const ok = await this.o.controlPlane.registerTable(
        record,
        schema,
        this.audit('register-table', table, at, {
          ...(isIdentity(transforms) ? {} : { transforms }),
          ...(polled ? { capture: 'poll', deletesObservable: false } : {}),
          ...(space ? { positionSpace: space } : {}),
          version: 1,
          columns: c.columns,
          key: c.key,
          effectivePosition: effective,
          deleteMode: record.deleteMode,
          preImage,
          trigger,
        }),
      );
      if (!ok) {
        this.cache.delete(table);
        return null;
      }
      this.cache.set(table, { table: record, versions: [schema] });
      this.o.metrics.count(MetricName.SCHEMA_CHANGES, 1);
      this.o.logger.info('Table registered', { table, version: 1, columns: c.columns.map((x) => x.name), key: c.key, effectivePosition: effective });
      return 1;
    }

    const transformsChanged = !sameTransforms(latest.transforms, transforms);
    if (transformsChanged) {
      const notice = transformChangeNotice(table, latest.transforms, transforms, effective);
      this.o.logger.warn('Table transforms changed: rows already in the sinks keep the old shape', {
        source: sourceId,
        table,
        from: transformsText(latest.transforms),
        to: transformsText(transforms),
        effectivePosition: effective,
        notice,
      });
      c = { ...c, reason: `${notice} ${c.reason}` };
    }
    if (c.kind === 'breaking') await this.pause(table, reg, c, latest.version + 1);
    if (!differs(latest, c.columns, c.key) && !transformsChanged) return latest.version; // e.g. a dropped table: paused, nothing new to register
    const registeredAt = this.now().toISOString();
    const schema: SchemaVersion = {
      source: sourceId,
      table,
      version: latest.version + 1,
      columns: c.columns,
      key: c.key,
      effectivePosition: effective,
      registeredAt,
      ...shaped,
    };
    const ok = await this.o.controlPlane.addSchemaVersion(
      schema,
      this.audit('add-schema-version', table, registeredAt, {
        version: schema.version,
        previousVersion: latest.version,
        classification: c.kind,
        reason: c.reason,
        changes: c.changes,
        effectivePosition: effective,
        trigger,
        ...(transformsChanged
          ? {
              transforms,
              previousTransforms: latest.transforms ?? {},
              rebuild: 'rows already in the sinks keep the old shape: re-snapshot the table and run `cdc rebuild` for each sink',
            }
          : {}),
      }),
    );
    if (!ok) {
      this.cache.delete(table);
      return null;
    }
    reg.versions.push(schema);
    if (reg.table) reg.table = { ...reg.table, currentVersion: schema.version };
    this.o.metrics.count(MetricName.SCHEMA_CHANGES, 1);
    this.o.logger.info('Schema version registered', { table, version: schema.version, classification: c.kind, reason: c.reason, effectivePosition: effective });
    return schema.version;
  }

  private async pause(table: string, reg: Registry, c: Classification, version: number): Promise<void> {
    const state = reg.table?.state ?? 'active';
    const reason = `SCHEMA_BREAKING: ${c.reason} (schema version ${version})`;
    this.o.logger.error('Table paused: breaking schema change', {
      source: this.o.source,
      table,
      version,
      reason: c.reason,
      hint: PAUSE_RECOVERY_HINT,
      previousState: state,
    });
    if (state === 'needs-resnapshot') {
      // Already stopped harder than a pause; record the change without moving the state.
      await this.o.controlPlane.appendAudit(
        this.audit('breaking-schema-change', table, this.now().toISOString(), { version, reason: c.reason, changes: c.changes, state }),
      );
      return;
    }
    await this.o.controlPlane.setTableState(
      this.o.source,
      table,
      'paused',
      reason,
      this.audit('pause-table', table, this.now().toISOString(), {
        from: state,
        to: 'paused',
        version,
        reason: c.reason,
        changes: c.changes,
        hint: PAUSE_RECOVERY_HINT,
      }),
    );
    if (reg.table) reg.table = { ...reg.table, state: 'paused', stateReason: reason };
    this.o.metrics.count(MetricName.TABLES_PAUSED, 1);
  }

  /** Marks a registered table for re-snapshot after a loud stop (invariant 3), with its audit entry. */
  private async resnapshot(table: string, err: CdcError): Promise<void> {
    const reg = await this.registry(table);
    const state = reg.table?.state;
    if (!reg.table || state === 'needs-resnapshot') return;
    const reason = `${err.code}: ${err.message}`;
    this.o.logger.error('Table needs a re-snapshot', { source: this.o.source, table, code: err.code, reason: err.message, previousState: state });
    await this.o.controlPlane.setTableState(
      this.o.source,
      table,
      'needs-resnapshot',
      reason,
      this.audit('needs-resnapshot', table, this.now().toISOString(), { from: state, to: 'needs-resnapshot', code: err.code, reason: err.message }),
    );
    reg.table = { ...reg.table, state: 'needs-resnapshot', stateReason: reason };
  }

  private async registry(table: string): Promise<Registry> {
    const cached = this.cache.get(table);
    if (cached) return cached;
    const reg: Registry = await this.parent.schemaVersions.load(this.o.controlPlane, this.o.source, table);
    this.cache.set(table, reg);
    return reg;
  }

  private continuityDeps(): HeartbeatContinuityDeps {
    return {
      source: this.o.source,
      controlPlane: this.o.controlPlane,
      now: this.now,
      actor: NORMALIZER_STAGE,
      count: () => this.o.metrics.count(MetricName.SOURCE_DISCONTINUITIES, 1),
      log: (error, extra) =>
        this.o.logger.error('Source history is not continuous: tables marked for re-snapshot', {
          source: this.o.source,
          code: error.code,
          error: error.message,
          ...extra,
        }),
    };
  }

  private audit(action: string, table: string, at: string, detail: Record<string, unknown>): AuditEntry {
    return { at, actor: NORMALIZER_STAGE, action, source: this.o.source, table, outcome: 'done', detail };
  }

  /** Dead-letters a record; `what` names the row of a packed record it stands for, in the reason. */
  private async deadLetter(raw: RawRecord, parsed: unknown, code: string, why: string, what?: string): Promise<void> {
    const reason = what === undefined ? why : `${what}: ${why}`;
    const table = tableNamed(parsed);
    await this.o.controlPlane.putDeadLetter({
      at: this.now().toISOString(),
      stage: NORMALIZER_STAGE,
      source: this.o.source,
      table,
      code,
      reason,
      origin: raw.origin,
      record: raw.text,
      truncated: false,
    });
    this.o.metrics.count(MetricName.DEAD_LETTERS, 1, { [MetricDimension.STAGE]: NORMALIZER_STAGE });
    this.o.logger.warn('Record dead-lettered', { code, reason, origin: raw.origin, table });
  }
}

/** A record that cannot be decoded (bad input, not an infrastructure failure). */
class DecodeFailure extends Error {
  constructor(
    readonly code: string,
    message: string,
  ) {
    super(message);
  }
}

/** The type of a stamped tenant column (docs/transforms.md). */
export const TENANT_COLUMN_TYPE = 'text';

/**
 * The transforms an event at `position` is shaped with: those of the schema version in effect at
 * that position when it is not newer than the latest version's effective position (a replay, or
 * another row of the snapshot chunk that registered it), else the configured ones (a difference
 * from the latest version's registers a new version, effective at this position).
 */
export function transformsAt(reg: { versions: readonly SchemaVersion[] }, position: Position, configured: TableTransforms): TableTransforms {
  const latest = reg.versions.at(-1);
  if (!latest || position > latest.effectivePosition) return configured;
  const era = [...reg.versions].reverse().find((v) => v.effectivePosition <= position) ?? reg.versions[0]!;
  return era.transforms ?? {};
}

function differs(v: SchemaVersion, columns: ColumnDef[], key: string[]): boolean {
  return JSON.stringify([v.columns, v.key]) !== JSON.stringify([columns, key]);
}

/** What the source supplies as a before image, as far as one record shows: the full row or (at least) the key. */
function preImageOf(changes: DecodedChange[], keyColumns: string[] | null): PreImage {
  const key = new Set(keyColumns ?? []);
  return changes.some((c) => c.before !== null && Object.keys(c.before).some((k) => !key.has(k))) ? 'full' : 'key';
}

/** The `schema.table` a raw record names, best effort (for dead letters); null when it names none. */
function tableNamed(parsed: unknown): string | null {
  if (typeof parsed !== 'object' || parsed === null) return null;
  const r = parsed as Record<string, unknown>;
  if (typeof r.table === 'string' && /^[^.]+\.[^.]+$/.test(r.table)) return r.table;
  const m = r.metadata;
  if (typeof m === 'object' && m !== null) {
    const s = (m as Record<string, unknown>)['schema-name'];
    const t = (m as Record<string, unknown>)['table-name'];
    if (typeof s === 'string' && typeof t === 'string' && s !== '' && t !== '' && !s.includes('.') && !t.includes('.')) return `${s}.${t}`;
  }
  return null;
}
