/**
 * `cdc doctor`: the source pre-flight a scheduler can run (docs/doctor.md). Gathers facts from
 * the source read-only (lambda/adapters/source-facts-pg.ts), runs the checks
 * (lambda/core/operator/doctor.ts) and prints each one with its fix. `cdc local` runs the same checks
 * before it starts.
 */
import pg from 'pg';
import { gatherSourceFacts, listSourceTables, readTableFact, type TableToCheck } from '../../lambda/adapters/source-facts-pg.ts';
import { formatReport, overallStatus, ruleTableChecks, runChecks, type CheckResult } from '../../lambda/core/operator/doctor.ts';
import { matchRules } from '../../lambda/core/tables/discovery.ts';
import { validateTableSettings, type TableRule } from '../../lambda/core/tables/table-config.ts';
import { DEFAULT_HEARTBEAT_SCHEMA, HEARTBEAT_TABLE } from '../../contracts/env.ts';
import { redactUrl } from '../../local/stack.ts';
import { EXIT_FAILED, EXIT_OK, UsageError, write, type CliIo, type Command } from './command.ts';
import { parseExcludeTablesOption, parseTablesOption, tableSettingEntries } from './table-args.ts';

const HELP = `Usage: cdc doctor --source URL [--tables LIST] [options]

Checks, read-only, that a PostgreSQL source can be captured without hurting it and without
losing history: wal_level, free replication slots and WAL senders, max_slot_wal_keep_size,
the capture user's REPLICATION and SELECT grants, the heartbeat table and its writer, the
primary key and replica identity of every captured table, slots (ours and other tools')
pinning WAL or invalidated, TLS, and column types the pipeline cannot carry. Each check is
PASS, WARN or FAIL, with the fix.

Options:
  --source URL            the source, as the capture user sees it (postgres://user@host/db)
  --tables LIST           captured tables, comma separated (schema.table); a pattern
                          (public.*) checks every table it matches: captured, excluded, or
                          ineligible with the reason (docs/onboarding.md)
  --exclude-tables LIST   patterns the --tables patterns leave out (public.audit_*)
  --table-config FILE     captured-table settings (JSON array, see docs/local.md; entries
                          with "match" are capture rules); declared keys are checked
                          against the replica identity
  --slot NAME             the capture's own slot (its loss is a FAIL; others' are reported)
  --heartbeat-schema S    schema of the heartbeat table [default: public]
  --heartbeat-user ROLE   the role that writes the heartbeat [default: the --source user]
  --slot-fail-bytes N     retained WAL above which a slot is a FAIL [default: 1073741824]
  --json                  print {"status", "checks": [...]} instead of text
  -h, --help              this text

Exit code: 0 when no check failed (warnings allowed), 1 when a check failed or the source
cannot be reached, 2 for a usage error.
`;

export interface DoctorArgs {
  sourceUrl: string | null;
  tables: string[];
  excludeTables: string[];
  tableConfig: string | null;
  slot: string | null;
  heartbeatSchema: string | null;
  heartbeatUser: string | null;
  slotFailBytes: number | null;
  json: boolean;
  help: boolean;
}

export function parseDoctorArgs(args: readonly string[]): DoctorArgs {
  const o: DoctorArgs = { sourceUrl: null, tables: [], excludeTables: [], tableConfig: null, slot: null, heartbeatSchema: null, heartbeatUser: null, slotFailBytes: null, json: false, help: false };
  for (let i = 0; i < args.length; i++) {
    const a = args[i]!;
    const value = (): string => {
      const v = args[++i];
      if (v === undefined || v.startsWith('--')) throw new UsageError(`${a} needs a value`);
      return v;
    };
    switch (a) {
      case '-h':
      case '--help':
        o.help = true;
        break;
      case '--source':
        o.sourceUrl = value();
        break;
      case '--tables':
        o.tables = parseTablesOption(value());
        break;
      case '--exclude-tables':
        o.excludeTables = parseExcludeTablesOption(value());
        break;
      case '--table-config':
        o.tableConfig = value();
        break;
      case '--slot':
        o.slot = value();
        break;
      case '--heartbeat-schema':
        o.heartbeatSchema = value();
        break;
      case '--heartbeat-user':
        o.heartbeatUser = value();
        break;
      case '--slot-fail-bytes': {
        const text = value();
        const n = Number(text);
        if (!Number.isSafeInteger(n) || n <= 0) throw new UsageError(`--slot-fail-bytes expects a positive integer, got '${text}'`);
        o.slotFailBytes = n;
        break;
      }
      case '--json':
        o.json = true;
        break;
      default:
        throw new UsageError(`unknown option '${a}'`);
    }
  }
  if (!o.help && !o.sourceUrl) throw new UsageError('--source URL is required');
  return o;
}

