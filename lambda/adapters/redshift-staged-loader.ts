/**
 * The loader function's work (docs/warehouse-apply.md, "Redshift: the applier"): one invocation at a
 * time per warehouse (reserved concurrency 1), on ONE session. Per invocation:
 * 1. claims whose invocation cannot be running any more are resolved from the ledger: a request a
 *    committed load names is `loaded`, any other goes back to `pending`;
 * 2. every pending request whose applier still waits is claimed (a conditional write each);
 * 3. one manifest per table and column list over all claimed objects, and in ONE transaction each
 *    one's COPY (through a stage table that adds the load id), the held events' COPY into the handover
 *    tables, the completion of held events whose old key is known now (`HandoverPass`), the ledger row
 *    and the requests it carried;
 * 4. after the COMMIT the requests are marked `loaded`; a load that fails is tried once per request,
 *    and a request that fails alone is marked `failed` with the reason;
 * 5. while requests keep arriving and the time budget lasts, again after `loadGapMs` (at most a second);
 * 6. the merge, when due (`redshiftCadence(freshnessTarget).mergeEveryMs`): every recorded table with
 *    pending rows, in one transaction, cut at the last committed load.
 */
import { randomUUID } from 'node:crypto';
import { describeError } from '../core/sink/sink-batch.ts';
import {
  claimable,
  copyGroups,
  loadGapMs,
  mergeDue,
  newestTables,
  recoveredState,
  requestTableId,
  sqlStateOf,
  staleClaim,
  type CopyGroup,
  type LoadRequest,
} from '../core/warehouse/redshift-requests.ts';
import type { RedshiftCadence } from '../core/warehouse/redshift-load.ts';
import {
  createLedgerSql,
  createSchemaSql,
  createTruncationsSql,
  insertTruncationsSql,
  lastLoadSql,
  mergeSql,
  nextLoadIdSql,
  pendingCountSql,
  recordLoadSql,
  copyIntoSql,
  rsQualified,
  type RedshiftTable,
} from '../core/warehouse/redshift-sql.ts';
import { handoverColumns } from '../core/warehouse/redshift-handover-sql.ts';
import { evolvedTable } from '../core/warehouse/redshift-catalog.ts';
import { HandoverPass } from './redshift-handover-pass.ts';
import { committedRequestsSql, createLoadRequestsSql, recordRequestsSql, stagedCopySql } from '../core/warehouse/redshift-staged-sql.ts';
import type { DynamoDbLoadRequests } from './control-plane-dynamodb/load-requests.ts';
import { inTransaction, type RedshiftSession } from './redshift-loader.ts';
import { putManifest, tableFolder, type StagingPlace } from './redshift-staging.ts';

export interface StagedLoaderOptions {
  session: RedshiftSession;
  requests: DynamoDbLoadRequests;
  place: StagingPlace;
  /** The staging prefix (`<prefix>loads/<load>/…` for manifests; the appliers stage under `<prefix>requests/`). */
  prefix: string;
  roleArn: string;
  region?: string;
  ledgerSchema: string;
  cadence: RedshiftCadence;
  /** The loader function's timeout: a claim older than it is stale. */
  loaderTimeoutMs: number;
  now?: () => number;
  sleep?: (ms: number) => Promise<void>;
  log?: (message: string, detail: Record<string, unknown>) => void;
}

/** What one invocation did. */
export interface LoaderRun {
  loads: number;
  requests: number;
  failed: number;
  recovered: number;
  merged: number;
}

export class StagedRedshiftLoader {
  private ledgerReady = false;
  /** Tables whose truncations this container made sure of (`mergeIfDue`). */
  private readonly guarded = new Set<string>();
  private readonly now: () => number;
  private readonly handover: HandoverPass;

  constructor(private readonly o: StagedLoaderOptions) {
    this.now = o.now ?? Date.now;
    this.handover = new HandoverPass(o.log);
  }

  private async sql(text: string): Promise<Record<string, unknown>[]> {
    return (await this.o.session.query(text)).rows;
  }

  private transaction(statements: () => Promise<void>): Promise<void> {
    return inTransaction((text) => this.sql(text), statements);
  }

  /** One invocation: recover, load while requests arrive within `budgetMs`, merge when due. */
  async invoke(budgetMs: number): Promise<LoaderRun> {
    const started = this.now();
    const run: LoaderRun = { loads: 0, requests: 0, failed: 0, recovered: 0, merged: 0 };
    // Another container may have held rows since this one last looked.
    this.handover.forget();
    await this.prepare();
    run.recovered = await this.recover();
    for (;;) {
      const claimed = await this.claim();
      if (claimed.length > 0) {
        run.loads++;
        run.requests += claimed.length;
        run.failed += await this.loadOrFail(claimed);
      }
      const gap = loadGapMs(this.o.cadence);
      if (claimed.length === 0 || this.now() - started + gap >= budgetMs) break;
      await (this.o.sleep ?? ((ms) => new Promise((r) => setTimeout(r, ms))))(gap);
    }
    run.merged = await this.mergeIfDue();
    return run;
  }

