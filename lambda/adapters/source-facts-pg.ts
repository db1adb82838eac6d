/**
 * Reads what the source pre-flight (lambda/core/operator/doctor.ts) and the slot monitor
 * (lambda/core/capture/slot-monitor.ts) decide on, from PostgreSQL's catalogs and statistics views, over
 * one connection. Read-only: nothing here writes to the source. Works on PostgreSQL 10 and later
 * (columns that came later are read through `to_jsonb`, so an older server just lacks them).
 */
import type pg from 'pg';
import { DEFAULT_HEARTBEAT_SCHEMA, HEARTBEAT_TABLE } from '../../contracts/env.ts';
import type { SourceIdentity } from '../core/capture/continuity.ts';
import type { SlotFact, SourceFacts, TableFact } from '../core/operator/doctor-facts.ts';
import { quoteIdent, splitTableId } from '../core/shared/identifiers.ts';
import type { CatalogTypes } from '../core/shared/catalog-types.ts';
import { partitionTree, type PartitionTree } from '../core/tables/partitions.ts';

type Queryable = Pick<pg.ClientBase, 'query'>;

/** A captured table to check: its id and the key the configuration declares, if any. */
export interface TableToCheck {
  table: string;
  key?: string[] | null;
  /** The poll column of a table configured `capture: 'poll'`. */
  pollColumn?: string | null;
  /** Columns the table's configuration excludes from capture (not checked for being carried). */
  exclude?: readonly string[];
}

export interface GatherOptions {
  tables: readonly TableToCheck[];
  /** Schema of the heartbeat table. @default public */
  heartbeatSchema?: string;
  /** The role that writes the heartbeat. @default the connected user */
  heartbeatWriter?: string;
}

const MIB = 1024 * 1024;

function num(v: unknown): number {
  return typeof v === 'number' ? v : Number(v);
}

function str(v: unknown): string | null {
  return typeof v === 'string' ? v : null;
}

/**
 * The source's system identifier and timeline (lambda/core/capture/continuity.ts), or null when this user
 * may not read them (`pg_control_system()`, `pg_control_checkpoint()`: superuser or `pg_monitor`
 * on some servers).
 */
export async function readSourceIdentity(client: Queryable): Promise<SourceIdentity | null> {
  try {
    const row = (
      await client.query('SELECT (SELECT system_identifier::text FROM pg_control_system()) AS sysid, (SELECT timeline_id FROM pg_control_checkpoint()) AS tli')
    ).rows[0] as { sysid: string; tli: number };
    return { systemIdentifier: row.sysid, timeline: Number(row.tli) };
  } catch {
    return null;
  }
}

/** `max_slot_wal_keep_size` in bytes, or null when unlimited (-1) or unknown to the server (before 13). */
export async function readMaxSlotWalKeepSize(client: Queryable): Promise<number | null> {
  const row = (await client.query(`SELECT setting, unit FROM pg_settings WHERE name = 'max_slot_wal_keep_size'`)).rows[0] as
    { setting: string; unit: string | null } | undefined;
  if (!row) return null;
  const n = Number(row.setting);
  if (!Number.isFinite(n) || n < 0) return null;
  // The setting is reported in MB (unit 'MB'); be exact about other units should a server report one.
  const unit = row.unit ?? 'MB';
  const factor = unit === 'kB' ? 1024 : unit === 'MB' ? MIB : unit === 'GB' ? 1024 * MIB : unit === '8kB' ? 8192 : MIB;
  return n * factor;
}

/** Every replication slot of the server (ours and anyone else's) with the WAL it retains. */
export async function readSlotFacts(client: Queryable): Promise<SlotFact[]> {
  // to_jsonb keeps this working across versions (wal_status/safe_wal_size from 13, invalidation_reason from 17).
  const res = await client.query(
    `SELECT to_jsonb(s) AS j,
            CASE WHEN s.restart_lsn IS NULL OR pg_is_in_recovery() THEN NULL
                 ELSE pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn)::text END AS retained
       FROM pg_replication_slots s ORDER BY s.slot_name`,
  );
  return res.rows.map((row: { j: Record<string, unknown>; retained: string | null }) => {
    const j = row.j;
    const safe = j.safe_wal_size;
    return {
      name: String(j.slot_name),
      slotType: String(j.slot_type),
      plugin: str(j.plugin),
      database: str(j.database),
      active: j.active === true,
      walStatus: str(j.wal_status),
      invalidationReason: str(j.invalidation_reason),
      restartLsn: str(j.restart_lsn),
      confirmedFlushLsn: str(j.confirmed_flush_lsn),
      retainedBytes: row.retained === null ? null : Number(row.retained),
      safeWalBytes: safe === null || safe === undefined ? null : num(safe),
    };
  });
}

