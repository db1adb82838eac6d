/**
 * The DMS task lifecycle handler behind `CdcSource`'s custom resources.
 *
 * The slot step runs against embedded PostgreSQL (real logical replication slots). The DMS API
 * has no local stand-in: `FakeDms` below stands in for it, an in-memory task that moves through
 * DMS's statuses (creating → ready → starting → running → stopping → stopped) one poll at a time.
 * The CloudFormation response goes to a real local HTTP server standing in for the pre-signed
 * S3 URL.
 */
import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { CloudFormationCustomResourceEvent } from 'aws-lambda';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { createTaskLifecycleHandler } from '../../lambda/handlers/task-lifecycle.ts';
import { PgSlots } from '../../lambda/adapters/task-lifecycle-aws.ts';
import { planStart, runLifecycle, type DmsPort, type LifecycleDeps, type TaskState } from '../../lambda/core/capture/task-lifecycle.ts';
import { startPostgres, type PostgresCluster } from '../../local/postgres.ts';
import { POSITION_ZERO } from '../../lambda/core/shared/position.ts';
import { MemoryControlPlane } from '../helpers/memory-control-plane.ts';

/** Stands in for the DMS API (no local stand-in exists): statuses advance one step per poll. */
class FakeDms implements DmsPort {
  readonly calls: string[] = [];
  failStartWith?: string;
  private next: string[] = [];

  constructor(public task: TaskState | undefined) {}

  async findTask(by: { arn?: string; identifier?: string }): Promise<TaskState | undefined> {
    if (!this.task || (by.arn && by.arn !== this.task.arn) || (by.identifier && by.identifier !== this.task.identifier)) return undefined;
    const current = { ...this.task };
    const step = this.next.shift();
    if (step) this.task = { ...this.task, ...(step === 'failed' ? { status: 'failed', lastFailureMessage: this.failStartWith } : { status: step }) };
    return current;
  }

  async startTask(arn: string, type: string, cdcStartPosition?: string): Promise<void> {
    this.calls.push(`start ${type}${cdcStartPosition ? ` from ${cdcStartPosition}` : ''}`);
    this.task = { ...this.task!, arn, status: 'starting' };
    this.next = this.failStartWith ? ['failed'] : ['running'];
  }

  async stopTask(): Promise<void> {
    this.calls.push('stop');
    this.task = { ...this.task!, status: 'stopping', recoveryCheckpoint: 'checkpoint:V1#1#00000000/0ABC0000#0#0#*#0#0' };
    this.next = ['stopping', 'stopped'];
  }

  /** The task becomes `status` after `polls` further polls. */
  settleAfter(polls: number, status: string): void {
    this.next = [...Array.from({ length: polls - 1 }, () => this.task!.status), status];
  }
}

const TASK_ARN = 'arn:aws:dms:eu-west-1:111111111111:task:ABCDEFGHIJKLMNOP';
const TASK_ID = 'test-orders-cdc-12345678';

let cluster: PostgresCluster;
let dbCounter = 0;

beforeAll(async () => {
  cluster = await startPostgres({ fast: true });
});
afterAll(async () => {
  await cluster?.stop();
});

async function newDatabase(): Promise<string> {
  const name = `slots${++dbCounter}`;
  await cluster.createDatabase(name);
  return name;
}

async function query<T extends pg.QueryResultRow>(db: string, sql: string, params: unknown[] = []): Promise<T[]> {
  const c = new pg.Client({ connectionString: cluster.url(db) });
  await c.connect();
  try {
    return (await c.query<T>(sql, params)).rows;
  } finally {
    await c.end();
  }
}

function deps(dms: DmsPort, log: string[] = []): LifecycleDeps {
  return {
    dms,
    openSlots: async (_secretArn, databaseName) => PgSlots.connect({ connectionString: cluster.url(databaseName), ssl: false }),
    sleep: async () => undefined,
    remainingMs: () => 600_000,
    pollMs: 1,
    log: (m) => log.push(m),
  };
}

function event(
  requestType: 'Create' | 'Update' | 'Delete',
  props: Record<string, string>,
  extra: { physicalResourceId?: string; oldProps?: Record<string, string>; responseUrl?: string } = {},
): CloudFormationCustomResourceEvent {
  const base = {
    ServiceToken: 'arn:aws:lambda:eu-west-1:111111111111:function:lifecycle',
    ResponseURL: extra.responseUrl ?? 'http://127.0.0.1:1/unused',
    StackId: 'arn:aws:cloudformation:eu-west-1:111111111111:stack/Test/1',
    RequestId: 'req-1',
    LogicalResourceId: 'OrdersReplicationSlot',
    ResourceType: 'Custom::CdcReplicationSlot',
    ResourceProperties: { ServiceToken: 'x', ...props },
  };
  if (requestType === 'Create') return { ...base, RequestType: 'Create' };
  if (requestType === 'Update')
    return {
      ...base,
      RequestType: 'Update',
      PhysicalResourceId: extra.physicalResourceId ?? 'none',
      OldResourceProperties: { ServiceToken: 'x', ...(extra.oldProps ?? props) },
    };
  return { ...base, RequestType: 'Delete', PhysicalResourceId: extra.physicalResourceId ?? 'none' };
}

