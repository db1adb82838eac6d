/**
 * New tables join by themselves (docs/onboarding.md): a catalog scan resolves the capture rules
 * (`TableRule`, contracts/table-config.ts) against the tables the source has now, checks each
 * matched table's eligibility with the doctor's own table checks (a usable key, carried types,
 * the SELECT grant: lambda/core/operator/doctor.ts), and records every verdict that changed in the audit
 * log: `table-discovered` (captured from now on, its snapshot requested), `table-ineligible` and
 * `table-excluded` (named with the reason: never skipped silently), `table-dropped` (gone from
 * the source: its registered table is paused with `TABLE_DROPPED`, its sink objects are kept).
 *
 * Pure logic over ports: the caller lists the catalog and reads table facts (locally and on AWS
 * lambda/adapters/source-facts-pg.ts), and says what "start capturing" means (locally: add the
 * table to the slot capture's index; on AWS DMS already selects it by pattern). The scan runs in
 * `cdc local` every few seconds and on AWS in the snapshot worker's schedule.
 */
import type { AuditEntry, ControlPlane } from '../shared/control-plane.ts';
import { tableEligibility } from '../operator/doctor-tables.ts';
import type { TableFact } from '../operator/doctor-facts.ts';
import { COLUMN_RULES_ACTION } from './late-rules.ts';
import { requestSnapshot } from '../snapshot/snapshot-worker.ts';
import { snapshotPending } from '../snapshot/snapshot.ts';
import { resolveByRules, type TableConfig, type TableRule } from './table-config.ts';
import { nameTwinRefusals, registrationOrder, UNKNOWN_SINKS, type NameTwin, type SinkProfile } from './sink-profile.ts';
import { tableNameRefusal } from '../warehouse/warehouse-names.ts';
import { CheckId } from '../operator/doctor-results.ts';

/** What the platform decided about a table a rule matched. */
export type DiscoveryVerdict = 'captured' | 'ineligible' | 'excluded' | 'dropped';

/** The audit action of each verdict. */
export const DISCOVERY_ACTIONS: Readonly<Record<DiscoveryVerdict, string>> = {
  captured: 'table-discovered',
  ineligible: 'table-ineligible',
  excluded: 'table-excluded',
  dropped: 'table-dropped',
};

/** The state reason of a registered table that was dropped from the source. */
export const TABLE_DROPPED = 'TABLE_DROPPED';

export interface DiscoveryRecord {
  table: string;
  verdict: DiscoveryVerdict;
  /** The rule's pattern. */
  rule: string;
  /** Why a table is not captured (each with its fix), or what it is captured with. */
  reasons: string[];
  at: string;
}

const VERDICT_OF_ACTION = new Map(Object.entries(DISCOVERY_ACTIONS).map(([v, a]) => [a, v as DiscoveryVerdict]));

/** The latest discovery verdict per table of one source, from its audit entries (in time order). */
export function latestVerdicts(entries: readonly AuditEntry[], sourceId: string): Map<string, DiscoveryRecord> {
  const out = new Map<string, DiscoveryRecord>();
  for (const e of entries) {
    const verdict = VERDICT_OF_ACTION.get(e.action);
    if (!verdict || e.source !== sourceId || e.table === null) continue;
    const reasons = Array.isArray(e.detail.reasons) ? (e.detail.reasons as unknown[]).map(String) : [];
    out.set(e.table, { table: e.table, verdict, rule: String(e.detail.rule ?? ''), reasons, at: e.at });
  }
  return out;
}

/** One table the rules name, before its eligibility is known. */
export type RuleMatch =
  { table: string; kind: 'candidate'; rule: TableRule; config: TableConfig } | { table: string; kind: 'excluded'; rule: TableRule; by: string };

/** The catalog tables the rules match, leaving out declared tables (their settings come first). */
export function matchRules(catalog: readonly string[], declared: ReadonlySet<string>, rules: readonly TableRule[]): RuleMatch[] {
  const out: RuleMatch[] = [];
  for (const table of [...catalog].sort()) {
    if (declared.has(table)) continue;
    const r = resolveByRules(rules, table);
    if (r.kind === 'rule') out.push({ table, kind: 'candidate', rule: r.rule, config: r.config });
    else if (r.kind === 'excluded') out.push({ table, kind: 'excluded', rule: r.rule, by: r.by });
  }
  return out;
}

