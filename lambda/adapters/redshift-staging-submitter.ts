/**
 * The applier's side of the loader function (docs/warehouse-apply.md, "Redshift: the applier"), the
 * loader port of `RedshiftWarehouse` on AWS. `submit` stages the table's rows itself (gzip CSV parts
 * under `<prefix>requests/<request id>/`, without a load id), records a load request in the control
 * plane, invokes the loader function asynchronously, and polls the request until it says `loaded`
 * (then returns: the load committed), `failed`, or its deadline passes (then throws, and the batch is
 * delivered again and staged again under a new request). Schema work and reads run on the applier's
 * own session; merges are the loader function's.
 */
import { randomUUID } from 'node:crypto';
import type { ChangeEvent } from '../core/shared/event.ts';
import { stageEvent, type LoadExtras, type LoadItem, type PartOptions, type StagedRow } from '../core/warehouse/redshift-load.ts';
import { stageHeld } from '../core/warehouse/redshift-handover.ts';
import { LoadRequestFailedError, requestVerdict, type RequestTable } from '../core/warehouse/redshift-requests.ts';
import { existingTable, type CatalogColumn } from '../core/warehouse/redshift-catalog.ts';
import { createTableSql, evolveSql, existingColumnsSql, type RedshiftTable, type TruncationRow } from '../core/warehouse/redshift-sql.ts';
import type { ValuePolicy } from '../core/warehouse/redshift-types.ts';
import type { DynamoDbLoadRequests } from './control-plane-dynamodb/load-requests.ts';
import { inTransaction, type LoadReceipt, type RedshiftSession } from './redshift-loader.ts';
import { putParts, tableFolder, type StagingPlace } from './redshift-staging.ts';
import type { RedshiftLoadPort } from './warehouse-redshift.ts';

export interface StagingSubmitterOptions {
  /** The applier's own session: schema changes and reads. */
  session: RedshiftSession;
  requests: DynamoDbLoadRequests;
  place: StagingPlace;
  /** The staging prefix (objects under `<prefix>requests/<request id>/`). */
  prefix: string;
  /** Starts the loader function (asynchronously: it does not wait for the load). */
  invokeLoader: () => Promise<void>;
  /** How long a request waits for its load: below the applier's timeout (`requestDeadline`). */
  waitMs: number;
  /** @default 250 */
  pollMs?: number;
  parts?: PartOptions;
  policyOf?: (table: string, column: string) => ValuePolicy;
  now?: () => number;
  sleep?: (ms: number) => Promise<void>;
}

export class RedshiftStagingSubmitter implements RedshiftLoadPort {
  private readonly now: () => number;
  private readonly known = new Set<string>();

  constructor(private readonly o: StagingSubmitterOptions) {
    this.now = o.now ?? Date.now;
  }

  private transaction(statements: readonly string[]): Promise<void> {
    return inTransaction(
      (text) => this.o.session.query(text),
      async () => {
        for (const s of statements) await this.o.session.query(s);
      },
    );
  }

  /** The table `want` names as the cluster has it, read on the applier's session; null: it has none. */
  async existing(want: RedshiftTable): Promise<RedshiftTable | null> {
    return existingTable(want, (await this.o.session.query(existingColumnsSql(want))).rows as unknown as CatalogColumn[]);
  }

  async register(r: RedshiftTable): Promise<void> {
    const id = `${r.t.schema}.${r.t.view}`.toLowerCase();
    if (this.known.has(id)) return;
    await this.transaction(createTableSql(r));
    this.known.add(id);
  }

  async evolve(from: RedshiftTable, to: RedshiftTable): Promise<void> {
    const plan = evolveSql(from, to);
    if (plan.transactional.length > 0) await this.transaction(plan.transactional);
    for (const s of plan.widen) await this.o.session.query(s);
    this.known.add(`${to.t.schema}.${to.t.view}`.toLowerCase());
  }

  /** Nothing is queued in this process: every submit is its own request. */
  flush(): Promise<null> {
    return Promise.resolve(null);
  }

  async read(text: string): Promise<Record<string, unknown>[]> {
    return (await this.o.session.query(text)).rows;
  }

  /** The loader function merges on its cadence. */
  merge(): Promise<{ tables: number }> {
    return Promise.resolve({ tables: 0 });
  }

  async submit(r: RedshiftTable, events: readonly ChangeEvent[], appliedAt: Date = new Date(this.now()), extras: LoadExtras = {}): Promise<LoadReceipt> {
    return (await this.submitMany([{ r, events, ...extras }], appliedAt))[0]!;
  }

