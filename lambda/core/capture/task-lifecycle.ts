/**
 * The task lifecycle workflow (the handler lambda/handlers/task-lifecycle.ts wires it to DMS,
 * PostgreSQL and CloudFormation through lambda/adapters/task-lifecycle-aws.ts).
 *
 * Lifecycle of a `CdcSource`'s DMS replication task, as two CloudFormation custom resources that
 * share this function (invoked directly by CloudFormation; the response goes to the pre-signed
 * `ResponseURL`, whatever happens).
 *
 * `Custom::CdcReplicationSlot` (`Action: prepare-slot`), ordered BEFORE the task:
 * - Create: makes sure the logical replication slot exists in the captured database (creating it
 *   with `test_decoding` when missing) and returns its position as `StartPosition`; the task is
 *   created with that native CDC start point, so DMS starts exactly where the slot is.
 * - Update: a slot that has disappeared fails the deployment (history since then is gone: loud
 *   stop, invariant 3). When the task's table mappings or settings change (`ConfigHash`), the
 *   running task is stopped first: DMS refuses to modify a running task.
 * - Delete: drops the slot only when `RemoveSlotOnDelete` is `true`; otherwise it stays (and keeps
 *   WAL) for a successor to resume from.
 *
 * `Custom::CdcColumnRules` (`Action: check-column-rules`), ordered BEFORE the slot, the task and
 * the functions that read the table configuration:
 * - Update: a mask or exclude added to a table that is already captured (registered in the control
 *   plane) without its acknowledgement fails the deployment, naming table and column and how to
 *   acknowledge (`acknowledgeLateRules`), before anything else changes; the refusal is audited.
 *   An acknowledged one is audited and the table marked `needs-resnapshot` (`LATE_COLUMN_RULES`:
 *   what was left behind). The digest of the rules in force is kept in the control plane, so the
 *   rollback of a refused update (CloudFormation sends it as another update) is not refused again
 *   (docs/masking.md, "Adding a rule to a live table").
 * - Create: the rules become the baseline. Delete: nothing.
 *
 * `Custom::CdcReplicationTaskStarter` (`Action: start-task`), ordered AFTER the task:
 * - Create: waits for the new task to be ready and starts it (`start-replication`, from the
 *   task's start position), then waits until it runs.
 * - Update: a stopped task is resumed (`resume-processing`). When its configuration changed, it is
 *   restarted instead from its recovery checkpoint (`start-replication` + `CdcStartPosition`), or
 *   from the new slot's position when the source moved to another slot:
 *   DMS applies changed transformation rules (masking) only on a restart, and restarting from the
 *   checkpoint loses nothing; events between the checkpoint and the stop come again and sinks
 *   ignore them (positions). A failed task is left for an operator; a running one is left alone.
 *   Then the tables a late rule marked get their re-snapshot requested: the functions and the task
 *   run with the new rules by now (the starter is ordered after them).
 * - Delete: stops the task and waits, because CloudFormation cannot delete a running task.
 */
import { createHash } from 'node:crypto';
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';
import { columnRulesConsumerId } from '../../../contracts/control-plane-keys.ts';
import { EnvName } from '../../../contracts/env.ts';
import type { ColumnRulesDocument } from '../../../contracts/table-config.ts';
import type { ControlPlane } from '../shared/control-plane.ts';
import { CdcError } from '../shared/errors.ts';
import { assertPlainIdentifier } from '../shared/identifiers.ts';
import { markSourceForResnapshot } from './continuity.ts';
import { applyLateRuleChanges, LateRulesRefusedError, lateRuleChangesBetween, requestLateRuleResnapshots, resolveColumnRules } from '../tables/late-rules.ts';

/** The replication task as the lifecycle needs it. */
export interface TaskState {
  arn: string;
  identifier: string;
  status: string;
  recoveryCheckpoint?: string;
  lastFailureMessage?: string;
  stopReason?: string;
}

