/**
 * The source pre-flight (`cdc doctor`, and `cdc local` before it starts): pure checks over facts
 * gathered from the source database (lambda/adapters/source-facts-pg.ts gathers them). Each check
 * says PASS, WARN or FAIL, what it saw, and for anything but PASS the fix, so that most rows of
 * the failure table (docs/failures.md) become a warning before they become an incident.
 *
 * FAIL means capture cannot work, or would lose or wedge history as configured; WARN means it
 * works but one failure mode is unguarded (no WAL cap, an unencrypted loopback connection, a slot
 * of another tool pinning WAL). The RDS/Aurora parameter behind each check: docs/doctor.md.
 */
import { tableNameRefusal } from '../warehouse/warehouse-names.ts';
import { searchColumnRefusal, UNKNOWN_SINKS, warehouseTypeRefusal, type NameTwin, type SinkProfile } from '../tables/sink-profile.ts';

import { pollColumnKindOf, type PollColumnKind } from '../capture/poll.ts';

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

/** One replication slot as `pg_replication_slots` reports it, with the WAL it retains. */
export interface SlotFact {
  name: string;
  /** `logical` or `physical`. */
  slotType: string;
  plugin: string | null;
  database: string | null;
  active: boolean;
  /** `reserved`, `extended`, `unreserved`, `lost`, or null (no WAL reserved yet). */
  walStatus: string | null;
  /** PostgreSQL 17+: why the slot was invalidated, else null. */
  invalidationReason: string | null;
  restartLsn: string | null;
  confirmedFlushLsn: string | null;
  /** Bytes of WAL from the slot's restart_lsn to the current WAL position (null when it has none). */
  retainedBytes: number | null;
  /** PostgreSQL 13+: bytes that can still be written before the slot is in danger of losing WAL (`safe_wal_size`), null when unlimited. */
  safeWalBytes: number | null;
}

/** One captured table as the catalog describes it. */
export interface TableFact {
  /** `schema.table` as configured. */
  table: string;
  exists: boolean;
  /** Primary-key columns in key order (empty: none). */
  primaryKey: string[];
  /** The key the configuration declares, if any (else the primary key is the key). */
  declaredKey: string[] | null;
  /** `pg_class.relreplident`: d(efault), n(othing), f(ull), i(ndex). */
  replicaIdentity: 'd' | 'n' | 'f' | 'i' | null;
  /** Columns of the replica-identity index when replicaIdentity is `i`. */
  identityIndexColumns: string[] | null;
  /** Whether the capture user may SELECT the table (snapshots, re-snapshots). */
  selectGranted: boolean;
  /**
   * Columns with their type as `format_type` prints it (`text`, `integer[]`, `character varying(20)`),
   * and `generated: 'virtual'` for a virtual generated column (PostgreSQL 18), which is neither
   * stored nor logged (docs/types.md).
   */
  columns: Array<{
    name: string;
    type: string;
    generated?: 'stored' | 'virtual';
    /** The type with its modifiers (`format_type(atttypid, atttypmod)`: `numeric(50,2)`), when read. */
    declaredType?: string;
  }>;
  /**
   * Columns the table's configuration leaves out of capture (its `exclude` list): they never reach
   * a sink, so a column that cannot be carried is no reason to refuse the table once it is excluded
   * (docs/types.md, "What is refused, and where"). @default none
   */
  excluded?: readonly string[];
  /** The poll column when the table is configured `capture: 'poll'` (docs/polling.md). */
  pollColumn?: string | null;
  /** The table registered before it whose name this table's folds into in a sink (lambda/core/tables/sink-profile.ts). @default none */
  twin?: NameTwin | null;
  /** A polled table's row-level BEFORE INSERT AND UPDATE trigger: fired always, only at origin (not under `session_replication_role = replica`), or none enabled. */
  pollTrigger?: 'always' | 'origin' | 'none' | null;
  /** Whether some row of a polled table has its poll column NULL (never read). */
  pollNulls?: boolean | null;
}

