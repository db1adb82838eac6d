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
 */
import { randomUUID } from 'node:crypto';
import {
  ConditionalCheckFailedException,
  CreateTableCommand,
  DescribeTableCommand,
  GetItemCommand,
  PutItemCommand,
  QueryCommand,
  ScanCommand,
  ResourceInUseException,
  TransactionCanceledException,
  TransactWriteItemsCommand,
  UpdateItemCommand,
  waitUntilTableExists,
  type AttributeValue,
  type DynamoDBClient,
  type QueryCommandInput,
  type TransactWriteItem,
} from '@aws-sdk/client-dynamodb';
import { marshall, unmarshall } from '@aws-sdk/util-dynamodb';
import { ControlPartition } from '../../contracts/control-plane-keys.ts';
import { CdcError } from '../core/shared/errors.ts';
import { assertPosition, type Position } from '../core/shared/position.ts';
import { mergeHeldShards } from '../core/operator/operator-decisions.ts';
import { deadLetterKey, PayloadMismatchError, sha256, type PayloadStore } from '../core/shared/payload-store.ts';
import type { SnapshotChunkRecord, SnapshotState } from '../core/snapshot/snapshot.ts';
import { isPositionSpace } from '../core/shared/position-space.ts';
import type { ReconcileVerdict } from '../core/reconcile/reconcile.ts';
import type {
  AuditEntry,
  ControlPlane,
  DeadLetter,
  SchemaVersion,
  SinkTableProgress,
  TableAction,
  TableRecord,
  TableState,
} from '../core/shared/control-plane.ts';
import { cutUtf8, DEAD_LETTER_RECORD_MAX_BYTES } from '../core/shared/control-plane.ts';
import type { ActiveRebuild, RebuildCheckpoint, RebuildRun } from '../core/shared/control-plane.ts';

type Item = Record<string, AttributeValue>;
type Plain = Record<string, unknown>;

const TABLE_STATES: readonly TableState[] = ['active', 'paused', 'needs-resnapshot', 'degraded'];
const DEAD_LETTER_REASON_BYTES = 16 * 1024;
const MAX_VERSION = 999_999_999;
const TRANSACTION_ATTEMPTS = 6;

const key = {
  sources: () => ({ pk: ControlPartition.SOURCES }),
  source: (source: string) => ({ pk: ControlPartition.SOURCES, sk: `SOURCE#${source}` }),
  table: (source: string, table: string) => ({ pk: ControlPartition.source(source), sk: `TABLE#${table}` }),
  schema: (source: string, table: string, version: number) => ({ pk: ControlPartition.schema(source, table), sk: `V#${String(version).padStart(9, '0')}` }),
  sink: (sink: string, source: string, table: string) => ({ pk: ControlPartition.sink(sink), sk: `TABLE#${source}#${table}` }),
  checkpoint: (consumer: string, shardId: string) => ({ pk: ControlPartition.checkpoint(consumer), sk: `SHARD#${shardId}` }),
  audit: (at: string) => ({ pk: ControlPartition.AUDIT, sk: `${sortableTime(at)}#${randomUUID()}` }),
  deadLetter: (stage: string, at: string) => ({ pk: ControlPartition.deadLetters(stage), sk: `${sortableTime(at)}#${randomUUID()}` }),
  deadLetterStage: (stage: string) => ({ pk: ControlPartition.DEAD_LETTER_STAGES, sk: `STAGE#${stage}` }),
  snapshot: (source: string, table: string) => ({ pk: ControlPartition.source(source), sk: `SNAPSHOT#${table}` }),
  verdict: (sink: string, source: string, table: string) => ({ pk: ControlPartition.verdicts(sink), sk: `TABLE#${source}#${table}` }),
  snapshotChunk: (source: string, table: string, run: string, index: number) => ({
    pk: ControlPartition.snapshotChunks(source, table),
    sk: `RUN#${run}#C#${String(index).padStart(9, '0')}`,
  }),
  rebuild: (sink: string, source: string, table: string, at: string, id: string) => ({
    pk: ControlPartition.rebuilds(sink),
    sk: `${source}#${table}#${sortableTime(at)}#${id}`,
  }),
  activeRebuild: (sink: string) => ({ pk: ControlPartition.rebuilds(sink), sk: 'ACTIVE' }),
};

/** ISO-8601 in UTC with milliseconds, so that string order is time order whatever form the caller used. */
function sortableTime(at: string): string {
  const t = Date.parse(at);
  if (Number.isNaN(t)) throw new CdcError('INVALID_ARGUMENT', `expected an ISO-8601 time, got ${JSON.stringify(at)}`);
  return new Date(t).toISOString();
}

function toItem(value: Plain): Item {
  return marshall(value, { removeUndefinedValues: true });
}

function nonEmpty(value: string, what: string): string {
  if (typeof value !== 'string' || value === '') throw new CdcError('INVALID_ARGUMENT', `${what} must be a non-empty string, got ${JSON.stringify(value)}`);
  return value;
}

function notRegistered(source: string, table: string): CdcError {
  return new CdcError('TABLE_NOT_REGISTERED', `table ${table} of source ${source} is not registered in the control plane`);
}

type TransactOutcome = { ok: true } | { ok: false; reasons: string[] };

/** Creates the control table (pk/sk strings, on-demand) if it does not exist, and waits until it is active. */
export async function createControlTable(client: DynamoDBClient, name: string): Promise<void> {
  try {
    await client.send(
      new CreateTableCommand({
        TableName: name,
        BillingMode: 'PAY_PER_REQUEST',
        AttributeDefinitions: [
          { AttributeName: 'pk', AttributeType: 'S' },
          { AttributeName: 'sk', AttributeType: 'S' },
        ],
        KeySchema: [
          { AttributeName: 'pk', KeyType: 'HASH' },
          { AttributeName: 'sk', KeyType: 'RANGE' },
        ],
      }),
    );
  } catch (e) {
    if (!(e instanceof ResourceInUseException)) throw e;
    const described = await client.send(new DescribeTableCommand({ TableName: name }));
    const schema = described.Table?.KeySchema ?? [];
    const ok =
      schema.length === 2 &&
      schema.some((k) => k.AttributeName === 'pk' && k.KeyType === 'HASH') &&
      schema.some((k) => k.AttributeName === 'sk' && k.KeyType === 'RANGE');
    if (!ok) throw new CdcError('INVALID_CONTROL_TABLE', `table ${name} exists but its key is not pk (HASH) + sk (RANGE): ${JSON.stringify(schema)}`);
  }
  await waitUntilTableExists({ client, maxWaitTime: 120, minDelay: 1, maxDelay: 5 }, { TableName: name });
}

