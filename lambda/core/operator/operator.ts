/**
 * The operator core (docs/architecture.md §5.6, docs/operations.md): status, pause, resume, resnapshot and
 * audit, behind two doors (the `cdc` CLI on a `cdc local` state folder, the operator Lambda on
 * AWS). Each action reads what it depends on strongly consistently (the control-plane port's
 * reads are), decides with lambda/core/operator/operator-decisions.ts, and commits the state change with
 * its audit entry in one transaction that is conditional on the state it read; a refused attempt
 * is audited too (who, what, when, why). Of two concurrent actions on one table exactly one
 * wins: the other's condition fails and it is refused (`CONCURRENT_CHANGE`) and audited.
 */
import type { ActiveRebuild, AuditEntry, ControlPlane, DeadLetter, SinkTableProgress, TableRecord, TableState } from '../shared/control-plane.ts';
import { decideRebuildSlot, REBUILD_STALE_AFTER_MS } from '../rebuild/rebuild.ts';
import { requestSnapshot } from '../snapshot/snapshot-worker.ts';
import { latestVerdicts, type DiscoveryVerdict } from '../tables/discovery.ts';
import { CdcError } from '../shared/errors.ts';
import type { OperatorRequest } from './operator-call.ts';
import { parseStoredSlotReport, slotReportCheckpoint, type StoredSlotReport } from '../capture/slot-monitor.ts';
import {
  decidePause,
  decideResnapshot,
  decideResume,
  formatDuration,
  retentionHeadroomMs,
  type OperatorSettings,
  type Refusal,
  type SnapshotScheduler,
  type SnapshotStatus,
} from './operator-decisions.ts';

export type OperatorActionName = 'status' | 'pause' | 'resume' | 'resnapshot' | 'audit' | 'rebuild';

/**
 * Who asks: the identity the door established (on AWS the caller's IAM ARN from the front door,
 * locally the OS user), and the caller's own text (`--actor`) as a note kept in the audit entry's
 * detail, never as the actor. A bare string is an identity without a note.
 */
export type Actor = string | { readonly id: string; readonly note?: string };
const actorId = (a: Actor): string => (typeof a === 'string' ? a : a.id);
const noteOf = (a: Actor): { note?: string } => (typeof a !== 'string' && a.note !== undefined ? { note: a.note } : {});
export const OPERATOR_ACTIONS: readonly OperatorActionName[] = ['status', 'pause', 'resume', 'resnapshot', 'audit', 'rebuild'];

/** A table as `cdc status` shows it. */
export interface TableStatus {
  source: string;
  table: string;
  state: TableState;
  stateReason: string | null;
  schemaVersion: number;
  updatedAt: string;
  /**
   * Per sink: `releasePending` while a resume's replay runs; `fromTrimHorizon` when the hold was
   * recorded with several batches of one shard at once, so the replay applies its held shards from
   * their trim horizon (docs/operations.md, "How a resume replays": it takes longer).
   */
  sinks: Array<{
    sink: string;
    appliedPosition: string | null;
    heldFrom: string | null;
    heldAt: string | null;
    releasePending: boolean;
    fromTrimHorizon: boolean;
  }>;
  deadLetters: number;
  /** How long the oldest held event stays in the change log (ms); null when nothing is held. */
  retentionHeadroomMs: number | null;
  /**
   * The table's snapshot, from the snapshot worker's entry point (`SnapshotScheduler.status`):
   * null when none was requested or no worker is wired.
   */
  snapshot: SnapshotStatus | null;
  /**
   * Rebuilds of the table under way, per sink, from the sink's rebuild slot (docs/rebuild.md):
   * `stale` when its runner has not reported for the stale time. Absent when none runs.
   */
  rebuilds?: Array<{
    sink: string;
    id: string;
    mode: 'rehearsal' | 'swap';
    startedAt: string;
    heartbeatAt: string;
    events: number;
    slices: number;
    stale: boolean;
  }>;
  /** `poll` for a polled table (docs/polling.md); absent for a table captured from the log. */
  capture?: 'poll';
  /** False for a polled table: its deletes are not observable (docs/polling.md). Absent: true. */
  deletesObservable?: false;
}

