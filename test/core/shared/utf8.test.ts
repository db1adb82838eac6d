/**
 * Piecewise UTF-8 decoding (lambda/core/shared/utf8.ts): the pieces, the text and the lines are exactly
 * what decoding the whole buffer gives, over random buffers (seed and count printed): ASCII,
 * two-, three- and four-byte characters, invalid and truncated sequences, empty lines, no final
 * newline, lines longer than a piece, and piece sizes from 1 byte up.
 *
 * Runs: `CDC_UTF8_PROPERTY_RUNS` (default 2,000), seed `CDC_PROPERTY_SEED` (default random).
 */
import { describe, expect, it } from 'vitest';
import { DECODE_PIECE_BYTES, newlinePieces, utf8Lines, utf8Pieces, utf8Text } from '../../../lambda/core/shared/utf8.ts';
import { seededRandom } from '../../../local/seeded-random.ts';

const RUNS = Number(process.env.CDC_UTF8_PROPERTY_RUNS ?? 2000);
const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);

/** Byte sequences a buffer is made of: characters of every UTF-8 length, newlines, and bytes that are not valid UTF-8 where they stand. */
const ATOMS: number[][] = [
  [0x61],
  [0x7b, 0x22],
  [0x0a],
  [0x0a, 0x0a],
  [0xc3, 0xa9], // é
  [0xe2, 0x82, 0xac], // €
  [0xf0, 0x9f, 0x98, 0x80], // 😀
  [0xe2, 0x82], // a three-byte character cut short
  [0xf0, 0x9f], // a four-byte one cut short
  [0x80], // a continuation byte alone
  [0xff], // never valid
  [0xc3], // a lead byte alone
];

function randomBuffer(rand: () => number): Buffer {
  const bytes: number[] = [];
  const n = Math.floor(rand() ** 2 * 400);
  for (let i = 0; i < n; i++) {
    // Mostly plain text, so that lines are long enough to cross pieces.
    const atom = rand() < 0.7 ? ATOMS[0]! : ATOMS[Math.floor(rand() * ATOMS.length)]!;
    bytes.push(...atom);
  }
  return Buffer.from(bytes);
}

describe('piecewise UTF-8 decoding', () => {
  it(`gives what decoding the whole buffer gives: text, lines, pieces ending at newlines (${RUNS} random buffers)`, () => {
    console.log(`utf8 property: seed ${SEED}, ${RUNS} runs (replay with CDC_PROPERTY_SEED=${SEED})`);
    const rand = seededRandom(SEED);
    for (let run = 0; run < RUNS; run++) {
      const body = randomBuffer(rand);
      const piece = 1 + Math.floor(rand() * 64);
      const where = `run ${run}, seed ${SEED}, piece ${piece}, body ${body.toString('hex')}`;
      const whole = body.toString('utf8');
      expect(utf8Text(body, piece), where).toBe(whole);
      expect(utf8Lines(body, piece), where).toEqual(whole.split('\n').filter((l) => l.length > 0));
      const pieces = [...utf8Pieces(body, piece)];
      expect(pieces.join(''), where).toBe(whole);
      // Every piece but the last ends with a newline, and none is empty.
      for (const [i, p] of pieces.entries()) {
        expect(p.length, where).toBeGreaterThan(0);
        if (i < pieces.length - 1) expect(p.endsWith('\n'), where).toBe(true);
      }
      // The byte pieces (what a COPY is sent in) are the same cut: the body again, each ending at a newline.
      const bytes = [...newlinePieces(body, piece)];
      expect(Buffer.concat(bytes).equals(body), where).toBe(true);
      for (const [i, p] of bytes.entries()) if (i < bytes.length - 1) expect(p[p.length - 1], where).toBe(0x0a);
    }
  });

  it('decodes a buffer of many pieces at the default size, and a buffer with no newline at all, whole', () => {
    const line = `${'x'.repeat(100)}é€😀`;
    const body = Buffer.from(`${Array.from({ length: 3000 }, (_, i) => `${i}:${line}`).join('\n')}\n`);
    expect(body.length).toBeGreaterThan(4 * DECODE_PIECE_BYTES);
    expect(utf8Text(body)).toBe(body.toString('utf8'));
    expect(utf8Lines(body)).toHaveLength(3000);
    expect([...utf8Pieces(body)].length).toBeGreaterThan(4);
    const oneLine = Buffer.from('é'.repeat(3 * DECODE_PIECE_BYTES));
    expect([...utf8Pieces(oneLine)]).toEqual([oneLine.toString('utf8')]);
    expect(utf8Lines(Buffer.alloc(0))).toEqual([]);
    expect(utf8Text(Buffer.alloc(0))).toBe('');
  });
});