/** The `ControlPlane` port on one DynamoDB table (see the module comment for the item layout). */
export class DynamoDbControlPlane implements ControlPlane {
  constructor(
    private readonly client: DynamoDBClient,
    private readonly tableName: string,
    /** Where dead letters' records too large for an item are kept whole. */
    private readonly payloads?: PayloadStore,
  ) {}

  // -------------------------------------------------------------------------------------------
  // Tables and schema versions

  async getTable(source: string, table: string): Promise<TableRecord | null> {
    const item = await this.get(key.table(source, table));
    return item ? tableFromItem(item) : null;
  }

  async listTables(source?: string): Promise<TableRecord[]> {
    if (source !== undefined) {
      const items = await this.query({ pk: ControlPartition.source(source), skPrefix: 'TABLE#' });
      return items.map(tableFromItem).sort((a, b) => (a.table < b.table ? -1 : a.table > b.table ? 1 : 0));
    }
    const sources = (await this.query({ pk: key.sources().pk, skPrefix: 'SOURCE#' })).map((i) => String(i.source)).sort();
    const out: TableRecord[] = [];
    for (const s of sources) out.push(...(await this.listTables(s)));
    return out;
  }

  async getSchemaVersion(source: string, table: string, version: number): Promise<SchemaVersion | null> {
    if (!Number.isInteger(version) || version < 1 || version > MAX_VERSION) return null;
    const item = await this.get(key.schema(source, table, version));
    return item ? schemaFromItem(item) : null;
  }

  async listSchemaVersions(source: string, table: string): Promise<SchemaVersion[]> {
    const items = await this.query({ pk: ControlPartition.schema(source, table), skPrefix: 'V#' });
    return items.map(schemaFromItem);
  }

  async registerTable(table: TableRecord, schema: SchemaVersion, audit: AuditEntry): Promise<boolean> {
    nonEmpty(table.source, 'table.source');
    nonEmpty(table.table, 'table.table');
    if (schema.source !== table.source || schema.table !== table.table) {
      throw new CdcError('INVALID_ARGUMENT', `schema version is for ${schema.source}/${schema.table}, table record for ${table.source}/${table.table}`);
    }
    if (schema.version !== table.currentVersion) {
      throw new CdcError('INVALID_ARGUMENT', `table record names current version ${table.currentVersion} but the schema version is ${schema.version}`);
    }
    checkState(table.state);
    checkSchema(schema);
    const outcome = await this.transact([
      { Put: { TableName: this.tableName, Item: tableToItem(table), ConditionExpression: 'attribute_not_exists(pk)' } },
      { Put: { TableName: this.tableName, Item: schemaToItem(schema), ConditionExpression: 'attribute_not_exists(pk)' } },
      {
        Update: {
          TableName: this.tableName,
          Key: toItem(key.source(table.source)),
          UpdateExpression: 'SET #kind = :kind, #source = :source, #first = if_not_exists(#first, :now)',
          ExpressionAttributeNames: { '#kind': 'kind', '#source': 'source', '#first': 'firstSeenAt' },
          ExpressionAttributeValues: toItem({ ':kind': 'source', ':source': table.source, ':now': new Date().toISOString() }),
        },
      },
      this.auditPut(audit),
    ]);
    if (outcome.ok) return true;
    if (outcome.reasons[0] === 'ConditionalCheckFailed') return false;
    if (outcome.reasons[1] === 'ConditionalCheckFailed') {
      throw new CdcError(
        'CONTROL_PLANE_INCONSISTENT',
        `schema version ${schema.version} of ${table.source}/${table.table} exists but the table record does not`,
      );
    }
    throw transactionFailed('registerTable', outcome.reasons);
  }

  async addSchemaVersion(schema: SchemaVersion, audit: AuditEntry): Promise<boolean> {
    checkSchema(schema);
    if (schema.version < 2)
      throw new CdcError('INVALID_ARGUMENT', `addSchemaVersion adds version 2 or later (version 1 comes with registerTable), got ${schema.version}`);
    const now = new Date().toISOString();
    const outcome = await this.transact([
      {
        Update: {
          TableName: this.tableName,
          Key: toItem(key.table(schema.source, schema.table)),
          UpdateExpression: 'SET #cv = :v, #updated = :now',
          ConditionExpression: '#cv = :previous',
          ExpressionAttributeNames: { '#cv': 'currentVersion', '#updated': 'updatedAt' },
          ExpressionAttributeValues: toItem({ ':v': schema.version, ':previous': schema.version - 1, ':now': now }),
        },
      },
      { Put: { TableName: this.tableName, Item: schemaToItem(schema), ConditionExpression: 'attribute_not_exists(pk)' } },
      this.auditPut(audit),
    ]);
    if (outcome.ok) return true;
    if (outcome.reasons[0] === 'ConditionalCheckFailed') {
      if ((await this.getTable(schema.source, schema.table)) === null) throw notRegistered(schema.source, schema.table);
      return false;
    }
    if (outcome.reasons[1] === 'ConditionalCheckFailed') {
      throw new CdcError(
        'CONTROL_PLANE_INCONSISTENT',
        `schema version ${schema.version} of ${schema.source}/${schema.table} exists although the table's current version is ${schema.version - 1}`,
      );
    }
    throw transactionFailed('addSchemaVersion', outcome.reasons);
  }

  async setTableState(source: string, table: string, state: TableState, reason: string | null, audit: AuditEntry): Promise<void> {
    checkState(state);
    const outcome = await this.transact([
      {
        Update: {
          TableName: this.tableName,
          Key: toItem(key.table(source, table)),
          UpdateExpression: 'SET #state = :state, #reason = :reason, #updated = :now',
          ConditionExpression: 'attribute_exists(pk)',
          ExpressionAttributeNames: { '#state': 'state', '#reason': 'stateReason', '#updated': 'updatedAt' },
          ExpressionAttributeValues: toItem({ ':state': state, ':reason': reason, ':now': new Date().toISOString() }),
        },
      },
      this.auditPut(audit),
    ]);
    if (outcome.ok) return;
    if (outcome.reasons[0] === 'ConditionalCheckFailed') throw notRegistered(source, table);
    throw transactionFailed('setTableState', outcome.reasons);
  }

