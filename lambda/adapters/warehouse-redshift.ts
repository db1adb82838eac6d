/**
 * The warehouse port (`Warehouse` of lambda/core/warehouse/warehouse-port.ts) on Redshift, over
 * the one loader of the warehouse (`RedshiftLoader`; docs/warehouse-apply.md, "Redshift: the
 * applier"). Every shard's applier shares one `RedshiftWarehouse`, so the warehouse sees one
 * session whatever the number of shards. `applyTable` hands the table's events to the loader and
 * returns once the load that carries them has committed: the apply advances the table's
 * high-water mark and the shard's checkpoint only after that COMMIT.
 *
 * Before they are handed over:
 * - an update that does not carry every column (an unchanged TOAST value) is completed from the
 *   key's newest earlier image in the batch, else from the view (read on the loader's session,
 *   after every load queued before it: the key's earlier events came through the same shard and
 *   are loaded); with no live row underneath the update is a full image, its absent columns NULL,
 *   as on PostgreSQL (docs/warehouse-apply.md): a newer image of the key (a snapshot's) wins by position;
 * - the insert half of a primary-key change that lacks columns is completed from its old key's image
 *   just before the change (the batch's, else the changelog's once the delete half is loaded), and
 *   the delete half is loaded as a plain delete (docs/primary-key-changes.md); one whose old key's
 *   delete half is not loaded yet is held (`holdBack`), and so is every later event of its key that
 *   needs it: they go to the table's handover table with the batch, and the loader completes them;
 * - a truncate is loaded as it is (a row of the table's truncations, docs/truncate.md);
 * - every value is checked against its column (`stageEvent`): a value the column's policy refuses
 *   fails the batch as a refused value, so the apply isolates the event and dead-letters it.
 */
import { plainEvent } from '../core/sink/lazy-event.ts';
import type { ChangeEvent, JsonValue } from '../core/shared/event.ts';
import type { SchemaVersion } from '../core/shared/control-plane.ts';
import { appendedPlan } from '../core/sink/apply-plan.ts';
import type {
  DeltaStats,
  MergeResult,
  MergeTarget,
  TableApplyResult,
  TableBatch,
  TableOutcome,
  Warehouse,
  WriteErrorKind,
} from '../core/warehouse/warehouse-port.ts';
import {
  KeyChangeIncompleteError,
  KeyChangePendingError,
  NotLoadableError,
  stageEvent,
  type Held,
  type InheritedMarks,
  type LoadExtras,
  type LoadItem,
} from '../core/warehouse/redshift-load.ts';
import { evolvedTable, needsEvolving } from '../core/warehouse/redshift-catalog.ts';
import { stageHeld } from '../core/warehouse/redshift-handover.ts';
import { holdBack } from './redshift-hold.ts';
import { pendingStatsSql, RedshiftTypeChangeError, FoldedColumnError, type RedshiftTable } from '../core/warehouse/redshift-sql.ts';
import { currentRowsSql, keyChangeDeleteSql, keyChangeDonorSql } from '../core/warehouse/redshift-key-sql.ts';
import {
  redshiftColumn,
  redshiftText,
  RedshiftValueRefusedError,
  unheldEntries,
  type RedshiftColumn,
  type ValuePolicy,
} from '../core/warehouse/redshift-types.ts';
import { warehouseTable } from '../core/warehouse/warehouse-sql.ts';
import type { LoadReceipt } from './redshift-loader.ts';
import { persistentTableErrorCode } from './warehouse-pg-errors.ts';
import { BatchPartnerFailedError, LoadRequestFailedError, requestTableId } from '../core/warehouse/redshift-requests.ts';

/**
 * What the writer needs of a loader: the in-process `RedshiftLoader` (`cdc local`), or the applier's
 * side of the loader function (`RedshiftStagingSubmitter`, on AWS). `submit` resolves only after the
 * load carrying the events has committed.
 */
