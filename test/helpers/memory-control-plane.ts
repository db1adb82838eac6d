/**
 * An in-memory `ControlPlane` for fast tests.
 *
 * This is a test double of a COLLABORATOR (the control plane), never of the thing under test: the
 * warehouse applier's property test runs ten thousand histories, and a DynamoDB round trip per
 * registry read would dominate. It keeps the port's documented rules, the same ones the DynamoDB
 * adapter (`lambda/adapters/control-plane-dynamodb.ts`) enforces with condition expressions:
 * registerTable and addSchemaVersion are conditional, state changes are audited, the sink
 * high-water mark never goes down, the held position keeps the lowest value until released, and a
 * dead letter degrades an active table (with an audit entry). The applier is also tested against
 * the real DynamoDB adapter on DynamoDB Local (test/handlers/warehouse-applier.test.ts).
 *
 * Every returned object is a copy, so callers cannot change the stored state by accident.
 */
import type {
  AuditEntry,
  ControlPlane,
  DeadLetter,
  SchemaVersion,
  SinkTableProgress,
  TableAction,
  TableRecord,
  TableState,
} from '../../lambda/core/shared/control-plane.ts';
import type { ActiveRebuild, RebuildCheckpoint, RebuildRun } from '../../lambda/core/shared/control-plane.ts';
import { CdcError } from '../../lambda/core/shared/errors.ts';
import type { SnapshotChunkRecord, SnapshotState } from '../../lambda/core/snapshot/snapshot.ts';
import type { ReconcileVerdict } from '../../lambda/core/reconcile/reconcile.ts';
import { assertPosition, type Position } from '../../lambda/core/shared/position.ts';
import { mergeHeldShards } from '../../lambda/core/operator/operator-decisions.ts';

const copy = <T>(v: T): T => structuredClone(v);
const tableKey = (sourceId: string, table: string): string => `${sourceId}\u0000${table}`;

export class MemoryControlPlane implements ControlPlane {
  private readonly tables = new Map<string, TableRecord>();
  private readonly schemas = new Map<string, Map<number, SchemaVersion>>();
  private readonly progress = new Map<string, SinkTableProgress>();
  private readonly checkpoints = new Map<string, string>();
  private readonly audit: AuditEntry[] = [];
  private readonly deadLetters: DeadLetter[] = [];
  private readonly snapshots = new Map<string, SnapshotState>();
  private readonly snapshotChunks = new Map<string, SnapshotChunkRecord>();
  private readonly rebuilds: RebuildRun[] = [];
  private readonly rebuildSlots = new Map<string, ActiveRebuild>();
  private readonly verdicts = new Map<string, ReconcileVerdict>();
  /** Calls per method name, for tests that care how often the applier asks. */
  readonly calls = new Map<string, number>();

  private count(name: string): void {
    this.calls.set(name, (this.calls.get(name) ?? 0) + 1);
  }

  async getTable(sourceId: string, table: string): Promise<TableRecord | null> {
    this.count('getTable');
    const t = this.tables.get(tableKey(sourceId, table));
    return t ? copy(t) : null;
  }

  async listTables(sourceId?: string): Promise<TableRecord[]> {
    return [...this.tables.values()]
      .filter((t) => sourceId === undefined || t.source === sourceId)
      .sort((a, b) => (a.source + a.table < b.source + b.table ? -1 : 1))
      .map(copy);
  }

  async getSchemaVersion(sourceId: string, table: string, version: number): Promise<SchemaVersion | null> {
    this.count('getSchemaVersion');
    const v = this.schemas.get(tableKey(sourceId, table))?.get(version);
    return v ? copy(v) : null;
  }

  async listSchemaVersions(sourceId: string, table: string): Promise<SchemaVersion[]> {
    return [...(this.schemas.get(tableKey(sourceId, table))?.values() ?? [])].sort((a, b) => a.version - b.version).map(copy);
  }

  async registerTable(table: TableRecord, schema: SchemaVersion, audit: AuditEntry): Promise<boolean> {
    if (schema.source !== table.source || schema.table !== table.table || schema.version !== table.currentVersion) {
      throw new CdcError('INVALID_ARGUMENT', 'schema version does not belong to the table record');
    }
    const k = tableKey(table.source, table.table);
    if (this.tables.has(k)) return false;
    this.tables.set(k, copy(table));
    this.schemas.set(k, new Map([[schema.version, copy(schema)]]));
    this.audit.push(copy(audit));
    return true;
  }

