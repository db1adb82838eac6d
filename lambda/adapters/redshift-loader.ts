/**
 * The Redshift loader (docs/warehouse-apply.md, "Redshift: the load"): one per warehouse, one
 * session, whatever the number of shards. Shard appliers `submit` their tables' events; the
 * loader stages them, and on its cadence (`redshiftCadence`, from the sink's `freshnessTarget`)
 * writes each table's rows as gzip CSV objects to the staging prefix, one manifest per table, and
 * runs in ONE transaction every table's `COPY … MANIFEST` into its changelog plus the ledger row
 * of the load. A `submit` resolves only after that COMMIT, so its caller advances its checkpoint
 * only for events that are loaded. Merges run on their own cadence, all due tables in one
 * transaction. Statements go over the wire protocol (`pg`), see docs/deploy.md, §11.
 */
import type { Archive } from '../core/rebuild/archive.ts';
import type { ChangeEvent } from '../core/shared/event.ts';
import { stageEvent, type LoadExtras, type StagedRow } from '../core/warehouse/redshift-load.ts';
import { stageHeld } from '../core/warehouse/redshift-handover.ts';
import { handoverColumns } from '../core/warehouse/redshift-handover-sql.ts';
import {
  changelogColumns,
  copyIntoSql,
  copyManifestSql,
  createLedgerSql,
  createSchemaSql,
  createTableSql,
  evolveSql,
  existingColumnsSql,
  insertTruncationsSql,
  lastLoadSql,
  loadDoneSql,
  mergeSql,
  nextLoadIdSql,
  pendingCountSql,
  recordLoadSql,
  rsQualified,
  type RedshiftTable,
  type TruncationRow,
} from '../core/warehouse/redshift-sql.ts';
import { evolvedTable, existingTable, type CatalogColumn } from '../core/warehouse/redshift-catalog.ts';
import type { ValuePolicy } from '../core/warehouse/redshift-types.ts';
import { putManifest, putParts, tableFolder } from './redshift-staging.ts';
import { HandoverPass } from './redshift-handover-pass.ts';

/** A Redshift session (a `pg.Client` over the wire protocol, or the local stand-in). */
export interface RedshiftSession {
  query(sql: string): Promise<{ rows: Record<string, unknown>[] }>;
}

/** Runs `statements` between `BEGIN` and `COMMIT` through `sql`; on an error, `ROLLBACK` (its own failure ignored) and the error again. */
export async function inTransaction(sql: (text: string) => Promise<unknown>, statements: () => Promise<void>): Promise<void> {
  await sql('BEGIN');
  try {
    await statements();
    await sql('COMMIT');
  } catch (err) {
    await sql('ROLLBACK').catch(() => undefined);
    throw err;
  }
}

export interface RedshiftLoaderOptions {
  session: RedshiftSession;
  /** The staging prefix's store: keys are object keys in `bucket`. */
  store: Archive;
  bucket: string;
  /** Key prefix of staged objects (`<prefix>loads/<load id>/…`). */
  prefix: string;
  /** The role associated with the cluster that may read the staging prefix. */
  roleArn: string;
  region?: string;
  /** The schema of the loads ledger. */
  ledgerSchema: string;
  /** A column's value policy (docs/warehouse-apply.md, "Redshift: types and values it cannot hold"). @default 'refuse-row' */
  policyOf?: (table: string, column: string) => ValuePolicy;
  /** The cluster's slices (nodes × slices per node): a table's load is cut into a multiple of it when large enough (`partCount`). @default 1 */
  slices?: number;
  /** Every statement sent, in order (benchmarks and tests count them). */
  onStatement?: (sql: string) => void;
  now?: () => Date;
  /** Held primary-key changes dropped as incomplete are logged here. */
  log?: (message: string, detail: Record<string, unknown>) => void;
}

/** What became of a submitted batch, once its load committed. */
export interface LoadReceipt {
  loadId: number;
  loaded: number;
  /** Events not loaded, each with its named error (dead letters for the caller). */
  refused: { event: ChangeEvent; error: Error }[];
}

interface Waiting {
  resolve: (loadId: number) => void;
  reject: (err: unknown) => void;
}