export interface StatusReport {
  at: string;
  changeLogRetentionMs: number;
  /** End-to-end lag per sink (ms) where the door knows it (locally: the last heartbeat measurement), else absent. */
  endToEndLag: Array<{ sink: string; lagMs: number; at: string }>;
  tables: TableStatus[];
  /**
   * Tables the capture rules matched but do not capture (excluded, ineligible, dropped), each with
   * its reason, from the discovery's audit entries (lambda/core/tables/discovery.ts).
   */
  notCaptured?: Array<{ source: string; table: string; verdict: DiscoveryVerdict; reasons: string[]; at: string }>;
  /**
   * Per source of the listed tables, the slot monitor's latest report (docs/doctor.md, "The slot
   * monitor"): every replication slot's retained WAL, headroom, confirmed position, active or
   * not, level, and the named stop when the capture's slot is gone or invalidated. `report` is
   * null with `problem` set when the monitor has not reported (yet) or its report is unreadable.
   */
  slots?: Array<{ source: string; report: StoredSlotReport | null; problem: string | null }>;
}

export type ActionResult =
  | { outcome: 'done'; action: OperatorActionName; source: string; table: string; message: string; detail: Record<string, unknown> }
  | ({ outcome: 'refused'; action: OperatorActionName; source: string | null; table: string | null } & Refusal);

/**
 * The rebuild's entry point as the operator sees it (docs/rebuild.md; the `cdc local` door wires
 * lambda/adapters/rebuilder.ts). `check` decides whether the history needed is complete (a refusal is
 * audited by the operator); `run` rebuilds and records the run with its own audit entry.
 */
export interface RebuildScheduler {
  check(r: { source: string; table: string; sink: string; from?: string }): Promise<{ refusal: Refusal | null }>;
  /** Rebuilds (or, on AWS, starts the rebuild and answers at once); a refusal (another rebuild claimed the sink meanwhile) is audited by the operator. */
  run(r: {
    source: string;
    table: string;
    sink: string;
    from?: string;
    rehearse: boolean;
    actor: string;
  }): Promise<{ message: string; detail: Record<string, unknown> } | { refusal: Refusal }>;
}

export interface OperatorDeps {
  controlPlane: ControlPlane;
  settings: OperatorSettings;
  snapshots: SnapshotScheduler;
  /** The rebuild's entry point; without it a rebuild is refused (`REBUILD_NOT_AVAILABLE`), audited. */
  rebuilds?: RebuildScheduler;
  /** @default () => new Date() */
  now?: () => Date;
}

/**
 * A snapshot entry point that knows of no snapshot (tests of the operator alone): no snapshot is
 * known to run, the budget allows, and a request is only the committed `needs-resnapshot` state.
 */
export const stateOnlySnapshots: SnapshotScheduler = {
  status: async () => null,
  budget: async () => ({ allowed: true, reason: null }),
  request: async () => undefined,
};

/**
 * The snapshot worker's entry point (lambda/core/snapshot/snapshot-worker.ts `requestSnapshot`) as the
 * operator sees it: the table's snapshot run in the control plane, and a request that the worker
 * picks up (on AWS its next scheduled invocation; locally the next `cdc local` start,
 * docs/snapshot.md). The budget is the worker's: it paces every chunk against the source's
 * declared budget, so a request is always accepted and then yields to the source.
 */
