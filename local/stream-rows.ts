/**
 * The rows the replication stream keeps until the capture takes them (local/slot-stream.ts): the
 * text of each XLogData message, and its LSN kept as two 32-bit numbers and written as text only
 * when read (a COMMIT's LSN is its transaction's commit position; another row's only names where a
 * parse failed), so a row change costs no LSN strings and no `BigInt`s (docs/performance-log.md §37).
 */
import type { SlotRow } from '../lambda/core/capture/logical-text.ts';

/** An LSN in PostgreSQL's text form (`X/Y`, upper-case hexadecimal), from its two 32-bit halves. */
export function formatLsn(hi: number, lo: number): string {
  return `${hi.toString(16).toUpperCase()}/${lo.toString(16).toUpperCase()}`;
}

/** A streamed row: its text, and its LSN as two 32-bit halves. */
export class StreamRow implements SlotRow {
  xid: string | null = null;
  constructor(
    readonly hi: number,
    readonly lo: number,
    readonly data: string,
  ) {}

  /** The LSN in PostgreSQL's text form. */
  get lsn(): string {
    return formatLsn(this.hi, this.lo);
  }
}

/** Whether the LSN `hi/lo` is at or past `lsn`: compared as two numbers, without a `BigInt` per message. */
export function atOrPast(hi: number, lo: number, lsn: bigint): boolean {
  const lsnHi = Number(lsn >> 32n);
  return hi > lsnHi || (hi === lsnHi && lo >= Number(lsn & 0xffffffffn));
}

/**
 * Where one `take` of about `maxChanges` rows ends among the waiting transactions (`waiting`, in
 * commit order), starting at `from`: at least one transaction, then each next one while it fits.
 * `fixed` when a transaction beyond the end is waiting already, so transactions that arrive later
 * cannot join: the batch a `take` would hand out from `from` is then known before it is taken.
 */
export function batchEnd(waiting: readonly { length: number }[], from: number, maxChanges: number): { end: number; fixed: boolean } {
  let rows = 0;
  let end = from;
  while (end < waiting.length && (end === from || rows + waiting[end]!.length <= maxChanges)) rows += waiting[end++]!.length;
  return { end, fixed: end < waiting.length };
}
