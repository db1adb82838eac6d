/**
 * Late masking rules are loud (docs/masking.md, "Adding a rule to a live table"). A `mask` or
 * `exclude` added to a table that is already captured protects only what is captured from then
 * on: the change log's records, the archive's files and every sink's rows keep the clear values
 * they already hold. So such a change is accepted only with an explicit acknowledgement
 * (`acknowledgeLateRules`, a text saying who and why), and then:
 * - the audit log records it (`late-column-rules`) with what was left behind and how to rewrite
 *   the archive;
 * - the table is marked `needs-resnapshot` with reason `LATE_COLUMN_RULES` (sinks hold it) and a
 *   re-snapshot is requested, which writes the new (masked) values over the sinks' rows; columns
 *   the sinks keep (an excluded column stays in the warehouse mirror, docs/operations.md) need
 *   the sink rebuilt.
 * Without the acknowledgement the change is refused (`cdc local`: exit 3; on AWS the deployment
 * fails before the DMS task is changed), and the refusal is audited.
 *
 * The rules in force are recorded in the audit log (`column-rules`, one entry per table whose
 * rules changed); a table with no record yet is taken as it is (the first record is the baseline).
 */
import { matchesTablePattern, type ColumnRulesDocument } from '../../../contracts/table-config.ts';
import type { AuditEntry, ControlPlane } from '../shared/control-plane.ts';
import { CdcError } from '../shared/errors.ts';
import { requestSnapshot } from '../snapshot/snapshot-worker.ts';
import { snapshotPending } from '../snapshot/snapshot.ts';

export const COLUMN_RULES_ACTION = 'column-rules';
export const LATE_RULES_ACTION = 'late-column-rules';
/** State reason code of a table marked by an acknowledged late rule. */
export const LATE_COLUMN_RULES = 'LATE_COLUMN_RULES';

/** A table's column rules as captured now, with the acknowledgement for a late addition if given. */
export interface TableColumnRules {
  table: string;
  mask: readonly string[];
  exclude: readonly string[];
  acknowledgeLateRules?: string;
}

export interface LateRuleChange {
  table: string;
  addedMask: string[];
  addedExclude: string[];
  acknowledgement: string | null;
  /** What the platform says was left behind. */
  leftBehind: string;
}

/** The column rules last recorded per table of a source (from its audit entries, in time order). */
export function recordedColumnRules(entries: readonly AuditEntry[], sourceId: string): Map<string, { mask: string[]; exclude: string[] }> {
  const out = new Map<string, { mask: string[]; exclude: string[] }>();
  for (const e of entries) {
    if (e.action !== COLUMN_RULES_ACTION || e.outcome !== 'done' || e.source !== sourceId || e.table === null) continue;
    out.set(e.table, { mask: (e.detail.mask as string[]) ?? [], exclude: (e.detail.exclude as string[]) ?? [] });
  }
  return out;
}

/** The statement of what a late rule leaves behind. */
export function leftBehindStatement(table: string, columns: readonly string[]): string {
  return (
    `existing change-log records, archive files and sink rows of ${table} still hold the clear values of ${columns.join(', ')}: ` +
    "the new rule applies only to what is captured from now on. The table is marked for re-snapshot (new rows overwrite the sinks' values) " +
    'and sink rebuild (columns a sink keeps, such as an excluded column in the warehouse mirror, are not overwritten); ' +
    'rewrite the archive for it as docs/masking.md says ("Adding a rule to a live table"); the change log ages out with its retention'
  );
}

/** Pure: which of the `registered` tables get a mask or exclude they did not have when last recorded. */
export function lateRuleChanges(
  recorded: ReadonlyMap<string, { mask: readonly string[]; exclude: readonly string[] }>,
  registered: ReadonlySet<string>,
  next: readonly TableColumnRules[],
): LateRuleChange[] {
  const out: LateRuleChange[] = [];
  for (const t of next) {
    const before = recorded.get(t.table);
    if (!before || !registered.has(t.table)) continue;
    const addedMask = t.mask.filter((c) => !before.mask.includes(c) && !before.exclude.includes(c));
    // A masked column now excluded is not a leak (the log holds only its hash), so only clear ones count.
    const addedExclude = t.exclude.filter((c) => !before.exclude.includes(c) && !before.mask.includes(c));
    if (addedMask.length === 0 && addedExclude.length === 0) continue;
    out.push({
      table: t.table,
      addedMask,
      addedExclude,
      acknowledgement: t.acknowledgeLateRules ?? null,
      leftBehind: leftBehindStatement(t.table, [...addedMask, ...addedExclude]),
    });
  }
  return out;
}

