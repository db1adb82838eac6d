/**
 * Primary-key changes held on Redshift, the pure part (docs/primary-key-changes.md, "On Redshift"): what the applier
 * holds (`planHolds`) and what the loader completes, drops or keeps (`resolveHeld`).
 */
import { describe, expect, it } from 'vitest';
import type { ChangeEvent, JsonValue, Row } from '../../../lambda/core/shared/event.ts';
import { makePosition } from '../../../lambda/core/shared/position.ts';
import { planHolds, resolveHeld, stageHeld, type HeldRow, type KeyRow } from '../../../lambda/core/warehouse/redshift-handover.ts';
import { redshiftColumn } from '../../../lambda/core/warehouse/redshift-types.ts';
import { numberedEvent } from '../../helpers/numbered-event.ts';

const at = (n: number): string => makePosition(BigInt(n) * 0x100n, 0);

/** Event `n` of key `id` (`numberedEvent`): a full image unless a delete or a truncate. */
const ev = (n: number, op: ChangeEvent['op'], id: number, o: Partial<ChangeEvent> = {}): ChangeEvent =>
  numberedEvent('public.t', 's', n, op, { id } as Row, op === 'delete' || op === 'truncate' ? null : { id, note: `n${n}`, amount: n }, o);
/** The two halves of `UPDATE … SET id = to WHERE id = from` at n, the note unchanged (not logged). */
const change = (n: number, from: number, to: number): [ChangeEvent, ChangeEvent] => [
  ev(n, 'insert', to, { before: { id: from }, after: { id: to, amount: n }, missing: ['note'] }),
  ev(n, 'delete', from, { before: { id: from }, handover: ['note'] }),
];
const partial = (n: number, id: number): ChangeEvent => ev(n, 'update', id, { after: { id, amount: n }, missing: ['note'] });
const keyOf = (row: Readonly<Record<string, JsonValue>>): string[] => [String(row.id)];
const id = (n: number): string => JSON.stringify([String(n)]);

describe('planHolds: what the applier holds', () => {
  it("an insert half whose old key's delete half is neither in the batch nor loaded is held, and so is its key's later partial update", () => {
    const [ins] = change(2, 1, 2);
    const { pass, held } = planHolds([ev(1, 'insert', 3), ins, partial(3, 2), partial(4, 3)], keyOf, new Map(), new Set());
    expect(held.map((h) => [h.event.position, h.oldKey])).toEqual([
      [at(2), ['1']],
      [at(3), null],
    ]);
    expect(pass.map((e) => e.position)).toEqual([at(1), at(4)]);
  });

  it('not held: the delete half in the batch, or loaded; an image of the old key in the batch is not enough without them', () => {
    const [ins, del] = change(2, 1, 2);
    expect(planHolds([ins, del], keyOf, new Map(), new Set()).held).toEqual([]);
    expect(planHolds([ev(1, 'delete', 1), ins, del], keyOf, new Map(), new Set()).held).toEqual([]);
    expect(planHolds([ins], keyOf, new Map(), new Set([`${id(1)}@${at(2)}`])).held).toEqual([]);
    // A shard carrying two sources may bring the old key's later events below the change after the batch: held.
    expect(planHolds([ev(1, 'insert', 1), ins], keyOf, new Map(), new Set()).held).toHaveLength(1);
    expect(planHolds([partial(1, 1), ins], keyOf, new Map(), new Set()).held).toHaveLength(1);
  });

  it('keys the table holds: a partial update after them is held, and an insert half whose old key is held (a chain), even with its delete half loaded', () => {
    const table = new Map([[id(2), [at(2)]]]);
    const [ins] = change(5, 2, 3);
    const { held } = planHolds([partial(3, 2), ins], keyOf, table, new Set([`${id(2)}@${at(5)}`]));
    expect(held.map((h) => h.event.position)).toEqual([at(3), at(5)]);
    // Held above the event only (another shard's order): not behind it.
    expect(planHolds([partial(1, 2)], keyOf, table, new Set()).held).toEqual([]);
  });

  it('a full image ends what its key holds for the batch; a truncate ends everything held below it', () => {
    const table = new Map([[id(2), [at(2)]]]);
    expect(planHolds([ev(3, 'update', 2), partial(4, 2)], keyOf, table, new Set()).held).toEqual([]);
    expect(planHolds([ev(3, 'truncate', 0, { key: {} }), partial(4, 2)], keyOf, table, new Set()).held).toEqual([]);
  });

  it('a held row is its changelog row with the absent columns NULL, then what it lacks and its old key', () => {
    const [ins] = change(2, 1, 2);
    const s = stageHeld(
      ins,
      [redshiftColumn('id', 'integer')],
      [redshiftColumn('note', 'text'), redshiftColumn('amount', 'integer')],
      () => 'refuse-row',
      new Date(0),
      ['1'],
    );
    expect('row' in s && s.row.fields.slice(-5)).toEqual(['2', null, '2', 'note', '["1"]']);
  });
});

