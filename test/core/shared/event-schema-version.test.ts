/**
 * The schema-version rule of a change event (`assertSchemaVersion`), which `validateChangeEvent`
 * applies and the normalizer applies alone when it stamps a version on events it validated once;
 * and `validateDecodedChange`, the normalizer's check of a decoded change with a version given,
 * against `validateChangeEvent` of the change copied with that version (randomized, seed printed).
 */
import { describe, expect, it } from 'vitest';
import { assertSchemaVersion, ENVELOPE_VERSION, validateChangeEvent, validateDecodedChange, type ChangeEvent } from '../../../lambda/core/shared/event.ts';
import { InvalidRecordError } from '../../../lambda/core/shared/errors.ts';
import { POSITION_LENGTH } from '../../../lambda/core/shared/position.ts';
import { seededRandom } from '../../../local/seeded-random.ts';

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

describe('validateDecodedChange', () => {
  /** Per field: values that pass and values that do not. */
  const FIELDS: Record<string, unknown[]> = {
    v: [ENVELOPE_VERSION, 2, '1'],
    source: ['shop', 'other_1', '', 'Shop', null],
    table: ['public.orders', 's.u', 'public', 'a.b.c', 7],
    op: ['insert', 'update', 'delete', 'truncate', 'snapshot', 'upsert'],
    key: [{ id: 1 }, { id: 'a', k: true }, {}, { id: null }, { id: { x: 1 } }, [1], null],
    after: [{ id: 1, note: 'x' }, null, undefined, { n: 2 ** 60 }, { n: -0 }, 'x'],
    before: [null, undefined, { id: 1 }, 5],
    missing: [[], ['note'], ['id'], [1], 'note', undefined],
    position: ['0'.repeat(POSITION_LENGTH), '1'.repeat(POSITION_LENGTH), '0', 'x'.repeat(POSITION_LENGTH), 0],
    commitTs: ['2026-12-02T00:00:00.000Z', '2026-12-02T00:00:01Z', '', 'yesterday', null],
    txId: [null, undefined, '42', 42],
    capture: ['slot', 'dms', 'poll', 'snapshot', 'cdc', null],
    synthetic: [false, true, undefined, 'no'],
    handover: [undefined, null, [], ['note'], [3]],
  };
  const RUNS = Number(process.env.CDC_PROPERTY_RUNS ?? 2000);
  const SEED = process.env.CDC_PROPERTY_SEED !== undefined ? Number(process.env.CDC_PROPERTY_SEED) : Math.floor(Math.random() * 0x7fffffff);

  it(`returns what validateChangeEvent returns for the change copied with the version, or throws the same error; a new object, the change untouched (${RUNS} changes)`, () => {
    console.log(`validateDecodedChange: seed ${SEED}, ${RUNS} changes (replay with CDC_PROPERTY_SEED=${SEED})`);
    const rnd = seededRandom(SEED);
    let valid = 0;
    for (let i = 0; i < RUNS; i++) {
      // Mostly valid fields, so that a run reaches every check.
      const change: Record<string, unknown> = {};
      for (const [field, values] of Object.entries(FIELDS)) {
        const v = rnd() < 0.85 ? values[0] : values[Math.floor(rnd() * values.length)];
        if (v !== undefined) change[field] = v;
      }
      if (change.op === 'delete' || change.op === 'truncate') change.after = rnd() < 0.9 ? null : change.after;
      const version = [1, 3, 0, 1.5][Math.floor(rnd() * 4)]!;
      const before = JSON.stringify(change);
      const what = `change ${i} (seed ${SEED}): ${before} at version ${version}`;
      let want: ChangeEvent | Error;
      let got: ChangeEvent | Error;
      try {
        want = validateChangeEvent({ ...change, schemaVersion: version });
      } catch (e) {
        want = e as Error;
      }
      try {
        got = validateDecodedChange(change as unknown as Omit<ChangeEvent, 'schemaVersion'>, version);
      } catch (e) {
        got = e as Error;
      }
      if (want instanceof Error) {
        expect(got, what).toBeInstanceOf(Error);
        expect((got as Error).message, what).toBe(want.message);
      } else {
        valid++;
        expect(got, what).toStrictEqual(want);
        expect(got, what).not.toBe(change);
      }
      expect(JSON.stringify(change), what).toBe(before);
    }
    expect(valid).toBeGreaterThan(RUNS / 10);
  });
});