  async addSchemaVersion(schema: SchemaVersion, audit: AuditEntry): Promise<boolean> {
    const k = tableKey(schema.source, schema.table);
    const t = this.tables.get(k);
    if (!t) throw new CdcError('TABLE_NOT_REGISTERED', `table ${schema.table} of source ${schema.source} is not registered in the control plane`);
    if (t.currentVersion !== schema.version - 1) return false;
    t.currentVersion = schema.version;
    t.updatedAt = new Date().toISOString();
    this.schemas.get(k)!.set(schema.version, copy(schema));
    this.audit.push(copy(audit));
    return true;
  }

  async setTableState(sourceId: string, table: string, state: TableState, reason: string | null, audit: AuditEntry): Promise<void> {
    const t = this.tables.get(tableKey(sourceId, table));
    if (!t) throw new CdcError('TABLE_NOT_REGISTERED', `table ${table} of source ${sourceId} is not registered in the control plane`);
    t.state = state;
    t.stateReason = reason;
    t.updatedAt = new Date().toISOString();
    this.audit.push(copy(audit));
  }

  /** Test convenience: changes a table's delete mode (what an operator would do through the constructs). */
  setDeleteMode(sourceId: string, table: string, mode: TableRecord['deleteMode']): void {
    const t = this.tables.get(tableKey(sourceId, table));
    if (!t) throw new CdcError('TABLE_NOT_REGISTERED', `table ${table} of source ${sourceId} is not registered`);
    t.deleteMode = mode;
  }

  async getSinkProgress(sink: string, sourceId: string, table: string): Promise<SinkTableProgress | null> {
    this.count('getSinkProgress');
    const p = this.progress.get(`${sink}\u0000${tableKey(sourceId, table)}`);
    return p ? copy(p) : null;
  }

  private sinkEntry(sink: string, sourceId: string, table: string): SinkTableProgress {
    const k = `${sink}\u0000${tableKey(sourceId, table)}`;
    let p = this.progress.get(k);
    if (!p) {
      p = { sink, source: sourceId, table, appliedPosition: null, heldFrom: null };
      this.progress.set(k, p);
    }
    return p;
  }

  async advanceSinkProgress(sink: string, sourceId: string, table: string, appliedPosition: Position): Promise<void> {
    this.count('advanceSinkProgress');
    assertPosition(appliedPosition, 'appliedPosition');
    const p = this.sinkEntry(sink, sourceId, table);
    if (p.appliedPosition === null || p.appliedPosition < appliedPosition) p.appliedPosition = appliedPosition;
  }

  async holdSinkTable(
    sink: string,
    sourceId: string,
    table: string,
    fromPosition: Position,
    shards?: Readonly<Record<string, string>>,
    parallelBatches = false,
  ): Promise<void> {
    this.count('holdSinkTable');
    assertPosition(fromPosition, 'fromPosition');
    const p = this.sinkEntry(sink, sourceId, table);
    if (p.heldFrom === null || p.heldFrom > fromPosition) p.heldFrom = fromPosition;
    if (shards !== undefined) p.heldFromShards = mergeHeldShards(p.heldFromShards, shards);
    if (parallelBatches) p.parallelBatches = true;
    p.heldAt ??= new Date().toISOString();
    p.holdCount = (p.holdCount ?? 0) + 1;
  }

  async noteReplayProgress(sink: string, sourceId: string, table: string, through: Readonly<Record<string, string>>): Promise<boolean> {
    const p = this.progress.get(`${sink}\u0000${tableKey(sourceId, table)}`);
    if (!p || p.heldFrom === null) return false;
    p.replayedThrough = { ...through };
    return true;
  }

  async releaseSinkTable(sink: string, sourceId: string, table: string, audit: AuditEntry): Promise<void> {
    const p = this.sinkEntry(sink, sourceId, table);
    p.heldFrom = null;
    p.heldAt = null;
    p.heldFromShards = null;
    p.parallelBatches = false;
    p.replayedThrough = null;
    this.audit.push(copy(audit));
  }

  /** Test convenience: forgets every sink's progress (between property-test histories). */
  resetSinkProgress(): void {
    this.progress.clear();
  }