async function tableFact(client: Queryable, t: TableToCheck): Promise<TableFact> {
  const { schema, table } = splitTableId(t.table);
  const declaredKey = t.key && t.key.length > 0 ? [...t.key] : null;
  const rel = (
    await client.query(
      `SELECT c.oid::int AS oid, c.relreplident AS ident, has_table_privilege(c.oid, 'SELECT') AS sel
         FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`,
      [schema, table],
    )
  ).rows[0] as { oid: number; ident: string; sel: boolean } | undefined;
  if (!rel)
    return { table: t.table, exists: false, primaryKey: [], declaredKey, replicaIdentity: null, identityIndexColumns: null, selectGranted: false, columns: [] };
  const indexColumns = async (flag: 'indisprimary' | 'indisreplident'): Promise<string[]> =>
    (
      await client.query(
        `SELECT a.attname AS name FROM pg_index i
           JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord) ON true
           JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
          WHERE i.indrelid = $1 AND i.${flag} ORDER BY k.ord`,
        [rel.oid],
      )
    ).rows.map((r) => String(r.name));
  const columns = (
    await client.query(
      `SELECT attname AS name, format_type(atttypid, NULL) AS type, format_type(atttypid, atttypmod) AS declared, CASE attgenerated WHEN 'v' THEN 'virtual' WHEN 's' THEN 'stored' END AS generated
         FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped ORDER BY attnum`,
      [rel.oid],
    )
  ).rows.map((r) => ({
    name: String(r.name),
    type: String(r.type),
    declaredType: String(r.declared),
    ...(r.generated ? { generated: r.generated as 'stored' | 'virtual' } : {}),
  }));
  const ident = rel.ident as TableFact['replicaIdentity'];
  return {
    table: t.table,
    exists: true,
    primaryKey: await indexColumns('indisprimary'),
    declaredKey,
    replicaIdentity: ident,
    identityIndexColumns: ident === 'i' ? await indexColumns('indisreplident') : null,
    selectGranted: rel.sel,
    columns,
    ...(t.exclude && t.exclude.length > 0 ? { excluded: [...t.exclude] } : {}),
    ...(t.pollColumn ? { pollColumn: t.pollColumn, ...(await pollFacts(client, rel.oid, t.pollColumn, columns, rel.sel)) } : {}),
  };
}

/** Row-level BEFORE triggers on INSERT and UPDATE (tgtype bits ROW 1, BEFORE 2, INSERT 4, UPDATE 16). */
const POLL_TRIGGER_SQL = `SELECT COALESCE(bool_or(tgenabled = 'A'), false) AS always, COALESCE(bool_or(tgenabled = 'O'), false) AS origin
   FROM pg_trigger WHERE tgrelid = $1 AND NOT tgisinternal AND (tgtype::int & 23) = 23`;

/** A polled table's write-side facts (docs/polling.md): its trigger, and whether rows with a NULL poll column exist. */
async function pollFacts(
  client: Queryable,
  oid: number,
  pollColumn: string,
  columns: Array<{ name: string }>,
  readable: boolean,
): Promise<Pick<TableFact, 'pollTrigger' | 'pollNulls'>> {
  const trig = (await client.query(POLL_TRIGGER_SQL, [oid])).rows[0] as { always: boolean; origin: boolean };
  const pollTrigger = trig.always ? 'always' : trig.origin ? 'origin' : 'none';
  // Unknown without the column or the SELECT grant (the select_grant check reports that).
  if (!readable || !columns.some((c) => c.name === pollColumn)) return { pollTrigger, pollNulls: null };
  const rel = (
    await client.query(`SELECT format('%I.%I', n.nspname, c.relname) AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1`, [
      oid,
    ])
  ).rows[0] as { name: string };
  const nulls = await client.query(`SELECT EXISTS (SELECT 1 FROM ${rel.name} WHERE ${quoteIdent(pollColumn)} IS NULL) AS any`);
  return { pollTrigger, pollNulls: Boolean((nulls.rows[0] as { any: boolean }).any) };
}