export interface RedshiftLoadPort {
  /** The table `want` names as the cluster has it (`existingTable`), or null when it has none. */
  existing(want: RedshiftTable): Promise<RedshiftTable | null>;
  register(r: RedshiftTable): Promise<void>;
  /** Moves the table from the columns it has to `to`'s (`evolveSql`); the table is known to the loader afterwards. */
  evolve(from: RedshiftTable, to: RedshiftTable): Promise<void>;
  /** Loads what is queued in this process (nothing to do where nothing is queued). */
  flush(): Promise<unknown>;
  /** A read on the warehouse after the loads this process queued before it. */
  read(text: string): Promise<Record<string, unknown>[]>;
  /** `extras`: the markers of values the events took from the warehouse, and events for the table's handover table, in the same load (`LoadExtras`). */
  submit(r: RedshiftTable, events: readonly ChangeEvent[], appliedAt?: Date, extras?: LoadExtras): Promise<LoadReceipt>;
  /**
   * The tables of one batch loaded together or not at all, where the loader can (the loader function's
   * one request per batch); it throws `LoadRequestFailedError` naming the failing table where one is known.
   */
  submitMany?(items: readonly LoadItem[], appliedAt?: Date): Promise<LoadReceipt[]>;
  /** Merges the tables with pending rows; `tables` is how many it merged (0 where another process merges). */
  merge(): Promise<{ tables: number }>;
}

/** What completing a batch's primary-key changes knows so far (`RedshiftWarehouse.complete`). */
interface KeyChangeContext {
  /**
   * Each key's newest image in the batch so far (null: deleted), by key as staged text; not `whole` when it is only
   * what partial updates delivered (completed from the view, which a redelivered batch may have seen later).
   */
  images: Map<string, { row: Readonly<Record<string, JsonValue>>; whole: boolean } | null>;
  /** The batch's delete halves that hand columns over: `<old key>@<position>`. */
  deletes: Set<string>;
  /** Each key's newest image as partial updates complete from it (the view's row, then the batch's), with its markers. */
  stored: Map<string, StoredImage>;
}

/**
 * A key's image in the batch after `e` (`KeyChangeContext.images`): a delete's is null; a full image, or a partial
 * update over a whole one, is whole; a partial update over none (completed from the view) keeps only what was delivered.
 */
function imageOf(
  prev: { row: Readonly<Record<string, JsonValue>>; whole: boolean } | null | undefined,
  e: ChangeEvent,
  completed: Readonly<Record<string, JsonValue>> | null,
): { row: Readonly<Record<string, JsonValue>>; whole: boolean } | null {
  if (completed === null) return null;
  if (e.op !== 'update' || e.missing.length === 0 || prev?.whole) return { row: completed, whole: true };
  return { row: { ...(prev?.row ?? {}), ...e.after }, whole: false };
}

/** Staged-text values of `columns` from a read's row (`c<offset + i>`), back to the values a staged event holds. */
function stagedValues(columns: readonly RedshiftColumn[], row: Record<string, unknown>, offset: number): Record<string, JsonValue> {
  const values: Record<string, JsonValue> = {};
  columns.forEach((c, i) => {
    const v = row[`c${offset + i}`] as string | null;
    values[c.name] = v !== null && c.kind === 'varbyte' ? `\\x${v}` : v;
  });
  return values;
}

/** A table's batch ready for the loader: what it loads, the markers its values carry on, and what it holds. */
interface Prepared extends LoadItem {
  events: ChangeEvent[];
  held: Held[];
}

/** A stored row's values, by column, with the markers of its NULLs that are values Redshift could not hold (`unheldEntries`). */
interface StoredImage {
  row: Readonly<Record<string, JsonValue>>;
  marks: ReadonlyMap<string, string>;
}

const NO_MARKS: ReadonlyMap<string, string> = new Map();

/** The markers of `columns` that `completed` took as NULL from a row with `marks`. */
function carried(columns: readonly string[], completed: Readonly<Record<string, JsonValue>>, marks: ReadonlyMap<string, string>): Map<string, string> {
  const out = new Map<string, string>();
  for (const c of columns) {
    const m = marks.get(c);
    if (m !== undefined && (completed[c] ?? null) === null) out.set(c, m);
  }
  return out;
}