/** A late rule without its acknowledgement: refused (exit 3 locally, a failed deployment on AWS). */
export class LateRulesRefusedError extends CdcError {
  constructor(readonly changes: readonly LateRuleChange[]) {
    super(
      'LATE_RULES_NOT_ACKNOWLEDGED',
      changes
        .map(
          (c) =>
            `${c.table}: ${[...c.addedMask.map((m) => `mask ${m}`), ...c.addedExclude.map((x) => `exclude ${x}`)].join(', ')} added while the table is captured; ${c.leftBehind}. To go on, acknowledge it: "acknowledgeLateRules": "<who and why>" on the table (CapturedTable option acknowledgeLateRules on AWS)`,
        )
        .join('\n'),
    );
  }
}

export interface LateRulesDeps {
  controlPlane: ControlPlane;
  source: string;
  /** Every captured table's column rules now. */
  tables: readonly TableColumnRules[];
  actor: string;
  now?: Date;
}

/** What `applyLateRuleChanges` needs besides the changes. */
export interface ApplyLateRulesDeps {
  controlPlane: ControlPlane;
  source: string;
  actor: string;
  now?: Date;
  /**
   * Whether to request each marked table's re-snapshot now. `cdc local` does (its handlers already
   * run with the new rules); a deployment marks first and requests once the functions and the
   * DMS task run with the new rules (`requestLateRuleResnapshots`).
   * @default true
   */
  requestSnapshots?: boolean;
}

/**
 * Refuses (audited, `LateRulesRefusedError`) when a change has no acknowledgement; otherwise
 * marks each changed table `needs-resnapshot` with reason `LATE_COLUMN_RULES` and its audit entry
 * (what was left behind), and requests its re-snapshot unless `requestSnapshots` is false. Nothing
 * is marked when one change is refused.
 */
export async function applyLateRuleChanges(d: ApplyLateRulesDeps, changes: readonly LateRuleChange[]): Promise<void> {
  const now = d.now ?? new Date();
  const at = now.toISOString();
  const audit = (table: string, outcome: 'done' | 'refused', detail: Record<string, unknown>): AuditEntry => ({
    at,
    actor: d.actor,
    action: LATE_RULES_ACTION,
    source: d.source,
    table,
    outcome,
    detail,
  });
  const refused = changes.filter((c) => c.acknowledgement === null);
  if (refused.length > 0) {
    for (const c of refused)
      await d.controlPlane.appendAudit(
        audit(c.table, 'refused', {
          addedMask: c.addedMask,
          addedExclude: c.addedExclude,
          refusal: 'no acknowledgement (acknowledgeLateRules)',
          leftBehind: c.leftBehind,
        }),
      );
    throw new LateRulesRefusedError(refused);
  }
  if (changes.length === 0) return;
  const registered = await d.controlPlane.listTables(d.source);
  for (const c of changes) {
    const t = registered.find((r) => r.table === c.table);
    if (!t) continue;
    const reason =
      `${LATE_COLUMN_RULES}: ${[...c.addedMask.map((m) => `mask ${m}`), ...c.addedExclude.map((x) => `exclude ${x}`)].join(', ')} added (acknowledged: ${c.acknowledgement}); ${c.leftBehind}`.slice(
        0,
        1024,
      );
    const detail = {
      addedMask: c.addedMask,
      addedExclude: c.addedExclude,
      acknowledgement: c.acknowledgement,
      leftBehind: c.leftBehind,
      needsResnapshot: true,
      needsSinkRebuild: true,
      archiveRewrite: 'docs/masking.md, "Adding a rule to a live table"',
    };
    if (t.state === 'needs-resnapshot') await d.controlPlane.appendAudit(audit(c.table, 'done', detail));
    else
      await d.controlPlane.setTableState(
        d.source,
        c.table,
        'needs-resnapshot',
        reason,
        audit(c.table, 'done', { ...detail, from: t.state, to: 'needs-resnapshot' }),
      );
    if (d.requestSnapshots === false) continue;
    const run = await d.controlPlane.getSnapshot(d.source, c.table);
    if (!snapshotPending(run)) await requestSnapshot(d.controlPlane, { source: d.source, table: c.table, reason: 'resnapshot', actor: d.actor, now });
  }
}

/**
 * Requests the re-snapshot of every table of the source that a late rule marked
 * (`needs-resnapshot` with reason `LATE_COLUMN_RULES`) and that has none pending. Returns the
 * tables requested. A deployment calls it after the functions and the DMS task run with the new
 * rules, so the re-snapshot's rows carry the new (masked) values.
 */