/** The DMS calls this handler makes. */
export interface DmsPort {
  findTask(by: { arn?: string; identifier?: string }): Promise<TaskState | undefined>;
  startTask(arn: string, type: 'start-replication' | 'resume-processing', cdcStartPosition?: string): Promise<void>;
  stopTask(arn: string): Promise<void>;
}

/** Slot operations on the captured database. */
export interface SlotPort {
  /** The slot's `confirmed_flush_lsn` (or creation LSN), creating it with `test_decoding` when missing. */
  ensureSlot(slotName: string): Promise<{ position: string; created: boolean }>;
  /** Whether the slot exists, and its plugin. */
  describeSlot(slotName: string): Promise<{ plugin: string; active: boolean } | undefined>;
  /** Drops the slot; false when it did not exist. */
  dropSlot(slotName: string): Promise<boolean>;
  close(): Promise<void>;
}

export interface LifecycleDeps {
  dms: DmsPort;
  /** Opens the slot port for a database, with the credentials in the secret (and the TLS of the function's environment). */
  openSlots(secretArn: string, databaseName: string): Promise<SlotPort>;
  sleep(ms: number): Promise<void>;
  /** Milliseconds left before the function must respond. */
  remainingMs(): number;
  /** Between two polls of the task status. @default 15000 */
  pollMs?: number;
  log?(message: string, fields?: Record<string, unknown>): void;
  /** The control plane: a slot that replaces another marks the source's tables needs-resnapshot there. */
  controlPlane?: ControlPlane;
}

export interface LifecycleResult {
  physicalResourceId: string;
  data?: Record<string, string>;
}

/** A lifecycle step that cannot complete; the message goes to CloudFormation as the reason. */
export class TaskLifecycleError extends CdcError {
  constructor(message: string) {
    super('DMS_TASK_LIFECYCLE', message);
  }
}

/** Task states that change only by an action (everything else is on its way somewhere). */
const SETTLED = new Set(['ready', 'running', 'stopped', 'failed', 'failed-move']);
/** Physical id of a slot resource whose creation failed before the slot was touched. */
const NOTHING_CREATED = 'cdc-slot-not-created';
/** Time kept back to send the response after the last poll. */
const RESPONSE_MARGIN_MS = 30_000;
/** `<database>/<slot>@<position>` */
const SLOT_ID = /^([^/@]+)\/([^/@]+)@(.+)$/;

type Props = Record<string, string | undefined>;

function prop(props: Props, name: string): string {
  const v = props[name];
  if (v === undefined || v === '') throw new TaskLifecycleError(`resource property ${name} is missing`);
  return v;
}

function describeTask(t: TaskState): string {
  const why = [t.lastFailureMessage, t.stopReason].filter(Boolean).join('; ');
  return `task ${t.identifier} is ${t.status}${why ? ` (${why})` : ''}`;
}

/** Polls until `done(task)` holds, failing with the task's own reason when `failed(task)` does or time runs out. */
async function waitFor(
  deps: LifecycleDeps,
  by: { arn?: string; identifier?: string },
  what: string,
  done: (t: TaskState) => boolean,
  failed: (t: TaskState) => boolean = () => false,
): Promise<TaskState> {
  const pollMs = deps.pollMs ?? 15_000;
  for (;;) {
    const task = await deps.dms.findTask(by);
    if (!task) throw new TaskLifecycleError(`replication task ${by.identifier ?? by.arn} not found while waiting until it is ${what}`);
    if (done(task)) return task;
    if (failed(task)) {
      throw new TaskLifecycleError(
        `${describeTask(task)} instead of ${what}; see the task's CloudWatch logs, fix the cause, then resume it with: aws dms start-replication-task --start-replication-task-type resume-processing --replication-task-arn ${task.arn}`,
      );
    }
    if (deps.remainingMs() - pollMs < RESPONSE_MARGIN_MS) throw new TaskLifecycleError(`timed out waiting until the task is ${what}: ${describeTask(task)}`);
    await deps.sleep(pollMs);
  }
}