  // -------------------------------------------------------------------------------------------
  // Sink progress

  async getSinkProgress(sink: string, source: string, table: string): Promise<SinkTableProgress | null> {
    const item = await this.get(key.sink(sink, source, table));
    return item ? sinkProgressFromItem(item) : null;
  }

  async advanceSinkProgress(sink: string, source: string, table: string, appliedPosition: Position): Promise<void> {
    assertPosition(appliedPosition, 'appliedPosition');
    await this.conditionalUpdate(
      key.sink(sink, source, table),
      'SET #applied = :p, #sink = :sink, #source = :source, #table = :table, #kind = :kind, #updated = :now',
      'attribute_not_exists(#applied) OR #applied < :p',
      { '#applied': 'appliedPosition' },
      { ':p': appliedPosition, ...this.sinkValues(sink, source, table) },
    );
  }

  async holdSinkTable(sink: string, source: string, table: string, fromPosition: Position, shards?: Readonly<Record<string, string>>): Promise<void> {
    assertPosition(fromPosition, 'fromPosition');
    const k = key.sink(sink, source, table);
    // One conditional write of the held position, the per-shard first held sequence numbers and
    // the hold count, conditional on what was read (optimistic, retried on a concurrent hold or
    // release): the resume replay reads them at once and releases only if the count did not move,
    // so a hold recorded during a replay is never released unreplayed (docs/operations.md).
    for (let attempt = 1; ; attempt++) {
      const item = await this.get(k);
      const cur = item ? sinkProgressFromItem(item) : null;
      const count = cur?.holdCount ?? 0;
      const oldHeld = cur?.heldFrom ?? null;
      const held = oldHeld !== null && oldHeld < fromPosition ? oldHeld : fromPosition;
      const merged = shards !== undefined ? mergeHeldShards(cur?.heldFromShards, shards) : (cur?.heldFromShards ?? null);
      const conditions = [
        count > 0 ? '#holds = :count' : 'attribute_not_exists(#holds)',
        oldHeld !== null ? '#held = :oldHeld' : 'attribute_not_exists(#held)',
      ];
      try {
        await this.client.send(
          new UpdateItemCommand({
            TableName: this.tableName,
            Key: toItem(k),
            UpdateExpression: `SET #held = :p, #heldAt = if_not_exists(#heldAt, :now), #holds = :next, #sink = :sink, #source = :source, #table = :table, #kind = :kind, #updated = :now${merged !== null ? ', #shards = :shards' : ''}`,
            ConditionExpression: conditions.join(' AND '),
            ExpressionAttributeNames: {
              ...SINK_NAMES,
              '#held': 'heldFrom',
              '#heldAt': 'heldAt',
              '#holds': 'holdCount',
              ...(merged !== null ? { '#shards': 'heldFromShards' } : {}),
            },
            ExpressionAttributeValues: toItem({
              ':p': held,
              ':next': count + 1,
              ...this.sinkValues(sink, source, table),
              ...(count > 0 ? { ':count': count } : {}),
              ...(oldHeld !== null ? { ':oldHeld': oldHeld } : {}),
              ...(merged !== null ? { ':shards': merged } : {}),
            }),
          }),
        );
        return;
      } catch (e) {
        if (!(e instanceof ConditionalCheckFailedException) || attempt >= 50) throw e;
      }
    }
  }

  async releaseSinkTable(sink: string, source: string, table: string, audit: AuditEntry): Promise<void> {
    const outcome = await this.transact([
      {
        Update: {
          TableName: this.tableName,
          Key: toItem(key.sink(sink, source, table)),
          UpdateExpression: 'SET #sink = :sink, #source = :source, #table = :table, #kind = :kind, #updated = :now REMOVE #held, #heldAt, #shards',
          ExpressionAttributeNames: { ...SINK_NAMES, '#held': 'heldFrom', '#heldAt': 'heldAt', '#shards': 'heldFromShards' },
          ExpressionAttributeValues: toItem(this.sinkValues(sink, source, table)),
        },
      },
      this.auditPut(audit),
    ]);
    if (!outcome.ok) throw transactionFailed('releaseSinkTable', outcome.reasons);
  }

  // -------------------------------------------------------------------------------------------
  // Checkpoints of the local poller

  async getCheckpoint(consumer: string, shardId: string): Promise<string | null> {
    const item = await this.get(key.checkpoint(consumer, shardId));
    return item && typeof item.sequenceNumber === 'string' ? item.sequenceNumber : null;
  }

  async putCheckpoint(consumer: string, shardId: string, sequenceNumber: string): Promise<void> {
    nonEmpty(sequenceNumber, 'sequenceNumber');
    await this.client.send(
      new PutItemCommand({
        TableName: this.tableName,
        Item: toItem({ ...key.checkpoint(consumer, shardId), kind: 'checkpoint', consumer, shardId, sequenceNumber, updatedAt: new Date().toISOString() }),
      }),
    );
  }

  // -------------------------------------------------------------------------------------------
  // Audit and dead letters

  async appendAudit(entry: AuditEntry): Promise<void> {
    const put = this.auditPut(entry).Put!;
    await this.client.send(new PutItemCommand({ TableName: put.TableName, Item: put.Item, ConditionExpression: put.ConditionExpression }));
  }

  async listAudit(source?: string, table?: string, since?: string): Promise<AuditEntry[]> {
    const filters: string[] = [];
    const names: Record<string, string> = {};
    const values: Plain = {};
    if (source !== undefined) {
      filters.push('#source = :source');
      names['#source'] = 'source';
      values[':source'] = source;
    }
    if (table !== undefined) {
      filters.push('#table = :table');
      names['#table'] = 'table';
      values[':table'] = table;
    }
    // The sort key starts with the entry's time: `since` is a key condition (only that part of the log is read).
    const items = await this.query({
      pk: ControlPartition.AUDIT,
      ...(since !== undefined ? { skFrom: sortableTime(since) } : {}),
      filter: filters.length ? { expression: filters.join(' AND '), names, values } : undefined,
    });
    return items.map(auditFromItem);
  }