export async function requestLateRuleResnapshots(controlPlane: ControlPlane, o: { source: string; actor: string; now?: Date }): Promise<string[]> {
  const out: string[] = [];
  for (const t of await controlPlane.listTables(o.source)) {
    if (t.state !== 'needs-resnapshot' || !(t.stateReason ?? '').startsWith(`${LATE_COLUMN_RULES}:`)) continue;
    if (snapshotPending(await controlPlane.getSnapshot(o.source, t.table))) continue;
    const r = await requestSnapshot(controlPlane, { source: o.source, table: t.table, reason: 'resnapshot', actor: o.actor, now: o.now ?? new Date() });
    if (r.outcome === 'requested') out.push(t.table);
  }
  return out;
}

/**
 * Checks the rules in force against those recorded: refuses (audited, `LateRulesRefusedError`)
 * when a registered table got a mask or exclude without acknowledgement; otherwise marks each
 * acknowledged one for re-snapshot (with its audit entry and a snapshot request) and records the
 * rules of every table whose rules changed. Returns the acknowledged changes.
 */
export async function enforceLateRules(d: LateRulesDeps): Promise<LateRuleChange[]> {
  const at = (d.now ?? new Date()).toISOString();
  const entries = await d.controlPlane.listAudit(d.source);
  const recorded = recordedColumnRules(entries, d.source);
  const registered = await d.controlPlane.listTables(d.source);
  const changes = lateRuleChanges(recorded, new Set(registered.map((t) => t.table)), d.tables);
  await applyLateRuleChanges({ controlPlane: d.controlPlane, source: d.source, actor: d.actor, ...(d.now ? { now: d.now } : {}) }, changes);
  for (const t of d.tables) {
    const before = recorded.get(t.table);
    const same = before && before.mask.join(',') === [...t.mask].join(',') && before.exclude.join(',') === [...t.exclude].join(',');
    if (!same)
      await d.controlPlane.appendAudit({
        at,
        actor: d.actor,
        action: COLUMN_RULES_ACTION,
        source: d.source,
        table: t.table,
        outcome: 'done',
        detail: { mask: [...t.mask], exclude: [...t.exclude], ...(before ? { previous: before } : {}) },
      });
  }
  return changes;
}

/** A table's column rules under a deployment's `ColumnRulesDocument`, and whether a pattern rule gave them; null when it is not captured. */
export function resolveColumnRules(doc: ColumnRulesDocument, table: string): (TableColumnRules & { byRule: boolean }) | null {
  const own = doc.tables.find((t) => t.table === table);
  const ack = (a: string | undefined) => (a !== undefined ? { acknowledgeLateRules: a } : {});
  if (own) return { table, mask: own.mask, exclude: own.exclude, ...ack(own.acknowledgeLateRules), byRule: false };
  for (const r of doc.rules) {
    if (!matchesTablePattern(r.match, table)) continue;
    if (r.excludeTables.some((p) => matchesTablePattern(p, table))) return null;
    return { table, mask: r.mask, exclude: r.exclude, ...ack(r.acknowledgeLateRules), byRule: true };
  }
  return null;
}

/**
 * Pure: the late rules a deployment brings, between the previous and the new column rules, for
 * the `registered` tables captured under both. A pattern rule masks or excludes a column only in
 * the tables that have it (DMS applies it where the column exists), so for a table captured by a
 * rule the added columns are narrowed to `columnsOf(table)` when known.
 */
export function lateRuleChangesBetween(
  before: ColumnRulesDocument,
  after: ColumnRulesDocument,
  registered: Iterable<string>,
  columnsOf: (table: string) => readonly string[] | undefined = () => undefined,
): LateRuleChange[] {
  const recorded = new Map<string, { mask: readonly string[]; exclude: readonly string[] }>();
  const next: TableColumnRules[] = [];
  const tables = new Set(registered);
  for (const table of tables) {
    const b = resolveColumnRules(before, table);
    const a = resolveColumnRules(after, table);
    if (!b || !a) continue;
    recorded.set(table, { mask: b.mask, exclude: b.exclude });
    const cols = a.byRule ? columnsOf(table) : undefined;
    const has = (c: string) => cols === undefined || cols.includes(c) || b.mask.includes(c) || b.exclude.includes(c);
    next.push({
      table,
      mask: a.mask.filter(has),
      exclude: a.exclude.filter(has),
      ...(a.acknowledgeLateRules !== undefined ? { acknowledgeLateRules: a.acknowledgeLateRules } : {}),
    });
  }
  return lateRuleChanges(recorded, tables, next);
}
