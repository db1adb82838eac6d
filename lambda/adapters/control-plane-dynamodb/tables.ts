/**
 * Table records and their schema versions in the control plane (docs/architecture.md §5.3): registration and
 * new versions are conditional writes with their audit entry in one transaction, so of two racing
 * writers exactly one wins; a state change (by a workflow or an operator action) likewise.
 */
import type { TransactWriteItem } from '@aws-sdk/client-dynamodb';
import { ControlPartition } from '../../../contracts/control-plane-keys.ts';
import { CdcError } from '../../core/shared/errors.ts';
import { assertPosition } from '../../core/shared/position.ts';
import { isPositionSpace } from '../../core/shared/position-space.ts';
import type { AuditEntry, SchemaVersion, TableAction, TableRecord, TableState } from '../../core/shared/control-plane.ts';
import { auditPut } from './audit.ts';
import { key, nonEmpty, toItem, transactionFailed, type ControlTable, type Item, type Plain } from './control-table.ts';

const TABLE_STATES: readonly TableState[] = ['active', 'paused', 'needs-resnapshot', 'degraded'];
const MAX_VERSION = 999_999_999;

export function notRegistered(sourceId: string, table: string): CdcError {
  return new CdcError('TABLE_NOT_REGISTERED', `table ${table} of source ${sourceId} is not registered in the control plane`);
}

export async function getTable(t: ControlTable, sourceId: string, table: string): Promise<TableRecord | null> {
  const item = await t.get(key.table(sourceId, table));
  return item ? tableFromItem(item) : null;
}

export async function listTables(t: ControlTable, sourceId?: string): Promise<TableRecord[]> {
  if (sourceId !== undefined) {
    const items = await t.query({ pk: ControlPartition.source(sourceId), skPrefix: 'TABLE#' });
    return items.map(tableFromItem).sort((a, b) => (a.table < b.table ? -1 : a.table > b.table ? 1 : 0));
  }
  const sources = (await t.query({ pk: key.sources().pk, skPrefix: 'SOURCE#' })).map((i) => String(i.source)).sort();
  const out: TableRecord[] = [];
  for (const s of sources) out.push(...(await listTables(t, s)));
  return out;
}

export async function getSchemaVersion(t: ControlTable, sourceId: string, table: string, version: number): Promise<SchemaVersion | null> {
  if (!Number.isInteger(version) || version < 1 || version > MAX_VERSION) return null;
  const item = await t.get(key.schema(sourceId, table, version));
  return item ? schemaFromItem(item) : null;
}

export async function listSchemaVersions(t: ControlTable, sourceId: string, table: string): Promise<SchemaVersion[]> {
  const items = await t.query({ pk: ControlPartition.schema(sourceId, table), skPrefix: 'V#' });
  return items.map(schemaFromItem);
}

export async function registerTable(t: ControlTable, table: TableRecord, schema: SchemaVersion, audit: AuditEntry): Promise<boolean> {
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
  const outcome = await t.transact([
    { Put: { TableName: t.tableName, Item: tableToItem(table), ConditionExpression: 'attribute_not_exists(pk)' } },
    { Put: { TableName: t.tableName, Item: schemaToItem(schema), ConditionExpression: 'attribute_not_exists(pk)' } },
    {
      Update: {
        TableName: t.tableName,
        Key: toItem(key.source(table.source)),
        UpdateExpression: 'SET #kind = :kind, #source = :source, #first = if_not_exists(#first, :now)',
        ExpressionAttributeNames: { '#kind': 'kind', '#source': 'source', '#first': 'firstSeenAt' },
        ExpressionAttributeValues: toItem({ ':kind': 'source', ':source': table.source, ':now': new Date().toISOString() }),
      },
    },
    auditPut(t, audit),
  ]);
  if (outcome.ok) return true;
  if (outcome.reasons[0] === 'ConditionalCheckFailed') return false;
  if (outcome.reasons[1] === 'ConditionalCheckFailed') {
    throw new CdcError('CONTROL_PLANE_INCONSISTENT', `schema version ${schema.version} of ${table.source}/${table.table} exists but the table record does not`);
  }
  throw transactionFailed('registerTable', outcome.reasons);
}

