/** Hand-built facts for the source pre-flight's tests (test/core/operator/doctor*.test.ts): a well-configured source, a table, a slot. */
import type { CheckResult } from '../../../lambda/core/operator/doctor-results.ts';
import type { SlotFact, SourceFacts, TableFact } from '../../../lambda/core/operator/doctor-facts.ts';

export const MIB = 1024 ** 2;

export function table(over: Partial<TableFact> = {}): TableFact {
  return {
    table: 'public.orders',
    exists: true,
    primaryKey: ['id'],
    declaredKey: null,
    replicaIdentity: 'd',
    identityIndexColumns: null,
    selectGranted: true,
    columns: [
      { name: 'id', type: 'integer' },
      { name: 'note', type: 'text' },
    ],
    ...over,
  };
}

export function slot(over: Partial<SlotFact> = {}): SlotFact {
  return {
    name: 'cdc_shop',
    slotType: 'logical',
    plugin: 'test_decoding',
    database: 'shop',
    active: true,
    walStatus: 'reserved',
    invalidationReason: null,
    restartLsn: '0/1000',
    confirmedFlushLsn: '0/1000',
    retainedBytes: MIB,
    safeWalBytes: null,
    ...over,
  };
}

export function good(over: Partial<SourceFacts> = {}): SourceFacts {
  return {
    serverVersionNum: 160004,
    walLevel: 'logical',
    maxReplicationSlots: 10,
    usedReplicationSlots: 1,
    maxWalSenders: 10,
    usedWalSenders: 1,
    maxSlotWalKeepSizeBytes: 10 * 1024 * MIB,
    user: { name: 'capture', superuser: false, replication: true, rdsReplication: false },
    ssl: true,
    loopback: false,
    heartbeat: { table: 'public.cdc_heartbeat', exists: true, writer: 'capture', writerExists: true, writable: true, canCreate: false },
    slots: [slot()],
    tables: [table()],
    ...over,
  };
}

export const status = (rs: CheckResult[], check: string, subject: string | null = null): string | undefined =>
  rs.find((r) => r.check === check && (subject === null || r.subject === subject))?.status;