const held = (n: number, key: number, o: Partial<HeldRow> = {}): HeldRow => ({
  key: [String(key)],
  position: at(n),
  op: 'insert',
  missing: ['note'],
  oldKey: null,
  unheld: null,
  ...o,
});
const row = (n: number, key: number, op = 'insert', unheld: string | null = null): KeyRow => ({ key: [String(key)], position: at(n), op, unheld });
const fate = (r: ReturnType<typeof resolveHeld>): string[] =>
  r.steps.map((s) =>
    s.kind === 'complete'
      ? `${s.row.key[0]}@${s.row.position}<-${s.donor ? `${s.donor.key[0]}@${s.donor.position}` : 'none'}`
      : `${s.row.key[0]}@${s.row.position}:${s.why}`,
  );

describe('resolveHeld: what the loader does with held events', () => {
  it("waits for the old key's delete half; then completes from the old key's newest row below the change, taking its markers of the columns taken", () => {
    const h = held(5, 2, { oldKey: ['1'], unheld: 'amount:nan' });
    expect(resolveHeld([h], [row(1, 1)], '').steps).toEqual([]);
    const r = resolveHeld([h], [row(1, 1), row(3, 1, 'update', 'note:too-long,other:nan'), row(5, 1, 'delete')], '');
    expect(fate(r)).toEqual([`2@${at(5)}<-1@${at(3)}`]);
    expect(r.steps[0]!.kind === 'complete' && r.steps[0]!.unheld).toBe('amount:nan,note:too-long');
  });

  it('a chain completes in order in one pass: the second change takes the first one’s completed image', () => {
    const first = held(5, 2, { oldKey: ['1'] });
    const upd = held(6, 2, { op: 'update' });
    const second = held(7, 3, { oldKey: ['2'] });
    const r = resolveHeld([second, upd, first], [row(1, 1), row(5, 1, 'delete'), row(7, 2, 'delete')], '');
    expect(fate(r)).toEqual([`2@${at(5)}<-1@${at(1)}`, `2@${at(6)}<-2@${at(5)}`, `3@${at(7)}<-2@${at(6)}`]);
    expect(r.kept).toEqual([]);
    // Without the first change's delete half nothing moves.
    expect(resolveHeld([second, upd, first], [row(1, 1), row(7, 2, 'delete')], '').steps).toEqual([]);
  });

  it('overtaken by a newer full image of its key: dropped, unless a held insert half still needs its image', () => {
    expect(fate(resolveHeld([held(5, 2, { oldKey: ['1'] })], [row(8, 2, 'update')], ''))).toEqual([`2@${at(5)}:overtaken`]);
    // A delete next may be a key change's delete half whose insert half comes later: kept, then completed (below the delete).
    expect(resolveHeld([held(5, 2, { oldKey: ['1'] })], [row(7, 2, 'delete'), row(8, 2, 'update')], '').steps).toEqual([]);
    expect(fate(resolveHeld([held(5, 2, { oldKey: ['1'] })], [row(1, 1), row(5, 1, 'delete'), row(7, 2, 'delete')], ''))).toEqual([`2@${at(5)}<-1@${at(1)}`]);
    // The chain's delete half overtakes the first insert half, which the second still needs: both complete.
    const r = resolveHeld([held(5, 2, { oldKey: ['1'] }), held(7, 3, { oldKey: ['2'] })], [row(1, 1), row(5, 1, 'delete'), row(7, 2, 'delete')], '');
    expect(fate(r)).toEqual([`2@${at(5)}<-1@${at(1)}`, `3@${at(7)}<-2@${at(5)}`]);
  });

  it('a redelivered copy: stored twice, completed once; already in the changelog: dropped', () => {
    const h = held(5, 2, { oldKey: ['1'] });
    expect(fate(resolveHeld([h, { ...h }], [row(1, 1), row(5, 1, 'delete')], ''))).toEqual([`2@${at(5)}<-1@${at(1)}`]);
    expect(fate(resolveHeld([h], [row(1, 1), row(5, 1, 'delete'), row(5, 2)], ''))).toEqual([`2@${at(5)}:loaded`]);
  });

  it('at or below the newest truncate: dropped; an old key without a row before the change: dropped as incomplete', () => {
    expect(fate(resolveHeld([held(5, 2, { oldKey: ['1'] })], [], at(6)))).toEqual([`2@${at(5)}:truncated`]);
    expect(fate(resolveHeld([held(5, 2, { oldKey: ['1'] })], [row(2, 1, 'delete'), row(5, 1, 'delete')], ''))).toEqual([`2@${at(5)}:incomplete`]);
  });

  it('a held partial update over no live row completes with its absent columns NULL (no donor)', () => {
    expect(fate(resolveHeld([held(5, 2, { op: 'update' })], [row(3, 2, 'delete')], ''))).toEqual([`2@${at(5)}<-none`]);
  });
});