export interface SourceFacts {
  /** `server_version_num`, e.g. 160004. */
  serverVersionNum: number;
  walLevel: string;
  /** `quote_all_identifiers` in the capture user's session (database and role settings applied). @default false */
  quoteAllIdentifiers?: boolean;
  /** `TimeZone` in the capture user's session (server, database and role settings applied): the zone writers get unless they set one. */
  timeZone?: string;
  maxReplicationSlots: number;
  usedReplicationSlots: number;
  maxWalSenders: number;
  usedWalSenders: number;
  /** `max_slot_wal_keep_size` in bytes; null when unlimited (-1) or not available (before PostgreSQL 13). */
  maxSlotWalKeepSizeBytes: number | null;
  user: {
    name: string;
    superuser: boolean;
    replication: boolean;
    rdsReplication: boolean;
    /** Whether the user has the privileges of `pg_read_all_stats` (a superuser has): it sees every session's `xact_start`. @default false */
    readAllStats?: boolean;
  };
  /** Whether this session's connection is encrypted. */
  ssl: boolean;
  /** Whether the connection goes to a loopback address (an unencrypted one is then only a warning). */
  loopback: boolean;
  heartbeat: {
    /** `schema.cdc_heartbeat`. */
    table: string;
    exists: boolean;
    /** The role that writes it (the heartbeat identity; the capture user unless told otherwise). */
    writer: string;
    writerExists: boolean;
    /** The writer may INSERT and UPDATE the table (when it exists). */
    writable: boolean;
    /** The writer may CREATE in the heartbeat schema (when the table does not exist yet). */
    canCreate: boolean;
  };
  slots: SlotFact[];
  tables: TableFact[];
}

export interface DoctorOptions {
  /** The capture's own slot name, if known: it is expected to exist once capture ran, and its loss is a gap. */
  ownSlot?: string | null;
  /** Retained WAL above which a slot is a FAIL (seed of the failure table: 1 GiB). @default 1 GiB */
  slotFailBytes?: number;
  /** Retained WAL above which an inactive slot of another tool is reported. @default 16 MiB (one WAL segment) */
  inactiveSlotWarnBytes?: number;
  /** What the sinks the tables join can hold (docs/onboarding.md, "Names"). @default UNKNOWN_SINKS */
  sinks?: SinkProfile;
}

export const GIB = 1024 ** 3;
export const DEFAULT_SLOT_FAIL_BYTES = GIB;
export const DEFAULT_INACTIVE_SLOT_WARN_BYTES = 16 * 1024 ** 2;

/** Types that DMS maps to LOBs or whose values can outgrow one change record (1 MiB). */
const LOB_TYPES = new Set(['bytea', 'json', 'jsonb', 'xml', 'hstore']);
/** Types whose content is not in the logical stream: a large-object reference carries only its oid. */
const NOT_CARRIED_TYPES = new Set(['lo']);

