/**
 * The slot monitor's decision (docs/failures.md, "Capture slot filling the source disk"): for every replication
 * slot of a source (the capture's and anyone else's) the WAL it retains, its `wal_status`, whether
 * it is active, and the headroom left before the limit: the smaller of `max_slot_wal_keep_size`
 * (past it PostgreSQL invalidates the slot: a history gap) and the source's declared WAL budget
 * (what the source's owners agreed the capture may hold). Pure: the facts come from
 * lambda/adapters/source-facts-pg.ts, the handler (lambda/handlers/slot-monitor.ts) and
 * `cdc local` emit and show the result.
 *
 * Levels, per slot:
 * - `lost`: `wal_status = lost` or invalidated: the capture slot's history is gone (re-snapshot);
 * - `alarm`: headroom at or below `1 - alarmFraction` of the limit, or `wal_status = unreserved`
 *   (past max_slot_wal_keep_size; invalidated at the next checkpoint unless it catches up);
 * - `warn`: an inactive slot of another tool pinning at least `foreignInactiveWarnBytes`;
 * - `ok` otherwise.
 */
import type { SlotFact } from '../operator/doctor-facts.ts';
import { slotReportConsumerId } from '../../../contracts/control-plane-keys.ts';

export type SlotLevel = 'ok' | 'warn' | 'alarm' | 'lost';

export interface SlotReading {
  slot: string;
  /** Whether this is the capture's own slot. */
  ours: boolean;
  active: boolean;
  walStatus: string | null;
  /** The position up to which the slot's consumer confirmed changes (`confirmed_flush_lsn`), or null. */
  confirmedLsn?: string | null;
  retainedBytes: number | null;
  /** The limit headroom is measured against, or null when neither a WAL cap nor a budget is known. */
  limitBytes: number | null;
  /** Bytes left before the limit (0 once reached or lost), or null without a limit. */
  headroomBytes: number | null;
  level: SlotLevel;
  /** One line saying what was found (and what to do, for anything but ok). */
  message: string;
}

export interface SlotReport {
  /** Every slot, the capture's first. */
  slots: SlotReading[];
  /** The capture's own slot, or null when it does not exist (yet, or any more). */
  own: SlotReading | null;
  /** Bytes pinned by inactive slots of other tools (0 when none). */
  foreignInactiveBytes: number;
  /** The worst level over all slots. */
  level: SlotLevel;
}

export interface SlotMonitorOptions {
  /** The capture's slot name. */
  ownSlot: string;
  /** `max_slot_wal_keep_size` in bytes (null: unlimited). */
  maxSlotWalKeepSizeBytes: number | null;
  /** The source's declared WAL budget in bytes (null: none declared). */
  walBudgetBytes?: number | null;
  /** Share of the limit retained at which a slot alarms. @default 0.8 */
  alarmFraction?: number;
  /** Retained WAL of an inactive foreign slot worth a warning. @default 16 MiB (one WAL segment) */
  foreignInactiveWarnBytes?: number;
}

export const DEFAULT_ALARM_FRACTION = 0.8;
export const DEFAULT_FOREIGN_INACTIVE_WARN_BYTES = 16 * 1024 ** 2;

const RANK: Record<SlotLevel, number> = { ok: 0, warn: 1, alarm: 2, lost: 3 };

/** The headroom below which the monitor alarms, for a limit: what the CloudWatch alarm's threshold is computed from too. */
export function headroomAlarmThreshold(limitBytes: number, alarmFraction = DEFAULT_ALARM_FRACTION): number {
  return limitBytes - Math.ceil(limitBytes * alarmFraction);
}

function mib(n: number): string {
  return `${(n / 1024 ** 2).toFixed(1)} MiB`;
}