export function controlPlaneSnapshots(controlPlane: ControlPlane): SnapshotScheduler {
  return {
    async status(sourceId, table) {
      const s = await controlPlane.getSnapshot(sourceId, table);
      if (!s) return null;
      const state = s.status === 'requested' ? 'queued' : s.status;
      return {
        state,
        chunksDone: s.chunksDone,
        chunksTotal: null,
        rows: s.rowsDone,
        eta: s.etaSeconds === null ? null : `${Math.ceil(s.etaSeconds)} s`,
        detail: `${s.rowsDone}/${s.estimatedRows} rows, ${s.throttle}`,
      };
    },
    budget: async () => ({ allowed: true, reason: null }),
    async request(sourceId, table, r) {
      const out = await requestSnapshot(controlPlane, { source: sourceId, table, reason: 'resnapshot', actor: r.requestedBy, now: new Date(r.at) });
      if (out.outcome === 'refused') throw new CdcError('SNAPSHOT_REQUEST_REFUSED', `the snapshot of ${sourceId}/${table} was not requested: ${out.reason}`);
    },
  };
}

export class Operator {
  private readonly cp: ControlPlane;
  private readonly now: () => Date;

  constructor(private readonly deps: OperatorDeps) {
    this.cp = deps.controlPlane;
    this.now = deps.now ?? (() => new Date());
  }

  /** Runs one request for `actor` (who: an operator id). */
  async run(request: OperatorRequest, actor: Actor): Promise<ActionResult | StatusReport | AuditEntry[]> {
    switch (request.action) {
      case 'status':
        return this.status(request.source, request.table);
      case 'audit':
        return this.audit({ source: request.source, table: request.table, since: request.since });
      case 'pause':
        return this.pause(actor, request);
      case 'resume':
        return this.resume(actor, request);
      case 'resnapshot':
        return this.resnapshot(actor, request);
      case 'rebuild':
        return this.rebuild(actor, request);
    }
  }

  async status(sourceId?: string, table?: string): Promise<StatusReport> {
    const now = this.now();
    const tables = (await this.cp.listTables(sourceId)).filter((t) => table === undefined || t.table === table);
    const progress = await this.cp.listSinkProgress();
    const letters = await this.cp.listDeadLetters();
    const out: TableStatus[] = [];
    const rebuildSlots = new Map<string, ActiveRebuild | null>();
    for (const sink of new Set(progress.map((p) => p.sink))) rebuildSlots.set(sink, await this.cp.getActiveRebuild(sink));
    for (const t of tables) {
      const sinks = progress.filter((p) => p.source === t.source && p.table === t.table);
      const rebuilds = sinks.flatMap((p) => {
        const slot = rebuildSlots.get(p.sink);
        if (!slot || slot.state !== 'running' || slot.source !== t.source || slot.table !== t.table) return [];
        const stale = decideRebuildSlot(slot, now, REBUILD_STALE_AFTER_MS) === null;
        return [
          {
            sink: p.sink,
            id: slot.id,
            mode: slot.mode,
            startedAt: slot.startedAt,
            heartbeatAt: slot.heartbeatAt,
            events: slot.checkpoint?.events ?? 0,
            slices: slot.checkpoint?.slices ?? 0,
            stale,
          },
        ];
      });
      out.push({
        source: t.source,
        table: t.table,
        state: t.state,
        stateReason: t.stateReason,
        schemaVersion: t.currentVersion,
        updatedAt: t.updatedAt,
        sinks: sinks.map((s) => ({
          sink: s.sink,
          appliedPosition: s.appliedPosition,
          heldFrom: s.heldFrom,
          heldAt: s.heldAt ?? null,
          releasePending: (s.releaseRequested ?? null) !== null && s.heldFrom !== null,
          fromTrimHorizon: s.heldFrom !== null && s.parallelBatches === true,
        })),
        deadLetters: letters.filter((d: DeadLetter) => d.source === t.source && d.table === t.table).length,
        retentionHeadroomMs: retentionHeadroomMs(sinks, now, this.deps.settings),
        snapshot: await this.deps.snapshots.status(t.source, t.table),
        ...(rebuilds.length > 0 ? { rebuilds } : {}),
        ...(t.capture === 'poll' ? { capture: 'poll' as const, deletesObservable: false as const } : {}),
      });
    }
    const audit = await this.cp.listAudit(sourceId);
    const notCaptured = [...new Set(audit.map((e) => e.source).filter((s): s is string => s !== null))].flatMap((src) =>
      [...latestVerdicts(audit, src).values()]
        .filter((v) => v.verdict !== 'captured' && (table === undefined || v.table === table))
        .map((v) => ({ source: src, table: v.table, verdict: v.verdict, reasons: v.reasons, at: v.at })),
    );
    const slots = await this.slotReports([...new Set(tables.map((t) => t.source).concat(sourceId !== undefined ? [sourceId] : []))].sort());
    return {
      at: now.toISOString(),
      changeLogRetentionMs: this.deps.settings.changeLogRetentionMs,
      endToEndLag: [],
      tables: out,
      ...(notCaptured.length > 0 ? { notCaptured } : {}),
      ...(slots.length > 0 ? { slots } : {}),
    };
  }