/**
 * The start action for a settled task on update (pure: decides, does not call). `newSlotPosition`
 * is set when the source moved to another slot: its checkpoints mean nothing there, so the task
 * restarts at the new slot's position.
 */
export function planStart(
  task: TaskState,
  configChanged: boolean,
  newSlotPosition?: string,
): { action: 'none' } | { action: 'start'; type: 'start-replication' | 'resume-processing'; cdcStartPosition?: string } {
  switch (task.status) {
    case 'ready':
      return { action: 'start', type: 'start-replication', ...(newSlotPosition ? { cdcStartPosition: newSlotPosition } : {}) };
    case 'stopped':
      if (newSlotPosition) return { action: 'start', type: 'start-replication', cdcStartPosition: newSlotPosition };
      if (configChanged && task.recoveryCheckpoint) return { action: 'start', type: 'start-replication', cdcStartPosition: task.recoveryCheckpoint };
      return { action: 'start', type: 'resume-processing' };
    default:
      // running: nothing to do; failed: left for an operator (the alarms are firing).
      return { action: 'none' };
  }
}

async function startAndWait(deps: LifecycleDeps, task: TaskState, plan: ReturnType<typeof planStart>): Promise<void> {
  if (plan.action === 'none') {
    deps.log?.('task left as it is', { task: task.identifier, status: task.status });
    return;
  }
  deps.log?.('starting task', { task: task.identifier, type: plan.type, from: plan.cdcStartPosition ?? 'task start position or last stop' });
  await deps.dms.startTask(task.arn, plan.type, plan.cdcStartPosition);
  await waitFor(
    deps,
    { arn: task.arn },
    'running',
    (t) => t.status === 'running',
    (t) => t.status === 'failed' || t.status === 'stopped',
  );
}

/** Stops the task if it runs (or is about to) and waits until it has stopped; no task, nothing to do. */
async function stopAndWait(deps: LifecycleDeps, by: { arn?: string; identifier?: string }): Promise<void> {
  const found = await deps.dms.findTask(by);
  if (!found) return;
  const task = await waitFor(deps, { arn: found.arn }, 'settled', (t) => SETTLED.has(t.status) || t.status === 'stopping');
  if (task.status === 'running') {
    deps.log?.('stopping task', { task: task.identifier });
    await deps.dms.stopTask(task.arn);
  }
  if (task.status === 'running' || task.status === 'stopping') {
    await waitFor(deps, { arn: task.arn }, 'stopped', (t) => t.status !== 'running' && t.status !== 'stopping');
  }
}

