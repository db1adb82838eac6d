/**
 * Decoding large UTF-8 buffers (an archive object, a snapshot chunk's COPY text) into strings.
 *
 * Node.js turns a buffer of a few hundred kilobytes into one string many times slower than the
 * same bytes in pieces of tens of kilobytes (measured: 54 MB of archive objects of 430 KB each,
 * 460–1,000 ms whole against 35–70 ms in 64 KiB pieces; docs/performance-log.md, "Two pieces of Node work that grew faster than their input"). So a large
 * buffer is decoded in pieces of about `DECODE_PIECE_BYTES` that each end right after a newline
 * byte. A newline (0x0A) is never part of a multi-byte UTF-8 sequence, so no character is split
 * and the text is exactly what decoding the whole buffer gives, invalid sequences (U+FFFD)
 * included; a line longer than a piece makes its piece longer. Pure, no I/O.
 */

/** Bytes per decoded piece (each piece then runs on to the next newline). */
export const DECODE_PIECE_BYTES = 64 * 1024;

const NEWLINE = 0x0a;

/** `body` in pieces of about `pieceBytes` that each end right after a newline (the last one at the end of the body); views, not copies. */
export function* newlinePieces(body: Buffer, pieceBytes: number = DECODE_PIECE_BYTES): Generator<Buffer> {
  let start = 0;
  while (start < body.length) {
    let end = body.length;
    if (start + pieceBytes < body.length) {
      const back = body.lastIndexOf(NEWLINE, start + pieceBytes - 1);
      if (back >= start) end = back + 1;
      else {
        const on = body.indexOf(NEWLINE, start + pieceBytes);
        if (on >= 0) end = on + 1;
      }
    }
    yield body.subarray(start, end);
    start = end;
  }
}

/** `body` decoded as UTF-8 in pieces that each end right after a newline (`newlinePieces`). */
export function* utf8Pieces(body: Buffer, pieceBytes: number = DECODE_PIECE_BYTES): Generator<string> {
  for (const piece of newlinePieces(body, pieceBytes)) yield piece.toString('utf8');
}

/** `body` decoded as UTF-8: the same string as `body.toString('utf8')`, decoded piece by piece. */
export function utf8Text(body: Buffer, pieceBytes: number = DECODE_PIECE_BYTES): string {
  if (body.length <= pieceBytes) return body.toString('utf8');
  let text = '';
  for (const piece of utf8Pieces(body, pieceBytes)) text += piece;
  return text;
}

/** The non-empty lines of `body` decoded as UTF-8 (a newline ends a line; the last may have none). */
export function utf8Lines(body: Buffer, pieceBytes: number = DECODE_PIECE_BYTES): string[] {
  const out: string[] = [];
  for (const piece of utf8Pieces(body, pieceBytes)) {
    let from = 0;
    for (;;) {
      const nl = piece.indexOf('\n', from);
      const to = nl < 0 ? piece.length : nl;
      if (to > from) out.push(piece.slice(from, to));
      if (nl < 0) break;
      from = nl + 1;
    }
  }
  return out;
}