  async putDeadLetter(letter: DeadLetter): Promise<void> {
    nonEmpty(letter.stage, 'letter.stage');
    nonEmpty(letter.code, 'letter.code');
    const whole = letter.record ?? '';
    const record = cutUtf8(whole, DEAD_LETTER_RECORD_MAX_BYTES);
    const reason = cutUtf8(letter.reason ?? '', DEAD_LETTER_REASON_BYTES);
    let stored: { recordRef: string; recordBytes: number; recordSha256: string } | null = null;
    if (record.cut && this.payloads) {
      const body = Buffer.from(whole, 'utf8');
      stored = {
        recordRef: await this.payloads.put(deadLetterKey(letter.stage, letter.at, randomUUID()), body),
        recordBytes: body.byteLength,
        recordSha256: sha256(body),
      };
    }
    const item = toItem({
      ...key.deadLetter(letter.stage, letter.at),
      kind: 'dead-letter',
      at: letter.at,
      stage: letter.stage,
      source: letter.source,
      table: letter.table,
      code: letter.code,
      reason: reason.text,
      origin: letter.origin,
      record: record.text,
      ...(stored ?? {}),
      truncated: letter.truncated || (record.cut && stored === null),
    });
    const writes: TransactWriteItem[] = [
      { Put: { TableName: this.tableName, Item: item, ConditionExpression: 'attribute_not_exists(pk)' } },
      { Put: { TableName: this.tableName, Item: toItem({ ...key.deadLetterStage(letter.stage), kind: 'dead-letter-stage', stage: letter.stage }) } },
    ];
    for (let attempt = 1; ; attempt++) {
      const current = letter.source !== null && letter.table !== null ? await this.getTable(letter.source, letter.table) : null;
      if (current === null || current.state !== 'active' || attempt > TRANSACTION_ATTEMPTS) {
        const outcome = await this.transact(writes);
        if (!outcome.ok) throw transactionFailed('putDeadLetter', outcome.reasons);
        return;
      }
      const stateReason = `${letter.code}: ${cutUtf8(letter.reason ?? '', 1024).text}`;
      const outcome = await this.transact([
        ...writes,
        {
          Update: {
            TableName: this.tableName,
            Key: toItem(key.table(current.source, current.table)),
            UpdateExpression: 'SET #state = :degraded, #reason = :reason, #updated = :now',
            ConditionExpression: '#state = :active',
            ExpressionAttributeNames: { '#state': 'state', '#reason': 'stateReason', '#updated': 'updatedAt' },
            ExpressionAttributeValues: toItem({ ':degraded': 'degraded', ':active': 'active', ':reason': stateReason, ':now': new Date().toISOString() }),
          },
        },
        this.auditPut({
          at: letter.at,
          actor: letter.stage === 'normalizer' ? 'normalizer' : `applier:${letter.stage}`,
          action: 'degrade-table',
          source: current.source,
          table: current.table,
          outcome: 'done',
          detail: { from: 'active', to: 'degraded', code: letter.code, reason: reason.text, origin: letter.origin, stage: letter.stage },
        }),
      ]);
      if (outcome.ok) return;
      // The table left `active` meanwhile: read it again and store the letter without degrading.
      if (outcome.reasons[2] !== 'ConditionalCheckFailed') throw transactionFailed('putDeadLetter', outcome.reasons);
    }
  }

  async listDeadLetters(stage?: string): Promise<DeadLetter[]> {
    const stages =
      stage !== undefined ? [stage] : (await this.query({ pk: ControlPartition.DEAD_LETTER_STAGES, skPrefix: 'STAGE#' })).map((i) => String(i.stage));
    const items: Plain[] = [];
    for (const s of stages) items.push(...(await this.query({ pk: ControlPartition.deadLetters(s) })));
    items.sort((a, b) => (String(a.sk) < String(b.sk) ? -1 : String(a.sk) > String(b.sk) ? 1 : 0));
    const out: DeadLetter[] = [];
    for (const i of items) {
      const letter: DeadLetter = {
        at: String(i.at),
        stage: String(i.stage),
        source: typeof i.source === 'string' ? i.source : null,
        table: typeof i.table === 'string' ? i.table : null,
        code: String(i.code),
        reason: String(i.reason),
        origin: String(i.origin),
        record: String(i.record),
        truncated: i.truncated === true,
      };
      if (typeof i.recordRef === 'string') {
        letter.recordRef = i.recordRef;
        if (this.payloads) {
          const body = await this.payloads.get(i.recordRef);
          if (body.byteLength !== Number(i.recordBytes) || sha256(body) !== i.recordSha256)
            throw new PayloadMismatchError(i.recordRef, `is not the record dead letter ${String(i.sk)} stored`);
          letter.record = body.toString('utf8');
        } else {
          letter.truncated = true; // only the preview: this reader has no payload store
        }
      }
      out.push(letter);
    }
    return out;
  }

  // -------------------------------------------------------------------------------------------
  // Operator actions (docs/operations.md)

  async listSinkProgress(sink?: string): Promise<SinkTableProgress[]> {
    if (sink !== undefined) return (await this.query({ pk: `SINK#${sink}`, skPrefix: 'TABLE#' })).map(sinkProgressFromItem);
    // All sinks (the operator status, on demand): sink ids are not listed anywhere, so a scan for the kind.
    const out: SinkTableProgress[] = [];
    let start: Item | undefined;
    do {
      const page = await this.client.send(
        new ScanCommand({
          TableName: this.tableName,
          ConsistentRead: true,
          FilterExpression: '#kind = :kind',
          ExpressionAttributeNames: { '#kind': 'kind' },
          ExpressionAttributeValues: toItem({ ':kind': 'sink-progress' }),
          ...(start ? { ExclusiveStartKey: start } : {}),
        }),
      );
      for (const i of page.Items ?? []) out.push(sinkProgressFromItem(unmarshall(i)));
      start = page.LastEvaluatedKey;
    } while (start);
    return out.sort((a, b) => (a.sink + a.source + a.table < b.sink + b.source + b.table ? -1 : 1));
  }

