/**
 * What a pre-flight check of the source (`cdc doctor`, lambda/core/operator/doctor.ts) reports: a stable
 * check id, PASS, WARN or FAIL, what it saw and the fix; the worst status of a report and its text.
 */
export type CheckStatus = 'PASS' | 'WARN' | 'FAIL';

/** Stable check ids (what `--json` prints and tests match on). */
export const CheckId = {
  WAL_LEVEL: 'wal_level',
  /** Session settings of the capture user that change what test_decoding prints (docs/failures.md). */
  DECODING_SETTINGS: 'decoding_settings',
  REPLICATION_SLOTS: 'replication_slots',
  WAL_SENDERS: 'wal_senders',
  MAX_SLOT_WAL_KEEP_SIZE: 'max_slot_wal_keep_size',
  REPLICATION_GRANT: 'replication_grant',
  SELECT_GRANT: 'select_grant',
  HEARTBEAT: 'heartbeat',
  TABLE_EXISTS: 'table_exists',
  /** The table's name can name its warehouse view (docs/architecture.md §5.4, "Names"). */
  TABLE_NAME: 'table_name',
  PRIMARY_KEY: 'primary_key',
  REPLICA_IDENTITY: 'replica_identity',
  COLUMN_TYPES: 'column_types',
  SLOT_RETAINED_WAL: 'slot_retained_wal',
  SLOT_LOST: 'slot_lost',
  TLS: 'tls',
  /** A table a capture rule matches: captured, excluded by the rule, or ineligible (docs/onboarding.md). */
  TABLE_RULE: 'table_rule',
  /** A polled table's poll column: one that orders it without a gap (docs/polling.md). */
  POLL_COLUMN: 'poll_column',
  /** A timestamp-polled table: the capture user may see every session's open transaction (docs/polling.md). */
  POLL_HORIZON: 'poll_horizon',
  /** A polled table: a trigger sets the poll column on every write, and no row has it NULL (docs/polling.md). */
  POLL_TRIGGER: 'poll_trigger',
} as const;
export type CheckIdValue = (typeof CheckId)[keyof typeof CheckId];

export interface CheckResult {
  check: CheckIdValue;
  status: CheckStatus;
  /** What the check is about when there is one per table or slot (`public.orders`, `slot old_tool`). */
  subject: string | null;
  /** What was seen. */
  message: string;
  /** What to change (null on PASS). */
  fix: string | null;
}

export function q(name: string): string {
  return JSON.stringify(name);
}

export function pass(check: CheckIdValue, subject: string | null, message: string): CheckResult {
  return { check, status: 'PASS', subject, message, fix: null };
}

export function problem(check: CheckIdValue, status: 'WARN' | 'FAIL', subject: string | null, message: string, fix: string): CheckResult {
  return { check, status, subject, message, fix };
}

/** The worst status of a set of results (PASS when empty). */
export function overallStatus(results: readonly CheckResult[]): CheckStatus {
  if (results.some((r) => r.status === 'FAIL')) return 'FAIL';
  if (results.some((r) => r.status === 'WARN')) return 'WARN';
  return 'PASS';
}

/** The report as text lines: one per check, the fix indented under a WARN or FAIL, a summary last. */
export function formatReport(results: readonly CheckResult[]): string[] {
  const lines: string[] = [];
  for (const r of results) {
    lines.push(`${r.status.padEnd(4)}  ${r.check}${r.subject ? ` (${r.subject})` : ''}: ${r.message}`);
    if (r.fix) lines.push(`      fix: ${r.fix}`);
  }
  const n = (s: CheckStatus): number => results.filter((r) => r.status === s).length;
  lines.push(`${overallStatus(results)}: ${n('FAIL')} failed, ${n('WARN')} warnings, ${n('PASS')} passed`);
  return lines;
}