  /** The slot monitor's latest report of each source, kept in the control plane (lambda/handlers/slot-monitor.ts). */
  private async slotReports(sources: string[]): Promise<NonNullable<StatusReport['slots']>> {
    const out: NonNullable<StatusReport['slots']> = [];
    for (const src of sources) {
      const [consumer, shard] = slotReportCheckpoint(src);
      const text = await this.cp.getCheckpoint(consumer, shard);
      if (text === null) {
        out.push({ source: src, report: null, problem: 'the slot monitor has not reported for this source (yet)' });
        continue;
      }
      try {
        out.push({ source: src, report: parseStoredSlotReport(text, `control plane item ${consumer}/${shard}`), problem: null });
      } catch (e) {
        out.push({ source: src, report: null, problem: (e as Error).message });
      }
    }
    return out;
  }

  async audit(filter: { source?: string; table?: string; since?: string }): Promise<AuditEntry[]> {
    return this.cp.listAudit(filter.source, filter.table, filter.since);
  }

  async pause(actor: Actor, r: { source?: string; table: string; durationMs: number; reason: string }): Promise<ActionResult> {
    const found = await this.find(actor, 'pause', r.source, r.table, { durationMs: r.durationMs, reason: r.reason });
    if ('refused' in found) return found.refused;
    const { table } = found;
    const now = this.now();
    const sinks = await this.sinksOf(table);
    const snapshot = await this.deps.snapshots.status(table.source, table.table);
    const d = decidePause({ table, sinks, durationMs: r.durationMs, reason: r.reason, actor: actorId(actor), now, settings: this.deps.settings, snapshot });
    const detail = { for: formatDuration(r.durationMs), durationMs: r.durationMs, reason: r.reason, from: table.state };
    if (!d.accept) return this.refuse(actor, 'pause', table.source, table.table, d.refusal, detail);
    const committed = await this.commit(actor, 'pause', table, d.change.state, d.change.stateReason, [], { ...detail, to: 'paused', until: d.change.until });
    if (committed) return committed;
    return {
      outcome: 'done',
      action: 'pause',
      source: table.source,
      table: table.table,
      message: `${table.source}/${table.table} paused until ${d.change.until}: its events keep entering the change log and every sink holds them`,
      detail: { ...detail, until: d.change.until },
    };
  }

  async resume(actor: Actor, r: { source?: string; table: string; acceptSchema?: boolean }): Promise<ActionResult> {
    const acceptSchema = r.acceptSchema === true;
    const found = await this.find(actor, 'resume', r.source, r.table, { acceptSchema });
    if ('refused' in found) return found.refused;
    const { table } = found;
    const now = this.now();
    const sinks = await this.sinksOf(table);
    const d = decideResume({ table, sinks, acceptSchema, now, settings: this.deps.settings });
    const detail: Record<string, unknown> = { acceptSchema, from: table.state, stateReason: table.stateReason };
    if (!d.accept) return this.refuse(actor, 'resume', table.source, table.table, d.refusal, detail);
    const release = d.change.release.map((s) => ({ sink: s.sink, heldFrom: s.heldFrom! }));
    const full = {
      ...detail,
      to: 'active',
      release: release.map((s) => ({ sink: s.sink, heldFrom: s.heldFrom })),
      ...(d.change.acceptedVersion !== null
        ? { decision: `continue with schema version ${d.change.acceptedVersion}`, acceptedVersion: d.change.acceptedVersion }
        : {}),
    };
    const committed = await this.commit(actor, 'resume', table, 'active', null, release, full);
    if (committed) return committed;
    const replay = release.length > 0 ? `; ${release.map((s) => `sink ${s.sink} replays from ${s.heldFrom}`).join(', ')}, then applies live` : '';
    return {
      outcome: 'done',
      action: 'resume',
      source: table.source,
      table: table.table,
      message: `${table.source}/${table.table} is active${replay}`,
      detail: full,
    };
  }

