/**
 * What the Redshift loader stages: parts sized for COPY, the manifest, the cadence, what it takes.
 */
import { describe, expect, it } from 'vitest';
import {
  csvParts,
  loadable,
  manifest,
  parseManifest,
  partCount,
  PART_MIN_BYTES,
  PART_TARGET_BYTES,
  redshiftCadence,
  stageEvent,
} from '../../../lambda/core/warehouse/redshift-load.ts';
import { redshiftColumn, RedshiftValueRefusedError } from '../../../lambda/core/warehouse/redshift-types.ts';
import type { ChangeEvent } from '../../../lambda/core/shared/event.ts';
import { makePosition } from '../../../lambda/core/shared/position.ts';

const e = (over: Partial<ChangeEvent>): ChangeEvent => ({
  v: 1,
  source: 's',
  table: 'public.t',
  op: 'insert',
  key: { id: 1 },
  after: { id: 1, note: 'a' },
  before: null,
  missing: [],
  position: makePosition(5n, 0),
  commitTs: '2026-12-06T00:00:00.000Z',
  txId: '9',
  schemaVersion: 1,
  capture: 'slot',
  synthetic: false,
  ...over,
});

describe('parts sized for COPY', () => {
  it('one part for a small load; a multiple of the slices once every part keeps its minimum; the target cuts large loads', () => {
    expect(partCount(1_000, { slices: 4 })).toBe(1);
    expect(partCount(4 * PART_MIN_BYTES - 1, { slices: 4 })).toBe(1);
    expect(partCount(4 * PART_MIN_BYTES, { slices: 4 })).toBe(4);
    expect(partCount(3 * PART_TARGET_BYTES + 1, { slices: 1 })).toBe(4);
    expect(partCount(5 * PART_TARGET_BYTES, { slices: 4 })).toBe(8);
  });

  it('cuts rows into the parts without losing or reordering one, each part about the same size', () => {
    const rows = Array.from({ length: 1_000 }, (_, i) => ({ fields: [String(i), 'x'.repeat(i % 50), null] }));
    const parts = csvParts(7, rows, { slices: 4, targetBytes: 10_000, minBytes: 1_000 });
    expect(parts.length % 4).toBe(0);
    const lines = parts.join('').trimEnd().split('\n');
    expect(lines).toEqual(rows.map((r) => `"7","${r.fields[0]}","${r.fields[1]}",`));
    const sizes = parts.map((p) => p.length);
    expect(Math.max(...sizes)).toBeLessThan(2 * Math.min(...sizes));
  });
});

describe('manifest', () => {
  it('lists every object as mandatory with its length, and reads back; a bad one is named', () => {
    const m = manifest([{ url: 's3://b/k/1.csv.gz', bytes: 10 }]);
    expect(m).toEqual({ entries: [{ url: 's3://b/k/1.csv.gz', mandatory: true, meta: { content_length: 10 } }] });
    expect(parseManifest(JSON.stringify(m), 'x')).toEqual(m);
    expect(() => parseManifest('{', 's3://b/m')).toThrow(/s3:\/\/b\/m: not JSON/);
    expect(() => parseManifest('{"entries":[]}', 'm')).toThrow(/no entries/);
    expect(() => parseManifest('{"entries":[{"url":"/etc/passwd"}]}', 'm')).toThrow(/entries\[0\]\.url/);
  });
});

describe('cadence from freshnessTarget', () => {
  it('loads within a third of the target and merges every two targets, within bounds', () => {
    expect(redshiftCadence(60_000)).toEqual({ loadEveryMs: 20_000, mergeEveryMs: 120_000 });
    expect(redshiftCadence(1_000)).toEqual({ loadEveryMs: 1_000, mergeEveryMs: 60_000 });
    expect(redshiftCadence(24 * 3_600_000)).toEqual({ loadEveryMs: 300_000, mergeEveryMs: 3_600_000 });
    expect(() => redshiftCadence(0)).toThrow(RangeError);
  });
});

describe('what the loader takes', () => {
  const key = [redshiftColumn('id', 'integer')];
  const data = [redshiftColumn('note', 'varchar(1)')];
  it('full images, plain deletes and truncates; not a partial update, an insert without columns or a handover', () => {
    expect(loadable(e({}))).toBe(true);
    expect(loadable(e({ op: 'delete', after: null }))).toBe(true);
    expect(loadable(e({ op: 'truncate', key: {}, after: null }))).toBe(true);
    expect(loadable(e({ op: 'update', missing: ['note'] }))).toBe(false);
    expect(loadable(e({ op: 'insert', missing: ['note'] }))).toBe(false);
    expect(loadable(e({ op: 'delete', after: null, handover: ['note'] }))).toBe(false);
    const s = stageEvent(e({ op: 'update', missing: ['note'] }), key, data, () => 'refuse-row', new Date(0));
    expect('refused' in s && s.refused.message).toMatch(/REDSHIFT_NOT_LOADABLE|full images/);
  });

  it('a truncate is a row of the truncations: position, commit time, transaction, version, applied-at', () => {
    const ev = e({ op: 'truncate', key: {}, after: null });
    expect(stageEvent(ev, key, data, () => 'refuse-row', new Date(0))).toEqual({
      truncation: { position: ev.position, commitTs: ev.commitTs, txId: ev.txId, schemaVersion: ev.schemaVersion, appliedAt: new Date(0).toISOString() },
    });
  });

  it('a changelog row: platform columns, key, data; a refused value is returned, not thrown', () => {
    expect(stageEvent(e({}), key, data, () => 'refuse-row', new Date(0))).toEqual({
      row: { fields: [makePosition(5n, 0), 'insert', '2026-12-06T00:00:00.000Z', '1', '9', 'false', null, '1970-01-01T00:00:00.000Z', '1', 'a'] },
    });
    const refused = stageEvent(e({ after: { id: 1, note: 'ééé' } }), key, data, () => 'refuse-row', new Date(0));
    expect('refused' in refused && refused.refused).toBeInstanceOf(RedshiftValueRefusedError);
    expect(stageEvent(e({ op: 'delete', after: null }), key, data, () => 'refuse-row', new Date(0))).toMatchObject({
      row: { fields: [expect.any(String), 'delete', expect.any(String), '1', '9', 'false', null, expect.any(String), '1', null] },
    });
  });

  it("a row over COPY's 4 MB: its largest value meets its policy (refused, or NULL and marked) until the row fits", () => {
    const wide = [redshiftColumn('a', 'jsonb'), redshiftColumn('b', 'jsonb'), redshiftColumn('c', 'text')];
    const big = (n: number): string => JSON.stringify({ x: 'y'.repeat(n) });
    const ev = e({ after: { id: 1, a: big(3_000_000), b: big(2_000_000), c: 'small' } });
    const refused = stageEvent(ev, key, wide, () => 'refuse-row', new Date(0));
    expect('refused' in refused && refused.refused).toMatchObject({ column: 'a', reason: 'row-too-long' });
    const marked = stageEvent(ev, key, wide, () => 'null-with-marker', new Date(0));
    expect('row' in marked && marked.row.fields.slice(-3).map((f) => (f === null ? null : f.length))).toEqual([null, 2_000_008, 5]);
    expect('row' in marked && marked.row.fields[6]).toBe('a:row-too-long');
  });
});