  async commitTableAction(action: TableAction): Promise<boolean> {
    checkState(action.next.state);
    const items: TransactWriteItem[] = [
      {
        Update: {
          TableName: this.tableName,
          Key: toItem(key.table(action.source, action.table)),
          UpdateExpression: 'SET #state = :state, #reason = :reason, #updated = :now',
          ConditionExpression: '#state = :expectedState AND #updated = :expectedUpdated',
          ExpressionAttributeNames: { '#state': 'state', '#reason': 'stateReason', '#updated': 'updatedAt' },
          ExpressionAttributeValues: toItem({
            ':state': action.next.state,
            ':reason': action.next.stateReason,
            ':now': action.next.updatedAt,
            ':expectedState': action.expected.state,
            ':expectedUpdated': action.expected.updatedAt,
          }),
        },
      },
      ...(action.releaseSinks ?? []).map((r): TransactWriteItem => ({
        Update: {
          TableName: this.tableName,
          Key: toItem(key.sink(r.sink, action.source, action.table)),
          UpdateExpression: 'SET #release = :at',
          ConditionExpression: '#held = :held',
          ExpressionAttributeNames: { '#release': 'releaseRequested', '#held': 'heldFrom' },
          ExpressionAttributeValues: toItem({ ':at': action.audit.at, ':held': r.heldFrom }),
        },
      })),
      this.auditPut(action.audit),
    ];
    const outcome = await this.transact(items);
    if (outcome.ok) return true;
    if (outcome.reasons.includes('ConditionalCheckFailed')) return false;
    throw transactionFailed('commitTableAction', outcome.reasons);
  }

  async completeSinkRelease(
    sink: string,
    source: string,
    table: string,
    expected: { heldFrom: Position; holdCount: number },
    audit: AuditEntry,
  ): Promise<boolean> {
    const outcome = await this.transact([
      {
        Update: {
          TableName: this.tableName,
          Key: toItem(key.sink(sink, source, table)),
          UpdateExpression: 'SET #released = :now, #updated = :now REMOVE #held, #heldAt, #shards',
          ConditionExpression: expected.holdCount > 0 ? '#held = :held AND #holds = :holds' : '#held = :held AND attribute_not_exists(#holds)',
          ExpressionAttributeNames: {
            '#released': 'releasedAt',
            '#updated': 'updatedAt',
            '#held': 'heldFrom',
            '#heldAt': 'heldAt',
            '#holds': 'holdCount',
            '#shards': 'heldFromShards',
          },
          ExpressionAttributeValues: toItem({
            ':now': new Date().toISOString(),
            ':held': expected.heldFrom,
            ...(expected.holdCount > 0 ? { ':holds': expected.holdCount } : {}),
          }),
        },
      },
      this.auditPut(audit),
    ]);
    if (outcome.ok) return true;
    if (outcome.reasons[0] === 'ConditionalCheckFailed') return false;
    throw transactionFailed('completeSinkRelease', outcome.reasons);
  }

