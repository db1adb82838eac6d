/**
 * The append's COPY text written from the events' own JSON text (docs/warehouse-apply.md, "The
 * critical path: append"; docs/performance-log.md, "57. The applier's decode in one pass"): each
 * cell copied from the span `decodeAppendable` found for its column, with no event object, row or
 * value in between. The bytes are those of `changelogCopyText` for the same events parsed today's
 * way (the equivalence test compares them); a load whose columns include a name an object's
 * prototype has writes through `changelogCopyText` itself over the parsed events.
 */
import { ValueKind, type AppendableEvent, type RowShape } from '../core/sink/appendable-event.ts';
import { parsedEvent } from '../core/sink/lazy-event.ts';
import { CdcColumn } from '../core/warehouse/warehouse-sql.ts';
import { CHUNK_BYTES, changelogCopyText, copyChars, grown, writeCell } from './warehouse-pg-copy-text.ts';
import { copyText } from './warehouse-pg-loaders.ts';

/** A column's cell, as a code (below zero: one of the event's own fields) or the slot of its value in a shape. */
const POSITION = -1;
const OP = -2;
const COMMIT_TS = -3;
const SCHEMA_VERSION = -4;
const TX_ID = -5;
const SYNTHETIC = -6;
const NULL_CELL = -7;
const APPLIED_AT = -8;

const FIELD_CODES: Readonly<Record<string, number>> = {
  [CdcColumn.POSITION]: POSITION,
  [CdcColumn.OP]: OP,
  [CdcColumn.COMMIT_TS]: COMMIT_TS,
  [CdcColumn.SCHEMA_VERSION]: SCHEMA_VERSION,
  [CdcColumn.TX_ID]: TX_ID,
  [CdcColumn.SYNTHETIC]: SYNTHETIC,
  // An appendable event has no missing columns: `changelogCopyText` writes NULL then.
  [CdcColumn.MISSING]: NULL_CELL,
  [CdcColumn.APPLIED_AT]: APPLIED_AT,
};

/** Per column of `columns`, its code or its slot in `shape` (the key's value first, then the after image's, else NULL: as `changelogRow`). */
function planOf(shape: RowShape, columns: readonly string[]): Int32Array {
  const plan = new Int32Array(columns.length);
  const nk = shape.keyNames.length;
  for (let j = 0; j < columns.length; j++) {
    const c = columns[j]!;
    const code = Object.hasOwn(FIELD_CODES, c) ? FIELD_CODES[c]! : undefined;
    if (code !== undefined) plan[j] = code;
    else {
      const k = shape.keyNames.indexOf(c);
      const a = k >= 0 || shape.afterNames === null ? -1 : shape.afterNames.indexOf(c);
      plan[j] = k >= 0 ? k : a >= 0 ? nk + a : NULL_CELL;
    }
  }
  return plan;
}

/** The COPY text of the value at `slot` of `e` (not a plain string or number: those are copied from the text). */
function valueText(e: AppendableEvent, slot: number): string {
  const s = e.spans[3 * slot]!;
  const end = e.spans[3 * slot + 1]!;
  switch (e.spans[3 * slot + 2]) {
    case ValueKind.ESCAPED_STRING:
      return copyText(JSON.parse(e.text.slice(s, end)) as string);
    case ValueKind.NUMBER:
      return String(Number(e.text.slice(s, end)));
    case ValueKind.TRUE:
      return 'true';
    case ValueKind.FALSE:
      return 'false';
    case ValueKind.NULL:
      return '\\N';
    default:
      return copyText(JSON.stringify(JSON.parse(e.text.slice(s, end))));
  }
}

/**
 * The changelog rows of `events` as COPY text in chunks of whole lines of about 64 KiB, as
 * `changelogCopyText` writes them for the same events parsed: each plain string's and plain
 * number's characters copied from the event's text, other values through their parsed value.
 */
export function* appendableCopyText(events: readonly AppendableEvent[], columns: readonly string[], appliedAt: string): Generator<Buffer> {
  if (columns.some((c) => !Object.hasOwn(FIELD_CODES, c) && c in Object.prototype)) {
    yield* changelogCopyText(events.map(parsedEvent), columns, appliedAt);
    return;
  }
  const plans = new Map<RowShape, Int32Array>();
  const appliedText = copyText(appliedAt);
  const last = columns.length - 1;
  let buf = Buffer.allocUnsafe(2 * CHUNK_BYTES);
  let len = 0;
  for (const e of events) {
    let plan = plans.get(e.shape);
    if (plan === undefined) plans.set(e.shape, (plan = planOf(e.shape, columns)));
    const t = e.text;
    for (let j = 0; j <= last; j++) {
      const p = plan[j]!;
      const kind = p >= 0 ? e.spans[3 * p + 2]! : -1;
      if (kind === ValueKind.PLAIN_STRING || kind === ValueKind.PLAIN_NUMBER) {
        // A plain string or number: its characters are its COPY text (no escapes, no control characters).
        const s = e.spans[3 * p]!;
        const n = e.spans[3 * p + 1]! - s;
        if (len + 3 * n + 1 > buf.length) buf = grown(buf, len, 3 * n + 1);
        len = copyChars(buf, len, t, s, n);
      } else {
        const text =
          p >= 0
            ? valueText(e, p)
            : p === POSITION
              ? e.position
              : p === OP
                ? e.op
                : p === COMMIT_TS
                  ? e.commitTs
                  : p === SCHEMA_VERSION
                    ? String(e.schemaVersion)
                    : p === TX_ID
                      ? (e.txId ?? '\\N')
                      : p === SYNTHETIC
                        ? e.synthetic
                          ? 'true'
                          : 'false'
                        : p === APPLIED_AT
                          ? appliedText
                          : '\\N';
        // The event's own strings have no escapes and no control characters (`decodeAppendable`): their COPY text is themselves.
        if (len + 3 * text.length + 1 > buf.length) buf = grown(buf, len, 3 * text.length + 1);
        len = writeCell(buf, len, text);
      }
      buf[len++] = j === last ? 0x0a : 0x09;
    }
    if (last < 0) buf[len++] = 0x0a;
    if (len >= CHUNK_BYTES) {
      yield buf.subarray(0, len);
      buf = Buffer.allocUnsafe(2 * CHUNK_BYTES);
      len = 0;
    }
  }
  if (len > 0) yield buf.subarray(0, len);
}
