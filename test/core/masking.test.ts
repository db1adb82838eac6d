import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import type { DecodedChange } from '../../lambda/core/decoded.ts';
import { applyColumnRules, applyColumnRulesToChange, maskValue } from '../../lambda/core/masking.ts';

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