/** A table's part of the next load: its changelog rows of one column list, its truncates and its held events (handover rows). */
interface Queued {
  r: RedshiftTable;
  rows: StagedRow[];
  truncations: TruncationRow[];
  held: StagedRow[];
}

/** What one load did. */
export interface LoadStats {
  loadId: number;
  tables: number;
  objects: number;
  events: number;
  statements: number;
}

export class RedshiftLoader {
  private readonly tables = new Map<string, RedshiftTable>();
  private readonly ready = new Set<string>();
  /** Per table and column list (`submit`). */
  private queued = new Map<string, Queued>();
  private waiting: Waiting[] = [];
  private ledgerReady = false;
  private chain: Promise<unknown> = Promise.resolve();
  private statements = 0;
  private readonly handover: HandoverPass;

  constructor(private readonly o: RedshiftLoaderOptions) {
    this.handover = new HandoverPass(o.log);
  }

  private async sql(text: string): Promise<Record<string, unknown>[]> {
    this.statements++;
    this.o.onStatement?.(text);
    return (await this.o.session.query(text)).rows;
  }

  /** Runs `fn` after everything queued on the one session. */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.chain.then(fn, fn);
    this.chain = next.catch(() => undefined);
    return next;
  }

  private transaction(statements: () => Promise<void>): Promise<void> {
    return inTransaction((text) => this.sql(text), statements);
  }

  /** The table `want` names as the cluster has it, read on the one session after what is queued before it; null: it has none. */
  async existing(want: RedshiftTable): Promise<RedshiftTable | null> {
    return existingTable(want, (await this.read(existingColumnsSql(want))) as unknown as CatalogColumn[]);
  }

  /** Makes a table known to the merges (a process that restarts merges only the tables registered or submitted since). */
  register(r: RedshiftTable): Promise<void> {
    this.tables.set(`${r.t.schema}.${r.t.view}`.toLowerCase(), r);
    return this.serial(() => this.prepare([r]));
  }

  /**
   * Queues a table's events for the next load (with the markers their values carry on, `extras.inherited`), and its
   * `extras.held` events for its handover table (docs/primary-key-changes.md, "On Redshift"). Events Redshift cannot take are in the receipt's `refused` at once (dead letters); the rest
   * resolve with the load id after its COMMIT.
   */
  async submit(
    r: RedshiftTable,
    events: readonly ChangeEvent[],
    appliedAt: Date = (this.o.now ?? (() => new Date()))(),
    extras: LoadExtras = {},
  ): Promise<LoadReceipt> {
    const { inherited, held = [] } = extras;
    const id = `${r.t.schema}.${r.t.view}`.toLowerCase();
    // The merges take every column the table has: a batch of an older schema version does not narrow them.
    const known = this.tables.get(id);
    this.tables.set(id, known === undefined ? r : evolvedTable(known, r));
    const refused: LoadReceipt['refused'] = [];
    const rows: StagedRow[] = [];
    const truncations: TruncationRow[] = [];
    const policyOf = (c: string): ValuePolicy => this.o.policyOf?.(r.t.tableId, c) ?? 'refuse-row';
    for (const e of events) {
      const s = stageEvent(e, r.key, r.data, policyOf, appliedAt, inherited?.get(e));
      if ('row' in s) rows.push(s.row);
      else if ('truncation' in s) truncations.push(s.truncation);
      else refused.push({ event: e, error: s.refused });
    }
    const heldRows: StagedRow[] = [];
    for (const h of held) {
      const s = stageHeld(h.event, r.key, r.data, policyOf, appliedAt, h.oldKey);
      if ('row' in s) heldRows.push(s.row);
      else refused.push({ event: h.event, error: s.refused });
    }
    if (rows.length + truncations.length + heldRows.length === 0) return { loadId: 0, loaded: 0, refused };
    // Queued per table and column list: events of two schema versions in one load are two COPYs, each naming its own columns.
    const qid = `${id}\u0000${changelogColumns(r).join()}`;
    const q = this.queued.get(qid) ?? { r, rows: [], truncations: [], held: [] };
    for (const row of rows) q.rows.push(row);
    for (const x of truncations) q.truncations.push(x);
    for (const x of heldRows) q.held.push(x);
    this.queued.set(qid, q);
    const loadId = await new Promise<number>((resolve, reject) => this.waiting.push({ resolve, reject }));
    return { loadId, loaded: rows.length + truncations.length + heldRows.length, refused };
  }

  /** Runs a read on the loader's one session, after the loads and merges queued before it (never inside one). */
  read(text: string): Promise<Record<string, unknown>[]> {
    return this.serial(() => this.sql(text));
  }

  /** Events queued for the next load. */
  get queuedEvents(): number {
    let n = 0;
    for (const q of this.queued.values()) n += q.rows.length + q.truncations.length + q.held.length;
    return n;
  }

  /** Statements sent so far. */
  get statementCount(): number {
    return this.statements;
  }

  /** Loads everything queued, in one transaction; resolves the waiting submits (or rejects them with the error). */
  flush(): Promise<LoadStats | null> {
    return this.serial(async () => {
      if (this.queued.size === 0) return null;
      const queued = this.queued;
      const waiting = this.waiting;
      this.queued = new Map();
      this.waiting = [];
      try {
        const stats = await this.load([...queued.values()]);
        for (const w of waiting) w.resolve(stats.loadId);
        return stats;
      } catch (err) {
        for (const w of waiting) w.reject(err);
        throw err;
      }
    });
  }

  private async prepare(rs: readonly RedshiftTable[]): Promise<void> {
    if (!this.ledgerReady) {
      await this.transaction(async () => {
        await this.sql(createSchemaSql(this.o.ledgerSchema));
        await this.sql(createLedgerSql(this.o.ledgerSchema));
      });
      this.ledgerReady = true;
    }
    for (const r of rs) {
      const id = `${r.t.schema}.${r.t.view}`.toLowerCase();
      if (this.ready.has(id)) continue;
      await this.transaction(async () => {
        for (const s of createTableSql(r)) await this.sql(s);
      });
      this.ready.add(id);
    }
  }

  private async load(batch: readonly Queued[]): Promise<LoadStats> {
    const statementsBefore = this.statements;
    await this.prepare(batch.map((b) => b.r));
    const loadId = Number((await this.sql(nextLoadIdSql(this.o.ledgerSchema)))[0]!.load_id);
    const loadKey = `${this.o.prefix}loads/${loadId}`;
    // Objects first (durable before the COPY names them), one manifest per table.
    const place = { store: this.o.store, bucket: this.o.bucket };
    const manifests: { r: RedshiftTable; uri: string }[] = [];
    const heldManifests: { r: RedshiftTable; uri: string }[] = [];
    let objects = 0;
    let events = 0;
    for (const [i, { r, rows, truncations, held }] of batch.entries()) {
      events += truncations.length + held.length;
      const folder = `${loadKey}/${tableFolder(i, r.t.view)}`;
      if (held.length > 0) {
        // Held events go to the table's handover table; they carry no load id (the load that completes them gives theirs).
        const parts = await putParts(place, `${folder}-held`, null, held);
        heldManifests.push({ r, uri: await putManifest(place, `${folder}-held.manifest`, parts) });
        objects += parts.length;
      }
      if (rows.length === 0) continue;
      const parts = await putParts(place, folder, loadId, rows, { slices: this.o.slices });
      manifests.push({ r, uri: await putManifest(place, `${folder}.manifest`, parts) });
      objects += parts.length;
      events += rows.length;
    }
    await this.transaction(async () => {
      // A load retried after its COMMIT (the reply was lost) is in the ledger: nothing is loaded twice.
      if ((await this.sql(loadDoneSql(this.o.ledgerSchema, loadKey))).length > 0) return;
      for (const m of manifests) await this.sql(copyManifestSql(m.r, m.uri, this.o.roleArn, this.o.region));
      for (const m of heldManifests) {
        this.handover.holding(m.r);
        await this.sql(copyIntoSql(rsQualified(m.r.t.schema, m.r.t.handover), handoverColumns(m.r), m.uri, this.o.roleArn, this.o.region));
      }
      // Truncates ride the load as rows of the table's truncations, so they commit with the rows around them (docs/truncate.md).
      for (const q of batch) if (q.truncations.length > 0) await this.sql(insertTruncationsSql(q.r, loadId, q.truncations));
      // Held events whose old key is known now are completed in this load, with every column the table has (docs/primary-key-changes.md, "On Redshift").
      const ids = new Set(batch.map((q) => `${q.r.t.schema}.${q.r.t.view}`.toLowerCase()));
      await this.handover.runAll(
        (text) => this.sql(text),
        [...ids].map((id) => this.tables.get(id)!),
        loadId,
      );
      await this.sql(recordLoadSql(this.o.ledgerSchema, { loadId, loadKey, objects, events, at: (this.o.now ?? (() => new Date()))() }));
    }).catch((err: unknown) => {
      this.handover.forget();
      throw err;
    });
    return { loadId, tables: batch.length, objects, events, statements: this.statements - statementsBefore };
  }

  /** Merges every known table with pending changelog rows, in one transaction (after the loads queued before it). */
  merge(): Promise<{ tables: number; statements: number }> {
    return this.serial(async () => {
      const before = this.statements;
      const due: { r: RedshiftTable; truncated: boolean }[] = [];
      for (const [id, r] of this.tables) {
        if (!this.ready.has(id)) continue;
        const row = (await this.sql(pendingCountSql(r)))[0]!;
        if (Number(row.n) + Number(row.truncates) > 0) due.push({ r, truncated: Number(row.truncates) > 0 });
      }
      if (due.length === 0) return { tables: 0, statements: this.statements - before };
      await this.transaction(async () => {
        const cut = Number((await this.sql(lastLoadSql(this.o.ledgerSchema)))[0]!.load_id);
        for (const d of due) for (const s of mergeSql(d.r, cut, d.truncated)) await this.sql(s);
      });
      return { tables: due.length, statements: this.statements - before };
    });
  }

  /**
   * Moves a table the cluster has to a new schema version (`evolveSql`): added columns in one
   * transaction, VARCHAR widenings each on its own (Redshift runs `ALTER COLUMN … TYPE` in no
   * transaction), after the loads queued before it. A type Redshift cannot change throws
   * `RedshiftTypeChangeError` and nothing is changed. The table is then known to the loads and merges
   * (its objects exist: `from` was read from the cluster, or registered before).
   */
  evolve(from: RedshiftTable, to: RedshiftTable): Promise<void> {
    return this.serial(async () => {
      const plan = evolveSql(from, to);
      const id = `${to.t.schema}.${to.t.view}`.toLowerCase();
      const changes = plan.transactional.length + plan.widen.length > 0;
      if (changes && [...this.queued.keys()].some((k) => k.startsWith(`${id}\u0000`)))
        throw new Error(`${to.t.tableId}: events of the old schema version are queued; flush before evolving`);
      if (plan.transactional.length > 0) {
        await this.transaction(async () => {
          for (const s of plan.transactional) await this.sql(s);
        });
      }
      for (const s of plan.widen) await this.sql(s);
      this.tables.set(id, evolvedTable(from, to));
      this.ready.add(id);
    });
  }

  /**
   * Runs the cadence until `signal` aborts: a load every `loadEveryMs` when events are queued, a
   * merge every `mergeEveryMs`. A failed load rejects its submits (their callers retry); a failed
   * merge is reported and tried again next time (the view stays correct, the backlog grows).
   */
  async run(
    cadence: { loadEveryMs: number; mergeEveryMs: number },
    signal: AbortSignal,
    onError: (what: 'load' | 'merge', err: unknown) => void,
  ): Promise<void> {
    let lastMerge = Date.now();
    while (!signal.aborted) {
      await new Promise((r) => setTimeout(r, cadence.loadEveryMs));
      await this.flush().catch((err: unknown) => onError('load', err));
      if (Date.now() - lastMerge >= cadence.mergeEveryMs) {
        lastMerge = Date.now();
        await this.merge().catch((err: unknown) => onError('merge', err));
      }
    }
  }
}