/** What a scan needs. */
export interface DiscoveryDeps {
  controlPlane: ControlPlane;
  source: string;
  rules: readonly TableRule[];
  /** Declared tables (and the heartbeat table): never discovered, whatever the rules say. */
  declared: ReadonlySet<string>;
  /** Every `schema.table` of the source's catalog (ordinary and partitioned tables). */
  listTables(): Promise<string[]>;
  /** The doctor's facts of one table, with the key the rule declares (if any). */
  tableFact(table: string, key: string[] | null): Promise<TableFact>;
  /** The capture user (named in the SELECT-grant reason). */
  user: string;
  /** Starts capturing a table (called before its snapshot is requested, so the stream is first). */
  capture(config: TableConfig): void | Promise<void>;
  /** Stops capturing a dropped table. */
  release(table: string): void | Promise<void>;
  /** What the sinks the tables join can hold (docs/onboarding.md, "Names"). @default UNKNOWN_SINKS */
  sinks?: SinkProfile;
  /** Who writes the audit entries. @default 'discovery' */
  actor?: string;
  now?: () => Date;
}

export interface DiscoveryResult {
  /** Every table the rules matched, with its current verdict. */
  verdicts: DiscoveryRecord[];
  /** Tables whose verdict changed in this scan. */
  changed: DiscoveryRecord[];
  /** Settings of every table captured by a rule (to add to the capture on start). */
  captured: TableConfig[];
}

/**
 * One scan. `known` holds the verdicts of earlier scans (filled from the audit log on the first
 * call, then kept up to date); only changed verdicts are audited.
 */
export async function scanTables(
  d: DiscoveryDeps,
  known: Map<string, DiscoveryRecord> | null,
): Promise<{ result: DiscoveryResult; known: Map<string, DiscoveryRecord> }> {
  const now = d.now ?? (() => new Date());
  const actor = d.actor ?? 'discovery';
  const previous = known ?? latestVerdicts(await d.controlPlane.listAudit(d.source), d.source);
  const catalog = await d.listTables();
  const present = new Set(catalog);
  const verdicts: DiscoveryRecord[] = [];
  const changed: DiscoveryRecord[] = [];
  const captured: TableConfig[] = [];
  const at = (): string => now().toISOString();
  const record = async (r: DiscoveryRecord, detail: Record<string, unknown>): Promise<void> => {
    const before = previous.get(r.table);
    previous.set(r.table, r);
    if (before && before.verdict === r.verdict && before.reasons.join('\n') === r.reasons.join('\n')) return;
    changed.push(r);
    await d.controlPlane.appendAudit({
      at: r.at,
      actor,
      action: DISCOVERY_ACTIONS[r.verdict],
      source: d.source,
      table: r.table,
      outcome: 'done',
      detail: { rule: r.rule, reasons: r.reasons, ...(before ? { previously: before.verdict } : {}), ...detail },
    });
  };
  const matched = matchRules(catalog, d.declared, d.rules);
  const twins = await nameTwins(
    d,
    matched.filter((m) => m.kind === 'candidate').map((m) => m.table),
  );
  for (const m of matched) {
    if (m.kind === 'excluded') {
      const r: DiscoveryRecord = {
        table: m.table,
        verdict: 'excluded',
        rule: m.rule.match,
        reasons: [`excluded by rule ${m.rule.match} (excludeTables ${m.by})`],
        at: at(),
      };
      await record(r, { by: m.by });
      verdicts.push(previous.get(m.table)!);
      continue;
    }
    // A name that cannot be carried is refused by name; its catalog is not read by it (docs/onboarding.md, "Names").
    const named = tableNameRefusal(m.table);
    if (named !== null) {
      await d.release(m.table);
      const reasons = [`${CheckId.TABLE_NAME}: ${named} (fix: rename the table at the source, or leave it out: a rule's excludeTables)`];
      await record({ table: m.table, verdict: 'ineligible', rule: m.rule.match, reasons, at: at() }, {});
      verdicts.push(previous.get(m.table)!);
      continue;
    }
    // The rule's excluded columns never reach a sink: one that cannot be carried (a virtual generated
    // column) does not refuse the table once excluded (docs/types.md, "What is refused, and where").
    const fact: TableFact = { ...(await d.tableFact(m.table, m.config.key ?? null)), excluded: m.config.exclude, twin: twins.get(m.table) ?? null };
    const eligibility = tableEligibility(fact, d.user, d.sinks ?? UNKNOWN_SINKS);
    if (!eligibility.eligible) {
      await d.release(m.table);
      await record({ table: m.table, verdict: 'ineligible', rule: m.rule.match, reasons: eligibility.reasons, at: at() }, {});
      verdicts.push(previous.get(m.table)!);
      continue;
    }
    const key = m.config.key ?? fact.primaryKey;
    const config: TableConfig = { ...m.config, key: [...key] };
    captured.push(config);
    const before = previous.get(m.table);
    await d.capture(config);
    const r: DiscoveryRecord = {
      table: m.table,
      verdict: 'captured',
      rule: m.rule.match,
      reasons: [`captured by rule ${m.rule.match}: key (${key.join(', ')}), ${config.deleteMode} deletes`],
      at: at(),
    };
    await record(r, { key, deleteMode: config.deleteMode, mask: config.mask, exclude: config.exclude, snapshot: config.snapshot !== false });
    if (before?.verdict !== 'captured') {
      // The rules it joins with are the baseline a later mask or exclude is checked against (lambda/core/tables/late-rules.ts).
      await d.controlPlane.appendAudit({
        at: r.at,
        actor,
        action: COLUMN_RULES_ACTION,
        source: d.source,
        table: m.table,
        outcome: 'done',
        detail: { mask: [...config.mask], exclude: [...config.exclude], rule: m.rule.match },
      });
    }
    // A table that joins (for the first time, or again after a drop or once eligible) is snapshotted.
    if (before?.verdict !== 'captured' && config.snapshot !== false) {
      const run = await d.controlPlane.getSnapshot(d.source, m.table);
      if (!snapshotPending(run)) await requestSnapshot(d.controlPlane, { source: d.source, table: m.table, reason: 'added', actor, now: now() });
    }
    verdicts.push(previous.get(m.table)!);
  }
  // Tables that were seen and are gone: marked, stopped cleanly, their sink objects kept.
  for (const [table, r] of previous) {
    if (present.has(table) || r.verdict === 'dropped' || d.declared.has(table)) continue;
    await d.release(table);
    const when = at();
    const dropped: DiscoveryRecord = {
      table,
      verdict: 'dropped',
      rule: r.rule,
      reasons: [`dropped from the source (was ${r.verdict}); its sink objects are kept`],
      at: when,
    };
    await record(dropped, {});
    if (r.verdict === 'captured') await markDropped(d, table, when, actor);
  }
  return { result: { verdicts, changed, captured }, known: previous };
}