async function prepareSlot(event: CloudFormationCustomResourceEvent, deps: LifecycleDeps): Promise<LifecycleResult> {
  const props = event.ResourceProperties as unknown as Props;
  if (event.RequestType === 'Delete') {
    const m = SLOT_ID.exec(event.PhysicalResourceId);
    if (!m || props.RemoveSlotOnDelete !== 'true') return { physicalResourceId: event.PhysicalResourceId };
    const [, database, slotName] = m as unknown as [string, string, string];
    const slots = await deps.openSlots(prop(props, 'SecretArn'), database);
    try {
      for (;;) {
        const slot = await slots.describeSlot(slotName);
        if (!slot) break;
        if (!slot.active) {
          await slots.dropSlot(slotName);
          deps.log?.('replication slot dropped', { database, slot: slotName });
          break;
        }
        if (deps.remainingMs() - (deps.pollMs ?? 15_000) < RESPONSE_MARGIN_MS)
          throw new TaskLifecycleError(
            `replication slot ${slotName} in ${database} is still in use; stop its consumer and drop it with: SELECT pg_drop_replication_slot('${slotName}')`,
          );
        await deps.sleep(deps.pollMs ?? 15_000);
      }
    } finally {
      await slots.close();
    }
    return { physicalResourceId: event.PhysicalResourceId };
  }

  const database = prop(props, 'DatabaseName');
  const slotName = assertPlainIdentifier(prop(props, 'SlotName'), 'slot name');
  const slots = await deps.openSlots(prop(props, 'SecretArn'), database);
  try {
    if (event.RequestType === 'Update') {
      const m = SLOT_ID.exec(event.PhysicalResourceId);
      const sameSlot = m !== null && m[1] === database && m[2] === slotName;
      const old = event.OldResourceProperties as unknown as Props;
      if (old.ConfigHash !== props.ConfigHash || !sameSlot) {
        // DMS refuses to modify a running task: stop it before CloudFormation updates it.
        await stopAndWait(deps, { identifier: prop(props, 'TaskIdentifier') });
      }
      if (sameSlot) {
        const slot = await slots.describeSlot(slotName);
        if (!slot) {
          throw new TaskLifecycleError(
            `replication slot ${slotName} in ${database} no longer exists: changes since it was dropped are not in the change log. Re-snapshot the source's tables, or give the source a new slotName to start a new capture`,
          );
        }
        return { physicalResourceId: event.PhysicalResourceId, data: { StartPosition: m[3]! } };
      }
    }
    const existing = await slots.describeSlot(slotName);
    if (existing && existing.plugin !== 'test_decoding') {
      throw new TaskLifecycleError(
        `replication slot ${slotName} in ${database} uses the plugin ${existing.plugin}; DMS here needs test_decoding. Drop it or choose another slotName`,
      );
    }
    const { position, created } = await slots.ensureSlot(slotName);
    deps.log?.(created ? 'replication slot created' : 'replication slot found', { database, slot: slotName, position });
    // Another slot under a capture that had one: history between the two is not in the change log (docs/failures.md).
    const previous = event.RequestType === 'Update' ? SLOT_ID.exec(event.PhysicalResourceId) : null;
    if (previous) await slotReplaced(deps, props, { from: `${previous[1]}/${previous[2]}@${previous[3]}`, to: `${database}/${slotName}@${position}` });
    return { physicalResourceId: `${database}/${slotName}@${position}`, data: { StartPosition: position } };
  } finally {
    await slots.close();
  }
}

/** Marks the source's tables needs-resnapshot when its capture moves to another slot; refuses when it cannot record that. */
async function slotReplaced(deps: LifecycleDeps, props: Props, o: { from: string; to: string }): Promise<void> {
  const sourceId = props.SourceId;
  if (!deps.controlPlane || !sourceId) {
    throw new TaskLifecycleError(
      `the capture moves from slot ${o.from} to ${o.to}, which skips the changes in between, and there is no control plane to mark its tables for re-snapshot`,
    );
  }
  const at = new Date().toISOString();
  const message = `the capture moved from replication slot ${o.from} to ${o.to}: changes between the two are not in the change log`;
  const marked = await markSourceForResnapshot(deps.controlPlane, {
    source: sourceId,
    actor: LIFECYCLE_ACTOR,
    at,
    code: 'HISTORY_GAP',
    problem: 'slot-replaced',
    message,
    detail: o,
  });
  await deps.controlPlane.appendAudit({
    at,
    actor: LIFECYCLE_ACTOR,
    action: 'capture-slot-replaced',
    source: sourceId,
    table: null,
    outcome: 'done',
    detail: { ...o, tablesMarked: marked },
  });
  deps.log?.('capture moved to another slot: tables marked needs-resnapshot', { source: sourceId, ...o, tablesMarked: marked });
}

