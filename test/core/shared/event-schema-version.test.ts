/**
 * The schema-version rule of a change event (`assertSchemaVersion`), which `validateChangeEvent`
 * applies and the normalizer applies alone when it stamps a version on events it validated once.
 */
import { describe, expect, it } from 'vitest';
import { assertSchemaVersion, ENVELOPE_VERSION, validateChangeEvent } from '../../../lambda/core/shared/event.ts';
import { InvalidRecordError } from '../../../lambda/core/shared/errors.ts';
import { POSITION_LENGTH } from '../../../lambda/core/shared/position.ts';

const event = (schemaVersion: unknown): Record<string, unknown> => ({
  v: ENVELOPE_VERSION,
  source: 'shop',
  table: 'public.orders',
  op: 'insert',
  key: { id: 1 },
  after: { id: 1, note: 'x' },
  before: null,
  missing: [],
  position: '0'.repeat(POSITION_LENGTH),
  commitTs: '2026-12-02T00:00:00.000Z',
  txId: null,
  schemaVersion,
  capture: 'slot',
  synthetic: false,
});

describe('schema version of a change event', () => {
  it.each([0, -1, 1.5, '1', null, undefined, Number.NaN])('refuses %s, alone and inside validateChangeEvent', (bad) => {
    expect(() => assertSchemaVersion(bad)).toThrow(InvalidRecordError);
    expect(() => validateChangeEvent(event(bad))).toThrow(/schemaVersion/);
  });

  it('accepts a positive integer, and validateChangeEvent returns it', () => {
    expect(() => assertSchemaVersion(3)).not.toThrow();
    expect(validateChangeEvent(event(3)).schemaVersion).toBe(3);
  });
});
