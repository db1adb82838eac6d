/** The source pre-flight's pure checks (lambda/core/operator/doctor.ts) over hand-built facts: each check's PASS, WARN and FAIL. */
import { describe, expect, it } from 'vitest';
import { CheckId, overallStatus } from '../../../lambda/core/operator/doctor-results.ts';
import { runChecks } from '../../../lambda/core/operator/doctor.ts';
import type { SourceFacts } from '../../../lambda/core/operator/doctor-facts.ts';
import { assessSlots, headroomAlarmThreshold } from '../../../lambda/core/capture/slot-monitor.ts';
import { MIB, slot, good, status } from './doctor-fixture.ts';

describe('runChecks', () => {
  it('passes a well-configured source, every check with no fix', () => {
    const rs = runChecks(good(), { ownSlot: 'cdc_shop' });
    expect(overallStatus(rs)).toBe('PASS');
    expect(rs.every((r) => r.fix === null)).toBe(true);
    expect(new Set(rs.map((r) => r.check))).toEqual(
      new Set([
        CheckId.WAL_LEVEL,
        CheckId.DECODING_SETTINGS,
        CheckId.REPLICATION_SLOTS,
        CheckId.WAL_SENDERS,
        CheckId.MAX_SLOT_WAL_KEEP_SIZE,
        CheckId.REPLICATION_GRANT,
        CheckId.SLOT_RETAINED_WAL,
        CheckId.HEARTBEAT,
        CheckId.SELECT_GRANT,
        CheckId.PRIMARY_KEY,
        CheckId.REPLICA_IDENTITY,
        CheckId.COLUMN_TYPES,
        CheckId.TLS,
      ]),
    );
  });

  it('fails each server-level misconfiguration with its fix', () => {
    const rs = runChecks(
      good({
        walLevel: 'replica',
        usedReplicationSlots: 10,
        usedWalSenders: 10,
        user: { name: 'plain', superuser: false, replication: false, rdsReplication: false },
        slots: [],
      }),
      { ownSlot: 'cdc_shop' },
    );
    expect(status(rs, CheckId.WAL_LEVEL)).toBe('FAIL');
    expect(rs.find((r) => r.check === CheckId.WAL_LEVEL)!.fix).toMatch(/rds\.logical_replication = 1/);
    expect(status(rs, CheckId.REPLICATION_SLOTS)).toBe('FAIL');
    expect(status(rs, CheckId.WAL_SENDERS)).toBe('FAIL');
    expect(status(rs, CheckId.REPLICATION_GRANT)).toBe('FAIL');
    expect(rs.find((r) => r.check === CheckId.REPLICATION_GRANT)!.fix).toMatch(/ALTER ROLE "plain" WITH REPLICATION.*GRANT rds_replication/);
    expect(overallStatus(rs)).toBe('FAIL');
  });

  it("fails quote_all_identifiers in the capture user's sessions (test_decoding would quote type names; an oid column stops the capture), with the fix", () => {
    const rs = runChecks(good({ quoteAllIdentifiers: true }), { ownSlot: 'cdc_shop' });
    expect(status(rs, CheckId.DECODING_SETTINGS)).toBe('FAIL');
    const r = rs.find((x) => x.check === CheckId.DECODING_SETTINGS)!;
    expect(r.message).toMatch(/quote_all_identifiers = on.*CAPTURE_UNDECODABLE/);
    expect(r.fix).toMatch(/^ALTER ROLE "capture" RESET quote_all_identifiers; ALTER DATABASE <database> RESET quote_all_identifiers;/);
    expect(overallStatus(rs)).toBe('FAIL');
    expect(status(runChecks(good({ quoteAllIdentifiers: false }), { ownSlot: 'cdc_shop' }), CheckId.DECODING_SETTINGS)).toBe('PASS');
  });

  it('needs no free slot when the capture slot exists already; rds_replication counts as the grant', () => {
    const rs = runChecks(
      good({ usedReplicationSlots: 10, maxReplicationSlots: 10, user: { name: 'c', superuser: false, replication: false, rdsReplication: true } }),
      { ownSlot: 'cdc_shop' },
    );
    expect(status(rs, CheckId.REPLICATION_SLOTS)).toBe('PASS');
    expect(status(rs, CheckId.REPLICATION_GRANT)).toBe('PASS');
  });

  it('warns on an unlimited max_slot_wal_keep_size and on a server without it', () => {
    expect(status(runChecks(good({ maxSlotWalKeepSizeBytes: null })), CheckId.MAX_SLOT_WAL_KEEP_SIZE)).toBe('WARN');
    expect(status(runChecks(good({ serverVersionNum: 120010, maxSlotWalKeepSizeBytes: null })), CheckId.MAX_SLOT_WAL_KEEP_SIZE)).toBe('WARN');
  });

  it('judges the heartbeat table by its writer', () => {
    const hb = (h: Partial<SourceFacts['heartbeat']>): string | undefined =>
      status(runChecks(good({ heartbeat: { ...good().heartbeat, ...h } })), CheckId.HEARTBEAT);
    expect(hb({ writable: false })).toBe('FAIL');
    expect(hb({ exists: false, writable: false, canCreate: true })).toBe('WARN');
    expect(hb({ exists: false, writable: false, canCreate: false })).toBe('FAIL');
    expect(hb({ writerExists: false })).toBe('FAIL');
  });

  it('reports slots: a foreign inactive slot pinning WAL warns, over the limit fails, the own slot lost fails', () => {
    const rs = runChecks(
      good({
        slots: [
          slot(),
          slot({ name: 'old_tool', active: false, retainedBytes: 40 * MIB }),
          slot({ name: 'huge', active: false, retainedBytes: 2 * 1024 * MIB }),
          slot({ name: 'tiny', active: false, retainedBytes: 1024 }),
        ],
      }),
      { ownSlot: 'cdc_shop' },
    );
    expect(status(rs, CheckId.SLOT_RETAINED_WAL, 'slot old_tool')).toBe('WARN');
    expect(rs.find((r) => r.subject === 'slot old_tool')!.fix).toBe("if the tool that owns it is gone: SELECT pg_drop_replication_slot('old_tool');");
    expect(status(rs, CheckId.SLOT_RETAINED_WAL, 'slot huge')).toBe('FAIL');
    expect(status(rs, CheckId.SLOT_RETAINED_WAL, 'slot tiny')).toBe('PASS');
    expect(status(rs, CheckId.SLOT_RETAINED_WAL, 'slot cdc_shop')).toBe('PASS');
    const lost = runChecks(good({ slots: [slot({ walStatus: 'lost', restartLsn: null }), slot({ name: 'other', walStatus: 'lost' })] }), {
      ownSlot: 'cdc_shop',
    });
    expect(status(lost, CheckId.SLOT_LOST, 'slot cdc_shop')).toBe('FAIL');
    expect(status(lost, CheckId.SLOT_LOST, 'slot other')).toBe('WARN');
  });

  it('fails an unencrypted remote connection, warns on loopback', () => {
    expect(status(runChecks(good({ ssl: false, loopback: false })), CheckId.TLS)).toBe('FAIL');
    expect(status(runChecks(good({ ssl: false, loopback: true })), CheckId.TLS)).toBe('WARN');
  });
});