  async getCheckpoint(consumer: string, shardId: string): Promise<string | null> {
    return this.checkpoints.get(`${consumer}\u0000${shardId}`) ?? null;
  }

  async putCheckpoint(consumer: string, shardId: string, sequenceNumber: string): Promise<void> {
    this.checkpoints.set(`${consumer}\u0000${shardId}`, sequenceNumber);
  }

  async appendAudit(entry: AuditEntry): Promise<void> {
    this.audit.push(copy(entry));
  }

  async putDeadLetter(letter: DeadLetter): Promise<void> {
    this.count('putDeadLetter');
    this.deadLetters.push(copy(letter));
    if (letter.source === null || letter.table === null) return;
    const t = this.tables.get(tableKey(letter.source, letter.table));
    if (t && t.state === 'active') {
      t.state = 'degraded';
      t.stateReason = `${letter.code}: ${letter.reason.slice(0, 1024)}`;
      this.audit.push({
        at: letter.at,
        actor: letter.stage === 'normalizer' ? 'normalizer' : `applier:${letter.stage}`,
        action: 'degrade-table',
        source: t.source,
        table: t.table,
        outcome: 'done',
        detail: { from: 'active', to: 'degraded', code: letter.code, reason: letter.reason, origin: letter.origin, stage: letter.stage },
      });
    }
  }

  async listDeadLetters(stage?: string): Promise<DeadLetter[]> {
    return this.deadLetters.filter((d) => stage === undefined || d.stage === stage).map(copy);
  }

  async listAudit(sourceId?: string, table?: string, since?: string): Promise<AuditEntry[]> {
    const from = since === undefined ? null : Date.parse(since);
    return this.audit
      .filter(
        (a) => (sourceId === undefined || a.source === sourceId) && (table === undefined || a.table === table) && (from === null || Date.parse(a.at) >= from),
      )
      .map(copy);
  }

  // ---- Operator actions: the same conditions as the DynamoDB adapter's transactions ----

  async listSinkProgress(sink?: string): Promise<SinkTableProgress[]> {
    return [...this.progress.values()]
      .filter((p) => sink === undefined || p.sink === sink)
      .sort((a, b) => (a.sink + a.source + a.table < b.sink + b.source + b.table ? -1 : 1))
      .map(copy);
  }

  async commitTableAction(action: TableAction): Promise<boolean> {
    const t = this.tables.get(tableKey(action.source, action.table));
    if (!t || t.state !== action.expected.state || t.updatedAt !== action.expected.updatedAt) return false;
    const sinks = (action.releaseSinks ?? []).map((r) => ({ r, p: this.progress.get(`${r.sink}\u0000${tableKey(action.source, action.table)}`) }));
    if (sinks.some(({ r, p }) => !p || p.heldFrom !== r.heldFrom)) return false;
    t.state = action.next.state;
    t.stateReason = action.next.stateReason;
    t.updatedAt = action.next.updatedAt;
    for (const { p } of sinks) p!.releaseRequested = action.audit.at;
    this.audit.push(copy(action.audit));
    return true;
  }

  async completeSinkRelease(
    sink: string,
    sourceId: string,
    table: string,
    expected: { heldFrom: Position; holdCount: number },
    audit: AuditEntry,
  ): Promise<boolean> {
    const p = this.progress.get(`${sink}\u0000${tableKey(sourceId, table)}`);
    if (!p || p.heldFrom !== expected.heldFrom || (p.holdCount ?? 0) !== expected.holdCount) return false;
    p.heldFrom = null;
    p.heldAt = null;
    p.heldFromShards = null;
    p.parallelBatches = false;
    p.replayedThrough = null;
    p.releasedAt = new Date().toISOString();
    this.audit.push(copy(audit));
    return true;
  }

  async clearReleaseRequest(sink: string, sourceId: string, table: string): Promise<boolean> {
    const p = this.progress.get(`${sink}\u0000${tableKey(sourceId, table)}`);
    if (!p || p.heldFrom !== null) return false;
    p.releaseRequested = null;
    return true;
  }

  // ---- Snapshots ----

  async getSnapshot(sourceId: string, table: string): Promise<SnapshotState | null> {
    const s = this.snapshots.get(tableKey(sourceId, table));
    return s ? copy(s) : null;
  }

  async listSnapshots(sourceId: string): Promise<SnapshotState[]> {
    return [...this.snapshots.values()]
      .filter((s) => s.source === sourceId)
      .sort((a, b) => (a.table < b.table ? -1 : 1))
      .map(copy);
  }