/** Assesses every slot of one source. */
export function assessSlots(slots: readonly SlotFact[], o: SlotMonitorOptions): SlotReport {
  const fraction = o.alarmFraction ?? DEFAULT_ALARM_FRACTION;
  if (!(fraction > 0 && fraction < 1)) throw new RangeError(`alarmFraction must be between 0 and 1, got ${fraction}`);
  const warnBytes = o.foreignInactiveWarnBytes ?? DEFAULT_FOREIGN_INACTIVE_WARN_BYTES;
  const limits = [o.maxSlotWalKeepSizeBytes, o.walBudgetBytes ?? null].filter((x): x is number => x !== null && x >= 0);
  const limit = limits.length > 0 ? Math.min(...limits) : null;
  const readings: SlotReading[] = [];
  let foreignInactiveBytes = 0;
  for (const s of slots) {
    const ours = s.name === o.ownSlot;
    const who = ours ? `capture slot ${s.name}` : `slot ${s.name} (not the capture's)`;
    const lost = s.walStatus === 'lost' || s.invalidationReason !== null;
    const retained = s.retainedBytes;
    const headroom = limit === null ? null : lost ? 0 : Math.max(0, limit - (retained ?? 0));
    let level: SlotLevel = 'ok';
    let message = `${who}: ${s.active ? 'active' : 'inactive'}, retains ${retained === null ? '-' : mib(retained)}${headroom === null ? '' : `, headroom ${mib(headroom)} of ${mib(limit!)}`}`;
    if (lost) {
      level = 'lost';
      message = ours
        ? `${who} was invalidated (wal_status ${s.walStatus ?? '-'}, reason ${s.invalidationReason ?? '-'}): its history is gone; the captured tables need a re-snapshot`
        : `${who} was invalidated (wal_status ${s.walStatus ?? '-'}); drop it: SELECT pg_drop_replication_slot('${s.name}')`;
    } else if (s.walStatus === 'unreserved' || (headroom !== null && limit !== null && headroom <= headroomAlarmThreshold(limit, fraction))) {
      level = 'alarm';
      message +=
        s.walStatus === 'unreserved'
          ? ': past max_slot_wal_keep_size, invalidated at the next checkpoint unless it catches up'
          : `: under ${Math.round((1 - fraction) * 100)}% headroom`;
      message += ours ? '; let the capture drain or raise the budget' : `; if its tool is gone: SELECT pg_drop_replication_slot('${s.name}')`;
    } else if (!ours && !s.active && (retained ?? 0) >= warnBytes) {
      level = 'warn';
      message += `: an inactive slot of another tool pinning WAL; if its tool is gone: SELECT pg_drop_replication_slot('${s.name}')`;
    }
    if (!ours && !s.active && !lost) foreignInactiveBytes += retained ?? 0;
    readings.push({
      slot: s.name,
      ours,
      active: s.active,
      walStatus: s.walStatus,
      confirmedLsn: s.confirmedFlushLsn,
      retainedBytes: retained,
      limitBytes: limit,
      headroomBytes: headroom,
      level,
      message,
    });
  }
  readings.sort((a, b) => Number(b.ours) - Number(a.ours));
  const level = readings.reduce<SlotLevel>((w, r) => (RANK[r.level] > RANK[w] ? r.level : w), 'ok');
  return { slots: readings, own: readings.find((r) => r.ours) ?? null, foreignInactiveBytes, level };
}

/**
 * The slot monitor's latest report of one source as `cdc status` shows it (docs/doctor.md, "The
 * slot monitor"): kept in the control plane by the monitor after each run, read by the operator.
 */
export interface StoredSlotReport {
  source: string;
  /** The capture's slot name. */
  slot: string;
  /** When the monitor measured (ISO-8601). */
  at: string;
  level: SlotLevel;
  foreignInactiveBytes: number;
  slots: SlotReading[];
  /**
   * The named stop when the capture's slot is gone or invalidated (its history cannot be read:
   * the captured tables need a re-snapshot), else null.
   */
  stop: string | null;
}

/** Where the latest report of a source is kept in the control plane (a checkpoint item: consumer, shard). */
export function slotReportCheckpoint(sourceId: string): [string, string] {
  return [slotReportConsumerId(sourceId), 'report'];
}

/** The named stop of a report: the capture's slot missing or invalidated, else null. */
export function slotStop(report: SlotReport, slot: string): string | null {
  if (!report.own) {
    return `HISTORY_GAP: the capture slot ${JSON.stringify(slot)} does not exist on the source: a capture that had a checkpoint cannot read its history any more (its tables are marked needs-resnapshot); re-snapshot them`;
  }
  if (report.own.level === 'lost') return `HISTORY_GAP: ${report.own.message}`;
  return null;
}

/** The stored form of a report. */
export function storedSlotReport(sourceId: string, slot: string, report: SlotReport, at: Date): StoredSlotReport {
  return {
    source: sourceId,
    slot,
    at: at.toISOString(),
    level: report.level,
    foreignInactiveBytes: report.foreignInactiveBytes,
    slots: report.slots,
    stop: slotStop(report, slot),
  };
}

const LEVELS: readonly SlotLevel[] = ['ok', 'warn', 'alarm', 'lost'];

/**
 * Reads a stored report back; throws `RangeError` naming what is wrong (the operator shows the
 * problem instead of the report, never a guess).
 */
export function parseStoredSlotReport(text: string, where: string): StoredSlotReport {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new RangeError(`${where}: the stored slot report is not JSON`);
  }
  const r = v as Partial<StoredSlotReport> | null;
  const fail = (what: string): never => {
    throw new RangeError(`${where}: the stored slot report has no valid ${what}`);
  };
  if (r === null || typeof r !== 'object') return fail('object');
  if (typeof r.source !== 'string') fail('source');
  if (typeof r.slot !== 'string') fail('slot');
  if (typeof r.at !== 'string' || Number.isNaN(Date.parse(r.at))) fail('at');
  if (!LEVELS.includes(r.level as SlotLevel)) fail('level');
  if (typeof r.foreignInactiveBytes !== 'number') fail('foreignInactiveBytes');
  if (!Array.isArray(r.slots) || !r.slots.every((x) => x !== null && typeof x === 'object' && typeof x.slot === 'string' && LEVELS.includes(x.level)))
    fail('slots');
  if (r.stop !== null && typeof r.stop !== 'string') fail('stop');
  return r as StoredSlotReport;
}
