/**
 * The stream's rows (local/stream-rows.ts): an LSN kept as two 32-bit numbers reads as the text
 * and compares as the 64-bit number it was before (random LSNs around the 32-bit boundary and
 * far above it), and a batch ends where `take` ended it before, and is known ahead only when
 * later transactions cannot join it; a row kept as its message's bytes reads as the text the
 * message held when it arrived, whatever the connection wrote into its buffer since (seed and
 * count printed).
 */
import { describe, expect, it } from 'vitest';
import { lsnToBigInt } from '../../local/slot-stream.ts';
import { atOrPast, batchEnd, formatLsn, RowBytes, StreamRow } from '../../local/stream-rows.ts';
import { rng } from '../helpers/rng.ts';

describe('stream rows', () => {
  it('read and compare their LSN as the 64-bit number it is (randomized)', () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1e9);
    const runs = Number(process.env.RUNS ?? 20_000);
    console.log(`stream rows: seed ${seed}, ${runs} LSN pairs`);
    const r = rng(seed);
    const half = (): number => (r() < 0.3 ? Math.floor(r() * 4) : r() < 0.2 ? 0xffffffff - Math.floor(r() * 3) : Math.floor(r() * 0x100000000));
    for (let i = 0; i < runs; i++) {
      const [hi, lo, hi2, lo2] = [half(), half(), half(), half()];
      const at = `seed ${seed}, pair ${i}: ${hi}/${lo} and ${hi2}/${lo2}`;
      const row = StreamRow.of(hi, lo, 'BEGIN 1');
      const v = (BigInt(hi) << 32n) | BigInt(lo);
      expect(lsnToBigInt(row.lsn), at).toBe(v);
      expect(row.lsn, at).toBe(`${hi.toString(16).toUpperCase()}/${lo.toString(16).toUpperCase()}`);
      const w = r() < 0.2 ? v : (BigInt(hi2) << 32n) | BigInt(lo2);
      expect(atOrPast(hi, lo, w), at).toBe(v >= w);
      expect(formatLsn(hi2, lo2), at).toBe(`${hi2.toString(16).toUpperCase()}/${lo2.toString(16).toUpperCase()}`);
    }
  });

  it('end a batch where take ended it, and call it fixed only when later transactions cannot change it (randomized)', () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1e9);
    const runs = Number(process.env.RUNS ?? 5_000);
    console.log(`batch ends: seed ${seed}, ${runs} queues`);
    const r = rng(seed);
    const queue = (n: number): { length: number }[] => Array.from({ length: n }, () => ({ length: 2 + Math.floor(r() * (r() < 0.1 ? 40 : 8)) }));
    for (let i = 0; i < runs; i++) {
      const waiting = queue(Math.floor(r() * 12));
      const from = Math.floor(r() * (waiting.length + 1));
      const max = Math.floor(r() * 30);
      const at = `seed ${seed}, queue ${i}: ${JSON.stringify(waiting.map((t) => t.length))} from ${from}, max ${max}`;
      // The loop take ran before: at least one transaction, then each next one while it fits.
      let rows = 0;
      let end = from;
      while (end < waiting.length && (end === from || rows + waiting[end]!.length <= max)) rows += waiting[end++]!.length;
      const cut = batchEnd(waiting, from, max);
      expect(cut.end, at).toBe(end);
      const later = batchEnd([...waiting, ...queue(1 + Math.floor(r() * 4))], from, max);
      if (cut.fixed) expect(later.end, at).toBe(cut.end);
      else expect(cut.end, at).toBe(waiting.length);
    }
  });

  it('keep the text of each message as it arrived, across blocks and after the message buffer is reused (randomized)', () => {
    const seed = Number(process.env.SEED ?? Date.now() % 1e9);
    const runs = Number(process.env.RUNS ?? 30_000);
    console.log(`row bytes: seed ${seed}, ${runs} messages`);
    const r = rng(seed);
    const pick = <T>(xs: readonly T[]): T => xs[Math.floor(r() * xs.length)]!;
    const pieces = [
      'BEGIN',
      'BEGIN 7',
      'BEGINé',
      'COMMIT 7 (at 2026-12-06 12:00:00+00)',
      'COMMI',
      'message: transactional: 1',
      'table public.t: INSERT: id[integer]:1',
      ' ',
      'ü',
      '€',
      '😀',
      "'",
      'x',
    ];
    const bytes = new RowBytes();
    // One message buffer, overwritten by every message (as a connection reuses its read buffer).
    const message = Buffer.alloc(2 << 20);
    const kept: { row: StreamRow; text: string }[] = [];
    for (let i = 0; i < runs; i++) {
      const at = `seed ${seed}, message ${i}`;
      let text = pick(pieces);
      const more = Math.floor(r() * (r() < 0.1 ? 3000 : 200));
      while (text.length < more) text += pick(pieces);
      // Now and then a row of more than a quarter of a block, or more than a block.
      if (r() < 0.001) text = text.repeat(Math.ceil(pick([300_000, 1_500_000]) / text.length));
      let body = Buffer.from(text, 'utf8');
      // Now and then bytes that are no UTF-8 (decoded to U+FFFD, as the text was before).
      if (r() < 0.02 && body.length > 2) body[Math.floor(r() * body.length)] = pick([0x80, 0xc3, 0xff]);
      if (body.length + 25 > message.length) body = body.subarray(0, message.length - 25);
      message.fill(0x41, 0, 25);
      body.copy(message, 25);
      const chunk = message.subarray(0, 25 + body.length);
      const arrived = chunk.toString('utf8', 25);
      const row = bytes.row(1, i, chunk, 25);
      expect(row.data, at).toBe(arrived);
      for (const p of ['BEGIN', 'COMMIT', 'message:']) expect(row.begins(p), `${at}: ${p}`).toBe(arrived.startsWith(p));
      expect(row.textFrom(6), at).toBe(arrived.slice(6));
      if (r() < 0.05) kept.push({ row, text: arrived });
      // The buffer is written over by what the connection reads next.
      message.fill(pick([0x00, 0x7b, 0xe2]), 0, chunk.length);
    }
    for (const k of kept) expect(k.row.data, `seed ${seed}`).toBe(k.text);
    expect(kept.length).toBeGreaterThan(runs / 40);
  });
});