async function startTask(event: CloudFormationCustomResourceEvent, deps: LifecycleDeps): Promise<LifecycleResult> {
  const props = event.ResourceProperties as unknown as Props;
  const arn = prop(props, 'TaskArn');
  if (event.RequestType === 'Delete') {
    await stopAndWait(deps, { arn });
    return { physicalResourceId: event.PhysicalResourceId };
  }
  const task = await waitFor(deps, { arn }, 'ready to start', (t) => SETTLED.has(t.status));
  if (event.RequestType === 'Create') {
    if (task.status === 'failed') throw new TaskLifecycleError(`${describeTask(task)}; it cannot be started`);
    await startAndWait(
      deps,
      task,
      task.status === 'running' ? { action: 'none' } : { action: 'start', type: task.status === 'ready' ? 'start-replication' : 'resume-processing' },
    );
    return { physicalResourceId: arn };
  }
  const old = event.OldResourceProperties as unknown as Props;
  const slotMoved = props.StartPosition !== undefined && old.StartPosition !== props.StartPosition;
  await startAndWait(deps, task, planStart(task, old.ConfigHash !== props.ConfigHash, slotMoved ? props.StartPosition : undefined));
  // Tables an acknowledged late rule marked (the column-rules step): their re-snapshot now reads with the new rules.
  if (deps.controlPlane && props.SourceId) {
    const requested = await requestLateRuleResnapshots(deps.controlPlane, { source: props.SourceId, actor: LIFECYCLE_ACTOR });
    if (requested.length > 0) deps.log?.('re-snapshot requested for tables with late column rules', { source: props.SourceId, tables: requested });
  }
  return { physicalResourceId: arn };
}

const LIFECYCLE_ACTOR = 'dms-task-lifecycle';
/** The acknowledgement recorded when a deployment returns to the rules in force before the current ones (a rollback, or the previous template again). */
export const REVERT_ACKNOWLEDGEMENT =
  'return to the column rules in force before the last deployment (a CloudFormation rollback, or the previous template deployed again)';
/** Shard id of the checkpoint that holds the digests of the column rules (`columnRulesConsumerId`). */
const IN_FORCE = 'in-force';

/** The `ColumnRules` property, checked: a clear error names what is wrong. */
export function parseColumnRules(text: string, what: string): ColumnRulesDocument {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new TaskLifecycleError(`${what}: not valid JSON: ${(e as Error).message}`);
  }
  const strings = (x: unknown, at: string): string[] => {
    if (!Array.isArray(x) || !x.every((c) => typeof c === 'string')) throw new TaskLifecycleError(`${what}: ${at}: expected an array of strings`);
    return x as string[];
  };
  const ack = (x: unknown, at: string): { acknowledgeLateRules?: string } => {
    if (x === undefined) return {};
    if (typeof x !== 'string' || x.trim() === '') throw new TaskLifecycleError(`${what}: ${at}.acknowledgeLateRules: expected a non-empty text`);
    return { acknowledgeLateRules: x };
  };
  const o = v as Record<string, unknown>;
  if (typeof v !== 'object' || v === null || !Array.isArray(o.tables) || !Array.isArray(o.rules))
    throw new TaskLifecycleError(`${what}: expected {"tables": [...], "rules": [...]}`);
  const obj = (e: unknown, at: string): Record<string, unknown> => {
    if (typeof e !== 'object' || e === null) throw new TaskLifecycleError(`${what}: ${at}: expected an object`);
    return e as Record<string, unknown>;
  };
  return {
    tables: o.tables.map((e, i) => {
      const t = obj(e, `tables[${i}]`);
      if (typeof t.table !== 'string') throw new TaskLifecycleError(`${what}: tables[${i}].table: expected 'schema.table'`);
      return {
        table: t.table,
        mask: strings(t.mask, `tables[${i}].mask`),
        exclude: strings(t.exclude, `tables[${i}].exclude`),
        ...ack(t.acknowledgeLateRules, `tables[${i}]`),
      };
    }),
    rules: o.rules.map((e, i) => {
      const r = obj(e, `rules[${i}]`);
      if (typeof r.match !== 'string') throw new TaskLifecycleError(`${what}: rules[${i}].match: expected a 'schema.table' pattern`);
      return {
        match: r.match,
        excludeTables: strings(r.excludeTables, `rules[${i}].excludeTables`),
        mask: strings(r.mask, `rules[${i}].mask`),
        exclude: strings(r.exclude, `rules[${i}].exclude`),
        ...ack(r.acknowledgeLateRules, `rules[${i}]`),
      };
    }),
  };
}