/** Pauses a dropped table that was registered, and ends its snapshot run if one was pending. */
async function markDropped(d: DiscoveryDeps, table: string, at: string, actor: string): Promise<void> {
  const run = await d.controlPlane.getSnapshot(d.source, table);
  if (run && snapshotPending(run)) {
    await d.controlPlane.putSnapshot(
      {
        ...run,
        status: 'failed',
        error: `${TABLE_DROPPED}: the table was dropped from the source`,
        owner: null,
        leaseUntil: 0,
        updatedAt: at,
        version: run.version + 1,
      },
      run.version,
      null,
    );
  }
  const t = await d.controlPlane.getTable(d.source, table);
  if (!t || t.state === 'paused') return;
  const reason = `${TABLE_DROPPED}: ${table} was dropped from the source; nothing more is captured, its sink objects are kept (docs/onboarding.md)`;
  await d.controlPlane.setTableState(d.source, table, 'paused', reason, {
    at,
    actor,
    action: 'pause',
    source: d.source,
    table,
    outcome: 'done',
    detail: { from: t.state, to: 'paused', reason },
  });
}

/**
 * The candidates refused because their name folds into another table's in a sink
 * (lambda/core/tables/sink-profile.ts), in registration order: tables registered already (their
 * first schema version's `registeredAt`, read only for tables that have a twin), declared tables,
 * then the rest.
 */
async function nameTwins(d: DiscoveryDeps, candidates: readonly string[]): Promise<Map<string, NameTwin>> {
  const sinks = d.sinks ?? UNKNOWN_SINKS;
  const registered = new Set((await d.controlPlane.listTables(d.source)).map((r) => r.table));
  const all = [...registered, ...d.declared, ...candidates];
  const rough = nameTwinRefusals(sinks, d.source, registrationOrder(all, new Map(), d.declared));
  if (rough.size === 0) return rough;
  const at = new Map<string, string>();
  for (const t of new Set([...rough.keys(), ...[...rough.values()].map((r) => r.first)])) {
    const v = registered.has(t) ? await d.controlPlane.getSchemaVersion(d.source, t, 1) : null;
    if (v) at.set(t, v.registeredAt);
  }
  return nameTwinRefusals(sinks, d.source, registrationOrder(all, at, d.declared));
}