  /**
   * The tables of one batch as ONE load request: loaded in one load, one transaction, or not at all
   * (docs/warehouse-apply.md, "Redshift: the applier"). A request that fails throws
   * `LoadRequestFailedError`, naming the table whose COPY failed alone where one did. A table's `held` events
   * are staged as handover rows (docs/primary-key-changes.md, "On Redshift").
   */
  async submitMany(items: readonly LoadItem[], appliedAt: Date = new Date(this.now())): Promise<LoadReceipt[]> {
    const requestId = `${this.now().toString(36)}-${randomUUID()}`;
    const receipts: LoadReceipt[] = [];
    const tables: RequestTable[] = [];
    for (const [i, { r, events, inherited, held = [] }] of items.entries()) {
      const refused: LoadReceipt['refused'] = [];
      const rows: StagedRow[] = [];
      const truncations: TruncationRow[] = [];
      for (const e of events) {
        const s = stageEvent(e, r.key, r.data, (c) => this.o.policyOf?.(r.t.tableId, c) ?? 'refuse-row', appliedAt, inherited?.get(e));
        if ('row' in s) rows.push(s.row);
        else if ('truncation' in s) truncations.push(s.truncation);
        else refused.push({ event: e, error: s.refused });
      }
      const heldRows: StagedRow[] = [];
      for (const h of held) {
        const s = stageHeld(h.event, r.key, r.data, (c) => this.o.policyOf?.(r.t.tableId, c) ?? 'refuse-row', appliedAt, h.oldKey);
        if ('row' in s) heldRows.push(s.row);
        else refused.push({ event: h.event, error: s.refused });
      }
      receipts.push({ loadId: 0, loaded: rows.length + truncations.length + heldRows.length, refused });
      if (rows.length + truncations.length + heldRows.length === 0) continue;
      // Truncates travel in the request itself (a few small rows); the loader inserts them in the load's transaction.
      const folder = `${this.o.prefix}requests/${requestId}/${tableFolder(i, r.t.view)}`;
      const parts = rows.length === 0 ? [] : await putParts(this.o.place, folder, null, rows, this.o.parts);
      const heldParts = heldRows.length === 0 ? [] : await putParts(this.o.place, `${folder}-held`, null, heldRows);
      tables.push({
        table: r,
        schemaVersion: Math.max(...[...events, ...held.map((h) => h.event)].map((e) => e.schemaVersion)),
        objects: parts.map((p) => ({ key: p.key, bytes: p.bytes })),
        rows: rows.length,
        ...(truncations.length > 0 ? { truncations } : {}),
        // Present even when empty: this applier made the table's handover table, so the load completes what it holds.
        held: { objects: heldParts.map((p) => ({ key: p.key, bytes: p.bytes })), rows: heldRows.length },
      });
    }
    if (tables.length === 0) return receipts;
    const createdAt = this.now();
    await this.o.requests.put({ sinkId: this.o.requests.sinkId, requestId, state: 'pending', tables, createdAt, deadline: createdAt + this.o.waitMs });
    await this.o.invokeLoader();
    const loadId = await this.waitFor(requestId);
    return receipts.map((x) => (x.loaded > 0 ? { ...x, loadId } : x));
  }

  /** Polls the request until it is answered; its item is deleted either way (an unanswered one is abandoned first). */
  private async waitFor(requestId: string): Promise<number> {
    const sleep = this.o.sleep ?? ((ms: number) => new Promise<void>((res) => setTimeout(res, ms)));
    for (;;) {
      const v = requestVerdict(await this.o.requests.get(requestId), this.now());
      if (v.kind === 'wait') {
        await sleep(this.o.pollMs ?? 250);
        continue;
      }
      // A request still pending is abandoned so the loader does not load rows whose batch comes again.
      if (v.kind === 'failed') await this.o.requests.move(requestId, ['pending'], 'abandoned');
      await this.o.requests.delete(requestId);
      if (v.kind === 'failed') throw new LoadRequestFailedError(requestId, v.reason, v.sqlState, v.failedTable);
      return v.loadId;
    }
  }
}

/** The loader function as the AWS Lambda API starts it: an asynchronous invocation (`InvocationType: Event`). */
export function asyncInvoker(
  send: (input: { FunctionName: string; InvocationType: 'Event'; Payload: Uint8Array }) => Promise<unknown>,
  functionName: string,
): () => Promise<void> {
  const payload = Buffer.from(JSON.stringify({ cdcLoad: true }));
  return async () => {
    await send({ FunctionName: functionName, InvocationType: 'Event', Payload: payload });
  };
}