describe('assessSlots', () => {
  const keep = 100 * MIB;
  it('measures headroom against the smaller of max_slot_wal_keep_size and the budget, alarming at the threshold', () => {
    const r = assessSlots([slot({ retainedBytes: 30 * MIB })], { ownSlot: 'cdc_shop', maxSlotWalKeepSizeBytes: keep, walBudgetBytes: 50 * MIB });
    expect(r.own).toMatchObject({ limitBytes: 50 * MIB, headroomBytes: 20 * MIB, level: 'ok' });
    expect(headroomAlarmThreshold(50 * MIB)).toBe(10 * MIB);
    const high = assessSlots([slot({ retainedBytes: 40 * MIB })], { ownSlot: 'cdc_shop', maxSlotWalKeepSizeBytes: keep, walBudgetBytes: 50 * MIB });
    expect(high.own).toMatchObject({ headroomBytes: 10 * MIB, level: 'alarm' });
    const over = assessSlots([slot({ retainedBytes: 70 * MIB })], { ownSlot: 'cdc_shop', maxSlotWalKeepSizeBytes: keep, walBudgetBytes: 50 * MIB });
    expect(over.own?.headroomBytes).toBe(0);
  });

  it('has no headroom without a limit, alarms on unreserved, reports lost with zero headroom', () => {
    expect(assessSlots([slot()], { ownSlot: 'cdc_shop', maxSlotWalKeepSizeBytes: null }).own).toMatchObject({ headroomBytes: null, level: 'ok' });
    expect(assessSlots([slot({ walStatus: 'unreserved' })], { ownSlot: 'cdc_shop', maxSlotWalKeepSizeBytes: null }).own?.level).toBe('alarm');
    const lost = assessSlots([slot({ walStatus: 'lost', invalidationReason: 'wal_removed' })], { ownSlot: 'cdc_shop', maxSlotWalKeepSizeBytes: keep });
    expect(lost.own).toMatchObject({ level: 'lost', headroomBytes: 0 });
    expect(lost.own?.message).toMatch(/re-snapshot/);
    expect(lost.level).toBe('lost');
  });

  it('warns separately on inactive slots of other tools and sums what they pin', () => {
    const r = assessSlots(
      [slot({ name: 'old_tool', active: false, retainedBytes: 20 * MIB }), slot({ name: 'live_other', active: true, retainedBytes: 30 * MIB }), slot()],
      { ownSlot: 'cdc_shop', maxSlotWalKeepSizeBytes: null },
    );
    expect(r.slots[0]!.slot).toBe('cdc_shop');
    expect(r.slots.find((s) => s.slot === 'old_tool')!.level).toBe('warn');
    expect(r.slots.find((s) => s.slot === 'live_other')!.level).toBe('ok');
    expect(r.foreignInactiveBytes).toBe(20 * MIB);
    expect(r.level).toBe('warn');
    expect(() => assessSlots([], { ownSlot: 'x', maxSlotWalKeepSizeBytes: null, alarmFraction: 1 })).toThrow(/alarmFraction/);
  });
});
