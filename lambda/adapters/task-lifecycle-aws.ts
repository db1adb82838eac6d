/**
 * The task lifecycle's ports over AWS and PostgreSQL (lambda/core/capture/task-lifecycle.ts):
 * the replication task through the DMS API (`AwsDms`), the replication slot over one PostgreSQL
 * connection (`PgSlots`), and the response to CloudFormation's pre-signed URL (`sendResponse`).
 */
import {
  DatabaseMigrationServiceClient,
  DescribeReplicationTasksCommand,
  StartReplicationTaskCommand,
  StopReplicationTaskCommand,
  type ReplicationTask,
} from '@aws-sdk/client-database-migration-service';
import pg from 'pg';
import { ServiceName } from '../../contracts/env.ts';
import { TaskLifecycleError, type DmsPort, type SlotPort, type TaskState } from '../core/capture/task-lifecycle.ts';

/** Sends the response to the pre-signed URL (an S3 PUT with no content type). */
export async function sendResponse(url: string, body: string): Promise<void> {
  let lastError: unknown;
  for (let attempt = 0; attempt < 5; attempt++) {
    try {
      const res = await fetch(url, { method: 'PUT', body, headers: { 'content-type': '', 'content-length': String(Buffer.byteLength(body)) } });
      if (res.ok) return;
      lastError = new Error(`HTTP ${res.status} ${await res.text().catch(() => '')}`);
    } catch (e) {
      lastError = e;
    }
    await new Promise((r) => setTimeout(r, 1000 * (attempt + 1)));
  }
  throw new TaskLifecycleError(`could not send the CloudFormation response: ${(lastError as Error)?.message ?? String(lastError)}`);
}

function toState(t: ReplicationTask): TaskState {
  return {
    arn: t.ReplicationTaskArn ?? '',
    identifier: t.ReplicationTaskIdentifier ?? '',
    status: t.Status ?? 'unknown',
    recoveryCheckpoint: t.RecoveryCheckpoint || undefined,
    lastFailureMessage: t.LastFailureMessage || undefined,
    stopReason: t.StopReason || undefined,
  };
}

/** `DmsPort` over the DMS API. */
export class AwsDms implements DmsPort {
  constructor(private readonly client: DatabaseMigrationServiceClient) {}

  async findTask(by: { arn?: string; identifier?: string }): Promise<TaskState | undefined> {
    const filter = by.arn ? { Name: 'replication-task-arn', Values: [by.arn] } : { Name: 'replication-task-id', Values: [by.identifier ?? ''] };
    try {
      const out = await this.client.send(new DescribeReplicationTasksCommand({ Filters: [filter], WithoutSettings: true }));
      const t = out.ReplicationTasks?.[0];
      return t ? toState(t) : undefined;
    } catch (e) {
      if ((e as { name?: string }).name === 'ResourceNotFoundFault') return undefined;
      throw e;
    }
  }

  async startTask(arn: string, type: 'start-replication' | 'resume-processing', cdcStartPosition?: string): Promise<void> {
    await this.client.send(new StartReplicationTaskCommand({ ReplicationTaskArn: arn, StartReplicationTaskType: type, CdcStartPosition: cdcStartPosition }));
  }

  async stopTask(arn: string): Promise<void> {
    await this.client.send(new StopReplicationTaskCommand({ ReplicationTaskArn: arn }));
  }
}

/** `SlotPort` over one PostgreSQL connection. */
export class PgSlots implements SlotPort {
  private constructor(private readonly client: pg.Client) {}

  static async connect(config: pg.ClientConfig): Promise<PgSlots> {
    const client = new pg.Client({ ...config, connectionTimeoutMillis: 20_000, application_name: ServiceName.DMS_TASK_LIFECYCLE });
    try {
      await client.connect();
    } catch (e) {
      throw new TaskLifecycleError(
        `cannot connect to the source ${config.host ?? ''}:${config.port ?? ''}/${config.database ?? ''}: ${(e as Error).message}. The source's security group must admit the CdcSource's security group`,
      );
    }
    return new PgSlots(client);
  }

  /** Slot names are unique in the whole cluster: a slot of another database is refused, not ignored. */
  async describeSlot(slotName: string): Promise<{ plugin: string; active: boolean } | undefined> {
    const r = await this.client.query<{ plugin: string | null; active: boolean; database: string | null; mine: boolean }>(
      'SELECT plugin, active, database, database = current_database() AS mine FROM pg_replication_slots WHERE slot_name = $1',
      [slotName],
    );
    const row = r.rows[0];
    if (!row) return undefined;
    if (!row.mine)
      throw new TaskLifecycleError(
        `replication slot ${slotName} exists for ${row.database ? `database ${row.database}` : 'physical replication'}, not for the captured database; choose another slotName`,
      );
    return { plugin: row.plugin ?? '', active: row.active };
  }

  async ensureSlot(slotName: string): Promise<{ position: string; created: boolean }> {
    const found = await this.client.query<{ lsn: string | null }>(
      'SELECT coalesce(confirmed_flush_lsn, restart_lsn)::text AS lsn FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()',
      [slotName],
    );
    const lsn = found.rows[0]?.lsn;
    if (lsn) return { position: lsn, created: false };
    try {
      const made = await this.client.query<{ lsn: string }>("SELECT lsn::text AS lsn FROM pg_create_logical_replication_slot($1, 'test_decoding')", [slotName]);
      return { position: made.rows[0]!.lsn, created: true };
    } catch (e) {
      throw new TaskLifecycleError(
        `cannot create replication slot ${slotName}: ${(e as Error).message}. The capture user needs the replication privilege (rds_replication on RDS) and wal_level=logical`,
      );
    }
  }

  async dropSlot(slotName: string): Promise<boolean> {
    const r = await this.client.query(
      'SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND database = current_database()',
      [slotName],
    );
    return (r.rowCount ?? 0) > 0;
  }

  async close(): Promise<void> {
    await this.client.end().catch(() => undefined);
  }
}