  async clearReleaseRequest(sink: string, source: string, table: string): Promise<boolean> {
    try {
      await this.client.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: toItem(key.sink(sink, source, table)),
          UpdateExpression: 'REMOVE #release',
          ConditionExpression: 'attribute_exists(pk) AND attribute_not_exists(#held)',
          ExpressionAttributeNames: { '#release': 'releaseRequested', '#held': 'heldFrom' },
        }),
      );
      return true;
    } catch (e) {
      if (e instanceof ConditionalCheckFailedException) return false;
      throw e;
    }
  }

  // -------------------------------------------------------------------------------------------
  // DynamoDB plumbing

  private sinkValues(sink: string, source: string, table: string): Plain {
    return { ':sink': sink, ':source': source, ':table': table, ':kind': 'sink-progress', ':now': new Date().toISOString() };
  }

  private auditPut(entry: AuditEntry): TransactWriteItem {
    if (entry.outcome !== 'done' && entry.outcome !== 'refused')
      throw new CdcError('INVALID_ARGUMENT', `audit outcome must be 'done' or 'refused', got ${JSON.stringify(entry.outcome)}`);
    nonEmpty(entry.actor, 'audit.actor');
    nonEmpty(entry.action, 'audit.action');
    return {
      Put: {
        TableName: this.tableName,
        Item: toItem({
          ...key.audit(entry.at),
          kind: 'audit',
          at: entry.at,
          actor: entry.actor,
          action: entry.action,
          source: entry.source,
          table: entry.table,
          outcome: entry.outcome,
          detail: JSON.stringify(entry.detail ?? {}),
        }),
        ConditionExpression: 'attribute_not_exists(pk)',
      },
    };
  }

  // -------------------------------------------------------------------------------------------
  // Snapshots (docs/snapshot.md): the state is one item, JSON in `body`, guarded by `version`.

  async getSnapshot(source: string, table: string): Promise<SnapshotState | null> {
    const item = await this.get(key.snapshot(source, table));
    return item ? (JSON.parse(String(item.body)) as SnapshotState) : null;
  }

  async listSnapshots(source: string): Promise<SnapshotState[]> {
    const items = await this.query({ pk: `SOURCE#${source}`, skPrefix: 'SNAPSHOT#' });
    return items.map((i) => JSON.parse(String(i.body)) as SnapshotState).sort((a, b) => (a.table < b.table ? -1 : a.table > b.table ? 1 : 0));
  }

  private snapshotPut(state: SnapshotState, expectedVersion: number | null): TransactWriteItem {
    nonEmpty(state.source, 'snapshot.source');
    nonEmpty(state.table, 'snapshot.table');
    if (!Number.isInteger(state.version) || (expectedVersion !== null && state.version <= expectedVersion)) {
      throw new CdcError('INVALID_ARGUMENT', `snapshot state version must be an integer above the expected ${expectedVersion}, got ${state.version}`);
    }
    return {
      Put: {
        TableName: this.tableName,
        Item: toItem({
          ...key.snapshot(state.source, state.table),
          kind: 'snapshot',
          source: state.source,
          table: state.table,
          version: state.version,
          status: state.status,
          body: JSON.stringify(state),
        }),
        ConditionExpression: expectedVersion === null ? 'attribute_not_exists(pk)' : '#ver = :expected',
        ...(expectedVersion === null
          ? {}
          : { ExpressionAttributeNames: { '#ver': 'version' }, ExpressionAttributeValues: toItem({ ':expected': expectedVersion }) }),
      },
    };
  }

  async putSnapshot(state: SnapshotState, expectedVersion: number | null, audit: AuditEntry | null): Promise<boolean> {
    const outcome = await this.transact(audit ? [this.snapshotPut(state, expectedVersion), this.auditPut(audit)] : [this.snapshotPut(state, expectedVersion)]);
    if (outcome.ok) return true;
    if (outcome.reasons[0] === 'ConditionalCheckFailed') return false;
    throw transactionFailed('putSnapshot', outcome.reasons);
  }

  async completeSnapshotChunk(chunk: SnapshotChunkRecord, state: SnapshotState, expectedVersion: number): Promise<boolean> {
    if (chunk.source !== state.source || chunk.table !== state.table || chunk.run !== state.run) {
      throw new CdcError(
        'INVALID_ARGUMENT',
        `chunk ${chunk.source}/${chunk.table} run ${chunk.run} does not belong to the snapshot state of ${state.source}/${state.table} run ${state.run}`,
      );
    }
    const outcome = await this.transact([
      this.snapshotPut(state, expectedVersion),
      {
        Put: {
          TableName: this.tableName,
          Item: toItem({ ...key.snapshotChunk(chunk.source, chunk.table, chunk.run, chunk.index), kind: 'snapshot-chunk', body: JSON.stringify(chunk) }),
        },
      },
    ]);
    if (outcome.ok) return true;
    if (outcome.reasons[0] === 'ConditionalCheckFailed') return false;
    throw transactionFailed('completeSnapshotChunk', outcome.reasons);
  }

  async listSnapshotChunks(source: string, table: string, run: string): Promise<SnapshotChunkRecord[]> {
    const items = await this.query({ pk: `SNAPSHOT#${source}#${table}`, skPrefix: `RUN#${run}#C#` });
    return items.map((i) => JSON.parse(String(i.body)) as SnapshotChunkRecord);
  }

  // Reconciliation verdicts (docs/reconcile.md): the latest per sink and table, JSON in `body`.

  async putReconcileVerdict(verdict: ReconcileVerdict): Promise<void> {
    nonEmpty(verdict.sink, 'verdict.sink');
    nonEmpty(verdict.source, 'verdict.source');
    nonEmpty(verdict.table, 'verdict.table');
    sortableTime(verdict.at);
    await this.client.send(
      new PutItemCommand({
        TableName: this.tableName,
        Item: toItem({
          ...key.verdict(verdict.sink, verdict.source, verdict.table),
          kind: 'reconcile-verdict',
          verdict: verdict.verdict,
          at: verdict.at,
          body: JSON.stringify(verdict),
        }),
      }),
    );
  }

  async getReconcileVerdict(sink: string, source: string, table: string): Promise<ReconcileVerdict | null> {
    const item = await this.get(key.verdict(sink, source, table));
    return item ? (JSON.parse(String(item.body)) as ReconcileVerdict) : null;
  }

  async listReconcileVerdicts(sink?: string): Promise<ReconcileVerdict[]> {
    let items: Plain[];
    if (sink !== undefined) items = await this.query({ pk: ControlPartition.verdicts(sink), skPrefix: 'TABLE#' });
    else {
      // All sinks (coverage across sinks): sink ids are not listed anywhere, so a scan for the kind.
      items = [];
      let start: Item | undefined;
      do {
        const page = await this.client.send(
          new ScanCommand({
            TableName: this.tableName,
            ConsistentRead: true,
            FilterExpression: '#kind = :kind',
            ExpressionAttributeNames: { '#kind': 'kind' },
            ExpressionAttributeValues: toItem({ ':kind': 'reconcile-verdict' }),
            ...(start ? { ExclusiveStartKey: start } : {}),
          }),
        );
        for (const i of page.Items ?? []) items.push(unmarshall(i));
        start = page.LastEvaluatedKey;
      } while (start);
    }
    const key3 = (v: ReconcileVerdict): string => `${v.sink}\u0000${v.source}\u0000${v.table}`;
    return items.map((i) => JSON.parse(String(i.body)) as ReconcileVerdict).sort((a, b) => (key3(a) < key3(b) ? -1 : key3(a) > key3(b) ? 1 : 0));
  }

  // -------------------------------------------------------------------------------------------
  // Rebuilds (docs/rebuild.md): one item per run, JSON in `body`, written with its audit entry.

  async recordRebuild(run: RebuildRun, audit: AuditEntry): Promise<void> {
    nonEmpty(run.sink, 'rebuild.sink');
    nonEmpty(run.id, 'rebuild.id');
    const outcome = await this.transact([
      {
        Put: {
          TableName: this.tableName,
          Item: toItem({
            ...key.rebuild(run.sink, run.source, run.table, run.startedAt, run.id),
            kind: 'rebuild',
            source: run.source,
            table: run.table,
            body: JSON.stringify(run),
          }),
          ConditionExpression: 'attribute_not_exists(pk)',
        },
      },
      this.auditPut(audit),
    ]);
    if (!outcome.ok) throw transactionFailed('recordRebuild', outcome.reasons);
  }

  async listRebuilds(sink: string, source?: string, table?: string): Promise<RebuildRun[]> {
    const prefix = source === undefined ? undefined : table === undefined ? `${source}#` : `${source}#${table}#`;
    const items = await this.query({ pk: ControlPartition.rebuilds(sink), ...(prefix ? { skPrefix: prefix } : {}) });
    return items
      .filter((i) => i.kind === 'rebuild')
      .map((i) => JSON.parse(String(i.body)) as RebuildRun)
      .sort((a, b) => (a.startedAt < b.startedAt ? -1 : a.startedAt > b.startedAt ? 1 : 0));
  }

  // The sink's rebuild slot: one item, `state` and `heartbeatAt` as attributes for the conditions, the claim as JSON in `body`.

  async claimRebuild(claim: ActiveRebuild, staleBefore: string, audit: AuditEntry): Promise<ActiveRebuild | null> {
    nonEmpty(claim.sink, 'rebuild.sink');
    nonEmpty(claim.id, 'rebuild.id');
    const outcome = await this.transact([
      {
        Put: {
          TableName: this.tableName,
          Item: toItem({
            ...key.activeRebuild(claim.sink),
            kind: 'rebuild-slot',
            id: claim.id,
            state: claim.state,
            heartbeatAt: sortableTime(claim.heartbeatAt),
            body: JSON.stringify(claim),
          }),
          ConditionExpression: 'attribute_not_exists(pk) OR #state = :finished OR #hb < :stale',
          ExpressionAttributeNames: { '#state': 'state', '#hb': 'heartbeatAt' },
          ExpressionAttributeValues: toItem({ ':finished': 'finished', ':stale': sortableTime(staleBefore) }),
        },
      },
      this.auditPut(audit),
    ]);
    if (outcome.ok) return null;
    if (outcome.reasons[0] === 'ConditionalCheckFailed') {
      const holder = await this.getActiveRebuild(claim.sink);
      if (holder) return holder;
    }
    throw transactionFailed('claimRebuild', outcome.reasons);
  }

  async getActiveRebuild(sink: string): Promise<ActiveRebuild | null> {
    const item = await this.get(key.activeRebuild(sink));
    return item ? (JSON.parse(String(item.body)) as ActiveRebuild) : null;
  }

  async checkpointRebuild(sink: string, id: string, checkpoint: RebuildCheckpoint, at: string): Promise<boolean> {
    for (let attempt = 0; ; attempt++) {
      const item = await this.get(key.activeRebuild(sink));
      if (!item || item.id !== id || item.state !== 'running') return false;
      const claim = { ...(JSON.parse(String(item.body)) as ActiveRebuild), checkpoint, heartbeatAt: at };
      try {
        await this.client.send(
          new UpdateItemCommand({
            TableName: this.tableName,
            Key: toItem(key.activeRebuild(sink)),
            UpdateExpression: 'SET #body = :body, #hb = :hb',
            ConditionExpression: '#id = :id AND #state = :running AND #body = :old',
            ExpressionAttributeNames: { '#body': 'body', '#hb': 'heartbeatAt', '#id': 'id', '#state': 'state' },
            ExpressionAttributeValues: toItem({ ':body': JSON.stringify(claim), ':hb': sortableTime(at), ':id': id, ':running': 'running', ':old': item.body }),
          }),
        );
        return true;
      } catch (e) {
        if (!(e instanceof ConditionalCheckFailedException) || attempt >= 5) throw e;
      }
    }
  }

  async releaseRebuild(sink: string, id: string, at: string): Promise<void> {
    const item = await this.get(key.activeRebuild(sink));
    if (!item || item.id !== id) return;
    const claim = { ...(JSON.parse(String(item.body)) as ActiveRebuild), state: 'finished' as const, heartbeatAt: at };
    try {
      await this.client.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: toItem(key.activeRebuild(sink)),
          UpdateExpression: 'SET #body = :body, #hb = :hb, #state = :finished',
          ConditionExpression: '#id = :id',
          ExpressionAttributeNames: { '#body': 'body', '#hb': 'heartbeatAt', '#id': 'id', '#state': 'state' },
          ExpressionAttributeValues: toItem({ ':body': JSON.stringify(claim), ':hb': sortableTime(at), ':id': id, ':finished': 'finished' }),
        }),
      );
    } catch (e) {
      if (!(e instanceof ConditionalCheckFailedException)) throw e;
    }
  }

  private async get(k: { pk: string; sk: string }): Promise<Plain | null> {
    const out = await this.client.send(new GetItemCommand({ TableName: this.tableName, Key: toItem(k), ConsistentRead: true }));
    return out.Item ? unmarshall(out.Item) : null;
  }

  private async query(q: {
    pk: string;
    skPrefix?: string;
    skFrom?: string;
    filter?: { expression: string; names: Record<string, string>; values: Plain } | undefined;
  }): Promise<Plain[]> {
    const names: Record<string, string> = { '#pk': 'pk', ...(q.filter?.names ?? {}) };
    const values: Plain = { ':pk': q.pk, ...(q.filter?.values ?? {}) };
    let condition = '#pk = :pk';
    if (q.skPrefix !== undefined && q.skFrom !== undefined)
      throw new CdcError('INVALID_ARGUMENT', 'a query takes a sort-key prefix or a lower bound, not both');
    if (q.skPrefix !== undefined) {
      names['#sk'] = 'sk';
      values[':prefix'] = q.skPrefix;
      condition += ' AND begins_with(#sk, :prefix)';
    }
    if (q.skFrom !== undefined) {
      names['#sk'] = 'sk';
      values[':from'] = q.skFrom;
      condition += ' AND #sk >= :from';
    }
    const input: QueryCommandInput = {
      TableName: this.tableName,
      KeyConditionExpression: condition,
      ExpressionAttributeNames: names,
      ExpressionAttributeValues: toItem(values),
      ConsistentRead: true,
      ...(q.filter ? { FilterExpression: q.filter.expression } : {}),
    };
    const out: Plain[] = [];
    let start: Item | undefined;
    do {
      const page = await this.client.send(new QueryCommand({ ...input, ...(start ? { ExclusiveStartKey: start } : {}) }));
      for (const i of page.Items ?? []) out.push(unmarshall(i));
      start = page.LastEvaluatedKey;
    } while (start);
    return out;
  }

  /** An UpdateItem whose failed condition means "nothing to do" (the stored value already wins). */
  private async conditionalUpdate(
    k: { pk: string; sk: string },
    update: string,
    condition: string,
    names: Record<string, string>,
    values: Plain,
  ): Promise<void> {
    try {
      await this.client.send(
        new UpdateItemCommand({
          TableName: this.tableName,
          Key: toItem(k),
          UpdateExpression: update,
          ConditionExpression: condition,
          ExpressionAttributeNames: { ...SINK_NAMES, ...names },
          ExpressionAttributeValues: toItem(values),
        }),
      );
    } catch (e) {
      if (e instanceof ConditionalCheckFailedException) return;
      throw e;
    }
  }

  /**
   * Runs one transaction. A failed condition comes back as the per-item cancellation reasons;
   * a cancellation caused by a concurrent transaction on the same items is retried.
   */
  private async transact(items: TransactWriteItem[]): Promise<TransactOutcome> {
    for (let attempt = 1; ; attempt++) {
      try {
        await this.client.send(new TransactWriteItemsCommand({ TransactItems: items }));
        return { ok: true };
      } catch (e) {
        if (!(e instanceof TransactionCanceledException)) throw e;
        const reasons = (e.CancellationReasons ?? []).map((r) => r.Code ?? 'None');
        const retryable = reasons.some((r) => r === 'TransactionConflict' || r === 'ThrottlingError' || r === 'ProvisionedThroughputExceeded');
        if (reasons.includes('ConditionalCheckFailed') || !retryable || attempt >= TRANSACTION_ATTEMPTS) return { ok: false, reasons };
        await new Promise((r) => setTimeout(r, 25 * 2 ** attempt * (0.5 + Math.random())));
      }
    }
  }
}