/** Human-readable bytes (`512 B`, `3.0 MiB`, `1.2 GiB`). */
export function formatBytes(n: number | null): string {
  if (n === null) return '-';
  const a = Math.abs(n);
  if (a < 1024) return `${n} B`;
  if (a < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (a < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(1)} GiB`;
}

function q(name: string): string {
  return JSON.stringify(name);
}

function pass(check: CheckIdValue, subject: string | null, message: string): CheckResult {
  return { check, status: 'PASS', subject, message, fix: null };
}

function problem(check: CheckIdValue, status: 'WARN' | 'FAIL', subject: string | null, message: string, fix: string): CheckResult {
  return { check, status, subject, message, fix };
}

/** Whether the key columns are all among the columns a delete's old tuple carries. */
function covers(carried: readonly string[], key: readonly string[]): boolean {
  return key.every((k) => carried.includes(k));
}

function tableChecks(t: TableFact, user: string, sinks: SinkProfile): CheckResult[] {
  const out: CheckResult[] = [];
  if (!t.exists) {
    out.push(
      problem(
        CheckId.TABLE_EXISTS,
        'FAIL',
        t.table,
        `captured table ${t.table} does not exist (or the capture user cannot see it)`,
        `create the table, fix the name in --tables, or GRANT USAGE ON SCHEMA to ${q(user)}`,
      ),
    );
    return out;
  }
  const named = tableNameRefusal(t.table);
  if (named !== null)
    out.push(problem(CheckId.TABLE_NAME, 'FAIL', t.table, named, `rename the table, or leave it out of the capture (a rule's excludeTables)`));
  if (t.twin)
    out.push(
      problem(
        CheckId.TABLE_NAME,
        'FAIL',
        t.table,
        t.twin.reason,
        `leave ${t.table} out of the capture (a rule's excludeTables), or rename one of the two at the source (docs/onboarding.md, "Names")`,
      ),
    );
  out.push(
    t.selectGranted
      ? pass(CheckId.SELECT_GRANT, t.table, `${q(user)} may SELECT ${t.table}`)
      : problem(
          CheckId.SELECT_GRANT,
          'FAIL',
          t.table,
          `${q(user)} may not SELECT ${t.table} (snapshots and re-snapshots read it)`,
          `GRANT SELECT ON ${t.table} TO ${q(user)};`,
        ),
  );
  const key = t.declaredKey && t.declaredKey.length > 0 ? t.declaredKey : t.primaryKey;
  if (key.length === 0) {
    out.push(
      problem(
        CheckId.PRIMARY_KEY,
        'FAIL',
        t.table,
        `${t.table} has no primary key and no declared key: its rows cannot be told apart in a sink`,
        `ALTER TABLE ${t.table} ADD PRIMARY KEY (...); or declare the key and set REPLICA IDENTITY FULL`,
      ),
    );
  } else {
    const missing = key.filter((k) => !t.columns.some((c) => c.name === k));
    out.push(
      missing.length > 0
        ? problem(
            CheckId.PRIMARY_KEY,
            'FAIL',
            t.table,
            `the declared key of ${t.table} names columns it does not have: ${missing.join(', ')}`,
            'declare the key with existing columns',
          )
        : pass(CheckId.PRIMARY_KEY, t.table, `key (${key.join(', ')})${t.declaredKey && t.declaredKey.length > 0 ? ' declared' : ' from the primary key'}`),
    );
  }
  const fixFull = `ALTER TABLE ${t.table} REPLICA IDENTITY FULL;`;
  switch (t.replicaIdentity) {
    case 'n':
      out.push(problem(CheckId.REPLICA_IDENTITY, 'FAIL', t.table, `${t.table} has REPLICA IDENTITY NOTHING: deletes and key changes carry no key`, fixFull));
      break;
    case 'd':
      if (t.primaryKey.length === 0)
        out.push(
          problem(CheckId.REPLICA_IDENTITY, 'FAIL', t.table, `${t.table} has REPLICA IDENTITY DEFAULT without a primary key: deletes carry no key`, fixFull),
        );
      else if (key.length > 0 && !covers(t.primaryKey, key)) {
        out.push(
          problem(
            CheckId.REPLICA_IDENTITY,
            'FAIL',
            t.table,
            `deletes on ${t.table} carry the primary key (${t.primaryKey.join(', ')}), which does not cover the declared key (${key.join(', ')})`,
            fixFull,
          ),
        );
      } else out.push(pass(CheckId.REPLICA_IDENTITY, t.table, 'DEFAULT (deletes carry the primary key)'));
      break;
    case 'i': {
      const cols = t.identityIndexColumns ?? [];
      if (key.length > 0 && !covers(cols, key)) {
        out.push(
          problem(
            CheckId.REPLICA_IDENTITY,
            'FAIL',
            t.table,
            `${t.table} has REPLICA IDENTITY USING INDEX on (${cols.join(', ')}), which does not cover the key (${key.join(', ')}): deletes would arrive without the key`,
            `${fixFull} or ALTER TABLE ${t.table} REPLICA IDENTITY USING INDEX <a unique index on (${key.join(', ')})>;`,
          ),
        );
      } else out.push(pass(CheckId.REPLICA_IDENTITY, t.table, `USING INDEX on (${cols.join(', ')})`));
      break;
    }
    case 'f':
      out.push(pass(CheckId.REPLICA_IDENTITY, t.table, 'FULL (before images carry every column)'));
      break;
    default:
      out.push(problem(CheckId.REPLICA_IDENTITY, 'FAIL', t.table, `${t.table}: replica identity unknown`, fixFull));
  }
  const excluded = new Set(t.excluded ?? []);
  const carried = t.columns.filter((c) => !excluded.has(c.name));
  const virtual = carried.filter((c) => c.generated === 'virtual');
  if (virtual.length > 0) {
    out.push(
      problem(
        CheckId.COLUMN_TYPES,
        'FAIL',
        t.table,
        `${t.table} has virtual generated columns (${virtual.map((c) => c.name).join(', ')}): they are computed when read, never stored or logged, so the slot carries them as NULL (docs/types.md)`,
        `exclude them from capture (the table's exclude list) and compute them in the warehouse (a view), or make them STORED (drop the column and add it again as GENERATED ALWAYS AS (…) STORED)`,
      ),
    );
  }
  const notCarried = carried.filter((c) => NOT_CARRIED_TYPES.has(c.type));
  const beyondWarehouse = carried.flatMap((c) => {
    const why = warehouseTypeRefusal(sinks, c.declaredType ?? null);
    return why === null ? [] : [`${c.name} ${c.declaredType}: ${why}`];
  });
  const notFields = carried.flatMap((c) => {
    const why = searchColumnRefusal(sinks, c.name);
    return why === null ? [] : [`${q(c.name)}: ${why}`];
  });
  if (notFields.length > 0) {
    out.push(
      problem(
        CheckId.COLUMN_TYPES,
        'FAIL',
        t.table,
        `${t.table} has columns the search sink cannot hold as document fields (${notFields.join('; ')}) (docs/search.md, "Index names")`,
        "exclude them from capture (the table's exclude list), rename them at the source, or leave the table out of the search sink",
      ),
    );
  }
  if (beyondWarehouse.length > 0) {
    out.push(
      problem(
        CheckId.COLUMN_TYPES,
        'FAIL',
        t.table,
        `${t.table} has columns no warehouse type holds exactly (${beyondWarehouse.join('; ')}) (docs/exact-numbers.md)`,
        "exclude them from capture (the table's exclude list), or declare them unbounded numeric (carried as exact text) or numeric(p,s) with p ≤ 38 and 0 ≤ s ≤ p",
      ),
    );
  }
  const lobs = carried.filter((c) => LOB_TYPES.has(c.type) || c.type.endsWith('[]'));
  if (notCarried.length > 0) {
    out.push(
      problem(
        CheckId.COLUMN_TYPES,
        'FAIL',
        t.table,
        `${t.table} has large-object columns (${notCarried.map((c) => `${c.name} ${c.type}`).join(', ')}): logical decoding carries only the object's oid, never its content`,
        'store the bytes in a bytea column, or exclude the column from capture',
      ),
    );
  } else if (lobs.length > 0) {
    out.push(
      problem(
        CheckId.COLUMN_TYPES,
        'WARN',
        t.table,
        `${t.table} has columns DMS treats as LOBs (${lobs.map((c) => `${c.name} ${c.type}`).join(', ')}): a value over the task's maxLobSize stops the task, and a change record over 1 MiB is dead-lettered`,
        'keep these values small, raise maxLobSize (at most 1 MiB), or exclude the column',
      ),
    );
  } else if (virtual.length === 0 && beyondWarehouse.length === 0 && notFields.length === 0) {
    out.push(
      pass(CheckId.COLUMN_TYPES, t.table, `${carried.length} columns of carried types${excluded.size > 0 ? ` (${[...excluded].join(', ')} excluded)` : ''}`),
    );
  }
  return out;
}

/** Zone names whose local time is UTC all year (lower case). */
const UTC_ZONES = new Set([
  'utc',
  'etc/utc',
  'uct',
  'etc/uct',
  'gmt',
  'etc/gmt',
  'gmt0',
  'etc/gmt0',
  'etc/gmt+0',
  'etc/gmt-0',
  'universal',
  'etc/universal',
  'zulu',
  'etc/zulu',
  'greenwich',
  'etc/greenwich',
]);

const POLL_RECIPES =
  'add a timestamptz column set by a trigger with clock_timestamp(), or an xid8 column set by a trigger to pg_current_xact_id() (docs/polling.md), and poll by it; or capture the table from the log';

/**
 * A polled table's checks (docs/polling.md): its poll column orders it without a gap (a timestamp
 * or a transaction id; an integer version is refused with the alternatives), something sets it on
 * every write, and for a timestamp column the user sees every session's open transaction, which
 * the page horizon is read from.
 */
function pollChecks(t: TableFact, user: SourceFacts['user'], timeZone: string | undefined): CheckResult[] {
  if (!t.exists || t.pollColumn === undefined || t.pollColumn === null) return [];
  const column = t.columns.find((c) => c.name === t.pollColumn);
  if (!column)
    return [problem(CheckId.POLL_COLUMN, 'FAIL', t.table, `${t.table} has no column ${q(t.pollColumn)} to poll by`, 'name an existing column as pollColumn')];
  let kind: PollColumnKind;
  try {
    kind = pollColumnKindOf(t.table, column.name, column.type);
  } catch (e) {
    return [problem(CheckId.POLL_COLUMN, 'FAIL', t.table, (e as Error).message, POLL_RECIPES)];
  }
  return [pollColumnCheck(t, column, kind, timeZone), ...pollWriteChecks(t, column.name, kind), pollHorizonCheck(t, kind, user)];
}

function pollColumnCheck(t: TableFact, column: { name: string; type: string }, kind: PollColumnKind, timeZone: string | undefined): CheckResult {
  if (column.type === 'timestamp without time zone' && timeZone !== undefined && !UTC_ZONES.has(timeZone.toLowerCase())) {
    return problem(
      CheckId.POLL_COLUMN,
      'WARN',
      t.table,
      `${t.table} is polled by ${column.name} (timestamp without time zone) and sessions default to TimeZone ${q(timeZone)}: a value written from the server clock is local time, but the poller compares it as UTC, so in a zone behind UTC (or across a daylight-saving change) a late-committing row can fall behind the cursor`,
      `make ${column.name} timestamptz, or write it in UTC (now() AT TIME ZONE 'UTC' / clock_timestamp() AT TIME ZONE 'UTC')`,
    );
  }
  return pass(
    CheckId.POLL_COLUMN,
    t.table,
    `polled by ${column.name} (${column.type}, ${kind === 'timestamp' ? 'bounded by the open-transaction horizon' : 'bounded by the snapshot xmin'})`,
  );
}

/** Whether a trigger sets the poll column on every write, and whether rows the poller never reads (NULL) exist. */
function pollWriteChecks(t: TableFact, column: string, kind: PollColumnKind): CheckResult[] {
  const out: CheckResult[] = [];
  const recipe = `the ${kind === 'xid' ? 'xid8' : 'timestamp'} recipe of docs/polling.md (a BEFORE INSERT OR UPDATE row trigger, then ALTER TABLE ${t.table} ENABLE ALWAYS TRIGGER …)`;
  if (t.pollTrigger === 'always') out.push(pass(CheckId.POLL_TRIGGER, t.table, `a BEFORE INSERT OR UPDATE row trigger on ${t.table} fires always`));
  else if (t.pollTrigger === 'origin') {
    out.push(
      problem(
        CheckId.POLL_TRIGGER,
        'WARN',
        t.table,
        `the BEFORE INSERT OR UPDATE row trigger on ${t.table} is not ENABLE ALWAYS: a session with session_replication_role = replica writes rows without setting ${column}, and such a change is not read`,
        `ALTER TABLE ${t.table} ENABLE ALWAYS TRIGGER <the trigger>;`,
      ),
    );
  } else if (t.pollTrigger === 'none') {
    out.push(
      kind === 'xid'
        ? problem(
            CheckId.POLL_TRIGGER,
            'FAIL',
            t.table,
            `no enabled BEFORE INSERT OR UPDATE row trigger on ${t.table}: nothing sets ${column} to the writing transaction's id, so new and changed rows are not read`,
            recipe,
          )
        : problem(
            CheckId.POLL_TRIGGER,
            'WARN',
            t.table,
            `no enabled BEFORE INSERT OR UPDATE row trigger on ${t.table}: every writer must set ${column} from the server clock on every insert and update, or its change is not read`,
            recipe,
          ),
    );
  }
  if (t.pollNulls === true)
    out.push(
      problem(
        CheckId.POLL_TRIGGER,
        'WARN',
        t.table,
        `${t.table} has rows whose ${column} is NULL: the poller never reads them`,
        `UPDATE ${t.table} SET ${column} = ${kind === 'xid' ? 'pg_current_xact_id()' : 'clock_timestamp()'} WHERE ${column} IS NULL;`,
      ),
    );
  return out;
}

function pollHorizonCheck(t: TableFact, kind: PollColumnKind, user: SourceFacts['user']): CheckResult {
  if (kind === 'xid') return pass(CheckId.POLL_HORIZON, t.table, 'a transaction-id column is bounded by its page snapshot; no view of other sessions needed');
  if (user.superuser || user.readAllStats === true)
    return pass(CheckId.POLL_HORIZON, t.table, `${q(user.name)} sees every session's open transaction (${user.superuser ? 'superuser' : 'pg_read_all_stats'})`);
  return problem(
    CheckId.POLL_HORIZON,
    'FAIL',
    t.table,
    `${q(user.name)} may not see other sessions' open transactions (pg_stat_activity.xact_start): a timestamp poll page cannot be bounded below them, and polling refuses to start (POLL_HORIZON_PRIVILEGE)`,
    `GRANT pg_read_all_stats TO ${q(user.name)};`,
  );
}

/**
 * Whether a table matched by a capture rule may join (docs/onboarding.md): eligible when none of
 * the doctor's table checks fails (it exists and is readable, has a usable key that deletes
 * carry, and no column of a type the log cannot carry). The reasons are the failed checks'
 * messages with their fixes.
 */
export function tableEligibility(t: TableFact, user: string, sinks: SinkProfile = UNKNOWN_SINKS): { eligible: boolean; reasons: string[] } {
  const failed = tableChecks(t, user, sinks).filter((r) => r.status === 'FAIL');
  return { eligible: failed.length === 0, reasons: failed.map((r) => `${r.check}: ${r.message} (fix: ${r.fix})`) };
}

/**
 * The doctor's report of the tables capture rules match: one result per matched table. A table
 * whose name cannot be carried has no facts (`fact` null: its catalog is not read by that name).
 */
export function ruleTableChecks(
  matched: ReadonlyArray<{ table: string; rule: string; excludedBy: string | null; fact: TableFact | null }>,
  user: string,
  sinks: SinkProfile = UNKNOWN_SINKS,
): CheckResult[] {
  const out: CheckResult[] = [];
  for (const m of matched) {
    if (m.excludedBy !== null) {
      out.push(pass(CheckId.TABLE_RULE, m.table, `not captured: excluded by rule ${m.rule} (excludeTables ${m.excludedBy})`));
      continue;
    }
    const named = m.fact === null ? tableNameRefusal(m.table) : null;
    if (named !== null) {
      out.push(
        problem(
          CheckId.TABLE_RULE,
          'WARN',
          m.table,
          `matches rule ${m.rule} but is not captured (ineligible): ${CheckId.TABLE_NAME}: ${named}`,
          `rename the table at the source, or leave it out (a rule's excludeTables)`,
        ),
      );
      continue;
    }
    const checks = tableChecks(m.fact!, user, sinks);
    const failed = checks.filter((r) => r.status === 'FAIL');
    if (failed.length === 0) {
      out.push(pass(CheckId.TABLE_RULE, m.table, `captured by rule ${m.rule}`), ...checks);
      continue;
    }
    out.push(
      problem(
        CheckId.TABLE_RULE,
        'WARN',
        m.table,
        `matches rule ${m.rule} but is not captured (ineligible): ${failed.map((r) => `${r.check}: ${r.message}`).join('; ')}`,
        failed.map((r) => r.fix).join(' '),
      ),
    );
  }
  return out;
}

function slotChecks(f: SourceFacts, o: Required<DoctorOptions>): CheckResult[] {
  const out: CheckResult[] = [];
  for (const s of f.slots) {
    const ours = o.ownSlot !== null && s.name === o.ownSlot;
    const subject = `slot ${s.name}`;
    const who = ours ? 'the capture slot' : `slot ${q(s.name)} (${s.slotType}${s.plugin ? `, ${s.plugin}` : ''}, not this capture's)`;
    if (s.walStatus === 'lost' || s.invalidationReason !== null) {
      out.push(
        ours
          ? problem(
              CheckId.SLOT_LOST,
              'FAIL',
              subject,
              `${who} was invalidated (wal_status ${s.walStatus ?? '-'}, reason ${s.invalidationReason ?? '-'}): the WAL since its checkpoint is gone`,
              'a history gap: re-snapshot the captured tables (see docs/failures.md); do not re-create the slot under the same name',
            )
          : problem(
              CheckId.SLOT_LOST,
              'WARN',
              subject,
              `${who} was invalidated (wal_status ${s.walStatus ?? '-'}) and only takes up a slot`,
              `SELECT pg_drop_replication_slot('${s.name}');`,
            ),
      );
      continue;
    }
    const retained = s.retainedBytes ?? 0;
    const size = formatBytes(s.retainedBytes);
    if (retained > o.slotFailBytes) {
      out.push(
        problem(
          CheckId.SLOT_RETAINED_WAL,
          'FAIL',
          subject,
          `${who} is ${s.active ? 'active' : 'inactive'} and retains ${size} of WAL (over ${formatBytes(o.slotFailBytes)})`,
          ours
            ? 'let the capture drain (start it, or look why it is behind); set max_slot_wal_keep_size so the slot is invalidated before the disk fills'
            : `if the tool that owns it is gone: SELECT pg_drop_replication_slot('${s.name}');`,
        ),
      );
    } else if (!s.active && !ours && retained >= o.inactiveSlotWarnBytes) {
      out.push(
        problem(
          CheckId.SLOT_RETAINED_WAL,
          'WARN',
          subject,
          `${who} is inactive and pins ${size} of WAL`,
          `if the tool that owns it is gone: SELECT pg_drop_replication_slot('${s.name}');`,
        ),
      );
    } else {
      out.push(pass(CheckId.SLOT_RETAINED_WAL, subject, `${who} is ${s.active ? 'active' : 'inactive'}, retains ${size}`));
    }
  }
  return out;
}

/** Runs every check over the facts. Order: server, grants, slots, heartbeat, tables, TLS. */
export function runChecks(f: SourceFacts, options: DoctorOptions = {}): CheckResult[] {
  const o: Required<DoctorOptions> = {
    ownSlot: options.ownSlot ?? null,
    slotFailBytes: options.slotFailBytes ?? DEFAULT_SLOT_FAIL_BYTES,
    inactiveSlotWarnBytes: options.inactiveSlotWarnBytes ?? DEFAULT_INACTIVE_SLOT_WARN_BYTES,
    sinks: options.sinks ?? UNKNOWN_SINKS,
  };
  const out: CheckResult[] = [];
  out.push(
    f.walLevel === 'logical'
      ? pass(CheckId.WAL_LEVEL, null, 'wal_level = logical')
      : problem(
          CheckId.WAL_LEVEL,
          'FAIL',
          null,
          `the source has wal_level = '${f.walLevel}', but logical decoding needs wal_level = logical`,
          'ALTER SYSTEM SET wal_level = logical; and restart the server (RDS/Aurora: rds.logical_replication = 1 in the parameter group, then reboot)',
        ),
  );
  out.push(
    f.quoteAllIdentifiers === true
      ? problem(
          CheckId.DECODING_SETTINGS,
          'FAIL',
          null,
          'the capture user\'s sessions have quote_all_identifiers = on: test_decoding then quotes type names ("text", "oid"), so column types arrive wrong and a change of a table with an oid column cannot be decoded (the capture stops with CAPTURE_UNDECODABLE)',
          `ALTER ROLE ${q(f.user.name)} RESET quote_all_identifiers; ALTER DATABASE <database> RESET quote_all_identifiers; (and remove it from postgresql.conf / the parameter group)`,
        )
      : pass(CheckId.DECODING_SETTINGS, null, 'quote_all_identifiers = off'),
  );
  const ownExists = o.ownSlot !== null && f.slots.some((s) => s.name === o.ownSlot);
  const freeSlots = f.maxReplicationSlots - f.usedReplicationSlots;
  out.push(
    ownExists || freeSlots > 0
      ? pass(
          CheckId.REPLICATION_SLOTS,
          null,
          `${f.usedReplicationSlots} of max_replication_slots = ${f.maxReplicationSlots} in use${ownExists ? ' (the capture slot exists)' : ''}`,
        )
      : problem(
          CheckId.REPLICATION_SLOTS,
          'FAIL',
          null,
          `all ${f.maxReplicationSlots} replication slots are in use: the capture cannot create its slot`,
          "drop an abandoned slot (SELECT pg_drop_replication_slot('name')) or raise max_replication_slots and restart",
        ),
  );
  out.push(
    f.usedWalSenders < f.maxWalSenders
      ? pass(CheckId.WAL_SENDERS, null, `${f.usedWalSenders} of max_wal_senders = ${f.maxWalSenders} in use`)
      : problem(
          CheckId.WAL_SENDERS,
          'FAIL',
          null,
          `all ${f.maxWalSenders} WAL senders are in use: a replication connection (DMS) cannot attach`,
          'raise max_wal_senders (RDS: max_wal_senders in the parameter group) and restart, or stop an unused replication client',
        ),
  );
  if (f.serverVersionNum < 130000) {
    out.push(
      problem(
        CheckId.MAX_SLOT_WAL_KEEP_SIZE,
        'WARN',
        null,
        `PostgreSQL ${Math.floor(f.serverVersionNum / 10000)} has no max_slot_wal_keep_size: a stalled slot can fill the disk`,
        'upgrade to PostgreSQL 13 or later, and watch the slot monitor',
      ),
    );
  } else if (f.maxSlotWalKeepSizeBytes === null) {
    out.push(
      problem(
        CheckId.MAX_SLOT_WAL_KEEP_SIZE,
        'WARN',
        null,
        'max_slot_wal_keep_size = -1 (unlimited): a stalled or abandoned slot can fill the source disk',
        "set max_slot_wal_keep_size below the free disk (ALTER SYSTEM SET max_slot_wal_keep_size = '50GB'; SELECT pg_reload_conf(); RDS: the parameter of the same name)",
      ),
    );
  } else {
    out.push(pass(CheckId.MAX_SLOT_WAL_KEEP_SIZE, null, `max_slot_wal_keep_size = ${formatBytes(f.maxSlotWalKeepSizeBytes)}`));
  }
  const u = f.user;
  out.push(
    u.superuser || u.replication || u.rdsReplication
      ? pass(
          CheckId.REPLICATION_GRANT,
          null,
          `${q(u.name)} may read logical slots (${u.superuser ? 'superuser' : u.replication ? 'REPLICATION' : 'rds_replication'})`,
        )
      : problem(
          CheckId.REPLICATION_GRANT,
          'FAIL',
          null,
          `${q(u.name)} lacks the replication privilege that reading a logical slot needs`,
          `ALTER ROLE ${q(u.name)} WITH REPLICATION; (RDS/Aurora: GRANT rds_replication TO ${q(u.name)};)`,
        ),
  );
  out.push(...slotChecks(f, o));
  const h = f.heartbeat;
  if (!h.writerExists) {
    out.push(
      problem(
        CheckId.HEARTBEAT,
        'FAIL',
        h.table,
        `the heartbeat writer role ${q(h.writer)} does not exist`,
        `CREATE ROLE ${q(h.writer)} LOGIN; and grant it the heartbeat table`,
      ),
    );
  } else if (h.exists && h.writable) {
    out.push(pass(CheckId.HEARTBEAT, h.table, `${h.table} exists and ${q(h.writer)} may write it`));
  } else if (h.exists) {
    out.push(
      problem(
        CheckId.HEARTBEAT,
        'FAIL',
        h.table,
        `${q(h.writer)} may not INSERT and UPDATE ${h.table}: no heartbeat, so lag cannot be measured and an idle source looks stalled`,
        `GRANT INSERT, UPDATE, SELECT ON ${h.table} TO ${q(h.writer)};`,
      ),
    );
  } else if (h.canCreate) {
    out.push(
      problem(
        CheckId.HEARTBEAT,
        'WARN',
        h.table,
        `${h.table} does not exist yet; the heartbeat writer ${q(h.writer)} creates it on its first beat`,
        'none needed; to create it ahead, run the heartbeat writer once',
      ),
    );
  } else {
    out.push(
      problem(
        CheckId.HEARTBEAT,
        'FAIL',
        h.table,
        `${h.table} does not exist and ${q(h.writer)} may not create it`,
        `create it as an administrator (see docs/deploy.md) and GRANT INSERT, UPDATE, SELECT ON ${h.table} TO ${q(h.writer)};`,
      ),
    );
  }
  for (const t of f.tables) out.push(...tableChecks(t, u.name, o.sinks), ...pollChecks(t, u, f.timeZone));
  if (f.ssl) out.push(pass(CheckId.TLS, null, 'the connection is encrypted (TLS)'));
  else {
    out.push(
      problem(
        CheckId.TLS,
        f.loopback ? 'WARN' : 'FAIL',
        null,
        `the connection is not encrypted${f.loopback ? ' (a loopback address)' : ''}`,
        'connect with sslmode=verify-full (RDS: rds.force_ssl = 1 in the parameter group refuses unencrypted connections)',
      ),
    );
  }
  return out;
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