const slotProps = (database: string, over: Record<string, string> = {}): Record<string, string> => ({
  Action: 'prepare-slot',
  SecretArn: 'arn:aws:secretsmanager:eu-west-1:111111111111:secret:source',
  DatabaseName: database,
  // Slot names are cluster-wide: one per test database.
  SlotName: `cdc_${database}`,
  Ssl: 'disable',
  TaskIdentifier: TASK_ID,
  ConfigHash: 'aaaa',
  RemoveSlotOnDelete: 'false',
  ...over,
});

const taskProps = (over: Record<string, string> = {}): Record<string, string> => ({
  Action: 'start-task',
  TaskArn: TASK_ARN,
  TaskIdentifier: TASK_ID,
  ConfigHash: 'aaaa',
  ...over,
});

const task = (status: string, over: Partial<TaskState> = {}): TaskState => ({ arn: TASK_ARN, identifier: TASK_ID, status, ...over });

describe('prepare-slot', () => {
  test('creates a test_decoding slot in the captured database and returns its position', async () => {
    const db = await newDatabase();
    const result = await runLifecycle(event('Create', slotProps(db)), deps(new FakeDms(undefined)));
    const [slot] = await query<{ plugin: string; lsn: string }>(
      db,
      'SELECT plugin, confirmed_flush_lsn::text AS lsn FROM pg_replication_slots WHERE slot_name = $1',
      [`cdc_${db}`],
    );
    expect(slot!.plugin).toBe('test_decoding');
    expect(result.data).toEqual({ StartPosition: slot!.lsn });
    expect(result.physicalResourceId).toBe(`${db}/cdc_${db}@${slot!.lsn}`);
    expect(result.data!.StartPosition).toMatch(/^[0-9A-F]+\/[0-9A-F]+$/);

    // Found again (a stack re-created around an existing slot): same slot, its position.
    const again = await runLifecycle(event('Create', slotProps(db)), deps(new FakeDms(undefined)));
    expect(again.data).toEqual(result.data);
    expect(await query(db, 'SELECT 1 FROM pg_replication_slots WHERE slot_name = $1', [`cdc_${db}`])).toHaveLength(1);
  });

  test('refuses a slot name taken by another database (slot names are cluster-wide)', async () => {
    const other = await newDatabase();
    await runLifecycle(event('Create', slotProps(other)), deps(new FakeDms(undefined)));
    const db = await newDatabase();
    await expect(runLifecycle(event('Create', slotProps(db, { SlotName: `cdc_${other}` })), deps(new FakeDms(undefined)))).rejects.toThrow(
      new RegExp(`replication slot cdc_${other} exists for database ${other}, not for the captured database; choose another slotName`),
    );
  });

  test('refuses an existing slot with another plugin', async () => {
    const db = await newDatabase();
    await query(db, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", [`cdc_${db}`]);
    await expect(runLifecycle(event('Create', slotProps(db)), deps(new FakeDms(undefined)))).rejects.toThrow(
      /replication slot cdc_slots\d+ in slots\d+ uses the plugin pgoutput; DMS here needs test_decoding/,
    );
  });

  test('on a configuration change, stops the running task before CloudFormation modifies it, and keeps the start position', async () => {
    const db = await newDatabase();
    const created = await runLifecycle(event('Create', slotProps(db)), deps(new FakeDms(undefined)));
    const dms = new FakeDms(task('running'));
    const updated = await runLifecycle(
      event('Update', slotProps(db, { ConfigHash: 'bbbb' }), { physicalResourceId: created.physicalResourceId, oldProps: slotProps(db) }),
      deps(dms),
    );
    expect(dms.calls).toEqual(['stop']);
    expect(dms.task!.status).toBe('stopped');
    expect(updated).toEqual(created);

    // Unchanged configuration: the task is not touched.
    const quiet = new FakeDms(task('running'));
    await runLifecycle(event('Update', slotProps(db), { physicalResourceId: created.physicalResourceId }), deps(quiet));
    expect(quiet.calls).toEqual([]);
  });

  test('fails loudly when the slot has disappeared', async () => {
    const db = await newDatabase();
    const created = await runLifecycle(event('Create', slotProps(db)), deps(new FakeDms(undefined)));
    await query(db, 'SELECT pg_drop_replication_slot($1)', [`cdc_${db}`]);
    await expect(
      runLifecycle(event('Update', slotProps(db), { physicalResourceId: created.physicalResourceId }), deps(new FakeDms(task('running')))),
    ).rejects.toThrow(/replication slot cdc_slots\d+ in slots\d+ no longer exists: changes since it was dropped are not in the change log/);
  });

  test('a new slot under a capture that had one marks its tables needs-resnapshot (never a silent re-anchor); without a control plane it refuses', async () => {
    const db = await newDatabase();
    const created = await runLifecycle(event('Create', slotProps(db, { SourceId: 'shop' })), deps(new FakeDms(undefined)));
    const controlPlane = new MemoryControlPlane();
    const at = new Date().toISOString();
    await controlPlane.registerTable(
      { source: 'shop', table: 'public.orders', state: 'active', currentVersion: 1, deleteMode: 'soft', preImage: 'key', stateReason: null, updatedAt: at },
      { source: 'shop', table: 'public.orders', version: 1, columns: [], key: ['id'], effectivePosition: POSITION_ZERO, registeredAt: at },
      { at, actor: 'test', action: 'register', source: 'shop', table: 'public.orders', outcome: 'done', detail: {} },
    );
    const moved = slotProps(db, { SourceId: 'shop', SlotName: `cdc_${db}_b` });
    await expect(
      runLifecycle(
        event('Update', moved, { physicalResourceId: created.physicalResourceId, oldProps: slotProps(db, { SourceId: 'shop' }) }),
        deps(new FakeDms(task('stopped'))),
      ),
    ).rejects.toThrow(/skips the changes in between, and there is no control plane to mark its tables for re-snapshot/);
    const updated = await runLifecycle(
      event('Update', moved, { physicalResourceId: created.physicalResourceId, oldProps: slotProps(db, { SourceId: 'shop' }) }),
      { ...deps(new FakeDms(task('stopped'))), controlPlane },
    );
    expect(updated.physicalResourceId).toMatch(new RegExp(`^${db}/cdc_${db}_b@`));
    const t = (await controlPlane.getTable('shop', 'public.orders'))!;
    expect(t.state).toBe('needs-resnapshot');
    expect(t.stateReason).toMatch(/^HISTORY_GAP: slot-replaced: the capture moved from replication slot/);
    expect((await controlPlane.listAudit('shop')).map((a) => a.action)).toEqual(['register', 'needs-resnapshot', 'capture-slot-replaced']);
    await query(db, 'SELECT pg_drop_replication_slot($1)', [`cdc_${db}_b`]);
  });

  test('keeps the slot on delete unless told to remove it', async () => {
    const db = await newDatabase();
    const created = await runLifecycle(event('Create', slotProps(db)), deps(new FakeDms(undefined)));
    await runLifecycle(event('Delete', slotProps(db), { physicalResourceId: created.physicalResourceId }), deps(new FakeDms(undefined)));
    const slotsOf = (): Promise<unknown[]> => query(db, 'SELECT 1 FROM pg_replication_slots WHERE slot_name = $1', [`cdc_${db}`]);
    expect(await slotsOf()).toHaveLength(1);
    await runLifecycle(
      event('Delete', slotProps(db, { RemoveSlotOnDelete: 'true' }), { physicalResourceId: created.physicalResourceId }),
      deps(new FakeDms(undefined)),
    );
    expect(await slotsOf()).toHaveLength(0);
    // A create that failed before touching anything deletes nothing.
    await runLifecycle(
      event('Delete', slotProps(db, { RemoveSlotOnDelete: 'true' }), { physicalResourceId: 'cdc-slot-not-created' }),
      deps(new FakeDms(undefined)),
    );
  });
});

describe('start-task', () => {
  test('create: waits until the task is ready, starts it and waits until it runs', async () => {
    const dms = new FakeDms(task('creating'));
    dms.settleAfter(3, 'ready');
    const result = await runLifecycle(event('Create', taskProps()), deps(dms));
    expect(dms.calls).toEqual(['start start-replication']);
    expect(dms.task!.status).toBe('running');
    expect(result.physicalResourceId).toBe(TASK_ARN);
  });

  test('create: a task that fails to start fails the deployment with its reason', async () => {
    const dms = new FakeDms(task('ready'));
    dms.failStartWith = 'Error in slot: cdc_orders does not exist';
    await expect(runLifecycle(event('Create', taskProps()), deps(dms))).rejects.toThrow(
      /task test-orders-cdc-12345678 is failed \(Error in slot: cdc_orders does not exist\) instead of running/,
    );
  });

  test('update: resumes a stopped task, restarts it from its checkpoint after a configuration change, leaves failed and running tasks alone', async () => {
    const resumed = new FakeDms(task('stopped', { recoveryCheckpoint: 'checkpoint:V1#1#0/1#0#0#*#0#0' }));
    await runLifecycle(event('Update', taskProps(), { physicalResourceId: TASK_ARN }), deps(resumed));
    expect(resumed.calls).toEqual(['start resume-processing']);

    const restarted = new FakeDms(task('stopped', { recoveryCheckpoint: 'checkpoint:V1#1#0/1#0#0#*#0#0' }));
    await runLifecycle(event('Update', taskProps({ ConfigHash: 'bbbb' }), { physicalResourceId: TASK_ARN, oldProps: taskProps() }), deps(restarted));
    expect(restarted.calls).toEqual(['start start-replication from checkpoint:V1#1#0/1#0#0#*#0#0']);

    const moved = new FakeDms(task('stopped', { recoveryCheckpoint: 'checkpoint:V1#1#0/1#0#0#*#0#0' }));
    await runLifecycle(
      event('Update', taskProps({ StartPosition: '0/5000' }), { physicalResourceId: TASK_ARN, oldProps: taskProps({ StartPosition: '0/1000' }) }),
      deps(moved),
    );
    expect(moved.calls).toEqual(['start start-replication from 0/5000']);

    for (const status of ['failed', 'running']) {
      const untouched = new FakeDms(task(status));
      await runLifecycle(event('Update', taskProps({ ConfigHash: 'bbbb' }), { physicalResourceId: TASK_ARN, oldProps: taskProps() }), deps(untouched));
      expect(untouched.calls, status).toEqual([]);
    }
  });

  test('planStart decides from status and configuration change', () => {
    expect(planStart(task('ready'), false)).toEqual({ action: 'start', type: 'start-replication' });
    expect(planStart(task('stopped'), true)).toEqual({ action: 'start', type: 'resume-processing' });
    expect(planStart(task('stopped', { recoveryCheckpoint: 'c' }), true)).toEqual({ action: 'start', type: 'start-replication', cdcStartPosition: 'c' });
    expect(planStart(task('failed'), true)).toEqual({ action: 'none' });
    // Another slot: the old checkpoint means nothing there, the task starts at the new slot's position.
    expect(planStart(task('stopped', { recoveryCheckpoint: 'c' }), false, '0/ABC')).toEqual({
      action: 'start',
      type: 'start-replication',
      cdcStartPosition: '0/ABC',
    });
  });

  test('delete: stops a running task and waits; a missing task is fine', async () => {
    const dms = new FakeDms(task('running'));
    await runLifecycle(event('Delete', taskProps(), { physicalResourceId: TASK_ARN }), deps(dms));
    expect(dms.calls).toEqual(['stop']);
    expect(dms.task!.status).toBe('stopped');
    await runLifecycle(event('Delete', taskProps(), { physicalResourceId: TASK_ARN }), deps(new FakeDms(undefined)));
  });

  test('times out with the task status when it never settles', async () => {
    const dms = new FakeDms(task('modifying'));
    let left = 40_000;
    await expect(runLifecycle(event('Create', taskProps()), { ...deps(dms), remainingMs: () => (left -= 5_000), pollMs: 1_000 })).rejects.toThrow(
      /timed out waiting until the task is ready to start: task test-orders-cdc-12345678 is modifying/,
    );
  });
});

describe('CloudFormation response', () => {
  let server: http.Server;
  let url: string;
  const received: Array<Record<string, unknown>> = [];

  beforeAll(async () => {
    server = http.createServer((req, res) => {
      let body = '';
      req.on('data', (c: Buffer) => (body += c.toString()));
      req.on('end', () => {
        received.push({ method: req.method, contentType: req.headers['content-type'], ...JSON.parse(body) });
        res.writeHead(200).end();
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/response`;
  });
  afterAll(async () => {
    await new Promise((r) => server.close(r));
  });

  test('success carries the physical id and data; failure carries the reason and answers anyway', async () => {
    const db = await newDatabase();
    const run = createTaskLifecycleHandler(deps(new FakeDms(undefined)));
    await run(event('Create', slotProps(db), { responseUrl: url }));
    await run(event('Create', slotProps(db, { SlotName: 'Not-A-Slot' }), { responseUrl: url }));
    expect(received).toHaveLength(2);
    expect(received[0]).toMatchObject({
      method: 'PUT',
      contentType: '',
      Status: 'SUCCESS',
      PhysicalResourceId: expect.stringMatching(/^slots\d+\/cdc_slots\d+@/),
      Data: { StartPosition: expect.any(String) },
      RequestId: 'req-1',
      LogicalResourceId: 'OrdersReplicationSlot',
    });
    expect(received[1]).toMatchObject({ Status: 'FAILED', PhysicalResourceId: 'cdc-slot-not-created', Reason: expect.stringMatching(/slot name/) });
  });
});
