/**
 * The control plane on DynamoDB (docs/architecture.md §5.3): one table, partition key `pk` (S) and sort key
 * `sk` (S), implementing the `ControlPlane` port.
 *
 * Items (`<…>` are values; a source or sink id never contains `#`, so the first `#`-separated
 * field after the prefix is the source or sink and the rest is the table id):
 *
 * | pk                          | sk                        | item                                                  |
 * |-----------------------------|---------------------------|-------------------------------------------------------|
 * | `SOURCES`                   | `SOURCE#<source>`         | a source that has tables (so all tables can be listed) |
 * | `SOURCE#<source>`           | `TABLE#<table>`           | table record: state, current version, delete mode, …  |
 * | `SCHEMA#<source>#<table>`   | `V#<version, 9 digits>`   | schema version: columns, key, effective position       |
 * | `SINK#<sink>`               | `TABLE#<source>#<table>`  | sink progress: applied high-water mark, held-from      |
 * | `CHECKPOINT#<consumer>`     | `SHARD#<shard id>`        | local event-source poller checkpoint                   |
 * | `AUDIT`                     | `<ISO time>#<uuid>`       | append-only audit entry (detail as JSON text)          |
 * | `DEADLETTER#<stage>`        | `<ISO time>#<uuid>`       | dead letter with reason, origin and the record text    |
 * | `DEADLETTERS`               | `STAGE#<stage>`           | a stage that has dead letters (so all can be listed)   |
 * | `SOURCE#<source>`           | `SNAPSHOT#<table>`        | the table's snapshot run (state as JSON, `version`)    |
 * | `SNAPSHOT#<source>#<table>` | `RUN#<run>#C#<9 digits>`  | a completed snapshot chunk (docs/snapshot.md)          |
 * | `REBUILD#<sink>`            | `<source>#<table>#<ISO time>#<id>` | a rebuild run (docs/rebuild.md; JSON in `body`) |
 * | `REBUILD#<sink>`            | `ACTIVE`                  | the sink's rebuild slot: the one under way, its checkpoint (JSON in `body`) |
 * | `VERDICT#<sink>`            | `TABLE#<source>#<table>`  | latest reconciliation verdict + cursor (docs/reconcile.md) |
 *
 * The audit log is one partition, read in time order: it holds state changes, schema versions
 * and operator actions (never per-event traffic), far below one partition's write capacity. A
 * read from a time on (`listAudit`'s `since`) is a key condition on the sort key: the older part
 * of the log is not read.
 *
 * Rules kept here:
 * - Every state change and its audit entry are one `TransactWriteItems` (registerTable,
 *   addSchemaVersion, setTableState, releaseSinkTable, a dead letter that degrades its table).
 * - registerTable and addSchemaVersion are conditional (`attribute_not_exists`, `currentVersion
 *   = :previous`), so of two racing writers exactly one wins and the other gets `false`.
 * - advanceSinkProgress never lowers the high-water mark and holdSinkTable keeps the lowest
 *   held position: both are condition expressions on the item, not read-then-write.
 * - Every read is strongly consistent (`ConsistentRead: true`); every Query follows
 *   `LastEvaluatedKey` to the end.
 * - A transaction cancelled by a conflicting concurrent transaction is retried (bounded).
 * - A dead letter's record is kept whole: when it is over what one item holds
 *   (`DEAD_LETTER_RECORD_MAX_BYTES`), it goes to the payload store (encrypted S3 on AWS) and the item
 *   keeps a preview, the reference, its size and SHA-256; `listDeadLetters` reads it back whole
 *   (docs/large-records.md). Without a payload store it is cut, and `truncated` says so.
 *
 * This class only delegates: the plumbing (keys, reads, queries, transactions) is in
 * `control-plane-dynamodb/control-table.ts`, and each group of items has a module of that folder
 * (tables, sink progress, checkpoints, audit, dead letters, snapshots, reconcile verdicts, rebuilds).
 */