/** CloudFormation shows at most 3,500 characters of a reason (`responseBody`). */
const REASON_BUDGET = 3000;

/**
 * The reason CloudFormation shows for a refused late rule: the full statement per table while it
 * fits, else one line naming every table and column it can (a rule may match hundreds of tables;
 * each has its refused audit entry).
 */
export function refusalReason(sourceId: string, e: LateRulesRefusedError): string {
  if (e.message.length <= REASON_BUDGET) return e.message;
  const head =
    `source ${sourceId}: ${e.changes.length} captured tables got a mask or exclude without acknowledgement; their change-log records, archive files and sink rows still hold the clear values. ` +
    'To go on, acknowledge it with acknowledgeLateRules on each CapturedTable (or its CapturedTable.matching rule); see docs/masking.md, "Adding a rule to a live table". Tables: ';
  const parts = e.changes.map((c) => `${c.table} (${[...c.addedMask.map((m) => `mask ${m}`), ...c.addedExclude.map((x) => `exclude ${x}`)].join(', ')})`);
  let out = head;
  for (let i = 0; i < parts.length; i++) {
    const more = `; and ${parts.length - i} more (each in the audit log: cdc audit)`;
    if (out.length + parts[i]!.length + 2 + more.length > REASON_BUDGET) return out + more;
    out += (i === 0 ? '' : '; ') + parts[i];
  }
  return out;
}

const digestOf = (text: string): string => createHash('sha256').update(text).digest('hex');

function parseInForce(text: string | null): { current: string; previous: string | null } | null {
  if (text === null) return null;
  try {
    const v = JSON.parse(text) as { current?: unknown; previous?: unknown };
    return typeof v.current === 'string' ? { current: v.current, previous: typeof v.previous === 'string' ? v.previous : null } : null;
  } catch {
    return null;
  }
}

/**
 * `Custom::CdcColumnRules`: refuses a late mask or exclude without acknowledgement (see the file
 * comment). Which rules were in force before is the update's `OldResourceProperties`, unless the
 * stored digests say the update returns to them (then nothing changes in force).
 */
