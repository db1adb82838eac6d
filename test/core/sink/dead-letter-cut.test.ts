/** The one dead-letter size limit, shared by the DynamoDB control plane and the local poller: UTF-8 bytes, never half a character. */
import { describe, expect, test } from 'vitest';
import { cutUtf8, DEAD_LETTER_RECORD_MAX_BYTES } from '../../../lambda/core/shared/control-plane.ts';

describe('cutUtf8 / DEAD_LETTER_RECORD_MAX_BYTES', () => {
  test('the limit is 300 KiB of UTF-8', () => {
    expect(DEAD_LETTER_RECORD_MAX_BYTES).toBe(300 * 1024);
  });

  test('text within the limit is kept as it is', () => {
    expect(cutUtf8('héllo', 6)).toEqual({ text: 'héllo', cut: false });
  });

  test('a cut counts bytes, not characters, and drops a character it would split', () => {
    // 'é' is two bytes: 'h' + 'é' + 'l' = 4 bytes; a 2-byte cut would split 'é'.
    expect(cutUtf8('hél', 2)).toEqual({ text: 'h', cut: true });
    expect(cutUtf8('hél', 3)).toEqual({ text: 'hé', cut: true });
    const big = '€'.repeat(DEAD_LETTER_RECORD_MAX_BYTES); // 3 bytes each
    const { text, cut } = cutUtf8(big, DEAD_LETTER_RECORD_MAX_BYTES);
    expect(cut).toBe(true);
    expect(Buffer.byteLength(text, 'utf8')).toBeLessThanOrEqual(DEAD_LETTER_RECORD_MAX_BYTES);
    expect(Buffer.byteLength(text, 'utf8')).toBeGreaterThan(DEAD_LETTER_RECORD_MAX_BYTES - 3);
    expect(text).toBe('€'.repeat(text.length));
  });
});