  async resnapshot(actor: Actor, r: { source?: string; table: string; reason?: string }): Promise<ActionResult> {
    const reason = r.reason ?? 'requested by an operator';
    const found = await this.find(actor, 'resnapshot', r.source, r.table, { reason });
    if ('refused' in found) return found.refused;
    const { table } = found;
    const snapshot = await this.deps.snapshots.status(table.source, table.table);
    const budget = await this.deps.snapshots.budget(table.source);
    const d = decideResnapshot({ table, snapshot, budget });
    const detail = { reason, from: table.state };
    if (!d.accept) return this.refuse(actor, 'resnapshot', table.source, table.table, d.refusal, detail);
    const stateReason = `RESNAPSHOT_REQUESTED: ${reason} (by ${actorId(actor)})`;
    const committed = await this.commit(actor, 'resnapshot', table, d.change.state, stateReason, [], { ...detail, to: d.change.state });
    if (committed) return committed;
    await this.deps.snapshots.request(table.source, table.table, { reason, requestedBy: actorId(actor), at: this.now().toISOString() });
    return {
      outcome: 'done',
      action: 'resnapshot',
      source: table.source,
      table: table.table,
      message: `${table.source}/${table.table} marked needs-resnapshot; the snapshot is requested`,
      detail,
    };
  }

  /**
   * Rebuilds one table of one sink from the log into a shadow and swaps it in (or, rehearsing,
   * only builds and diffs): docs/rebuild.md. Refused, audited, when the table is unknown, the
   * sink is not named and the table has several, no rebuild entry point is wired, or the
   * history needed is not complete.
   */
  async rebuild(actor: Actor, r: { source?: string; table: string; sink?: string; from?: string; rehearse?: boolean }): Promise<ActionResult> {
    const rehearse = r.rehearse === true;
    const detail: Record<string, unknown> = { sink: r.sink ?? null, from: r.from ?? null, rehearse };
    const found = await this.find(actor, 'rebuild', r.source, r.table, detail);
    if ('refused' in found) return found.refused;
    const { table } = found;
    const sinks = (await this.sinksOf(table)).map((p) => p.sink);
    let sink = r.sink;
    if (sink === undefined) {
      if (sinks.length !== 1) {
        return this.refuse(
          actor,
          'rebuild',
          table.source,
          table.table,
          {
            code: sinks.length === 0 ? 'NO_SINK_PROGRESS' : 'AMBIGUOUS_SINK',
            reason:
              sinks.length === 0
                ? `no sink has applied ${table.source}/${table.table}`
                : `${table.source}/${table.table} is applied by several sinks (${sinks.join(', ')})`,
            hint: sinks.length === 0 ? 'a sink must have applied the table before it can be rebuilt' : 'name the sink with --sink',
          },
          detail,
        );
      }
      sink = sinks[0]!;
    }
    detail.sink = sink;
    if (!this.deps.rebuilds) {
      return this.refuse(
        actor,
        'rebuild',
        table.source,
        table.table,
        {
          code: 'REBUILD_NOT_AVAILABLE',
          reason: 'this operator door has no rebuild worker wired',
          hint: 'run cdc rebuild against the cdc local state folder (docs/rebuild.md)',
        },
        detail,
      );
    }
    const ask = { source: table.source, table: table.table, sink, ...(r.from !== undefined ? { from: r.from } : {}) };
    const checked = await this.deps.rebuilds.check(ask);
    if (checked.refusal) return this.refuse(actor, 'rebuild', table.source, table.table, checked.refusal, detail);
    const done = await this.deps.rebuilds.run({ ...ask, rehearse, actor: actorId(actor) });
    if ('refusal' in done) return this.refuse(actor, 'rebuild', table.source, table.table, done.refusal, detail);
    return { outcome: 'done', action: 'rebuild', source: table.source, table: table.table, message: done.message, detail: { ...detail, ...done.detail } };
  }