/** Gathers every fact the doctor checks, read-only. */
export async function gatherSourceFacts(client: Queryable, o: GatherOptions): Promise<SourceFacts> {
  const server = (
    await client.query(
      `SELECT current_setting('server_version_num')::int AS version, current_setting('wal_level') AS wal_level,
              current_setting('quote_all_identifiers') = 'on' AS quote_all, current_setting('TimeZone') AS time_zone,
              current_setting('max_replication_slots')::int AS max_slots, (SELECT count(*)::int FROM pg_replication_slots) AS used_slots,
              current_setting('max_wal_senders')::int AS max_senders, (SELECT count(*)::int FROM pg_stat_replication) AS used_senders,
              COALESCE((SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()), false) AS ssl,
              (inet_server_addr() IS NULL OR inet_server_addr() <<= '127.0.0.0/8'::inet OR inet_server_addr() = '::1'::inet) AS loopback`,
    )
  ).rows[0] as {
    version: number;
    wal_level: string;
    quote_all: boolean;
    time_zone: string;
    max_slots: number;
    used_slots: number;
    max_senders: number;
    used_senders: number;
    ssl: boolean;
    loopback: boolean;
  };
  const user = (
    await client.query(
      `SELECT current_user AS name, r.rolsuper AS super, r.rolreplication AS replication,
              EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'rds_replication') AND pg_has_role(current_user, 'rds_replication', 'member') AS rds,
              EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'pg_read_all_stats') AND pg_has_role(current_user, 'pg_read_all_stats', 'USAGE') AS read_all_stats
         FROM pg_roles r WHERE r.rolname = current_user`,
    )
  ).rows[0] as { name: string; super: boolean; replication: boolean; rds: boolean; read_all_stats: boolean };
  const schema = o.heartbeatSchema ?? DEFAULT_HEARTBEAT_SCHEMA;
  const writer = o.heartbeatWriter ?? user.name;
  const hb = (
    await client.query(
      `WITH w AS (SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $3) AS ok),
            t AS (SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND c.relname = $2)
       SELECT (SELECT ok FROM w) AS writer_exists,
              EXISTS (SELECT 1 FROM t) AS exists,
              CASE WHEN (SELECT ok FROM w) AND EXISTS (SELECT 1 FROM t)
                   THEN has_table_privilege($3, (SELECT oid FROM t), 'INSERT') AND has_table_privilege($3, (SELECT oid FROM t), 'UPDATE') ELSE false END AS writable,
              CASE WHEN (SELECT ok FROM w) AND EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)
                   THEN has_schema_privilege($3, $1, 'CREATE') ELSE false END AS can_create`,
      [schema, HEARTBEAT_TABLE, writer],
    )
  ).rows[0] as { writer_exists: boolean; exists: boolean; writable: boolean; can_create: boolean };
  const tables: TableFact[] = [];
  for (const t of o.tables) tables.push(await tableFact(client, t));
  return {
    serverVersionNum: server.version,
    walLevel: server.wal_level,
    quoteAllIdentifiers: server.quote_all,
    timeZone: server.time_zone,
    maxReplicationSlots: server.max_slots,
    usedReplicationSlots: server.used_slots,
    maxWalSenders: server.max_senders,
    usedWalSenders: server.used_senders,
    maxSlotWalKeepSizeBytes: await readMaxSlotWalKeepSize(client),
    user: { name: user.name, superuser: user.super, replication: user.replication, rdsReplication: user.rds, readAllStats: user.read_all_stats },
    ssl: server.ssl,
    loopback: server.loopback,
    heartbeat: {
      table: `${schema}.${HEARTBEAT_TABLE}`,
      exists: hb.exists,
      writer,
      writerExists: hb.writer_exists,
      writable: hb.writable,
      canCreate: hb.can_create,
    },
    slots: await readSlotFacts(client),
    tables,
  };
}

/** One table's facts for the doctor's table checks (eligibility of a table a capture rule matches). */
export async function readTableFact(client: Queryable, table: string, key: string[] | null, exclude: readonly string[] = []): Promise<TableFact> {
  return tableFact(client, { table, key, exclude });
}