async function tablesToCheck(o: DoctorArgs): Promise<{ tables: TableToCheck[]; rules: TableRule[] }> {
  const { entries, origin } = await tableSettingEntries(o);
  const { tables, rules } = validateTableSettings(entries, origin);
  return { tables: tables.map((c) => ({ table: c.table, key: c.key ?? null, pollColumn: c.pollColumn ?? null })), rules };
}

/** Connects, gathers the facts and runs the checks. Throws when the source cannot be reached. */
export async function doctorSource(o: { sourceUrl: string; tables: readonly TableToCheck[]; rules?: readonly TableRule[]; slot?: string | null; heartbeatSchema?: string | null; heartbeatUser?: string | null; slotFailBytes?: number | null; applicationName?: string }): Promise<CheckResult[]> {
  const client = new pg.Client({ connectionString: o.sourceUrl, application_name: o.applicationName ?? 'cdc-doctor', connectionTimeoutMillis: 10_000 });
  client.on('error', () => undefined);
  await client.connect();
  try {
    const facts = await gatherSourceFacts(client, {
      tables: o.tables,
      ...(o.heartbeatSchema ? { heartbeatSchema: o.heartbeatSchema } : {}),
      ...(o.heartbeatUser ? { heartbeatWriter: o.heartbeatUser } : {}),
    });
    const results = runChecks(facts, { ownSlot: o.slot ?? null, ...(o.slotFailBytes ? { slotFailBytes: o.slotFailBytes } : {}) });
    if (!o.rules || o.rules.length === 0) return results;
    // Capture rules resolve against the catalog: every table they match is named with its verdict (docs/onboarding.md).
    const declared = new Set([...o.tables.map((t) => t.table), `${o.heartbeatSchema ?? DEFAULT_HEARTBEAT_SCHEMA}.${HEARTBEAT_TABLE}`]);
    const matched = [];
    for (const m of matchRules(await listSourceTables(client), declared, o.rules)) {
      matched.push(m.kind === 'excluded' ? { table: m.table, rule: m.rule.match, excludedBy: m.by, fact: null } : { table: m.table, rule: m.rule.match, excludedBy: null, fact: await readTableFact(client, m.table, m.config.key ?? null) });
    }
    const tls = results.findIndex((r) => r.check === 'tls');
    const rulesChecks = ruleTableChecks(matched, facts.user.name);
    return tls < 0 ? [...results, ...rulesChecks] : [...results.slice(0, tls), ...rulesChecks, ...results.slice(tls)];
  } finally {
    await client.end().catch(() => undefined);
  }
}

export const doctorCommand: Command = {
  name: 'doctor',
  summary: 'check a PostgreSQL source before capturing it (PASS / WARN / FAIL with the fix)',
  async run(args: string[], io: CliIo): Promise<number> {
    const o = parseDoctorArgs(args);
    if (o.help) {
      await write(io.stdout, HELP);
      return EXIT_OK;
    }
    const { tables, rules } = await tablesToCheck(o);
    let results: CheckResult[];
    try {
      results = await doctorSource({ sourceUrl: o.sourceUrl!, tables, rules, slot: o.slot, heartbeatSchema: o.heartbeatSchema, heartbeatUser: o.heartbeatUser, slotFailBytes: o.slotFailBytes });
    } catch (err) {
      await write(io.stderr, `cdc doctor: cannot check the source ${redactUrl(o.sourceUrl!)}: ${(err as Error).message}\n`);
      return EXIT_FAILED;
    }
    const status = overallStatus(results);
    if (o.json) await write(io.stdout, `${JSON.stringify({ status, checks: results })}\n`);
    else await write(io.stdout, `${formatReport(results).join('\n')}\n`);
    return status === 'FAIL' ? EXIT_FAILED : EXIT_OK;
  },
};
