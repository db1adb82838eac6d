/**
 * Partitioned tables captured as one table (docs/partitioned-tables.md). PostgreSQL's logical
 * decoding (and DMS reading it) reports every row change under the name of the leaf partition
 * that holds the row; the platform captures the partitioned root. This module is the pure part:
 * the partition tree as read from the catalog, the leaf → root rewrite of decoded changes, and
 * what a change of the tree (a partition attached, detached, created) asks of the root's copy.
 */
import { catalogConsumerId } from '../../../contracts/control-plane-keys.ts';
import type { ControlPlane } from '../shared/control-plane.ts';
import { CdcError } from '../shared/errors.ts';
import type { SlotColumn } from '../capture/slot-record.ts';

/** One partition of the source's catalog (leaf or intermediate) and the root of its tree (`schema.table` each). */
export interface PartitionEdge {
  partition: string;
  root: string;
  /** Whether it holds rows itself (a leaf: `relkind` `r` or `f`); an intermediate partitioned table does not. */
  leaf: boolean;
}

/** The source's partition trees: every partition mapped to its root, and each root's leaves. */
export interface PartitionTree {
  /** Partition (leaf or intermediate) → root. A table that is no partition is absent. */
  readonly rootOf: ReadonlyMap<string, string>;
  /** Root → its leaves, sorted. */
  readonly leavesOf: ReadonlyMap<string, readonly string[]>;
  /** The tables that were no partition when the tree was read (ordinary and partitioned roots). */
  readonly standalone: ReadonlySet<string>;
}

export const EMPTY_PARTITION_TREE: PartitionTree = { rootOf: new Map(), leavesOf: new Map(), standalone: new Set() };

/** Builds the tree from the catalog's edges (any order) and the tables that are no partition. */
export function partitionTree(edges: readonly PartitionEdge[], standalone: Iterable<string> = []): PartitionTree {
  const rootOf = new Map<string, string>();
  const leaves = new Map<string, string[]>();
  for (const e of edges) {
    rootOf.set(e.partition, e.root);
    if (!e.leaf) continue;
    const l = leaves.get(e.root) ?? [];
    l.push(e.partition);
    leaves.set(e.root, l);
  }
  for (const l of leaves.values()) l.sort();
  return { rootOf, leavesOf: leaves, standalone: new Set(standalone) };
}

/** The table a change of `table` belongs to: its root when it is a partition, else itself. */
export function rootTable(tree: PartitionTree, table: string): string {
  return tree.rootOf.get(table) ?? table;
}

/** One decoded change, as far as this module reads and writes it. */
export interface TableChange {
  table: string;
  op: string;
  columns: SlotColumn[] | null;
  oldKey: SlotColumn[] | null;
}

/** What `changesToRoots` found that the root's copy cannot take as row changes. */
export interface PartialTruncate {
  root: string;
  /** The leaves the statement emptied (a part of the root's leaves). */
  leaves: string[];
}

/**
 * Rewrites one transaction's changes of leaf partitions to their roots, in place of a new array
 * (changes of other tables are kept as they are, the same objects):
 * - a row change of a leaf becomes the same change of the root (the key is the root's: a
 *   partitioned table's primary key is declared on the root and every leaf has it); its columns
 *   in the root's column order when `columnOrder` gives it (a partition attached from a table of
 *   its own may order its columns differently);
 * - a `TRUNCATE` that emptied every leaf of a root (a `TRUNCATE` of the root, which the log
 *   records as one of all its leaves) becomes one truncate of the root, where its first leaf's was;
 * - a `TRUNCATE` of some leaves only cannot be a row change of the root: those changes are dropped
 *   and reported in `partial` (the capture asks for a re-snapshot of the root, docs/partitioned-tables.md).
 *
 * A row that moves between partitions (an `UPDATE` of the partition key) is logged as a `DELETE`
 * from one leaf and an `INSERT` into another; both become changes of the root, in their order
 * in the transaction, so their positions order them.
 *
 * The changes keep their index in the transaction (dropped ones leave a gap): `index` in the
 * result is the change's index in `changes`, so positions stay what they were.
 */
export function changesToRoots<C extends TableChange>(
  tree: PartitionTree,
  changes: readonly C[],
  columnOrder?: (root: string) => readonly string[] | undefined,
): { changes: { index: number; change: C }[]; partial: PartialTruncate[] } {
  const out: { index: number; change: C }[] = [];
  const partial: PartialTruncate[] = [];
  // The leaves each root's truncates emptied in this transaction, and where the first one was.
  const truncated = new Map<string, { at: number; change: C; leaves: Set<string> }>();
  changes.forEach((change, index) => {
    const root = tree.rootOf.get(change.table);
    if (root === undefined) {
      out.push({ index, change });
      return;
    }
    if (change.op === 'truncate') {
      const t = truncated.get(root) ?? { at: out.length, change: { ...change, table: root }, leaves: new Set<string>() };
      t.leaves.add(change.table);
      if (!truncated.has(root)) {
        truncated.set(root, t);
        out.push({ index, change: t.change }); // a placeholder; removed below when the truncate was partial
      }
      return;
    }
    const order = columnOrder?.(root);
    out.push({ index, change: { ...change, table: root, columns: inOrder(change.columns, order), oldKey: inOrder(change.oldKey, order) } });
  });
  if (truncated.size === 0) return { changes: out, partial };
  const drop = new Set<C>();
  for (const [root, t] of truncated) {
    const all = tree.leavesOf.get(root) ?? [];
    if (all.every((l) => t.leaves.has(l))) continue;
    drop.add(t.change);
    partial.push({ root, leaves: [...t.leaves].sort() });
  }
  return { changes: drop.size === 0 ? out : out.filter((c) => !drop.has(c.change)), partial };
}

