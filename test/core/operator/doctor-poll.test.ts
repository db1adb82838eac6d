/** The source pre-flight's checks of a polled table (lambda/core/operator/doctor-poll.ts), run by runChecks over hand-built facts (docs/polling.md). */
import { describe, expect, it } from 'vitest';
import { CheckId } from '../../../lambda/core/operator/doctor-results.ts';
import { runChecks } from '../../../lambda/core/operator/doctor.ts';
import type { TableFact } from '../../../lambda/core/operator/doctor-facts.ts';
import { table, good } from './doctor-fixture.ts';

describe('runChecks', () => {
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
});
