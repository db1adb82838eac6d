/**
 * `cdc doctor`: the source pre-flight a scheduler can run (docs/doctor.md). Gathers facts from
 * the source read-only (lambda/adapters/source-facts-pg.ts), runs the checks
 * (lambda/core/operator/doctor.ts) and prints each one with its fix. `cdc local` runs the same checks
 * before it starts.
 */
import pg from 'pg';
import { gatherSourceFacts, listSourceTables, readTableFact, type TableToCheck } from '../../lambda/adapters/source-facts-pg.ts';
import { formatReport, overallStatus, type CheckResult } from '../../lambda/core/operator/doctor-results.ts';
import { ruleTableChecks } from '../../lambda/core/operator/doctor-tables.ts';
import { runChecks } from '../../lambda/core/operator/doctor.ts';
import { matchRules } from '../../lambda/core/tables/discovery.ts';
import {
  nameTwinRefusals,
  registrationOrder,
  UNKNOWN_SINKS,
  WAREHOUSE_KINDS,
  type SinkProfile,
  type WarehouseKind,
} from '../../lambda/core/tables/sink-profile.ts';
import { tableNameRefusal } from '../../lambda/core/warehouse/warehouse-names.ts';
import { validateTableSettings, type TableRule } from '../../lambda/core/tables/table-config.ts';
import { DEFAULT_HEARTBEAT_SCHEMA, HEARTBEAT_TABLE } from '../../contracts/env.ts';
import { redactUrl } from '../../local/stack.ts';
import { EXIT_FAILED, EXIT_OK, UsageError, write, type CliIo, type Command, type CommandSpec } from './command.ts';
import { on, parseCommandLine, positiveInt, text, use, VOCABULARY } from './options.ts';
import { parseExcludeTablesOption, parseTablesOption, tableSettingEntries } from './table-args.ts';

export const DOCTOR: CommandSpec = {
  name: 'doctor',
  summary: 'check a PostgreSQL source before capturing it (PASS / WARN / FAIL with the fix)',
  usage: ['--source URL [--tables LIST] [options]'],
  description: `Checks, read-only, that a PostgreSQL source can be captured without hurting it and without
losing history: wal_level, free replication slots and WAL senders, max_slot_wal_keep_size,
the capture user's REPLICATION and SELECT grants, the heartbeat table and its writer, the
primary key and replica identity of every captured table, slots (ours and other tools')
pinning WAL or invalidated, TLS, and column types the pipeline cannot carry. Each check is
PASS, WARN or FAIL, with the fix.`,
  options: [
    use(VOCABULARY.source, { detail: 'Required.' }),
    use(VOCABULARY.tables, { detail: 'A pattern checks every table it matches: captured, excluded, or ineligible with the reason.' }),
    use(VOCABULARY.excludeTables),
    use(VOCABULARY.tableConfig, { detail: 'Declared keys are checked against the replica identity.' }),
    use(VOCABULARY.slot, { detail: "Its loss is a FAIL; other tools' slots are reported." }),
    use(VOCABULARY.heartbeatSchema, { default: 'public' }),
    use(VOCABULARY.heartbeatUser, { default: 'the --source user' }),
    use(VOCABULARY.slotFailBytes, { default: '1073741824' }),
    use(VOCABULARY.warehouseEngine),
    use(VOCABULARY.withSearch),
    use(VOCABULARY.json, { detail: 'Prints {"status", "checks": [...]}.' }),
  ],
  exits: { 0: 'no check failed (warnings allowed)', 1: 'a check failed, or the source cannot be reached' },
};

export interface DoctorArgs {
  sourceUrl: string;
  tables: string[];
  excludeTables: string[];
  tableConfig: string | null;
  slot: string | null;
  heartbeatSchema: string | null;
  heartbeatUser: string | null;
  slotFailBytes: number | null;
  sinks: SinkProfile;
  json: boolean;
}

export function parseDoctorArgs(args: readonly string[]): DoctorArgs {
  const { values } = parseCommandLine(DOCTOR, args);
  const sourceUrl = text(values, 'source');
  if (!sourceUrl) throw new UsageError('--source URL is required');
  const tables = text(values, 'tables');
  const exclude = text(values, 'exclude-tables');
  return {
    sourceUrl,
    tables: tables === null ? [] : parseTablesOption(tables),
    excludeTables: exclude === null ? [] : parseExcludeTablesOption(exclude),
    tableConfig: text(values, 'table-config'),
    slot: text(values, 'slot'),
    heartbeatSchema: text(values, 'heartbeat-schema'),
    heartbeatUser: text(values, 'heartbeat-user'),
    slotFailBytes: positiveInt(values, 'slot-fail-bytes'),
    sinks: { warehouse: warehouseKind(text(values, 'warehouse-engine')), search: on(values, 'with-search') },
    json: on(values, 'json'),
  };
}