/** The result of a table's events once the load carrying them (and holding `held`) has committed. */
function loaded(events: ChangeEvent[], held: readonly Held[] = []): TableApplyResult {
  const all = appendedPlan([...events, ...held.map((h) => h.event)]);
  const plan = { ...appendedPlan(events), held: held.map((h) => h.event), maxPosition: all.maxPosition };
  return { plan, committedAt: Date.now(), ddl: [], mode: 'append', pending: { rows: 0, since: null } };
}

export interface RedshiftWarehouseOptions {
  loader: RedshiftLoadPort;
  /** A column's value policy (the loader's `policyOf`). @default 'refuse-row' */
  policyOf?: (table: string, column: string) => ValuePolicy;
}

/** The Redshift table of a schema version: key columns, then the data columns, typed by the Redshift dialect. */
export function redshiftTableOf(target: TableBatch['target'] & object, v: SchemaVersion, hard: boolean): RedshiftTable {
  const byName = new Map(v.columns.map((c) => [c.name, c]));
  return {
    t: target,
    key: v.key.map((k) => redshiftColumn(k, byName.get(k)?.type ?? null)),
    data: v.columns.filter((c) => !v.key.includes(c.name)).map((c) => redshiftColumn(c.name, c.type)),
    hard,
  };
}

const keyText = (key: readonly RedshiftColumn[], table: string, row: Readonly<Record<string, JsonValue>>): string[] =>
  key.map((c) => {
    const v = row[c.name] ?? null;
    if (v === null) throw new NotLoadableError(table, '-', `a null in key column ${c.name}`);
    const t = redshiftText(c, table, v);
    if (!('text' in t)) throw new RedshiftValueRefusedError(table, c.name, t.reason, t.detail);
    return t.text;
  });

/**
 * What a load request that failed alone with a SQLSTATE means for the apply (docs/warehouse-apply.md,
 * "Redshift: the applier"): a refused value (class 22, 54) isolates the events and dead-letters the
 * refused one; an error about the table a retry will not fix holds it (lambda/adapters/warehouse-pg-errors.ts);
 * anything else is retried.
 */
function loadFailureKind(sqlState: string): WriteErrorKind | null {
  if (sqlState.startsWith('22') || sqlState.startsWith('54')) return { kind: 'value-rejected' };
  const code = persistentTableErrorCode({ code: sqlState });
  return code ? { kind: 'persistent', code } : null;
}

export class RedshiftWarehouse implements Warehouse {
  private readonly tables = new Map<string, RedshiftTable>();

  constructor(private readonly o: RedshiftWarehouseOptions) {}

  private policy(table: string): (column: string) => ValuePolicy {
    return (c) => this.o.policyOf?.(table, c) ?? 'refuse-row';
  }

  /**
   * The table as the loader takes the batch: the newest schema version of the batch, the cluster's table
   * registered or evolved to it first. What this process knows of the cluster's table is kept (`tables`); at a
   * process's first sight of a table it is read from the cluster (a table made by an older schema version
   * before a restart; docs/warehouse-apply.md, "Redshift: schema changes").
   */
  private async tableOf(batch: TableBatch): Promise<RedshiftTable> {
    const target = batch.target ?? warehouseTable(batch.source, batch.table);
    const newest = Math.max(...batch.events.map((e) => e.schemaVersion));
    const v = batch.schemas.get(newest);
    if (v === undefined) throw new Error(`${batch.table}: schema version ${newest} was not read`);
    const want = redshiftTableOf(target, v, batch.deleteMode === 'hard');
    const id = `${target.schema}.${target.view}`.toLowerCase();
    const known = this.tables.get(id);
    if (known !== undefined && !needsEvolving(known, want)) return want;
    const have = known ?? (await this.o.loader.existing(want));
    if (have === null) await this.o.loader.register(want);
    else await this.evolve(id, have, want);
    this.tables.set(id, have === null ? want : evolvedTable(have, want));
    return want;
  }

