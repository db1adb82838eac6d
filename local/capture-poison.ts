/**
 * Poison in the local capture (docs/failures.md): what happens to a change the capture cannot
 * decode or build, decided per cause, never retried forever in silence.
 *
 * - **A relation's definition changed while running** (primary key redefined, replica identity
 *   changed): a change of a captured table whose tuple lacks a column of the key the capture
 *   holds makes it read the table's key from the catalog again before building the records
 *   (`refreshKeys`), with an audit entry when the key changed; the normalizer then sees the new
 *   key, and a key change pauses that table (docs/local.md, schema drift).
 * - **A change of a known, captured table that cannot be built into a record** (a delete without
 *   its old key: `REPLICA IDENTITY NOTHING` set after the start): goes to a dead letter (stage
 *   `capture`) with the parsed change and the reason, before the slot is acknowledged; its table
 *   is marked `degraded` when registered; capture goes on with the other changes (invariant 12).
 *   Nothing is lost: the dead letter holds the change as decoded.
 * - **Text of the output plugin that cannot be parsed** (`TestDecodingParseError`, or a malformed
 *   transaction structure): the capture cannot tell which table or transaction it belongs to, so
 *   it stops loudly with `CaptureUndecodableError`, an audit entry and a dead letter of the
 *   message; the slot is not acknowledged past it (the slot monitor's headroom alarm watches the
 *   WAL it pins). Every restart stops at the same place, loudly, until an operator acts.
 */
import type pg from 'pg';
import { CdcError, InvalidRecordError } from '../lambda/core/shared/errors.ts';
import type { AuditEntry, ControlPlane } from '../lambda/core/shared/control-plane.ts';
import { splitTableId } from '../lambda/core/shared/identifiers.ts';
import type { SlotChange } from '../lambda/core/capture/slot-record.ts';
import type { TableConfigIndex } from '../lambda/core/tables/table-config.ts';
import { tableOfLine, type DecodedTransaction } from '../lambda/core/capture/logical-text.ts';
import { primaryKeyOf } from './catalog.ts';
// The column rules applied as the capture applies them, so dead letters keep invariant 4 too.
import { ruled } from './capture-columns.ts';

/** The capture read output it cannot parse: it stopped rather than skip or retry it forever. */
export class CaptureUndecodableError extends CdcError {
  constructor(
    readonly slot: string,
    reason: string,
  ) {
    super(
      'CAPTURE_UNDECODABLE',
      `the capture cannot decode what slot ${JSON.stringify(slot)} returned (${reason}); it stopped without acknowledging it. ` +
        "Look at the dead letter (stage capture) and the source change at that position. If a setting of the capture's session changed what " +
        'test_decoding prints (quote_all_identifiers set on the database or role), reset it and start again: nothing was acknowledged, so nothing is lost; ' +
        'otherwise start over with a re-snapshot (docs/failures.md)',
    );
  }
}

/** The stage name of dead letters the capture writes. */
export const CAPTURE_STAGE = 'capture';
const ACTOR = 'capture';
const RECORD_LIMIT = 300 * 1024;

/** The columns that identify a change's row: the old key of a delete, the new tuple otherwise. */
function identifying(change: SlotChange): readonly { name: string }[] | null {
  return change.op === 'delete' ? change.oldKey : change.columns;
}

/** Whether a change carries every column of `key` (truncates identify no row). */
export function carriesKey(change: SlotChange, key: readonly string[]): boolean {
  if (change.op === 'truncate') return true;
  const tuple = identifying(change);
  if (tuple === null) return false;
  for (let k = 0; k < key.length; k++) {
    let found = false;
    for (let i = 0; i < tuple.length && !found; i++) found = tuple[i]!.name === key[k];
    if (!found) return false;
  }
  return true;
}

/** The key of a table as the catalog says now: declared, else the primary key; null when neither. */
async function catalogKey(client: Pick<pg.ClientBase, 'query'>, tables: TableConfigIndex, table: string): Promise<string[] | null> {
  const declared = tables.keyColumns(table);
  if (declared && declared.length > 0) return [...declared];
  const { schema, table: name } = splitTableId(table);
  const pk = await primaryKeyOf(client, schema, name);
  return pk.length > 0 ? pk : null;
}

export interface PoisonContext {
  source: string;
  slot: string;
  tables: TableConfigIndex;
  keys: Map<string, string[]>;
  controlPlane: ControlPlane;
  onError?: (err: unknown) => void;
}

function audit(ctx: PoisonContext, action: string, table: string | null, detail: Record<string, unknown>): AuditEntry {
  return { at: new Date().toISOString(), actor: ACTOR, action, source: ctx.source, table, outcome: 'done', detail: { slot: ctx.slot, ...detail } };
}

/**
 * Re-reads the key of every captured table whose changes in `transactions` lack a column of the
 * key held for it (the relation's definition changed while running). Audits each key that changed.
 */
