import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { DecodedChange } from '../../../lambda/core/capture/decoded.ts';
import { applyColumnRules, applyColumnRulesToChange, applyColumnRulesToColumns, maskValue, MASKED_COLUMN_TYPE } from '../../../lambda/core/tables/masking.ts';

const sha = (s: string): string => createHash('sha256').update(s, 'utf8').digest('hex');

describe('maskValue', () => {
  it('hashes the text of a value: lower-case hex SHA-256', () => {
    // Known answer: SHA-256 of "abc".
    expect(maskValue('abc')).toBe('ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad');
    expect(maskValue('jane@example.com')).toBe(sha('jane@example.com'));
    expect(maskValue('')).toBe(sha(''));
    expect(maskValue('ünï')).toBe(sha('ünï'));
  });

  it('numbers hash as their text, so a number and its decimal string mask the same on every path', () => {
    expect(maskValue(5)).toBe(sha('5'));
    expect(maskValue(5)).toBe(maskValue('5'));
    expect(maskValue(-1.5)).toBe(sha('-1.5'));
  });

  it('booleans hash as true/false; null stays null; structures hash as their JSON', () => {
    expect(maskValue(true)).toBe(sha('true'));
    expect(maskValue(false)).toBe(sha('false'));
    expect(maskValue(null)).toBeNull();
    expect(maskValue([1, 'a'])).toBe(sha('[1,"a"]'));
  });

  it('is deterministic and tells values apart', () => {
    expect(maskValue('x')).toBe(maskValue('x'));
    expect(maskValue('x')).not.toBe(maskValue('y'));
    expect(maskValue('x')).toMatch(/^[0-9a-f]{64}$/);
  });
});

describe('applyColumnRules', () => {
  const row = { id: 1, email: 'jane@example.com', ssn: '123-45-6789', name: 'Jane', phone: null };

  it('removes excluded columns and masks masked ones, leaving the input alone', () => {
    const copy = structuredClone(row);
    const out = applyColumnRules(row, { mask: ['email', 'phone'], exclude: ['ssn'] });
    expect(out).toEqual({ id: 1, email: sha('jane@example.com'), name: 'Jane', phone: null });
    expect(out).not.toHaveProperty('ssn');
    expect(row).toEqual(copy);
  });

  it('does not invent columns the row does not hold (absent is not null)', () => {
    const out = applyColumnRules({ id: 1 }, { mask: ['email'], exclude: ['ssn'] });
    expect(out).toEqual({ id: 1 });
    expect(out).not.toHaveProperty('email');
  });

  it('without rules returns an equal copy', () => {
    const out = applyColumnRules(row, { mask: [], exclude: [] });
    expect(out).toEqual(row);
    expect(out).not.toBe(row);
  });
});

describe('applyColumnRulesToChange', () => {
  const change: DecodedChange = {
    v: 1,
    source: 's',
    table: 'public.customers',
    op: 'update',
    key: { id: 1 },
    after: { id: 1, email: 'new@example.com', name: 'J' },
    before: { id: 1, email: 'old@example.com', ssn: '1' },
    missing: ['ssn', 'bio'],
    position: '000000000000001000000000',
    commitTs: '2026-01-01T00:00:00Z',
    txId: '1',
    capture: 'slot',
    synthetic: false,
  };

  it('applies the rules to both images and drops excluded columns from missing', () => {
    const out = applyColumnRulesToChange(change, { mask: ['email'], exclude: ['ssn'] });
    expect(out.after).toEqual({ id: 1, email: sha('new@example.com'), name: 'J' });
    expect(out.before).toEqual({ id: 1, email: sha('old@example.com') });
    expect(out.missing).toEqual(['bio']);
    expect(out.key).toEqual({ id: 1 });
  });

  it('refuses rules on a key column', () => {
    expect(() => applyColumnRulesToChange(change, { mask: ['id'], exclude: [] })).toThrow(/^key\.id: primary-key column of public\.customers/);
    expect(() => applyColumnRulesToChange(change, { mask: [], exclude: ['id'] })).toThrow(/key\.id/);
  });
});

/**
 * DMS's `data-masking-hash-mask` is documented as SHA256 with an output of 64 characters (the
 * hex digest). These answers are fixed values computed by an independent SHA-256
 * implementation, not by the code under test: the local capture's masked bytes must be exactly
 * these (lower-case hex of the SHA-256 of the value's UTF-8 text). docs/masking.md.
 */
describe('masked bytes pinned to the DMS hash mask (SHA256, 64 hex characters)', () => {
  const known: [unknown, string][] = [
    ['abc', 'ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad'], // FIPS 180-2 example
    ['', 'e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855'],
    ['C6BGJ566669K', '7cb06784764c9030ccc41e25c15339feb293ffe9b329a72b5fed564e99900c75'], // the DMS guide's sample value
    ['héllo', '3c48591d8d098a4538f5e013dfcf406e948eac4d3277b10bf614e295d6068179'],
    // an int column (DMS casts it to a string first; the slot path delivers the number)
    [1234, '03ac674216f3e15c761ee1a5e255f067953623c8b388b4459e13f978d7c846f4'],
    ['1234', '03ac674216f3e15c761ee1a5e255f067953623c8b388b4459e13f978d7c846f4'],
    // a date column in ISO form
    ['1980-05-17', '4e9e1dbdc3fb8743bb7cc9bd3deee19a80644d2cb5e2d70167d2298ce23df2aa'],
    // an int8 beyond 2^53, carried as its exact text
    ['9007199254740993', 'a1c367c29158357e62a3ff5d3e800fb7698a22396439dbc0a9d4929322afd35d'],
  ];
  it.each(known)('%j → %s', (value, hex) => {
    expect(maskValue(value as string)).toBe(hex);
    expect(hex).toHaveLength(64);
  });
});

describe('applyColumnRulesToColumns: the registered type of a masked column', () => {
  const cols = [
    { name: 'id', type: 'integer', nullable: false },
    { name: 'pin', type: 'integer', nullable: true },
    { name: 'born', type: 'date', nullable: true },
    { name: 'doc', type: 'jsonb', nullable: true },
    { name: 'ssn', type: 'text', nullable: true },
    { name: 'u', type: null, nullable: true },
  ];
  const rules = { mask: ['pin', 'born', 'doc', 'u'], exclude: ['ssn'] };

  it('types every masked column as text, whatever its source type, and drops excluded ones', () => {
    expect(applyColumnRulesToColumns(cols, rules)).toEqual([
      { name: 'id', type: 'integer', nullable: false },
      { name: 'pin', type: MASKED_COLUMN_TYPE, nullable: true },
      { name: 'born', type: MASKED_COLUMN_TYPE, nullable: true },
      { name: 'doc', type: MASKED_COLUMN_TYPE, nullable: true },
      { name: 'u', type: MASKED_COLUMN_TYPE, nullable: true },
    ]);
    expect(MASKED_COLUMN_TYPE).toBe('text');
  });

  it('is idempotent (DMS records arrive already masked and widened) and leaves its input alone', () => {
    const once = applyColumnRulesToColumns(cols, rules);
    expect(applyColumnRulesToColumns(once, rules)).toEqual(once);
    expect(cols[1]!.type).toBe('integer');
    expect(applyColumnRulesToColumns(cols, { mask: [], exclude: [] })).toEqual(cols);
  });
});
