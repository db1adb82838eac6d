import { describe, expect, it } from 'vitest';
import { attachedLeaves, changesToRoots, partitionTree, rootTable, treeChanges, type TableChange } from '../../../lambda/core/tables/partitions.ts';
import type { SlotColumn } from '../../../lambda/core/capture/slot-record.ts';

const col = (name: string, value: SlotColumn['value']): SlotColumn => ({ name, type: 'text', value });
const edges = [
  { partition: 'public.ev_1', root: 'public.ev', leaf: true },
  { partition: 'public.ev_2', root: 'public.ev', leaf: true },
  { partition: 'public.ev_h', root: 'public.ev', leaf: false },
  { partition: 'public.ev_h1', root: 'public.ev', leaf: true },
];
const tree = partitionTree(edges, ['public.ev', 'public.other', 'public.loose']);

describe('partition trees', () => {
  it('maps leaves and intermediate partitions to the root of their tree; other tables to themselves', () => {
    expect(rootTable(tree, 'public.ev_h1')).toBe('public.ev');
    expect(rootTable(tree, 'public.ev_h')).toBe('public.ev');
    expect(rootTable(tree, 'public.other')).toBe('public.other');
    expect(tree.leavesOf.get('public.ev')).toEqual(['public.ev_1', 'public.ev_2', 'public.ev_h1']);
  });

  it('names a leaf change by its root, columns in the root order; a move stays a delete then an insert at their indexes', () => {
    const changes: TableChange[] = [
      { table: 'public.other', op: 'insert', columns: [col('id', 1)], oldKey: null },
      { table: 'public.ev_1', op: 'delete', columns: null, oldKey: [col('at', '2026-01-05'), col('id', 7)] },
      { table: 'public.ev_2', op: 'insert', columns: [col('v', 'x'), col('id', 7), col('at', '2026-02-05')], oldKey: null },
    ];
    const { changes: out, partial } = changesToRoots(tree, changes, (root) => (root === 'public.ev' ? ['id', 'at', 'v'] : undefined));
    expect(partial).toEqual([]);
    expect(out.map((c) => [c.index, c.change.table, c.change.op])).toEqual([
      [0, 'public.other', 'insert'],
      [1, 'public.ev', 'delete'],
      [2, 'public.ev', 'insert'],
    ]);
    expect(out[0]!.change).toBe(changes[0]);
    expect(out[1]!.change.oldKey!.map((c) => c.name)).toEqual(['id', 'at']);
    expect(out[2]!.change.columns!.map((c) => c.name)).toEqual(['id', 'at', 'v']);
  });

  it('a truncate of every leaf is one truncate of the root; of some leaves, none, reported as partial', () => {
    const all: TableChange[] = ['public.ev_1', 'public.ev_2', 'public.ev_h1', 'public.other'].map((table) => ({
      table,
      op: 'truncate',
      columns: null,
      oldKey: null,
    }));
    const whole = changesToRoots(tree, all);
    expect(whole.changes.map((c) => [c.index, c.change.table])).toEqual([
      [0, 'public.ev'],
      [3, 'public.other'],
    ]);
    expect(whole.partial).toEqual([]);
    const some = changesToRoots(tree, [all[1]!, all[3]!, { table: 'public.ev_1', op: 'insert', columns: [col('id', 1)], oldKey: null }]);
    expect(some.changes.map((c) => [c.index, c.change.table, c.change.op])).toEqual([
      [1, 'public.other', 'truncate'],
      [2, 'public.ev', 'insert'],
    ]);
    expect(some.partial).toEqual([{ root: 'public.ev', leaves: ['public.ev_2'] }]);
  });

  it('a detached leaf and an attached filled table change the root; a partition created as one does not', () => {
    const after = partitionTree(
      [
        { partition: 'public.ev_1', root: 'public.ev', leaf: true },
        { partition: 'public.ev_h', root: 'public.ev', leaf: false },
        { partition: 'public.ev_h1', root: 'public.ev', leaf: true },
        { partition: 'public.loose', root: 'public.ev', leaf: true },
        { partition: 'public.ev_3', root: 'public.ev', leaf: true },
      ],
      ['public.ev', 'public.other', 'public.ev_2'],
    );
    expect(attachedLeaves(tree, after)).toEqual(['public.loose']);
    expect(treeChanges(tree, after, new Set(['public.loose', 'public.ev_3']))).toEqual([
      { root: 'public.ev', kind: 'detached', leaf: 'public.ev_2' },
      { root: 'public.ev', kind: 'attached', leaf: 'public.loose' },
    ]);
    // An empty table attached asks for nothing.
    expect(treeChanges(tree, after, new Set())).toEqual([{ root: 'public.ev', kind: 'detached', leaf: 'public.ev_2' }]);
  });
});
