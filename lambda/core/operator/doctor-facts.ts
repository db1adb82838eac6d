/**
 * The facts the source pre-flight (lambda/core/operator/doctor.ts) judges, as the adapter gathers
 * them from the source's catalog (lambda/adapters/source-facts-pg.ts): its slots, its captured
 * tables, its settings and the capture user's grants.
 */
import type { NameTwin } from '../tables/sink-profile.ts';

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