  // ---------------------------------------------------------------------------------------------

  /** Finds the table (by id, within `source` if given): a missing or ambiguous one is a refusal, audited. */
  private async find(
    actor: Actor,
    action: OperatorActionName,
    sourceId: string | undefined,
    table: string,
    detail: Record<string, unknown>,
  ): Promise<{ table: TableRecord } | { refused: ActionResult }> {
    const candidates = (await this.cp.listTables(sourceId)).filter((t) => t.table === table);
    if (candidates.length === 1) {
      // The list may be a query page; read the one item strongly consistently to decide on it.
      const fresh = await this.cp.getTable(candidates[0]!.source, table);
      if (fresh) return { table: fresh };
    }
    const refusal: Refusal =
      candidates.length === 0
        ? {
            code: 'TABLE_NOT_FOUND',
            reason: `no table ${table}${sourceId ? ` in source ${sourceId}` : ''} is registered in the control plane`,
            hint: 'cdc status lists the registered tables (a table is registered when its first event is captured)',
          }
        : {
            code: 'AMBIGUOUS_TABLE',
            reason: `${table} is registered in several sources (${candidates.map((c) => c.source).join(', ')})`,
            hint: 'name the source with --source',
          };
    return { refused: await this.refuse(actor, action, sourceId ?? null, table, refusal, detail) };
  }

  private async sinksOf(table: TableRecord): Promise<SinkTableProgress[]> {
    return (await this.cp.listSinkProgress()).filter((p) => p.source === table.source && p.table === table.table);
  }

  private async refuse(
    actor: Actor,
    action: OperatorActionName,
    source: string | null,
    table: string | null,
    refusal: Refusal,
    detail: Record<string, unknown>,
  ): Promise<ActionResult> {
    await this.cp.appendAudit({
      at: this.now().toISOString(),
      actor: actorId(actor),
      action,
      source,
      table,
      outcome: 'refused',
      detail: { ...detail, ...noteOf(actor), code: refusal.code, reason: refusal.reason, hint: refusal.hint },
    });
    return { outcome: 'refused', action, source, table, ...refusal };
  }

  /** Commits the change with its audit entry; returns a refusal (audited) if the table changed since it was read. */
  private async commit(
    actor: Actor,
    action: OperatorActionName,
    table: TableRecord,
    state: TableState,
    stateReason: string | null,
    release: Array<{ sink: string; heldFrom: string }>,
    detail: Record<string, unknown>,
  ): Promise<ActionResult | null> {
    const at = this.now();
    // Strictly later than the read updatedAt, so the next action's condition sees a change.
    const updatedAt = new Date(Math.max(at.getTime(), Date.parse(table.updatedAt) + 1)).toISOString();
    const ok = await this.cp.commitTableAction({
      source: table.source,
      table: table.table,
      expected: { state: table.state, updatedAt: table.updatedAt },
      next: { state, stateReason, updatedAt },
      releaseSinks: release,
      audit: {
        at: at.toISOString(),
        actor: actorId(actor),
        action,
        source: table.source,
        table: table.table,
        outcome: 'done',
        detail: { ...detail, ...noteOf(actor) },
      },
    });
    if (ok) return null;
    return this.refuse(
      actor,
      action,
      table.source,
      table.table,
      {
        code: 'CONCURRENT_CHANGE',
        reason: `${table.source}/${table.table} changed while the ${action} was being decided (another action or the pipeline got there first)`,
        hint: 'check cdc status and cdc audit, then try again if it still applies',
      },
      detail,
    );
  }
}