/**
 * Every ordinary and partitioned table of the source (`schema.table`), system schemas left out:
 * what capture rules resolve against (docs/onboarding.md). Partitions of a partitioned table are
 * left out too: the root is the captured table, and the capture reports each partition's changes
 * under the root's name (`readPartitionTree`, docs/partitioned-tables.md). Every name is listed
 * as it is, whatever it holds: one the platform cannot carry (a `.` in it makes the id ambiguous)
 * is refused by name by the checks that register tables (docs/onboarding.md, "Names"), never
 * left out silently.
 */
export async function listSourceTables(client: Queryable): Promise<string[]> {
  const res = await client.query(
    `SELECT n.nspname || '.' || c.relname AS id
       FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE c.relkind IN ('r', 'p') AND NOT c.relispartition
        AND n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'
      ORDER BY 1`,
  );
  return res.rows.map((r: { id: string }) => r.id);
}

/** A table's primary-key columns in key order ($1 schema, $2 table): one definition for every reader of the source's catalog. */
export const PRIMARY_KEY_COLUMNS_SQL = `SELECT a.attname AS name FROM pg_index i
   JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
   CROSS JOIN LATERAL unnest(i.indkey) WITH ORDINALITY AS k(attnum, ord)
   JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.attnum
  WHERE n.nspname = $1 AND c.relname = $2 AND i.indisprimary ORDER BY k.ord`;

/**
 * A table's columns with their full types (`format_type(atttypid, atttypmod)`: `character
 * varying(20)`, `numeric(12,2)`) in table order, and its primary key (empty when it has none);
 * null when the table does not exist. What the normalizer registers a table first seen through a
 * type-less DMS record with (lambda/core/shared/catalog-types.ts).
 */
export async function readCatalogColumnTypes(client: Queryable, tableId: string): Promise<CatalogTypes | null> {
  const { schema, table } = splitTableId(tableId);
  const cols = await client.query<{ name: string; type: string }>(
    `SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type
       FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
      WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated <> 'v' ORDER BY a.attnum`,
    [schema, table],
  );
  if (cols.rows.length === 0) return null;
  const key = await client.query<{ name: string }>(PRIMARY_KEY_COLUMNS_SQL, [schema, table]);
  return { table: tableId, columns: cols.rows.map((r) => ({ name: r.name, type: r.type })), key: key.rows.map((r) => r.name) };
}

/**
 * The source's partition trees (docs/partitioned-tables.md): every partition, leaf or
 * intermediate, with the root of its tree (`pg_partition_root`, PostgreSQL 12 and later), in one
 * query. What the capture and the normalizer map a leaf's changes to its root with.
 */
export async function readPartitionTree(client: Queryable): Promise<PartitionTree> {
  // One snapshot: the edges and the tables of their own, as of the same moment.
  const res = await client.query<{ partition: string; root: string | null; leaf: boolean }>(
    `SELECT pn.nspname || '.' || p.relname AS partition, rn.nspname || '.' || r.relname AS root, p.relkind IN ('r', 'f') AS leaf
       FROM pg_class p JOIN pg_namespace pn ON pn.oid = p.relnamespace
       LEFT JOIN pg_class r ON p.relispartition AND r.oid = pg_partition_root(p.oid) LEFT JOIN pg_namespace rn ON rn.oid = r.relnamespace
      WHERE p.relkind IN ('r', 'p', 'f') AND pn.nspname NOT IN ('pg_catalog', 'information_schema') AND pn.nspname NOT LIKE 'pg\\_%'`,
  );
  const edges = res.rows.filter((r): r is { partition: string; root: string; leaf: boolean } => r.root !== null);
  return partitionTree(
    edges,
    res.rows.filter((r) => r.root === null).map((r) => r.partition),
  );
}

/** Which of `tables` (`schema.table`) hold at least one row (a table that does not exist holds none). */
export async function tablesHoldingRows(client: Queryable, tables: readonly string[]): Promise<Set<string>> {
  const out = new Set<string>();
  for (const t of tables) {
    // A name that is not a plain identifier is not read (such a table is not captured); one dropped meanwhile holds none.
    const name = (() => {
      try {
        const { schema, table } = splitTableId(t);
        return `${quoteIdent(schema)}.${quoteIdent(table)}`;
      } catch {
        return null;
      }
    })();
    if (name === null) continue;
    const r = await client.query<{ any: boolean }>(`SELECT EXISTS (SELECT 1 FROM ${name}) AS any`).catch(() => null);
    if (r?.rows[0]?.any) out.add(t);
  }
  return out;
}