async function checkColumnRules(event: CloudFormationCustomResourceEvent, deps: LifecycleDeps): Promise<LifecycleResult> {
  const props = event.ResourceProperties as unknown as Props;
  const sourceId = prop(props, 'SourceId');
  if (event.RequestType === 'Delete') return { physicalResourceId: event.PhysicalResourceId };
  const controlPlane = deps.controlPlane;
  if (!controlPlane) throw new TaskLifecycleError(`no control plane (${EnvName.CONTROL_TABLE}) to read the captured tables of source ${sourceId} from`);
  const text = prop(props, 'ColumnRules');
  const next = parseColumnRules(text, 'ColumnRules');
  const consumer = columnRulesConsumerId(sourceId);
  const stored = parseInForce(await controlPlane.getCheckpoint(consumer, IN_FORCE));
  const nextDigest = digestOf(text);
  const oldText = event.RequestType === 'Update' ? (event.OldResourceProperties as unknown as Props).ColumnRules : undefined;
  const oldDigest = oldText === undefined ? null : digestOf(oldText);
  if (stored?.current === nextDigest) {
    // These rules are in force already: the rollback of a refused update, which changed nothing.
    deps.log?.('column rules unchanged in force', { source: sourceId });
    return { physicalResourceId: event.RequestType === 'Create' ? `${sourceId}/column-rules` : event.PhysicalResourceId };
  }
  if (oldText !== undefined) {
    const before = parseColumnRules(oldText, 'previous ColumnRules');
    const registered = (await controlPlane.listTables(sourceId)).filter(
      (t) => resolveColumnRules(before, t.table) !== null && resolveColumnRules(next, t.table) !== null,
    );
    let changes = lateRuleChangesBetween(
      before,
      next,
      registered.map((t) => t.table),
    );
    // A rule's columns count only in the tables that have them: narrow with each table's current schema.
    const byRule = changes.filter((c) => resolveColumnRules(next, c.table)?.byRule);
    if (byRule.length > 0) {
      const columns = new Map<string, string[]>();
      for (const c of byRule) {
        const t = registered.find((r) => r.table === c.table)!;
        const schema = await controlPlane.getSchemaVersion(sourceId, t.table, t.currentVersion);
        if (schema)
          columns.set(
            t.table,
            schema.columns.map((col) => col.name),
          );
      }
      changes = lateRuleChangesBetween(
        before,
        next,
        registered.map((t) => t.table),
        (table) => columns.get(table),
      );
    }
    const revert = stored !== null && stored.current === oldDigest && stored.previous === nextDigest;
    if (revert) changes = changes.map((c) => (c.acknowledgement === null ? { ...c, acknowledgement: REVERT_ACKNOWLEDGEMENT } : c));
    // Refused (audited, LateRulesRefusedError) before anything is stored; acknowledged ones are marked, their re-snapshot requested by the starter.
    try {
      await applyLateRuleChanges({ controlPlane, source: sourceId, actor: LIFECYCLE_ACTOR, requestSnapshots: false }, changes);
    } catch (e) {
      throw e instanceof LateRulesRefusedError ? new TaskLifecycleError(refusalReason(sourceId, e)) : e;
    }
    for (const c of changes)
      deps.log?.('late column rules acknowledged: table marked needs-resnapshot', {
        source: sourceId,
        table: c.table,
        addedMask: c.addedMask,
        addedExclude: c.addedExclude,
        acknowledgement: c.acknowledgement,
      });
  }
  await controlPlane.putCheckpoint(consumer, IN_FORCE, JSON.stringify({ current: nextDigest, previous: stored?.current ?? oldDigest }));
  return { physicalResourceId: event.RequestType === 'Create' ? `${sourceId}/column-rules` : event.PhysicalResourceId };
}

/** Runs one custom-resource request (no response sending). */
export async function runLifecycle(event: CloudFormationCustomResourceEvent, deps: LifecycleDeps): Promise<LifecycleResult> {
  const action = (event.ResourceProperties as unknown as Props).Action;
  if (action === 'prepare-slot') return prepareSlot(event, deps);
  if (action === 'start-task') return startTask(event, deps);
  if (action === 'check-column-rules') return checkColumnRules(event, deps);
  throw new TaskLifecycleError(`unknown Action ${JSON.stringify(action)} (expected prepare-slot, start-task or check-column-rules)`);
}

/** The CloudFormation response document. */
export function responseBody(event: CloudFormationCustomResourceEvent, outcome: { ok: true; result: LifecycleResult } | { ok: false; reason: string }): string {
  const fallbackId = event.RequestType === 'Create' ? NOTHING_CREATED : event.PhysicalResourceId;
  return JSON.stringify({
    Status: outcome.ok ? 'SUCCESS' : 'FAILED',
    Reason: outcome.ok ? 'done' : outcome.reason.slice(0, 3500),
    PhysicalResourceId: outcome.ok ? outcome.result.physicalResourceId : fallbackId,
    StackId: event.StackId,
    RequestId: event.RequestId,
    LogicalResourceId: event.LogicalResourceId,
    NoEcho: false,
    Data: outcome.ok ? (outcome.result.data ?? {}) : {},
  });
}
