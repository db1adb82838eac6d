/** The source pre-flight's checks of a polled table (docs/polling.md): its poll column, what sets it, and the horizon a timestamp page is bounded by. */
import { pollColumnKindOf, type PollColumnKind } from '../capture/poll.ts';
import type { SourceFacts, TableFact } from './doctor-facts.ts';
import { CheckId, pass, problem, q, type CheckResult } from './doctor-results.ts';

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
export function pollChecks(t: TableFact, user: SourceFacts['user'], timeZone: string | undefined): CheckResult[] {
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