/** A tuple's columns in `order` (names not in it keep their place after those that are). */
function inOrder(columns: SlotColumn[] | null, order: readonly string[] | undefined): SlotColumn[] | null {
  if (columns === null || order === undefined) return columns;
  const rank = new Map(order.map((n, i) => [n, i]));
  let sorted = true;
  for (let i = 1; i < columns.length; i++) if ((rank.get(columns[i - 1]!.name) ?? Infinity) > (rank.get(columns[i]!.name) ?? Infinity)) sorted = false;
  if (sorted) return columns;
  return columns
    .map((c, i) => ({ c, i }))
    .sort((a, b) => (rank.get(a.c.name) ?? order.length + a.i) - (rank.get(b.c.name) ?? order.length + b.i))
    .map((x) => x.c);
}

/** Why a root's copy must be read again after its tree changed. */
export interface TreeChange {
  root: string;
  /** `attached`: a leaf joined that held rows already (an ATTACH, which logs no row change); `detached`: a leaf left (DETACH, or dropped). */
  kind: 'attached' | 'detached';
  leaf: string;
}

/**
 * What changed between two readings of the tree that the log does not carry as row changes:
 * - a leaf that left a root (`DETACH PARTITION`, or dropped): its rows leave the root's copy only
 *   through a re-snapshot of the root;
 * - a table that was a table of its own at the first reading and is a leaf of a root at the
 *   second, holding rows (`ATTACH PARTITION` of a filled table logs no row change).
 * A partition created as one (`CREATE TABLE … PARTITION OF`, pg_partman's premade partitions), or
 * created and attached between two readings, asks for nothing: the capture maps its rows' inserts
 * to the root by the tree it reads when it reads them. `holdsRows` tells which attached leaves have rows.
 */
export function treeChanges(before: PartitionTree, after: PartitionTree, holdsRows: ReadonlySet<string>): TreeChange[] {
  const out: TreeChange[] = [];
  for (const [root, leaves] of before.leavesOf) {
    for (const leaf of leaves) if (after.rootOf.get(leaf) !== root) out.push({ root, kind: 'detached', leaf });
  }
  for (const leaf of attachedLeaves(before, after)) if (holdsRows.has(leaf)) out.push({ root: after.rootOf.get(leaf)!, kind: 'attached', leaf });
  return out;
}

/** The leaves of `after` that were tables of their own in `before` (the ones `treeChanges` asks `holdsRows` about). */
export function attachedLeaves(before: PartitionTree, after: PartitionTree): string[] {
  const out: string[] = [];
  for (const leaves of after.leavesOf.values()) for (const leaf of leaves) if (before.standalone.has(leaf)) out.push(leaf);
  return out;
}

// ---------------------------------------------------------------------------------------------
// The tree published for the normalizer (DMS path, docs/partitioned-tables.md)

/** Where the tree is kept: a checkpoint item of the catalog consumer, under a key no table id has (no dot). */
export const PARTITION_TREE_KEY = 'partition-tree';

/** The tree as stored: its edges and the tables of their own. */
interface StoredTree {
  edges: PartitionEdge[];
  standalone: string[];
}

function storedForm(tree: PartitionTree): StoredTree {
  const edges: PartitionEdge[] = [];
  const leaves = new Set([...tree.leavesOf.values()].flat());
  for (const [partition, root] of [...tree.rootOf].sort(([a], [b]) => a.localeCompare(b))) edges.push({ partition, root, leaf: leaves.has(partition) });
  return { edges, standalone: [...tree.standalone].sort() };
}

/**
 * Publishes the source's partition tree for the normalizer (which never connects to the source),
 * where the snapshot worker publishes catalog types (lambda/core/shared/catalog-types.ts); writes only
 * when it changed. Returns whether it wrote.
 */
export async function publishPartitionTree(
  controlPlane: Pick<ControlPlane, 'getCheckpoint' | 'putCheckpoint'>,
  sourceId: string,
  tree: PartitionTree,
): Promise<boolean> {
  const text = JSON.stringify(storedForm(tree));
  if ((await controlPlane.getCheckpoint(catalogConsumerId(sourceId), PARTITION_TREE_KEY)) === text) return false;
  await controlPlane.putCheckpoint(catalogConsumerId(sourceId), PARTITION_TREE_KEY, text);
  return true;
}

/** Reads the published tree (null when none is published); throws `CdcError` naming what is wrong with a malformed one. */
export async function readPublishedPartitionTree(controlPlane: Pick<ControlPlane, 'getCheckpoint'>, sourceId: string): Promise<PartitionTree | null> {
  const text = await controlPlane.getCheckpoint(catalogConsumerId(sourceId), PARTITION_TREE_KEY);
  if (text === null) return null;
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch (e) {
    throw new CdcError('INVALID_STATE', `the partition tree of ${sourceId} in the control plane is not JSON: ${(e as Error).message}`);
  }
  const s = v as StoredTree;
  const edgeOk = (e: PartitionEdge) => typeof e?.partition === 'string' && typeof e.root === 'string' && typeof e.leaf === 'boolean';
  if (!s || !Array.isArray(s.edges) || !s.edges.every(edgeOk) || !Array.isArray(s.standalone) || !s.standalone.every((t) => typeof t === 'string')) {
    throw new CdcError(
      'INVALID_STATE',
      `the partition tree of ${sourceId} in the control plane is not {edges: [{partition, root, leaf}], standalone: [...]}: ${text.slice(0, 200)}`,
    );
  }
  return partitionTree(s.edges, s.standalone);
}