  /**
   * Evolves the table from `have` (at first sight too, where nothing may change: the loader learns the table).
   * A failure forgets what this process knew of it, so the batch's next try plans from the cluster again
   * (another process may have evolved it meanwhile: its `ADD COLUMN` fails here).
   */
  private async evolve(id: string, have: RedshiftTable, want: RedshiftTable): Promise<void> {
    try {
      // The old version's queued events load first: evolve refuses while they wait.
      if (needsEvolving(have, want)) await this.o.loader.flush();
      await this.o.loader.evolve(have, want);
    } catch (err) {
      this.tables.delete(id);
      throw err;
    }
  }

  /**
   * The batch's events as the loader takes them: partial updates and primary-key changes' inserts completed,
   * primary-key deletes plain, truncates as they are (each ends the images of the batch before it). A value taken
   * from the warehouse where it is NULL with a marker keeps its marker (`inherited`).
   */
  private async complete(r: RedshiftTable, events: readonly ChangeEvent[]): Promise<{ events: ChangeEvent[]; inherited: InheritedMarks }> {
    // By position; at one position a key change's insert half before its delete half, so the old key's image is still the batch's.
    const rank = (e: ChangeEvent): number => (e.op === 'delete' ? 1 : 0);
    const sorted = [...events].sort((a, b) => (a.position < b.position ? -1 : a.position > b.position ? 1 : rank(a) - rank(b)));
    const table = r.t.tableId;
    for (const e of sorted)
      if (e.missing.length > 0 && e.op === 'delete') throw new NotLoadableError(table, e.position, `a delete without ${e.missing.join(', ')}`);
    const stored = await this.viewRows(
      r,
      sorted.filter((e) => e.op === 'update' && e.missing.length > 0),
    );
    const ctx: KeyChangeContext = { images: new Map(), deletes: new Set(), stored };
    for (const e of sorted) if ((e.handover?.length ?? 0) > 0) ctx.deletes.add(`${JSON.stringify(keyText(r.key, table, e.key))}@${e.position}`);
    const out: ChangeEvent[] = [];
    const inherited = new Map<ChangeEvent, string[]>();
    for (const e of sorted) {
      if (e.op === 'truncate') {
        // The rows before it are gone: nothing after it is completed from them.
        stored.clear();
        ctx.images.clear();
        out.push(e);
        continue;
      }
      const k = JSON.stringify(keyText(r.key, table, e.key));
      let next = e;
      let marks: ReadonlyMap<string, string> = NO_MARKS;
      if (e.missing.length > 0 && e.op === 'update') {
        // No live row underneath: the update is a full image, its absent columns NULL, as on PostgreSQL (lambda/core/sink/apply-plan.ts).
        const base = stored.get(k) ?? { row: {}, marks: NO_MARKS };
        const after = { ...e.after };
        for (const m of e.missing) after[m] = base.row[m] ?? null;
        next = { ...plainEvent(e), after, missing: [] };
        marks = carried(e.missing, after, base.marks);
      } else if (e.missing.length > 0) {
        const donated = await this.donor(r, e, ctx);
        next = { ...plainEvent(e), after: { ...e.after, ...donated.row }, missing: [] };
        marks = carried(e.missing, next.after!, donated.marks);
      } else if ((e.handover?.length ?? 0) > 0) next = { ...plainEvent(e), handover: [] };
      const image = next.op === 'delete' ? null : (next.after ?? null);
      if (image === null) stored.delete(k);
      else stored.set(k, { row: image, marks });
      ctx.images.set(k, imageOf(ctx.images.get(k), e, image));
      if (marks.size > 0) inherited.set(next, [...marks.values()]);
      out.push(next);
    }
    return { events: out, inherited };
  }

  /** The view's rows of the keys of `updates` (partial updates), as staged text with their markers, by key: what they are completed with. */
  private async viewRows(r: RedshiftTable, updates: readonly ChangeEvent[]): Promise<Map<string, StoredImage>> {
    const stored = new Map<string, StoredImage>();
    if (updates.length === 0) return stored;
    const table = r.t.tableId;
    const keys = [...new Map(updates.map((e) => [JSON.stringify(keyText(r.key, table, e.key)), keyText(r.key, table, e.key)])).values()];
    for (const row of await this.o.loader.read(currentRowsSql(r, keys, r.data))) {
      const k = r.key.map((_, i) => row[`c${i}`] as string);
      const marks = unheldEntries(
        (row.unheld as string | null) ?? null,
        r.data.map((c) => c.name),
      );
      stored.set(JSON.stringify(k), { row: stagedValues(r.data, row, r.key.length), marks });
    }
    return stored;
  }

