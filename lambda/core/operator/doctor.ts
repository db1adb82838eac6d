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
import type { SourceFacts } from './doctor-facts.ts';
import { pollChecks } from './doctor-poll.ts';
import { CheckId, pass, problem, q, type CheckResult } from './doctor-results.ts';
import { tableChecks } from './doctor-tables.ts';
import { UNKNOWN_SINKS, type SinkProfile } from '../tables/sink-profile.ts';

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

/** Human-readable bytes (`512 B`, `3.0 MiB`, `1.2 GiB`). */
export function formatBytes(n: number | null): string {
  if (n === null) return '-';
  const a = Math.abs(n);
  if (a < 1024) return `${n} B`;
  if (a < 1024 ** 2) return `${(n / 1024).toFixed(1)} KiB`;
  if (a < 1024 ** 3) return `${(n / 1024 ** 2).toFixed(1)} MiB`;
  return `${(n / 1024 ** 3).toFixed(1)} GiB`;
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