function warehouseKind(v: string | null): WarehouseKind {
  if (v === null) return UNKNOWN_SINKS.warehouse!;
  if (!(WAREHOUSE_KINDS as readonly string[]).includes(v) || v === 'any') throw new UsageError(`--warehouse-engine: expected postgres or redshift, got '${v}'`);
  return v as WarehouseKind;
}

async function tablesToCheck(o: DoctorArgs): Promise<{ tables: TableToCheck[]; rules: TableRule[] }> {
  const { entries, origin } = await tableSettingEntries(o);
  const { tables, rules } = validateTableSettings(entries, origin);
  return { tables: tables.map((c) => ({ table: c.table, key: c.key ?? null, pollColumn: c.pollColumn ?? null, exclude: c.exclude })), rules };
}

/** Connects, gathers the facts and runs the checks. Throws when the source cannot be reached. */
export async function doctorSource(o: {
  sourceUrl: string;
  tables: readonly TableToCheck[];
  rules?: readonly TableRule[];
  slot?: string | null;
  heartbeatSchema?: string | null;
  heartbeatUser?: string | null;
  slotFailBytes?: number | null;
  applicationName?: string;
  /** What the sinks the tables join can hold. @default UNKNOWN_SINKS */
  sinks?: SinkProfile;
  /** The source id the sinks name the tables under (which names fold together does not depend on it). @default 'source' */
  sourceId?: string;
}): Promise<CheckResult[]> {
  const client = new pg.Client({ connectionString: o.sourceUrl, application_name: o.applicationName ?? 'cdc-doctor', connectionTimeoutMillis: 10_000 });
  client.on('error', () => undefined);
  await client.connect();
  try {
    const sinks = o.sinks ?? UNKNOWN_SINKS;
    const facts = await gatherSourceFacts(client, {
      tables: o.tables,
      ...(o.heartbeatSchema ? { heartbeatSchema: o.heartbeatSchema } : {}),
      ...(o.heartbeatUser ? { heartbeatWriter: o.heartbeatUser } : {}),
    });
    const declared = new Set([...o.tables.map((t) => t.table), `${o.heartbeatSchema ?? DEFAULT_HEARTBEAT_SCHEMA}.${HEARTBEAT_TABLE}`]);
    const matches = o.rules && o.rules.length > 0 ? matchRules(await listSourceTables(client), declared, o.rules) : [];
    // Names that fold into another table's in a sink: the first carried, every other refused (docs/onboarding.md, "Names").
    const candidates = matches.filter((m) => m.kind === 'candidate').map((m) => m.table);
    const twins = nameTwinRefusals(sinks, o.sourceId ?? 'source', registrationOrder([...declared, ...candidates], new Map(), declared));
    for (const t of facts.tables) t.twin = twins.get(t.table) ?? null;
    const results = runChecks(facts, { ownSlot: o.slot ?? null, sinks, ...(o.slotFailBytes ? { slotFailBytes: o.slotFailBytes } : {}) });
    if (matches.length === 0) return results;
    // Capture rules resolve against the catalog: every table they match is named with its verdict (docs/onboarding.md).
    const matched = [];
    for (const m of matches) {
      const readable = m.kind === 'candidate' && tableNameRefusal(m.table) === null;
      matched.push(
        m.kind === 'excluded'
          ? { table: m.table, rule: m.rule.match, excludedBy: m.by, fact: null }
          : {
              table: m.table,
              rule: m.rule.match,
              excludedBy: null,
              fact: readable ? { ...(await readTableFact(client, m.table, m.config.key ?? null, m.config.exclude)), twin: twins.get(m.table) ?? null } : null,
            },
      );
    }
    const tls = results.findIndex((r) => r.check === 'tls');
    const rulesChecks = ruleTableChecks(matched, facts.user.name, sinks);
    return tls < 0 ? [...results, ...rulesChecks] : [...results.slice(0, tls), ...rulesChecks, ...results.slice(tls)];
  } finally {
    await client.end().catch(() => undefined);
  }
}

export const doctorCommand: Command = {
  spec: DOCTOR,
  async run(args: string[], io: CliIo): Promise<number> {
    const o = parseDoctorArgs(args);
    const { tables, rules } = await tablesToCheck(o);
    let results: CheckResult[];
    try {
      results = await doctorSource({
        sourceUrl: o.sourceUrl,
        tables,
        rules,
        slot: o.slot,
        heartbeatSchema: o.heartbeatSchema,
        heartbeatUser: o.heartbeatUser,
        slotFailBytes: o.slotFailBytes,
        sinks: o.sinks,
      });
    } catch (err) {
      await write(io.stderr, `cdc doctor: cannot check the source ${redactUrl(o.sourceUrl)}: ${(err as Error).message}\n`);
      return EXIT_FAILED;
    }
    const status = overallStatus(results);
    if (o.json) await write(io.stdout, `${JSON.stringify({ status, checks: results })}\n`);
    else await write(io.stdout, `${formatReport(results).join('\n')}\n`);
    return status === 'FAIL' ? EXIT_FAILED : EXIT_OK;
  },
};