  /**
   * The values the insert half `e` of a primary-key change lacks, from its old key's image just before the change
   * (docs/primary-key-changes.md): the batch's own when the old key has events in it, else the changelog's (every
   * loaded event is there), once the old key's delete half is loaded or in this batch. Not loaded yet: delivered
   * again (`KeyChangePendingError`); no image (the old key had no row): `KeyChangeIncompleteError`.
   */
  private async donor(r: RedshiftTable, e: ChangeEvent, ctx: KeyChangeContext): Promise<StoredImage> {
    const table = r.t.tableId;
    const before = e.before ?? {};
    const missingKey = r.key.find((c) => before[c.name] === undefined || before[c.name] === null);
    if (missingKey !== undefined)
      throw new KeyChangeIncompleteError(table, e.position, `an ${e.op} without ${e.missing.join(', ')} that names no old key (${missingKey.name})`);
    const oldKey = keyText(r.key, table, before);
    const id = JSON.stringify(oldKey);
    const columns = e.missing.map((m) => r.data.find((c) => c.name === m) ?? { name: m, type: 'varchar(65535)', kind: 'varchar' as const });
    const pick = (image: Readonly<Record<string, JsonValue>>): Record<string, JsonValue> =>
      Object.fromEntries(columns.map((c) => [c.name, image[c.name] ?? null]));
    const inBatch = ctx.images.get(id);
    if (inBatch === null) throw new KeyChangeIncompleteError(table, e.position, `its old key ${id} was deleted before it`);
    // A whole image is the batch's newest of the key, which `stored` holds with its markers too.
    if (inBatch?.whole) return { row: pick(inBatch.row), marks: ctx.stored.get(id)?.marks ?? NO_MARKS };
    if (!ctx.deletes.has(`${id}@${e.position}`)) {
      const loaded = await this.o.loader.read(keyChangeDeleteSql(r, oldKey, e.position));
      if (Number(loaded[0]?.n ?? 0) === 0) throw new KeyChangePendingError(table, e.position, id);
    }
    const row = (await this.o.loader.read(keyChangeDonorSql(r, oldKey, e.position, columns)))[0];
    if (row === undefined || row.op === 'delete') throw new KeyChangeIncompleteError(table, e.position, `its old key ${id} had no row before it`);
    // What the batch's partial updates of the old key delivered is newer than the changelog's row.
    const delivered = inBatch ? Object.fromEntries(columns.filter((c) => c.name in inBatch.row).map((c) => [c.name, inBatch.row[c.name]!])) : {};
    const marks = unheldEntries(
      (row.unheld as string | null) ?? null,
      columns.filter((c) => !(c.name in delivered)).map((c) => c.name),
    );
    return { row: { ...stagedValues(columns, row, 0), ...delivered }, marks };
  }

  async applyTable(batch: TableBatch): Promise<TableApplyResult> {
    const { r, events, inherited, held } = await this.prepare(batch);
    await this.o.loader.submit(r, events, batch.appliedAt, { inherited, held });
    return loaded(events, held);
  }

  /**
   * The tables of one batch: prepared one after another (the view is read on one session), then
   * handed to the loader together, so the batch waits for one load rather than one per table
   * (docs/warehouse-apply.md, "Redshift: the applier"). A table whose preparation or load fails
   * has that error as its outcome; the others are loaded.
   */
  async applyTables(batches: readonly TableBatch[]): Promise<TableOutcome[]> {
    const prepared: Array<Prepared | { error: unknown }> = [];
    for (const b of batches) prepared.push(await this.prepare(b).catch((error: unknown) => ({ error })));
    const ready = prepared.filter((p): p is Prepared => !('error' in p));
    if (this.o.loader.submitMany && ready.length > 1) return this.submitTogether(prepared, ready, batches[0]!.appliedAt);
    return Promise.all(
      prepared.map(async (p, n): Promise<TableOutcome> => {
        if ('error' in p) return p;
        return this.o.loader.submit(p.r, p.events, batches[n]!.appliedAt, { inherited: p.inherited, held: p.held }).then(
          () => ({ result: loaded(p.events, p.held) }),
          (error: unknown) => ({ error }),
        );
      }),
    );
  }