const SINK_NAMES = { '#sink': 'sink', '#source': 'source', '#table': 'table', '#kind': 'kind', '#updated': 'updatedAt' };

function transactionFailed(operation: string, reasons: string[]): CdcError {
  return new CdcError(
    'CONTROL_PLANE_TRANSACTION_FAILED',
    `${operation}: DynamoDB cancelled the transaction (reasons per item: ${reasons.join(', ') || 'none given'})`,
  );
}

function checkState(state: TableState): void {
  if (!TABLE_STATES.includes(state))
    throw new CdcError('INVALID_ARGUMENT', `table state must be one of ${TABLE_STATES.join(', ')}, got ${JSON.stringify(state)}`);
}

function checkSchema(schema: SchemaVersion): void {
  nonEmpty(schema.source, 'schema.source');
  nonEmpty(schema.table, 'schema.table');
  if (!Number.isInteger(schema.version) || schema.version < 1 || schema.version > MAX_VERSION) {
    throw new CdcError('INVALID_ARGUMENT', `schema version must be an integer from 1 to ${MAX_VERSION}, got ${JSON.stringify(schema.version)}`);
  }
  assertPosition(schema.effectivePosition, 'effectivePosition');
}

function tableToItem(t: TableRecord): Item {
  return toItem({
    ...key.table(t.source, t.table),
    kind: 'table',
    source: t.source,
    table: t.table,
    state: t.state,
    currentVersion: t.currentVersion,
    deleteMode: t.deleteMode,
    preImage: t.preImage,
    stateReason: t.stateReason,
    updatedAt: t.updatedAt,
    ...(t.capture ? { capture: t.capture } : {}),
    ...(t.positionSpace ? { positionSpace: t.positionSpace } : {}),
  });
}

