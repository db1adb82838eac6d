/** The source pre-flight's pure checks (lambda/core/operator/doctor.ts) over hand-built facts: each check's PASS, WARN and FAIL. */
import { describe, expect, it } from 'vitest';
import {
  CheckId,
  formatReport,
  overallStatus,
  runChecks,
  type CheckResult,
  type SlotFact,
  type SourceFacts,
  type TableFact,
} from '../../../lambda/core/operator/doctor.ts';
import { assessSlots, headroomAlarmThreshold } from '../../../lambda/core/capture/slot-monitor.ts';

const MIB = 1024 ** 2;

function table(over: Partial<TableFact> = {}): TableFact {
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

function slot(over: Partial<SlotFact> = {}): SlotFact {
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

function good(over: Partial<SourceFacts> = {}): SourceFacts {
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

const status = (rs: CheckResult[], check: string, subject: string | null = null): string | undefined =>
  rs.find((r) => r.check === check && (subject === null || r.subject === subject))?.status;

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

  it('judges the replica identity against the key: USING INDEX not covering the key fails', () => {
    const id = (t: Partial<TableFact>): string | undefined => status(runChecks(good({ tables: [table(t)] })), CheckId.REPLICA_IDENTITY);
    expect(id({ replicaIdentity: 'i', identityIndexColumns: ['email'] })).toBe('FAIL');
    expect(id({ replicaIdentity: 'i', identityIndexColumns: ['id', 'email'] })).toBe('PASS');
    expect(id({ replicaIdentity: 'n' })).toBe('FAIL');
    expect(id({ replicaIdentity: 'd', primaryKey: [], declaredKey: ['id'] })).toBe('FAIL');
    expect(id({ replicaIdentity: 'f', primaryKey: [], declaredKey: ['id'] })).toBe('PASS');
    // a declared key the primary key does not carry: deletes under DEFAULT would lack it
    expect(
      id({
        replicaIdentity: 'd',
        primaryKey: ['id'],
        declaredKey: ['tenant', 'id'],
        columns: [
          { name: 'id', type: 'integer' },
          { name: 'tenant', type: 'text' },
        ],
      }),
    ).toBe('FAIL');
  });

  it('fails a missing table, a table without a key, a missing SELECT grant and a declared key naming unknown columns', () => {
    const rs = runChecks(
      good({
        tables: [
          table({ table: 'public.gone', exists: false }),
          table({ table: 'public.nokey', primaryKey: [], replicaIdentity: 'd' }),
          table({ table: 'public.secret', selectGranted: false }),
          table({ table: 'public.typo', declaredKey: ['idd'], replicaIdentity: 'f' }),
        ],
      }),
    );
    expect(status(rs, CheckId.TABLE_EXISTS, 'public.gone')).toBe('FAIL');
    expect(status(rs, CheckId.PRIMARY_KEY, 'public.nokey')).toBe('FAIL');
    expect(status(rs, CheckId.SELECT_GRANT, 'public.secret')).toBe('FAIL');
    expect(rs.find((r) => r.subject === 'public.secret' && r.check === CheckId.SELECT_GRANT)!.fix).toBe('GRANT SELECT ON public.secret TO "capture";');
    expect(status(rs, CheckId.PRIMARY_KEY, 'public.typo')).toBe('FAIL');
  });

  it('fails a table whose name takes the platform prefix _cdc_ (its warehouse objects could not be told apart: docs/architecture.md §5.4, "Names")', () => {
    const rs = runChecks(
      good({ tables: [table({ table: 'public._cdc_mirror_orders' }), table({ table: 'public._CDC_x' }), table({ table: 'public.cdc_orders' })] }),
    );
    expect(status(rs, CheckId.TABLE_NAME, 'public._cdc_mirror_orders')).toBe('FAIL');
    expect(rs.find((r) => r.check === CheckId.TABLE_NAME && r.subject === 'public._CDC_x')?.message).toMatch(/reserved for the platform/);
    expect(status(rs, CheckId.TABLE_NAME, 'public.cdc_orders')).toBeUndefined();
  });

  it('fails large-object columns and warns on LOB-mapped ones', () => {
    expect(
      status(
        runChecks(
          good({
            tables: [
              table({
                columns: [
                  { name: 'id', type: 'integer' },
                  { name: 'blob', type: 'lo' },
                ],
              }),
            ],
          }),
        ),
        CheckId.COLUMN_TYPES,
      ),
    ).toBe('FAIL');
    expect(
      status(
        runChecks(
          good({
            tables: [
              table({
                columns: [
                  { name: 'id', type: 'integer' },
                  { name: 'doc', type: 'jsonb' },
                ],
              }),
            ],
          }),
        ),
        CheckId.COLUMN_TYPES,
      ),
    ).toBe('WARN');
    expect(
      status(
        runChecks(
          good({
            tables: [
              table({
                columns: [
                  { name: 'id', type: 'integer' },
                  { name: 'tags', type: 'text[]' },
                ],
              }),
            ],
          }),
        ),
        CheckId.COLUMN_TYPES,
      ),
    ).toBe('WARN');
  });

  it('fails a virtual generated column by name (never stored or logged: docs/types.md); a stored one passes', () => {
    const rs = runChecks(
      good({
        tables: [
          table({
            columns: [
              { name: 'id', type: 'integer' },
              { name: 'half', type: 'numeric', generated: 'virtual' },
            ],
          }),
        ],
      }),
    );
    expect(status(rs, CheckId.COLUMN_TYPES)).toBe('FAIL');
    expect(rs.find((r) => r.check === CheckId.COLUMN_TYPES)!.message).toContain('(half)');
    expect(
      status(
        runChecks(
          good({
            tables: [
              table({
                columns: [
                  { name: 'id', type: 'integer' },
                  { name: 'twice', type: 'numeric', generated: 'stored' },
                ],
              }),
            ],
          }),
        ),
        CheckId.COLUMN_TYPES,
      ),
    ).toBe('PASS');
  });

  it('fails a numeric no warehouse type holds exactly, by column and declared type (docs/exact-numbers.md)', () => {
    const col = (declaredType: string): TableFact['columns'][number] => ({
      name: 'amount',
      type: declaredType.endsWith('[]') ? 'numeric[]' : 'numeric',
      declaredType,
    });
    const check = (declaredType: string): CheckResult =>
      runChecks(good({ tables: [table({ columns: [{ name: 'id', type: 'integer' }, col(declaredType)] })] })).find((r) => r.check === CheckId.COLUMN_TYPES)!;
    expect(check('numeric(39,2)')).toMatchObject({ status: 'FAIL', message: expect.stringContaining('amount numeric(39,2): precision 39 is beyond') });
    expect(check('numeric(5,-2)')).toMatchObject({ status: 'FAIL', message: expect.stringContaining('amount numeric(5,-2): scale -2 is outside 0..5') });
    expect(check('numeric(38,38)').status).toBe('PASS');
    expect(check('numeric').status).toBe('PASS');
    expect(check('numeric(50,2)[]').status).toBe('WARN'); // an array is carried as text (the LOB warning only)
  });

  it('does not hold excluded columns against the table: excluding them is the fix', () => {
    const columns: TableFact['columns'] = [
      { name: 'id', type: 'integer' },
      { name: 'half', type: 'numeric', generated: 'virtual' },
      { name: 'blob', type: 'lo' },
      { name: 'amount', type: 'numeric', declaredType: 'numeric(60,0)' },
    ];
    expect(status(runChecks(good({ tables: [table({ columns, excluded: ['half', 'blob'] })] })), CheckId.COLUMN_TYPES)).toBe('FAIL');
    const rs = runChecks(good({ tables: [table({ columns, excluded: ['half', 'blob', 'amount'] })] }));
    expect(rs.find((r) => r.check === CheckId.COLUMN_TYPES)).toMatchObject({
      status: 'PASS',
      message: '1 columns of carried types (half, blob, amount excluded)',
    });
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

  it('checks a polled table: a gap-free poll column, and for a timestamp the view of open transactions it is bounded by', () => {
    const cols = [
      { name: 'id', type: 'integer' },
      { name: 'updated_at', type: 'timestamp with time zone' },
      { name: 'v', type: 'bigint' },
      { name: 'cdc_xid', type: 'xid8' },
    ];
    const polled = (pollColumn: string, name = `public.by_${pollColumn}`) => table({ table: name, columns: cols, pollColumn });
    const facts = good({ tables: [polled('updated_at'), polled('v'), polled('cdc_xid'), polled('nope'), table()] });
    const rs = runChecks(facts);
    const at = (check: string, subject: string) => rs.find((r) => r.check === check && r.subject === subject);
    expect(at(CheckId.POLL_COLUMN, 'public.by_updated_at')?.status).toBe('PASS');
    expect(at(CheckId.POLL_HORIZON, 'public.by_updated_at')).toMatchObject({
      status: 'FAIL',
      message: expect.stringContaining('POLL_HORIZON_PRIVILEGE'),
      fix: 'GRANT pg_read_all_stats TO "capture";',
    });
    expect(at(CheckId.POLL_COLUMN, 'public.by_v')).toMatchObject({
      status: 'FAIL',
      message: expect.stringMatching(/poll column v is bigint: an integer version .* skipped for good/),
    });
    expect(at(CheckId.POLL_HORIZON, 'public.by_v')).toBeUndefined();
    expect(at(CheckId.POLL_COLUMN, 'public.by_cdc_xid')?.status).toBe('PASS');
    expect(at(CheckId.POLL_HORIZON, 'public.by_cdc_xid')?.status).toBe('PASS');
    expect(at(CheckId.POLL_COLUMN, 'public.by_nope')?.status).toBe('FAIL');
    expect(rs.some((r) => r.subject === 'public.orders' && (r.check === CheckId.POLL_COLUMN || r.check === CheckId.POLL_HORIZON))).toBe(false);
    for (const user of [
      { ...facts.user, readAllStats: true },
      { ...facts.user, superuser: true },
    ]) {
      expect(runChecks({ ...facts, user }).find((r) => r.check === CheckId.POLL_HORIZON && r.subject === 'public.by_updated_at')?.status).toBe('PASS');
    }
  });

  it('checks that a trigger sets the poll column on every write and that no row has it NULL', () => {
    const cols = [
      { name: 'id', type: 'integer' },
      { name: 'updated_at', type: 'timestamp with time zone' },
      { name: 'cdc_xid', type: 'xid8' },
    ];
    const check = (pollColumn: string, over: Partial<TableFact>) =>
      runChecks(
        good({ user: { name: 'capture', superuser: true, replication: true, rdsReplication: false }, tables: [table({ columns: cols, pollColumn, ...over })] }),
      ).filter((r) => r.check === CheckId.POLL_TRIGGER);
    expect(check('cdc_xid', { pollTrigger: 'always', pollNulls: false }).map((r) => r.status)).toEqual(['PASS']);
    expect(check('cdc_xid', { pollTrigger: 'none', pollNulls: false })).toEqual([
      expect.objectContaining({ status: 'FAIL', message: expect.stringContaining('nothing sets cdc_xid'), fix: expect.stringContaining('xid8 recipe') }),
    ]);
    expect(check('cdc_xid', { pollTrigger: 'origin', pollNulls: false })).toEqual([
      expect.objectContaining({
        status: 'WARN',
        message: expect.stringContaining('session_replication_role = replica'),
        fix: 'ALTER TABLE public.orders ENABLE ALWAYS TRIGGER <the trigger>;',
      }),
    ]);
    expect(check('updated_at', { pollTrigger: 'none', pollNulls: false })).toEqual([
      expect.objectContaining({ status: 'WARN', fix: expect.stringContaining('timestamp recipe') }),
    ]);
    expect(check('cdc_xid', { pollTrigger: 'always', pollNulls: true }).map((r) => [r.status, r.fix])).toEqual([
      ['PASS', null],
      ['WARN', 'UPDATE public.orders SET cdc_xid = pg_current_xact_id() WHERE cdc_xid IS NULL;'],
    ]);
  });

  it('warns on a timestamp-without-time-zone poll column when sessions default to a zone that is not UTC', () => {
    const cols = [
      { name: 'id', type: 'integer' },
      { name: 'local_at', type: 'timestamp without time zone' },
      { name: 'updated_at', type: 'timestamp with time zone' },
    ];
    const facts = (timeZone: string) =>
      good({
        timeZone,
        user: { name: 'capture', superuser: true, replication: true, rdsReplication: false },
        tables: [table({ table: 'public.a', columns: cols, pollColumn: 'local_at' }), table({ table: 'public.b', columns: cols, pollColumn: 'updated_at' })],
      });
    const pollColumn = (tz: string, subject: string) => runChecks(facts(tz)).find((r) => r.check === CheckId.POLL_COLUMN && r.subject === subject);
    expect(pollColumn('America/New_York', 'public.a')).toMatchObject({
      status: 'WARN',
      message: expect.stringContaining('TimeZone "America/New_York"'),
      fix: expect.stringContaining('timestamptz'),
    });
    expect(pollColumn('America/New_York', 'public.b')?.status).toBe('PASS');
    for (const tz of ['UTC', 'Etc/UTC', 'GMT']) expect(pollColumn(tz, 'public.a')?.status).toBe('PASS');
  });

  it('formats one line per check, the fix under it and a summary', () => {
    const lines = formatReport(runChecks(good({ walLevel: 'minimal' })));
    expect(lines[0]).toMatch(/^FAIL  wal_level: the source has wal_level = 'minimal'/);
    expect(lines[1]).toMatch(/^ {6}fix: ALTER SYSTEM SET wal_level = logical/);
    expect(lines[lines.length - 1]).toMatch(/^FAIL: 1 failed, 0 warnings, \d+ passed$/);
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