  /**
   * One load request for the batch's prepared tables: all load in one transaction or none does. A
   * failure that names a table is that table's outcome (held or isolated by its error), and the
   * others are delivered again; any other failure is the whole batch's (thrown).
   */
  private async submitTogether(prepared: ReadonlyArray<Prepared | { error: unknown }>, ready: Prepared[], appliedAt: Date): Promise<TableOutcome[]> {
    try {
      await this.o.loader.submitMany!(ready, appliedAt);
    } catch (err) {
      if (!(err instanceof LoadRequestFailedError) || err.failedTable === undefined) throw err;
      const culprit = err.failedTable;
      return prepared.map((p) => ('error' in p ? p : { error: requestTableId(p.r) === culprit ? err : new BatchPartnerFailedError(err.requestId, culprit) }));
    }
    return prepared.map((p) => ('error' in p ? p : { result: loaded(p.events, p.held) }));
  }

  /** The table's events as the loader takes them, every value checked: one refused value fails the batch, the apply isolates it. */
  private async prepare(batch: TableBatch): Promise<Prepared> {
    const r = await this.tableOf(batch);
    const { pass, held } = await holdBack(
      r,
      batch.events,
      (text) => this.o.loader.read(text),
      (row) => keyText(r.key, r.t.tableId, row),
    );
    const { events, inherited } = await this.complete(r, pass);
    for (const e of events) {
      const s = stageEvent(e, r.key, r.data, this.policy(r.t.tableId), batch.appliedAt, inherited.get(e));
      if ('refused' in s) throw s.refused;
    }
    for (const h of held) {
      const s = stageHeld(h.event, r.key, r.data, this.policy(r.t.tableId), batch.appliedAt, h.oldKey);
      if ('refused' in s) throw s.refused;
    }
    return { r, events, inherited, held };
  }

  /** Merges every registered table with pending rows (the loader merges them together, in one transaction). */
  async merge(target: MergeTarget): Promise<MergeResult> {
    const started = Date.now();
    const { rows } = await this.deltaStats(target);
    // Where the loader function merges on its own cadence (on AWS), nothing was merged here.
    const merged = rows > 0 ? (await this.o.loader.merge()).tables : 0;
    return { rows: merged > 0 ? rows : 0, committedAt: Date.now(), ms: Date.now() - started };
  }

  /** Pending changelog rows of the table (above its watermark) and when the oldest of them was loaded. */
  async deltaStats(target: MergeTarget): Promise<DeltaStats> {
    const t = target.target ?? warehouseTable(target.source, target.table);
    const r = this.tables.get(`${t.schema}.${t.view}`.toLowerCase());
    if (r === undefined) return { rows: 0, oldest: null };
    const row = (await this.o.loader.read(pendingStatsSql(r)))[0];
    const oldest = row?.oldest === null || row?.oldest === undefined ? null : new Date(row.oldest as string | Date).getTime();
    return { rows: Number(row?.n ?? 0), oldest };
  }

  classifyError(err: unknown): WriteErrorKind | null {
    // An insert half that cannot be completed is a dead letter, as a refused value is: the table goes on.
    if (err instanceof RedshiftValueRefusedError || err instanceof KeyChangeIncompleteError) return { kind: 'value-rejected' };
    if (err instanceof RedshiftTypeChangeError) return { kind: 'type-conflict', message: err.message };
    if (err instanceof NotLoadableError || err instanceof FoldedColumnError) return { kind: 'persistent', code: err.code };
    if (err instanceof LoadRequestFailedError && err.sqlState) return loadFailureKind(err.sqlState);
    return null;
  }

  foldsNames(): Promise<boolean> {
    return Promise.resolve(true);
  }
}