  private async prepare(): Promise<void> {
    if (this.ledgerReady) return;
    await this.transaction(async () => {
      await this.sql(createSchemaSql(this.o.ledgerSchema));
      await this.sql(createLedgerSql(this.o.ledgerSchema));
      await this.sql(createLoadRequestsSql(this.o.ledgerSchema));
    });
    this.ledgerReady = true;
  }

  /** Stale claims back to where the ledger says; answered requests no applier waits for are deleted. */
  private async recover(): Promise<number> {
    const now = this.now();
    const all = await this.o.requests.list();
    for (const r of all) {
      const answered = r.state === 'loaded' || r.state === 'failed' || r.state === 'abandoned';
      if (answered && r.deadline + this.o.loaderTimeoutMs <= now) await this.o.requests.delete(r.requestId);
    }
    const stale = all.filter((r) => staleClaim(r, now, this.o.loaderTimeoutMs));
    if (stale.length === 0) return 0;
    const rows = await this.sql(
      committedRequestsSql(
        this.o.ledgerSchema,
        stale.map((r) => r.requestId),
      ),
    );
    const loadOf = new Map(rows.map((x) => [String(x.request_id), Number(x.load_id)]));
    for (const r of stale) {
      const to = recoveredState(r.requestId, new Set(loadOf.keys()));
      await this.o.requests.move(r.requestId, ['claimed'], to, to === 'loaded' ? { loadId: loadOf.get(r.requestId)! } : {});
    }
    return stale.length;
  }

  /** Claims every request whose applier still waits; the tables they carry are recorded for the merges first. */
  private async claim(): Promise<LoadRequest[]> {
    const now = this.now();
    const claimedBy = randomUUID();
    const out: LoadRequest[] = [];
    for (const r of await this.o.requests.list()) {
      if (!claimable(r, now)) continue;
      if (await this.o.requests.move(r.requestId, ['pending'], 'claimed', { claimedAt: now, claimedBy })) out.push({ ...r, state: 'claimed', claimedAt: now });
    }
    for (const t of newestTables(out)) await this.o.requests.putTable(t.table, t.schemaVersion);
    return out;
  }

  /** Loads the claimed requests together; when that fails, each alone, so one bad request fails only itself. Returns how many failed. */
  private async loadOrFail(claimed: readonly LoadRequest[]): Promise<number> {
    try {
      await this.loadAndMark(claimed);
      return 0;
    } catch (err) {
      if (claimed.length === 1) return this.fail(claimed[0]!, err);
      this.o.log?.('a load of several requests failed; loading them one by one', { requests: claimed.length, error: describeError(err) });
    }
    let failed = 0;
    for (const r of claimed) {
      try {
        await this.loadAndMark([r]);
      } catch (err) {
        failed += await this.fail(r, err);
      }
    }
    return failed;
  }

  private async fail(r: LoadRequest, err: unknown): Promise<number> {
    // A request of several tables (a batch's): the table whose COPY fails on its own names the failure, so the
    // applier holds or isolates that table and delivers the others again (nothing of the request is loaded).
    const culprit = r.tables.length > 1 ? await this.culprit(r) : null;
    const why = culprit?.err ?? err;
    const reason = why instanceof Error ? why.message : String(why);
    this.o.log?.('load request failed', { requestId: r.requestId, error: describeError(why), ...(culprit ? { table: culprit.table } : {}) });
    await this.o.requests.move(r.requestId, ['claimed'], 'failed', { reason, sqlState: sqlStateOf(why), ...(culprit ? { failedTable: culprit.table } : {}) });
    return 1;
  }

  /** The first table of `r` whose COPY fails alone (each tried in a transaction rolled back), or null. */
  private async culprit(r: LoadRequest): Promise<{ table: string; err: unknown } | null> {
    const loadKey = `${this.o.prefix}loads/${randomUUID()}`;
    for (const [i, g] of copyGroups([r]).entries()) {
      const manifest = await this.manifestOf(loadKey, i, g);
      try {
        await this.sql('BEGIN');
        for (const s of this.groupSql(g, manifest, 0)) await this.sql(s);
      } catch (err) {
        return { table: requestTableId(g.table), err };
      } finally {
        await this.sql('ROLLBACK').catch(() => undefined);
      }
    }
    return null;
  }

  private async loadAndMark(claimed: readonly LoadRequest[]): Promise<void> {
    const loadId = await this.load(claimed);
    // After the COMMIT only: a request says `loaded` only when its rows are in the changelog.
    for (const r of claimed) await this.o.requests.move(r.requestId, ['claimed'], 'loaded', { loadId });
  }