import type { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { Position } from '../core/shared/position.ts';
import type { PayloadStore } from '../core/shared/payload-store.ts';
import type { SnapshotChunkRecord, SnapshotState } from '../core/snapshot/snapshot.ts';
import type { ReconcileVerdict } from '../core/reconcile/reconcile.ts';
import type {
  ActiveRebuild,
  AuditEntry,
  ControlPlane,
  DeadLetter,
  RebuildCheckpoint,
  RebuildRun,
  SchemaVersion,
  SinkTableProgress,
  TableAction,
  TableRecord,
  TableState,
} from '../core/shared/control-plane.ts';
import { ControlTable } from './control-plane-dynamodb/control-table.ts';
import * as tables from './control-plane-dynamodb/tables.ts';
import * as sinkProgress from './control-plane-dynamodb/sink-progress.ts';
import * as checkpoints from './control-plane-dynamodb/checkpoints.ts';
import * as audits from './control-plane-dynamodb/audit.ts';
import * as deadLetters from './control-plane-dynamodb/dead-letters.ts';
import * as snapshots from './control-plane-dynamodb/snapshots.ts';
import * as verdicts from './control-plane-dynamodb/reconcile-verdicts.ts';
import * as rebuilds from './control-plane-dynamodb/rebuilds.ts';

/** The `ControlPlane` port on one DynamoDB table (see the module comment for the item layout). */
export class DynamoDbControlPlane implements ControlPlane {
  private readonly t: ControlTable;

  constructor(
    client: DynamoDBClient,
    tableName: string,
    /** Where dead letters' records too large for an item are kept whole. */
    payloads?: PayloadStore,
  ) {
    this.t = new ControlTable(client, tableName, payloads);
  }

  // Tables and schema versions

  getTable(sourceId: string, table: string): Promise<TableRecord | null> {
    return tables.getTable(this.t, sourceId, table);
  }
  listTables(sourceId?: string): Promise<TableRecord[]> {
    return tables.listTables(this.t, sourceId);
  }
  getSchemaVersion(sourceId: string, table: string, version: number): Promise<SchemaVersion | null> {
    return tables.getSchemaVersion(this.t, sourceId, table, version);
  }
  listSchemaVersions(sourceId: string, table: string): Promise<SchemaVersion[]> {
    return tables.listSchemaVersions(this.t, sourceId, table);
  }
  registerTable(table: TableRecord, schema: SchemaVersion, audit: AuditEntry): Promise<boolean> {
    return tables.registerTable(this.t, table, schema, audit);
  }
  addSchemaVersion(schema: SchemaVersion, audit: AuditEntry): Promise<boolean> {
    return tables.addSchemaVersion(this.t, schema, audit);
  }
  setTableState(sourceId: string, table: string, state: TableState, reason: string | null, audit: AuditEntry): Promise<void> {
    return tables.setTableState(this.t, sourceId, table, state, reason, audit);
  }
  commitTableAction(action: TableAction): Promise<boolean> {
    return tables.commitTableAction(this.t, action);
  }

  // Sink progress

  getSinkProgress(sink: string, sourceId: string, table: string): Promise<SinkTableProgress | null> {
    return sinkProgress.getSinkProgress(this.t, sink, sourceId, table);
  }
  advanceSinkProgress(sink: string, sourceId: string, table: string, appliedPosition: Position): Promise<void> {
    return sinkProgress.advanceSinkProgress(this.t, sink, sourceId, table, appliedPosition);
  }
  noteReplayProgress(sink: string, sourceId: string, table: string, through: Readonly<Record<string, string>>): Promise<boolean> {
    return sinkProgress.noteReplayProgress(this.t, sink, sourceId, table, through);
  }

  holdSinkTable(
    sink: string,
    sourceId: string,
    table: string,
    fromPosition: Position,
    shards?: Readonly<Record<string, string>>,
    parallelBatches?: boolean,
  ): Promise<void> {
    return sinkProgress.holdSinkTable(this.t, sink, sourceId, table, fromPosition, shards, parallelBatches);
  }
  releaseSinkTable(sink: string, sourceId: string, table: string, audit: AuditEntry): Promise<void> {
    return sinkProgress.releaseSinkTable(this.t, sink, sourceId, table, audit);
  }
  listSinkProgress(sink?: string): Promise<SinkTableProgress[]> {
    return sinkProgress.listSinkProgress(this.t, sink);
  }
  completeSinkRelease(sink: string, sourceId: string, table: string, expected: { heldFrom: Position; holdCount: number }, audit: AuditEntry): Promise<boolean> {
    return sinkProgress.completeSinkRelease(this.t, sink, sourceId, table, expected, audit);
  }
  clearReleaseRequest(sink: string, sourceId: string, table: string): Promise<boolean> {
    return sinkProgress.clearReleaseRequest(this.t, sink, sourceId, table);
  }

  // Checkpoints of the local poller

  getCheckpoint(consumer: string, shardId: string): Promise<string | null> {
    return checkpoints.getCheckpoint(this.t, consumer, shardId);
  }
  putCheckpoint(consumer: string, shardId: string, sequenceNumber: string): Promise<void> {
    return checkpoints.putCheckpoint(this.t, consumer, shardId, sequenceNumber);
  }

  // Audit and dead letters

  appendAudit(entry: AuditEntry): Promise<void> {
    return audits.appendAudit(this.t, entry);
  }
  listAudit(sourceId?: string, table?: string, since?: string): Promise<AuditEntry[]> {
    return audits.listAudit(this.t, sourceId, table, since);
  }
  putDeadLetter(letter: DeadLetter): Promise<void> {
    return deadLetters.putDeadLetter(this.t, letter);
  }
  listDeadLetters(stage?: string): Promise<DeadLetter[]> {
    return deadLetters.listDeadLetters(this.t, stage);
  }

  // Snapshots (docs/snapshot.md)

  getSnapshot(sourceId: string, table: string): Promise<SnapshotState | null> {
    return snapshots.getSnapshot(this.t, sourceId, table);
  }
  listSnapshots(sourceId: string): Promise<SnapshotState[]> {
    return snapshots.listSnapshots(this.t, sourceId);
  }
  putSnapshot(state: SnapshotState, expectedVersion: number | null, audit: AuditEntry | null): Promise<boolean> {
    return snapshots.putSnapshot(this.t, state, expectedVersion, audit);
  }
  completeSnapshotChunk(chunk: SnapshotChunkRecord, state: SnapshotState, expectedVersion: number): Promise<boolean> {
    return snapshots.completeSnapshotChunk(this.t, chunk, state, expectedVersion);
  }
  listSnapshotChunks(sourceId: string, table: string, run: string): Promise<SnapshotChunkRecord[]> {
    return snapshots.listSnapshotChunks(this.t, sourceId, table, run);
  }

  // Reconciliation verdicts (docs/reconcile.md)

  putReconcileVerdict(verdict: ReconcileVerdict): Promise<void> {
    return verdicts.putReconcileVerdict(this.t, verdict);
  }
  getReconcileVerdict(sink: string, sourceId: string, table: string): Promise<ReconcileVerdict | null> {
    return verdicts.getReconcileVerdict(this.t, sink, sourceId, table);
  }
  listReconcileVerdicts(sink?: string): Promise<ReconcileVerdict[]> {
    return verdicts.listReconcileVerdicts(this.t, sink);
  }

  // Rebuilds (docs/rebuild.md)

  recordRebuild(run: RebuildRun, audit: AuditEntry): Promise<void> {
    return rebuilds.recordRebuild(this.t, run, audit);
  }
  listRebuilds(sink: string, sourceId?: string, table?: string): Promise<RebuildRun[]> {
    return rebuilds.listRebuilds(this.t, sink, sourceId, table);
  }
  claimRebuild(claim: ActiveRebuild, staleBefore: string, audit: AuditEntry): Promise<ActiveRebuild | null> {
    return rebuilds.claimRebuild(this.t, claim, staleBefore, audit);
  }
  getActiveRebuild(sink: string): Promise<ActiveRebuild | null> {
    return rebuilds.getActiveRebuild(this.t, sink);
  }
  checkpointRebuild(sink: string, id: string, checkpoint: RebuildCheckpoint, at: string): Promise<boolean> {
    return rebuilds.checkpointRebuild(this.t, sink, id, checkpoint, at);
  }
  releaseRebuild(sink: string, id: string, at: string): Promise<void> {
    return rebuilds.releaseRebuild(this.t, sink, id, at);
  }
}