  async putSnapshot(state: SnapshotState, expectedVersion: number | null, audit: AuditEntry | null): Promise<boolean> {
    const k = tableKey(state.source, state.table);
    const stored = this.snapshots.get(k);
    if ((stored?.version ?? null) !== expectedVersion) return false;
    this.snapshots.set(k, copy(state));
    if (audit) this.audit.push(copy(audit));
    return true;
  }

  async completeSnapshotChunk(chunk: SnapshotChunkRecord, state: SnapshotState, expectedVersion: number): Promise<boolean> {
    const k = tableKey(state.source, state.table);
    if (this.snapshots.get(k)?.version !== expectedVersion) return false;
    this.snapshots.set(k, copy(state));
    this.snapshotChunks.set(`${k}\u0000${chunk.run}\u0000${String(chunk.index).padStart(9, '0')}`, copy(chunk));
    return true;
  }

  async listSnapshotChunks(sourceId: string, table: string, run: string): Promise<SnapshotChunkRecord[]> {
    return [...this.snapshotChunks.values()]
      .filter((c) => c.source === sourceId && c.table === table && c.run === run)
      .sort((a, b) => a.index - b.index)
      .map(copy);
  }

  // ---- Reconciliation ----

  async putReconcileVerdict(verdict: ReconcileVerdict): Promise<void> {
    this.verdicts.set(`${verdict.sink}\u0000${tableKey(verdict.source, verdict.table)}`, copy(verdict));
  }

  async getReconcileVerdict(sink: string, sourceId: string, table: string): Promise<ReconcileVerdict | null> {
    const v = this.verdicts.get(`${sink}\u0000${tableKey(sourceId, table)}`);
    return v ? copy(v) : null;
  }

  async listReconcileVerdicts(sink?: string): Promise<ReconcileVerdict[]> {
    return [...this.verdicts.values()]
      .filter((v) => sink === undefined || v.sink === sink)
      .sort((a, b) => (a.sink + '\u0000' + a.source + '\u0000' + a.table < b.sink + '\u0000' + b.source + '\u0000' + b.table ? -1 : 1))
      .map(copy);
  }

  async recordRebuild(run: RebuildRun, audit: AuditEntry): Promise<void> {
    if (this.rebuilds.some((r) => r.sink === run.sink && r.id === run.id))
      throw new CdcError('INVALID_ARGUMENT', `rebuild ${run.id} of sink ${run.sink} is already recorded`);
    this.rebuilds.push(copy(run));
    this.audit.push(copy(audit));
  }

  async listRebuilds(sink: string, sourceId?: string, table?: string): Promise<RebuildRun[]> {
    return this.rebuilds
      .filter((r) => r.sink === sink && (sourceId === undefined || r.source === sourceId) && (table === undefined || r.table === table))
      .sort((a, b) => (a.startedAt < b.startedAt ? -1 : a.startedAt > b.startedAt ? 1 : 0))
      .map(copy);
  }

  async claimRebuild(claim: ActiveRebuild, staleBefore: string, audit: AuditEntry): Promise<ActiveRebuild | null> {
    const held = this.rebuildSlots.get(claim.sink);
    if (held && held.state === 'running' && Date.parse(held.heartbeatAt) >= Date.parse(staleBefore)) return copy(held);
    this.rebuildSlots.set(claim.sink, copy(claim));
    this.audit.push(copy(audit));
    return null;
  }

  async getActiveRebuild(sink: string): Promise<ActiveRebuild | null> {
    const held = this.rebuildSlots.get(sink);
    return held ? copy(held) : null;
  }

  async checkpointRebuild(sink: string, id: string, checkpoint: RebuildCheckpoint, at: string): Promise<boolean> {
    const held = this.rebuildSlots.get(sink);
    if (!held || held.id !== id || held.state !== 'running') return false;
    this.rebuildSlots.set(sink, { ...held, checkpoint: copy(checkpoint), heartbeatAt: at });
    return true;
  }

  async releaseRebuild(sink: string, id: string, at: string): Promise<void> {
    const held = this.rebuildSlots.get(sink);
    if (held && held.id === id) this.rebuildSlots.set(sink, { ...held, state: 'finished', heartbeatAt: at });
  }
}