  /** One load of `claimed`: a manifest per copy group, then one transaction. Returns the load id. */
  private async load(claimed: readonly LoadRequest[]): Promise<number> {
    const loadKey = `${this.o.prefix}loads/${randomUUID()}`;
    const groups = copyGroups(claimed);
    const manifests: { rows: string | null; held: string | null }[] = [];
    for (const [i, g] of groups.entries()) manifests.push(await this.manifestOf(loadKey, i, g));
    let loadId = 0;
    await this.transaction(async () => {
      loadId = Number((await this.sql(nextLoadIdSql(this.o.ledgerSchema)))[0]!.load_id);
      for (const [i, g] of groups.entries()) for (const s of this.groupSql(g, manifests[i]!, loadId)) await this.sql(s);
      // Held events whose old key is known now are completed in this load (docs/primary-key-changes.md, "On Redshift"): per table
      // whose appliers made its handover table, with every column its groups name.
      const tables = new Map<string, RedshiftTable>();
      for (const g of groups) {
        if (!g.handover) continue;
        if (g.held.length > 0) this.handover.holding(g.table);
        const known = tables.get(requestTableId(g.table));
        tables.set(requestTableId(g.table), known === undefined ? g.table : evolvedTable(known, g.table));
      }
      await this.handover.runAll((text) => this.sql(text), [...tables.values()], loadId);
      const objects = groups.reduce((n, g) => n + g.objects.length, 0);
      const events = groups.reduce((n, g) => n + g.rows + g.truncations.length, 0);
      await this.sql(recordLoadSql(this.o.ledgerSchema, { loadId, loadKey, objects, events, at: new Date(this.now()) }));
      await this.sql(
        recordRequestsSql(
          this.o.ledgerSchema,
          loadId,
          claimed.map((r) => r.requestId),
        ),
      );
    }).catch((err: unknown) => {
      this.handover.forget();
      throw err;
    });
    return loadId;
  }

  /** The manifests over a copy group's objects and its held events' objects, each null when there are none (a group of truncates only). */
  private async manifestOf(loadKey: string, i: number, g: CopyGroup): Promise<{ rows: string | null; held: string | null }> {
    const put = (objects: readonly { key: string; bytes: number }[], name: string): Promise<string | null> =>
      objects.length === 0
        ? Promise.resolve(null)
        : putManifest(
            this.o.place,
            `${loadKey}/${name}.manifest`,
            objects.map((x) => ({ url: `s3://${this.o.place.bucket}/${x.key}`, bytes: x.bytes })),
          );
    const folder = tableFolder(i, g.table.t.view);
    return { rows: await put(g.objects, folder), held: await put(g.held, `${folder}-held`) };
  }

  /**
   * A copy group's statements in a load: the COPY of its objects through the stage, its held events' COPY into the
   * handover table (no load id: the load that completes one gives its), then its truncates (docs/truncate.md).
   */
  private groupSql(g: CopyGroup, manifests: { rows: string | null; held: string | null }, loadId: number): string[] {
    const copy = manifests.rows === null ? [] : stagedCopySql(g.table, manifests.rows, this.o.roleArn, loadId, this.o.region);
    if (manifests.held !== null)
      copy.push(copyIntoSql(rsQualified(g.table.t.schema, g.table.t.handover), handoverColumns(g.table), manifests.held, this.o.roleArn, this.o.region));
    return g.truncations.length === 0 ? copy : [...copy, insertTruncationsSql(g.table, loadId, g.truncations)];
  }

  /** The merge of every recorded table with pending rows, when due; returns how many tables it merged. */
  private async mergeIfDue(): Promise<number> {
    const now = this.now();
    if (!mergeDue(await this.o.requests.lastMergeAt(), now, this.o.cadence.mergeEveryMs)) return 0;
    const due: { r: RedshiftTable; truncated: boolean }[] = [];
    for (const r of await this.o.requests.tables()) {
      // A table recorded before truncates were loaded may lack its guard until its applier evolves it: made here (idempotent), once per container.
      if (!this.guarded.has(requestTableId(r))) {
        await this.sql(createTruncationsSql(r));
        this.guarded.add(requestTableId(r));
      }
      const row = (await this.sql(pendingCountSql(r)))[0]!;
      if (Number(row.n) + Number(row.truncates) > 0) due.push({ r, truncated: Number(row.truncates) > 0 });
    }
    if (due.length > 0) {
      await this.transaction(async () => {
        const cut = Number((await this.sql(lastLoadSql(this.o.ledgerSchema)))[0]!.load_id);
        for (const d of due) for (const s of mergeSql(d.r, cut, d.truncated)) await this.sql(s);
      });
    }
    await this.o.requests.setMergeAt(now);
    return due.length;
  }
}
