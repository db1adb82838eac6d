/**
 * The append's COPY text written straight from the batch's events (docs/warehouse-apply.md, "The
 * critical path: append"): one line per event in COPY's text format, each cell the COPY text of
 * the value `changelogRow` gives for its column, without the row array of text values in between
 * (it ran for every event appended; docs/performance-log.md, "Less Node work per appended event").
 * What each column takes from an event is decided once per load, not once per cell.
 */
import { toParam } from '../core/sink/apply-plan.ts';
import type { ChangeEvent } from '../core/shared/event.ts';
import { CdcColumn } from '../core/warehouse/warehouse-sql.ts';
import { copyText } from './warehouse-pg-loaders.ts';

/** The COPY text of one column's cell of an event. */
type Cell = (e: ChangeEvent) => string;

/** COPY's text for NULL. */
const NULL = '\\N';

/** The cell of a data or key column: the key's value, else the after image's, else NULL (as `changelogRow`). */
function valueCell(c: string): Cell {
  return (e) => {
    const v = c in e.key ? toParam(e.key[c]) : e.after && c in e.after ? toParam(e.after[c]) : null;
    return copyText(v ?? null);
  };
}

/** The cell of `column` (`appliedAt`: the batch's time, the same on every line). */
function cellOf(column: string, appliedAt: string): Cell {
  switch (column) {
    case CdcColumn.POSITION:
      return (e) => copyText(e.position);
    case CdcColumn.OP:
      return (e) => copyText(e.op);
    case CdcColumn.COMMIT_TS:
      return (e) => copyText(e.commitTs);
    case CdcColumn.SCHEMA_VERSION:
      return (e) => copyText(String(e.schemaVersion));
    case CdcColumn.TX_ID:
      return (e) => copyText(e.txId);
    case CdcColumn.SYNTHETIC:
      return (e) => (e.synthetic ? 'true' : 'false');
    case CdcColumn.MISSING:
      return (e) => (e.missing.length > 0 ? copyText(JSON.stringify(e.missing)) : NULL);
    case CdcColumn.APPLIED_AT: {
      const text = copyText(appliedAt);
      return () => text;
    }
    default:
      return valueCell(column);
  }
}

/** The COPY text line (with its newline) of an event's changelog row in `columns` order: the same text as `changelogRow`'s values through `copyText` (the equivalence test's reference for one line). */
export function changelogLineWriter(columns: readonly string[], appliedAt: string): (e: ChangeEvent) => string {
  const cells = columns.map((c) => cellOf(c, appliedAt));
  const last = cells.length - 1;
  if (last < 0) return () => '\n';
  return (e) => {
    let line = '';
    for (let j = 0; j < last; j++) line += `${cells[j]!(e)}\t`;
    return `${line}${cells[last]!(e)}\n`;
  };
}

/** A chunk of COPY text is handed to the stream once it holds at least this many bytes (fewer writes). */
export const CHUNK_BYTES = 1 << 16;

/**
 * The changelog rows of `events` as COPY text (the lines of `changelogLineWriter`), in chunks of
 * whole lines of about 64 KiB: each cell's text written as UTF-8 into the chunk's buffer, with no
 * line or chunk string in between (they were most of what the append allocated per event).
 */
export function* changelogCopyText(events: readonly ChangeEvent[], columns: readonly string[], appliedAt: string): Generator<Buffer> {
  const cells = columns.map((c) => cellOf(c, appliedAt));
  const last = cells.length - 1;
  let buf = Buffer.allocUnsafe(2 * CHUNK_BYTES);
  let len = 0;
  for (const e of events) {
    for (let j = 0; j <= last; j++) {
      const text = cells[j]!(e);
      // At most three UTF-8 bytes per UTF-16 unit (a surrogate pair's two make four), and the separator.
      if (len + 3 * text.length + 1 > buf.length) buf = grown(buf, len, 3 * text.length + 1);
      len = writeCell(buf, len, text);
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

/** Cells up to this many UTF-16 units are copied byte by byte while they are ASCII. */
const SHORT_CELL = 64;

/**
 * Writes a cell's text at `at` as UTF-8 and returns where it ends (the buffer has room for it). A
 * short ASCII cell (a position, a timestamp, a number, most keys) is copied byte by byte: one
 * native `write` per cell cost more than the copy (docs/performance-log.md, "54. Where the
 * rebuild's core-seconds go; the COPY text's short cells"). Anything else, from its first
 * non-ASCII unit on the whole cell again, goes through `write`.
 */
export function writeCell(buf: Buffer, at: number, text: string): number {
  return copyChars(buf, at, text, 0, text.length);
}

/** `writeCell` for the `n` units of `t` from `s` (a value inside an event's text: lambda/adapters/warehouse-pg-append-text.ts). */
export function copyChars(buf: Buffer, at: number, t: string, s: number, n: number): number {
  if (n > SHORT_CELL) return at + buf.write(s === 0 && n === t.length ? t : t.slice(s, s + n), at);
  for (let i = 0; i < n; i++) {
    const c = t.charCodeAt(s + i);
    if (c >= 0x80) return at + buf.write(s === 0 && n === t.length ? t : t.slice(s, s + n), at);
    buf[at + i] = c;
  }
  return at + n;
}

/** A buffer holding the first `len` bytes of `buf` with room for `more` bytes after them. */
export function grown(buf: Buffer, len: number, more: number): Buffer<ArrayBuffer> {
  const next = Buffer.allocUnsafe(Math.max(2 * buf.length, len + more));
  buf.copy(next, 0, 0, len);
  return next;
}