export async function addSchemaVersion(t: ControlTable, schema: SchemaVersion, audit: AuditEntry): Promise<boolean> {
  checkSchema(schema);
  if (schema.version < 2)
    throw new CdcError('INVALID_ARGUMENT', `addSchemaVersion adds version 2 or later (version 1 comes with registerTable), got ${schema.version}`);
  const now = new Date().toISOString();
  const outcome = await t.transact([
    {
      Update: {
        TableName: t.tableName,
        Key: toItem(key.table(schema.source, schema.table)),
        UpdateExpression: 'SET #cv = :v, #updated = :now',
        ConditionExpression: '#cv = :previous',
        ExpressionAttributeNames: { '#cv': 'currentVersion', '#updated': 'updatedAt' },
        ExpressionAttributeValues: toItem({ ':v': schema.version, ':previous': schema.version - 1, ':now': now }),
      },
    },
    { Put: { TableName: t.tableName, Item: schemaToItem(schema), ConditionExpression: 'attribute_not_exists(pk)' } },
    auditPut(t, audit),
  ]);
  if (outcome.ok) return true;
  if (outcome.reasons[0] === 'ConditionalCheckFailed') {
    if ((await getTable(t, schema.source, schema.table)) === null) throw notRegistered(schema.source, schema.table);
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

/**
 * The transaction item that sets a table's state, its reason and its update time, if `condition`
 * holds (`values`: the condition's own values, besides `:state`, `:reason` and `:now`).
 */
export function tableStateUpdate(
  t: ControlTable,
  sourceId: string,
  table: string,
  next: { state: TableState; reason: string | null; at: string },
  condition: string,
  values: Plain = {},
): TransactWriteItem {
  return {
    Update: {
      TableName: t.tableName,
      Key: toItem(key.table(sourceId, table)),
      UpdateExpression: 'SET #state = :state, #reason = :reason, #updated = :now',
      ConditionExpression: condition,
      ExpressionAttributeNames: { '#state': 'state', '#reason': 'stateReason', '#updated': 'updatedAt' },
      ExpressionAttributeValues: toItem({ ':state': next.state, ':reason': next.reason, ':now': next.at, ...values }),
    },
  };
}

export async function setTableState(
  t: ControlTable,
  sourceId: string,
  table: string,
  state: TableState,
  reason: string | null,
  audit: AuditEntry,
): Promise<void> {
  checkState(state);
  const outcome = await t.transact([
    tableStateUpdate(t, sourceId, table, { state, reason, at: new Date().toISOString() }, 'attribute_exists(pk)'),
    auditPut(t, audit),
  ]);
  if (outcome.ok) return;
  if (outcome.reasons[0] === 'ConditionalCheckFailed') throw notRegistered(sourceId, table);
  throw transactionFailed('setTableState', outcome.reasons);
}

/** An operator action (docs/operations.md): the table's new state, guarded by the state it was decided on, and the release requests of its sinks. */
export async function commitTableAction(t: ControlTable, action: TableAction): Promise<boolean> {
  checkState(action.next.state);
  const items: TransactWriteItem[] = [
    tableStateUpdate(
      t,
      action.source,
      action.table,
      { state: action.next.state, reason: action.next.stateReason, at: action.next.updatedAt },
      '#state = :expectedState AND #updated = :expectedUpdated',
      { ':expectedState': action.expected.state, ':expectedUpdated': action.expected.updatedAt },
    ),
    ...(action.releaseSinks ?? []).map((r): TransactWriteItem => ({
      Update: {
        TableName: t.tableName,
        Key: toItem(key.sink(r.sink, action.source, action.table)),
        UpdateExpression: 'SET #release = :at',
        ConditionExpression: '#held = :held',
        ExpressionAttributeNames: { '#release': 'releaseRequested', '#held': 'heldFrom' },
        ExpressionAttributeValues: toItem({ ':at': action.audit.at, ':held': r.heldFrom }),
      },
    })),
    auditPut(t, action.audit),
  ];
  const outcome = await t.transact(items);
  if (outcome.ok) return true;
  if (outcome.reasons.includes('ConditionalCheckFailed')) return false;
  throw transactionFailed('commitTableAction', outcome.reasons);
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