export async function refreshKeys(client: Pick<pg.ClientBase, 'query'>, ctx: PoisonContext, transactions: readonly DecodedTransaction[]): Promise<void> {
  for (const table of staleKeys(ctx, transactions)) {
    const before = ctx.keys.get(table)!;
    const now = await catalogKey(client, ctx.tables, table);
    if (now && now.join(',') !== before.join(',')) {
      ctx.keys.set(table, now);
      await ctx.controlPlane.appendAudit(audit(ctx, 'capture-key-refreshed', table, { from: before, to: now }));
    }
  }
}

/**
 * The captured tables whose changes in `transactions` lack a column of the key held for them. The
 * loop over every change is this small function's, not `refreshKeys`'s: an async function with a
 * hot loop is compiled by the optimizing compiler on each start at a cost of tens of milliseconds
 * (docs/performance-log.md, "50. The slot capture: less optimizing compilation per start").
 */
export function staleKeys(ctx: Pick<PoisonContext, 'keys' | 'tables'>, transactions: readonly DecodedTransaction[]): Set<string> {
  const stale = new Set<string>();
  let table = '';
  let key: string[] | undefined;
  for (const tx of transactions) {
    const changes = tx.changes;
    for (let i = 0; i < changes.length; i++) {
      const c = changes[i]!;
      // Consecutive changes of one table: its key and whether it is captured looked up once.
      if (c.table !== table || i === 0) {
        table = c.table;
        const k = ctx.keys.get(table);
        key = k !== undefined && ctx.tables.has(table) ? k : undefined;
      }
      if (key !== undefined && !carriesKey(c, key)) stale.add(table);
    }
  }
  return stale;
}

/** A change the capture could not build into a record. */
export interface PoisonChange {
  tx: DecodedTransaction;
  index: number;
  change: SlotChange;
  error: InvalidRecordError;
}

/** Writes the dead letters of changes that could not be built (before the slot is acknowledged); the port marks their tables degraded. */
export async function deadLetterChanges(ctx: PoisonContext, poison: readonly PoisonChange[]): Promise<void> {
  for (const p of poison) {
    const rules = ctx.tables.columnRules(p.change.table);
    const change = {
      ...p.change,
      columns: ruled(p.change.columns, rules, undefined),
      oldKey: ruled(p.change.oldKey, rules, undefined),
      unchanged: p.change.unchanged.filter((u) => !rules.exclude.includes(u)),
    };
    const text = JSON.stringify({ xid: p.tx.xid, commitLsn: p.tx.commitLsn, commitTs: p.tx.commitTs, index: p.index, change });
    const truncated = text.length > RECORD_LIMIT;
    await ctx.controlPlane.putDeadLetter({
      at: new Date().toISOString(),
      stage: CAPTURE_STAGE,
      source: ctx.source,
      table: p.change.table,
      code: p.error.code,
      reason: p.error.message,
      origin: `slot ${ctx.slot} commit ${p.tx.commitLsn} #${p.index}`,
      record: truncated ? text.slice(0, RECORD_LIMIT) : text,
      truncated,
    });
  }
}

/**
 * The loud stop for output that cannot be parsed: a dead letter of the message, an audit entry,
 * and the named error to stop with. Errors while recording are reported, never hidden behind.
 */
export async function undecodable(ctx: PoisonContext, err: InvalidRecordError): Promise<CaptureUndecodableError> {
  const line = (err as { line?: unknown }).line;
  const offset = (err as { offset?: unknown }).offset;
  // Names as test_decoding prints them (quoted or not: lambda/core/capture/logical-text.ts).
  const table = typeof line === 'string' ? tableOfLine(line) : null;
  // Unparsed text cannot be masked: keep it (and the parser's message, which quotes it) only for a captured table without column rules.
  const rules = table && ctx.tables.has(table) ? ctx.tables.columnRules(table) : null;
  const keep = typeof line !== 'string' || (rules !== null && rules.mask.length === 0 && rules.exclude.length === 0);
  const reason = keep
    ? err.message
    : `test_decoding output could not be parsed at offset ${String(offset)} (the line is withheld: its table is unknown or has masked or excluded columns)`;
  const error = new CaptureUndecodableError(ctx.slot, reason);
  try {
    await ctx.controlPlane.putDeadLetter({
      at: new Date().toISOString(),
      stage: CAPTURE_STAGE,
      source: ctx.source,
      table: table && ctx.tables.has(table) ? table : null,
      code: error.code,
      reason,
      origin: `slot ${ctx.slot}`,
      record:
        typeof line !== 'string'
          ? err.message
          : keep
            ? line.slice(0, RECORD_LIMIT)
            : '(the output line is withheld: its table is unknown or has masked or excluded columns)',
      truncated: typeof line === 'string' && keep && line.length > RECORD_LIMIT,
    });
    await ctx.controlPlane.appendAudit(audit(ctx, 'capture-stopped', null, { code: error.code, reason }));
  } catch (e) {
    ctx.onError?.(e);
  }
  return error;
}