function tableFromItem(i: Plain): TableRecord {
  return {
    source: String(i.source),
    table: String(i.table),
    state: i.state as TableState,
    currentVersion: Number(i.currentVersion),
    deleteMode: i.deleteMode as TableRecord['deleteMode'],
    preImage: i.preImage as TableRecord['preImage'],
    stateReason: typeof i.stateReason === 'string' ? i.stateReason : null,
    updatedAt: String(i.updatedAt),
    ...(i.capture === 'poll' || i.capture === 'log' ? { capture: i.capture } : {}),
    ...(isPositionSpace(i.positionSpace) ? { positionSpace: i.positionSpace } : {}),
  };
}

function schemaToItem(s: SchemaVersion): Item {
  return toItem({
    ...key.schema(s.source, s.table, s.version),
    kind: 'schema-version',
    source: s.source,
    table: s.table,
    version: s.version,
    columns: s.columns.map((c) => ({ name: c.name, type: c.type, nullable: c.nullable })),
    key: [...s.key],
    effectivePosition: s.effectivePosition,
    registeredAt: s.registeredAt,
    ...(s.transforms ? { transforms: JSON.stringify(s.transforms) } : {}),
  });
}

function schemaFromItem(i: Plain): SchemaVersion {
  const columns = Array.isArray(i.columns) ? (i.columns as Plain[]) : [];
  return {
    source: String(i.source),
    table: String(i.table),
    version: Number(i.version),
    columns: columns.map((c) => ({ name: String(c.name), type: typeof c.type === 'string' ? c.type : null, nullable: c.nullable !== false })),
    key: Array.isArray(i.key) ? (i.key as unknown[]).map(String) : [],
    effectivePosition: String(i.effectivePosition),
    registeredAt: String(i.registeredAt),
    ...(typeof i.transforms === 'string' ? { transforms: JSON.parse(i.transforms) as SchemaVersion['transforms'] } : {}),
  };
}

function auditFromItem(i: Plain): AuditEntry {
  let detail: Record<string, unknown> = {};
  try {
    detail = JSON.parse(String(i.detail)) as Record<string, unknown>;
  } catch {
    detail = { unreadable: String(i.detail) };
  }
  return {
    at: String(i.at),
    actor: String(i.actor),
    action: String(i.action),
    source: typeof i.source === 'string' ? i.source : null,
    table: typeof i.table === 'string' ? i.table : null,
    outcome: i.outcome === 'refused' ? 'refused' : 'done',
    detail,
  };
}

function heldShardsFromItem(v: unknown): Record<string, string> | null {
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return null;
  const out: Record<string, string> = {};
  for (const [shard, seq] of Object.entries(v as Plain)) if (typeof seq === 'string') out[shard] = seq;
  return out;
}

function sinkProgressFromItem(item: Plain): SinkTableProgress {
  return {
    sink: String(item.sink),
    source: String(item.source),
    table: String(item.table),
    appliedPosition: typeof item.appliedPosition === 'string' ? item.appliedPosition : null,
    heldFrom: typeof item.heldFrom === 'string' ? item.heldFrom : null,
    heldAt: typeof item.heldAt === 'string' ? item.heldAt : null,
    holdCount: typeof item.holdCount === 'number' ? item.holdCount : 0,
    releaseRequested: typeof item.releaseRequested === 'string' ? item.releaseRequested : null,
    releasedAt: typeof item.releasedAt === 'string' ? item.releasedAt : null,
    heldFromShards: heldShardsFromItem(item.heldFromShards),
  };
}
