/**
 * The source pre-flight's checks of one captured table (docs/doctor.md): it exists and is readable,
 * its name can name its warehouse objects, it has a key that deletes carry, and every column is of a
 * type the log carries and a warehouse holds. The same checks decide whether a table a capture rule
 * matches may join (docs/onboarding.md).
 */
import { tableNameRefusal } from '../warehouse/warehouse-names.ts';
import { searchColumnRefusal, UNKNOWN_SINKS, warehouseTypeRefusal, type SinkProfile } from '../tables/sink-profile.ts';
import type { TableFact } from './doctor-facts.ts';
import { CheckId, pass, problem, q, type CheckResult } from './doctor-results.ts';

/** Types that DMS maps to LOBs or whose values can outgrow one change record (1 MiB). */
const LOB_TYPES = new Set(['bytea', 'json', 'jsonb', 'xml', 'hstore']);
/** Types whose content is not in the logical stream: a large-object reference carries only its oid. */
const NOT_CARRIED_TYPES = new Set(['lo']);

/** Whether the key columns are all among the columns a delete's old tuple carries. */
function covers(carried: readonly string[], key: readonly string[]): boolean {
  return key.every((k) => carried.includes(k));
}

export function tableChecks(t: TableFact, user: string, sinks: SinkProfile = UNKNOWN_SINKS): CheckResult[] {
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
