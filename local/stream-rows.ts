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

/**
 * A streamed row: its text, kept as its UTF-8 bytes until it is read (`data`), and its LSN as two
 * 32-bit halves. The bytes of the rows waiting for the capture sit outside the V8 heap (`RowBytes`),
 * so the young generation's scavenges do not copy the waiting rows' text again and again, nor
 * promote it to the old generation (docs/performance-log.md, "50. The slot capture: less
 * optimizing compilation per start").
 */
export class StreamRow implements SlotRow {
  xid: string | null = null;
  constructor(
    readonly hi: number,
    readonly lo: number,
    private readonly bytes: Buffer,
    private readonly start: number,
    private readonly end: number,
  ) {}

  /** A row of the given text (its UTF-8 bytes in a buffer of its own). */
  static of(hi: number, lo: number, text: string): StreamRow {
    const bytes = Buffer.from(text, 'utf8');
    return new StreamRow(hi, lo, bytes, 0, bytes.length);
  }

  /** The row's text, decoded from its bytes as the message's UTF-8 text (each read decodes it again). */
  get data(): string {
    return this.bytes.toString('utf8', this.start, this.end);
  }

  /** `data.slice(offset)`: decoded from the `offset`-th byte on where the bytes before it are ASCII (one character each). */
  textFrom(offset: number): string {
    const from = this.start + offset;
    if (from > this.end) return '';
    for (let i = this.start; i < from; i++) if (this.bytes[i]! >= 0x80) return this.data.slice(offset);
    return this.bytes.toString('utf8', from, this.end);
  }

  /** Whether the text starts with `prefix` (ASCII), read from the bytes without the text. */
  begins(prefix: string): boolean {
    const n = prefix.length;
    if (this.end - this.start < n) return false;
    for (let i = 0; i < n; i++) if (this.bytes[this.start + i] !== prefix.charCodeAt(i)) return false;
    return true;
  }

  /** The LSN in PostgreSQL's text form. */
  get lsn(): string {
    return formatLsn(this.hi, this.lo);
  }
}

/** The block size `RowBytes` copies rows into; a row of more than a quarter of it gets a buffer of its own. */
const BLOCK_BYTES = 1 << 20;

/**
 * Where the stream keeps the bytes of the rows it receives: copied out of the protocol's message
 * (whose buffer the connection may write over) into blocks of 1 MiB outside the V8 heap, one after the
 * other; a block is freed with the last row that uses it.
 */
export class RowBytes {
  private block = Buffer.allocUnsafeSlow(BLOCK_BYTES);
  private used = 0;

  /** The row of LSN `hi/lo` whose text is `message` from byte `from` on. */
  row(hi: number, lo: number, message: Buffer, from: number): StreamRow {
    const n = message.length - from;
    if (n > BLOCK_BYTES / 4) {
      const own = Buffer.allocUnsafeSlow(n);
      message.copy(own, 0, from);
      return new StreamRow(hi, lo, own, 0, n);
    }
    if (this.used + n > BLOCK_BYTES) {
      this.block = Buffer.allocUnsafeSlow(BLOCK_BYTES);
      this.used = 0;
    }
    message.copy(this.block, this.used, from);
    const row = new StreamRow(hi, lo, this.block, this.used, this.used + n);
    this.used += n;
    return row;
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
