/**
 * The rows `PgWarehouse` writes besides the base (lambda/adapters/warehouse-pg.ts): an event's
 * changelog row, and the handover table's rows of held events and donors
 * (docs/primary-key-changes.md).
 */
import { CdcError } from '../core/shared/errors.ts';
import { ENVELOPE_VERSION, keyText, type CaptureMethod, type ChangeEvent, type ChangeOp, type JsonValue, type Row } from '../core/shared/event.ts';
import { handoverId, toParam, type Donor } from '../core/sink/apply-plan.ts';
import type { TableBatch } from '../core/warehouse/warehouse-port.ts';
import { CdcColumn } from '../core/warehouse/warehouse-sql.ts';

/** The changelog row of an event, as text values in `columns` order. */
export function changelogRow(e: ChangeEvent, columns: readonly string[], appliedAt: string): (string | null)[] {
  return columns.map((c) => {
    switch (c) {
      case CdcColumn.POSITION:
        return e.position;
      case CdcColumn.OP:
        return e.op;
      case CdcColumn.COMMIT_TS:
        return e.commitTs;
      case CdcColumn.SCHEMA_VERSION:
        return String(e.schemaVersion);
      case CdcColumn.TX_ID:
        return e.txId;
      case CdcColumn.SYNTHETIC:
        return e.synthetic ? 'true' : 'false';
      case CdcColumn.MISSING:
        return e.missing.length > 0 ? JSON.stringify(e.missing) : null;
      case CdcColumn.APPLIED_AT:
        return appliedAt;
      default:
        if (c in e.key) return toParam(e.key[c]);
        return e.after && c in e.after ? toParam(e.after[c]) : null;
    }
  });
}

/** A row of the handover table as read (text). */
export interface HandoverRow {
  _cdc_kind: string;
  _cdc_key: string;
  _cdc_position: string;
  _cdc_column: string;
  _cdc_value: string | null;
}

/** The envelope of a held event, kept in its `_cdc_column` '' row. */
export interface HeldEnvelope {
  op: ChangeOp;
  before: Row | null;
  missing: string[];
  handover?: string[];
  commitTs: string;
  txId: string | null;
  schemaVersion: number;
  capture: CaptureMethod;
  synthetic: boolean;
}

const keyOfText = (text: string): Row => Object.fromEntries(JSON.parse(text) as [string, JsonValue][]);

/** The donors and held events the handover table holds (see `createHandoverSql`). */
export function readHandover(rows: readonly HandoverRow[], batch: TableBatch): { donors: Map<string, Row>; held: ChangeEvent[] } {
  const donors = new Map<string, Row>();
  const held = new Map<string, { key: Row; position: string; envelope: HeldEnvelope | null; after: Row }>();
  for (const r of rows) {
    if (r._cdc_kind === 'donor') {
      const id = handoverId(keyOfText(r._cdc_key), r._cdc_position);
      const d = donors.get(id) ?? {};
      d[r._cdc_column] = r._cdc_value;
      donors.set(id, d);
    } else if (r._cdc_kind === 'event') {
      const id = `${r._cdc_key}\u0000${r._cdc_position}`;
      let h = held.get(id);
      if (!h) held.set(id, (h = { key: keyOfText(r._cdc_key), position: r._cdc_position, envelope: null, after: {} }));
      if (r._cdc_column === '') h.envelope = JSON.parse(r._cdc_value ?? 'null') as HeldEnvelope;
      else h.after[r._cdc_column] = r._cdc_value;
    } else {
      throw new CdcError('INVALID_STATE', `the handover table of ${batch.source}/${batch.table} holds a row of unknown kind ${JSON.stringify(r._cdc_kind)}`);
    }
  }
  const events: ChangeEvent[] = [];
  for (const h of held.values()) {
    const env = h.envelope;
    if (!env)
      throw new CdcError(
        'INVALID_STATE',
        `the handover table of ${batch.source}/${batch.table} holds values of an event at ${h.position} without its envelope`,
      );
    const e: ChangeEvent = {
      v: ENVELOPE_VERSION,
      source: batch.source,
      table: batch.table,
      op: env.op,
      key: h.key,
      after: env.op === 'delete' || env.op === 'truncate' ? null : { ...h.key, ...h.after },
      before: env.before,
      missing: env.missing,
      position: h.position,
      commitTs: env.commitTs,
      txId: env.txId,
      schemaVersion: env.schemaVersion,
      capture: env.capture,
      synthetic: env.synthetic,
    };
    if (env.handover && env.handover.length > 0) e.handover = env.handover;
    events.push(e);
  }
  return { donors, held: events };
}

/** The handover table's rows after an apply: the events still held and the donors still waiting. */
export function handoverRows(held: readonly ChangeEvent[], donors: readonly Donor[], keyColumns: readonly string[], appliedAt: string): (string | null)[][] {
  const rows: (string | null)[][] = [];
  for (const e of held) {
    const k = keyText(e.key);
    // Only the key of the before image is kept: it names the old key of a primary-key change.
    const before = e.before === null ? null : Object.fromEntries(keyColumns.filter((c) => c in e.before!).map((c) => [c, e.before![c]!]));
    const envelope: HeldEnvelope = {
      op: e.op,
      before,
      missing: e.missing,
      commitTs: e.commitTs,
      txId: e.txId,
      schemaVersion: e.schemaVersion,
      capture: e.capture,
      synthetic: e.synthetic,
    };
    if (e.handover && e.handover.length > 0) envelope.handover = e.handover;
    rows.push(['event', k, e.position, '', JSON.stringify(envelope), appliedAt]);
    for (const [c, v] of Object.entries(e.after ?? {})) if (!(c in e.key)) rows.push(['event', k, e.position, c, toParam(v), appliedAt]);
  }
  for (const d of donors) for (const [c, v] of Object.entries(d.values)) rows.push(['donor', keyText(d.key), d.position, c, toParam(v), appliedAt]);
  return rows;
}
